//! One [`Target`] for every model backend: [`BackendTarget`] keeps the contract (the checks of
//! every call, the MTP head's bookkeeping, which drafts a session has room for, how a round's
//! answer is shaped, the prompt-cache blocks and how each failure is reported) over the narrower
//! [`Backend`] interface, which a backend implements with its kernels and memory: run a checked
//! round, draft checked chains, roll back, copy, reset, save and restore cache blocks.
//!
//! A backend keeps its sessions' lengths itself (its kernels read them) and shows them through
//! [`Backend::session`]; whether a call may proceed is decided here, once, from those views,
//! before the backend is asked to touch any state. What only the backend's memory knows (which
//! snapshots a rollback can return to, whether restored blocks fit and follow one another) the
//! backend checks and reports as a [`StateError`].

use crate::target::{
    check_windows, rows_from_logits, DraftAsk, RollbackWindow, SessionExtent, StateError, Target,
    TargetError, Want, Window, WindowRows,
};
use crate::CacheBlockId;
use slots::{MoveFault, SessionId};
use std::borrow::Cow;
use std::collections::HashMap;

/// What a backend shows of one session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionView {
    /// Positions computed.
    pub len: u64,
    pub capacity: u64,
    /// The MTP head's part, in sessions of a model with one.
    pub mtp: Option<MtpView>,
}

/// What a backend shows of one session's MTP head.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MtpView {
    /// Positions of the main model the head is in step with.
    pub len: u64,
    /// The first position whose main-model hidden row the head keeps: it keeps every one from
    /// there to the session's last (the row before the last window and the window's rows, or
    /// only the last row after a window too long to roll back).
    pub first: u64,
}

impl SessionView {
    /// Whether the MTP head keeps the hidden row of `pos` (a draft or a rollback to `pos + 1`
    /// needs it).
    fn mtp_holds(&self, pos: u64) -> bool {
        self.mtp.is_some_and(|m| m.first <= pos && pos < self.len)
    }
}

/// One window of a checked round, as a backend runs it: `len ≥ 1` tokens written at `start`
/// (the session's length), logits for the last `num_logits` of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoundWindow {
    pub session: usize,
    pub start: usize,
    pub len: usize,
    pub num_logits: usize,
}

/// A round's outputs, for the windows' wanted rows in order.
#[derive(Debug)]
pub enum RoundOut<'a> {
    /// `[rows, vocab]` logits of every wanted row (an answer to any round).
    Logits(Cow<'a, [f32]>),
    /// Each row's token, when no window with rows wanted [`Want::Logits`] and the backend chose
    /// them: the greedy token (argmax, lowest id on ties) of a [`Want::Greedy`] window's rows,
    /// the backend's draw for a [`Want::Draw`] window's row; a negative id where no logit is
    /// finite.
    Tokens(Vec<i32>),
    /// A round of both: every row's token as in `Tokens` (a [`Want::Logits`] window's rows
    /// too, as greedy), and the logits (`[rows, vocab]`) of the rows of the windows that want
    /// [`Want::Logits`] only, in window order: a stream that needs its rows on the host beside
    /// others that do not copies its own rows back, not the whole round's.
    Split {
        ids: Vec<i32>,
        logits: Cow<'a, [f32]>,
    },
}

/// One session's checked draft chain: `num_drafts ≥ 1` greedy steps of the MTP head from the
/// session's last position and `next_token`; the session has room for `room ≥ num_drafts`
/// steps (a backend may run more steps than asked, up to `room`, and drop the extra drafts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DraftChain {
    pub session: usize,
    pub next_token: u32,
    pub num_drafts: usize,
    pub room: usize,
}

/// Why a backend could not do what it was asked: the state does not allow it (a rollback past
/// the last window, blocks out of order), or the device failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error("{0}")]
    Device(String),
}

/// What a model backend implements: its sessions' memory and the model's kernels. Every call
/// comes checked by [`BackendTarget`] (sessions exist, lengths and capacities fit, tokens are in
/// the vocabulary, the MTP head is in step); session `i` is `SessionId(i)`.
pub trait Backend {
    /// A prompt-cache block: a copy of some positions of a session and its state at their end.
    type Block;

    fn vocab_size(&self) -> usize;
    /// Whether the model has an MTP head (every session then holds the head's state).
    fn has_mtp(&self) -> bool;
    fn num_sessions(&self) -> usize;
    /// `session < num_sessions()`.
    fn session(&self, session: usize) -> SessionView;
    /// The longest window its sessions can roll back (their linear-attention snapshots).
    fn rollback_window(&self) -> RollbackWindow;

    /// Whether [`Backend::forward`] draws [`Want::Draw`] windows itself (else they reach it as
    /// [`Want::Logits`], and the engine draws on the host). A backend that draws, draws every
    /// such window of every round.
    fn draws(&self) -> bool {
        false
    }

    /// Runs `windows` (distinct sessions, each starting at its length; `tokens` is their tokens
    /// one window after another), appends their positions to the sessions (and feeds the MTP
    /// head the pairs they completed), and answers the wanted rows as `wants` (one a window)
    /// allow: [`RoundOut::Logits`] always; [`RoundOut::Tokens`] when no window wants
    /// [`Want::Logits`]; [`RoundOut::Split`] otherwise. A backend that draws
    /// ([`Backend::draws`]) answers its [`Want::Draw`] windows with tokens, never their rows.
    fn forward(
        &mut self,
        windows: &[RoundWindow],
        tokens: &[u32],
        wants: &[Want],
    ) -> Result<RoundOut<'_>, BackendError>;

    /// Greedy MTP drafts (argmax over the ids `0..model::draft_vocab`, lowest id on ties) for
    /// each chain, in order: `num_drafts` each, the same as one by one. One answer for the whole
    /// call: a device failure fails every chain of it (a failed CUDA call leaves its context
    /// unusable for what follows anyway).
    fn draft(&mut self, chains: &[DraftChain]) -> Result<Vec<Vec<u32>>, BackendError>;

    /// Returns `session` to `len` positions (`len` < its length; the MTP head, if any, holding
    /// `len − 1`): linear-attention state as of `len` from its snapshots, or
    /// [`StateError::NoSnapshot`] where it kept none.
    fn truncate(&mut self, session: usize, len: usize) -> Result<(), BackendError>;

    /// Copies all of `from`'s state into `to` (distinct; `to` holds `from`'s length) bit for
    /// bit; `from` is left as released.
    fn copy(&mut self, from: usize, to: usize) -> Result<(), BackendError>;

    /// Forgets `session`'s state: the next stream starts at position 0.
    fn reset(&mut self, session: usize);

    /// Bytes of one cache block of `tokens` positions.
    fn cache_block_bytes(&self, tokens: u64) -> u64;

    /// Copies `session`'s positions `start..end` and its state as of `end` into a new block.
    fn save_block(
        &mut self,
        session: usize,
        start: usize,
        end: usize,
    ) -> Result<Self::Block, BackendError>;

    /// Makes the empty `session` hold `blocks` (a prompt's first blocks, in order). On an error
    /// the session may hold anything: the caller resets it.
    fn restore_blocks(
        &mut self,
        session: usize,
        blocks: &[&Self::Block],
    ) -> Result<(), BackendError>;
}

/// The blocks a target keeps for the prompt cache, by the ids the engine hands out (each backend
/// stores its own kind of block: host copies, device buffers).
#[derive(Debug)]
pub struct CacheBlocks<B> {
    blocks: HashMap<CacheBlockId, B>,
}

impl<B> Default for CacheBlocks<B> {
    fn default() -> CacheBlocks<B> {
        CacheBlocks {
            blocks: HashMap::new(),
        }
    }
}

impl<B> CacheBlocks<B> {
    /// Keeps `block` as `id`; an id kept already is refused (the engine never reuses one).
    pub fn insert(&mut self, id: CacheBlockId, block: B) -> Result<(), TargetError> {
        if self.blocks.contains_key(&id) {
            return Err(TargetError::Invalid(format!("{id:?} is kept already")));
        }
        self.blocks.insert(id, block);
        Ok(())
    }

    /// The blocks of `ids`, in order, or an error naming the first one not kept.
    pub fn get_all(&self, ids: &[CacheBlockId]) -> Result<Vec<&B>, TargetError> {
        ids.iter()
            .map(|id| {
                self.blocks
                    .get(id)
                    .ok_or_else(|| TargetError::Invalid(format!("{id:?} is not cached")))
            })
            .collect()
    }

    pub fn remove(&mut self, id: CacheBlockId) {
        self.blocks.remove(&id);
    }

    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }
}

/// `lane::Target` over any [`Backend`].
pub struct BackendTarget<B: Backend> {
    backend: B,
    /// Prompt-cache blocks (the engine's prompt cache decides which, within its budget).
    cache: CacheBlocks<B::Block>,
}

impl<B: Backend> BackendTarget<B> {
    pub fn new(backend: B) -> BackendTarget<B> {
        BackendTarget {
            backend,
            cache: CacheBlocks::default(),
        }
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    pub fn backend_mut(&mut self) -> &mut B {
        &mut self.backend
    }

    /// Positions computed in `session`.
    pub fn session_len(&self, session: SessionId) -> u64 {
        self.backend.session(session.0).len
    }

    /// `session`'s view, or why it does not exist.
    fn view(&self, session: SessionId) -> Result<SessionView, TargetError> {
        if session.0 < self.backend.num_sessions() {
            Ok(self.backend.session(session.0))
        } else {
            Err(TargetError::Invalid(format!("{session} does not exist")))
        }
    }

    /// The engine's guarantees ([`check_windows`]), and every asked session's MTP head in step.
    fn check(&self, windows: &[Window<'_>]) -> Result<(), TargetError> {
        let extents: Vec<SessionExtent> = (0..self.backend.num_sessions())
            .map(|s| {
                let v = self.backend.session(s);
                SessionExtent {
                    len: v.len,
                    capacity: v.capacity,
                }
            })
            .collect();
        check_windows(windows, &extents, self.backend.vocab_size())?;
        for w in windows {
            let v = self.backend.session(w.session.0);
            if let Some(head) = v.mtp.filter(|h| h.len != v.len) {
                return Err(out_of_step(w.session, head.len, v.len));
            }
        }
        Ok(())
    }

    /// How many steps of the head `ask`'s session has room for (0 for an empty session), or why
    /// the ask is refused.
    fn draft_room(&self, ask: &DraftAsk) -> Result<usize, TargetError> {
        let session = ask.session;
        let vocab = self.backend.vocab_size();
        if ask.next_token as usize >= vocab {
            return Err(TargetError::Invalid(format!(
                "{session}: token id {} is outside the vocabulary of {vocab}",
                ask.next_token
            )));
        }
        let v = self.view(session)?;
        let head = v
            .mtp
            .ok_or_else(|| TargetError::Invalid(format!("{session} holds no MTP state")))?;
        if v.len == 0 {
            return Ok(0);
        }
        if head.len != v.len || !v.mtp_holds(v.len - 1) {
            return Err(out_of_step(session, head.len, v.len));
        }
        // Step s of a chain writes the head's K/V row at position len − 1 + s (step 0 pairs
        // h[len − 1] with the token after it, a row the head does not hold yet), so the
        // session's positions len − 1 .. capacity − 1 bound the steps.
        Ok((v.capacity - (v.len - 1)) as usize)
    }
}

impl<B: Backend> From<B> for BackendTarget<B> {
    fn from(backend: B) -> BackendTarget<B> {
        BackendTarget::new(backend)
    }
}

fn out_of_step(session: SessionId, head: u64, len: u64) -> TargetError {
    TargetError::Invalid(format!(
        "{session}: MTP state at {head} but the session at {len}"
    ))
}

/// A backend's failure as the engine sees it: a refused state change names the session and
/// what was asked (`doing`); a device failure is passed on.
fn reported(session: SessionId, doing: &str, e: BackendError) -> TargetError {
    match e {
        BackendError::State(e) => TargetError::Invalid(format!("{session}: {doing}{e}")),
        BackendError::Device(e) => TargetError::Device(e),
    }
}

impl<B: Backend> Target for BackendTarget<B> {
    fn vocab_size(&self) -> usize {
        self.backend.vocab_size()
    }

    fn session_capacities(&self) -> Vec<u64> {
        (0..self.backend.num_sessions())
            .map(|s| self.backend.session(s).capacity)
            .collect()
    }

    /// The backend may choose greedy windows' tokens (and, if it [`Backend::draws`], draw
    /// sampled windows' tokens) itself and answer only them (a row of logits is `vocab` floats
    /// to copy and scan), for every window or beside the logits of the windows that want them
    /// ([`RoundOut::Split`]); where it answers logits, greedy windows get their rows' greedy
    /// tokens from them ([`rows_from_logits`]) and draws their rows, for the engine to draw.
    fn forward(
        &mut self,
        windows: &[Window<'_>],
        wants: &[Want],
    ) -> Result<Vec<WindowRows>, TargetError> {
        debug_assert_eq!(windows.len(), wants.len(), "one want per window");
        self.check(windows)?;
        if let Some(w) = windows.iter().zip(wants).find(|(w, want)| {
            matches!(want, Want::Draw(_)) && (w.num_logits == 0 || w.tokens.is_empty())
        }) {
            return Err(TargetError::Invalid(format!(
                "{}: a draw asked of a window without rows",
                w.0.session
            )));
        }
        if let Some((w, ask)) = windows.iter().zip(wants).find_map(|(w, want)| match want {
            Want::Draw(ask) if !ask.is_valid() => Some((w, ask)),
            _ => None,
        }) {
            return Err(TargetError::Invalid(format!(
                "{}: a draw needs temperature > 0, top_p in (0, 1] and min_p in [0, 1]: {ask:?}",
                w.session
            )));
        }
        // A backend that does not draw gets the rows, and the engine draws from them.
        let draws = self.backend.draws();
        let wants: Vec<Want> = wants
            .iter()
            .map(|&want| match want {
                Want::Draw(_) if !draws => Want::Logits,
                want => want,
            })
            .collect();
        let wants = &wants[..];
        let live: Vec<RoundWindow> = windows
            .iter()
            .filter(|w| !w.tokens.is_empty())
            .map(|w| RoundWindow {
                session: w.session.0,
                start: w.start as usize,
                len: w.tokens.len(),
                num_logits: w.num_logits,
            })
            .collect();
        let vocab = self.backend.vocab_size();
        if live.is_empty() {
            return Ok(rows_from_logits(windows, wants, &[], vocab));
        }
        // A window without rows (a prompt chunk) wants nothing either way: greedy, for the
        // backend.
        let live_wants: Vec<Want> = windows
            .iter()
            .zip(wants)
            .filter(|(w, _)| !w.tokens.is_empty())
            .map(|(w, &want)| {
                if w.num_logits == 0 {
                    Want::Greedy
                } else {
                    want
                }
            })
            .collect();
        let tokens: Vec<u32> = windows
            .iter()
            .flat_map(|w| w.tokens.iter().copied())
            .collect();
        let out = self
            .backend
            .forward(&live, &tokens, &live_wants)
            .map_err(|e| match e {
                BackendError::State(e) => TargetError::Invalid(e.to_string()),
                BackendError::Device(e) => TargetError::Device(e),
            })?;
        let rows: usize = live.iter().map(|w| w.num_logits).sum();
        let logit_rows: usize = live
            .iter()
            .zip(&live_wants)
            .filter(|(_, &want)| want == Want::Logits)
            .map(|(w, _)| w.num_logits)
            .sum();
        let malformed = |what: String| TargetError::Device(format!("the backend answered {what}"));
        Ok(match out {
            RoundOut::Logits(logits) => rows_from_logits(windows, wants, &logits, vocab),
            RoundOut::Tokens(_) if logit_rows > 0 => {
                return Err(malformed(format!(
                    "tokens only to a round wanting {logit_rows} rows of logits"
                )))
            }
            RoundOut::Tokens(ids) => {
                if ids.len() != rows {
                    return Err(malformed(format!("{} tokens to {rows} rows", ids.len())));
                }
                rows_from_ids(windows, wants, &ids, &[], vocab)
            }
            RoundOut::Split { ids, logits } => {
                if ids.len() != rows || logits.len() != logit_rows * vocab {
                    return Err(malformed(format!(
                        "{} ids and {} logits to {rows} rows, {logit_rows} of them wanting logits",
                        ids.len(),
                        logits.len()
                    )));
                }
                rows_from_ids(windows, wants, &ids, &logits, vocab)
            }
        })
    }

    fn truncate(&mut self, session: SessionId, len: u64) -> Result<(), TargetError> {
        let v = self.view(session)?;
        let refused = |e: StateError| TargetError::Invalid(format!("{session}: {e}"));
        if len > v.len {
            return Err(refused(StateError::PastEnd { len, held: v.len }));
        }
        if len == v.len {
            return Ok(());
        }
        if let Some(head) = v.mtp.filter(|_| len > 0 && !v.mtp_holds(len - 1)) {
            return Err(refused(StateError::MtpCannotGoBack {
                len,
                first: head.first,
            }));
        }
        let window = self.backend.rollback_window().tokens();
        self.backend
            .truncate(session.0, len as usize)
            .map_err(|e| match e {
                BackendError::State(e @ StateError::NoSnapshot { .. }) => {
                    TargetError::Invalid(format!(
                        "{session}: {e} (this target's sessions roll back windows of at most \
                         {window} tokens)"
                    ))
                }
                e => reported(session, "", e),
            })
    }

    fn has_drafter(&self) -> bool {
        self.backend.has_mtp()
    }

    /// Greedy MTP drafts, every asked session's in one call of the backend: each ask is checked
    /// (its token, its session, the head in step with it) and gets at most the steps its session
    /// has room for.
    fn draft(&mut self, asks: &[DraftAsk]) -> Vec<Result<Vec<u32>, TargetError>> {
        debug_assert!(
            asks.iter()
                .enumerate()
                .all(|(i, a)| asks[..i].iter().all(|b| b.session != a.session)),
            "one draft ask per session: {asks:?}"
        );
        if !self.backend.has_mtp() {
            return asks.iter().map(|_| Ok(Vec::new())).collect();
        }
        let mut answers: Vec<Result<Vec<u32>, TargetError>> = Vec::with_capacity(asks.len());
        let (mut chains, mut asked) = (Vec::new(), Vec::new());
        for (k, ask) in asks.iter().enumerate() {
            answers.push(self.draft_room(ask).map(|room| {
                let num_drafts = ask.num_drafts.min(room);
                if num_drafts > 0 {
                    chains.push(DraftChain {
                        session: ask.session.0,
                        next_token: ask.next_token,
                        num_drafts,
                        room,
                    });
                    asked.push(k);
                }
                Vec::new()
            }));
        }
        if chains.is_empty() {
            return answers;
        }
        match self.backend.draft(&chains) {
            Ok(drafts) => {
                assert_eq!(
                    drafts.len(),
                    chains.len(),
                    "B1: a backend drafts every chain"
                );
                for ((k, mut d), s) in asked.into_iter().zip(drafts).zip(&chains) {
                    d.truncate(s.num_drafts);
                    answers[k] = Ok(d);
                }
            }
            Err(e) => {
                for k in asked {
                    answers[k] = Err(reported(asks[k].session, "drafting: ", e.clone()));
                }
            }
        }
        answers
    }

    fn move_state(&mut self, from: SessionId, to: SessionId) -> Result<(), MoveFault> {
        let n = self.backend.num_sessions();
        if from == to || from.0 >= n || to.0 >= n {
            return Err(MoveFault::Device(format!("cannot move {from} to {to}")));
        }
        let (source, target) = (self.backend.session(from.0), self.backend.session(to.0));
        let fault = |e: &dyn std::fmt::Display| MoveFault::Device(format!("{from} → {to}: {e}"));
        if target.capacity < source.len {
            return Err(fault(&StateError::DoesNotFit {
                len: source.len,
                capacity: target.capacity,
            }));
        }
        self.backend.copy(from.0, to.0).map_err(|e| fault(&e))
    }

    fn release(&mut self, session: SessionId) {
        if session.0 < self.backend.num_sessions() {
            self.backend.reset(session.0);
        }
    }

    fn cache_block_bytes(&self, tokens: u64) -> Option<u64> {
        Some(self.backend.cache_block_bytes(tokens))
    }

    fn cache_save(
        &mut self,
        session: SessionId,
        start: u64,
        end: u64,
        id: CacheBlockId,
    ) -> Result<(), TargetError> {
        let v = self.view(session)?;
        let doing = format!("caching {start}..{end}: ");
        if v.len != end || start >= end {
            let e = StateError::PastEnd {
                len: end,
                held: v.len,
            };
            return Err(reported(session, &doing, e.into()));
        }
        if v.mtp.is_some() && !v.mtp_holds(end - 1) {
            let first = v.mtp.map_or(0, |m| m.first);
            let e = StateError::MtpCannotGoBack { len: end, first };
            return Err(reported(session, &doing, e.into()));
        }
        let block = self
            .backend
            .save_block(session.0, start as usize, end as usize)
            .map_err(|e| reported(session, &doing, e))?;
        self.cache.insert(id, block)
    }

    fn cache_restore(
        &mut self,
        session: SessionId,
        blocks: &[CacheBlockId],
    ) -> Result<(), TargetError> {
        self.view(session)?;
        let found = self.cache.get_all(blocks)?;
        self.backend.restore_blocks(session.0, &found).map_err(|e| {
            self.backend.reset(session.0);
            reported(session, "restoring the prompt cache: ", e)
        })
    }

    fn cache_drop(&mut self, id: CacheBlockId) {
        self.cache.remove(id);
    }
}

/// Each window's answer from every row's token (`ids`: greedy, or drawn for a [`Want::Draw`]
/// window; `None` for a row without a finite logit) and the logits of the rows of the windows
/// wanting them (`logits`, in window order; empty in a round of tokens only).
fn rows_from_ids(
    windows: &[Window<'_>],
    wants: &[Want],
    ids: &[i32],
    logits: &[f32],
    vocab: usize,
) -> Vec<WindowRows> {
    let (mut at, mut logits_at) = (0, 0);
    windows
        .iter()
        .zip(wants)
        .map(|(w, &want)| {
            let n = if w.tokens.is_empty() { 0 } else { w.num_logits };
            let rows = &ids[at..at + n];
            at += n;
            if want.takes_tokens() {
                WindowRows::Tokens(rows.iter().map(|&id| u32::try_from(id).ok()).collect())
            } else {
                let mine = logits[logits_at * vocab..(logits_at + n) * vocab].to_vec();
                logits_at += n;
                WindowRows::Logits(mine)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backend that only keeps lengths and records what it was asked to do.
    #[derive(Default)]
    struct Recorder {
        views: Vec<SessionView>,
        calls: Vec<String>,
        fail_restore: bool,
    }

    const VOCAB: usize = 10;

    impl Recorder {
        fn new(capacities: &[u64], mtp: bool) -> Recorder {
            Recorder {
                views: capacities
                    .iter()
                    .map(|&capacity| SessionView {
                        len: 0,
                        capacity,
                        mtp: mtp.then_some(MtpView::default()),
                    })
                    .collect(),
                ..Recorder::default()
            }
        }
    }

    impl Backend for Recorder {
        type Block = (usize, usize);

        fn vocab_size(&self) -> usize {
            VOCAB
        }
        fn has_mtp(&self) -> bool {
            self.views.iter().any(|v| v.mtp.is_some())
        }
        fn num_sessions(&self) -> usize {
            self.views.len()
        }
        fn session(&self, session: usize) -> SessionView {
            self.views[session]
        }
        fn rollback_window(&self) -> RollbackWindow {
            RollbackWindow::MAX
        }
        fn forward(
            &mut self,
            windows: &[RoundWindow],
            tokens: &[u32],
            wants: &[Want],
        ) -> Result<RoundOut<'_>, BackendError> {
            self.calls
                .push(format!("forward {windows:?} {tokens:?} {wants:?}"));
            let mut ids = Vec::new();
            for w in windows {
                let v = &mut self.views[w.session];
                v.len += w.len as u64;
                if let Some(m) = &mut v.mtp {
                    m.len = v.len;
                    m.first = w.start.saturating_sub(1) as u64;
                }
                // each wanted row's greedy id is its position
                let first = w.start + w.len - w.num_logits;
                ids.extend((first..w.start + w.len).map(|p| p as i32 % VOCAB as i32));
            }
            // Every row's one-hot logits; a round of both answers as a GPU does, split.
            let one_hot = |ids: &[i32]| {
                let mut logits = vec![0.0; ids.len() * VOCAB];
                for (r, &id) in ids.iter().enumerate() {
                    logits[r * VOCAB + id as usize] = 1.0;
                }
                logits
            };
            let greedy = wants.iter().filter(|&&w| w == Want::Greedy).count();
            if greedy == wants.len() {
                Ok(RoundOut::Tokens(ids))
            } else if greedy == 0 {
                Ok(RoundOut::Logits(Cow::Owned(one_hot(&ids))))
            } else {
                let mut wanted = Vec::new();
                let mut at = 0;
                for (w, &want) in windows.iter().zip(wants) {
                    if want == Want::Logits {
                        wanted.extend_from_slice(&ids[at..at + w.num_logits]);
                    }
                    at += w.num_logits;
                }
                Ok(RoundOut::Split {
                    logits: Cow::Owned(one_hot(&wanted)),
                    ids,
                })
            }
        }
        fn draft(&mut self, chains: &[DraftChain]) -> Result<Vec<Vec<u32>>, BackendError> {
            self.calls.push(format!("draft {chains:?}"));
            Ok(chains.iter().map(|s| vec![7; s.room]).collect())
        }
        fn truncate(&mut self, session: usize, len: usize) -> Result<(), BackendError> {
            self.calls.push(format!("truncate {session} {len}"));
            let v = &mut self.views[session];
            v.len = len as u64;
            if let Some(m) = &mut v.mtp {
                m.len = len as u64;
            }
            Ok(())
        }
        fn copy(&mut self, from: usize, to: usize) -> Result<(), BackendError> {
            self.calls.push(format!("copy {from} {to}"));
            let capacity = self.views[to].capacity;
            self.views[to] = SessionView {
                capacity,
                ..self.views[from]
            };
            self.reset(from);
            Ok(())
        }
        fn reset(&mut self, session: usize) {
            let v = &mut self.views[session];
            *v = SessionView {
                capacity: v.capacity,
                mtp: v.mtp.map(|_| MtpView::default()),
                len: 0,
            };
        }
        fn cache_block_bytes(&self, tokens: u64) -> u64 {
            tokens
        }
        fn save_block(
            &mut self,
            _: usize,
            start: usize,
            end: usize,
        ) -> Result<(usize, usize), BackendError> {
            Ok((start, end))
        }
        fn restore_blocks(
            &mut self,
            session: usize,
            blocks: &[&(usize, usize)],
        ) -> Result<(), BackendError> {
            self.views[session].len = blocks.last().map_or(0, |b| b.1 as u64);
            if self.fail_restore {
                return Err(BackendError::Device("injected".into()));
            }
            Ok(())
        }
    }

    fn target(capacities: &[u64], mtp: bool) -> BackendTarget<Recorder> {
        BackendTarget::new(Recorder::new(capacities, mtp))
    }

    #[test]
    fn a_round_reaches_the_backend_without_its_empty_windows_and_answers_every_window() {
        let mut t = target(&[8, 8], false);
        let (a, b) = (SessionId(0), SessionId(1));
        let windows = [Window::new(a, 0, &[1, 2, 3], 2), Window::new(b, 0, &[], 0)];
        let rows = t.forward(&windows, &[Want::Greedy, Want::Greedy]).unwrap();
        assert_eq!(
            rows,
            vec![
                WindowRows::Tokens(vec![Some(1), Some(2)]),
                WindowRows::Tokens(vec![])
            ]
        );
        // A window wanting logits gets its rows, greedy windows their ids (the backend answers
        // them split, as the GPU does).
        let windows = [Window::new(a, 3, &[4], 1), Window::new(b, 0, &[5, 6], 1)];
        let rows = t.forward(&windows, &[Want::Logits, Want::Greedy]).unwrap();
        let one_hot = |id: usize| {
            let mut row = vec![0.0; VOCAB];
            row[id] = 1.0;
            row
        };
        assert_eq!(
            rows,
            vec![
                WindowRows::Logits(one_hot(3)),
                WindowRows::Tokens(vec![Some(1)])
            ]
        );
        // Logits, greedy, logits: each logits window gets its own rows.
        let c = SessionId(2);
        let mut t3 = target(&[8, 8, 8], false);
        let windows = [
            Window::new(a, 0, &[1, 2], 2),
            Window::new(b, 0, &[3, 4, 5], 1),
            Window::new(c, 0, &[6, 7, 8, 9], 2),
        ];
        let rows = t3
            .forward(&windows, &[Want::Logits, Want::Greedy, Want::Logits])
            .unwrap();
        assert_eq!(
            rows,
            vec![
                WindowRows::Logits([one_hot(0), one_hot(1)].concat()),
                WindowRows::Tokens(vec![Some(2)]),
                WindowRows::Logits([one_hot(2), one_hot(3)].concat()),
            ]
        );
        let calls = &t.backend().calls;
        assert_eq!(calls.len(), 2, "{calls:?}");
        assert!(calls[0].ends_with("[1, 2, 3] [Greedy]"), "{calls:?}");
        assert!(
            calls[1].ends_with("[4, 5, 6] [Logits, Greedy]"),
            "{calls:?}"
        );
    }

    #[test]
    fn bad_calls_are_refused_before_the_backend_is_touched() {
        let mut t = target(&[4, 2], true);
        let a = SessionId(0);
        t.forward(&[Window::new(a, 0, &[1, 2, 3], 1)], &[Want::Greedy])
            .unwrap();
        let before = t.backend().calls.len();
        // a window past the capacity, a token outside the vocabulary, a missing session
        assert!(matches!(
            t.forward(&[Window::new(a, 3, &[1, 2], 1)], &[Want::Greedy]),
            Err(TargetError::Overflow { .. })
        ));
        assert!(t
            .forward(&[Window::new(a, 3, &[VOCAB as u32], 1)], &[Want::Greedy])
            .is_err());
        assert!(t.truncate(SessionId(5), 1).is_err());
        // past the end
        assert!(t.truncate(a, 4).is_err());
        // a move that does not fit, onto itself, or to nowhere
        assert!(t.move_state(a, SessionId(1)).is_err());
        assert!(t.move_state(a, a).is_err());
        assert!(t.move_state(a, SessionId(9)).is_err());
        // a draft with a token outside the vocabulary
        let ask = DraftAsk {
            session: a,
            next_token: VOCAB as u32,
            num_drafts: 2,
        };
        assert!(t.draft(&[ask]).pop().unwrap().is_err());
        assert_eq!(t.backend().calls.len(), before, "{:?}", t.backend().calls);
        // and a truncate to where the session is already asks nothing of the backend
        t.truncate(a, 3).unwrap();
        assert_eq!(t.backend().calls.len(), before);
    }

    #[test]
    fn drafts_get_at_most_the_room_their_session_has() {
        let mut t = target(&[4, 8], true);
        let (a, b) = (SessionId(0), SessionId(1));
        t.forward(
            &[Window::new(a, 0, &[1, 2, 3], 1), Window::new(b, 0, &[1], 1)],
            &[Want::Greedy, Want::Greedy],
        )
        .unwrap();
        let ask = |session, num_drafts| DraftAsk {
            session,
            next_token: 1,
            num_drafts,
        };
        let answers = t.draft(&[ask(a, 5), ask(b, 3)]);
        // a: length 3 of 4, steps write rows 2 and 3; b: length 1 of 8, room 8
        assert_eq!(answers, vec![Ok(vec![7, 7]), Ok(vec![7, 7, 7])]);
        // an empty session drafts nothing and the backend is not asked
        t.release(a);
        let calls = t.backend().calls.len();
        assert_eq!(t.draft(&[ask(a, 2)]), vec![Ok(vec![])]);
        assert_eq!(t.backend().calls.len(), calls);
    }

    #[test]
    fn a_failed_restore_leaves_the_session_released() {
        let mut t = target(&[8, 8], false);
        let (a, b) = (SessionId(0), SessionId(1));
        t.forward(&[Window::new(a, 0, &[1, 2, 3, 4], 1)], &[Want::Greedy])
            .unwrap();
        let id = CacheBlockId(1);
        t.cache_save(a, 0, 4, id).unwrap();
        assert!(
            t.cache_save(a, 0, 3, CacheBlockId(2)).is_err(),
            "not at its end"
        );
        t.backend_mut().fail_restore = true;
        assert!(matches!(
            t.cache_restore(b, &[id]),
            Err(TargetError::Device(_))
        ));
        assert_eq!(t.session_len(b), 0);
        t.backend_mut().fail_restore = false;
        t.cache_restore(b, &[id]).unwrap();
        assert_eq!(t.session_len(b), 4);
    }
}
