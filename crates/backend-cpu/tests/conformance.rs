//! `CpuTarget` against the contract every target keeps (`lane::testing::conformance`): on the
//! default model (a hybrid Qwen3-Next with an MTP head) and on a dense Qwen3 fixture.

use backend_cpu::{CpuBackend, CpuModel};
use lane::testing::conformance;
use std::path::PathBuf;
use std::sync::Arc;

fn load(relative: &str) -> Arc<CpuModel> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(relative);
    Arc::new(CpuModel::load(&dir, false).unwrap_or_else(|e| panic!("{relative}: {e}")))
}

#[test]
fn the_cpu_target_conforms_on_the_hybrid_default_model() {
    let model = load("../../models/flashlane-tiny");
    conformance::run_all("cpu, flashlane-tiny", &mut |caps| {
        CpuBackend::target(model.clone(), caps)
    });
}

#[test]
fn the_cpu_target_conforms_on_a_dense_model() {
    let model = load("../../tests/fixtures/qwen3_bf16/model");
    conformance::run_all("cpu, qwen3_bf16", &mut |caps| {
        CpuBackend::target(model.clone(), caps)
    });
}
