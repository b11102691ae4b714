//! The lane-core rule of design §14.5: a release can end another stream (it frees a session, a paused
//! stream retries its move, the move fails and ends it), so the engine releases finished streams
//! until none is left, from `step` and from `discard`. With a single pass over the streams
//! finished beforehand, the stream ended during the release would keep its session and stay live,
//! and both tests fail.

mod common;

use common::*;
use lane::testing::FakeTarget;
use lane::{Engine, Event, FinishReason, MoveFault, SessionId, SlotState, StreamId};

/// `long` holds the engine's session; `paused` outgrew the small one and waits for it. Releasing
/// the engine's session (once) makes the next move fail with a device error.
fn scenario(long_max_new: u64) -> (Engine<FakeTarget>, StreamId, StreamId, Replies) {
    let mut engine = Setup::spec(&[cap(1024), cap(128)], 32).build();
    let mut fired = false;
    engine
        .target_mut()
        .on_release(Box::new(move |session, faults| {
            if session == SessionId(0) && !fired {
                fired = true;
                faults.fail_next_move(MoveFault::Device("lost the device during release".into()));
            }
        }));
    let long = engine.submit(greedy(prompt(200, 1), long_max_new)).unwrap();
    let paused = engine.submit(greedy(prompt(10, 2), 400)).unwrap();
    let mut replies = Replies::default();
    while engine.paused_streams() == 0 {
        replies.absorb(engine.step());
        assert!(engine.counters().rounds < 1000);
    }
    assert_eq!(session_of(&engine, long), Some(SessionId(0)));
    assert_eq!(state_of(&engine, paused), Some(SlotState::Paused));
    (engine, long, paused, replies)
}

fn assert_gone(engine: &Engine<FakeTarget>, stream: StreamId) {
    assert!(!engine.is_live(stream), "{stream} outlived its job");
    assert!(engine.slots().iter().all(|s| s.holder != Some(stream)));
    engine.check_invariants().unwrap();
}

fn failed(events: &[Event], stream: StreamId) -> bool {
    events.iter().any(|e| {
        matches!(e, Event::Finished { stream: s, reason: FinishReason::Error(_), .. } if *s == stream)
    })
}

#[test]
fn a_stream_ended_by_another_release_during_step_leaves_the_live_list() {
    let (mut engine, long, paused, mut replies) = scenario(150);
    loop {
        let events = engine.step();
        let long_done = events
            .iter()
            .any(|e| matches!(e, Event::Finished { stream, .. } if *stream == long));
        if long_done {
            assert!(
                failed(&events, paused),
                "the release ended the paused stream"
            );
            break;
        }
        replies.absorb(events);
        assert!(engine.counters().rounds < 1000);
    }
    assert_gone(&engine, long);
    assert_gone(&engine, paused);
    assert!(engine.slots().iter().all(|s| s.state == SlotState::Free));
    assert!(engine.is_idle());
}

#[test]
fn a_stream_ended_by_another_release_during_discard_leaves_the_live_list() {
    let (mut engine, long, paused, _) = scenario(800);
    assert!(engine.discard(long));
    assert_gone(&engine, long);
    assert_gone(&engine, paused);
    assert!(engine.slots().iter().all(|s| s.state == SlotState::Free));
    let events = engine.step();
    assert!(failed(&events, paused));
    assert!(
        events.iter().all(|e| e.stream() != long),
        "a discarded stream gets no event"
    );
    assert!(engine.is_idle());
}
