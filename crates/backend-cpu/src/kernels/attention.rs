//! Causal grouped-query attention of one window's rows over its session's KV rows.
//!
//! Each (row, head) computes scores against every visible key in key order, softmax in f32
//! (max-subtracted), then the weighted sum of values in key order. A task is one row and one KV
//! head (the query heads of its group read each K/V row once), or on the AVX-512 path several
//! rows of one KV head. Nothing depends on other windows; threads split (rows, KV head) pairs
//! only. Every path gives every output the portable path's bits; where an output is NaN (a NaN
//! or an infinity among the inputs), which NaN comes out is not defined (Rust promises no NaN's
//! bits through arithmetic, and the vector and scalar instructions keep different ones).

use super::matmul::dot;
use super::matmul_fast::KERNELS_ENV;
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

/// How [`causal_attention`] computes a call. Every path gives the same bits (the same
/// operations per score and per output element, in the same order); only the speed differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AttentionPath {
    /// Scalar code, one (row, KV head) a task.
    Portable,
    /// AVX2, one (row, KV head) a task: the group's query heads read each key and value row
    /// once, the weighted sums stay in registers.
    Avx2,
    /// AVX-512, several rows of one KV head a task ([`rows_per_task`]): every query vector of
    /// the task (row × head of the group) scores four keys at a time and reads each value row
    /// once per four query vectors, and sixteen scores share one horizontal reduction.
    Avx512,
}

/// The path for heads of `hd` dimensions on this CPU: AVX-512F (unless [`KERNELS_ENV`] says
/// `avx2` or `portable`), else AVX2; both need `hd` a multiple of 16.
fn path_for(hd: usize) -> AttentionPath {
    if hd == 0 || !hd.is_multiple_of(16) {
        return AttentionPath::Portable;
    }
    path_of_cpu()
}

impl AttentionPath {
    /// Whether this CPU has the path's instructions and the path takes heads of `hd` dimensions.
    fn runs(self, hd: usize) -> bool {
        let chunks = hd > 0 && hd.is_multiple_of(16);
        match self {
            AttentionPath::Portable => true,
            #[cfg(target_arch = "x86_64")]
            AttentionPath::Avx2 => chunks && std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            AttentionPath::Avx512 => {
                chunks
                    && std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("avx512f")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }
}

/// [`path_for`]'s choice for whole 16-float chunks, fixed for the life of the process.
fn path_of_cpu() -> AttentionPath {
    static PATH: std::sync::OnceLock<AttentionPath> = std::sync::OnceLock::new();
    *PATH.get_or_init(|| {
        let wanted = std::env::var(KERNELS_ENV).ok();
        #[cfg(target_arch = "x86_64")]
        {
            let (avx512, avx2) = (
                std::arch::is_x86_feature_detected!("avx512f"),
                std::arch::is_x86_feature_detected!("avx2"),
            );
            match wanted.as_deref() {
                Some("portable") => AttentionPath::Portable,
                Some("avx2") if avx2 => AttentionPath::Avx2,
                _ if avx512 => AttentionPath::Avx512,
                _ if avx2 => AttentionPath::Avx2,
                _ => AttentionPath::Portable,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = wanted;
            AttentionPath::Portable
        }
    })
}

/// Rows an AVX-512 task takes at most: 16 rows of a group of two heads are 32 query vectors,
/// eight blocks of four, that read each chunk of keys and values from L1 once it is there
/// instead of each row streaming them from L2 or L3 (a KV head's keys are 1 MiB at 2,048
/// positions). Chosen with the key chunks (the two together: a 2,048-token prompt 157 → 164
/// tok/s, single runs, before the shared reductions; 16 against 4 rows with chunks was not
/// measured apart).
/// More rows leave a short window too few tasks, which [`rows_per_task`] guards against.
const ROWS_PER_TASK: usize = 16;

/// Tasks a call wants per thread before it puts several rows in one: rows of a causal window
/// cost more the later they are, so the threads balance only over several tasks each.
const TASKS_PER_THREAD: usize = 4;

/// How many consecutive rows of one KV head an AVX-512 task takes in a window of `n` rows over
/// `kv_heads` KV heads on `threads` threads: up to [`ROWS_PER_TASK`], fewer while that would leave
/// fewer than [`TASKS_PER_THREAD`] tasks a thread. The bits never depend on it.
fn rows_per_task(n: usize, kv_heads: usize, threads: usize) -> usize {
    let mut rows = ROWS_PER_TASK.min(n).max(1);
    while rows > 1 && n.div_ceil(rows) * kv_heads < TASKS_PER_THREAD * threads {
        rows -= 1;
    }
    rows
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

/// The AVX-512 path ([`AttentionPath::Avx512`]): the bits of [`avx2`]'s (each score is a
/// 16-lane [`avx2::dot`] with its final reduction; each output element a multiply then an add
/// per key, in key order, from 0), with one register where AVX2 takes two.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::super::expf;
    use std::arch::x86_64::*;

    /// `$body` with `$M` a constant of the block's query vectors, `$m` (4, 3, 2 or 1): one
    /// monomorphised kernel a block size.
    macro_rules! with_block {
        ($m:expr, $M:ident => $body:expr) => {
            match $m {
                4 => {
                    const $M: usize = 4;
                    $body
                }
                3 => {
                    const $M: usize = 3;
                    $body
                }
                2 => {
                    const $M: usize = 2;
                    $body
                }
                _ => {
                    const $M: usize = 1;
                    $body
                }
            }
        };
    }

    /// Bytes of key (or value) rows a chunk holds: 16 KiB, half of the smallest first-level
    /// data cache of the CPUs with AVX-512 (32 KiB on AMD Zen 4), so a chunk's rows stay there
    /// while every block of the task's query vectors reads them.
    const CHUNK_BYTES: usize = 16 << 10;

    /// Keys a chunk holds for heads of `hd` dimensions: [`CHUNK_BYTES`]' worth, a multiple of
    /// four (the score blocks' keys), at least four.
    fn keys_per_chunk(hd: usize) -> usize {
        (CHUNK_BYTES / (hd * 4) / 4 * 4).max(4)
    }

    /// `each(from, to, i, m)` for every chunk `from..to` of `width` keys (`chunk` a time) and,
    /// within it, every block of `m` (at most [`BLOCK`]) of the `nq` query vectors from `i`:
    /// the walk the scores and the weighted sums share, keys outermost so that every block reads
    /// a chunk's rows from L1.
    #[inline(always)]
    fn chunks_by_blocks(
        width: usize,
        chunk: usize,
        nq: usize,
        mut each: impl FnMut(usize, usize, usize, usize),
    ) {
        let mut from = 0;
        while from < width {
            let to = (from + chunk).min(width);
            let mut i = 0;
            while i < nq {
                let m = (nq - i).min(BLOCK);
                each(from, to, i, m);
                i += m;
            }
            from = to;
        }
    }

    /// Query vectors a block scores and sums together (each key and value row read once for
    /// them): with four keys at a time, 16 accumulators, 4 query and 4 key registers of the 32.
    const BLOCK: usize = 4;

    /// Attention of one task's query vectors over one KV head: `queries[i]` (hd floats) sees
    /// keys `0..visible[i]`; key or value `j` is at `k` or `v` + `j · row_stride`. `out` gets
    /// `queries.len()` outputs of hd floats. `vector_exp`: the softmax's exp through
    /// [`expf::avx512::exp16`] ([`expf::matches_libm`] must hold), else `f32::exp`.
    ///
    /// # Safety
    /// AVX-512F and AVX2 are present (FMA too with `vector_exp`); hd is a multiple of 16; every query pointer is valid for
    /// hd floats; `k` and `v` are valid for the rows of every visible key; `visible` is as long
    /// as `queries`, each at least 1; `out` holds `queries.len() · hd` floats.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f,avx2")]
    pub unsafe fn attend_task(
        queries: &[*const f32],
        visible: &[usize],
        k: *const f32,
        v: *const f32,
        row_stride: usize,
        hd: usize,
        scale: f32,
        vector_exp: bool,
        out: &mut [f32],
    ) {
        let nq = queries.len();
        let width = visible.iter().copied().max().unwrap_or(0);
        // 1. scores [query, key], a row `width` wide (a query's keys past its own are never
        // read), a chunk of keys at a time so that every block of query vectors finds the
        // chunk's key rows in the nearest cache
        let mut scores = vec![0.0f32; nq * width];
        let sp = scores.as_mut_ptr();
        let chunk = keys_per_chunk(hd);
        chunks_by_blocks(width, chunk, nq, |from, to, i, m| {
            let keys = visible[i..i + m].iter().copied().max().unwrap_or(0).min(to);
            let s = |a: usize| sp.add((i + a) * width);
            let q = |a: usize| queries[i + a];
            let range = from..keys.max(from);
            with_block!(m, M => score_block::<M>(
                std::array::from_fn(q),
                k,
                row_stride,
                range,
                hd,
                scale,
                std::array::from_fn(s),
            ));
        });
        // 2. softmax weights (max-subtracted, unnormalised) and the inverse of their sums: the
        // portable path's max (NaN skipped, so the same max), its exp (vectorised where that
        // gives the library's bits), its sum in key order
        for a in 0..nq {
            let row = &mut scores[a * width..a * width + visible[a]];
            let max = row_max(row);
            if vector_exp {
                exp_minus_in_place(row, max);
            } else {
                for s in row.iter_mut() {
                    *s = (*s - max).exp();
                }
            }
        }
        // Each query's sum in key order, then its inverse: four queries' chains side by side
        // (one add waits for the one before it in its own chain only; a block of fewer than
        // four repeats its last query's row in the spare chains and drops them).
        let mut inv = vec![0.0f32; nq];
        for (block, inv) in inv.chunks_mut(4).enumerate() {
            let first = block * 4;
            let last = first + inv.len() - 1;
            let common = visible[first..=last].iter().copied().min().unwrap_or(0);
            let rows: [usize; 4] = std::array::from_fn(|a| (first + a).min(last) * width);
            let mut sums = [0.0f32; 4];
            for j in 0..common {
                for (a, sum) in sums.iter_mut().enumerate() {
                    *sum += scores[rows[a] + j];
                }
            }
            for (a, inv) in inv.iter_mut().enumerate() {
                let mut sum = sums[a];
                for j in common..visible[first + a] {
                    sum += scores[rows[a] + j];
                }
                *inv = 1.0 / sum;
            }
        }
        // 3. weighted sums of the values, a chunk of keys at a time (each element's running sum
        // kept in `out` between chunks), BLOCK query vectors and up to 64 dimensions at a time
        let sp = scores.as_ptr();
        let op = out.as_mut_ptr();
        chunks_by_blocks(width, chunk, nq, |from, to, i, m| {
            // A query's keys in this chunk: from..vis[a] (none where vis[a] <= from).
            let vis: [usize; BLOCK] =
                std::array::from_fn(|a| visible[(i + a).min(i + m - 1)].clamp(from, to));
            let mut d0 = 0;
            while d0 < hd {
                let c = ((hd - d0) / 16).min(4);
                let p = |a: usize| sp.add((i + a) * width);
                let o = |a: usize| op.add((i + a) * hd + d0);
                let vd = v.add(d0);
                with_block!(m, M => sum_quad::<M>(
                    std::array::from_fn(p),
                    vd,
                    row_stride,
                    from,
                    vis,
                    std::array::from_fn(o),
                    c,
                ));
                d0 += c * 16;
            }
        });
        // 4. the normalisation
        for (a, o) in out.chunks_exact_mut(hd).enumerate() {
            for x in o.iter_mut() {
                *x *= inv[a];
            }
        }
    }

    /// The largest of `row`, NaN skipped (`fold(-∞, f32::max)`'s value; of +0 and −0 either,
    /// which `s − max` and its exp cannot tell apart).
    #[inline]
    #[target_feature(enable = "avx512f,avx2")]
    unsafe fn row_max(row: &[f32]) -> f32 {
        let mut m = _mm512_set1_ps(f32::NEG_INFINITY);
        let chunks = row.chunks_exact(16);
        let rest = chunks.remainder();
        for c in chunks {
            // The second operand where either is NaN: the running max.
            m = _mm512_max_ps(_mm512_loadu_ps(c.as_ptr()), m);
        }
        let max = _mm512_reduce_max_ps(m);
        rest.iter().copied().fold(max, f32::max)
    }

    /// `row[j] = e^(row[j] − max)`, sixteen at a time.
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn exp_minus_in_place(row: &mut [f32], max: f32) {
        let m = _mm512_set1_ps(max);
        let mut chunks = row.chunks_exact_mut(16);
        for c in &mut chunks {
            let x = _mm512_sub_ps(_mm512_loadu_ps(c.as_ptr()), m);
            _mm512_storeu_ps(c.as_mut_ptr(), expf::avx512::exp16(x));
        }
        let rest = chunks.into_remainder();
        let lanes = (1u32 << rest.len()) - 1;
        let x = _mm512_sub_ps(_mm512_maskz_loadu_ps(lanes as u16, rest.as_ptr()), m);
        _mm512_mask_storeu_ps(rest.as_mut_ptr(), lanes as u16, expf::avx512::exp16(x));
    }

    /// Scores of `M` query vectors against the keys `keys`: `s[a][j]` = `scale` × the 16-lane
    /// dot of query `a` and key `j` ([`super::avx2::dot`]'s bits). Sixteen dots at a time
    /// (4 queries × 4 keys, 2 × 8 or 1 × 16) share one reduction ([`reduce_sixteen`]); the rest
    /// four or one key at a time.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f,avx2")]
    unsafe fn score_block<const M: usize>(
        q: [*const f32; M],
        k: *const f32,
        row_stride: usize,
        keys: std::ops::Range<usize>,
        hd: usize,
        scale: f32,
        s: [*mut f32; M],
    ) {
        let (mut j, keys) = (keys.start, keys.end);
        match M {
            4 => score_sixteen::<M, 4>(q, k, row_stride, &mut j, keys, hd, scale, s),
            2 => score_sixteen::<M, 8>(q, k, row_stride, &mut j, keys, hd, scale, s),
            1 => score_sixteen::<M, 16>(q, k, row_stride, &mut j, keys, hd, scale, s),
            _ => {}
        }
        while j + 4 <= keys {
            let kj: [*const f32; 4] = std::array::from_fn(|c| k.add((j + c) * row_stride));
            let acc = dot_sums::<M, 4>(q, kj, hd);
            for a in 0..M {
                for (c, x) in acc[a].iter().enumerate() {
                    *s[a].add(j + c) = reduce16(*x) * scale;
                }
            }
            j += 4;
        }
        while j < keys {
            let acc = dot_sums::<M, 1>(q, [k.add(j * row_stride)], hd);
            for a in 0..M {
                *s[a].add(j) = reduce16(acc[a][0]) * scale;
            }
            j += 1;
        }
    }

    /// [`score_block`]'s keys `*j..keys`, `K` at a time while they last (`M · K` = 16), `*j`
    /// moved past them.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f,avx2")]
    unsafe fn score_sixteen<const M: usize, const K: usize>(
        q: [*const f32; M],
        k: *const f32,
        row_stride: usize,
        j: &mut usize,
        keys: usize,
        hd: usize,
        scale: f32,
        s: [*mut f32; M],
    ) {
        debug_assert_eq!(M * K, 16, "score_sixteen: {M} × {K} dots");
        let scale = _mm512_set1_ps(scale);
        let mut lanes = [0.0f32; 16];
        while *j + K <= keys {
            let kj: [*const f32; K] = std::array::from_fn(|c| k.add((*j + c) * row_stride));
            let acc = dot_sums::<M, K>(q, kj, hd);
            let sums = reduce_sixteen(std::array::from_fn(|r| acc[r / K][r % K]));
            _mm512_storeu_ps(lanes.as_mut_ptr(), _mm512_mul_ps(sums, scale));
            for (a, s) in s.iter().enumerate() {
                std::ptr::copy_nonoverlapping(lanes.as_ptr().add(a * K), s.add(*j), K);
            }
            *j += K;
        }
    }

    /// The sums of `M` query vectors' products with `K` key rows: lane `l` of a register sums
    /// dimensions `l, l + 16, …` (a multiply then an add each), as [`super::avx2::dots`]' two
    /// registers do; [`reduce16`] or [`reduce_sixteen`] finishes each dot.
    #[inline]
    #[target_feature(enable = "avx512f,avx2")]
    unsafe fn dot_sums<const M: usize, const K: usize>(
        q: [*const f32; M],
        k: [*const f32; K],
        hd: usize,
    ) -> [[__m512; K]; M] {
        let mut acc = [[_mm512_setzero_ps(); K]; M];
        let mut t = 0;
        while t < hd {
            let kt: [__m512; K] = std::array::from_fn(|c| _mm512_loadu_ps(k[c].add(t)));
            for (a, acc) in acc.iter_mut().enumerate() {
                let qt = _mm512_loadu_ps(q[a].add(t));
                for (x, kc) in acc.iter_mut().zip(&kt) {
                    *x = _mm512_add_ps(*x, _mm512_mul_ps(qt, *kc));
                }
            }
            t += 16;
        }
        acc
    }

    /// [`reduce16`] of sixteen registers at once, lane `r` of the result register `r`'s: the
    /// same additions of the same pairs, four registers' worth in each instruction. With
    /// `h = lo + hi` (eight lanes), `q = h[0..4] + h[4..8]`, `t = (q0 + q2, q1 + q3)`, the sum
    /// `t0 + t1`.
    #[inline]
    #[target_feature(enable = "avx512f,avx2")]
    unsafe fn reduce_sixteen(x: [__m512; 16]) -> __m512 {
        // h of registers 2p and 2p + 1 side by side (128-bit blocks: h.lo, h.hi of each).
        let h: [__m512; 8] = std::array::from_fn(|p| {
            let (a, b) = (x[2 * p], x[2 * p + 1]);
            _mm512_add_ps(
                _mm512_shuffle_f32x4::<0x44>(a, b),
                _mm512_shuffle_f32x4::<0xEE>(a, b),
            )
        });
        // q of registers 4u..4u + 4, a 128-bit block each.
        let q: [__m512; 4] = std::array::from_fn(|u| {
            let (a, b) = (h[2 * u], h[2 * u + 1]);
            _mm512_add_ps(
                _mm512_shuffle_f32x4::<0x88>(a, b),
                _mm512_shuffle_f32x4::<0xDD>(a, b),
            )
        });
        // Block b of t: (t0, t1) of registers b and 4 + b (or 8 + b and 12 + b).
        let t: [__m512; 2] = std::array::from_fn(|w| {
            let (a, b) = (q[2 * w], q[2 * w + 1]);
            _mm512_add_ps(
                _mm512_shuffle_ps::<0x44>(a, b),
                _mm512_shuffle_ps::<0xEE>(a, b),
            )
        });
        // Block b: the sums of registers b, 4 + b, 8 + b, 12 + b; lane 4b + i holds register
        // 4i + b's, put back in register order.
        let sums = _mm512_add_ps(
            _mm512_shuffle_ps::<0x88>(t[0], t[1]),
            _mm512_shuffle_ps::<0xDD>(t[0], t[1]),
        );
        let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        _mm512_permutexvar_ps(order, sums)
    }

    /// [`super::avx2::reduce16`] of a register's low and high eight lanes.
    #[inline]
    #[target_feature(enable = "avx512f,avx2")]
    unsafe fn reduce16(x: __m512) -> f32 {
        let lo = _mm512_castps512_ps256(x);
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(x)));
        let h = _mm256_add_ps(lo, hi);
        let q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h));
        let t = _mm_add_ps(q, _mm_movehl_ps(q, q));
        _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps::<1>(t, t)))
    }

    /// `o[a][d] += Σ_j p[a][j] · v[j][d]` for `C` registers of dimensions (16 each) of `M`
    /// query vectors, query `a` over keys `from..vis[a]` (`vis[a] >= from`): a multiply then an
    /// add per key in key order onto the running sums in `o` (zero before the first key), so
    /// chunk after chunk gives [`super::avx2::weighted_sums`]' bits. The keys every query sees
    /// are read once for all; the rest, query by query.
    #[inline]
    #[target_feature(enable = "avx512f,avx2")]
    unsafe fn sum_block<const M: usize, const C: usize>(
        p: [*const f32; M],
        v: *const f32,
        row_stride: usize,
        from: usize,
        vis: [usize; BLOCK],
        o: [*mut f32; M],
    ) {
        let mut acc = [[_mm512_setzero_ps(); C]; M];
        for (a, acc) in acc.iter_mut().enumerate() {
            for (c, x) in acc.iter_mut().enumerate() {
                *x = _mm512_loadu_ps(o[a].add(c * 16));
            }
        }
        let common = vis[..M].iter().copied().min().unwrap_or(from);
        for j in from..common {
            let vj: [__m512; C] =
                std::array::from_fn(|c| _mm512_loadu_ps(v.add(j * row_stride + c * 16)));
            for (a, acc) in acc.iter_mut().enumerate() {
                let pa = _mm512_set1_ps(*p[a].add(j));
                for (x, vc) in acc.iter_mut().zip(&vj) {
                    *x = _mm512_add_ps(*x, _mm512_mul_ps(pa, *vc));
                }
            }
        }
        for (a, acc) in acc.iter_mut().enumerate() {
            for j in common..vis[a] {
                let pa = _mm512_set1_ps(*p[a].add(j));
                for (c, x) in acc.iter_mut().enumerate() {
                    let vc = _mm512_loadu_ps(v.add(j * row_stride + c * 16));
                    *x = _mm512_add_ps(*x, _mm512_mul_ps(pa, vc));
                }
            }
            for (c, x) in acc.iter().enumerate() {
                _mm512_storeu_ps(o[a].add(c * 16), *x);
            }
        }
    }

    /// [`sum_block`] of `chunks` (1 to 4) registers of dimensions: four at once, fewer one at a
    /// time.
    #[inline]
    #[target_feature(enable = "avx512f,avx2")]
    unsafe fn sum_quad<const M: usize>(
        p: [*const f32; M],
        v: *const f32,
        row_stride: usize,
        from: usize,
        vis: [usize; BLOCK],
        o: [*mut f32; M],
        chunks: usize,
    ) {
        if chunks == 4 {
            return sum_block::<M, 4>(p, v, row_stride, from, vis, o);
        }
        for c in 0..chunks {
            sum_block::<M, 1>(
                p,
                v.add(c * 16),
                row_stride,
                from,
                vis,
                std::array::from_fn(|a| o[a].add(c * 16)),
            );
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
    attend(q, k, v, layout, start, shape, out, path_for(shape.head_dim))
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
    attend(q, k, v, layout, start, shape, out, path_for(shape.head_dim))
}

/// [`causal_attention_in`] on `path` (an AVX2 or AVX-512 path only where [`path_for`] would
/// allow it: the CPU has it and the head dimensions are whole 16-float chunks).
#[allow(clippy::too_many_arguments)]
fn attend(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    layout: KvLayout,
    start: usize,
    shape: AttentionShape,
    out: &mut [f32],
    path: AttentionPath,
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
        path.runs(hd),
        "attention: no {path:?} path for head_dim {hd} on this CPU"
    );
    if n == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if path == AttentionPath::Avx512 {
        let rows = rows_per_task(n, kv_heads, rayon::current_num_threads());
        return attend_rows(q, k, v, layout, start, shape, out, rows);
    }
    let simd = path != AttentionPath::Portable;
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

/// [`attend`]'s AVX-512 path: a task is `rows` consecutive rows of one KV head (the last task of
/// a KV head may have fewer), computed into its own buffer and copied into `out` after.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
fn attend_rows(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    layout: KvLayout,
    start: usize,
    shape: AttentionShape,
    out: &mut [f32],
    rows: usize,
) {
    let AttentionShape {
        heads,
        kv_heads,
        head_dim: hd,
        scale,
    } = shape;
    let (n, group) = (q.len() / (heads * hd), heads / kv_heads);
    let blocks = n.div_ceil(rows);
    let vector_exp = super::expf::matches_libm();
    let pieces: Vec<Vec<f32>> = (0..blocks * kv_heads)
        .into_par_iter()
        .map(|task| {
            let (block, kvh) = (task / kv_heads, task % kv_heads);
            let window = block * rows..(block * rows + rows).min(n);
            // The task's query vectors, row by row and head by head within a row.
            let mut queries = Vec::with_capacity(window.len() * group);
            let mut visible = Vec::with_capacity(window.len() * group);
            for i in window {
                for g in 0..group {
                    let at = (i * heads + kvh * group + g) * hd;
                    queries.push(q[at..at + hd].as_ptr());
                    visible.push(start + i + 1);
                }
            }
            let mut o = vec![0.0f32; queries.len() * hd];
            // SAFETY: AVX-512F and AVX2 are present and hd a multiple of 16 (`path.runs`,
            // asserted by `attend`); every query vector holds hd floats (sliced above); K and V
            // hold positions 0..start + n of this KV head at row_stride apart from its first
            // (asserted by `attend`), and no query sees past start + n.
            unsafe {
                avx512::attend_task(
                    &queries,
                    &visible,
                    k[layout.at(0, kvh)..].as_ptr(),
                    v[layout.at(0, kvh)..].as_ptr(),
                    layout.row_stride,
                    hd,
                    scale,
                    vector_exp,
                    &mut o,
                )
            };
            o
        })
        .collect();
    for (task, o) in pieces.iter().enumerate() {
        let (block, kvh) = (task / kv_heads, task % kv_heads);
        for (r, rows_o) in o.chunks_exact(group * hd).enumerate() {
            let at = ((block * rows + r) * heads + kvh * group) * hd;
            out[at..at + group * hd].copy_from_slice(rows_o);
        }
    }
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

    /// The shapes the path tests run: groups of 1 to 8 heads (pairs, singles, blocks of four
    /// query vectors and their rests), head dims of 64-dimension chunks and 16-48-dimension
    /// rests, windows of 1 and several rows, past the prefetch distance and over several of the
    /// AVX-512 path's key chunks.
    const PATH_SHAPES: [(usize, usize, usize, usize, usize); 9] = [
        (8, 2, 128, 70, 17),
        (4, 2, 64, 150, 9),
        (16, 8, 128, 40, 1),
        (2, 2, 16, 0, 3),
        (6, 2, 48, 13, 2),
        (4, 1, 64, 5, 4),
        (3, 1, 80, 20, 1),
        (16, 2, 256, 9, 7),
        (12, 4, 112, 3, 9),
    ];

    /// The bits of `out` and `want` are the same (`what` names the case).
    fn assert_same_bits(out: &[f32], want: &[f32], what: &str) {
        assert!(
            out.iter()
                .zip(want)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{what}"
        );
    }

    #[test]
    fn every_simd_path_gives_the_bits_of_the_portable_path() {
        let mut rng = Rng::fresh();
        let seed = rng.0;
        for path in [AttentionPath::Avx2, AttentionPath::Avx512] {
            if !path.runs(16) {
                eprintln!("skipped {path:?}: this CPU lacks it");
                continue;
            }
            for (heads, kv_heads, hd, start, n) in PATH_SHAPES {
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
                attend(&q, &k, &v, layout, start, shape, &mut fast, path);
                let portable = AttentionPath::Portable;
                attend(&q, &k, &v, layout, start, shape, &mut plain, portable);
                let what = format!("seed {seed} {path:?} {heads}/{kv_heads} hd {hd} {start}+{n}");
                assert_same_bits(&fast, &plain, &what);
            }
        }
    }

    #[test]
    fn avx512_tasks_of_any_rows_give_the_bits_of_the_portable_path() {
        if !AttentionPath::Avx512.runs(16) {
            eprintln!("skipped: this CPU lacks AVX-512F");
            return;
        }
        let mut rng = Rng::fresh();
        let seed = rng.0;
        for (heads, kv_heads, hd, start, n) in PATH_SHAPES {
            let shape = AttentionShape {
                heads,
                kv_heads,
                head_dim: hd,
                scale: 0.3,
            };
            let q = rng.vec(n * heads * hd);
            let capacity = start + n + 3;
            let layout = KvLayout::head_major(shape, capacity);
            let k = rng.vec(capacity * kv_heads * hd);
            let v = rng.vec(capacity * kv_heads * hd);
            let mut want = vec![0.0; q.len()];
            attend(
                &q,
                &k,
                &v,
                layout,
                start,
                shape,
                &mut want,
                AttentionPath::Portable,
            );
            for rows in 1..=n + 1 {
                let mut got = vec![0.0; q.len()];
                attend_rows(&q, &k, &v, layout, start, shape, &mut got, rows);
                let what =
                    format!("seed {seed} {heads}/{kv_heads} hd {hd} {start}+{n} rows {rows}");
                assert_same_bits(&got, &want, &what);
            }
        }
    }

    #[test]
    fn tasks_take_several_rows_only_where_the_threads_keep_enough_tasks() {
        // A prompt of 1024 rows over 8 KV heads on 2 threads: sixteen rows a task.
        assert_eq!(rows_per_task(1024, 8, 2), ROWS_PER_TASK);
        // One decode row: a task per KV head, as on the other paths.
        assert_eq!(rows_per_task(1, 8, 2), 1);
        // Four draft rows over 8 KV heads on 2 threads: 8 tasks of four rows are enough.
        assert_eq!(rows_per_task(4, 8, 2), 4);
        // The same on 64 threads, or over 2 KV heads: a row a task keeps the threads busy.
        assert_eq!(rows_per_task(4, 8, 64), 1);
        assert_eq!(rows_per_task(4, 2, 2), 1);
        // Never more rows than the window has, never fewer than one.
        assert_eq!(rows_per_task(3, 64, 1), 3);
        assert_eq!(rows_per_task(0, 8, 2), 1);
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
