//! design §4, compatibility path: with no slot-contexts spec, a new stream takes the first free
//! session, a reply that cannot fit fails with `context_full`, and nothing moves, pauses or waits
//! for a fitting session.

mod common;

use common::*;
use lane::{FinishReason, Refusal, SessionId};

#[test]
fn spec_unset_takes_the_first_free_session_not_the_smallest() {
    // Pinned against smallest fit: unequal sessions, the small one second.
    let capacities = [cap(512), cap(128), cap(512)];
    let mut unset = Setup::unset(&capacities).build();
    let mut set = Setup::spec(&capacities, 64).build();
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(unset.submit(greedy(prompt(5, i), 10)).unwrap());
        set.submit(greedy(prompt(5, i), 10)).unwrap();
    }
    unset.step();
    set.step();
    for (id, session) in ids.iter().zip([0, 1, 2]) {
        assert_eq!(session_of(&unset, *id), Some(SessionId(session)));
    }
    assert_eq!(
        session_of(&set, ids[0]),
        Some(SessionId(1)),
        "smallest fit differs"
    );
}

#[test]
fn spec_unset_refuses_a_reply_longer_than_a_session_with_context_full() {
    let mut engine = Setup::unset(&[cap(128), cap(128)]).build();
    assert_eq!(
        engine.submit(greedy(prompt(100, 1), 100)),
        Err(Refusal::ContextFull {
            reply_end: 201,
            largest: 160
        })
    );
    assert_eq!(
        engine.submit(greedy(prompt(10, 1), u64::MAX)),
        Err(Refusal::ContextFull {
            reply_end: u64::MAX,
            largest: 160
        })
    );
    // Exactly the capacity fits: no growth allowance, the whole reply end counts.
    assert!(engine.submit(greedy(prompt(100, 1), 59)).is_ok());
    assert_eq!(engine.queue_depth(), 1);
}

#[test]
fn spec_unset_refuses_what_the_first_free_session_cannot_hold_rather_than_waiting() {
    let mut engine = Setup::unset(&[cap(128), cap(512)]).build();
    let id = engine.submit(greedy(prompt(200, 1), 10)).unwrap();
    let mut replies = Replies::default();
    replies.absorb(engine.step());
    assert!(matches!(
        replies.reason(id),
        Some(FinishReason::ContextFull { reply_end: 211, .. })
    ));
    assert!(engine.is_idle());
}

#[test]
fn spec_unset_never_moves_pauses_or_waits_for_a_fitting_session() {
    let setup = Setup::unset(&[cap(256), cap(256), cap(256)]);
    let mut engine = setup.build();
    let requests: Vec<_> = (0..7).map(|i| greedy(prompt(20, i), 220)).collect();
    let ids: Vec<_> = requests
        .iter()
        .map(|r| engine.submit(r.clone()).unwrap())
        .collect();
    let mut replies = Replies::default();
    let mut start_order = Vec::new();
    while !engine.is_idle() {
        replies.absorb(engine.step());
        check_sessions(&engine);
        for slot in engine.slots() {
            if let Some(holder) = slot.holder {
                if !start_order.contains(&holder) {
                    start_order.push(holder);
                }
            }
        }
    }
    assert_eq!(start_order, ids, "first in, first out");
    let c = engine.counters();
    assert_eq!((c.moves, c.pauses, c.admission_waits), (0, 0, 0), "{c:?}");
    for (id, request) in ids.iter().zip(requests) {
        assert_eq!(replies.reason(*id), Some(&FinishReason::Length));
        assert_eq!(replies.reply(*id), solo(&setup, request));
    }
}
