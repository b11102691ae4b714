//! Faults injected into a real `CpuTarget` under the engine (`lane::testing::faults`): a poisoned
//! row of logits, a failed move, a failed draft call and a round that fails as a device error
//! would, on the default model (MTP drafts, streams that move) and on a dense fixture. Each time
//! the streams the fault touches end with an error saying what happened, every other stream's
//! reply is the one it gets alone, and every session is free at the end.

use backend_cpu::{CpuBackend, CpuModel};
use lane::testing::faults::suite::{run_all, FAULT_CAPACITIES};
use std::path::PathBuf;
use std::sync::Arc;

fn model(relative: &str) -> Arc<CpuModel> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(relative);
    Arc::new(CpuModel::load(&dir, false).unwrap_or_else(|e| panic!("{relative}: {e}")))
}

#[test]
fn faults_on_the_hybrid_default_model_touch_only_their_streams() {
    let m = model("../../models/flashlane-tiny");
    run_all("cpu, flashlane-tiny", &mut || {
        CpuBackend::target(m.clone(), &FAULT_CAPACITIES)
    });
}

#[test]
fn faults_on_a_dense_model_touch_only_their_streams() {
    let m = model("../../tests/fixtures/qwen3_bf16/model");
    run_all("cpu, qwen3_bf16", &mut || {
        CpuBackend::target(m.clone(), &FAULT_CAPACITIES)
    });
}
