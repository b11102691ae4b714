//! The MTP draft head (`mtp.*`, models.md "MTP head") and its per-session state.
//!
//! `u = fc([pre_fc_norm_embedding(embed(x[i+1])) | pre_fc_norm_hidden(h[i])])`, one gated
//! full-attention + MoE decoder layer at position `i` over the head's own K/V rows, `norm`; the
//! main model's `lm_head` on the result predicts `x[i+2]`. `h[i]` is the main model's
//! final-normed hidden row at `i`.
//!
//! How a session uses it:
//! - after every main forward, [`Mtp::absorb`] feeds the head each pair the window completed,
//!   `(h[i], x[i+1])` for `i` from the window's start − 1 to its end − 2, writing K/V rows; the
//!   window's hidden rows stay in [`MtpState`] so that `h[len − 1]` is at hand after a rollback;
//! - [`MtpState::truncate`] with the session: rows past the accepted length are rewritten by the
//!   next forward, so only the length moves;
//! - [`Mtp::draft`] runs step 0 on `(h[len − 1], next_token)` at position `len − 1`, then chains
//!   step s on the previous draft and the head's own output row at `len − 1 + s`. It writes only
//!   K/V rows at `len − 1..`, which the next forward rewrites: drafting needs no rollback.
//!
//! Wiring into the CPU target (every session of a model with the head holds an [`MtpState`], so
//! a stream may draft from its first reply token; sessions of models without it hold `None`):
//! - `CpuModel` holds `Option<Mtp>` from [`Mtp::load`];
//! - the session's MTP part is an [`MtpState`] ([`MtpState::new`]); `SessionState::reset`,
//!   `truncate` and `copy_from` call [`MtpState::reset`], [`MtpState::truncate`] and
//!   [`MtpState::copy_from`];
//! - `CpuBackend::forward`, after `forward_hidden`, calls [`Mtp::absorb`] with the batch's tokens,
//!   its final-normed hidden rows and one [`MtpWindow`] per window whose session has MTP rows;
//! - `Target::draft(session, next, k)` is [`Mtp::draft`] with argmax, keeping the tokens.

use super::attention::{GatedAttention, KvSpan};
use super::moe::SparseMoe;
use crate::kernels::norm::{rmsnorm, rmsnorm_in_place, NormKind};
use crate::layers::Mlp;
use crate::linear::{load_norm, DenseMlp, Linear};
use crate::state::{MtpState, MAX_ROLLBACK_WINDOW};
use model::schema::names;
use model::schema::MTP_MARKER;
use model::{Config, LoadError, Weights};
use std::ops::Range;

/// What the head needs of the main model it drafts for: its embedding rows and the logits of
/// its head (the lm_head), which the head shares.
pub trait MainModel {
    /// Embedding rows of `tokens`, `[T, hidden]`.
    fn embed(&self, tokens: &[u32]) -> Vec<f32>;
    /// Logits of the first `n` ids for each hidden row, `[rows, n]`.
    fn logits_of_first(&self, hidden: &[f32], n: usize) -> Vec<f32>;
}

/// The MTP head's weights (layer 0 of `mtp.layers`; the embedding and lm_head are the main
/// model's).
pub struct Mtp {
    pre_fc_norm_embedding: Vec<f32>,
    pre_fc_norm_hidden: Vec<f32>,
    /// `[H, 2H]`: input columns `0..H` take the embedding, `H..2H` the hidden row.
    fc: Linear,
    input_norm: Vec<f32>,
    post_norm: Vec<f32>,
    attn: GatedAttention,
    mlp: Box<dyn Mlp>,
    norm: Vec<f32>,
    hidden: usize,
    eps: f32,
}

/// One drafted token and the logits it was chosen from (for sampled verification).
#[derive(Clone, Debug, PartialEq)]
pub struct Draft {
    pub token: u32,
    pub logits: Vec<f32>,
}

/// One window of a batch as [`Mtp::absorb`] sees it.
pub struct MtpWindow<'a> {
    /// The window's rows in the batch's tokens and hidden rows.
    pub rows: Range<usize>,
    /// Position of the window's first token.
    pub start: usize,
    pub state: &'a mut MtpState,
}

impl Mtp {
    /// The head of a checkpoint with `mtp.*` tensors; `None` without them.
    pub fn load(w: &Weights, config: &Config) -> Result<Option<Mtp>, LoadError> {
        if !w.contains(MTP_MARKER) {
            return Ok(None);
        }
        let h = config.hidden_size;
        // The head's layer is a MoE layer when the checkpoint says so (it has a router).
        let layer = names::Layer::mtp();
        let mlp_names = layer.mlp();
        let mlp: Box<dyn Mlp> =
            if w.contains(&names::weight(&mlp_names.router())) && config.moe.is_some() {
                Box::new(SparseMoe::load(w, config, &mlp_names)?)
            } else {
                Box::new(DenseMlp::load(w, &mlp_names, h, config.intermediate_size)?)
            };
        Ok(Some(Mtp {
            pre_fc_norm_embedding: load_norm(w, names::MTP_PRE_FC_NORM_EMBEDDING, h)?,
            pre_fc_norm_hidden: load_norm(w, names::MTP_PRE_FC_NORM_HIDDEN, h)?,
            fc: Linear::load(w, names::MTP_FC, h, 2 * h, false)?,
            input_norm: load_norm(w, &layer.input_norm(), h)?,
            post_norm: load_norm(w, &layer.post_attention_norm(), h)?,
            attn: GatedAttention::load(w, config, &layer.attention())?,
            mlp,
            norm: load_norm(w, names::MTP_FINAL_NORM, h)?,
            hidden: h,
            eps: config.rms_norm_eps as f32,
        }))
    }

    /// The head over rows `(tokens[r], hidden[r])`, span after span; writes each span's K/V and
    /// returns the final-normed output rows `[n, hidden]`.
    fn rows(
        &self,
        model: &dyn MainModel,
        tokens: &[u32],
        hidden: &[f32],
        spans: &mut [KvSpan<'_>],
    ) -> Vec<f32> {
        let (h, n, eps) = (self.hidden, tokens.len(), self.eps);
        // 1. Normed embedding | normed hidden, then fc: [n, 2H] → [n, H].
        let mut e = model.embed(tokens);
        rmsnorm_in_place(
            &mut e,
            &self.pre_fc_norm_embedding,
            eps,
            NormKind::ZeroCentred,
        );
        let mut hn = hidden.to_vec();
        rmsnorm_in_place(
            &mut hn,
            &self.pre_fc_norm_hidden,
            eps,
            NormKind::ZeroCentred,
        );
        let mut cat = Vec::with_capacity(n * 2 * h);
        for r in 0..n {
            cat.extend_from_slice(&e[r * h..(r + 1) * h]);
            cat.extend_from_slice(&hn[r * h..(r + 1) * h]);
        }
        let mut x = self.fc.forward(&cat);
        // 2. The decoder layer: attention over the head's own rows, then the MoE.
        let mut xn = vec![0f32; x.len()];
        rmsnorm(&x, &self.input_norm, eps, NormKind::ZeroCentred, &mut xn);
        add(&mut x, &self.attn.attend(&xn, spans));
        rmsnorm(&x, &self.post_norm, eps, NormKind::ZeroCentred, &mut xn);
        let mut delta = vec![0f32; x.len()];
        self.mlp.forward(&xn, &mut delta);
        add(&mut x, &delta);
        // 3. Final norm.
        rmsnorm(&x, &self.norm, eps, NormKind::ZeroCentred, &mut xn);
        xn
    }

    /// Feeds the head every pair a main forward completed. `tokens` and `hidden` (final-normed,
    /// `[T, hidden]`) are the whole batch's; each window names its rows and its MTP state, which
    /// must be in step with the session (`state.len == start`).
    pub fn absorb(
        &self,
        model: &dyn MainModel,
        tokens: &[u32],
        hidden: &[f32],
        windows: &mut [MtpWindow<'_>],
    ) {
        let h = self.hidden;
        let (mut in_tokens, mut in_hidden, mut spans) = (Vec::new(), Vec::new(), Vec::new());
        for w in windows.iter() {
            let (r, s) = (w.rows.clone(), w.start);
            assert!(!r.is_empty(), "an MTP window without tokens (position {s})");
            assert_eq!(
                w.state.len, s,
                "MTP state at {} but the window starts at {s}",
                w.state.len
            );
            let from = in_tokens.len();
            if s > 0 {
                in_hidden
                    .extend_from_slice(w.state.hidden_row(s - 1).expect("h[start − 1] is kept"));
                in_tokens.extend_from_slice(&tokens[r.clone()]);
            } else {
                in_tokens.extend_from_slice(&tokens[r.start + 1..r.end]);
            }
            in_hidden.extend_from_slice(&hidden[r.start * h..(r.end - 1) * h]);
            spans.push((from..in_tokens.len(), s.saturating_sub(1)));
        }
        let mut kv_spans: Vec<KvSpan<'_>> = windows
            .iter_mut()
            .zip(&spans)
            .map(|(w, (rows, start))| KvSpan {
                rows: rows.clone(),
                start: *start,
                kv: &mut w.state.kv,
            })
            .collect();
        if !in_tokens.is_empty() {
            self.rows(model, &in_tokens, &in_hidden, &mut kv_spans);
        }
        drop(kv_spans);
        // Keep h[start − 1] and the window's rows: h[len − 1] after any rollback in the window.
        // A window too long to roll back (its linear layers keep no snapshots) keeps its last
        // row only, so at most MTP_HIDDEN_ROWS rows are ever held.
        for w in windows.iter_mut() {
            let (r, s) = (w.rows.clone(), w.start);
            let st = &mut *w.state;
            if r.len() > MAX_ROLLBACK_WINDOW {
                st.hidden.clear();
                st.hidden
                    .extend_from_slice(&hidden[(r.end - 1) * h..r.end * h]);
                st.first = s + r.len() - 1;
            } else {
                let before = s.checked_sub(1).and_then(|p| p.checked_sub(st.first));
                match before {
                    Some(i) if (i + 1) * h <= st.hidden.len() => {
                        st.hidden.copy_within(i * h..(i + 1) * h, 0);
                        st.hidden.truncate(h);
                    }
                    _ => st.hidden.clear(),
                }
                st.hidden.extend_from_slice(&hidden[r.start * h..r.end * h]);
                st.first = s.saturating_sub(1);
            }
            st.len = s + r.len();
        }
    }

    /// Up to `num_drafts` drafts to follow `next_token` (sampled after position `len − 1`), each
    /// chosen by `choose` (argmax for greedy) from its logits over the first `draft_vocab` token
    /// ids. Fewer when the session is full.
    pub fn draft(
        &self,
        model: &dyn MainModel,
        state: &mut MtpState,
        next_token: u32,
        num_drafts: usize,
        draft_vocab: usize,
        choose: impl FnMut(&[f32]) -> u32,
    ) -> Vec<Draft> {
        let ask = DraftStart {
            next_token,
            num_drafts,
        };
        self.draft_batch(model, &mut [state], &[ask], draft_vocab, choose)
            .pop()
            .expect("one session, one answer")
    }

    /// [`Mtp::draft`] for several sessions at once: each step runs the head over one row per
    /// session still drafting, so the head's and the lm_head's weights are read once per step
    /// for all of them. A session's drafts are the same bits as drafted alone (every row's
    /// arithmetic is independent of the batch).
    pub fn draft_batch(
        &self,
        model: &dyn MainModel,
        states: &mut [&mut MtpState],
        asks: &[DraftStart],
        draft_vocab: usize,
        mut choose: impl FnMut(&[f32]) -> u32,
    ) -> Vec<Vec<Draft>> {
        assert_eq!(states.len(), asks.len(), "one ask per MTP state");
        let h = self.hidden;
        // Per session: the position of step 0, the steps it takes, and its next input.
        let mut pos0 = vec![0usize; states.len()];
        let mut steps = vec![0usize; states.len()];
        let mut hidden = vec![Vec::new(); states.len()];
        let mut token: Vec<u32> = asks.iter().map(|a| a.next_token).collect();
        for (i, state) in states.iter().enumerate() {
            if state.len == 0 {
                continue;
            }
            pos0[i] = state.len - 1;
            let capacity = state.kv.capacity();
            steps[i] = asks[i].num_drafts.min(capacity - pos0[i]);
            hidden[i] = state
                .hidden_row(pos0[i])
                .expect("h[len − 1] is kept")
                .to_vec();
        }
        let mut drafts: Vec<Vec<Draft>> = steps.iter().map(|&n| Vec::with_capacity(n)).collect();
        for s in 0..steps.iter().copied().max().unwrap_or(0) {
            let active: Vec<usize> = (0..states.len()).filter(|&i| steps[i] > s).collect();
            let tokens: Vec<u32> = active.iter().map(|&i| token[i]).collect();
            let rows_in: Vec<f32> = active.iter().flat_map(|&i| hidden[i].clone()).collect();
            let mut spans: Vec<KvSpan<'_>> = states
                .iter_mut()
                .enumerate()
                .filter(|(i, _)| steps[*i] > s)
                .enumerate()
                .map(|(row, (i, state))| KvSpan {
                    rows: row..row + 1,
                    start: pos0[i] + s,
                    kv: &mut state.kv,
                })
                .collect();
            let out = self.rows(model, &tokens, &rows_in, &mut spans);
            drop(spans);
            let logits = model.logits_of_first(&out, draft_vocab);
            for (row, &i) in active.iter().enumerate() {
                let row_logits = logits[row * draft_vocab..(row + 1) * draft_vocab].to_vec();
                token[i] = choose(&row_logits);
                drafts[i].push(Draft {
                    token: token[i],
                    logits: row_logits,
                });
                hidden[i] = out[row * h..(row + 1) * h].to_vec();
            }
        }
        drafts
    }
}

/// Where one session's drafting starts: the token sampled after its last position, and how many
/// drafts it wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DraftStart {
    pub next_token: u32,
    pub num_drafts: usize,
}

fn add(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}
