//! The thinking budget: after N tokens inside `<think>`, `</think>` is forced, with or without
//! drafts, alone or beside other streams.

mod common;

use common::*;
use lane::{DraftMode, Request, ThinkingBudget};

const OPEN: u32 = 46;
const CLOSE: u32 = 47;

fn thinking(prompt_salt: u64, budget: u64) -> Request {
    let mut prompt = prompt(12, prompt_salt);
    prompt.push(OPEN);
    Request {
        thinking: Some(ThinkingBudget {
            open_token: OPEN,
            close_token: CLOSE,
            max_thinking_tokens: budget,
        }),
        ..greedy(prompt, 40)
    }
}

/// Tokens inside the thinking section the prompt opened, before the first close tag.
fn thinking_len(reply: &[u32]) -> usize {
    reply
        .iter()
        .position(|&t| t == CLOSE)
        .unwrap_or(reply.len())
}

#[test]
fn the_close_tag_comes_at_the_latest_after_the_budget() {
    let setup = Setup::unset(&[cap(256)]);
    for (salt, budget) in [(1, 0), (2, 3), (3, 10)] {
        let reply = solo(&setup, thinking(salt, budget));
        let inside = thinking_len(&reply);
        assert!(
            inside <= budget as usize,
            "salt {salt}: {inside} thinking tokens > {budget}"
        );
        assert_eq!(reply.get(inside), Some(&CLOSE), "salt {salt}: {reply:?}");
    }
}

#[test]
fn without_a_budget_the_model_thinks_as_it_likes() {
    let setup = Setup::unset(&[cap(256)]);
    let mut request = thinking(2, 3);
    request.thinking = None;
    let free = solo(&setup, request);
    let budgeted = solo(&setup, thinking(2, 3));
    assert_ne!(
        free, budgeted,
        "the budget changed nothing: the test proves nothing"
    );
    assert_eq!(free[..3], budgeted[..3], "the same model up to the budget");
}

#[test]
fn drafts_never_change_a_budgeted_greedy_reply() {
    let plain = solo(&Setup::unset(&[cap(256)]), thinking(4, 5));
    for (mode, k) in [
        (DraftMode::Ngram, 3),
        (DraftMode::Mtp, 1),
        (DraftMode::Mtp, 4),
    ] {
        let setup = Setup::unset(&[cap(256)]).drafts(mode, k).draft_accept(0.8);
        assert_eq!(
            solo(&setup, thinking(4, 5)),
            plain,
            "{mode:?} with {k} drafts"
        );
    }
}

#[test]
fn budgeted_replies_beside_others_equal_their_solo_replies() {
    let setup = Setup::unset(&[cap(256); 4]).drafts(DraftMode::Mtp, 2);
    let requests: Vec<Request> = (0..4).map(|i| thinking(10 + i, i * 2)).collect();
    let alone: Vec<Vec<u32>> = requests.iter().map(|r| solo(&setup, r.clone())).collect();
    let mut engine = setup.build();
    let ids: Vec<_> = requests
        .into_iter()
        .map(|r| engine.submit(r).unwrap())
        .collect();
    let mut replies = Replies::default();
    run_until_idle(&mut engine, &mut replies, 10_000);
    for (id, expected) in ids.iter().zip(alone) {
        assert_eq!(replies.reply(*id), expected);
    }
}
