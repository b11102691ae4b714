//! The whole engine over the CPU target on a Qwen3-Next fixture.

use super::*;

/// The whole engine over the CPU target on a Qwen3-Next fixture: four greedy streams at once
/// with n-gram drafts (accepted and rejected, so linear states roll back), starting in small
/// sessions and moving as they grow, reply exactly what each replies alone without drafts.
#[test]
fn the_engine_with_drafts_and_moves_replies_as_plain_solo_decoding() {
    use crate::target::CpuBackend;
    use lane::{DraftMode, Engine, EngineConfig, Event, FinishReason, Policy, Request};
    let f = &fixtures()[0];
    let dir = fixtures_dir().join(f["model_dir"].as_str().unwrap());
    let model = std::sync::Arc::new(CpuModel::load(&dir, false).expect("model"));
    let margin = slots::MARGIN;
    let capacities = [
        256 + margin,
        32 + margin,
        32 + margin,
        32 + margin,
        64 + margin,
    ];
    let run = |requests: &[Request], draft: DraftMode| -> (Vec<Vec<u32>>, u64, u64, u64) {
        let mut config = EngineConfig::new(Policy::SmallestFit { grow: 8 });
        config.draft = draft;
        config.draft_tokens = if draft == DraftMode::None { 0 } else { 3 };
        config.prefill_chunk = 16;
        let mut engine =
            Engine::new(CpuBackend::target(model.clone(), &capacities), config).expect("engine");
        let ids: Vec<_> = requests
            .iter()
            .map(|r| engine.submit(r.clone()).expect("submit"))
            .collect();
        let mut replies = vec![Vec::new(); ids.len()];
        let mut finished = 0;
        for _ in 0..10_000 {
            for event in engine.step() {
                let i = ids
                    .iter()
                    .position(|id| *id == event.stream())
                    .expect("known stream");
                match event {
                    Event::Admitted { .. } => {}
                    Event::Token { token, .. } => replies[i].push(token),
                    Event::Finished { reason, .. } => {
                        assert_eq!(reason, FinishReason::Length, "stream {i}");
                        finished += 1;
                    }
                }
            }
            if finished == ids.len() {
                break;
            }
        }
        assert_eq!(finished, ids.len(), "every stream finishes");
        let c = engine.counters();
        (replies, c.moves, c.draft_accepted, c.draft_proposed)
    };
    // Prompts that repeat themselves, so that n-gram drafts are proposed.
    let requests: Vec<Request> = (0..4u32)
        .map(|i| {
            let motif: Vec<u32> = (0..3 + i).map(|j| (i * 41 + j * 13 + 7) % 256).collect();
            let prompt: Vec<u32> = motif
                .iter()
                .cycle()
                .take(12 + 5 * i as usize)
                .copied()
                .collect();
            Request::new(prompt, 150 + 10 * i as u64)
        })
        .collect();
    let (together, moves, accepted, proposed) = run(&requests, DraftMode::Ngram);
    eprintln!(
        "{}: {moves} moves, {accepted} of {proposed} drafts accepted",
        f["name"]
    );
    assert!(moves > 0, "the test should exercise moves");
    assert!(
        accepted > 0 && proposed > accepted,
        "the test should accept and reject drafts"
    );
    for (i, request) in requests.iter().enumerate() {
        let (alone, ..) = run(std::slice::from_ref(request), DraftMode::None);
        assert_eq!(
            together[i], alone[0],
            "stream {i}: with drafts and neighbours differs from plain solo"
        );
    }
}
