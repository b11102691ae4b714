//! `POST /v1/messages` and `POST /v1/messages/count_tokens`: Anthropic's Messages API, for the
//! clients and agents written against it. The request becomes the chat a chat completion would
//! ([`crate::anthropic`]), runs on the same engine with the same arithmetic (the same reply, token
//! for token, as the chat API gives that chat), and comes back as content blocks: `thinking`,
//! `text` and `tool_use`, whole or as Anthropic's typed server-sent events.

use crate::anthropic;
use crate::engine_thread::StreamEvent;
use crate::error::{AnthropicError, ApiError};
use crate::generate::{
    admit, check_model, ending_error, input_tokens, on_prepare_pool, prepare, Choice, Shape,
};
use crate::reply::{Delta, Ending};
use crate::request::GenerateRequest;
use crate::state::AppState;
use crate::structured::ToolCall;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use lane::StreamId;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;

/// Events a slow client may leave unread before the writer waits (as the chat API's frames).
const SSE_EVENTS_MAX: usize = 64;

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

fn usage(input_tokens: u64, output_tokens: u64) -> Value {
    json!({"input_tokens": input_tokens, "output_tokens": output_tokens})
}

/// The whole message: the content blocks the stream would have sent. The stream runs inside this
/// handler's future: a client that goes away drops it, and the engine cancels the stream.
async fn whole_message(app: AppState, meta: MessageMeta, choice: Choice) -> Response {
    let Choice {
        stream,
        mut reply,
        mut events,
        ..
    } = choice;
    let mut blocks = Blocks::default();
    // The events are the streamed reply's; a whole one keeps only the blocks they built.
    let mut unsent = Vec::new();
    let ending = loop {
        match events.recv().await {
            Some(StreamEvent::Tokens(tokens)) => {
                let delta = reply.on_tokens(app.text.as_ref(), &tokens);
                blocks.on_delta(&meta, &delta, &mut unsent);
                if reply.stopped() {
                    app.engine.cancel(stream);
                    break Ending::Stop;
                }
            }
            Some(StreamEvent::Finished { reason, .. }) => {
                let (tail, ending) = reply.on_finish(app.text.as_ref(), &reason);
                blocks.on_delta(&meta, &tail, &mut unsent);
                break ending;
            }
            None => break Ending::Failed("the engine stopped".into()),
        }
        unsent.clear();
    };
    if let Some(error) = ending_error(&ending) {
        return AnthropicError(error).into_response();
    }
    blocks.finish(&mut unsent);
    let stop = stop_of(&ending, reply.stop_string(), blocks.calls);
    let body = meta.message(
        Value::Array(blocks.content),
        Some(&stop),
        usage(reply.prompt_tokens, reply.completion_tokens),
    );
    (StatusCode::OK, axum::Json(body)).into_response()
}

/// An event of Anthropic's stream: its name and its data.
fn event(name: &str, data: &Value) -> Result<Bytes, Infallible> {
    Ok(Bytes::from(format!("event: {name}\ndata: {data}\n\n")))
}

fn stream_message(app: AppState, meta: MessageMeta, choice: Choice) -> Response {
    let (events, body) = mpsc::channel::<Result<Bytes, Infallible>>(SSE_EVENTS_MAX);
    tokio::spawn(write_events(app, meta, choice, events));
    let stream = tokio_stream::wrappers::ReceiverStream::new(body);
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .expect("static headers are valid")
}

/// The kind of the content block a stream has open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpenBlock {
    Thinking,
    Text,
}

/// Turns a reply's deltas into content blocks and the events that stream them: a block opens
/// when its kind of content first comes and closes when another kind comes or the reply ends;
/// each tool call is a block of its own (its input as one `input_json_delta`). Whitespace at the
/// end of the text so far waits until more text comes: the whitespace a model writes around its
/// calls opens no block and ends none. A whole message is the blocks; a stream, the events.
#[derive(Debug, Default)]
struct Blocks {
    /// The blocks so far, the last one open or not.
    content: Vec<Value>,
    open: Option<OpenBlock>,
    /// Whitespace not yet sent: it goes out with the text that follows it, or never.
    held_space: String,
    calls: usize,
}

impl Blocks {
    fn on_delta(
        &mut self,
        meta: &MessageMeta,
        delta: &Delta,
        out: &mut Vec<(&'static str, Value)>,
    ) {
        if !delta.reasoning.is_empty() {
            self.ensure(OpenBlock::Thinking, out);
            self.add(OpenBlock::Thinking, &delta.reasoning, out);
        }
        if !delta.text.is_empty() {
            let mut text = std::mem::take(&mut self.held_space);
            text.push_str(&delta.text);
            let said = text.trim_end().len();
            self.held_space = text.split_off(said);
            if said > 0 {
                self.ensure(OpenBlock::Text, out);
                self.add(OpenBlock::Text, &text, out);
            }
        }
        for call in &delta.tool_calls {
            self.close(out);
            self.held_space.clear();
            let index = self.content.len();
            let block = meta.tool_use(self.calls, call);
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
            self.content.push(block);
            self.calls += 1;
        }
    }

    /// Opens a block of `kind` unless one is open.
    fn ensure(&mut self, kind: OpenBlock, out: &mut Vec<(&'static str, Value)>) {
        if self.open == Some(kind) {
            return;
        }
        self.close(out);
        // No signature: this server keeps no thinking to verify (past thinking sent back is
        // left out of the prompt).
        let block = match kind {
            OpenBlock::Thinking => json!({"type": "thinking", "thinking": "", "signature": ""}),
            OpenBlock::Text => json!({"type": "text", "text": ""}),
        };
        out.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": self.content.len(), "content_block": block}),
        ));
        self.content.push(block);
        self.open = Some(kind);
    }

    /// Adds `piece` to the open block, of `kind`.
    fn add(&mut self, kind: OpenBlock, piece: &str, out: &mut Vec<(&'static str, Value)>) {
        let (field, delta) = match kind {
            OpenBlock::Thinking => ("thinking", "thinking_delta"),
            OpenBlock::Text => ("text", "text_delta"),
        };
        let index = self.content.len() - 1;
        if let Value::String(text) = &mut self.content[index][field] {
            text.push_str(piece);
        }
        out.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index,
                   "delta": {"type": delta, field: piece}}),
        ));
    }

    /// The reply's end: an open text block takes the whitespace held back, a reply that said
    /// nothing is one text block (of its whitespace), and the open block closes.
    fn finish(&mut self, out: &mut Vec<(&'static str, Value)>) {
        let held = std::mem::take(&mut self.held_space);
        if self.content.is_empty() {
            self.ensure(OpenBlock::Text, out);
        }
        if self.open == Some(OpenBlock::Text) && !held.is_empty() {
            self.add(OpenBlock::Text, &held, out);
        }
        self.close(out);
    }

    fn close(&mut self, out: &mut Vec<(&'static str, Value)>) {
        if self.open.take().is_some() {
            out.push((
                "content_block_stop",
                json!({"type": "content_block_stop", "index": self.content.len() - 1}),
            ));
        }
    }
}

/// Writes `message_start`, the content blocks as the rounds come, and `message_delta` (the
/// stop reason and the output tokens) and `message_stop`; or an `error` event where the reply
/// failed. If the client goes away, sending fails, the writer ends and drops its receiver, and
/// the engine cancels the stream before its next round.
async fn write_events(
    app: AppState,
    meta: MessageMeta,
    choice: Choice,
    sink: mpsc::Sender<Result<Bytes, Infallible>>,
) {
    let Choice {
        stream,
        mut reply,
        mut events,
        ..
    } = choice;
    let start = meta.message(json!([]), None, usage(reply.prompt_tokens, 0));
    let opening = [
        event(
            "message_start",
            &json!({"type": "message_start", "message": start}),
        ),
        event("ping", &json!({"type": "ping"})),
    ];
    for frame in opening {
        if sink.send(frame).await.is_err() {
            return;
        }
    }
    let mut blocks = Blocks::default();
    let mut out: Vec<(&'static str, Value)> = Vec::new();
    let ending = loop {
        let next = tokio::select! {
            next = events.recv() => next,
            _ = sink.closed() => return,
        };
        let ending = match next {
            Some(StreamEvent::Tokens(tokens)) => {
                let delta = reply.on_tokens(app.text.as_ref(), &tokens);
                blocks.on_delta(&meta, &delta, &mut out);
                if reply.stopped() {
                    app.engine.cancel(stream);
                    Some(Ending::Stop)
                } else {
                    None
                }
            }
            Some(StreamEvent::Finished { reason, .. }) => {
                let (tail, ending) = reply.on_finish(app.text.as_ref(), &reason);
                blocks.on_delta(&meta, &tail, &mut out);
                Some(ending)
            }
            None => Some(Ending::Failed("the engine stopped".into())),
        };
        for (name, data) in out.drain(..) {
            if sink.send(event(name, &data)).await.is_err() {
                return;
            }
        }
        if let Some(ending) = ending {
            break ending;
        }
    };
    if let Some(error) = ending_error(&ending) {
        let _ = sink
            .send(event("error", &AnthropicError(error).body()))
            .await;
        return;
    }
    blocks.finish(&mut out);
    let stop = stop_of(&ending, reply.stop_string(), blocks.calls);
    out.push((
        "message_delta",
        json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop.reason, "stop_sequence": stop.sequence},
            "usage": {"output_tokens": reply.completion_tokens},
        }),
    ));
    out.push(("message_stop", json!({"type": "message_stop"})));
    for (name, data) in out.drain(..) {
        if sink.send(event(name, &data)).await.is_err() {
            return;
        }
    }
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

    fn delta(text: &str, reasoning: &str, calls: &[&str]) -> Delta {
        Delta {
            text: text.into(),
            reasoning: reasoning.into(),
            tool_calls: calls
                .iter()
                .map(|name| ToolCall {
                    name: name.to_string(),
                    arguments: "{\"a\": 1}".into(),
                })
                .collect(),
            ..Delta::default()
        }
    }

    /// Each event as "name index kind", for a short comparison.
    fn summary(out: &[(&'static str, Value)]) -> Vec<String> {
        out.iter()
            .map(|(name, data)| {
                let kind = data["content_block"]["type"]
                    .as_str()
                    .or(data["delta"]["type"].as_str())
                    .unwrap_or("");
                format!("{name} {} {kind}", data["index"])
            })
            .collect()
    }

    #[test]
    fn blocks_open_and_close_as_the_kind_of_content_changes() {
        let (meta, mut blocks, mut out) = (meta(), Blocks::default(), Vec::new());
        blocks.on_delta(&meta, &delta("", "let me", &[]), &mut out);
        blocks.on_delta(&meta, &delta("", " see", &[]), &mut out);
        // Whitespace alone opens nothing; it goes out with the text after it.
        blocks.on_delta(&meta, &delta("\n", "", &[]), &mut out);
        blocks.on_delta(&meta, &delta("Sure.", "", &[]), &mut out);
        blocks.on_delta(&meta, &delta("\n\n", "", &["f", "g"]), &mut out);
        blocks.on_delta(&meta, &delta("\n", "", &[]), &mut out);
        blocks.finish(&mut out);
        assert_eq!(
            summary(&out),
            [
                "content_block_start 0 thinking",
                "content_block_delta 0 thinking_delta",
                "content_block_delta 0 thinking_delta",
                "content_block_stop 0 ",
                "content_block_start 1 text",
                "content_block_delta 1 text_delta",
                "content_block_stop 1 ",
                "content_block_start 2 tool_use",
                "content_block_delta 2 input_json_delta",
                "content_block_stop 2 ",
                "content_block_start 3 tool_use",
                "content_block_delta 3 input_json_delta",
                "content_block_stop 3 ",
            ]
        );
        assert_eq!(out[5].1["delta"]["text"], "\nSure.");
        assert_eq!(out[8].1["delta"]["partial_json"], "{\"a\":1}");
        assert_eq!(out[7].1["content_block"]["input"], json!({}));
        assert_ne!(
            out[7].1["content_block"]["id"],
            out[10].1["content_block"]["id"]
        );
        assert_eq!(blocks.calls, 2);
        // The blocks the events built, as a whole message has them.
        assert_eq!(blocks.content.len(), 4);
        assert_eq!(
            blocks.content[0],
            json!({"type": "thinking", "thinking": "let me see", "signature": ""})
        );
        assert_eq!(
            blocks.content[1],
            json!({"type": "text", "text": "\nSure."})
        );
        assert_eq!(blocks.content[2]["input"], json!({"a": 1}));
        assert_eq!(blocks.content[3]["name"], "g");
    }

    #[test]
    fn a_reply_that_says_nothing_is_one_text_block_and_trailing_whitespace_stays_in_its_block() {
        let (meta, mut blocks, mut out) = (meta(), Blocks::default(), Vec::new());
        blocks.on_delta(&meta, &delta(" \n", "", &[]), &mut out);
        blocks.finish(&mut out);
        assert_eq!(blocks.content, [json!({"type": "text", "text": " \n"})]);
        assert_eq!(
            summary(&out),
            [
                "content_block_start 0 text",
                "content_block_delta 0 text_delta",
                "content_block_stop 0 "
            ]
        );
        let (mut blocks, mut out) = (Blocks::default(), Vec::new());
        blocks.on_delta(&meta, &delta("Done. ", "", &[]), &mut out);
        blocks.on_delta(&meta, &delta("\n", "", &[]), &mut out);
        blocks.finish(&mut out);
        assert_eq!(
            blocks.content,
            [json!({"type": "text", "text": "Done. \n"})]
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
