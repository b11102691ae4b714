//! The prompt cache on real models: replies served from cached prefixes are the replies computed
//! from scratch, bit for bit, on the hybrid default model (DeltaNet states and the MTP head's rows
//! restored) and on a dense Qwen3, with and without drafts, beside each other and moved.

use backend_cpu::{CpuBackend, CpuModel};
use lane::testing::run_to_end;
use lane::{DraftMode, Engine, EngineConfig, FinishReason, Policy, Request, SamplingParams};
use std::path::PathBuf;
use std::sync::Arc;

fn load(relative: &str) -> Arc<CpuModel> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(relative);
    Arc::new(CpuModel::load(&dir, false).unwrap_or_else(|e| panic!("{relative}: {e}")))
}

/// Requests sharing the first 40 tokens (two and a half chunks of 16), each with its own tail and
/// a reply of 60 tokens;
/// the odd ones sampled with a seed.
fn requests(vocab: u32) -> Vec<Request> {
    let shared: Vec<u32> = (0..40u32).map(|i| (i * 37 + 11) % vocab).collect();
    (0..5u32)
        .map(|r| {
            let mut prompt = shared.clone();
            prompt.extend((0..3 + r).map(|i| (i * 53 + r * 101 + 7) % vocab));
            let mut request = Request::new(prompt, 60);
            if r % 2 == 1 {
                request.sampling = SamplingParams {
                    temperature: 0.8,
                    top_k: 40,
                    top_p: 0.95,
                    min_p: 0.0,
                    seed: Some(u64::from(r)),
                };
            }
            request
        })
        .collect()
}

/// Every reply of `requests` on an engine with sessions small enough that long replies move:
/// first one at a time (so later ones hit the cache), then all together.
fn replies(
    model: &Arc<CpuModel>,
    draft: DraftMode,
    cache_bytes: u64,
) -> (Vec<Vec<u32>>, lane::Counters) {
    let mut config = EngineConfig::new(Policy::SmallestFit { grow: 8 });
    config.draft = draft;
    config.draft_tokens = if draft == DraftMode::None { 0 } else { 2 };
    config.prefill_chunk = 16;
    config.prompt_cache_bytes = cache_bytes;
    let capacities = [
        64 + 3 + slots::MARGIN,
        96 + slots::MARGIN,
        96 + slots::MARGIN,
    ];
    let mut engine = Engine::new(CpuBackend::target(model.clone(), &capacities), config).unwrap();
    let vocab = model.config.vocab_size as u32;
    let reqs = requests(vocab);
    let mut out = Vec::new();
    for request in &reqs {
        let [(reply, reason)] = run_to_end(&mut engine, std::slice::from_ref(request))
            .try_into()
            .unwrap();
        assert!(
            matches!(reason, FinishReason::Length | FinishReason::Stop),
            "{reason:?}"
        );
        out.push(reply);
    }
    for (reply, reason) in run_to_end(&mut engine, &reqs) {
        assert!(
            matches!(reason, FinishReason::Length | FinishReason::Stop),
            "{reason:?}"
        );
        out.push(reply);
    }
    (out, engine.counters())
}

fn hits_equal_misses(relative: &str, drafts: &[DraftMode]) {
    let model = load(relative);
    for &draft in drafts {
        let (computed, plain) = replies(&model, draft, 0);
        let (cached, c) = replies(&model, draft, 64 << 20);
        assert_eq!(plain.prompt_cache_hits, 0);
        let hits = c.prompt_cache_hits;
        assert!(hits >= 9, "{relative} {draft:?}: {hits} hits");
        assert!(
            c.moves > 0,
            "{relative} {draft:?}: nothing moved, the test proves less"
        );
        assert_eq!(cached, computed, "{relative} {draft:?}");
    }
}

#[test]
fn hybrid_replies_from_the_cache_are_the_computed_replies() {
    hits_equal_misses(
        "../../models/flashlane-tiny",
        &[DraftMode::None, DraftMode::Mtp, DraftMode::Ngram],
    );
}

#[test]
fn dense_replies_from_the_cache_are_the_computed_replies() {
    hits_equal_misses(
        "../../tests/fixtures/qwen3_bf16/model",
        &[DraftMode::None, DraftMode::Ngram],
    );
}
