//! The slot-contexts spec (`--slot-contexts`, `FLASHLANE_SLOT_CONTEXTS`): the extra sessions
//! beside the engine's own, as `TOKENS` or `TOKENSxN` items separated by commas.
//!
//! Parsing is total: every string either yields a spec whose every size and count was checked
//! with checked arithmetic, or an error naming the offending item. A refused spec allocates
//! nothing: the whole string is validated before the item list is built.

use crate::{MARGIN, MAX_SESSIONS};
use std::fmt;

/// One item of the spec: `count` sessions of `tokens` nominal tokens each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpecItem {
    pub tokens: u64,
    pub count: usize,
}

impl SpecItem {
    /// The capacity a session of this item opens: nominal tokens plus [`MARGIN`]. Checked at parse.
    pub fn capacity(&self) -> u64 {
        self.tokens + MARGIN
    }
}

/// The extra sessions, in the order the user wrote them (the order they open in under the cap).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionSpec {
    items: Vec<SpecItem>,
}

/// What was wrong with one item of a spec.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("the spec is empty; give sizes like `16384,4096x6`, or leave it unset")]
    EmptySpec,
    #[error("an item is empty (two commas in a row, or a comma at an end)")]
    EmptyItem,
    #[error("sizes are positive token counts, not negative numbers")]
    Negative,
    #[error("`{text}` is not a whole number of tokens (digits only, e.g. `4096` or `4096x3`)")]
    NotDigits { text: String },
    #[error("`x` must be followed by a count of sessions, e.g. `4096x3`")]
    MissingCount,
    #[error("a session needs at least 1 token")]
    ZeroTokens,
    #[error("a count must be ≥ 1")]
    ZeroCount,
    #[error("the number is too large to represent")]
    Overflow,
    #[error("{tokens} tokens is more than the model can address ({max_tokens} tokens)")]
    TooLarge { tokens: u64, max_tokens: u64 },
    #[error("it brings the sessions to more than {max} in all (the engine's own included)")]
    TooMany { max: usize },
}

/// A refused spec: which item (1-based), its text, and what was wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError {
    pub item_number: usize,
    pub item: String,
    pub problem: Problem,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.problem == Problem::EmptySpec {
            return write!(f, "session spec: {}", self.problem);
        }
        write!(
            f,
            "session spec item {} `{}`: {}",
            self.item_number, self.item, self.problem
        )
    }
}

impl std::error::Error for SpecError {}

impl SessionSpec {
    /// Parses `spec`. `max_tokens` is the largest nominal session the model can address (its
    /// maximum position count); pass `u64::MAX - MARGIN` when the model sets no limit.
    pub fn parse(spec: &str, max_tokens: u64) -> Result<SessionSpec, SpecError> {
        let num_items = validate(spec, max_tokens)?;
        let mut items = Vec::with_capacity(num_items);
        for text in spec.split(',') {
            let item = parse_item(text.trim(), max_tokens).expect("validated above");
            items.push(item);
        }
        Ok(SessionSpec { items })
    }

    pub fn items(&self) -> &[SpecItem] {
        &self.items
    }

    /// How many extra sessions the spec opens (at most [`MAX_SESSIONS`] − 1, checked at parse).
    pub fn num_sessions(&self) -> usize {
        self.items.iter().map(|item| item.count).sum()
    }

    /// Each extra session's capacity (nominal + [`MARGIN`]), in the order written.
    pub fn capacities(&self) -> impl Iterator<Item = u64> + '_ {
        self.items
            .iter()
            .flat_map(|item| std::iter::repeat_n(item.capacity(), item.count))
    }
}

/// Checks the whole spec without allocating and returns its number of items.
fn validate(spec: &str, max_tokens: u64) -> Result<usize, SpecError> {
    if spec.trim().is_empty() {
        return Err(SpecError {
            item_number: 0,
            item: String::new(),
            problem: Problem::EmptySpec,
        });
    }
    // The engine's own session counts towards the hard maximum.
    let mut num_sessions: usize = 1;
    let mut num_items = 0;
    for (idx, text) in spec.split(',').enumerate() {
        let text = text.trim();
        let refuse = |problem| SpecError {
            item_number: idx + 1,
            item: text.to_string(),
            problem,
        };
        let item = parse_item(text, max_tokens).map_err(refuse)?;
        // Check the count against the sessions still allowed *before* anything is appended.
        let allowed = MAX_SESSIONS - num_sessions;
        if item.count > allowed {
            return Err(refuse(Problem::TooMany { max: MAX_SESSIONS }));
        }
        num_sessions += item.count;
        num_items += 1;
    }
    Ok(num_items)
}

fn parse_item(text: &str, max_tokens: u64) -> Result<SpecItem, Problem> {
    if text.is_empty() {
        return Err(Problem::EmptyItem);
    }
    let (tokens_text, count_text) = match text.find(['x', 'X']) {
        Some(at) => (&text[..at], Some(&text[at + 1..])),
        None => (text, None),
    };
    let tokens = parse_number(tokens_text)?;
    if tokens == 0 {
        return Err(Problem::ZeroTokens);
    }
    if tokens.checked_add(MARGIN).is_none() {
        return Err(Problem::Overflow);
    }
    if tokens > max_tokens {
        return Err(Problem::TooLarge { tokens, max_tokens });
    }
    let count = match count_text {
        None => 1,
        Some("") => return Err(Problem::MissingCount),
        Some(count_text) => {
            let count = parse_number(count_text)?;
            if count == 0 {
                return Err(Problem::ZeroCount);
            }
            usize::try_from(count).map_err(|_| Problem::Overflow)?
        }
    };
    Ok(SpecItem { tokens, count })
}

fn parse_number(text: &str) -> Result<u64, Problem> {
    if text.starts_with('-') {
        return Err(Problem::Negative);
    }
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Problem::NotDigits {
            text: text.to_string(),
        });
    }
    let mut value: u64 = 0;
    for digit in text.bytes() {
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(digit - b'0')))
            .ok_or(Problem::Overflow)?;
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNLIMITED: u64 = u64::MAX - MARGIN;

    fn problem(spec: &str) -> Problem {
        SessionSpec::parse(spec, UNLIMITED).unwrap_err().problem
    }

    #[test]
    fn seed_spec_expands_in_written_order() {
        let spec = SessionSpec::parse("65536,32768x3,16384x11", UNLIMITED).unwrap();
        assert_eq!(spec.num_sessions(), 15);
        let capacities: Vec<u64> = spec.capacities().collect();
        assert_eq!(capacities[0], 65568);
        assert_eq!(&capacities[1..4], &[32800; 3]);
        assert_eq!(&capacities[4..], &[16416; 11]);
    }

    #[test]
    fn whitespace_around_items_and_upper_case_x_are_accepted() {
        let spec = SessionSpec::parse(" 16384 , 4096X6 ", UNLIMITED).unwrap();
        assert_eq!(
            spec.items(),
            &[
                SpecItem {
                    tokens: 16384,
                    count: 1
                },
                SpecItem {
                    tokens: 4096,
                    count: 6
                }
            ]
        );
    }

    #[test]
    fn every_malformed_item_is_refused_by_name() {
        assert_eq!(problem(""), Problem::EmptySpec);
        assert_eq!(problem("  "), Problem::EmptySpec);
        assert_eq!(problem("4096,,512"), Problem::EmptyItem);
        assert_eq!(problem("4096,"), Problem::EmptyItem);
        assert_eq!(problem(",4096"), Problem::EmptyItem);
        assert_eq!(problem("0"), Problem::ZeroTokens);
        assert_eq!(problem("4096x0"), Problem::ZeroCount);
        assert_eq!(problem("-4096"), Problem::Negative);
        assert_eq!(problem("4096x-2"), Problem::Negative);
        assert_eq!(problem("4096x"), Problem::MissingCount);
        assert_eq!(
            problem("x3"),
            Problem::NotDigits {
                text: String::new()
            }
        );
        assert_eq!(problem("4k"), Problem::NotDigits { text: "4k".into() });
        assert_eq!(
            problem("+4096"),
            Problem::NotDigits {
                text: "+4096".into()
            }
        );
        assert_eq!(
            problem("4096x2x2"),
            Problem::NotDigits { text: "2x2".into() }
        );
        assert_eq!(
            problem("40 96"),
            Problem::NotDigits {
                text: "40 96".into()
            }
        );
    }

    #[test]
    fn error_names_the_item_and_says_what_to_do() {
        let err = SessionSpec::parse("16384,4096x0", UNLIMITED).unwrap_err();
        assert_eq!(err.item_number, 2);
        assert_eq!(
            err.to_string(),
            "session spec item 2 `4096x0`: a count must be ≥ 1"
        );
    }

    #[test]
    fn overflowing_numbers_are_refused() {
        // u64 overflow of the token count itself.
        assert_eq!(problem("18446744073709551616"), Problem::Overflow);
        // TOKENS + MARGIN overflowing.
        assert_eq!(problem(&(u64::MAX - 1).to_string()), Problem::Overflow);
        // A repeat count beyond u64.
        assert_eq!(problem("4096x99999999999999999999"), Problem::Overflow);
    }

    #[test]
    fn session_larger_than_the_model_addresses_is_refused() {
        let err = SessionSpec::parse("4096,65536", 32768).unwrap_err();
        assert_eq!(err.item_number, 2);
        assert_eq!(
            err.problem,
            Problem::TooLarge {
                tokens: 65536,
                max_tokens: 32768
            }
        );
        assert!(SessionSpec::parse("32768", 32768).is_ok());
    }

    #[test]
    fn too_many_sessions_are_refused_before_appending() {
        // The engine's own session counts: MAX_SESSIONS - 1 extra is the most.
        let most = format!("512x{}", MAX_SESSIONS - 1);
        assert_eq!(
            SessionSpec::parse(&most, UNLIMITED).unwrap().num_sessions(),
            MAX_SESSIONS - 1
        );
        let one_more = format!("512x{}", MAX_SESSIONS);
        assert_eq!(problem(&one_more), Problem::TooMany { max: MAX_SESSIONS });
        // Spread over items: the item that crosses the bound is named.
        let spread = format!("512x{},256x2", MAX_SESSIONS - 2);
        let err = SessionSpec::parse(&spread, UNLIMITED).unwrap_err();
        assert_eq!(err.item_number, 2);
        // A count that would overflow usize arithmetic if added unchecked.
        assert_eq!(
            problem(&format!("512x{}", usize::MAX)),
            Problem::TooMany { max: MAX_SESSIONS }
        );
    }
}
