//! OpenAI-style errors: `{"error":{"message","type","param","code"}}` with the right status;
//! Anthropic's shape of the same errors for `/v1/messages` ([`AnthropicError`]).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error a client sees. Every failure of a request becomes one of these; none panics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Seconds after which a retry may succeed (429/503).
    pub retry_after_s: Option<u64>,
}

impl ApiError {
    /// 400 naming the parameter that was wrong.
    pub fn invalid(param: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: Some(param.to_string()),
            code: None,
            retry_after_s: None,
        }
    }

    /// 400 for a body that is not the JSON we expect at all.
    pub fn malformed(message: impl Into<String>) -> ApiError {
        ApiError {
            param: None,
            ..ApiError::invalid("", message)
        }
    }

    /// 400 `context_full`: the reply cannot fit the largest session.
    /// A prompt whose text alone, at the most bytes a token stands for, needs more tokens than
    /// the largest session holds (refused before it is tokenised).
    pub fn context_full_at_least(tokens: u64, largest: u64) -> ApiError {
        ApiError {
            code: Some("context_full"),
            ..ApiError::invalid(
                "messages",
                format!(
                    "this request needs at least {tokens} tokens (its text, before the reply) but \
                     the largest session holds {largest}; shorten the prompt"
                ),
            )
        }
    }

    pub fn context_full(reply_end: u64, largest: u64) -> ApiError {
        ApiError {
            code: Some("context_full"),
            ..ApiError::invalid(
                "max_tokens",
                format!(
                    "this request needs {reply_end} tokens (prompt + max_tokens + draft window) but the \
                     largest session holds {largest}; shorten the prompt or lower max_tokens"
                ),
            )
        }
    }

    pub fn unauthorized() -> ApiError {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            message:
                "missing or wrong API key (send `Authorization: Bearer KEY` or `x-api-key: KEY`)"
                    .into(),
            kind: "authentication_error",
            param: None,
            code: Some("invalid_api_key"),
            retry_after_s: None,
        }
    }

    pub fn overloaded(retry_after_s: u64) -> ApiError {
        ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            message: "the admission queue is full; retry later".into(),
            kind: "rate_limit_error",
            param: None,
            code: Some("queue_full"),
            retry_after_s: Some(retry_after_s),
        }
    }

    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: Some("unavailable"),
            retry_after_s: Some(1),
        }
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: None,
            retry_after_s: None,
        }
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
            kind: "invalid_request_error",
            param: None,
            code: Some("not_found"),
            retry_after_s: None,
        }
    }

    /// 413: the body is over `limit` bytes.
    pub fn too_large(limit: usize) -> ApiError {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            code: Some("request_too_large"),
            ..ApiError::malformed(format!(
                "the request body is over {limit} bytes; send a shorter prompt"
            ))
        }
    }

    /// 404 `model_not_found`: a model this server does not serve.
    pub fn model_not_found(asked: &str, served: &str) -> ApiError {
        ApiError {
            code: Some("model_not_found"),
            ..ApiError::not_found(format!(
                "the model `{asked}` does not exist here; this server serves `{served}`"
            ))
        }
    }

    /// 408: the request did not arrive in time.
    pub fn timeout(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::REQUEST_TIMEOUT,
            code: Some("request_timeout"),
            ..ApiError::malformed(message)
        }
    }

    /// 405: the path exists, the method does not.
    pub fn method_not_allowed(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::METHOD_NOT_ALLOWED,
            code: Some("method_not_allowed"),
            ..ApiError::malformed(message)
        }
    }

    pub fn body(&self) -> serde_json::Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

/// Where Anthropic's Messages API is served: errors under it take [`AnthropicError`]'s shape.
pub const ANTHROPIC_PATHS: &str = "/v1/messages";

impl ApiError {
    /// The response, in the shape of the API that `path` belongs to: for the errors answered
    /// before a handler runs (the API key, the body's size and time).
    pub fn response_for(self, path: &str) -> Response {
        if path.starts_with(ANTHROPIC_PATHS) {
            AnthropicError(self).into_response()
        } else {
            self.into_response()
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if let Some(seconds) = self.retry_after_s {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// An [`ApiError`] as Anthropic's API writes it: `{"type": "error", "error": {"type", "message"}}`
/// with the same status (and `Retry-After`), the type from the status as Anthropic names them.
/// The field a 400 is about is named in the message.
pub struct AnthropicError(pub ApiError);

impl AnthropicError {
    pub fn body(&self) -> serde_json::Value {
        let error = &self.0;
        let kind = match error.status.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 | 529 => "overloaded_error",
            400..=499 => "invalid_request_error",
            _ => "api_error",
        };
        let message = match error.param.as_deref().filter(|p| !p.is_empty()) {
            Some(param) => format!("{param}: {}", error.message),
            None => error.message.clone(),
        };
        json!({"type": "error", "error": {"type": kind, "message": message}})
    }
}

impl IntoResponse for AnthropicError {
    fn into_response(self) -> Response {
        let mut response = (self.0.status, axum::Json(self.body())).into_response();
        if let Some(seconds) = self.0.retry_after_s {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}
