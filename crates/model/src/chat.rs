//! The chat template of `tokenizer_config.json`, rendered with minijinja under the conventions
//! of transformers' `apply_chat_template`: variables `messages`, `add_generation_prompt`,
//! `bos_token`, `eos_token`, the function `raise_exception`, the filter `tojson`, and Python string
//! methods (`.strip()`, `.startswith()`, `.split()`, ...) that HF templates call.

use crate::LoadError;
use serde::Serialize;
use std::path::Path;

/// One chat message as templates see it.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

/// A compiled chat template and the special tokens it may print.
pub struct ChatTemplate {
    env: minijinja::Environment<'static>,
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
}

/// Name of the template inside the environment.
const TEMPLATE_NAME: &str = "chat";

fn token_text(value: Option<&serde_json::Value>) -> Option<String> {
    match value? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Object(o) => o.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

impl ChatTemplate {
    /// Reads `dir/tokenizer_config.json` (or `dir/chat_template.jinja` when present, as newer
    /// transformers save it). `Ok(None)` when the model has no chat template.
    pub fn from_dir(dir: &Path) -> Result<Option<ChatTemplate>, LoadError> {
        let config_path = dir.join("tokenizer_config.json");
        let config: serde_json::Value = if config_path.exists() {
            let text = std::fs::read_to_string(&config_path)
                .map_err(|e| LoadError::io(&config_path, e))?;
            serde_json::from_str(&text).map_err(|e| LoadError::Tokenizer {
                file: config_path.clone(),
                reason: format!("not valid JSON: {e}"),
            })?
        } else {
            serde_json::Value::Null
        };
        let jinja_path = dir.join("chat_template.jinja");
        let source = if jinja_path.exists() {
            Some(std::fs::read_to_string(&jinja_path).map_err(|e| LoadError::io(&jinja_path, e))?)
        } else {
            match config.get("chat_template") {
                Some(serde_json::Value::String(s)) => Some(s.clone()),
                Some(serde_json::Value::Array(items)) => items
                    .iter()
                    .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                    .or(items.first())
                    .and_then(|t| t.get("template"))
                    .and_then(|t| t.as_str())
                    .map(str::to_string),
                _ => None,
            }
        };
        let Some(source) = source else {
            return Ok(None);
        };
        ChatTemplate::new(
            &source,
            token_text(config.get("bos_token")),
            token_text(config.get("eos_token")),
        )
        .map(Some)
        .map_err(|reason| LoadError::Tokenizer {
            file: config_path,
            reason,
        })
    }

    /// Compiles `source`; the error says where the template does not parse.
    pub fn new(
        source: &str,
        bos_token: Option<String>,
        eos_token: Option<String>,
    ) -> Result<ChatTemplate, String> {
        let mut env = minijinja::Environment::new();
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        // HF templates rely on Jinja's whitespace control as transformers configures it.
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()
                .expect("the default delimiters are valid"),
        );
        env.add_function(
            "raise_exception",
            |msg: String| -> Result<String, minijinja::Error> {
                Err(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    msg,
                ))
            },
        );
        env.add_template_owned(TEMPLATE_NAME, source.to_string())
            .map_err(|e| format!("chat template does not compile: {e}"))?;
        Ok(ChatTemplate {
            env,
            bos_token,
            eos_token,
        })
    }

    /// The prompt text for `messages`, ending with the assistant's header when
    /// `add_generation_prompt`.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> anyhow::Result<String> {
        let template = self.env.get_template(TEMPLATE_NAME)?;
        let text = template.render(minijinja::context! {
            messages => minijinja::Value::from(minijinja::value::Serde(messages)),
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.clone().unwrap_or_default(),
            eos_token => self.eos_token.clone().unwrap_or_default(),
        })?;
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of Qwen's ChatML template, with the Python string methods it calls.
    const CHATML: &str = "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content.strip() + '<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

    fn msg(role: &str, content: &str) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }

    #[test]
    fn chatml_renders_like_transformers() {
        let t = ChatTemplate::new(CHATML, None, Some("<|im_end|>".into())).unwrap();
        let text = t
            .render(&[msg("system", "Be brief."), msg("user", " Hi ")], true)
            .unwrap();
        assert_eq!(
            text,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn raise_exception_and_tojson_work() {
        let t = ChatTemplate::new(
            "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}{{ messages[0] | tojson }}{{ bos_token }}",
            Some("<s>".into()),
            None,
        )
        .unwrap();
        let err = t
            .render(&[msg("system", "x")], false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("first must be user"), "{err}");
        let ok = t.render(&[msg("user", "x")], false).unwrap();
        assert!(
            ok.contains("\"role\": \"user\"") && ok.ends_with("<s>"),
            "{ok}"
        );
    }

    /// The constructs of Qwen3's template (namespace, reversed slices, `is string`, Python string
    /// methods, loop variables, `tojson`, `map`); the expected text is what Python's jinja2 renders
    /// under transformers' settings (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks).
    const QWEN3_LIKE: &str = r#"{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{{- bos_token }}
{%- for message in messages %}
    {%- set content = message.content %}
    {%- if message.role == "assistant" and '</think>' in content %}
        {%- set reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
        {%- set content = content.split('</think>')[-1].lstrip('\n') %}
        {%- if loop.index0 > ns.last_query_index %}
            {{- '<|im_start|>assistant\n<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' + content }}
        {%- else %}
            {{- '<|im_start|>assistant\n' + content }}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>' + message.role + '\n' + content.strip() + '<|im_end|>\n' }}
    {%- endif %}
    {%- if loop.last %}{{ {"n": loop.length, "roles": messages|map(attribute="role")|list} | tojson }}{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
{{- eos_token }}
"#;

    #[test]
    fn qwen3_style_template_renders_exactly_as_jinja2_does() {
        let t = ChatTemplate::new(QWEN3_LIKE, Some("<s>".into()), Some("</s>".into())).unwrap();
        let messages = [
            msg("system", " Be brief. "),
            msg("user", "Hi"),
            msg("assistant", "<think>\nhmm\n</think>\n\nHello!"),
            msg("user", "<tool_response>x</tool_response>"),
            msg("assistant", "<think>\nagain\n</think>\n\nDone."),
        ];
        let want = "<s><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nhmm\n</think>\n\nHello!<|im_end|>\n<|im_start|>user\n<tool_response>x</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\nagain\n</think>\n\nDone.<|im_end|>\n{\"n\": 5, \"roles\": [\"system\", \"user\", \"assistant\", \"user\", \"assistant\"]}<|im_start|>assistant\n</s>";
        assert_eq!(t.render(&messages, true).unwrap(), want);
    }
}
