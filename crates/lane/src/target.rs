//! The engine's view of a model: sessions of model state on a device, a round that computes a
//! batch of windows in one call, and a move that copies everything a stream owns in one call.
//!
//! The target owns the session buffers (allocated once, at construction, from the plan); the
//! engine refers to them only by [`SessionId`]. A window is "n tokens to compute" whatever the
//! phase: a chunk of prompt, or the last sampled token followed by drafts. The arithmetic of one
//! window's rows must not depend on the other windows in the batch (batch invariance, SPEC §9).
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

use slots::{MoveFault, SessionId};

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

/// One session's part of [`Target::draft_batch`]: the arguments of [`Target::draft`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DraftAsk {
    pub session: SessionId,
    pub next_token: u32,
    pub num_drafts: usize,
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

    /// Computes every window of a round and returns, per window in order, its logits rows
    /// flattened (`num_logits × vocab_size` floats). Each window's positions are appended to its
    /// session's state.
    fn forward(&mut self, windows: &[Window<'_>]) -> Result<Vec<Vec<f32>>, TargetError>;

    /// Keeps the first `len` positions of `session` and forgets the rest: rejected drafts are
    /// rolled back, KV rows truncated and linear-attention state restored as of position `len`.
    fn truncate(&mut self, session: SessionId, len: u64) -> Result<(), TargetError>;

    /// Whether [`Target::draft`] proposes anything (a model with an MTP head).
    fn has_drafter(&self) -> bool {
        false
    }

    /// Proposes up to `num_drafts` tokens to follow `next_token`, the token just sampled after the
    /// session's last accepted position. The drafter's own state lives in the session.
    fn draft(
        &mut self,
        session: SessionId,
        next_token: u32,
        num_drafts: usize,
    ) -> Result<Vec<u32>, TargetError> {
        let _ = (session, next_token, num_drafts);
        Ok(Vec::new())
    }

    /// [`Target::draft`] for several sessions at once (distinct sessions, one ask each), answered
    /// in the order asked: a target that can draft a batch in one pass over the drafter's weights
    /// overrides it. Each session's drafts must equal what [`Target::draft`] alone gives it.
    fn draft_batch(&mut self, asks: &[DraftAsk]) -> Vec<Result<Vec<u32>, TargetError>> {
        asks.iter()
            .map(|a| self.draft(a.session, a.next_token, a.num_drafts))
            .collect()
    }

    /// Copies all of `from`'s state into the free, larger session `to`, bit for bit, once all
    /// work on it has settled. `to` then holds the stream; `from` is left as released.
    fn move_state(&mut self, from: SessionId, to: SessionId) -> Result<(), MoveFault>;

    /// Forgets `session`'s state so that the next stream starts from position 0.
    fn release(&mut self, session: SessionId);
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

    fn forward(&mut self, windows: &[Window<'_>]) -> Result<Vec<Vec<f32>>, TargetError> {
        (**self).forward(windows)
    }

    fn truncate(&mut self, session: SessionId, len: u64) -> Result<(), TargetError> {
        (**self).truncate(session, len)
    }

    fn has_drafter(&self) -> bool {
        (**self).has_drafter()
    }

    fn draft(
        &mut self,
        session: SessionId,
        next_token: u32,
        num_drafts: usize,
    ) -> Result<Vec<u32>, TargetError> {
        (**self).draft(session, next_token, num_drafts)
    }

    fn draft_batch(&mut self, asks: &[DraftAsk]) -> Vec<Result<Vec<u32>, TargetError>> {
        (**self).draft_batch(asks)
    }

    fn move_state(&mut self, from: SessionId, to: SessionId) -> Result<(), MoveFault> {
        (**self).move_state(from, to)
    }

    fn release(&mut self, session: SessionId) {
        (**self).release(session)
    }
}
