//! `POST /v1/responses`: OpenAI's Responses API, for the agents and SDKs written against it. The
//! request becomes the chat a chat completion would ([`crate::openai_responses`]), runs on the
//! same engine (the chat API's reply to that chat, token for token), and comes back as output
//! items — `reasoning`, `message`, `function_call` — whole or as the API's typed events. No
//! response is stored (`store` is accepted and the answer says `false`).

use crate::blocks::{Block, BlockEvent, Blocks, Growing, Round};
use crate::generate::{
    admit, ending_error, prepare, send_all, sse_response, Choice, Frames, Shape,
};
use crate::openai_responses;
use crate::reply::{Ending, LogprobEntry, Reply};
use crate::request::GenerateRequest;
use crate::state::AppState;
use crate::structured::{ToolChoice, Tools};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use lane::StreamId;
use serde_json::{json, Value};
use std::time::{SystemTime, UNIX_EPOCH};

/// `POST /v1/responses`.
pub async fn responses(State(app): State<AppState>, body: Bytes) -> Response {
    let parse = |_: &AppState, body: &[u8]| openai_responses::parse_responses(body);
    let prepared = match prepare(&app, body, Shape::Chat, parse).await {
        Ok(prepared) => prepared,
        Err(error) => return error.into_response(),
    };
    let (req, mut choices) = match admit(&app, Shape::Chat, prepared).await {
        Ok(admitted) => admitted,
        Err(error) => return error.into_response(),
    };
    let choice = choices.pop().expect("a response is one choice, admitted");
    let meta = ResponseMeta::new(&app, &req, choice.stream);
    if req.stream {
        stream_response(app, meta, choice)
    } else {
        whole_response(app, meta, choice).await
    }
}

/// The fixed parts of one response, and what the request said that the answer repeats.
struct ResponseMeta {
    id: String,
    created: u64,
    model: String,
    stream: StreamId,
    /// `instructions`, `text`, `max_output_tokens`, `temperature`, `top_p`, `tool_choice`,
    /// `tools` and `parallel_tool_calls` as the response object repeats them.
    echo: Value,
}

impl ResponseMeta {
    fn new(app: &AppState, req: &GenerateRequest, stream: StreamId) -> ResponseMeta {
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut echo = json!({
            "instructions": null,
            "text": {"format": {"type": "text"}},
            "max_output_tokens": req.max_tokens,
            "temperature": req.sampling.temperature,
            "top_p": req.sampling.top_p,
            "tool_choice": tool_choice(&req.tools),
            "tools": req.tools.tools.iter().map(|tool| {
                let function = &tool.definition["function"];
                json!({"type": "function", "name": tool.name, "description": function["description"],
                       "parameters": tool.parameters, "strict": Value::Null})
            }).collect::<Vec<_>>(),
            "parallel_tool_calls": req.tools.parallel,
        });
        // As the request sent them.
        if let Value::Object(echo) = &mut echo {
            echo.extend(req.echo.clone());
        }
        ResponseMeta {
            id: format!("resp_{created:x}{:08x}", stream.0),
            created,
            model: app.text.model_id().to_string(),
            stream,
            echo,
        }
    }

    /// The id of the reply's `index`-th output item, of the kind `prefix` names.
    fn item_id(&self, prefix: &str, index: usize) -> String {
        format!("{prefix}_{}_{index}", &self.id["resp_".len()..])
    }

    /// The `call`-th tool call's `call_id`: unique per reply and server run.
    fn call_id(&self, call: usize) -> String {
        let mixed =
            lane::sampling::mix64(self.stream.0 ^ self.created.rotate_left(32)) ^ call as u64;
        format!("call_{mixed:016x}")
    }

    /// The output item of block `index`, complete or still growing (`done`).
    fn item(&self, index: usize, block: &Block, logprobs: &[LogprobEntry], done: bool) -> Value {
        let status = if done { "completed" } else { "in_progress" };
        match block {
            Block::Thinking(text) => json!({
                "type": "reasoning", "id": self.item_id("rs", index), "summary": [],
                "content": if done { json!([{"type": "reasoning_text", "text": text}]) } else { json!([]) },
                "status": status,
            }),
            Block::Text(text) => json!({
                "type": "message", "id": self.item_id("msg", index), "role": "assistant",
                "status": status,
                "content": if done { json!([output_text(text, logprobs)]) } else { json!([]) },
            }),
            Block::Call { call, tool } => json!({
                "type": "function_call", "id": self.item_id("fc", index),
                "call_id": self.call_id(*call), "name": tool.name,
                "arguments": if done { tool.arguments.as_str() } else { "" },
                "status": status,
            }),
        }
    }

    /// The response object: `output` and `usage` as given, its status from `ending` (`None`: in
    /// progress).
    fn response(&self, output: Vec<Value>, ending: Option<&Ending>, usage: Value) -> Value {
        let (status, incomplete) = match ending {
            None => ("in_progress", Value::Null),
            Some(Ending::Length) => ("incomplete", json!({"reason": "max_output_tokens"})),
            Some(_) => ("completed", Value::Null),
        };
        let mut response = json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "error": null,
            "incomplete_details": incomplete,
            "model": self.model,
            "output": output,
            "usage": usage,
            "store": false,
            "truncation": "disabled",
            "metadata": {},
        });
        if let (Value::Object(response), Value::Object(echo)) = (&mut response, &self.echo) {
            response.extend(echo.clone());
        }
        response
    }
}

fn output_text(text: &str, logprobs: &[LogprobEntry]) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs_json(logprobs)})
}

/// Text tokens' log-probabilities as the Responses API writes them (empty where none were
/// asked for).
fn logprobs_json(entries: &[LogprobEntry]) -> Value {
    let one = |token: &str, logprob: f32| json!({"token": token, "logprob": logprob, "bytes": token.as_bytes()});
    entries
        .iter()
        .map(|e| {
            let mut entry = one(&e.token, e.logprob);
            entry["top_logprobs"] = e.top.iter().map(|(t, lp)| one(t, *lp)).collect();
            entry
        })
        .collect()
}

/// `tool_choice` as the Responses API writes it.
fn tool_choice(tools: &Tools) -> Value {
    match &tools.choice {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::None => json!("none"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Function(name) => json!({"type": "function", "name": name}),
    }
}

/// The tokens of the prompt (of those, the ones the prompt cache held) and of the reply (of
/// those, its thinking's).
fn usage(reply: &Reply) -> Value {
    json!({
        "input_tokens": reply.prompt_tokens,
        "input_tokens_details": {"cached_tokens": reply.cached_tokens},
        "output_tokens": reply.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": reply.reasoning_tokens},
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
    })
}

/// The whole response: the output items its stream would have sent. The stream runs inside
/// this handler's future: a client that goes away drops it, and the engine cancels the stream.
async fn whole_response(app: AppState, meta: ResponseMeta, choice: Choice) -> Response {
    let mut choice = choice;
    let (blocks, ending) = Blocks::read_whole(&app, &mut choice).await;
    if let Some(error) = ending_error(&ending) {
        return error.into_response();
    }
    let output = output_so_far(&meta, &blocks);
    let body = meta.response(output, Some(&ending), usage(&choice.reply));
    (StatusCode::OK, axum::Json(body)).into_response()
}

fn stream_response(app: AppState, meta: ResponseMeta, choice: Choice) -> Response {
    sse_response(|frames| write_events(app, meta, choice, frames))
}

/// The Responses API's events, numbered in order (`sequence_number`).
#[derive(Default)]
struct Numbered {
    next: u64,
    out: Vec<Bytes>,
}

impl Numbered {
    fn push(&mut self, mut data: Value) {
        data["sequence_number"] = json!(self.next);
        self.next += 1;
        let name = data["type"].as_str().unwrap_or("message").to_string();
        self.out
            .push(Bytes::from(format!("event: {name}\ndata: {data}\n\n")));
    }
}

/// The items of the blocks (so far), each as it stands.
fn output_so_far(meta: &ResponseMeta, blocks: &Blocks) -> Vec<Value> {
    blocks
        .content
        .iter()
        .enumerate()
        .map(|(index, block)| meta.item(index, block, &blocks.logprobs[index], true))
        .collect()
}

/// The events for some block events: an item is added, its one content part added, grown by
/// deltas and done, and the item done; a tool call's arguments come as one delta.
fn response_events(
    meta: &ResponseMeta,
    blocks: &Blocks,
    happened: &[BlockEvent],
    out: &mut Numbered,
) {
    for event in happened {
        match event {
            BlockEvent::Open { index, kind } => {
                let empty = match kind {
                    Growing::Thinking => Block::Thinking(String::new()),
                    Growing::Text => Block::Text(String::new()),
                };
                let item = meta.item(*index, &empty, &[], false);
                let part = match kind {
                    Growing::Thinking => json!({"type": "reasoning_text", "text": ""}),
                    Growing::Text => output_text("", &[]),
                };
                out.push(json!({"type": "response.output_item.added", "output_index": index, "item": item}));
                out.push(
                    json!({"type": "response.content_part.added", "output_index": index,
                                "item_id": item["id"], "content_index": 0, "part": part}),
                );
            }
            BlockEvent::Piece {
                index,
                kind,
                text,
                logprobs,
            } => {
                let item_id = meta.item(*index, &blocks.content[*index], &[], false)["id"].clone();
                let mut delta = json!({"output_index": index, "item_id": item_id, "content_index": 0, "delta": text});
                match kind {
                    Growing::Thinking => delta["type"] = json!("response.reasoning_text.delta"),
                    Growing::Text => {
                        delta["type"] = json!("response.output_text.delta");
                        delta["logprobs"] =
                            logprobs_json(&blocks.logprobs[*index][logprobs.clone()]);
                    }
                }
                out.push(delta);
            }
            BlockEvent::Close { index, kind } => {
                let item = meta.item(
                    *index,
                    &blocks.content[*index],
                    &blocks.logprobs[*index],
                    true,
                );
                let part = item["content"][0].clone();
                let mut done = json!({"output_index": index, "item_id": item["id"], "content_index": 0,
                                      "text": part["text"]});
                match kind {
                    Growing::Thinking => done["type"] = json!("response.reasoning_text.done"),
                    Growing::Text => {
                        done["type"] = json!("response.output_text.done");
                        done["logprobs"] = part["logprobs"].clone();
                    }
                }
                out.push(done);
                out.push(
                    json!({"type": "response.content_part.done", "output_index": index,
                                "item_id": item["id"], "content_index": 0, "part": part}),
                );
                out.push(json!({"type": "response.output_item.done", "output_index": index, "item": item}));
            }
            BlockEvent::Call { index } => {
                let block = &blocks.content[*index];
                let item = meta.item(*index, block, &[], true);
                out.push(
                    json!({"type": "response.output_item.added", "output_index": index,
                                "item": meta.item(*index, block, &[], false)}),
                );
                out.push(
                    json!({"type": "response.function_call_arguments.delta", "output_index": index,
                                "item_id": item["id"], "delta": item["arguments"]}),
                );
                out.push(json!({"type": "response.function_call_arguments.done", "output_index": index,
                                "item_id": item["id"], "name": item["name"], "arguments": item["arguments"]}));
                out.push(json!({"type": "response.output_item.done", "output_index": index, "item": item}));
            }
        }
    }
}

/// Writes `response.created` and `response.in_progress`, the items as the rounds come, and
/// `response.completed` (or `response.incomplete` at `max_output_tokens`); or
/// `response.failed` (its `error` saying why) where the reply failed. If the client goes away, sending fails, the writer ends and drops its
/// receiver, and the engine cancels the stream before its next round.
async fn write_events(app: AppState, meta: ResponseMeta, choice: Choice, sink: Frames) {
    let mut choice = choice;
    let mut out = Numbered::default();
    let started = meta.response(Vec::new(), None, Value::Null);
    out.push(json!({"type": "response.created", "response": started}));
    out.push(json!({"type": "response.in_progress", "response": started}));
    let mut blocks = Blocks::default();
    let mut happened = Vec::new();
    let ending = loop {
        if !send_all(&sink, out.out.drain(..)).await {
            return;
        }
        let round = blocks
            .read_round(&app, &mut choice, sink.closed(), &mut happened)
            .await;
        response_events(&meta, &blocks, &happened, &mut out);
        happened.clear();
        match round {
            Round::Going => {}
            Round::Ended(ending) => break ending,
            Round::ClientGone => return,
        }
    };
    if let Some(error) = ending_error(&ending) {
        // The stream's last event says the response failed, and why (a client that retries
        // on a dropped stream reads this one as final).
        let mut failed = meta.response(output_so_far(&meta, &blocks), None, Value::Null);
        failed["status"] = json!("failed");
        let code = match error.code {
            Some("context_full") => "context_length_exceeded",
            Some(code) => code,
            None => "server_error",
        };
        failed["error"] = json!({"code": code, "message": error.message});
        out.push(json!({"type": "response.failed", "response": failed}));
    } else {
        blocks.finish(&mut happened);
        response_events(&meta, &blocks, &happened, &mut out);
        let output = output_so_far(&meta, &blocks);
        let usage = usage(&choice.reply);
        let kind = match ending {
            Ending::Length => "response.incomplete",
            _ => "response.completed",
        };
        out.push(json!({"type": kind, "response": meta.response(output, Some(&ending), usage)}));
    }
    send_all(&sink, out.out.drain(..)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> ResponseMeta {
        ResponseMeta {
            id: "resp_1".into(),
            created: 1,
            model: "m".into(),
            stream: StreamId(7),
            echo: json!({"tools": [], "tool_choice": "auto", "parallel_tool_calls": true}),
        }
    }

    #[test]
    fn block_events_become_the_responses_apis_numbered_events() {
        let meta = meta();
        let (blocks, happened) = crate::blocks::think_say_call("Sure.");
        let mut out = Numbered::default();
        response_events(&meta, &blocks, &happened, &mut out);
        let events: Vec<Value> = out
            .out
            .iter()
            .map(|frame| {
                let text = std::str::from_utf8(frame).unwrap();
                let (head, data) = text.split_once("\ndata: ").unwrap();
                let data: Value = serde_json::from_str(data.trim_end()).unwrap();
                assert_eq!(head, format!("event: {}", data["type"].as_str().unwrap()));
                data
            })
            .collect();
        let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "response.output_item.added",
                "response.content_part.added",
                "response.reasoning_text.delta",
                "response.reasoning_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
            ]
        );
        let numbers: Vec<u64> = events
            .iter()
            .map(|e| e["sequence_number"].as_u64().unwrap())
            .collect();
        assert_eq!(numbers, (0..16).collect::<Vec<u64>>());
        assert_eq!(events[5]["item"]["content"][0]["text"], "hm");
        assert_eq!(events[11]["item"]["content"][0]["text"], "Sure.");
        assert_eq!(events[11]["item"]["type"], "message");
        let call = &events[15]["item"];
        assert_eq!(
            (
                call["type"].as_str(),
                call["name"].as_str(),
                call["arguments"].as_str()
            ),
            (Some("function_call"), Some("f"), Some("{\"a\": 1}"))
        );
        assert!(call["call_id"].as_str().unwrap().starts_with("call_"));
        assert_eq!(events[12]["item"]["arguments"], "");
        // Each item's id is the same in all its events.
        assert_eq!(events[8]["item_id"], events[11]["item"]["id"]);
    }

    #[test]
    fn a_response_cut_by_max_output_tokens_is_incomplete() {
        let meta = meta();
        let cut = meta.response(Vec::new(), Some(&Ending::Length), Value::Null);
        assert_eq!(cut["status"], "incomplete");
        assert_eq!(cut["incomplete_details"]["reason"], "max_output_tokens");
        let done = meta.response(Vec::new(), Some(&Ending::Stop), Value::Null);
        assert_eq!(
            (done["status"].as_str(), done["tool_choice"].as_str()),
            (Some("completed"), Some("auto"))
        );
    }
}
