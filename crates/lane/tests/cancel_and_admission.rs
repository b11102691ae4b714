//! Cancels, the admission queue (no head-of-line blocking, with a bound), refusals, and the
//! engine's behaviour when the device fails.

mod common;

use common::*;
use lane::testing::{FakeConfig, FakeTarget};
use lane::{
    ConfigError, DraftMode, Engine, EngineConfig, Event, FinishReason, Policy, Refusal, Request,
    SamplingParams, SessionId, SlotState,
};
use slots::admission::HEAD_PASS_LIMIT;

#[test]
fn cancel_frees_the_session_within_one_round() {
    let mut engine = Setup::spec(&[cap(256)], 32).build();
    let running = engine.submit(greedy(prompt(10, 1), 200)).unwrap();
    let waiting = engine.submit(greedy(prompt(10, 2), 20)).unwrap();
    for _ in 0..5 {
        engine.step();
    }
    assert_eq!(session_of(&engine, running), Some(SessionId(0)));
    assert!(engine.cancel(running));
    assert_eq!(engine.slots()[0].state, SlotState::Free, "freed at once");
    let events = engine.step();
    assert!(events.iter().any(|e| matches!(e,
        Event::Finished { stream, reason: FinishReason::Cancelled, .. } if *stream == running)));
    assert_eq!(
        session_of(&engine, waiting),
        Some(SessionId(0)),
        "the next request started in the same round"
    );
    assert!(!engine.cancel(running), "already gone");
    check_sessions(&engine);
}

#[test]
fn cancelling_a_queued_request_removes_it_with_a_final_event() {
    let mut engine = Setup::spec(&[cap(256)], 32).build();
    engine.submit(greedy(prompt(10, 1), 50)).unwrap();
    let queued = engine.submit(greedy(prompt(10, 2), 50)).unwrap();
    let mut replies = Replies::default();
    replies.absorb(engine.step());
    assert_eq!(engine.queue_depth(), 1);
    assert!(engine.cancel(queued));
    assert_eq!(engine.queue_depth(), 0);
    run_until_idle(&mut engine, &mut replies, 1000);
    assert_eq!(replies.reason(queued), Some(&FinishReason::Cancelled));
    assert!(replies.reply(queued).is_empty());
}

/// The engine's session held by a long stream; a large request waits at the head for it.
fn blocked_head() -> (Engine<FakeTarget>, Replies, lane::StreamId) {
    let mut engine = Setup::spec(&[cap(1024), cap(64)], 32).build();
    let mut replies = Replies::default();
    engine.submit(greedy(prompt(100, 1), 500)).unwrap();
    replies.absorb(engine.step());
    let head = engine.submit(greedy(prompt(300, 2), 100)).unwrap();
    (engine, replies, head)
}

#[test]
fn a_waiting_request_that_fits_passes_a_blocked_head() {
    let (mut engine, mut replies, head) = blocked_head();
    let small = engine.submit(greedy(prompt(5, 3), 20)).unwrap();
    replies.absorb(engine.step());
    assert_eq!(session_of(&engine, small), Some(SessionId(1)));
    assert_eq!(engine.queue_depth(), 1, "the head still waits");
    assert!(engine.counters().admission_waits >= 1);
    run_until_idle(&mut engine, &mut replies, 5000);
    assert_eq!(replies.reason(head), Some(&FinishReason::Length));
}

#[test]
fn the_head_is_served_after_the_bound_on_requests_passing_it() {
    let (mut engine, mut replies, head) = blocked_head();
    let smalls: Vec<_> = (0..HEAD_PASS_LIMIT + 3)
        .map(|i| engine.submit(greedy(prompt(5, 10 + i as u64), 20)).unwrap())
        .collect();
    let mut started = Vec::new();
    let mut held_back_with_a_free_session = false;
    loop {
        replies.absorb(engine.step());
        assert!(engine.counters().rounds < 5000);
        if session_of(&engine, head).is_some() {
            // Once the head starts, the next small request may start in the same round.
            break;
        }
        for slot in engine.slots() {
            if let Some(holder) = slot.holder {
                if smalls.contains(&holder) && !started.contains(&holder) {
                    started.push(holder);
                }
            }
        }
        if started.len() == HEAD_PASS_LIMIT as usize && engine.slots()[1].holder.is_none() {
            held_back_with_a_free_session = true;
        }
    }
    assert_eq!(started, smalls[..HEAD_PASS_LIMIT as usize]);
    assert!(held_back_with_a_free_session);
    run_until_idle(&mut engine, &mut replies, 5000);
    for id in smalls.iter().chain([&head]) {
        assert_eq!(replies.reason(*id), Some(&FinishReason::Length), "{id}");
    }
}

#[test]
fn a_full_queue_refuses_at_once() {
    let mut engine = Setup::spec(&[cap(256)], 32).queue_limit(2).build();
    engine.submit(greedy(prompt(5, 1), 5)).unwrap();
    engine.submit(greedy(prompt(5, 2), 5)).unwrap();
    assert_eq!(
        engine.submit(greedy(prompt(5, 3), 5)),
        Err(Refusal::QueueFull { limit: 2 })
    );
}

#[test]
fn spec_set_refuses_a_reply_end_beyond_the_largest_session_and_queues_the_rest() {
    let mut engine = Setup::spec(&[cap(256), cap(64)], 32).build();
    assert_eq!(
        engine.submit(greedy(prompt(200, 1), 100)),
        Err(Refusal::ContextFull {
            reply_end: 301,
            largest: 288
        })
    );
    assert!(engine.submit(greedy(prompt(200, 1), 87)).is_ok());
}

#[test]
fn invalid_requests_are_refused_naming_the_parameter() {
    let config = FakeConfig {
        has_drafter: false,
        ..FakeConfig::default()
    };
    let target = FakeTarget::new(&[cap(256)], config);
    let mut engine = Engine::new(target, EngineConfig::new(Policy::FirstFree)).unwrap();
    let base = greedy(prompt(5, 1), 5);
    let with = |f: &dyn Fn(&mut Request)| {
        let mut r = base.clone();
        f(&mut r);
        r
    };
    let sampling = |f: &dyn Fn(&mut SamplingParams)| with(&|r| f(&mut r.sampling));
    let cases: Vec<(Request, &str)> = vec![
        (with(&|r| r.prompt.clear()), "prompt"),
        (with(&|r| r.prompt[0] = 4000), "prompt"),
        (with(&|r| r.max_new_tokens = 0), "max_tokens"),
        (sampling(&|s| s.temperature = -1.0), "temperature"),
        (sampling(&|s| s.temperature = f32::NAN), "temperature"),
        (sampling(&|s| s.top_p = 0.0), "top_p"),
        (sampling(&|s| s.min_p = 1.5), "min_p"),
        (with(&|r| r.top_logprobs = 21), "top_logprobs"),
        (with(&|r| r.draft = Some(DraftMode::Mtp)), "draft"),
    ];
    for (request, param) in cases {
        match engine.submit(request) {
            Err(Refusal::Invalid { param: p, .. }) => assert_eq!(p, param),
            other => panic!("{param}: {other:?}"),
        }
    }
    assert!(engine.is_idle(), "nothing queued");
}

#[test]
fn a_configuration_the_engine_cannot_run_is_refused() {
    let fake = |has_drafter| {
        FakeTarget::new(
            &[cap(256)],
            FakeConfig {
                has_drafter,
                ..FakeConfig::default()
            },
        )
    };
    let config = |draft, draft_tokens| EngineConfig {
        draft,
        draft_tokens,
        ..EngineConfig::new(Policy::FirstFree)
    };
    assert_eq!(
        Engine::new(fake(true), config(DraftMode::Mtp, 32)).err(),
        Some(ConfigError::WindowTooWide { draft_tokens: 32 })
    );
    assert!(Engine::new(fake(true), config(DraftMode::Mtp, 31)).is_ok());
    assert_eq!(
        Engine::new(fake(false), config(DraftMode::Mtp, 3)).err(),
        Some(ConfigError::NoDrafter)
    );
    assert_eq!(
        Engine::new(
            FakeTarget::new(&[], FakeConfig::default()),
            config(DraftMode::None, 0)
        )
        .err(),
        Some(ConfigError::NoSessions)
    );
}

#[test]
fn fail_all_ends_every_stream_and_frees_every_session() {
    let mut engine = Setup::spec(&[cap(256), cap(64)], 32).build();
    let ids: Vec<_> = (0..4)
        .map(|i| engine.submit(greedy(prompt(10, i), 100)).unwrap())
        .collect();
    let mut replies = Replies::default();
    for _ in 0..3 {
        replies.absorb(engine.step());
    }
    replies.absorb(engine.fail_all("shutting down"));
    for id in ids {
        assert_eq!(
            replies.reason(id),
            Some(&FinishReason::Error("shutting down".into()))
        );
    }
    assert!(engine.is_idle());
    assert!(engine.slots().iter().all(|s| s.state == SlotState::Free));
    assert!(engine.target().releases().len() >= 2);
}

#[test]
fn a_failed_round_ends_its_streams_with_an_error_and_the_engine_goes_on() {
    let setup = Setup::spec(&[cap(256), cap(256)], 32);
    let mut engine = setup.build();
    let a = engine.submit(greedy(prompt(10, 1), 50)).unwrap();
    let b = engine.submit(greedy(prompt(10, 2), 50)).unwrap();
    let mut replies = Replies::default();
    replies.absorb(engine.step());
    engine
        .target_mut()
        .faults
        .fail_next_forward("out of memory");
    replies.absorb(engine.step());
    for id in [a, b] {
        assert!(
            matches!(replies.reason(id), Some(FinishReason::Error(m)) if m.contains("out of memory"))
        );
    }
    assert!(engine.slots().iter().all(|s| s.state == SlotState::Free));
    let c = engine.submit(greedy(prompt(10, 3), 50)).unwrap();
    run_until_idle(&mut engine, &mut replies, 1000);
    assert_eq!(replies.reply(c), solo(&setup, greedy(prompt(10, 3), 50)));
}

#[test]
fn token_events_carry_logprobs_and_the_alternatives_asked_for() {
    let mut engine = Setup::spec(&[cap(256)], 32).build();
    let id = engine
        .submit(Request {
            top_logprobs: 3,
            ..greedy(prompt(10, 1), 5)
        })
        .unwrap();
    let mut tokens = 0;
    while !engine.is_idle() {
        for event in engine.step() {
            if let Event::Token {
                stream,
                token,
                logprob,
                top_logprobs,
            } = event
            {
                assert_eq!(stream, id);
                tokens += 1;
                assert_eq!(top_logprobs.len(), 3);
                // Greedy: the token is the most likely alternative, with the same logprob.
                let logprob = logprob.expect("alternatives imply the token's logprob");
                assert_eq!(top_logprobs[0], (token, logprob));
                assert!(logprob < 0.0);
                assert!(top_logprobs.windows(2).all(|w| w[0].1 >= w[1].1));
            }
        }
    }
    assert_eq!(tokens, 5);
}

/// A log-probability is a pass over the whole row per token: computed when asked for only.
#[test]
fn token_events_carry_a_logprob_only_when_asked_for() {
    for (logprobs, want) in [(false, false), (true, true)] {
        let mut engine = Setup::spec(&[cap(256)], 32).build();
        engine
            .submit(Request {
                logprobs,
                ..greedy(prompt(10, 1), 4)
            })
            .unwrap();
        let mut tokens = 0;
        while !engine.is_idle() {
            for event in engine.step() {
                if let Event::Token {
                    logprob,
                    top_logprobs,
                    ..
                } = event
                {
                    tokens += 1;
                    assert_eq!(logprob.is_some(), want, "logprobs {logprobs}");
                    assert!(logprob.is_none_or(|l| l <= 0.0));
                    assert!(top_logprobs.is_empty());
                }
            }
        }
        assert_eq!(tokens, 4);
    }
}
