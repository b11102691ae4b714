//! What a round feeds the MTP head (models.md "MTP head"): the pairs `(h[i], x[i+1])` its
//! windows completed (only their K/V rows are kept), and the hidden rows each session's ring keeps
//! for a rollback and the next draft.

use super::{at, LayerInput, Meta, Pass};
use crate::kernels::AttentionRows;
use crate::state::Sessions;
use crate::weights::MixerWeights;
use crate::CudaError;
use lane::RoundWindow;

/// The MTP head's inputs of a round: the pairs `(h[i], x[i+1])` each window completed.
pub(crate) struct MtpMeta {
    pub(crate) rows: usize,
    pub(crate) tokens: usize,
    pub(crate) src: usize,
    pub(crate) pos: usize,
    pub(crate) kv_base: usize,
    /// (batch row, store row) pairs: the hidden rows each session's ring keeps.
    pub(crate) pairs: usize,
    pub(crate) num_pairs: usize,
}

pub(crate) fn mtp_meta(
    meta: &mut Meta,
    plans: &[RoundWindow],
    tokens: &[u32],
    sessions: &Sessions,
) -> MtpMeta {
    let (mut toks, mut src, mut pos, mut base, mut pairs) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut row = 0;
    for w in plans {
        let (r0, n, s) = (row, w.len, w.start);
        // Pairs (h[i], x[i+1]) for i from start − 1 (h from the ring) to start + n − 2.
        if s > 0 {
            toks.extend(tokens[r0..r0 + n].iter().map(|&t| t as usize));
            src.push(-(sessions.store_row(w.session, s - 1) as i64) - 1);
            pos.extend(s - 1..s - 1 + n);
        } else {
            toks.extend(tokens[r0 + 1..r0 + n].iter().map(|&t| t as usize));
            pos.extend(0..n - 1);
        }
        src.extend((r0..r0 + n - 1).map(|r| r as i64));
        base.extend(std::iter::repeat_n(
            sessions.kv_base[w.session],
            if s > 0 { n } else { n - 1 },
        ));
        // The ring keeps the window's rows, or its last row only after a long window.
        let kept = if n > sessions.rollback {
            n - 1..n
        } else {
            0..n
        };
        for i in kept {
            pairs.extend([r0 + i, sessions.store_row(w.session, s + i)]);
        }
        row += n;
    }
    let rows = toks.len();
    let tokens = meta.push(toks);
    let src_at = meta.data.len();
    meta.data
        .extend(src.iter().map(|&v| i32::try_from(v).expect("fits i32")));
    MtpMeta {
        rows,
        tokens,
        src: src_at,
        pos: meta.push(pos),
        kv_base: meta.push(base),
        num_pairs: pairs.len() / 2,
        pairs: meta.push(pairs),
    }
}

/// Feeds the MTP head the round's pairs: only their K/V rows are kept (the head's outputs at
/// these positions are never used), so the pass stops after the attention's cache write. Then
/// each session's ring takes the hidden rows it keeps.
pub(crate) fn absorb(
    pass: &Pass<'_>,
    sessions: &Sessions,
    base: u64,
    mtp: &MtpMeta,
) -> Result<(), CudaError> {
    let (m, p) = (pass.m, pass.p);
    let head = m.weights.mtp.as_ref().expect("a model with an MTP head");
    let MixerWeights::Attention(aw) = &head.layer.mixer else {
        unreachable!("the MTP layer is full attention")
    };
    let cache = sessions.mtp_kv.as_ref().expect("sessions hold MTP rows");
    let h = m.config.hidden_size;
    m.kernels.mtp_input(
        &m.gpu,
        mtp.rows,
        at(base, mtp.tokens),
        m.weights.embed.at(0),
        p.hidden,
        sessions.mtp_store.at(0),
        at(base, mtp.src),
        head.pre_fc_norm_embedding.at(0),
        head.pre_fc_norm_hidden.at(0),
        h,
        pass.eps(),
        p.cat,
    )?;
    pass.matmul(p.cat, &head.fc, mtp.rows, p.x, false)?;
    let input = LayerInput::Raw(&head.layer.input_norm);
    pass.input_matmul(input, &aw.qkv, mtp.rows, p.wide)?;
    let rows = AttentionRows {
        rows: mtp.rows,
        pos: at(base, mtp.pos),
        kv_base: at(base, mtp.kv_base),
        k_cache: cache.k.at(0),
        v_cache: cache.v.at(0),
        // Runs attention_prep alone (the absorbed pairs' rows are written, never attended).
        one_row_a_session: false,
        by_context: crate::kernels::ContextSplit::Process,
    };
    m.kernels
        .attention_prep(&m.gpu, &m.dims, &rows, p.wide, &pass.prep_weights(aw), p.q)?;
    m.kernels.copy_rows(
        &m.gpu,
        p.hidden,
        at(base, mtp.pairs),
        mtp.num_pairs,
        h,
        sessions.mtp_store.at(0),
    )
}
