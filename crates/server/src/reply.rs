//! One reply as the client sees it: tokens become text (stop strings cut it), logprobs entries,
//! and a finish reason. Shared by the streaming and non-streaming paths of both endpoints.

use crate::engine_thread::TokenOut;
use crate::text::{IncrementalDecoder, StopMatcher};
use crate::text_model::{ModelDetokenizer, TextModel};
use lane::FinishReason;

/// One token's logprob entry, with its alternatives.
#[derive(Clone, Debug, PartialEq)]
pub struct LogprobEntry {
    pub token: String,
    pub logprob: f32,
    pub top: Vec<(String, f32)>,
}

/// What a batch of tokens adds to the reply.
#[derive(Debug, Default)]
pub struct Delta {
    pub text: String,
    pub logprobs: Vec<LogprobEntry>,
}

/// How the reply ended, for `finish_reason` (or an error for the client).
#[derive(Clone, Debug, PartialEq)]
pub enum Ending {
    Stop,
    Length,
    Failed(String),
    ContextFull { reply_end: u64, largest: u64 },
    Cancelled,
}

impl Ending {
    pub fn finish_reason(&self) -> &'static str {
        match self {
            Ending::Stop => "stop",
            Ending::Length => "length",
            _ => "error",
        }
    }
}

pub struct Reply {
    decoder: IncrementalDecoder,
    matcher: StopMatcher,
    want_logprobs: bool,
    /// A stop string matched: everything after it is dropped.
    stopped: bool,
    pub completion_tokens: u64,
    pub prompt_tokens: u64,
}

impl Reply {
    pub fn new(stops: Vec<String>, want_logprobs: bool, prompt_tokens: u64) -> Reply {
        Reply {
            decoder: IncrementalDecoder::default(),
            matcher: StopMatcher::new(stops),
            want_logprobs,
            stopped: false,
            completion_tokens: 0,
            prompt_tokens,
        }
    }

    pub fn wants_logprobs(&self) -> bool {
        self.want_logprobs
    }

    /// Whether a stop string ended the reply (the host cancels the engine stream).
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    pub fn on_tokens(&mut self, text_model: &dyn TextModel, tokens: &[TokenOut]) -> Delta {
        let mut delta = Delta::default();
        for out in tokens {
            if self.stopped {
                break;
            }
            self.completion_tokens += 1;
            let piece = self.decoder.push(&ModelDetokenizer(text_model), out.token);
            let matched = self.matcher.push(&piece);
            delta.text.push_str(&matched.emit);
            if self.want_logprobs {
                delta.logprobs.push(LogprobEntry {
                    token: text_model.token_text(out.token),
                    logprob: out
                        .logprob
                        .expect("a reply that wants logprobs asked the engine for them"),
                    top: out
                        .top_logprobs
                        .iter()
                        .map(|(id, lp)| (text_model.token_text(*id), *lp))
                        .collect(),
                });
            }
            self.stopped = matched.stopped;
        }
        delta
    }

    /// The reply's end: the text still held back (unless a stop string cut it) and the ending.
    pub fn on_finish(
        &mut self,
        text_model: &dyn TextModel,
        reason: &FinishReason,
    ) -> (String, Ending) {
        if self.stopped {
            return (String::new(), Ending::Stop);
        }
        let tail = self.decoder.finish(&ModelDetokenizer(text_model));
        let matched = self.matcher.push(&tail);
        let mut text = matched.emit;
        if matched.stopped {
            self.stopped = true;
            return (text, Ending::Stop);
        }
        text.push_str(&self.matcher.finish());
        let ending = match reason {
            FinishReason::Stop => Ending::Stop,
            FinishReason::Length => Ending::Length,
            FinishReason::Error(message) => Ending::Failed(message.clone()),
            FinishReason::ContextFull { reply_end, largest } => Ending::ContextFull {
                reply_end: *reply_end,
                largest: *largest,
            },
            FinishReason::Cancelled => Ending::Cancelled,
        };
        (text, ending)
    }
}
