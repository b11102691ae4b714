//! The body of `/v1/responses` (OpenAI's Responses API), checked field by field and read into
//! the same [`GenerateRequest`] a chat completion becomes.
//!
//! The server keeps no responses: a conversation is sent whole as `input` (its messages, its
//! `function_call` items and their `function_call_output`s), as with `store: false`, and what
//! would need a stored response (`previous_response_id`, `conversation`, item references,
//! `background`) is refused with a 400 naming the field. Built-in tools (web search, files, code)
//! are refused too: only `function` tools run here.

use crate::error::ApiError;
use crate::request::{self, ChatMessage, GenerateRequest, SamplingRequest};
use crate::structured::{self, OutputConstraint, OutputFormat, Tools};
use serde_json::{json, Map, Value};

/// Parses a `/v1/responses` body.
pub fn parse_responses(body: &[u8]) -> Result<GenerateRequest, ApiError> {
    let fields = request::object(body)?;
    for (name, why) in [
        (
            "previous_response_id",
            "this server keeps no responses: send the whole conversation as `input`",
        ),
        (
            "conversation",
            "this server keeps no conversations: send the whole conversation as `input`",
        ),
        ("background", "responses run while the request waits"),
        ("prompt", "this server keeps no prompt templates"),
        (
            "max_tool_calls",
            "not supported: use `parallel_tool_calls: false` for one call at most",
        ),
    ] {
        match fields.get(name) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => {}
            Some(_) => return Err(ApiError::invalid(name, why)),
        }
    }
    let mut messages = Vec::new();
    match fields.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) => messages.push(ChatMessage {
            role: "system".into(),
            content: text.clone(),
            ..ChatMessage::default()
        }),
        Some(_) => {
            return Err(ApiError::invalid(
                "instructions",
                "`instructions` must be a string",
            ))
        }
    }
    messages.extend(input(&fields)?);
    let tools = tools(&fields)?;
    let constraint = text_format(&fields)?;
    if constraint.is_some() && tools.choice_is_enforced() {
        return Err(ApiError::invalid(
            "tool_choice",
            "a required or named `tool_choice` cannot be combined with `text.format`",
        ));
    }
    let mut req = GenerateRequest::chat(request::model_name(&fields)?, messages);
    req.max_tokens = request::optional_positive(&fields, "max_output_tokens")?;
    req.sampling = sampling(&fields)?;
    req.stream = request::optional_bool(&fields, "stream")?.unwrap_or(false);
    req.template_args = reasoning(&fields)?;
    req.logprobs = logprobs(&fields)?;
    req.echo = ["instructions", "text"]
        .into_iter()
        .filter_map(|key| Some((key.to_string(), fields.get(key)?.clone())))
        .collect();
    req.constraint = constraint;
    req.tools = tools;
    Ok(req)
}

/// `temperature` (0–2) and `top_p` ((0, 1]); unsaid, the model's recommendation.
fn sampling(fields: &Map<String, Value>) -> Result<SamplingRequest, ApiError> {
    Ok(SamplingRequest {
        temperature: request::checked_f32(
            fields,
            "temperature",
            |t| (0.0..=2.0).contains(&t),
            "`temperature` must be between 0 and 2",
        )?,
        top_p: request::checked_f32(
            fields,
            "top_p",
            |p| p > 0.0 && p <= 1.0,
            "`top_p` must be in (0, 1]",
        )?,
        ..SamplingRequest::default()
    })
}

/// The output text's log-probabilities: asked for by `include: ["message.output_text.logprobs"]`
/// or a `top_logprobs` (0–20 alternatives at each token).
fn logprobs(fields: &Map<String, Value>) -> Result<Option<u32>, ApiError> {
    let top = match fields.get("top_logprobs") {
        None | Some(Value::Null) => None,
        Some(value) => match value.as_u64() {
            Some(n) if n <= u64::from(request::MAX_TOP_LOGPROBS) => Some(n as u32),
            _ => {
                return Err(ApiError::invalid(
                    "top_logprobs",
                    format!(
                        "`top_logprobs` must be an integer from 0 to {}",
                        request::MAX_TOP_LOGPROBS
                    ),
                ))
            }
        },
    };
    let included = match fields.get("include") {
        None | Some(Value::Null) => false,
        Some(Value::Array(items)) => items
            .iter()
            .any(|i| i.as_str() == Some("message.output_text.logprobs")),
        Some(_) => return Err(ApiError::invalid("include", "`include` must be an array")),
    };
    Ok(match (included, top) {
        (true, top) => Some(top.unwrap_or(0)),
        (false, Some(top)) if top > 0 => Some(top),
        _ => None,
    })
}

/// `reasoning.effort`: `none` or `minimal` asks the template not to think (`enable_thinking:
/// false`, Qwen3's variable), `low` to `xhigh` to think; unsaid, the template's default.
fn reasoning(fields: &Map<String, Value>) -> Result<Map<String, Value>, ApiError> {
    let mut args = Map::new();
    let effort = match fields.get("reasoning") {
        None | Some(Value::Null) => return Ok(args),
        Some(Value::Object(reasoning)) => reasoning.get("effort"),
        Some(_) => {
            return Err(ApiError::invalid(
                "reasoning",
                "`reasoning` must be an object",
            ))
        }
    };
    match effort.and_then(Value::as_str) {
        None if effort.is_none_or(Value::is_null) => {}
        Some("none" | "minimal") => {
            args.insert("enable_thinking".into(), Value::Bool(false));
        }
        Some("low" | "medium" | "high" | "xhigh") => {
            args.insert("enable_thinking".into(), Value::Bool(true));
        }
        _ => {
            return Err(ApiError::invalid(
                "reasoning.effort",
                "`reasoning.effort` must be none, minimal, low, medium, high or xhigh",
            ))
        }
    }
    Ok(args)
}

/// The text of a message's content: a string, or `input_text` / `output_text` parts.
fn content_text(param: &str, content: Option<&Value>) -> Result<String, ApiError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => parts
            .iter()
            .enumerate()
            .map(
                |(j, part)| match (part.get("type").and_then(Value::as_str), part.get("text")) {
                    (Some("input_text" | "output_text" | "text"), Some(Value::String(text))) => {
                        Ok(text.as_str())
                    }
                    (Some(kind @ ("input_image" | "input_file" | "input_audio")), _) => {
                        Err(ApiError::invalid(
                            &format!("{param}[{j}]"),
                            format!(
                                "`{kind}` parts are not supported: the served model reads text"
                            ),
                        ))
                    }
                    _ => Err(ApiError::invalid(
                        &format!("{param}[{j}]"),
                        "content parts are `input_text` or `output_text`",
                    )),
                },
            )
            .collect::<Result<Vec<_>, _>>()
            .map(|texts| texts.concat()),
        Some(_) => Err(ApiError::invalid(
            param,
            "content must be a string or an array of text parts",
        )),
    }
}

/// `input`: a string (one user message) or items — messages of any role, the model's
/// `function_call`s (joined to the assistant message before them, as one turn's calls) and the
/// `function_call_output`s that answer them (`tool` messages named after their call). Past
/// `reasoning` items are left out (chat templates leave past thinking out).
fn input(fields: &Map<String, Value>) -> Result<Vec<ChatMessage>, ApiError> {
    let items = match fields.get("input") {
        Some(Value::String(text)) => {
            return Ok(vec![ChatMessage {
                role: "user".into(),
                content: text.clone(),
                ..ChatMessage::default()
            }])
        }
        _ => request::non_empty_array(fields, "input")?,
    };
    let mut out: Vec<ChatMessage> = Vec::new();
    let mut call_names: Vec<(String, String)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let param = format!("input[{i}]");
        let kind = item.get("type").and_then(Value::as_str);
        match kind {
            None | Some("message") => {
                let role = match item.get("role").and_then(Value::as_str) {
                    Some(role @ ("user" | "system" | "developer" | "assistant")) => role,
                    _ => {
                        return Err(ApiError::invalid(
                            &format!("{param}.role"),
                            "role must be user, system, developer or assistant",
                        ))
                    }
                };
                let content = content_text(&format!("{param}.content"), item.get("content"))?;
                out.push(ChatMessage {
                    role: role.into(),
                    content,
                    ..ChatMessage::default()
                });
            }
            Some("function_call") => {
                let text = |key: &str| item.get(key).and_then(Value::as_str);
                let (Some(call_id), Some(name)) = (text("call_id"), text("name")) else {
                    return Err(ApiError::invalid(
                        &param,
                        "a `function_call` item needs its `call_id` and `name`",
                    ));
                };
                let call = json!({
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": text("arguments").unwrap_or("{}")},
                });
                let [call] = <[Value; 1]>::try_from(structured::template_tool_calls(
                    &param,
                    &Value::Array(vec![call]),
                )?)
                .expect("one call in, one out");
                call_names.push((call_id.to_string(), name.to_string()));
                match out.last_mut() {
                    Some(last) if last.role == "assistant" => {
                        last.tool_calls.get_or_insert_with(Vec::new).push(call)
                    }
                    _ => out.push(ChatMessage {
                        role: "assistant".into(),
                        tool_calls: Some(vec![call]),
                        ..ChatMessage::default()
                    }),
                }
            }
            Some("function_call_output") => {
                let call_id = item.get("call_id").and_then(Value::as_str).ok_or_else(|| {
                    ApiError::invalid(
                        &format!("{param}.call_id"),
                        "a `function_call_output` needs the `call_id` it answers",
                    )
                })?;
                let content = content_text(&format!("{param}.output"), item.get("output"))?;
                let name = call_names
                    .iter()
                    .find(|(call, _)| call == call_id)
                    .map(|(_, name)| name.clone());
                out.push(ChatMessage {
                    role: "tool".into(),
                    content,
                    tool_call_id: Some(call_id.to_string()),
                    name,
                    ..ChatMessage::default()
                });
            }
            Some("reasoning") => {}
            Some("item_reference") => {
                return Err(ApiError::invalid(
                    &param,
                    "this server keeps no items: send the item itself",
                ))
            }
            Some(other) => {
                return Err(ApiError::invalid(
                    &format!("{param}.type"),
                    format!(
                        "`{other}` items are not supported: messages, `function_call` and \
                         `function_call_output` are"
                    ),
                ))
            }
        }
    }
    Ok(out)
}

/// `tools` (`{"type": "function", "name", "description", "parameters"}`), `tool_choice` and
/// `parallel_tool_calls`, read by the chat API's rules through their chat-shaped twins; errors
/// name the Responses API's fields.
fn tools(fields: &Map<String, Value>) -> Result<Tools, ApiError> {
    let chat_tools = match fields.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, tool)| chat_tool(i, tool))
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => return Err(ApiError::invalid("tools", "`tools` must be an array")),
    };
    let mut chat = Map::new();
    chat.insert("tools".into(), Value::Array(chat_tools));
    match fields.get("tool_choice") {
        None | Some(Value::Null) => {}
        Some(choice @ Value::String(_)) => {
            chat.insert("tool_choice".into(), choice.clone());
        }
        Some(Value::Object(choice)) => {
            let name = match (
                choice.get("type").and_then(Value::as_str),
                choice.get("name").and_then(Value::as_str),
            ) {
                (Some("function"), Some(name)) => name,
                _ => {
                    return Err(ApiError::invalid(
                        "tool_choice",
                        "a named `tool_choice` is {\"type\": \"function\", \"name\": ...}",
                    ))
                }
            };
            chat.insert(
                "tool_choice".into(),
                json!({"type": "function", "function": {"name": name}}),
            );
        }
        Some(_) => {
            return Err(ApiError::invalid(
                "tool_choice",
                "`tool_choice` must be a string or an object",
            ))
        }
    }
    if let Some(parallel) = fields.get("parallel_tool_calls") {
        chat.insert("parallel_tool_calls".into(), parallel.clone());
    }
    structured::tools(&chat).map_err(|mut error| {
        if let Some(param) = &error.param {
            error.param = Some(param.replace(".function.", "."));
        }
        error
    })
}

/// A Responses function tool as the chat API's (what the chat template is given).
fn chat_tool(i: usize, tool: &Value) -> Result<Value, ApiError> {
    let param = format!("tools[{i}]");
    match tool.get("type").and_then(Value::as_str) {
        Some("function") => {}
        other => {
            return Err(ApiError::invalid(
                &format!("{param}.type"),
                format!(
                    "{} tools are not supported: only `function` tools run here",
                    other.map_or("untyped".to_string(), |k| format!("`{k}`"))
                ),
            ))
        }
    }
    let mut function = Map::new();
    for key in ["name", "description", "parameters"] {
        if let Some(value) = tool.get(key).filter(|v| !v.is_null()) {
            function.insert(key.into(), value.clone());
        }
    }
    Ok(json!({"type": "function", "function": function}))
}

/// `text.format`: `text` (none), `json_object`, or `json_schema` with its `schema` (and `name`,
/// `strict`): the reply's grammar, as the chat API's `response_format`. `text.verbosity` is
/// accepted: the model says what it was trained to say.
fn text_format(fields: &Map<String, Value>) -> Result<Option<OutputConstraint>, ApiError> {
    let format = match fields.get("text") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(text)) => match text.get("format") {
            None | Some(Value::Null) => return Ok(None),
            Some(format) => format,
        },
        Some(_) => return Err(ApiError::invalid("text", "`text` must be an object")),
    };
    let param = "text.format";
    let format = match format.get("type").and_then(Value::as_str) {
        Some("text") => return Ok(None),
        Some("json_object") => OutputFormat::JsonObject,
        Some("json_schema") => {
            let schema = format.get("schema").ok_or_else(|| {
                ApiError::invalid(param, "a `json_schema` format needs its `schema`")
            })?;
            structured::json_schema_value(param, schema)?
        }
        _ => {
            return Err(ApiError::invalid(
                param,
                "`text.format.type` must be text, json_object or json_schema",
            ))
        }
    };
    Ok(Some(OutputConstraint { param, format }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::structured::ToolChoice;

    fn parse(body: Value) -> Result<GenerateRequest, ApiError> {
        parse_responses(body.to_string().as_bytes())
    }

    #[test]
    fn a_conversation_of_items_becomes_the_chat_the_template_renders() {
        let request = parse(json!({
            "model": "m",
            "instructions": "Be brief.",
            "input": [
                {"role": "user", "content": "Weather in Paris?"},
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
                {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": "{\"city\": \"Paris\"}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "18 C"},
                {"role": "user", "content": [{"type": "input_text", "text": "And tomorrow?"}]},
            ],
            "tools": [{"type": "function", "name": "weather", "parameters": {"type": "object"}}],
            "parallel_tool_calls": false,
            "max_output_tokens": 64,
            "temperature": 0,
            "reasoning": {"effort": "minimal"},
            "store": false,
            "include": ["reasoning.encrypted_content"],
            "stream": true,
        }))
        .unwrap();
        let chat = request.chat_messages();
        let roles: Vec<&str> = chat.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);
        assert_eq!(chat[2].content, "Let me look.");
        assert_eq!(
            chat[2].tool_calls.as_ref().unwrap()[0],
            json!({"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": {"city": "Paris"}}})
        );
        assert_eq!(
            (chat[3].tool_call_id.as_deref(), chat[3].name.as_deref()),
            (Some("call_1"), Some("weather"))
        );
        assert_eq!(request.max_tokens, Some(64));
        assert_eq!(request.sampling.temperature, Some(0.0));
        assert!(request.stream);
        assert!(!request.tools.parallel);
        assert_eq!(request.template_args["enable_thinking"], json!(false));
        // A string is one user message.
        let request = parse(json!({"input": "hi"})).unwrap();
        assert_eq!(request.chat_messages()[0].role, "user");
    }

    #[test]
    fn tool_choices_and_text_formats_map_onto_the_chat_apis() {
        let tool = json!({"type": "function", "name": "f", "parameters": {"type": "object"}});
        let choice = |choice: Value| {
            parse(json!({"input": "x", "tools": [tool], "tool_choice": choice}))
                .map(|r| r.tools.choice)
        };
        assert_eq!(choice(json!("required")).unwrap(), ToolChoice::Required);
        assert_eq!(
            choice(json!({"type": "function", "name": "f"})).unwrap(),
            ToolChoice::Function("f".into())
        );
        assert_eq!(
            choice(json!({"type": "function", "name": "g"}))
                .unwrap_err()
                .param
                .as_deref(),
            Some("tool_choice")
        );
        let format = |format: Value| {
            parse(json!({"input": "x", "text": {"format": format, "verbosity": "low"}}))
                .map(|r| r.constraint.map(|c| c.format))
        };
        assert_eq!(format(json!({"type": "text"})).unwrap(), None);
        assert_eq!(
            format(json!({"type": "json_object"})).unwrap(),
            Some(OutputFormat::JsonObject)
        );
        let schema = json!({"type": "object"});
        assert_eq!(
            format(json!({"type": "json_schema", "name": "x", "schema": schema, "strict": true}))
                .unwrap(),
            Some(OutputFormat::JsonSchema(schema))
        );
    }

    #[test]
    fn what_needs_a_stored_response_or_another_tool_is_refused_naming_the_field() {
        let refused = |body: Value| parse(body).unwrap_err().param.unwrap_or_default();
        assert_eq!(
            refused(json!({"input": "x", "previous_response_id": "resp_1"})),
            "previous_response_id"
        );
        assert_eq!(
            refused(json!({"input": "x", "background": true})),
            "background"
        );
        assert_eq!(
            refused(json!({"input": [{"type": "item_reference", "id": "msg_1"}]})),
            "input[0]"
        );
        assert_eq!(
            refused(json!({"input": "x", "tools": [{"type": "web_search"}]})),
            "tools[0].type"
        );
        assert_eq!(
            refused(json!({"input": "x", "tools": [{"type": "function", "name": "a b"}]})),
            "tools[0].name"
        );
        assert_eq!(
            refused(
                json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]})
            ),
            "input[0].content[0]"
        );
        assert_eq!(refused(json!({"input": []})), "input");
        assert_eq!(refused(json!({})), "input");
        assert_eq!(
            refused(json!({"input": "x", "max_output_tokens": 0})),
            "max_output_tokens"
        );
        assert_eq!(
            refused(json!({"input": "x", "reasoning": {"effort": "huge"}})),
            "reasoning.effort"
        );
        assert_eq!(
            refused(json!({"input": "x", "text": {"format": {"type": "json_schema"}}})),
            "text.format"
        );
        assert_eq!(
            refused(json!({"input": [{"type": "function_call_output", "output": "x"}]})),
            "input[0].call_id"
        );
        assert_eq!(
            refused(json!({"input": "x", "top_logprobs": 21})),
            "top_logprobs"
        );
        let logprobs = |body: Value| parse(body).unwrap().logprobs;
        assert_eq!(logprobs(json!({"input": "x", "top_logprobs": 3})), Some(3));
        assert_eq!(
            logprobs(json!({"input": "x", "include": ["message.output_text.logprobs"]})),
            Some(0)
        );
        assert_eq!(logprobs(json!({"input": "x"})), None);
        // What Codex sends: accepted.
        assert!(parse(
            json!({"input": "x", "include": ["reasoning.encrypted_content"], "store": false})
        )
        .is_ok());
    }
}
