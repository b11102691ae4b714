//! Faults injected into a real `CudaTarget` under the engine (`lane::testing::faults`, the checks
//! `CpuTarget` and the engine's fake run too): a poisoned row of logits, a failed move, a failed
//! draft call and a round that fails as a device error would, on the default model (MTP drafts,
//! streams that move) and a dense fixture, with bf16 cache rows. Skips without a CUDA device.

#![cfg(feature = "cuda")]

mod common;

use backend_cuda::CudaBackend;
use common::load_on_gpu;
use lane::testing::faults::suite::{run_all, FAULT_CAPACITIES};
use model::KvDtype;
use std::path::PathBuf;

fn faults_touch_only_their_streams(relative: &str) {
    let _gpu = common::exclusive();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(relative);
    let Some(model) = load_on_gpu(&dir, relative, KvDtype::Bf16) else {
        return;
    };
    run_all(&format!("cuda, {relative}"), &mut || {
        CudaBackend::target(&model, &FAULT_CAPACITIES).expect("a target")
    });
}

#[test]
fn faults_on_the_hybrid_default_model_touch_only_their_streams() {
    faults_touch_only_their_streams("../../models/flashlane-tiny");
}

#[test]
fn faults_on_a_dense_model_touch_only_their_streams() {
    faults_touch_only_their_streams("../../tests/fixtures/qwen3_bf16/model");
}
