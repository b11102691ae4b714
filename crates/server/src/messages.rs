//! `POST /v1/messages` and `POST /v1/messages/count_tokens`: Anthropic's Messages API, for the
//! clients and agents written against it. The request becomes the chat a chat completion would
//! ([`crate::anthropic`]), runs on the same engine with the same arithmetic (the same reply, token
//! for token, as the chat API gives that chat), and comes back as content blocks: `thinking`,
//! `text` and `tool_use`, whole or as Anthropic's typed server-sent events.

use crate::anthropic;
use crate::blocks::{Block, BlockEvent, Blocks, Growing, Round};
use crate::error::{AnthropicError, ApiError};
use crate::generate::{
    admit, check_model, ending_error, input_tokens, on_prepare_pool, prepare, send_all,
    sse_response, Choice, Frames, Shape,
};
use crate::reply::{Ending, Reply};
use crate::request::GenerateRequest;
use crate::state::AppState;
use crate::structured::ToolCall;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use lane::StreamId;
use serde_json::{json, Value};
use std::time::{SystemTime, UNIX_EPOCH};

/// `POST /v1/messages`.
pub async fn messages(State(app): State<AppState>, body: Bytes) -> Response {
    let prepared = match prepare(&app, body, Shape::Chat, parse).await {
        Ok(prepared) => prepared,
        Err(error) => return AnthropicError(error).into_response(),
    };
    let (req, mut choices) = match admit(&app, Shape::Chat, prepared).await {
        Ok(admitted) => admitted,
        Err(error) => return AnthropicError(error).into_response(),
    };
    let choice = choices
        .pop()
        .expect("a messages request is one choice, admitted");
    let meta = MessageMeta::new(&app, choice.stream);
    if req.stream {
        stream_message(app, meta, choice)
    } else {
        whole_message(app, meta, choice).await
    }
}

/// `POST /v1/messages/count_tokens`: `{"input_tokens": N}`, the prompt's tokens as
/// `/v1/messages` would send the same body to the engine.
pub async fn count_tokens(State(app): State<AppState>, body: Bytes) -> Response {
    let counted = on_prepare_pool(&app, move |app| {
        let req = parse(app, &body)?;
        check_model(app, req.model.as_deref())?;
        Ok(input_tokens(app, &req)?.len())
    })
    .await;
    match counted {
        Ok(n) => axum::Json(json!({ "input_tokens": n })).into_response(),
        Err(error) => AnthropicError(error).into_response(),
    }
}

/// The body as the chat the engine is asked. A model without thinking tags answers a request
/// that enables thinking without thinking (as it would a client that cannot know the model).
fn parse(app: &AppState, body: &[u8]) -> Result<GenerateRequest, ApiError> {
    let mut req = anthropic::parse_messages(body)?;
    if app.text.thinking_tags().is_none() {
        req.thinking_budget = None;
    }
    Ok(req)
}

/// The fixed parts of one message's response.
struct MessageMeta {
    id: String,
    created: u64,
    model: String,
    stream: StreamId,
}

impl MessageMeta {
    fn new(app: &AppState, stream: StreamId) -> MessageMeta {
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        MessageMeta {
            id: format!("msg_{created:x}{:08x}", stream.0),
            created,
            model: app.text.model_id().to_string(),
            stream,
        }
    }

    /// The id of the reply's `index`-th tool call: unique per reply and server run.
    fn tool_use_id(&self, index: usize) -> String {
        let mixed =
            lane::sampling::mix64(self.stream.0 ^ self.created.rotate_left(32)) ^ index as u64;
        format!("toolu_{mixed:016x}")
    }

    fn tool_use(&self, index: usize, call: &ToolCall) -> Value {
        json!({
            "type": "tool_use",
            "id": self.tool_use_id(index),
            "name": call.name,
            "input": tool_input(call),
        })
    }

    /// The message object, `content` and `stop_reason` as given.
    fn message(&self, content: Value, stop: Option<&Stop>, usage: Value) -> Value {
        json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop.map(|s| s.reason),
            "stop_sequence": stop.and_then(|s| s.sequence.clone()),
            "usage": usage,
        })
    }
}

/// A call's `input`: its arguments as JSON (the parser only reads calls whose arguments are
/// JSON; an object, as Anthropic's clients expect, whenever the model wrote one).
fn tool_input(call: &ToolCall) -> Value {
    serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}))
}

/// Why a message ended, in Anthropic's words.
struct Stop {
    reason: &'static str,
    sequence: Option<String>,
}

/// `end_turn`, `max_tokens`, `stop_sequence` (naming it) or `tool_use`, for a reply that ended
/// well.
fn stop_of(ending: &Ending, stop_string: Option<&str>, tool_calls: usize) -> Stop {
    let reason = match (ending, stop_string) {
        (Ending::Length, _) => "max_tokens",
        (_, Some(_)) => "stop_sequence",
        _ if tool_calls > 0 => "tool_use",
        _ => "end_turn",
    };
    Stop {
        reason,
        sequence: stop_string
            .filter(|_| reason == "stop_sequence")
            .map(str::to_string),
    }
}

/// Anthropic's usage: `input_tokens` are the prompt's tokens not read from the prompt cache,
/// `cache_read_input_tokens` those that were (together the whole prompt, as Anthropic counts).
fn usage(reply: &Reply) -> Value {
    json!({
        "input_tokens": reply.prompt_tokens - reply.cached_tokens.min(reply.prompt_tokens),
        "cache_read_input_tokens": reply.cached_tokens,
        "output_tokens": reply.completion_tokens,
    })
}

/// The whole message: the content blocks the stream would have sent. The stream runs inside this
/// handler's future: a client that goes away drops it, and the engine cancels the stream.
async fn whole_message(app: AppState, meta: MessageMeta, choice: Choice) -> Response {
    let mut choice = choice;
    let (blocks, ending) = Blocks::read_whole(&app, &mut choice).await;
    if let Some(error) = ending_error(&ending) {
        return AnthropicError(error).into_response();
    }
    let reply = choice.reply;
    let stop = stop_of(&ending, reply.stop_string(), blocks.calls);
    let content = blocks
        .content
        .iter()
        .map(|block| content_block(&meta, block));
    let body = meta.message(Value::Array(content.collect()), Some(&stop), usage(&reply));
    (StatusCode::OK, axum::Json(body)).into_response()
}

/// An event of Anthropic's stream: its name and its data.
fn event(name: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

/// The events queued in `out`, as frames, leaving it empty.
fn drained(out: &mut Vec<(&'static str, Value)>) -> Vec<Bytes> {
    out.drain(..)
        .map(|(name, data)| event(name, &data))
        .collect()
}

fn stream_message(app: AppState, meta: MessageMeta, choice: Choice) -> Response {
    sse_response(|frames| write_events(app, meta, choice, frames))
}

/// A block as Anthropic writes it. No signature on thinking: this server keeps no thinking to
/// verify (past thinking sent back is left out of the prompt).
fn content_block(meta: &MessageMeta, block: &Block) -> Value {
    match block {
        Block::Thinking(thinking) => {
            json!({"type": "thinking", "thinking": thinking, "signature": ""})
        }
        Block::Text(text) => json!({"type": "text", "text": text}),
        Block::Call { call, tool } => meta.tool_use(*call, tool),
    }
}

/// The events of Anthropic's stream for some block events: a thinking or text block opens empty
/// and grows by deltas; a tool call is a block whose whole input is one `input_json_delta`.
fn anthropic_events(
    meta: &MessageMeta,
    blocks: &Blocks,
    happened: &[BlockEvent],
    out: &mut Vec<(&'static str, Value)>,
) {
    for event in happened {
        match event {
            BlockEvent::Open { index, kind } => {
                let empty = match kind {
                    Growing::Thinking => Block::Thinking(String::new()),
                    Growing::Text => Block::Text(String::new()),
                };
                out.push((
                    "content_block_start",
                    json!({"type": "content_block_start", "index": index,
                           "content_block": content_block(meta, &empty)}),
                ));
            }
            BlockEvent::Piece {
                index, kind, text, ..
            } => {
                let delta = match kind {
                    Growing::Thinking => json!({"type": "thinking_delta", "thinking": text}),
                    Growing::Text => json!({"type": "text_delta", "text": text}),
                };
                out.push((
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index, "delta": delta}),
                ));
            }
            BlockEvent::Close { index, .. } => out.push((
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            )),
            BlockEvent::Call { index } => {
                let block = content_block(meta, &blocks.content[*index]);
                let mut start = block.clone();
                start["input"] = json!({});
                out.push((
                    "content_block_start",
                    json!({"type": "content_block_start", "index": index, "content_block": start}),
                ));
                out.push((
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index,
                           "delta": {"type": "input_json_delta", "partial_json": block["input"].to_string()}}),
                ));
                out.push((
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": index}),
                ));
            }
        }
    }
}

/// Writes `message_start`, the content blocks as the rounds come, and `message_delta` (the
/// stop reason and the output tokens) and `message_stop`; or an `error` event where the reply
/// failed. If the client goes away, sending fails, the writer ends and drops its receiver, and
/// the engine cancels the stream before its next round.
async fn write_events(app: AppState, meta: MessageMeta, choice: Choice, sink: Frames) {
    let mut choice = choice;
    let mut blocks = Blocks::default();
    let mut happened = Vec::new();
    let mut out: Vec<(&'static str, Value)> = Vec::new();
    // `message_start` goes once the stream has a session: its admission says how much of the
    // prompt the cache held (a stream that ends unadmitted, none), before its prompt runs.
    if !choice.admitted(sink.closed()).await {
        return;
    }
    let mut start = usage(&choice.reply);
    start["output_tokens"] = json!(0);
    let start = meta.message(json!([]), None, start);
    out.push((
        "message_start",
        json!({"type": "message_start", "message": start}),
    ));
    out.push(("ping", json!({"type": "ping"})));
    let ending = loop {
        if !send_all(&sink, drained(&mut out)).await {
            return;
        }
        let round = blocks
            .read_round(&app, &mut choice, sink.closed(), &mut happened)
            .await;
        if let Round::ClientGone = round {
            return;
        }
        // (Sent at the top of the next turn, or with the end.)
        anthropic_events(&meta, &blocks, &happened, &mut out);
        happened.clear();
        if let Round::Ended(ending) = round {
            break ending;
        }
    };
    if let Some(error) = ending_error(&ending) {
        let _ = sink
            .send(Ok(event("error", &AnthropicError(error).body())))
            .await;
        return;
    }
    blocks.finish(&mut happened);
    anthropic_events(&meta, &blocks, &happened, &mut out);
    let reply = &choice.reply;
    let stop = stop_of(&ending, reply.stop_string(), blocks.calls);
    out.push((
        "message_delta",
        json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop.reason, "stop_sequence": stop.sequence},
            "usage": usage(reply),
        }),
    ));
    out.push(("message_stop", json!({"type": "message_stop"})));
    send_all(&sink, drained(&mut out)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> MessageMeta {
        MessageMeta {
            id: "msg_1".into(),
            created: 1,
            model: "m".into(),
            stream: StreamId(7),
        }
    }

    #[test]
    fn block_events_become_anthropics_events() {
        let meta = meta();
        let (blocks, happened) = crate::blocks::think_say_call("Sure.\n");
        let mut out = Vec::new();
        anthropic_events(&meta, &blocks, &happened, &mut out);
        let summary: Vec<String> = out
            .iter()
            .map(|(name, data)| {
                let kind = data["content_block"]["type"]
                    .as_str()
                    .or(data["delta"]["type"].as_str())
                    .unwrap_or("");
                format!("{name} {} {kind}", data["index"])
            })
            .collect();
        assert_eq!(
            summary,
            [
                "content_block_start 0 thinking",
                "content_block_delta 0 thinking_delta",
                "content_block_stop 0 ",
                "content_block_start 1 text",
                "content_block_delta 1 text_delta",
                "content_block_stop 1 ",
                "content_block_start 2 tool_use",
                "content_block_delta 2 input_json_delta",
                "content_block_stop 2 ",
            ]
        );
        assert_eq!(
            out[0].1["content_block"],
            json!({"type": "thinking", "thinking": "", "signature": ""})
        );
        assert_eq!(out[4].1["delta"]["text"], "Sure.");
        assert_eq!(out[6].1["content_block"]["input"], json!({}));
        assert_eq!(out[6].1["content_block"]["name"], "f");
        assert!(out[6].1["content_block"]["id"]
            .as_str()
            .unwrap()
            .starts_with("toolu_"));
        assert_eq!(out[7].1["delta"]["partial_json"], "{\"a\":1}");
        assert_eq!(
            content_block(&meta, &blocks.content[2])["input"],
            json!({"a": 1})
        );
    }

    #[test]
    fn stop_reasons_say_why_in_anthropics_words() {
        let reason = |ending: Ending, stop: Option<&str>, calls| {
            let s = stop_of(&ending, stop, calls);
            (s.reason, s.sequence)
        };
        assert_eq!(reason(Ending::Stop, None, 0), ("end_turn", None));
        assert_eq!(reason(Ending::Length, None, 2), ("max_tokens", None));
        assert_eq!(reason(Ending::Stop, None, 1), ("tool_use", None));
        assert_eq!(
            reason(Ending::Stop, Some("END"), 0),
            ("stop_sequence", Some("END".to_string()))
        );
    }
}
