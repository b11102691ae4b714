//! design §9: a stream's reply never depends on what runs beside it, and drafts never change a
//! reply, greedy or seeded.

mod common;

use common::*;
use lane::{DraftMode, FinishReason, Request};

/// The receipt's eight sessions (design §13), scaled down: an engine's session, one medium and six small.
fn eight_sessions() -> Vec<u64> {
    let mut capacities = vec![cap(1024), cap(512)];
    capacities.extend([cap(128); 6]);
    capacities
}

fn three_sessions() -> Vec<u64> {
    vec![cap(1024), cap(128), cap(128)]
}

/// Requests of different prompt lengths (some longer than the prefill chunk) and reply lengths,
/// several of which outgrow the small sessions and move while the others run.
fn requests(n: usize, make: impl Fn(Vec<u32>, u64, u64) -> Request) -> Vec<Request> {
    (0..n)
        .map(|i| {
            let prompt_len = [7, 150, 33, 90, 3, 61, 200, 12][i % 8];
            let max_new = [300, 80, 420, 150, 600, 40, 250, 500][i % 8];
            make(prompt(prompt_len, i as u64), max_new, 1000 + i as u64)
        })
        .collect()
}

/// Runs all requests together and checks each reply against its solo reply and, for greedy
/// ones, against the model's own greedy reply.
fn together_equals_solo_and_the_model(setup: &Setup, requests: Vec<Request>) {
    let (engine, replies) = together_equals_solo(setup, &requests);
    for ((id, reply), request) in replies.iter().zip(&requests) {
        if request.sampling.is_greedy() {
            let truth = engine
                .target()
                .greedy_reply(&request.prompt, request.max_new_tokens, &[]);
            assert_eq!(reply, &truth, "{id} differs from the model's reply");
        }
    }
    assert!(
        engine.counters().moves > 0,
        "the test should exercise moves"
    );
}

fn with_drafts() -> Setup {
    Setup::spec(&eight_sessions(), 64)
        .drafts(DraftMode::Mtp, 3)
        .draft_accept(0.6)
        .prefill_chunk(64)
}

#[test]
fn three_greedy_streams_together_give_their_solo_replies() {
    let setup = Setup::spec(&three_sessions(), 64).prefill_chunk(64);
    together_equals_solo_and_the_model(&setup, requests(3, |p, n, _| greedy(p, n)));
}

#[test]
fn eight_greedy_streams_together_give_their_solo_replies() {
    together_equals_solo_and_the_model(&with_drafts(), requests(8, |p, n, _| greedy(p, n)));
}

#[test]
fn three_seeded_sampled_streams_together_give_their_solo_replies() {
    let setup = Setup::spec(&three_sessions(), 64)
        .drafts(DraftMode::Mtp, 3)
        .prefill_chunk(64);
    together_equals_solo_and_the_model(&setup, requests(3, sampled));
}

#[test]
fn eight_seeded_sampled_streams_together_give_their_solo_replies() {
    together_equals_solo_and_the_model(&with_drafts(), requests(8, sampled));
}

#[test]
fn mixed_greedy_sampled_and_ngram_streams_together_give_their_solo_replies() {
    let setup = Setup::spec(&eight_sessions(), 64)
        .drafts(DraftMode::Ngram, 4)
        .prefill_chunk(64);
    let reqs = requests(8, |p, n, seed| {
        let mut r = if seed % 2 == 0 {
            greedy(p, n)
        } else {
            sampled(p, n, seed)
        };
        r.draft = Some([DraftMode::Ngram, DraftMode::None, DraftMode::Mtp][seed as usize % 3]);
        r
    });
    together_equals_solo_and_the_model(&setup, reqs);
}

#[test]
fn greedy_replies_with_drafts_equal_plain_greedy_replies() {
    let plain = Setup::spec(&eight_sessions(), 64);
    for (mode, accept) in [
        (DraftMode::Mtp, 0.9),
        (DraftMode::Mtp, 0.1),
        (DraftMode::Ngram, 0.0),
    ] {
        let speculative = plain.clone().drafts(mode, 5).draft_accept(accept);
        for (i, request) in requests(4, |p, n, _| greedy(p, n)).into_iter().enumerate() {
            assert_eq!(
                solo(&speculative, request.clone()),
                solo(&plain, request),
                "{mode:?} at accept {accept}, request {i}"
            );
        }
    }
}

#[test]
fn drafts_are_accepted_and_rolled_back() {
    let setup = Setup::spec(&eight_sessions(), 64)
        .drafts(DraftMode::Mtp, 4)
        .draft_accept(0.5);
    let mut engine = setup.build();
    engine.submit(greedy(prompt(10, 1), 400)).unwrap();
    let mut replies = Replies::default();
    let rounds = run_until_idle(&mut engine, &mut replies, 1000);
    let c = engine.counters();
    assert!(
        c.draft_accepted > 0 && c.draft_accepted < c.draft_proposed,
        "{c:?}"
    );
    assert!(engine.target().truncations() > 0);
    // Accepted drafts save rounds: 400 tokens in fewer than 400 decode rounds.
    assert!(rounds < 400, "{rounds} rounds");
}

/// A draft is accepted when the token drawn at its position is the draft, so a seeded reply
/// with MTP or n-gram drafts is its reply without, token for token (drafts accepted and
/// rejected), whether the target draws or sends the rows back.
#[test]
fn drafts_never_change_a_seeded_reply() {
    let plain = Setup::spec(&three_sessions(), 64);
    let (mut accepted, mut proposed) = (0, 0);
    for token_rows in [true, false] {
        for (mode, accept) in [(DraftMode::Mtp, 0.6), (DraftMode::Ngram, 0.6)] {
            let mut drafting = Setup::spec(&three_sessions(), 64)
                .drafts(mode, 3)
                .draft_accept(accept);
            drafting.fake.token_rows = token_rows;
            for seed in 0..6 {
                let p = prompt(5 + seed as usize, seed);
                let mut request = sampled(p, 300, seed);
                // Low temperature: the drafts (the fake's greedy tokens) are often drawn.
                request.sampling.temperature = 0.3;
                request.draft = Some(mode);
                let mut without = request.clone();
                without.draft = Some(DraftMode::None);
                let mut engine = drafting.build();
                let id = engine.submit(request).expect("accepted");
                let mut replies = Replies::default();
                run_until_idle(&mut engine, &mut replies, 100_000);
                assert_eq!(
                    replies.reply(id),
                    solo(&plain, without),
                    "{mode:?} seed {seed} (token rows: {token_rows})"
                );
                let c = engine.counters();
                (accepted, proposed) = (accepted + c.draft_accepted, proposed + c.draft_proposed);
            }
        }
    }
    // Both verdicts happened: drafts accepted and drafts rejected.
    assert!(
        accepted > 0 && accepted < proposed,
        "{accepted} of {proposed} drafts accepted"
    );
}

#[test]
fn a_sampled_reply_depends_on_its_seed_and_a_greedy_one_does_not() {
    let setup = Setup::spec(&three_sessions(), 64);
    let p = prompt(9, 4);
    let a = solo(&setup, sampled(p.clone(), 200, 1));
    let b = solo(&setup, sampled(p.clone(), 200, 2));
    assert_ne!(a, b);
    assert_eq!(a, solo(&setup, sampled(p.clone(), 200, 1)));
}

#[test]
fn a_stop_token_ends_the_reply_and_is_not_emitted() {
    let setup = Setup::spec(&three_sessions(), 64).drafts(DraftMode::Mtp, 3);
    let p = prompt(12, 8);
    let full = solo(&setup, greedy(p.clone(), 100));
    let stop = full[40];
    let first = full.iter().position(|&t| t == stop).unwrap();
    let mut engine = setup.build();
    let id = engine
        .submit(Request {
            stop_tokens: vec![stop],
            ..greedy(p, 100)
        })
        .unwrap();
    let mut replies = Replies::default();
    run_until_idle(&mut engine, &mut replies, 1000);
    assert_eq!(replies.reason(id), Some(&FinishReason::Stop));
    assert_eq!(replies.reply(id), full[..first]);
}

/// A target that answers greedy windows with their greedy tokens and draws sampled ones (as the
/// GPU does; this one draws as the host would) gives the replies of one that answers with
/// logits, greedy or sampled, with or without drafts.
#[test]
fn greedy_tokens_from_the_target_give_the_replies_of_its_logits() {
    let mixed = |p, n, seed: u64| {
        let mut r = if seed.is_multiple_of(3) {
            sampled(p, n, seed)
        } else {
            greedy(p, n)
        };
        r.logprobs = seed % 4 == 1;
        r
    };
    for setup in [Setup::spec(&eight_sessions(), 64), with_drafts()] {
        let mut by_logits = setup.clone();
        by_logits.fake.token_rows = false;
        let (with_tokens, with_logits) = (setup.build(), by_logits.build());
        let mut engines = [with_tokens, with_logits];
        let mut replies = [Replies::default(), Replies::default()];
        let mut ids = [Vec::new(), Vec::new()];
        for (k, engine) in engines.iter_mut().enumerate() {
            for request in requests(8, mixed) {
                ids[k].push(engine.submit(request).unwrap());
            }
            run_until_idle(engine, &mut replies[k], 10_000);
        }
        for (a, b) in ids[0].iter().zip(&ids[1]) {
            assert_eq!(replies[0].reply(*a), replies[1].reply(*b), "{a}");
            assert_eq!(replies[0].reason(*a), replies[1].reason(*b), "{a}");
        }
    }
}

/// `min_new_tokens`: the stop token cannot end the reply before it; where the model would have
/// stopped, the reply goes on with the model's next choice without it, and the reply is the
/// same with drafts, beside other streams and on a target that picks greedy tokens itself.
#[test]
fn min_new_tokens_holds_the_stop_tokens_back_until_then() {
    let setup = Setup::spec(&three_sessions(), 64);
    let p = prompt(12, 8);
    let full = solo(&setup, greedy(p.clone(), 100));
    let stop = full[10];
    let first = full.iter().position(|&t| t == stop).unwrap();
    let held = |min: u64| Request {
        stop_tokens: vec![stop],
        min_new_tokens: min,
        ..greedy(p.clone(), 100)
    };
    // Without: it stops at the stop token's first place.
    let mut engine = setup.build();
    let id = engine.submit(held(0)).unwrap();
    let mut replies = Replies::default();
    run_until_idle(&mut engine, &mut replies, 1000);
    assert_eq!(replies.reply(id), full[..first]);
    // With: the first `first` tokens are the same, then no stop before `min`.
    let min = first as u64 + 20;
    let mut engine = setup.build();
    let id = engine.submit(held(min)).unwrap();
    let mut replies = Replies::default();
    run_until_idle(&mut engine, &mut replies, 1000);
    let reply = replies.reply(id);
    assert!(reply.len() as u64 >= min, "{} tokens", reply.len());
    assert_eq!(reply[..first], full[..first]);
    assert!(!reply[..min as usize].contains(&stop));
    // The same with drafts, and beside others.
    for (mode, k) in [(DraftMode::Mtp, 3), (DraftMode::Ngram, 3)] {
        let drafted = Setup::spec(&three_sessions(), 64).drafts(mode, k);
        let mut engine = drafted.build();
        let ids: Vec<_> = [
            held(min),
            greedy(prompt(9, 2), 30),
            sampled(prompt(7, 3), 30, 5),
        ]
        .into_iter()
        .map(|r| engine.submit(r).unwrap())
        .collect();
        let mut together = Replies::default();
        run_until_idle(&mut engine, &mut together, 1000);
        assert_eq!(together.reply(ids[0]), reply, "{mode:?}");
    }
    // More than max_tokens: refused naming the field.
    let mut engine = setup.build();
    let refused = engine.submit(Request {
        min_new_tokens: 101,
        ..greedy(p, 100)
    });
    assert!(
        matches!(
            refused,
            Err(lane::Refusal::Invalid {
                param: "min_tokens",
                ..
            })
        ),
        "{refused:?}"
    );
}

/// A target whose own draw differs from the host's (as a GPU's may): with `min_new_tokens`, a
/// seeded sampled reply is still the same with drafts as without, because no window crosses
/// the minimum's end (the held positions are drawn on the host, the rest by the target, the same
/// positions either way).
#[test]
fn min_new_tokens_keeps_each_position_on_the_same_side_with_drafts() {
    let mut plain = Setup::spec(&three_sessions(), 64);
    plain.fake.draw_apart = true;
    let mut drafted = plain.clone().drafts(DraftMode::Mtp, 3).draft_accept(0.95);
    drafted.fake.draw_apart = true;
    for seed in 0..16 {
        let mut request = Request {
            stop_tokens: vec![(seed % 48) as u32],
            min_new_tokens: 20 + seed % 3,
            ..sampled(prompt(10, seed), 60, 100 + seed)
        };
        // Cool enough that drafts are accepted and windows grow to carry several.
        request.sampling.temperature = 0.2;
        assert_eq!(
            solo(&drafted, request.clone()),
            solo(&plain, request),
            "seed {seed}"
        );
    }
}
