//! The accept loop: a cap on open connections, a time limit on each request's headers (and on
//! the idle time of a kept-alive connection), a time limit on each request's body, and a
//! shutdown that keeps the listener open, answering new requests 503 while running replies
//! drain.

use crate::error::ApiError;
use crate::routes::{router, AppState, MAX_BODY_BYTES};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// A request's headers must arrive within this, and a kept-alive connection may sit idle this
/// long between requests: a client trickling a header line a second holds a connection for no
/// longer than this.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// A request's body must arrive within this once its headers have (8 MiB at 150 KB/s).
pub const BODY_TIMEOUT: Duration = Duration::from_secs(60);
/// Connections open at once at most; one more is answered 503 and closed. Each costs a task and
/// its buffers, and the engine admits far fewer streams than this anyway.
pub const MAX_CONNECTIONS: usize = 4096;
/// After the engine has stopped, how long connections still writing get before `serve` returns.
const CLOSE_GRACE: Duration = Duration::from_secs(5);
/// How long writing the 503 to a connection over the cap may take.
const REFUSAL_WRITE_TIME: Duration = Duration::from_secs(2);
/// Pause after a failed accept (out of file descriptors, say) before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

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

/// Serves on `listener` until `shutdown` resolves; then asks the engine to stop admitting, keeps
/// answering (new requests get 503 with `Retry-After`) until the engine has finished its running
/// streams or given up on them, lets connections still writing finish for a bounded time, and
/// returns.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = state.limits;
    let engine = state.engine.clone();
    let app = router(state);
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    let mut stopped = std::pin::pin!(engine.stopped());
    let mut stopping = false;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let Ok(permit) = connections.clone().try_acquire_owned() else {
                        tokio::spawn(refuse(stream));
                        continue;
                    };
                    // Tokens are written as they come: no Nagle delay.
                    let _ = stream.set_nodelay(true);
                    let service = TowerToHyperService::new(app.clone());
                    let mut http = hyper::server::conn::http1::Builder::new();
                    http.timer(TokioTimer::new())
                        .header_read_timeout(limits.header_timeout)
                        .keep_alive(true);
                    let connection =
                        graceful.watch(http.serve_connection(TokioIo::new(stream), service));
                    tokio::spawn(async move {
                        let _ = connection.await;
                        drop(permit);
                    });
                }
                Err(e) => {
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            () = &mut shutdown, if !stopping => {
                stopping = true;
                engine.shutdown();
            }
            () = &mut stopped, if stopping => break,
        }
    }
    drop(listener);
    let _ = tokio::time::timeout(CLOSE_GRACE, graceful.shutdown()).await;
    Ok(())
}

/// A connection over the cap: a 503 in the API's JSON shape, then closed (before its request is
/// read: clients read an early response).
async fn refuse(mut stream: TcpStream) {
    let error = ApiError::unavailable("too many open connections; retry later");
    let body = error.body().to_string();
    let raw = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: {}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        error.retry_after_s.unwrap_or(1),
        body.len()
    );
    let _ = tokio::time::timeout(REFUSAL_WRITE_TIME, async {
        stream.write_all(raw.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
}

/// Bytes of an oversized body read and dropped before answering 413, so that a client that sends
/// its whole body before reading the answer gets it instead of a reset connection; past this the
/// connection is closed.
const DRAIN_MAX_BYTES: usize = 64 << 20;

/// A request body as read.
enum BodyRead {
    Complete(Vec<u8>),
    /// Over the limit (what came was read and dropped, up to [`DRAIN_MAX_BYTES`]).
    TooLarge,
    /// The connection failed mid-body.
    Broken,
}

async fn read_limited(body: Body, limit: usize) -> BodyRead {
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    let mut seen = 0usize;
    while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else {
            return BodyRead::Broken;
        };
        seen += chunk.len();
        if seen <= limit {
            bytes.extend_from_slice(&chunk);
        } else if seen > DRAIN_MAX_BYTES {
            break;
        }
    }
    if seen > limit {
        BodyRead::TooLarge
    } else {
        BodyRead::Complete(bytes)
    }
}

/// Middleware: reads the whole body within the body timeout and the size limit, so that a
/// client that announces a body and sends it slowly (or never) gets 408 instead of holding a
/// handler, and one over the limit gets 413, both in JSON.
pub async fn read_body_in_time(
    State(app): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let read = read_limited(body, MAX_BODY_BYTES);
    match tokio::time::timeout(app.limits.body_timeout, read).await {
        Err(_) => ApiError::timeout(format!(
            "the request body did not arrive within {} s",
            app.limits.body_timeout.as_secs_f64()
        ))
        .into_response(),
        Ok(BodyRead::TooLarge) => ApiError::too_large(MAX_BODY_BYTES).into_response(),
        Ok(BodyRead::Broken) => {
            ApiError::malformed("the request body could not be read").into_response()
        }
        Ok(BodyRead::Complete(bytes)) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
    }
}
