//! Every committed fixture the GPU serves — the bf16 and block-scaled FP8 checkpoints (f32 and
//! f16 ones would be rounded to bf16, and are refused) — on `CudaTarget`, whatever its head layout
//! (Qwen3-4B/8B's 32 query over 8 KV heads of 128, Qwen3-Next-80B-A3B's 16 over 2 of 256 and
//! DeltaNet heads of 128 among them):
//! - with f32 cache rows, every prompt's logits within a thousandth of the logit range of
//!   transformers' f32 forward on the same (dequantised) weights, and the fixture's greedy reply
//!   token for token;
//! - with bf16 cache rows (the default), a stream's logits the same bits alone, in a batch beside
//!   other sessions' prefills and multi-token windows, and moved into another session midway;
//!   the same with the attention by context switching to the tensor cores within the decode
//!   steps, where the fixture's heads fit them; each model loaded by default runs its own choice
//!   of attention kernels.
//!
//! Each test skips (and says why) when no CUDA device is present.

#![cfg(feature = "cuda")]

mod common;

use backend_cuda::{AttentionKernels, CudaBackend, CudaError, CudaModel, CudaTarget};
use common::{argmax, fixtures_dir, ids, read_f32, relative_diff, same_bits, window};
use lane::Target;
use lane::TargetExt;
use model::KvDtype;
use slots::SessionId;
use std::sync::Arc;

/// Largest logit difference allowed, relative to the range of transformers' logits: the GPU sums
/// in other orders (and uses the device's exp, sin and cos).
const LOGIT_TOLERANCE: f32 = 1e-3;

/// Decode steps each invariance check runs (crossing no chunk boundary of its own: the prompt's
/// 140 tokens already cross two).
const STEPS: usize = 8;

/// The fixtures whose weights the GPU keeps as stored (bf16 or block FP8).
fn gpu_fixtures() -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(fixtures_dir().join("manifest.json")).expect("manifest");
    let manifest: serde_json::Value = serde_json::from_str(&text).expect("manifest JSON");
    let all = manifest["fixtures"].as_array().expect("fixtures").clone();
    let on_gpu: Vec<_> = all
        .into_iter()
        .filter(|f| matches!(f["dtype"].as_str(), Some("bfloat16" | "fp8_e4m3_block")))
        .collect();
    assert!(
        on_gpu.len() >= 5,
        "the manifest lost its bf16 and FP8 fixtures"
    );
    on_gpu
}

/// Fixtures the GPU refuses, and the words its refusal must contain: widths no released model
/// has (the MoE kernels take expert widths in whole 16-row tiles).
const REFUSED: &[(&str, &str)] = &[(
    "qwen3_next_bf16_legacy_config",
    "MoE widths 16 and 24 (shared) must be multiples of 16",
)];

/// What loading a fixture on the GPU came to.
enum Loaded {
    Model(Arc<CudaModel>),
    /// Refused as [`REFUSED`] says it must be.
    Refused,
    /// No CUDA device here (said once).
    NoDevice,
}

fn load(fixture: &serde_json::Value, kv: KvDtype) -> Loaded {
    load_with_attention(fixture, kv, None)
}

/// The fixture's model folder.
fn model_dir(fixture: &serde_json::Value) -> std::path::PathBuf {
    fixtures_dir().join(fixture["model_dir"].as_str().expect("model_dir"))
}

/// [`load`] with the attention on `attention`'s kernels (`None`: the model's own choice).
fn load_with_attention(
    fixture: &serde_json::Value,
    kv: KvDtype,
    attention: Option<AttentionKernels>,
) -> Loaded {
    let dir = model_dir(fixture);
    let name = fixture["name"].as_str().expect("name");
    let options = backend_cuda::LoadOptions {
        kv_dtype: kv,
        attention,
        ..Default::default()
    };
    let refusal = REFUSED
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, why)| *why);
    match (CudaModel::load_with(&dir, &options), refusal) {
        (Err(CudaError::Unavailable(why)), _) => {
            backend_cuda::skip_without_gpu(&why);
            Loaded::NoDevice
        }
        (Ok(model), None) => Loaded::Model(model),
        (Err(CudaError::Unsupported(e)), Some(why)) if e.contains(why) => {
            eprintln!("{name}: refused as expected ({e})");
            Loaded::Refused
        }
        (Ok(_), Some(why)) => panic!("{name} loaded on the GPU, which should refuse it: {why}"),
        (Err(e), _) => panic!("loading {name} on the GPU: {e}"),
    }
}

/// Greedy decoding of `n` tokens in session `session` of `target` from position `start` (the
/// prompt's tokens before it already there), returning the tokens and each step's logits.
fn greedy_from(
    target: &mut CudaTarget,
    session: usize,
    prompt: &[u32],
    n: usize,
) -> (Vec<u32>, Vec<Vec<f32>>) {
    let mut rows = target
        .logits(&[window(session, 0, prompt, 1)])
        .expect("prompt");
    let mut out = vec![argmax(&rows[0])];
    let mut all = vec![rows.remove(0)];
    for i in 0..n - 1 {
        let pos = (prompt.len() + i) as u64;
        let mut rows = target
            .logits(&[window(session, pos, &out[i..i + 1], 1)])
            .expect("decode");
        out.push(argmax(&rows[0]));
        all.push(rows.remove(0));
    }
    (out, all)
}

#[test]
fn every_gpu_fixture_matches_transformers_and_its_greedy_reply() {
    let _gpu = common::exclusive();
    for fixture in gpu_fixtures() {
        let name = fixture["name"].as_str().expect("name");
        let gpu = match load(&fixture, KvDtype::F32) {
            Loaded::Model(gpu) => gpu,
            Loaded::Refused => continue,
            Loaded::NoDevice => return,
        };
        for case in fixture["prompts"].as_array().expect("prompts") {
            let prompt = ids(&case["ids"]);
            let n = prompt.len();
            let got = CudaBackend::target(&gpu, &[256])
                .expect("target")
                .logits(&[window(0, 0, &prompt, n)])
                .expect("forward")
                .remove(0);
            let want = read_f32(case["logits"].as_str().expect("logits file"));
            let diff = relative_diff(&got, &want);
            eprintln!(
                "{name} {}: {n} rows, relative diff vs transformers {diff:e}",
                case["label"]
            );
            assert!(diff <= LOGIT_TOLERANCE, "{name} {}: {diff}", case["label"]);
        }
        if let Some(case) = fixture.get("greedy") {
            let prompt = ids(&case["prompt_ids"]);
            let want = ids(&case["tokens"]);
            let mut t = CudaBackend::target(&gpu, &[256]).expect("target");
            let (got, _) = greedy_from(&mut t, 0, &prompt, want.len());
            assert_eq!(got, want, "{name}: greedy reply");
            eprintln!("{name}: greedy reply of {} tokens equal", want.len());
        }
    }
}

#[test]
fn every_gpu_fixture_is_the_same_bits_alone_batched_and_moved() {
    let _gpu = common::exclusive();
    for fixture in gpu_fixtures() {
        let name = fixture["name"].as_str().expect("name");
        let gpu = match load(&fixture, KvDtype::Bf16) {
            Loaded::Model(gpu) => gpu,
            Loaded::Refused => continue,
            Loaded::NoDevice => return,
        };
        // Loaded by default, a model runs its own choice of attention (by context where a KV
        // head serves 4, 5 or 8 query heads: the 8-over-2 and 32-over-8 fixtures among them).
        let config = model::Config::from_dir(&model_dir(&fixture)).expect("config");
        assert_eq!(
            gpu.attention_kernels(),
            backend_cuda::default_attention_kernels(&config, KvDtype::Bf16),
            "{name}: the default attention"
        );
        same_bits_alone_batched_and_moved(name, &gpu, &prompts_of(&fixture));
    }
}

/// Attention by context (the default's kind on groups of 4, 5 and 8) with its switch two decode
/// steps after the prompt: the prompt's rows and the first steps on simt, the rest on the tensor
/// cores, rounds of both kinds in the batched run. On every fixture whose heads the tensor-core
/// kernels fit (bf16 cache rows), a stream's logits the same bits alone, batched and moved.
#[test]
fn every_gpu_fixture_is_the_same_bits_across_the_attention_switch() {
    let _gpu = common::exclusive();
    if std::env::var(backend_cuda::ATTENTION_MMA_ENV).is_ok_and(|v| v == "1") {
        eprintln!("skipped: FLASHLANE_ATTENTION_MMA=1 overrides by-context");
        return;
    }
    // Fixtures run across the switch: some must fit the tensor cores (the 8-over-2 and
    // 32-over-8 ones), or the test would check nothing.
    let mut switched = 0;
    for fixture in gpu_fixtures() {
        let name = fixture["name"].as_str().expect("name");
        let prompts = prompts_of(&fixture);
        let attention = AttentionKernels::ByContext {
            tensor_cores_from: (prompts[2].len() + 2) as u32,
        };
        let config = model::Config::from_dir(&model_dir(&fixture)).expect("config");
        if let Err(e) = backend_cuda::check_attention(&config, KvDtype::Bf16, attention) {
            eprintln!("{name}: the tensor-core kernels do not fit its heads ({e})");
            continue;
        }
        let gpu = match load_with_attention(&fixture, KvDtype::Bf16, Some(attention)) {
            Loaded::Model(gpu) => gpu,
            Loaded::Refused => continue,
            Loaded::NoDevice => return,
        };
        same_bits_alone_batched_and_moved(name, &gpu, &prompts);
        switched += 1;
    }
    assert!(switched > 0, "no fixture ran across the attention switch");
}

/// The fixture's prompts' token ids.
fn prompts_of(fixture: &serde_json::Value) -> Vec<Vec<u32>> {
    fixture["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .map(|p| ids(&p["ids"]))
        .collect()
}

/// A stream of the fixture's long prompt (`prompts[2]`), greedy for [`STEPS`] steps: its logits
/// the same bits alone, in session 1 beside other sessions' prefills and multi-token windows,
/// and moved into another session midway.
fn same_bits_alone_batched_and_moved(name: &str, gpu: &Arc<CudaModel>, prompts: &[Vec<u32>]) {
    let (few, long) = (&prompts[1], &prompts[2]);
    let (want, want_rows) = greedy_from(
        &mut CudaBackend::target(gpu, &[256]).expect("target"),
        0,
        long,
        STEPS,
    );

    // Batched: the same stream in session 1, each round beside another session's prompt
    // chunk or a 3-token window (as a draft verification) rolled back afterwards.
    let mut t = CudaBackend::target(gpu, &[256, 256, 256]).expect("target");
    let mut rows = t
        .logits(&[window(0, 0, few, 2), window(1, 0, long, 1)])
        .expect("prefill beside another");
    let mut got_rows = vec![rows.remove(1)];
    for (i, &token) in want.iter().enumerate().take(STEPS - 1) {
        let pos = (long.len() + i) as u64;
        let few_len = (few.len() + i) as u64;
        let rows = t
            .logits(&[
                window(2, 0, &long[..20], 1),
                window(0, few_len, &few[..3], 3),
                window(1, pos, &[token], 1),
            ])
            .expect("round");
        got_rows.push(rows[2].clone());
        t.truncate(SessionId(0), few_len + 1).expect("truncate");
        t.release(SessionId(2));
    }
    for (i, (x, y)) in want_rows.iter().zip(&got_rows).enumerate() {
        assert!(
            same_bits(x, y),
            "{name} step {i}: logits differ alone vs batched"
        );
    }

    // Moved: the stream fills a session just larger than its prompt, then moves on.
    let cut = long.len() + STEPS / 2;
    let mut t = CudaBackend::target(gpu, &[cut as u64, 256]).expect("target");
    let mut rows = t.logits(&[window(0, 0, long, 1)]).expect("prompt");
    let mut got = vec![argmax(&rows[0])];
    let mut moved_rows = vec![rows.remove(0)];
    let mut session = 0;
    for i in 0..STEPS - 1 {
        let pos = (long.len() + i) as u64;
        if pos == cut as u64 {
            t.move_state(SessionId(0), SessionId(1)).expect("move");
            session = 1;
        }
        let mut rows = t
            .logits(&[window(session, pos, &got[i..i + 1], 1)])
            .expect("decode");
        got.push(argmax(&rows[0]));
        moved_rows.push(rows.remove(0));
    }
    assert_eq!(session, 1, "{name}: the stream moved");
    assert_eq!(got, want, "{name}: moved reply");
    for (i, (x, y)) in want_rows.iter().zip(&moved_rows).enumerate() {
        assert!(same_bits(x, y), "{name} step {i}: logits differ moved");
    }
    eprintln!("{name}: {STEPS} steps the same bits alone, batched and moved (bf16 KV)");
}
