//! `POST /tokenize` and `POST /detokenize` (vLLM's endpoints): a prompt's or a chat's tokens as
//! the engine would get them, and the text of tokens, for clients that count or budget tokens.

use crate::error::ApiError;
use crate::generate::{check_model, input_tokens, on_prepare_pool};
use crate::request;
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// `{"count", "max_model_len", "tokens", "token_strs"}`: `max_model_len` is the most tokens a
/// request may take, its prompt and `max_tokens` together (the largest session less the tokens
/// a round may write past a reply's end), `token_strs` each token's text where asked (else
/// null). The answer is written on the blocking pool too: millions of ids are seconds of JSON.
pub async fn tokenize(State(app): State<AppState>, body: Bytes) -> Response {
    let answer = on_prepare_pool(&app, move |app| {
        let req = request::parse_tokenize(&body)?;
        check_model(app, req.model.as_deref())?;
        let tokens = input_tokens(app, &req.input)?;
        let token_strs = req.token_strs.then(|| {
            tokens
                .iter()
                .map(|&id| app.text.token_text(id))
                .collect::<Vec<_>>()
        });
        json_bytes(&json!({
            "count": tokens.len(),
            "max_model_len": app.engine.largest_capacity.saturating_sub(app.engine.window),
            "tokens": tokens,
            "token_strs": token_strs,
        }))
    })
    .await;
    json_response(answer)
}

/// `{"prompt"}`: the text of `tokens`, special tokens left out (as replies are written).
pub async fn detokenize(State(app): State<AppState>, body: Bytes) -> Response {
    let answer = on_prepare_pool(&app, move |app| {
        let fields = request::parse_detokenize(&body)?;
        check_model(app, fields.model.as_deref())?;
        if let (Some(vocab), Some(&worst)) = (app.text.vocab_size(), fields.tokens.iter().max()) {
            if worst as usize >= vocab {
                return Err(ApiError::invalid(
                    "tokens",
                    format!("token id {worst} is past the vocabulary ({vocab} ids)"),
                ));
            }
        }
        json_bytes(&json!({ "prompt": app.text.decode(&fields.tokens) }))
    })
    .await;
    json_response(answer)
}

/// `value` as JSON bytes (on the blocking pool, where the handlers call it).
fn json_bytes(value: &serde_json::Value) -> Result<Bytes, ApiError> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| ApiError::internal(format!("writing the answer failed: {e}")))
}

fn json_response(answer: Result<Bytes, ApiError>) -> Response {
    match answer {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => e.into_response(),
    }
}
