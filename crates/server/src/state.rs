//! What every handler shares ([`AppState`]) and the limits `serve` applies to connections: a
//! leaf, so that the routes, the handlers and the accept loop each import it and not one another.

use crate::engine_thread::EngineHandle;
use crate::text_model::TextModel;
use std::sync::Arc;
use std::time::Duration;

/// A request's headers must arrive within this, and a kept-alive connection may sit idle this
/// long between requests: a client trickling a header line a second holds a connection for no
/// longer than this.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// A request's body must arrive within this once its headers have (8 MiB at 150 KB/s).
pub const BODY_TIMEOUT: Duration = Duration::from_secs(60);
/// Connections open at once at most; one more is answered 503 and closed. Each costs a task and
/// its buffers, and the engine admits far fewer streams than this anyway.
pub const MAX_CONNECTIONS: usize = 4096;

/// The limits `serve` applies to every connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub max_connections: usize,
}

impl Default for ConnectionLimits {
    fn default() -> ConnectionLimits {
        ConnectionLimits {
            header_timeout: HEADER_TIMEOUT,
            body_timeout: BODY_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
        }
    }
}

/// Requests parsed, rendered and tokenised at once at most, per core: that work runs on tokio's
/// blocking pool (a long prompt takes seconds), and this bound keeps a flood of large bodies from
/// queueing hundreds of blocking threads; the rest wait their turn without holding a thread.
pub const PREPARE_PER_CORE: usize = 2;

#[derive(Clone)]
pub struct AppState {
    pub engine: EngineHandle,
    pub text: Arc<dyn TextModel>,
    /// `--api-key`: when set, every `/v1` request must carry `Authorization: Bearer KEY` (or
    /// `x-api-key: KEY`, as Anthropic's clients send it).
    pub api_key: Option<Arc<str>>,
    /// Permits to prepare a request off the async runtime (see [`PREPARE_PER_CORE`]).
    pub prepare: Arc<tokio::sync::Semaphore>,
    /// `--protect-ops`: `/slots`, `/metrics` and `/live/events` need the API key too.
    pub protect_ops: bool,
    /// Timeouts and the connection cap `serve` applies.
    pub limits: ConnectionLimits,
}

impl AppState {
    pub fn new(engine: EngineHandle, text: Arc<dyn TextModel>, api_key: Option<Arc<str>>) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        AppState {
            engine,
            text,
            api_key,
            prepare: Arc::new(tokio::sync::Semaphore::new(PREPARE_PER_CORE * cores)),
            protect_ops: false,
            limits: ConnectionLimits::default(),
        }
    }
}
