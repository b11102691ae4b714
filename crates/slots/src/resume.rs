//! Paused streams and failed moves (design §6, design §14.4).
//!
//! Only "no free session" keeps a stream waiting. Any other failure of a move ends that stream
//! with an error and frees its session at once, so a paused stream can never be stranded waiting
//! on a release that will not come.

use crate::room::RoundStream;
use crate::table::SessionView;

/// Why a move did not happen.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MoveFault {
    /// No free session large enough (the engine's `LaneMemory`): wait for a release.
    #[error("no free larger session")]
    LaneMemory,
    /// The device failed while copying.
    #[error("device error during move: {0}")]
    Device(String),
    /// The stream's state had work in flight; a move must only copy settled state.
    #[error("state not settled")]
    NotSettled,
}

/// What happens to a stream whose move failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterMove {
    /// Stay paused; retry when a session frees.
    KeepWaiting,
    /// End the stream with reason `error`, free its session now, report the request failed.
    EndStream,
}

pub fn after_failed_move(fault: &MoveFault) -> AfterMove {
    match fault {
        MoveFault::LaneMemory => AfterMove::KeepWaiting,
        MoveFault::Device(_) | MoveFault::NotSettled => AfterMove::EndStream,
    }
}

/// Orders paused streams for retrying their moves: smallest session first (it has the most
/// sessions it could move into, so serving it first frees the most), then the older stream.
pub fn resume_order(sessions: &[SessionView], paused: &mut [RoundStream]) {
    paused.sort_by_key(|s| (sessions[s.session.0].capacity, s.stream));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{SessionId, SessionTable, StreamId};

    #[test]
    fn only_lane_memory_keeps_a_stream_waiting() {
        assert_eq!(
            after_failed_move(&MoveFault::LaneMemory),
            AfterMove::KeepWaiting
        );
        assert_eq!(
            after_failed_move(&MoveFault::Device("ecc".into())),
            AfterMove::EndStream
        );
        assert_eq!(
            after_failed_move(&MoveFault::NotSettled),
            AfterMove::EndStream
        );
    }

    #[test]
    fn paused_streams_resume_smallest_session_first_then_oldest() {
        let mut table = SessionTable::new(&[32800, 16416, 4128, 4128]);
        let mk = |stream, session| RoundStream {
            stream: StreamId(stream),
            session: SessionId(session),
            used_tokens: 0,
            reply_end: 40000,
            window: 1,
        };
        let mut paused = vec![mk(5, 1), mk(9, 3), mk(7, 2)];
        for s in &paused {
            table.take(s.session, s.stream);
        }
        resume_order(table.views(), &mut paused);
        let order: Vec<u64> = paused.iter().map(|s| s.stream.0).collect();
        assert_eq!(order, vec![7, 9, 5]);
    }
}
