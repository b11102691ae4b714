//! One reply as the client sees it: tokens become text (stop strings cut it), logprobs entries,
//! and a finish reason. Shared by the streaming and non-streaming paths of both endpoints.

use crate::engine_thread::TokenOut;
use crate::structured::{ToolCall, ToolCallParser};
use crate::text::{IncrementalDecoder, Matched, StopMatcher};
use crate::text_model::{ModelDetokenizer, TextModel};
use lane::FinishReason;

/// One token's logprob entry, with its alternatives.
#[derive(Clone, Debug, PartialEq)]
pub struct LogprobEntry {
    pub token: String,
    pub logprob: f32,
    pub top: Vec<(String, f32)>,
    /// Whether the token's text goes to the reply's text (or may: held back by a stop string's
    /// prefix or a tool call): not the thinking's, its tags', or the newlines dropped after a
    /// thought. (The chat API shows every entry; a text block only its own.)
    pub of_text: bool,
}

/// What a batch of tokens adds to the reply.
#[derive(Debug, Default)]
pub struct Delta {
    pub text: String,
    /// The model's thinking (between `<think>` and `</think>`), for chat replies that split it
    /// out ([`ThinkTags`]).
    pub reasoning: String,
    pub logprobs: Vec<LogprobEntry>,
    /// Tool calls read from the text (chat replies with tools), in order.
    pub tool_calls: Vec<ToolCall>,
}

/// The thinking tags of a model whose chat replies put their thinking in `reasoning_content`,
/// and whether the prompt left the reply inside a thought (the template opened `<think>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThinkTags {
    pub open: u32,
    pub close: u32,
    pub starts_inside: bool,
}

impl ThinkTags {
    /// The tags, and whether `prompt`'s last tag opens a thought.
    pub fn after(open: u32, close: u32, prompt: &[u32]) -> ThinkTags {
        let last = prompt.iter().rev().find(|&&t| t == open || t == close);
        ThinkTags {
            open,
            close,
            starts_inside: last == Some(&open),
        }
    }
}

/// Where a split reply's tokens go.
struct Split {
    tags: ThinkTags,
    thinking: bool,
    reasoning: IncrementalDecoder,
    /// Just after `</think>`: the newlines the model writes before its answer are dropped.
    trim_newlines: bool,
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
    /// Set for a chat reply of a model with thinking tags.
    split: Option<Split>,
    matcher: StopMatcher,
    /// Set for a chat reply whose `<tool_call>` blocks become `tool_calls`.
    tool_calls: Option<ToolCallParser>,
    /// The calls a reply may still make (`None`: any number); the one that uses the last ends
    /// the reply, as a stop string would.
    calls_left: Option<usize>,
    /// Stop strings are looked for only in the text of the tokens after this many (`min_tokens`).
    stops_from: u64,
    want_logprobs: bool,
    /// A stop string matched: everything after it is dropped.
    stopped: bool,
    pub completion_tokens: u64,
    /// Of the completion's tokens, those of its thinking (the tags included).
    pub reasoning_tokens: u64,
    pub prompt_tokens: u64,
    /// Of the prompt's tokens, those restored from the prompt cache (known at admission).
    pub cached_tokens: u64,
}

impl Reply {
    pub fn new(stops: Vec<String>, want_logprobs: bool, prompt_tokens: u64) -> Reply {
        Reply {
            decoder: IncrementalDecoder::default(),
            split: None,
            matcher: StopMatcher::new(stops),
            tool_calls: None,
            calls_left: None,
            stops_from: 0,
            want_logprobs,
            stopped: false,
            completion_tokens: 0,
            reasoning_tokens: 0,
            prompt_tokens,
            cached_tokens: 0,
        }
    }

    /// Sends the thinking between `tags` to [`Delta::reasoning`] instead of the text; the tags
    /// themselves go to neither.
    pub fn split_thinking(mut self, tags: ThinkTags) -> Reply {
        self.split = Some(Split {
            tags,
            thinking: tags.starts_inside,
            reasoning: IncrementalDecoder::default(),
            trim_newlines: false,
        });
        self
    }

    /// Looks for stop strings only in the text of the tokens after the first `min_tokens` (as
    /// vLLM's `min_tokens` holds them back; the engine holds the stop tokens).
    pub fn stops_from(mut self, min_tokens: u64) -> Reply {
        self.stops_from = min_tokens;
        self
    }

    /// Sends the stop string that ends the reply as its last text (`include_stop_str_in_output`).
    pub fn including_stops(mut self) -> Reply {
        self.matcher = self.matcher.including_stops();
        self
    }

    /// Reads the reply's `<tool_call>` blocks into [`Delta::tool_calls`] instead of the text; a
    /// reply without `parallel` calls ends after its first.
    pub fn parse_tool_calls(mut self, parallel: bool) -> Reply {
        self.tool_calls = Some(ToolCallParser::default());
        self.calls_left = (!parallel).then_some(1);
        self
    }

    /// Text past the stop strings: to the tool-call parser when there is one.
    fn route_text(&mut self, text: &str, delta: &mut Delta) {
        match &mut self.tool_calls {
            Some(parser) => {
                let parsed = parser.push(text);
                delta.text.push_str(&parsed.text);
                self.take_calls(parsed.calls, delta);
            }
            None => delta.text.push_str(text),
        }
    }

    /// Adds the calls the reply may still make to `delta`; the last it may make ends it.
    fn take_calls(&mut self, mut calls: Vec<ToolCall>, delta: &mut Delta) {
        if let Some(left) = &mut self.calls_left {
            calls.truncate(*left);
            *left -= calls.len();
            // (Not before `min_tokens`: the reply goes on, making no more calls.)
            if *left == 0 && self.completion_tokens > self.stops_from {
                self.stopped = true;
            }
        }
        delta.tool_calls.extend(calls);
    }

    pub fn wants_logprobs(&self) -> bool {
        self.want_logprobs
    }

    /// Whether a stop string ended the reply (the host cancels the engine stream).
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// The stop string that ended the reply, if one did.
    pub fn stop_string(&self) -> Option<&str> {
        self.matcher.matched()
    }

    pub fn on_tokens(&mut self, text_model: &dyn TextModel, tokens: &[TokenOut]) -> Delta {
        let mut delta = Delta::default();
        for out in tokens {
            if self.stopped {
                break;
            }
            self.completion_tokens += 1;
            if let Some(split) = &mut self.split {
                let detok = ModelDetokenizer(text_model);
                if split.thinking || out.token == split.tags.open {
                    self.reasoning_tokens += 1;
                }
                if split.thinking {
                    if out.token == split.tags.close {
                        split.thinking = false;
                        split.trim_newlines = true;
                        delta.reasoning.push_str(&split.reasoning.finish(&detok));
                    } else {
                        delta
                            .reasoning
                            .push_str(&split.reasoning.push(&detok, out.token));
                    }
                    self.push_logprobs(text_model, out, &mut delta, false);
                    continue;
                }
                if out.token == split.tags.open {
                    split.thinking = true;
                    split.reasoning = IncrementalDecoder::default();
                    self.push_logprobs(text_model, out, &mut delta, false);
                    continue;
                }
            }
            let mut piece = self.decoder.push(&ModelDetokenizer(text_model), out.token);
            let mut to_text = true;
            if let Some(split) = self.split.as_mut().filter(|s| s.trim_newlines) {
                piece = piece.trim_start_matches('\n').to_string();
                split.trim_newlines = piece.is_empty();
                // (Newlines dropped after a thought are the thought's.)
                to_text = !piece.is_empty();
            }
            let matched = match self.completion_tokens > self.stops_from {
                true => self.matcher.push(&piece),
                // Before `min_tokens`, text goes out as it comes (the matcher keeps its end, for
                // a stop string that starts there and ends after).
                false => Matched {
                    emit: self.matcher.pass(&piece),
                    stopped: false,
                },
            };
            self.route_text(&matched.emit, &mut delta);
            // (The call that uses the last a reply may make has stopped it too.)
            self.stopped |= matched.stopped;
            // A stop string ends the reply here: what the tool-call parser holds back is the
            // reply's end (text, or a call it completes), as `on_finish` would have flushed it.
            if matched.stopped {
                if let Some(parser) = &mut self.tool_calls {
                    let rest = parser.finish();
                    delta.text.push_str(&rest.text);
                    self.take_calls(rest.calls, &mut delta);
                }
            }
            self.push_logprobs(text_model, out, &mut delta, to_text);
        }
        delta
    }

    /// The token's logprob entry, when the reply wants them (thinking tokens included, marked
    /// as not the text's: [`LogprobEntry::of_text`]).
    fn push_logprobs(
        &self,
        text_model: &dyn TextModel,
        out: &TokenOut,
        delta: &mut Delta,
        to_text: bool,
    ) {
        if self.want_logprobs {
            let entry = LogprobEntry {
                token: text_model.token_text(out.token),
                logprob: out
                    .logprob
                    .expect("a reply that wants logprobs asked the engine for them"),
                top: out
                    .top_logprobs
                    .iter()
                    .map(|(id, lp)| (text_model.token_text(*id), *lp))
                    .collect(),
                of_text: to_text,
            };
            delta.logprobs.push(entry);
        }
    }

    /// The reply's end: the text still held back (unless a stop string cut it), the thinking
    /// still held back (a reply that ended inside a thought), and the ending.
    pub fn on_finish(
        &mut self,
        text_model: &dyn TextModel,
        reason: &FinishReason,
    ) -> (Delta, Ending) {
        // A stop string or the last call the reply may make ended it: nothing held back is its.
        if self.stopped {
            return (Delta::default(), Ending::Stop);
        }
        let (mut tail, ending) = self.finish_text(text_model, reason);
        if self.tool_calls.is_some() {
            let text = std::mem::take(&mut tail.text);
            self.route_text(&text, &mut tail);
            if let Some(parser) = &mut self.tool_calls {
                let rest = parser.finish();
                tail.text.push_str(&rest.text);
                self.take_calls(rest.calls, &mut tail);
            }
        }
        (tail, ending)
    }

    /// [`Reply::on_finish`] before the tool-call parser.
    fn finish_text(
        &mut self,
        text_model: &dyn TextModel,
        reason: &FinishReason,
    ) -> (Delta, Ending) {
        if self.stopped {
            return (Delta::default(), Ending::Stop);
        }
        // A reply that failed (the engine's error, a cancellation, no room) says so, whatever
        // its held-back text would have matched.
        let failed = match reason {
            FinishReason::Stop | FinishReason::Length => None,
            FinishReason::Error(message) => Some(Ending::Failed(message.clone())),
            FinishReason::ContextFull { reply_end, largest } => Some(Ending::ContextFull {
                reply_end: *reply_end,
                largest: *largest,
            }),
            FinishReason::Cancelled => Some(Ending::Cancelled),
        };
        if let Some(failed) = failed {
            return (Delta::default(), failed);
        }
        let reasoning = match &mut self.split {
            Some(split) if split.thinking => split.reasoning.finish(&ModelDetokenizer(text_model)),
            _ => String::new(),
        };
        let tail = self.decoder.finish(&ModelDetokenizer(text_model));
        let matched = self.matcher.push(&tail);
        let mut text = matched.emit;
        if matched.stopped {
            self.stopped = true;
            return (
                Delta {
                    text,
                    reasoning,
                    ..Delta::default()
                },
                Ending::Stop,
            );
        }
        text.push_str(&self.matcher.finish());
        let ending = match reason {
            FinishReason::Length => Ending::Length,
            _ => Ending::Stop,
        };
        let tail = Delta {
            text,
            reasoning,
            ..Delta::default()
        };
        (tail, ending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::ChatMessage;

    /// Ids below 256 are bytes; 300 and 301 are the thinking tags (decoded as nothing, as
    /// special tokens are).
    struct Tagged;

    const OPEN: u32 = 300;
    const CLOSE: u32 = 301;

    impl TextModel for Tagged {
        fn model_id(&self) -> &str {
            "tagged"
        }
        fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
            Ok(text.bytes().map(u32::from).collect())
        }
        fn decode(&self, ids: &[u32]) -> String {
            let bytes: Vec<u8> = ids.iter().filter(|&&i| i < 256).map(|&i| i as u8).collect();
            String::from_utf8_lossy(&bytes).into_owned()
        }
        fn token_text(&self, id: u32) -> String {
            self.decode(&[id])
        }
        fn chat_prompt_ids(
            &self,
            _: &[ChatMessage],
            _: &serde_json::Map<String, serde_json::Value>,
        ) -> Result<Vec<u32>, String> {
            Ok(Vec::new())
        }
        fn stop_token_ids(&self) -> Vec<u32> {
            Vec::new()
        }
        fn thinking_tags(&self) -> Option<(u32, u32)> {
            Some((OPEN, CLOSE))
        }
    }

    fn tokens(text: &str) -> Vec<TokenOut> {
        text.bytes()
            .map(|b| match b {
                b'{' => OPEN,
                b'}' => CLOSE,
                b => u32::from(b),
            })
            .map(|token| TokenOut {
                token,
                logprob: None,
                top_logprobs: Vec::new(),
            })
            .collect()
    }

    /// The reply's text and thinking when its tokens come `batch` at a time (`{` and `}` stand
    /// for the tags).
    fn run(reply: Reply, text: &str, batch: usize) -> (String, String) {
        let mut reply = reply;
        let (mut content, mut reasoning) = (String::new(), String::new());
        for chunk in tokens(text).chunks(batch) {
            let delta = reply.on_tokens(&Tagged, chunk);
            content.push_str(&delta.text);
            reasoning.push_str(&delta.reasoning);
        }
        let (tail, _) = reply.on_finish(&Tagged, &FinishReason::Length);
        content.push_str(&tail.text);
        reasoning.push_str(&tail.reasoning);
        (content, reasoning)
    }

    fn split(starts_inside: bool) -> Reply {
        Reply::new(Vec::new(), false, 0).split_thinking(ThinkTags {
            open: OPEN,
            close: CLOSE,
            starts_inside,
        })
    }

    #[test]
    fn thinking_goes_to_reasoning_and_the_answer_to_the_text_in_any_batches() {
        for batch in [1, 2, 3, 100] {
            assert_eq!(
                run(split(false), "{let me see}\n\nIt is 4.", batch),
                ("It is 4.".to_string(), "let me see".to_string()),
                "batches of {batch}"
            );
            // The template opened the thought: the reply starts inside it.
            assert_eq!(
                run(split(true), "hmm}\n\nYes", batch),
                ("Yes".to_string(), "hmm".to_string())
            );
            // A reply that ends while thinking keeps what it thought.
            assert_eq!(
                run(split(false), "{still thin", batch),
                (String::new(), "still thin".to_string())
            );
            // Newlines inside the answer stay; only those right after </think> go.
            assert_eq!(
                run(split(false), "{a}\nb\n\nc", batch),
                ("b\n\nc".to_string(), "a".to_string())
            );
        }
        // Without a split, the tags are the model's text (decoded as nothing here).
        assert_eq!(
            run(Reply::new(Vec::new(), false, 0), "{a}b", 1),
            ("ab".to_string(), String::new())
        );
    }

    #[test]
    fn the_prompts_last_tag_says_whether_the_reply_starts_inside_a_thought() {
        assert!(ThinkTags::after(OPEN, CLOSE, &[1, OPEN, 2]).starts_inside);
        assert!(!ThinkTags::after(OPEN, CLOSE, &[1, OPEN, 2, CLOSE, 3]).starts_inside);
        assert!(!ThinkTags::after(OPEN, CLOSE, &[1, 2]).starts_inside);
    }

    #[test]
    fn a_stop_string_keeps_what_the_tool_call_parser_held_back() {
        for batch in [1, 3, 100] {
            // `<` could start `<tool_call>` until the stop string ends the reply.
            let reply = Reply::new(vec!["b".into()], false, 0).parse_tool_calls(true);
            assert_eq!(
                run(reply, "x<b and more", batch).0,
                "x<",
                "batches of {batch}"
            );
            // An unclosed block the stop string cuts is text, as the model wrote it.
            let reply = Reply::new(vec!["STOP".into()], false, 0).parse_tool_calls(true);
            assert_eq!(
                run(reply, "<tool_call>oops STOP more", batch).0,
                "<tool_call>oops ",
                "batches of {batch}"
            );
        }
    }

    #[test]
    fn a_reply_without_parallel_calls_ends_after_its_first_in_any_batches() {
        let call = |name: &str| {
            format!("<tool_call>\n{{\"name\": \"{name}\", \"arguments\": {{}}}}\n</tool_call>")
        };
        // (`{` and `}` are the thinking tags of `tokens`: the calls' JSON goes in bytes.)
        let text = format!("a{}\n{} tail", call("f"), call("g"));
        let bytes: Vec<TokenOut> = text
            .bytes()
            .map(|b| TokenOut {
                token: u32::from(b),
                logprob: None,
                top_logprobs: Vec::new(),
            })
            .collect();
        for parallel in [false, true] {
            for batch in [1, 7, 1000] {
                let mut reply = Reply::new(Vec::new(), false, 0).parse_tool_calls(parallel);
                let (mut content, mut names) = (String::new(), Vec::new());
                for chunk in bytes.chunks(batch) {
                    let delta = reply.on_tokens(&Tagged, chunk);
                    content.push_str(&delta.text);
                    names.extend(delta.tool_calls.into_iter().map(|c| c.name));
                }
                let (tail, ending) = reply.on_finish(&Tagged, &FinishReason::Length);
                content.push_str(&tail.text);
                names.extend(tail.tool_calls.into_iter().map(|c| c.name));
                if parallel {
                    assert_eq!(names, ["f", "g"], "batches of {batch}");
                    assert_eq!(ending, Ending::Length);
                } else {
                    assert_eq!(names, ["f"], "batches of {batch}");
                    assert_eq!(content, "a", "batches of {batch}");
                    assert!(reply.stopped());
                    assert_eq!(ending, Ending::Stop);
                    assert_eq!(reply.stop_string(), None);
                }
            }
        }
    }

    #[test]
    fn stop_strings_apply_to_the_answer_not_the_thinking() {
        let reply = Reply::new(vec!["STOP".into()], false, 0).split_thinking(ThinkTags {
            open: OPEN,
            close: CLOSE,
            starts_inside: false,
        });
        assert_eq!(
            run(reply, "{no STOP here}ok STOP more", 1),
            ("ok ".to_string(), "no STOP here".to_string())
        );
    }
}
