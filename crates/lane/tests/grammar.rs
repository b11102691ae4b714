//! Constrained decoding: every token a constrained stream draws is one its grammar allows, the
//! reply ends when the grammar is complete, stop tokens only where it may end, and a constrained
//! reply is the same alone, beside other streams, moved, and with n-gram or MTP drafts.

mod common;

use common::*;
use lane::testing::ScriptGrammar;
use lane::{DraftMode, FinishReason, Request};

const VOCAB: usize = 48;

/// Odd positions allow three tokens, even ones seven: the model's favourite is often banned.
fn script(length: usize) -> ScriptGrammar {
    ScriptGrammar {
        steps: vec![vec![3, 9, 17, 20, 31, 40, 44], vec![5, 6, 30]],
        may_end_from: usize::MAX,
        length,
        vocab: VOCAB,
    }
}

fn constrained(salt: u64, max_new: u64, grammar: ScriptGrammar) -> Request {
    Request {
        grammar: Some(grammar.into_grammar()),
        ..greedy(prompt(10, salt), max_new)
    }
}

fn run(setup: &Setup, requests: &[Request]) -> Vec<(Vec<u32>, FinishReason)> {
    let mut engine = setup.build();
    lane::testing::run_to_end(&mut engine, requests)
}

#[test]
fn every_token_is_one_the_grammar_allows_and_a_complete_grammar_ends_the_reply() {
    let setup = Setup::unset(&[cap(256)]);
    let grammar = script(12);
    let free = solo(&setup, greedy(prompt(10, 1), 40));
    let [(reply, reason)] = run(&setup, &[constrained(1, 40, grammar.clone())])
        .try_into()
        .unwrap();
    assert_eq!(reason, FinishReason::Stop, "complete after 12 tokens");
    assert_eq!(reply.len(), 12);
    for (i, &t) in reply.iter().enumerate() {
        assert!(grammar.allows(i, t), "position {i}: {t} in {reply:?}");
    }
    assert_ne!(
        reply[..12],
        free[..12],
        "the grammar changed nothing: the test proves nothing"
    );
}

#[test]
fn a_grammar_longer_than_max_tokens_ends_by_length() {
    let setup = Setup::unset(&[cap(256)]);
    let [(reply, reason)] = run(&setup, &[constrained(2, 5, script(50))])
        .try_into()
        .unwrap();
    assert_eq!((reply.len(), reason), (5, FinishReason::Length));
}

#[test]
fn stop_tokens_are_drawn_only_where_the_grammar_may_end() {
    let setup = Setup::unset(&[cap(256)]);
    // A stop token the model likes: the greedy reply's own third token.
    let free = solo(&setup, greedy(prompt(10, 3), 20));
    let stop = free[2];
    let everything: Vec<u32> = (0..VOCAB as u32).filter(|&t| t != stop).collect();
    let mut grammar = ScriptGrammar {
        steps: vec![everything],
        may_end_from: usize::MAX,
        length: 20,
        vocab: VOCAB,
    };
    let request = |grammar: ScriptGrammar| Request {
        stop_tokens: vec![stop],
        ..constrained(3, 20, grammar)
    };
    let [(never, reason)] = run(&setup, &[request(grammar.clone())]).try_into().unwrap();
    assert!(
        !never.contains(&stop) && reason == FinishReason::Stop,
        "{never:?}"
    );
    assert_eq!(
        never.len(),
        20,
        "ended by the grammar, not by the stop token"
    );
    grammar.may_end_from = 2;
    let [(ends, reason)] = run(&setup, &[request(grammar)]).try_into().unwrap();
    assert_eq!((ends, reason), (free[..2].to_vec(), FinishReason::Stop));
}

#[test]
fn a_constrained_reply_is_the_same_alone_beside_others_and_with_drafts() {
    let plain = Setup::unset(&[cap(256); 8]);
    let requests: Vec<Request> = (0..6)
        .map(|i| {
            if i % 2 == 0 {
                constrained(10 + i, 30, script(200))
            } else {
                greedy(prompt(10, 10 + i), 30)
            }
        })
        .collect();
    let (_, alone) = together_equals_solo(&plain, &requests);
    for mode in [DraftMode::Ngram, DraftMode::Mtp] {
        let drafting = Setup::unset(&[cap(256); 8])
            .drafts(mode, 3)
            .draft_accept(0.7);
        let (_, with_drafts) = together_equals_solo(&drafting, &requests);
        assert_eq!(with_drafts, alone, "{mode:?}");
    }
}

#[test]
fn a_constrained_stream_that_moves_keeps_its_reply() {
    // Sessions of 24 and 256: the stream starts small and moves while decoding.
    let moving = Setup::spec(&[cap(24), cap(256)], 0);
    let fixed = Setup::unset(&[cap(256)]);
    let request = constrained(4, 60, script(200));
    let moved = solo(&moving, request.clone());
    assert_eq!(moved, solo(&fixed, request));
    assert_eq!(moved.len(), 60);
}

#[test]
fn drafts_the_grammar_rejects_are_never_verified() {
    // All MTP drafts right: a window verifies every draft it carries, so any draft that is not
    // the grammar's would show up as a token the grammar does not allow.
    let setup = Setup::unset(&[cap(256)])
        .drafts(DraftMode::Mtp, 3)
        .draft_accept(1.0);
    let grammar = script(40);
    let mut engine = setup.build();
    let [(reply, _)] =
        lane::testing::run_to_end(&mut engine, &[constrained(5, 40, grammar.clone())])
            .try_into()
            .unwrap();
    for (i, &t) in reply.iter().enumerate() {
        assert!(grammar.allows(i, t), "position {i}: {t}");
    }
    let counters = engine.counters();
    assert!(
        counters.draft_proposed < 3 * 40,
        "drafts were cut by the grammar ({} proposed)",
        counters.draft_proposed
    );
}
