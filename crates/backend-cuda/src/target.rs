//! [`CudaTarget`]: `lane::Target` over a [`CudaModel`] and its sessions on the GPU, allocated
//! once at construction from the plan's capacities. Mirrors backend-cpu's `CpuTarget`: the same
//! checks (`lane::check_windows`), the same MTP bookkeeping, the same greedy drafting.

use crate::forward::{self, RoundOut, Scratch, WindowPlan};
use crate::model::CudaModel;
use crate::mtp::DraftStart;
use crate::state::{CachedBlock, RestoreError, RollbackWindow, Sessions};
use crate::CudaError;
use lane::{
    check_windows, rows_from_logits, CacheBlockId, CacheBlocks, DraftAsk, SessionExtent,
    StateError, Target, TargetError, Want, Window, WindowRows,
};
use slots::{MoveFault, SessionId};
use std::sync::Arc;

/// The CUDA target: one model, many sessions, one stream.
pub struct CudaTarget {
    model: Arc<CudaModel>,
    sessions: Sessions,
    scratch: Scratch,
    /// Prompt-cache blocks in device memory (the engine's prompt cache decides which, within
    /// its budget).
    cache: CacheBlocks<CachedBlock>,
}

impl CudaTarget {
    /// Allocates one session per capacity (index `i` is `SessionId(i)`) on the model's GPU, able
    /// to roll back any window the engine verifies.
    pub fn new(model: &Arc<CudaModel>, capacities: &[u64]) -> Result<CudaTarget, CudaError> {
        CudaTarget::with_rollback_window(model, capacities, RollbackWindow::MAX)
    }

    /// [`CudaTarget::new`] with sessions that snapshot their linear state only inside windows of
    /// at most `window` tokens (`1 + --draft-tokens`; [`RollbackWindow::NONE`] without drafts):
    /// a draft window longer than that cannot be rolled back. Each session costs
    /// [`crate::session_costs`].
    pub fn with_rollback_window(
        model: &Arc<CudaModel>,
        capacities: &[u64],
        window: RollbackWindow,
    ) -> Result<CudaTarget, CudaError> {
        let gpu = &model.gpu;
        let sessions = Sessions::new(
            gpu,
            &model.config,
            capacities,
            model.has_mtp(),
            window,
            model.kv_dtype(),
        )?;
        let scratch = Scratch::new(model)?;
        gpu.sync()?;
        Ok(CudaTarget {
            model: model.clone(),
            sessions,
            scratch,
            cache: CacheBlocks::default(),
        })
    }

    /// Whether decode-sized rounds and drafts are replayed as CUDA graphs (the default): the
    /// results are the same bits either way; kernel by kernel is slower.
    pub fn set_graphs(&mut self, enabled: bool) {
        self.scratch.set_graphs(enabled);
    }

    /// A fingerprint of each part of `session`'s GPU state (for tests comparing two targets):
    /// (part, hash of its bits).
    #[doc(hidden)]
    pub fn state_digest(&self, session: SessionId) -> Result<Vec<(String, u64)>, CudaError> {
        self.sessions.digest(&self.model.gpu, session.0)
    }

    /// Bytes of every session's state on the GPU ([`crate::SessionCosts::total`] of the capacities).
    pub fn state_bytes(&self) -> u64 {
        self.sessions.bytes()
    }

    pub fn model(&self) -> &CudaModel {
        &self.model
    }

    /// Positions computed in `session`.
    pub fn session_len(&self, session: SessionId) -> u64 {
        self.sessions.meta[session.0].len as u64
    }

    /// The engine's guarantees ([`check_windows`]), before any state is touched.
    fn check(&self, windows: &[Window<'_>]) -> Result<(), TargetError> {
        let extents: Vec<SessionExtent> = self
            .sessions
            .meta
            .iter()
            .zip(&self.sessions.capacity)
            .map(|(meta, &capacity)| SessionExtent {
                len: meta.len as u64,
                capacity: capacity as u64,
            })
            .collect();
        check_windows(windows, &extents, self.model.vocab_size())
    }

    /// How many steps of the head `ask`'s session has room for (0: none, e.g. a model without a
    /// head or an empty session), or why the ask is refused.
    fn draft_room(&self, ask: &DraftAsk) -> Result<usize, TargetError> {
        let session = ask.session;
        if !self.model.has_mtp() {
            return Ok(0);
        }
        if ask.next_token as usize >= self.model.vocab_size() {
            return Err(TargetError::Invalid(format!(
                "{session}: token id {} is outside the vocabulary of {}",
                ask.next_token,
                self.model.vocab_size()
            )));
        }
        let meta = *self
            .sessions
            .meta
            .get(session.0)
            .ok_or_else(|| TargetError::Invalid(format!("{session} does not exist")))?;
        if meta.len == 0 {
            return Ok(0);
        }
        if meta.mtp_len != meta.len || !meta.mtp_holds(meta.len - 1) {
            return Err(TargetError::Invalid(format!(
                "{session}: MTP state at {} but the session at {}",
                meta.mtp_len, meta.len
            )));
        }
        // Step s writes the head's row at len − 1 + s.
        Ok(self.sessions.capacity[session.0] - (meta.len - 1))
    }

    /// Checks and runs a round, then advances the sessions' host lengths.
    fn round(&mut self, windows: &[Window<'_>], greedy: bool) -> Result<RoundOut, TargetError> {
        self.check(windows)?;
        let plans: Vec<WindowPlan> = windows
            .iter()
            .filter(|w| !w.tokens.is_empty())
            .map(|w| WindowPlan {
                session: w.session.0,
                start: w.start as usize,
                len: w.tokens.len(),
                num_logits: w.num_logits,
            })
            .collect();
        if plans.is_empty() {
            return Ok(if greedy {
                RoundOut::Greedy(Vec::new())
            } else {
                RoundOut::Logits(Vec::new())
            });
        }
        let tokens: Vec<u32> = windows
            .iter()
            .flat_map(|w| w.tokens.iter().copied())
            .collect();
        let out = forward::forward(
            &self.model,
            &self.sessions,
            &mut self.scratch,
            &plans,
            &tokens,
            greedy,
        )
        .map_err(device)?;
        for p in &plans {
            self.advance(p);
        }
        Ok(out)
    }

    /// The host's lengths after a window of `len` tokens at `start`.
    fn advance(&mut self, p: &WindowPlan) {
        let with_mtp = self.model.has_mtp();
        let m = &mut self.sessions.meta[p.session];
        m.len = p.start + p.len;
        m.snap_start = p.start;
        let rollback = self.sessions.rollback;
        m.snap_count = if p.len <= rollback { p.len - 1 } else { 0 };
        if with_mtp {
            m.mtp_len = m.len;
            m.mtp_first = if p.len > rollback {
                m.len - 1
            } else {
                p.start.saturating_sub(1)
            };
        }
    }
}

fn device(e: CudaError) -> TargetError {
    TargetError::Device(e.to_string())
}

impl Target for CudaTarget {
    fn vocab_size(&self) -> usize {
        self.model.vocab_size()
    }

    fn session_capacities(&self) -> Vec<u64> {
        self.sessions.capacity.iter().map(|&c| c as u64).collect()
    }

    /// When every window with rows wants greedy tokens, the GPU chooses them and only they
    /// come back (a row of logits is `vocab` floats to copy and scan on the host); otherwise the
    /// round copies its logits back and greedy windows get their rows' greedy tokens from them.
    fn forward(
        &mut self,
        windows: &[Window<'_>],
        wants: &[Want],
    ) -> Result<Vec<WindowRows>, TargetError> {
        debug_assert_eq!(windows.len(), wants.len(), "one want per window");
        // A window without rows (a prompt chunk) wants nothing either way.
        let all_greedy = windows
            .iter()
            .zip(wants)
            .all(|(w, &want)| want == Want::Greedy || w.num_logits == 0 || w.tokens.is_empty());
        match self.round(windows, all_greedy)? {
            RoundOut::Logits(logits) => Ok(rows_from_logits(
                windows,
                wants,
                &logits,
                self.model.vocab_size(),
            )),
            RoundOut::Greedy(ids) => {
                let mut at = 0;
                Ok(windows
                    .iter()
                    .zip(wants)
                    .map(|(w, &want)| {
                        let n = if w.tokens.is_empty() { 0 } else { w.num_logits };
                        let rows = &ids[at..at + n];
                        at += n;
                        if want == Want::Greedy {
                            WindowRows::Greedy(
                                rows.iter().map(|&id| u32::try_from(id).ok()).collect(),
                            )
                        } else {
                            debug_assert!(
                                rows.is_empty(),
                                "a window wanting logits in a greedy round"
                            );
                            WindowRows::Logits(Vec::new())
                        }
                    })
                    .collect())
            }
        }
    }

    fn truncate(&mut self, session: SessionId, len: u64) -> Result<(), TargetError> {
        let len = len as usize;
        let meta = *self
            .sessions
            .meta
            .get(session.0)
            .ok_or_else(|| TargetError::Invalid(format!("{session} does not exist")))?;
        let refused = |e: StateError| TargetError::Invalid(format!("{session}: {e}"));
        if len > meta.len {
            return Err(refused(StateError::PastEnd {
                len: len as u64,
                held: meta.len as u64,
            }));
        }
        if len == meta.len {
            return Ok(());
        }
        if self.model.has_mtp() && len > 0 && !meta.mtp_holds(len - 1) {
            return Err(refused(StateError::MtpCannotGoBack {
                len: len as u64,
                first: meta.mtp_first as u64,
            }));
        }
        let gpu = self.model.gpu.clone();
        self.sessions
            .restore(&gpu, session.0, len)
            .map_err(|e| match e {
                RestoreError::State(e) => refused(e),
                RestoreError::Device(e) => device(e),
            })?;
        let m = &mut self.sessions.meta[session.0];
        m.len = len;
        m.mtp_len = len;
        Ok(())
    }

    fn has_drafter(&self) -> bool {
        self.model.has_mtp()
    }

    /// Greedy MTP drafts (argmax on the GPU, lowest id on ties as the engine's greedy sampling),
    /// every asked session's in one pass of the head per step: the same drafts as one by one.
    /// Streams asking fewer drafts than the most asked ride along for the extra steps when their
    /// session has room (the extra rows of the head's cache are past what they keep and are
    /// written again before they are read); the others get a pass of their own.
    fn draft(&mut self, asks: &[DraftAsk]) -> Vec<Result<Vec<u32>, TargetError>> {
        debug_assert!(
            asks.iter()
                .enumerate()
                .all(|(i, a)| asks[..i].iter().all(|b| b.session != a.session)),
            "one draft ask per session: {asks:?}"
        );
        let mut answers: Vec<Result<Vec<u32>, TargetError>> = Vec::with_capacity(asks.len());
        // (drafts, steps of the head the session has room for, ask index) of the asks that draft.
        let mut drafting: Vec<(usize, usize, usize)> = Vec::new();
        for (k, ask) in asks.iter().enumerate() {
            answers.push(self.draft_room(ask).map(|room| {
                let num = ask.num_drafts.min(room);
                if num > 0 {
                    drafting.push((num, room, k));
                }
                Vec::new()
            }));
        }
        let most = drafting.iter().map(|d| d.0).max().unwrap_or(0);
        // Pass length per ask: the most asked when there is room for it, else its own.
        let mut passes: Vec<(usize, usize, usize)> = drafting
            .iter()
            .map(|&(num, room, k)| (if room >= most { most } else { num }, num, k))
            .collect();
        passes.sort_unstable();
        for group in passes.chunk_by(|a, b| a.0 == b.0) {
            let steps = group[0].0;
            let starts: Vec<DraftStart> = group
                .iter()
                .map(|&(_, _, k)| DraftStart {
                    session: asks[k].session.0,
                    next_token: asks[k].next_token,
                })
                .collect();
            let drafts = crate::mtp::draft(
                &self.model,
                &self.sessions,
                &mut self.scratch,
                &starts,
                steps,
            );
            match drafts {
                Ok(drafts) => {
                    for (&(_, num, k), mut d) in group.iter().zip(drafts) {
                        d.truncate(num);
                        answers[k] = Ok(d);
                    }
                }
                Err(e) => {
                    let message = e.to_string();
                    for &(_, _, k) in group {
                        answers[k] = Err(TargetError::Device(message.clone()));
                    }
                }
            }
        }
        answers
    }

    fn move_state(&mut self, from: SessionId, to: SessionId) -> Result<(), MoveFault> {
        let n = self.sessions.meta.len();
        if from == to || from.0 >= n || to.0 >= n {
            return Err(MoveFault::Device(format!("cannot move {from} to {to}")));
        }
        let len = self.sessions.meta[from.0].len;
        if self.sessions.capacity[to.0] < len {
            let e = StateError::DoesNotFit {
                len: len as u64,
                capacity: self.sessions.capacity[to.0] as u64,
            };
            return Err(MoveFault::Device(format!("{from} → {to}: {e}")));
        }
        let gpu = self.model.gpu.clone();
        self.sessions
            .copy(&gpu, from.0, to.0)
            .map_err(|e| MoveFault::Device(format!("{from} → {to}: {e}")))
    }

    fn release(&mut self, session: SessionId) {
        if let Some(m) = self.sessions.meta.get_mut(session.0) {
            *m = Default::default();
        }
    }

    fn cache_block_bytes(&self, tokens: u64) -> Option<u64> {
        Some(self.sessions.block_bytes(tokens as usize) as u64)
    }

    fn cache_save(
        &mut self,
        session: SessionId,
        start: u64,
        end: u64,
        id: CacheBlockId,
    ) -> Result<(), TargetError> {
        if session.0 >= self.sessions.meta.len() {
            return Err(TargetError::Invalid(format!("{session} does not exist")));
        }
        let gpu = self.model.gpu.clone();
        let block = self
            .sessions
            .save_block(&gpu, session.0, start as usize, end as usize)
            .map_err(|e| match e {
                RestoreError::State(e) => {
                    TargetError::Invalid(format!("{session}: caching {start}..{end}: {e}"))
                }
                RestoreError::Device(e) => device(e),
            })?;
        self.cache.insert(id, block)
    }

    fn cache_restore(
        &mut self,
        session: SessionId,
        blocks: &[CacheBlockId],
    ) -> Result<(), TargetError> {
        if session.0 >= self.sessions.meta.len() {
            return Err(TargetError::Invalid(format!("{session} does not exist")));
        }
        let found = self.cache.get_all(blocks)?;
        let gpu = self.model.gpu.clone();
        let result = self.sessions.restore_blocks(&gpu, session.0, &found);
        if result.is_err() {
            self.sessions.meta[session.0] = Default::default();
        }
        result.map_err(|e| match e {
            RestoreError::State(e) => {
                TargetError::Invalid(format!("{session}: restoring the prompt cache: {e}"))
            }
            RestoreError::Device(e) => device(e),
        })
    }

    fn cache_drop(&mut self, id: CacheBlockId) {
        self.cache.remove(id);
    }
}
