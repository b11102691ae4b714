//! # server — flashlane's OpenAI-compatible HTTP API
//!
//! HTTP handlers parse and check requests, then talk to the engine thread (the single owner of
//! every stream) over bounded channels; tokens come back per round on a bounded channel per
//! request.
//!
//! | what | where |
//! |---|---|
//! | the routes, API key, body limit | `routes.rs` |
//! | completions and chat, SSE and not | `generate.rs` |
//! | request bodies checked field by field | [`request`] |
//! | text from tokens, stop strings | [`text`], `reply.rs` |
//! | the engine thread and its channels | [`engine_thread`] |
//! | Prometheus text | `metrics.rs` |

pub mod engine_thread;
pub mod error;
mod generate;
mod metrics;
mod reply;
pub mod request;
mod routes;
pub mod text;
mod text_model;

pub use engine_thread::{spawn as spawn_engine, EngineHandle};
pub use routes::{router, AppState, MAX_BODY_BYTES};
pub use text_model::TextModel;

use std::future::Future;
use std::net::SocketAddr;

/// Serves on `listener` until `shutdown` resolves, then stops admitting, lets running streams
/// finish for a bounded time, and returns.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let engine = state.engine.clone();
    let app = router(state).into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            engine.shutdown();
        })
        .await
}
