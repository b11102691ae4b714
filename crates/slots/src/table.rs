//! Who holds which session. A session is free or held by exactly one stream; the table asserts
//! both sides of every take/release pair so that a double hold or a stray release is caught where
//! it happens, with the ids in the message.

use std::fmt;

/// Index of a session in the table, in the order sessions were opened (the engine's own first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionId(pub usize);

/// A stream's id, unique for the life of the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId(pub u64);

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "session {}", self.0)
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stream {}", self.0)
    }
}

/// What a decision needs to know of one session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionView {
    pub id: SessionId,
    pub capacity: u64,
    pub holder: Option<StreamId>,
}

impl SessionView {
    pub fn is_free(&self) -> bool {
        self.holder.is_none()
    }
}

/// The sessions opened at start-up and their holders.
#[derive(Clone, Debug)]
pub struct SessionTable {
    sessions: Vec<SessionView>,
}

impl SessionTable {
    /// Sessions with these capacities (tokens, margin included), all free.
    pub fn new(capacities: &[u64]) -> SessionTable {
        let sessions = capacities
            .iter()
            .enumerate()
            .map(|(idx, &capacity)| SessionView {
                id: SessionId(idx),
                capacity,
                holder: None,
            })
            .collect();
        SessionTable { sessions }
    }

    pub fn views(&self) -> &[SessionView] {
        &self.sessions
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    pub fn capacity(&self, id: SessionId) -> u64 {
        self.sessions[id.0].capacity
    }

    pub fn holder(&self, id: SessionId) -> Option<StreamId> {
        self.sessions[id.0].holder
    }

    pub fn num_free(&self) -> usize {
        self.sessions.iter().filter(|s| s.is_free()).count()
    }

    /// The session `stream` holds, if any.
    pub fn session_of(&self, stream: StreamId) -> Option<SessionId> {
        self.sessions
            .iter()
            .find(|s| s.holder == Some(stream))
            .map(|s| s.id)
    }

    /// The largest capacity of any session, free or held.
    pub fn largest_capacity(&self) -> u64 {
        self.sessions.iter().map(|s| s.capacity).max().unwrap_or(0)
    }

    /// `stream` takes the free session `id`.
    pub fn take(&mut self, id: SessionId, stream: StreamId) {
        debug_assert!(
            self.session_of(stream).is_none(),
            "{stream} takes {id} while holding {:?}",
            self.session_of(stream)
        );
        let session = &mut self.sessions[id.0];
        assert!(
            session.holder.is_none(),
            "{stream} takes {id}, already held by {:?}",
            session.holder
        );
        session.holder = Some(stream);
    }

    /// `stream` gives back the session `id` it holds.
    pub fn release(&mut self, id: SessionId, stream: StreamId) {
        let session = &mut self.sessions[id.0];
        assert_eq!(
            session.holder,
            Some(stream),
            "{stream} releases {id}, held by {:?}",
            session.holder
        );
        session.holder = None;
    }

    /// `stream` moves from `from` (which it holds) into the free session `to`.
    pub fn transfer(&mut self, from: SessionId, to: SessionId, stream: StreamId) {
        debug_assert!(
            self.capacity(to) > self.capacity(from),
            "{stream} moves from {from} to {to}, which is not larger"
        );
        self.release(from, stream);
        self.take(to, stream);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_release_and_transfer_track_the_holder() {
        let mut table = SessionTable::new(&[4128, 1056]);
        table.take(SessionId(1), StreamId(7));
        assert_eq!(table.session_of(StreamId(7)), Some(SessionId(1)));
        assert_eq!(table.num_free(), 1);
        table.transfer(SessionId(1), SessionId(0), StreamId(7));
        assert_eq!(table.holder(SessionId(0)), Some(StreamId(7)));
        assert!(table.views()[1].is_free());
        table.release(SessionId(0), StreamId(7));
        assert_eq!(table.num_free(), 2);
    }

    #[test]
    #[should_panic(expected = "already held")]
    fn a_session_is_never_held_twice() {
        let mut table = SessionTable::new(&[4128]);
        table.take(SessionId(0), StreamId(1));
        table.take(SessionId(0), StreamId(2));
    }

    #[test]
    #[should_panic(expected = "releases session 0")]
    fn only_the_holder_releases() {
        let mut table = SessionTable::new(&[4128]);
        table.take(SessionId(0), StreamId(1));
        table.release(SessionId(0), StreamId(2));
    }
}
