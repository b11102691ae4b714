//! Planning sessions under the memory cap (design §3).
//!
//! `room = cap − ready − margin − reserved`. Sessions open in order — the engine's own first, then
//! the spec's items as written — while they fit in the room; the first that does not fit and all
//! after it are dropped and reported, so the plan is always a prefix of what was asked for and the
//! user's order is their priority. If not even the engine's session fits, planning fails with the
//! numbers.

use crate::spec::SessionSpec;
use crate::{MARGIN, MAX_SESSIONS};

/// Sessions opened when no spec is set and `--parallel` is not given.
pub const DEFAULT_PARALLEL: usize = 4;

/// Everything the plan depends on. Sizes in tokens, memory in bytes.
#[derive(Clone, Copy, Debug)]
pub struct PlanInput<'a> {
    /// `--context`: the engine's session, nominal tokens.
    pub context_tokens: u64,
    /// `--parallel`; `None` takes the default (1 + extra sessions, or [`DEFAULT_PARALLEL`]).
    pub parallel: Option<usize>,
    pub spec: Option<&'a SessionSpec>,
    /// KV bytes one token takes in a session (all full-attention layers, MTP layer included).
    pub bytes_per_token: u64,
    /// Bytes a session takes whatever its size (recurrent and conv states, MTP hidden row).
    pub fixed_state_bytes: u64,
    /// The memory cap (`--load-limit-gb`).
    pub cap_bytes: u64,
    /// Bytes already taken before sessions: weights and scratch.
    pub ready_bytes: u64,
    /// Safety reserve kept free under the cap.
    pub margin_bytes: u64,
    /// The prompt-cache budget.
    pub reserved_bytes: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedSession {
    /// Tokens, margin included.
    pub capacity: u64,
    pub bytes: u64,
}

/// Why a session asked for was not opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// It did not fit in the room left under the cap.
    Memory,
    /// `--parallel` allows fewer sessions than were listed.
    Parallel,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DroppedSession {
    pub capacity: u64,
    pub bytes: u64,
    pub reason: DropReason,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Opened sessions; index 0 is the engine's session.
    pub sessions: Vec<PlannedSession>,
    pub dropped: Vec<DroppedSession>,
    pub total_bytes: u64,
    pub room_bytes: u64,
    pub cap_bytes: u64,
}

impl Plan {
    pub fn capacities(&self) -> Vec<u64> {
        self.sessions.iter().map(|s| s.capacity).collect()
    }

    /// One line for the log naming what was dropped and what to change, or `None`.
    pub fn dropped_warning(&self) -> Option<String> {
        if self.dropped.is_empty() {
            return None;
        }
        let list: Vec<String> = self
            .dropped
            .iter()
            .map(|d| d.capacity.to_string())
            .collect();
        let memory = self.dropped.iter().any(|d| d.reason == DropReason::Memory);
        let advice = if memory {
            "raise --load-limit-gb or list smaller sessions"
        } else {
            "raise --parallel to open them"
        };
        Some(format!(
            "{} session(s) not opened ({} tokens): {advice}",
            self.dropped.len(),
            list.join(", ")
        ))
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("--context must be at least 1 token")]
    ZeroContext,
    #[error("--parallel must be between 1 and {max}, got {parallel}")]
    Parallel { parallel: usize, max: usize },
    #[error("--context {0} overflows when the margin is added")]
    ContextOverflow(u64),
    #[error(
        "session bytes overflow: {capacity} tokens × {bytes_per_token} bytes + {fixed_state_bytes}"
    )]
    BytesOverflow {
        capacity: u64,
        bytes_per_token: u64,
        fixed_state_bytes: u64,
    },
    #[error(
        "no memory for sessions: cap {cap_bytes} B < ready {ready_bytes} B + margin {margin_bytes} B \
         + reserved {reserved_bytes} B; raise --load-limit-gb"
    )]
    NoRoom {
        cap_bytes: u64,
        ready_bytes: u64,
        margin_bytes: u64,
        reserved_bytes: u64,
    },
    #[error(
        "the engine's session ({capacity} tokens, {bytes} B) does not fit in the {room_bytes} B left \
         under the cap of {cap_bytes} B; lower --context or raise --load-limit-gb"
    )]
    EngineSessionDoesNotFit {
        capacity: u64,
        bytes: u64,
        room_bytes: u64,
        cap_bytes: u64,
    },
}

/// Plans the sessions for `input`.
pub fn plan(input: &PlanInput<'_>) -> Result<Plan, PlanError> {
    let room_bytes = room_bytes(input)?;
    let wanted = wanted_capacities(input)?;
    let parallel = input.parallel.unwrap_or(match input.spec {
        Some(spec) => 1 + spec.num_sessions(),
        None => DEFAULT_PARALLEL,
    });
    if parallel == 0 || parallel > MAX_SESSIONS {
        return Err(PlanError::Parallel {
            parallel,
            max: MAX_SESSIONS,
        });
    }
    let mut sessions = Vec::with_capacity(wanted.len().min(parallel));
    let mut dropped = Vec::new();
    let mut total_bytes: u64 = 0;
    for (idx, &capacity) in wanted.iter().enumerate() {
        let bytes = session_bytes(input, capacity)?;
        let fits = dropped.is_empty()
            && total_bytes
                .checked_add(bytes)
                .is_some_and(|total| total <= room_bytes);
        if idx >= parallel {
            dropped.push(DroppedSession {
                capacity,
                bytes,
                reason: DropReason::Parallel,
            });
        } else if fits {
            total_bytes += bytes;
            sessions.push(PlannedSession { capacity, bytes });
        } else if idx == 0 {
            return Err(PlanError::EngineSessionDoesNotFit {
                capacity,
                bytes,
                room_bytes,
                cap_bytes: input.cap_bytes,
            });
        } else {
            dropped.push(DroppedSession {
                capacity,
                bytes,
                reason: DropReason::Memory,
            });
        }
    }
    Ok(Plan {
        sessions,
        dropped,
        total_bytes,
        room_bytes,
        cap_bytes: input.cap_bytes,
    })
}

fn room_bytes(input: &PlanInput<'_>) -> Result<u64, PlanError> {
    input
        .cap_bytes
        .checked_sub(input.ready_bytes)
        .and_then(|r| r.checked_sub(input.margin_bytes))
        .and_then(|r| r.checked_sub(input.reserved_bytes))
        .ok_or(PlanError::NoRoom {
            cap_bytes: input.cap_bytes,
            ready_bytes: input.ready_bytes,
            margin_bytes: input.margin_bytes,
            reserved_bytes: input.reserved_bytes,
        })
}

/// The capacities asked for, in opening order: the engine's session, then either the spec's
/// sessions or (spec unset) more sessions of the engine's size up to `--parallel`.
fn wanted_capacities(input: &PlanInput<'_>) -> Result<Vec<u64>, PlanError> {
    if input.context_tokens == 0 {
        return Err(PlanError::ZeroContext);
    }
    let engine = input
        .context_tokens
        .checked_add(MARGIN)
        .ok_or(PlanError::ContextOverflow(input.context_tokens))?;
    Ok(match input.spec {
        Some(spec) => std::iter::once(engine).chain(spec.capacities()).collect(),
        None => {
            let parallel = input.parallel.unwrap_or(DEFAULT_PARALLEL).min(MAX_SESSIONS);
            vec![engine; parallel.max(1)]
        }
    })
}

fn session_bytes(input: &PlanInput<'_>, capacity: u64) -> Result<u64, PlanError> {
    capacity
        .checked_mul(input.bytes_per_token)
        .and_then(|b| b.checked_add(input.fixed_state_bytes))
        .ok_or(PlanError::BytesOverflow {
            capacity,
            bytes_per_token: input.bytes_per_token,
            fixed_state_bytes: input.fixed_state_bytes,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn input<'a>(
        spec: Option<&'a SessionSpec>,
        parallel: Option<usize>,
        cap_bytes: u64,
    ) -> PlanInput<'a> {
        PlanInput {
            context_tokens: 32768,
            parallel,
            spec,
            bytes_per_token: 1024,
            fixed_state_bytes: 0,
            cap_bytes,
            ready_bytes: 0,
            margin_bytes: 0,
            reserved_bytes: 0,
        }
    }

    #[test]
    fn seed_receipt_opens_32800_16416_and_six_of_4128() {
        let spec = SessionSpec::parse("16384,4096x6", u64::MAX - MARGIN).unwrap();
        let plan = plan(&input(Some(&spec), Some(8), 64 * GIB)).unwrap();
        assert_eq!(
            plan.capacities(),
            vec![32800, 16416, 4128, 4128, 4128, 4128, 4128, 4128]
        );
        assert_eq!(plan.sessions[0].bytes, 32800 * 1024);
        assert_eq!(plan.total_bytes, (32800 + 16416 + 6 * 4128) * 1024);
        assert!(plan.dropped.is_empty());
    }

    #[test]
    fn fixed_state_bytes_are_paid_per_session() {
        let spec = SessionSpec::parse("4096x2", u64::MAX - MARGIN).unwrap();
        let mut inp = input(Some(&spec), None, 64 * GIB);
        inp.fixed_state_bytes = 1000;
        let plan = plan(&inp).unwrap();
        assert_eq!(plan.sessions[1].bytes, 4128 * 1024 + 1000);
        assert_eq!(plan.total_bytes, (32800 + 2 * 4128) * 1024 + 3 * 1000);
    }

    #[test]
    fn sessions_open_in_order_while_they_fit_and_the_rest_are_reported() {
        let spec = SessionSpec::parse("4096x2,16384,512", u64::MAX - MARGIN).unwrap();
        // Room for the engine's session and two 4K ones, not for the 16K one; the 512 after it is
        // dropped too so that the plan is a prefix of the order asked for.
        let cap = (32800 + 2 * 4128 + 100) * 1024;
        let plan = plan(&input(Some(&spec), None, cap)).unwrap();
        assert_eq!(plan.capacities(), vec![32800, 4128, 4128]);
        let dropped: Vec<u64> = plan.dropped.iter().map(|d| d.capacity).collect();
        assert_eq!(dropped, vec![16416, 544]);
        assert!(plan.dropped_warning().unwrap().contains("16416, 544"));
        assert!(plan.total_bytes <= plan.room_bytes);
    }

    #[test]
    fn parallel_bounds_the_sessions_opened() {
        let spec = SessionSpec::parse("4096x6", u64::MAX - MARGIN).unwrap();
        let plan = plan(&input(Some(&spec), Some(3), 64 * GIB)).unwrap();
        assert_eq!(plan.capacities(), vec![32800, 4128, 4128]);
        assert_eq!(plan.dropped.len(), 4);
        assert!(plan
            .dropped
            .iter()
            .all(|d| d.reason == DropReason::Parallel));
    }

    #[test]
    fn unset_spec_opens_parallel_sessions_of_context_size_as_many_as_fit() {
        let plan4 = plan(&input(None, None, 64 * GIB)).unwrap();
        assert_eq!(plan4.capacities(), vec![32800; DEFAULT_PARALLEL]);
        let plan2 = plan(&input(None, Some(8), 2 * 32800 * 1024 + 5)).unwrap();
        assert_eq!(plan2.capacities(), vec![32800; 2]);
        assert_eq!(plan2.dropped.len(), 6);
    }

    #[test]
    fn room_subtracts_ready_margin_and_reserved() {
        let mut inp = input(None, Some(1), 100 * GIB);
        inp.ready_bytes = 10 * GIB;
        inp.margin_bytes = GIB;
        inp.reserved_bytes = 2 * GIB;
        assert_eq!(plan(&inp).unwrap().room_bytes, 87 * GIB);
        inp.ready_bytes = 98 * GIB;
        assert!(matches!(plan(&inp), Err(PlanError::NoRoom { .. })));
    }

    #[test]
    fn an_engine_session_that_does_not_fit_fails_with_the_numbers() {
        let err = plan(&input(None, None, 1024)).unwrap_err();
        assert_eq!(
            err,
            PlanError::EngineSessionDoesNotFit {
                capacity: 32800,
                bytes: 32800 * 1024,
                room_bytes: 1024,
                cap_bytes: 1024
            }
        );
        assert!(err.to_string().contains("33587200 B"));
    }

    #[test]
    fn bad_sizes_are_refused_with_checked_arithmetic() {
        let mut inp = input(None, Some(0), GIB);
        assert!(matches!(plan(&inp), Err(PlanError::Parallel { .. })));
        inp.parallel = Some(MAX_SESSIONS + 1);
        assert!(matches!(plan(&inp), Err(PlanError::Parallel { .. })));
        inp.parallel = Some(1);
        inp.context_tokens = 0;
        assert_eq!(plan(&inp), Err(PlanError::ZeroContext));
        inp.context_tokens = u64::MAX;
        assert_eq!(plan(&inp), Err(PlanError::ContextOverflow(u64::MAX)));
        inp.context_tokens = 1 << 40;
        inp.bytes_per_token = 1 << 40;
        assert!(matches!(plan(&inp), Err(PlanError::BytesOverflow { .. })));
    }
}
