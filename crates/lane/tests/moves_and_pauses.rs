//! design §5–§6: a stream that outgrows its session moves, bit for bit, to a larger one when its
//! next window no longer fits the nominal size, or pauses until one frees; a stream whose session
//! holds its reply end never moves or pauses.

mod common;

use common::*;
use lane::testing::MoveRecord;
use lane::{DraftMode, FinishReason, SessionId, SlotState};
use slots::MARGIN;

/// The growing-reply receipt (design §13) scaled down 16×: 4K → 16K → engine's 32K becomes
/// 256 → 1024 → 2048 (the engine's session first, as the plan opens them).
fn ladder() -> Vec<u64> {
    vec![cap(2048), cap(1024), cap(256)]
}

const WINDOW: u64 = 4;

fn growing(setup: &Setup, request: lane::Request) -> (Vec<u32>, Vec<MoveRecord>) {
    let mut engine = setup.build();
    let id = engine.submit(request).unwrap();
    let mut replies = Replies::default();
    replies.absorb(engine.step());
    assert_eq!(
        session_of(&engine, id),
        Some(SessionId(2)),
        "starts in the smallest"
    );
    run_until_idle(&mut engine, &mut replies, 10_000);
    assert_eq!(replies.reason(id), Some(&FinishReason::Length));
    assert_eq!(engine.counters().pauses, 0);
    (replies.reply(id), engine.target().moves().to_vec())
}

fn assert_moved_twice_at_the_nominal_sizes(moves: &[MoveRecord]) {
    assert_eq!(
        moves.iter().map(|m| (m.from.0, m.to.0)).collect::<Vec<_>>(),
        vec![(2, 1), (1, 0)]
    );
    // Each move happens at the first round whose window would pass the nominal size: the
    // positions written are within one window of it, and never past it.
    for (m, nominal) in moves.iter().zip([256, 1024]) {
        assert!(
            m.len + WINDOW > nominal && m.len <= nominal,
            "moved from {} at {} positions (nominal {nominal})",
            m.from,
            m.len
        );
    }
}

#[test]
fn a_growing_reply_moves_twice_and_equals_an_unmoved_reply() {
    let setup = Setup::spec(&ladder(), 64)
        .drafts(DraftMode::Mtp, WINDOW - 1)
        .draft_accept(0.5);
    let request = greedy(prompt(20, 3), 1900);
    let (moved, moves) = growing(&setup, request.clone());
    assert_moved_twice_at_the_nominal_sizes(&moves);

    let unmoved_setup = Setup::spec(&[cap(2048)], 64)
        .drafts(DraftMode::Mtp, WINDOW - 1)
        .draft_accept(0.5);
    assert_eq!(moved, solo(&unmoved_setup, request.clone()));
    let truth = unmoved_setup
        .build()
        .target()
        .greedy_reply(&request.prompt, 1900, &[]);
    assert_eq!(moved, truth);
}

#[test]
fn a_growing_sampled_reply_moves_twice_and_equals_an_unmoved_reply() {
    let setup = Setup::spec(&ladder(), 64)
        .drafts(DraftMode::Ngram, WINDOW - 1)
        .prefill_chunk(16);
    let request = sampled(prompt(40, 5), 1900, 77);
    let (moved, moves) = growing(&setup, request.clone());
    assert_moved_twice_at_the_nominal_sizes(&moves);
    let unmoved_setup = Setup::spec(&[cap(2048)], 64)
        .drafts(DraftMode::Ngram, WINDOW - 1)
        .prefill_chunk(16);
    assert_eq!(moved, solo(&unmoved_setup, request));
}

#[test]
fn two_replies_outgrowing_at_once_one_moves_the_other_pauses_then_moves() {
    // The receipt's `4096x3 --parallel 4` (design §13), scaled: an engine's session and three small ones.
    let setup = Setup::spec(&[cap(2048), cap(128), cap(128), cap(128)], 32);
    let a_request = greedy(prompt(10, 1), 600);
    let b_request = greedy(prompt(10, 2), 600);
    let mut engine = setup.build();
    let a = engine.submit(a_request.clone()).unwrap();
    let b = engine.submit(b_request.clone()).unwrap();
    let mut replies = Replies::default();
    let mut b_paused = false;
    let mut b_moved_after_a_finished = false;
    for _ in 0..5_000 {
        if engine.is_idle() {
            break;
        }
        replies.absorb(engine.step());
        check_sessions(&engine);
        if state_of(&engine, b) == Some(SlotState::Paused) {
            b_paused = true;
            assert_eq!(session_of(&engine, a), Some(SessionId(0)), "a moved first");
        }
        if session_of(&engine, b) == Some(SessionId(0)) && !b_moved_after_a_finished {
            assert!(b_paused, "b waited before moving");
            assert_eq!(
                replies.reason(a),
                Some(&FinishReason::Length),
                "a finished first"
            );
            b_moved_after_a_finished = true;
        }
    }
    assert!(engine.is_idle());
    assert!(b_paused && b_moved_after_a_finished);
    let c = engine.counters();
    assert_eq!((c.moves, c.pauses), (2, 1), "{c:?}");
    assert_eq!(replies.reply(a), solo(&setup, a_request));
    assert_eq!(replies.reply(b), solo(&setup, b_request));
}

/// A request whose reply end is exactly the largest session's capacity, with seven drafts a
/// window of which nine in ten are wrong: it creeps into the margin a token or two per round.
fn near_the_end(largest_nominal: u64) -> lane::Request {
    let window = 8;
    let prompt_len = 30;
    let max_new = largest_nominal + MARGIN - prompt_len - window;
    greedy(prompt(prompt_len as usize, 11), max_new)
}

fn runs_to_its_end_without_pausing(
    setup: &Setup,
    others: usize,
) -> lane::Engine<lane::testing::FakeTarget> {
    let mut engine = setup.build();
    let request = near_the_end(256);
    let id = engine.submit(request.clone()).unwrap();
    // Others fill the smaller sessions and outgrow them; they may pause, the largest never does.
    for i in 0..others {
        engine
            .submit(greedy(prompt(10, 50 + i as u64), 200))
            .unwrap();
    }
    let mut replies = Replies::default();
    let mut deepest = 0;
    for _ in 0..5_000 {
        if engine.is_idle() {
            break;
        }
        replies.absorb(engine.step());
        check_sessions(&engine);
        let largest = engine.slots()[0];
        assert_ne!(
            largest.state,
            SlotState::Paused,
            "the largest session's stream paused"
        );
        if largest.holder == Some(id) {
            deepest = deepest.max(largest.used_tokens);
        }
    }
    assert!(engine.is_idle());
    assert!(
        deepest > 256,
        "reached {deepest}: the stream should run into the margin"
    );
    assert_eq!(replies.reason(id), Some(&FinishReason::Length));
    let truth = engine
        .target()
        .greedy_reply(&request.prompt, request.max_new_tokens, &[]);
    assert_eq!(replies.reply(id), truth);
    let c = engine.counters();
    assert!(
        c.draft_accepted * 3 < c.draft_proposed,
        "most drafts rejected: {c:?}"
    );
    engine
}

#[test]
fn near_the_end_of_the_largest_session_with_most_drafts_rejected_it_never_pauses() {
    // With a growth allowance of 64 the near-end request (30 + 64 + 8) needs the largest session
    // and the others (10 + 64 + 8) start in the small ones, outgrow them and pause.
    let setup = Setup::spec(&[cap(256), cap(64), cap(64)], 64)
        .drafts(DraftMode::Mtp, 7)
        .draft_accept(0.1);
    let engine = runs_to_its_end_without_pausing(&setup, 2);
    let c = engine.counters();
    assert!(
        c.pauses >= 2 && c.moves >= 2,
        "the others paused, then moved: {c:?}"
    );
}

#[test]
fn near_the_end_of_a_session_with_the_spec_unset_and_most_drafts_rejected_it_finishes() {
    let setup = Setup::unset(&[cap(256), cap(256)])
        .drafts(DraftMode::Mtp, 7)
        .draft_accept(0.1);
    let engine = runs_to_its_end_without_pausing(&setup, 1);
    assert_eq!(engine.counters().pauses, 0);
}

#[test]
fn a_running_stream_claims_a_larger_session_before_a_new_request_does() {
    let mut engine = Setup::spec(&[cap(1024), cap(128)], 32).build();
    let running = engine.submit(greedy(prompt(10, 1), 500)).unwrap();
    let mut replies = Replies::default();
    // Windows of one token: it must move in the round after it holds 128 positions.
    while engine.slots()[1].used_tokens < 128 {
        replies.absorb(engine.step());
        assert!(engine.counters().rounds < 1000);
    }
    assert_eq!(session_of(&engine, running), Some(SessionId(1)));
    // A new request that only the engine's session can hold arrives in that very round.
    let newcomer = engine.submit(greedy(prompt(300, 2), 100)).unwrap();
    replies.absorb(engine.step());
    assert_eq!(session_of(&engine, running), Some(SessionId(0)));
    assert_eq!(
        session_of(&engine, newcomer),
        None,
        "it waits for the engine's session"
    );
    assert_eq!(engine.counters().pauses, 0);
    run_until_idle(&mut engine, &mut replies, 5000);
    assert_eq!(replies.reason(newcomer), Some(&FinishReason::Length));
}
