//! The thinking budget: after `max_thinking_tokens` tokens inside `<think>`, the close tag is
//! forced as the next token, so a reasoning model cannot spend a whole reply thinking.
//!
//! A pure tracker over the stream's tokens: the engine asks which token (if any) is forced at the
//! next position, and tells it every token the stream emits. Forcing is a function of the
//! stream's own history only, so it never depends on the batch or on drafts: a draft that
//! disagrees with a forced token is rejected like any other.

/// A request's thinking budget, with the tokenizer's ids of the tags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThinkingBudget {
    pub open_token: u32,
    pub close_token: u32,
    /// Tokens allowed inside `<think>` before `</think>` is forced (0 closes at once).
    pub max_thinking_tokens: u64,
}

/// Where a stream is with respect to its thinking section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thinking {
    budget: ThinkingBudget,
    /// Inside an open `<think>` section.
    inside: bool,
    /// Tokens emitted inside the current section.
    spent: u64,
}

impl Thinking {
    /// Starts from the prompt: a chat template that opens `<think>` for the assistant leaves the
    /// stream inside the section before its first token.
    pub fn new(budget: ThinkingBudget, prompt: &[u32]) -> Thinking {
        let mut thinking = Thinking {
            budget,
            inside: false,
            spent: 0,
        };
        for &token in prompt {
            thinking.observe(token);
        }
        thinking.spent = 0;
        thinking
    }

    /// The token the next position must be, if the budget is spent.
    pub fn forced(&self) -> Option<u32> {
        (self.inside && self.spent >= self.budget.max_thinking_tokens)
            .then_some(self.budget.close_token)
    }

    /// Records a token the stream emitted.
    pub fn observe(&mut self, token: u32) {
        if token == self.budget.open_token {
            self.inside = true;
            self.spent = 0;
        } else if token == self.budget.close_token {
            self.inside = false;
        } else if self.inside {
            self.spent += 1;
        }
    }

    /// The forced token at each position of a window whose drafts are all accepted: position
    /// `i` follows `drafts[..i]`. One entry per draft plus one.
    pub fn forced_along(&self, drafts: &[u32]) -> Vec<Option<u32>> {
        let mut state = *self;
        let mut forced = Vec::with_capacity(drafts.len() + 1);
        forced.push(state.forced());
        for &draft in drafts {
            state.observe(draft);
            forced.push(state.forced());
        }
        forced
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: u32 = 100;
    const CLOSE: u32 = 101;

    fn budget(max_thinking_tokens: u64) -> ThinkingBudget {
        ThinkingBudget {
            open_token: OPEN,
            close_token: CLOSE,
            max_thinking_tokens,
        }
    }

    #[test]
    fn the_close_tag_is_forced_after_the_budget() {
        let mut t = Thinking::new(budget(3), &[1, 2]);
        assert_eq!(t.forced(), None);
        t.observe(OPEN);
        for token in [5, 6, 7] {
            assert_eq!(t.forced(), None);
            t.observe(token);
        }
        assert_eq!(t.forced(), Some(CLOSE));
        t.observe(CLOSE);
        assert_eq!(t.forced(), None);
        t.observe(9);
        assert_eq!(t.forced(), None, "text after thinking is not counted");
    }

    #[test]
    fn a_prompt_that_opens_thinking_starts_inside() {
        let t = Thinking::new(budget(0), &[1, OPEN]);
        assert_eq!(t.forced(), Some(CLOSE));
        let closed = Thinking::new(budget(0), &[1, OPEN, 4, CLOSE]);
        assert_eq!(closed.forced(), None);
    }

    #[test]
    fn closing_early_spends_nothing_more() {
        let mut t = Thinking::new(budget(10), &[OPEN]);
        t.observe(5);
        t.observe(CLOSE);
        assert_eq!(t.forced(), None);
    }

    #[test]
    fn forced_along_a_window_follows_the_drafts() {
        // Thinking written in the prompt is not the reply's: the budget counts from here.
        let t = Thinking::new(budget(2), &[OPEN, 5]);
        assert_eq!(t.forced_along(&[6, 7]), vec![None, None, Some(CLOSE)]);
        assert_eq!(t.forced_along(&[CLOSE, 7]), vec![None, None, None]);
    }
}
