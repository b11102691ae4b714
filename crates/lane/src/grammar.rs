//! Constrained decoding: a grammar a stream's reply must follow (a JSON schema, a regex, a
//! tool-call format), as the engine sees it.
//!
//! The engine knows nothing of grammars themselves: the host compiles one (with llguidance, in
//! the binary) into a [`GrammarSource`], and each stream that uses it gets its own
//! [`GrammarState`] at admission. Every round the engine asks the state which tokens each position
//! of the stream's window allows ([`TokenMask`]), applies the masks to the stream's own rows only,
//! and tells the state the tokens the stream drew. So a constrained reply depends on its own
//! history only: the same alone or in a batch, and with drafts or without (drafts the grammar
//! rejects are cut before the window is computed, never verified).

use std::fmt;
use std::sync::Arc;

/// Why a grammar could not go on (a bug in the grammar engine, or a token it was never offered).
/// The stream ends with an error naming it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the grammar failed: {0}")]
pub struct GrammarError(pub String);

/// The tokens a constrained position allows: one bit per token id (bit `t % 32` of word
/// `t / 32`, as llguidance's masks are laid out), and whether the reply may end there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenMask {
    words: Vec<u32>,
    /// The grammar is complete here: the stream's stop tokens are allowed (and only then).
    may_end: bool,
}

impl TokenMask {
    /// A mask from its bit words; ids past the words' end are not allowed.
    pub fn from_words(words: Vec<u32>, may_end: bool) -> TokenMask {
        TokenMask { words, may_end }
    }

    /// A mask allowing exactly `tokens`.
    pub fn of(tokens: &[u32], vocab: usize, may_end: bool) -> TokenMask {
        let mut words = vec![0u32; vocab.div_ceil(32)];
        for &t in tokens {
            if (t as usize) < vocab {
                words[t as usize / 32] |= 1 << (t % 32);
            }
        }
        TokenMask { words, may_end }
    }

    pub fn allows(&self, token: u32) -> bool {
        self.words
            .get(token as usize / 32)
            .is_some_and(|w| w & (1 << (token % 32)) != 0)
    }

    pub fn may_end(&self) -> bool {
        self.may_end
    }

    /// Whether a stream with these stop tokens may draw `token` here.
    pub fn permits(&self, token: u32, stop_tokens: &[u32]) -> bool {
        if stop_tokens.contains(&token) {
            self.may_end
        } else {
            self.allows(token)
        }
    }

    /// Sets every logit the mask does not permit to −∞ (stop tokens: permitted exactly where the
    /// reply may end). What is permitted keeps its logit bit for bit.
    pub fn apply(&self, row: &mut [f32], stop_tokens: &[u32]) {
        let stop_logits: Vec<Option<f32>> = stop_tokens
            .iter()
            .map(|&t| row.get(t as usize).copied())
            .collect();
        for (w, chunk) in row.chunks_mut(32).enumerate() {
            let word = self.words.get(w).copied().unwrap_or(0);
            if word == u32::MAX {
                continue;
            }
            for (bit, logit) in chunk.iter_mut().enumerate() {
                if word & (1 << bit) == 0 {
                    *logit = f32::NEG_INFINITY;
                }
            }
        }
        for (&stop, was) in stop_tokens.iter().zip(stop_logits) {
            if let (Some(logit), Some(was)) = (row.get_mut(stop as usize), was) {
                *logit = if self.may_end { was } else { f32::NEG_INFINITY };
            }
        }
    }
}

/// One stream's place in its grammar. Stop tokens are the engine's business: they are never
/// passed to [`GrammarState::accept`], and a mask's [`TokenMask::may_end`] decides them.
pub trait GrammarState: Send {
    /// The tokens the next position allows.
    fn mask(&mut self) -> Result<TokenMask, GrammarError>;
    /// Records a token the stream drew (one the last mask allowed).
    fn accept(&mut self, token: u32) -> Result<(), GrammarError>;
    /// Forgets the last `tokens` accepted tokens (drafts looked ahead over).
    fn rollback(&mut self, tokens: usize) -> Result<(), GrammarError>;
    /// How many of `tokens`, in order from here, the grammar allows (nothing is recorded).
    fn valid_prefix(&mut self, tokens: &[u32]) -> Result<usize, GrammarError>;
    /// Nothing may follow: the reply is over (ends with `stop`).
    fn is_complete(&self) -> bool;
}

/// A compiled grammar, shared by every stream that asks for it: each gets a fresh state.
pub trait GrammarSource: Send + Sync {
    fn start(&self) -> Result<Box<dyn GrammarState>, GrammarError>;
    /// What the grammar is, for logs and `Debug` (e.g. `json_schema`).
    fn describe(&self) -> String;
}

/// A request's grammar. Two requests have equal grammars when they share one compiled source.
#[derive(Clone)]
pub struct Grammar(Arc<dyn GrammarSource>);

impl Grammar {
    pub fn new(source: Arc<dyn GrammarSource>) -> Grammar {
        Grammar(source)
    }

    pub fn start(&self) -> Result<Box<dyn GrammarState>, GrammarError> {
        self.0.start()
    }
}

impl fmt::Debug for Grammar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Grammar({})", self.0.describe())
    }
}

impl PartialEq for Grammar {
    fn eq(&self, other: &Grammar) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// The masks of a window's positions: position `i` follows `drafts[..i]` (one mask per draft plus
/// one). The state is left where it was.
pub fn masks_along(
    state: &mut dyn GrammarState,
    drafts: &[u32],
) -> Result<Vec<TokenMask>, GrammarError> {
    let mut masks = Vec::with_capacity(drafts.len() + 1);
    masks.push(state.mask()?);
    for (i, &draft) in drafts.iter().enumerate() {
        if let Err(error) = state.accept(draft) {
            state.rollback(i)?;
            return Err(error);
        }
        masks.push(state.mask()?);
    }
    state.rollback(drafts.len())?;
    Ok(masks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mask_keeps_allowed_logits_bit_for_bit_and_bans_the_rest() {
        let mask = TokenMask::of(&[1, 3, 40], 64, false);
        let mut row: Vec<f32> = (0..64).map(|i| i as f32 * 0.5 - 3.0).collect();
        let original = row.clone();
        mask.apply(&mut row, &[3]);
        for (t, (&got, &was)) in row.iter().zip(&original).enumerate() {
            if t == 1 || t == 40 {
                assert_eq!(got.to_bits(), was.to_bits(), "token {t}");
            } else {
                assert_eq!(got, f32::NEG_INFINITY, "token {t}");
            }
        }
        // A stop token is allowed exactly where the grammar may end, whatever its bit says.
        let ending = TokenMask::of(&[1], 64, true);
        let mut row = original.clone();
        ending.apply(&mut row, &[5]);
        assert_eq!(row[5], original[5], "a stop token the bits leave out");
        let mut row = original.clone();
        ending.apply(&mut row, &[3]);
        assert_eq!(row[3], original[3]);
        assert!(ending.permits(3, &[3]) && !mask.permits(3, &[3]));
        assert!(!mask.allows(64) && !mask.allows(1000), "past the end");
    }

    #[test]
    fn a_row_longer_than_the_mask_bans_the_ids_past_it() {
        let mask = TokenMask::of(&[0], 10, false);
        let mut row = vec![1.0; 70];
        mask.apply(&mut row, &[]);
        assert_eq!(row[0], 1.0);
        assert!(row[1..].iter().all(|&l| l == f32::NEG_INFINITY));
    }
}
