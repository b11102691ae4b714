//! Builders and drivers shared by the engine's integration tests.
#![allow(dead_code)] // each test binary uses its own subset

use lane::testing::{FakeConfig, FakeTarget};
use lane::{
    DraftMode, Engine, EngineConfig, Event, FinishReason, Policy, Request, SamplingParams,
    SessionId, SlotState, StreamId,
};
use slots::MARGIN;
use std::collections::BTreeMap;

/// A session of `nominal` tokens, as the engine opens it (margin included).
pub fn cap(nominal: u64) -> u64 {
    nominal + MARGIN
}

/// How to build an engine over the fake target.
#[derive(Clone, Debug)]
pub struct Setup {
    pub capacities: Vec<u64>,
    pub config: EngineConfig,
    pub fake: FakeConfig,
}

impl Setup {
    /// Spec set: smallest fit with this growth allowance.
    pub fn spec(capacities: &[u64], grow: u64) -> Setup {
        Setup {
            capacities: capacities.to_vec(),
            config: EngineConfig::new(Policy::SmallestFit { grow }),
            fake: FakeConfig::default(),
        }
    }

    /// Spec unset: first free.
    pub fn unset(capacities: &[u64]) -> Setup {
        Setup {
            capacities: capacities.to_vec(),
            config: EngineConfig::new(Policy::FirstFree),
            fake: FakeConfig::default(),
        }
    }

    pub fn drafts(mut self, mode: DraftMode, draft_tokens: u64) -> Setup {
        self.config.draft = mode;
        self.config.draft_tokens = draft_tokens;
        self
    }

    pub fn draft_accept(mut self, rate: f64) -> Setup {
        self.fake.draft_accept = rate;
        self
    }

    pub fn prefill_chunk(mut self, chunk: u64) -> Setup {
        self.config.prefill_chunk = chunk;
        self
    }

    pub fn queue_limit(mut self, limit: usize) -> Setup {
        self.config.queue_limit = limit;
        self
    }

    pub fn build(&self) -> Engine<FakeTarget> {
        Engine::new(FakeTarget::new(&self.capacities, self.fake), self.config)
            .expect("a valid test configuration")
    }
}

/// A prompt of `len` tokens, different for each `salt`.
pub fn prompt(len: usize, salt: u64) -> Vec<u32> {
    let mut rng = lane::sampling::Rng::new(salt.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0xABCD);
    (0..len)
        .map(|_| (rng.next_u64() % FakeConfig::default().vocab_size as u64) as u32)
        .collect()
}

pub fn greedy(prompt: Vec<u32>, max_new: u64) -> Request {
    Request::new(prompt, max_new)
}

pub fn sampled(prompt: Vec<u32>, max_new: u64, seed: u64) -> Request {
    Request {
        sampling: SamplingParams {
            temperature: 0.9,
            top_k: 20,
            top_p: 0.95,
            min_p: 0.02,
            seed: Some(seed),
        },
        ..Request::new(prompt, max_new)
    }
}

/// Every reply seen so far.
#[derive(Clone, Debug, Default)]
pub struct Replies {
    pub tokens: BTreeMap<StreamId, Vec<u32>>,
    pub finished: BTreeMap<StreamId, FinishReason>,
    /// Each admitted stream's prompt tokens restored from the prompt cache.
    pub admitted: BTreeMap<StreamId, u64>,
}

impl Replies {
    pub fn absorb(&mut self, events: Vec<Event>) {
        for event in events {
            match event {
                Event::Admitted {
                    stream,
                    cached_tokens,
                } => {
                    assert!(
                        !self.tokens.contains_key(&stream) && !self.finished.contains_key(&stream),
                        "{stream} admitted after its first token or its end"
                    );
                    let before = self.admitted.insert(stream, cached_tokens);
                    assert!(before.is_none(), "{stream} admitted twice");
                }
                Event::Token { stream, token, .. } => {
                    assert!(
                        self.admitted.contains_key(&stream),
                        "{stream} got a token before its admission"
                    );
                    assert!(
                        !self.finished.contains_key(&stream),
                        "{stream} got a token after its final event"
                    );
                    self.tokens.entry(stream).or_default().push(token);
                }
                Event::Finished {
                    stream,
                    reason,
                    completion_tokens,
                    ..
                } => {
                    let emitted = self.tokens.get(&stream).map_or(0, |t| t.len()) as u64;
                    assert_eq!(completion_tokens, emitted, "{stream}'s usage");
                    let before = self.finished.insert(stream, reason);
                    assert!(before.is_none(), "{stream} finished twice");
                }
            }
        }
    }

    pub fn reply(&self, stream: StreamId) -> Vec<u32> {
        self.tokens.get(&stream).cloned().unwrap_or_default()
    }

    pub fn reason(&self, stream: StreamId) -> Option<&FinishReason> {
        self.finished.get(&stream)
    }
}

/// Steps until the engine is idle, checking the fake's sessions against the engine's after every
/// round. Panics past `max_rounds`.
pub fn run_until_idle(
    engine: &mut Engine<FakeTarget>,
    replies: &mut Replies,
    max_rounds: u64,
) -> u64 {
    let mut rounds = 0;
    while !engine.is_idle() {
        assert!(rounds < max_rounds, "not idle after {max_rounds} rounds");
        replies.absorb(engine.step());
        check_sessions(engine);
        rounds += 1;
    }
    rounds
}

/// The engine's invariants, and the fake's session state agreeing with the engine's view.
pub fn check_sessions(engine: &Engine<FakeTarget>) {
    engine.check_invariants().unwrap();
    for slot in engine.slots() {
        let held = engine.target().history(slot.session).len() as u64;
        match slot.state {
            SlotState::Free => assert_eq!(held, 0, "free {} holds state", slot.session),
            _ => assert_eq!(
                held, slot.used_tokens,
                "{} holds {held} positions, the engine counts {}",
                slot.session, slot.used_tokens
            ),
        }
    }
}

/// The reply `request` gets alone on a fresh engine built from `setup`.
pub fn solo(setup: &Setup, request: Request) -> Vec<u32> {
    let mut engine = setup.build();
    let id = engine.submit(request).expect("accepted");
    let mut replies = Replies::default();
    run_until_idle(&mut engine, &mut replies, 100_000);
    replies.reply(id)
}

/// Runs `requests` together on a fresh engine from `setup` and checks that each reply is whole
/// (`max_new_tokens` tokens, ended by length) and equal to the reply it gets alone. Returns the
/// engine and each request's stream and reply, for more checks.
pub fn together_equals_solo(
    setup: &Setup,
    requests: &[Request],
) -> (Engine<FakeTarget>, Vec<(StreamId, Vec<u32>)>) {
    let mut engine = setup.build();
    let ids: Vec<_> = requests
        .iter()
        .map(|r| engine.submit(r.clone()).unwrap())
        .collect();
    let mut replies = Replies::default();
    run_until_idle(&mut engine, &mut replies, 10_000);
    let mut out = Vec::with_capacity(ids.len());
    for (id, request) in ids.into_iter().zip(requests) {
        let alone = solo(setup, request.clone());
        assert_eq!(replies.reason(id), Some(&FinishReason::Length), "{id}");
        assert_eq!(replies.reply(id).len() as u64, request.max_new_tokens);
        assert_eq!(replies.reply(id), alone, "{id} together differs from solo");
        out.push((id, alone));
    }
    (engine, out)
}

/// The session `stream` holds, from the `/slots` view.
pub fn session_of(engine: &Engine<FakeTarget>, stream: StreamId) -> Option<SessionId> {
    engine
        .slots()
        .iter()
        .find(|s| s.holder == Some(stream))
        .map(|s| s.session)
}

pub fn state_of(engine: &Engine<FakeTarget>, stream: StreamId) -> Option<SlotState> {
    engine
        .slots()
        .iter()
        .find(|s| s.holder == Some(stream))
        .map(|s| s.state)
}
