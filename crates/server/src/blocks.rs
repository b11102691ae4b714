//! A reply as a sequence of blocks — thinking, text, tool calls — in the order the model wrote
//! them, and the events that open, fill and close them as the rounds come. Anthropic's Messages
//! API (content blocks) and OpenAI's Responses API (output items) are both this sequence in
//! their own words, so a whole reply is always the blocks its stream would have sent.

use crate::engine_thread::TokenOut;
use crate::generate::{Choice, Next};
use crate::reply::{Delta, Ending, LogprobEntry, Reply};
use crate::state::AppState;
use crate::structured::ToolCall;
use crate::text_model::TextModel;
use std::future::Future;
use std::ops::Range;

/// The kind of a block that grows piece by piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Growing {
    Thinking,
    Text,
}

/// One block of a reply.
#[derive(Clone, Debug, PartialEq)]
pub enum Block {
    Thinking(String),
    Text(String),
    /// The reply's `call`-th tool call.
    Call {
        call: usize,
        tool: ToolCall,
    },
}

/// What happened to the blocks: each `index` is the block's place in the reply.
#[derive(Clone, Debug, PartialEq)]
pub enum BlockEvent {
    /// A thinking or text block opens, empty.
    Open { index: usize, kind: Growing },
    /// A piece of text is added to the open block (a text piece with the log-probabilities
    /// of its tokens, where the reply wants them: these entries of `blocks.logprobs[index]`).
    Piece {
        index: usize,
        kind: Growing,
        text: String,
        logprobs: Range<usize>,
    },
    /// A thinking or text block closes.
    Close { index: usize, kind: Growing },
    /// A tool call, a whole block at once (`blocks.content[index]`).
    Call { index: usize },
}

/// The blocks so far and the open one. A block opens when its kind of content first comes and
/// closes when another kind comes or the reply ends; each tool call is a block of its own.
/// Whitespace at the end of the text so far waits until more text comes: the whitespace a model
/// writes around its calls opens no block and ends none; a reply's last whitespace stays in its
/// open text block.
#[derive(Debug, Default)]
pub struct Blocks {
    pub content: Vec<Block>,
    /// Each text block's tokens' log-probabilities (empty for the other blocks, and where the
    /// reply wants none), by the block's place.
    pub logprobs: Vec<Vec<LogprobEntry>>,
    open: Option<Growing>,
    /// Whitespace not yet sent: it goes out with the text that follows it, or at the end.
    held_space: String,
    /// The log-probabilities of `held_space`'s tokens.
    held_space_logprobs: Vec<LogprobEntry>,
    /// The log-probabilities of text tokens whose text has not come yet (held back by a stop
    /// string's prefix or a tool call): they go with the next text piece; a call they turn out
    /// to be, or a stop string, drops them.
    held_logprobs: Vec<LogprobEntry>,
    pub calls: usize,
}

/// What reading one more of a choice's events into its blocks did.
pub enum Round {
    Going,
    Ended(Ending),
    /// The client went away first.
    ClientGone,
}

impl Blocks {
    /// A whole reply's blocks: the choice's rounds read into them until it ends (the block
    /// events dropped: a whole answer is the blocks a stream's events would have built).
    pub async fn read_whole(app: &AppState, choice: &mut Choice) -> (Blocks, Ending) {
        let (mut blocks, mut unsent) = (Blocks::default(), Vec::new());
        loop {
            match blocks
                .read_round(app, choice, std::future::pending(), &mut unsent)
                .await
            {
                Round::Going => unsent.clear(),
                Round::Ended(ending) => {
                    blocks.finish(&mut unsent);
                    return (blocks, ending);
                }
                Round::ClientGone => return (blocks, Ending::Cancelled),
            }
        }
    }

    /// Reads the choice's next round (or its end) into the blocks, their events into `out`;
    /// `gone` finishing first (a streamed answer's client left) ends it.
    pub async fn read_round(
        &mut self,
        app: &AppState,
        choice: &mut Choice,
        gone: impl Future<Output = ()>,
        out: &mut Vec<BlockEvent>,
    ) -> Round {
        match choice.next(gone).await {
            Next::ClientGone => Round::ClientGone,
            Next::Tokens(tokens) => {
                self.on_tokens(&mut choice.reply, app.text.as_ref(), &tokens, out);
                match choice.ended_itself(app) {
                    true => Round::Ended(Ending::Stop),
                    false => Round::Going,
                }
            }
            Next::Finished(reason) => {
                let (tail, ending) = choice.reply.on_finish(app.text.as_ref(), &reason);
                self.on_delta(&tail, out);
                Round::Ended(ending)
            }
        }
    }

    /// A round's tokens through `reply`, one at a time: a [`Delta`] keeps a round's thinking,
    /// text and calls apart, so a round of several tokens (drafts) would lose the order the
    /// model wrote them in, and the blocks would depend on how the tokens came.
    pub fn on_tokens(
        &mut self,
        reply: &mut Reply,
        text: &dyn TextModel,
        tokens: &[TokenOut],
        out: &mut Vec<BlockEvent>,
    ) {
        for token in tokens.chunks(1) {
            let delta = reply.on_tokens(text, token);
            self.on_delta(&delta, out);
        }
    }

    pub fn on_delta(&mut self, delta: &Delta, out: &mut Vec<BlockEvent>) {
        let of_text = delta.logprobs.iter().filter(|e| e.of_text);
        self.held_logprobs.extend(of_text.cloned());
        if !delta.reasoning.is_empty() {
            self.add(Growing::Thinking, &delta.reasoning, Vec::new(), out);
        }
        if !delta.text.is_empty() {
            let mut text = std::mem::take(&mut self.held_space);
            text.push_str(&delta.text);
            let mut logprobs = std::mem::take(&mut self.held_space_logprobs);
            logprobs.append(&mut self.held_logprobs);
            let said = text.trim_end().len();
            self.held_space = text.split_off(said);
            match said > 0 {
                // (The tokens of a trailing space held now went out with the text.)
                true => self.add(Growing::Text, &text, logprobs, out),
                false => self.held_space_logprobs = logprobs,
            }
        }
        for tool in &delta.tool_calls {
            self.close(out);
            self.held_space.clear();
            self.held_space_logprobs.clear();
            self.held_logprobs.clear();
            out.push(BlockEvent::Call {
                index: self.content.len(),
            });
            self.content.push(Block::Call {
                call: self.calls,
                tool: tool.clone(),
            });
            self.logprobs.push(Vec::new());
            self.calls += 1;
        }
    }

    /// The reply's end: an open text block takes the whitespace held back, a reply that said
    /// nothing is one text block (of its whitespace), and the open block closes.
    pub fn finish(&mut self, out: &mut Vec<BlockEvent>) {
        let held = std::mem::take(&mut self.held_space);
        let logprobs = std::mem::take(&mut self.held_space_logprobs);
        // (What else is held is a stop string's: never text.)
        self.held_logprobs.clear();
        if self.content.is_empty() {
            self.open_block(Growing::Text, out);
        }
        if self.open == Some(Growing::Text) && !held.is_empty() {
            self.add(Growing::Text, &held, logprobs, out);
        }
        self.close(out);
    }

    /// Adds `piece` (with its tokens' log-probabilities) to a block of `kind`, opening one
    /// unless it is open.
    fn add(
        &mut self,
        kind: Growing,
        piece: &str,
        logprobs: Vec<LogprobEntry>,
        out: &mut Vec<BlockEvent>,
    ) {
        if self.open != Some(kind) {
            self.close(out);
            self.open_block(kind, out);
        }
        let index = self.content.len() - 1;
        if let Some(Block::Thinking(text) | Block::Text(text)) = self.content.last_mut() {
            text.push_str(piece);
        }
        let start = self.logprobs[index].len();
        self.logprobs[index].extend(logprobs);
        out.push(BlockEvent::Piece {
            index,
            kind,
            text: piece.to_string(),
            logprobs: start..self.logprobs[index].len(),
        });
    }

    fn open_block(&mut self, kind: Growing, out: &mut Vec<BlockEvent>) {
        out.push(BlockEvent::Open {
            index: self.content.len(),
            kind,
        });
        self.content.push(match kind {
            Growing::Thinking => Block::Thinking(String::new()),
            Growing::Text => Block::Text(String::new()),
        });
        self.logprobs.push(Vec::new());
        self.open = Some(kind);
    }

    fn close(&mut self, out: &mut Vec<BlockEvent>) {
        if let Some(kind) = self.open.take() {
            out.push(BlockEvent::Close {
                index: self.content.len() - 1,
                kind,
            });
        }
    }
}

/// A reply that thinks "hm", says `text` and calls `f` with `{"a": 1}`, all in one round,
/// through the blocks: their events, and the blocks after the reply's end.
#[cfg(test)]
pub fn think_say_call(text: &str) -> (Blocks, Vec<BlockEvent>) {
    let delta = Delta {
        text: text.into(),
        reasoning: "hm".into(),
        tool_calls: vec![ToolCall {
            name: "f".into(),
            arguments: "{\"a\": 1}".into(),
        }],
        ..Delta::default()
    };
    let (mut blocks, mut happened) = (Blocks::default(), Vec::new());
    blocks.on_delta(&delta, &mut happened);
    blocks.finish(&mut happened);
    (blocks, happened)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(text: &str, reasoning: &str, calls: &[&str]) -> Delta {
        Delta {
            text: text.into(),
            reasoning: reasoning.into(),
            tool_calls: calls
                .iter()
                .map(|name| ToolCall {
                    name: name.to_string(),
                    arguments: "{\"a\": 1}".into(),
                })
                .collect(),
            ..Delta::default()
        }
    }

    fn call(call: usize, name: &str) -> Block {
        Block::Call {
            call,
            tool: ToolCall {
                name: name.into(),
                arguments: "{\"a\": 1}".into(),
            },
        }
    }

    #[test]
    fn blocks_open_and_close_as_the_kind_of_content_changes() {
        let (mut blocks, mut out) = (Blocks::default(), Vec::new());
        blocks.on_delta(&delta("", "let me", &[]), &mut out);
        blocks.on_delta(&delta("", " see", &[]), &mut out);
        // Whitespace alone opens nothing; it goes out with the text after it.
        blocks.on_delta(&delta("\n", "", &[]), &mut out);
        blocks.on_delta(&delta("Sure.", "", &[]), &mut out);
        // Nor does it end a block: the whitespace before the calls is dropped.
        blocks.on_delta(&delta("\n\n", "", &["f", "g"]), &mut out);
        blocks.on_delta(&delta("\n", "", &[]), &mut out);
        blocks.finish(&mut out);
        use BlockEvent::*;
        use Growing::*;
        let piece = |index, kind, text: &str| Piece {
            index,
            kind,
            text: text.into(),
            logprobs: 0..0,
        };
        assert_eq!(
            out,
            [
                Open {
                    index: 0,
                    kind: Thinking
                },
                piece(0, Thinking, "let me"),
                piece(0, Thinking, " see"),
                Close {
                    index: 0,
                    kind: Thinking
                },
                Open {
                    index: 1,
                    kind: Text
                },
                piece(1, Text, "\nSure."),
                Close {
                    index: 1,
                    kind: Text
                },
                Call { index: 2 },
                Call { index: 3 },
            ]
        );
        assert_eq!(
            blocks.content,
            [
                Block::Thinking("let me see".into()),
                Block::Text("\nSure.".into()),
                call(0, "f"),
                call(1, "g"),
            ]
        );
        assert_eq!(blocks.calls, 2);
    }

    /// Bytes are tokens.
    struct Bytes;

    impl TextModel for Bytes {
        fn model_id(&self) -> &str {
            "bytes"
        }
        fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
            Ok(text.bytes().map(u32::from).collect())
        }
        fn decode(&self, ids: &[u32]) -> String {
            String::from_utf8_lossy(&ids.iter().map(|&i| i as u8).collect::<Vec<u8>>()).into()
        }
        fn token_text(&self, id: u32) -> String {
            self.decode(&[id])
        }
        fn chat_prompt_ids(
            &self,
            _: &[crate::request::ChatMessage],
            _: &serde_json::Map<String, serde_json::Value>,
        ) -> Result<Vec<u32>, String> {
            Ok(Vec::new())
        }
        fn stop_token_ids(&self) -> Vec<u32> {
            Vec::new()
        }
    }

    /// `text`'s bytes as the engine's tokens, each with a log-probability (its id, negated)
    /// where `logprobs`.
    fn byte_tokens(text: &str, logprobs: bool) -> Vec<TokenOut> {
        Bytes
            .encode(text)
            .unwrap()
            .into_iter()
            .map(|token| TokenOut {
                token,
                logprob: logprobs.then_some(-(token as f32)),
                top_logprobs: Vec::new(),
            })
            .collect()
    }

    #[test]
    fn the_blocks_keep_the_models_order_whatever_the_rounds() {
        let text =
            "Let me look.<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>Then this.";
        let tokens = byte_tokens(text, false);
        let mut seen = Vec::new();
        for round in [1, 5, tokens.len()] {
            let mut reply = Reply::new(Vec::new(), false, 0).parse_tool_calls(true);
            let (mut blocks, mut out) = (Blocks::default(), Vec::new());
            for chunk in tokens.chunks(round) {
                blocks.on_tokens(&mut reply, &Bytes, chunk, &mut out);
            }
            blocks.finish(&mut out);
            seen.push(blocks.content);
        }
        assert_eq!(
            seen[0],
            [
                Block::Text("Let me look.".into()),
                Block::Call {
                    call: 0,
                    tool: ToolCall {
                        name: "f".into(),
                        arguments: "{}".into()
                    }
                },
                Block::Text("Then this.".into()),
            ]
        );
        assert!(seen.iter().all(|c| c == &seen[0]), "{seen:?}");
    }

    /// Each text block's log-probability entries are its own tokens': not the thought's, its
    /// tags', the newlines after it, a stop string's or a call's.
    #[test]
    fn text_blocks_carry_the_log_probabilities_of_their_own_tokens() {
        use crate::reply::ThinkTags;
        let run = |reply: Reply, text: &str| {
            let mut reply = reply;
            let (mut blocks, mut out) = (Blocks::default(), Vec::new());
            let tokens = byte_tokens(text, true);
            blocks.on_tokens(&mut reply, &Bytes, &tokens, &mut out);
            if !reply.stopped() {
                let (tail, _) = reply.on_finish(&Bytes, &lane::FinishReason::Length);
                blocks.on_delta(&tail, &mut out);
            }
            blocks.finish(&mut out);
            let texts: Vec<(String, String)> = blocks
                .content
                .iter()
                .zip(&blocks.logprobs)
                .filter_map(|(block, entries)| match block {
                    Block::Text(text) => Some((
                        text.clone(),
                        entries.iter().map(|e| e.token.as_str()).collect(),
                    )),
                    _ => None,
                })
                .collect();
            texts
        };
        let tags = ThinkTags {
            open: u32::from(b'{'),
            close: u32::from(b'}'),
            starts_inside: false,
        };
        let thinking = Reply::new(Vec::new(), true, 0).split_thinking(tags);
        assert_eq!(run(thinking, "{hm}\n\nHi"), [("Hi".into(), "Hi".into())]);
        let stopped = Reply::new(vec!["END".into()], true, 0);
        assert_eq!(run(stopped, "a ENDxx"), [("a ".into(), "a ".into())]);
        let called = Reply::new(Vec::new(), true, 0).parse_tool_calls(true);
        let after_call = run(
            called,
            "ok <tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>Then.",
        );
        assert_eq!(
            after_call,
            [("ok".into(), "ok".into()), ("Then.".into(), "Then.".into())]
        );
    }

    #[test]
    fn a_reply_that_says_nothing_is_one_text_block_and_its_last_whitespace_stays() {
        let (mut blocks, mut out) = (Blocks::default(), Vec::new());
        blocks.on_delta(&delta(" \n", "", &[]), &mut out);
        blocks.finish(&mut out);
        assert_eq!(blocks.content, [Block::Text(" \n".into())]);
        assert_eq!(out.len(), 3, "{out:?}");
        let (mut blocks, mut out) = (Blocks::default(), Vec::new());
        blocks.on_delta(&delta("Done. ", "", &[]), &mut out);
        blocks.on_delta(&delta("\n", "", &[]), &mut out);
        blocks.finish(&mut out);
        assert_eq!(blocks.content, [Block::Text("Done. \n".into())]);
        // Thinking, then whitespace, then nothing: no text block.
        let (mut blocks, mut out) = (Blocks::default(), Vec::new());
        blocks.on_delta(&delta("\n", "hm", &[]), &mut out);
        blocks.finish(&mut out);
        assert_eq!(blocks.content, [Block::Thinking("hm".into())]);
    }
}
