//! [`Faulty`]: any [`Target`] with faults injected on demand (the `testing` feature, off in
//! release builds), so that each backend can show what a fault does to the streams around it:
//! a round that fails as a device error would, a poisoned row of logits (NaN), a move that fails,
//! a draft call that fails. Each fault fires once, when its trigger comes.

use crate::target::{DraftAsk, Target, TargetError, Want, Window, WindowRows};
use slots::{MoveFault, SessionId};
use std::collections::VecDeque;

/// What [`Faulty`] injects, and when.
#[derive(Clone, Debug, Default)]
pub struct Injected {
    /// Rounds (counted from 1 over the wrapper's `forward` calls) that fail as a device error
    /// would, with this message: every stream of such a round ends.
    pub failed_rounds: VecDeque<(u64, String)>,
    /// Rounds whose first window with rows gets every row NaN (a poisoned row): only its stream
    /// should end.
    pub nan_rounds: VecDeque<u64>,
    /// The next moves fail so, one each.
    pub failed_moves: VecDeque<MoveFault>,
    /// Draft calls (counted from 1) whose every ask fails with this message.
    pub failed_drafts: VecDeque<(u64, String)>,
}

/// `inner` with [`Injected`] faults.
pub struct Faulty<T> {
    pub inner: T,
    pub inject: Injected,
    /// Rounds and draft calls so far.
    pub rounds: u64,
    pub draft_calls: u64,
}

impl<T> Faulty<T> {
    pub fn new(inner: T, inject: Injected) -> Faulty<T> {
        Faulty {
            inner,
            inject,
            rounds: 0,
            draft_calls: 0,
        }
    }
}

/// Pops the front of `queue` when its trigger is `now`.
fn due<V>(queue: &mut VecDeque<(u64, V)>, now: u64) -> Option<V> {
    if queue.front().is_some_and(|(at, _)| *at == now) {
        queue.pop_front().map(|(_, v)| v)
    } else {
        None
    }
}

impl<T: Target> Target for Faulty<T> {
    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }

    fn session_capacities(&self) -> Vec<u64> {
        self.inner.session_capacities()
    }

    fn forward(
        &mut self,
        windows: &[Window<'_>],
        wants: &[Want],
    ) -> Result<Vec<WindowRows>, TargetError> {
        self.rounds += 1;
        if let Some(message) = due(&mut self.inject.failed_rounds, self.rounds) {
            // As a device fails: the state of the round's sessions is whatever it is.
            let _ = self.inner.forward(windows, wants);
            return Err(TargetError::Device(message));
        }
        let mut rows = self.inner.forward(windows, wants)?;
        if self.inject.nan_rounds.front() == Some(&self.rounds) {
            if let Some(i) = windows
                .iter()
                .position(|w| !w.tokens.is_empty() && w.num_logits > 0)
            {
                self.inject.nan_rounds.pop_front();
                rows[i] = match &rows[i] {
                    WindowRows::Logits(l) => WindowRows::Logits(vec![f32::NAN; l.len()]),
                    WindowRows::Tokens(ids) => WindowRows::Tokens(vec![None; ids.len()]),
                };
            } else {
                // No row this round: the next one.
                self.inject.nan_rounds[0] += 1;
            }
        }
        Ok(rows)
    }

    fn truncate(&mut self, session: SessionId, len: u64) -> Result<(), TargetError> {
        self.inner.truncate(session, len)
    }

    fn has_drafter(&self) -> bool {
        self.inner.has_drafter()
    }

    fn draft(&mut self, asks: &[DraftAsk]) -> Vec<Result<Vec<u32>, TargetError>> {
        self.draft_calls += 1;
        if let Some(message) = due(&mut self.inject.failed_drafts, self.draft_calls) {
            return asks
                .iter()
                .map(|_| Err(TargetError::Device(message.clone())))
                .collect();
        }
        self.inner.draft(asks)
    }

    fn move_state(&mut self, from: SessionId, to: SessionId) -> Result<(), MoveFault> {
        if let Some(fault) = self.inject.failed_moves.pop_front() {
            return Err(fault);
        }
        self.inner.move_state(from, to)
    }

    fn release(&mut self, session: SessionId) {
        self.inner.release(session)
    }
}

/// The fault checks every backend runs on its own target (`make` builds a fresh one with the
/// sessions of [`FAULT_CAPACITIES`]), under the engine with MTP drafts when the model has a head:
/// six streams for four sessions (two wait), the small sessions outgrown. Each time the streams a
/// fault touches end with an error saying what happened, every other stream's reply is the one it
/// gets alone, and every session is free at the end. Panics naming the check that fails.
pub mod suite {
    use super::{Faulty, Injected};
    use crate::engine::{Engine, EngineConfig};
    use crate::event::FinishReason;
    use crate::request::{DraftMode, Request};
    use crate::target::Target;
    use crate::testing::run_to_end;
    use crate::views::{Counters, SlotState};
    use slots::{MoveFault, Policy, MARGIN};

    /// The sessions of every target the checks build: the engine's and three small ones.
    pub const FAULT_CAPACITIES: [u64; 4] = [128 + MARGIN, 40 + MARGIN, 40 + MARGIN, 40 + MARGIN];

    /// New tokens of the first request (each next one asks 4 more). Chosen so that every
    /// request's reply end (prompt + new tokens + window) is beyond a small session's whole
    /// capacity: a stream admitted to one must move before it ends, whatever the model's tokens
    /// and however many drafts are accepted. With fewer (36 until session 12) only the last
    /// request outgrew, and whether it moved at all depended on the model's tokens: on the GPU's
    /// bf16 cache rows none did, and the failed move was never tried.
    const FIRST_NEW_TOKENS: u64 = 68;

    fn requests(vocab: usize) -> Vec<Request> {
        (0..6u32)
            .map(|i| {
                let prompt: Vec<u32> = (0..6 + 2 * i)
                    .map(|j| (i * 97 + j * 31 + 7) % vocab as u32)
                    .collect();
                let request = Request::new(prompt, FIRST_NEW_TOKENS + 4 * u64::from(i));
                assert!(
                    request.prompt.len() as u64 + request.max_new_tokens > FAULT_CAPACITIES[1],
                    "[faults-outgrow] request {i} fits a small session: it might never move"
                );
                request
            })
            .collect()
    }

    fn engine<T: Target>(target: T, inject: Injected) -> Engine<Faulty<T>> {
        let mut config = EngineConfig::new(Policy::SmallestFit { grow: 8 });
        if target.has_drafter() {
            config.draft = DraftMode::Mtp;
            config.draft_tokens = 2;
        }
        config.prefill_chunk = 16;
        Engine::new(Faulty::new(target, inject), config).expect("engine")
    }

    /// The six streams with `inject`: the streams that ended with an error (their messages),
    /// after checking every other reply against `solo` and that no session is held at the end.
    fn run<T: Target>(
        make: &mut dyn FnMut() -> T,
        solo: &[Vec<u32>],
        inject: Injected,
    ) -> (Vec<(usize, String)>, Counters) {
        let target = make();
        let requests = requests(target.vocab_size());
        let mut e = engine(target, inject);
        let mut failed = Vec::new();
        for (i, (reply, reason)) in run_to_end(&mut e, &requests).into_iter().enumerate() {
            match reason {
                FinishReason::Error(message) => failed.push((i, message)),
                reason => {
                    assert_eq!(reason, FinishReason::Length, "stream {i}");
                    assert_eq!(reply, solo[i], "stream {i}: its reply beside the fault");
                }
            }
        }
        assert!(
            e.slots().iter().all(|s| s.state == SlotState::Free),
            "a session is still held: {:?}",
            e.slots()
        );
        (failed, e.counters())
    }

    /// Every check, each printed as it passes (`name` says whose target).
    pub fn run_all<T: Target>(name: &str, make: &mut dyn FnMut() -> T) {
        let solo: Vec<Vec<u32>> = {
            let vocab = make().vocab_size();
            requests(vocab)
                .into_iter()
                .map(|r| {
                    let mut e = engine(make(), Injected::default());
                    let (reply, reason) = run_to_end(&mut e, &[r]).remove(0);
                    assert_eq!(reason, FinishReason::Length, "a stream alone");
                    reply
                })
                .collect()
        };

        let (failed, c) = run(
            make,
            &solo,
            Injected {
                nan_rounds: [6].into(),
                ..Injected::default()
            },
        );
        assert_eq!(failed.len(), 1, "a poisoned row: {failed:?}");
        assert!(failed[0].1.contains("no finite value"), "{failed:?}");
        assert_eq!(c.streams_failed, 1);
        eprintln!("{name}: faults: a poisoned row ends its stream only: ok");

        let (failed, c) = run(
            make,
            &solo,
            Injected {
                failed_moves: [MoveFault::Device("ecc error".into())].into(),
                ..Injected::default()
            },
        );
        assert_eq!(
            c.move_faults, 1,
            "a failed move: no move was tried (the requests must outgrow the small sessions)"
        );
        assert_eq!(failed.len(), 1, "a failed move: {failed:?}");
        assert!(failed[0].1.contains("ecc error"), "{failed:?}");
        assert_eq!(c.streams_failed, 1);
        eprintln!("{name}: faults: a failed move ends its stream only: ok");

        if make().has_drafter() {
            let (failed, c) = run(
                make,
                &solo,
                Injected {
                    failed_drafts: [(3, "the head's kernel failed".into())].into(),
                    ..Injected::default()
                },
            );
            assert!(
                !failed.is_empty() && failed.len() < 6,
                "a failed draft: {failed:?}"
            );
            assert!(
                failed
                    .iter()
                    .all(|(_, m)| m.contains("the head's kernel failed")),
                "{failed:?}"
            );
            assert_eq!(c.streams_failed, failed.len() as u64);
            eprintln!("{name}: faults: a failed draft call ends the streams it drafted for: ok");
        }

        let (failed, c) = run(
            make,
            &solo,
            Injected {
                failed_rounds: [(4, "device lost".into())].into(),
                ..Injected::default()
            },
        );
        // The four admitted streams were in the round; the two waiting ones were not.
        assert_eq!(failed.len(), 4, "a failed round: {failed:?}");
        assert!(
            failed.iter().all(|(_, m)| m.contains("device lost")),
            "{failed:?}"
        );
        assert_eq!(c.streams_failed, 4);
        eprintln!(
            "{name}: faults: a failed round ends its streams, the waiting ones reply as alone: ok"
        );
    }
}
