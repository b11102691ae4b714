//! The body of `/v1/completions` and `/v1/chat/completions`, checked field by field.
//!
//! Bodies are parsed as JSON values and read one field at a time, so that every wrong type or
//! out-of-range number is answered with a 400 that names its `param`. Fields we ignore are listed;
//! fields that would change the answer and that we do not implement are refused, never ignored.

use crate::error::ApiError;
use crate::structured::{self, OutputConstraint, Tools};
use lane::{LogitAdjustments, LOGIT_BIAS_MAX, MAX_LOGIT_BIAS, PENALTY_MAX};
use serde_json::{Map, Value};

/// Most stop strings per request: each is matched against the text after every round.
pub const MAX_STOP_STRINGS: usize = 16;
/// Longest stop string in bytes.
pub const MAX_STOP_BYTES: usize = 256;
/// Most alternatives per position in `logprobs`.
pub const MAX_TOP_LOGPROBS: u32 = 20;
/// Most stop token ids per request.
pub const MAX_STOP_TOKEN_IDS: usize = 64;
/// Most `allowed_token_ids`: more than any vocabulary served has (Qwen's is 151,936); each row of
/// the stream keeps them in one pass.
pub const MAX_ALLOWED_TOKEN_IDS: usize = 1 << 18;
/// Most choices (`n`) per request: OpenAI's bound. Each is a stream of its own, waiting for a
/// session as any request's does.
pub const MAX_CHOICES: u32 = 128;

#[derive(Clone, Debug, PartialEq)]
pub enum Prompt {
    Text(String),
    Tokens(Vec<u32>),
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
    /// An assistant message's calls, `arguments` parsed into JSON (chat templates want a mapping).
    pub tool_calls: Option<Vec<Value>>,
    /// A `tool` message: the call it answers, and the tool's name when given.
    pub tool_call_id: Option<String>,
    pub name: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    Prompt(Prompt),
    Messages(Vec<ChatMessage>),
}

/// Sampling as the client asked, `None` where it said nothing: [`SamplingRequest::resolve`]
/// fills those from the model's recommendations (the same struct, as the model would ask; its
/// `seed` unused), else the API's defaults. Temperature 0 is greedy.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SamplingRequest {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    /// 0: no top-k cut.
    pub top_k: Option<u32>,
    pub min_p: Option<f32>,
    /// 1 is off.
    pub repetition_penalty: Option<f32>,
    pub seed: Option<u64>,
}

/// The OpenAI API's defaults, for what neither the request nor the model says.
pub const API_TEMPERATURE: f32 = 1.0;
pub const API_TOP_P: f32 = 1.0;

impl SamplingRequest {
    /// The sampling this request runs with, and its repetition penalty: each field as the
    /// request says, else as the model `recommends`, else the API's default (temperature 1,
    /// top_p 1, no top-k or min-p cut, no repetition penalty). The seed is the request's.
    pub fn resolve(&self, recommends: &SamplingRequest) -> (lane::SamplingParams, f32) {
        let sampling = lane::SamplingParams {
            temperature: self
                .temperature
                .or(recommends.temperature)
                .unwrap_or(API_TEMPERATURE),
            top_k: self.top_k.or(recommends.top_k).unwrap_or(0),
            top_p: self.top_p.or(recommends.top_p).unwrap_or(API_TOP_P),
            min_p: self.min_p.or(recommends.min_p).unwrap_or(0.0),
            seed: self.seed,
        };
        let repetition_penalty = self
            .repetition_penalty
            .or(recommends.repetition_penalty)
            .unwrap_or(1.0);
        (sampling, repetition_penalty)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct GenerateRequest {
    pub model: Option<String>,
    pub input: Input,
    /// `None`: as long as the largest session allows.
    pub max_tokens: Option<u64>,
    pub sampling: SamplingRequest,
    pub stop: Vec<String>,
    pub stop_token_ids: Vec<u32>,
    pub stream: bool,
    pub include_usage: bool,
    /// `n`: the replies (choices) to generate for the prompt, each a stream of its own.
    pub choices: u32,
    /// `Some(n)`: return each token's logprob and its `n` most likely alternatives.
    pub logprobs: Option<u32>,
    /// Thinking tokens after which `</think>` is forced (chat templates with `<think>`).
    pub thinking_budget: Option<u64>,
    /// `presence_penalty`, `frequency_penalty`, `logit_bias` (`repetition_penalty` is read with
    /// the sampling, which the model may recommend: 1 here until `generate` resolves it).
    pub adjustments: LogitAdjustments,
    /// Chat: `chat_template_kwargs`, more variables for the chat template (`enable_thinking`).
    pub template_args: Map<String, Value>,
    /// Chat: the reply continues the last message, the assistant's (`continue_final_message`,
    /// Anthropic's prefill), instead of opening a new turn.
    pub continue_final: bool,
    /// Fields of the request that the answer repeats as sent (the Responses API's
    /// `instructions` and `text`); empty for the other APIs.
    pub echo: Map<String, Value>,
    /// `response_format`, `guided_*` or `structured_outputs`: what the reply's text must be.
    pub constraint: Option<OutputConstraint>,
    /// Chat: the functions the model may call, and `tool_choice`.
    pub tools: Tools,
    /// `cache_prompt` (llama.cpp's name; default true): may the prompt use the prompt cache.
    pub cache_prompt: bool,
    /// `ignore_eos` (vLLM's; default false): the model's end tokens do not end the reply (only
    /// `max_tokens`, stop strings and `stop_token_ids` do), as benchmarks ask for.
    pub ignore_eos: bool,
    /// `include_stop_str_in_output` (vLLM's; default false): the stop string that ends the
    /// reply is sent as its last text.
    pub include_stop: bool,
    /// `min_tokens` (vLLM's; default 0): neither the model's end tokens nor stop strings end
    /// the reply before this many tokens.
    pub min_tokens: u64,
}

impl GenerateRequest {
    /// A chat request's messages (the tests of the parsers read them).
    #[cfg(test)]
    pub(crate) fn chat_messages(&self) -> &[ChatMessage] {
        match &self.input {
            Input::Messages(messages) => messages,
            other => panic!("not a chat: {other:?}"),
        }
    }

    /// A chat request as another API's body becomes one (Anthropic's Messages, OpenAI's
    /// Responses): one choice, no logprobs or penalties, usage reported, the prompt cache on;
    /// the caller fills in what its API says.
    pub(crate) fn chat(model: Option<String>, messages: Vec<ChatMessage>) -> GenerateRequest {
        GenerateRequest {
            model,
            input: Input::Messages(messages),
            max_tokens: None,
            sampling: SamplingRequest::default(),
            stop: Vec::new(),
            stop_token_ids: Vec::new(),
            stream: false,
            include_usage: true,
            choices: 1,
            logprobs: None,
            thinking_budget: None,
            adjustments: LogitAdjustments::default(),
            template_args: Map::new(),
            continue_final: false,
            echo: Map::new(),
            constraint: None,
            tools: Tools {
                tools: Vec::new(),
                choice: structured::ToolChoice::Auto,
                parallel: true,
            },
            cache_prompt: true,
            ignore_eos: false,
            include_stop: false,
            min_tokens: 0,
        }
    }
}

/// A required array field that must not be empty (`messages`, `input`).
pub(crate) fn non_empty_array<'a>(
    fields: &'a Map<String, Value>,
    name: &str,
) -> Result<&'a Vec<Value>, ApiError> {
    match fields.get(name) {
        Some(Value::Array(items)) if !items.is_empty() => Ok(items),
        Some(Value::Array(_)) => Err(ApiError::invalid(
            name,
            format!("`{name}` must not be empty"),
        )),
        None | Some(Value::Null) => Err(ApiError::invalid(name, format!("`{name}` is required"))),
        Some(_) => Err(ApiError::invalid(
            name,
            format!("`{name}` must be an array"),
        )),
    }
}

/// Stop strings as every API bounds them: at most [`MAX_STOP_STRINGS`], each 1 to
/// [`MAX_STOP_BYTES`] bytes (`param` names the field).
pub(crate) fn check_stops(param: &str, stops: Vec<String>) -> Result<Vec<String>, ApiError> {
    if stops.len() > MAX_STOP_STRINGS {
        return Err(ApiError::invalid(
            param,
            format!("at most {MAX_STOP_STRINGS} stop strings"),
        ));
    }
    if stops
        .iter()
        .any(|s| s.is_empty() || s.len() > MAX_STOP_BYTES)
    {
        return Err(ApiError::invalid(
            param,
            format!("stop strings must be 1 to {MAX_STOP_BYTES} bytes long"),
        ));
    }
    Ok(stops)
}

/// A positive integer field (`max_tokens` and its kin), `None` when absent or null.
pub(crate) fn optional_positive(
    fields: &Map<String, Value>,
    name: &str,
) -> Result<Option<u64>, ApiError> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => positive_u64(value, name).map(Some),
    }
}

/// A number field the check accepts (`message` says what it must be), `None` when absent or
/// null.
pub(crate) fn checked_f32(
    fields: &Map<String, Value>,
    name: &str,
    ok: fn(f64) -> bool,
    message: &str,
) -> Result<Option<f32>, ApiError> {
    match optional_f64(fields, name)? {
        Some(v) if !ok(v) => Err(ApiError::invalid(name, message)),
        v => Ok(v.map(|v| v as f32)),
    }
}

/// Parses a `/v1/completions` body.
pub fn parse_completion(body: &[u8]) -> Result<GenerateRequest, ApiError> {
    let fields = object(body)?;
    let prompt = match fields.get("prompt") {
        None | Some(Value::Null) => {
            return Err(ApiError::invalid("prompt", "`prompt` is required"))
        }
        Some(value) => prompt(value)?,
    };
    refuse_unsupported(&fields, &["echo", "suffix", "best_of"])?;
    let logprobs = match fields.get("logprobs") {
        None | Some(Value::Null) => None,
        Some(value) => Some(bounded_u32(value, "logprobs", 0, MAX_TOP_LOGPROBS)?),
    };
    common(&fields, Input::Prompt(prompt), logprobs)
}

/// Parses a `/v1/chat/completions` body.
pub fn parse_chat(body: &[u8]) -> Result<GenerateRequest, ApiError> {
    let fields = object(body)?;
    let messages = non_empty_array(&fields, "messages")?
        .iter()
        .enumerate()
        .map(|(idx, item)| message(idx, item))
        .collect::<Result<Vec<_>, _>>()?;
    refuse_unsupported(&fields, &["functions", "function_call", "audio", "echo"])?;
    let tools = structured::tools(&fields)?;
    let wants_logprobs = optional_bool(&fields, "logprobs")?.unwrap_or(false);
    let top_logprobs = match fields.get("top_logprobs") {
        None | Some(Value::Null) => 0,
        Some(value) => bounded_u32(value, "top_logprobs", 0, MAX_TOP_LOGPROBS)?,
    };
    if top_logprobs > 0 && !wants_logprobs {
        return Err(ApiError::invalid(
            "top_logprobs",
            "`top_logprobs` needs `logprobs: true`",
        ));
    }
    let logprobs = wants_logprobs.then_some(top_logprobs);
    let template_args = match fields.get("chat_template_kwargs") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(args)) => args.clone(),
        Some(_) => {
            return Err(ApiError::invalid(
                "chat_template_kwargs",
                "`chat_template_kwargs` must be an object (e.g. {\"enable_thinking\": false})",
            ))
        }
    };
    let continue_final = continue_final(&fields, &messages)?;
    let mut req = common(&fields, Input::Messages(messages), logprobs)?;
    req.template_args = template_args;
    req.continue_final = continue_final;
    // Both would be the reply's grammar.
    if req.constraint.is_some()
        && matches!(
            tools.choice,
            structured::ToolChoice::Required | structured::ToolChoice::Function(_)
        )
    {
        return Err(ApiError::invalid(
            "tool_choice",
            "a required or named `tool_choice` cannot be combined with a response format",
        ));
    }
    req.tools = tools;
    Ok(req)
}

/// `continue_final_message: true` (vLLM's, with `add_generation_prompt: false`): the reply
/// continues the last message, which must be the assistant's. `add_generation_prompt: false`
/// alone is refused (a prompt that ends on a closed turn is not a chat this API answers).
fn continue_final(fields: &Map<String, Value>, messages: &[ChatMessage]) -> Result<bool, ApiError> {
    let continues = optional_bool(fields, "continue_final_message")?.unwrap_or(false);
    let header = optional_bool(fields, "add_generation_prompt")?.unwrap_or(!continues);
    match (continues, header) {
        (false, true) => Ok(false),
        (true, false) => match messages.last() {
            Some(last) if last.role == "assistant" => Ok(true),
            _ => Err(ApiError::invalid(
                "continue_final_message",
                "the last message must be the assistant's to be continued",
            )),
        },
        (true, true) => Err(ApiError::invalid(
            "add_generation_prompt",
            "`continue_final_message: true` continues the last message: it takes \
             `add_generation_prompt: false`",
        )),
        (false, false) => Err(ApiError::invalid(
            "add_generation_prompt",
            "`false` is only for `continue_final_message: true`: a reply opens the assistant's \
             turn",
        )),
    }
}

/// A `/tokenize` body (vLLM's): a completion's `prompt` text, or a chat's `messages` (with its
/// `chat_template_kwargs` and `tools`) as `/v1/chat/completions` would render them.
#[derive(Debug)]
pub struct TokenizeRequest {
    pub model: Option<String>,
    /// The text or the chat; a chat's other fields are parsed as a chat request's.
    pub input: GenerateRequest,
    /// `return_token_strs`: each token's text beside its id.
    pub token_strs: bool,
}

/// Parses a `/tokenize` body. `add_special_tokens` may be either value: no BOS or EOS is added,
/// as a prompt sent to generate gets none (special tokens written in a `prompt` are recognised).
/// `add_generation_prompt: false` is refused: a chat is counted as it is sent to generate, with
/// the assistant's turn opened.
pub fn parse_tokenize(body: &[u8]) -> Result<TokenizeRequest, ApiError> {
    let fields = object(body)?;
    optional_bool(&fields, "add_special_tokens")?;
    let token_strs = optional_bool(&fields, "return_token_strs")?.unwrap_or(false);
    let input = match (fields.get("messages"), fields.get("prompt")) {
        (Some(m), Some(p)) if !m.is_null() && !p.is_null() => {
            return Err(ApiError::invalid(
                "messages",
                "send `prompt` or `messages`, not both",
            ))
        }
        (Some(m), _) if !m.is_null() => {
            // What would change the rendering from generate's is refused, not ignored.
            // (`add_generation_prompt` and `continue_final_message` are read as generate reads
            // them.)
            refuse_unsupported(&fields, &["chat_template"])?;
            parse_chat(body)?
        }
        (_, Some(Value::String(_))) => parse_completion(body)?,
        (_, Some(p)) if !p.is_null() => {
            return Err(ApiError::invalid("prompt", "`prompt` must be a string"))
        }
        _ => {
            return Err(ApiError::invalid(
                "prompt",
                "`prompt` (a text) or `messages` (a chat) is required",
            ))
        }
    };
    Ok(TokenizeRequest {
        model: input.model.clone(),
        input,
        token_strs,
    })
}

/// A `/detokenize` body: `tokens`, an array of token ids, and the `model` asked for.
#[derive(Debug)]
pub struct DetokenizeRequest {
    pub model: Option<String>,
    pub tokens: Vec<u32>,
}

/// Parses a `/detokenize` body.
pub fn parse_detokenize(body: &[u8]) -> Result<DetokenizeRequest, ApiError> {
    let fields = object(body)?;
    let wrong = || ApiError::invalid("tokens", "`tokens` must be an array of token ids");
    let tokens = match fields.get("tokens") {
        None | Some(Value::Null) => {
            return Err(ApiError::invalid("tokens", "`tokens` is required"))
        }
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_u64().and_then(|id| u32::try_from(id).ok()))
            .collect::<Option<Vec<u32>>>()
            .ok_or_else(wrong)?,
        Some(_) => return Err(wrong()),
    };
    Ok(DetokenizeRequest {
        model: model_name(&fields)?,
        tokens,
    })
}

pub(crate) fn object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(fields)) => Ok(fields),
        Ok(_) => Err(ApiError::malformed(
            "the request body must be a JSON object",
        )),
        Err(e) => Err(ApiError::malformed(format!(
            "the request body is not valid JSON: {e}"
        ))),
    }
}

/// vLLM's sampling extras this server does not implement, refused when they ask for anything
/// (each with the value that asks for nothing: absent and null always do).
/// Whether a field's value asks for nothing (the feature off).
type AsksNothing = fn(&Value) -> bool;

const VLLM_UNIMPLEMENTED: [(&str, AsksNothing); 9] = [
    ("bad_words", |v| v.as_array().is_some_and(Vec::is_empty)),
    // (0 still asks for the prompt tokens' own log-probabilities.)
    ("prompt_logprobs", |_| false),
    ("return_tokens_as_token_ids", |v| v == &Value::Bool(false)),
    ("logits_processors", |v| {
        v.as_array().is_some_and(Vec::is_empty)
    }),
    ("use_beam_search", |v| v == &Value::Bool(false)),
    ("length_penalty", |v| v.as_f64() == Some(1.0)),
    ("truncate_prompt_tokens", |_| false),
    ("skip_special_tokens", |v| v == &Value::Bool(true)),
    ("guided_whitespace_pattern", |_| false),
];

fn refuse_vllm_unimplemented(fields: &Map<String, Value>) -> Result<(), ApiError> {
    for (name, asks_nothing) in VLLM_UNIMPLEMENTED {
        match fields.get(name) {
            None | Some(Value::Null) => {}
            Some(value) if asks_nothing(value) => {}
            Some(_) => {
                return Err(ApiError::invalid(
                    name,
                    format!("`{name}` is not supported by this server"),
                ))
            }
        }
    }
    Ok(())
}

fn common(
    fields: &Map<String, Value>,
    input: Input,
    logprobs: Option<u32>,
) -> Result<GenerateRequest, ApiError> {
    refuse_vllm_unimplemented(fields)?;
    let choices = match fields.get("n") {
        None | Some(Value::Null) => 1,
        Some(value) => bounded_u32(value, "n", 1, MAX_CHOICES)?,
    };
    let adjustments = adjustments(fields)?;
    let model = model_name(fields)?;
    let max_tokens = match (
        fields.get("max_completion_tokens"),
        fields.get("max_tokens"),
    ) {
        (Some(value), _) if !value.is_null() => Some(positive_u64(value, "max_completion_tokens")?),
        (_, Some(value)) if !value.is_null() => Some(positive_u64(value, "max_tokens")?),
        _ => None,
    };
    let stream = optional_bool(fields, "stream")?.unwrap_or(false);
    let include_usage = match fields.get("stream_options").filter(|v| !v.is_null()) {
        None => false,
        Some(Value::Object(options)) => optional_bool(options, "include_usage")
            .map_err(|_| ApiError::invalid("stream_options", "`include_usage` must be a boolean"))?
            .unwrap_or(false),
        Some(_) => return Err(ApiError::invalid("stream_options", "must be an object")),
    };
    Ok(GenerateRequest {
        model,
        input,
        max_tokens,
        sampling: sampling(fields)?,
        stop: stop(fields)?,
        stop_token_ids: stop_token_ids(fields)?,
        stream,
        include_usage,
        choices,
        logprobs,
        adjustments,
        template_args: Map::new(),
        continue_final: false,
        echo: Map::new(),
        constraint: structured::output_constraint(fields)?,
        cache_prompt: optional_bool(fields, "cache_prompt")?.unwrap_or(true),
        ignore_eos: optional_bool(fields, "ignore_eos")?.unwrap_or(false),
        include_stop: optional_bool(fields, "include_stop_str_in_output")?.unwrap_or(false),
        min_tokens: match fields.get("min_tokens") {
            None | Some(Value::Null) => 0,
            Some(value) => non_negative_u64(value, "min_tokens")?,
        },
        tools: Tools {
            tools: Vec::new(),
            choice: structured::ToolChoice::Auto,
            parallel: true,
        },
        thinking_budget: match fields.get("thinking_budget") {
            None | Some(Value::Null) => None,
            Some(value) => Some(non_negative_u64(value, "thinking_budget")?),
        },
    })
}

fn sampling(fields: &Map<String, Value>) -> Result<SamplingRequest, ApiError> {
    let checked = |name, ok, message| checked_f32(fields, name, ok, message);
    let temperature = checked(
        "temperature",
        |t| (0.0..=2.0).contains(&t),
        "`temperature` must be between 0 and 2",
    )?;
    let top_p = checked(
        "top_p",
        |p| p > 0.0 && p <= 1.0,
        "`top_p` must be in (0, 1]",
    )?;
    let min_p = checked(
        "min_p",
        |p| (0.0..=1.0).contains(&p),
        "`min_p` must be between 0 and 1",
    )?;
    let repetition_penalty = checked(
        "repetition_penalty",
        |r| r > 0.0 && r.is_finite(),
        "`repetition_penalty` must be a number > 0 (1 is off)",
    )?;
    let top_k = match fields.get("top_k") {
        None | Some(Value::Null) => None,
        Some(value) => match value.as_i64() {
            Some(-1) | Some(0) => Some(0),
            Some(k) if k > 0 && k <= u32::MAX as i64 => Some(k as u32),
            _ => {
                return Err(ApiError::invalid(
                    "top_k",
                    "`top_k` must be -1, 0 or a positive integer",
                ))
            }
        },
    };
    let seed = match fields.get("seed") {
        None | Some(Value::Null) => None,
        // Any JSON integer is a seed; negative ones are reinterpreted as their two's complement.
        Some(value) => Some(
            value
                .as_u64()
                .or_else(|| value.as_i64().map(|s| s as u64))
                .ok_or_else(|| ApiError::invalid("seed", "`seed` must be an integer"))?,
        ),
    };
    Ok(SamplingRequest {
        temperature,
        top_p,
        top_k,
        min_p,
        repetition_penalty,
        seed,
    })
}

fn stop(fields: &Map<String, Value>) -> Result<Vec<String>, ApiError> {
    let stops: Vec<String> = match fields.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(text)) => vec![text.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .ok_or_else(|| {
                ApiError::invalid("stop", "`stop` must be a string or an array of strings")
            })?,
        Some(_) => {
            return Err(ApiError::invalid(
                "stop",
                "`stop` must be a string or an array of strings",
            ))
        }
    };
    check_stops("stop", stops)
}

fn stop_token_ids(fields: &Map<String, Value>) -> Result<Vec<u32>, ApiError> {
    match fields.get("stop_token_ids") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) if items.len() <= MAX_STOP_TOKEN_IDS => items
            .iter()
            .map(|item| item.as_u64().and_then(|id| u32::try_from(id).ok()))
            .collect::<Option<_>>()
            .ok_or_else(|| {
                ApiError::invalid("stop_token_ids", "token ids are non-negative integers")
            }),
        Some(_) => Err(ApiError::invalid(
            "stop_token_ids",
            format!("`stop_token_ids` must be an array of at most {MAX_STOP_TOKEN_IDS} token ids"),
        )),
    }
}

fn prompt(value: &Value) -> Result<Prompt, ApiError> {
    match value {
        Value::String(text) => Ok(Prompt::Text(text.clone())),
        Value::Array(items) if items.len() == 1 && items[0].is_string() => Ok(Prompt::Text(
            items[0].as_str().unwrap_or_default().to_string(),
        )),
        Value::Array(items) if items.len() == 1 && items[0].is_array() => prompt(&items[0]),
        Value::Array(items) if items.iter().all(Value::is_number) && !items.is_empty() => items
            .iter()
            .map(|item| item.as_u64().and_then(|id| u32::try_from(id).ok()))
            .collect::<Option<Vec<u32>>>()
            .map(Prompt::Tokens)
            .ok_or_else(|| ApiError::invalid("prompt", "token ids are non-negative integers")),
        Value::Array(items) if items.len() > 1 => Err(ApiError::invalid(
            "prompt",
            "one prompt per request is supported; send several requests",
        )),
        _ => Err(ApiError::invalid(
            "prompt",
            "`prompt` must be a string or an array of token ids",
        )),
    }
}

fn message(idx: usize, item: &Value) -> Result<ChatMessage, ApiError> {
    let param = format!("messages[{idx}]");
    let fields = item
        .as_object()
        .ok_or_else(|| ApiError::invalid(&param, "each message must be an object"))?;
    let role = match fields.get("role").and_then(Value::as_str) {
        Some(role @ ("system" | "developer" | "user" | "assistant" | "tool")) => role.to_string(),
        _ => {
            return Err(ApiError::invalid(
                &format!("{param}.role"),
                "role must be one of system, developer, user, assistant, tool",
            ))
        }
    };
    let tool_calls = match fields.get("tool_calls") {
        None | Some(Value::Null) => None,
        Some(calls) if role == "assistant" => Some(structured::template_tool_calls(
            &format!("{param}.tool_calls"),
            calls,
        )?),
        Some(_) => {
            return Err(ApiError::invalid(
                &format!("{param}.tool_calls"),
                "only assistant messages carry tool calls",
            ))
        }
    };
    let text_field = |key: &str| -> Result<Option<String>, ApiError> {
        match fields.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => Ok(Some(text.clone())),
            Some(_) => Err(ApiError::invalid(
                &format!("{param}.{key}"),
                format!("`{key}` must be a string"),
            )),
        }
    };
    let tool_call_id = text_field("tool_call_id")?;
    let name = text_field("name")?;
    let content = match fields.get("content") {
        None | Some(Value::Null) if role == "assistant" => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(
                |part| match (part.get("type").and_then(Value::as_str), part.get("text")) {
                    (Some("text"), Some(Value::String(text))) => Ok(text.as_str()),
                    _ => Err(ApiError::invalid(
                        &format!("{param}.content"),
                        "only text content parts are supported",
                    )),
                },
            )
            .collect::<Result<Vec<_>, _>>()?
            .concat(),
        _ => {
            return Err(ApiError::invalid(
                &format!("{param}.content"),
                "content must be a string or an array of text parts",
            ))
        }
    };
    Ok(ChatMessage {
        role,
        content,
        tool_calls,
        tool_call_id,
        name,
    })
}

/// The penalties and biases, with OpenAI's ranges (the engine checks the token ids against the
/// vocabulary).
fn adjustments(fields: &Map<String, Value>) -> Result<LogitAdjustments, ApiError> {
    let mut a = LogitAdjustments::default();
    for (name, slot) in [
        ("presence_penalty", &mut a.presence_penalty),
        ("frequency_penalty", &mut a.frequency_penalty),
    ] {
        if let Some(value) = optional_f64(fields, name)? {
            if value.abs() > PENALTY_MAX as f64 {
                return Err(ApiError::invalid(
                    name,
                    format!("`{name}` must be between -{PENALTY_MAX} and {PENALTY_MAX}"),
                ));
            }
            *slot = value as f32;
        }
    }
    // vLLM's `allowed_token_ids`: the only tokens the reply may hold (the engine checks them
    // against the vocabulary).
    match fields.get("allowed_token_ids") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) if items.len() <= MAX_ALLOWED_TOKEN_IDS => {
            a.allowed = items
                .iter()
                .map(|item| item.as_u64().and_then(|id| u32::try_from(id).ok()))
                .collect::<Option<Vec<u32>>>()
                .ok_or_else(|| {
                    ApiError::invalid("allowed_token_ids", "token ids are non-negative integers")
                })?;
            a.allowed.sort_unstable();
            a.allowed.dedup();
        }
        Some(_) => {
            return Err(ApiError::invalid(
                "allowed_token_ids",
                format!(
                "`allowed_token_ids` must be an array of at most {MAX_ALLOWED_TOKEN_IDS} token ids"
            ),
            ))
        }
    }
    // `repetition_penalty` is read with the sampling (the model may recommend one).
    match fields.get("logit_bias") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            if map.len() > MAX_LOGIT_BIAS {
                return Err(ApiError::invalid(
                    "logit_bias",
                    format!("at most {MAX_LOGIT_BIAS} tokens"),
                ));
            }
            for (token, bias) in map {
                let id: u32 = token.parse().map_err(|_| {
                    ApiError::invalid(
                        "logit_bias",
                        format!("keys are token ids; {token:?} is not one"),
                    )
                })?;
                let bias = bias
                    .as_f64()
                    .filter(|b| b.abs() <= LOGIT_BIAS_MAX as f64)
                    .ok_or_else(|| {
                        ApiError::invalid(
                            "logit_bias",
                            format!(
                                "biases are numbers between -{LOGIT_BIAS_MAX} and {LOGIT_BIAS_MAX}"
                            ),
                        )
                    })?;
                a.logit_bias.push((id, bias as f32));
            }
            // A fixed order, whatever the JSON's.
            a.logit_bias.sort_by_key(|&(id, _)| id);
        }
        Some(_) => {
            return Err(ApiError::invalid(
                "logit_bias",
                "`logit_bias` must be an object of token ids to biases",
            ))
        }
    }
    Ok(a)
}

fn refuse_unsupported(fields: &Map<String, Value>, names: &[&str]) -> Result<(), ApiError> {
    for name in names {
        match fields.get(*name) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => {}
            Some(Value::Array(items)) if items.is_empty() => {}
            Some(Value::Number(n)) if *name == "best_of" && n.as_u64() == Some(1) => {}
            Some(_) => {
                return Err(ApiError::invalid(
                    name,
                    format!("`{name}` is not supported"),
                ))
            }
        }
    }
    Ok(())
}

/// `model`, the name of the model asked for (any model when unsaid).
pub(crate) fn model_name(fields: &Map<String, Value>) -> Result<Option<String>, ApiError> {
    match fields.get("model") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(name)) => Ok(Some(name.clone())),
        Some(_) => Err(ApiError::invalid("model", "`model` must be a string")),
    }
}

pub(crate) fn optional_bool(
    fields: &Map<String, Value>,
    name: &str,
) -> Result<Option<bool>, ApiError> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(ApiError::invalid(
            name,
            format!("`{name}` must be a boolean"),
        )),
    }
}

pub(crate) fn optional_f64(
    fields: &Map<String, Value>,
    name: &str,
) -> Result<Option<f64>, ApiError> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64()),
        Some(_) => Err(ApiError::invalid(
            name,
            format!("`{name}` must be a number"),
        )),
    }
}

pub(crate) fn positive_u64(value: &Value, name: &str) -> Result<u64, ApiError> {
    match value.as_u64() {
        Some(n) if n > 0 => Ok(n),
        _ => Err(ApiError::invalid(
            name,
            format!("`{name}` must be a positive integer"),
        )),
    }
}

fn non_negative_u64(value: &Value, name: &str) -> Result<u64, ApiError> {
    value
        .as_u64()
        .ok_or_else(|| ApiError::invalid(name, format!("`{name}` must be a non-negative integer")))
}

fn bounded_u32(value: &Value, name: &str, low: u32, high: u32) -> Result<u32, ApiError> {
    match value.as_u64() {
        Some(n) if (low as u64..=high as u64).contains(&n) => Ok(n as u32),
        _ => Err(ApiError::invalid(
            name,
            format!("`{name}` must be an integer from {low} to {high}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param_of(result: Result<GenerateRequest, ApiError>) -> Option<String> {
        result.unwrap_err().param
    }

    #[test]
    fn a_plain_completion_parses_with_defaults() {
        let req = parse_completion(br#"{"model":"m","prompt":"hi"}"#).unwrap();
        assert_eq!(req.input, Input::Prompt(Prompt::Text("hi".into())));
        assert_eq!(req.max_tokens, None);
        assert_eq!(req.sampling, SamplingRequest::default());
        // Nothing said, nothing recommended: the API's defaults.
        let (sampling, repetition_penalty) = req.sampling.resolve(&SamplingRequest::default());
        assert_eq!(
            (
                sampling.temperature,
                sampling.top_p,
                sampling.top_k,
                sampling.min_p
            ),
            (1.0, 1.0, 0, 0.0)
        );
        assert_eq!(repetition_penalty, 1.0);
        assert!(!req.stream);
    }

    #[test]
    fn what_a_request_leaves_unsaid_takes_the_models_recommendation() {
        let qwen3 = SamplingRequest {
            temperature: Some(0.6),
            top_p: Some(0.95),
            top_k: Some(20),
            min_p: None,
            repetition_penalty: Some(1.05),
            seed: None,
        };
        let silent = parse_completion(br#"{"prompt":"a"}"#).unwrap();
        let (s, rp) = silent.sampling.resolve(&qwen3);
        assert_eq!(
            (s.temperature, s.top_p, s.top_k, s.min_p, rp),
            (0.6, 0.95, 20, 0.0, 1.05)
        );
        let said = parse_completion(
            br#"{"prompt":"a","temperature":0,"top_k":-1,"top_p":1,"repetition_penalty":1}"#,
        )
        .unwrap();
        let (s, rp) = said.sampling.resolve(&qwen3);
        assert_eq!((s.temperature, s.top_p, s.top_k, rp), (0.0, 1.0, 0, 1.0));
        // null is silence.
        let null = parse_completion(br#"{"prompt":"a","temperature":null}"#).unwrap();
        assert_eq!(null.sampling.resolve(&qwen3).0.temperature, 0.6);
    }

    #[test]
    fn chat_reads_messages_text_parts_and_max_completion_tokens() {
        let body = br#"{"messages":[{"role":"system","content":"be brief"},
            {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
            "max_completion_tokens":7,"max_tokens":99,"logprobs":true,"top_logprobs":3,
            "stream":true,"stream_options":{"include_usage":true},"seed":-1,"stop":"END"}"#;
        let req = parse_chat(body).unwrap();
        let Input::Messages(messages) = &req.input else {
            panic!()
        };
        assert_eq!(messages[1].content, "ab");
        assert_eq!(req.max_tokens, Some(7));
        assert_eq!(req.logprobs, Some(3));
        assert!(req.stream && req.include_usage);
        assert_eq!(req.sampling.seed, Some(u64::MAX));
        assert_eq!(req.stop, vec!["END".to_string()]);
    }

    #[test]
    fn malformed_bodies_are_400_without_param() {
        for body in [
            &b"{"[..],
            b"[]",
            b"\"x\"",
            b"",
            b"{\"prompt\":\"a\"} trailing",
        ] {
            let err = parse_completion(body).unwrap_err();
            assert_eq!(err.status, 400);
            assert_eq!(err.param, None);
        }
    }

    #[test]
    fn wrong_types_and_ranges_name_their_param() {
        let cases: [(&[u8], &str); 15] = [
            (br#"{"prompt":"a","n":129}"#, "n"),
            (br#"{"prompt":"a","max_tokens":-5}"#, "max_tokens"),
            (br#"{"prompt":"a","max_tokens":0}"#, "max_tokens"),
            (br#"{"prompt":"a","max_tokens":"ten"}"#, "max_tokens"),
            (br#"{"prompt":"a","max_tokens":1.5}"#, "max_tokens"),
            (br#"{"prompt":"a","temperature":3}"#, "temperature"),
            (br#"{"prompt":"a","temperature":"hot"}"#, "temperature"),
            (br#"{"prompt":"a","top_p":0}"#, "top_p"),
            (br#"{"prompt":"a","top_k":-2}"#, "top_k"),
            (br#"{"prompt":"a","n":0}"#, "n"),
            (br#"{"prompt":"a","stop":[1]}"#, "stop"),
            (br#"{"prompt":"a","logprobs":99}"#, "logprobs"),
            (br#"{"prompt":["a","b"]}"#, "prompt"),
            (br#"{"prompt":[-1]}"#, "prompt"),
            (br#"{"prompt":"a","stream":"yes"}"#, "stream"),
        ];
        for (body, param) in cases {
            assert_eq!(
                param_of(parse_completion(body)).as_deref(),
                Some(param),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn a_chat_may_continue_its_last_message_the_assistants() {
        let chat = |extra: &str| {
            parse_chat(
                format!(
                    r#"{{"messages":[{{"role":"user","content":"x"}},{{"role":"assistant","content":"1, 2"}}]{extra}}}"#
                )
                .as_bytes(),
            )
        };
        assert!(!chat("").unwrap().continue_final);
        assert!(
            chat(r#","continue_final_message":true"#)
                .unwrap()
                .continue_final
        );
        assert!(
            chat(r#","continue_final_message":true,"add_generation_prompt":false"#)
                .unwrap()
                .continue_final
        );
        assert_eq!(
            param_of(chat(
                r#","continue_final_message":true,"add_generation_prompt":true"#
            ))
            .as_deref(),
            Some("add_generation_prompt")
        );
        assert_eq!(
            param_of(chat(r#","add_generation_prompt":false"#)).as_deref(),
            Some("add_generation_prompt")
        );
        assert_eq!(
            param_of(parse_chat(
                br#"{"messages":[{"role":"user","content":"x"}],"continue_final_message":true}"#
            ))
            .as_deref(),
            Some("continue_final_message")
        );
    }

    #[test]
    fn chat_refusals_name_their_param() {
        assert_eq!(
            param_of(parse_chat(br#"{"messages":[]}"#)).as_deref(),
            Some("messages")
        );
        assert_eq!(param_of(parse_chat(br#"{}"#)).as_deref(), Some("messages"));
        assert_eq!(
            param_of(parse_chat(
                br#"{"messages":[{"role":"wizard","content":"x"}]}"#
            ))
            .as_deref(),
            Some("messages[0].role")
        );
        assert_eq!(
            param_of(parse_chat(
                br#"{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}"#
            ))
            .as_deref(),
            Some("messages[0].content")
        );
        assert_eq!(
            param_of(parse_chat(
                br#"{"messages":[{"role":"user","content":"x"}],"tools":[{}]}"#
            ))
            .as_deref(),
            Some("tools[0].type")
        );
        assert_eq!(
            param_of(parse_chat(
                br#"{"messages":[{"role":"user","content":"x"}],"functions":[{"name":"f"}]}"#
            ))
            .as_deref(),
            Some("functions")
        );
        assert_eq!(
            param_of(parse_chat(
                br#"{"messages":[{"role":"user","content":"x","tool_calls":[]}]}"#
            ))
            .as_deref(),
            Some("messages[0].tool_calls")
        );
        assert_eq!(
            param_of(parse_chat(
                br#"{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required","response_format":{"type":"json_object"}}"#
            ))
            .as_deref(),
            Some("tool_choice")
        );
        assert_eq!(
            param_of(parse_chat(
                br#"{"messages":[{"role":"user","content":"x"}],"top_logprobs":2}"#
            ))
            .as_deref(),
            Some("top_logprobs")
        );
    }

    #[test]
    fn stop_strings_are_bounded_in_number_and_length() {
        let with = |stops: Vec<String>| {
            let body = serde_json::json!({"prompt": "a", "stop": stops}).to_string();
            parse_completion(body.as_bytes())
                .err()
                .and_then(|e| e.param)
        };
        assert_eq!(with(vec!["x".into(); MAX_STOP_STRINGS]), None);
        assert_eq!(
            with(vec!["x".into(); MAX_STOP_STRINGS + 1]).as_deref(),
            Some("stop")
        );
        assert_eq!(with(vec!["y".repeat(MAX_STOP_BYTES)]), None);
        assert_eq!(
            with(vec!["y".repeat(MAX_STOP_BYTES + 1)]).as_deref(),
            Some("stop")
        );
        assert_eq!(with(vec![String::new()]).as_deref(), Some("stop"));
    }

    #[test]
    fn chat_template_kwargs_are_an_object_passed_on() {
        let req = parse_chat(
            br#"{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"enable_thinking":false}}"#,
        )
        .unwrap();
        assert_eq!(req.template_args["enable_thinking"], Value::Bool(false));
        assert_eq!(
            param_of(parse_chat(
                br#"{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":[1]}"#
            ))
            .as_deref(),
            Some("chat_template_kwargs")
        );
    }

    #[test]
    fn cache_prompt_and_ignore_eos_default_to_what_a_client_expects() {
        let plain = parse_completion(br#"{"prompt":"a"}"#).unwrap();
        assert!(plain.cache_prompt && !plain.ignore_eos);
        let set =
            parse_completion(br#"{"prompt":"a","cache_prompt":false,"ignore_eos":true}"#).unwrap();
        assert!(!set.cache_prompt && set.ignore_eos);
        assert_eq!(
            param_of(parse_completion(br#"{"prompt":"a","ignore_eos":"yes"}"#)).as_deref(),
            Some("ignore_eos")
        );
    }

    #[test]
    fn penalties_and_biases_are_read_within_openais_ranges() {
        let req = parse_completion(
            br#"{"prompt":"a","presence_penalty":0.5,"frequency_penalty":-1,"repetition_penalty":1.2,"logit_bias":{"17":-100,"3":2.5}}"#,
        )
        .unwrap();
        assert_eq!(
            req.adjustments,
            LogitAdjustments {
                presence_penalty: 0.5,
                frequency_penalty: -1.0,
                repetition_penalty: 1.0,
                logit_bias: vec![(3, 2.5), (17, -100.0)],
                allowed: Vec::new(),
            }
        );
        assert_eq!(req.sampling.repetition_penalty, Some(1.2));
        assert!(parse_completion(br#"{"prompt":"a"}"#)
            .unwrap()
            .adjustments
            .is_none());
        for (body, param) in [
            (
                &br#"{"prompt":"a","presence_penalty":2.5}"#[..],
                "presence_penalty",
            ),
            (
                br#"{"prompt":"a","frequency_penalty":"x"}"#,
                "frequency_penalty",
            ),
            (
                br#"{"prompt":"a","repetition_penalty":0}"#,
                "repetition_penalty",
            ),
            (br#"{"prompt":"a","logit_bias":{"x":1}}"#, "logit_bias"),
            (br#"{"prompt":"a","logit_bias":{"1":101}}"#, "logit_bias"),
            (br#"{"prompt":"a","logit_bias":[1]}"#, "logit_bias"),
        ] {
            assert_eq!(param_of(parse_completion(body)).as_deref(), Some(param));
        }
    }

    #[test]
    fn token_prompts_and_unsupported_fields() {
        let req = parse_completion(br#"{"prompt":[3,17,42]}"#).unwrap();
        assert_eq!(req.input, Input::Prompt(Prompt::Tokens(vec![3, 17, 42])));
        let req = parse_completion(br#"{"prompt":[[3,17]]}"#).unwrap();
        assert_eq!(req.input, Input::Prompt(Prompt::Tokens(vec![3, 17])));
        assert!(parse_completion(br#"{"prompt":"a","presence_penalty":0}"#).is_ok());
        assert_eq!(
            param_of(parse_completion(br#"{"prompt":"a","echo":true}"#)).as_deref(),
            Some("echo")
        );
        // vLLM's extras that would change the reply: refused unless they ask for nothing.
        for (field, neutral, asks) in [
            ("bad_words", "[]", "[\"x\"]"),
            ("return_tokens_as_token_ids", "false", "true"),
            ("use_beam_search", "false", "true"),
            ("length_penalty", "1.0", "0.5"),
            ("skip_special_tokens", "true", "false"),
        ] {
            let body = |v: &str| format!(r#"{{"prompt":"a","{field}":{v}}}"#);
            assert!(
                parse_completion(body(neutral).as_bytes()).is_ok(),
                "{field}"
            );
            assert_eq!(
                param_of(parse_chat(
                    format!(r#"{{"messages":[{{"role":"user","content":"x"}}],"{field}":{asks}}}"#)
                        .as_bytes()
                ))
                .as_deref(),
                Some(field)
            );
        }
        assert!(
            parse_completion(br#"{"prompt":"a","include_stop_str_in_output":true}"#)
                .unwrap()
                .include_stop
        );
        assert_eq!(
            parse_completion(br#"{"prompt":"a","min_tokens":5}"#)
                .unwrap()
                .min_tokens,
            5
        );
        assert_eq!(
            parse_completion(br#"{"prompt":"a","allowed_token_ids":[9,3,9]}"#)
                .unwrap()
                .adjustments
                .allowed,
            [3, 9]
        );
        assert_eq!(
            param_of(parse_completion(
                br#"{"prompt":"a","allowed_token_ids":[-1]}"#
            ))
            .as_deref(),
            Some("allowed_token_ids")
        );
        assert_eq!(
            param_of(parse_completion(br#"{"prompt":"a","min_tokens":-1}"#)).as_deref(),
            Some("min_tokens")
        );
    }
}
