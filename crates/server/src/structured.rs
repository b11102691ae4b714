//! Structured outputs and tool calling: the request fields that constrain a reply
//! (`response_format`, vLLM's `guided_*` and `structured_outputs`, `tools` + `tool_choice`), the
//! Lark grammar they become (llguidance's dialect, compiled by the text model), and the parser
//! that turns a reply's `<tool_call>` blocks into OpenAI `tool_calls`.
//!
//! Tool calls use the Hermes format Qwen3 and Qwen3-Next are trained on:
//! `<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>`. With `tool_choice` `required`
//! or a named function the grammar enforces that format (and the function's parameter schema);
//! with `auto` the model decides and the parser reads what it wrote.

use crate::error::ApiError;
use serde_json::{json, Map, Value};

/// Most tools a request may declare (each becomes part of the prompt and of the grammar).
pub const MAX_TOOLS: usize = 128;
/// Longest function name, as OpenAI allows.
pub const MAX_TOOL_NAME: usize = 64;
/// Longest regex, Lark grammar or serialized JSON schema a request may send: compiling is
/// linear in the grammar's size, and llguidance bounds its own work per token.
pub const MAX_GRAMMAR_BYTES: usize = 256 * 1024;
/// Most `guided_choice` alternatives.
pub const MAX_CHOICES: usize = 1024;

/// What a reply's text must be.
#[derive(Clone, Debug, PartialEq)]
pub enum OutputFormat {
    /// Any JSON object (`response_format: {"type": "json_object"}`).
    JsonObject,
    /// JSON valid under a schema.
    JsonSchema(Value),
    /// Text matching a regular expression (whole reply).
    Regex(String),
    /// Exactly one of these strings.
    Choice(Vec<String>),
    /// A grammar in llguidance's Lark dialect, covering the whole reply.
    Lark(String),
}

/// A constraint and the request field it came from (errors name it).
#[derive(Clone, Debug, PartialEq)]
pub struct OutputConstraint {
    pub param: &'static str,
    pub format: OutputFormat,
}

/// A function the model may call.
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    pub name: String,
    /// The JSON schema of its arguments (`{"type": "object"}` when the client gave none).
    pub parameters: Value,
    /// The tool as the client sent it, for the chat template.
    pub definition: Value,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides (the default with tools).
    Auto,
    /// No tool calls are read from the reply.
    None,
    /// At least one call, enforced by the grammar (exactly one without parallel calls).
    Required,
    /// Exactly one call to this function, enforced by the grammar.
    Function(String),
}

/// The tools of a chat request and how they may be used.
#[derive(Clone, Debug, PartialEq)]
pub struct Tools {
    pub tools: Vec<Tool>,
    pub choice: ToolChoice,
    /// Whether a reply may make more than one call (OpenAI's `parallel_tool_calls`, Anthropic's
    /// `disable_parallel_tool_use` negated; default true). Without, a required call is exactly
    /// one and a free reply ends after its first call.
    pub parallel: bool,
}

impl Tools {
    /// Whether the choice is enforced by a grammar (`required` or a named function).
    pub fn choice_is_enforced(&self) -> bool {
        matches!(self.choice, ToolChoice::Required | ToolChoice::Function(_))
    }

    /// Whether the reply's `<tool_call>` blocks become `tool_calls`.
    pub fn parses_calls(&self) -> bool {
        !self.tools.is_empty() && self.choice != ToolChoice::None
    }
}

/// Reads one constraint field's value (the field's name for errors).
type ReadFormat = fn(&'static str, &Value) -> Result<OutputFormat, ApiError>;

/// Reads the fields that constrain the reply's text; at most one may be set.
pub fn output_constraint(
    fields: &Map<String, Value>,
) -> Result<Option<OutputConstraint>, ApiError> {
    let mut found: Vec<OutputConstraint> = Vec::new();
    if let Some(format) = fields.get("response_format").filter(|v| !v.is_null()) {
        if let Some(format) = response_format(format)? {
            found.push(OutputConstraint {
                param: "response_format",
                format,
            });
        }
    }
    let guided: [(&'static str, ReadFormat); 4] = [
        ("guided_json", json_schema_value),
        ("guided_regex", regex_value),
        ("guided_choice", choice_value),
        ("guided_grammar", lark_value),
    ];
    for (param, read) in guided {
        if let Some(value) = fields.get(param).filter(|v| !v.is_null()) {
            found.push(OutputConstraint {
                param,
                format: read(param, value)?,
            });
        }
    }
    if let Some(value) = fields.get("structured_outputs").filter(|v| !v.is_null()) {
        let options = value.as_object().ok_or_else(|| {
            ApiError::invalid(
                "structured_outputs",
                "`structured_outputs` must be an object",
            )
        })?;
        let kinds: [(&str, ReadFormat); 4] = [
            ("json", json_schema_value),
            ("regex", regex_value),
            ("choice", choice_value),
            ("grammar", lark_value),
        ];
        for (key, read) in kinds {
            if let Some(value) = options.get(key).filter(|v| !v.is_null()) {
                found.push(OutputConstraint {
                    param: "structured_outputs",
                    format: read("structured_outputs", value)?,
                });
            }
        }
        if options.get("json_object") == Some(&Value::Bool(true)) {
            found.push(OutputConstraint {
                param: "structured_outputs",
                format: OutputFormat::JsonObject,
            });
        }
    }
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(ApiError::invalid(
            found[1].param,
            format!(
                "only one of response_format, guided_json, guided_regex, guided_choice, \
                 guided_grammar and structured_outputs may be set (`{}` is set too)",
                found[0].param
            ),
        )),
    }
}

fn response_format(format: &Value) -> Result<Option<OutputFormat>, ApiError> {
    const PARAM: &str = "response_format";
    let kind = format.get("type").and_then(Value::as_str);
    match kind {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(OutputFormat::JsonObject)),
        Some("json_schema") => {
            let spec = format
                .get("json_schema")
                .and_then(Value::as_object)
                .ok_or_else(|| {
                    ApiError::invalid(
                        PARAM,
                        "`json_schema` must be an object with a `schema` (and a `name`)",
                    )
                })?;
            let schema = spec
                .get("schema")
                .ok_or_else(|| ApiError::invalid(PARAM, "`json_schema.schema` is required"))?;
            json_schema_value("response_format", schema).map(Some)
        }
        _ => Err(ApiError::invalid(
            PARAM,
            "`type` must be `text`, `json_object` or `json_schema`",
        )),
    }
}

pub(crate) fn json_schema_value(
    param: &'static str,
    value: &Value,
) -> Result<OutputFormat, ApiError> {
    // vLLM accepts the schema as an object or as its JSON text.
    let schema = match value {
        Value::String(text) => serde_json::from_str(text).map_err(|e| {
            ApiError::invalid(param, format!("the JSON schema is not valid JSON: {e}"))
        })?,
        other => other.clone(),
    };
    match &schema {
        Value::Object(_) | Value::Bool(true) => {}
        _ => return Err(ApiError::invalid(param, "a JSON schema must be an object")),
    }
    if schema.to_string().len() > MAX_GRAMMAR_BYTES {
        return Err(ApiError::invalid(
            param,
            format!("the schema is over {MAX_GRAMMAR_BYTES} bytes"),
        ));
    }
    Ok(OutputFormat::JsonSchema(schema))
}

fn bounded_text(param: &'static str, value: &Value, what: &str) -> Result<String, ApiError> {
    match value.as_str() {
        Some(text) if !text.is_empty() && text.len() <= MAX_GRAMMAR_BYTES => Ok(text.to_string()),
        Some(text) if !text.is_empty() => Err(ApiError::invalid(
            param,
            format!("the {what} is over {MAX_GRAMMAR_BYTES} bytes"),
        )),
        _ => Err(ApiError::invalid(
            param,
            format!("the {what} must be a non-empty string"),
        )),
    }
}

fn regex_value(param: &'static str, value: &Value) -> Result<OutputFormat, ApiError> {
    bounded_text(param, value, "regex").map(OutputFormat::Regex)
}

fn lark_value(param: &'static str, value: &Value) -> Result<OutputFormat, ApiError> {
    bounded_text(param, value, "grammar").map(OutputFormat::Lark)
}

fn choice_value(param: &'static str, value: &Value) -> Result<OutputFormat, ApiError> {
    let choices: Option<Vec<String>> = value.as_array().and_then(|items| {
        items
            .iter()
            .map(|i| i.as_str().filter(|s| !s.is_empty()).map(str::to_string))
            .collect()
    });
    match choices {
        Some(choices) if !choices.is_empty() && choices.len() <= MAX_CHOICES => {
            Ok(OutputFormat::Choice(choices))
        }
        _ => Err(ApiError::invalid(
            param,
            format!("choices must be an array of 1 to {MAX_CHOICES} non-empty strings"),
        )),
    }
}

/// Reads `tools` and `tool_choice` (OpenAI's shapes); the legacy `functions` and
/// `function_call` are refused by the caller.
pub fn tools(fields: &Map<String, Value>) -> Result<Tools, ApiError> {
    let tools = match fields.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) if items.len() <= MAX_TOOLS => items
            .iter()
            .enumerate()
            .map(|(i, item)| tool(i, item))
            .collect::<Result<Vec<_>, _>>()?,
        Some(Value::Array(_)) => {
            return Err(ApiError::invalid(
                "tools",
                format!("at most {MAX_TOOLS} tools"),
            ))
        }
        Some(_) => return Err(ApiError::invalid("tools", "`tools` must be an array")),
    };
    for (i, t) in tools.iter().enumerate() {
        if tools[..i].iter().any(|earlier| earlier.name == t.name) {
            return Err(ApiError::invalid(
                &format!("tools[{i}].function.name"),
                format!("two tools are named {:?}", t.name),
            ));
        }
    }
    let choice = match fields.get("tool_choice") {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            _ => {
                return Err(ApiError::invalid(
                    "tool_choice",
                    "`tool_choice` must be `auto`, `none`, `required` or {\"type\": \"function\", \"function\": {\"name\": ...}}",
                ))
            }
        },
        Some(Value::Object(o)) => {
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    ApiError::invalid("tool_choice", "a named choice needs `function.name`")
                })?;
            if !tools.iter().any(|t| t.name == name) {
                return Err(ApiError::invalid(
                    "tool_choice",
                    format!("no tool is named {name:?}"),
                ));
            }
            ToolChoice::Function(name.to_string())
        }
        Some(_) => {
            return Err(ApiError::invalid(
                "tool_choice",
                "`tool_choice` must be a string or an object",
            ))
        }
    };
    if tools.is_empty() && matches!(choice, ToolChoice::Required | ToolChoice::Function(_)) {
        return Err(ApiError::invalid(
            "tool_choice",
            "`tool_choice` needs `tools`",
        ));
    }
    let parallel = match fields.get("parallel_tool_calls") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(parallel)) => *parallel,
        Some(_) => {
            return Err(ApiError::invalid(
                "parallel_tool_calls",
                "`parallel_tool_calls` must be a boolean",
            ))
        }
    };
    Ok(Tools {
        tools,
        choice,
        parallel,
    })
}

fn tool(i: usize, item: &Value) -> Result<Tool, ApiError> {
    let param = format!("tools[{i}]");
    if item.get("type").and_then(Value::as_str) != Some("function") {
        return Err(ApiError::invalid(
            &format!("{param}.type"),
            "only `function` tools are supported",
        ));
    }
    let function = item
        .get("function")
        .and_then(Value::as_object)
        .ok_or_else(|| ApiError::invalid(&format!("{param}.function"), "must be an object"))?;
    let name = function.get("name").and_then(Value::as_str).unwrap_or("");
    let valid_name = !name.is_empty()
        && name.len() <= MAX_TOOL_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
    if !valid_name {
        return Err(ApiError::invalid(
            &format!("{param}.function.name"),
            format!("a tool needs a name of 1 to {MAX_TOOL_NAME} letters, digits, `_`, `-` or `.`"),
        ));
    }
    let parameters = match function.get("parameters") {
        None | Some(Value::Null) => json!({"type": "object"}),
        Some(schema @ Value::Object(_)) => schema.clone(),
        Some(_) => {
            return Err(ApiError::invalid(
                &format!("{param}.function.parameters"),
                "must be a JSON schema object",
            ))
        }
    };
    if parameters.to_string().len() > MAX_GRAMMAR_BYTES {
        return Err(ApiError::invalid(
            &format!("{param}.function.parameters"),
            format!("the schema is over {MAX_GRAMMAR_BYTES} bytes"),
        ));
    }
    Ok(Tool {
        name: name.to_string(),
        parameters,
        definition: item.clone(),
    })
}

/// How the grammar writes a tag the model has as one token (`<[id]>`) or as text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tag<'a> {
    Token(u32),
    Text(&'a str),
}

impl Tag<'_> {
    fn lark(&self) -> String {
        match self {
            Tag::Token(id) => format!("<[{id}]>"),
            Tag::Text(text) => lark_string(text),
        }
    }
}

/// Where the reply starts with respect to the model's thinking: the grammar lets the model
/// think first (free text up to `</think>`) and constrains what follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Thinking {
    /// The model has no thinking tags.
    Never,
    /// The reply may open a `<think>` section first.
    MayOpen { open: u32, close: u32 },
    /// The prompt opened `<think>`: the reply thinks until `</think>`.
    Inside { close: u32 },
}

/// JSON written as `{"a": 1, "b": [2, 3]}`, the separators Qwen's tool calls use, and no other
/// whitespace: a model cannot loop on blank lines inside a constrained value.
fn compact_json_options(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if let Value::Object(map) = &mut schema {
        map.entry("x-guidance").or_insert_with(
            || json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}),
        );
    }
    schema
}

/// A Lark string literal (JSON's escaping, which the dialect reads).
fn lark_string(text: &str) -> String {
    Value::String(text.to_string()).to_string()
}

/// A regex as a Lark `/…/` terminal: slashes escaped, newlines written as `\n`.
fn lark_regex(regex: &str) -> String {
    let mut out = String::with_capacity(regex.len() + 2);
    out.push('/');
    let mut escaped = false;
    for c in regex.chars() {
        match c {
            '/' if !escaped => out.push_str("\\/"),
            '\n' => out.push_str("\\n"),
            _ => out.push(c),
        }
        escaped = c == '\\' && !escaped;
    }
    out.push('/');
    out
}

/// The grammar's `body` rule for a format.
fn body_rules(format: &OutputFormat) -> String {
    match format {
        OutputFormat::JsonObject => format!(
            "body: %json {}\n",
            compact_json_options(&json!({"type": "object"}))
        ),
        OutputFormat::JsonSchema(schema) => {
            format!("body: %json {}\n", compact_json_options(schema))
        }
        OutputFormat::Regex(regex) => format!("body: {}\n", lark_regex(regex)),
        OutputFormat::Choice(choices) => {
            let alternatives: Vec<String> = choices.iter().map(|c| lark_string(c)).collect();
            format!("body: {}\n", alternatives.join(" | "))
        }
        OutputFormat::Lark(_) => unreachable!("a Lark grammar is used as sent"),
    }
}

/// The grammar of a reply that must be `format`, after the model's thinking.
pub fn format_grammar(format: &OutputFormat, thinking: Thinking) -> String {
    match format {
        // The client's grammar covers the whole reply, thinking included.
        OutputFormat::Lark(lark) => lark.clone(),
        _ => with_thinking(body_rules(format), thinking),
    }
}

/// The grammar of a reply that must call tools: one call to the named function, or one or more
/// calls to any of them (`required`; exactly one where parallel calls are off). `None` when the
/// choice leaves the reply free.
pub fn tool_grammar(
    tools: &Tools,
    open: Tag<'_>,
    close: Tag<'_>,
    thinking: Thinking,
) -> Option<String> {
    let calls: Vec<&Tool> = match &tools.choice {
        ToolChoice::Auto | ToolChoice::None => return None,
        ToolChoice::Required => tools.tools.iter().collect(),
        ToolChoice::Function(name) => tools.tools.iter().filter(|t| &t.name == name).collect(),
    };
    let call_schema = |t: &Tool| {
        json!({
            "type": "object",
            "properties": {"name": {"const": t.name}, "arguments": t.parameters},
            "required": ["name", "arguments"],
            "additionalProperties": false,
        })
    };
    let schema = match calls.as_slice() {
        [one] => call_schema(one),
        many => json!({"anyOf": many.iter().map(|t| call_schema(t)).collect::<Vec<_>>()}),
    };
    let repeat = if tools.choice == ToolChoice::Required && tools.parallel {
        "+"
    } else {
        ""
    };
    let body = format!(
        "body: call{repeat}\ncall: {} \"\\n\" call_json \"\\n\" {} WS?\ncall_json: %json {}\n",
        open.lark(),
        close.lark(),
        compact_json_options(&schema)
    );
    Some(with_thinking(body, thinking))
}

fn with_thinking(body: String, thinking: Thinking) -> String {
    // Whitespace between the parts is bounded: a model that likes blank lines must still get to
    // the part that matters.
    let common = "WS: /[ \\t\\r\\n]{1,8}/\nTHOUGHT: /(.|\\n)+/\n";
    match thinking {
        Thinking::Never => format!("start: body\n{body}{common}"),
        Thinking::MayOpen { open, close } => format!(
            "start: thought? body\nthought: <[{open}]> THOUGHT? <[{close}]> WS?\n{body}{common}"
        ),
        Thinking::Inside { close } => {
            format!("start: THOUGHT? <[{close}]> WS? body\n{body}{common}")
        }
    }
}

/// One parsed tool call.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    pub name: String,
    /// The arguments as a JSON text (OpenAI's `function.arguments`).
    pub arguments: String,
}

/// What a piece of reply text turned into.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Parsed {
    pub text: String,
    pub calls: Vec<ToolCall>,
}

const CALL_OPEN: &str = "<tool_call>";
const CALL_CLOSE: &str = "</tool_call>";

/// Reads `<tool_call>` blocks out of a reply's text as it arrives. Text that may be the start of
/// a block is held back until the next piece decides; a block whose JSON is not a call (no
/// `name`, or not JSON) stays text, as the model wrote it.
#[derive(Debug, Default)]
pub struct ToolCallParser {
    held: String,
    in_call: bool,
    /// A call was read and no text has come since: the whitespace the model puts between and
    /// after calls is dropped.
    after_call: bool,
}

impl ToolCallParser {
    pub fn push(&mut self, piece: &str) -> Parsed {
        self.held.push_str(piece);
        let mut out = Parsed::default();
        loop {
            if self.in_call {
                let Some(end) = self.held.find(CALL_CLOSE) else {
                    return out;
                };
                let block = self.held[..end].to_string();
                self.held.drain(..end + CALL_CLOSE.len());
                self.in_call = false;
                match call_of(&block) {
                    Some(call) => {
                        out.calls.push(call);
                        self.after_call = true;
                    }
                    None => out
                        .text
                        .push_str(&format!("{CALL_OPEN}{block}{CALL_CLOSE}")),
                }
                continue;
            }
            if let Some(start) = self.held.find(CALL_OPEN) {
                let before: String = self.held.drain(..start).collect();
                self.emit_text(&before, &mut out);
                self.held.drain(..CALL_OPEN.len());
                self.in_call = true;
                continue;
            }
            // Keep a tail that could still grow into `<tool_call>`.
            let keep = (1..CALL_OPEN.len())
                .rev()
                .find(|&n| self.held.ends_with(&CALL_OPEN[..n]))
                .unwrap_or(0);
            let cut = self.held.len() - keep;
            let text: String = self.held.drain(..cut).collect();
            self.emit_text(&text, &mut out);
            return out;
        }
    }

    /// The end of the reply: whatever is held back is text (an unclosed block too).
    pub fn finish(&mut self) -> Parsed {
        let mut out = Parsed::default();
        let held = std::mem::take(&mut self.held);
        if self.in_call {
            out.text = format!("{CALL_OPEN}{held}");
        } else {
            self.emit_text(&held, &mut out);
        }
        self.in_call = false;
        out
    }

    fn emit_text(&mut self, text: &str, out: &mut Parsed) {
        // Between and after calls the model writes newlines: not content. Whitespace inside
        // text after a call is the text's own, however the pieces cut it.
        let text = match self.after_call {
            true => text.trim_start(),
            false => text,
        };
        if !text.is_empty() {
            self.after_call = false;
            out.text.push_str(text);
        }
    }
}

fn call_of(block: &str) -> Option<ToolCall> {
    let value: Value = serde_json::from_str(block.trim()).ok()?;
    let name = value.get("name")?.as_str()?.to_string();
    let arguments = match value.get("arguments").or_else(|| value.get("parameters")) {
        None | Some(Value::Null) => "{}".to_string(),
        Some(Value::String(text)) => text.clone(),
        Some(args) => args.to_string(),
    };
    Some(ToolCall { name, arguments })
}

/// A message's `tool_calls` as chat templates want them: `arguments` a mapping (transformers'
/// convention), parsed from the JSON text OpenAI clients send.
pub fn template_tool_calls(param: &str, value: &Value) -> Result<Vec<Value>, ApiError> {
    let items = value
        .as_array()
        .ok_or_else(|| ApiError::invalid(param, "`tool_calls` must be an array"))?;
    items
        .iter()
        .enumerate()
        .map(|(i, call)| {
            let function = call
                .get("function")
                .and_then(Value::as_object)
                .ok_or_else(|| {
                    ApiError::invalid(&format!("{param}[{i}].function"), "must be an object")
                })?;
            let name = function
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    ApiError::invalid(&format!("{param}[{i}].function.name"), "must be a string")
                })?;
            let arguments = match function.get("arguments") {
                Some(Value::String(text)) => {
                    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.clone()))
                }
                Some(other) => other.clone(),
                None => json!({}),
            };
            let mut out = json!({
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            });
            if let Some(id) = call.get("id").and_then(Value::as_str) {
                out["id"] = json!(id);
            }
            Ok(out)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(body: Value) -> Map<String, Value> {
        body.as_object().unwrap().clone()
    }

    #[test]
    fn each_constraint_field_is_read_and_two_at_once_are_refused() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let cases = [
            (json!({"response_format": {"type": "text"}}), None),
            (
                json!({"response_format": {"type": "json_object"}}),
                Some(OutputFormat::JsonObject),
            ),
            (
                json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}),
                Some(OutputFormat::JsonSchema(schema.clone())),
            ),
            (
                json!({"guided_json": schema.to_string()}),
                Some(OutputFormat::JsonSchema(schema.clone())),
            ),
            (
                json!({"guided_regex": "[a-z]+"}),
                Some(OutputFormat::Regex("[a-z]+".into())),
            ),
            (
                json!({"guided_choice": ["yes", "no"]}),
                Some(OutputFormat::Choice(vec!["yes".into(), "no".into()])),
            ),
            (
                json!({"structured_outputs": {"grammar": "start: \"a\""}}),
                Some(OutputFormat::Lark("start: \"a\"".into())),
            ),
        ];
        for (body, want) in cases {
            let got = output_constraint(&fields(body.clone())).unwrap();
            assert_eq!(got.map(|c| c.format), want, "{body}");
        }
        let both = json!({"guided_regex": "a", "response_format": {"type": "json_object"}});
        assert_eq!(
            output_constraint(&fields(both))
                .unwrap_err()
                .param
                .as_deref(),
            Some("guided_regex")
        );
        for (body, param) in [
            (
                json!({"response_format": {"type": "yaml"}}),
                "response_format",
            ),
            (
                json!({"response_format": {"type": "json_schema"}}),
                "response_format",
            ),
            (json!({"guided_json": "{not json"}), "guided_json"),
            (json!({"guided_json": 3}), "guided_json"),
            (json!({"guided_choice": []}), "guided_choice"),
            (json!({"guided_regex": ""}), "guided_regex"),
        ] {
            let error = output_constraint(&fields(body.clone())).unwrap_err();
            assert_eq!(error.param.as_deref(), Some(param), "{body}");
        }
    }

    #[test]
    fn tools_and_tool_choice_are_checked_naming_the_field() {
        let weather = json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}});
        let ok = tools(&fields(json!({"tools": [weather], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}))).unwrap();
        assert_eq!(ok.choice, ToolChoice::Function("get_weather".into()));
        assert_eq!(
            ok.tools[0].parameters["properties"]["city"]["type"],
            "string"
        );
        assert!(ok.parallel);
        let single = tools(&fields(
            json!({"tools": [weather], "parallel_tool_calls": false}),
        ));
        assert!(!single.unwrap().parallel);
        for (body, param) in [
            (
                json!({"tools": [{"type": "function", "function": {}}]}),
                "tools[0].function.name",
            ),
            (
                json!({"tools": [{"type": "function", "function": {"name": "a b"}}]}),
                "tools[0].function.name",
            ),
            (json!({"tools": [{"type": "code"}]}), "tools[0].type"),
            (
                json!({"tools": [weather.clone(), weather.clone()]}),
                "tools[1].function.name",
            ),
            (
                json!({"tools": [weather.clone()], "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
                "tool_choice",
            ),
            (json!({"tool_choice": "required"}), "tool_choice"),
            (
                json!({"tools": [weather.clone()], "tool_choice": "sometimes"}),
                "tool_choice",
            ),
            (
                json!({"tools": [weather.clone()], "parallel_tool_calls": "no"}),
                "parallel_tool_calls",
            ),
        ] {
            let error = tools(&fields(body.clone())).unwrap_err();
            assert_eq!(error.param.as_deref(), Some(param), "{body}");
        }
    }

    #[test]
    fn whitespace_after_a_call_is_dropped_but_the_next_texts_own_is_kept() {
        let mut parser = ToolCallParser::default();
        let pieces = [
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
            "\n",
            "Then",
            " ",
            "this.",
            "\n",
        ];
        let mut text = String::new();
        for piece in pieces {
            text.push_str(&parser.push(piece).text);
        }
        text.push_str(&parser.finish().text);
        assert_eq!(text, "Then this.\n");
    }

    #[test]
    fn tool_calls_are_read_from_text_in_any_pieces() {
        let reply = "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
        let whole = {
            let mut p = ToolCallParser::default();
            let mut out = p.push(reply);
            let tail = p.finish();
            out.text.push_str(&tail.text);
            out
        };
        assert_eq!(whole.text, "Let me look.\n");
        assert_eq!(whole.calls.len(), 2);
        assert_eq!(whole.calls[0].name, "get_weather");
        assert_eq!(whole.calls[0].arguments, r#"{"city":"Paris"}"#);
        for size in 1..8 {
            let mut p = ToolCallParser::default();
            let mut got = Parsed::default();
            let chars: Vec<char> = reply.chars().collect();
            for piece in chars.chunks(size) {
                let out = p.push(&piece.iter().collect::<String>());
                got.text.push_str(&out.text);
                got.calls.extend(out.calls);
            }
            got.text.push_str(&p.finish().text);
            assert_eq!(got, whole, "pieces of {size}");
        }
        // Not a call: stays text, as written; an unclosed block too.
        let mut p = ToolCallParser::default();
        let out = p.push("a <tool_call>oops</tool_call> b <tool");
        assert_eq!(
            (out.text.as_str(), out.calls.len()),
            ("a <tool_call>oops</tool_call> b ", 0)
        );
        assert_eq!(p.finish().text, "<tool");
        let mut p = ToolCallParser::default();
        assert_eq!(p.push("<tool_call>{\"name\"").text, "");
        assert_eq!(p.finish().text, "<tool_call>{\"name\"");
    }

    #[test]
    fn grammars_put_the_body_after_the_thinking() {
        let g = format_grammar(
            &OutputFormat::Regex("a/b\n".into()),
            Thinking::Inside { close: 9 },
        );
        assert!(
            g.starts_with("start: THOUGHT? <[9]> WS? body\nbody: /a\\/b\\n/\n"),
            "{g}"
        );
        let g = format_grammar(&OutputFormat::Choice(vec!["x\"y".into()]), Thinking::Never);
        assert!(g.starts_with("start: body\nbody: \"x\\\"y\"\n"), "{g}");
        let t = Tools {
            tools: vec![Tool {
                name: "f".into(),
                parameters: json!({"type": "object"}),
                definition: json!({}),
            }],
            choice: ToolChoice::Required,
            parallel: true,
        };
        let g = tool_grammar(
            &t,
            Tag::Token(5),
            Tag::Text("</tool_call>"),
            Thinking::MayOpen { open: 1, close: 2 },
        )
        .unwrap();
        assert!(
            g.contains("body: call+\ncall: <[5]> \"\\n\" call_json \"\\n\" \"</tool_call>\" WS?"),
            "{g}"
        );
        assert!(g.contains("thought: <[1]> THOUGHT? <[2]> WS?"), "{g}");
        let one = Tools {
            parallel: false,
            ..t.clone()
        };
        let g = tool_grammar(&one, Tag::Token(5), Tag::Token(6), Thinking::Never).unwrap();
        assert!(g.contains("body: call\ncall: <[5]>"), "{g}");
        let auto = Tools {
            choice: ToolChoice::Auto,
            ..t
        };
        assert_eq!(
            tool_grammar(&auto, Tag::Token(5), Tag::Token(6), Thinking::Never),
            None
        );
    }
}
