//! The engine's view of a model: sessions of model state on a device, a round that computes a
//! batch of windows in one call, and a move that copies everything a stream owns in one call.
//!
//! The target owns the session buffers (allocated once, at construction, from the plan); the
//! engine refers to them only by [`SessionId`]. A window is "n tokens to compute" whatever the
//! phase: a chunk of prompt, or the last sampled token followed by drafts. The arithmetic of one
//! window's rows must not depend on the other windows in the batch (batch invariance, design §9).
//!
//! ## What the engine guarantees a target (so a backend need not check or handle more)
//! - The windows of one `forward` call are for distinct sessions; each `start` equals the
//!   positions its session holds, and `start + tokens.len()` never exceeds its capacity.
//! - `truncate(session, len)` is called only right after a `forward` that wrote `session`, with
//!   `start + 1 ≤ len < start + tokens.len()` of that window: only positions of the last window
//!   (rejected drafts) are ever rolled back, so linear-attention state needs checkpoints for the
//!   positions of one window only.
//! - `draft(session, next_token, k)` is called before the `forward` of the round whose window is
//!   `[next_token, drafts...]`, with `next_token` the token at the session's next position.
//! - `move_state(from, to)` is called only between rounds (after the last `forward` returned),
//!   with `to` free and strictly larger than `from`. On `Err` the engine assumes nothing changed.
//! - `release(session)` is called exactly once when the stream holding `session` ends (or its
//!   round failed); the next stream in it starts from position 0.
//! - After `forward` returns `Err`, every stream of that round ends and its session is released:
//!   a target need not leave the sessions of a failed round in any particular state.

use crate::prompt_cache::CacheBlockId;
use slots::{MoveFault, SessionId};

/// The longest window whose drafts a session can roll back (the sampled token and its drafts):
/// the widest window the engine verifies. A target's sessions are built for a rollback window of
/// [`NO_ROLLBACK`] to this many tokens (`1 + drafts per window`); each position of it costs a
/// copy of a hybrid model's linear-attention state per session, so longer windows (prompt chunks)
/// keep none: nothing ever rejects part of a prompt.
pub const MAX_ROLLBACK_WINDOW: usize = slots::MAX_WINDOW as usize;

/// The rollback window of sessions whose windows are never rolled back (no drafts): a hybrid
/// model's linear layers then keep no snapshots.
pub const NO_ROLLBACK: usize = 1;

/// The longest window a target's sessions can roll back: `1 +` the drafts per window of the
/// engine it serves ([`RollbackWindow::NONE`] without drafts). A hybrid model's linear layers
/// keep a snapshot of their state before each token of such a window but the first (no
/// rollback returns before a window's first token, the sampled one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RollbackWindow(usize);

impl RollbackWindow {
    /// No drafts: nothing is ever rolled back.
    pub const NONE: RollbackWindow = RollbackWindow(NO_ROLLBACK);
    /// The widest window the engine verifies.
    pub const MAX: RollbackWindow = RollbackWindow(MAX_ROLLBACK_WINDOW);

    /// The window of `drafts` drafts per window (`1 + drafts` tokens), if the engine verifies it.
    pub fn for_drafts(drafts: usize) -> Option<RollbackWindow> {
        RollbackWindow::of_tokens(drafts.checked_add(1)?)
    }

    /// A window of `tokens` tokens, if it is 1 to [`MAX_ROLLBACK_WINDOW`].
    pub fn of_tokens(tokens: usize) -> Option<RollbackWindow> {
        (NO_ROLLBACK..=MAX_ROLLBACK_WINDOW)
            .contains(&tokens)
            .then_some(RollbackWindow(tokens))
    }

    /// Tokens of the window.
    pub fn tokens(self) -> usize {
        self.0
    }

    /// Snapshots of a linear layer's state a session keeps for it (one before each token but
    /// the first).
    pub fn snapshots(self) -> usize {
        self.0 - 1
    }
}

/// What a session costs in bytes, as `slots::plan` counts it: `per_token × capacity + fixed`.
/// Each backend says what its sessions hold (`backend_cpu::session_costs`,
/// `backend_cuda::session_costs`); the plan, `serve`, `bench` and the tests read this one type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionCosts {
    /// Per position: K and V rows of every full-attention layer (and of an MTP head's layer).
    pub per_token: u64,
    /// Whatever the capacity: linear layers' state and snapshots, an MTP head's hidden rows.
    pub fixed: u64,
}

impl SessionCosts {
    /// The bytes of a session of `capacity` positions.
    pub fn session(&self, capacity: u64) -> u64 {
        self.per_token * capacity + self.fixed
    }

    /// The bytes of sessions of these capacities.
    pub fn total(&self, capacities: &[u64]) -> u64 {
        capacities.iter().map(|&c| self.session(c)).sum()
    }
}

/// Tokens for one session to compute in a round.
#[derive(Clone, Copy, Debug)]
pub struct Window<'a> {
    pub session: SessionId,
    /// Positions already in the session; `tokens[0]` is written at this position.
    pub start: u64,
    pub tokens: &'a [u32],
    /// Logits wanted for the last `num_logits` positions of the window (0 for a prompt chunk that
    /// is not the last, 1 for the last prompt chunk, `tokens.len()` to verify drafts).
    pub num_logits: usize,
}

impl<'a> Window<'a> {
    pub fn new(session: SessionId, start: u64, tokens: &'a [u32], num_logits: usize) -> Window<'a> {
        Window {
            session,
            start,
            tokens,
            num_logits,
        }
    }
}

/// What a target knows of one of its sessions when it checks a round ([`check_windows`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionExtent {
    /// Positions the session holds.
    pub len: u64,
    pub capacity: u64,
}

/// Checks a round against what the engine guarantees a target (distinct, existing sessions;
/// each window starting at its session's length and fitting its capacity; logits for at most its
/// positions; token ids inside the vocabulary), so that a backend refuses a bad round with the
/// reason before it touches any state. `sessions[i]` is `SessionId(i)`'s extent.
pub fn check_windows(
    windows: &[Window<'_>],
    sessions: &[SessionExtent],
    vocab: usize,
) -> Result<(), TargetError> {
    let mut seen = vec![false; sessions.len()];
    for w in windows {
        let invalid = |what: String| Err(TargetError::Invalid(format!("{}{what}", w.session)));
        let Some(session) = sessions.get(w.session.0) else {
            return invalid(" does not exist".into());
        };
        if std::mem::replace(&mut seen[w.session.0], true) {
            return invalid(" appears twice in one round".into());
        }
        if w.start != session.len {
            return invalid(format!(
                " window starts at {} but the session holds {} positions",
                w.start, session.len
            ));
        }
        let needed = w.start + w.tokens.len() as u64;
        if needed > session.capacity {
            return Err(TargetError::Overflow {
                session: w.session,
                needed,
                capacity: session.capacity,
            });
        }
        if w.num_logits > w.tokens.len() {
            return invalid(format!(
                " asks logits for {} of {} positions",
                w.num_logits,
                w.tokens.len()
            ));
        }
        if let Some(t) = w.tokens.iter().find(|&&t| t as usize >= vocab) {
            return invalid(format!(
                ": token id {t} is outside the vocabulary of {vocab}"
            ));
        }
    }
    Ok(())
}

/// Splits a round's logits rows (the wanted rows of every window with tokens, in order) into
/// [`Target::forward`]'s answer: per window, its `num_logits` rows flattened (none when empty).
pub fn split_logits(windows: &[Window<'_>], logits: &[f32], vocab: usize) -> Vec<Vec<f32>> {
    let mut at = 0;
    windows
        .iter()
        .map(|w| {
            let n = if w.tokens.is_empty() { 0 } else { w.num_logits };
            let rows = logits[at * vocab..(at + n) * vocab].to_vec();
            at += n;
            rows
        })
        .collect()
}

/// A round's answer from its logits rows (the wanted rows of every window with tokens, in
/// order, `[rows, vocab]`): per window its rows, or their greedy tokens where it wants
/// [`Want::Greedy`] (chosen by [`crate::sampling::argmax`], as the engine would); a
/// [`Want::Draw`] window gets its rows (the engine draws them).
pub fn rows_from_logits(
    windows: &[Window<'_>],
    wants: &[Want],
    logits: &[f32],
    vocab: usize,
) -> Vec<WindowRows> {
    debug_assert_eq!(windows.len(), wants.len(), "one want per window");
    let mut rows = logits.chunks_exact(vocab);
    windows
        .iter()
        .zip(wants)
        .map(|(w, want)| {
            let n = if w.tokens.is_empty() { 0 } else { w.num_logits };
            let mine = rows.by_ref().take(n);
            match want {
                Want::Greedy => {
                    WindowRows::Tokens(mine.map(|r| crate::sampling::argmax(r).ok()).collect())
                }
                // A draw is the engine's, on the host, from the rows.
                Want::Logits | Want::Draw(_) => {
                    // Row by row as whole slices (a copy at memory speed: an element-wise
                    // flatten took ~7 ms for a 64-row round of 151,936-token rows).
                    let mut flat = Vec::with_capacity(n * vocab);
                    for row in mine {
                        flat.extend_from_slice(row);
                    }
                    WindowRows::Logits(flat)
                }
            }
        })
        .collect()
}

/// What a round needs of one window's logits rows ([`Target::forward`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Want {
    /// The rows themselves (sampling, log-probabilities, penalties, checking).
    Logits,
    /// Only each row's greedy token, as [`crate::sampling::argmax`] chooses it: a target that
    /// can choose it beside the model answers [`WindowRows::Tokens`] and copies a token instead
    /// of a row of logits; it may answer the rows instead.
    Greedy,
    /// A token drawn from each of the window's rows, row `j` with the ask's uniform `j`: a
    /// target that can draw beside the model answers [`WindowRows::Tokens`] (its own draw, a
    /// deterministic function of the row and the ask alone, documented by the target); it may
    /// answer the rows instead, and the engine draws them on the host.
    Draw(DrawAsk),
}

impl Want {
    /// Whether a target may answer tokens instead of the rows.
    pub fn takes_tokens(&self) -> bool {
        !matches!(self, Want::Logits)
    }
}

/// The draws a target may make for a sampled stream's window: its sampling parameters
/// (temperature > 0) and its generator as the window's first draw finds it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DrawAsk {
    pub temperature: f32,
    /// 0: off.
    pub top_k: u32,
    /// 1: off.
    pub top_p: f32,
    /// 0: off.
    pub min_p: f32,
    pub generator: crate::sampling::Rng,
}

impl DrawAsk {
    /// The uniform in `[0, 1)` of the window's row `row` (the stream's generator, `row` draws on).
    pub fn uniform(&self, row: usize) -> f64 {
        self.generator.uniform_ahead(row)
    }

    /// Whether a target can draw as asked: temperature > 0, top_p in (0, 1], min_p in [0, 1]
    /// (what a request's validation lets through).
    pub fn is_valid(&self) -> bool {
        self.temperature > 0.0
            && self.temperature.is_finite()
            && self.top_p > 0.0
            && self.top_p <= 1.0
            && (0.0..=1.0).contains(&self.min_p)
    }

    /// The sampling parameters (the seed is the generator's business).
    pub fn params(&self) -> crate::request::SamplingParams {
        crate::request::SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            seed: None,
        }
    }
}

/// What [`Target::forward`] answers for one window.
#[derive(Clone, Debug, PartialEq)]
pub enum WindowRows {
    /// Its logits rows flattened (`num_logits × vocab_size` floats).
    Logits(Vec<f32>),
    /// Each row's token (`None` where no logit is finite), for a window that wanted
    /// [`Want::Greedy`] (the greedy token, as [`crate::sampling::argmax`] chooses it) or
    /// [`Want::Draw`] (the target's draws).
    Tokens(Vec<Option<u32>>),
}

/// One session's part of [`Target::draft`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DraftAsk {
    pub session: SessionId,
    /// The token just sampled after the session's last accepted position.
    pub next_token: u32,
    /// Drafts wanted at most.
    pub num_drafts: usize,
}

/// Why a session's state could not be rolled back or copied: the reasons both backends give.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("cannot truncate to {len}: only {held} positions computed")]
    PastEnd { len: u64, held: u64 },
    /// A linear-attention layer kept no snapshot there (only the last window's positions after
    /// its first token can be returned to).
    #[error("no linear-attention snapshot at position {len} (the state is at {held})")]
    NoSnapshot { len: u64, held: u64 },
    #[error("the MTP head cannot go back to {len} (it keeps the last window, from {first})")]
    MtpCannotGoBack { len: u64, first: u64 },
    #[error("{len} positions do not fit a session of {capacity}")]
    DoesNotFit { len: u64, capacity: u64 },
    /// Two sessions of different models (layers, an MTP head).
    #[error("sessions of different models ({0})")]
    Mismatch(&'static str),
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("device error: {0}")]
    Device(String),
    #[error("{session} cannot hold {needed} positions (capacity {capacity})")]
    Overflow {
        session: SessionId,
        needed: u64,
        capacity: u64,
    },
    #[error("invalid request to the target: {0}")]
    Invalid(String),
}

/// A model with per-session state, as the engine drives it.
pub trait Target {
    /// Length of every logits row.
    fn vocab_size(&self) -> usize;

    /// Capacity in tokens of each session this target allocated; index `i` is `SessionId(i)`.
    fn session_capacities(&self) -> Vec<u64>;

    /// Computes every window of a round (each window's positions are appended to its session's
    /// state) and answers, per window in order, its `num_logits` rows as `wants[i]` asks: the
    /// rows flattened (`num_logits × vocab_size` floats) for [`Want::Logits`]; for
    /// [`Want::Greedy`] their greedy tokens, or the rows; for [`Want::Draw`] the target's
    /// draws (a deterministic function of each row and the ask), or the rows.
    fn forward(
        &mut self,
        windows: &[Window<'_>],
        wants: &[Want],
    ) -> Result<Vec<WindowRows>, TargetError>;

    /// Keeps the first `len` positions of `session` and forgets the rest: rejected drafts are
    /// rolled back, KV rows truncated and linear-attention state restored as of position `len`.
    fn truncate(&mut self, session: SessionId, len: u64) -> Result<(), TargetError>;

    /// Whether [`Target::draft`] proposes anything (a model with an MTP head).
    fn has_drafter(&self) -> bool {
        false
    }

    /// Proposes, for each ask (distinct sessions), up to `num_drafts` tokens to follow
    /// `next_token`, answered in the order asked. The drafter's own state lives in the session.
    /// A session's drafts must not depend on the other asks of the call. Without a drafter,
    /// none.
    fn draft(&mut self, asks: &[DraftAsk]) -> Vec<Result<Vec<u32>, TargetError>> {
        asks.iter().map(|_| Ok(Vec::new())).collect()
    }

    /// Copies all of `from`'s state into the free, larger session `to`, bit for bit, once all
    /// work on it has settled. `to` then holds the stream; `from` is left as released.
    fn move_state(&mut self, from: SessionId, to: SessionId) -> Result<(), MoveFault>;

    /// Forgets `session`'s state so that the next stream starts from position 0.
    fn release(&mut self, session: SessionId);

    /// What one prompt-cache block of `tokens` positions costs this target in bytes (its KV
    /// rows, and the state as of its end: linear-attention states, the MTP head's rows), or
    /// `None` when it keeps no prompt cache.
    fn cache_block_bytes(&self, _tokens: u64) -> Option<u64> {
        None
    }

    /// Copies `session`'s positions `start..end` and its state as of `end` (the session holds
    /// exactly `end` positions) into a new cache block `id`.
    fn cache_save(
        &mut self,
        session: SessionId,
        _start: u64,
        _end: u64,
        _id: CacheBlockId,
    ) -> Result<(), TargetError> {
        Err(TargetError::Invalid(format!(
            "{session}: this target keeps no prompt cache"
        )))
    }

    /// Writes `blocks` (a prompt's first blocks, in order) into the empty `session`: it then
    /// holds their positions and the state as of the last one's end, as if it had computed them.
    fn cache_restore(
        &mut self,
        session: SessionId,
        _blocks: &[CacheBlockId],
    ) -> Result<(), TargetError> {
        Err(TargetError::Invalid(format!(
            "{session}: this target keeps no prompt cache"
        )))
    }

    /// Frees a cache block (evicted).
    fn cache_drop(&mut self, _id: CacheBlockId) {}
}

/// A boxed target is a target, so the host can pick a backend at run time
/// (`Engine<Box<dyn Target + Send>>`).
impl<T: Target + ?Sized> Target for Box<T> {
    fn vocab_size(&self) -> usize {
        (**self).vocab_size()
    }

    fn session_capacities(&self) -> Vec<u64> {
        (**self).session_capacities()
    }

    fn forward(
        &mut self,
        windows: &[Window<'_>],
        wants: &[Want],
    ) -> Result<Vec<WindowRows>, TargetError> {
        (**self).forward(windows, wants)
    }

    fn truncate(&mut self, session: SessionId, len: u64) -> Result<(), TargetError> {
        (**self).truncate(session, len)
    }

    fn has_drafter(&self) -> bool {
        (**self).has_drafter()
    }

    fn draft(&mut self, asks: &[DraftAsk]) -> Vec<Result<Vec<u32>, TargetError>> {
        (**self).draft(asks)
    }

    fn move_state(&mut self, from: SessionId, to: SessionId) -> Result<(), MoveFault> {
        (**self).move_state(from, to)
    }

    fn release(&mut self, session: SessionId) {
        (**self).release(session)
    }

    fn cache_block_bytes(&self, tokens: u64) -> Option<u64> {
        (**self).cache_block_bytes(tokens)
    }

    fn cache_save(
        &mut self,
        session: SessionId,
        start: u64,
        end: u64,
        id: CacheBlockId,
    ) -> Result<(), TargetError> {
        (**self).cache_save(session, start, end, id)
    }

    fn cache_restore(
        &mut self,
        session: SessionId,
        blocks: &[CacheBlockId],
    ) -> Result<(), TargetError> {
        (**self).cache_restore(session, blocks)
    }

    fn cache_drop(&mut self, id: CacheBlockId) {
        (**self).cache_drop(id)
    }
}

/// Conveniences over [`Target`] for callers that want every window's logits rows or one
/// session's drafts (checks, the CLI's `logits` and `generate`, tests).
pub trait TargetExt: Target {
    /// [`Target::forward`] wanting every window's logits: per window its rows flattened.
    fn logits(&mut self, windows: &[Window<'_>]) -> Result<Vec<Vec<f32>>, TargetError> {
        let wants = vec![Want::Logits; windows.len()];
        self.forward(windows, &wants)?
            .into_iter()
            .map(|rows| match rows {
                WindowRows::Logits(logits) => Ok(logits),
                WindowRows::Tokens(_) => Err(TargetError::Device(
                    "the target answered greedy tokens where logits were wanted".into(),
                )),
            })
            .collect()
    }

    /// [`Target::draft`] for one session.
    fn draft_one(
        &mut self,
        session: SessionId,
        next_token: u32,
        num_drafts: usize,
    ) -> Result<Vec<u32>, TargetError> {
        let ask = DraftAsk {
            session,
            next_token,
            num_drafts,
        };
        self.draft(&[ask]).pop().expect("one answer per ask")
    }
}

impl<T: Target + ?Sized> TargetExt for T {}

#[cfg(test)]
mod tests {
    use super::*;

    const VOCAB: usize = 100;

    fn window(session: usize, start: u64, tokens: &[u32], num_logits: usize) -> Window<'_> {
        Window::new(SessionId(session), start, tokens, num_logits)
    }

    #[test]
    fn split_logits_gives_each_window_its_rows_and_empty_windows_none() {
        let logits: Vec<f32> = (0..5 * 2).map(|i| i as f32).collect();
        let round = [
            window(0, 0, &[1, 2], 2),
            window(1, 0, &[], 0),
            window(2, 0, &[3, 4, 5], 0),
            window(3, 0, &[6, 7, 8], 3),
        ];
        let out = split_logits(&round, &logits, 2);
        assert_eq!(out[0], [0.0, 1.0, 2.0, 3.0]);
        assert!(out[1].is_empty() && out[2].is_empty());
        assert_eq!(out[3], [4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
    }

    #[test]
    fn check_windows_accepts_a_well_formed_round_and_names_each_fault() {
        let sessions = [
            SessionExtent {
                len: 0,
                capacity: 8,
            },
            SessionExtent {
                len: 5,
                capacity: 8,
            },
        ];
        let ok = [window(0, 0, &[1, 2, 3], 1), window(1, 5, &[4, 5, 6], 3)];
        assert_eq!(check_windows(&ok, &sessions, VOCAB), Ok(()));
        let invalid =
            |round: &[Window<'_>], what: &str| match check_windows(round, &sessions, VOCAB) {
                Err(TargetError::Invalid(m)) => assert!(m.contains(what), "{m} lacks {what}"),
                other => panic!("{what}: {other:?}"),
            };
        invalid(&[window(2, 0, &[1], 1)], "does not exist");
        invalid(&[window(0, 0, &[1], 1), window(0, 0, &[1], 1)], "twice");
        invalid(
            &[window(1, 4, &[1], 1)],
            "starts at 4 but the session holds 5",
        );
        invalid(&[window(0, 0, &[1, 2], 3)], "logits for 3 of 2");
        invalid(&[window(0, 0, &[1, 100], 1)], "token id 100");
        assert_eq!(
            check_windows(&[window(1, 5, &[1, 2, 3, 4], 1)], &sessions, VOCAB),
            Err(TargetError::Overflow {
                session: SessionId(1),
                needed: 9,
                capacity: 8
            })
        );
    }
}
