//! A stream: tokens known, tokens computed.
//!
//! `tokens` holds the prompt and every token drawn so far; `computed` counts the positions the
//! target holds in the stream's session. While `computed < tokens.len() - 1` the stream is still
//! reading its prompt; afterwards exactly one token (the last drawn) is known but not computed,
//! and it heads the next window. There is no separate prefill or decode phase beyond that.

use crate::draft_len::DraftStats;
use crate::grammar::GrammarState;
use crate::request::{DraftMode, LogitAdjustments, SamplingParams};
use crate::sampling::{Rng, SeenTokens};
use crate::thinking::Thinking;
use slots::{RoundStream, SessionId, StreamId};

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// Computes a window each round.
    Running,
    /// Outgrew its session with no larger one free: skipped by rounds until a move succeeds.
    Paused,
    /// Its reply is over; it still holds its session until the next sweep releases it.
    Finished,
}

/// How far a stream's prompt is in the prompt cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CacheProgress {
    /// The request allows the cache, and nothing failed so far.
    pub enabled: bool,
    /// The chain key of the cached blocks covering positions `0..covered`.
    pub key: Option<u64>,
    pub covered: u64,
    /// Positions restored from the cache at admission.
    pub restored: u64,
}

impl CacheProgress {
    pub fn new(enabled: bool) -> CacheProgress {
        CacheProgress {
            enabled,
            key: None,
            covered: 0,
            restored: 0,
        }
    }
}

/// A constrained stream's place in its grammar.
pub(crate) struct GrammarSlot(pub Box<dyn GrammarState>);

impl std::fmt::Debug for GrammarSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GrammarSlot")
    }
}

#[derive(Debug)]
pub(crate) struct Stream {
    pub id: StreamId,
    pub session: SessionId,
    pub state: State,
    pub prompt_len: usize,
    pub tokens: Vec<u32>,
    pub computed: u64,
    pub max_new_tokens: u64,
    /// No stop token before this many tokens ([`crate::Request::min_new_tokens`]).
    pub min_new_tokens: u64,
    pub sampling: SamplingParams,
    pub rng: Rng,
    pub stop_tokens: Vec<u32>,
    pub draft: DraftMode,
    /// Drafts per window at most (0 when `draft` is `None`).
    pub draft_tokens: u64,
    /// The stream's acceptance per draft depth, and the drafts its next window proposes.
    pub draft_stats: DraftStats,
    pub draft_len: u64,
    /// Whether token events carry log-probabilities (asked for, or alternatives asked for).
    pub logprobs: bool,
    pub top_logprobs: u8,
    /// `prompt + max_new + window`, fixed at admission.
    pub reply_end: u64,
    /// The thinking budget's tracker, over the prompt and every token emitted.
    pub thinking: Option<Thinking>,
    /// Penalties and biases on the stream's logits, and (when there are any) the tokens they
    /// look at.
    pub adjustments: LogitAdjustments,
    pub seen: Option<SeenTokens>,
    /// The grammar the reply must follow, when the request gave one.
    pub grammar: Option<GrammarSlot>,
    pub cache: CacheProgress,
}

impl Stream {
    /// Tokens drawn so far.
    pub fn generated(&self) -> u64 {
        (self.tokens.len() - self.prompt_len) as u64
    }

    /// How many positions from the next token on may not be a stop token (`min_new_tokens`
    /// not reached yet); 0 for a stream without stop tokens, which has nothing to hold.
    pub fn stops_held(&self) -> u64 {
        match self.stop_tokens.is_empty() {
            true => 0,
            false => self.min_new_tokens.saturating_sub(self.generated()),
        }
    }

    /// Still reading its prompt: no token drawn yet.
    pub fn in_prompt(&self) -> bool {
        self.generated() == 0
    }

    pub fn is_finished(&self) -> bool {
        self.state == State::Finished
    }

    /// Drafts the next window may carry: as many as its acceptance makes worth it
    /// ([`DraftStats::best_len`]), and no more than would let the reply pass `max_new_tokens`
    /// (a window accepting every draft draws `drafts + 1` tokens).
    pub fn max_drafts(&self) -> u64 {
        let remaining = self.max_new_tokens.saturating_sub(self.generated());
        self.draft_len.min(remaining.saturating_sub(1))
    }

    /// A window of `proposed` drafts had `accepted` of them accepted: the next window's drafts.
    /// They grow by one a round at most: a depth no round reached recently is a guess (it drifts
    /// back to "accepted", see [`DraftStats`]), so it is tried one position at a time.
    pub fn observe_drafts(&mut self, proposed: usize, accepted: usize, cost_percent: u32) {
        self.draft_stats.observe(proposed, accepted);
        let best = self.draft_stats.best_len(cost_percent) as u64;
        self.draft_len = best.min(self.draft_len + 1);
        debug_assert!(
            self.draft_len <= self.draft_tokens,
            "{}: {} drafts chosen, {} at most",
            self.id,
            self.draft_len,
            self.draft_tokens
        );
    }

    /// Positions the next round may write: a prompt chunk, or the last token and its drafts.
    pub fn next_width(&self, prefill_chunk: u64) -> u64 {
        if self.in_prompt() {
            (self.prompt_len as u64 - self.computed).min(prefill_chunk)
        } else {
            1 + self.max_drafts()
        }
    }

    pub fn round_view(&self, prefill_chunk: u64) -> RoundStream {
        RoundStream {
            stream: self.id,
            session: self.session,
            used_tokens: self.computed,
            reply_end: self.reply_end,
            window: self.next_width(prefill_chunk),
        }
    }

    pub fn usage(&self) -> (u64, u64) {
        (self.prompt_len as u64, self.generated())
    }
}
