//! From token ids to the text a client sees: incremental decoding that never splits a UTF-8
//! character, and stop strings matched across token boundaries and never emitted.

/// Turns token ids into text (the model's tokenizer).
pub trait Detokenizer {
    fn decode(&self, ids: &[u32]) -> String;
}

/// Decodes a growing list of tokens piece by piece. Text is re-decoded from a few tokens back
/// (`prefix_idx`) because tokenizers merge bytes and spaces across token boundaries; a piece that
/// ends inside a multi-byte character (decoded as U+FFFD) is held until the next token completes it.
#[derive(Debug, Default)]
pub struct IncrementalDecoder {
    tokens: Vec<u32>,
    prefix_idx: usize,
    read_idx: usize,
}

impl IncrementalDecoder {
    /// Adds one token and returns the new text it completes (possibly empty).
    pub fn push(&mut self, detok: &dyn Detokenizer, token: u32) -> String {
        self.tokens.push(token);
        let prefix = detok.decode(&self.tokens[self.prefix_idx..self.read_idx]);
        let full = detok.decode(&self.tokens[self.prefix_idx..]);
        if full.len() <= prefix.len() || full.ends_with('\u{FFFD}') || !full.starts_with(&prefix) {
            return String::new();
        }
        let piece = full[prefix.len()..].to_string();
        self.prefix_idx = self.read_idx;
        self.read_idx = self.tokens.len();
        piece
    }

    /// The text held back at the end of the reply (an incomplete character is shown as U+FFFD).
    pub fn finish(&mut self, detok: &dyn Detokenizer) -> String {
        let prefix = detok.decode(&self.tokens[self.prefix_idx..self.read_idx]);
        let full = detok.decode(&self.tokens[self.prefix_idx..]);
        self.prefix_idx = self.tokens.len();
        self.read_idx = self.tokens.len();
        full.strip_prefix(&prefix)
            .map(str::to_string)
            .unwrap_or_default()
    }
}

/// What [`StopMatcher::push`] found.
#[derive(Debug, PartialEq, Eq)]
pub struct Matched {
    /// Text safe to send now.
    pub emit: String,
    /// A stop string was found: the reply ends here, the stop string itself is not sent.
    pub stopped: bool,
}

/// Finds stop strings in a text that arrives in pieces. Text that could still be the start of a
/// stop string is held back until the next piece decides it.
#[derive(Debug)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// The stop string that ends the text is emitted too (vLLM's `include_stop_str_in_output`).
    include: bool,
    held: String,
    /// The first bytes of `held` that were sent already, unmatched ([`StopMatcher::pass`]): a
    /// stop string may start in them but must end after them.
    sent: usize,
    /// The stop string that ended the text, once one has.
    matched: Option<usize>,
}

impl StopMatcher {
    pub fn new(stops: Vec<String>) -> StopMatcher {
        StopMatcher {
            stops,
            include: false,
            held: String::new(),
            sent: 0,
            matched: None,
        }
    }

    pub fn push(&mut self, piece: &str) -> Matched {
        self.held.push_str(piece);
        let sent = self.sent;
        // The stop that starts first (ending after what was sent unmatched); of two starting
        // together, the first listed.
        let first_stop = self
            .stops
            .iter()
            .enumerate()
            .filter_map(|(which, stop)| {
                self.held
                    .match_indices(stop.as_str())
                    .map(|(at, _)| at)
                    .find(|&at| at + stop.len() > sent)
                    .map(|at| (at, which))
            })
            .min();
        if let Some((at, which)) = first_stop {
            self.matched = Some(which);
            let end = match self.include {
                true => at + self.stops[which].len(),
                false => at,
            };
            let emit = self.held[sent.min(end)..end].to_string();
            self.held.clear();
            self.sent = 0;
            return Matched {
                emit,
                stopped: true,
            };
        }
        let keep = self.longest_stop_prefix_suffix();
        let split = self.held.len() - keep;
        let emit = self.held[sent.min(split)..split].to_string();
        self.held.drain(..split);
        self.sent = sent.saturating_sub(split);
        Matched {
            emit,
            stopped: false,
        }
    }

    /// Text sent as it comes, unmatched (before `min_tokens`): its end is kept, as much as a stop
    /// string could start in, for the text that follows to be matched with.
    pub fn pass(&mut self, piece: &str) -> String {
        debug_assert_eq!(self.sent, self.held.len(), "S1: nothing unsent is held");
        self.held.push_str(piece);
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        let mut cut = self.held.len().saturating_sub(longest.saturating_sub(1));
        while !self.held.is_char_boundary(cut) {
            cut -= 1;
        }
        self.held.drain(..cut);
        self.sent = self.held.len();
        piece.to_string()
    }

    /// Emits the stop string that ends the text, after the text before it.
    pub fn including_stops(mut self) -> StopMatcher {
        self.include = true;
        self
    }

    /// The stop string that ended the text (Anthropic's `stop_sequence`).
    pub fn matched(&self) -> Option<&str> {
        self.matched.map(|which| self.stops[which].as_str())
    }

    /// Whatever is held back (and not sent yet) when the reply ends without a stop.
    pub fn finish(&mut self) -> String {
        let sent = std::mem::take(&mut self.sent);
        let held = std::mem::take(&mut self.held);
        held[sent.min(held.len())..].to_string()
    }

    /// Bytes at the end of `held` that are a proper prefix of some stop string.
    fn longest_stop_prefix_suffix(&self) -> usize {
        let held = &self.held;
        (1..=held.len())
            .rev()
            .filter(|&n| held.is_char_boundary(held.len() - n))
            .find(|&n| {
                let tail = &held[held.len() - n..];
                self.stops
                    .iter()
                    .any(|stop| stop.len() > n && stop.starts_with(tail))
            })
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each id is one byte; ids ≥ 256 are multi-byte pieces of "é" (0xC3 0xA9) split in two.
    struct Bytes;

    impl Detokenizer for Bytes {
        fn decode(&self, ids: &[u32]) -> String {
            let bytes: Vec<u8> = ids
                .iter()
                .map(|&id| match id {
                    256 => 0xC3,
                    257 => 0xA9,
                    id => id as u8,
                })
                .collect();
            String::from_utf8_lossy(&bytes).into_owned()
        }
    }

    #[test]
    fn a_character_split_across_tokens_is_sent_whole() {
        let mut decoder = IncrementalDecoder::default();
        assert_eq!(decoder.push(&Bytes, b'a' as u32), "a");
        assert_eq!(decoder.push(&Bytes, 256), "");
        assert_eq!(decoder.push(&Bytes, 257), "é");
        assert_eq!(decoder.push(&Bytes, b'!' as u32), "!");
        assert_eq!(decoder.finish(&Bytes), "");
    }

    #[test]
    fn an_incomplete_character_at_the_end_is_flushed_on_finish() {
        let mut decoder = IncrementalDecoder::default();
        decoder.push(&Bytes, b'a' as u32);
        assert_eq!(decoder.push(&Bytes, 256), "");
        assert_eq!(decoder.finish(&Bytes), "\u{FFFD}");
    }

    #[test]
    fn a_stop_string_across_pieces_is_found_and_not_sent() {
        let mut matcher = StopMatcher::new(vec!["END".into()]);
        assert_eq!(
            matcher.push("hello E"),
            Matched {
                emit: "hello ".into(),
                stopped: false
            }
        );
        assert_eq!(
            matcher.push("N"),
            Matched {
                emit: String::new(),
                stopped: false
            }
        );
        assert_eq!(
            matcher.push("Dgame"),
            Matched {
                emit: String::new(),
                stopped: true
            }
        );
        assert_eq!(matcher.matched(), Some("END"));
        // Included: the same place, the stop string sent.
        let mut matcher = StopMatcher::new(vec!["END".into()]).including_stops();
        assert_eq!(matcher.push("hello E").emit, "hello ");
        assert_eq!(matcher.push("NDgame").emit, "END");
    }

    #[test]
    fn a_stop_string_may_start_in_text_sent_unmatched_and_end_after_it() {
        // As before `min_tokens`: "a\n" is sent unmatched, then "\nb" completes the stop.
        let mut matcher = StopMatcher::new(vec!["\n\n".into(), "xyz".into()]);
        assert_eq!(matcher.pass("a\n"), "a\n");
        let matched = matcher.push("\nb");
        assert_eq!((matched.emit.as_str(), matched.stopped), ("", true));
        assert_eq!(matcher.matched(), Some("\n\n"));
        // A stop wholly inside the sent text is not one; the rest goes out once.
        let mut matcher = StopMatcher::new(vec!["xyz".into()]);
        assert_eq!(matcher.pass("axyz"), "axyz");
        assert_eq!(matcher.pass("x"), "x");
        let matched = matcher.push("y");
        assert_eq!((matched.emit.as_str(), matched.stopped), ("", false));
        let matched = matcher.push("q tail");
        assert_eq!((matched.emit.as_str(), matched.stopped), ("yq tail", false));
        assert_eq!(matcher.finish(), "");
        // Included, the part of the stop after the sent text.
        let mut matcher = StopMatcher::new(vec!["END".into()]).including_stops();
        matcher.pass("E");
        assert_eq!(matcher.push("ND!").emit, "ND");
    }

    #[test]
    fn held_text_that_does_not_become_a_stop_is_released() {
        let mut matcher = StopMatcher::new(vec!["END".into(), "\n\n".into()]);
        assert_eq!(matcher.push("E").emit, "");
        assert_eq!(matcher.push("Nx").emit, "ENx");
        assert_eq!(matcher.push("a\n").emit, "a");
        assert_eq!(matcher.push("b").emit, "\nb");
        assert_eq!(matcher.push("tail E").emit, "tail ");
        assert_eq!(matcher.finish(), "E");
    }

    #[test]
    fn the_earliest_of_several_stops_wins() {
        let mut matcher = StopMatcher::new(vec!["cd".into(), "b".into()]);
        assert_eq!(
            matcher.push("abcd"),
            Matched {
                emit: "a".into(),
                stopped: true
            }
        );
        assert_eq!(matcher.matched(), Some("b"));
        // Two that start together: the first listed.
        let mut matcher = StopMatcher::new(vec!["xy".into(), "x".into()]);
        assert_eq!(matcher.matched(), None);
        assert_eq!(matcher.push("axyz").emit, "a");
        assert_eq!(matcher.matched(), Some("xy"));
    }

    #[test]
    fn multibyte_text_is_never_split_mid_character() {
        let mut matcher = StopMatcher::new(vec!["éx".into()]);
        assert_eq!(matcher.push("aé").emit, "a");
        assert_eq!(matcher.push("y").emit, "éy");
    }
}
