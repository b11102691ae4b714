//! `POST /tokenize` and `POST /detokenize` (vLLM's endpoints): a prompt's or a chat's tokens as
//! the engine would get them, and the text of tokens, for clients that count or budget tokens.

use crate::error::ApiError;
use crate::generate::{check_model, input_tokens, on_prepare_pool};
use crate::request;
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// `{"count", "max_model_len", "tokens", "token_strs"}`: `max_model_len` is the largest
/// session's tokens (prompt and reply), `token_strs` each token's text where asked (else null).
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
        Ok(json!({
            "count": tokens.len(),
            "max_model_len": app.engine.largest_capacity,
            "tokens": tokens,
            "token_strs": token_strs,
        }))
    })
    .await;
    match answer {
        Ok(body) => Json(body).into_response(),
        Err(e) => e.into_response(),
    }
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
        Ok(json!({ "prompt": app.text.decode(&fields.tokens) }))
    })
    .await;
    match answer {
        Ok(body) => Json(body).into_response(),
        Err(e) => e.into_response(),
    }
}
