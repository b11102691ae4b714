//! `POST /v1/completions` and `POST /v1/chat/completions`, streaming (SSE) and not.

use crate::engine_thread::{SendError, StreamEvent, TokenOut};
use crate::error::ApiError;
use crate::reply::{Delta, Ending, LogprobEntry, Reply, ThinkTags};
use crate::request::{self, GenerateRequest, Input, Prompt};
use crate::state::AppState;
use crate::structured::{self, Tag, Thinking, ToolCall};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use lane::{FinishReason, LogitAdjustments, Refusal, StreamId};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;

/// SSE frames a slow client may leave unread before the writer waits; the engine side has its
/// own bound ([`crate::engine_thread::STREAM_BACKLOG_MAX`]).
const SSE_FRAMES_MAX: usize = 64;

/// How a request's prompt is made and its reply read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Completion,
    Chat,
}

// The body arrives whole: `body::read_body_in_time` read it within the size limit and the
// body timeout (answering 413 or 408 itself) before the handler runs.
pub async fn completions(State(app): State<AppState>, body: Bytes) -> Response {
    answer(app, body, Shape::Completion).await
}

pub async fn chat_completions(State(app): State<AppState>, body: Bytes) -> Response {
    answer(app, body, Shape::Chat).await
}

/// A completion request of either shape, from its body to its response.
async fn answer(app: AppState, body: Bytes, shape: Shape) -> Response {
    let parse: ParseBody = match shape {
        Shape::Completion => |_, body| request::parse_completion(body),
        Shape::Chat => |_, body| request::parse_chat(body),
    };
    match prepare(&app, body, shape, parse).await {
        Ok(prepared) => generate(app, shape, prepared).await,
        Err(e) => e.into_response(),
    }
}

/// A request ready for the engine: checked, its prompt tokenised, its grammar compiled.
pub(crate) struct Prepared {
    pub req: GenerateRequest,
    pub prompt: Vec<u32>,
    pub grammar: Option<lane::Grammar>,
}

/// Reads a request body of one API into the request the engine is asked (the served model's
/// text side at hand).
pub(crate) type ParseBody = fn(&AppState, &[u8]) -> Result<GenerateRequest, ApiError>;

/// Parses the body, renders the chat template and tokenises the prompt on the blocking pool.
/// `shape` is how the prompt is made and the reply read: a chat's or a completion's.
pub(crate) async fn prepare(
    app: &AppState,
    body: Bytes,
    shape: Shape,
    parse: ParseBody,
) -> Result<Prepared, ApiError> {
    on_prepare_pool(app, move |app| {
        let req = parse(app, &body)?;
        check_model(app, req.model.as_deref())?;
        let prompt = prompt_tokens(app, &req)?;
        let grammar = grammar(app, shape, &req, &prompt)?;
        Ok(Prepared {
            req,
            prompt,
            grammar,
        })
    })
    .await
}

/// Runs `work` (parsing a body, rendering a chat template, tokenising) on the blocking pool: a
/// megabyte of JSON or text takes the CPU for seconds, which on the async runtime would stall
/// every other connection. It holds one of `app.prepare`'s permits meanwhile.
pub(crate) async fn on_prepare_pool<T: Send + 'static>(
    app: &AppState,
    work: impl FnOnce(&AppState) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let _permit = app
        .prepare
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| ApiError::unavailable("the server is shutting down"))?;
    let app = app.clone();
    tokio::task::spawn_blocking(move || work(&app))
        .await
        .map_err(|e| ApiError::internal(format!("preparing the request failed: {e}")))?
}

/// As OpenAI and vLLM answer a name they do not serve (leaving `model` out is fine).
pub(crate) fn check_model(app: &AppState, asked: Option<&str>) -> Result<(), ApiError> {
    match asked {
        Some(asked) if !app.text.serves(asked) => {
            Err(ApiError::model_not_found(asked, app.text.model_id()))
        }
        _ => Ok(()),
    }
}

/// The grammar the reply must follow, compiled for the model: the request's response format,
/// or the tool-call format its `tool_choice` requires; after the model's thinking, if it thinks.
fn grammar(
    app: &AppState,
    shape: Shape,
    req: &GenerateRequest,
    prompt: &[u32],
) -> Result<Option<lane::Grammar>, ApiError> {
    let thinking = match (shape, app.text.thinking_tags()) {
        (Shape::Chat, Some((open, close))) => {
            if ThinkTags::after(open, close, prompt).starts_inside {
                Thinking::Inside { close }
            } else {
                Thinking::MayOpen { open, close }
            }
        }
        _ => Thinking::Never,
    };
    // A grammar without a thinking section (completions, a client's own Lark grammar) cannot
    // take the `</think>` a thinking budget forces.
    let thinking_less = shape == Shape::Completion
        || matches!(
            req.constraint.as_ref().map(|c| &c.format),
            Some(structured::OutputFormat::Lark(_))
        );
    let constrained = req.constraint.is_some() || req.tools.choice_is_enforced();
    if req.thinking_budget.is_some() && constrained && thinking_less {
        return Err(ApiError::invalid(
            "thinking_budget",
            "a thinking budget needs the grammar to have a thinking section: not with a \
             completion's constraint or a guided_grammar",
        ));
    }
    let (param, lark) = match &req.constraint {
        Some(c) => (c.param, structured::format_grammar(&c.format, thinking)),
        None => {
            let tag = |text: &'static str| match app.text.single_token_id(text) {
                Some(id) => Tag::Token(id),
                None => Tag::Text(text),
            };
            match structured::tool_grammar(
                &req.tools,
                tag("<tool_call>"),
                tag("</tool_call>"),
                thinking,
            ) {
                Some(lark) => ("tools", lark),
                None => return Ok(None),
            }
        }
    };
    app.text
        .compile_grammar(&lark)
        .map(Some)
        .map_err(|e| ApiError::invalid(param, format!("the grammar does not compile: {e}")))
}

async fn generate(app: AppState, shape: Shape, prepared: Prepared) -> Response {
    let (req, choices) = match admit(&app, shape, prepared).await {
        Ok(admitted) => admitted,
        Err(error) => return error.into_response(),
    };
    let meta = Arc::new(Meta::new(&app, shape, choices[0].stream));
    if req.stream {
        stream_reply(app, meta, choices, req.include_usage)
    } else {
        whole_reply(app, meta, choices).await
    }
}

/// Submits a prepared request's choices to the engine: all are admitted (returned with the
/// request, in choice order), or none and the error.
pub(crate) async fn admit(
    app: &AppState,
    shape: Shape,
    prepared: Prepared,
) -> Result<(GenerateRequest, Vec<Choice>), ApiError> {
    let Prepared {
        req,
        prompt,
        grammar,
    } = prepared;
    let prompt_len = prompt.len() as u64;
    let max_new_tokens = match req.max_tokens {
        Some(n) => n,
        None => match app
            .engine
            .largest_capacity
            .checked_sub(prompt_len + app.engine.window)
            .filter(|&n| n > 0)
        {
            Some(n) => n,
            None => {
                return Err(ApiError::context_full(
                    prompt_len + app.engine.window + 1,
                    app.engine.largest_capacity,
                ))
            }
        },
    };
    let thinking = match (req.thinking_budget, app.text.thinking_tags()) {
        (None, _) => None,
        (Some(budget), Some((open_token, close_token))) => Some(lane::ThinkingBudget {
            open_token,
            close_token,
            max_thinking_tokens: budget,
        }),
        (Some(_), None) => {
            return Err(ApiError::invalid(
                "thinking_budget",
                "this model has no <think> tags",
            ))
        }
    };
    // A chat reply's thinking goes to `reasoning_content` (models with <think> tags).
    let think_tags = app
        .text
        .thinking_tags()
        .map(|(open, close)| ThinkTags::after(open, close, &prompt));
    let mut stop_tokens = if req.ignore_eos {
        Vec::new()
    } else {
        app.text.stop_token_ids()
    };
    stop_tokens.extend(&req.stop_token_ids);
    let (sampling, repetition_penalty) = req.sampling.resolve(&app.text.sampling_defaults());
    let lane_request = lane::Request {
        prompt,
        max_new_tokens,
        min_new_tokens: req.min_tokens,
        sampling,
        stop_tokens,
        draft: None,
        logprobs: req.logprobs.is_some(),
        top_logprobs: req.logprobs.unwrap_or(0) as u8,
        thinking,
        adjustments: LogitAdjustments {
            repetition_penalty,
            ..req.adjustments.clone()
        },
        grammar,
        cache_prompt: req.cache_prompt,
    };
    // A chat reply's thinking goes to `reasoning_content`; its tool calls are read from it.
    let new_reply = || {
        let mut reply = Reply::new(req.stop.clone(), req.logprobs.is_some(), prompt_len);
        if req.include_stop {
            reply = reply.including_stops();
        }
        reply = reply.stops_from(req.min_tokens);
        if let (Shape::Chat, Some(tags)) = (shape, think_tags) {
            reply = reply.split_thinking(tags);
        }
        if shape == Shape::Chat && req.tools.parses_calls() {
            reply = reply.parse_tool_calls(req.tools.parallel);
        }
        reply
    };
    // Every choice's command is sent before any answer is awaited, so that the engine takes
    // them all between the same two rounds (one submission at a time would start choice k k
    // rounds late).
    let submits = (0..req.choices as usize).map(|index| {
        let mut choice_request = lane_request.clone();
        choice_request.sampling.seed = choice_seed(lane_request.sampling.seed, index);
        app.engine.submit(choice_request)
    });
    let answers = futures_util::future::join_all(submits).await;
    let mut choices: Vec<Choice> = Vec::with_capacity(answers.len());
    let mut failure = None;
    for (index, answer) in answers.into_iter().enumerate() {
        match answer {
            Ok((Ok(stream), events)) => choices.push(Choice {
                index,
                stream,
                reply: new_reply(),
                events,
                ahead: None,
            }),
            Ok((Err(refusal), _)) => {
                failure.get_or_insert(refusal_error(refusal));
            }
            Err(SendError::Busy) => {
                failure.get_or_insert(ApiError::overloaded(1));
            }
            Err(SendError::Stopped) => {
                failure.get_or_insert(ApiError::unavailable("the server is shutting down"));
            }
        }
    }
    // All choices or none: the ones admitted go.
    if let Some(failure) = failure {
        for choice in &choices {
            app.engine.cancel(choice.stream);
        }
        return Err(failure);
    }
    Ok((req, choices))
}

/// The sampling seed of choice `index`: the request's own for the first (so the first of `n`
/// choices is the reply `n: 1` gives), one mixed from it for each other; without a seed each
/// stream draws its own.
fn choice_seed(seed: Option<u64>, index: usize) -> Option<u64> {
    seed.map(|s| match index {
        0 => s,
        _ => lane::sampling::mix64(s ^ index as u64),
    })
}

/// One choice of a request: its stream, the state of its text, and the engine's events for it.
pub(crate) struct Choice {
    pub index: usize,
    pub stream: StreamId,
    pub reply: Reply,
    pub events: mpsc::Receiver<StreamEvent>,
    /// An event read ahead ([`Choice::admitted`]), for [`Choice::next`] to give first.
    pub ahead: Option<StreamEvent>,
}

/// What a choice's stream says next, for the writer of its answer.
pub(crate) enum Next {
    /// A round's tokens, for the reply to read.
    Tokens(Vec<TokenOut>),
    /// The stream's end (an engine that stopped answering ends it as an error).
    Finished(FinishReason),
    /// The client went away first.
    ClientGone,
}

impl Choice {
    /// The stream's next round or its end, its admission read on the way (the prompt tokens
    /// the cache held, into the reply); `ClientGone` if `gone` finishes first (a streamed
    /// answer's client closed the connection).
    pub(crate) async fn next(&mut self, gone: impl Future<Output = ()>) -> Next {
        tokio::pin!(gone);
        loop {
            let event = match self.ahead.take() {
                Some(event) => Some(event),
                None => tokio::select! {
                    event = self.events.recv() => event,
                    _ = &mut gone => return Next::ClientGone,
                },
            };
            match event {
                Some(StreamEvent::Admitted { cached_tokens }) => {
                    self.reply.cached_tokens = cached_tokens;
                }
                Some(StreamEvent::Tokens(tokens)) => return Next::Tokens(tokens),
                Some(StreamEvent::Finished { reason, .. }) => return Next::Finished(reason),
                None => return Next::Finished(FinishReason::Error("the engine stopped".into())),
            }
        }
    }

    /// Waits for the stream's admission (the prompt tokens the cache held, into the reply), so
    /// that an answer may say them before the first round; an end that comes first is kept for
    /// [`Choice::next`]. False if `gone` finishes first.
    pub(crate) async fn admitted(&mut self, gone: impl Future<Output = ()>) -> bool {
        let event = tokio::select! {
            event = self.events.recv() => event,
            _ = gone => return false,
        };
        match event {
            Some(StreamEvent::Admitted { cached_tokens }) => {
                self.reply.cached_tokens = cached_tokens;
            }
            Some(other) => self.ahead = Some(other),
            // (The engine's end: `next` says so.)
            None => {}
        }
        true
    }

    /// Whether the reply, having read a round, ended itself (a stop string, or the last tool
    /// call it may make): its stream is cancelled, the engine having nothing more to give it.
    pub(crate) fn ended_itself(&self, app: &AppState) -> bool {
        let ended = self.reply.stopped();
        if ended {
            app.engine.cancel(self.stream);
        }
        ended
    }
}

/// Refuses a request whose text cannot fit the largest session whatever the tokenizer makes of
/// it (at most [`crate::text_model::TextModel::max_token_bytes`] bytes a token), before any tokenising: a 7.8 MB
/// prompt then costs a length check, not seconds of a tokenizer thread.
fn text_fits(app: &AppState, req: &GenerateRequest) -> Result<(), ApiError> {
    let Some(per_token) = app.text.max_token_bytes().filter(|&b| b > 0) else {
        return Ok(());
    };
    let bytes: usize = match &req.input {
        Input::Prompt(Prompt::Tokens(_)) => return Ok(()),
        Input::Prompt(Prompt::Text(text)) => text.len(),
        Input::Messages(messages) => messages.iter().map(|m| m.content.len()).sum(),
    };
    let at_least = bytes.div_ceil(per_token) as u64;
    let largest = app.engine.largest_capacity;
    if at_least.saturating_add(app.engine.window) > largest {
        return Err(ApiError::context_full_at_least(at_least, largest));
    }
    Ok(())
}

fn prompt_tokens(app: &AppState, req: &GenerateRequest) -> Result<Vec<u32>, ApiError> {
    text_fits(app, req)?;
    let tokens = input_tokens(app, req)?;
    if tokens.is_empty() {
        let param = if matches!(req.input, Input::Messages(_)) {
            "messages"
        } else {
            "prompt"
        };
        return Err(ApiError::invalid(param, "the prompt is empty"));
    }
    Ok(tokens)
}

/// The tokens of a request's prompt text, token ids or chat (rendered with its template
/// variables and tools), as the engine would get them.
pub(crate) fn input_tokens(app: &AppState, req: &GenerateRequest) -> Result<Vec<u32>, ApiError> {
    match &req.input {
        Input::Prompt(Prompt::Tokens(ids)) => Ok(ids.clone()),
        Input::Prompt(Prompt::Text(text)) => app
            .text
            .encode(text)
            .map_err(|e| ApiError::invalid("prompt", format!("cannot tokenize the prompt: {e}"))),
        Input::Messages(messages) => {
            // Tools reach the template as transformers passes them: a `tools` variable.
            let mut args = req.template_args.clone();
            if !req.tools.tools.is_empty() {
                let definitions = req.tools.tools.iter().map(|t| t.definition.clone());
                args.insert("tools".into(), Value::Array(definitions.collect()));
            }
            let ids = match req.continue_final {
                true => app.text.continued_chat_prompt_ids(messages, &args),
                false => app.text.chat_prompt_ids(messages, &args),
            };
            ids.map_err(|e| ApiError::invalid("messages", e))
        }
    }
}

fn refusal_error(refusal: Refusal) -> ApiError {
    match refusal {
        Refusal::ContextFull { reply_end, largest } => ApiError::context_full(reply_end, largest),
        Refusal::ShuttingDown => ApiError::unavailable("the server is shutting down"),
        Refusal::QueueFull { .. } => ApiError::overloaded(1),
        Refusal::Invalid { param, message } => ApiError::invalid(param, message),
    }
}

pub(crate) fn ending_error(ending: &Ending) -> Option<ApiError> {
    match ending {
        Ending::Stop | Ending::Length => None,
        Ending::Failed(message) => {
            Some(ApiError::internal(format!("generation failed: {message}")))
        }
        Ending::ContextFull { reply_end, largest } => {
            Some(ApiError::context_full(*reply_end, *largest))
        }
        Ending::Cancelled => Some(ApiError::unavailable("the request was cancelled")),
    }
}

/// The fixed parts of every response object of one request.
struct Meta {
    shape: Shape,
    id: String,
    created: u64,
    model: String,
}

impl Meta {
    fn new(app: &AppState, shape: Shape, stream: StreamId) -> Meta {
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let prefix = match shape {
            Shape::Completion => "cmpl",
            Shape::Chat => "chatcmpl",
        };
        Meta {
            shape,
            id: format!("{prefix}-{created:x}{:08x}", stream.0),
            created,
            model: app.text.model_id().to_string(),
        }
    }

    /// The id of the `index`-th tool call of the reply `stream` writes: unique per reply and
    /// server run.
    fn tool_call_id(&self, stream: StreamId, index: usize) -> String {
        let mixed = lane::sampling::mix64(stream.0 ^ self.created.rotate_left(32)) ^ index as u64;
        format!("call_{mixed:016x}")
    }

    /// A tool call as OpenAI writes it (a stream's delta adds its `index`).
    fn tool_call_json(
        &self,
        stream: StreamId,
        index: usize,
        call: &ToolCall,
        streamed: bool,
    ) -> Value {
        let mut value = json!({
            "id": self.tool_call_id(stream, index),
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        });
        if streamed {
            value["index"] = json!(index);
        }
        value
    }

    fn object(&self, chunk: bool) -> &'static str {
        match (self.shape, chunk) {
            (Shape::Completion, _) => "text_completion",
            (Shape::Chat, false) => "chat.completion",
            (Shape::Chat, true) => "chat.completion.chunk",
        }
    }

    fn envelope(&self, chunk: bool, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": self.object(chunk),
            "created": self.created,
            "model": self.model,
            "choices": choices,
        })
    }
}

/// `finish_reason`: a reply that called tools and ended by itself says `tool_calls`.
fn finish_reason(ending: &Ending, tool_calls: usize) -> &'static str {
    match ending {
        Ending::Stop if tool_calls > 0 => "tool_calls",
        _ => ending.finish_reason(),
    }
}

/// One choice's tokens: the prompt's, of those the ones the prompt cache held, and its own
/// (of those, its thinking's).
#[derive(Clone, Copy, Debug)]
struct Counts {
    prompt: u64,
    cached: u64,
    completion: u64,
    reasoning: u64,
}

impl Counts {
    fn of(reply: &Reply) -> Counts {
        Counts {
            prompt: reply.prompt_tokens,
            cached: reply.cached_tokens,
            completion: reply.completion_tokens,
            reasoning: reply.reasoning_tokens,
        }
    }
}

/// The prompt's tokens (once, however many choices: the first's, with the cached ones it
/// found) and every choice's (with their thinking's).
fn usage(choices: &[Counts]) -> Value {
    let (prompt, cached) = choices.first().map_or((0, 0), |c| (c.prompt, c.cached));
    let completion: u64 = choices.iter().map(|c| c.completion).sum();
    let reasoning: u64 = choices.iter().map(|c| c.reasoning).sum();
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    })
}

fn logprobs_json(shape: Shape, entries: &[LogprobEntry], want: bool) -> Value {
    if !want {
        return Value::Null;
    }
    match shape {
        Shape::Chat => json!({
            "content": entries.iter().map(|e| json!({
                "token": e.token,
                "logprob": e.logprob,
                "bytes": e.token.as_bytes(),
                "top_logprobs": e.top.iter().map(|(t, lp)| json!({
                    "token": t, "logprob": lp, "bytes": t.as_bytes(),
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>()
        }),
        Shape::Completion => json!({
            "tokens": entries.iter().map(|e| &e.token).collect::<Vec<_>>(),
            "token_logprobs": entries.iter().map(|e| e.logprob).collect::<Vec<_>>(),
            "top_logprobs": entries.iter().map(|e| {
                e.top.iter().map(|(t, lp)| (t.clone(), json!(lp))).collect::<serde_json::Map<_, _>>()
            }).collect::<Vec<_>>(),
        }),
    }
}

/// The whole response: every choice's reply, read at once (a choice left unread would be
/// cancelled as a client that stopped reading). The choices run inside this handler's future:
/// a client that goes away drops them, and with them their streams. A choice that fails drops
/// the others the same way.
async fn whole_reply(app: AppState, meta: Arc<Meta>, choices: Vec<Choice>) -> Response {
    let replies = choices
        .into_iter()
        .map(|choice| whole_choice(app.clone(), meta.clone(), choice));
    match futures_util::future::try_join_all(replies).await {
        Ok(done) => {
            let counts: Vec<Counts> = done.iter().map(|d| d.1).collect();
            let values = done.into_iter().map(|d| d.0).collect();
            let mut body = meta.envelope(false, Value::Array(values));
            body["usage"] = usage(&counts);
            (StatusCode::OK, axum::Json(body)).into_response()
        }
        Err(error) => error.into_response(),
    }
}

/// One choice's whole reply as the response's `choices` entry, with its token counts.
async fn whole_choice(
    app: AppState,
    meta: Arc<Meta>,
    choice: Choice,
) -> Result<(Value, Counts), ApiError> {
    let mut choice = choice;
    let (index, stream) = (choice.index, choice.stream);
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut calls: Vec<ToolCall> = Vec::new();
    let mut entries: Vec<LogprobEntry> = Vec::new();
    let want_logprobs = choice.reply.wants_logprobs();
    let mut take = |delta: Delta| {
        text.push_str(&delta.text);
        reasoning.push_str(&delta.reasoning);
        calls.extend(delta.tool_calls);
        entries.extend(delta.logprobs);
    };
    let ending = loop {
        match choice.next(std::future::pending()).await {
            Next::Tokens(tokens) => {
                take(choice.reply.on_tokens(app.text.as_ref(), &tokens));
                if choice.ended_itself(&app) {
                    break Ending::Stop;
                }
            }
            Next::Finished(reason) => {
                let (tail, ending) = choice.reply.on_finish(app.text.as_ref(), &reason);
                take(tail);
                break ending;
            }
            Next::ClientGone => break Ending::Cancelled,
        }
    };
    let reply = choice.reply;
    if let Some(error) = ending_error(&ending) {
        return Err(error);
    }
    let value = match meta.shape {
        Shape::Completion => json!({
            "index": index,
            "text": text,
            "logprobs": logprobs_json(meta.shape, &entries, want_logprobs),
            "finish_reason": ending.finish_reason(),
        }),
        Shape::Chat => {
            let mut message = json!({"role": "assistant", "content": text});
            if !reasoning.is_empty() {
                message["reasoning_content"] = json!(reasoning);
            }
            if !calls.is_empty() {
                // OpenAI's shape: no content beside the calls is `null`.
                if text.trim().is_empty() {
                    message["content"] = Value::Null;
                }
                message["tool_calls"] = calls
                    .iter()
                    .enumerate()
                    .map(|(i, call)| meta.tool_call_json(stream, i, call, false))
                    .collect();
            }
            json!({
                "index": index,
                "message": message,
                "logprobs": logprobs_json(meta.shape, &entries, want_logprobs),
                "finish_reason": finish_reason(&ending, calls.len()),
            })
        }
    };
    Ok((value, Counts::of(&reply)))
}

fn stream_reply(
    app: AppState,
    meta: Arc<Meta>,
    choices: Vec<Choice>,
    include_usage: bool,
) -> Response {
    sse_response(|frames| write_sse(app, meta, choices, include_usage, frames))
}

/// Where a streamed answer's writer sends its frames (the response body reads them).
pub(crate) type Frames = mpsc::Sender<Result<Bytes, Infallible>>;

/// Sends `frames` in order; false once the client is gone (the writer then stops).
pub(crate) async fn send_all(sink: &Frames, frames: impl IntoIterator<Item = Bytes>) -> bool {
    for frame in frames {
        if sink.send(Ok(frame)).await.is_err() {
            return false;
        }
    }
    true
}

/// A streamed answer: `write` runs on a task of its own, its frames the body as they come
/// (at most [`SSE_FRAMES_MAX`] unread: a slow client makes the writer wait).
pub(crate) fn sse_response<W: Future<Output = ()> + Send + 'static>(
    write: impl FnOnce(Frames) -> W,
) -> Response {
    let (frames, body) = mpsc::channel::<Result<Bytes, Infallible>>(SSE_FRAMES_MAX);
    tokio::spawn(write(frames));
    let stream = tokio_stream::wrappers::ReceiverStream::new(body);
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .expect("static headers are valid")
}

fn frame(value: &Value) -> Result<Bytes, Infallible> {
    Ok(Bytes::from(format!("data: {value}\n\n")))
}

/// The streams of one streamed response's choices, and whether one of them failed (then the
/// others are cancelled, and the failure is the one error the client is told).
struct Siblings {
    streams: Vec<StreamId>,
    broken: AtomicBool,
}

/// Which choice a chunk is of: its `index`, and its stream (whose tool calls' ids it names).
#[derive(Clone, Copy)]
struct ChoiceId {
    index: usize,
    stream: StreamId,
}

fn chunk(
    meta: &Meta,
    of: ChoiceId,
    delta: &Delta,
    want_logprobs: bool,
    finish: Option<&str>,
    first: bool,
    calls_before: usize,
) -> Value {
    let logprobs = logprobs_json(meta.shape, &delta.logprobs, want_logprobs);
    let choice = match meta.shape {
        Shape::Completion => json!({
            "index": of.index, "text": delta.text, "logprobs": logprobs, "finish_reason": finish,
        }),
        Shape::Chat => {
            let mut message = json!({});
            if first {
                message["role"] = json!("assistant");
            }
            if !delta.text.is_empty() || (first && finish.is_none()) {
                message["content"] = json!(delta.text);
            }
            if !delta.reasoning.is_empty() {
                message["reasoning_content"] = json!(delta.reasoning);
            }
            if !delta.tool_calls.is_empty() {
                message["tool_calls"] = delta
                    .tool_calls
                    .iter()
                    .enumerate()
                    .map(|(i, call)| meta.tool_call_json(of.stream, calls_before + i, call, true))
                    .collect();
            }
            json!({"index": of.index, "delta": message, "logprobs": logprobs, "finish_reason": finish})
        }
    };
    meta.envelope(true, json!([choice]))
}

/// Writes the choices' frames as their rounds come (polled together, so that one choice's
/// slow rounds never hold another's frames), then the usage where asked (when every choice
/// ended well) and `[DONE]`. If the client goes away, sending fails, the writers end and drop
/// their event receivers, and the engine thread cancels the streams before their next round.
async fn write_sse(
    app: AppState,
    meta: Arc<Meta>,
    choices: Vec<Choice>,
    include_usage: bool,
    frames: mpsc::Sender<Result<Bytes, Infallible>>,
) {
    let siblings = Arc::new(Siblings {
        streams: choices.iter().map(|c| c.stream).collect(),
        broken: AtomicBool::new(false),
    });
    let writers = choices.into_iter().map(|choice| {
        write_choice(
            app.clone(),
            meta.clone(),
            choice,
            siblings.clone(),
            frames.clone(),
        )
    });
    let ended: Option<Vec<Counts>> = futures_util::future::join_all(writers)
        .await
        .into_iter()
        .collect();
    if let (true, Some(counts)) = (include_usage, ended) {
        let mut usage_chunk = meta.envelope(true, json!([]));
        usage_chunk["usage"] = usage(&counts);
        let _ = frames.send(frame(&usage_chunk)).await;
    }
    let _ = frames
        .send(Ok(Bytes::from_static(b"data: [DONE]\n\n")))
        .await;
}

/// One choice's frames, one a round, ending with its `finish_reason` (or an error event).
/// Returns its token counts where it ended well.
async fn write_choice(
    app: AppState,
    meta: Arc<Meta>,
    choice: Choice,
    siblings: Arc<Siblings>,
    frames: mpsc::Sender<Result<Bytes, Infallible>>,
) -> Option<Counts> {
    let mut choice = choice;
    let of = ChoiceId {
        index: choice.index,
        stream: choice.stream,
    };
    let want_logprobs = choice.reply.wants_logprobs();
    let mut first = true;
    let mut calls = 0;
    let ending = loop {
        match choice.next(frames.closed()).await {
            Next::ClientGone => return None,
            Next::Tokens(tokens) => {
                let delta = choice.reply.on_tokens(app.text.as_ref(), &tokens);
                let opens_chat = first && meta.shape == Shape::Chat;
                let says_something = !delta.text.is_empty()
                    || !delta.reasoning.is_empty()
                    || !delta.logprobs.is_empty()
                    || !delta.tool_calls.is_empty();
                if says_something || opens_chat {
                    let value = chunk(&meta, of, &delta, want_logprobs, None, first, calls);
                    calls += delta.tool_calls.len();
                    first = false;
                    if frames.send(frame(&value)).await.is_err() {
                        return None;
                    }
                }
                if choice.ended_itself(&app) {
                    break Ending::Stop;
                }
            }
            Next::Finished(reason) => {
                let (tail, ending) = choice.reply.on_finish(app.text.as_ref(), &reason);
                if !tail.text.is_empty()
                    || !tail.reasoning.is_empty()
                    || !tail.tool_calls.is_empty()
                {
                    let value = chunk(&meta, of, &tail, want_logprobs, None, first, calls);
                    calls += tail.tool_calls.len();
                    let _ = frames.send(frame(&value)).await;
                    first = false;
                }
                break ending;
            }
        }
    };
    if let Some(error) = ending_error(&ending) {
        // The response is broken: its other choices end too (as a whole reply's do), and the
        // first failure alone is told (not the others' cancellation it caused).
        if !siblings.broken.swap(true, Ordering::SeqCst) {
            for &other in siblings.streams.iter() {
                app.engine.cancel(other);
            }
            let _ = frames.send(frame(&error.body())).await;
        }
        return None;
    }
    let finish = Some(finish_reason(&ending, calls));
    let last = chunk(&meta, of, &Delta::default(), false, finish, first, calls);
    let _ = frames.send(frame(&last)).await;
    Some(Counts::of(&choice.reply))
}
