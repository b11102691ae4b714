//! Causal grouped-query attention of one window's rows over its session's KV rows.
//!
//! Each (row, head) computes scores against every visible key in key order, softmax in f32
//! (max-subtracted), then the weighted sum of values in key order. A task is one row and one KV
//! head (the query heads of its group read each K/V row once). Nothing depends on other windows;
//! threads split (row, KV head) pairs only.

use super::matmul::dot;
use rayon::prelude::*;

/// Keys a task asks the memory for ahead of the one it scores. A KV head's slice of a key row
/// (512 bytes at head_dim 128) lies a whole KV row (4 KiB at 8 KV heads) from the next one, on a
/// new page each, which the hardware prefetchers do not follow, so the scores loop waited on
/// memory key by key. Measured on the 2-core EPYC, one decode row of the Qwen3-0.6B shape at
/// position 224, 28 layers with cold caches, 3 interleaved runs of 4: 13.5-18.2 ms a token
/// without, 8.3-13.2 with 8 keys ahead (64 cache lines of K and V in flight per task).
const KV_AHEAD: usize = 8;

/// Asks the memory for the cache lines of `row` (a hint: never changes a result).
#[inline(always)]
fn prefetch(row: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    for line in row.chunks(16) {
        // SAFETY: a prefetch never faults, whatever the address; SSE is part of x86-64.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                line.as_ptr() as *const i8
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = row;
}

/// [`dot`] with AVX2 when the CPU has it: the same operations in the same order (16 lanes, `j`
/// into lane `j % 16`, multiply then add, the same final reduction), so the same bits.
#[inline]
fn score_dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && a.len() == b.len() {
        // SAFETY: AVX2 is present and the lengths are equal (both checked).
        return unsafe { avx2::dot(a, b) };
    }
    dot(a, b)
}

/// Whether [`causal_attention`] takes its AVX2 path for heads of `hd` dimensions: several
/// heads per pass over a key row and the weighted sums in registers (the same bits as the
/// portable path: the same operations per score and per output element, in the same order).
fn simd_heads(hd: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        return hd > 0 && hd.is_multiple_of(16);
    }
    let _ = hd;
    false
}

/// `o[d] += p · v[d]`, element by element (vectorised; each element is one multiply and one add).
#[inline]
fn axpy(o: &mut [f32], p: f32, v: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && o.len() == v.len() {
        // SAFETY: AVX2 is present and the lengths are equal (both checked).
        return unsafe { avx2::axpy(o, p, v) };
    }
    for (x, y) in o.iter_mut().zip(v) {
        *x += p * y;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// # Safety
    /// AVX2 must be present; `a` and `b` have equal lengths.
    #[target_feature(enable = "avx2")]
    pub unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len() / 16 * 16;
        let (ap, bp) = (a.as_ptr(), b.as_ptr());
        let mut a0 = _mm256_setzero_ps();
        let mut a1 = _mm256_setzero_ps();
        let mut j = 0;
        while j < n {
            a0 = _mm256_add_ps(
                a0,
                _mm256_mul_ps(_mm256_loadu_ps(ap.add(j)), _mm256_loadu_ps(bp.add(j))),
            );
            a1 = _mm256_add_ps(
                a1,
                _mm256_mul_ps(
                    _mm256_loadu_ps(ap.add(j + 8)),
                    _mm256_loadu_ps(bp.add(j + 8)),
                ),
            );
            j += 16;
        }
        let mut acc = [0.0f32; 16];
        _mm256_storeu_ps(acc.as_mut_ptr(), a0);
        _mm256_storeu_ps(acc.as_mut_ptr().add(8), a1);
        for i in n..a.len() {
            acc[i - n] += a[i] * b[i];
        }
        let mut h = [0.0f32; 8];
        for i in 0..8 {
            h[i] = acc[i] + acc[i + 8];
        }
        let q = [h[0] + h[4], h[1] + h[5], h[2] + h[6], h[3] + h[7]];
        (q[0] + q[2]) + (q[1] + q[3])
    }

    /// [`dot`]'s final reduction of its two registers of partial sums (lanes `0..8` and
    /// `8..16`), as vector operations with the same pairs in the same order: `h = lo + hi`,
    /// `q = h[0..4] + h[4..8]`, `(q0 + q2) + (q1 + q3)`.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn reduce16(a0: __m256, a1: __m256) -> f32 {
        let h = _mm256_add_ps(a0, a1);
        let q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h));
        let t = _mm_add_ps(q, _mm_movehl_ps(q, q));
        _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps::<1>(t, t)))
    }

    /// `H` query heads (`q`, one after the other, `hd` each) against one key row `kj`: each
    /// head's [`dot`] (the same bits), the key read once for all of them.
    ///
    /// # Safety
    /// AVX2 must be present; `hd` is a multiple of 16, `q` holds `H · hd` floats and `kj` `hd`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub unsafe fn dots<const H: usize>(q: *const f32, kj: *const f32, hd: usize) -> [f32; H] {
        let mut a = [[_mm256_setzero_ps(); 2]; H];
        let mut t = 0;
        while t < hd {
            let k0 = _mm256_loadu_ps(kj.add(t));
            let k1 = _mm256_loadu_ps(kj.add(t + 8));
            for (h, a) in a.iter_mut().enumerate() {
                let qh = q.add(h * hd + t);
                a[0] = _mm256_add_ps(a[0], _mm256_mul_ps(_mm256_loadu_ps(qh), k0));
                a[1] = _mm256_add_ps(a[1], _mm256_mul_ps(_mm256_loadu_ps(qh.add(8)), k1));
            }
            t += 16;
        }
        std::array::from_fn(|h| reduce16(a[h][0], a[h][1]))
    }

    /// The weighted sums of `H` heads over `visible` value rows (`v` at `stride` floats apart):
    /// `o[h·hd + d] = Σ_j p[h][j] · v[j][d]` with the sum taken as [`axpy`] takes it (from 0, one
    /// multiply and one add per key, in key order), so the same bits; 32 dimensions of every
    /// head at a time stay in registers across the keys instead of going through memory.
    ///
    /// # Safety
    /// AVX2 must be present; `hd` is a multiple of 16; `p[h]` holds `visible` weights; `v` is
    /// valid for `visible` rows of `hd` floats `stride` apart; `o` holds `H · hd` floats.
    #[target_feature(enable = "avx2")]
    pub unsafe fn weighted_sums<const H: usize>(
        p: [&[f32]; H],
        v: *const f32,
        stride: usize,
        visible: usize,
        hd: usize,
        o: &mut [f32],
    ) {
        let mut d0 = 0;
        while d0 + 32 <= hd {
            weighted_chunk::<H, 4>(p, v.add(d0), stride, visible, o.as_mut_ptr().add(d0), hd);
            d0 += 32;
        }
        if d0 < hd {
            weighted_chunk::<H, 2>(p, v.add(d0), stride, visible, o.as_mut_ptr().add(d0), hd);
        }
    }

    /// [`weighted_sums`] of `V` vectors of dimensions starting at `v` and `o`.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn weighted_chunk<const H: usize, const V: usize>(
        p: [&[f32]; H],
        v: *const f32,
        stride: usize,
        visible: usize,
        o: *mut f32,
        hd: usize,
    ) {
        let mut acc = [[_mm256_setzero_ps(); V]; H];
        for j in 0..visible {
            let vj: [__m256; V] =
                std::array::from_fn(|c| _mm256_loadu_ps(v.add(j * stride + c * 8)));
            for (h, acc) in acc.iter_mut().enumerate() {
                let ph = _mm256_set1_ps(*p[h].get_unchecked(j));
                for (a, x) in acc.iter_mut().zip(&vj) {
                    *a = _mm256_add_ps(*a, _mm256_mul_ps(ph, *x));
                }
            }
        }
        for (h, acc) in acc.iter().enumerate() {
            for (c, a) in acc.iter().enumerate() {
                _mm256_storeu_ps(o.add(h * hd + c * 8), *a);
            }
        }
    }

    /// # Safety
    /// AVX2 must be present; `o` and `v` have equal lengths.
    #[target_feature(enable = "avx2")]
    pub unsafe fn axpy(o: &mut [f32], p: f32, v: &[f32]) {
        let n = o.len() / 8 * 8;
        let pp = _mm256_set1_ps(p);
        let (op, vp) = (o.as_mut_ptr(), v.as_ptr());
        let mut j = 0;
        while j < n {
            let x = _mm256_add_ps(
                _mm256_loadu_ps(op.add(j)),
                _mm256_mul_ps(pp, _mm256_loadu_ps(vp.add(j))),
            );
            _mm256_storeu_ps(op.add(j), x);
            j += 8;
        }
        for i in n..o.len() {
            o[i] += p * v[i];
        }
    }
}

/// Shapes of one attention call.
#[derive(Clone, Copy, Debug)]
pub struct AttentionShape {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Usually `1/√head_dim`.
    pub scale: f32,
}

/// `q`: `[n, heads, head_dim]` for positions `start..start+n`; `k`, `v`: the session's rows
/// `[≥ start+n, kv_heads, head_dim]` (this window's rows already written); `out`: like `q`.
/// Row `i` sees keys `0..=start+i`.
pub fn causal_attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    start: usize,
    shape: AttentionShape,
    out: &mut [f32],
) {
    let layout = KvLayout::token_major(shape);
    attend(
        q,
        k,
        v,
        layout,
        start,
        shape,
        out,
        simd_heads(shape.head_dim),
    )
}

/// Where the K or V floats of position `j`, KV head `h` start: `j · row_stride + h · head_stride`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvLayout {
    pub row_stride: usize,
    pub head_stride: usize,
}

impl KvLayout {
    /// `[positions, kv_heads, head_dim]`: a position's heads side by side.
    pub fn token_major(shape: AttentionShape) -> KvLayout {
        KvLayout {
            row_stride: shape.kv_heads * shape.head_dim,
            head_stride: shape.head_dim,
        }
    }

    /// `[kv_heads, capacity, head_dim]`: each head's positions one after the other, so a task
    /// streams its head's keys and values from contiguous memory.
    pub fn head_major(shape: AttentionShape, capacity: usize) -> KvLayout {
        KvLayout {
            row_stride: shape.head_dim,
            head_stride: capacity * shape.head_dim,
        }
    }

    /// The offset of position `j`, KV head `h`.
    #[inline(always)]
    pub fn at(&self, j: usize, h: usize) -> usize {
        j * self.row_stride + h * self.head_stride
    }
}

/// [`causal_attention`] over K and V laid out as `layout` says (`k`, `v` hold every
/// position `0..start + n` of every KV head).
#[allow(clippy::too_many_arguments)]
pub fn causal_attention_in(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    layout: KvLayout,
    start: usize,
    shape: AttentionShape,
    out: &mut [f32],
) {
    attend(
        q,
        k,
        v,
        layout,
        start,
        shape,
        out,
        simd_heads(shape.head_dim),
    )
}

/// [`causal_attention_in`], on the AVX2 path when `simd` ([`simd_heads`] must hold then).
#[allow(clippy::too_many_arguments)]
fn attend(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    layout: KvLayout,
    start: usize,
    shape: AttentionShape,
    out: &mut [f32],
    simd: bool,
) {
    let AttentionShape {
        heads,
        kv_heads,
        head_dim: hd,
        scale,
    } = shape;
    assert!(
        kv_heads > 0 && heads % kv_heads == 0,
        "attention: {heads} heads over {kv_heads} KV heads"
    );
    assert_eq!(q.len() % (heads * hd), 0, "attention: q is not whole rows");
    assert_eq!(q.len(), out.len(), "attention: out must be shaped like q");
    let n = q.len() / (heads * hd);
    let end = if start + n == 0 {
        0
    } else {
        layout.at(start + n - 1, kv_heads - 1) + hd
    };
    assert!(
        k.len() >= end && v.len() >= end,
        "attention: KV rows missing"
    );
    let group = heads / kv_heads;
    assert!(
        !simd || simd_heads(hd),
        "attention: no AVX2 path for head_dim {hd} here"
    );
    // One task per (row, KV head): the query heads sharing that KV head read each K and V row
    // once. Each head's arithmetic is unchanged by the grouping (its own scores in key order, its
    // own sum, its own output accumulated in key order).
    out.par_chunks_mut(group * hd)
        .enumerate()
        .for_each(|(task, o)| {
            let (i, kvh) = (task / kv_heads, task % kv_heads);
            let visible = start + i + 1;
            let q0 = (i * heads + kvh * group) * hd;
            let qg = &q[q0..q0 + group * hd];
            // 1. scores [group, visible]
            let mut scores = vec![0.0f32; group * visible];
            for j in 0..visible {
                if j + KV_AHEAD < visible {
                    // The key scored KV_AHEAD keys from now, and its value for step 3 (a task's
                    // values, 128 KiB at 256 positions, then wait in L2).
                    let ahead = layout.at(j + KV_AHEAD, kvh);
                    prefetch(&k[ahead..ahead + hd]);
                    prefetch(&v[ahead..ahead + hd]);
                }
                let kj = &k[layout.at(j, kvh)..layout.at(j, kvh) + hd];
                if simd {
                    // SAFETY: AVX2 is present and hd a multiple of 16 (`simd`); the query
                    // heads g, g + 1 and the key row are in bounds (sliced above).
                    let mut g = 0;
                    while g + 2 <= group {
                        let s = unsafe { avx2::dots::<2>(qg[g * hd..].as_ptr(), kj.as_ptr(), hd) };
                        scores[g * visible + j] = s[0] * scale;
                        scores[(g + 1) * visible + j] = s[1] * scale;
                        g += 2;
                    }
                    if g < group {
                        let s = unsafe { avx2::dots::<1>(qg[g * hd..].as_ptr(), kj.as_ptr(), hd) };
                        scores[g * visible + j] = s[0] * scale;
                    }
                    continue;
                }
                for g in 0..group {
                    scores[g * visible + j] = score_dot(&qg[g * hd..(g + 1) * hd], kj) * scale;
                }
            }
            // 2. softmax weights per head (max-subtracted, unnormalised) and their sums
            let mut inv = vec![0.0f32; group];
            for (g, row) in scores.chunks_exact_mut(visible).enumerate() {
                let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut sum = 0.0f32;
                for s in row.iter_mut() {
                    *s = (*s - max).exp();
                    sum += *s;
                }
                inv[g] = 1.0 / sum;
            }
            // 3. weighted sums of values in key order, then the normalisation
            if simd {
                let vs = &v[layout.at(0, kvh)..layout.at(visible - 1, kvh) + hd];
                let mut g = 0;
                while g < group {
                    let h = if g + 2 <= group { 2 } else { 1 };
                    let p = |g: usize| &scores[g * visible..(g + 1) * visible];
                    let og = &mut o[g * hd..(g + h) * hd];
                    // SAFETY: AVX2 is present and hd a multiple of 16 (`simd`); `vs` holds the
                    // `visible` value rows of this KV head, row_stride apart; `og` is `h` heads.
                    unsafe {
                        match h {
                            2 => avx2::weighted_sums::<2>(
                                [p(g), p(g + 1)],
                                vs.as_ptr(),
                                layout.row_stride,
                                visible,
                                hd,
                                og,
                            ),
                            _ => avx2::weighted_sums::<1>(
                                [p(g)],
                                vs.as_ptr(),
                                layout.row_stride,
                                visible,
                                hd,
                                og,
                            ),
                        }
                    }
                    g += h;
                }
            } else {
                o.fill(0.0);
                for j in 0..visible {
                    let vj = &v[layout.at(j, kvh)..layout.at(j, kvh) + hd];
                    for (g, og) in o.chunks_exact_mut(hd).enumerate() {
                        axpy(og, scores[g * visible + j], vj);
                    }
                }
            }
            for (g, og) in o.chunks_exact_mut(hd).enumerate() {
                for x in og.iter_mut() {
                    *x *= inv[g];
                }
            }
        });
}

/// The plain definition in f64, for tests.
pub fn causal_attention_reference(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    start: usize,
    shape: AttentionShape,
) -> Vec<f32> {
    let AttentionShape {
        heads,
        kv_heads,
        head_dim: hd,
        scale,
    } = shape;
    let n = q.len() / (heads * hd);
    let kv_row = kv_heads * hd;
    let mut out = vec![0.0f32; q.len()];
    for i in 0..n {
        for h in 0..heads {
            let kvh = h / (heads / kv_heads);
            let qh = &q[(i * heads + h) * hd..(i * heads + h + 1) * hd];
            let scores: Vec<f64> = (0..=start + i)
                .map(|j| {
                    let kj = &k[j * kv_row + kvh * hd..];
                    (0..hd).map(|d| qh[d] as f64 * kj[d] as f64).sum::<f64>() * scale as f64
                })
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let ps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let sum: f64 = ps.iter().sum();
            for d in 0..hd {
                let acc: f64 = ps
                    .iter()
                    .enumerate()
                    .map(|(j, p)| p * v[j * kv_row + kvh * hd + d] as f64)
                    .sum();
                out[(i * heads + h) * hd + d] = (acc / sum) as f32;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testutil::{max_abs_diff, Rng};

    #[test]
    fn causal_gqa_attention_matches_reference() {
        let mut rng = Rng::fresh();
        let seed = rng.0;
        let shape = AttentionShape {
            heads: 4,
            kv_heads: 2,
            head_dim: 8,
            scale: 8f32.powf(-0.5),
        };
        for (start, n) in [(0, 1), (0, 5), (6, 3), (11, 1)] {
            let q = rng.vec(n * 4 * 8);
            let k = rng.vec((start + n) * 2 * 8);
            let v = rng.vec((start + n) * 2 * 8);
            let mut out = vec![0.0; q.len()];
            causal_attention(&q, &k, &v, start, shape, &mut out);
            let d = max_abs_diff(&out, &causal_attention_reference(&q, &k, &v, start, shape));
            assert!(d < 1e-5, "seed {seed} start {start} n {n}: diff {d}");
        }
    }

    /// The per-(row, head) formulation the grouped kernel replaced, for the bit-identity test.
    fn per_head(q: &[f32], k: &[f32], v: &[f32], start: usize, shape: AttentionShape) -> Vec<f32> {
        let AttentionShape {
            heads,
            kv_heads,
            head_dim: hd,
            scale,
        } = shape;
        let kv_row = kv_heads * hd;
        let mut out = vec![0.0f32; q.len()];
        for (task, o) in out.chunks_mut(hd).enumerate() {
            let (i, h) = (task / heads, task % heads);
            let kvh = h / (heads / kv_heads);
            let qh = &q[task * hd..(task + 1) * hd];
            let mut scores: Vec<f32> = (0..start + i + 1)
                .map(|j| dot(qh, &k[j * kv_row + kvh * hd..j * kv_row + (kvh + 1) * hd]) * scale)
                .collect();
            let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0f32;
            for s in scores.iter_mut() {
                *s = (*s - max).exp();
                sum += *s;
            }
            for (j, p) in scores.iter().enumerate() {
                let vj = &v[j * kv_row + kvh * hd..j * kv_row + (kvh + 1) * hd];
                for d in 0..hd {
                    o[d] += p * vj[d];
                }
            }
            let inv = 1.0 / sum;
            for x in o.iter_mut() {
                *x *= inv;
            }
        }
        out
    }

    #[test]
    fn simd_score_dot_and_axpy_equal_the_portable_arithmetic() {
        let mut rng = Rng::fresh();
        for n in [1, 7, 16, 31, 64, 128, 200] {
            let (a, b) = (rng.vec(n), rng.vec(n));
            assert_eq!(
                score_dot(&a, &b).to_bits(),
                dot(&a, &b).to_bits(),
                "dot n {n}"
            );
            let mut o = rng.vec(n);
            let mut want = o.clone();
            axpy(&mut o, 0.37, &b);
            for (x, y) in want.iter_mut().zip(&b) {
                *x += 0.37 * y;
            }
            assert_eq!(o, want, "axpy n {n}");
        }
    }

    #[test]
    fn grouped_heads_compute_each_head_exactly_as_alone() {
        let mut rng = Rng::fresh();
        let shape = AttentionShape {
            heads: 8,
            kv_heads: 2,
            head_dim: 32,
            scale: 0.2,
        };
        let (start, n) = (9, 4);
        let q = rng.vec(n * 8 * 32);
        let k = rng.vec((start + n) * 2 * 32);
        let v = rng.vec((start + n) * 2 * 32);
        let mut out = vec![0.0; q.len()];
        causal_attention(&q, &k, &v, start, shape, &mut out);
        assert!(out == per_head(&q, &k, &v, start, shape));
    }

    #[test]
    fn a_window_row_equals_the_same_row_computed_as_a_single_token_window() {
        let mut rng = Rng::fresh();
        let shape = AttentionShape {
            heads: 4,
            kv_heads: 1,
            head_dim: 16,
            scale: 0.25,
        };
        let (start, n) = (3, 4);
        let q = rng.vec(n * 4 * 16);
        let k = rng.vec((start + n) * 16);
        let v = rng.vec((start + n) * 16);
        let mut all = vec![0.0; q.len()];
        causal_attention(&q, &k, &v, start, shape, &mut all);
        let row = 2;
        let mut one = vec![0.0; 64];
        causal_attention(
            &q[row * 64..(row + 1) * 64],
            &k,
            &v,
            start + row,
            shape,
            &mut one,
        );
        assert_eq!(one, all[row * 64..(row + 1) * 64]);
    }

    #[test]
    fn avx2_path_gives_the_bits_of_the_portable_path() {
        if !simd_heads(16) {
            eprintln!("skipped: this CPU lacks AVX2");
            return;
        }
        let mut rng = Rng::fresh();
        let seed = rng.0;
        // Groups of 1 to 3 heads (pairs and a single), head dims of 32-dimension chunks and a
        // 16-dimension rest, windows of 1 and several rows, past the prefetch distance.
        for (heads, kv_heads, hd, start, n) in [
            (16, 8, 128, 40, 1),
            (2, 2, 16, 0, 3),
            (6, 2, 48, 13, 2),
            (4, 1, 64, 5, 4),
            (3, 1, 80, 20, 1),
        ] {
            let shape = AttentionShape {
                heads,
                kv_heads,
                head_dim: hd,
                scale: (hd as f32).powf(-0.5),
            };
            let q = rng.vec(n * heads * hd);
            let k = rng.vec((start + n) * kv_heads * hd);
            let v = rng.vec((start + n) * kv_heads * hd);
            let (mut fast, mut plain) = (vec![0.0; q.len()], vec![0.0; q.len()]);
            let layout = KvLayout::token_major(shape);
            attend(&q, &k, &v, layout, start, shape, &mut fast, true);
            attend(&q, &k, &v, layout, start, shape, &mut plain, false);
            assert!(
                fast.iter()
                    .zip(&plain)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "seed {seed} heads {heads}/{kv_heads} hd {hd} start {start} n {n}"
            );
        }
    }

    #[test]
    fn head_major_kv_gives_the_bits_of_token_major_kv() {
        let mut rng = Rng::fresh();
        let seed = rng.0;
        for (heads, kv_heads, hd, start, n, capacity) in [
            (16, 8, 128, 30, 1, 40),
            (4, 2, 8, 5, 3, 9),
            (3, 1, 16, 0, 2, 2),
        ] {
            let shape = AttentionShape {
                heads,
                kv_heads,
                head_dim: hd,
                scale: 0.3,
            };
            let q = rng.vec(n * heads * hd);
            let (k, v) = (
                rng.vec((start + n) * kv_heads * hd),
                rng.vec((start + n) * kv_heads * hd),
            );
            let (token, head) = (
                KvLayout::token_major(shape),
                KvLayout::head_major(shape, capacity),
            );
            let (mut kh, mut vh) = (
                vec![0.0; capacity * kv_heads * hd],
                vec![0.0; capacity * kv_heads * hd],
            );
            for j in 0..start + n {
                for h in 0..kv_heads {
                    let (a, b) = (head.at(j, h), token.at(j, h));
                    kh[a..a + hd].copy_from_slice(&k[b..b + hd]);
                    vh[a..a + hd].copy_from_slice(&v[b..b + hd]);
                }
            }
            let (mut want, mut got) = (vec![0.0; q.len()], vec![0.0; q.len()]);
            causal_attention(&q, &k, &v, start, shape, &mut want);
            causal_attention_in(&q, &kh, &vh, head, start, shape, &mut got);
            assert!(
                want.iter()
                    .zip(&got)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "seed {seed} heads {heads}/{kv_heads} hd {hd} start {start} n {n}"
            );
        }
    }
}
