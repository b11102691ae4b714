//! # lane — the engine that owns every stream
//!
//! One [`Target`] (a model on a device, or the fake target in tests) holds the per-session model
//! state; the [`Engine`] owns the streams, the admission queue and the rounds, and applies the
//! pure session decisions of the `slots` crate.
//!
//! | question | where |
//! |---|---|
//! | what does a round do, who is admitted, who moves or pauses? | [`engine`](Engine) |
//! | what is a stream? (tokens known, tokens computed) | `stream.rs` |
//! | how is a token drawn, how are drafts verified? | [`sampling`] |
//! | how does a grammar constrain a reply (JSON schema, tool calls)? | [`grammar`] |
//! | which prompt prefixes are cached, and when are they evicted? | [`prompt_cache`] |
//! | where do n-gram drafts come from? | [`ngram_draft`] |
//! | how many drafts does a window carry? | [`DraftStats`] |
//! | what does the host send and receive? | [`Request`], [`Refusal`], [`Event`] |
//! | what does `/slots` and `/metrics` show? | [`SlotView`], [`Counters`] |
//! | what must a model backend implement? | [`Backend`] (its kernels and memory), which [`BackendTarget`] makes a [`Target`]; what a session costs: [`SessionCosts`] |
//! | how is the engine tested without a model? | `testing::FakeTarget` (feature `testing`) |
//! | how does a backend show it keeps the contract, and survives faults? | `testing::conformance`, `testing::faults` (feature `testing`) |

mod backend;
mod draft_len;
mod engine;
mod event;
pub mod grammar;
mod mix;
mod ngram;
pub mod prompt_cache;
mod request;
pub mod sampling;
mod stream;
mod target;
#[cfg(feature = "testing")]
pub mod testing;
mod thinking;
mod views;

pub use backend::{
    Backend, BackendError, BackendTarget, CacheBlocks, DraftChain, MtpView, RoundOut, RoundWindow,
    SessionView,
};
pub use draft_len::{DraftStats, DEFAULT_DRAFT_COST_PERCENT};
pub use engine::{ConfigError, Engine, EngineConfig, DEFAULT_PREFILL_CHUNK, DEFAULT_QUEUE_LIMIT};
pub use event::{Event, FinishReason};
pub use grammar::{Grammar, GrammarError, GrammarSource, GrammarState, TokenMask};
pub use ngram::{ngram_draft, NGRAM_LOOKBACK, NGRAM_MAX, NGRAM_MIN};
pub use prompt_cache::{CacheBlockId, PromptCache};
pub use request::{
    DraftMode, LogitAdjustments, Refusal, Request, SamplingParams, LOGIT_BIAS_MAX, MAX_LOGIT_BIAS,
    MAX_TOP_LOGPROBS, PENALTY_MAX,
};
pub use slots::{MoveFault, Policy, SessionId, StreamId};
pub use target::{
    check_windows, rows_from_logits, split_logits, DraftAsk, DrawAsk, RollbackWindow, SessionCosts,
    SessionExtent, StateError, Target, TargetError, TargetExt, Want, Window, WindowRows,
    MAX_ROLLBACK_WINDOW, NO_ROLLBACK,
};
pub use thinking::{Thinking, ThinkingBudget};
pub use views::{Counters, SlotState, SlotView};
