//! The pieces a decoder is built from, as traits so that each family plugs its own blocks in:
//! a [`Mixer`] (token mixing: attention or linear attention, with per-session state) and an
//! [`Mlp`] (per-token: dense SwiGLU or sparse MoE). Qwen3's are in [`crate::qwen3`]; Qwen3-Next's
//! in [`crate::qwen3_next`].

use crate::kernels::attention::{causal_attention_in, AttentionShape};
use crate::kernels::rope::Rope;
use crate::state::{KvRows, LayerState, SessionState};
use rayon::prelude::*;
use std::ops::Range;

/// One stream's rows in an attention call: its rows in the batch, the position of the first,
/// and the K/V rows it reads and appends to.
pub(crate) struct KvSpan<'a> {
    pub rows: Range<usize>,
    pub start: usize,
    pub kv: &'a mut KvRows,
}

impl<'a> KvSpan<'a> {
    /// Each segment's rows, first position and KV rows of attention layer `layer`.
    pub fn of_segments(segments: &'a mut [Segment<'_>], layer: usize) -> Vec<KvSpan<'a>> {
        segments
            .iter_mut()
            .map(|seg| {
                let LayerState::Attention(kv) = &mut seg.state.layers[layer] else {
                    panic!("layer {layer} is attention but its session state is not KV rows");
                };
                KvSpan {
                    rows: seg.rows.clone(),
                    start: seg.start,
                    kv,
                }
            })
            .collect()
    }
}

/// The part of an attention layer between its projections and its output: for every span, RoPE
/// at its rows' own positions (`q` `[T, heads·hd]` and `k` `[T, kv_heads·hd]` rotated in place),
/// its k and v appended to its K/V rows, then causal attention of its rows over them into
/// `attn` (`[T, heads·hd]`). Spans run side by side on the threads (each also splits its own
/// work): every span's arithmetic is its own, so the bits are those of one span after another.
/// Spans must be in row order and not overlap.
pub(crate) fn attend_spans(
    rope: &Rope,
    shape: AttentionShape,
    (q, k, v): (&mut [f32], &mut [f32], &[f32]),
    spans: &mut [KvSpan<'_>],
    attn: &mut [f32],
) {
    let AttentionShape {
        heads,
        kv_heads,
        head_dim: hd,
        ..
    } = shape;
    let (q_row, kv_row) = (heads * hd, kv_heads * hd);
    // Each span's rows of q, k, v and attn, cut off the fronts of the slices in row order.
    let mut pieces = Vec::with_capacity(spans.len());
    let (mut q, mut k, mut v, mut attn) = (q, k, v, attn);
    let mut at = 0;
    for span in spans.iter_mut() {
        assert!(
            span.rows.start >= at && span.rows.start <= span.rows.end,
            "[attend-spans-order] span rows {:?} after row {at}",
            span.rows
        );
        let (skip, n) = (span.rows.start - at, span.rows.len());
        let (_, q_rest) = std::mem::take(&mut q).split_at_mut(skip * q_row);
        let (q_span, q_rest) = q_rest.split_at_mut(n * q_row);
        let (_, k_rest) = std::mem::take(&mut k).split_at_mut(skip * kv_row);
        let (k_span, k_rest) = k_rest.split_at_mut(n * kv_row);
        let (v_span, v_rest) = v[skip * kv_row..].split_at(n * kv_row);
        let (_, a_rest) = std::mem::take(&mut attn).split_at_mut(skip * q_row);
        let (a_span, a_rest) = a_rest.split_at_mut(n * q_row);
        (q, k, v, attn) = (q_rest, k_rest, v_rest, a_rest);
        at = span.rows.end;
        pieces.push((span, q_span, k_span, v_span, a_span));
    }
    pieces
        .into_par_iter()
        .for_each(|(span, q_span, k_span, v_span, a_span)| {
            let rows = 0..span.rows.len();
            rope.apply_rows(q_span, k_span, (heads, kv_heads, hd), rows, span.start);
            span.kv.write(span.start, k_span, v_span);
            causal_attention_in(
                q_span,
                &span.kv.k,
                &span.kv.v,
                span.kv.layout(),
                span.start,
                shape,
                a_span,
            );
        });
}

/// One window of a batch as the graph sees it: its rows in the batch's activations, the
/// position of its first row, and its session's state (appended to by the forward).
pub struct Segment<'s> {
    pub rows: Range<usize>,
    pub start: usize,
    pub state: &'s mut SessionState,
}

/// Token mixing of one layer. `xn` is `[rows, hidden]` (already normed) for every segment;
/// `out` receives `[rows, hidden]`. The layer reads and appends to `segments[_].state.layers[layer]`.
/// Batch invariance: a segment's output rows must not depend on the other segments.
pub trait Mixer: Send + Sync {
    fn forward(&self, layer: usize, xn: &[f32], segments: &mut [Segment<'_>], out: &mut [f32]);
}

/// The per-token feed-forward of one layer: `out[rows, hidden] = mlp(xn[rows, hidden])`.
/// Batch invariance: each row's output depends on that row alone.
pub trait Mlp: Send + Sync {
    fn forward(&self, xn: &[f32], out: &mut [f32]);
}
