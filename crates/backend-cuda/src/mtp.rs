//! Drafting with the MTP head on the GPU (models.md "MTP head", as backend-cpu's
//! `qwen3_next/mtp.rs`): chains the head greedily from each session's last position. What a round
//! feeds the head (the pairs `(h[i], x[i+1])` its windows completed, the hidden rows the
//! sessions' rings keep) is part of the round: `forward/mtp_absorb.rs`.

use crate::forward::{at, LayerInput, Meta, MixerRows, Pass, Scratch, Then};
use crate::graphs::GraphKey;
use crate::kernels::{round_launches, AttentionRows};
use crate::model::CudaModel;
use crate::state::Sessions;
use crate::CudaError;

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
    m.gpu.set_round_launches(round_launches(&m.dims, rows));
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
            // One row a start, the starts of distinct sessions (lane's contract): a step's keys
            // before its rows are the earlier steps' (earlier launches).
            one_row_a_session: true,
            by_context: crate::kernels::ContextSplit::Process,
        });
        let then = Then {
            w: &head.norm,
            out: ptrs.draft_hidden,
            deferrable: false,
        };
        let input = LayerInput::Raw(&head.layer.input_norm);
        pass.layer(&head.layer, n, &rows, sessions, input, then)?;
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
