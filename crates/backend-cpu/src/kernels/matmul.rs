//! `y = x · Wᵀ` with W `[out, in]` in f32, bf16 or block-scaled FP8 (widened on the fly), f32
//! accumulation.
//!
//! Batch invariance: every output element `y[r, o]` is one dot product of `x[r]` and `W[o]`,
//! computed by the same code in the same order (16 interleaved partial sums over `in`, then a
//! fixed pairwise reduction) whether `x` has 1 row or 64. Threads split the **output columns**,
//! never `in`. Several rows may share one pass over a weight row (register blocking), but each
//! row keeps its own partial sums, so its result is bit-identical to computing it alone.
//!
//! Rust never contracts `a * b + c` into an FMA on its own, so the AVX2 build of the same source
//! (chosen at run time) gives the same bits as the portable one.
//!
//! Each entry takes the [`MatmulInput`]: with [`MatmulInput::Bf16`] the products of bf16 weights
//! are those of x rounded to bf16 ([`super::matmul_bf16_input`], where [`bf16_input_available`]);
//! f32 weights keep f32 products either way, and so do FP8 ones ([`super::matmul_fp8`], with a
//! definition of its own: a block's sum scaled once), unless `FLASHLANE_CPU_AMX_FP8=1` puts
//! them on AMX ([`matmul_fp8_weights`]).

use half::bf16;
use model::{MatmulInput, TensorData};
use rayon::prelude::*;

/// Partial sums per dot product: a multiple of the widest vector (AVX-512: 16 lanes of f32).
const LANES: usize = 16;
/// Output columns per rayon task: enough work per task to amortise scheduling, and enough tasks
/// (out / 32) to balance threads even for narrow projections.
const COL_BLOCK: usize = 32;
/// Rows sharing one pass over a weight row.
const ROW_BLOCK: usize = 4;

#[inline(always)]
fn widen(w: bf16) -> f32 {
    // Exact: bf16 is the top half of an f32.
    f32::from_bits((w.to_bits() as u32) << 16)
}

/// The fixed pairwise reduction of a dot product's 16 partial sums.
#[inline(always)]
pub(crate) fn reduce(acc: &[f32; LANES]) -> f32 {
    let mut h = [0.0f32; 8];
    for i in 0..8 {
        h[i] = acc[i] + acc[i + 8];
    }
    let q = [h[0] + h[4], h[1] + h[5], h[2] + h[6], h[3] + h[7]];
    (q[0] + q[2]) + (q[1] + q[3])
}

/// Dot product of one activation row and one f32 weight row, in the fixed order.
#[inline(always)]
pub fn dot(x: &[f32], w: &[f32]) -> f32 {
    debug_assert_eq!(x.len(), w.len());
    let mut acc = [0.0f32; LANES];
    let n = x.len() / LANES * LANES;
    for (xc, wc) in x[..n].chunks_exact(LANES).zip(w[..n].chunks_exact(LANES)) {
        for i in 0..LANES {
            acc[i] += xc[i] * wc[i];
        }
    }
    for i in n..x.len() {
        acc[i - n] += x[i] * w[i];
    }
    reduce(&acc)
}

/// [`dot`] with a bf16 weight row widened on the fly (the same bits as widening first).
#[inline(always)]
pub fn dot_bf16(x: &[f32], w: &[bf16]) -> f32 {
    debug_assert_eq!(x.len(), w.len());
    let mut acc = [0.0f32; LANES];
    let n = x.len() / LANES * LANES;
    for (xc, wc) in x[..n].chunks_exact(LANES).zip(w[..n].chunks_exact(LANES)) {
        for i in 0..LANES {
            acc[i] += xc[i] * widen(wc[i]);
        }
    }
    for i in n..x.len() {
        acc[i - n] += x[i] * widen(w[i]);
    }
    reduce(&acc)
}

/// [`dot`] of `ROW_BLOCK` rows against one weight row: each row has its own partial sums.
#[inline(always)]
fn dot_rows(x: [&[f32]; ROW_BLOCK], w: &[f32]) -> [f32; ROW_BLOCK] {
    let mut acc = [[0.0f32; LANES]; ROW_BLOCK];
    let k = w.len();
    let n = k / LANES * LANES;
    let mut j = 0;
    while j < n {
        let wc = &w[j..j + LANES];
        for r in 0..ROW_BLOCK {
            let xc = &x[r][j..j + LANES];
            for i in 0..LANES {
                acc[r][i] += xc[i] * wc[i];
            }
        }
        j += LANES;
    }
    for r in 0..ROW_BLOCK {
        for i in n..k {
            acc[r][i - n] += x[r][i] * w[i];
        }
    }
    [
        reduce(&acc[0]),
        reduce(&acc[1]),
        reduce(&acc[2]),
        reduce(&acc[3]),
    ]
}

/// One column block: `yt[c, r]` for the columns `cols` (yt is column-major, `rows` per column).
#[inline(always)]
fn block(x: &[f32], k: usize, w: TensorData<'_>, cols: std::ops::Range<usize>, yt: &mut [f32]) {
    let rows = x.len() / k;
    let mut wide: Vec<f32> = Vec::new();
    for (c, out) in cols.zip(yt.chunks_exact_mut(rows)) {
        let wrow: &[f32] = match w {
            TensorData::F32(s) => &s[c * k..(c + 1) * k],
            TensorData::Fp8(_) => unreachable!("[fp8-kernel] FP8 goes through matmul_fp8"),
            TensorData::Bf16(s) => {
                let s = &s[c * k..(c + 1) * k];
                if rows == 1 {
                    out[0] = dot_bf16(x, s);
                    continue;
                }
                wide.clear();
                wide.extend(s.iter().map(|v| widen(*v)));
                &wide
            }
        };
        let mut r = 0;
        while r + ROW_BLOCK <= rows {
            let xs = [
                &x[r * k..(r + 1) * k],
                &x[(r + 1) * k..(r + 2) * k],
                &x[(r + 2) * k..(r + 3) * k],
                &x[(r + 3) * k..(r + 4) * k],
            ];
            out[r..r + ROW_BLOCK].copy_from_slice(&dot_rows(xs, wrow));
            r += ROW_BLOCK;
        }
        while r < rows {
            out[r] = dot(&x[r * k..(r + 1) * k], wrow);
            r += 1;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn block_avx2(
    x: &[f32],
    k: usize,
    w: TensorData<'_>,
    cols: std::ops::Range<usize>,
    yt: &mut [f32],
) {
    block(x, k, w, cols, yt)
}

fn run_block(x: &[f32], k: usize, w: TensorData<'_>, cols: std::ops::Range<usize>, yt: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above).
            return unsafe { block_avx2(x, k, w, cols, yt) };
        }
    }
    block(x, k, w, cols, yt)
}

/// Whether this CPU multiplies bf16 inputs ([`MatmulInput::Bf16`]): it needs AVX-512 BF16.
pub fn bf16_input_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::matmul_bf16_input::available()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Which kernel multiplies bf16 inputs in this process, for the startup line: AMX's tiles (for
/// rows of k whole chunks of 32, every projection of the models served) or AVX-512 BF16's
/// `vdpbf16ps`; `None` where neither runs.
pub fn bf16_input_kernel() -> Option<&'static str> {
    #[cfg(target_arch = "x86_64")]
    {
        if super::matmul_amx::enabled() {
            return Some("AMX tiles");
        }
    }
    bf16_input_available().then_some("AVX-512 BF16")
}

/// Whether bf16-input matmuls with rows of `k` run on AMX tiles in this process
/// ([`super::matmul_amx::in_use`]): a function of the process and k alone, so a row's bits
/// never depend on the batch.
fn amx_in_use(k: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::matmul_amx::in_use(k)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = k;
        false
    }
}

/// The bf16-input kernel over `w`, stored or in the layout [`interleave_for`] made (AMX's panels
/// where [`amx_in_use`], the interleaved groups elsewhere). Callers choose
/// [`MatmulInput::Bf16`] only where [`bf16_input_available`] (the CLI refuses it elsewhere).
fn matmul_bf16_input(x: &[f32], w: &[bf16], k: usize, y: &mut [f32], interleaved: bool) {
    #[cfg(target_arch = "x86_64")]
    {
        match (amx_in_use(k), interleaved) {
            (true, true) => super::matmul_amx::matmul_panels(x, w, k, y),
            (true, false) => super::matmul_amx::matmul_stored(x, w, k, y),
            (false, true) => super::matmul_bf16_input::matmul_interleaved(x, w, k, y),
            (false, false) => super::matmul_bf16_input::matmul_stored(x, w, k, y),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (x, w, k, y, interleaved);
        panic!("[matmul-bf16-input] bf16 inputs need an x86-64 CPU with AVX-512 BF16");
    }
}

/// `y = x · Wᵀ` for the FP8 rows `w`, their bytes as stored or (with `interleaved`) in
/// [`super::matmul_fp8::interleave`]'s groups: with [`MatmulInput::Bf16`] on AMX where
/// [`super::matmul_amx::fp8_in_use`] (x rounded to bf16, a block's chain of `tdpbf16ps` scaled
/// once), else in f32 ([`super::matmul_fp8`]: x as it is, whatever `input` says). The kernel is a
/// function of the process, `input` and the weights' shape, never of the batch.
pub fn matmul_fp8_weights(
    x: &[f32],
    w: model::Fp8Rows<'_>,
    k: usize,
    y: &mut [f32],
    input: MatmulInput,
    interleaved: bool,
) {
    #[cfg(target_arch = "x86_64")]
    if input == MatmulInput::Bf16 && super::matmul_amx::fp8_in_use(&w, k) {
        return super::matmul_amx::matmul_fp8(x, w, k, y, interleaved);
    }
    let _ = input;
    if interleaved {
        super::matmul_fp8::matmul_interleaved(x, w, k, y)
    } else {
        super::matmul_fp8::matmul(x, w, k, y)
    }
}

/// `(rows, out)` of a matmul of `x` by a weight of `w_len` elements, both rows of `k`, into `y`
/// of `y_len` elements; panics naming what does not fit.
pub(super) fn matmul_shape(x: &[f32], w_len: usize, k: usize, y_len: usize) -> (usize, usize) {
    assert!(
        k > 0 && x.len().is_multiple_of(k),
        "matmul: x is not whole rows of {k}"
    );
    assert_eq!(w_len % k, 0, "matmul: weight is not whole rows of {k}");
    let (rows, out) = (x.len() / k, w_len / k);
    assert_eq!(y_len, rows * out, "matmul: y must be [{rows}, {out}]");
    (rows, out)
}

/// `y[rows, out] = x[rows, k] · W[out, k]ᵀ`, x multiplied as `input` says.
pub fn matmul(x: &[f32], w: TensorData<'_>, k: usize, y: &mut [f32], input: MatmulInput) {
    let (rows, out) = matmul_shape(x, w.len(), k, y.len());
    if rows == 0 {
        return;
    }
    if let TensorData::Fp8(m) = w {
        return matmul_fp8_weights(x, m, k, y, input, false);
    }
    if let TensorData::Bf16(wb) = w {
        if input == MatmulInput::Bf16 {
            return matmul_bf16_input(x, wb, k, y, false);
        }
        if super::matmul_fast::enabled() {
            return super::matmul_fast::matmul_bf16(x, wb, k, y);
        }
    }
    let fill = |yt: &mut [f32]| {
        yt.par_chunks_mut(COL_BLOCK * rows)
            .enumerate()
            .for_each(|(b, chunk)| {
                let start = b * COL_BLOCK;
                let cols = start..start + chunk.len() / rows;
                run_block(x, k, w, cols, chunk);
            });
    };
    if rows == 1 {
        fill(y);
    } else {
        let mut yt = vec![0.0f32; rows * out];
        fill(&mut yt);
        for (c, col) in yt.chunks_exact(rows).enumerate() {
            for (r, v) in col.iter().enumerate() {
                y[r * out + c] = *v;
            }
        }
    }
}

/// The layout [`interleave_for`] makes for rows of `k` multiplied as `input` says, as (rows a
/// group, elements a piece): AMX's panels (16, 32) where bf16 inputs run on AMX
/// ([`amx_in_use`]), else the interleaved groups (4, 8).
fn layout(k: usize, input: MatmulInput) -> (usize, usize) {
    #[cfg(target_arch = "x86_64")]
    if input == MatmulInput::Bf16 && amx_in_use(k) {
        return (super::matmul_amx::PANEL_ROWS, super::matmul_amx::CHUNK);
    }
    let _ = (k, input);
    (
        super::matmul_fast::INTERLEAVE_ROWS,
        super::matmul_fast::INTERLEAVE_PIECE,
    )
}

/// Whether a bf16 `[out, k]` projection multiplied as `input` says is worth storing in its
/// kernel's [`layout`] ([`interleave_for`]): whole groups and pieces, and a kernel that reads
/// the layout runs in this process (AMX's, or the fast exact one, whose interleaved groups the
/// `vdpbf16ps` kernel reads too). The bits are the same either way.
pub fn interleave_wanted(k: usize, out: usize, input: MatmulInput) -> bool {
    let (group, piece) = layout(k, input);
    let whole = k > 0 && k.is_multiple_of(piece) && out.is_multiple_of(group);
    whole && ((input == MatmulInput::Bf16 && amx_in_use(k)) || super::matmul_fast::enabled())
}

/// `w` (`[out, k]`) in the [`layout`] [`matmul_interleaved`] reads for `input`: each group of
/// rows interleaved by pieces (AMX's panels, or the interleaved groups of
/// [`super::matmul_fast::interleave_rows`]). Only where [`interleave_wanted`] said so.
pub fn interleave_for(w: &[bf16], k: usize, input: MatmulInput) -> Vec<bf16> {
    let (group, piece) = layout(k, input);
    assert!(
        k > 0 && w.len().is_multiple_of(k) && interleave_wanted(k, w.len() / k, input),
        "interleave_for: [{}, {k}] is not whole groups of {group} rows × pieces of {piece}",
        w.len() / k.max(1)
    );
    super::matmul_fast::interleave_groups(w, k, group, piece)
}

/// The rows of one group of [`interleave_for`]'s layout for `input` (16 in AMX's panels, 4
/// interleaved): a prefix of the outputs is computed in whole groups.
pub fn interleave_group(k: usize, input: MatmulInput) -> usize {
    layout(k, input).0
}

/// Row `r` of a bf16 `[out, k]` matrix stored by [`interleave_for`] for `input`, widened into
/// `out` (`k` values): the layout undone for one row (a tied embedding's rows are read from its
/// lm_head's copy). Each group of rows holds, piece after piece, one piece of each of its rows.
pub fn interleaved_row(w: &[bf16], k: usize, r: usize, input: MatmulInput, out: &mut [f32]) {
    let (group, piece) = layout(k, input);
    assert_eq!(out.len(), k, "interleaved_row: out must hold a row of {k}");
    let first = (r / group) * group * k + (r % group) * piece;
    for (p, dst) in out.chunks_exact_mut(piece).enumerate() {
        let src = &w[first + p * group * piece..][..piece];
        for (d, v) in dst.iter_mut().zip(src) {
            *d = widen(*v);
        }
    }
}

/// [`matmul`] over bf16 weights stored by [`interleave_for`] (only where [`interleave_wanted`]
/// said so): the same bits as [`matmul`] over the stored weights.
pub fn matmul_interleaved(x: &[f32], w: &[bf16], k: usize, y: &mut [f32], input: MatmulInput) {
    match input {
        MatmulInput::Exact => {
            assert!(
                super::matmul_fast::enabled(),
                "matmul_interleaved: interleaved weights without the fast kernel"
            );
            super::matmul_fast::matmul_bf16_interleaved(x, w, k, y)
        }
        MatmulInput::Bf16 => matmul_bf16_input(x, w, k, y, true),
    }
}

/// Like [`matmul`] on the weight rows `rows_of_w` only (an expert's slice of a fused tensor, or
/// the vocabulary rows of an embedding used as lm_head): `y[rows, rows_of_w.len()]`.
pub fn matmul_rows(
    x: &[f32],
    w: TensorData<'_>,
    k: usize,
    rows_of_w: std::ops::Range<usize>,
    y: &mut [f32],
    input: MatmulInput,
) {
    matmul(x, w.rows(k, rows_of_w), k, y, input)
}

/// The plain definition in f64, for tests.
pub fn matmul_reference(x: &[f32], w: TensorData<'_>, k: usize) -> Vec<f32> {
    let rows = x.len() / k;
    let out = w.len() / k;
    let mut y = vec![0.0f32; rows * out];
    for r in 0..rows {
        for c in 0..out {
            let mut s = 0.0f64;
            for j in 0..k {
                s += x[r * k + j] as f64 * w.get(c * k + j) as f64;
            }
            y[r * out + c] = s as f32;
        }
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testutil::{max_abs_diff, Rng};

    #[test]
    fn matmul_matches_reference_for_f32_and_bf16_weights() {
        let mut rng = Rng::fresh();
        let seed = rng.0;
        for (rows, k, out) in [(1, 64, 40), (3, 100, 70), (9, 37, 33), (5, 256, 130)] {
            let x = rng.vec(rows * k);
            let wf = rng.vec(out * k);
            let wb: Vec<bf16> = wf.iter().map(|v| bf16::from_f32(*v)).collect();
            for w in [TensorData::F32(&wf), TensorData::Bf16(&wb)] {
                let mut y = vec![0.0; rows * out];
                matmul(&x, w, k, &mut y, MatmulInput::Exact);
                let d = max_abs_diff(&y, &matmul_reference(&x, w, k));
                assert!(
                    d < 1e-4 * (k as f32).sqrt(),
                    "seed {seed} {rows}x{k}x{out}: diff {d}"
                );
            }
        }
    }

    #[test]
    fn matmul_row_is_bit_identical_alone_or_in_a_batch() {
        let mut rng = Rng::fresh();
        let (k, out) = (200, 75);
        let wf = rng.vec(out * k);
        let wb: Vec<bf16> = wf.iter().map(|v| bf16::from_f32(*v)).collect();
        for w in [TensorData::F32(&wf), TensorData::Bf16(&wb)] {
            for rows in [2, 4, 7, 13] {
                let x = rng.vec(rows * k);
                let mut all = vec![0.0; rows * out];
                matmul(&x, w, k, &mut all, MatmulInput::Exact);
                for r in 0..rows {
                    let mut one = vec![0.0; out];
                    matmul(&x[r * k..(r + 1) * k], w, k, &mut one, MatmulInput::Exact);
                    assert_eq!(one, all[r * out..(r + 1) * out], "row {r} of {rows}");
                }
            }
        }
    }
}
