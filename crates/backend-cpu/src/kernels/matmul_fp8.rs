//! `y = x · Wᵀ` for block-scaled FP8 weights kept as stored (e4m3 bytes and one f32 scale per
//! block, models.md "Checkpoint tensors and formats") on x86-64 CPUs with AVX-512: the kernel
//! behind [`super::matmul::matmul`] for [`TensorData::Fp8`] where [`enabled`]. The weights take
//! a quarter of the memory of their dequantised f32 values, and a decode step reads a quarter of
//! the bytes.
//!
//! Bits: the same as the portable kernel over the dequantised weights
//! ([`super::matmul::dot`]: 16 lanes of f32 partial sums, element `j` into lane `j % 16`, each
//! product rounded and then added, then the fixed pairwise reduction), which is what FP8
//! checkpoints computed before their bytes were kept. Each weight is widened in registers to
//! exactly the value dequantising gives, `e4m3(q) · scale` in one f32 product:
//! - the byte's sign, exponent and mantissa are placed in an f16's bits, which read as the e4m3
//!   value / 2^8 (the biases are 7 and 15; e4m3's subnormals are f16 subnormals), and
//!   `vcvtph2ps` widens that exactly to an f32 that is never subnormal (so no slow denormal
//!   arithmetic, whatever the bytes);
//! - one product with `scale · 2^8` then rounds once: the same real number as
//!   `e4m3(q) · scale`, hence the same f32 (a scale whose `· 2^8` would overflow sends the call
//!   to the portable kernel).
//!
//! Batch invariance: every output element is one dot product done as above whatever the batch;
//! tiles only decide which dot products share a pass over the weights. Threads split the output
//! columns, never `k`. With more rows than one tile holds, each group of weight rows is widened
//! once into a buffer that every tile of rows then reads (the same values).

use model::Fp8Rows;
use rayon::prelude::*;

/// Lanes of partial sums per dot product: the portable kernel's ([`super::matmul::dot`]).
const LANES: usize = 16;
/// Weight rows a tile multiplies at once: 4 rows × 4 weight rows is 16 accumulators, 4 widened
/// weight vectors and one of x in the 32 AVX-512 registers.
const COL_GROUP: usize = 4;
/// Rows of x in the largest tile.
const MAX_TILE_ROWS: usize = 4;
/// Output columns per rayon task (a multiple of [`COL_GROUP`]): enough tasks to balance the
/// threads even for a 512-wide expert projection (16 tasks), few enough to amortise scheduling.
const COL_BLOCK: usize = 32;
/// f16 bits' place of an e4m3 byte's value / 2^8: [`widen16`] scales by 2^8 with the scale.
const F16_SHIFT: f32 = 256.0;

/// Whether this CPU runs the kernel: AVX-512F and VL (and F16C, which they imply on every CPU
/// that has them), unless `FLASHLANE_CPU_KERNELS=portable` keeps the portable kernels. Fixed for
/// the life of the process; the bits are the portable kernel's either way.
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
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether [`matmul`] takes `w` with rows of `k`: whole vectors of 16 in a block (so one scale
/// serves a vector) and every scale finite once multiplied by 2^8.
pub fn fits(w: &Fp8Rows<'_>, k: usize) -> bool {
    k == w.cols
        && k.is_multiple_of(LANES)
        && w.block_cols.is_multiple_of(LANES)
        && w.scales.iter().all(|s| (s * F16_SHIFT).is_finite())
}

/// `y[rows, out] = x[rows, k] · W[out, k]ᵀ` for FP8 rows `w`. Only where [`enabled`] and
/// [`fits`] (asserted).
pub fn matmul(x: &[f32], w: Fp8Rows<'_>, k: usize, y: &mut [f32]) {
    assert!(
        enabled() && fits(&w, k),
        "[fp8-kernel] an FP8 matmul this kernel does not take"
    );
    let (rows, out) = super::matmul::matmul_shape(x, w.q.len(), k, y.len());
    if rows == 0 {
        return;
    }
    let y = super::matmul_fast::Output(y.as_mut_ptr());
    (0..out.div_ceil(COL_BLOCK)).into_par_iter().for_each(|b| {
        let start = b * COL_BLOCK;
        let cols = COL_BLOCK.min(out - start);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `enabled()` (asserted above) checked AVX-512F, VL and F16C; `fits` checked the
        // shapes; `y` holds `rows × out` floats and this task writes only its columns
        // `start..start + cols`.
        unsafe {
            avx512::block(x, rows, k, &w.rows(start..start + cols), y.at(start), out)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (&y, start, cols);
    });
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{COL_GROUP, F16_SHIFT, LANES, MAX_TILE_ROWS};
    use crate::kernels::matmul::reduce;
    use model::Fp8Rows;
    use std::arch::x86_64::*;

    /// The 16 weights at `q` widened and scaled: `e4m3(q[i]) · scale` where `s` holds
    /// `scale · 2^8` (module docs).
    #[inline]
    #[target_feature(enable = "avx512f,avx512vl,avx2,f16c")]
    unsafe fn widen16(q: *const u8, s: __m512) -> __m512 {
        let bytes = _mm256_cvtepu8_epi16(_mm_loadu_si128(q as *const __m128i));
        // f16 bits: the sign (byte bit 7) to bit 15, exponent and mantissa (bits 6..0) to
        // bits 13..7; bit 14, the f16 exponent's top bit, stays 0.
        let sign = _mm256_slli_epi16::<8>(bytes);
        let magnitude = _mm256_and_si256(_mm256_slli_epi16::<7>(bytes), _mm256_set1_epi16(0x3f80));
        // 0xe4: bit 15 (the constant's) from `sign`, the others from `magnitude`.
        let half =
            _mm256_ternarylogic_epi32::<0xe4>(sign, magnitude, _mm256_set1_epi16(-0x8000i16));
        _mm512_mul_ps(_mm512_cvtph_ps(half), s)
    }

    /// One task's columns: `w`'s rows against every row of `x`, into `y` (row stride `ld`).
    #[target_feature(enable = "avx512f,avx512vl,avx2,f16c")]
    pub(super) unsafe fn block(
        x: &[f32],
        rows: usize,
        k: usize,
        w: &Fp8Rows<'_>,
        y: *mut f32,
        ld: usize,
    ) {
        let cols = w.q.len() / k;
        let mut widened: Vec<f32> = Vec::new();
        let mut c = 0;
        while c < cols {
            let group = COL_GROUP.min(cols - c);
            let ws = w.rows(c..c + group);
            if rows <= MAX_TILE_ROWS {
                match group {
                    4 => fp8_tile::<4>(x, rows, k, &ws, y.add(c), ld),
                    3 => fp8_tile::<3>(x, rows, k, &ws, y.add(c), ld),
                    2 => fp8_tile::<2>(x, rows, k, &ws, y.add(c), ld),
                    _ => fp8_tile::<1>(x, rows, k, &ws, y.add(c), ld),
                }
            } else {
                // Widened once for every tile of rows: the values `widen16` gives.
                widened.resize(group * k, 0.0);
                widen_rows(&ws, k, &mut widened);
                let mut r = 0;
                while r < rows {
                    let tile = MAX_TILE_ROWS.min(rows - r);
                    let xr = &x[r * k..(r + tile) * k];
                    let yr = y.add(r * ld + c);
                    match group {
                        4 => f32_tile::<4>(xr, tile, k, &widened, yr, ld),
                        3 => f32_tile::<3>(xr, tile, k, &widened, yr, ld),
                        2 => f32_tile::<2>(xr, tile, k, &widened, yr, ld),
                        _ => f32_tile::<1>(xr, tile, k, &widened, yr, ld),
                    }
                    r += tile;
                }
            }
            c += group;
        }
    }

    /// The rows of `w` widened into `out` (`rows × k`).
    #[target_feature(enable = "avx512f,avx512vl,avx2,f16c")]
    unsafe fn widen_rows(w: &Fp8Rows<'_>, k: usize, out: &mut [f32]) {
        for (c, dst) in out.chunks_exact_mut(k).enumerate() {
            let scales = w.row_scales(c);
            let q = w.q.as_ptr().add(c * k);
            for (b, s) in scales.iter().enumerate() {
                let s = _mm512_set1_ps(s * F16_SHIFT);
                let mut j = b * w.block_cols;
                while j < (b + 1) * w.block_cols {
                    _mm512_storeu_ps(dst.as_mut_ptr().add(j), widen16(q.add(j), s));
                    j += LANES;
                }
            }
        }
    }

    /// The `rows` (at most [`MAX_TILE_ROWS`]) rows of `x` against the `C` rows of `w`,
    /// widening the weights as it reads them.
    #[target_feature(enable = "avx512f,avx512vl,avx2,f16c")]
    unsafe fn fp8_tile<const C: usize>(
        x: &[f32],
        rows: usize,
        k: usize,
        w: &Fp8Rows<'_>,
        y: *mut f32,
        ld: usize,
    ) {
        let mut acc = [[_mm512_setzero_ps(); C]; MAX_TILE_ROWS];
        let q: [*const u8; C] = std::array::from_fn(|c| w.q.as_ptr().add(c * k));
        let scales: [&[f32]; C] = std::array::from_fn(|c| w.row_scales(c));
        let blocks = k / w.block_cols;
        for b in 0..blocks {
            let s: [__m512; C] = std::array::from_fn(|c| _mm512_set1_ps(scales[c][b] * F16_SHIFT));
            let mut j = b * w.block_cols;
            let end = j + w.block_cols;
            while j < end {
                let wv: [__m512; C] = std::array::from_fn(|c| widen16(q[c].add(j), s[c]));
                for (r, acc_r) in acc.iter_mut().enumerate().take(rows) {
                    let xv = _mm512_loadu_ps(x.as_ptr().add(r * k + j));
                    for c in 0..C {
                        acc_r[c] = _mm512_add_ps(acc_r[c], _mm512_mul_ps(xv, wv[c]));
                    }
                }
                j += LANES;
            }
        }
        store(&acc, rows, y, ld);
    }

    /// The `rows` rows of `x` against the `C` widened weight rows in `w` (`C × k`).
    #[target_feature(enable = "avx512f,avx512vl,avx2,f16c")]
    unsafe fn f32_tile<const C: usize>(
        x: &[f32],
        rows: usize,
        k: usize,
        w: &[f32],
        y: *mut f32,
        ld: usize,
    ) {
        let mut acc = [[_mm512_setzero_ps(); C]; MAX_TILE_ROWS];
        let mut j = 0;
        while j < k {
            let wv: [__m512; C] = std::array::from_fn(|c| _mm512_loadu_ps(w.as_ptr().add(c * k + j)));
            for (r, acc_r) in acc.iter_mut().enumerate().take(rows) {
                let xv = _mm512_loadu_ps(x.as_ptr().add(r * k + j));
                for c in 0..C {
                    acc_r[c] = _mm512_add_ps(acc_r[c], _mm512_mul_ps(xv, wv[c]));
                }
            }
            j += LANES;
        }
        store(&acc, rows, y, ld);
    }

    /// Each (row, column)'s 16 partial sums reduced as the portable kernel reduces them.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn store<const C: usize>(
        acc: &[[__m512; C]; MAX_TILE_ROWS],
        rows: usize,
        y: *mut f32,
        ld: usize,
    ) {
        for (r, acc_r) in acc.iter().enumerate().take(rows) {
            for (c, v) in acc_r.iter().enumerate() {
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
    use crate::kernels::matmul::{matmul as any_matmul, matmul_reference};
    use crate::kernels::testutil::{random_fp8, Rng};
    use model::{MatmulInput, TensorData};

    fn rows_of(m: &model::Fp8Matrix) -> Fp8Rows<'_> {
        Fp8Rows {
            q: &m.q,
            scales: &m.scales,
            cols: m.cols,
            block_rows: m.block_rows,
            block_cols: m.block_cols,
            first_row: 0,
        }
    }

    /// The kernel against the portable kernel over the dequantised values, bit for bit, for
    /// decode windows and prompts, alone and batched; and against the f64 definition.
    #[test]
    fn fp8_weights_give_the_bits_of_their_dequantised_values() {
        if !enabled() {
            eprintln!("skipped: this CPU lacks AVX-512F/VL (the portable kernel serves FP8)");
            return;
        }
        let mut rng = Rng::fresh();
        let seed = rng.0;
        for (out, k, block) in [(128, 256, (128, 128)), (70, 96, (2, 32)), (33, 64, (1, 16))] {
            let m = random_fp8(&mut rng, out, k, block);
            let w = rows_of(&m);
            let deq: Vec<f32> = (0..out * k).map(|i| w.get(i)).collect();
            for rows in [1, 2, 3, 4, 5, 9, 17] {
                let x = rng.vec(rows * k);
                let mut want = vec![0f32; rows * out];
                any_matmul(&x, TensorData::F32(&deq), k, &mut want, MatmulInput::Exact);
                let mut got = vec![0f32; rows * out];
                matmul(&x, w, k, &mut got);
                let what = format!("seed {seed} [{out}, {k}] blocks {block:?} rows {rows}");
                assert_eq!(
                    got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{what}"
                );
                let exact = matmul_reference(&x, TensorData::Fp8(w), k);
                for (g, e) in got.iter().zip(&exact) {
                    assert!((g - e).abs() <= 1e-3 * e.abs().max(1.0), "{what}: {g} vs {e}");
                }
                for r in 0..rows {
                    let mut one = vec![0f32; out];
                    matmul(&x[r * k..(r + 1) * k], w, k, &mut one);
                    assert_eq!(one, got[r * out..(r + 1) * out], "{what}: row {r} alone");
                }
            }
        }
    }

    /// A slice of rows (an expert's, or an lm_head's first outputs) finds its blocks' scales.
    #[test]
    fn a_slice_of_fp8_rows_gives_those_rows_of_the_whole() {
        if !enabled() {
            return;
        }
        let mut rng = Rng::fresh();
        let m = random_fp8(&mut rng, 8, 64, (2, 32));
        let x = rng.vec(3 * 64);
        let mut whole = vec![0f32; 3 * 8];
        matmul(&x, rows_of(&m), 64, &mut whole);
        let mut part = vec![0f32; 3 * 3];
        matmul(&x, rows_of(&m).rows(3..6), 64, &mut part);
        for r in 0..3 {
            assert_eq!(part[r * 3..(r + 1) * 3], whole[r * 8 + 3..r * 8 + 6], "row {r}");
        }
    }

    /// Every byte widens to its table value times the scale (subnormals, zeros, both signs).
    #[test]
    fn every_e4m3_byte_widens_to_its_dequantised_value() {
        if !enabled() {
            return;
        }
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
                matmul(&x, rows_of(&m), k, &mut y);
                // (== : the sum's zero is +0 where the weight is −0.)
                let want = model::e4m3_value(m.q[i]) * scale;
                assert!(y[0] == want, "byte {:#04x} × {scale}: {} vs {want}", m.q[i], y[0]);
            }
        }
    }
}
