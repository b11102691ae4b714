//! The prompt cache: a prompt that shares whole prefill chunks with an earlier one starts from
//! their cached state, and its reply is the reply from scratch, bit for bit: alone or beside
//! others, with drafts, moved, and under a budget so small that blocks are evicted all the time.

mod common;

use common::*;
use lane::{DraftMode, Engine, Request};
use proptest::prelude::*;

const CHUNK: u64 = 16;

fn cached(setup: Setup, budget: u64) -> Setup {
    let mut setup = setup.prefill_chunk(CHUNK);
    setup.config.prompt_cache_bytes = budget;
    setup
}

/// `shared` tokens of a common prefix (salt 1), then `own` tokens of the request's own.
fn with_prefix(shared: usize, own: usize, salt: u64) -> Vec<u32> {
    let mut p = prompt(shared, 1);
    p.extend(prompt(own, 100 + salt));
    p
}

/// Submits the requests one after the other (each after the last finished) and returns their
/// replies.
fn one_by_one(
    engine: &mut Engine<lane::testing::FakeTarget>,
    requests: &[Request],
) -> Vec<Vec<u32>> {
    requests
        .iter()
        .map(|r| {
            let id = engine.submit(r.clone()).unwrap();
            let mut replies = Replies::default();
            run_until_idle(engine, &mut replies, 10_000);
            replies.reply(id)
        })
        .collect()
}

#[test]
fn a_shared_prefix_is_restored_and_the_reply_is_the_reply_from_scratch() {
    let plain = Setup::unset(&[cap(256); 2]).prefill_chunk(CHUNK);
    let setup = cached(Setup::unset(&[cap(256); 2]), 1 << 20);
    let requests: Vec<Request> = (0..4).map(|i| greedy(with_prefix(50, 7, i), 20)).collect();
    let mut engine = setup.build();
    let replies = one_by_one(&mut engine, &requests);
    for (request, reply) in requests.iter().zip(&replies) {
        assert_eq!(reply, &solo(&plain, request.clone()));
    }
    let c = engine.counters();
    // 50 shared tokens are 3 whole blocks; the first request computed them, the others reused.
    assert_eq!(
        (c.prompt_cache_hits, c.prompt_cache_tokens_reused),
        (3, 3 * 48)
    );
    assert_eq!(c.prompt_tokens, 57 + 3 * (57 - 48));
    // The same prompt again: every block but the one holding its last token.
    let again = one_by_one(&mut engine, &requests[..1]);
    assert_eq!(again[0], replies[0]);
    assert_eq!(engine.counters().prompt_cache_tokens_reused, 3 * 48 + 48);
}

#[test]
fn a_streams_admission_says_how_much_of_its_prompt_the_cache_held() {
    let mut engine = cached(Setup::unset(&[cap(256)]), 1 << 20).build();
    let mut replies = Replies::default();
    let first = engine.submit(greedy(with_prefix(50, 7, 0), 5)).unwrap();
    run_until_idle(&mut engine, &mut replies, 10_000);
    let second = engine.submit(greedy(with_prefix(50, 7, 1), 5)).unwrap();
    run_until_idle(&mut engine, &mut replies, 10_000);
    // The first computed its whole prompt; the second found the 3 whole shared blocks.
    assert_eq!(replies.admitted[&first], 0);
    assert_eq!(replies.admitted[&second], 3 * CHUNK);
}

#[test]
fn cache_prompt_false_computes_everything_and_caches_nothing() {
    let setup = cached(Setup::unset(&[cap(256)]), 1 << 20);
    let mut engine = setup.build();
    let request = Request {
        cache_prompt: false,
        ..greedy(with_prefix(64, 3, 1), 5)
    };
    one_by_one(&mut engine, &[request.clone(), request]);
    assert_eq!(engine.counters().prompt_cache_hits, 0);
    assert_eq!(engine.target().cache_saves(), (0, 0));
}

#[test]
fn hits_equal_misses_with_drafts_beside_other_streams_and_moved() {
    for mode in [DraftMode::None, DraftMode::Ngram, DraftMode::Mtp] {
        // Sessions of 48 and 160: long replies start small and move while decoding.
        let spec = |budget| {
            cached(
                Setup::spec(&[cap(48), cap(48), cap(160), cap(160)], 8),
                budget,
            )
            .drafts(mode, if mode == DraftMode::None { 0 } else { 3 })
            .draft_accept(0.6)
        };
        let plain = spec(0);
        let setup = spec(1 << 20);
        let requests: Vec<Request> = (0..6)
            .map(|i| {
                let max_new = if i % 2 == 0 { 60 } else { 10 };
                sampled(with_prefix(33, 3 + i as usize, i), max_new, 7 + i)
            })
            .collect();
        let mut engine = setup.build();
        // Warm the cache, then all at once.
        one_by_one(&mut engine, &requests[..1]);
        let ids: Vec<_> = requests
            .iter()
            .map(|r| engine.submit(r.clone()).unwrap())
            .collect();
        let mut replies = Replies::default();
        run_until_idle(&mut engine, &mut replies, 10_000);
        for (id, request) in ids.iter().zip(&requests) {
            assert_eq!(
                replies.reply(*id),
                solo(&plain, request.clone()),
                "{mode:?} {id}"
            );
        }
        assert!(engine.counters().prompt_cache_hits >= 6, "{mode:?}");
        assert!(
            engine.counters().moves > 0,
            "{mode:?}: nothing moved, the test proves less"
        );
    }
}

#[test]
fn a_tiny_budget_evicts_all_the_time_and_never_changes_a_reply() {
    let plain = Setup::unset(&[cap(256); 3]).prefill_chunk(CHUNK);
    // Room for 3 blocks of 16 tokens at 8 bytes a token.
    let setup = cached(Setup::unset(&[cap(256); 3]), 3 * CHUNK * 8);
    // Four different prefixes of two blocks each: eight blocks want a place among three.
    let requests: Vec<Request> = (0..12)
        .map(|i| {
            let mut p = prompt(32, 10 + i % 4);
            p.extend(prompt(5, 100 + i));
            greedy(p, 8)
        })
        .collect();
    let mut engine = setup.build();
    let ids: Vec<_> = requests
        .iter()
        .map(|r| engine.submit(r.clone()).unwrap())
        .collect();
    let mut replies = Replies::default();
    run_until_idle(&mut engine, &mut replies, 10_000);
    for (id, request) in ids.iter().zip(&requests) {
        assert_eq!(replies.reply(*id), solo(&plain, request.clone()));
    }
    one_by_one(&mut engine, &requests);
    assert!(engine.counters().prompt_cache_evictions > 0);
    let (blocks, bytes) = engine.prompt_cache_usage().unwrap();
    assert!(blocks <= 3 && bytes <= 3 * CHUNK * 8);
    assert_eq!(
        engine.target().cache_saves().1,
        blocks,
        "evicted blocks are dropped"
    );
}

#[test]
fn a_target_without_a_cache_or_a_budget_below_one_block_runs_without_one() {
    let mut setup = cached(Setup::unset(&[cap(256)]), CHUNK * 8 - 1);
    assert!(
        setup.build().prompt_cache_usage().is_none(),
        "budget below a block"
    );
    setup.config.prompt_cache_bytes = 1 << 20;
    assert!(setup.build().prompt_cache_usage().is_some());
    let mut target = lane::testing::FakeTarget::new(&setup.capacities, setup.fake);
    target.cache_bytes_per_token = None;
    let mut engine = Engine::new(target, setup.config).unwrap();
    assert!(
        engine.prompt_cache_usage().is_none(),
        "the target keeps no blocks"
    );
    let request = greedy(with_prefix(40, 1, 1), 4);
    one_by_one(&mut engine, &[request.clone(), request]);
    assert_eq!(engine.counters().prompt_cache_hits, 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

    /// Requests drawn from three shared prefixes of random lengths and random tails, arriving in
    /// random batches, under a random budget: every reply is its solo reply.
    #[test]
    fn random_requests_with_shared_prefixes_get_their_solo_replies(
        prefix_lens in proptest::collection::vec(0usize..70, 3),
        picks in proptest::collection::vec((0usize..3, 1usize..20, 1u64..12, any::<bool>()), 1..10),
        budget_blocks in 1u64..12,
    ) {
        let plain = Setup::unset(&[cap(128); 3]).prefill_chunk(CHUNK);
        let setup = cached(Setup::unset(&[cap(128); 3]), budget_blocks * CHUNK * 8);
        let mut engine = setup.build();
        let mut pending: Vec<(lane::StreamId, Request)> = Vec::new();
        let mut replies = Replies::default();
        for (i, &(which, tail, max_new, wait)) in picks.iter().enumerate() {
            let mut p = prompt(prefix_lens[which], 50 + which as u64);
            p.extend(prompt(tail, 1000 + i as u64));
            let request = greedy(p, max_new);
            pending.push((engine.submit(request.clone()).unwrap(), request));
            if wait {
                run_until_idle(&mut engine, &mut replies, 10_000);
            }
        }
        run_until_idle(&mut engine, &mut replies, 10_000);
        for (id, request) in &pending {
            prop_assert_eq!(replies.reply(*id), solo(&plain, request.clone()));
        }
    }
}
