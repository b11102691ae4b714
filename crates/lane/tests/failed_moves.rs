//! design §6 and design §14.4: a paused stream waits only on `LaneMemory`; any
//! other failed move ends that stream with an error and frees its session at once, so no paused
//! stream is stranded when the last larger session frees.

mod common;

use common::*;
use lane::testing::FakeTarget;
use lane::{Engine, FinishReason, MoveFault, SessionId, SlotState, StreamId};

/// An engine's session held by `long`, and three small sessions whose streams outgrow them and
/// pause (nothing larger is free) before `long` finishes.
struct Scenario {
    setup: Setup,
    engine: Engine<FakeTarget>,
    long: StreamId,
    paused: [StreamId; 3],
    replies: Replies,
}

fn scenario() -> Scenario {
    let setup = Setup::spec(&[cap(2048), cap(128), cap(128), cap(128)], 32);
    let mut engine = setup.build();
    // 200 + 32 + 1 only fits the engine's session; it ends after ~150 rounds.
    let long = engine.submit(greedy(prompt(200, 9), 150)).unwrap();
    let paused = [1, 2, 3].map(|i| engine.submit(greedy(prompt(10, i), 500)).unwrap());
    let mut replies = Replies::default();
    while engine.paused_streams() < 3 {
        replies.absorb(engine.step());
        check_sessions(&engine);
        assert!(engine.counters().rounds < 1000);
    }
    assert_eq!(session_of(&engine, long), Some(SessionId(0)));
    Scenario {
        setup,
        engine,
        long,
        paused,
        replies,
    }
}

/// Steps until `long` finishes and returns that round's events.
fn until_long_finishes(s: &mut Scenario) {
    while s.replies.reason(s.long).is_none() {
        let events = s.engine.step();
        s.replies.absorb(events);
        check_sessions(&s.engine);
        assert!(s.engine.counters().rounds < 1000);
    }
}

#[test]
fn when_the_last_larger_session_frees_a_failed_move_ends_one_another_moves_and_one_waits() {
    for fault in [MoveFault::Device("ecc error".into()), MoveFault::NotSettled] {
        let mut s = scenario();
        let [failed, moved, waiting] = s.paused;
        let failed_session = session_of(&s.engine, failed).unwrap();
        s.engine.target_mut().faults.fail_next_move(fault.clone());
        until_long_finishes(&mut s);

        // In the very round the engine's session freed:
        assert!(
            matches!(s.replies.reason(failed), Some(FinishReason::Error(m)) if m.contains(&fault.to_string())),
            "{:?}",
            s.replies.reason(failed)
        );
        assert!(!s.engine.is_live(failed));
        assert_eq!(s.engine.slots()[failed_session.0].state, SlotState::Free);
        assert_eq!(session_of(&s.engine, moved), Some(SessionId(0)));
        assert_eq!(state_of(&s.engine, waiting), Some(SlotState::Paused));

        run_until_idle(&mut s.engine, &mut s.replies, 5_000);
        for id in [moved, waiting] {
            assert_eq!(s.replies.reason(id), Some(&FinishReason::Length));
            let request = greedy(prompt(10, id.0), 500);
            assert_eq!(s.replies.reply(id), solo(&s.setup, request), "{id}");
        }
        let c = s.engine.counters();
        assert_eq!(
            (c.moves, c.move_faults, c.streams_failed),
            (2, 1, 1),
            "{c:?}"
        );
    }
}

#[test]
fn lane_memory_keeps_a_paused_stream_waiting_until_a_later_release() {
    let mut s = scenario();
    let [first, second, third] = s.paused;
    s.engine
        .target_mut()
        .faults
        .fail_next_move(MoveFault::LaneMemory);
    until_long_finishes(&mut s);
    assert_eq!(state_of(&s.engine, first), Some(SlotState::Paused));
    assert_eq!(session_of(&s.engine, second), Some(SessionId(0)));
    assert_eq!(state_of(&s.engine, third), Some(SlotState::Paused));

    run_until_idle(&mut s.engine, &mut s.replies, 5_000);
    for id in s.paused {
        assert_eq!(s.replies.reason(id), Some(&FinishReason::Length));
        let request = greedy(prompt(10, id.0), 500);
        assert_eq!(s.replies.reply(id), solo(&s.setup, request), "{id}");
    }
    let c = s.engine.counters();
    assert_eq!(
        (c.moves, c.move_faults, c.streams_failed),
        (3, 1, 0),
        "{c:?}"
    );
}
