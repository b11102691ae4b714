//! Which waiting request starts next.
//!
//! With a spec set, a request waits in the admission queue until a session that holds it is free.
//! A later request that fits now may go ahead of a waiting head (no head-of-line blocking), but
//! only [`HEAD_PASS_LIMIT`] times: after that nothing passes the head until it is admitted, so a
//! large request is never starved by a stream of small ones. With no spec set the queue is plain
//! first-in first-out, as on a server with equal slots.

use crate::choose::{choose, Choice, Need, Policy};
use crate::table::{SessionId, SessionView};

/// How many later requests may start ahead of the request at the head of the queue before the
/// head is served first. Large enough that a burst of short requests is not held up behind one
/// long one; small enough that the long one waits at most a few short replies.
pub const HEAD_PASS_LIMIT: u32 = 8;

/// The outcome of one look at the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    /// Start the request at `queue_idx` in `session`.
    Admit {
        queue_idx: usize,
        session: SessionId,
    },
    /// The request at `queue_idx` can never fit: answer it with `context_full`.
    Refuse {
        queue_idx: usize,
        reply_end: u64,
        largest: u64,
    },
    /// Nothing can start now.
    Nothing,
}

/// Looks at the waiting requests (oldest first). `head_passes` counts how many requests have
/// started ahead of the current head; the engine resets it when the head starts.
pub fn pick(sessions: &[SessionView], policy: Policy, waiting: &[Need], head_passes: u32) -> Pick {
    let Some((head, rest)) = waiting.split_first() else {
        return Pick::Nothing;
    };
    match consider(sessions, policy, 0, *head) {
        Some(pick) => return pick,
        None if policy == Policy::FirstFree || head_passes >= HEAD_PASS_LIMIT => {
            return Pick::Nothing
        }
        None => {}
    }
    rest.iter()
        .enumerate()
        .find_map(|(idx, need)| consider(sessions, policy, idx + 1, *need))
        .unwrap_or(Pick::Nothing)
}

fn consider(
    sessions: &[SessionView],
    policy: Policy,
    queue_idx: usize,
    need: Need,
) -> Option<Pick> {
    match choose(sessions, policy, need) {
        Choice::Take(session) => Some(Pick::Admit { queue_idx, session }),
        Choice::ContextFull { reply_end, largest } => Some(Pick::Refuse {
            queue_idx,
            reply_end,
            largest,
        }),
        Choice::Wait => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{SessionTable, StreamId};

    const SET: Policy = Policy::SmallestFit { grow: 512 };

    fn need(prompt_tokens: u64) -> Need {
        Need {
            prompt_tokens,
            max_new_tokens: 64,
            window: 1,
        }
    }

    /// A large session held, a small one free: a large request waits at the head.
    fn blocked_head_table() -> SessionTable {
        let mut table = SessionTable::new(&[8224, 1056]);
        table.take(SessionId(0), StreamId(1));
        table
    }

    #[test]
    fn a_later_request_that_fits_passes_a_blocked_head() {
        let table = blocked_head_table();
        let waiting = [need(4000), need(100)];
        assert_eq!(
            pick(table.views(), SET, &waiting, 0),
            Pick::Admit {
                queue_idx: 1,
                session: SessionId(1)
            }
        );
    }

    #[test]
    fn after_the_bound_the_head_is_served_first() {
        let table = blocked_head_table();
        let waiting = [need(4000), need(100)];
        assert_eq!(
            pick(table.views(), SET, &waiting, HEAD_PASS_LIMIT),
            Pick::Nothing
        );
        assert_eq!(
            pick(table.views(), SET, &waiting, HEAD_PASS_LIMIT - 1),
            Pick::Admit {
                queue_idx: 1,
                session: SessionId(1)
            }
        );
    }

    #[test]
    fn the_head_starts_as_soon_as_its_session_frees() {
        let mut table = blocked_head_table();
        table.release(SessionId(0), StreamId(1));
        let waiting = [need(4000), need(100)];
        assert_eq!(
            pick(table.views(), SET, &waiting, HEAD_PASS_LIMIT),
            Pick::Admit {
                queue_idx: 0,
                session: SessionId(0)
            }
        );
    }

    #[test]
    fn unset_path_is_first_in_first_out() {
        let mut table = SessionTable::new(&[4128, 4128]);
        table.take(SessionId(0), StreamId(1));
        table.take(SessionId(1), StreamId(2));
        assert_eq!(
            pick(table.views(), Policy::FirstFree, &[need(10), need(10)], 0),
            Pick::Nothing
        );
        table.release(SessionId(1), StreamId(2));
        assert_eq!(
            pick(table.views(), Policy::FirstFree, &[need(10), need(10)], 0),
            Pick::Admit {
                queue_idx: 0,
                session: SessionId(1)
            }
        );
    }

    #[test]
    fn a_request_no_session_can_hold_is_refused() {
        let table = blocked_head_table();
        let waiting = [need(9000)];
        assert!(matches!(
            pick(table.views(), SET, &waiting, 0),
            Pick::Refuse { queue_idx: 0, .. }
        ));
        assert_eq!(pick(table.views(), SET, &[], 0), Pick::Nothing);
    }
}
