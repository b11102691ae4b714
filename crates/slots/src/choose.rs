//! Which session a new stream takes.
//!
//! Two policies, chosen once from the configuration:
//! - [`Policy::FirstFree`] when no slot-contexts spec is set: the behaviour of a server with equal
//!   slots. The first free session, refused with `context_full` if the reply cannot fit; no growth
//!   allowance, no moves later.
//! - [`Policy::SmallestFit`] when a spec is set: the smallest free session that holds the prompt,
//!   the next `grow` tokens of the reply and one window. A request that fits the largest session
//!   waits for one rather than failing.

use crate::table::{SessionId, SessionView};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Spec unset: equal sessions, first free, no growth checks.
    FirstFree,
    /// Spec set: smallest free session holding prompt + min(max_new, grow) + window.
    SmallestFit { grow: u64 },
}

/// What a stream asks of its session, in tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Need {
    pub prompt_tokens: u64,
    pub max_new_tokens: u64,
    /// `1 + draft_tokens`: the positions one round may write.
    pub window: u64,
}

impl Need {
    /// `prompt + max_new + window`: no session smaller than this can be asked to hold the reply
    /// to its end. `None` when the sum overflows (a request no session can hold).
    pub fn reply_end(&self) -> Option<u64> {
        self.prompt_tokens
            .checked_add(self.max_new_tokens)?
            .checked_add(self.window)
    }

    /// The tokens a session must hold for a stream to start in it under `policy`.
    pub fn admission_tokens(&self, policy: Policy) -> Option<u64> {
        match policy {
            Policy::FirstFree => self.reply_end(),
            Policy::SmallestFit { grow } => self
                .prompt_tokens
                .checked_add(self.max_new_tokens.min(grow))?
                .checked_add(self.window),
        }
    }
}

/// The outcome of choosing a session for a new stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Start in this free session.
    Take(SessionId),
    /// No free session holds it now; one that does exists, so wait for it.
    Wait,
    /// No session could ever hold the reply: refuse the request (`context_full`).
    /// `reply_end` is `u64::MAX` when the request's own sum overflowed.
    ContextFull { reply_end: u64, largest: u64 },
}

/// Chooses a session for a stream needing `need`, under `policy`.
pub fn choose(sessions: &[SessionView], policy: Policy, need: Need) -> Choice {
    let largest = sessions.iter().map(|s| s.capacity).max().unwrap_or(0);
    let reply_end = need.reply_end().unwrap_or(u64::MAX);
    if reply_end > largest {
        return Choice::ContextFull { reply_end, largest };
    }
    match policy {
        Policy::FirstFree => match sessions.iter().find(|s| s.is_free()) {
            None => Choice::Wait,
            Some(first) if first.capacity >= reply_end => Choice::Take(first.id),
            Some(_) => Choice::ContextFull { reply_end, largest },
        },
        Policy::SmallestFit { .. } => {
            // reply_end fits, so the (smaller) admission need cannot overflow.
            let admission = need.admission_tokens(policy).unwrap_or(u64::MAX);
            smallest_free_holding(sessions, admission).map_or(Choice::Wait, Choice::Take)
        }
    }
}

/// Whether a stream needing `need` can start now (the admission hook of the set path).
pub fn fits(sessions: &[SessionView], policy: Policy, need: Need) -> bool {
    matches!(choose(sessions, policy, need), Choice::Take(_))
}

/// The smallest free session of at least `tokens` capacity; the lowest id among equals.
pub(crate) fn smallest_free_holding(sessions: &[SessionView], tokens: u64) -> Option<SessionId> {
    sessions
        .iter()
        .filter(|s| s.is_free() && s.capacity >= tokens)
        .min_by_key(|s| (s.capacity, s.id))
        .map(|s| s.id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{SessionTable, StreamId};

    fn need(prompt_tokens: u64, max_new_tokens: u64) -> Need {
        Need {
            prompt_tokens,
            max_new_tokens,
            window: 4,
        }
    }

    /// The receipt's eight sessions (design §13): 32800, 16416 and six of 4128.
    fn seed_table() -> SessionTable {
        SessionTable::new(&[32800, 16416, 4128, 4128, 4128, 4128, 4128, 4128])
    }

    const SET: Policy = Policy::SmallestFit { grow: 2048 };

    #[test]
    fn set_path_takes_the_smallest_free_session_holding_prompt_and_growth() {
        let table = seed_table();
        // 100 + min(20000, 2048) + 4 fits 4128 although the reply end does not.
        assert_eq!(
            choose(table.views(), SET, need(100, 20000)),
            Choice::Take(SessionId(2))
        );
        // 3000 + 2048 + 4 needs the 16K session.
        assert_eq!(
            choose(table.views(), SET, need(3000, 5000)),
            Choice::Take(SessionId(1))
        );
        // A short request with max_new below grow uses max_new.
        assert_eq!(
            choose(table.views(), SET, need(4000, 100)),
            Choice::Take(SessionId(2))
        );
    }

    #[test]
    fn set_path_waits_when_only_held_sessions_would_hold_it() {
        let mut table = seed_table();
        table.take(SessionId(1), StreamId(1));
        table.take(SessionId(0), StreamId(2));
        assert_eq!(choose(table.views(), SET, need(3000, 5000)), Choice::Wait);
        assert!(!fits(table.views(), SET, need(3000, 5000)));
        assert!(fits(table.views(), SET, need(100, 100)));
    }

    #[test]
    fn a_reply_end_beyond_the_largest_session_is_refused_at_once() {
        let table = seed_table();
        assert_eq!(
            choose(table.views(), SET, need(30000, 2797)),
            Choice::ContextFull {
                reply_end: 32801,
                largest: 32800
            }
        );
        assert_eq!(
            choose(table.views(), SET, need(30000, 2796)),
            Choice::Take(SessionId(0))
        );
        let overflow = need(u64::MAX - 2, 5);
        assert!(matches!(
            choose(table.views(), SET, overflow),
            Choice::ContextFull {
                reply_end: u64::MAX,
                ..
            }
        ));
    }

    #[test]
    fn unset_path_takes_first_free_not_smallest_fit() {
        // Pinned against smallest-fit: a tiny request takes session 0 although session 1 is smaller.
        let table = SessionTable::new(&[8224, 4128, 8224]);
        assert_eq!(
            choose(table.views(), Policy::FirstFree, need(10, 10)),
            Choice::Take(SessionId(0))
        );
        assert_eq!(
            choose(table.views(), SET, need(10, 10)),
            Choice::Take(SessionId(1))
        );
    }

    #[test]
    fn unset_path_refuses_what_the_first_free_session_cannot_hold() {
        let mut table = SessionTable::new(&[4128, 4128]);
        let too_long = need(100, 4100);
        assert!(matches!(
            choose(table.views(), Policy::FirstFree, too_long),
            Choice::ContextFull { .. }
        ));
        // No growth allowance: max_new counts whole, whatever grow would say.
        assert!(matches!(
            choose(table.views(), Policy::FirstFree, need(100, 4024)),
            Choice::Take(SessionId(0))
        ));
        table.take(SessionId(0), StreamId(1));
        table.take(SessionId(1), StreamId(2));
        assert_eq!(
            choose(table.views(), Policy::FirstFree, need(1, 1)),
            Choice::Wait
        );
    }
}
