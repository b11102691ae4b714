//! What the engine tells the host after each round.

use slots::StreamId;

/// Why a reply ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// A stop token was drawn (not emitted).
    Stop,
    /// `max_new_tokens` were emitted.
    Length,
    /// The client went away ([`crate::Engine::cancel`]).
    Cancelled,
    /// Admission found that no session could ever hold the reply (HTTP 400 `context_full`).
    ContextFull { reply_end: u64, largest: u64 },
    /// The request failed (HTTP 500 or an SSE error event): a device error, a failed move, ...
    Error(String),
}

/// One event for the host to forward to a client.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The stream took a session: its prompt starts computing, `cached_tokens` of it restored
    /// from the prompt cache instead (APIs report them: `cached_tokens`,
    /// `cache_read_input_tokens`). Before any of its tokens.
    Admitted {
        stream: StreamId,
        cached_tokens: u64,
    },
    /// One token of a reply, in order.
    Token {
        stream: StreamId,
        token: u32,
        /// `log p(token)` under the model's raw distribution, when the request asked for it.
        logprob: Option<f32>,
        /// The most likely alternatives at this position, most likely first, when asked for.
        top_logprobs: Vec<(u32, f32)>,
    },
    /// The last event of a stream: it holds no session any more (or never held one).
    Finished {
        stream: StreamId,
        reason: FinishReason,
        prompt_tokens: u64,
        completion_tokens: u64,
    },
}

impl Event {
    pub fn stream(&self) -> StreamId {
        match self {
            Event::Admitted { stream, .. }
            | Event::Token { stream, .. }
            | Event::Finished { stream, .. } => *stream,
        }
    }
}
