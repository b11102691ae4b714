//! Request bodies: read whole, within a time limit and a size limit, before any handler runs.

use crate::error::ApiError;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt;

/// Largest request body: a prompt of a few hundred thousand tokens of text fits, a runaway upload
/// does not.
pub const MAX_BODY_BYTES: usize = 8 << 20;

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
    let refused = match tokio::time::timeout(app.limits.body_timeout, read).await {
        Err(_) => ApiError::timeout(format!(
            "the request body did not arrive within {} s",
            app.limits.body_timeout.as_secs_f64()
        )),
        Ok(BodyRead::TooLarge) => ApiError::too_large(MAX_BODY_BYTES),
        Ok(BodyRead::Broken) => ApiError::malformed("the request body could not be read"),
        Ok(BodyRead::Complete(bytes)) => {
            return next
                .run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
    };
    refused.response_for(parts.uri.path())
}
