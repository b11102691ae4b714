//! Read-only views of the engine for `/slots` and `/metrics`.

use slots::{SessionId, StreamId};

/// What a session is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotState {
    Free,
    /// Its stream is still reading its prompt.
    Prompt,
    /// Its stream is drawing its reply.
    Reply,
    /// Its stream outgrew it and waits for a larger session to free.
    Paused,
    /// Its stream's reply is over and the session is being released. Never seen between calls
    /// (every public method sweeps); kept so that a view can never panic.
    Ending,
}

/// One session, as `GET /slots` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotView {
    pub session: SessionId,
    /// Tokens, margin included.
    pub capacity: u64,
    pub holder: Option<StreamId>,
    /// Positions the holder has written (0 when free).
    pub used_tokens: u64,
    /// Of those, the prompt prefix restored from the prompt cache.
    pub cached_tokens: u64,
    pub state: SlotState,
}

/// Counters since the engine started, for `GET /metrics`. All only ever grow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Calls to `step`.
    pub rounds: u64,
    /// Rounds that called the target (some stream had a window).
    pub forward_calls: u64,
    pub streams_admitted: u64,
    /// Streams that ended after admission, whatever the reason (discards included).
    pub streams_finished: u64,
    /// Streams that ended with reason `error`.
    pub streams_failed: u64,
    /// Queued requests answered `context_full` at admission.
    pub refused_at_admission: u64,
    /// Prompt positions computed.
    pub prompt_tokens: u64,
    /// Tokens emitted.
    pub tokens_generated: u64,
    /// Successful moves to a larger session.
    pub moves: u64,
    /// Moves the target refused (any fault, `LaneMemory` included).
    pub move_faults: u64,
    /// Times a stream paused (once per pause, not per skipped round).
    pub pauses: u64,
    /// Requests that waited in the admission queue for a session that holds them (spec set only;
    /// on the first-free path the queue is plain first in, first out).
    pub admission_waits: u64,
    /// Draft tokens proposed for verification.
    pub draft_proposed: u64,
    /// Draft tokens accepted.
    pub draft_accepted: u64,
    /// Streams that started from a cached prompt prefix.
    pub prompt_cache_hits: u64,
    /// Prompt positions restored from the cache instead of computed.
    pub prompt_cache_tokens_reused: u64,
    /// Cache blocks evicted to make room.
    pub prompt_cache_evictions: u64,
    /// Microseconds the rounds spent in the target (the model, and what it chose or drew
    /// beside it).
    pub forward_micros: u64,
    /// Microseconds the rounds spent on the host after the target answered: draws from rows,
    /// verification, stop rules, events.
    pub host_micros: u64,
}
