//! Dense Qwen3 through the real engine on the CPU target: replies of 8 concurrent streams, with
//! moves between sessions and n-gram drafts verified (and mostly rejected, so rolled back), equal
//! each stream's reply alone without drafts; and a stream's reply equals transformers' greedy
//! continuation.

mod common;

use backend_cpu::{CpuBackend, CpuModel};
use common::*;
use lane::{Counters, DraftMode, Engine, EngineConfig, FinishReason, Policy, Request};
use slots::MARGIN;
use std::sync::Arc;

fn model(name: &str) -> (serde_json::Value, Arc<CpuModel>) {
    let fixture = fixtures("qwen3")
        .into_iter()
        .find(|f| f["name"] == name)
        .expect("fixture");
    let dir = fixtures_dir().join(fixture["model_dir"].as_str().unwrap());
    (fixture, Arc::new(CpuModel::load(&dir, false).unwrap()))
}

/// Small sessions that replies outgrow (so streams move), and one large engine's session.
fn capacities() -> Vec<u64> {
    let mut c = vec![128 + MARGIN];
    c.extend([16 + MARGIN; 4]);
    c.extend([32 + MARGIN; 3]);
    c.extend([64 + MARGIN; 2]);
    c
}

/// Runs `requests` at once to the end; each reply and the engine's counters.
fn run(model: &Arc<CpuModel>, requests: &[Request], draft: DraftMode) -> (Vec<Vec<u32>>, Counters) {
    let mut config = EngineConfig::new(Policy::SmallestFit { grow: 8 });
    config.draft = draft;
    config.draft_tokens = 3;
    config.prefill_chunk = 16;
    let mut engine =
        Engine::new(CpuBackend::target(model.clone(), &capacities()), config).expect("engine");
    let mut replies = Vec::with_capacity(requests.len());
    for (i, (reply, reason)) in run_to_end(&mut engine, requests).into_iter().enumerate() {
        assert!(
            matches!(reason, FinishReason::Length),
            "stream {i}: {reason:?}"
        );
        replies.push(reply);
    }
    (replies, engine.counters())
}

/// 8 prompts of different lengths, with repeats so that n-gram drafts are proposed.
fn requests() -> Vec<Request> {
    (0..8u32)
        .map(|i| {
            let motif: Vec<u32> = (0..2 + i % 3)
                .map(|j| (i * 41 + j * 23 + 7) % 250)
                .collect();
            let prompt: Vec<u32> = motif
                .iter()
                .cycle()
                .take(3 + 4 * i as usize)
                .copied()
                .collect();
            Request::new(prompt, 20 + 5 * u64::from(i))
        })
        .collect()
}

#[test]
fn eight_concurrent_moving_streams_with_drafts_reply_as_each_alone() {
    for name in ["qwen3_f32_untied", "qwen3_bf16"] {
        let (_, model) = model(name);
        let requests = requests();
        let solo: Vec<Vec<u32>> = requests
            .iter()
            .map(|r| {
                run(&model, std::slice::from_ref(r), DraftMode::None)
                    .0
                    .remove(0)
            })
            .collect();
        for draft in [DraftMode::None, DraftMode::Ngram] {
            let (replies, counters) = run(&model, &requests, draft);
            assert!(
                counters.moves > 0,
                "{name} {draft:?}: the replies outgrow their sessions"
            );
            for (i, (got, want)) in replies.iter().zip(&solo).enumerate() {
                assert_eq!(
                    got, want,
                    "{name} {draft:?}: stream {i} differs from its solo reply"
                );
            }
            if draft == DraftMode::Ngram {
                assert!(
                    counters.draft_proposed > 0,
                    "{name}: n-gram drafts were verified"
                );
            }
        }
    }
}

#[test]
fn an_engine_stream_replies_as_transformers_generate() {
    let (fixture, model) = model("qwen3_f32_untied");
    let prompt = ids(&fixture["greedy"]["prompt_ids"]);
    let want = ids(&fixture["greedy"]["tokens"]);
    let (replies, _) = run(
        &model,
        &[Request::new(prompt, want.len() as u64)],
        DraftMode::Ngram,
    );
    assert_eq!(replies[0], want);
}
