//! `CudaTarget` against the contract every target keeps (`lane::testing::conformance`, the
//! suite `CpuTarget` and the engine's fake run too), with bf16 cache rows (the default): on the
//! default model (a hybrid Qwen3-Next with an MTP head), a dense bf16 Qwen3 fixture and the
//! Qwen3-Next FP8 fixture with real head widths. Skips (and says why) without a CUDA device.

#![cfg(feature = "cuda")]

mod common;

use backend_cuda::CudaBackend;
use common::load_on_gpu;
use lane::testing::conformance;
use model::KvDtype;
use std::path::PathBuf;

fn conforms(relative: &str) {
    let _gpu = common::exclusive();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(relative);
    let Some(model) = load_on_gpu(&dir, relative, KvDtype::Bf16) else {
        return;
    };
    conformance::run_all(&format!("cuda, {relative}"), &mut |caps| {
        CudaBackend::target(&model, caps).expect("a target")
    });
}

#[test]
fn the_gpu_target_conforms_on_the_hybrid_default_model() {
    conforms("../../models/flashlane-tiny");
}

#[test]
fn the_gpu_target_conforms_on_a_dense_model() {
    conforms("../../tests/fixtures/qwen3_bf16/model");
}

#[test]
fn the_gpu_target_conforms_on_fp8_qwen3_next_with_real_head_widths() {
    conforms("../../tests/fixtures/qwen3_next_fp8_heads_16x2x256/model");
}
