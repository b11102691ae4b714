//! The pieces a decoder is built from, as traits so that each family plugs its own blocks in:
//! a [`Mixer`] (token mixing: attention or linear attention, with per-session state) and an
//! [`Mlp`] (per-token: dense SwiGLU or sparse MoE). Qwen3's are in [`crate::qwen3`]; Qwen3-Next's
//! in [`crate::qwen3_next`].

use crate::state::SessionState;
use std::ops::Range;

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
