//! # slots — where a stream lives, decided without a model
//!
//! flashlane cuts its KV/state memory into *sessions* of different sizes, allocated once at
//! start-up. Every decision about them is a pure function over plain data in this crate, so each
//! can be tested in a microsecond without tensors, threads or a GPU:
//!
//! | question | function |
//! |---|---|
//! | which extra sessions did the user ask for? | [`SessionSpec::parse`] |
//! | which of them fit under the memory cap? | [`plan`] |
//! | which session does a new stream take? | [`choose`], [`fits`] |
//! | which waiting request is admitted next? | [`admission::pick`] |
//! | before a round: hold, continue, move, pause or full? | [`room`], [`decide_round`] |
//! | a session freed: which paused stream moves where? | [`resume_order`], [`after_failed_move`] |
//!
//! [`SessionTable`] records which stream holds which session and asserts that no session is ever
//! held twice. The engine (`lane`) owns one table and applies these decisions to it.
//!
//! Units: sizes in tokens are `u64`, memory in bytes is `u64`; every sum uses checked arithmetic.

pub mod admission;
mod choose;
mod plan;
mod resume;
mod room;
mod spec;
mod table;

pub use choose::{choose, fits, Choice, Need, Policy};
pub use plan::{plan, Plan, PlanError, PlanInput, PlannedSession};
pub use resume::{after_failed_move, resume_order, AfterMove, MoveFault};
pub use room::{decide_round, room, Room, RoundStream};
pub use spec::{SessionSpec, SpecError, SpecItem};
pub use table::{SessionId, SessionTable, SessionView, StreamId};

/// Tokens added to every session's capacity so that a window that starts just inside the nominal
/// size always fits: `--context 32768` opens 32800 tokens. A window is `1 + draft_tokens`, so this
/// also bounds the draft length (see [`MAX_WINDOW`]).
pub const MARGIN: u64 = 32;

/// The widest window a round may verify: the sampled token plus drafts. Equal to [`MARGIN`], since
/// a window wider than the margin could overrun a session whose stream was told to continue.
pub const MAX_WINDOW: u64 = MARGIN;

/// The most sessions one engine may open (the engine's own plus the spec's). A bound so that a
/// typo like `4096x100000` is refused before anything is allocated; 256 concurrent streams is more
/// than any single machine we target serves with useful speed.
pub const MAX_SESSIONS: usize = 256;

/// Default growth allowance at admission (`--slot-grow`): a new stream takes a session that holds
/// its prompt and this many tokens of its reply, so a short answer never claims a long session
/// while a long one moves at most a few times.
pub const DEFAULT_SLOT_GROW: u64 = 8192;
