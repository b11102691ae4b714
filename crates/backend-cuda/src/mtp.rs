//! The MTP head on the GPU (models.md "MTP head", as backend-cpu's `qwen3_next/mtp.rs`):
//! after each round it takes the pairs `(h[i], x[i+1])` the round's windows completed (only their
//! K/V rows are kept) and the sessions' rings keep the hidden rows a rollback may need; drafting
//! chains the head greedily from the session's last position, on the GPU.

use crate::forward::{at, Meta, MixerRows, Pass, Scratch, Then};
use crate::graphs::GraphKey;
use crate::kernels::AttentionRows;
use crate::model::CudaModel;
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
    pass.norm(p.x, &head.layer.input_norm, mtp.rows, p.xn)?;
    pass.matmul(p.xn, &aw.qkv, mtp.rows, p.wide, false)?;
    let rows = AttentionRows {
        rows: mtp.rows,
        pos: at(base, mtp.pos),
        kv_base: at(base, mtp.kv_base),
        k_cache: cache.k.at(0),
        v_cache: cache.v.at(0),
    };
    m.kernels.attention_prep(
        &m.gpu,
        &m.dims,
        &rows,
        p.wide,
        aw.q_norm.at(0),
        aw.k_norm.at(0),
        m.weights.inv_freq.at(0),
        pass.eps(),
        p.q,
    )?;
    m.kernels.copy_rows(
        &m.gpu,
        p.hidden,
        at(base, mtp.pairs),
        mtp.num_pairs,
        h,
        sessions.mtp_store.at(0),
    )
}

/// Where one session's draft chain starts: the session (at `len` positions, its ring holding
/// h[len − 1]) and the token drawn after it.
#[derive(Clone, Copy, Debug)]
pub struct DraftStart {
    pub session: usize,
    pub next_token: u32,
}

/// Greedy MTP drafts, `num` per start, for several sessions in one pass of the head per step:
/// step 0 on (h[len − 1], next_token) at position len − 1, then each step on the previous draft
/// and the head's own output row. Tokens are chosen on the GPU (argmax over the ids
/// `0..draft_vocab`, see [`::model::draft_vocab`]) and feed the next step there; one copy back
/// at the end. Every session must have room for `num` more MTP rows (positions up to
/// len − 2 + num). A row's arithmetic does not depend on the others (batch-invariant kernels), so
/// each session gets the drafts it would get alone.
pub fn draft(
    m: &CudaModel,
    sessions: &Sessions,
    scratch: &mut Scratch,
    starts: &[DraftStart],
    num: usize,
) -> Result<Vec<Vec<u32>>, CudaError> {
    let rows = starts.len();
    if rows == 0 || num == 0 {
        return Ok(vec![Vec::new(); rows]);
    }
    let pos0 = |d: &DraftStart| sessions.meta[d.session].len - 1;
    let mut meta = Meta::default();
    // Token slots first, step-major: slot s·rows + r is row r's input of step s; slots of step 0
    // are the next tokens, argmax writes those of step s + 1.
    let tokens = meta.push(
        starts
            .iter()
            .map(|d| d.next_token as usize)
            .chain(std::iter::repeat_n(0, num * rows)),
    );
    let offsets = DraftMeta {
        tokens,
        pos: meta.push((0..num).flat_map(|s| starts.iter().map(move |d| pos0(d) + s))),
        kv_base: meta.push(starts.iter().map(|d| sessions.kv_base[d.session])),
        src: meta.data.len(),
        rows,
    };
    // Hidden sources: step 0 reads each session's ring row, later steps the head's own rows.
    meta.data.extend(
        starts
            .iter()
            .map(|d| -(sessions.store_row(d.session, pos0(d)) as i32) - 1),
    );
    meta.push(0..rows);
    let ptrs = scratch.ensure(m, rows, rows)?;
    let base = scratch.upload(&m.gpu, &meta)?;
    let pass = Pass { m, p: ptrs };
    let key = GraphKey::Draft { rows, steps: num };
    scratch.graphs.run(&m.gpu, key, || {
        enqueue_draft(&pass, sessions, base, &offsets, num)
    })?;
    let back = scratch.meta.read(&m.gpu, (num + 1) * rows)?;
    Ok((0..rows)
        .map(|r| (1..=num).map(|s| back[s * rows + r] as u32).collect())
        .collect())
}

/// Metadata offsets of a draft call.
struct DraftMeta {
    tokens: usize,
    pos: usize,
    kv_base: usize,
    /// The hidden sources of step 0 (ring rows), then of later steps (the head's own rows).
    src: usize,
    rows: usize,
}

fn enqueue_draft(
    pass: &Pass<'_>,
    sessions: &Sessions,
    base: u64,
    d: &DraftMeta,
    num: usize,
) -> Result<(), CudaError> {
    let (m, ptrs) = (pass.m, pass.p);
    let head = m.weights.mtp.as_ref().expect("a model with an MTP head");
    let cache = sessions.mtp_kv.as_ref().expect("sessions hold MTP rows");
    let h = m.config.hidden_size;
    let vocab = ::model::draft_vocab(m.config.vocab_size);
    let n = d.rows;
    for s in 0..num {
        m.kernels.mtp_input(
            &m.gpu,
            n,
            at(base, d.tokens + s * n),
            m.weights.embed.at(0),
            ptrs.draft_hidden,
            sessions.mtp_store.at(0),
            at(base, d.src + if s > 0 { n } else { 0 }),
            head.pre_fc_norm_embedding.at(0),
            head.pre_fc_norm_hidden.at(0),
            h,
            pass.eps(),
            ptrs.cat,
        )?;
        pass.matmul(ptrs.cat, &head.fc, n, ptrs.x, false)?;
        let rows = MixerRows::Attention(AttentionRows {
            rows: n,
            pos: at(base, d.pos + s * n),
            kv_base: at(base, d.kv_base),
            k_cache: cache.k.at(0),
            v_cache: cache.v.at(0),
        });
        pass.norm(ptrs.x, &head.layer.input_norm, n, ptrs.xn)?;
        let then = Then {
            w: &head.norm,
            out: ptrs.draft_hidden,
        };
        pass.layer(&head.layer, n, &rows, sessions, then)?;
        pass.logits(ptrs.draft_hidden, 0, n, vocab)?;
        // A row with no finite logit drafts token 0: a draft only proposes, and the next step
        // needs a valid id.
        m.kernels.argmax(
            &m.gpu,
            ptrs.logits,
            n,
            vocab,
            at(base, d.tokens + (s + 1) * n),
            0,
        )?;
    }
    Ok(())
}
