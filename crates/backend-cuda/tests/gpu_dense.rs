//! `CudaTarget` on a dense Qwen3 checkpoint (the committed bf16 fixture `qwen3_bf16`: 2 layers,
//! 8 query heads of 16 over 2 KV heads, untied lm_head): logits against transformers' (the
//! fixture's, computed in f32) and against backend-cpu's, greedy decoding through the session
//! equal to backend-cpu's, and the FP8 fixture against both (alone = batched = moved for every
//! fixture is `gpu_fixtures`' and the conformance suite's). Each test skips (and says why) when
//! no CUDA device is present.

#![cfg(feature = "cuda")]

mod common;

use backend_cpu::{CpuBackend, CpuModel};
use backend_cuda::{CudaBackend, CudaModel};
use common::{argmax, ids, load_on_gpu, read_f32, relative_diff, window};
use lane::Target;
use lane::TargetExt;
use model::KvDtype;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// Largest logit difference allowed, relative to the range of the reference's logits: the GPU
/// sums in other orders than the CPU and transformers (and uses the device's exp, sin, cos).
const LOGIT_TOLERANCE: f32 = 1e-3;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn fixture() -> serde_json::Value {
    named("qwen3_bf16")
}

/// The block-scaled FP8 fixture (e4m3 projections in 128 × 128 blocks, heads of 128).
fn fp8_fixture() -> serde_json::Value {
    named("qwen3_fp8_block")
}

fn fp8_dir() -> PathBuf {
    fixtures().join(fp8_fixture()["model_dir"].as_str().expect("model_dir"))
}

/// The FP8 fixture on the GPU with cache rows of `kv` (its matmuls read the FP8 weights).
fn gpu_fp8(kv: KvDtype) -> Option<Arc<CudaModel>> {
    static F32: OnceLock<Option<Arc<CudaModel>>> = OnceLock::new();
    static BF16: OnceLock<Option<Arc<CudaModel>>> = OnceLock::new();
    let cell = if kv == KvDtype::F32 { &F32 } else { &BF16 };
    cell.get_or_init(|| load_on_gpu(&fp8_dir(), "the FP8 qwen3 fixture", kv))
        .clone()
}

fn named(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(fixtures().join("manifest.json")).expect("manifest");
    let manifest: serde_json::Value = serde_json::from_str(&text).expect("manifest JSON");
    manifest["fixtures"]
        .as_array()
        .expect("fixtures")
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("the {name} fixture"))
        .clone()
}

fn dir() -> PathBuf {
    fixtures().join(fixture()["model_dir"].as_str().expect("model_dir"))
}

/// The fixture on the GPU with f32 cache rows (as the CPU's: for comparing the arithmetic), or
/// `None` (printed) when this machine has no CUDA device.
fn gpu() -> Option<Arc<CudaModel>> {
    static MODEL: OnceLock<Option<Arc<CudaModel>>> = OnceLock::new();
    MODEL
        .get_or_init(|| load_on_gpu(&dir(), "the dense qwen3 fixture", KvDtype::F32))
        .clone()
}

fn cpu() -> Arc<CpuModel> {
    Arc::new(CpuModel::load(&dir(), false).expect("CPU model"))
}

#[test]
fn dense_logits_match_transformers_and_the_cpu_backend() {
    let _gpu = common::exclusive();
    let Some(gpu) = gpu() else { return };
    let cpu = cpu();
    for case in fixture()["prompts"].as_array().expect("prompts") {
        let prompt = ids(&case["ids"]);
        let n = prompt.len();
        let mut g = CudaBackend::target(&gpu, &[256]).expect("target");
        let mut c = CpuBackend::target(cpu.clone(), &[256]);
        let got = g
            .logits(&[window(0, 0, &prompt, n)])
            .expect("gpu")
            .remove(0);
        let on_cpu = c
            .logits(&[window(0, 0, &prompt, n)])
            .expect("cpu")
            .remove(0);
        let want = read_f32(case["logits"].as_str().expect("logits file"));
        let (vs_hf, vs_cpu) = (relative_diff(&got, &want), relative_diff(&got, &on_cpu));
        eprintln!(
            "{}: {n} rows, relative diff vs transformers {vs_hf:e}, vs backend-cpu {vs_cpu:e}",
            case["label"]
        );
        assert!(vs_hf <= LOGIT_TOLERANCE, "{}: {vs_hf}", case["label"]);
        assert!(vs_cpu <= LOGIT_TOLERANCE, "{}: {vs_cpu}", case["label"]);
    }
}

#[test]
fn dense_greedy_decoding_through_the_session_equals_the_cpu_backends() {
    let _gpu = common::exclusive();
    let Some(gpu) = gpu() else { return };
    let prompt = ids(&fixture()["prompts"][1]["ids"]);
    let steps = 32;
    let decode = |target: &mut dyn Target| {
        let rows = target.logits(&[window(0, 0, &prompt, 1)]).expect("prompt");
        let mut out = vec![argmax(&rows[0])];
        for i in 0..steps - 1 {
            let pos = (prompt.len() + i) as u64;
            let rows = target
                .logits(&[window(0, pos, &out[i..i + 1], 1)])
                .expect("decode");
            out.push(argmax(&rows[0]));
        }
        out
    };
    let want = decode(&mut CpuBackend::target(cpu(), &[256]));
    let got = decode(&mut CudaBackend::target(&gpu, &[256]).expect("target"));
    assert_eq!(got, want);
}

/// FP8 weights read as FP8 by the GPU's matmuls: logits within a thousandth of the range of
/// transformers' (f32 on the dequantised weights) and of backend-cpu's (which dequantises at
/// load), greedy equal to the CPU's, and with bf16 cache rows a row's logits the same bits alone
/// and beside other sessions.
#[test]
fn fp8_logits_match_transformers_and_are_the_same_alone_and_batched() {
    let _gpu = common::exclusive();
    let Some(gpu) = gpu_fp8(KvDtype::F32) else {
        return;
    };
    let cpu = Arc::new(CpuModel::load(&fp8_dir(), false).expect("CPU model"));
    let prompts: Vec<Vec<u32>> = fp8_fixture()["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .map(|p| ids(&p["ids"]))
        .collect();
    for (case, prompt) in fp8_fixture()["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .zip(&prompts)
    {
        let n = prompt.len();
        let got = CudaBackend::target(&gpu, &[256])
            .expect("target")
            .logits(&[window(0, 0, prompt, n)])
            .expect("gpu")
            .remove(0);
        let on_cpu = CpuBackend::target(cpu.clone(), &[256])
            .logits(&[window(0, 0, prompt, n)])
            .expect("cpu")
            .remove(0);
        let want = read_f32(case["logits"].as_str().expect("logits file"));
        let (vs_hf, vs_cpu) = (relative_diff(&got, &want), relative_diff(&got, &on_cpu));
        eprintln!(
            "fp8 {}: {n} rows, relative diff vs transformers {vs_hf:e}, vs backend-cpu {vs_cpu:e}",
            case["label"]
        );
        assert!(vs_hf <= LOGIT_TOLERANCE, "{}: {vs_hf}", case["label"]);
        assert!(vs_cpu <= LOGIT_TOLERANCE, "{}: {vs_cpu}", case["label"]);
    }
    let Some(gpu) = gpu_fp8(KvDtype::Bf16) else {
        return;
    };
    let long = &prompts[2];
    let (head, tail) = long.split_at(long.len() - 1);
    let mut alone = CudaBackend::target(&gpu, &[256, 256]).expect("target");
    alone.logits(&[window(0, 0, head, 0)]).expect("prefill");
    let want = alone
        .logits(&[window(0, head.len() as u64, tail, 1)])
        .expect("decode")
        .remove(0);
    let mut batch = CudaBackend::target(&gpu, &[256, 256]).expect("target");
    batch
        .logits(&[window(1, 0, &prompts[1], 1), window(0, 0, head, 0)])
        .expect("prefill beside another");
    let got = batch
        .logits(&[
            window(1, prompts[1].len() as u64, &prompts[1][..3], 3),
            window(0, head.len() as u64, tail, 1),
        ])
        .expect("decode in a batch")
        .remove(1);
    assert!(
        got.iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "FP8 logits differ alone vs in a batch"
    );
}
