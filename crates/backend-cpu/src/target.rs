//! [`CpuTarget`]: `lane::Target` over a [`CpuModel`] and its sessions, allocated once at
//! construction from the plan's capacities.
//!
//! With an MTP head (`mtp.*`) every session also holds the head's state: each `forward` feeds
//! the head the pairs its windows completed ([`crate::qwen3_next::Mtp::absorb`]), `draft` chains
//! the head greedily from the session's last position, and truncate, move and release carry
//! the head's state with the rest of the session.

use crate::layers::Segment;
use crate::model::CpuModel;
use crate::qwen3_next::{DraftStart, MtpWindow};
use crate::state::RollbackWindow;
use crate::state::{cached_block_bytes, CachedBlock, SessionState};
use lane::{
    check_windows, rows_from_logits, CacheBlockId, CacheBlocks, DraftAsk, SessionExtent, Target,
    TargetError, Want, Window, WindowRows,
};
use slots::{MoveFault, SessionId};
use std::sync::Arc;

/// Rows of logits the target keeps a buffer for between rounds (4.9 MB at Qwen3's 151,936-id
/// vocabulary): a round of up to this many wanted rows computes its logits into memory already
/// mapped and touched instead of a fresh allocation (at 1 stream, a 600 KB vector a token whose
/// pages the allocator hands back and faults in again). A larger round uses a buffer of its own,
/// so a burst of wide rounds never pins its memory.
const KEPT_LOGITS_ROWS: usize = 8;

/// The CPU target: one model, many sessions.
pub struct CpuTarget {
    model: Arc<CpuModel>,
    sessions: Vec<SessionState>,
    /// Longest window with drafts this target verifies (its sessions can roll it back).
    rollback_window: RollbackWindow,
    /// The last round's logits `[wanted rows, vocab]`, kept for the next round when it is at most
    /// [`KEPT_LOGITS_ROWS`] rows.
    logits: Vec<f32>,
    /// Prompt-cache blocks (the engine's prompt cache decides which, within its budget).
    cache: CacheBlocks<CachedBlock>,
}

impl CpuTarget {
    /// Allocates one session per capacity (index `i` is `SessionId(i)`), able to roll back any
    /// window the engine verifies ([`RollbackWindow::MAX`]).
    pub fn new(model: Arc<CpuModel>, capacities: &[u64]) -> CpuTarget {
        CpuTarget::with_rollback_window(model, capacities, RollbackWindow::MAX)
    }

    /// Allocates one session per capacity, able to roll back windows of up to `window` tokens
    /// (`1 + drafts per window` of the engine it serves; [`RollbackWindow::NONE`] when nothing
    /// drafts). Each position of it but the first costs every linear layer a copy of its state,
    /// so a server sizes it to its drafts rather than to the widest window there could be.
    pub fn with_rollback_window(
        model: Arc<CpuModel>,
        capacities: &[u64],
        window: RollbackWindow,
    ) -> CpuTarget {
        let sessions = capacities
            .iter()
            .map(|&c| model.new_session(c as usize, window))
            .collect();
        CpuTarget {
            model,
            sessions,
            rollback_window: window,
            logits: Vec::new(),
            cache: CacheBlocks::default(),
        }
    }

    pub fn model(&self) -> &CpuModel {
        &self.model
    }

    /// Positions computed in `session`.
    pub fn session_len(&self, session: SessionId) -> u64 {
        self.sessions[session.0].len as u64
    }

    /// The state `session` holds (for inspection: sizes, lengths).
    pub fn session_state(&self, session: SessionId) -> &SessionState {
        &self.sessions[session.0]
    }

    /// Whether `ask` can be drafted: an existing, distinct session with an MTP head in step with
    /// it, and a token in the vocabulary. `Ok` holds no drafts yet.
    fn check_draft(&self, ask: &DraftAsk) -> Result<Vec<u32>, TargetError> {
        let session = ask.session;
        if ask.next_token as usize >= self.model.vocab_size() {
            return Err(TargetError::Invalid(format!(
                "{session}: token id {} is outside the vocabulary of {}",
                ask.next_token,
                self.model.vocab_size()
            )));
        }
        let state = self
            .sessions
            .get(session.0)
            .ok_or_else(|| TargetError::Invalid(format!("{session} does not exist")))?;
        let head = state
            .mtp
            .as_ref()
            .ok_or_else(|| TargetError::Invalid(format!("{session} holds no MTP state")))?;
        if head.len != state.len {
            return Err(TargetError::Invalid(format!(
                "{session}: MTP state at {} but the session at {}",
                head.len, state.len
            )));
        }
        Ok(Vec::new())
    }

    /// Runs the windows through the model and leaves the logits of their wanted rows, in window
    /// order, in `self.logits` (`[rows, vocab]`).
    fn compute(&mut self, windows: &[Window<'_>]) -> Result<(), TargetError> {
        self.check(windows)?;
        let live: Vec<&Window<'_>> = windows.iter().filter(|w| !w.tokens.is_empty()).collect();
        // 1. the batch: every window's tokens, and its session's state taken out for the call
        let tokens: Vec<u32> = live.iter().flat_map(|w| w.tokens.iter().copied()).collect();
        let mut states: Vec<SessionState> = live
            .iter()
            .map(|w| std::mem::take(&mut self.sessions[w.session.0]))
            .collect();
        let mut segments = Vec::with_capacity(live.len());
        let mut row = 0;
        for (w, state) in live.iter().zip(states.iter_mut()) {
            segments.push(Segment {
                rows: row..row + w.tokens.len(),
                start: w.start as usize,
                state,
            });
            row += w.tokens.len();
        }
        // 2. all layers, then logits for the wanted rows only
        let hidden = self.model.forward_hidden(&tokens, &mut segments);
        let h = self.model.config.hidden_size;
        let mut wanted = Vec::new();
        for (w, seg) in live.iter().zip(&segments) {
            let first = seg.rows.end - w.num_logits;
            wanted.extend_from_slice(&hidden[first * h..seg.rows.end * h]);
        }
        let rows: Vec<_> = segments.iter().map(|s| s.rows.clone()).collect();
        drop(segments);
        // 3. the MTP head takes the pairs each window completed (its K/V and hidden rows)
        if let Some(mtp) = &self.model.mtp {
            let mut mtp_windows: Vec<MtpWindow<'_>> = live
                .iter()
                .zip(&rows)
                .zip(states.iter_mut())
                .filter_map(|((w, r), state)| {
                    Some(MtpWindow {
                        rows: r.clone(),
                        start: w.start as usize,
                        state: state.mtp.as_mut()?,
                    })
                })
                .collect();
            mtp.absorb(self.model.as_ref(), &tokens, &hidden, &mut mtp_windows);
        }
        for (w, state) in live.iter().zip(states) {
            self.sessions[w.session.0] = state;
        }
        if wanted.len() / h > KEPT_LOGITS_ROWS {
            self.logits = Vec::new();
        }
        self.model.logits_into(&wanted, &mut self.logits);
        Ok(())
    }

    /// The engine's guarantees ([`check_windows`]), and every asked session's MTP head in step.
    fn check(&self, windows: &[Window<'_>]) -> Result<(), TargetError> {
        let extents: Vec<SessionExtent> = self
            .sessions
            .iter()
            .map(|s| SessionExtent {
                len: s.len as u64,
                capacity: s.capacity as u64,
            })
            .collect();
        check_windows(windows, &extents, self.model.vocab_size())?;
        for w in windows {
            let state = &self.sessions[w.session.0];
            if let Some(head) = state.mtp.as_ref().filter(|h| h.len != state.len) {
                return Err(TargetError::Invalid(format!(
                    "{}: MTP state at {} but the session at {}",
                    w.session, head.len, state.len
                )));
            }
        }
        Ok(())
    }
}

impl Target for CpuTarget {
    fn vocab_size(&self) -> usize {
        self.model.vocab_size()
    }

    fn session_capacities(&self) -> Vec<u64> {
        self.sessions.iter().map(|s| s.capacity as u64).collect()
    }

    /// Every window's wanted rows, in the order asked; greedy windows get their rows' greedy
    /// tokens ([`lane::sampling::argmax`], as the engine would choose them), read from the kept
    /// logits buffer: a greedy stream costs no logits vector a round.
    fn forward(
        &mut self,
        windows: &[Window<'_>],
        wants: &[Want],
    ) -> Result<Vec<WindowRows>, TargetError> {
        debug_assert_eq!(windows.len(), wants.len(), "one want per window");
        self.compute(windows)?;
        Ok(rows_from_logits(
            windows,
            wants,
            &self.logits,
            self.model.vocab_size(),
        ))
    }

    fn truncate(&mut self, session: SessionId, len: u64) -> Result<(), TargetError> {
        let state = self
            .sessions
            .get_mut(session.0)
            .ok_or_else(|| TargetError::Invalid(format!("{session} does not exist")))?;
        state.truncate(len as usize).map_err(|e| {
            TargetError::Invalid(format!(
                "{session}: {e} (this target's sessions roll back windows of at most {} tokens)",
                self.rollback_window.tokens()
            ))
        })
    }

    fn has_drafter(&self) -> bool {
        self.model.has_mtp()
    }

    /// Greedy MTP drafts (argmax of each step over the ids `0..`[`model::draft_vocab`], lowest
    /// id on ties as the engine's greedy sampling): step 0 on the session's last hidden row and
    /// `next_token`, then chained; every asked session's drafts in one pass of the head per step
    /// ([`Mtp::draft_batch`]), the same drafts as one by one.
    fn draft(&mut self, asks: &[DraftAsk]) -> Vec<Result<Vec<u32>, TargetError>> {
        let Some(mtp) = &self.model.mtp else {
            return asks.iter().map(|_| Ok(Vec::new())).collect();
        };
        debug_assert!(
            asks.iter()
                .enumerate()
                .all(|(i, a)| asks[..i].iter().all(|b| b.session != a.session)),
            "one draft ask per session: {asks:?}"
        );
        let mut answers: Vec<Result<Vec<u32>, TargetError>> =
            asks.iter().map(|a| self.check_draft(a)).collect();
        let mut asked: Vec<Option<DraftStart>> = vec![None; self.sessions.len()];
        for (ask, answer) in asks.iter().zip(&answers) {
            if answer.is_ok() {
                asked[ask.session.0] = Some(DraftStart {
                    next_token: ask.next_token,
                    num_drafts: ask.num_drafts,
                });
            }
        }
        // The heads of the asked sessions, in session order (disjoint borrows).
        let (mut heads, mut starts, mut order) = (Vec::new(), Vec::new(), Vec::new());
        for (i, state) in self.sessions.iter_mut().enumerate() {
            if let (Some(start), Some(head)) = (asked[i], state.mtp.as_mut()) {
                heads.push(head);
                starts.push(start);
                order.push(i);
            }
        }
        let vocab = model::draft_vocab(self.model.vocab_size());
        // On a pool worker, as the forward: the head's parallel calls then never park this thread.
        let model = &self.model;
        let drafts = crate::kernels::on_pool(|| {
            mtp.draft_batch(model.as_ref(), &mut heads, &starts, vocab, |row| {
                lane::sampling::argmax(row).unwrap_or(0)
            })
        });
        for (session, drafts) in order.into_iter().zip(drafts) {
            let k = asks
                .iter()
                .position(|a| a.session.0 == session)
                .expect("an asked session");
            answers[k] = Ok(drafts.into_iter().map(|d| d.token).collect());
        }
        answers
    }

    fn move_state(&mut self, from: SessionId, to: SessionId) -> Result<(), MoveFault> {
        if from == to || from.0 >= self.sessions.len() || to.0 >= self.sessions.len() {
            return Err(MoveFault::Device(format!("cannot move {from} to {to}")));
        }
        let source = std::mem::take(&mut self.sessions[from.0]);
        let result = self.sessions[to.0].copy_from(&source);
        self.sessions[from.0] = source;
        result.map_err(|e| MoveFault::Device(format!("{from} → {to}: {e}")))?;
        self.sessions[from.0].reset();
        Ok(())
    }

    fn release(&mut self, session: SessionId) {
        if let Some(state) = self.sessions.get_mut(session.0) {
            state.reset();
        }
    }

    fn cache_block_bytes(&self, tokens: u64) -> Option<u64> {
        Some(cached_block_bytes(
            &self.model.config,
            self.model.has_mtp(),
            tokens,
        ))
    }

    fn cache_save(
        &mut self,
        session: SessionId,
        start: u64,
        end: u64,
        id: CacheBlockId,
    ) -> Result<(), TargetError> {
        let state = self
            .sessions
            .get(session.0)
            .ok_or_else(|| TargetError::Invalid(format!("{session} does not exist")))?;
        let block = state
            .save_block(start as usize, end as usize)
            .map_err(|e| TargetError::Invalid(format!("{session}: caching {start}..{end}: {e}")))?;
        self.cache.insert(id, block)
    }

    fn cache_restore(
        &mut self,
        session: SessionId,
        blocks: &[CacheBlockId],
    ) -> Result<(), TargetError> {
        let found = self.cache.get_all(blocks)?;
        let state = self
            .sessions
            .get_mut(session.0)
            .ok_or_else(|| TargetError::Invalid(format!("{session} does not exist")))?;
        state.restore_blocks(&found).map_err(|e| {
            state.reset();
            TargetError::Invalid(format!("{session}: restoring the prompt cache: {e}"))
        })
    }

    fn cache_drop(&mut self, id: CacheBlockId) {
        self.cache.remove(id);
    }
}
