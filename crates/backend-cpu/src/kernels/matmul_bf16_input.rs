//! `y = bf16(x) · Wᵀ` for bf16 weights with the activations rounded to bf16 first
//! (`--matmul-input bf16` on the CPU), on x86-64 with AVX-512 BF16 (`vdpbf16ps`): each
//! instruction multiplies 32 pairs of bf16 and adds them into 16 f32 sums, twice the products of
//! an f32 fused multiply-add, and the weights need no widening. It is how llama.cpp multiplies
//! bf16 weights on such CPUs. The replies differ from the exact kernels' (x keeps 8 bits of
//! mantissa instead of 24), and each is still the same alone or batched.
//!
//! Batch invariance: every output `y[r, o]` is one chain whatever the batch. A 512-bit register
//! holds one 16-byte piece (8 elements) of each of 4 weight rows; `vdpbf16ps` against the row of
//! x's piece repeated 4 times adds, in the 4 lanes of weight row q, the pairs (0, 1), (2, 3),
//! (4, 5), (6, 7) of the piece. So `y[r, o]`'s 4 lanes take the pieces in increasing order, one
//! instruction each, and end as `(l0 + l1) + (l2 + l3)`. How many rows and weight rows a tile
//! holds, how the weights are laid out, and how they are prefetched decide only which chains
//! share a pass over memory, never the operations of one. Threads split the output columns.
//!
//! Layouts: the interleaved weights ([`super::matmul_fast::interleave_rows`]) give a group's 4
//! pieces as one 64-byte load; weights as stored (the experts of a fused tensor, every weight
//! under `--mmap`) give them as 4 loads of 16 bytes, the same values in the same lanes, so the
//! same bits (tested). A row whose length is not a multiple of 8 ends with a piece
//! loaded under a mask (zeros past the row: their products add +0).

use super::matmul::matmul_shape;
use super::matmul_fast::avx512::tile_rows;
use super::matmul_fast::{
    prefetch_lines, Ahead, Output, PrefetchInto, FEW_ROWS_AHEAD_L1, INTERLEAVE_ROWS, LANES,
    PREFETCH_STEP,
};
use half::bf16;
use rayon::prelude::*;
use std::arch::x86_64::*;

/// Elements of a weight row in one 16-byte piece (the interleaved layout's piece).
const PIECE: usize = LANES;
/// Weight rows in one register: 4 pieces of 16 bytes (the interleaved layout's group).
const GROUP_ROWS: usize = INTERLEAVE_ROWS;
/// Calls of at most this many rows (decode windows of one or two streams, most experts' calls
/// at 8 streams) stream their weights with the few-rows plan: memory is their limit, not the
/// multiplies.
const FEW_ROWS: usize = 2;
/// Groups of 4 weight rows a tile holds in a call of few rows: one stream of memory a tile. On
/// the 2-core EPYC (Zen 4), 1-2 rows over 311 MiB and 512 MiB of interleaved weights read at
/// 25-30 GB/s with one group (the exact kernel's 20-29 in the same runs), 21-33 with two, 21-27
/// with four (`bf16_input_speed`'s forerunner, median of 7, this VM's noise ±15 %).
const FEW_ROWS_GROUPS: usize = 1;
/// Groups a tile holds in a call of more rows: 12 weight rows against up to 8 rows of x (rows
/// split into tiles as the exact AVX-512 tiles split them, `tile_rows`): 24 independent chains
/// to cover the instruction's latency, and with 3 weight registers and one of x 28 of the 32
/// AVX-512 registers.
const MANY_ROWS_GROUPS: usize = 3;
/// Output columns per rayon task (whole groups of every tile width): 48 weight rows of 1,024 bf16
/// are 96 KiB, which stay in the per-core L2 while every tile of rows passes over them.
const COL_BLOCK: usize = 48;
/// A few-rows tile prefetches into L1, as far ahead as the exact kernel's on AMD.
const FEW_ROWS_AHEAD: Ahead = Ahead {
    elements: FEW_ROWS_AHEAD_L1,
    into: PrefetchInto::L1,
};
/// The first tile of rows of a many-rows call prefetches into L2, 48 KiB ahead. This kernel on
/// the 2-core EPYC (interleaved weights from memory, median of 7 alternating runs, ms; 4 / 8 / 64
/// rows): the small hybrid's lm_head (151,936 × 1,024) no prefetch 11.1 / 12.5 / 54.5, into L1
/// 48 KiB ahead 10.7 / 13.6 / 55.0, into L2 8 / 24 / 48 / 96 KiB ahead 9.4 / 10.7 / 52.0, 7.6 /
/// 7.4 / 48.9, 7.4 / 7.9 / 48.9, 7.5 / 7.1 / 49.0; 131,072 × 2,048 into L2 24 / 48 / 96 KiB
/// ahead 14.4 / 14.9 / 82.7, 12.9 / 12.6 / 80.2, 12.9 / 12.6 / 81.6 (none 17.7 / 20.0 / 87.8).
const MANY_ROWS_AHEAD: Ahead = Ahead {
    elements: 24_576,
    into: PrefetchInto::L2,
};

/// Whether this CPU runs the kernel: AVX-512F, BW, VL (masked 16-bit loads) and BF16.
pub fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vl")
        && std::arch::is_x86_feature_detected!("avx512bf16")
}

/// `y[rows, out] = bf16(x[rows, k]) · W[out, k]ᵀ`, W as stored (row-major).
/// Panics unless [`available`].
pub fn matmul_stored(x: &[f32], w: &[bf16], k: usize, y: &mut [f32]) {
    run::<1>(x, w, k, y);
}

/// [`matmul_stored`] over weights interleaved by [`super::matmul_fast::interleave_rows`]: the
/// same bits. Panics unless [`available`] and the shape is interleavable.
pub fn matmul_interleaved(x: &[f32], w: &[bf16], k: usize, y: &mut [f32]) {
    assert!(
        k > 0 && w.len().is_multiple_of(k) && super::matmul_fast::interleavable(k, w.len() / k),
        "matmul_bf16_input::matmul_interleaved: [{}, {k}] is not interleaved whole groups",
        w.len() / k.max(1)
    );
    run::<GROUP_ROWS>(x, w, k, y);
}

/// x's rows rounded to bf16 (to nearest, ties to even; the reference's rounding).
fn round_rows(x: &[f32]) -> Vec<bf16> {
    x.iter().map(|&v| bf16::from_f32(v)).collect()
}

/// How a call streams its weights.
#[derive(Clone, Copy)]
struct Plan {
    /// Groups of 4 weight rows a tile holds.
    groups: usize,
    /// The first tile of rows' prefetch.
    ahead: Ahead,
}

fn plan_for(rows: usize) -> Plan {
    if rows <= FEW_ROWS {
        Plan {
            groups: FEW_ROWS_GROUPS,
            ahead: FEW_ROWS_AHEAD,
        }
    } else {
        Plan {
            groups: MANY_ROWS_GROUPS,
            ahead: MANY_ROWS_AHEAD,
        }
    }
}

/// The kernel over weights whose groups are stored as `S` says: 1 as stored, 4 interleaved.
fn run<const S: usize>(x: &[f32], w: &[bf16], k: usize, y: &mut [f32]) {
    assert!(
        available(),
        "matmul_bf16_input: this CPU lacks AVX-512 BF16 (the caller checks available())"
    );
    let (rows, out) = matmul_shape(x, w.len(), k, y.len());
    if rows == 0 || out == 0 {
        return;
    }
    let xb = round_rows(x);
    let plan = plan_for(rows);
    let y = Output(y.as_mut_ptr());
    (0..out.div_ceil(COL_BLOCK)).into_par_iter().for_each(|b| {
        let start = b * COL_BLOCK;
        let cols = COL_BLOCK.min(out - start);
        // SAFETY: `available()` was asserted; the block's weights are `cols` whole rows (`S` 4:
        // whole groups, as `interleavable` asserted), `xb` holds `rows × k` values and `y`
        // `rows × out`, of which this task writes only its columns `start..start + cols`.
        unsafe {
            block::<S>(
                &xb,
                rows,
                k,
                &w[start * k..(start + cols) * k],
                cols,
                y.at(start),
                out,
                plan,
            )
        }
    });
}

/// One column block: every tile of rows over every tile of groups.
///
/// # Safety
/// The CPU has what [`available`] checks; `y` holds `rows × ld` floats from the block's column 0.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
#[allow(clippy::too_many_arguments)]
unsafe fn block<const S: usize>(
    xb: &[bf16],
    rows: usize,
    k: usize,
    w: &[bf16],
    cols: usize,
    y: *mut f32,
    ld: usize,
    plan: Plan,
) {
    let mut r0 = 0;
    while r0 < rows {
        let nr = tile_rows(rows - r0);
        // The first tile of rows reads the block's weights from memory; the others find them
        // in cache.
        let ahead = if r0 == 0 { plan.ahead } else { Ahead::NONE };
        let x = xb.as_ptr().add(r0 * k);
        let mut c0 = 0;
        while c0 < cols {
            let nc = (GROUP_ROWS * plan.groups).min(cols - c0);
            let t = Tile {
                x,
                k,
                w: w.as_ptr(),
                c0,
                cols,
                ahead,
                y: y.add(r0 * ld + c0),
                ld,
                nc,
            };
            match plan.groups {
                FEW_ROWS_GROUPS => t.run_rows::<FEW_ROWS_GROUPS, S>(nr),
                _ => t.run_rows::<MANY_ROWS_GROUPS, S>(nr),
            }
            c0 += nc;
        }
        r0 += nr;
    }
}

/// One tile's operands: `nr` rows of x from `x` against the weight rows `c0..c0 + nc` of a block
/// of `cols` rows at `w`.
struct Tile {
    x: *const bf16,
    k: usize,
    w: *const bf16,
    c0: usize,
    cols: usize,
    ahead: Ahead,
    y: *mut f32,
    ld: usize,
    nc: usize,
}

impl Tile {
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
    unsafe fn run_rows<const G: usize, const S: usize>(&self, nr: usize) {
        match nr {
            8 => self.run::<8, G, S>(),
            7 => self.run::<7, G, S>(),
            6 => self.run::<6, G, S>(),
            5 => self.run::<5, G, S>(),
            4 => self.run::<4, G, S>(),
            3 => self.run::<3, G, S>(),
            2 => self.run::<2, G, S>(),
            _ => self.run::<1, G, S>(),
        }
    }

    /// `R` rows × `G` groups: `R · G` registers of sums, one piece of every weight row a step.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
    unsafe fn run<const R: usize, const G: usize, const S: usize>(&self) {
        let k = self.k;
        // Weight row c's start (as stored) or its group's (interleaved: a group's pieces follow
        // one another); rows past the block repeat its last (computed, not stored).
        let last = self.cols - 1;
        let row = |c: usize| self.w.add(c.min(last) * k);
        let groups: [[*const bf16; GROUP_ROWS]; G] = std::array::from_fn(|g| {
            let c = self.c0 + GROUP_ROWS * g;
            if S == 1 {
                std::array::from_fn(|q| row(c + q))
            } else {
                [row(c.min(self.cols - GROUP_ROWS)); GROUP_ROWS]
            }
        });
        // The tile's weights are G · 4 whole rows in one stretch of memory in either layout,
        // read at G · 4 · 8 elements a step: the sweep prefetches the stretch `ahead` further on,
        // the next tiles' weights.
        let sweep = self.w.wrapping_add(self.c0 * k + self.ahead.elements);
        let lines_per_step = G * GROUP_ROWS * PIECE / PREFETCH_STEP;
        let steps = k / PIECE;
        let tail = k % PIECE;
        let mut acc = [[_mm512_setzero_ps(); G]; R];
        for s in 0..steps {
            if self.ahead.elements > 0 {
                let from = sweep.wrapping_add(s * lines_per_step * PREFETCH_STEP);
                prefetch_lines(from, lines_per_step, self.ahead.into);
            }
            let wv: [__m512bh; G] =
                std::array::from_fn(|g| weights::<S>(&groups[g], s * PIECE, PIECE));
            for (r, sums) in acc.iter_mut().enumerate() {
                let xv = x_piece(self.x.add(r * k + s * PIECE), PIECE);
                for (a, w) in sums.iter_mut().zip(&wv) {
                    *a = _mm512_dpbf16_ps(*a, xv, *w);
                }
            }
        }
        if tail > 0 {
            let at = steps * PIECE;
            let wv: [__m512bh; G] = std::array::from_fn(|g| weights::<S>(&groups[g], at, tail));
            for (r, sums) in acc.iter_mut().enumerate() {
                let xv = x_piece(self.x.add(r * k + at), tail);
                for (a, w) in sums.iter_mut().zip(&wv) {
                    *a = _mm512_dpbf16_ps(*a, xv, *w);
                }
            }
        }
        for (r, sums) in acc.iter().enumerate() {
            for (g, a) in sums.iter().enumerate() {
                let mut lanes = [0.0f32; 16];
                _mm512_storeu_ps(lanes.as_mut_ptr(), *a);
                for q in 0..GROUP_ROWS {
                    let c = GROUP_ROWS * g + q;
                    if c < self.nc {
                        let l = &lanes[4 * q..4 * q + 4];
                        *self.y.add(r * self.ld + c) = (l[0] + l[1]) + (l[2] + l[3]);
                    }
                }
            }
        }
    }
}

/// The first `n` (8, or the tail's fewer) elements at `p` in 16 bytes, zeros past them.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
unsafe fn piece(p: *const bf16, n: usize) -> __m128i {
    if n == PIECE {
        _mm_loadu_si128(p as *const __m128i)
    } else {
        _mm_maskz_loadu_epi16(((1u32 << n) - 1) as __mmask8, p as *const i16)
    }
}

/// x's piece at `p` in each of the 4 places of a group's pieces.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
unsafe fn x_piece(p: *const bf16, n: usize) -> __m512bh {
    std::mem::transmute::<__m512i, __m512bh>(_mm512_broadcast_i32x4(piece(p, n)))
}

/// The pieces at element `at` of a group's 4 weight rows: one 64-byte load interleaved (the
/// rows' pieces follow one another from `4 · at` on), four of 16 bytes as stored.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
unsafe fn weights<const S: usize>(
    rows: &[*const bf16; GROUP_ROWS],
    at: usize,
    n: usize,
) -> __m512bh {
    let v = if S == 1 {
        let v = _mm512_castsi128_si512(piece(rows[0].add(at), n));
        let v = _mm512_inserti32x4::<1>(v, piece(rows[1].add(at), n));
        let v = _mm512_inserti32x4::<2>(v, piece(rows[2].add(at), n));
        _mm512_inserti32x4::<3>(v, piece(rows[3].add(at), n))
    } else {
        debug_assert_eq!(n, PIECE, "an interleaved matrix has no tail");
        _mm512_loadu_si512(rows[0].add(GROUP_ROWS * at) as *const _)
    };
    std::mem::transmute::<__m512i, __m512bh>(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::matmul_fast::interleave_rows;
    use crate::kernels::testutil::{
        bf16s, is_the_products_of_rounded_inputs, rows_alone_and_layouts_agree, LaidOutKernel, Rng,
        EDGE_SHAPES,
    };

    /// True (and says so) where this CPU lacks AVX-512 BF16: the test has nothing to run.
    fn skipped() -> bool {
        if !available() {
            eprintln!("skipped: this CPU lacks AVX-512 BF16");
        }
        !available()
    }

    #[test]
    fn bf16_input_matmul_is_the_products_of_rounded_inputs() {
        if skipped() {
            return;
        }
        // k with and without a tail piece, columns not whole groups or blocks, rows of both
        // plans and every tile height.
        is_the_products_of_rounded_inputs(matmul_stored, &EDGE_SHAPES);
    }

    #[test]
    fn bf16_input_row_is_bit_identical_alone_or_in_a_batch_in_either_layout() {
        if skipped() {
            return;
        }
        let kernel = LaidOutKernel {
            stored: matmul_stored,
            lay: |w, k, out| {
                super::super::matmul_fast::interleavable(k, out).then(|| interleave_rows(w, k))
            },
            laid: matmul_interleaved,
        };
        // (k, out): a tail piece and a part group (stored only), and interleavable shapes.
        rows_alone_and_layouts_agree(
            &kernel,
            &[(1024, 75), (200, 33), (37, 9), (1024, 96), (64, 52)],
            &[1, 2, 3, 4, 5, 7, 8, 13, 17, 33],
        );
    }

    #[test]
    fn bf16_input_rounds_x_once_to_nearest_even() {
        if skipped() {
            return;
        }
        // x = 1 + 2^-8 lies halfway between bf16's 1 and 1 + 2^-7: ties to even gives 1; and
        // 1 + 3·2^-9 rounds up to 1 + 2^-7. With w = 1 the output is bf16(x) itself.
        let k = 8;
        let w = bf16s(&[1.0; 8]);
        let mut x = vec![0.0f32; k];
        for (v, want) in [
            (1.0 + 2f32.powi(-8), 1.0),
            (1.0 + 3.0 * 2f32.powi(-9), 1.0 + 2f32.powi(-7)),
        ] {
            x[0] = v;
            let mut y = vec![0.0; 1];
            matmul_stored(&x, &w, k, &mut y);
            assert_eq!(y[0], want, "x {v}");
        }
    }

    /// The kernel against the exact one (over x already rounded to bf16, so both compute the
    /// same products), alternating, median of several runs, at 1-64 rows: on the small hybrid's
    /// lm_head (311 MiB, from memory) and a 6,144 × 1,024 projection (12 MiB, in the last-level
    /// cache). A timing, not a test: `cargo test --release -p backend-cpu --lib -- --ignored
    /// bf16_input_speed --nocapture`.
    #[test]
    #[ignore]
    fn bf16_input_speed() {
        if skipped() {
            return;
        }
        use crate::kernels::matmul_fast::matmul_bf16_interleaved;
        let mut rng = Rng::fresh();
        for (out, k, runs) in [(151_936, 1024, 7), (6144, 1024, 101)] {
            let w = interleave_rows(&bf16s(&rng.vec(out * k)), k);
            for rows in [1, 2, 4, 8, 16, 64] {
                let x: Vec<f32> = bf16s(&rng.vec(rows * k))
                    .iter()
                    .map(|v| v.to_f32())
                    .collect();
                let (mut exact, mut pairs) = (vec![0.0f32; rows * out], vec![0.0f32; rows * out]);
                let (mut t_exact, mut t_pairs) = (vec![], vec![]);
                for _ in 0..runs {
                    let t = std::time::Instant::now();
                    matmul_bf16_interleaved(&x, &w, k, &mut exact);
                    t_exact.push(t.elapsed().as_secs_f64());
                    let t = std::time::Instant::now();
                    matmul_interleaved(&x, &w, k, &mut pairs);
                    t_pairs.push(t.elapsed().as_secs_f64());
                }
                let median = |t: &mut Vec<f64>| {
                    t.sort_by(f64::total_cmp);
                    t[t.len() / 2] * 1e3
                };
                let (te, tp) = (median(&mut t_exact), median(&mut t_pairs));
                let gb = (out * k * 2) as f64 / 1e6;
                eprintln!(
                    "{out} x {k}, {rows} rows: exact {te:.3} ms ({:.1} GB/s), bf16 input \
                     {tp:.3} ms ({:.1} GB/s): {:.2}x",
                    gb / te,
                    gb / tp,
                    te / tp
                );
            }
        }
    }
}
