//! # server — flashlane's OpenAI-compatible HTTP API
//!
//! HTTP handlers parse and check requests, then talk to the engine thread (the single owner of
//! every stream) over bounded channels; tokens come back per round on a bounded channel per
//! request.
//!
//! | what | where |
//! |---|---|
//! | the routes, API key | `routes.rs` |
//! | what every handler shares, connection limits and timeouts | `state.rs` |
//! | request bodies read whole: size and time limits | `body.rs` |
//! | the accept loop: connection cap, shutdown | `listen.rs` |
//! | completions and chat, SSE and not | `generate.rs` |
//! | Anthropic's Messages API: its bodies, its replies and events | [`anthropic`], `messages.rs` |
//! | OpenAI's Responses API: its bodies, its replies and events | [`openai_responses`], `responses.rs` |
//! | a reply as blocks (thinking, text, tool calls), for both | `blocks.rs` |
//! | request bodies checked field by field | [`request`] |
//! | text from tokens, stop strings | [`text`], `reply.rs` |
//! | the engine thread and its channels | [`engine_thread`] |
//! | Prometheus text | `metrics.rs` |
//! | the live sessions page (`GET /`) and its events | `live.rs`, `live.html` |

pub mod advice;
pub mod anthropic;
mod blocks;
mod body;
pub mod engine_thread;
pub mod error;
mod generate;
mod listen;
mod live;
mod messages;
mod metrics;
pub mod openai_responses;
// Public for the fuzz targets (`crates/fuzz`: a reply's stream in any rounds).
pub mod reply;
pub mod request;
mod responses;
mod routes;
mod state;
pub mod structured;
pub mod text;
mod text_model;
mod tokenize;

pub use body::MAX_BODY_BYTES;
pub use engine_thread::{
    spawn as spawn_engine, spawn_with as spawn_engine_with, EngineHandle, SpawnError,
};
pub use listen::serve;
pub use routes::router;
pub use state::{AppState, ConnectionLimits, BODY_TIMEOUT, HEADER_TIMEOUT, MAX_CONNECTIONS};
pub use text_model::TextModel;
