//! Before each round: does every running stream still have room for its next window?
//!
//! The decision looks at the reply's *remaining work*, not only at the next window (the seed
//! review's first point): a stream whose session holds its whole reply end never moves or pauses,
//! however many drafts are rejected near the limit, and a stream only ever waits for a larger
//! session that exists.

use crate::choose::smallest_free_holding;
use crate::table::{SessionId, SessionView, StreamId};
use crate::MARGIN;

/// What a stream does before the next round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Room {
    /// Its session holds the whole reply end: run, and never move or pause.
    Hold,
    /// The next window fits inside the nominal size (capacity − MARGIN): run.
    Continue,
    /// Outgrowing: move to this free, strictly larger session at this round's boundary.
    Move(SessionId),
    /// Outgrowing, no larger session free now but one exists: skip rounds until one frees.
    /// Nothing is lost: the stream's tokens still fit inside its capacity.
    Pause,
    /// Outgrowing and no larger session exists at all. Unreachable when admission checked the
    /// reply end against the largest session; the engine ends such a stream with an error.
    Full,
}

/// What `room` needs to know of one stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoundStream {
    pub stream: StreamId,
    pub session: SessionId,
    /// Positions already written to the session (the stream's position count).
    pub used_tokens: u64,
    /// `prompt + max_new + window`, from [`crate::Need::reply_end`].
    pub reply_end: u64,
    /// Positions the next round may write: `1 + draft_tokens`.
    pub window: u64,
}

/// The decision for one stream, given every session's capacity and holder.
pub fn room(sessions: &[SessionView], stream: &RoundStream) -> Room {
    let own = &sessions[stream.session.0];
    debug_assert_eq!(
        own.holder,
        Some(stream.stream),
        "{} decides room in {} held by {:?}",
        stream.stream,
        stream.session,
        own.holder
    );
    debug_assert!(
        stream.used_tokens <= own.capacity,
        "{} has {} tokens in {} of capacity {}",
        stream.stream,
        stream.used_tokens,
        stream.session,
        own.capacity
    );
    if own.capacity >= stream.reply_end {
        return Room::Hold;
    }
    let nominal = own.capacity.saturating_sub(MARGIN);
    if stream.used_tokens.saturating_add(stream.window) <= nominal {
        return Room::Continue;
    }
    // Strictly larger: `capacity + 1` cannot overflow since own.capacity < reply_end ≤ u64::MAX.
    if let Some(to) = smallest_free_holding(sessions, own.capacity + 1) {
        return Room::Move(to);
    }
    if sessions.iter().any(|s| s.capacity > own.capacity) {
        Room::Pause
    } else {
        Room::Full
    }
}

/// Decides every stream of a round in the order given, applying each move to a copy of the
/// sessions so that two streams never move into the same free session, and a session vacated by
/// an earlier move is free for a later stream. The engine passes paused streams first (in
/// [`crate::resume_order`]) so that those that waited longest get the first free session.
pub fn decide_round(sessions: &[SessionView], streams: &[RoundStream]) -> Vec<(StreamId, Room)> {
    let mut sessions = sessions.to_vec();
    let mut decisions = Vec::with_capacity(streams.len());
    for stream in streams {
        let decision = room(&sessions, stream);
        if let Room::Move(to) = decision {
            sessions[stream.session.0].holder = None;
            sessions[to.0].holder = Some(stream.stream);
        }
        decisions.push((stream.stream, decision));
    }
    decisions
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::SessionTable;

    /// 4K, 16K and the engine's 32K, as in the growing-reply receipt (design §13).
    fn ladder() -> SessionTable {
        SessionTable::new(&[32800, 16416, 4128])
    }

    fn stream_in(
        table: &mut SessionTable,
        session: usize,
        used_tokens: u64,
        reply_end: u64,
    ) -> RoundStream {
        let stream = RoundStream {
            stream: StreamId(session as u64 + 100),
            session: SessionId(session),
            used_tokens,
            reply_end,
            window: 4,
        };
        if table.holder(SessionId(session)).is_none() {
            table.take(SessionId(session), stream.stream);
        }
        stream
    }

    #[test]
    fn a_session_holding_the_reply_end_holds_however_full() {
        let mut table = ladder();
        // Every position used up to the last window: still Hold, never Pause.
        for used in [0, 4000, 4120, 4124] {
            let s = stream_in(&mut table, 2, used, 4128);
            assert_eq!(room(table.views(), &s), Room::Hold, "used {used}");
        }
    }

    #[test]
    fn near_limit_rounds_with_every_draft_but_one_rejected_never_pause_when_held() {
        // A stream in the largest session whose reply end it holds: each round accepts only one of
        // its four positions, so it creeps up to the limit one token at a time. It never pauses.
        let mut table = ladder();
        let reply_end = 32800;
        let mut s = stream_in(&mut table, 0, 32700, reply_end);
        while s.used_tokens + s.window <= reply_end {
            assert_eq!(room(table.views(), &s), Room::Hold);
            s.used_tokens += 1; // 3 of 4 window positions rejected
        }
        // And in a smaller session that holds its reply: the same.
        let mut small = stream_in(&mut table, 2, 4000, 4128);
        while small.used_tokens + small.window <= 4128 {
            assert_eq!(room(table.views(), &small), Room::Hold);
            small.used_tokens += 1;
        }
    }

    #[test]
    fn an_outgrowing_stream_continues_while_the_next_window_fits_the_nominal_size() {
        let mut table = ladder();
        // 4128 capacity, nominal 4096: windows of 4 fit while used + 4 ≤ 4096.
        let s = stream_in(&mut table, 2, 4092, 19000);
        assert_eq!(room(table.views(), &s), Room::Continue);
        let s = RoundStream {
            used_tokens: 4093,
            ..s
        };
        assert_eq!(room(table.views(), &s), Room::Move(SessionId(1)));
    }

    #[test]
    fn outgrowing_moves_to_the_smallest_free_larger_session() {
        let mut table = ladder();
        let s = stream_in(&mut table, 2, 4093, 19000);
        assert_eq!(room(table.views(), &s), Room::Move(SessionId(1)));
        // From 16K the next step is the engine's session.
        let mut table = ladder();
        let s = stream_in(&mut table, 1, 16381, 19000);
        assert_eq!(room(table.views(), &s), Room::Move(SessionId(0)));
    }

    #[test]
    fn outgrowing_pauses_on_a_round_that_still_fits_when_no_larger_is_free() {
        let mut table = ladder();
        table.take(SessionId(0), StreamId(1));
        table.take(SessionId(1), StreamId(2));
        let s = stream_in(&mut table, 2, 4093, 19000);
        assert_eq!(room(table.views(), &s), Room::Pause);
        // It still fits: a paused stream loses nothing.
        assert!(s.used_tokens <= table.capacity(s.session));
    }

    #[test]
    fn no_wait_for_a_larger_session_that_does_not_exist() {
        let mut table = SessionTable::new(&[4128, 4128]);
        table.take(SessionId(1), StreamId(1));
        let s = stream_in(&mut table, 0, 4093, 5000);
        assert_eq!(room(table.views(), &s), Room::Full);
        // An equal-sized free session is not larger: still Full, not Move.
        table.release(SessionId(1), StreamId(1));
        assert_eq!(room(table.views(), &s), Room::Full);
    }

    #[test]
    fn two_outgrowing_at_once_one_moves_the_other_pauses() {
        let mut table = SessionTable::new(&[32800, 4128, 4128, 4128]);
        let a = stream_in(&mut table, 1, 4093, 19000);
        let b = stream_in(&mut table, 2, 4093, 19000);
        let decisions = decide_round(table.views(), &[a, b]);
        assert_eq!(
            decisions,
            vec![
                (a.stream, Room::Move(SessionId(0))),
                (b.stream, Room::Pause)
            ]
        );
    }

    #[test]
    fn a_session_vacated_by_a_move_serves_a_later_stream_in_the_same_round() {
        let mut table = SessionTable::new(&[32800, 16416, 4128]);
        let a = stream_in(&mut table, 1, 16381, 19000);
        let b = stream_in(&mut table, 2, 4093, 10000);
        let decisions = decide_round(table.views(), &[a, b]);
        assert_eq!(
            decisions,
            vec![
                (a.stream, Room::Move(SessionId(0))),
                (b.stream, Room::Move(SessionId(1)))
            ]
        );
    }
}
