//! The live page: `GET /` is a static page (HTML and JavaScript in the binary, no build step)
//! that draws the session table as bars filling as streams grow, and logs moves and pauses as they
//! happen; `GET /live/events` feeds it, one JSON snapshot of the engine per
//! [`LIVE_INTERVAL`] as server-sent events.

use crate::engine_thread::Snapshot;
use crate::state::AppState;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{Html, Response};
use serde_json::json;
use std::convert::Infallible;
use std::time::Duration;
use tokio::sync::mpsc;

/// How often the page gets a snapshot: often enough to watch a stream grow, and a snapshot is a
/// round trip to the engine thread, between rounds.
pub const LIVE_INTERVAL: Duration = Duration::from_millis(500);
/// How long one page's event stream lasts before it ends (the browser reconnects): no
/// connection is held forever.
pub const LIVE_STREAM_MAX: Duration = Duration::from_secs(3600);
/// Snapshots a slow page may leave unread before the stream waits for it.
const LIVE_FRAMES_MAX: usize = 4;

const PAGE: &str = include_str!("live.html");

pub async fn page() -> Html<&'static str> {
    Html(PAGE)
}

/// What the page shows of one snapshot.
pub fn snapshot_json(model: &str, s: &Snapshot) -> serde_json::Value {
    let sessions: Vec<_> = s.slots.iter().map(session_json).collect();
    json!({
        "model": model,
        "sessions": sessions,
        "queue_depth": s.queue_depth,
        "running": s.live_streams - s.paused_streams,
        "paused": s.paused_streams,
        "tokens_per_second": s.tokens_per_second,
        "moves": s.counters.moves,
        "pauses": s.counters.pauses,
        "prompt_cache_hits": s.counters.prompt_cache_hits,
    })
}

pub async fn events(State(app): State<AppState>) -> Response {
    let (frames, body) = mpsc::channel::<Result<Bytes, Infallible>>(LIVE_FRAMES_MAX);
    tokio::spawn(async move {
        let model = app.text.model_id().to_string();
        let deadline = tokio::time::Instant::now() + LIVE_STREAM_MAX;
        let mut tick = tokio::time::interval(LIVE_INTERVAL);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = frames.closed() => return,
                // The server is done: the stream ends so that shutdown does not wait for it.
                () = app.engine.stopped() => return,
            }
            if tokio::time::Instant::now() >= deadline {
                return;
            }
            let Ok(snapshot) = app.engine.snapshot().await else {
                return;
            };
            let frame = format!("data: {}\n\n", snapshot_json(&model, &snapshot));
            if frames.send(Ok(Bytes::from(frame))).await.is_err() {
                return;
            }
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(
            tokio_stream::wrappers::ReceiverStream::new(body),
        ))
        .expect("static headers are valid")
}

/// One session as `/slots` and the live page show it.
pub(crate) fn session_json(slot: &lane::SlotView) -> serde_json::Value {
    json!({
        "id": slot.session.0,
        "capacity": slot.capacity,
        "holder": slot.holder.map(|s| s.0),
        "used_tokens": slot.used_tokens,
        "cached_tokens": slot.cached_tokens,
        "state": crate::metrics::state_name(slot.state),
    })
}
