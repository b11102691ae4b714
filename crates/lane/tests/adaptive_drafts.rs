//! Each stream proposes as many drafts as its own acceptance makes worth it (`DraftStats`): all
//! of them while they are accepted, few once they are not, and the reply is the same either way.

mod common;

use common::*;
use lane::testing::FakeTarget;
use lane::{DraftMode, Engine};

const MAX_NEW: u64 = 200;

/// Runs one greedy stream to its end: (reply, drafts proposed, rounds after the first token).
fn run(engine: &mut Engine<FakeTarget>) -> (Vec<u32>, u64, u64) {
    let id = engine.submit(greedy(prompt(20, 3), MAX_NEW)).unwrap();
    let mut replies = Replies::default();
    run_until_idle(engine, &mut replies, 10_000);
    let c = engine.counters();
    // One round reads the prompt and draws the first token.
    (replies.reply(id), c.draft_proposed, c.rounds - 1)
}

fn setup(accept: f64, cost_percent: u32) -> Setup {
    let mut setup = Setup::unset(&[cap(1024)])
        .drafts(DraftMode::Mtp, 4)
        .draft_accept(accept);
    setup.config.draft_cost_percent = cost_percent;
    setup
}

#[test]
fn drafts_that_are_always_accepted_keep_the_full_window() {
    let (reply, proposed, rounds) = run(&mut setup(1.0, 25).build());
    assert!(rounds <= MAX_NEW / 5 + 2, "{rounds} rounds");
    assert!(
        proposed >= 4 * (rounds - 2),
        "{proposed} drafts in {rounds} rounds"
    );
    let (plain, _, _) = run(&mut setup(1.0, 25).drafts(DraftMode::None, 0).build());
    assert_eq!(reply, plain);
}

#[test]
fn drafts_that_are_never_accepted_are_mostly_not_proposed() {
    let (reply, proposed, rounds) = run(&mut setup(0.0, 25).build());
    let (fixed_reply, fixed_proposed, fixed_rounds) = run(&mut setup(0.0, 0).build());
    // A cost of 0 always proposes the full window: 4 per round (fewer only near the end).
    assert!(fixed_proposed >= 4 * (fixed_rounds - 4), "{fixed_proposed}");
    assert_eq!(
        fixed_rounds,
        MAX_NEW - 1,
        "nothing accepted: one token a round"
    );
    assert!(
        proposed * 15 < fixed_proposed,
        "adaptive {proposed} vs fixed {fixed_proposed} drafts"
    );
    assert_eq!(rounds, MAX_NEW - 1);
    assert!(proposed > 0, "drafting is tried again now and then");
    assert_eq!(reply, fixed_reply);
}

#[test]
fn the_window_follows_a_middling_acceptance_between_the_extremes() {
    let (_, proposed, rounds) = run(&mut setup(0.7, 25).build());
    let per_round = proposed as f64 / rounds as f64;
    assert!(
        per_round > 0.5 && per_round < 4.0,
        "{per_round} drafts a round at 70 % acceptance"
    );
}
