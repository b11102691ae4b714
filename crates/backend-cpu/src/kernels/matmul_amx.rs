//! `y = bf16(x) · Wᵀ` for bf16 weights on Intel AMX (`tdpbf16ps`), for `--matmul-input bf16` on
//! CPUs with AMX-BF16 where the kernel grants this process the tile registers. One instruction
//! multiplies a 16 × 32 tile of weights by a 32 × 16 tile of x (16 rows) and adds the products
//! into a 16 × 16 tile of f32 sums: 8,192 products, against `vdpbf16ps`'s 32. On the 2-core Xeon
//! (bench/RESULTS.md, session 42) that made prompts' matmuls several times faster and many-row
//! decode rounds' faster. One-row calls only stream their weights: from memory AMX reads them
//! faster than the `vdpbf16ps` kernel, from cache 10-20 % slower (`amx_speed`); one stream of
//! the small hybrid decodes 15 % slower, of the A3B slice as fast.
//!
//! Bits: `tdpbf16ps` sums the 32 products of one output over one chunk of 32 elements of k in a
//! wide internal format and adds that sum to the output's f32 sum with one rounding. `vdpbf16ps`
//! rounds after each product instead, so the two kernels give different bits (measured on this
//! Xeon: 2^25 plus 32 products of 1 is 2^25 + 32 in one `tdpbf16ps`, 2^25 in 16 `vdpbf16ps`).
//! Where this kernel runs ([`in_use`]), every bf16-input matmul of the process with such a k
//! runs on it, whatever its rows: which kernel computes a row never depends on the batch.
//!
//! Batch invariance: `y[r, o]` is the chain over k's chunks of 32 in increasing order, one
//! `tdpbf16ps` each, in the tile element (weight row o, x row r) that no other row's values
//! enter. Which tile row or column holds it, how many rows x has, how the weights are laid out
//! and how the threads split the outputs decide only which chains share an instruction, never
//! the operations of one. Rows of x past the batch and weight rows past the matrix are zeros or
//! repeats whose results are dropped.
//!
//! Layouts: the weights as stored (row-major: a tile is 16 rows of 64 bytes, `2k` bytes apart),
//! or in panels ([`panel_rows`]: each tile's 1 KiB one after the other), which the loader makes
//! where it copies weights anyway: one stream a tile instead of sixteen (on the 2-core Xeon from
//! memory 24–30 GB/s against 14–17; `/tmp` C probes of session 42). Both give the same bits.

use super::matmul::matmul_shape;
use super::matmul_fast::Output;
use half::bf16;
use model::{Fp8Rows, FP8_SCALE_HEADROOM};
use rayon::prelude::*;
use std::arch::asm;
use std::sync::OnceLock;

/// Elements of k one `tdpbf16ps` takes from each weight row: a tile row of 64 bytes.
pub const CHUNK: usize = 32;
/// Weight rows in a tile (its 16 rows), and so in a panel of [`panel_rows`].
pub const PANEL_ROWS: usize = 16;
/// Rows of x in a tile of x (its 16 columns of pairs).
const X_TILE_ROWS: usize = 16;
/// Tiles of sums a task holds (`tmm0`–`tmm3`): 64 outputs. With two tiles of weights (`tmm4`,
/// `tmm5`, loaded in turn) and one of x (`tmm6`), 7 of the 8 tile registers.
const SUM_TILES: usize = 4;
/// Output columns a rayon task computes.
const COL_BLOCK: usize = SUM_TILES * PANEL_ROWS;
/// Chunks ahead of the one multiplied that a task's first pass prefetches (into L1): the panels'
/// streams read at 25–30 GB/s with 2–16 chunks ahead or none on the 2-core Xeon (C probe), 4
/// the best of them by a little; in this kernel none, 8 ahead and into L2 measured about the same.
const AHEAD_CHUNKS: usize = 4;
/// Set to `0` to keep this process off AMX (the `vdpbf16ps` kernel then runs every bf16-input
/// matmul), to compare them; read once per process.
pub const AMX_ENV: &str = "FLASHLANE_CPU_AMX";

/// Linux's `arch_prctl` request for permission to use an extended state component, and AMX's
/// tile data component.
const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
const XFEATURE_XTILEDATA: i64 = 18;
/// `arch_prctl`'s system call number on x86-64.
const SYS_ARCH_PRCTL: i64 = 158;

/// Whether this process multiplies bf16 inputs on AMX: the CPU has AMX-TILE and AMX-BF16, the
/// kernel granted the tile data, and [`AMX_ENV`] is not `0`. Fixed for the life of the process.
pub fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| {
        std::env::var(AMX_ENV).map_or(true, |v| v != "0") && cpu_has_amx() && request_tiles()
    })
}

/// Whether a bf16-input matmul with rows of `k` runs here: [`enabled`] and k whole chunks. A
/// function of the process and k alone, never of the batch.
pub fn in_use(k: usize) -> bool {
    k > 0 && k.is_multiple_of(CHUNK) && enabled()
}

/// AMX-TILE (leaf 7 EDX bit 24) and AMX-BF16 (bit 22).
fn cpu_has_amx() -> bool {
    // `__cpuid_count` is a safe function in recent Rust and `unsafe` in older releases.
    #[allow(unused_unsafe)]
    let max_leaf = unsafe { std::arch::x86_64::__cpuid(0) }.eax;
    if max_leaf < 7 {
        return false;
    }
    #[allow(unused_unsafe)]
    let edx = unsafe { std::arch::x86_64::__cpuid_count(7, 0) }.edx;
    edx & (1 << 24) != 0 && edx & (1 << 22) != 0
}

/// Asks Linux for the tile data state (each process must, before its first tile instruction);
/// false where the kernel refuses or predates it.
fn request_tiles() -> bool {
    let ret: i64;
    // SAFETY: `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)` only changes this process's
    // permissions; the system call clobbers rcx and r11, declared.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL => ret,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack)
        );
    }
    ret == 0
}

/// Whether a `[out, k]` matrix can be stored in panels: whole chunks and whole panels.
pub fn panels_fit(k: usize, out: usize) -> bool {
    k > 0 && k.is_multiple_of(CHUNK) && out.is_multiple_of(PANEL_ROWS)
}

/// `w` (`[out, k]`, row-major) in panels of [`PANEL_ROWS`] rows: in each, chunk `c` of its 16
/// rows (16 × 32 elements, one tile) one after the other, then chunk `c + 1`. Panics unless
/// [`panels_fit`].
pub fn panel_rows(w: &[bf16], k: usize) -> Vec<bf16> {
    assert!(
        k > 0 && w.len().is_multiple_of(k) && panels_fit(k, w.len() / k),
        "panel_rows: [{}, {k}] is not whole panels of {PANEL_ROWS} rows × chunks of {CHUNK}",
        w.len() / k.max(1)
    );
    super::matmul_fast::interleave_groups(w, k, PANEL_ROWS, CHUNK)
}

/// `y[rows, out] = bf16(x[rows, k]) · W[out, k]ᵀ`, W as stored. Panics unless [`in_use`]`(k)`.
pub fn matmul_stored(x: &[f32], w: &[bf16], k: usize, y: &mut [f32]) {
    let (rows, out) = matmul_shape(x, w.len(), k, y.len());
    assert!(in_use(k), "matmul_amx: not in use for k {k}");
    if rows == 0 || out == 0 {
        return;
    }
    let whole = out / PANEL_ROWS * PANEL_ROWS;
    let xt = x_tiles(x, rows, k);
    if whole > 0 {
        run(
            xt.as_slice(),
            rows,
            k,
            Weights::Stored(&w[..whole * k]),
            y,
            out,
        );
    }
    if whole < out {
        // The last rows, fewer than a tile: a tile of them with zero rows after (computed,
        // dropped), from a copy, since a tile load past the matrix would leave its memory.
        let mut tail = vec![bf16::ZERO; PANEL_ROWS * k];
        tail[..(out - whole) * k].copy_from_slice(&w[whole * k..]);
        let mut yt = vec![0.0f32; rows * PANEL_ROWS];
        run(
            xt.as_slice(),
            rows,
            k,
            Weights::Stored(&tail),
            &mut yt,
            PANEL_ROWS,
        );
        for (row, t) in y.chunks_exact_mut(out).zip(yt.chunks_exact(PANEL_ROWS)) {
            row[whole..].copy_from_slice(&t[..out - whole]);
        }
    }
}

/// [`matmul_stored`] over weights laid out by [`panel_rows`]: the same bits. Panics unless
/// [`in_use`]`(k)` and the shape [`panels_fit`].
pub fn matmul_panels(x: &[f32], w: &[bf16], k: usize, y: &mut [f32]) {
    let (rows, out) = matmul_shape(x, w.len(), k, y.len());
    assert!(in_use(k), "matmul_amx: not in use for k {k}");
    assert!(
        panels_fit(k, out),
        "matmul_amx::matmul_panels: [{out}, {k}] is not whole panels"
    );
    if rows == 0 || out == 0 {
        return;
    }
    let xt = x_tiles(x, rows, k);
    run(xt.as_slice(), rows, k, Weights::Panels(w), y, out);
}

/// One 64-byte row of a tile, on a cache line of its own: a tile load then reads 16 whole lines
/// (from the allocator's 16-byte alignment a tile's rows would straddle 17).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct TileRow([bf16; CHUNK]);

/// bf16 values on cache lines (x's tiles: [`x_tiles`]), whole lines of [`CHUNK`].
struct Lines(Vec<TileRow>);

impl Lines {
    /// `n` zeros (`n` whole lines).
    fn zeros(n: usize) -> Lines {
        Lines(vec![TileRow([bf16::ZERO; CHUNK]); n / CHUNK])
    }

    fn as_slice(&self) -> &[bf16] {
        // SAFETY: `TileRow` is `CHUNK` bf16 with no padding (64 bytes, aligned to 64), so the
        // rows are `len · CHUNK` contiguous, initialised bf16.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr() as *const bf16, self.0.len() * CHUNK) }
    }

    fn as_mut_slice(&mut self) -> &mut [bf16] {
        // SAFETY: as in `as_slice`, borrowed mutably once.
        unsafe {
            std::slice::from_raw_parts_mut(self.0.as_mut_ptr() as *mut bf16, self.0.len() * CHUNK)
        }
    }
}

/// x rounded to bf16 (to nearest, ties to even) in tiles: for each group of 16 rows and each
/// chunk of k, 16 rows of pairs (`[p][row][2]`: elements `2p`, `2p + 1` of the chunk of each
/// row), 1 KiB on 16 cache lines; rows past `rows` are zeros.
fn x_tiles(x: &[f32], rows: usize, k: usize) -> Lines {
    let chunks = k / CHUNK;
    let tile = X_TILE_ROWS * CHUNK;
    let mut tiles = Lines::zeros(rows.div_ceil(X_TILE_ROWS) * chunks * tile);
    let xt = tiles.as_mut_slice();
    for (r, row) in x.chunks_exact(k).enumerate() {
        let (g, n) = (r / X_TILE_ROWS, r % X_TILE_ROWS);
        for (c, chunk) in row.chunks_exact(CHUNK).enumerate() {
            let base = (g * chunks + c) * tile + 2 * n;
            for (p, pair) in chunk.chunks_exact(2).enumerate() {
                let at = base + p * 2 * X_TILE_ROWS;
                xt[at] = bf16::from_f32(pair[0]);
                xt[at + 1] = bf16::from_f32(pair[1]);
            }
        }
    }
    tiles
}

/// Where a tile of weights lies.
#[derive(Clone, Copy)]
enum Weights<'a> {
    /// Row-major, whole tiles of rows.
    Stored(&'a [bf16]),
    /// [`panel_rows`]'s layout.
    Panels(&'a [bf16]),
}

impl<'a> Weights<'a> {
    fn slice(self) -> &'a [bf16] {
        match self {
            Weights::Stored(s) | Weights::Panels(s) => s,
        }
    }
}

/// Every output column block of `w` (whole tiles of rows) as a rayon task, into the first
/// columns of `y[rows, ld]`.
fn run(xt: &[bf16], rows: usize, k: usize, w: Weights<'_>, y: &mut [f32], ld: usize) {
    let out = w.slice().len() / k;
    debug_assert!(out.is_multiple_of(PANEL_ROWS) && out <= ld);
    let y = Output(y.as_mut_ptr());
    (0..out.div_ceil(COL_BLOCK)).into_par_iter().for_each(|b| {
        let start = b * COL_BLOCK;
        let tiles = (COL_BLOCK.min(out - start)) / PANEL_ROWS;
        // SAFETY: enabled() (asserted by the callers) checked AMX and the tile permission; the
        // block's `tiles` whole tiles of rows lie inside `w`, `xt` holds every group's tiles,
        // and this task writes only its columns `start..` of `y`'s `rows × ld`.
        unsafe { block(xt, rows, k, w, start, tiles, y.at(start), ld) }
    });
}

/// A tile configuration (`ldtilecfg`'s 64 bytes).
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

/// Palette 1, every tile 16 rows of 64 bytes.
static ALL_FULL: TileConfig = {
    let mut c = [0u8; 64];
    c[0] = 1;
    let mut t = 0;
    while t < 8 {
        c[16 + 2 * t] = 64;
        c[48 + t] = 16;
        t += 1;
    }
    TileConfig(c)
};

/// Loads weight tile `$t` (`tmm4` or `tmm5`) from `$p`, rows `$s` bytes apart, and adds its
/// products with the x tile (`tmm6`) into sum tile `$c`.
macro_rules! tile_step {
    ($c:literal, $t:literal, $p:expr, $s:expr) => {
        asm!(
            concat!("tileloadd tmm", $t, ", [{p} + {s}*1]"),
            p = in(reg) $p,
            s = in(reg) $s,
            options(nostack, readonly)
        );
        asm!(concat!("tdpbf16ps tmm", $c, ", tmm", $t, ", tmm6"), options(nostack, nomem));
    };
}

/// Stores sum tile `$c` to `$p` (16 rows of 64 bytes).
macro_rules! tile_store {
    ($c:literal, $p:expr) => {
        asm!(
            concat!("tilestored [{p} + {s}*1], tmm", $c),
            p = in(reg) $p,
            s = in(reg) 64usize,
            options(nostack)
        );
    };
}

/// One chunk's step of a task: the chunk's x tile at `x` into `tmm6`, then weight tile `t`'s
/// chunk at `base[t] + at` (rows `stride` bytes apart) times it into sum tile `t`, for the 4
/// tiles.
///
/// # Safety
/// The tile configuration is loaded; the x tile and the 4 weight tiles lie in their buffers.
#[inline(always)]
unsafe fn chunk_step(x: *const bf16, base: &[*const bf16; SUM_TILES], at: usize, stride: usize) {
    asm!(
        "tileloadd tmm6, [{p} + {s}*1]",
        p = in(reg) x,
        s = in(reg) 64usize,
        options(nostack, readonly)
    );
    tile_step!("0", "4", base[0].add(at), stride);
    tile_step!("1", "5", base[1].add(at), stride);
    tile_step!("2", "4", base[2].add(at), stride);
    tile_step!("3", "5", base[3].add(at), stride);
}

/// The 4 sum tiles set to zero.
///
/// # Safety
/// The tile configuration is loaded.
#[inline(always)]
unsafe fn zero_sums() {
    asm!(
        "tilezero tmm0",
        "tilezero tmm1",
        "tilezero tmm2",
        "tilezero tmm3",
        options(nostack, nomem)
    );
}

/// Sum tile `t` (0-3) stored into `sums` (`sums[m][n]`: its weight row m against x row n).
///
/// # Safety
/// The tile configuration is loaded.
#[inline(always)]
unsafe fn store_sums(t: usize, sums: &mut [[f32; X_TILE_ROWS]; PANEL_ROWS]) {
    let p = sums.as_mut_ptr() as *mut f32;
    match t {
        0 => {
            tile_store!("0", p);
        }
        1 => {
            tile_store!("1", p);
        }
        2 => {
            tile_store!("2", p);
        }
        _ => {
            tile_store!("3", p);
        }
    }
}

/// One task: `tiles` (1–4) tiles of weight rows from row `start` against every group of x's
/// rows. Tiles past `tiles` repeat the last (computed, not stored).
///
/// # Safety
/// AMX is [`enabled`]; the tiles lie inside `w`; `y` holds `rows × ld` floats from the block's
/// column 0.
#[allow(clippy::too_many_arguments)]
unsafe fn block(
    xt: &[bf16],
    rows: usize,
    k: usize,
    w: Weights<'_>,
    start: usize,
    tiles: usize,
    y: *mut f32,
    ld: usize,
) {
    let chunks = k / CHUNK;
    let x_tile = X_TILE_ROWS * CHUNK;
    // Tile t's chunk c at base[t] + c · step, its rows `stride` bytes apart: a tile's rows
    // start at the same element in either layout.
    let base: [*const bf16; SUM_TILES] = std::array::from_fn(|t| {
        w.slice()
            .as_ptr()
            .add((start + PANEL_ROWS * t.min(tiles - 1)) * k)
    });
    let (step, stride) = match w {
        Weights::Stored(_) => (CHUNK, 2 * k),
        Weights::Panels(_) => (PANEL_ROWS * CHUNK, 2 * CHUNK),
    };
    asm!("ldtilecfg [{}]", in(reg) ALL_FULL.0.as_ptr(), options(nostack, readonly));
    let mut sums = [[0.0f32; X_TILE_ROWS]; PANEL_ROWS];
    for g in 0..rows.div_ceil(X_TILE_ROWS) {
        zero_sums();
        let xg = xt.as_ptr().add(g * chunks * x_tile);
        // The first group reads the block's weights from memory; the others find them in L2.
        let prefetch = g == 0 && matches!(w, Weights::Panels(_));
        for c in 0..chunks {
            if prefetch && c + AHEAD_CHUNKS < chunks {
                for b in &base[..tiles] {
                    let p = b.add((c + AHEAD_CHUNKS) * step) as *const i8;
                    for line in 0..PANEL_ROWS {
                        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                            p.add(64 * line),
                        );
                    }
                }
            }
            chunk_step(xg.add(c * x_tile), &base, c * step, stride);
        }
        let n_rows = (rows - g * X_TILE_ROWS).min(X_TILE_ROWS);
        for t in 0..tiles {
            store_sums(t, &mut sums);
            // sums[m][n]: weight row start + 16t + m against x row 16g + n.
            for (m, col) in sums.iter().enumerate() {
                for (n, v) in col[..n_rows].iter().enumerate() {
                    *y.add((g * X_TILE_ROWS + n) * ld + PANEL_ROWS * t + m) = *v;
                }
            }
        }
    }
    asm!("tilerelease", options(nostack, nomem));
}

/// Set to `1` to run bf16-input matmuls of FP8 weights on AMX ([`matmul_fp8`]); read once per
/// process. Off by default: on the 2-core Xeon (bench/RESULTS.md, session 43) it made prompts
/// 2.3-4.9× faster (the A3B slice's FP8 twin 176 against 78 tok/s on 8 × 32 tokens; the
/// Qwen3-0.6B shape's 453-501 against 103-169) and 8 streams of the dense shape 14 % faster,
/// but one stream 15-23 % slower (12.6 against 16.3 tok/s; 21.4 against 25.1) and the A3B
/// slice's 8 streams 20 % slower: widening the weights for the tiles costs about what the f32
/// kernel's whole pass does, and the tiles' stores come on top where few rows share them.
pub const AMX_FP8_ENV: &str = "FLASHLANE_CPU_AMX_FP8";

/// Whether [`AMX_FP8_ENV`] asks for FP8 on AMX (and AMX is [`enabled`]).
fn fp8_enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| std::env::var(AMX_FP8_ENV).is_ok_and(|v| v == "1") && enabled())
}

/// Whether a bf16-input matmul of the FP8 rows `w` (rows of `k`) runs on AMX
/// ([`matmul_fp8`]): asked for ([`AMX_FP8_ENV`]), AMX [`in_use`] for k, whole chunks in a block
/// of columns and whole panels in a block of rows. A function of the process and the weights'
/// shape alone, never of the batch.
pub fn fp8_in_use(w: &Fp8Rows<'_>, k: usize) -> bool {
    fp8_kernel_fits(w, k) && fp8_enabled()
}

/// [`fp8_in_use`] but for the ask: AMX runs and the shape fits [`matmul_fp8`].
fn fp8_kernel_fits(w: &Fp8Rows<'_>, k: usize) -> bool {
    in_use(k)
        && k == w.cols
        && w.block_cols.is_multiple_of(CHUNK)
        && w.block_rows.is_multiple_of(PANEL_ROWS)
        && w.first_row.is_multiple_of(PANEL_ROWS)
        && (w.q.len() / k).is_multiple_of(PANEL_ROWS)
}

thread_local! {
    /// A task's weights widened to bf16 panels ([`matmul_fp8`]), kept between calls.
    static FP8_PANELS: std::cell::RefCell<Lines> = std::cell::RefCell::new(Lines::zeros(0));
}

/// `y[rows, out] = bf16(x[rows, k]) · Wᵀ` for the FP8 rows `w`, their bytes as stored or (with
/// `interleaved`) in [`super::matmul_fp8::interleave`]'s groups. Each task widens its weights
/// once, exactly, to bf16 panels of their e4m3 values / 2^8 (as [`super::matmul_fp8`] widens
/// them to f32). Per output: for each block of k, the chain of `tdpbf16ps` over the block's
/// chunks from zero (as [`matmul_panels`] sums a whole row), times the block's scale · 2^8,
/// added by one fused multiply-add to the output's f32 total; blocks in increasing order.
/// Panics unless AMX runs and the shape fits ([`fp8_in_use`] but for [`AMX_FP8_ENV`]).
pub fn matmul_fp8(x: &[f32], w: Fp8Rows<'_>, k: usize, y: &mut [f32], interleaved: bool) {
    assert!(
        fp8_kernel_fits(&w, k),
        "matmul_amx::matmul_fp8: FP8 rows of [{}, {k}] in blocks of {}×{} do not run here",
        w.q.len() / k.max(1),
        w.block_rows,
        w.block_cols
    );
    let (rows, out) = matmul_shape(x, w.q.len(), k, y.len());
    if rows == 0 || out == 0 {
        return;
    }
    let xt = x_tiles(x, rows, k);
    let y = Output(y.as_mut_ptr());
    (0..out.div_ceil(COL_BLOCK)).into_par_iter().for_each(|b| {
        let start = b * COL_BLOCK;
        let tiles = COL_BLOCK.min(out - start) / PANEL_ROWS;
        if rows <= X_TILE_ROWS {
            // One group of x's rows reads each weight tile once: widened as it is needed.
            let src = Fp8Source::Bytes { interleaved };
            // SAFETY: as below, without the panels.
            unsafe {
                block_fp8(
                    xt.as_slice(),
                    rows,
                    k,
                    src,
                    &w,
                    start,
                    tiles,
                    y.at(start),
                    out,
                )
            };
            return;
        }
        FP8_PANELS.with(|panels| {
            let mut panels = panels.borrow_mut();
            let need = tiles * k * PANEL_ROWS;
            if panels.0.len() * CHUNK < need {
                *panels = Lines::zeros(need);
            }
            // SAFETY: fp8_in_use (asserted) checked AMX and the tile permission, so the CPU has
            // AVX-512 (BF16, F16C); the task's `tiles` panels lie inside `w` and `panels`; this
            // task writes only its columns `start..` of `y`'s `rows × out`.
            unsafe {
                widen_panels(&w, k, start, tiles, interleaved, panels.as_mut_slice());
                block_fp8(
                    xt.as_slice(),
                    rows,
                    k,
                    Fp8Source::Panels(panels.as_slice()),
                    &w,
                    start,
                    tiles,
                    y.at(start),
                    out,
                )
            }
        })
    });
}

/// Where [`block_fp8`] finds its weight tiles.
#[derive(Clone, Copy)]
enum Fp8Source<'a> {
    /// The task's panels, widened beforehand ([`widen_panels`]): for calls of several groups of
    /// x's rows, which read every tile once a group.
    Panels(&'a [bf16]),
    /// The FP8 bytes (stored, or interleaved), each chunk's tiles widened as they are needed.
    Bytes { interleaved: bool },
}

/// Panels `0..tiles` of rows from `start` of `w`, widened into `panels` ([`panel_rows`]'s
/// layout of the bf16 values e4m3 / 2^8).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,f16c")]
unsafe fn widen_panels(
    w: &Fp8Rows<'_>,
    k: usize,
    start: usize,
    tiles: usize,
    interleaved: bool,
    panels: &mut [bf16],
) {
    let chunks = k / CHUNK;
    for c in 0..chunks {
        let dst = panels.as_mut_ptr().add(c * PANEL_ROWS * CHUNK);
        widen_chunk(
            w,
            k,
            start,
            tiles,
            c,
            interleaved,
            dst,
            chunks * PANEL_ROWS * CHUNK,
        );
    }
}

/// Chunk `c` of tiles `0..tiles` of rows from `start` of `w`, widened to bf16 (e4m3 / 2^8) at
/// `dst`: tile t's 16 rows of 32 from `dst + t · tile_stride` (elements).
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,f16c")]
unsafe fn widen_chunk(
    w: &Fp8Rows<'_>,
    k: usize,
    start: usize,
    tiles: usize,
    c: usize,
    interleaved: bool,
    dst: *mut bf16,
    tile_stride: usize,
) {
    use super::matmul_fp8::{avx512::widen16, GROUP_ROWS};
    use std::arch::x86_64::*;
    let q = w.q.as_ptr();
    for t in 0..tiles {
        for m in 0..PANEL_ROWS {
            let r = start + PANEL_ROWS * t + m;
            // The chunk's two 16-byte pieces of row r.
            let (lo, hi) = if interleaved {
                let group = q.add((r / GROUP_ROWS) * GROUP_ROWS * k + (r % GROUP_ROWS) * 16);
                (group.add(2 * c * 64), group.add((2 * c + 1) * 64))
            } else {
                (q.add(r * k + c * CHUNK), q.add(r * k + c * CHUNK + 16))
            };
            // Exact: an e4m3 value / 2^8 has 4 significant bits and a bf16 exponent.
            let pair = _mm512_cvtne2ps_pbh(widen16(hi), widen16(lo));
            let at = dst.add(t * tile_stride + m * CHUNK);
            _mm512_storeu_si512(
                at as *mut __m512i,
                std::mem::transmute::<__m512bh, __m512i>(pair),
            );
        }
    }
}

/// [`block`] over a task's FP8 weights (`src`), each block of k's chain scaled into the totals.
///
/// # Safety
/// AMX is [`enabled`] and the CPU has AVX-512 BF16 and FMA; the task's `tiles` tiles of rows lie
/// in `w` (and `src`'s panels); `y` holds `rows × ld` floats from the block's column 0.
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)] // b: scales and chunks
#[target_feature(enable = "avx512f,fma")]
unsafe fn block_fp8(
    xt: &[bf16],
    rows: usize,
    k: usize,
    src: Fp8Source<'_>,
    w: &Fp8Rows<'_>,
    start: usize,
    tiles: usize,
    y: *mut f32,
    ld: usize,
) {
    let chunks = k / CHUNK;
    let per_block = w.block_cols / CHUNK;
    let x_tile = X_TILE_ROWS * CHUNK;
    let tile = PANEL_ROWS * CHUNK;
    // A chunk's tiles widened as needed (`Fp8Source::Bytes`): 4 KiB, each row on a line.
    let mut widened = [TileRow([bf16::ZERO; CHUNK]); SUM_TILES * PANEL_ROWS];
    // One pointer for the writes and the tile loads alike.
    let jit = widened.as_mut_ptr() as *mut bf16;
    let (from, panel) = match src {
        Fp8Source::Panels(p) => (p.as_ptr(), chunks * tile),
        Fp8Source::Bytes { .. } => (jit as *const bf16, tile),
    };
    let base: [*const bf16; SUM_TILES] =
        std::array::from_fn(|t| from.add(t.min(tiles - 1) * panel));
    let (step, stride) = match src {
        Fp8Source::Panels(_) => (tile, 2 * CHUNK),
        Fp8Source::Bytes { .. } => (0, 2 * CHUNK),
    };
    // Each panel's 16 rows lie in one block of rows (fp8_in_use): one scale a panel and block.
    let scales: [&[f32]; SUM_TILES] =
        std::array::from_fn(|t| w.row_scales(start + PANEL_ROWS * t.min(tiles - 1)));
    asm!("ldtilecfg [{}]", in(reg) ALL_FULL.0.as_ptr(), options(nostack, readonly));
    let mut sums = [[0.0f32; X_TILE_ROWS]; PANEL_ROWS];
    let mut totals = [[[0.0f32; X_TILE_ROWS]; PANEL_ROWS]; SUM_TILES];
    for g in 0..rows.div_ceil(X_TILE_ROWS) {
        for t in totals.iter_mut() {
            *t = [[0.0; X_TILE_ROWS]; PANEL_ROWS];
        }
        let xg = xt.as_ptr().add(g * chunks * x_tile);
        // Only the group's rows of x are summed into the totals (the tiles' other columns are
        // zero rows' products).
        let n_rows = (rows - g * X_TILE_ROWS).min(X_TILE_ROWS);
        for b in 0..k / w.block_cols {
            zero_sums();
            for c in b * per_block..(b + 1) * per_block {
                if let Fp8Source::Bytes { interleaved } = src {
                    widen_chunk(w, k, start, tiles, c, interleaved, jit, tile);
                }
                chunk_step(xg.add(c * x_tile), &base, c * step, stride);
            }
            for (t, total) in totals.iter_mut().enumerate().take(tiles) {
                store_sums(t, &mut sums);
                let s = scales[t][b] * FP8_SCALE_HEADROOM;
                for (tot, sum) in total.iter_mut().zip(&sums) {
                    for (a, v) in tot[..n_rows].iter_mut().zip(&sum[..n_rows]) {
                        *a = v.mul_add(s, *a);
                    }
                }
            }
        }
        for (t, total) in totals.iter().enumerate().take(tiles) {
            // total[m][n]: weight row start + 16t + m against x row 16g + n.
            for (m, col) in total.iter().enumerate() {
                for (n, v) in col[..n_rows].iter().enumerate() {
                    *y.add((g * X_TILE_ROWS + n) * ld + PANEL_ROWS * t + m) = *v;
                }
            }
        }
    }
    asm!("tilerelease", options(nostack, nomem));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testutil::{
        bf16s, is_the_products_of_rounded_inputs, rows_alone_and_layouts_agree, LaidOutKernel, Rng,
    };

    /// `w` (whole cache lines of bf16) on cache lines, as the loader's arena places weights.
    fn on_lines(w: &[bf16]) -> Lines {
        let mut lines = Lines::zeros(w.len());
        lines.as_mut_slice().copy_from_slice(w);
        lines
    }

    /// True (and says so) where this process does not run AMX: the test has nothing to run.
    fn skipped() -> bool {
        if !enabled() {
            eprintln!("skipped: no AMX-BF16 here (or {AMX_ENV}=0)");
        }
        !enabled()
    }

    #[test]
    fn amx_matmul_is_the_products_of_rounded_inputs() {
        if skipped() {
            return;
        }
        // Rows of one and several tiles of x, outputs of part, one and several tiles and
        // blocks, k of one and many chunks.
        is_the_products_of_rounded_inputs(
            matmul_stored,
            &[
                (1, 32, 1),
                (1, 64, 16),
                (3, 96, 17),
                (8, 1024, 75),
                (16, 256, 64),
                (17, 128, 130),
                (40, 320, 200),
            ],
        );
    }

    #[test]
    fn amx_row_is_bit_identical_alone_or_in_a_batch_in_either_layout() {
        if skipped() {
            return;
        }
        let kernel = LaidOutKernel {
            stored: matmul_stored,
            lay: |w, k, out| panels_fit(k, out).then(|| panel_rows(w, k)),
            laid: matmul_panels,
        };
        // (k, out): a part tile (stored only), whole panels of one and several blocks.
        rows_alone_and_layouts_agree(
            &kernel,
            &[(1024, 75), (64, 16), (320, 96), (128, 208)],
            &[1, 2, 7, 15, 16, 17, 33, 49, 64],
        );
    }

    /// FP8 weights on AMX: each block of k's `tdpbf16ps` chain (the bf16 kernel's over that
    /// block's columns, the weights widened to e4m3 / 2^8, exact in bf16) times the block's
    /// scale · 2^8, fused into the total block by block; the same bits stored or interleaved,
    /// alone or batched.
    #[test]
    fn amx_fp8_scales_each_blocks_chain_into_the_totals() {
        if skipped() {
            return;
        }
        let mut rng = Rng::fresh();
        let seed = rng.0;
        for (out, k, block) in [
            (32, 256, (16, 128)),
            (128, 256, (128, 128)),
            (80, 64, (16, 32)),
        ] {
            let m = crate::kernels::testutil::random_fp8(&mut rng, out, k, block);
            let w = m.view();
            assert!(
                fp8_kernel_fits(&w, k),
                "[{out}, {k}] {block:?} fits the AMX kernel"
            );
            let w16: Vec<bf16> =
                m.q.iter()
                    .map(|b| {
                        let v = super::super::matmul_fp8::widened(*b);
                        assert_eq!(bf16::from_f32(v).to_f32(), v, "byte {b:#04x} exact in bf16");
                        bf16::from_f32(v)
                    })
                    .collect();
            let laid = super::super::matmul_fp8::interleave(&m.q, k);
            let bc = block.1;
            for rows in [1, 3, 16, 17, 40] {
                let what = format!("seed {seed} [{out}, {k}] {block:?} rows {rows}");
                let x = rng.vec(rows * k);
                let mut want = vec![0f32; rows * out];
                for b in 0..k / bc {
                    let cols = |v: &[f32]| -> Vec<f32> {
                        v.chunks_exact(k)
                            .flat_map(|r| r[b * bc..(b + 1) * bc].to_vec())
                            .collect()
                    };
                    let wb: Vec<bf16> = w16
                        .chunks_exact(k)
                        .flat_map(|r| r[b * bc..(b + 1) * bc].to_vec())
                        .collect();
                    let mut chain = vec![0f32; rows * out];
                    matmul_stored(&cols(&x), &wb, bc, &mut chain);
                    for (i, (want, t)) in want.iter_mut().zip(&chain).enumerate() {
                        let o = i % out;
                        let s = m.scales[(o / block.0) * (k / bc) + b] * FP8_SCALE_HEADROOM;
                        *want = t.mul_add(s, *want);
                    }
                }
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                let mut got = vec![0f32; rows * out];
                matmul_fp8(&x, w, k, &mut got, false);
                assert_eq!(bits(&got), bits(&want), "{what}");
                let mut inter = vec![0f32; rows * out];
                matmul_fp8(&x, Fp8Rows { q: &laid, ..w }, k, &mut inter, true);
                assert_eq!(bits(&inter), bits(&want), "{what} interleaved");
                for r in [0, rows - 1] {
                    let mut one = vec![0f32; out];
                    matmul_fp8(&x[r * k..(r + 1) * k], w, k, &mut one, false);
                    assert_eq!(
                        bits(&one),
                        bits(&got[r * out..(r + 1) * out]),
                        "{what} row {r}"
                    );
                }
            }
        }
    }

    #[test]
    fn amx_sums_a_chunk_before_rounding() {
        if skipped() {
            return;
        }
        // 2^25 (its f32 neighbours 4 apart) plus 32 products of 1 in one chunk: one rounding of
        // the chunk's sum gives 2^25 + 32; one rounding a product would leave 2^25. The first
        // chunk gives 2^25 as one product (2^12 · 2^13); the second the 32 ones.
        let k = 64;
        let mut w = vec![0.0f32; k];
        let mut x = vec![0.0f32; k];
        w[0] = 4096.0;
        x[0] = 8192.0;
        for j in 32..64 {
            w[j] = 1.0;
            x[j] = 1.0;
        }
        let mut y = vec![0.0; 1];
        matmul_stored(&x, &bf16s(&w), k, &mut y);
        assert_eq!(y[0], 2f32.powi(25) + 32.0);
    }

    /// An 8-stream MoE round's expert calls of the A3B slice's shape: 64 distinct experts (gate
    /// and up `[512, 2,048]`, down `[2,048, 512]`, 6 MiB each, 384 MiB in all, from memory) in
    /// panels, each over 1-2 gathered rows, the experts in parallel as the MoE runs them; GB/s of
    /// weights, median of 9, against the plain read of the same bytes in the same loop. A timing,
    /// not a test: `cargo test --release -p backend-cpu --lib -- --ignored amx_expert_speed
    /// --nocapture`.
    #[test]
    #[ignore]
    fn amx_expert_speed() {
        if skipped() {
            return;
        }
        let (h, i, experts) = (2048, 512, 64);
        let mut rng = Rng::fresh();
        let mk = |rng: &mut Rng, out: usize, k: usize| {
            on_lines(&panel_rows(&bf16s(&rng.vec(out * k)), k))
        };
        let set: Vec<[Lines; 3]> = (0..experts)
            .map(|_| [mk(&mut rng, i, h), mk(&mut rng, i, h), mk(&mut rng, h, i)])
            .collect();
        let bytes = (experts * 3 * i * h * 2) as f64;
        for rows in [1, 2] {
            let x = rng.vec(rows * h);
            let mut times = vec![];
            for _ in 0..9 {
                let t = std::time::Instant::now();
                set.par_iter().for_each(|[g, u, d]| {
                    let (mut yg, mut yu) = (vec![0.0; rows * i], vec![0.0; rows * i]);
                    matmul_panels(&x, g.as_slice(), h, &mut yg);
                    matmul_panels(&x, u.as_slice(), h, &mut yu);
                    let mut y = vec![0.0; rows * h];
                    matmul_panels(&yg, d.as_slice(), i, &mut y);
                });
                times.push(t.elapsed().as_secs_f64());
            }
            times.sort_by(f64::total_cmp);
            let t = times[4];
            let mut reads = vec![];
            for _ in 0..9 {
                let t = std::time::Instant::now();
                let sum: u64 = set
                    .par_iter()
                    .map(|m| {
                        m.iter()
                            .map(|w| {
                                w.as_slice()
                                    .iter()
                                    .step_by(32)
                                    .map(|v| v.to_bits() as u64)
                                    .sum::<u64>()
                            })
                            .sum::<u64>()
                    })
                    .sum();
                std::hint::black_box(sum);
                reads.push(t.elapsed().as_secs_f64());
            }
            reads.sort_by(f64::total_cmp);
            eprintln!(
                "{rows} rows: experts {:.2} ms ({:.1} GB/s); a read of every line {:.2} ms ({:.1} GB/s)",
                t * 1e3,
                bytes / t / 1e9,
                reads[4] * 1e3,
                bytes / reads[4] / 1e9
            );
        }
    }

    /// The kernel against the `vdpbf16ps` one on the same weights from memory (the small
    /// hybrid's lm_head, 311 MiB) and in cache (6,144 × 1,024), stored and in panels, median of
    /// several alternating runs. A timing, not a test: `cargo test --release -p backend-cpu
    /// --lib -- --ignored amx_speed --nocapture`.
    #[test]
    #[ignore]
    fn amx_speed() {
        if skipped() || !crate::kernels::matmul_bf16_input::available() {
            return;
        }
        use crate::kernels::matmul_bf16_input::matmul_interleaved;
        use crate::kernels::matmul_fast::interleave_rows;
        let mut rng = Rng::fresh();
        for (out, k, runs) in [(151_936, 1024, 7), (6144, 1024, 101)] {
            // On cache lines, as the loader's arena places weights.
            let w = on_lines(&bf16s(&rng.vec(out * k)));
            let (inter, panels) = (
                on_lines(&interleave_rows(w.as_slice(), k)),
                on_lines(&panel_rows(w.as_slice(), k)),
            );
            let (w, inter, panels) = (w.as_slice(), inter.as_slice(), panels.as_slice());
            for rows in [1, 2, 4, 8, 16, 64, 128] {
                let x = rng.vec(rows * k);
                let mut y = vec![0.0f32; rows * out];
                let mut t: [Vec<f64>; 3] = [vec![], vec![], vec![]];
                for _ in 0..runs {
                    let s = std::time::Instant::now();
                    matmul_interleaved(&x, inter, k, &mut y);
                    t[0].push(s.elapsed().as_secs_f64());
                    let s = std::time::Instant::now();
                    matmul_stored(&x, w, k, &mut y);
                    t[1].push(s.elapsed().as_secs_f64());
                    let s = std::time::Instant::now();
                    matmul_panels(&x, panels, k, &mut y);
                    t[2].push(s.elapsed().as_secs_f64());
                }
                let [v, s, p] = t.map(|mut t| {
                    t.sort_by(f64::total_cmp);
                    t[t.len() / 2] * 1e3
                });
                let gb = (out * k * 2) as f64 / 1e6;
                eprintln!(
                    "{out} x {k}, {rows} rows: vdpbf16ps {v:.3} ms ({:.1} GB/s), AMX stored \
                     {s:.3} ms ({:.1} GB/s), AMX panels {p:.3} ms ({:.1} GB/s)",
                    gb / v,
                    gb / s,
                    gb / p
                );
            }
        }
    }
}
