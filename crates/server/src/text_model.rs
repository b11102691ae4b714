//! What the HTTP layer needs of a model's text side: tokenizer, chat template, end tokens.

use crate::request::ChatMessage;
use crate::text::Detokenizer;

pub trait TextModel: Send + Sync + 'static {
    /// The name `/v1/models` lists and responses carry.
    fn model_id(&self) -> &str;
    /// More names requests may ask for, besides [`TextModel::model_id`].
    fn aliases(&self) -> &[String] {
        &[]
    }
    /// Whether `name` is one this model answers to.
    fn serves(&self, name: &str) -> bool {
        name == self.model_id() || self.aliases().iter().any(|alias| alias == name)
    }
    /// Tokens of a prompt as the model's tokenizer splits it (special tokens in the text honoured:
    /// a raw completion prompt is the caller's to shape).
    fn encode(&self, text: &str) -> Result<Vec<u32>, String>;
    /// Text of tokens, special tokens left out.
    fn decode(&self, ids: &[u32]) -> String;
    /// The text of one token, for `logprobs` (special tokens included).
    fn token_text(&self, id: u32) -> String;
    /// The chat template applied to `messages`, with the assistant's turn opened, as tokens:
    /// control tokens only where the template writes them (a special token's text inside a
    /// message is tokenised as characters, so no message can end its turn or open another).
    /// `template_args` are more variables for the template (a request's `chat_template_kwargs`).
    fn chat_prompt_ids(
        &self,
        messages: &[ChatMessage],
        template_args: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Vec<u32>, String>;
    /// The prompt ids of a chat whose last message the reply continues (`continue_final_message`,
    /// Anthropic's prefill): as [`TextModel::chat_prompt_ids`] renders it but without the
    /// assistant's header, and cut right after the last message's text.
    fn continued_chat_prompt_ids(
        &self,
        _messages: &[ChatMessage],
        _template_args: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Vec<u32>, String> {
        Err("this model cannot continue a message".into())
    }
    /// Tokens that end a reply (end of text, end of turn).
    fn stop_token_ids(&self) -> Vec<u32>;
    /// What the model recommends for the sampling a request leaves unsaid, as a request that
    /// says only that (nothing by default).
    fn sampling_defaults(&self) -> crate::request::SamplingRequest {
        crate::request::SamplingRequest::default()
    }
    /// The most bytes of text one token stands for (`None`: unknown). A text of `n` bytes is
    /// then at least `n / max` tokens, so a prompt that cannot fit any session is refused before
    /// it is tokenised.
    fn max_token_bytes(&self) -> Option<usize> {
        None
    }
    /// How many token ids the tokenizer knows (ids 0 to n − 1, added tokens included), when
    /// known: `/detokenize` refuses the others.
    fn vocab_size(&self) -> Option<usize> {
        None
    }
    /// The ids of `<think>` and `</think>`, for models that think.
    fn thinking_tags(&self) -> Option<(u32, u32)> {
        None
    }
    /// The id of the token written exactly `text` (an added token such as `<tool_call>`), when
    /// the vocabulary has one.
    fn single_token_id(&self, _text: &str) -> Option<u32> {
        None
    }
    /// Compiles a grammar in llguidance's Lark dialect over this model's vocabulary (structured
    /// outputs, tool calls); the error says what does not compile.
    fn compile_grammar(&self, _lark: &str) -> Result<lane::Grammar, String> {
        Err("this model does not serve constrained replies".into())
    }
}

/// Adapter so the incremental decoder can use any text model.
pub struct ModelDetokenizer<'a>(pub &'a dyn TextModel);

impl Detokenizer for ModelDetokenizer<'_> {
    fn decode(&self, ids: &[u32]) -> String {
        self.0.decode(ids)
    }
}
