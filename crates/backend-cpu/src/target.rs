//! [`CpuBackend`]: the model's sessions in host memory, allocated once at construction from the
//! plan's capacities, and [`CpuTarget`], `lane::Target` over it ([`lane::BackendTarget`] keeps
//! the contract: the checks, the MTP head's bookkeeping, the drafts' room, the cache blocks).
//!
//! With an MTP head (`mtp.*`) every session also holds the head's state: each round feeds the
//! head the pairs its windows completed ([`crate::qwen3_next::Mtp::absorb`]), drafting chains the
//! head greedily from the session's last position, and truncate, copy and reset carry the head's
//! state with the rest of the session.

use crate::layers::Segment;
use crate::model::CpuModel;
use crate::qwen3_next::{DraftStart, MtpWindow};
use crate::state::RollbackWindow;
use crate::state::{cached_block_bytes, CachedBlock, SessionState};
use lane::{
    Backend, BackendError, BackendTarget, MtpView, RoundOut, RoundWindow, SessionId, SessionView,
    Want,
};
use std::borrow::Cow;
use std::sync::Arc;

/// Rows of logits the backend keeps a buffer for between rounds (4.9 MB at Qwen3's 151,936-id
/// vocabulary): a round of up to this many wanted rows computes its logits into memory already
/// mapped and touched instead of a fresh allocation (at 1 stream, a 600 KB vector a token whose
/// pages the allocator hands back and faults in again). A larger round uses a buffer of its own,
/// so a burst of wide rounds never pins its memory.
const KEPT_LOGITS_ROWS: usize = 8;

/// The CPU target: one model, many sessions.
pub type CpuTarget = BackendTarget<CpuBackend>;

/// One model and its sessions in host memory.
pub struct CpuBackend {
    model: Arc<CpuModel>,
    sessions: Vec<SessionState>,
    /// Longest window with drafts its sessions can roll back.
    rollback_window: RollbackWindow,
    /// The last round's logits `[wanted rows, vocab]`, kept for the next round when it is at most
    /// [`KEPT_LOGITS_ROWS`] rows.
    logits: Vec<f32>,
}

impl CpuBackend {
    /// Allocates one session per capacity (index `i` is `SessionId(i)`), able to roll back any
    /// window the engine verifies ([`RollbackWindow::MAX`]).
    pub fn new(model: Arc<CpuModel>, capacities: &[u64]) -> CpuBackend {
        CpuBackend::with_rollback_window(model, capacities, RollbackWindow::MAX)
    }

    /// Allocates one session per capacity, able to roll back windows of up to `window` tokens
    /// (`1 + drafts per window` of the engine it serves; [`RollbackWindow::NONE`] when nothing
    /// drafts). Each position of it but the first costs every linear layer a copy of its state,
    /// so a server sizes it to its drafts rather than to the widest window there could be.
    pub fn with_rollback_window(
        model: Arc<CpuModel>,
        capacities: &[u64],
        window: RollbackWindow,
    ) -> CpuBackend {
        let sessions = capacities
            .iter()
            .map(|&c| model.new_session(c as usize, window))
            .collect();
        CpuBackend {
            model,
            sessions,
            rollback_window: window,
            logits: Vec::new(),
        }
    }

    /// [`CpuBackend::new`] as a target.
    pub fn target(model: Arc<CpuModel>, capacities: &[u64]) -> CpuTarget {
        CpuTarget::new(CpuBackend::new(model, capacities))
    }

    pub fn model(&self) -> &CpuModel {
        &self.model
    }

    /// The state `session` holds (for inspection: sizes, lengths).
    pub fn session_state(&self, session: SessionId) -> &SessionState {
        &self.sessions[session.0]
    }
}

impl Backend for CpuBackend {
    type Block = CachedBlock;

    fn vocab_size(&self) -> usize {
        self.model.vocab_size()
    }

    fn has_mtp(&self) -> bool {
        self.model.has_mtp()
    }

    fn num_sessions(&self) -> usize {
        self.sessions.len()
    }

    fn session(&self, session: usize) -> SessionView {
        let s = &self.sessions[session];
        SessionView {
            len: s.len as u64,
            capacity: s.capacity as u64,
            mtp: s.mtp.as_ref().map(|m| MtpView {
                len: m.len as u64,
                first: m.first as u64,
            }),
        }
    }

    fn rollback_window(&self) -> RollbackWindow {
        self.rollback_window
    }

    /// Runs the windows through the model and answers the logits of their wanted rows, in
    /// window order, from the kept buffer (greedy tokens are chosen from them by the caller).
    fn forward(
        &mut self,
        windows: &[RoundWindow],
        tokens: &[u32],
        _wants: &[Want],
    ) -> Result<RoundOut<'_>, BackendError> {
        // 1. the batch: each window's session state taken out for the call
        let mut states: Vec<SessionState> = windows
            .iter()
            .map(|w| std::mem::take(&mut self.sessions[w.session]))
            .collect();
        let mut segments = Vec::with_capacity(windows.len());
        let mut row = 0;
        for (w, state) in windows.iter().zip(states.iter_mut()) {
            segments.push(Segment {
                rows: row..row + w.len,
                start: w.start,
                state,
            });
            row += w.len;
        }
        // 2. all layers, then logits for the wanted rows only
        let hidden = self.model.forward_hidden(tokens, &mut segments);
        let h = self.model.config.hidden_size;
        let mut wanted = Vec::new();
        for (w, seg) in windows.iter().zip(&segments) {
            let first = seg.rows.end - w.num_logits;
            wanted.extend_from_slice(&hidden[first * h..seg.rows.end * h]);
        }
        let rows: Vec<_> = segments.iter().map(|s| s.rows.clone()).collect();
        drop(segments);
        // 3. the MTP head takes the pairs each window completed (its K/V and hidden rows)
        if let Some(mtp) = &self.model.mtp {
            let mut mtp_windows: Vec<MtpWindow<'_>> = windows
                .iter()
                .zip(&rows)
                .zip(states.iter_mut())
                .filter_map(|((w, r), state)| {
                    Some(MtpWindow {
                        rows: r.clone(),
                        start: w.start,
                        state: state.mtp.as_mut()?,
                    })
                })
                .collect();
            mtp.absorb(self.model.as_ref(), tokens, &hidden, &mut mtp_windows);
        }
        for (w, state) in windows.iter().zip(states) {
            self.sessions[w.session] = state;
        }
        if wanted.len() / h > KEPT_LOGITS_ROWS {
            self.logits = Vec::new();
        }
        self.model.logits_into(&wanted, &mut self.logits);
        Ok(RoundOut::Logits(Cow::Borrowed(&self.logits)))
    }

    /// Every start's chain in one pass of the head per step ([`crate::qwen3_next::Mtp::draft_batch`]),
    /// on a pool worker as the forward (the head's parallel calls then never park this thread).
    fn draft(&mut self, starts: &[lane::DraftChain]) -> Result<Vec<Vec<u32>>, BackendError> {
        let mtp = self
            .model
            .mtp
            .as_ref()
            .expect("drafts only with an MTP head");
        let mut asked: Vec<Option<DraftStart>> = vec![None; self.sessions.len()];
        for s in starts {
            asked[s.session] = Some(DraftStart {
                next_token: s.next_token,
                num_drafts: s.num_drafts,
            });
        }
        // The heads of the asked sessions, in session order (disjoint borrows).
        let (mut heads, mut chains, mut order) = (Vec::new(), Vec::new(), Vec::new());
        for (i, state) in self.sessions.iter_mut().enumerate() {
            if let (Some(start), Some(head)) = (asked[i], state.mtp.as_mut()) {
                heads.push(head);
                chains.push(start);
                order.push(i);
            }
        }
        let vocab = model::draft_vocab(self.model.vocab_size());
        let model = &self.model;
        let drafts = crate::kernels::on_pool(|| {
            mtp.draft_batch(model.as_ref(), &mut heads, &chains, vocab, |row| {
                lane::sampling::argmax(row).unwrap_or(0)
            })
        });
        let mut by_session: Vec<Vec<u32>> = vec![Vec::new(); self.sessions.len()];
        for (session, drafts) in order.into_iter().zip(drafts) {
            by_session[session] = drafts.into_iter().map(|d| d.token).collect();
        }
        Ok(starts
            .iter()
            .map(|s| std::mem::take(&mut by_session[s.session]))
            .collect())
    }

    fn truncate(&mut self, session: usize, len: usize) -> Result<(), BackendError> {
        Ok(self.sessions[session].truncate(len)?)
    }

    fn copy(&mut self, from: usize, to: usize) -> Result<(), BackendError> {
        let source = std::mem::take(&mut self.sessions[from]);
        let result = self.sessions[to].copy_from(&source);
        self.sessions[from] = source;
        result?;
        self.sessions[from].reset();
        Ok(())
    }

    fn reset(&mut self, session: usize) {
        self.sessions[session].reset();
    }

    fn cache_block_bytes(&self, tokens: u64) -> u64 {
        cached_block_bytes(&self.model.config, self.model.has_mtp(), tokens)
    }

    fn save_block(
        &mut self,
        session: usize,
        start: usize,
        end: usize,
    ) -> Result<CachedBlock, BackendError> {
        Ok(self.sessions[session].save_block(start, end)?)
    }

    fn restore_blocks(
        &mut self,
        session: usize,
        blocks: &[&CachedBlock],
    ) -> Result<(), BackendError> {
        Ok(self.sessions[session].restore_blocks(blocks)?)
    }
}
