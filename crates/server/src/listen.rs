//! The accept loop: a cap on open connections, a time limit on each request's headers (and on
//! the idle time of a kept-alive connection), a time limit on each request's body, and a
//! shutdown that keeps the listener open, answering new requests 503 while running replies
//! drain.

use crate::error::ApiError;
use crate::routes::router;
use crate::state::AppState;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// After the engine has stopped, how long connections still writing get before `serve` returns.
const CLOSE_GRACE: Duration = Duration::from_secs(5);
/// How long writing the 503 to a connection over the cap may take.
const REFUSAL_WRITE_TIME: Duration = Duration::from_secs(2);
/// Pause after a failed accept (out of file descriptors, say) before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

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
