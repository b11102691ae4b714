//! `y = x · Wᵀ` for block-scaled FP8 weights kept as stored (e4m3 bytes and one f32 scale per
//! block, models.md "Checkpoint tensors and formats"): the kernel behind
//! [`super::matmul::matmul`] for [`TensorData::Fp8`](model::TensorData::Fp8). The weights take a
//! quarter of the memory of their dequantised f32 values, and a decode step reads half the bytes
//! of bf16 weights.
//!
//! Arithmetic (the same on every CPU and for every batch): each output is 16 lanes of partial
//! sums over `k` (element `j` into lane `j % 16`). Within a block of the weight's columns each
//! lane sums its products `x_j · v_j` by fused multiply-adds, where `v_j` is the weight's e4m3
//! value / 2^8 (exact, never subnormal); at the block's end each lane adds its block sum times
//! the block's scale · 2^8 (one more fused multiply-add) to the lane's total, and the block sums
//! start again from zero; the 16 totals are then reduced as [`super::matmul::dot`] reduces. So
//! one scale multiplies a block's sum, not each weight (as the GPU's FP8 kernels scale a chunk's
//! sum): the dequantised weight `e4m3 · scale` is never rounded, and decoding a weight costs no
//! multiplication. The result differs from a dot product over weights dequantised at load by f32
//! rounding only (the parity fixtures' tolerance holds).
//!
//! Widening (AVX-512): 16 bytes are sign-extended to 16-bit words, shifted and masked into f16
//! bits (the byte's sign to bit 15, its exponent and mantissa to bits 13..7), which read as the
//! e4m3 value / 2^8 (the biases are 7 and 15; e4m3's subnormals are f16 subnormals), and
//! `vcvtph2ps` widens those exactly to f32s that are never subnormal (no slow denormal
//! arithmetic, whatever the bytes). [`matmul_portable`] is the same arithmetic in scalar code,
//! for CPUs without AVX-512 and for shapes whose blocks are not whole vectors of 16.
//!
//! Batch invariance: tiles decide only which dot products share a pass over the weights, never
//! the operations of one. Threads split the output columns, never `k`.
//!
//! Layout: the loader stores each group of 4 weight rows interleaved by 16-byte pieces
//! ([`interleave`]), so a tile over a group reads one 64-byte line a step, one stream; the
//! stored layout gives the same bits (`fp8_speed`, 256 MiB of [2048, 2048] matrices on the
//! 2-core Xeon, G weights/s stored → interleaved: 1 row 12.8-13.0 → 15.1-15.6, 2 rows
//! 11.5-11.6 → 13.2-13.5, 4 rows 8.6-8.8 → 9.8, 8 rows 4.3-4.5 → 4.9; bf16 weights through the
//! exact bf16 kernel 7.4-8.0, 6.9-7.0, 4.0, 4.2-4.3).

use model::Fp8Rows;
use rayon::prelude::*;

/// Lanes of partial sums per dot product (one AVX-512 register of f32).
const LANES: usize = 16;
/// Weight rows a tile of a decode window (at most 4 rows) multiplies at once: 4 rows × 4 weight
/// rows is 16 block sums, 4 widened weight vectors and one of x in the 32 AVX-512 registers (the
/// lanes' totals change once a block; the compiler keeps them where it can).
const COL_GROUP: usize = 4;
/// Weight rows a tile multiplies at once in calls of more than 4 rows: 8 rows × 3 weight rows
/// is 24 block sums, so each widened weight vector serves 8 rows (widening costs 4 instructions
/// a vector, a row's product one).
const MANY_ROWS_COL_GROUP: usize = 3;
/// Rows of x in the largest tile.
const MAX_TILE_ROWS: usize = 8;
/// Rows of x a tile over an interleaved group (4 weight rows) takes in calls of more than 4
/// rows: 6 × 4 is 24 block sums.
const MANY_ROWS_INTERLEAVED: usize = 6;
/// Bytes ahead of the weights a tile reads that it prefetches into L1: the groups after the
/// next. Measured on the 2-core Xeon with AMX (`fp8_speed`, one row, 256 MiB of [2048, 2048]
/// matrices, G weights/s): none 8.1, 1 KiB 9.4, 2 KiB 10.2, 4 KiB 10.9-11.3, 8 KiB 13.3-13.9,
/// 12 KiB 13.0-13.4, 16 KiB 13.2-13.6, 32 KiB 8.1-10.3 (into L2 instead: the same or worse).
const PREFETCH_AHEAD: usize = 8192;
/// Output columns per rayon task (a multiple of [`COL_GROUP`]): enough tasks to balance the
/// threads even for a 512-wide expert projection (16 tasks), few enough to amortise scheduling.
const COL_BLOCK: usize = 32;
/// 2^8: a widened byte is the e4m3 value / 2^8 ([`widened`]), so a block's scale is taken × 2^8.
const F16_SHIFT: f32 = model::FP8_SCALE_HEADROOM;

/// The value a byte widens to: e4m3 / 2^8 (exact: a division by a power of two; at least
/// 2^-17 in magnitude where not zero). Not for NaN codes, which the load refuses.
#[inline(always)]
pub fn widened(b: u8) -> f32 {
    model::e4m3_value(b) * (1.0 / F16_SHIFT)
}

/// A block's scale as the sums are multiplied by it: `scale · 2^8` (exact where finite; the load
/// refuses scales for which it is not).
#[inline(always)]
fn block_scale(s: f32) -> f32 {
    s * F16_SHIFT
}

/// Whether this CPU runs the AVX-512 kernel: AVX-512F (whose CPUs all have F16C), unless
/// `FLASHLANE_CPU_KERNELS=portable` keeps the portable kernels. Fixed for the life of the
/// process; the bits are [`matmul_portable`]'s either way.
pub fn enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED.get_or_init(|| {
        let portable =
            std::env::var(super::matmul_fast::KERNELS_ENV).is_ok_and(|v| v == "portable");
        supported() && !portable
    })
}

fn supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("f16c")
            && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the AVX-512 kernel takes `w` with rows of `k`: whole vectors of 16 in a block, so
/// that one scale serves a vector.
fn fits(w: &Fp8Rows<'_>, k: usize) -> bool {
    k == w.cols && k.is_multiple_of(LANES) && w.block_cols.is_multiple_of(LANES)
}

/// `y[rows, out] = x[rows, k] · W[out, k]ᵀ` for the FP8 rows `w`, as the module docs define it:
/// on AVX-512 where [`enabled`] and the blocks are whole vectors, else [`matmul_portable`].
pub fn matmul(x: &[f32], w: Fp8Rows<'_>, k: usize, y: &mut [f32]) {
    assert_eq!(k, w.cols, "[fp8-k] rows of {} elements, not {k}", w.cols);
    if !(enabled() && fits(&w, k)) {
        return matmul_portable(x, w, k, y);
    }
    run(x, w, k, y, false)
}

/// The AVX-512 kernel's tasks, one per [`COL_BLOCK`] output columns, over bytes as stored or
/// (`interleaved`) in [`interleave`]'s groups. Only where [`enabled`] and [`fits`] (and, with
/// `interleaved`, [`interleave_wanted`]).
fn run(x: &[f32], w: Fp8Rows<'_>, k: usize, y: &mut [f32], interleaved: bool) {
    let (rows, out) = super::matmul::matmul_shape(x, w.q.len(), k, y.len());
    if rows == 0 {
        return;
    }
    let y = super::matmul_fast::Output(y.as_mut_ptr());
    (0..out.div_ceil(COL_BLOCK)).into_par_iter().for_each(|b| {
        let start = b * COL_BLOCK;
        let cols = COL_BLOCK.min(out - start);
        let task = w.rows(start..start + cols);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `enabled()` checked AVX-512F, F16C and FMA; `fits` the shapes (interleaved:
        // the task's rows are whole groups, COL_BLOCK and out being multiples of GROUP_ROWS,
        // so its bytes are its groups'); `y` holds `rows × out` floats and this task writes
        // only its columns `start..start + cols`.
        unsafe {
            avx512::block(x, rows, k, &task, interleaved, y.at(start), out)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (&y, &task, interleaved);
    });
}

/// Weight rows in a group of the interleaved layout ([`interleave`]).
pub const GROUP_ROWS: usize = 4;

/// Whether an FP8 `[out, k]` matrix can be stored interleaved ([`interleave`]) for the AVX-512
/// kernel: it runs here, the blocks are whole vectors and the rows whole groups.
pub fn interleave_wanted(w: &Fp8Rows<'_>, k: usize) -> bool {
    enabled() && fits(w, k) && (w.q.len() / k).is_multiple_of(GROUP_ROWS)
}

/// `q` (`[out, k]` e4m3 bytes) with each group of [`GROUP_ROWS`] rows interleaved in pieces of
/// 16 bytes: piece `p` of the group's 4 rows (one 64-byte cache line), then piece `p + 1`, so a
/// tile over a group reads one stream. The bits are the stored layout's.
pub fn interleave(q: &[u8], k: usize) -> Vec<u8> {
    assert!(
        k.is_multiple_of(LANES) && q.len().is_multiple_of(GROUP_ROWS * k),
        "[fp8-interleave] [{}, {k}] is not whole groups of {GROUP_ROWS} rows × pieces of {LANES}",
        q.len() / k.max(1)
    );
    super::matmul_fast::interleave_groups(q, k, GROUP_ROWS, LANES)
}

/// Row `r` of bytes stored by [`interleave`], as stored (`k` bytes into `out`).
pub fn interleaved_row(q: &[u8], k: usize, r: usize, out: &mut [u8]) {
    let first = (r / GROUP_ROWS) * GROUP_ROWS * k + (r % GROUP_ROWS) * LANES;
    for (p, dst) in out.chunks_exact_mut(LANES).enumerate() {
        dst.copy_from_slice(&q[first + p * GROUP_ROWS * LANES..][..LANES]);
    }
}

/// [`matmul`] over `w` whose bytes [`interleave`] laid out (only where [`interleave_wanted`]
/// said so): the same bits.
pub fn matmul_interleaved(x: &[f32], w: Fp8Rows<'_>, k: usize, y: &mut [f32]) {
    assert!(
        interleave_wanted(&w, k),
        "[fp8-interleave] interleaved FP8 weights this kernel does not take"
    );
    run(x, w, k, y, true)
}

/// The module's arithmetic in scalar code (`f32::mul_add` is the fused multiply-add), any block
/// shape: the definition the AVX-512 kernel reproduces bit for bit.
pub fn matmul_portable(x: &[f32], w: Fp8Rows<'_>, k: usize, y: &mut [f32]) {
    let (rows, out) = super::matmul::matmul_shape(x, w.q.len(), k, y.len());
    if rows == 0 {
        return;
    }
    let mut yt = vec![0f32; rows * out];
    yt.par_chunks_mut(rows).enumerate().for_each(|(c, col)| {
        let q = &w.q[c * k..(c + 1) * k];
        let scales = w.row_scales(c);
        for (r, v) in col.iter_mut().enumerate() {
            *v = dot_portable(&x[r * k..(r + 1) * k], q, scales, w.block_cols);
        }
    });
    for (c, col) in yt.chunks_exact(rows).enumerate() {
        for (r, v) in col.iter().enumerate() {
            y[r * out + c] = *v;
        }
    }
}

/// One output of [`matmul_portable`].
fn dot_portable(x: &[f32], q: &[u8], scales: &[f32], block_cols: usize) -> f32 {
    let mut total = [0f32; LANES];
    let mut block = [0f32; LANES];
    for (j, (xv, b)) in x.iter().zip(q).enumerate() {
        let lane = j % LANES;
        block[lane] = xv.mul_add(widened(*b), block[lane]);
        if (j + 1) % block_cols == 0 {
            let s = block_scale(scales[j / block_cols]);
            for (t, b) in total.iter_mut().zip(block.iter_mut()) {
                *t = b.mul_add(s, *t);
                *b = 0.0;
            }
        }
    }
    super::matmul::reduce(&total)
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx512 {
    use super::{
        block_scale, COL_GROUP, GROUP_ROWS, LANES, MANY_ROWS_COL_GROUP, MANY_ROWS_INTERLEAVED,
        MAX_TILE_ROWS, PREFETCH_AHEAD,
    };
    use crate::kernels::matmul::reduce;
    use model::Fp8Rows;
    use std::arch::x86_64::*;

    /// The 16 bytes at `q` widened: each e4m3 value / 2^8 (module docs).
    #[inline]
    #[target_feature(enable = "avx512f,avx2,f16c")]
    pub(in crate::kernels) unsafe fn widen16(q: *const u8) -> __m512 {
        // Sign-extended, a byte's sign fills bits 15..7 of its word; shifted by 7 its exponent
        // and mantissa sit in bits 13..7 and the sign in 15 and 14; the mask clears 14 (f16's
        // top exponent bit, always 0 here) and the bits below 7.
        let words = _mm256_cvtepi8_epi16(_mm_loadu_si128(q as *const __m128i));
        let half = _mm256_and_si256(
            _mm256_slli_epi16::<7>(words),
            _mm256_set1_epi16(0xbf80u16 as i16),
        );
        _mm512_cvtph_ps(half)
    }

    /// One task's columns: `w`'s rows against every row of `x`, into `y` (row stride `ld`).
    /// Stored bytes: a decode window (at most 4 rows) takes groups of 4 weight rows in one
    /// tile, more rows groups of 3 in tiles of up to 8 rows. Interleaved bytes
    /// ([`super::interleave`]): tiles of one group (4 weight rows) against up to 4 rows, or 6
    /// where there are more.
    #[target_feature(enable = "avx512f,avx2,f16c,fma")]
    pub(super) unsafe fn block(
        x: &[f32],
        rows: usize,
        k: usize,
        w: &Fp8Rows<'_>,
        interleaved: bool,
        y: *mut f32,
        ld: usize,
    ) {
        let cols = w.q.len() / k;
        let (group_cols, tile_max) = match (interleaved, rows <= 4) {
            (false, true) => (COL_GROUP, 4),
            (false, false) => (MANY_ROWS_COL_GROUP, MAX_TILE_ROWS),
            (true, true) => (GROUP_ROWS, 4),
            (true, false) => (GROUP_ROWS, MANY_ROWS_INTERLEAVED),
        };
        let mut c = 0;
        while c < cols {
            let group = group_cols.min(cols - c);
            let ws = w.rows(c..c + group);
            let mut r = 0;
            while r < rows {
                let tile_rows = tile_max.min(rows - r);
                let xr = &x[r * k..(r + tile_rows) * k];
                let yr = y.add(r * ld + c);
                if interleaved {
                    interleaved_tile_of(tile_rows, xr, k, &ws, yr, ld);
                } else {
                    tile_of(tile_rows, group, xr, k, &ws, yr, ld);
                }
                r += tile_rows;
            }
            c += group;
        }
    }

    /// [`tile`] of `rows` (1 to 6) × one interleaved group, `rows` as a constant.
    #[target_feature(enable = "avx512f,avx2,f16c,fma")]
    unsafe fn interleaved_tile_of(
        rows: usize,
        x: &[f32],
        k: usize,
        w: &Fp8Rows<'_>,
        y: *mut f32,
        ld: usize,
    ) {
        match rows {
            6 => tile::<6, GROUP_ROWS, true>(x, k, w, y, ld),
            5 => tile::<5, GROUP_ROWS, true>(x, k, w, y, ld),
            4 => tile::<4, GROUP_ROWS, true>(x, k, w, y, ld),
            3 => tile::<3, GROUP_ROWS, true>(x, k, w, y, ld),
            2 => tile::<2, GROUP_ROWS, true>(x, k, w, y, ld),
            _ => tile::<1, GROUP_ROWS, true>(x, k, w, y, ld),
        }
    }

    /// [`tile`] of `rows` × `cols` as constants, so that every block sum stays in a register.
    #[target_feature(enable = "avx512f,avx2,f16c,fma")]
    unsafe fn tile_of(
        rows: usize,
        cols: usize,
        x: &[f32],
        k: usize,
        w: &Fp8Rows<'_>,
        y: *mut f32,
        ld: usize,
    ) {
        macro_rules! by_cols {
            ($r:literal) => {
                match cols {
                    4 => tile::<$r, 4, false>(x, k, w, y, ld),
                    3 => tile::<$r, 3, false>(x, k, w, y, ld),
                    2 => tile::<$r, 2, false>(x, k, w, y, ld),
                    _ => tile::<$r, 1, false>(x, k, w, y, ld),
                }
            };
        }
        macro_rules! by_cols_many {
            ($r:literal) => {
                match cols {
                    3 => tile::<$r, 3, false>(x, k, w, y, ld),
                    2 => tile::<$r, 2, false>(x, k, w, y, ld),
                    _ => tile::<$r, 1, false>(x, k, w, y, ld),
                }
            };
        }
        match rows {
            8 => by_cols_many!(8),
            7 => by_cols_many!(7),
            6 => by_cols_many!(6),
            5 => by_cols_many!(5),
            4 => by_cols!(4),
            3 => by_cols!(3),
            2 => by_cols!(2),
            _ => by_cols!(1),
        }
    }

    /// `R` rows of `x` against the `C` weight rows of `w` (`k` bytes apart, or with `IL` one
    /// interleaved group), widened as read, prefetching [`PREFETCH_AHEAD`] bytes ahead (the next
    /// groups' rows).
    #[allow(clippy::needless_range_loop)] // b walks the blocks' scales and their columns
    #[target_feature(enable = "avx512f,avx2,f16c,fma")]
    unsafe fn tile<const R: usize, const C: usize, const IL: bool>(
        x: &[f32],
        k: usize,
        w: &Fp8Rows<'_>,
        y: *mut f32,
        ld: usize,
    ) {
        let q = w.q.as_ptr();
        let mut total = [[_mm512_setzero_ps(); C]; R];
        let scales: [&[f32]; C] = std::array::from_fn(|c| w.row_scales(c));
        for b in 0..k / w.block_cols {
            let mut sums = [[_mm512_setzero_ps(); C]; R];
            let mut j = b * w.block_cols;
            let end = j + w.block_cols;
            while j < end {
                // A hint only: an address past the weights is never read.
                if IL {
                    let ahead = q.wrapping_add(j * GROUP_ROWS + PREFETCH_AHEAD);
                    _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
                } else if j.is_multiple_of(64) {
                    for c in 0..C {
                        let ahead = q.wrapping_add(c * k + j + PREFETCH_AHEAD);
                        _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
                    }
                }
                let at = |c: usize| {
                    if IL {
                        j * GROUP_ROWS + c * LANES
                    } else {
                        c * k + j
                    }
                };
                let wv: [__m512; C] = std::array::from_fn(|c| widen16(q.add(at(c))));
                for (r, sums_r) in sums.iter_mut().enumerate() {
                    let xv = _mm512_loadu_ps(x.as_ptr().add(r * k + j));
                    for c in 0..C {
                        sums_r[c] = _mm512_fmadd_ps(xv, wv[c], sums_r[c]);
                    }
                }
                j += LANES;
            }
            for c in 0..C {
                let s = _mm512_set1_ps(block_scale(scales[c][b]));
                for r in 0..R {
                    total[r][c] = _mm512_fmadd_ps(sums[r][c], s, total[r][c]);
                }
            }
        }
        for (r, total_r) in total.iter().enumerate() {
            for (c, v) in total_r.iter().enumerate() {
                let mut lanes = [0f32; LANES];
                _mm512_storeu_ps(lanes.as_mut_ptr(), *v);
                *y.add(r * ld + c) = reduce(&lanes);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::matmul::matmul_reference;
    use crate::kernels::testutil::{random_fp8, Rng};
    use model::TensorData;

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// The AVX-512 kernel gives the portable definition's bits, for decode windows and prompts,
    /// alone and batched; both are the f64 product of the dequantised weights to f32 rounding.
    #[test]
    fn the_fp8_kernel_gives_the_definitions_bits_alone_or_batched() {
        let mut rng = Rng::fresh();
        let seed = rng.0;
        for (out, k, block) in [
            (128, 256, (128, 128)),
            (70, 96, (2, 32)),
            (33, 64, (1, 16)),
            (72, 64, (4, 16)),
        ] {
            let m = random_fp8(&mut rng, out, k, block);
            let w = m.view();
            for rows in [1, 2, 3, 4, 5, 9, 17] {
                let x = rng.vec(rows * k);
                let what = format!("seed {seed} [{out}, {k}] blocks {block:?} rows {rows}");
                let mut want = vec![0f32; rows * out];
                matmul_portable(&x, w, k, &mut want);
                let exact = matmul_reference(&x, TensorData::Fp8(w), k);
                for (i, (g, e)) in want.iter().zip(&exact).enumerate() {
                    // f32 rounding of a sum of k products: a few ulps of Σ |x_j · w_j|.
                    let (r, c) = (i / out, i % out);
                    let size: f32 = (0..k)
                        .map(|j| (x[r * k + j] * w.get(c * k + j)).abs())
                        .sum();
                    assert!(
                        (g - e).abs() <= 1e-6 * size,
                        "{what}: {g} vs {e} (Σ|xw| {size})"
                    );
                }
                if !enabled() {
                    continue; // the portable kernel serves FP8 on this CPU
                }
                let mut got = vec![0f32; rows * out];
                matmul(&x, w, k, &mut got);
                assert_eq!(bits(&got), bits(&want), "{what}");
                if interleave_wanted(&w, k) {
                    let laid = interleave(&m.q, k);
                    let mut got = vec![0f32; rows * out];
                    matmul_interleaved(&x, Fp8Rows { q: &laid, ..w }, k, &mut got);
                    assert_eq!(bits(&got), bits(&want), "{what} interleaved");
                    let mut row = vec![0u8; k];
                    for r in 0..out {
                        interleaved_row(&laid, k, r, &mut row);
                        assert_eq!(row, m.q[r * k..(r + 1) * k], "{what} row {r} read back");
                    }
                }
                for r in 0..rows {
                    let mut one = vec![0f32; out];
                    matmul(&x[r * k..(r + 1) * k], w, k, &mut one);
                    assert_eq!(
                        bits(&one),
                        bits(&got[r * out..(r + 1) * out]),
                        "{what} row {r}"
                    );
                }
            }
        }
    }

    /// Blocks that are not whole vectors of 16 (the portable kernel) keep the definition too:
    /// a block sum is scaled where the block ends, whichever lane that is.
    #[test]
    fn blocks_narrower_than_a_vector_are_summed_block_by_block() {
        let mut rng = Rng::fresh();
        let m = random_fp8(&mut rng, 4, 24, (2, 4));
        let x = rng.vec(2 * 24);
        let mut y = vec![0f32; 2 * 4];
        matmul(&x, m.view(), 24, &mut y);
        for r in 0..2 {
            for c in 0..4 {
                let (mut total, mut block) = ([0f32; LANES], [0f32; LANES]);
                for j in 0..24 {
                    let v = widened(m.q[c * 24 + j]);
                    block[j % LANES] = x[r * 24 + j].mul_add(v, block[j % LANES]);
                    if j % 4 == 3 {
                        let s = m.scales[(c / 2) * 6 + j / 4] * 256.0;
                        for i in 0..LANES {
                            total[i] = block[i].mul_add(s, total[i]);
                            block[i] = 0.0;
                        }
                    }
                }
                let want = crate::kernels::matmul::reduce(&total);
                assert_eq!(y[r * 4 + c].to_bits(), want.to_bits(), "[{r}, {c}]");
            }
        }
    }

    /// A slice of rows (an expert's, or an lm_head's first outputs) finds its blocks' scales.
    #[test]
    fn a_slice_of_fp8_rows_gives_those_rows_of_the_whole() {
        let mut rng = Rng::fresh();
        let m = random_fp8(&mut rng, 8, 64, (2, 32));
        let x = rng.vec(3 * 64);
        let mut whole = vec![0f32; 3 * 8];
        matmul(&x, m.view(), 64, &mut whole);
        let mut part = vec![0f32; 3 * 3];
        matmul(&x, m.view().rows(3..6), 64, &mut part);
        for r in 0..3 {
            assert_eq!(
                part[r * 3..(r + 1) * 3],
                whole[r * 8 + 3..r * 8 + 6],
                "row {r}"
            );
        }
    }

    /// Every byte widens to its e4m3 value / 2^8, so that one weight alone in a block comes out
    /// as its dequantised value `e4m3 · scale` exactly (subnormals, zeros, both signs).
    #[test]
    fn every_e4m3_byte_widens_to_its_dequantised_value() {
        let codes: Vec<u8> = (0..=255u8).filter(|b| b & 0x7f != 0x7f).collect();
        let k = codes.len() / LANES * LANES;
        for scale in [1.0f32, -0.003, 7.5e-3, 1e-38] {
            let m = model::Fp8Matrix {
                q: codes[..k].to_vec(),
                scales: vec![scale; k / LANES],
                rows: 1,
                cols: k,
                block_rows: 1,
                block_cols: LANES,
            };
            for i in 0..k {
                // One-hot x picks weight i out of the dot product exactly.
                let mut x = vec![0f32; k];
                x[i] = 1.0;
                let mut y = [0f32];
                matmul(&x, m.view(), k, &mut y);
                // (== : the sum's zero is +0 where the weight is −0.)
                let want = model::e4m3_value(m.q[i]) * scale;
                assert!(
                    y[0] == want,
                    "byte {:#04x} × {scale}: {} vs {want}",
                    m.q[i],
                    y[0]
                );
            }
        }
    }

    /// Timings (`--ignored --nocapture`): weight bytes a second of FP8 rows against bf16 rows of
    /// the same shape through the fast bf16 kernel, 1 to 8 rows, 256 MiB of FP8 weights (past
    /// any cache).
    #[test]
    #[ignore]
    fn fp8_speed() {
        let mut rng = Rng::fresh();
        let (k, out_each, mats) = (2048, 2048, 64);
        let ms: Vec<model::Fp8Matrix> = (0..mats)
            .map(|_| random_fp8(&mut rng, out_each, k, (128, 128)))
            .collect();
        let ims: Vec<model::Fp8Matrix> = ms
            .iter()
            .map(|m| model::Fp8Matrix {
                q: interleave(&m.q, k),
                scales: m.scales.clone(),
                ..*m
            })
            .collect();
        let bf: Vec<Vec<half::bf16>> = (0..mats)
            .map(|_| {
                (0..out_each * k)
                    .map(|i| half::bf16::from_f32((i % 7) as f32))
                    .collect()
            })
            .collect();
        for rows in [1, 2, 4, 8] {
            let x = rng.vec(rows * k);
            let mut y = vec![0f32; rows * out_each];
            for round in 0..3 {
                let t = std::time::Instant::now();
                for m in &ms {
                    matmul(&x, m.view(), k, &mut y);
                }
                let fp8 = t.elapsed().as_secs_f64();
                let t = std::time::Instant::now();
                for m in &ims {
                    matmul_interleaved(&x, m.view(), k, &mut y);
                }
                let il = t.elapsed().as_secs_f64();
                let t = std::time::Instant::now();
                for w in &bf {
                    crate::kernels::matmul::matmul(
                        &x,
                        TensorData::Bf16(w),
                        k,
                        &mut y,
                        model::MatmulInput::Exact,
                    );
                }
                let b16 = t.elapsed().as_secs_f64();
                let n = (mats * out_each * k) as f64;
                eprintln!(
                    "rows {rows} round {round}: fp8 {:.2} G weights/s, interleaved {:.2}, bf16 {:.2} G weights/s ({:.1} GB/s)",
                    n / fp8 / 1e9,
                    n / il / 1e9,
                    n / b16 / 1e9,
                    2.0 * n / b16 / 1e9
                );
            }
        }
    }
}
