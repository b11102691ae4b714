//! [`CudaBackend`]: a [`CudaModel`] and its sessions on the GPU, allocated once at construction
//! from the plan's capacities, and [`CudaTarget`], `lane::Target` over it
//! ([`lane::BackendTarget`] keeps the contract, as for the CPU backend).

use crate::forward::{self, Scratch};
use crate::model::CudaModel;
use crate::mtp::DraftStart;
use crate::state::{CachedBlock, RestoreError, RollbackWindow, SessionMeta, Sessions};
use crate::CudaError;
use lane::{
    Backend, BackendError, BackendTarget, MtpView, RoundOut, RoundWindow, SessionId, SessionView,
};

/// The CUDA target: one model, many sessions, one stream.
pub type CudaTarget = BackendTarget<CudaBackend>;

/// One model and its sessions on the GPU.
pub struct CudaBackend {
    model: std::sync::Arc<CudaModel>,
    sessions: Sessions,
    scratch: Scratch,
}

impl CudaBackend {
    /// Allocates one session per capacity (index `i` is `SessionId(i)`) on the model's GPU, able
    /// to roll back any window the engine verifies.
    pub fn new(
        model: &std::sync::Arc<CudaModel>,
        capacities: &[u64],
    ) -> Result<CudaBackend, CudaError> {
        CudaBackend::with_rollback_window(model, capacities, RollbackWindow::MAX)
    }

    /// [`CudaBackend::new`] with sessions that snapshot their linear state only inside windows
    /// of at most `window` tokens (`1 + --draft-tokens`; [`RollbackWindow::NONE`] without
    /// drafts): a draft window longer than that cannot be rolled back. Each session costs
    /// [`crate::session_costs`].
    pub fn with_rollback_window(
        model: &std::sync::Arc<CudaModel>,
        capacities: &[u64],
        window: RollbackWindow,
    ) -> Result<CudaBackend, CudaError> {
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
        Ok(CudaBackend {
            model: model.clone(),
            sessions,
            scratch,
        })
    }

    /// [`CudaBackend::new`] as a target.
    pub fn target(
        model: &std::sync::Arc<CudaModel>,
        capacities: &[u64],
    ) -> Result<CudaTarget, CudaError> {
        CudaBackend::new(model, capacities).map(CudaTarget::new)
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
}

/// The host's lengths after a window of `len` tokens at `start`.
fn advance(sessions: &mut Sessions, with_mtp: bool, w: &RoundWindow) {
    let rollback = sessions.rollback;
    let m = &mut sessions.meta[w.session];
    m.len = w.start + w.len;
    m.snap_start = w.start;
    m.snap_count = if w.len <= rollback { w.len - 1 } else { 0 };
    if with_mtp {
        m.mtp_len = m.len;
        m.mtp_first = if w.len > rollback {
            m.len - 1
        } else {
            w.start.saturating_sub(1)
        };
    }
}

fn device(e: CudaError) -> BackendError {
    BackendError::Device(e.to_string())
}

fn restore_error(e: RestoreError) -> BackendError {
    match e {
        RestoreError::State(e) => BackendError::State(e),
        RestoreError::Device(e) => device(e),
    }
}

impl Backend for CudaBackend {
    type Block = CachedBlock;

    fn vocab_size(&self) -> usize {
        self.model.vocab_size()
    }

    fn has_mtp(&self) -> bool {
        self.model.has_mtp()
    }

    fn num_sessions(&self) -> usize {
        self.sessions.meta.len()
    }

    fn session(&self, session: usize) -> SessionView {
        let m = self.sessions.meta[session];
        SessionView {
            len: m.len as u64,
            capacity: self.sessions.capacity[session] as u64,
            mtp: self.model.has_mtp().then_some(MtpView {
                len: m.mtp_len as u64,
                first: m.mtp_first as u64,
            }),
        }
    }

    fn rollback_window(&self) -> RollbackWindow {
        RollbackWindow::of_tokens(self.sessions.rollback)
            .expect("T1: sessions are made with a RollbackWindow's tokens")
    }

    /// Draws on the GPU (`draw.cu`) where its fixed-point weights can count the vocabulary.
    fn draws(&self) -> bool {
        self.model.config.vocab_size <= crate::kernels::DRAW_MAX_VOCAB
    }

    /// The GPU chooses the tokens of the windows that want greedy ones and only their ids come
    /// back; the round copies back the logits of the windows that want them, and only theirs.
    fn forward(
        &mut self,
        windows: &[RoundWindow],
        tokens: &[u32],
        wants: &[lane::Want],
    ) -> Result<RoundOut<'_>, BackendError> {
        let out = forward::forward(
            &self.model,
            &self.sessions,
            &mut self.scratch,
            windows,
            tokens,
            wants,
        )
        .map_err(device)?;
        // `out` borrows the scratch (the logits' host buffer): the lengths advance beside it.
        let with_mtp = self.model.has_mtp();
        for w in windows {
            advance(&mut self.sessions, with_mtp, w);
        }
        Ok(out)
    }

    /// Every start's chain in one pass of the head per step. Starts asking fewer drafts than the
    /// most asked ride along for the extra steps when their session has room (the extra rows of
    /// the head's cache are past what they keep and are written again before they are read):
    /// one pass length, one CUDA graph; the others get a pass of their own.
    fn draft(&mut self, starts: &[lane::DraftChain]) -> Result<Vec<Vec<u32>>, BackendError> {
        let most = starts.iter().map(|s| s.num_drafts).max().unwrap_or(0);
        // (pass length, start index) of each start.
        let mut passes: Vec<(usize, usize)> = starts
            .iter()
            .enumerate()
            .map(|(k, s)| (if s.room >= most { most } else { s.num_drafts }, k))
            .collect();
        passes.sort_unstable();
        let mut answers = vec![Vec::new(); starts.len()];
        for group in passes.chunk_by(|a, b| a.0 == b.0) {
            let chains: Vec<DraftStart> = group
                .iter()
                .map(|&(_, k)| DraftStart {
                    session: starts[k].session,
                    next_token: starts[k].next_token,
                })
                .collect();
            let drafts = crate::mtp::draft(
                &self.model,
                &self.sessions,
                &mut self.scratch,
                &chains,
                group[0].0,
            )
            .map_err(device)?;
            for (&(_, k), mut d) in group.iter().zip(drafts) {
                d.truncate(starts[k].num_drafts);
                answers[k] = d;
            }
        }
        Ok(answers)
    }

    fn truncate(&mut self, session: usize, len: usize) -> Result<(), BackendError> {
        let gpu = self.model.gpu.clone();
        self.sessions
            .restore(&gpu, session, len)
            .map_err(restore_error)?;
        let m = &mut self.sessions.meta[session];
        m.len = len;
        m.mtp_len = len;
        Ok(())
    }

    fn copy(&mut self, from: usize, to: usize) -> Result<(), BackendError> {
        let gpu = self.model.gpu.clone();
        self.sessions.copy(&gpu, from, to).map_err(device)
    }

    fn reset(&mut self, session: usize) {
        self.sessions.meta[session] = SessionMeta::default();
    }

    fn cache_block_bytes(&self, tokens: u64) -> u64 {
        self.sessions.block_bytes(tokens as usize) as u64
    }

    fn save_block(
        &mut self,
        session: usize,
        start: usize,
        end: usize,
    ) -> Result<CachedBlock, BackendError> {
        let gpu = self.model.gpu.clone();
        self.sessions
            .save_block(&gpu, session, start, end)
            .map_err(restore_error)
    }

    fn restore_blocks(
        &mut self,
        session: usize,
        blocks: &[&CachedBlock],
    ) -> Result<(), BackendError> {
        let gpu = self.model.gpu.clone();
        self.sessions
            .restore_blocks(&gpu, session, blocks)
            .map_err(restore_error)
    }
}
