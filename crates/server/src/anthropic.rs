//! The body of `/v1/messages` (Anthropic's Messages API), checked field by field and read into
//! the same [`GenerateRequest`] a chat completion becomes.
//!
//! Anthropic's shape differs from OpenAI's in where things are, not in what they mean: the system
//! prompt is a field of its own, a message's content is a list of blocks (text, `tool_use`,
//! `tool_result`, `thinking`), tools carry an `input_schema`, and `thinking` turns the model's
//! thinking on or off. Each is mapped onto the chat the template renders; what would change the
//! answer and has no meaning here (images, documents, server tools) is refused with a 400 naming
//! the field, never ignored.

use crate::error::ApiError;
use crate::request::{self, ChatMessage, GenerateRequest, SamplingRequest};
use crate::structured::{self, OutputConstraint, Tools};
use serde_json::{json, Map, Value};

/// Parses a `/v1/messages` body (or a `/v1/messages/count_tokens` one). `max_tokens` is
/// optional here, as in OpenAI's API: unsaid, the reply may take what the largest session
/// leaves.
pub fn parse_messages(body: &[u8]) -> Result<GenerateRequest, ApiError> {
    let fields = request::object(body)?;
    refuse_present(&fields, &["mcp_servers", "container"])?;
    let tools = tools(&fields)?;
    let mut messages = system(&fields)?;
    messages.extend(conversation(&fields)?);
    let (template_args, thinking_budget) = thinking(&fields)?;
    // Anthropic's "prefill": a last turn of the assistant's is continued, its text the start of
    // the reply (which the response does not repeat).
    let continue_final = match messages.last() {
        Some(last) if last.role == "assistant" => {
            if last.tool_calls.is_some() || last.content.is_empty() {
                return Err(ApiError::invalid(
                    &format!("messages[{}]", message_count(&fields) - 1),
                    "a last assistant turn is continued (prefill): it takes text, not tool calls",
                ));
            }
            true
        }
        _ => false,
    };
    let constraint = output_format(&fields)?;
    if constraint.is_some() && tools.choice_is_enforced() {
        return Err(ApiError::invalid(
            "tool_choice",
            "a tool choice of `any` or `tool` cannot be combined with `output_config.format`",
        ));
    }
    let mut req = GenerateRequest::chat(request::model_name(&fields)?, messages);
    req.max_tokens = request::optional_positive(&fields, "max_tokens")?;
    req.sampling = sampling(&fields)?;
    req.stop = stop_sequences(&fields)?;
    req.stream = request::optional_bool(&fields, "stream")?.unwrap_or(false);
    req.thinking_budget = thinking_budget;
    req.template_args = template_args;
    req.continue_final = continue_final;
    req.constraint = constraint;
    req.tools = tools;
    Ok(req)
}

/// How many messages the body holds (after [`conversation`] read them).
fn message_count(fields: &Map<String, Value>) -> usize {
    fields
        .get("messages")
        .and_then(Value::as_array)
        .map_or(0, Vec::len)
}

/// Fields whose features this server does not have: refused when they ask for anything.
fn refuse_present(fields: &Map<String, Value>, names: &[&str]) -> Result<(), ApiError> {
    for name in names {
        match fields.get(*name) {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) if items.is_empty() => {}
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

/// Anthropic's sampling fields and ranges: temperature 0–1, top_p (0, 1], top_k ≥ 1. Unsaid,
/// the model's recommendation applies, as in the chat API.
fn sampling(fields: &Map<String, Value>) -> Result<SamplingRequest, ApiError> {
    let temperature = request::checked_f32(
        fields,
        "temperature",
        |t| (0.0..=1.0).contains(&t),
        "`temperature` must be between 0 and 1",
    )?;
    let top_p = request::checked_f32(
        fields,
        "top_p",
        |p| p > 0.0 && p <= 1.0,
        "`top_p` must be in (0, 1]",
    )?;
    let top_k = match fields.get("top_k") {
        None | Some(Value::Null) => None,
        Some(value) => match value.as_u64() {
            Some(k) if k > 0 && k <= u32::MAX as u64 => Some(k as u32),
            _ => {
                return Err(ApiError::invalid(
                    "top_k",
                    "`top_k` must be a positive integer",
                ))
            }
        },
    };
    Ok(SamplingRequest {
        temperature,
        top_p,
        top_k,
        ..SamplingRequest::default()
    })
}

fn stop_sequences(fields: &Map<String, Value>) -> Result<Vec<String>, ApiError> {
    let param = "stop_sequences";
    let stops: Vec<String> = match fields.get(param) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .ok_or_else(|| ApiError::invalid(param, "`stop_sequences` must be strings"))?,
        Some(_) => {
            return Err(ApiError::invalid(
                param,
                "`stop_sequences` must be an array of strings",
            ))
        }
    };
    request::check_stops(param, stops)
}

/// `thinking`: `{"type": "enabled", "budget_tokens": N}` asks the template to think and forces
/// `</think>` after N thinking tokens; `adaptive` (and `between_tools`) asks it to think, the
/// model deciding how long; `disabled` asks it not to; unsaid, the template's own default. They
/// reach the template as `enable_thinking` (Qwen3's variable). `display: "omitted"` (thinking
/// withheld from the reply) is refused: this server sends the thinking it computes.
fn thinking(fields: &Map<String, Value>) -> Result<(Map<String, Value>, Option<u64>), ApiError> {
    let mut args = Map::new();
    let value = match fields.get("thinking") {
        None | Some(Value::Null) => return Ok((args, None)),
        Some(value) => value,
    };
    match value.get("display") {
        None | Some(Value::Null) => {}
        Some(Value::String(display)) if display == "summarized" => {}
        Some(_) => {
            return Err(ApiError::invalid(
                "thinking.display",
                "only `summarized`: the reply's thinking is sent as the model wrote it",
            ))
        }
    }
    let kind = value.get("type").and_then(Value::as_str);
    match kind {
        Some("adaptive" | "between_tools") => {
            args.insert("enable_thinking".into(), Value::Bool(true));
            Ok((args, None))
        }
        Some("enabled") => {
            let budget = value
                .get("budget_tokens")
                .and_then(Value::as_u64)
                .filter(|&n| n > 0)
                .ok_or_else(|| {
                    ApiError::invalid(
                        "thinking.budget_tokens",
                        "an enabled `thinking` needs `budget_tokens`, a positive integer",
                    )
                })?;
            args.insert("enable_thinking".into(), Value::Bool(true));
            Ok((args, Some(budget)))
        }
        Some("disabled") => {
            args.insert("enable_thinking".into(), Value::Bool(false));
            Ok((args, None))
        }
        _ => Err(ApiError::invalid(
            "thinking.type",
            "`thinking.type` must be `enabled`, `adaptive`, `between_tools` or `disabled`",
        )),
    }
}

/// `output_config.format` (or the beta's top-level `output_format`): `{"type": "json_schema",
/// "schema": {…}}`, the reply JSON valid under the schema (as the chat API's `response_format`).
/// `output_config.effort` is accepted: the model's effort is what it was trained to give.
fn output_format(fields: &Map<String, Value>) -> Result<Option<OutputConstraint>, ApiError> {
    let empty = Map::new();
    let config = match fields.get("output_config") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(config)) => config,
        Some(_) => {
            return Err(ApiError::invalid(
                "output_config",
                "`output_config` must be an object",
            ))
        }
    };
    let param = "output_config.format";
    let format = match (config.get("format"), fields.get("output_format")) {
        (Some(format), _) if !format.is_null() => Some(format),
        _ => fields.get("output_format"),
    };
    match format {
        None | Some(Value::Null) => Ok(None),
        Some(format) if format.get("type").and_then(Value::as_str) == Some("json_schema") => {
            let schema = format.get("schema").ok_or_else(|| {
                ApiError::invalid(param, "a `json_schema` format needs its `schema`")
            })?;
            Ok(Some(OutputConstraint {
                param,
                format: structured::json_schema_value(param, schema)?,
            }))
        }
        Some(_) => Err(ApiError::invalid(
            param,
            "`output_config.format` must be {\"type\": \"json_schema\", \"schema\": {...}}",
        )),
    }
}

/// `system`: a string or text blocks, the conversation's first message.
fn system(fields: &Map<String, Value>) -> Result<Vec<ChatMessage>, ApiError> {
    let text = match fields.get("system") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .enumerate()
            .map(|(i, block)| text_block(&format!("system[{i}]"), block))
            .collect::<Result<Vec<_>, _>>()?
            .join("\n"),
        Some(_) => {
            return Err(ApiError::invalid(
                "system",
                "`system` must be a string or an array of text blocks",
            ))
        }
    };
    Ok(vec![ChatMessage {
        role: "system".into(),
        content: text,
        ..ChatMessage::default()
    }])
}

/// A `text` block's text (`cache_control` and `citations` beside it change nothing here: the
/// prompt cache works by itself).
fn text_block<'a>(param: &str, block: &'a Value) -> Result<&'a str, ApiError> {
    match (block.get("type").and_then(Value::as_str), block.get("text")) {
        (Some("text"), Some(Value::String(text))) => Ok(text),
        _ => Err(ApiError::invalid(
            param,
            "must be a text block: {\"type\": \"text\", \"text\": ...}",
        )),
    }
}

/// `messages`: user and assistant turns, each a string or blocks, as the chat the template
/// renders (consecutive turns of one role combined, as Anthropic combines them). A user turn's `tool_result` blocks become `tool` messages (in their order, before
/// the turn's text, as Anthropic's clients send them); an assistant turn's `tool_use` blocks
/// become its `tool_calls`; its `thinking` blocks are left out (chat templates drop past
/// thinking too).
fn conversation(fields: &Map<String, Value>) -> Result<Vec<ChatMessage>, ApiError> {
    let items = request::non_empty_array(fields, "messages")?;
    let mut out = Vec::new();
    // Tool names by call id, for the results that answer them.
    let mut call_names: Vec<(String, String)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let param = format!("messages[{i}]");
        let role =
            match item.get("role").and_then(Value::as_str) {
                Some(role @ ("user" | "assistant")) => role,
                _ => return Err(ApiError::invalid(
                    &format!("{param}.role"),
                    "role must be `user` or `assistant` (the system prompt is the `system` field)",
                )),
            };
        let blocks: Vec<Value> = match item.get("content") {
            Some(Value::String(text)) => vec![json!({"type": "text", "text": text})],
            Some(Value::Array(blocks)) => blocks.clone(),
            _ => {
                return Err(ApiError::invalid(
                    &format!("{param}.content"),
                    "content must be a string or an array of content blocks",
                ))
            }
        };
        if role == "user" {
            user_turn(&param, &blocks, &call_names, &mut out)?;
        } else {
            let turn = assistant_turn(&param, &blocks, &mut call_names)?;
            // Consecutive assistant turns are one turn (as Anthropic combines them).
            match out.last_mut() {
                Some(last) if last.role == "assistant" => {
                    if !last.content.is_empty() && !turn.content.is_empty() {
                        last.content.push('\n');
                    }
                    last.content.push_str(&turn.content);
                    if let Some(calls) = turn.tool_calls {
                        last.tool_calls.get_or_insert_with(Vec::new).extend(calls);
                    }
                }
                _ => out.push(turn),
            }
        }
    }
    Ok(out)
}

fn user_turn(
    param: &str,
    blocks: &[Value],
    call_names: &[(String, String)],
    out: &mut Vec<ChatMessage>,
) -> Result<(), ApiError> {
    let mut texts: Vec<&str> = Vec::new();
    for (j, block) in blocks.iter().enumerate() {
        let param = format!("{param}.content[{j}]");
        match block.get("type").and_then(Value::as_str) {
            Some("text") => texts.push(text_block(&param, block)?),
            Some("tool_result") => {
                let id = block
                    .get("tool_use_id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        ApiError::invalid(
                            &format!("{param}.tool_use_id"),
                            "a tool result needs the `tool_use_id` it answers",
                        )
                    })?;
                let mut content = match block.get("content") {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(text)) => text.clone(),
                    Some(Value::Array(parts)) => parts
                        .iter()
                        .enumerate()
                        .map(|(k, part)| text_block(&format!("{param}.content[{k}]"), part))
                        .collect::<Result<Vec<_>, _>>()?
                        .join("\n"),
                    Some(_) => {
                        return Err(ApiError::invalid(
                            &format!("{param}.content"),
                            "a tool result's content must be a string or text blocks",
                        ))
                    }
                };
                // The model sees that the call failed as the tool reported it.
                if block.get("is_error").and_then(Value::as_bool) == Some(true) {
                    content = format!("Error: {content}");
                }
                let name = call_names
                    .iter()
                    .find(|(call, _)| call == id)
                    .map(|(_, name)| name.clone());
                out.push(ChatMessage {
                    role: "tool".into(),
                    content,
                    tool_call_id: Some(id.to_string()),
                    name,
                    ..ChatMessage::default()
                });
            }
            Some(kind @ ("image" | "document" | "search_result")) => {
                return Err(ApiError::invalid(
                    &param,
                    format!("`{kind}` blocks are not supported: the served model reads text"),
                ))
            }
            _ => {
                return Err(ApiError::invalid(
                    &param,
                    "a user turn's blocks are `text` or `tool_result`",
                ))
            }
        }
    }
    if !texts.is_empty() {
        let text = texts.join("\n");
        // Consecutive user turns are one turn (as Anthropic combines them).
        match out.last_mut() {
            Some(last) if last.role == "user" => {
                last.content.push('\n');
                last.content.push_str(&text);
            }
            _ => out.push(ChatMessage {
                role: "user".into(),
                content: text,
                ..ChatMessage::default()
            }),
        }
    }
    Ok(())
}

fn assistant_turn(
    param: &str,
    blocks: &[Value],
    call_names: &mut Vec<(String, String)>,
) -> Result<ChatMessage, ApiError> {
    let mut texts: Vec<&str> = Vec::new();
    let mut calls: Vec<Value> = Vec::new();
    for (j, block) in blocks.iter().enumerate() {
        let param = format!("{param}.content[{j}]");
        match block.get("type").and_then(Value::as_str) {
            Some("text") => texts.push(text_block(&param, block)?),
            Some("tool_use") => {
                let id = block.get("id").and_then(Value::as_str);
                let name = block.get("name").and_then(Value::as_str);
                let (Some(id), Some(name)) = (id, name) else {
                    return Err(ApiError::invalid(
                        &param,
                        "a `tool_use` block needs its `id` and `name`",
                    ));
                };
                let input = match block.get("input") {
                    None | Some(Value::Null) => json!({}),
                    Some(input) => input.clone(),
                };
                call_names.push((id.to_string(), name.to_string()));
                calls.push(json!({
                    "id": id,
                    "type": "function",
                    "function": {"name": name, "arguments": input},
                }));
            }
            Some("thinking" | "redacted_thinking") => {}
            _ => {
                return Err(ApiError::invalid(
                    &param,
                    "an assistant turn's blocks are `text`, `tool_use` or `thinking`",
                ))
            }
        }
    }
    let tool_calls = if calls.is_empty() {
        None
    } else {
        Some(structured::template_tool_calls(
            &format!("{param}.content"),
            &Value::Array(calls),
        )?)
    };
    Ok(ChatMessage {
        role: "assistant".into(),
        content: texts.concat(),
        tool_calls,
        ..ChatMessage::default()
    })
}

/// `tools` (`{"name", "description", "input_schema"}`) and `tool_choice` (`auto`, `any`, `tool`
/// with a `name`, `none`; `disable_parallel_tool_use`), read by the chat API's rules through
/// their OpenAI twins; errors name Anthropic's fields.
fn tools(fields: &Map<String, Value>) -> Result<Tools, ApiError> {
    let openai_tools = match fields.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, tool)| openai_tool(i, tool))
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => return Err(ApiError::invalid("tools", "`tools` must be an array")),
    };
    let mut openai = Map::new();
    if let Some(choice) = fields.get("tool_choice").filter(|c| !c.is_null()) {
        let parallel = match choice.get("disable_parallel_tool_use") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(disable)) => !disable,
            Some(_) => {
                return Err(ApiError::invalid(
                    "tool_choice.disable_parallel_tool_use",
                    "must be a boolean",
                ))
            }
        };
        let openai_choice = match choice.get("type").and_then(Value::as_str) {
            Some("auto") => json!("auto"),
            Some("any") => json!("required"),
            Some("none") => json!("none"),
            Some("tool") => match choice.get("name").and_then(Value::as_str) {
                Some(name) => json!({"type": "function", "function": {"name": name}}),
                None => {
                    return Err(ApiError::invalid(
                        "tool_choice.name",
                        "a `tool` choice needs the tool's `name`",
                    ))
                }
            },
            _ => {
                return Err(ApiError::invalid(
                    "tool_choice.type",
                    "`tool_choice.type` must be `auto`, `any`, `tool` or `none`",
                ))
            }
        };
        openai.insert("tool_choice".into(), openai_choice);
        openai.insert("parallel_tool_calls".into(), Value::Bool(parallel));
    }
    openai.insert("tools".into(), Value::Array(openai_tools));
    structured::tools(&openai).map_err(anthropic_param)
}

/// An Anthropic client tool as the chat API's function tool (what the chat template is given).
fn openai_tool(i: usize, tool: &Value) -> Result<Value, ApiError> {
    let param = format!("tools[{i}]");
    let fields = tool
        .as_object()
        .ok_or_else(|| ApiError::invalid(&param, "each tool must be an object"))?;
    match fields.get("type").and_then(Value::as_str) {
        None | Some("custom") => {}
        Some(kind) => {
            return Err(ApiError::invalid(
                &format!("{param}.type"),
                format!(
                    "`{kind}` is a server tool this server does not run; give client tools \
                     (`name`, `description`, `input_schema`)"
                ),
            ))
        }
    }
    // A deferred tool is loaded by a server-side tool search, which this server does not run.
    if fields.get("defer_loading") == Some(&Value::Bool(true)) {
        return Err(ApiError::invalid(
            &format!("{param}.defer_loading"),
            "deferred tools need a tool search this server does not run",
        ));
    }
    let mut function = Map::new();
    function.insert(
        "name".into(),
        fields.get("name").cloned().unwrap_or(Value::Null),
    );
    if let Some(description) = fields.get("description").filter(|d| !d.is_null()) {
        function.insert("description".into(), description.clone());
    }
    match fields.get("input_schema") {
        Some(schema @ Value::Object(_)) => {
            function.insert("parameters".into(), schema.clone());
        }
        _ => {
            return Err(ApiError::invalid(
                &format!("{param}.input_schema"),
                "a tool needs an `input_schema`, a JSON schema object",
            ))
        }
    }
    Ok(json!({"type": "function", "function": function}))
}

/// An error of the chat API's tool rules, naming Anthropic's field instead of OpenAI's.
fn anthropic_param(mut error: ApiError) -> ApiError {
    if let Some(param) = &error.param {
        error.param = Some(
            param
                .replace(".function.name", ".name")
                .replace(".function.parameters", ".input_schema"),
        );
    }
    error
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::structured::ToolChoice;

    fn parse(body: Value) -> Result<GenerateRequest, ApiError> {
        parse_messages(body.to_string().as_bytes())
    }

    #[test]
    fn a_conversation_with_tools_becomes_the_chat_the_template_renders() {
        let request = parse(json!({
            "model": "m",
            "max_tokens": 64,
            "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "use the tool", "signature": "x"},
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18 C"}]},
                    {"type": "text", "text": "And tomorrow?"},
                ]},
            ],
            "tools": [{"name": "weather", "description": "today's weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
            "stop_sequences": ["\n\nHuman:"],
            "temperature": 0,
            "stream": true,
        }))
        .unwrap();
        let chat = request.chat_messages();
        let roles: Vec<&str> = chat.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);
        assert_eq!(chat[0].content, "Be brief.");
        assert_eq!(chat[2].content, "Let me look.");
        assert_eq!(
            chat[2].tool_calls.as_ref().unwrap()[0],
            json!({"id": "toolu_1", "type": "function", "function": {"name": "weather", "arguments": {"city": "Paris"}}})
        );
        assert_eq!(chat[3].content, "18 C");
        assert_eq!(chat[3].tool_call_id.as_deref(), Some("toolu_1"));
        assert_eq!(chat[3].name.as_deref(), Some("weather"));
        assert_eq!(chat[4].content, "And tomorrow?");
        let generate = &request;
        assert_eq!(generate.max_tokens, Some(64));
        assert_eq!(generate.stop, ["\n\nHuman:"]);
        assert_eq!(generate.sampling.temperature, Some(0.0));
        assert!(generate.stream);
        assert_eq!(generate.tools.tools[0].name, "weather");
        assert_eq!(
            generate.tools.tools[0].definition["function"]["parameters"]["properties"]["city"],
            json!({"type": "string"})
        );
        assert_eq!(generate.tools.choice, ToolChoice::Auto);
        assert!(generate.tools.parallel);
    }

    #[test]
    fn tool_choices_and_thinking_map_onto_the_chat_apis() {
        let tool = json!({"name": "f", "input_schema": {"type": "object"}});
        let choice = |choice: Value| {
            parse(json!({"messages": [{"role": "user", "content": "x"}], "tools": [tool], "tool_choice": choice}))
                .map(|r| (r.tools.choice, r.tools.parallel))
        };
        assert_eq!(
            choice(json!({"type": "any"})).unwrap(),
            (ToolChoice::Required, true)
        );
        assert_eq!(
            choice(json!({"type": "any", "disable_parallel_tool_use": true})).unwrap(),
            (ToolChoice::Required, false)
        );
        assert_eq!(
            choice(json!({"type": "auto", "disable_parallel_tool_use": true})).unwrap(),
            (ToolChoice::Auto, false)
        );
        assert_eq!(
            choice(json!({"type": "tool", "name": "f"})).unwrap(),
            (ToolChoice::Function("f".into()), true)
        );
        assert_eq!(choice(json!({"type": "none"})).unwrap().0, ToolChoice::None);
        assert_eq!(
            choice(json!({"type": "tool", "name": "g"}))
                .unwrap_err()
                .param
                .as_deref(),
            Some("tool_choice")
        );
        let thinking = |value: Value| {
            parse(json!({"messages": [{"role": "user", "content": "x"}], "thinking": value}))
                .map(|r| (r.template_args, r.thinking_budget))
        };
        let (args, budget) = thinking(json!({"type": "enabled", "budget_tokens": 2048})).unwrap();
        assert_eq!(args["enable_thinking"], json!(true));
        assert_eq!(budget, Some(2048));
        let (args, budget) = thinking(json!({"type": "disabled"})).unwrap();
        assert_eq!(args["enable_thinking"], json!(false));
        assert_eq!(budget, None);
        assert_eq!(
            thinking(json!({"type": "enabled"}))
                .unwrap_err()
                .param
                .as_deref(),
            Some("thinking.budget_tokens")
        );
        let (args, budget) =
            thinking(json!({"type": "adaptive", "display": "summarized"})).unwrap();
        assert_eq!(
            (args["enable_thinking"].clone(), budget),
            (json!(true), None)
        );
        assert_eq!(
            thinking(json!({"type": "adaptive", "display": "omitted"}))
                .unwrap_err()
                .param
                .as_deref(),
            Some("thinking.display")
        );
    }

    #[test]
    fn an_output_format_is_the_replys_schema() {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
        let request = parse(json!({"messages": [{"role": "user", "content": "x"}],
            "output_config": {"effort": "high", "format": {"type": "json_schema", "schema": schema}}}))
        .unwrap();
        let constraint = request.constraint.unwrap();
        assert_eq!(constraint.param, "output_config.format");
        assert_eq!(
            constraint.format,
            structured::OutputFormat::JsonSchema(schema)
        );
        // The beta's top-level spelling.
        let request = parse(json!({"messages": [{"role": "user", "content": "x"}],
            "output_format": {"type": "json_schema", "schema": {"type": "object"}}}))
        .unwrap();
        assert_eq!(
            request.constraint.unwrap().format,
            structured::OutputFormat::JsonSchema(json!({"type": "object"}))
        );
        // Effort alone asks for nothing more.
        let request = parse(json!({"messages": [{"role": "user", "content": "x"}],
            "output_config": {"effort": "low"}}))
        .unwrap();
        assert_eq!(request.constraint, None);
        let refused = parse(json!({"messages": [{"role": "user", "content": "x"}],
            "output_config": {"format": {"type": "json_object"}}}))
        .unwrap_err();
        assert_eq!(refused.param.as_deref(), Some("output_config.format"));
    }

    #[test]
    fn what_cannot_be_served_is_refused_naming_the_field() {
        let refused = |body: Value| parse(body).unwrap_err().param.unwrap_or_default();
        let user = |content: Value| json!({"messages": [{"role": "user", "content": content}]});
        assert_eq!(
            refused(user(
                json!([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}])
            )),
            "messages[0].content[0]"
        );
        assert_eq!(refused(json!({"messages": []})), "messages");
        assert_eq!(
            refused(json!({"messages": [{"role": "system", "content": "x"}]})),
            "messages[0].role"
        );
        let with = |extra: Value| {
            let mut body = user(json!("x"));
            body.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            refused(body)
        };
        assert_eq!(with(json!({"temperature": 1.5})), "temperature");
        assert_eq!(with(json!({"top_k": 0})), "top_k");
        assert_eq!(with(json!({"max_tokens": 0})), "max_tokens");
        assert_eq!(with(json!({"stop_sequences": "x"})), "stop_sequences");
        assert_eq!(
            with(json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]})),
            "tools[0].type"
        );
        assert_eq!(
            with(json!({"tools": [{"name": "bad name!", "input_schema": {"type": "object"}}]})),
            "tools[0].name"
        );
        assert_eq!(
            with(json!({"tools": [{"name": "f"}]})),
            "tools[0].input_schema"
        );
        assert_eq!(
            with(json!({"mcp_servers": [{"type": "url", "url": "http://x"}]})),
            "mcp_servers"
        );
        assert_eq!(
            refused(json!({"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]})),
            "messages[0].content[0].tool_use_id"
        );
        // Prefill takes text only.
        assert_eq!(
            refused(json!({"messages": [{"role": "user", "content": "x"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]})),
            "messages[1]"
        );
        let prefill = parse(json!({"messages": [{"role": "user", "content": "x"},
                                                {"role": "assistant", "content": "The answer is"}]}))
        .unwrap();
        assert!(prefill.continue_final);
        assert!(
            !parse(json!({"messages": [{"role": "user", "content": "x"}]}))
                .unwrap()
                .continue_final
        );
        assert_eq!(
            with(
                json!({"tools": [{"name": "f", "input_schema": {"type": "object"}, "defer_loading": true}]})
            ),
            "tools[0].defer_loading"
        );
        assert_eq!(
            with(json!({"thinking": {"type": "sometimes"}})),
            "thinking.type"
        );
        assert!(parse_messages(b"[1]").is_err());
        assert!(parse_messages(b"{").is_err());
    }

    #[test]
    fn consecutive_turns_of_one_role_are_one_turn() {
        let request = parse(json!({"messages": [
            {"role": "user", "content": "a"},
            {"role": "user", "content": [{"type": "text", "text": "b"}]},
            {"role": "assistant", "content": "c"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]},
            {"role": "user", "content": "d"},
        ]}))
        .unwrap();
        let chat = request.chat_messages();
        let turns: Vec<(&str, &str)> = chat
            .iter()
            .map(|m| (m.role.as_str(), m.content.as_str()))
            .collect();
        assert_eq!(
            turns,
            [
                ("user", "a\nb"),
                ("assistant", "c"),
                ("tool", "r"),
                ("user", "d")
            ]
        );
        assert_eq!(chat[1].tool_calls.as_ref().map(Vec::len), Some(1));
    }

    #[test]
    fn an_errored_tool_result_says_so() {
        let request = parse(json!({"messages": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "no such city", "is_error": true}]},
        ]}))
        .unwrap();
        let chat = request.chat_messages();
        assert_eq!(chat[0].role, "tool");
        assert_eq!(chat[0].content, "Error: no such city");
        // An id no earlier call had: no name, still answered.
        assert_eq!(chat[0].name, None);
    }
}
