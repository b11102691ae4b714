//! `y = x · Wᵀ` for bf16 weights on x86-64 with AVX2 and FMA (detected at run time): the kernel
//! behind [`super::matmul::matmul`] when the CPU has them; other CPUs keep the portable kernel.
//! Its bits differ from the portable kernel's (fused multiply-adds, 8 partial sums instead of
//! 16), so outputs are reproducible per kind of CPU, and on one machine never depend on the batch.
//!
//! Batch invariance: every output element `y[r, o]` is one dot product of `x[r]` and `W[o]` done
//! the same way whatever the batch: 8 lanes of f32 partial sums (one AVX2 register, element `j`
//! into lane `j % 8`), one fused multiply-add per element in increasing `j`, then a fixed
//! pairwise reduction ([`reduce`]). How rows and columns are grouped into tiles (which depends on
//! the batch) only decides which dot products share a pass over a weight row, never the
//! operations of one of them, so a row's result is bit-identical alone or in a batch. Threads
//! split the output columns, never `in`.
//!
//! Tiles: one register per dot product lets a tile of 4 rows × 3 weight rows keep its 12
//! accumulators, 3 widened weight vectors and one vector of `x` in the 16 AVX2 registers: 7 loads
//! per 12 FMAs, and 12 independent FMA chains to hide the FMA latency (the shape llama.cpp's
//! tinyBLAS uses on AVX2).
//!
//! Memory traffic: a rayon task owns a block of output columns; its weight rows are read from
//! memory once per call and reused from cache for every row of `x`, so decoding 8 streams reads
//! the weights about as often as decoding 1. With several rows, the first tile over a group of
//! weight rows prefetches the next group, so memory and arithmetic overlap; a decode window (at most
//! 4 rows) goes through each group of weight rows in one tile, streaming them ahead (into L1 8 KiB
//! ahead, or on Intel CPUs into L2 3 KiB ahead: [`weight_prefetch_for`]). bf16 widens exactly to
//! f32 (a 16-bit shift), in registers.
//!
//! On a CPU with AVX-512F, calls of more than 4 rows (on AMD CPUs, of 3 rows or more) use tiles of
//! up to 8 rows × 6 weight rows in the 32 AVX-512 registers (`avx512`): each register holds the
//! 8 partial sums of two dot products, so the bits are the AVX2 tiles' (a test compares them) and
//! only the speed changes.

use half::bf16;
use rayon::prelude::*;

/// Partial sums per dot product: one AVX2 register of f32.
pub(super) const LANES: usize = 8;
/// Weight rows per tile: 4 rows × 3 weight rows is 12 accumulators, the most that fit the 16
/// AVX2 registers with the 3 weight vectors and one of `x`.
const COL_GROUP: usize = 3;
/// Weight rows per tile for calls of 1 or 2 rows: 4 (or 8) FMA chains instead of 1, which kept a
/// single row latency-bound. Interleaved runs of a flashlane-tiny round's matmuls (2-core EPYC,
/// min of 7): 1 row 0.65-0.82 ms with groups of 4 to 6 against 0.9-1.1 one weight row at a time.
const FEW_ROWS_GROUP_NARROW: usize = 4;
/// Output columns per rayon task (a multiple of [`COL_GROUP`]): 48 weight rows of 1024 bf16 are
/// 96 KiB, which stay in the per-core L2 (≥ 512 KiB on the CPUs we target) while every row of
/// `x` passes over them, and a 1024-wide projection still makes 22 tasks to balance the threads.
const COL_BLOCK: usize = 48;
/// Rows of `x` that go through one column block before the next rows: 16 rows of 3072 f32 are
/// 192 KiB, so the rows and the block's weights fit L2 together during a long prefill.
const ROW_SUPER: usize = 16;
/// Rows of `x` in the largest tile.
const MAX_TILE_ROWS: usize = 4;
/// Weights a call of at most [`MAX_TILE_ROWS`] rows (a decode window) prefetches ahead of those
/// it reads into L1 (8 KiB), where [`weight_prefetch_for`] says L1. Measured for a single row on
/// the 2-core AMD EPYC (quiet, 1-stream decode, alternating runs): no prefetch 10.4-10.7 tok/s,
/// 8 KiB ahead 10.6-12.9 (mean 11.75); 2, 4, 16 or 32 KiB ahead were no better than 8.
pub(super) const FEW_ROWS_AHEAD_L1: usize = 4096;
/// The same into L2 (3 KiB), where [`weight_prefetch_for`] says L2. Measured on a 2-core Intel
/// Xeon with AMX (Sapphire Rapids class; small hybrid, `flashlane bench --streams 1
/// --prompt-tokens 1 --new-tokens 128`, an experiment build taking the distance from the
/// environment, two to four runs each, tok/s): 1 KiB 43.0-43.9, 2 KiB 48.6-49.6, 3 KiB
/// 50.5-50.9, 4 KiB 46.9-48.1, 8 KiB 43.6-43.9, 16 KiB 43.3-43.9, 32 KiB 42.7-43.2.
const FEW_ROWS_AHEAD_L2: usize = 1536;
/// bf16 weights per cache line (64 bytes): one software prefetch each.
pub(super) const PREFETCH_STEP: usize = 32;

/// The cache a software prefetch of weights fills.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefetchInto {
    /// All levels (`prefetcht0`).
    L1,
    /// L2 and beyond, not L1 (`prefetcht1`).
    L2,
}

/// How the kernel streams weights from memory: where its software prefetches go and how far a
/// decode window's tile prefetches ahead (in weight elements). The bits never depend on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WeightPrefetch {
    /// Where the AVX2 tiles' prefetches go (calls of 1-2 rows; on Intel CPUs of up to 4).
    pub into: PrefetchInto,
    pub few_rows_ahead: usize,
    /// Where the AVX-512 tiles' prefetches go (the first tile of a call's column block, two
    /// groups of weight rows ahead): L2 on every vendor. On the 2-core AMD EPYC (session 39,
    /// interleaved weights from memory, median of 7-9 alternating runs, L1 → L2, ms): 3 rows
    /// 13.7 → 10.9 and 23.0 → 18.5, 4 rows 14.6 → 11.9 and 24.4 → 19.4, 8 rows 16.2 → 15.5 and
    /// 35.9 → 32.2 (151,936 × 1,024 and 131,072 × 2,048); 32 rows, and matrices of 8-48 MiB,
    /// the same within 1-2 % or better. A 3-4-row tile is the one that streams its weights while
    /// it multiplies, and L2's queue keeps more lines coming than L1's fill buffers.
    pub wide_into: PrefetchInto,
}

/// Who made the CPU (`cpuid` leaf 0), which decides [`weight_prefetch_for`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuVendor {
    Intel,
    Amd,
    Other,
}

/// The weight streaming that measured fastest on each vendor's CPU. On the 2-core Intel Xeon
/// with AMX (the small hybrid, `flashlane bench`, two to four runs each, tok/s): one stream's
/// decode 31.4-32.8 with L1 prefetches 8 KiB ahead (the AMD choice), 41.0-42.4 with none,
/// 43.6-43.9 into L2 8 KiB ahead, 50.5-50.9 into L2 3 KiB ahead ([`FEW_ROWS_AHEAD_L2`]);
/// 8 streams 108-113 into L1, 119-124 into L2; prefill the same. (The weights stored as they
/// are, not interleaved, gave 31.9-33.4 with or without L1 prefetches: the interleaved layout
/// stays.) An L1 prefetch holds a line-fill buffer until the line arrives, and an Intel core has
/// few of them; L2's queue is deeper. On a 2-core AMD EPYC (Zen 4, AVX-512 BF16), L1
/// prefetches 8 KiB ahead were measured against none (see [`FEW_ROWS_AHEAD_L1`]), and in session
/// 34 against L2 3 KiB ahead (`FLASHLANE_CPU_PREFETCH`, dummy weights, two alternating rounds,
/// 1 / 8 streams' decode tok/s): the small hybrid 56.9, 55.0 / 165.5, 167.3 into L1 against
/// 47.8, 49.3 / 161.3, 167.6 into L2; the A3B slice 14.6, 15.4 / 35.7, 34.8 against 13.8, 13.5
/// / 34.6, 33.7. So AMD (and other) CPUs keep L1.
pub fn weight_prefetch_for(vendor: CpuVendor) -> WeightPrefetch {
    match vendor {
        CpuVendor::Intel => WeightPrefetch {
            into: PrefetchInto::L2,
            few_rows_ahead: FEW_ROWS_AHEAD_L2,
            wide_into: PrefetchInto::L2,
        },
        CpuVendor::Amd | CpuVendor::Other => WeightPrefetch {
            into: PrefetchInto::L1,
            few_rows_ahead: FEW_ROWS_AHEAD_L1,
            wide_into: PrefetchInto::L2,
        },
    }
}

/// Set to `l1` or `l2` to choose where the kernel's weight prefetches go (with that level's
/// distance) instead of [`weight_prefetch_for`] this CPU's vendor (to compare; read once per
/// process; any other value leaves the vendor's choice, as the bits are the same either way).
pub const PREFETCH_ENV: &str = "FLASHLANE_CPU_PREFETCH";

/// This CPU's vendor from `cpuid` leaf 0.
fn cpu_vendor() -> CpuVendor {
    #[cfg(target_arch = "x86_64")]
    {
        // `__cpuid` is a safe function in recent Rust and `unsafe` in older releases: the block
        // keeps those building.
        #[allow(unused_unsafe)]
        // SAFETY: leaf 0 exists on every x86-64 CPU (the vendor's 12 bytes in ebx, edx, ecx).
        let id = unsafe { std::arch::x86_64::__cpuid(0) };
        let name: Vec<u8> = [id.ebx, id.edx, id.ecx]
            .iter()
            .flat_map(|r| r.to_le_bytes())
            .collect();
        match &name[..] {
            b"GenuineIntel" => CpuVendor::Intel,
            b"AuthenticAMD" => CpuVendor::Amd,
            _ => CpuVendor::Other,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        CpuVendor::Other
    }
}

/// The weight streaming of this process: [`PREFETCH_ENV`] where set to `l1` (every prefetch into
/// L1, the AMD plan before session 39) or `l2` (the Intel plan), otherwise [`weight_prefetch_for`]
/// this CPU's vendor. Fixed for the life of the process.
pub fn weight_prefetch() -> WeightPrefetch {
    static PLAN: std::sync::OnceLock<WeightPrefetch> = std::sync::OnceLock::new();
    *PLAN.get_or_init(|| match std::env::var(PREFETCH_ENV).as_deref() {
        Ok("l1") => WeightPrefetch {
            wide_into: PrefetchInto::L1,
            ..weight_prefetch_for(CpuVendor::Amd)
        },
        Ok("l2") => weight_prefetch_for(CpuVendor::Intel),
        _ => weight_prefetch_for(cpu_vendor()),
    })
}

/// A tile's software prefetch: `elements` weights past those it reads (none when 0), into
/// `into`.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, Debug)]
pub(super) struct Ahead {
    pub(super) elements: usize,
    pub(super) into: PrefetchInto,
}

#[cfg(target_arch = "x86_64")]
impl Ahead {
    /// No prefetch: the tile finds its weights in cache.
    pub(super) const NONE: Ahead = Ahead {
        elements: 0,
        into: PrefetchInto::L1,
    };
}

/// Software prefetches of the `lines` cache lines of weights from the one holding `from` on, into
/// `into` (hints: they never fault, so the lines may lie past the weights).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn prefetch_lines(from: *const bf16, lines: usize, into: PrefetchInto) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
    for l in 0..lines {
        let p = from.wrapping_add(l * PREFETCH_STEP) as *const i8;
        // SAFETY: SSE (x86-64's baseline) has the prefetch instructions, and a prefetch of any
        // address is allowed (it does not fault).
        unsafe {
            match into {
                PrefetchInto::L1 => _mm_prefetch::<_MM_HINT_T0>(p),
                PrefetchInto::L2 => _mm_prefetch::<_MM_HINT_T1>(p),
            }
        }
    }
}

/// Whether this CPU runs the fast kernel (AVX2 and FMA).
pub fn supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Set to `portable` to keep the portable kernel on a CPU that has AVX2 and FMA, or to `avx2` to
/// keep the AVX2 tiles on a CPU that also has AVX-512 (to compare them; read once per process).
pub const KERNELS_ENV: &str = "FLASHLANE_CPU_KERNELS";

fn kernels_env() -> Option<String> {
    std::env::var(KERNELS_ENV).ok()
}

/// Whether [`super::matmul::matmul`] uses this kernel for bf16 weights: [`supported`] and not
/// turned off through [`KERNELS_ENV`]. Fixed for the life of the process, so every row of every
/// batch goes through the same kernel.
pub fn enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED.get_or_init(|| supported() && kernels_env().is_none_or(|v| v != "portable"))
}

/// Rows from which a call takes the AVX-512 tiles on an AMD CPU. On the 2-core EPYC (Zen 4,
/// session 34) windows of 3–4 rows streamed weights from memory faster in them than in the AVX2
/// tiles (whose 3 weight rows a tile straddle the interleaved groups of 4: our reading of why,
/// not measured by itself), and 2 rows slower
/// (`few_rows_tile_kinds_speed`, 512 MiB, four runs, median GB/s AVX2 → AVX-512: 2 rows
/// 28.9–29.8 → 24.7–25.8, 3 rows 18.9–19.2 → 23.8–24.4, 4 rows 17.5–18.0 → 23.0–24.4). Whole
/// models (`flashlane bench --device cpu`, real bf16 checkpoints, alternating runs, decode
/// tok/s): the A3B slice at 4 streams, five rounds, 21.0, 23.5, 22.9, 22.1, 24.2 → 24.6, 24.4,
/// 26.7, 26.4, 26.0 (median +13.5 %), at 8 streams median 34.5 → 34.1; the small hybrid at 4
/// streams +15–20 % in two rounds and −1–3 % in two later ones (the rounds drift);
/// one stream unchanged (1-row calls keep the AVX2 tiles).
const WIDE_TILES_MIN_ROWS_AMD: usize = 3;
/// Rows from which a call takes the AVX-512 tiles on other CPUs: more than the AVX2 tiles hold,
/// where the packing of `x` paid on the EPYC's matmul timings (see [`tiles_for`]). Intel's
/// decode windows stream into L2 ([`weight_prefetch_for`]); whether the AVX-512 tiles pay for
/// them there is not measured.
const WIDE_TILES_MIN_ROWS: usize = MAX_TILE_ROWS + 1;

/// Set to a number of rows to move where the AVX-512 tiles start (to compare; read once per
/// process; the bits are the same either way).
pub const WIDE_TILES_FROM_ENV: &str = "FLASHLANE_CPU_WIDE_TILES_FROM";

/// The rows from which a call takes the AVX-512 tiles on a CPU of `vendor` that has AVX-512F.
fn wide_tiles_from_for(vendor: CpuVendor) -> usize {
    match vendor {
        CpuVendor::Amd => WIDE_TILES_MIN_ROWS_AMD,
        CpuVendor::Intel | CpuVendor::Other => WIDE_TILES_MIN_ROWS,
    }
}

/// The rows from which calls go through the AVX-512 tiles ([`avx512`]) in this process, `None`
/// when never: the CPU lacks AVX-512F or [`KERNELS_ENV`] says `avx2`; otherwise
/// [`WIDE_TILES_FROM_ENV`] where set, else [`wide_tiles_from_for`] this CPU's vendor. Either way
/// the bits are the same; only the speed differs.
fn wide_tiles_from() -> Option<usize> {
    static FROM: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *FROM.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        let avx512 = std::arch::is_x86_feature_detected!("avx512f");
        #[cfg(not(target_arch = "x86_64"))]
        let avx512 = false;
        let wanted = avx512 && kernels_env().is_none_or(|v| v != "avx2");
        wanted.then(|| {
            std::env::var(WIDE_TILES_FROM_ENV)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| wide_tiles_from_for(cpu_vendor()))
        })
    })
}

/// Which tiles compute a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tiles {
    /// Up to 4 rows × 3 weight rows in the 16 AVX2 registers.
    Avx2,
    /// Up to 8 rows × 6 weight rows in the 32 AVX-512 registers, the same bits.
    Avx512,
}

/// The tiles for a call of `rows` rows: the AVX-512 ones from `wide_from` rows (`None`: never).
/// Measured on the 2-core EPYC with AVX-512 (`matmul_speed`, three interleaved runs, the weights
/// as stored, before they were interleaved): at 8 rows the 151,936 × 1,024 lm_head took
/// 18.0-18.4 ms against 25.7-26.0, and a cached 1,024 → 3,072 projection 0.27-0.34 ms against
/// 0.32-0.34; at 4 rows and at 1 they were no faster. Over interleaved weights, whole models'
/// 3–4-row windows gained on that EPYC ([`WIDE_TILES_MIN_ROWS_AMD`]).
fn tiles_for(rows: usize, wide_from: Option<usize>) -> Tiles {
    match wide_from {
        Some(from) if rows >= from => Tiles::Avx512,
        _ => Tiles::Avx2,
    }
}

/// The fixed reduction of the 8 partial sums: lanes 4 apart, then 2 apart, then the last pair.
#[inline(always)]
fn reduce(acc: &[f32; LANES]) -> f32 {
    let q = [
        acc[0] + acc[4],
        acc[1] + acc[5],
        acc[2] + acc[6],
        acc[3] + acc[7],
    ];
    (q[0] + q[2]) + (q[1] + q[3])
}

/// `y[rows, out] = x[rows, k] · W[out, k]ᵀ` with bf16 `w`. Panics when [`supported`] is false.
pub fn matmul_bf16(x: &[f32], w: &[bf16], k: usize, y: &mut [f32]) {
    let tiles = tiles_for(x.len() / k.max(1), wide_tiles_from());
    matmul_bf16_in::<1>(x, w, k, y, tiles, weight_prefetch());
}

/// Weight rows per group of the interleaved layout ([`interleave_rows`]).
pub const INTERLEAVE_ROWS: usize = 4;
/// Elements of a row in one piece of the interleaved layout (16 bytes).
pub const INTERLEAVE_PIECE: usize = LANES;

/// Whether a `[out, k]` matrix can be stored interleaved: whole pieces of [`LANES`] elements (no
/// tail) and whole groups of [`INTERLEAVE_ROWS`] rows.
pub fn interleavable(k: usize, out: usize) -> bool {
    k > 0 && k.is_multiple_of(LANES) && out.is_multiple_of(INTERLEAVE_ROWS)
}

/// `w` (`[out, k]`, row-major) with each group of [`INTERLEAVE_ROWS`] rows interleaved in pieces of
/// [`LANES`] elements (16 bytes): piece `p` of the group's rows one after the other, then piece
/// `p + 1`. A tile over a group's rows then reads one sequential stream instead of four streams
/// `k` apart: a one-row call reads its weights 25-49 % faster on the 2-core EPYC
/// (`one_row_interleaved_weights_speed`, bench/RESULTS.md session 26). The products and their
/// order are the stored layout's, so are the bits. Panics unless [`interleavable`].
pub fn interleave_rows(w: &[bf16], k: usize) -> Vec<bf16> {
    assert_interleavable("interleave_rows", w, k);
    interleave_groups(w, k, INTERLEAVE_ROWS, LANES)
}

/// `w` (`[out, k]`, row-major, whole groups of `group` rows and pieces of `piece`) with each
/// group's rows interleaved by pieces: piece `p` of each of the group's rows, then piece `p + 1`
/// (this kernel's groups, and AMX's panels of 16 rows in chunks of 32).
pub(super) fn interleave_groups<T: Copy>(w: &[T], k: usize, group: usize, piece: usize) -> Vec<T> {
    debug_assert!(k.is_multiple_of(piece) && w.len().is_multiple_of(group * k));
    let mut out = Vec::with_capacity(w.len());
    for rows in w.chunks_exact(group * k) {
        for p in 0..k / piece {
            for c in 0..group {
                let at = c * k + p * piece;
                out.extend_from_slice(&rows[at..at + piece]);
            }
        }
    }
    out
}

/// [`matmul_bf16`] over weights stored by [`interleave_rows`]: the same bits as over the stored
/// weights. Panics when [`supported`] is false or the shape is not [`interleavable`].
pub fn matmul_bf16_interleaved(x: &[f32], w: &[bf16], k: usize, y: &mut [f32]) {
    assert_interleavable("matmul_bf16_interleaved", w, k);
    let tiles = tiles_for(x.len() / k, wide_tiles_from());
    matmul_bf16_in::<INTERLEAVE_ROWS>(x, w, k, y, tiles, weight_prefetch());
}

/// Panics (naming `what`) unless `w` is whole rows of `k` of an [`interleavable`] shape.
fn assert_interleavable(what: &str, w: &[bf16], k: usize) {
    assert!(
        k > 0 && w.len().is_multiple_of(k) && interleavable(k, w.len() / k),
        "{what}: [{}, {k}] is not whole groups of {INTERLEAVE_ROWS} rows × pieces of {LANES}",
        w.len() / k.max(1)
    );
}

/// Where weight row `c` of a column block starts, and (with `S`, the distance between a row's
/// pieces in pieces) where its piece at element `j` (a multiple of [`LANES`]) is: `row + S * j`.
/// `S` 1: rows as stored; [`INTERLEAVE_ROWS`]: interleaved by [`interleave_rows`].
#[inline(always)]
fn row_start<const S: usize>(w: *const bf16, c: usize, k: usize) -> *const bf16 {
    if S == 1 {
        w.wrapping_add(c * k)
    } else {
        w.wrapping_add((c / S) * S * k + (c % S) * LANES)
    }
}

/// [`matmul_bf16`] in the given tiles (the AVX-512 ones only where the CPU has AVX-512F), over
/// weights whose rows' pieces lie `S` pieces apart ([`row_start`]), streamed as `prefetch` says.
fn matmul_bf16_in<const S: usize>(
    x: &[f32],
    w: &[bf16],
    k: usize,
    y: &mut [f32],
    tiles: Tiles,
    prefetch: WeightPrefetch,
) {
    assert!(supported(), "matmul_bf16: this CPU lacks AVX2 or FMA");
    let (rows, out) = super::matmul::matmul_shape(x, w.len(), k, y.len());
    if rows == 0 {
        return;
    }
    let y = Output(y.as_mut_ptr());
    #[cfg(target_arch = "x86_64")]
    let packed = (tiles == Tiles::Avx512).then(|| avx512::pack(x, k, rows));
    #[cfg(not(target_arch = "x86_64"))]
    let _ = tiles;
    (0..out.div_ceil(COL_BLOCK)).into_par_iter().for_each(|b| {
        let start = b * COL_BLOCK;
        let cols = COL_BLOCK.min(out - start);
        let wb = &w[start * k..(start + cols) * k];
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `supported()` (asserted above) checked AVX2 and FMA on this CPU, and
        // `Tiles::Avx512` is chosen only where it has AVX-512F; `y` holds `rows × out` floats and
        // this task writes only its columns `start..start + cols` of them.
        unsafe {
            if let Some(packed) = &packed {
                avx512::block::<S>(x, packed, k, wb, cols, y.at(start), out, prefetch.wide_into)
            } else {
                avx2::block::<S>(x, k, rows, wb, cols, y.at(start), out, prefetch)
            }
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (wb, &y, prefetch);
    });
}

/// `y` shared by the tasks, each writing only its own columns (disjoint elements).
pub(super) struct Output(pub(super) *mut f32);
// SAFETY: the tasks write disjoint elements, and the matmul holds `&mut y` until they end.
unsafe impl Send for Output {}
unsafe impl Sync for Output {}

impl Output {
    /// Column `c` of row 0 (a method, so closures capture the whole `Output`, which is `Sync`).
    pub(super) fn at(&self, c: usize) -> *mut f32 {
        self.0.wrapping_add(c)
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{
        prefetch_lines, reduce, row_start, Ahead, WeightPrefetch, COL_GROUP, FEW_ROWS_GROUP_NARROW,
        LANES, MAX_TILE_ROWS, PREFETCH_STEP, ROW_SUPER,
    };
    use half::bf16;
    use std::arch::x86_64::*;

    /// 8 bf16 at `p` widened to f32 (exact).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn widen8(p: *const bf16) -> __m256 {
        let h = _mm_loadu_si128(p as *const __m128i);
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
    }

    /// Dot products of the `R` rows at `xs` with the `C` weight rows at `ws` (each `k` long,
    /// one after the other in memory, or interleaved with `S` > 1: [`row_start`]): `out[r][c]`.
    /// Each (r, c) has its own register of 8 lanes; the tile shape and the layout never change
    /// its bits. With `ahead.elements > 0`, also prefetches, into `ahead.into`, the weights that
    /// far past those the tile reads: as stored, its `C` rows are one stream of `C` lines a step
    /// ([`PREFETCH_STEP`] elements of each row); interleaved, each group of `S` rows it reads is
    /// one stream of `S` lines a step.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn tile<const R: usize, const C: usize, const S: usize>(
        xs: [*const f32; R],
        ws: [*const bf16; C],
        k: usize,
        ahead: Ahead,
    ) -> [[f32; C]; R] {
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        let n = k / LANES * LANES;
        debug_assert!(S == 1 || n == k, "an interleaved matrix has no tail");
        // Interleaved, the tile's rows lie in one group of S rows or, where the tile crosses a
        // group's end, in two: each group is its own stream (a row's piece sits in the line that
        // holds its group's piece, so the lines from any of its rows are the group's).
        let second_group = S > 1 && (ws[C - 1] as usize - ws[0] as usize) >= S * LANES * 2;
        let mut j = 0;
        while j < n {
            if ahead.elements > 0 && j % PREFETCH_STEP == 0 {
                if S == 1 {
                    prefetch_lines(ws[0].wrapping_add(ahead.elements + C * j), C, ahead.into);
                } else {
                    let at = ahead.elements + S * j;
                    prefetch_lines(ws[0].wrapping_add(at), S, ahead.into);
                    if second_group {
                        prefetch_lines(ws[C - 1].wrapping_add(at), S, ahead.into);
                    }
                }
            }
            let wv: [__m256; C] = std::array::from_fn(|c| widen8(ws[c].add(S * j)));
            for (x, a) in xs.iter().zip(acc.iter_mut()) {
                let xv = _mm256_loadu_ps(x.add(j));
                for (w, a) in wv.iter().zip(a.iter_mut()) {
                    *a = _mm256_fmadd_ps(xv, *w, *a);
                }
            }
            j += LANES;
        }
        let mut out = [[0.0f32; C]; R];
        for r in 0..R {
            for c in 0..C {
                let mut lanes = [0.0f32; LANES];
                _mm256_storeu_ps(lanes.as_mut_ptr(), acc[r][c]);
                for i in n..k {
                    let w = f32::from_bits((ws[c].add(i).read().to_bits() as u32) << 16);
                    lanes[i - n] = xs[r].add(i).read().mul_add(w, lanes[i - n]);
                }
                out[r][c] = reduce(&lanes);
            }
        }
        out
    }

    /// Rows `r0..r0+R` against the weight rows `c0..c0+C` of the block, into `y[r * ld + c]`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn put<const R: usize, const C: usize, const S: usize>(
        x: &[f32],
        k: usize,
        r0: usize,
        w: &[bf16],
        c0: usize,
        y: *mut f32,
        ld: usize,
        ahead: Ahead,
    ) {
        let xs: [*const f32; R] = std::array::from_fn(|r| x.as_ptr().add((r0 + r) * k));
        let ws: [*const bf16; C] = std::array::from_fn(|c| row_start::<S>(w.as_ptr(), c0 + c, k));
        let t = tile::<R, C, S>(xs, ws, k, ahead);
        for (r, row) in t.iter().enumerate() {
            for (c, v) in row.iter().enumerate() {
                *y.add((r0 + r) * ld + c0 + c) = *v;
            }
        }
    }

    /// Rows `r0..r0+nr` (nr ≤ [`MAX_TILE_ROWS`]) against the weight rows `c0..c0+nc`
    /// (nc ≤ [`COL_GROUP`]) as one tile.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn rows_by_cols<const S: usize>(
        x: &[f32],
        k: usize,
        r0: usize,
        nr: usize,
        w: &[bf16],
        c0: usize,
        nc: usize,
        y: *mut f32,
        ld: usize,
        ahead: Ahead,
    ) {
        match (nr, nc) {
            (4, 3) => put::<4, 3, S>(x, k, r0, w, c0, y, ld, ahead),
            (4, 2) => put::<4, 2, S>(x, k, r0, w, c0, y, ld, ahead),
            (4, _) => put::<4, 1, S>(x, k, r0, w, c0, y, ld, ahead),
            (3, 3) => put::<3, 3, S>(x, k, r0, w, c0, y, ld, ahead),
            (3, 2) => put::<3, 2, S>(x, k, r0, w, c0, y, ld, ahead),
            (3, _) => put::<3, 1, S>(x, k, r0, w, c0, y, ld, ahead),
            (2, 3) => put::<2, 3, S>(x, k, r0, w, c0, y, ld, ahead),
            (2, 2) => put::<2, 2, S>(x, k, r0, w, c0, y, ld, ahead),
            (2, _) => put::<2, 1, S>(x, k, r0, w, c0, y, ld, ahead),
            (_, 3) => put::<1, 3, S>(x, k, r0, w, c0, y, ld, ahead),
            (_, 2) => put::<1, 2, S>(x, k, r0, w, c0, y, ld, ahead),
            _ => put::<1, 1, S>(x, k, r0, w, c0, y, ld, ahead),
        }
    }

    /// Weight rows per tile for a call of `rows` ≤ [`MAX_TILE_ROWS`] rows: enough independent
    /// FMA chains to hide the FMA latency, within the 16 registers with the widened weights and
    /// the vectors of `x`.
    pub(super) fn few_rows_group(rows: usize) -> usize {
        match rows {
            1 | 2 => FEW_ROWS_GROUP_NARROW,
            _ => COL_GROUP,
        }
    }

    /// All `rows` rows against the weight rows `c0..c0+nc` (nc ≤ [`few_rows_group`]) as one
    /// tile, prefetching `prefetch.few_rows_ahead` weights ahead.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn few_rows_by_cols<const S: usize>(
        x: &[f32],
        k: usize,
        rows: usize,
        w: &[bf16],
        c0: usize,
        nc: usize,
        y: *mut f32,
        ld: usize,
        prefetch: WeightPrefetch,
    ) {
        let a = Ahead {
            elements: prefetch.few_rows_ahead,
            into: prefetch.into,
        };
        match (rows, nc) {
            (1, 4) => put::<1, 4, S>(x, k, 0, w, c0, y, ld, a),
            (2, 4) => put::<2, 4, S>(x, k, 0, w, c0, y, ld, a),
            _ => rows_by_cols::<S>(x, k, 0, rows, w, c0, nc, y, ld, a),
        }
    }

    /// Rows in the next tile when `left` rows of a super-block remain: tiles of 4, and 5 to 7
    /// rows in two tiles of 2 to 4 rather than one of 4 and a narrow rest.
    fn tile_rows(left: usize) -> usize {
        match left {
            0..=MAX_TILE_ROWS => left,
            5..=7 => left.div_ceil(2),
            _ => MAX_TILE_ROWS,
        }
    }

    /// One column block: `y[r * ld + c]` for the block's `cols` weight rows `w` (`c < cols`) and
    /// every row `r` of `x`.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; `y` must be valid for writes at every `r * ld + c`, and no
    /// one else may access those elements during the call.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn block<const S: usize>(
        x: &[f32],
        k: usize,
        rows: usize,
        w: &[bf16],
        cols: usize,
        y: *mut f32,
        ld: usize,
        prefetch: WeightPrefetch,
    ) {
        debug_assert!(x.len() == rows * k && w.len() == cols * k && cols <= ld);
        let mut s0 = 0;
        while s0 < rows {
            let s1 = (s0 + ROW_SUPER).min(rows);
            let mut c0 = 0;
            while c0 < cols {
                if rows <= MAX_TILE_ROWS {
                    // A decode window: one tile of every row per group, its weights streamed.
                    let nc = few_rows_group(rows).min(cols - c0);
                    few_rows_by_cols::<S>(x, k, rows, w, c0, nc, y, ld, prefetch);
                    c0 += nc;
                    continue;
                }
                let nc = COL_GROUP.min(cols - c0);
                // The first row tile also prefetches the next group's weight rows, so they
                // come from memory while this group computes from cache.
                let mut ahead = Ahead {
                    elements: COL_GROUP * k,
                    into: prefetch.into,
                };
                let mut r0 = s0;
                while r0 < s1 {
                    let nr = tile_rows(s1 - r0);
                    rows_by_cols::<S>(x, k, r0, nr, w, c0, nc, y, ld, ahead);
                    ahead = Ahead::NONE;
                    r0 += nr;
                }
                c0 += nc;
            }
            s0 = s1;
        }
    }
}

/// The same dot products as [`avx2`], computed with AVX-512 registers where the CPU has them:
/// each 512-bit accumulator holds the 8 partial sums of **two** dot products (one weight row in
/// its low half, the next in its high half, `x` broadcast to both halves), so every partial sum
/// takes the same fused multiply-adds in the same order as in [`avx2::tile`], and the tail and
/// the reduction are the same code. The bits are the AVX2 kernel's on every CPU; what changes is
/// the tile: 32 registers hold 8 rows × 6 weight rows (24 accumulators), so a weight row is
/// widened once for 8 rows instead of twice for two tiles of 4; and in a call of four tiles or
/// more, the first tile keeps what it widens (`Widened`), which the others read instead of
/// widening the same weights again.
///
/// The rows of `x` are first packed tile by tile, 8 floats of each row of a tile in turn
/// ([`Packed`]): a tile then reads `x` through one pointer, which leaves the general registers
/// for the 6 weight rows (16 of them cannot hold 8 row pointers, 6 weight pointers and the loop).
#[cfg(target_arch = "x86_64")]
pub(super) mod avx512 {
    use super::{
        prefetch_lines, reduce, row_start, Ahead, PrefetchInto, LANES, PREFETCH_STEP, ROW_SUPER,
    };
    use half::bf16;
    use std::arch::x86_64::*;

    /// Weight-row pairs per tile: 8 rows × 3 pairs is 24 accumulators, with 3 widened pairs
    /// and one broadcast of `x` 28 of the 32 registers.
    const PAIRS: usize = 3;
    /// Rows of `x` in the largest tile.
    const MAX_TILE_ROWS: usize = 8;
    /// Groups of weight rows the first tile of a block prefetches ahead of those it reads: the
    /// 8-row lm_head above took 20.3-23.1 ms without prefetching, 18.4-19.2 one group ahead
    /// and 18.0-18.4 two groups ahead.
    const AHEAD_GROUPS: usize = 2;
    /// Rows from which a block's first tile keeps the weights it widens to f32 for the block's
    /// other tiles, instead of each tile widening the same column block again (3 × 5
    /// instructions beside a step's 24 multiply-adds): four tiles. Measured on the 2-core AMD
    /// EPYC (session 36, prefill tok/s, interleaved runs; this VM's noise is ±10 % a run): the
    /// small hybrid's 512-token prompt +13-17 % and four 128-token prompts +4-10 %; from 9 rows
    /// (two tiles) the A3B slice's 128-token prompt lost 5-8 % in every paired run (its experts'
    /// calls of ~10 rows stored and reread 384 KiB to spare one 2-row tile its widening), from
    /// 32 rows it is within noise, as is the small hybrid's 128-token prompt either way. The
    /// bits are the same (the same widened values).
    const WIDEN_ONCE_MIN_ROWS: usize = 32;
    /// Most bytes of a block's widened weights (48 rows × k f32: k ≤ 4,096): chosen, not
    /// measured, to leave room in a 1 MiB per-core L2 (this EPYC's) for the tiles' rows of x.
    const WIDEN_ONCE_MAX_BYTES: usize = 768 << 10;

    thread_local! {
        /// A thread's widened column block (reused from call to call: no allocation a block).
        static WIDENED: std::cell::RefCell<Vec<__m512>> = const { std::cell::RefCell::new(Vec::new()) };
    }

    /// The rows of `x` in tiles: tile `t` covers rows `tiles[t].0 .. +tiles[t].1`, and its
    /// packed data (`k / 8` steps of `rows × 8` floats) starts at `offsets[t]`.
    pub(super) struct Packed {
        data: Vec<f32>,
        tiles: Vec<(usize, usize)>,
        offsets: Vec<usize>,
    }

    /// Rows in the next tile when `left` rows of a super-block remain: up to 8, and 9 to 15 in
    /// two tiles of equal height rather than a full one and a narrow rest.
    pub(in super::super) fn tile_rows(left: usize) -> usize {
        match left {
            0..=MAX_TILE_ROWS => left,
            9..=15 => left.div_ceil(2),
            _ => MAX_TILE_ROWS,
        }
    }

    /// Packs `rows` rows of `k` floats into tiles (super-blocks of [`ROW_SUPER`] rows, as the
    /// AVX2 kernel walks them).
    pub(super) fn pack(x: &[f32], k: usize, rows: usize) -> Packed {
        let steps = k / LANES;
        let mut packed = Packed {
            data: Vec::with_capacity(steps * LANES * rows),
            tiles: Vec::new(),
            offsets: Vec::new(),
        };
        let mut s0 = 0;
        while s0 < rows {
            let s1 = (s0 + ROW_SUPER).min(rows);
            let mut r0 = s0;
            while r0 < s1 {
                let nr = tile_rows(s1 - r0);
                packed.tiles.push((r0, nr));
                packed.offsets.push(packed.data.len());
                for j in 0..steps {
                    for r in r0..r0 + nr {
                        let at = r * k + j * LANES;
                        packed.data.extend_from_slice(&x[at..at + LANES]);
                    }
                }
                r0 += nr;
            }
            s0 = s1;
        }
        packed
    }

    /// 8 bf16 at `a` and 8 at `b` widened to f32, `a`'s in the low half (exact).
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn widen_pair(a: *const bf16, b: *const bf16) -> __m512 {
        let lo = _mm_loadu_si128(a as *const __m128i);
        let hi = _mm_loadu_si128(b as *const __m128i);
        let both = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(lo), hi);
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(both)))
    }

    /// The `R` packed rows at `xp` (their unpacked rows at `xs`, for the tail) against the `2P`
    /// weight rows at `ws`, into `y[r * ld + c]` for the first `nc` weight rows: the same bits
    /// as `avx2::tile`.
    ///
    /// `widened`: where the pairs' weights widened to f32 come from (`Widened::No`: widened here
    /// from `ws`), step by step (pair p's steps, then pair p + 1's): with `Widened::Fill` the
    /// tile widens `ws` as it goes and stores them there,
    /// with `Widened::Read` it reads them from there instead of `ws` (the same values, so the same
    /// bits).
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile<const R: usize, const S: usize>(
        xp: *const f32,
        xs: *const f32,
        k: usize,
        ws: [[*const bf16; 2]; PAIRS],
        widened: Widened,
        nc: usize,
        y: *mut f32,
        ld: usize,
        ahead: Ahead,
    ) {
        let mut acc = [[_mm512_setzero_ps(); PAIRS]; R];
        let n = k / LANES * LANES;
        debug_assert!(S == 1 || n == k, "an interleaved matrix has no tail");
        let mut j = 0;
        let mut x = xp;
        while j < n {
            if ahead.elements > 0 && j % PREFETCH_STEP == 0 {
                // 2P lines a step of `j`, from the first row's stream on: as stored, the tile's
                // 2P contiguous rows; interleaved, the next 2P lines of memory from its first
                // group's stream, which advances S lines a step (this tile warms the tiles of
                // weight rows ahead, whose groups follow one another in memory).
                let at = ahead.elements + if S == 1 { 2 * PAIRS } else { S } * j;
                prefetch_lines(ws[0][0].wrapping_add(at), 2 * PAIRS, ahead.into);
            }
            let at = |p: usize| p * (n / LANES) + j / LANES;
            let widen = |p: usize| widen_pair(ws[p][0].add(S * j), ws[p][1].add(S * j));
            let wv: [__m512; PAIRS] = match widened {
                Widened::No => std::array::from_fn(widen),
                Widened::Fill(to) => std::array::from_fn(|p| {
                    let v = widen(p);
                    *to.add(at(p)) = v;
                    v
                }),
                Widened::Read(from) => std::array::from_fn(|p| *from.add(at(p))),
            };
            for (r, a) in acc.iter_mut().enumerate() {
                // 8 floats of row r in both halves (a 256-bit broadcast; the f64 form is
                // AVX-512F's).
                let xv = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd(
                    x.add(r * LANES) as *const f64,
                )));
                for (w, a) in wv.iter().zip(a.iter_mut()) {
                    *a = _mm512_fmadd_ps(xv, *w, *a);
                }
            }
            x = x.add(R * LANES);
            j += LANES;
        }
        for (r, pairs) in acc.iter().enumerate() {
            for (p, a) in pairs.iter().enumerate() {
                let mut both = [0.0f32; 2 * LANES];
                _mm512_storeu_ps(both.as_mut_ptr(), *a);
                for h in 0..2 {
                    let c = 2 * p + h;
                    if c >= nc {
                        break;
                    }
                    let mut lanes = [0.0f32; LANES];
                    lanes.copy_from_slice(&both[h * LANES..(h + 1) * LANES]);
                    for i in n..k {
                        let w = f32::from_bits((ws[p][h].add(i).read().to_bits() as u32) << 16);
                        lanes[i - n] = xs.add(r * k + i).read().mul_add(w, lanes[i - n]);
                    }
                    *y.add(r * ld + c) = reduce(&lanes);
                }
            }
        }
    }

    /// One column block as `avx2::block` computes it (the same bits), in tiles of up to 8 rows
    /// × 6 weight rows, from `x` packed by [`pack`].
    ///
    /// # Safety
    /// As `avx2::block`, and the CPU must have AVX-512F.
    #[target_feature(enable = "avx512f,avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn block<const S: usize>(
        x: &[f32],
        packed: &Packed,
        k: usize,
        w: &[bf16],
        cols: usize,
        y: *mut f32,
        ld: usize,
        into: PrefetchInto,
    ) {
        // The weight rows of group `c0` (6 from c0; a missing last one repeats the one before:
        // computed, not stored).
        let group = |c0: usize| -> (usize, [[*const bf16; 2]; PAIRS]) {
            let nc = (2 * PAIRS).min(cols - c0);
            let row = |c: usize| row_start::<S>(w.as_ptr(), c0 + c.min(nc - 1), k);
            (nc, std::array::from_fn(|p| [row(2 * p), row(2 * p + 1)]))
        };
        let steps = k / LANES;
        let rows = packed.tiles.last().map_or(0, |&(r0, nr)| r0 + nr);
        let widen_once = rows >= WIDEN_ONCE_MIN_ROWS
            && cols * k * std::mem::size_of::<f32>() <= WIDEN_ONCE_MAX_BYTES;
        WIDENED.with_borrow_mut(|widened| {
            if widen_once {
                widened.resize(
                    cols.div_ceil(2 * PAIRS) * PAIRS * steps,
                    _mm512_setzero_ps(),
                );
            }
            for (t, (&(r0, nr), &offset)) in packed.tiles.iter().zip(&packed.offsets).enumerate() {
                // The first tile reads the block's weights from memory: it prefetches the next
                // group's while it computes; the others find them in cache, or widened by the
                // first tile.
                let ahead = if t == 0 {
                    Ahead {
                        elements: AHEAD_GROUPS * 2 * PAIRS * k,
                        into,
                    }
                } else {
                    Ahead::NONE
                };
                let xp = packed.data.as_ptr().add(offset);
                let xs = x.as_ptr().add(r0 * k);
                let yt = y.add(r0 * ld);
                let mut c0 = 0;
                while c0 < cols {
                    let (nc, ws) = group(c0);
                    let at = c0 / (2 * PAIRS) * PAIRS * steps;
                    let wd = match (widen_once, t) {
                        (false, _) => Widened::No,
                        (true, 0) => Widened::Fill(widened.as_mut_ptr().add(at)),
                        (true, _) => Widened::Read(widened.as_ptr().add(at)),
                    };
                    let yc = yt.add(c0);
                    match nr {
                        8 => tile::<8, S>(xp, xs, k, ws, wd, nc, yc, ld, ahead),
                        7 => tile::<7, S>(xp, xs, k, ws, wd, nc, yc, ld, ahead),
                        6 => tile::<6, S>(xp, xs, k, ws, wd, nc, yc, ld, ahead),
                        5 => tile::<5, S>(xp, xs, k, ws, wd, nc, yc, ld, ahead),
                        4 => tile::<4, S>(xp, xs, k, ws, wd, nc, yc, ld, ahead),
                        3 => tile::<3, S>(xp, xs, k, ws, wd, nc, yc, ld, ahead),
                        2 => tile::<2, S>(xp, xs, k, ws, wd, nc, yc, ld, ahead),
                        _ => tile::<1, S>(xp, xs, k, ws, wd, nc, yc, ld, ahead),
                    }
                    c0 += nc;
                }
            }
        });
    }

    /// Where a tile's widened weights come from (see `tile`).
    #[derive(Clone, Copy)]
    enum Widened {
        /// Widened from `ws` step by step (a call of few tiles, or a block too large to keep).
        No,
        /// Widened from `ws` and stored here, for the block's later tiles.
        Fill(*mut __m512),
        /// Read from here, stored by the block's first tile.
        Read(*const __m512),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::matmul::matmul_reference;
    use crate::kernels::testutil::{batch_as_rows_alone, bf16s, max_abs_diff, Rng, EDGE_SHAPES};
    use model::TensorData;

    /// True (and says so) where this CPU lacks AVX2 or FMA: the test has nothing to run.
    fn skipped_without_the_fast_kernel() -> bool {
        if !supported() {
            eprintln!("skipped: this CPU lacks AVX2 or FMA");
        }
        !supported()
    }

    /// The tile kinds this CPU runs: the AVX2 ones, and the AVX-512 ones where it has AVX-512F.
    fn tile_kinds() -> Vec<Tiles> {
        let mut tiles = vec![Tiles::Avx2];
        if std::arch::is_x86_feature_detected!("avx512f") {
            tiles.push(Tiles::Avx512);
        }
        tiles
    }

    #[test]
    fn fast_bf16_matmul_matches_reference_on_random_inputs() {
        if skipped_without_the_fast_kernel() {
            return;
        }
        let mut rng = Rng::fresh();
        let seed = rng.0;
        for (rows, k, out) in EDGE_SHAPES {
            let x = rng.vec(rows * k);
            let w = bf16s(&rng.vec(out * k));
            let mut y = vec![0.0; rows * out];
            matmul_bf16(&x, &w, k, &mut y);
            let d = max_abs_diff(&y, &matmul_reference(&x, TensorData::Bf16(&w), k));
            assert!(
                d < 1e-4 * (k as f32).sqrt(),
                "seed {seed} {rows}x{k}x{out}: diff {d}"
            );
        }
    }

    #[test]
    fn fast_bf16_row_is_bit_identical_alone_or_in_a_batch() {
        if skipped_without_the_fast_kernel() {
            return;
        }
        let mut rng = Rng::fresh();
        let seed = rng.0;
        for (k, out) in [(1024, 75), (200, 33), (37, 9)] {
            let w = bf16s(&rng.vec(out * k));
            for rows in [2, 3, 4, 5, 7, 8, 13, 17, 33] {
                let x = rng.vec(rows * k);
                let f = |x: &[f32], y: &mut [f32]| matmul_bf16(x, &w, k, y);
                batch_as_rows_alone(f, &x, k, out, &format!("seed {seed} k {k}"));
            }
        }
    }

    #[test]
    fn avx512_tiles_give_the_bits_of_the_avx2_tiles() {
        if !supported() || !std::arch::is_x86_feature_detected!("avx512f") {
            eprintln!("skipped: this CPU lacks AVX2, FMA or AVX-512F");
            return;
        }
        let mut rng = Rng::fresh();
        let seed = rng.0;
        let plan = weight_prefetch();
        // k not a multiple of 8, weight rows not a multiple of 6 or of a block, rows filling
        // tiles of 8, splitting 9 to 15 in two, and spanning super-blocks; from 32 rows the
        // later tiles read the weights the first widened (a block of 48 rows of k = 4,096 is the
        // most that keeps them: 768 KiB, and its second block of 2 rows; 48 rows of 4,104 are
        // past it and widen in every tile, the last block of 2 rows of 4,104 keeps them).
        for (rows, k, out) in [
            (5, 64, 40),
            (8, 1024, 97),
            (8, 37, 7),
            (9, 100, 70),
            (13, 256, 130),
            (16, 48, 6),
            (17, 160, 45),
            (40, 33, 101),
            (70, 4096, 50),
            (36, 4104, 50),
        ] {
            let x = rng.vec(rows * k);
            let w = bf16s(&rng.vec(out * k));
            let (mut narrow, mut wide) = (vec![0.0; rows * out], vec![0.0; rows * out]);
            matmul_bf16_in::<1>(&x, &w, k, &mut narrow, Tiles::Avx2, plan);
            matmul_bf16_in::<1>(&x, &w, k, &mut wide, Tiles::Avx512, plan);
            assert_eq!(narrow, wide, "seed {seed} {rows}x{k}x{out}");
        }
    }

    #[test]
    fn either_prefetch_plan_gives_the_same_bits() {
        if skipped_without_the_fast_kernel() {
            return;
        }
        let mut rng = Rng::fresh();
        let seed = rng.0;
        let amd = weight_prefetch_for(CpuVendor::Amd);
        let plans = [
            amd,
            weight_prefetch_for(CpuVendor::Intel),
            WeightPrefetch {
                wide_into: PrefetchInto::L1,
                ..amd
            },
        ];
        for (k, out) in [(64, 8), (1024, 100), (512, 196)] {
            let w = bf16s(&rng.vec(out * k));
            let wi = interleave_rows(&w, k);
            for rows in [1, 2, 4, 8, 13] {
                let x = rng.vec(rows * k);
                for t in tile_kinds() {
                    let mut outs = vec![];
                    for plan in plans {
                        let (mut stored, mut inter) =
                            (vec![0.0; rows * out], vec![0.0; rows * out]);
                        matmul_bf16_in::<1>(&x, &w, k, &mut stored, t, plan);
                        matmul_bf16_in::<INTERLEAVE_ROWS>(&x, &wi, k, &mut inter, t, plan);
                        outs.push(stored);
                        outs.push(inter);
                    }
                    assert!(
                        outs.windows(2).all(|p| p[0] == p[1]),
                        "seed {seed} {rows}x{k}x{out} {t:?}: a prefetch plan changed the bits"
                    );
                }
            }
        }
    }

    #[test]
    fn intel_cpus_prefetch_few_rows_into_l2_others_into_l1_and_wide_tiles_all_into_l2() {
        let intel = weight_prefetch_for(CpuVendor::Intel);
        assert_eq!(intel.into, PrefetchInto::L2);
        assert_eq!(intel.few_rows_ahead, FEW_ROWS_AHEAD_L2);
        for other in [CpuVendor::Amd, CpuVendor::Other] {
            let plan = weight_prefetch_for(other);
            assert_eq!(plan.into, PrefetchInto::L1);
            assert_eq!(plan.few_rows_ahead, FEW_ROWS_AHEAD_L1);
        }
        for vendor in [CpuVendor::Intel, CpuVendor::Amd, CpuVendor::Other] {
            assert_eq!(weight_prefetch_for(vendor).wide_into, PrefetchInto::L2);
        }
        // A distance is whole cache lines of weights, so each prefetch starts a line.
        assert!(FEW_ROWS_AHEAD_L1.is_multiple_of(PREFETCH_STEP));
        assert!(FEW_ROWS_AHEAD_L2.is_multiple_of(PREFETCH_STEP));
    }

    #[test]
    fn tiles_are_chosen_by_the_rows_of_the_call_and_the_cpu() {
        // (rows, the vendor of a CPU with AVX-512F or none without, the tiles).
        let amd = Some(wide_tiles_from_for(CpuVendor::Amd));
        let intel = Some(wide_tiles_from_for(CpuVendor::Intel));
        let other = Some(wide_tiles_from_for(CpuVendor::Other));
        let cases = [
            (1, amd, Tiles::Avx2),
            (2, amd, Tiles::Avx2),
            (3, amd, Tiles::Avx512),
            (4, amd, Tiles::Avx512),
            (64, amd, Tiles::Avx512),
            (1, intel, Tiles::Avx2),
            (MAX_TILE_ROWS, intel, Tiles::Avx2),
            (MAX_TILE_ROWS + 1, intel, Tiles::Avx512),
            (MAX_TILE_ROWS, other, Tiles::Avx2),
            (MAX_TILE_ROWS + 1, other, Tiles::Avx512),
            (64, None, Tiles::Avx2),
        ];
        for (rows, from, want) in cases {
            assert_eq!(
                tiles_for(rows, from),
                want,
                "{rows} rows, AVX-512 from {from:?}"
            );
        }
    }

    #[test]
    fn interleaved_weights_give_the_stored_weights_bits() {
        if skipped_without_the_fast_kernel() {
            return;
        }
        let mut rng = Rng::fresh();
        let seed = rng.0;
        let plan = weight_prefetch();
        // Weight rows within one block, over several blocks, and ending in a part block; rows
        // of a decode window, of one or two AVX-512 tiles, and past a super-block.
        for (k, out) in [(64, 4), (1024, 100), (256, 196), (1024, 1024)] {
            assert!(interleavable(k, out));
            let w = bf16s(&rng.vec(out * k));
            let wi = interleave_rows(&w, k);
            for rows in [1, 2, 3, 4, 5, 8, 9, 13, 17, 40] {
                let x = rng.vec(rows * k);
                for t in tile_kinds() {
                    let (mut stored, mut inter) = (vec![0.0; rows * out], vec![0.0; rows * out]);
                    matmul_bf16_in::<1>(&x, &w, k, &mut stored, t, plan);
                    matmul_bf16_in::<INTERLEAVE_ROWS>(&x, &wi, k, &mut inter, t, plan);
                    assert_eq!(stored, inter, "seed {seed} {rows}x{k}x{out} {t:?}");
                }
                let mut chosen = vec![0.0; rows * out];
                matmul_bf16_interleaved(&x, &wi, k, &mut chosen);
                let mut reference = vec![0.0; rows * out];
                matmul_bf16(&x, &w, k, &mut reference);
                assert_eq!(chosen, reference, "seed {seed} {rows}x{k}x{out}");
            }
        }
    }

    #[test]
    fn interleaving_keeps_every_element_and_refuses_other_shapes() {
        let (k, out) = (16, 8);
        let w: Vec<bf16> = (0..out * k).map(|i| bf16::from_f32(i as f32)).collect();
        let wi = interleave_rows(&w, k);
        // Group 0, piece 0: rows 0-3's elements 0-7; then piece 1 of rows 0-3; then group 1.
        assert_eq!(wi[8].to_f32(), 16.0, "row 1's first piece follows row 0's");
        assert_eq!(
            wi[32].to_f32(),
            8.0,
            "row 0's second piece follows the group's first"
        );
        assert_eq!(wi[64].to_f32(), 64.0, "group 1 starts with row 4");
        let mut sorted: Vec<f32> = wi.iter().map(|v| v.to_f32()).collect();
        sorted.sort_by(f32::total_cmp);
        assert_eq!(sorted, w.iter().map(|v| v.to_f32()).collect::<Vec<_>>());
        assert!(!interleavable(12, 8), "k not whole pieces");
        assert!(!interleavable(16, 6), "rows not whole groups");
        let refused = std::panic::catch_unwind(|| interleave_rows(&w[..6 * k], k));
        assert!(refused.is_err(), "6 rows are not whole groups of 4");
    }

    /// Not a test: a decode step's one-row matmul over the weights as they are stored and over
    /// the same weights interleaved by groups of 4 rows ([`interleave_rows`]), the same kernel
    /// and chain, so the same bits (asserted). Prints the best and median rate of each over
    /// alternating runs.
    /// `cargo test --release -p backend-cpu --lib -- --ignored one_row_interleaved --nocapture`
    #[test]
    #[ignore]
    fn one_row_interleaved_weights_speed() {
        if skipped_without_the_fast_kernel() {
            return;
        }
        // 512 MiB of weights: far past any cache, as a decode step's experts are.
        let (k, out) = (2048, 131_072);
        let mut rng = Rng::fresh();
        let x = rng.vec(k);
        let w = bf16s(&rng.vec(out * k));
        let wi = interleave_rows(&w, k);
        let (mut stored, mut inter) = (vec![0.0f32; out], vec![0.0f32; out]);
        let (mut t_stored, mut t_inter) = (vec![], vec![]);
        for _ in 0..9 {
            let t = std::time::Instant::now();
            matmul_bf16(&x, &w, k, &mut stored);
            t_stored.push(t.elapsed().as_secs_f64());
            let t = std::time::Instant::now();
            matmul_bf16_interleaved(&x, &wi, k, &mut inter);
            t_inter.push(t.elapsed().as_secs_f64());
        }
        assert_eq!(stored, inter, "the interleaved layout changed the bits");
        let gbs = |t: &mut Vec<f64>| {
            t.sort_by(f64::total_cmp);
            let bytes = (out * k * 2) as f64;
            (bytes / t[0] / 1e9, bytes / t[t.len() / 2] / 1e9)
        };
        let ((s_best, s_med), (i_best, i_med)) = (gbs(&mut t_stored), gbs(&mut t_inter));
        eprintln!(
            "one row, {out} x {k} bf16: as stored {s_best:.1} GB/s best, {s_med:.1} median; \
             interleaved by {INTERLEAVE_ROWS} {i_best:.1} best, {i_med:.1} median"
        );
    }

    /// Decode windows of 2–4 rows over interleaved weights, the AVX2 tiles against the AVX-512
    /// ones (the choice [`WIDE_TILES_MIN_ROWS_AMD`] makes), alternating, on 512 MiB of weights
    /// (from memory, as a decode step's) and on 4 MiB (an expert's gate/up, small enough to stay
    /// in a last-level cache between runs): median GB/s of each. A timing, not a
    /// test: `cargo test --release -p backend-cpu --lib -- --ignored few_rows_tile_kinds_speed
    /// --nocapture`.
    #[test]
    #[ignore]
    fn few_rows_tile_kinds_speed() {
        if skipped_without_the_fast_kernel() || !std::arch::is_x86_feature_detected!("avx512f") {
            return;
        }
        let k = 2048;
        let mut rng = Rng::fresh();
        for (out, runs) in [(131_072, 9), (1024, 401)] {
            let w = interleave_rows(&bf16s(&rng.vec(out * k)), k);
            for rows in [2, 3, 4] {
                let x = rng.vec(rows * k);
                let (mut narrow, mut wide) = (vec![0.0f32; rows * out], vec![0.0f32; rows * out]);
                let (mut t_narrow, mut t_wide) = (vec![], vec![]);
                let plan = weight_prefetch();
                for _ in 0..runs {
                    let t = std::time::Instant::now();
                    matmul_bf16_in::<INTERLEAVE_ROWS>(&x, &w, k, &mut narrow, Tiles::Avx2, plan);
                    t_narrow.push(t.elapsed().as_secs_f64());
                    let t = std::time::Instant::now();
                    matmul_bf16_in::<INTERLEAVE_ROWS>(&x, &w, k, &mut wide, Tiles::Avx512, plan);
                    t_wide.push(t.elapsed().as_secs_f64());
                }
                assert_eq!(narrow, wide, "the tile kinds' bits differ");
                let gbs = |t: &mut Vec<f64>| {
                    t.sort_by(f64::total_cmp);
                    (out * k * 2) as f64 / t[t.len() / 2] / 1e9
                };
                eprintln!(
                    "{rows} rows, {out} x {k} interleaved: AVX2 tiles {:.1} GB/s, AVX-512 tiles \
                     {:.1} (medians of {runs})",
                    gbs(&mut t_narrow),
                    gbs(&mut t_wide)
                );
            }
        }
    }

    #[test]
    fn fast_bf16_row_of_a_batch_of_8_equals_the_row_alone_at_model_shapes() {
        if skipped_without_the_fast_kernel() {
            return;
        }
        let mut rng = Rng::fresh();
        let seed = rng.0;
        // Qwen3-0.6B's projections: hidden 1024 → 2048 (q), 3072 (gate/up); 3072 → 1024 (down).
        for (k, out) in [(1024, 2048), (1024, 3072), (3072, 1024)] {
            let w = bf16s(&rng.vec(out * k));
            let x = rng.vec(8 * k);
            let mut all = vec![0.0; 8 * out];
            matmul_bf16(&x, &w, k, &mut all);
            for r in 0..8 {
                let mut one = vec![0.0; out];
                matmul_bf16(&x[r * k..(r + 1) * k], &w, k, &mut one);
                assert_eq!(
                    one,
                    all[r * out..(r + 1) * out],
                    "seed {seed} {k}→{out}: row {r} of 8"
                );
            }
        }
    }
}
