//! What the host asks of the engine, and why the engine may refuse at once.

use crate::grammar::Grammar;
use crate::thinking::ThinkingBudget;
use slots::{StreamId, MAX_WINDOW};

/// The most alternatives a token event carries (OpenAI allows up to 20 `top_logprobs`).
pub const MAX_TOP_LOGPROBS: u8 = 20;

/// How a stream proposes drafts for its windows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DraftMode {
    /// Windows of one token.
    #[default]
    None,
    /// Prompt lookup: the tokens that followed the latest earlier occurrence of the stream's last
    /// few tokens ([`crate::ngram_draft`]).
    Ngram,
    /// The model's own multi-token-prediction head ([`crate::Target::draft`]).
    Mtp,
}

/// How tokens are drawn from a stream's logits. `temperature == 0` is greedy and ignores the rest.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplingParams {
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; 0 keeps all.
    pub top_k: u32,
    /// Keep the smallest most-likely-first set whose mass reaches `top_p`; 1 keeps all.
    pub top_p: f32,
    /// Drop tokens less likely than `min_p ×` the most likely; 0 keeps all.
    pub min_p: f32,
    /// Seed of the stream's own RNG; `None` derives one from the stream id.
    pub seed: Option<u64>,
}

impl SamplingParams {
    pub fn greedy() -> SamplingParams {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: None,
        }
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }
}

impl Default for SamplingParams {
    fn default() -> SamplingParams {
        SamplingParams::greedy()
    }
}

/// Most tokens a request's `logit_bias` may name (OpenAI's own limit is of this order; each is
/// applied to every row of the stream).
pub const MAX_LOGIT_BIAS: usize = 1024;
/// Largest |bias| `logit_bias` takes (OpenAI's range: ±100 bans or forces a token).
pub const LOGIT_BIAS_MAX: f32 = 100.0;
/// Largest |presence_penalty| and |frequency_penalty| (OpenAI's range).
pub const PENALTY_MAX: f32 = 2.0;

/// Changes to a stream's logits before its tokens are drawn or its drafts verified: the
/// sampling fields OpenAI's and vLLM's clients send. Applied on the host to the stream's own rows
/// in this order: `allowed` (every other token −∞), `logit_bias`, then the repetition penalty, then
/// the presence and frequency
/// penalties. They never touch another stream's rows, and the log-probabilities reported are
/// the model's own.
#[derive(Clone, Debug, PartialEq)]
pub struct LogitAdjustments {
    /// Subtracted from the logit of each token the reply holds already (−2 … 2; 0 is off).
    pub presence_penalty: f32,
    /// Subtracted once per time the reply holds the token (−2 … 2; 0 is off).
    pub frequency_penalty: f32,
    /// For each token of the prompt or the reply: a positive logit divided by it, a negative one
    /// multiplied (transformers' and vLLM's rule; > 0, 1 is off).
    pub repetition_penalty: f32,
    /// Added to the named tokens' logits (−100 … 100).
    pub logit_bias: Vec<(u32, f32)>,
    /// When not empty, the only tokens that may be drawn (vLLM's `allowed_token_ids`): every
    /// other logit is −∞, first. A stop token not listed cannot end the reply.
    pub allowed: Vec<u32>,
}

impl Default for LogitAdjustments {
    fn default() -> LogitAdjustments {
        LogitAdjustments {
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_penalty: 1.0,
            logit_bias: Vec::new(),
            allowed: Vec::new(),
        }
    }
}

impl LogitAdjustments {
    /// Whether the logits are used as the model gave them.
    pub fn is_none(&self) -> bool {
        self.presence_penalty == 0.0
            && self.frequency_penalty == 0.0
            && self.repetition_penalty == 1.0
            && self.logit_bias.is_empty()
            && self.allowed.is_empty()
    }
}

/// One request: a prompt to continue.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub prompt: Vec<u32>,
    pub max_new_tokens: u64,
    /// The stop tokens cannot end the reply before this many tokens (vLLM's `min_tokens`):
    /// their logits are −∞ at every earlier position, drafts verified likewise; 0 is off.
    pub min_new_tokens: u64,
    pub sampling: SamplingParams,
    /// Token ids that end the reply (reason `stop`); the stop token itself is not emitted.
    pub stop_tokens: Vec<u32>,
    /// `None` uses the engine's [`crate::EngineConfig::draft`].
    pub draft: Option<DraftMode>,
    /// Whether each token event carries the token's log-probability (a pass over the whole
    /// logits row per token, so only when asked for; implied by `top_logprobs > 0`).
    pub logprobs: bool,
    /// How many alternatives each token event carries (0 ..= [`MAX_TOP_LOGPROBS`]).
    pub top_logprobs: u8,
    /// Force `</think>` after this many thinking tokens ([`ThinkingBudget`]).
    pub thinking: Option<ThinkingBudget>,
    /// Penalties and biases applied to the stream's logits ([`LogitAdjustments`]).
    pub adjustments: LogitAdjustments,
    /// The grammar the reply must follow (constrained decoding); `None` leaves it free.
    pub grammar: Option<Grammar>,
    /// Whether the prompt may start from the prompt cache and add its blocks to it (llama.cpp's
    /// `cache_prompt`); the reply is the same either way.
    pub cache_prompt: bool,
}

impl Request {
    /// A greedy request with no stop tokens, the engine's draft mode and no log-probabilities.
    pub fn new(prompt: Vec<u32>, max_new_tokens: u64) -> Request {
        Request {
            prompt,
            max_new_tokens,
            min_new_tokens: 0,
            sampling: SamplingParams::greedy(),
            stop_tokens: Vec::new(),
            draft: None,
            logprobs: false,
            top_logprobs: 0,
            thinking: None,
            adjustments: LogitAdjustments::default(),
            grammar: None,
            cache_prompt: true,
        }
    }
}

/// Why `submit` refused a request at once. Nothing was queued and no session was touched.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The reply end (prompt + max_new + window) does not fit the largest session (HTTP 400
    /// `context_full`). `reply_end` is `u64::MAX` when the sum itself overflowed.
    #[error("the reply needs {reply_end} tokens of context but the largest session holds {largest}; shorten the prompt or lower max_tokens")]
    ContextFull { reply_end: u64, largest: u64 },
    /// The admission queue holds its limit already (HTTP 429/503): retry later.
    #[error("the admission queue is full ({limit} requests waiting); retry later")]
    QueueFull { limit: usize },
    /// The server stops admitting: it is shutting down (HTTP 503, not worth retrying here).
    #[error("the server is shutting down")]
    ShuttingDown,
    /// A parameter is out of range (HTTP 400 naming `param`).
    #[error("`{param}`: {message}")]
    Invalid {
        param: &'static str,
        message: String,
    },
}

fn invalid(param: &'static str, message: String) -> Refusal {
    Refusal::Invalid { param, message }
}

/// Checks every field that the engine would otherwise have to trust, for a target of `vocab`
/// ids that drafts with an MTP head when `has_drafter`.
pub(crate) fn validate(
    request: &Request,
    vocab: usize,
    has_drafter: bool,
    draft: DraftMode,
    draft_tokens: u64,
) -> Result<(), Refusal> {
    let vocab = vocab as u64;
    if request.prompt.is_empty() {
        return Err(invalid("prompt", "the prompt has no tokens".into()));
    }
    if let Some(bad) = request.prompt.iter().find(|&&t| t as u64 >= vocab) {
        return Err(invalid(
            "prompt",
            format!("token id {bad} is outside the vocabulary of {vocab}"),
        ));
    }
    if request.max_new_tokens == 0 {
        return Err(invalid("max_tokens", "must be at least 1".into()));
    }
    if request.min_new_tokens > request.max_new_tokens {
        return Err(invalid(
            "min_tokens",
            format!(
                "{} is more than max_tokens ({})",
                request.min_new_tokens, request.max_new_tokens
            ),
        ));
    }
    // A complete grammar ends the reply with a stop token, which min_tokens may forbid.
    if request.min_new_tokens > 0 && request.grammar.is_some() {
        return Err(invalid(
            "min_tokens",
            "cannot be combined with a constrained reply".into(),
        ));
    }
    let s = &request.sampling;
    if !(s.temperature.is_finite() && s.temperature >= 0.0) {
        return Err(invalid(
            "temperature",
            format!("must be a finite number ≥ 0, got {}", s.temperature),
        ));
    }
    if !(s.top_p > 0.0 && s.top_p <= 1.0) {
        return Err(invalid(
            "top_p",
            format!("must be in (0, 1], got {}", s.top_p),
        ));
    }
    if !(0.0..=1.0).contains(&s.min_p) {
        return Err(invalid(
            "min_p",
            format!("must be in [0, 1], got {}", s.min_p),
        ));
    }
    if request.top_logprobs > MAX_TOP_LOGPROBS {
        return Err(invalid(
            "top_logprobs",
            format!("at most {MAX_TOP_LOGPROBS}, got {}", request.top_logprobs),
        ));
    }
    let a = &request.adjustments;
    for (param, value) in [
        ("presence_penalty", a.presence_penalty),
        ("frequency_penalty", a.frequency_penalty),
    ] {
        if !(value.is_finite() && value.abs() <= PENALTY_MAX) {
            return Err(invalid(
                param,
                format!("must be between -{PENALTY_MAX} and {PENALTY_MAX}, got {value}"),
            ));
        }
    }
    if !(a.repetition_penalty.is_finite() && a.repetition_penalty > 0.0) {
        return Err(invalid(
            "repetition_penalty",
            format!("must be a finite number > 0, got {}", a.repetition_penalty),
        ));
    }
    if a.logit_bias.len() > MAX_LOGIT_BIAS {
        return Err(invalid(
            "logit_bias",
            format!(
                "at most {MAX_LOGIT_BIAS} tokens, got {}",
                a.logit_bias.len()
            ),
        ));
    }
    if let Some(bad) = a.allowed.iter().find(|&&t| t as u64 >= vocab) {
        return Err(invalid(
            "allowed_token_ids",
            format!("token id {bad} is outside the vocabulary of {vocab}"),
        ));
    }
    // A grammar's mask and the list could leave no token at some position.
    if !a.allowed.is_empty() && request.grammar.is_some() {
        return Err(invalid(
            "allowed_token_ids",
            "cannot be combined with a constrained reply".into(),
        ));
    }
    for &(token, bias) in &a.logit_bias {
        if token as u64 >= vocab {
            return Err(invalid(
                "logit_bias",
                format!("token id {token} is outside the vocabulary of {vocab}"),
            ));
        }
        if !(bias.is_finite() && bias.abs() <= LOGIT_BIAS_MAX) {
            return Err(invalid(
                "logit_bias",
                format!(
                    "biases must be between -{LOGIT_BIAS_MAX} and {LOGIT_BIAS_MAX}, got {bias}"
                ),
            ));
        }
    }
    if let Some(budget) = &request.thinking {
        if [budget.open_token, budget.close_token]
            .iter()
            .any(|&t| t as u64 >= vocab)
        {
            return Err(invalid(
                "thinking_budget",
                "the thinking tags are outside the vocabulary".into(),
            ));
        }
    }
    if draft == DraftMode::Mtp && !has_drafter {
        return Err(invalid(
            "draft",
            "this model has no MTP head; use `ngram` or `none`".into(),
        ));
    }
    debug_assert!(draft_tokens < MAX_WINDOW, "checked by Engine::new");
    Ok(())
}

/// The seed of a stream that did not give one: a fixed function of its id, so an unseeded run is
/// still reproducible on the same engine.
pub(crate) fn default_seed(stream: StreamId) -> u64 {
    crate::mix::mix64(stream.0 ^ 0x6C61_6E65_5F73_6565) // "lane_see"
}
