//! The router: endpoints, the API key check, the body limit, and the JSON 404.

use crate::body::{read_body_in_time, MAX_BODY_BYTES};
use crate::error::{AnthropicError, ApiError};
use crate::generate::{chat_completions, completions};
use crate::live::session_json;
use crate::metrics;
use crate::state::AppState;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

pub fn router(state: AppState) -> Router {
    let v1 = Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/responses", post(crate::responses::responses))
        .route("/v1/messages", post(crate::messages::messages))
        .route(
            "/v1/messages/count_tokens",
            post(crate::messages::count_tokens),
        )
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model))
        .route("/tokenize", post(crate::tokenize::tokenize))
        .route("/detokenize", post(crate::tokenize::detokenize))
        // Layers run last-added first: the key is checked before the body is read.
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            read_body_in_time,
        ))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_key));
    let mut ops = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/slots", get(slots))
        .route("/live/events", get(crate::live::events));
    if state.protect_ops {
        ops = ops.route_layer(middleware::from_fn_with_state(state.clone(), require_key));
    }
    Router::new()
        .merge(v1)
        .merge(ops)
        .route("/", get(crate::live::page))
        .route("/health", get(health))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        // The handlers' `Bytes` extractor limits bodies too (2 MiB unless told): let through the
        // whole body `read_body_in_time` accepted.
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

async fn require_key(State(app): State<AppState>, request: Request, next: Next) -> Response {
    if let Some(key) = &app.api_key {
        // OpenAI's clients send the key as a bearer token, Anthropic's as `x-api-key` (some
        // send both, one of them a placeholder): either one right is enough.
        let headers = request.headers();
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let x_api_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
        let right = [bearer, x_api_key]
            .into_iter()
            .flatten()
            .any(|given| constant_time_eq(given.as_bytes(), key.as_bytes()));
        if !right {
            return ApiError::unauthorized().response_for(request.uri().path());
        }
    }
    next.run(request).await
}

/// Compares without an early exit on the first differing byte, so response time does not reveal
/// how much of a guessed key was right (the length is not secret).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Anthropic's clients send this header on every request: `/v1/models` answers them in their
/// API's shape.
const ANTHROPIC_VERSION: &str = "anthropic-version";

/// Which API's shape a models listing takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ModelsShape {
    OpenAi,
    Anthropic,
}

fn models_shape(headers: &HeaderMap) -> ModelsShape {
    match headers.contains_key(ANTHROPIC_VERSION) {
        true => ModelsShape::Anthropic,
        false => ModelsShape::OpenAi,
    }
}

/// The served model under `id` (its name or an alias) as `/v1/models` lists it.
fn model_object(id: &str, shape: ModelsShape) -> serde_json::Value {
    match shape {
        ModelsShape::OpenAi => json!({
            "id": id,
            "object": "model",
            "created": 0,
            "owned_by": "flashlane",
        }),
        ModelsShape::Anthropic => json!({
            "type": "model",
            "id": id,
            "display_name": id,
            "created_at": "1970-01-01T00:00:00Z",
        }),
    }
}

/// Every name the model answers to, its own first.
async fn models(State(app): State<AppState>, headers: HeaderMap) -> Json<serde_json::Value> {
    let shape = models_shape(&headers);
    let names: Vec<&str> = std::iter::once(app.text.model_id())
        .chain(app.text.aliases().iter().map(String::as_str))
        .collect();
    let data: Vec<_> = names.iter().map(|id| model_object(id, shape)).collect();
    Json(match shape {
        ModelsShape::OpenAi => json!({"object": "list", "data": data}),
        ModelsShape::Anthropic => json!({
            "data": data,
            "has_more": false,
            "first_id": names.first(),
            "last_id": names.last(),
        }),
    })
}

/// `GET /v1/models/{id}`: the served model, or 404 `model_not_found` for any other name.
async fn model(
    State(app): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let shape = models_shape(&headers);
    if app.text.serves(&id) {
        Json(model_object(&id, shape)).into_response()
    } else {
        let error = ApiError::model_not_found(&id, app.text.model_id());
        match shape {
            ModelsShape::OpenAi => error.into_response(),
            ModelsShape::Anthropic => AnthropicError(error).into_response(),
        }
    }
}

/// Ready once the model is loaded (the router only exists after loading); 503 with `Retry-After`
/// while the server drains after SIGTERM, so a balancer's health check stops sending it work.
async fn health(State(app): State<AppState>) -> Response {
    if app.engine.is_draining() {
        return ApiError::unavailable("the server is shutting down").into_response();
    }
    match app.engine.snapshot().await {
        Ok(_) => Json(json!({"status": "ok"})).into_response(),
        Err(e) => ApiError::unavailable(e.to_string()).into_response(),
    }
}

async fn metrics_text(State(app): State<AppState>) -> Response {
    match app.engine.snapshot().await {
        Ok(snapshot) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            metrics::render(&snapshot),
        )
            .into_response(),
        Err(e) => ApiError::unavailable(e.to_string()).into_response(),
    }
}

async fn slots(State(app): State<AppState>) -> Response {
    let snapshot = match app.engine.snapshot().await {
        Ok(snapshot) => snapshot,
        Err(e) => return ApiError::unavailable(e.to_string()).into_response(),
    };
    let sessions: Vec<_> = snapshot.slots.iter().map(session_json).collect();
    Json(json!({
        "sessions": sessions,
        "queue_depth": snapshot.queue_depth,
        "paused_streams": snapshot.paused_streams,
        // `serve --suggest-every N`'s latest advice (null: off, or not yet).
        "suggested": snapshot.advice,
    }))
    .into_response()
}

async fn method_not_allowed(request: Request) -> Response {
    let path = request.uri().path();
    ApiError::method_not_allowed(format!("{path} does not take {}", request.method()))
        .response_for(path)
}

async fn not_found(request: Request) -> Response {
    let path = request.uri().path();
    ApiError::not_found(format!("no route for {} {path}", request.method())).response_for(path)
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn keys_compare_equal_only_when_identical() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
    }
}
