//! The CUDA C kernels (one `.cu` file per concept, compiled together at run time with NVRTC for
//! sm_90) and a typed launcher for each.
//!
//! The model's sizes are `#define`d in front of the sources (see [`Dims::defines`]), so loops over
//! head dims and experts have compile-time bounds and per-thread arrays stay in registers.
//! Every kernel is batch-invariant by construction: see `common.cu`.

use crate::device::{Arg, Gpu, Launches, TensorMap};
use crate::CudaError;
use cudarc::driver::CudaFunction;
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions, Ptx};
use model::{Arch, Config, KvDtype, LinearAttentionConfig, MoeConfig};

const COMMON: &str = include_str!("common.cu");
const MATMUL: &str = include_str!("matmul.cu");
const NORM: &str = include_str!("norm.cu");
const DELTANET: &str = include_str!("deltanet.cu");
const ATTENTION: &str = include_str!("attention.cu");
const MOE: &str = include_str!("moe.cu");
const MTP: &str = include_str!("mtp.cu");
const DRAW: &str = include_str!("draw.cu");
const DENSE: &str = include_str!("dense.cu");
const MATMUL_WG: &str = include_str!("matmul_wg.cu");
const MATMUL_WALK: &str = include_str!("matmul_walk.cu");

/// `source` compiled by NVRTC for `arch`, or its PTX read back from the kernel cache
/// ([`ptx_cache`]: the same source compiled before with the same options by the same NVRTC); a
/// compile error starts with `what`.
fn module_ptx(source: String, arch: &'static str, what: &str) -> Result<Ptx, CudaError> {
    // cudarc's dynamic loading panics on a missing library: say so as the driver's check does.
    // SAFETY: only looks the library up.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(CudaError::Unavailable(
            "the NVRTC library (libnvrtc) was not found: install the CUDA toolkit's NVRTC".into(),
        ));
    }
    let opts = CompileOptions {
        arch: Some(arch),
        ..Default::default()
    };
    // Every option the compile takes and NVRTC's version: what besides the source shapes the PTX.
    let version = nvrtc_version();
    let cache = match version {
        Some(_) => ptx_cache::PtxCache::from_env(),
        None => ptx_cache::PtxCache::off(),
    };
    let tag = format!("{opts:?} nvrtc {}", version.unwrap_or_default());
    let ptx = cache.ptx(&source, &tag, || {
        compile_ptx_with_opts(&source, opts.clone())
            .map(|ptx| ptx.to_src())
            .map_err(|e| CudaError::Compile(format!("{what}{e:?}")))
    })?;
    Ok(Ptx::from_src(ptx))
}

/// NVRTC's version as "major.minor", if it says (without it nothing is cached: a later NVRTC
/// could not be told apart).
fn nvrtc_version() -> Option<String> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: nvrtcVersion writes two ints through the pointers it is given, nothing else (the
    // library is there: `module_ptx` checked).
    let status = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    (status == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS).then(|| format!("{major}.{minor}"))
}

/// The GPU the kernels are built for (Hopper: H100, H200).
const ARCH: &str = "sm_90";
/// The architecture of the warpgroup matmul's module (`wgmma` needs sm_90a's features).
const ARCH_WGMMA: &str = "sm_90a";

// Block shapes, defined here only: the kernels get them as `#define`s of the same names.
/// Warps per block of the matmul kernels: they split k (fixed by k alone) of one tile of 16 rows
/// × 1 or MMA_NT n-tiles of 8 outputs on the tensor cores.
const MMA_WARPS: u32 = 8;
/// Blocks below which an FP8 matmul launches `matmul_fp8_narrow` (one n-tile a block, four times
/// the blocks): two blocks for each of the H200's 132 multiprocessors, so a decode step's narrow
/// matrices still spread over the whole GPU. Both kernels compute the same bits.
const FP8_WIDE_MIN_BLOCKS: usize = 2 * 132;
/// Chunks of k a warp of `matmul_bf16_narrow` loads before it multiplies any: at one row, the
/// narrow q/k/v, o and down matrices of a Qwen3-4B step read their weights at 1.7–2.0 TB/s one
/// chunk at a time (320–768 blocks of 8 warps, each waiting on its 1 KiB), the wide gate/up at
/// 3.2 (ncu, bench/RESULTS.md session 6). The bits do not depend on it.
const MMA_NARROW_DEPTH: usize = 2;
/// `FLASHLANE_MATMUL_NARROW_DEPTH=N` (1–8) compiles the narrow kernel with N chunks a warp in
/// flight instead, and above 2 with launch bounds of one block a multiprocessor
/// (MMA_NARROW_ONE_BLOCK: at 4 and two blocks, x's chunks ahead spill 304 bytes; for A/B runs of
/// one binary: the bits do not change). Depth 4 lost at one stream
/// on Qwen3-4B, whose narrow matrices make 320–768 blocks (two a multiprocessor or more: 224
/// against 260 tok/s, session 6), and was even on the A3B slice; not measured where the narrow
/// grid leaves a multiprocessor one block at most — Qwen3-0.6B's o and down projections, 128
/// blocks of 4 and 6 chunks a warp (k 2,048 and 3,072), whose first DEPTH chunks a warp then load
/// before the kernel ahead ends (the early weights): at 4, all of the o projection's.
const MATMUL_NARROW_DEPTH_ENV: &str = "FLASHLANE_MATMUL_NARROW_DEPTH";

/// The number the environment variable `name` holds, if any (the A/B switches' bounds, depths and
/// counts; an unset or unparsable value is none, and each caller keeps its default).
fn env_number(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// An A/B switch that is on unless the variable `name` is "0".
fn env_on(name: &str) -> bool {
    std::env::var(name).map_or(true, |v| v != "0")
}

/// An A/B switch that is off unless the variable `name` is "1".
fn env_asked(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == "1")
}

/// The narrow kernel's depth: [`MATMUL_NARROW_DEPTH_ENV`]'s within 1–8, else [`MMA_NARROW_DEPTH`].
fn narrow_depth() -> usize {
    env_number(MATMUL_NARROW_DEPTH_ENV)
        .filter(|depth| (1..=8).contains(depth))
        .unwrap_or(MMA_NARROW_DEPTH)
}
/// Chunks of k a warp of `matmul_bf16_t3_deep` / `_t4_deep` loads before it multiplies any: the
/// narrow kernel's depth, for wide blocks of one row tile that leave each multiprocessor one
/// block at most ([`deepens`]). The bits do not depend on it.
const MMA_DEEP_DEPTH: usize = 2;
/// Chunks of k a warp of `matmul_fp8_narrow` / `matmul_fp8` loads before it multiplies any: an
/// FP8 chunk is half a bf16 chunk's bytes (16 a lane), so twice the chunks keep as many bytes in
/// flight (4 registers a chunk and n-tile) where a matrix has few blocks. The wide kernel has
/// blocks enough, and a chunk's e4m3 conversions keep its warps busy: at one row the A3B
/// slice's DeltaNet qkvz takes 11.9 µs at depth 1 against 14.6 at 2, Qwen3-4B's gate/up 25.2
/// against 28.8 (`kernel_define_times`, bench/RESULTS.md session 18).
const MMA_FP8_NARROW_DEPTH: usize = 4;
const MMA_FP8_WIDE_DEPTH: usize = 1;
/// 0: the tensor-core tiles split x into bf16 hi and lo in every block. 1 (only in
/// `kernel_define_times`'s recompiled kernels) times them as if x came split already (the
/// products meaningless): what splitting x once, where it is written, would save — at 64
/// rows the matmuls run at ~70 TF and ~1.1 TB/s, bound by neither (bench/RESULTS.md session 18).
/// A probe, not a chain. Measured on the H100 (session 51): 12 % off a one-row 4,096 → 2,048
/// projection, 4–6 % onto the MoE's bf16 tiles of 4–64 rows.
const MMA_X_PRESPLIT: usize = 0;
/// Chunks of k a warp of the MoE's expert matmuls loads before it multiplies any (bf16 and FP8
/// experts): a decode round's experts are tiles of one or two rows, 32 blocks an expert for
/// gate/up (k = hidden, 4 chunks a warp at Qwen3-Next's 2,048), each block's warps waiting on
/// one chunk at a time at depth 1. Depth 2 keeps two blocks a multiprocessor (128 registers a
/// thread for FP8 gate/up; 4 takes 158, one block). The bits do not depend on it.
const MOE_BF16_DEPTH: usize = 2;
const MOE_FP8_DEPTH: usize = 2;
/// Blocks of the tensor-core kernels a multiprocessor must hold at once (their launch bounds):
/// ptxas then keeps them to 128 registers a thread. At one block a multiprocessor (130
/// registers: the FP8 matmul with its chunks' scales in flight) a decode step's few hundred
/// blocks run in two waves. The deep kernels alone are bound to one block a multiprocessor
/// (their grids put no more there: [`deepens`]), for the registers of their x ahead.
const MMA_MIN_BLOCKS: usize = 2;
/// Elements of k a warp of the matmul takes at a time (4 lanes × 16): an FP8 matrix's column
/// blocks must hold whole chunks, so that a chunk has one scale.
const MMA_CHUNK: usize = 64;
/// Chunks of x and W `matmul_bf16_tiled` keeps in flight (cp.async stages in shared memory):
/// one being multiplied while the next ones load.
const MMT_STAGES: usize = 3;
/// 0: the tiles as they are. 1 and 2 (only in `tiled_define_times`'s recompiled kernels) time
/// their copies without the products and the products without the weights' copies. Probes,
/// not chains.
const MMT_PROBE: usize = 0;
/// A matmul's first row tile pulls its weight rows into L2 before it waits for the kernel ahead
/// (so a decode step's matrix loads while that kernel runs) only where the whole matrix is at
/// most this many bytes (16 MiB: every matrix of Qwen3-0.6B but its lm_head, the A3B slice's
/// output projections). Larger matrices decode faster without (bench/RESULTS.md session 35, 1
/// and 8 streams against prefetching every matrix: Qwen3-4B +11 %, Qwen3-8B +18 %, the A3B
/// slice +4 % at one stream; no prefetch at all cost Qwen3-0.6B 3 %). Our reading, not
/// measured by itself: a large matrix's first wave alone pulls tens of MB into the 50 MB L2,
/// evicting rows before their loads. `FLASHLANE_MATMUL_PREFETCH_MAX_MB=N` moves the bound (an
/// A/B switch: the same bits).
const MMA_PREFETCH_MAX_BYTES: usize = 16 << 20;
const MATMUL_PREFETCH_MAX_MB_ENV: &str = "FLASHLANE_MATMUL_PREFETCH_MAX_MB";
/// In dense models the 16-row bf16 matmuls load their first chunks of weights into registers
/// before they wait for the kernel ahead, and find their input rows after (`InputsAfterWait` in
/// matmul.cu): under programmatic dependent launch a decode step's matmul then has its first
/// weights on the way when the norm or attention ahead of it ends, instead of starting its loads
/// then. The same loads of the same values: the same bits. Measured on the H200 (bench/RESULTS.md
/// session 44, 2 rounds, decode at 1 / 2 / 8 streams): Qwen3-0.6B +1.5 / +2.4 / +3.3 %, Qwen3-4B
/// +2.1 / +1.9 / +2.3 %; the A3B slice +1.3 % at one stream but −1.0 % at 2 and 8, and the FP8
/// kernels (Qwen3-4B-FP8) 0–2 % slower decode and 5 % slower prompts, so hybrid models and FP8
/// weights wait first, as before. `FLASHLANE_MATMUL_EARLY_WEIGHTS=0` / `=1` turns it off / on
/// for the bf16 matmuls of any model (A/B runs: the same bits).
const MATMUL_EARLY_WEIGHTS_ENV: &str = "FLASHLANE_MATMUL_EARLY_WEIGHTS";
/// In dense models the tiles (`matmul_bf16_tiled`, its k splits) copy their first stages'
/// weights into shared memory before they wait for the kernel ahead, and x after
/// (`MMT_EARLY_WEIGHTS` in matmul.cu): the 16-row kernels' early weights for decode rounds of
/// 17–64 streams and prompts. The same copies of the same values: the same bits (the matmul,
/// SwiGLU and warpgroup kernel tests with it on, H100, bench/RESULTS.md session 46). Measured
/// there (2 rounds, decode at 1 / 32 / 48 / 64 streams): Qwen3-4B +0.4 / +5.4 / +2.4 / +1.6 %,
/// Qwen3-8B +0.3 / +3.5 / +1.7 / +1.4 %, prompts within ±0.7 %; hybrid models, not measured,
/// wait first as before. `FLASHLANE_MATMUL_TILED_EARLY_WEIGHTS=0` / `=1` turns it off / on for
/// any model (A/B runs: the same bits).
const MATMUL_TILED_EARLY_WEIGHTS_ENV: &str = "FLASHLANE_MATMUL_TILED_EARLY_WEIGHTS";
/// `FLASHLANE_MATMUL_EVICT_FIRST=1` compiles the tiles (`matmul_bf16_tiled`, its k splits) to
/// copy their weights under an L2 evict-first policy (`MMT_WEIGHTS_EVICT_FIRST` in matmul.cu),
/// so that a matrix streaming through L2 gives way before x's split rows and the k split's
/// partials, which its fold reads right after (Qwen3-4B at 64 streams writes and folds ~60 MB
/// of partials a layer beside ~200 MB of weights; its folds took 991 of a round's 8,630 µs in
/// session 52's profile). A cache hint: the same bits. Off: against the default on the H100
/// (session 57, bench/RESULTS.md) Qwen3-4B decoded 0.998× / 1.016× / 1.001× at 1 / 32 / 64
/// streams, within the runs' spread (an A/B switch).
const MATMUL_EVICT_FIRST_ENV: &str = "FLASHLANE_MATMUL_EVICT_FIRST";
/// Threads of a `matmul_bf16_tiled` block (8 warps, each 32 rows × NT n-tiles of the tile).
const MMT_THREADS: u32 = 256;
/// Rows and blocks from which a bf16 matmul runs `matmul_bf16_tiled` instead of the 16-row
/// kernels. Measured on the H200 with the tiles over split rows (`matmul_kernel_times`,
/// bench/RESULTS.md session 21): a tiled block walks all of k itself, so with few blocks each
/// one's chain of chunks is latency-bound and the 16-row kernels, which split k over their
/// warps, are faster (Qwen3-4B's 2,560-output o projection at 128 rows: 40 blocks, 96 µs
/// against 39); from ~80 blocks the tiles, which read a weight once per 64 rows and x once per
/// 128 outputs, won in those timings (Qwen3-4B's q/k/v at 128 rows, 96 blocks: 39 against 55
/// µs). Those timings launch one kernel after another, each overlapping the last one's tail
/// (programmatic dependent launch), which likely flatters a grid of a wave and a little: end to end,
/// Qwen3-4B's gate/up tiled at 64 rows (152 blocks, 68 against 91 µs alone) made a 64-stream
/// decode 5 % slower. So one row block (up to 64 rows) runs tiled only with many waves of
/// blocks — an lm_head (1,187 blocks at 64 rows: 286 against 485 µs; the A3B slice's 64-stream
/// decode +2.6 %) — and more row blocks from 128 blocks (a prefill chunk). Under 48 rows the
/// 16-row kernels win (that gate/up at 32 rows: 53 µs against the tiles' 68).
const MATMUL_TILED_MIN_ROWS: usize = 48;
const MATMUL_TILED_MIN_BLOCKS: usize = 128;
const MATMUL_TILED_MIN_BLOCKS_ONE_ROW_BLOCK: usize = 512;
/// Wide-kernel blocks (16 rows × 32 outputs) up to which a one-row-tile matmul runs the narrow
/// kernel: Qwen3-0.6B's 1,024-output o and down projections (32 blocks) at up to 16 rows ran
/// faster narrow (by 7–25 %), Qwen3-4B's matrices (80 blocks and more) and every matrix at more
/// rows ran faster wide, by up to 2.7× at 32–48 rows (`matmul_kernel_times`). With the A3B
/// slice's 2,048-output projections (64 blocks, k = 4,096) narrow, its decode ran 1.6 % and
/// 1.3 % faster at 1 and 8 streams (bench/RESULTS.md session 14). Qwen3-1.7B's o and down
/// projections (2,048 outputs: 64 blocks) follow that rule unmeasured.
const MATMUL_NARROW_MAX_BLOCKS: usize = 64;
/// `FLASHLANE_MATMUL_NARROW_MAX_BLOCKS=N` moves that bound (for A/B runs of one binary: the bits
/// do not change); 63 gives the rule before session 14. A value that is not a number leaves 64.
pub const MATMUL_NARROW_MAX_BLOCKS_ENV: &str = "FLASHLANE_MATMUL_NARROW_MAX_BLOCKS";
/// A bf16 matmul of 48–64 rows that the tiles do not take (a decode round of that many streams)
/// runs `matmul_bf16_tiled_split` and its fold (the same bits): each weight read once, by 8
/// times the tiles' blocks with an eighth of the chain each, in models where
/// [`model_splits_k`]. `FLASHLANE_MATMUL_SPLIT_K=0` keeps every such matmul on the 16-row
/// kernels, `=1` splits them in any model (A/B runs of one binary: the bits do not change).
pub const MATMUL_SPLIT_K_ENV: &str = "FLASHLANE_MATMUL_SPLIT_K";
/// Rows from which the k split runs, and to which (one row block). At 32 rows it lost (the
/// Qwen3-4B shape's 32-stream decode 4,509 → 4,386 tok/s; gate/up 52.6 → 61.0 µs).
const MATMUL_SPLIT_K_MIN_ROWS: usize = 48;
/// Where k splits, rounds of 17–32 rows (which the 64-row split lost at) split it too, on blocks
/// of [`SPLIT32_ROWS`] rows (`matmul_bf16_tiled_split32`, the same partials and bits): Qwen3-4B
/// and -8B decode 4–8 % faster at 17–32 streams (bench/RESULTS.md sessions 37–38).
/// `FLASHLANE_MATMUL_SPLIT32=0` keeps those rounds' bf16 matmuls on the 16-row kernels (A/B
/// runs; FP8 rounds split for the warpgroup split whatever it says: [`MATMUL_WG_SPLIT_ENV`]).
pub const MATMUL_SPLIT32_ENV: &str = "FLASHLANE_MATMUL_SPLIT32";
/// The k splits on mma.sync (`matmul_bf16_tiled_split`: bf16 rounds of 48–64 rows where k
/// splits, and the prompts' splits; `_split32`: rounds of 17–32) may run as
/// `matmul_bf16_tiled_split_fold` / `matmul_bf16_tiled_split32_fold` (or, for a dense MLP's
/// gate/up with its SwiGLU, their `_fold_swiglu`): a tile's MMT_RESIDUES blocks are one
/// cluster, each keeps its partial in its shared memory, and the cluster folds them there in
/// residue order — the fold's sum, so the same bits (kernel test) — with no partials written to
/// memory and read back, and no fold launch. Qwen3-4B at 64 streams wrote and read ~63 MB of
/// partials a layer beside ~200 MB of weights (its gate/up's alone 40 MB each way), and its
/// folds took 586 of a round's 7,668 µs on the H200 (session 56).
///
/// Unset, every split folds by [`ClusterFold::Waves`]. On the H100 (bench/RESULTS.md, two
/// interleaved rounds each): rounds of 48–64 rows (session 59) Qwen3-8B 1.024× / 1.035× /
/// 1.073× at 48 / 56 / 64 streams, Qwen3-4B (where the rule folds every split, as `=1` does)
/// 0.992–0.995× / 1.042× / 1.089–1.093× (sessions 58–59), prompts within ±1.5 %; rounds of
/// 17–32 rows (the 32-row splits; sessions 63–64, against folding none of them) 1.020× on
/// Qwen3-4B at 32 streams, Qwen3-8B 1.000× / 1.080× and -0.6B 1.002× / 1.003× at 24 / 32.
/// Rounds of up to 16 rows split no k. `FLASHLANE_MATMUL_CLUSTER_FOLD=0` folds none (partials
/// and a fold launch), `=1` every such split, `=waves` is the default (A/B runs of one binary:
/// the bits do not change).
pub const MATMUL_CLUSTER_FOLD_ENV: &str = "FLASHLANE_MATMUL_CLUSTER_FOLD";

/// Whether the k splits on mma.sync fold in their clusters ([`MATMUL_CLUSTER_FOLD_ENV`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClusterFold {
    /// Partials to memory and a fold launch (`=0`).
    Off,
    /// Every such split folds in its clusters (`=1`).
    All,
    /// A split folds in its clusters where they take no more waves than its unfolded blocks,
    /// and a gate/up's split with its SwiGLU always (the default, `=waves`): a cluster's
    /// MATMUL_RESIDUES blocks must run at once within one GPC, so a GPU may hold fewer of them
    /// than its block slots allow. Qwen3-8B's o and down make 32 clusters of 8 where the H100 runs 30 at once:
    /// folded, 29.7 and 67.7 µs a layer at 64 rows against 23.8 and 49.3 unfolded (split and
    /// fold launch); Qwen3-4B's make 20 and gain 2–3 µs. A gate/up takes a wave more folded
    /// (152 and 192 clusters) yet gains 12 and 21 µs a layer, its SwiGLU fold launch (the
    /// largest, reading both halves' partials) gone (kernel timelines, session 59). Per split
    /// kind (the 64-row blocks, the 32-row ones): clusters and unfolded blocks the GPU runs
    /// at once, from the driver's occupancy queries.
    Waves {
        clusters_at_once: [usize; 2],
        blocks_at_once: [usize; 2],
    },
}

/// A k split a cluster fold may take: its tiles (each MATMUL_RESIDUES blocks, or one cluster
/// folded), on the 32-row blocks or the 64-row ones, a gate/up's with its SwiGLU or not.
#[derive(Clone, Copy, Debug)]
struct SplitShape {
    tiles: usize,
    on_32_rows: bool,
    swiglu: bool,
}

/// Whether the k split `split` folds in its clusters.
fn folds_in_clusters(fold: ClusterFold, split: SplitShape) -> bool {
    let SplitShape {
        tiles,
        on_32_rows,
        swiglu,
    } = split;
    match fold {
        ClusterFold::Off => false,
        ClusterFold::All => true,
        ClusterFold::Waves {
            clusters_at_once,
            blocks_at_once,
        } => {
            let kind = usize::from(on_32_rows);
            let (clusters, blocks) = (clusters_at_once[kind], blocks_at_once[kind]);
            clusters > 0
                && blocks > 0
                && (swiglu
                    || tiles.div_ceil(clusters) <= (tiles * MATMUL_RESIDUES).div_ceil(blocks))
        }
    }
}

/// [`ClusterFold::Waves`]' counts for the fold kernels `folded` (64-row, 32-row blocks) and the
/// unfolded splits `unfolded`, whose blocks take `shared` bytes each: clusters of the one and
/// blocks of the other the GPU runs at once.
fn cluster_fold_waves(
    gpu: &Gpu,
    folded: [&CudaFunction; 2],
    unfolded: [&CudaFunction; 2],
    shared: [usize; 2],
) -> Result<ClusterFold, CudaError> {
    let multiprocessors = gpu.multiprocessors()?;
    let mut clusters_at_once = [0; 2];
    let mut blocks_at_once = [0; 2];
    for kind in 0..2 {
        let config = cudarc::driver::LaunchConfig {
            // The grid does not bound the count; one of Qwen3-8B's o projection at 64 rows.
            grid_dim: (1, 32, MATMUL_RESIDUES as u32),
            block_dim: (MMT_THREADS, 1, 1),
            shared_mem_bytes: shared[kind] as u32,
        };
        // The plain fold kernel's count stands for its SwiGLU twin's too: the same block, the
        // same shared memory and launch bounds.
        clusters_at_once[kind] =
            folded[kind].occupancy_max_active_clusters(config, &gpu.stream)? as usize;
        blocks_at_once[kind] = unfolded[kind].occupancy_max_active_blocks_per_multiprocessor(
            MMT_THREADS,
            shared[kind],
            None,
        )? as usize
            * multiprocessors;
    }
    Ok(ClusterFold::Waves {
        clusters_at_once,
        blocks_at_once,
    })
}
/// Where k splits, a matmul of more than 64 rows (a
/// prompt) whose tiles would make fewer than [`MATMUL_TILED_MIN_BLOCKS`] blocks — which would
/// otherwise run on the 16-row kernels, reading each weight once per 16 rows (Qwen3-4B's o, down and
/// q/k/v for one 128-token prompt: 40–96 tile blocks) — runs the tiles with k split by residue
/// (8 times the blocks, each weight read once per 64 rows; the same chain, so the same bits):
/// a 128-token prompt's prefill 48 % faster on Qwen3-4B, 73 % on -8B (bench/RESULTS.md
/// session 38). `FLASHLANE_MATMUL_SPLIT_K_PROMPTS=0` keeps them on the 16-row kernels.
pub const MATMUL_SPLIT_K_PROMPTS_ENV: &str = "FLASHLANE_MATMUL_SPLIT_K_PROMPTS";
/// The partials such a split writes at most: its tiles are fewer than MATMUL_TILED_MIN_BLOCKS,
/// so rows · n_out < MATMUL_TILED_MIN_BLOCKS · MMT_ROWS · MMT_OUTS (1 M floats, 32 MB in all).
const SPLIT_K_PROMPT_PARTIALS_FLOATS: usize =
    MATMUL_RESIDUES * MATMUL_TILED_MIN_BLOCKS * MMT_ROWS * MMT_OUTS;
/// Rows of a `matmul_bf16_tiled_split32` block, and the rows from which it runs (16 and fewer
/// are one row tile of the 16-row kernels: each weight read once already).
const SPLIT32_ROWS: usize = 32;
const SPLIT32_MIN_ROWS: usize = 17;
pub const MATMUL_SPLIT_K_MAX_ROWS: usize = MMT_ROWS;
/// `FLASHLANE_MATMUL_SPLIT_K_MIN_OUTPUTS=N` splits only the matrices of N outputs or more (where
/// the model splits at all): a layer split in part, the case measured slower than none split or
/// all (bench/RESULTS.md session 22), kept reproducible for the profile that explains it. bf16
/// only: FP8 rounds split as [`MATMUL_WG_SPLIT_ENV`] says.
pub const MATMUL_SPLIT_K_MIN_OUTPUTS_ENV: &str = "FLASHLANE_MATMUL_SPLIT_K_MIN_OUTPUTS";
/// Split blocks (output tiles × residues) that a dense model's narrowest matrices (its o and
/// down projections, `hidden` outputs) need for its matmuls to split: Qwen3-4B's 2,560 outputs
/// make 160.
const MATMUL_SPLIT_K_MIN_LAYER_BLOCKS: usize = 160;
/// The split partials of a matmul: one `[rows, n_out]` f32 block per residue of the k split.
pub const MATMUL_RESIDUES: usize = MMA_WARPS as usize;

/// `FLASHLANE_MATMUL_TILED=0` keeps every bf16 matmul on the 16-row kernels (for A/B runs of one
/// binary: the bits do not change).
pub const MATMUL_TILED_ENV: &str = "FLASHLANE_MATMUL_TILED";

/// The warpgroup matmul (`matmul_wg.cu`, compiled for sm_90a) runs the bf16 matmuls the tiles
/// would take (the tiles' chain, so the same bits: the tensor-core probe of session 22 found a
/// wgmma sums a step as mma.sync does, whatever the k-slots): as [`wgmma_default_min_rows`]
/// says by default, from [`MMW_ROWS`] rows with `FLASHLANE_MATMUL_WGMMA=1` (the start fails
/// where it does not compile), never with `=0`.
pub const MATMUL_WGMMA_ENV: &str = "FLASHLANE_MATMUL_WGMMA";
/// Rows from which the warpgroup matmul takes the tiles' matmuls by default (see
/// [`wgmma_default_min_rows`]).
const MMW_MIN_ROWS: usize = 4096;
/// Rows and outputs of a `matmul_bf16_wgmma` block (two warpgroups of 64 rows, each an
/// m64n128k16 a step), and the k-chunks it keeps in flight.
const MMW_ROWS: usize = 128;
const MMW_OUTS: usize = 128;
const MMW_STAGES: usize = 4;
const MMW_THREADS: u32 = 256;
/// A stage: MMW_ROWS split rows of a chunk (64 words each) and MMW_OUTS rows of its bf16 weights.
const MMW_SHARED_BYTES: usize = MMW_STAGES * MMA_CHUNK * (MMW_ROWS * 4 + MMW_OUTS * 2);
/// `matmul_bf16_wg_split_fold`'s: MMT_STAGES chunks of 64 split rows and of 128 outputs' weights,
/// the tiles' stages (`mmt_shared_bytes`), so the tiles' occupancy and cluster-fold rule hold.
const MWF_SHARED_BYTES: usize = mmt_shared_bytes(MMT_STAGES, MMT_ROWS);
/// Where the warpgroup matmul's module is compiled (see [`MATMUL_WGMMA_ENV`]) and k splits, a
/// round's split (17–32 and 48–64 rows: [`SPLIT32_MIN_ROWS`], [`MATMUL_SPLIT_K_MIN_ROWS`]) may
/// run on the warpgroup MMA with the operands swapped (`matmul_bf16_wg_split_n32` / `_n64`,
/// `matmul_wg.cu`: the weights straight from memory into registers as the 16-row kernels load
/// them, x's split rows from shared memory; the tiles' split's partials and fold, so its bits).
/// Block-scaled FP8 weights too (`matmul_fp8_wg_split_*`: the FP8 kernels' chain, whose warps
/// are its residues), which otherwise run the 16-row kernels at any rows. Which splits take it
/// is [`wg_split_takes`]'; `FLASHLANE_MATMUL_WG_SPLIT=0` none, `=1` every one (A/B runs: the same
/// bits, `wgmma_matmul_gives_the_other_kernels_bits` and the FP8 matmul test on the H200).
pub const MATMUL_WG_SPLIT_ENV: &str = "FLASHLANE_MATMUL_WG_SPLIT";
/// Where the warpgroup matmul's module is compiled, the matmuls of a prompt (more rows than a
/// split takes) may run on the swapped operands of [`MATMUL_WG_SPLIT_ENV`]'s kernels unsplit
/// (`matmul_bf16_wg_swap`, `matmul_fp8_wg_swap`): blocks of 64 rows × 128 outputs, each walking
/// every residue as the tiles walk them, so the tiles' bits for bf16 and the FP8 kernels' for
/// FP8. Which take it is [`wg_swap_takes`]': the FP8 ones by default, `=1` bf16 too, `=0` none
/// (A/B runs: the same bits).
pub const MATMUL_WG_SWAP_ENV: &str = "FLASHLANE_MATMUL_WG_SWAP";
/// Where the warpgroup matmul's module is compiled, a bf16 k split on mma.sync's 64-row blocks
/// (rounds of 48–64 rows, a prompt's few tiles) may run on the warpgroup MMA instead
/// (`matmul_bf16_wg_split_fold`, `_fold_swiglu` where [`MATMUL_CLUSTER_FOLD_ENV`]'s rule folds
/// the tiles' split in its clusters, `matmul_bf16_wg_split_partials` and the fold launch
/// elsewhere): the tiles' blocks, grid, partials and fold, each block two warpgroups of
/// m64n64k16 over its 64 rows from
/// registers and its 128 outputs' weights from shared memory (`matmul_bf16_wgmma`'s products,
/// whose bits are the tiles'), over x split in the warpgroup's k order (`split_rows_wg`,
/// `split_rows_norm_wg`). Written in session 68 after cuBLAS took Qwen3-4B's 64-row projections
/// in 0.58× the tiles' time (bench/RESULTS.md). Its kernel tests pass (H100, session 69), but
/// it decoded Qwen3-4B at 64 streams in 0.844× the default's rate (its split kernels 1.29× the
/// tiles' time): off unless `FLASHLANE_MATMUL_WG_FOLD=1` (an A/B switch: the same bits).
pub const MATMUL_WG_FOLD_ENV: &str = "FLASHLANE_MATMUL_WG_FOLD";
/// Where the warpgroup matmul's module is compiled, `=tma` runs a round's bf16 k split (up to 64
/// rows) as the walk instead (`matmul_walk.cu`: `matmul_bf16_walk_tma_n64` / `_n32`, and
/// `matmul_bf16_walk_tma_swiglu` for a gate/up): blocks of 64 outputs by 64 rows (32 where the
/// outputs give fewer than half the multiprocessors a block: [`walk_rows`]), each walking the
/// whole of k in the swapped split's chain (its bits, the tiles') through a deep ring that a
/// producer warp fills with bulk copies (x's split rows, and each chunk of W as one box of its
/// tensor map under the 128-byte swizzle), the residues folded in the block: no partials and no
/// fold launch, nor a fold in a cluster. Written in session 70 after cuBLAS's 64-row kernels
/// (bench/RESULTS.md session 69). Its kernel tests pass (H100, sessions 70–72). In one
/// warpgroup a block it is slower than the tiles: on Qwen3-4B at 64 streams it decoded at 0.94×
/// the tiles' rate at one chunk a step (session 70) and at 0.83–0.86× at 1–8 chunks a step
/// (session 71, another H100). Its blocks fill their stages at ~45 GB/s a multiprocessor, held
/// there by their own waits (ncu, session 73: 7.6 % of the warp slots active, L2 and DRAM far
/// from their peaks); blocks of 3 consumer warpgroups on one stage of x
/// ([`MATMUL_WALK_OUTS_ENV`]: 20 % active) took the gate/up faster than the tiles (session 72),
/// so by default the walk runs a gate/up in such blocks ([`walk_plan`]). `=0` leaves every
/// split to the tiles, `=tma` walks every bf16 split of up to 64 rows, `=wide` the default's
/// gate/up and the plain splits of 49–64 rows in wide blocks shared out over 4 or 8 k groups
/// ([`walk_wide_k_groups`]; session 74) (A/B switches: the same bits). W's rows copied apart
/// (`=1`) and clusters of 2 or 4 blocks multicasting x (`=tma2`, `=tma4`) decoded at 0.24–0.36× in sessions 70 and 71 and were removed.
pub const MATMUL_WALK_ENV: &str = "FLASHLANE_MATMUL_WALK";
/// How a round's bf16 split runs as the walk ([`MATMUL_WALK_ENV`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WalkChoice {
    /// Every split on the tiles (`=0`).
    Off,
    /// The default: a gate/up's walk where its blocks hold several consumer warpgroups in one
    /// wave, from [`MWK_WIDE_MIN_ROWS`] rows ([`walk_plan`]).
    Measured,
    /// Every bf16 split of up to [`MWS_MAX_ROWS`] rows, W's chunk one box of its tensor map
    /// (`cp.async.bulk.tensor`) (`=tma`).
    Tma,
    /// The default's gate/up, and every plain split from [`MWK_WIDE_MIN_ROWS`] rows in wide
    /// blocks shared out along k over a cluster where they fit one wave (`=wide`:
    /// [`walk_wide_k_groups`]).
    Wide,
}

impl WalkChoice {
    fn from_env() -> WalkChoice {
        match std::env::var(MATMUL_WALK_ENV).as_deref() {
            Ok("tma") => WalkChoice::Tma,
            Ok("wide") => WalkChoice::Wide,
            Ok("0") => WalkChoice::Off,
            Ok("") | Err(_) => WalkChoice::Measured,
            // An A/B run must not measure the default under another walk's name (`=1`, `=tma2`
            // and `=tma4` were removed in session 71).
            Ok(other) => {
                tracing::warn!(
                    "{MATMUL_WALK_ENV}={other:?} is not a walk (`tma`, `wide` or `0`): the default walk"
                );
                WalkChoice::Measured
            }
        }
    }
}
/// Rows from which the default walk ([`WalkChoice::Measured`]) takes a gate/up its wide blocks
/// hold. Measured on an H100 with Qwen3-4B's gate/up in 3 warpgroups a block (q/k/v in the
/// one-warpgroup walk, o and down on the tiles; bench/RESULTS.md session 72, 2 rounds, decode
/// tok/s against the tiles): 1.10× at 64 streams (Qwen3-8B 1.08×), 0.99× at 48, 0.91× at 32;
/// the gate/up's alone 1.074× at 64 (one round). Below 64 rows a block's last rows are
/// padding, which the tiles' 16-row blocks do not read.
const MWK_WIDE_MIN_ROWS: usize = 49;
/// `FLASHLANE_MATMUL_WALK_ROWS=32` or `=64` makes every walk's blocks that many rows instead of
/// [`walk_rows`]' choice (A/B runs: rows are independent, the same bits).
pub const MATMUL_WALK_ROWS_ENV: &str = "FLASHLANE_MATMUL_WALK_ROWS";
/// The walk's block: a consumer warpgroup and a producer warp, 64 outputs.
const MWK_THREADS: u32 = 160;
const MWK_OUTS: usize = 64;
/// The walk's ring, for one block a multiprocessor (227 KB of shared memory): a stage is a chunk
/// of x's split rows (16 KB at 64 rows, 8 at 32) and a box of 64 rows of W's 128 bytes (8 KB, no
/// padding: the swizzle spreads the reads): 9 stages of 64 rows (24 KB; the most that fit), 13
/// of 32 (16 KB).
const MWK_TMA_STAGES_64: usize = 9;
const MWK_TMA_STAGES_32: usize = 13;
/// Chunks of one residue the walk's consumers multiply a step, their products issued together
/// and awaited once (16 A registers a chunk): one a step spent ~600 cycles a chunk in waits,
/// Qwen3-4B's 64-row o and down taking twice cuBLAS's time (H100, session 70); at 4 they took
/// 12 % less time than at 1, 2 chunks a step were the slowest (H100, session 71).
const MWK_DEPTH: usize = 4;
/// `FLASHLANE_MATMUL_WALK_DEPTH` (1–8) in place of [`MWK_DEPTH`] (A/B runs: the same chain, so
/// the same bits; the kernel tests run the default).
pub const MATMUL_WALK_DEPTH_ENV: &str = "FLASHLANE_MATMUL_WALK_DEPTH";
fn walk_depth() -> usize {
    env_number(MATMUL_WALK_DEPTH_ENV)
        .filter(|depth| (1..=8).contains(depth))
        .unwrap_or(MWK_DEPTH)
}
/// A walk's ring of `stages` at `rows` (32 or 64) rows a block, each a chunk of x's split rows
/// (4 bytes an element) and `w_stage_bytes` of weights, then a full and an empty barrier (8
/// bytes each) a stage.
const fn mwk_ring_bytes(rows: usize, stages: usize, w_stage_bytes: usize) -> usize {
    stages * (rows * MMA_CHUNK * 4 + w_stage_bytes + 2 * 8)
}
/// Of the 32- or 64-row one of a pair of values (`[at 32 rows, at 64 rows]`).
const fn by_walk_rows(rows: usize, values: [usize; 2]) -> usize {
    values[(rows == 64) as usize]
}
/// Bytes the walk's ring may start past its shared memory's base: the stages begin at the next
/// 1,024-byte boundary (the 128-byte swizzle's), up to 1,008 bytes on from a 16-byte-aligned base.
const MWK_SWIZZLE_SLACK: usize = 1008;
/// A warpgroup's box of W a stage: 64 rows of a chunk's 128 bytes (bf16).
const MWK_W_BOX_BYTES: usize = MWK_OUTS * MMA_CHUNK * 2;
/// The walk's dynamic shared memory at `rows` rows a block.
fn mwk_tma_shared_bytes(rows: usize) -> usize {
    MWK_SWIZZLE_SLACK + mwk_ring_bytes(rows, walk_tma_stages(rows), MWK_W_BOX_BYTES)
}
/// `FLASHLANE_MATMUL_WALK_STAGES`: the TMA walk's ring of this many stages (from a step's
/// chunks, [`MATMUL_WALK_DEPTH_ENV`], up to the default) at both row sizes, in place of
/// [`MWK_TMA_STAGES_64`] / [`MWK_TMA_STAGES_32`] (A/B runs: with 4 stages of 64 rows, ~99 KB,
/// two blocks fit a multiprocessor: Qwen3-4B's gate/up's 304 blocks then take 1.15 waves of the
/// H100's 264 places where one a multiprocessor takes 2.3; the same bits).
pub const MATMUL_WALK_STAGES_ENV: &str = "FLASHLANE_MATMUL_WALK_STAGES";
fn walk_tma_stages(rows: usize) -> usize {
    let most = by_walk_rows(rows, [MWK_TMA_STAGES_32, MWK_TMA_STAGES_64]);
    // At least a step's chunks: the consumers wait for all of a step's stages before they
    // release any.
    env_number(MATMUL_WALK_STAGES_ENV)
        .filter(|stages| (walk_depth()..=most).contains(stages))
        .unwrap_or(most)
}

/// `FLASHLANE_MATMUL_WALK_K_GROUPS`: with the TMA walk (`=tma`), a plain matrix's walk (no
/// SwiGLU) shared out over a cluster of 2, 3 or 4 blocks along k where k holds a chunk for every
/// residue (`matmul_bf16_walk_tma_kg*`: block 0 folds the later blocks' residues' partials into
/// its total in residue order through distributed shared memory, so the same chain and bits).
/// `auto`: by [`walk_k_groups`] (Qwen3-4B's o and down: 40 tiles of 64 rows in 3 groups, 120
/// blocks, where the walk's 32-row blocks make 80); `2`, `3`, `4`: that many wherever k allows.
/// Written in session 71 after the walk's 32-row o and down took twice cuBLAS's time (cuBLAS
/// splits the down three ways: bench/RESULTS.md session 69). Its kernel tests pass (H100,
/// session 71), but by the rule Qwen3-4B's o and down took 1.31× the 32-row walk's time
/// (0.79× the default's decode rate at 64 streams): off (an A/B switch: the same bits). Under
/// `FLASHLANE_MATMUL_WALK=wide`, `4` or `8` with [`MATMUL_WALK_OUTS_ENV`]'s warpgroups (3 unless
/// asked) forces that wide form on every plain split of up to 64 rows ([`walk_wide_k_groups`]).
pub const MATMUL_WALK_K_GROUPS_ENV: &str = "FLASHLANE_MATMUL_WALK_K_GROUPS";
/// What [`MATMUL_WALK_K_GROUPS_ENV`] asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WalkKGroups {
    Off,
    /// By [`walk_k_groups`]' rule.
    Auto,
    /// This many (2–4; or under `=wide` 4 or 8, forcing that wide form) wherever k allows.
    Fixed(usize),
}

impl WalkKGroups {
    fn from_env() -> WalkKGroups {
        match std::env::var(MATMUL_WALK_K_GROUPS_ENV).as_deref() {
            Ok("auto") => WalkKGroups::Auto,
            Ok("2") => WalkKGroups::Fixed(2),
            Ok("3") => WalkKGroups::Fixed(3),
            Ok("4") => WalkKGroups::Fixed(4),
            Ok("8") => WalkKGroups::Fixed(8),
            _ => WalkKGroups::Off,
        }
    }
}
/// The most k groups a tile's walk is shared out over (a cluster along k; 4 keep 2 of the 8
/// residues a block).
const MWK_MOST_K_GROUPS: usize = 4;
/// The k groups of a walk of `rows` rows of `n_out` outputs, `chunks` chunks of k, in 64-row
/// blocks on `multiprocessors`: 1 (the walk in one block a tile) for a gate/up (its SwiGLU needs
/// both halves of a unit in one block; its tiles fill the GPU), where some residue would hold no
/// chunk, or where asked for none; under `Fixed(g)`, g; under `Auto`, where the 64-row tiles
/// would leave more than half the multiprocessors without one (where [`walk_rows`] halves the
/// rows), the most groups (up to [`MWK_MOST_K_GROUPS`]) whose blocks all fit one wave.
fn walk_k_groups(
    choice: WalkKGroups,
    rows: usize,
    n_out: usize,
    chunks: usize,
    swiglu: bool,
    multiprocessors: usize,
) -> usize {
    if swiglu || chunks < MMT_RESIDUES_OF_K {
        return 1;
    }
    let tiles = walk_out_blocks(n_out, false, 1) * rows.div_ceil(64);
    match choice {
        WalkKGroups::Off => 1,
        WalkKGroups::Fixed(groups) => groups,
        WalkKGroups::Auto if tiles * 2 >= multiprocessors => 1,
        WalkKGroups::Auto => (1..=MWK_MOST_K_GROUPS)
            .rev()
            .find(|groups| tiles * groups <= multiprocessors)
            .unwrap_or(1),
    }
}
/// The k split's residues (`MMT_RESIDUES` in the kernels: the 16-row kernels' warps).
const MMT_RESIDUES_OF_K: usize = MMA_WARPS as usize;
/// Shared memory a block may opt into on compute capability 9.0 (227 KiB, the only target).
const HOPPER_BLOCK_SHARED_BYTES: usize = 227 * 1024;
/// Bytes a later k group keeps of each of its residues' partials: 64 outputs by 64 rows, f32.
const MWK_KG_PART_BYTES: usize = MWK_OUTS * 64 * 4;
/// The residues of the largest of `groups` k groups (8 shared out: 4, 3 or 2; the kernel's
/// `mwk_group_first` gives the first groups the fewer).
const fn mwk_group_residues(groups: usize) -> usize {
    MMT_RESIDUES_OF_K.div_ceil(groups)
}
/// The ring's stages of the TMA walk in `groups` k groups: the TMA walk's ([`walk_tma_stages`]),
/// fewer where its partials leave no room for them (2 groups: 6 stages of 64 rows beside 64 KB
/// of partials; 3: 7; 4: 8), and never fewer than a step's chunks (a ring that does not fit then
/// leaves those kernels unloaded, the walk in one block a tile).
fn walk_kg_stages(groups: usize) -> usize {
    let stage = mwk_ring_bytes(64, 1, MWK_W_BOX_BYTES);
    let room = HOPPER_BLOCK_SHARED_BYTES
        - MWK_SWIZZLE_SLACK
        - mwk_group_residues(groups) * MWK_KG_PART_BYTES;
    (room / stage).min(walk_tma_stages(64)).max(walk_depth())
}
/// The dynamic shared memory of the TMA walk in `groups` k groups: its ring from the swizzle's
/// boundary, then the partials.
fn mwk_kg_shared_bytes(groups: usize) -> usize {
    MWK_SWIZZLE_SLACK
        + mwk_ring_bytes(64, walk_kg_stages(groups), MWK_W_BOX_BYTES)
        + mwk_group_residues(groups) * MWK_KG_PART_BYTES
}

/// `FLASHLANE_MATMUL_WALK_OUTS=128` or `=192`: with the TMA walk (`=tma`), blocks of 2 or 3
/// consumer warpgroups (`matmul_bf16_walk_tma_w2`, `_w3`, and `_swiglu_` of each) that hold 128 or
/// 192 outputs on one stage of x, where such blocks still give half the multiprocessors one
/// ([`walk_warpgroups`]; else fewer warpgroups: Qwen3-4B's gate/up at 48–64 rows takes 3, 102
/// blocks; its q/k/v 1). At 64 rows x's split is 16 KB a chunk against a warpgroup's 8 KB of
/// weights, so x shared by 3 warpgroups takes 5/9 of the bytes an output, and a multiprocessor
/// holds 3 consumer warpgroups in flight where the one-warpgroup walk holds 1 (ncu, session 73:
/// the walk is latency-bound, 7.6 % of the warp slots active in one warpgroup, 20 % in 3). Each
/// warpgroup runs the one-warpgroup walk's chain on its outputs (the same bits). Written in
/// session 71; at 192 the default walk's (session 72: [`walk_plan`]); under
/// `FLASHLANE_MATMUL_WALK=tma` one warpgroup unless asked (A/B switches).
pub const MATMUL_WALK_OUTS_ENV: &str = "FLASHLANE_MATMUL_WALK_OUTS";
/// The most consumer warpgroups a walk's block holds (3: 416 threads, ~150 registers each).
const MWK_MOST_WARPGROUPS: usize = 3;
/// The consumer warpgroups a walk's block may hold under `choice`: [`MATMUL_WALK_OUTS_ENV`]'s,
/// else the most for the default walk (whose only blocks are wide ones), else 1.
fn walk_outs_asked(choice: WalkChoice) -> usize {
    match (env_number(MATMUL_WALK_OUTS_ENV), choice) {
        (Some(outs @ (128 | 192)), _) => outs / MWK_OUTS,
        (_, WalkChoice::Measured | WalkChoice::Wide) => MWK_MOST_WARPGROUPS,
        _ => 1,
    }
}
/// What the walk's switches ask: [`MATMUL_WALK_ENV`] and its `_ROWS`, `_K_GROUPS`, `_OUTS` and
/// `_NARROW` companions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct WalkAsk {
    choice: WalkChoice,
    /// [`MATMUL_WALK_ROWS_ENV`]'s value.
    rows: Option<usize>,
    k_groups: WalkKGroups,
    /// The consumer warpgroups its blocks may hold (1–3: [`walk_outs_asked`]).
    warpgroups: usize,
    /// Whether the tiles take the splits the one-warpgroup walk would run in 32-row blocks
    /// ([`MATMUL_WALK_NARROW_ENV`]).
    narrow_tiles: bool,
}

impl WalkAsk {
    fn from_env() -> WalkAsk {
        let choice = WalkChoice::from_env();
        WalkAsk {
            choice,
            rows: env_number(MATMUL_WALK_ROWS_ENV),
            k_groups: WalkKGroups::from_env(),
            warpgroups: walk_outs_asked(choice),
            narrow_tiles: std::env::var(MATMUL_WALK_NARROW_ENV).as_deref() == Ok("tiles"),
        }
    }
}

/// Which of the walk's kernels loaded (each form apart: [`WalkKernels`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct WalkLoaded {
    /// In 2, 3 and 4 k groups.
    k_groups: [bool; 3],
    /// With 2 and 3 consumer warpgroups.
    wide: [bool; 2],
    /// With 2 and 3 consumer warpgroups in 4 and 8 k groups: the clusters the GPU holds at once
    /// (`cuOccupancyMaxActiveClusters`), each where it loaded.
    wide_k_groups: [[Option<usize>; 2]; 2],
}

/// How a k split runs as the walk ([`walk_plan`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WalkPlan {
    /// One consumer warpgroup a block of this many rows (32 or 64).
    Rows(usize),
    /// Blocks of 64 rows holding this many (2 or 3) consumer warpgroups.
    Wide(usize),
    /// 64-row tiles, each shared out along k over a cluster of this many (2–4) blocks.
    KGroups(usize),
    /// Blocks of 64 rows holding `warpgroups` (2 or 3) consumer warpgroups, each tile shared
    /// out along k over a cluster of `groups` (4 or 8) blocks.
    WideKGroups { warpgroups: usize, groups: usize },
}

/// How a round's bf16 k split of `rows` rows of `n_out` outputs over `chunks` chunks of k
/// (`swiglu`: a gate/up's) runs as the walk on `multiprocessors` under `ask`, with the kernels
/// `loaded`; `None`: on the tiles. The default walk ([`WalkChoice::Measured`]) takes only a
/// gate/up its wide blocks hold ([`walk_warpgroups`] above 1) in one wave, from
/// [`MWK_WIDE_MIN_ROWS`] rows: there it beat the tiles, in one warpgroup a block nowhere
/// (bench/RESULTS.md sessions 70–73). `=tma` walks every split of up to [`MWS_MAX_ROWS`] rows
/// (but under `_NARROW=tiles` those of 32-row blocks) in k groups where asked and loaded, else
/// in wide blocks where asked and loaded, else in one warpgroup a block ([`walk_rows`]).
fn walk_plan(
    ask: &WalkAsk,
    loaded: WalkLoaded,
    rows: usize,
    n_out: usize,
    chunks: usize,
    swiglu: bool,
    multiprocessors: usize,
) -> Option<WalkPlan> {
    if rows > MWS_MAX_ROWS {
        return None;
    }
    let warpgroups = walk_warpgroups(ask.warpgroups, rows, n_out, swiglu, multiprocessors);
    let wide =
        (warpgroups > 1 && loaded.wide[warpgroups - 2]).then_some(WalkPlan::Wide(warpgroups));
    match ask.choice {
        WalkChoice::Off => None,
        // Only a gate/up whose wide blocks are one wave (the walk holds one a multiprocessor):
        // Qwen3-4B's (102 blocks) and -8B's (128). Where else wide blocks would go (the A3B
        // slice's q/k/v and DeltaNet projections in 2 warpgroups, Qwen3-14B's gate/up in 182
        // blocks) they were never measured, so the tiles keep them.
        WalkChoice::Measured => {
            let one_wave = walk_out_blocks(n_out, swiglu, warpgroups) <= multiprocessors;
            wide.filter(|_| swiglu && rows >= MWK_WIDE_MIN_ROWS && one_wave)
        }
        WalkChoice::Wide if swiglu => {
            let one_wave = walk_out_blocks(n_out, swiglu, warpgroups) <= multiprocessors;
            wide.filter(|_| rows >= MWK_WIDE_MIN_ROWS && one_wave)
        }
        WalkChoice::Wide => walk_wide_k_groups(ask, loaded, rows, n_out, chunks, multiprocessors),
        WalkChoice::Tma
            if ask.narrow_tiles && walk_rows(rows, n_out, swiglu, multiprocessors, None) == 32 =>
        {
            None
        }
        WalkChoice::Tma => {
            match walk_k_groups(ask.k_groups, rows, n_out, chunks, swiglu, multiprocessors) {
                groups @ 2..=MWK_MOST_K_GROUPS if loaded.k_groups[groups - 2] => {
                    Some(WalkPlan::KGroups(groups))
                }
                _ => wide.or(Some(WalkPlan::Rows(walk_rows(
                    rows,
                    n_out,
                    swiglu,
                    multiprocessors,
                    ask.rows,
                )))),
            }
        }
    }
}
/// The walk's consumer warpgroups a block for `rows` rows of `n_out` outputs (`swiglu`: a
/// gate/up's, 32 units a warpgroup) on `multiprocessors`: the most of up to `asked` whose 64-row
/// blocks still give at least half the multiprocessors one, else 1.
fn walk_warpgroups(
    asked: usize,
    rows: usize,
    n_out: usize,
    swiglu: bool,
    multiprocessors: usize,
) -> usize {
    (2..=asked.min(MWK_MOST_WARPGROUPS))
        .rev()
        .find(|&groups| {
            walk_out_blocks(n_out, swiglu, groups) * rows.div_ceil(64) * 2 >= multiprocessors
        })
        .unwrap_or(1)
}
/// The k groups a wide walk's tile may be shared out over (4: 2 residues a block; 8: one): the
/// kernel keeps a later group's partials in registers, and a group's blocks alike.
const MWK_WIDE_K_GROUPS: [usize; 2] = [4, 8];
/// How a plain split of `rows` rows of `n_out` outputs over `chunks` chunks runs under
/// `FLASHLANE_MATMUL_WALK=wide` on `multiprocessors`: in wide blocks (2 or 3 consumer
/// warpgroups, as the gate/up's) shared out over 4 or 8 k groups, so that matrices with few
/// outputs (Qwen3-4B's q/k/v: 32 tiles of 192 outputs; its o and down: 14) still fill the GPU.
/// `ask`'s k groups (4 or 8) with its warpgroups (at least 2) force that form wherever k gives
/// every residue a chunk (the kernel tests); else, from [`MWK_WIDE_MIN_ROWS`] rows, the form of
/// the most blocks (then the most warpgroups) whose tiles all fit one wave: their blocks on the
/// multiprocessors and their clusters within those the GPU holds at once (a cluster's blocks
/// share a GPC: Qwen3-4B's q/k/v in 32 clusters of 4 might not fit where 128 blocks would).
/// `None`: the tiles.
fn walk_wide_k_groups(
    ask: &WalkAsk,
    loaded: WalkLoaded,
    rows: usize,
    n_out: usize,
    chunks: usize,
    multiprocessors: usize,
) -> Option<WalkPlan> {
    if chunks < MMT_RESIDUES_OF_K || rows > MWS_MAX_ROWS {
        return None;
    }
    let forced = match ask.k_groups {
        WalkKGroups::Fixed(groups) if MWK_WIDE_K_GROUPS.contains(&groups) => {
            Some((ask.warpgroups.clamp(2, MWK_MOST_WARPGROUPS), groups))
        }
        _ => None,
    };
    if forced.is_none() && rows < MWK_WIDE_MIN_ROWS {
        return None;
    }
    (2..=MWK_MOST_WARPGROUPS)
        .flat_map(|warpgroups| MWK_WIDE_K_GROUPS.map(|groups| (warpgroups, groups)))
        .filter(|&form| forced.is_none_or(|asked| asked == form))
        .filter_map(|(warpgroups, groups)| {
            let at = MWK_WIDE_K_GROUPS.iter().position(|&g| g == groups)?;
            let clusters = loaded.wide_k_groups[warpgroups - 2][at]?;
            let tiles = walk_out_blocks(n_out, false, warpgroups);
            let fits = tiles * groups <= multiprocessors && tiles <= clusters;
            (forced.is_some() || fits).then_some((tiles * groups, warpgroups, groups))
        })
        .max_by_key(|&(blocks, warpgroups, _)| (blocks, warpgroups))
        .map(|(_, warpgroups, groups)| WalkPlan::WideKGroups { warpgroups, groups })
}
/// The walk's blocks along the outputs at `warpgroups` consumer warpgroups a block.
fn walk_out_blocks(n_out: usize, swiglu: bool, warpgroups: usize) -> usize {
    match swiglu {
        true => (n_out / 2).div_ceil(MWK_OUTS / 2 * warpgroups),
        false => n_out.div_ceil(MWK_OUTS * warpgroups),
    }
}
/// The ring's stages of the TMA walk with `warpgroups` consumer warpgroups: as many as fit (2: 7
/// stages of 32 KB; 3: 5 of 40 KB), at most the TMA walk's, at least a step's chunks.
fn walk_wide_stages(warpgroups: usize) -> usize {
    let stage = mwk_ring_bytes(64, 1, MWK_W_BOX_BYTES * warpgroups);
    ((HOPPER_BLOCK_SHARED_BYTES - MWK_SWIZZLE_SLACK) / stage)
        .min(walk_tma_stages(64))
        .max(walk_depth().min(2))
}
/// A wide walk block's threads: `warpgroups` consumer warpgroups and the producer warp.
fn mwk_wide_threads(warpgroups: usize) -> u32 {
    MWK_THREADS + (warpgroups as u32 - 1) * 128
}
/// The wide walk's ring without its barriers: where the k groups' kernels stash their sums.
fn mwk_wide_ring_bytes(warpgroups: usize) -> usize {
    walk_wide_stages(warpgroups) * (64 * MMA_CHUNK * 4 + MWK_W_BOX_BYTES * warpgroups)
}
/// The sums a block of the wide walk in `groups` k groups stashes after its walk: each of its
/// residues' (8 / groups) 64 outputs × 64 rows a warpgroup, f32.
const fn mwk_wide_stash_bytes(warpgroups: usize, groups: usize) -> usize {
    MMT_RESIDUES_OF_K / groups * warpgroups * MWK_OUTS * 64 * 4
}
fn mwk_wide_shared_bytes(warpgroups: usize) -> usize {
    MWK_SWIZZLE_SLACK
        + mwk_ring_bytes(
            64,
            walk_wide_stages(warpgroups),
            MWK_W_BOX_BYTES * warpgroups,
        )
}
/// `FLASHLANE_MATMUL_WALK_NARROW=tiles`: where the walk would take 32-row blocks (its 64-row
/// blocks too few: [`walk_rows`]), the tiles' split runs instead (an A/B switch: the same bits;
/// session 71 measured the walk's 32-row o and down the slowest of its matrices). It is checked
/// before the k groups, so with both those matrices go to the tiles.
pub const MATMUL_WALK_NARROW_ENV: &str = "FLASHLANE_MATMUL_WALK_NARROW";

/// W of `m` as the walk's TMA copies read it (`tma_load_2d`): a 2-D tensor of bf16, k elements a
/// row, n_out rows, boxes of MMA_CHUNK elements × `box_rows` rows, the 128-byte swizzle, zeros
/// outside.
fn weight_tensor_map(m: &Matmul, box_rows: usize) -> Result<TensorMap, CudaError> {
    use cudarc::driver::sys;
    let dims = [m.k as u64, m.n_out as u64];
    let strides = [(m.k * std::mem::size_of::<u16>()) as u64];
    let boxes = [MMA_CHUNK as u32, box_rows as u32];
    let element_strides = [1u32, 1];
    let mut map = sys::CUtensorMap { opaque: [0; 16] };
    // SAFETY: the arrays live through the call and hold the rank's (2) entries the driver reads
    // (strides: rank − 1); `map` is the 128 bytes it writes. W's address is only encoded here,
    // not read (the kernel's copies read it, within the dimensions given).
    unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            2,
            m.w as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            element_strides.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    }
    .result()?;
    Ok(TensorMap(map.opaque))
}
/// The rows of the walk's blocks for `rows` rows of `n_out` outputs (`swiglu`: a gate/up's units
/// and their up rows, 32 units a block) on `multiprocessors`: `forced` (32 or 64) where given,
/// else 64, or 32 where blocks of 64 rows would leave more than half the multiprocessors
/// without one (Qwen3-4B's o and down: 40 blocks of 64 rows, 80 of 32), rows being independent
/// (the bits stay the row's).
fn walk_rows(
    rows: usize,
    n_out: usize,
    swiglu: bool,
    multiprocessors: usize,
    forced: Option<usize>,
) -> usize {
    let out_blocks = walk_out_blocks(n_out, swiglu, 1);
    match forced {
        Some(rows @ (32 | 64)) => rows,
        _ if out_blocks * rows.div_ceil(64) * 2 < multiprocessors => 32,
        _ => 64,
    }
}
/// Rows up to which that split runs (a block holds its rows as the MMA's n: 32 or 64; more
/// rows are a prompt's, whose tiles read each weight once per 64 rows already).
const MWS_MAX_ROWS: usize = 64;
/// Rows up to which a bf16 matrix's split takes the warpgroup MMA by default. Measured on the
/// H200 against the tiles' split (bench/RESULTS.md session 44, 2 rounds, decode tok/s): Qwen3-4B
/// +9.1 % at 17 streams, +4.3 % at 24, the same at 32, −7.8 % at 48, −9.1 % at 64; Qwen3-8B +6.1 %
/// at 17, the same at 24, −6.9 % at 32, −16 % at 48, −20 % at 64.
const WG_SPLIT_BF16_MAX_ROWS: usize = 24;

/// What a warpgroup switch asks ([`MATMUL_WG_SPLIT_ENV`] for a round's k splits,
/// [`MATMUL_WG_SWAP_ENV`] for a prompt's unsplit matmuls): `=0` none, `=1` every one, anything
/// else the measured default ([`wg_split_takes`], [`wg_swap_takes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WgChoice {
    Off,
    Measured,
    All,
}

impl WgChoice {
    fn from_env(var: &str) -> WgChoice {
        match std::env::var(var).as_deref() {
            Ok("0") => WgChoice::Off,
            Ok("1") => WgChoice::All,
            _ => WgChoice::Measured,
        }
    }
}

/// Whether a round's k split of `rows` rows, of FP8 weights or bf16, runs on the warpgroup MMA
/// with the operands swapped. Off: the tiles' split for bf16, the 16-row kernels for FP8. The
/// measured default: FP8 weights' rounds of 17–64 rows (Qwen3-4B-FP8 +31–41 % at 17–48 streams
/// and +11 % at 64, Qwen3-8B-FP8 +44–50 % at 17–32 and +13 % at 48–64, against the 16-row
/// kernels: bench/RESULTS.md session 44; 33–47 rows by `fp8_round_splits`' reasoning), bf16's
/// of up to [`WG_SPLIT_BF16_MAX_ROWS`] rows. All: every split of up to [`MWS_MAX_ROWS`] rows.
fn wg_split_takes(choice: WgChoice, rows: usize, fp8: bool) -> bool {
    rows <= MWS_MAX_ROWS
        && match choice {
            WgChoice::Off => false,
            WgChoice::Measured => fp8 || rows <= WG_SPLIT_BF16_MAX_ROWS,
            WgChoice::All => true,
        }
}

/// Whether an unsplit matmul of `rows` rows (more than [`MWS_MAX_ROWS`]: a prompt's), of FP8
/// weights or bf16, runs on the warpgroup MMA with the operands swapped. Off: bf16 prompts on
/// the tiles or `matmul_bf16_wgmma`, FP8 ones on the 16-row FP8 kernels, which read each weight
/// once per 16 rows and split x for every block (Qwen3-4B-FP8's prefill of 64 prompts of 128
/// tokens 5,462 tok/s against bf16's 17,473 on the H100, bench/RESULTS.md session 46). The
/// measured default: FP8 weights' prompts, each weight read once per 64 rows (prefill of 1 / 8 /
/// 64 prompts of 128 tokens against Off on the H100, bench/RESULTS.md session 47, 2 rounds:
/// Qwen3-4B-FP8 1.02 / 1.48 / 2.23×, Qwen3-8B-FP8 1.08 / 1.73 / 2.25×, the A3B slice FP8 1.05 /
/// 1.14 / 1.30×; decode the same). All: bf16's too, 13–29 % slower prompts than the tiles on
/// Qwen3-4B and -8B (session 44), kept for A/B runs and as the FP8 kernel's bf16 twin in the
/// kernel tests.
fn wg_swap_takes(choice: WgChoice, rows: usize, fp8: bool) -> bool {
    rows > MWS_MAX_ROWS
        && match choice {
            WgChoice::Off => false,
            WgChoice::Measured => fp8,
            WgChoice::All => true,
        }
}

/// Rows up to which its blocks are m64n32 (half the products and x copies of n64).
const MWS_N32_ROWS: usize = 32;
/// Outputs and threads of its block (two warpgroups of 64 outputs): the tiles', so the tiles'
/// split's grid (`matmul_wg.cu` defines them the same).
const MWS_OUTS: usize = MMT_OUTS;
const MWS_THREADS: u32 = MMT_THREADS;
/// Chunks of x its block keeps in shared memory, and chunks of weights in registers ahead of
/// the products (each 64 bytes a thread; with 2, 64 KB in flight a multiprocessor at two blocks).
const MWS_X_STAGES: usize = 3;
const MWS_W_DEPTH: usize = 2;
/// Dynamic shared memory of its block of `rows` (32 or 64) rows: MWS_X_STAGES chunks of split
/// rows (4 bytes an element).
const fn mws_shared_bytes(rows: usize) -> usize {
    MWS_X_STAGES * rows * MMA_CHUNK * 4
}
/// `matmul_bf16_wg_swap`'s and `matmul_fp8_wg_swap`'s: its x stages of 64 rows, then each
/// thread's total over the residues (32 floats a thread: kept out of its registers, two blocks
/// fit a multiprocessor).
const MWS_SWAP_SHARED_BYTES: usize =
    mws_shared_bytes(MWS_MAX_ROWS) + MWS_MAX_ROWS / 2 * MWS_THREADS as usize * 4;

/// Rows and outputs of a `matmul_bf16_tiled` block (8 warps of 32 rows × 32 outputs). A
/// 128 × 128 block (one a multiprocessor) was no faster at any size measured.
const MMT_ROWS: usize = 64;
const MMT_OUTS: usize = 128;
/// Dynamic shared memory of a tiled block of `rows` rows × MMT_OUTS outputs: `stages` chunks of
/// x (split rows: hi and lo bf16, 4 bytes an element) and W (bf16). `matmul_bf16_tiled` and
/// `_split` have MMT_ROWS rows, `_split32` SPLIT32_ROWS.
const fn mmt_shared_bytes(stages: usize, rows: usize) -> usize {
    stages * MMA_CHUNK * (rows * 4 + MMT_OUTS * 2)
}
/// Threads of a `split_rows` block (a row's words of hi, 32 a chunk, in blocks of these).
const SPLIT_THREADS: u32 = 256;

/// u32 words of a row of x split for `matmul_bf16_tiled` (hi and lo bf16 of each element, k
/// padded with zeros to whole chunks): what [`Matmul::x_split`] holds per row for a depth of `k`.
pub fn split_row_words(k: usize) -> usize {
    k.div_ceil(MMA_CHUNK) * MMA_CHUNK
}

/// Whether FP8 blocks of `block_rows × block_cols` suit the FP8 matmul on an `[n_out, k]`
/// matrix: whole blocks, a chunk of k in one column block, an n-tile in one row block.
pub fn fp8_blocks_fit(block_rows: usize, block_cols: usize, n_out: usize, k: usize) -> bool {
    block_rows > 0
        && block_cols > 0
        && block_cols.is_multiple_of(MMA_CHUNK)
        && block_rows.is_multiple_of(MMA_COLS)
        && k.is_multiple_of(block_cols)
        && n_out.is_multiple_of(block_rows)
}

/// Whether FP8 blocks suit the MoE kernels: whole blocks of every expert's gate and up halves
/// (`I`), down (`H × I`) and the shared expert's down (`H × IS`), in the matmul's chunks and tiles.
pub fn moe_fp8_blocks_fit(
    block_rows: usize,
    block_cols: usize,
    hidden: usize,
    m: &MoeConfig,
) -> bool {
    fp8_blocks_fit(block_rows, block_cols, m.expert_intermediate, hidden)
        && fp8_blocks_fit(block_rows, block_cols, hidden, m.expert_intermediate)
        && (m.shared_expert_intermediate == 0
            || fp8_blocks_fit(block_rows, block_cols, hidden, m.shared_expert_intermediate))
}

/// Warps per block of `rmsnorm_rows` and `moe_combine_norm` (one block a row: 2 elements a
/// thread on a 2048-wide row). A decode step's row is one block on one multiprocessor: with 8
/// warps `moe_combine_norm` (80 loads a thread for Qwen3-Next's 10 experts) took 9.0 µs a row,
/// more than `moe_combine` over 8 blocks and `rmsnorm_rows` after it (3.8 + 3.3; ncu, session 13).
const NORM_WARPS: u32 = 32;
/// Outputs of one n-tile of the matmul (an m16n8k16 tile's width).
const MMA_COLS: usize = 8;
/// N-tiles a block of the matmul computes: each warp loads (and splits into hi and lo) its chunk
/// of x once for all of them, so x is read from L2 once per 32 outputs instead of 8. The k split
/// does not change, so neither do the bits.
const MMA_NT: usize = 4;
/// N-tiles a block of the wide bf16 matmul may hold (`matmul_bf16` holds MMA_NT, the others
/// `matmul_bf16_t3`, `_t5`, `_t6`): [`block_tiles`] picks the count that runs a matrix in the
/// fewest waves of the GPU's resident blocks. More than 6 spills at the 128 registers two blocks
/// a multiprocessor allow (`tools/cuda_check`).
const MATMUL_BLOCK_TILES: [usize; 4] = [3, MMA_NT, 5, 6];
/// The n-tiles a block of the deep kernels (`matmul_bf16_t3_deep`, `matmul_bf16_t4_deep`): a
/// matrix few enough blocks to deepen takes 3 or MMA_NT ([`block_tiles`]); 5 and 6 spilled at
/// the 128 registers of two blocks a multiprocessor (`tools/cuda_check`, session 17) and have not
/// been tried under the deep kernels' one-block bounds (150 and 172 registers at 3 and 4).
const MATMUL_DEEP_TILES: [usize; 2] = [3, MMA_NT];
/// The defines `Kernels::compile_overriding` may change: the depths and the probes (MMA_X_PRESPLIT,
/// MMT_PROBE), which the host never reads; ATT_KV_AHEAD (how attention loads its keys: the same
/// bits); ATT_SHARED_SOFTMAX (the simt attention's scores and exps taken by every lane or shared
/// out over a warp's lanes: the same bits); MMT_WEIGHTS_EVICT_FIRST (the tiles' L2 hint: the same
/// bits); MMA_NORM_TWINS (the norm twins compiled, which the host then loads); MMA_MIN_BLOCKS, of
/// which the kernels' launch bounds change alone (the deep kernels' are one block; the host still
/// counts MMA_MIN_BLOCKS resident blocks a multiprocessor when it fits n-tiles to waves); MMA_SPLIT
/// (the products of `--matmul-input bf16`); and MMT_STAGES, whose shared memory the compiled
/// kernels then launch with. Any other (a block's warps or n-tiles, a model's sizes) would make
/// launches that do not match.
#[cfg(test)]
const OVERRIDABLE_DEFINES: [&str; 15] = [
    "MMA_NORM_TWINS",
    "ATT_KV_AHEAD",
    "ATT_SHARED_SOFTMAX",
    "MMT_WEIGHTS_EVICT_FIRST",
    "MMA_X_PRESPLIT",
    "MMT_PROBE",
    "MMA_SPLIT",
    "MMT_STAGES",
    "MMA_NARROW_DEPTH",
    "MMA_DEEP_DEPTH",
    "MMA_FP8_NARROW_DEPTH",
    "MMA_FP8_WIDE_DEPTH",
    "MOE_BF16_DEPTH",
    "MOE_FP8_DEPTH",
    "MMA_MIN_BLOCKS",
];
/// `FLASHLANE_MATMUL_DEEP=0` keeps a one-row-tile bf16 matmul of at most one block a
/// multiprocessor ([`deepens`]) off the deep kernels, which run it by default (for A/B runs of
/// one binary: the bits do not change).
pub const MATMUL_DEEP_ENV: &str = "FLASHLANE_MATMUL_DEEP";
/// `FLASHLANE_MATMUL_FIT=0` keeps every wide bf16 matmul at MMA_NT n-tiles a block, `1` fits
/// only one-row-tile matmuls (for A/B runs of one binary: the bits do not change).
pub const MATMUL_FIT_ENV: &str = "FLASHLANE_MATMUL_FIT";
/// `FLASHLANE_SWIGLU_IN_GATE_UP=0` keeps a dense MLP's SwiGLU apart from its gate/up matmul,
/// which by default computes it (in its 16-row kernels or its split k's fold) where
/// [`swiglu_place`] allows. For A/B runs of one binary: the bits do not change. On the H200 the
/// fused kernels took Qwen3-0.6B 3–6 % faster at 1–64 streams and Qwen3-4B 1.5–2.7 % at 48–64
/// (bench/RESULTS.md, session 31).
pub const SWIGLU_IN_GATE_UP_ENV: &str = "FLASHLANE_SWIGLU_IN_GATE_UP";
/// The most rows whose input RMSNorm a 16-row matmul computes itself ([`norm_place`]): each of
/// its blocks sums its rows' squares again (k floats a row from L2, one trip for all of a
/// thread's, then 32 warp butterflies) while its first weights load, in place of
/// `rmsnorm_rows`' launch and its rows' trip through memory. Measured on the H100 (session 50,
/// bench/RESULTS.md; two interleaved rounds, with the prep in the attention): Qwen3-0.6B at one
/// stream 887 → 920 tok/s (+3.7 %; without the prep there +3.1 %), at 2 streams a bound of 2 and
/// of 4 alike (no run without at 2), at 4 streams a bound of 4 4 % slower than 2; Qwen3-4B
/// +1.1 % at one stream; the A3B slice (its first norm a layer), with the prep against neither,
/// within 0.3 %. (Session 32's twins, which summed the shares one after another and loaded their
/// weights only after, had been 6 % slower at one stream.)
const NORM_IN_MATMUL_MAX_ROWS: usize = 2;
/// `FLASHLANE_NORM_IN_MATMUL_MAX_ROWS=N` moves that bound (0: every norm apart; 1: a one-stream
/// step's). For A/B runs of one binary: the bits do not change.
pub const NORM_IN_MATMUL_MAX_ROWS_ENV: &str = "FLASHLANE_NORM_IN_MATMUL_MAX_ROWS";
/// The input RMSNorm of a bf16 matmul over split rows (the tiles and their k splits: decode
/// rounds of 17–64 streams in Qwen3-4B and larger) runs in the split itself
/// (`split_rows_norm`, [`NormPlace::InSplit`]) instead of `rmsnorm_rows` before it: one launch
/// fewer a norm, the same bits (kernel test). On the H200, Qwen3-4B's 64-stream round had run
/// `rmsnorm_rows` 73 times (224 µs) and `split_rows` 145 times (305 µs) of 7,668 µs (session
/// 56); against the norm apart on the H100 (session 57, bench/RESULTS.md; prompt 128, two
/// interleaved rounds) Qwen3-4B decoded 1.020× / 1.007× at 32 / 64 streams.
/// `FLASHLANE_NORM_IN_SPLIT=0` keeps the norm apart (A/B runs of one binary: the same bits).
pub const NORM_IN_SPLIT_ENV: &str = "FLASHLANE_NORM_IN_SPLIT";
/// Rows up to which the norm goes into the split (unless [`NORM_IN_SPLIT_ENV`] is 0): decode
/// rounds. Each of a row's split blocks sums the whole row's squares (k / 512 blocks a row:
/// 5 at Qwen3-4B's 2,560), a few KB from L2 a row in a round, but a prompt's thousands of rows
/// would read x that many times over (not measured).
const NORM_IN_SPLIT_MAX_ROWS: usize = 64;

/// The bound [`NORM_IN_MATMUL_MAX_ROWS_ENV`] asks for, else [`NORM_IN_MATMUL_MAX_ROWS`]. The norm
/// twins are compiled only where it is above 0 (MMA_NORM_TWINS): with them NVRTC and the PTX's
/// assembly took ~75 % longer over Qwen3-4B's source (`tools/cuda_check`: 5.1 → 8.9 s on a 2-core
/// CPU), once a build and model shape now that the PTX is kept between starts ([`ptx_cache`]).
fn norm_in_matmul_max_rows() -> usize {
    env_number(NORM_IN_MATMUL_MAX_ROWS_ENV).unwrap_or(NORM_IN_MATMUL_MAX_ROWS)
}
/// `FLASHLANE_MOE_NORM_IN_FRONT=1` runs a MoE layer's post-attention norm in its front
/// projection's norm twin, which keeps the normalised rows for the experts (rounds of up to
/// [`NORM_IN_MATMUL_MAX_ROWS`] rows), instead of apart (`rmsnorm_rows` into `xn`, the default):
/// an A/B switch that keeps the bits. Off: on the H100 the A3B slice decoded 0.98× with it at one
/// and two streams (session 52, bench/RESULTS.md): more than the launch it saves (why not looked
/// into).
pub const MOE_NORM_IN_FRONT_ENV: &str = "FLASHLANE_MOE_NORM_IN_FRONT";

/// `FLASHLANE_MATMUL_SWAP_ROWS=N` (at most MMA_COLS, 8) runs the bf16 16-row matmuls of rounds of
/// up to N rows on the swapped chain (`matmul_bf16_swap*`: yᵀ = W · xᵀ, 16 outputs × 8 rows an
/// MMA instead of 16 rows × 8 outputs, so half the MMAs and half the splits of x where a round
/// fills few of the 16 rows; the same products in the same order: the same bits), the dense
/// MLP's gate/up with its SwiGLU too (`matmul_bf16_swiglu_swap_t2`), the MoE's bf16 experts too;
/// 0 runs none. The default is [`MATMUL_SWAP_ROWS_BF16`].
pub const MATMUL_SWAP_ROWS_ENV: &str = "FLASHLANE_MATMUL_SWAP_ROWS";
/// `FLASHLANE_MATMUL_SWAP_ROWS_FP8=N`: the same bound for block-scaled FP8 weights
/// (`matmul_fp8_swap*`, each output's own scale a chunk); default [`MATMUL_SWAP_ROWS_FP8`].
pub const MATMUL_SWAP_ROWS_FP8_ENV: &str = "FLASHLANE_MATMUL_SWAP_ROWS_FP8";

/// The bf16 swapped chain's default bound. Measured on the H100 (session 52, bench/RESULTS.md):
/// one row 1.006-1.035× faster (Qwen3-4B, A3B slice, 0.6B) and two rows 1.00-1.016× (Qwen3-4B,
/// 0.6B, A3B slice), but four and eight rows of Qwen3-4B 0.973× and 0.953× (why not looked
/// into), so the chain takes the one- and two-row rounds only.
const MATMUL_SWAP_ROWS_BF16: usize = 2;
/// The FP8 swapped chain's default bound: every round it can take (MMA_COLS rows). Measured on
/// the H100 (session 52): Qwen3-4B FP8 1.205× at one row and 1.287× at eight, the A3B slice in
/// FP8 1.013× / 1.029× at one / two.
const MATMUL_SWAP_ROWS_FP8: usize = MMA_COLS;

/// Rounds of up to this many rows run their 16-row matmuls on the swapped chain, by weight kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SwapRows {
    pub(crate) bf16: usize,
    pub(crate) fp8: usize,
}

impl SwapRows {
    /// The same bound for both kinds (tests).
    #[cfg(test)]
    pub(crate) fn all(rows: usize) -> Self {
        Self {
            bf16: rows,
            fp8: rows,
        }
    }

    /// The bound of one kind of weights.
    fn of(self, fp8: bool) -> usize {
        match fp8 {
            true => self.fp8,
            false => self.bf16,
        }
    }

    /// The bounds from [`MATMUL_SWAP_ROWS_ENV`] and [`MATMUL_SWAP_ROWS_FP8_ENV`], each at most
    /// MMA_COLS (the rows an MMA's B holds).
    fn from_env() -> Self {
        let bound = |name: &str, default: usize| {
            env_number(name).map_or(default, |n: usize| n.min(MMA_COLS))
        };
        Self {
            bf16: bound(MATMUL_SWAP_ROWS_ENV, MATMUL_SWAP_ROWS_BF16),
            fp8: bound(MATMUL_SWAP_ROWS_FP8_ENV, MATMUL_SWAP_ROWS_FP8),
        }
    }
}

/// Whether a 16-row matmul of `rows` rows runs on the swapped chain: within the bound
/// `swap_rows` of its weights' kind ([`SwapRows`]: [`MATMUL_SWAP_ROWS_ENV`] for bf16,
/// [`MATMUL_SWAP_ROWS_FP8_ENV`] for FP8) and one MMA's B (MMA_COLS rows).
fn swaps(rows: usize, swap_rows: usize) -> bool {
    rows <= swap_rows.min(MMA_COLS)
}

/// Output tiles of 16 a block of the swapped chain for a 16-row plan of `tiles` n-tiles a block
/// (`deep`: the deep kernels', for matrices of at most a block a multiprocessor): one where the
/// plan had one n-tile or went deep (matrices whose blocks are few: as many blocks as outputs
/// allow), else two.
fn swap_tiles(tiles: usize, deep: bool) -> usize {
    match tiles == 1 || deep {
        true => 1,
        false => 2,
    }
}

/// Rows one warp of the matmul computes (an m16n8k16 tile's height).
const MMA_ROWS: usize = 16;
/// The matmul reads x and W in 16-element pieces: every matmul's `k` is a multiple of this.
pub const MMA_K_ALIGN: usize = 16;
/// N-tiles a block of the bf16 experts' gate/up may hold (`moe_gate_up_t1`, `_t2`,
/// `moe_gate_up`): each must divide MOE_I / 4 for every MOE_I the kernels take (a multiple of
/// 4·MMA_NT).
const MOE_GATE_UP_TILES: [usize; 3] = [1, 2, MMA_NT];
/// `FLASHLANE_MOE_FIT=0` runs every bf16 experts' gate/up at MMA_NT n-tiles a block instead of
/// [`moe_gate_up_tiles`]' count (an A/B switch; the bits do not change; any other value keeps
/// the default: before session 17, `1` fitted every step, prompts too).
pub const MOE_FIT_ENV: &str = "FLASHLANE_MOE_FIT";
/// Waves of resident blocks at MMA_NT n-tiles below which a step's gate/up takes fewer n-tiles a
/// block: on the H200 (session 17) a 1-stream A3B step (1.33 waves at 4, 2.67 at 2) decoded
/// 846 / 846 tok/s against 825 / 839, while fitting every step (a prefill of 128 rows: 27 waves
/// at 4 became 105 at 1) cut prefill by 11-24 %: one n-tile a block loads and splits x for 8
/// outputs instead of 32, which only a tail wave's idle multiprocessors repay.
const MOE_FIT_MAX_WAVES: usize = 2;
/// Rows (one warp each) per block of `moe_route`.
const MOE_ROUTE_WARPS: u32 = 4;
/// Threads of `moe_group`'s one block: it scans every expert and writes every pair's place.
const MOE_GROUP_THREADS: u32 = 1024;
/// Rows up to which `moe_route_group` routes and groups in one block (a warp a row): a decode
/// step of up to 8 streams makes one launch a layer instead of two. Its softmax numerators (8 ×
/// E floats) and the grouping's counters (3 × E ints) fit the 48 KiB of a block at
/// [`MOE_EXPERTS_MAX`] experts.
const MOE_ROUTE_GROUP_WARPS: usize = 8;
/// Threads per block of `moe_combine` (one per output of a row).
const MOE_COMBINE_THREADS: u32 = 256;
/// Most experts the MoE kernels take: `moe_route` keeps a row's softmax numerators in shared
/// memory (4 warps × E floats) and `moe_group` three counters per expert, under the 48 KiB a
/// block has without opting in (Qwen3-Next has 512).
const MOE_EXPERTS_MAX: usize = 1024;
/// Compares a thread of the MoE routers may make to rank every expert of their rows against
/// every other (`route_rows`): a 1-stream step's 128 experts on 1,024 threads are 16 each, and its
/// routing took 6.6 µs against 7.5 by rounds of warp-wide maxima; 8 rows (128 a thread) and the
/// 4-row blocks of many rows (512) ran 4 % slower than by rounds (bench/RESULTS.md session 15).
const MOE_RANK_COMPARES: usize = 32;
/// Most experts a token takes: `moe_route` keeps the k-th choice in lane k of a warp.
const MOE_TOP_K_MAX: usize = 32;
/// Threads per (row, head) of `attention_gated`: 16 warps split the keys (a decode row at a few
/// hundred positions then has a short chain of keys per warp).
const ATT_THREADS: u32 = 512;
/// Query heads of one KV head that `attention_grouped` takes in a block, at most: its merge
/// keeps ATT_WARPS × heads × head_dim floats in shared memory (32 KiB at 16 warps).
const ATT_GROUP_MAX_DIMS: usize = 512;
/// Rows from which `attention` runs `attention_grouped` (the same bits as `attention_gated`),
/// which loads a KV head's keys once for its group of query heads, not once a head. Under it a
/// block a head, so that few rows' keys spread over as many multiprocessors as there are heads.
/// Measured on the H200 in sessions 33–34 (bench/RESULTS.md), decode tok/s from 128 to 32:
/// Qwen3-0.6B +3–7 % at 32 and 64 streams, Qwen3-4B +3–6 %, -8B +3–4 %, the A3B slice (two KV
/// heads) the same. A bound of 16 cost Qwen3-0.6B 10 % at 16 streams (perhaps its 128 blocks of
/// 8 heads' pairs, under one wave); on Qwen3-4B and -8B (4 heads a group) it gained 2–4 % at 16
/// streams but lost 2 % on 4B at 24 (perhaps its 192 blocks, one and a half waves), so no shape
/// takes it.
const ATT_GROUPED_MIN_ROWS: usize = 32;
/// `FLASHLANE_ATTENTION_GROUPED_MIN_ROWS=N` moves that bound (A/B runs of one binary: the same
/// bits).
pub const ATTENTION_GROUPED_MIN_ROWS_ENV: &str = "FLASHLANE_ATTENTION_GROUPED_MIN_ROWS";

/// Warps of `attention_grouped_few`, each walking ATT_THREADS / 32 / ATT_FEW_WARPS of the
/// per-head kernel's key splits one after the other (the same chain).
const ATT_FEW_WARPS: usize = 4;
/// Head dims to which a prompt's attention runs `attention_grouped_few` (the same bits): with
/// heads of 128 (Qwen3-4B's shape) its prefill of 32 × 128 and 64 × 128 rose 7–8 % (16,304 →
/// 17,439 and 15,438 → 16,619 tok/s); with heads of 256 (the A3B slice, two heads a group) a
/// 128-token prompt fell 5 % (13,906 → 13,230) and 64 × 128 1.5 % (session 22, bench/RESULTS.md).
const ATT_FEW_WARPS_MAX_HEAD_DIM: usize = 128;
/// Rows from which a prompt's attention runs `attention_grouped_few` by default: at 128 rows (one
/// 128-token prompt) it measured the same or a little slower (Qwen3-0.6B 36,993 → 36,451 tok/s,
/// Qwen3-4B 7,519 → 7,556, Qwen3-8B 4,638 → 4,627; session 22), its fewer warps a block then
/// filling a quarter of the GPU's warp slots; from 4,096 rows it gained 4–25 %. A decode round
/// of 128–511 streams (long rows, few of them) keeps the 16 warps (4 were not measured there),
/// and so do rounds of 32–64: with 4 (`=1`) Qwen3-4B decoded 0.965× / 1.020× at 32 / 64 streams
/// and Qwen3-0.6B 0.898× / 0.996× (H100, session 57, bench/RESULTS.md).
const ATT_FEW_WARPS_MIN_ROWS: usize = 512;
/// `FLASHLANE_ATTENTION_FEW_WARPS=0` keeps a prompt's attention on `attention_grouped`, `=1`
/// runs `attention_grouped_few` whatever the head dim (A/B runs of one binary: the same bits).
pub const ATTENTION_FEW_WARPS_ENV: &str = "FLASHLANE_ATTENTION_FEW_WARPS";
/// Rounds of keys `attention_grouped_staged` keeps in shared memory: it multiplies one while the
/// next two are copied in (a round is the next key group of each of the 16 key splits: 64 keys,
/// 32 KiB of K and V for a bf16 head of 128, so 64 KiB in flight a block).
const ATT_STAGES: usize = 3;
/// Shared memory a block may opt into ([`HOPPER_BLOCK_SHARED_BYTES`]), less 8 KiB for what the
/// staged kernels hold beside their stages (the merge's maxima and sums, 512 bytes at most, its
/// factors under [`ATTENTION_SHARED_SOFTMAX_ENV`], 256 at most, and the prep's buffers in
/// `attention_grouped_staged_prep`: (group + 1) × head_dim floats, at most 5 × 256 × 4 bytes
/// where a group's dims are at most ATT_GROUP_MAX_DIMS): a model whose stages do not fit never
/// runs them.
const ATT_STAGED_SHARED_MAX: usize = HOPPER_BLOCK_SHARED_BYTES - 8 * 1024;
/// The staged attention takes the grouped attention's calls (calls of 32 rows and more that do
/// not take the few-warps kernel: decode rounds of 32–511 streams, prompts of under 512 rows,
/// and every prompt with heads over 128 dims), each round of keys copied into shared memory
/// ATT_STAGES − 1 rounds ahead. By default `attention_grouped_staged8` (8 warps of two key
/// splits each, the prep apart) where a block holds [`ATT_STAGED_MIN_GROUP`] query heads of its
/// KV head ([`staged_choice`]). `FLASHLANE_ATTENTION_STAGED=8` asks for it wherever it is
/// compiled, `=1` for `attention_grouped_staged` (16 warps a block; in a round whose every row
/// is its session's only one, with the prep inside too, `attention_grouped_staged_prep`, where
/// [`PREP_IN_ATTENTION_ENV`] allows: a launch fewer a layer), `=0` for none. The same chain,
/// the same bits (kernel tests). Measured on the H100 against the grouped kernel (session 58,
/// bench/RESULTS.md, decode tok/s, two interleaved rounds): `=8` Qwen3-4B 1.007× / 1.029× at
/// 32 / 64 streams, Qwen3-8B 1.015× at 64, Qwen3-0.6B (two heads a block) 0.998× / 0.994×; `=1`
/// Qwen3-4B 0.984× / 0.982×, Qwen3-8B 0.988×, Qwen3-0.6B 1.027× / 1.002×; prompts the same
/// (±0.9 %). An A/B switch.
pub const ATTENTION_STAGED_ENV: &str = "FLASHLANE_ATTENTION_STAGED";

/// Query heads a block of the grouped attention must hold for the staged kernel to take its
/// calls by default: a round of keys staged once serves that many heads. With 4 (Qwen3-4B and
/// -8B) `attention_grouped_staged8` measured faster at 32 and 64 streams; with 2
/// (Qwen3-0.6B) no faster (session 58).
const ATT_STAGED_MIN_GROUP: usize = 4;

/// Warps of a block of `attention_mma` and `attention_mma_cluster` (FLASHLANE_ATTENTION_MMA),
/// each walking key splits of its row: with heads of 128 and 4 query heads a KV head a block of
/// 4 takes 103 KB of shared memory (its tiles and its splits' states), so two fit a
/// multiprocessor.
const ATT_MMA_WARPS: usize = 4;
/// Keys of one of the tensor-core attention's tiles: the MMA's 16 rows.
const ATT_MMA_KEYS: usize = 16;
/// Tiles a warp of the tensor-core attention keeps in shared memory: it multiplies one while
/// the next is copied in (a tile of K and V rows of heads of 128 is 8 KiB; with 3 a block of
/// Qwen3-4B's shape would not leave a second its room beside the splits' states).
const ATT_MMA_STAGES: usize = 2;
/// Columns of the tensor-core attention's MMAs (n = 8): a row's query heads of a KV head, or
/// in `attention_mma_rows` several rows' side by side.
const ATT_MMA_COLUMNS: usize = 8;
/// Query heads of a KV head that the tensor-core attention holds at most: the MMA's columns.
const ATT_MMA_MAX_GROUP: usize = ATT_MMA_COLUMNS;
// The tensor-core attention (`--attention-kernel tensor-cores`, or `crate::ATTENTION_MMA_ENV`;
// by-context: the rows from a position on) runs on `attention_mma` for many rows and
// `attention_mma_cluster` for few (the same bits) where it is compiled ([`att_mma_fits`]): other
// bits than the other kernels' (within the reference's tolerance), the same for a row alone or
// batched. Alone it loses 3–20 % at 1–8 streams over 128-token prompts on the H100 (session 65,
// bench/RESULTS.md) and gains from ~512 keys on; so the default runs it by context, from
// `crate::TENSOR_CORES_FROM_POSITION` on, on the groups [`attention_by_default`] takes.

/// Under the tensor-core attention a call's rows that may share keys (a prompt's) run on
/// `attention_mma_rows`, a block taking as many rows of one session as an MMA's 8 columns hold
/// groups of query heads (2 of Qwen3-4B's, 4 of -0.6B's), so their keys are copied and
/// multiplied once for all: the same bits as `attention_mma` (kernel test). Measured on the
/// H100 (session 65): prefill 1.17× on Qwen3-0.6B's 64 prompts of 128 tokens, 1.26× on
/// Qwen3-4B's one of 2,048, 1.00× on Qwen3-4B's 64 of 128; decode the same. Its blocks take
/// 136 KB of shared memory with heads of 128 (one a multiprocessor, where `attention_mma`'s two
/// fit). `FLASHLANE_ATTENTION_MMA_ROWS=0` keeps a prompt's rows on `attention_mma` (an A/B
/// switch: the same bits).
pub const ATTENTION_MMA_ROWS_ENV: &str = "FLASHLANE_ATTENTION_MMA_ROWS";

/// Key splits of a row in the tensor-core attention, a fixed number for every call (its chain):
/// 16, as the other attention kernels split a row, for heads of up to 128 dims; 8 for wider
/// ones, whose splits' states (8 heads of 256 floats each) would not fit a block beside the
/// tiles.
fn att_mma_splits(head_dim: usize) -> usize {
    if head_dim <= 128 {
        16
    } else {
        8
    }
}

/// Warps of a block of `attention_mma_cluster_prep` for `group` query heads a KV head
/// (attention.cu's ATT_MMA_PREP_WARPS): every block preps the group's query heads, a warp each,
/// and one block the KV head too, so that none waits on another before its walk; at least the
/// [`ATT_MMA_WARPS`] that walk.
fn att_mma_prep_warps(group: usize) -> usize {
    (group + 1).max(ATT_MMA_WARPS)
}

/// Dynamic shared memory of a block of the tensor-core attention holding `slots` splits'
/// states of `columns` columns each (`attention_mma` all splits of a group's heads,
/// `attention_mma_cluster` a block's warps', `attention_mma_rows` all of [`att_mma_rows`] rows'
/// groups): q's split B fragments (head_dim × 32 bytes), each warp's tiles of K and V rows, then
/// the states (m and l of each column, then its head_dim outputs a column, in f32).
fn att_mma_shared_bytes(dims: &Dims, slots: usize, columns: usize) -> usize {
    let q = dims.head_dim * 32;
    let tiles = ATT_MMA_WARPS * ATT_MMA_STAGES * 2 * ATT_MMA_KEYS * dims.head_dim * 2;
    q + tiles + slots * (2 * columns + columns * dims.head_dim) * 4
}

/// Rows of one session a block of `attention_mma_rows` takes (attention.cu's ATT_MMA_ROWS): as
/// many whole groups of `group` query heads as fill an MMA's 8 columns, so that the rows' keys
/// are copied and multiplied once for all of them.
fn att_mma_rows(group: usize) -> usize {
    ATT_MMA_COLUMNS / group.max(1)
}

/// The tensor-core attention's shared memory bytes a block (`attention_mma`'s,
/// `attention_mma_cluster`'s, `attention_mma_rows`') where attention.cu compiles it (a bf16
/// cache, heads a whole number of MMA steps of 16 dims, at most [`ATT_MMA_MAX_GROUP`] query
/// heads a KV head) and its blocks fit ([`ATT_STAGED_SHARED_MAX`]: `attention_mma_rows`' too, or
/// it never runs); else none.
fn att_mma_fits(dims: &Dims) -> Option<MmaShared> {
    let group = dims.group();
    let splits = att_mma_splits(dims.head_dim);
    let bytes = MmaShared {
        whole: att_mma_shared_bytes(dims, splits, group),
        cluster: att_mma_shared_bytes(dims, ATT_MMA_WARPS, group),
        rows: att_mma_shared_bytes(dims, splits, att_mma_rows(group) * group),
    };
    (dims.kv == KvDtype::Bf16
        && dims.head_dim.is_multiple_of(16)
        && group <= ATT_MMA_MAX_GROUP
        && bytes.whole <= ATT_STAGED_SHARED_MAX)
        .then_some(bytes)
}

/// The attention a model of `dims` runs unless asked ([`crate::default_attention_kernels`]):
/// by context from [`crate::TENSOR_CORES_FROM_POSITION`] where a KV head serves one of
/// [`crate::TENSOR_CORES_DEFAULT_GROUPS`]' numbers of query heads and the tensor-core kernels
/// fit, simt otherwise.
pub(crate) fn attention_by_default(dims: &Dims) -> crate::AttentionKernels {
    match crate::TENSOR_CORES_DEFAULT_GROUPS.contains(&dims.group()) && att_mma_fits(dims).is_some()
    {
        true => crate::AttentionKernels::ByContext {
            tensor_cores_from: crate::TENSOR_CORES_FROM_POSITION,
        },
        false => crate::AttentionKernels::Simt,
    }
}

/// The tensor-core attention's dynamic shared memory a block, by kernel.
#[derive(Clone, Copy, Debug)]
struct MmaShared {
    whole: usize,
    cluster: usize,
    rows: usize,
}

impl MmaShared {
    /// Whether `attention_mma_rows`' blocks fit.
    fn rows_fit(&self) -> bool {
        self.rows <= ATT_STAGED_SHARED_MAX
    }
}

/// The staged kernel that takes the grouped attention's calls: as `asked`
/// ([`ATTENTION_STAGED_ENV`]'s value) says — `0` none, `1` the 16-warp kernel, `8` the 8-warp
/// one — else (unset or any other value, as the other on-by-default switches read theirs) the
/// 8-warp one where a block holds `group` ≥ [`ATT_STAGED_MIN_GROUP`] query heads, else none.
fn staged_choice(asked: Option<&str>, group: usize) -> Option<AttentionKernel> {
    match asked {
        Some("0") => None,
        Some("1") => Some(AttentionKernel::GroupedStaged),
        Some("8") => Some(AttentionKernel::GroupedStaged8),
        _ => (group >= ATT_STAGED_MIN_GROUP).then_some(AttentionKernel::GroupedStaged8),
    }
}

/// Dynamic shared memory of a block of the staged attention for `dims`: ATT_STAGES rounds of K
/// and V rows of one KV head (the merge's states, ATT_WARPS × group × head_dim floats, reuse
/// them once the rounds are done).
fn att_staged_shared_bytes(dims: &Dims) -> usize {
    let warps = ATT_THREADS as usize / 32;
    let stages = ATT_STAGES * 2 * warps * ATT_KEY_GROUP * dims.head_dim * kv_bytes(dims.kv);
    let merge =
        warps * attention_group(dims.heads, dims.kv_heads, dims.head_dim) * dims.head_dim * 4;
    stages.max(merge)
}

/// `function` allowed `bytes` of dynamic shared memory a block (past the 48 KiB a block gets
/// without asking).
fn with_shared_bytes(function: CudaFunction, bytes: usize) -> Result<CudaFunction, CudaError> {
    function.set_attribute(
        cudarc::driver::sys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        i32::try_from(bytes).expect("a block's shared memory fits i32"),
    )?;
    Ok(function)
}

/// The tensor-core attention's kernels ([`crate::ATTENTION_MMA_ENV`]), each with its shared memory
/// bytes.
struct MmaAttention {
    /// `attention_mma`: a block per (row, KV head).
    whole: (CudaFunction, u32),
    /// `attention_mma_cluster`: a cluster of `cluster_blocks` blocks per (row, KV head).
    cluster: (CudaFunction, u32),
    /// `attention_mma_cluster_prep`: the prep, then the cluster kernel's attention (its shared
    /// memory).
    cluster_prep: CudaFunction,
    cluster_blocks: usize,
    /// `attention_mma_rows`: a block per [`att_mma_rows`] rows (one session's, where they are)
    /// and KV head; none where its blocks do not fit.
    rows: Option<(CudaFunction, u32)>,
}

/// The staged attention's kernels ([`ATTENTION_STAGED_ENV`]) and their shared memory.
struct StagedAttention {
    /// `attention_grouped_staged` (16 warps) and `attention_grouped_staged8` (8).
    by_warps: [CudaFunction; 2],
    /// `attention_grouped_staged_prep`: the prep, then the 16-warp kernel's attention.
    with_prep: CudaFunction,
    shared_bytes: u32,
}

/// Bytes of one cached K or V element.
fn kv_bytes(kv: KvDtype) -> usize {
    match kv {
        KvDtype::Bf16 => 2,
        KvDtype::F32 => 4,
    }
}

/// The shared memory bytes of the staged attention for `dims` where it is compiled (a head's
/// slice of a cache row is whole 16-byte copies, as attention.cu's `#if` asks) and its stages
/// fit a block ([`ATT_STAGED_SHARED_MAX`]); else none.
fn att_staged_fits(dims: &Dims) -> Option<usize> {
    let bytes = att_staged_shared_bytes(dims);
    ((dims.head_dim * kv_bytes(dims.kv)).is_multiple_of(16) && bytes <= ATT_STAGED_SHARED_MAX)
        .then_some(bytes)
}
/// Keys of a key group of a split (ATT_KEY_GROUP in attention.cu).
const ATT_KEY_GROUP: usize = 4;

/// How attention loads a key group's K and V (`attention.cu`, ATT_KV_AHEAD): 0 each key's K
/// where its score is taken and its V where it is added, behind the branch that ends a group
/// past the row's position, so a group of 4 keys waited on five loads one after another; 1 the
/// group's 4 K and 4 V rows issued together before its scores; 2 also the next group's before
/// this group's arithmetic, in the per-head kernels with heads of at most 128 dims (the grouped
/// kernels and heads of 256 take 1: `att_kv_ahead`). The
/// same arithmetic, the same bits (kernel test). The kernel timeline had Qwen3-0.6B's one-row
/// attention at 9–15 µs a layer, 25–40 % of a one-stream round; against 0 on the H100
/// (session 55, bench/RESULTS.md; prompt 128, 64 new tokens, two interleaved rounds), decode
/// with 2 everywhere: Qwen3-0.6B 1.17× / 1.11× / 1.06× at 1 / 8 / 64 streams, prompts
/// 0.91–0.96×; Qwen3-4B 1.04× / 0.99× / 1.09×; with 1 everywhere: Qwen3-0.6B 1.03× / 1.03× /
/// 1.13×, prompts 0.97–1.04×; Qwen3-4B 1.01× / 1.01× / 1.09×; the A3B slice (heads of 256)
/// 1.01× either way.
const ATT_KV_AHEAD: usize = 2;
/// `FLASHLANE_ATTENTION_KV_AHEAD=0|1|2` sets that (A/B runs of one binary: the same bits).
pub const ATTENTION_KV_AHEAD_ENV: &str = "FLASHLANE_ATTENTION_KV_AHEAD";

/// `FLASHLANE_ATTENTION_SHARED_SOFTMAX=0` has every lane of the simt attention take each
/// score's butterfly and each softmax exp of a key group (`att_group_lanes`), and every output
/// of its merge all 16 splits' factors of its head. By default a key group's scores and exps are
/// shared out over the warp's lanes (`att_group_shared`: one butterfly halving a group's 16
/// scores at each offset, one lane an exp) and the merge takes each split's factor of a head
/// once (`att_merge`). The same sums in the same order and the same exps: the same bits (kernel
/// test; the whole-model GPU tests pass with it); an A/B switch. Written in session 72 after
/// session 62's ncu had `attention_grouped_staged8` issue-bound at 64 streams (64 % of issue
/// slots, DRAM 32 %); nvcc 13.2 gives its kernels 64 shuffles and 1 `expf` a group where the
/// other chain takes 80 and 32, and 1 `expf` a merge where it takes 16 (unrolled), the same
/// registers or fewer, no spills. Measured on an H100 (bench/RESULTS.md session 73, 2 rounds,
/// decode tok/s against `=0`): Qwen3-4B 1.007× / 1.012× / 1.034× / 1.055× at 1 / 8 / 32 / 64
/// streams (prefill 1.03–1.05×), Qwen3-8B 1.006× / 1.007× / 1.037× at 1 / 8 / 64, Qwen3-0.6B
/// 1.048× at 64 (prefill 1.09×), the A3B slice (heads of 256) 1.00× at 8 and 64.
pub const ATTENTION_SHARED_SOFTMAX_ENV: &str = "FLASHLANE_ATTENTION_SHARED_SOFTMAX";

/// ATT_KV_AHEAD, or [`ATTENTION_KV_AHEAD_ENV`]'s 0, 1 or 2 where set.
fn attention_kv_ahead() -> usize {
    env_number(ATTENTION_KV_AHEAD_ENV)
        .filter(|&ahead| ahead <= 2)
        .unwrap_or(ATT_KV_AHEAD)
}

/// A call's q/k norms, RoPE and cache write run inside the per-head attention kernel
/// (`attention_gated_prep`) where every row is its session's only one: a launch fewer an
/// attention layer in one-row rounds (a decode step of up to 31 streams, a draft step). The same
/// bits (kernel test). Measured on the H100 (session 50, bench/RESULTS.md; two interleaved
/// rounds): Qwen3-0.6B +0.9 % at one stream and +4.2 % at 8, Qwen3-4B +0.7 % and +1.7 %.
/// `FLASHLANE_PREP_IN_ATTENTION=0` keeps the prep a launch of its own (A/B runs of one binary).
pub const PREP_IN_ATTENTION_ENV: &str = "FLASHLANE_PREP_IN_ATTENTION";

/// Heads of a block of `attention_grouped` for `heads` query heads over `kv_heads` of
/// `head_dim`: the most of 4, 2, 1 that divides a KV head's query heads and keeps the merge
/// within ATT_GROUP_MAX_DIMS.
fn attention_group(heads: usize, kv_heads: usize, head_dim: usize) -> usize {
    let per_kv = heads / kv_heads.max(1);
    [4, 2, 1]
        .into_iter()
        .find(|&g| per_kv.is_multiple_of(g) && g * head_dim <= ATT_GROUP_MAX_DIMS)
        .unwrap_or(1)
}

/// Threads per block of `argmax_rows`.
const ARGMAX_THREADS: u32 = 1024;
/// Blocks (one cluster) of `argmax_rows` a row: a 151,936-logit row read by one block took 18.8
/// µs of a 1-stream A3B-slice step (one multiprocessor's load rate); eight took 7.0 (ncu,
/// bench/RESULTS.md session 15). 8 is the largest cluster every sm_90 part runs.
const ARGMAX_SPLIT: u32 = 8;
/// Logits a thread of `argmax_rows` loads at once before comparing them (in index order).
const ARGMAX_BATCH: usize = 8;
/// Threads per block of `draw_rows`: 16 warps; its histograms (a copy per two warps) stay
/// within the 48 KiB a block gets unasked.
const DRAW_THREADS: u32 = 512;
/// Blocks (one cluster) of `draw_rows` a row: one block a row took 0.6 ms (temperature 1) to
/// 1.1 ms (top-k 20, top-p 0.95) to draw from a 151,936-token row, one multiprocessor's pace
/// (H200, session 20: a 1-stream token 15–24 % slower than greedy); 8 is the largest cluster
/// every sm_90 part runs.
const DRAW_SPLIT: u32 = 8;
/// Ints of one draw's ask in the round's metadata (`draw_rows`: row, top_k, temperature, top_p,
/// min_p, the uniform's two words, the id's slot).
pub(crate) const DRAW_ASK_INTS: usize = 8;
/// The largest vocabulary `draw_rows` draws from: its fixed-point weights (2^44 the heaviest)
/// must sum below 2^64 (2^20 of them could reach it exactly), and a token's rank fits 24 bits.
/// Larger models draw on the host.
pub const DRAW_MAX_VOCAB: usize = (1 << 20) - 1;
/// Lanes that share one column of a DeltaNet head's state in `deltanet_recurrence` (each keeps
/// key_head_dim / 4 rows in registers: 32 for Qwen3-Next's 128).
const LIN_SPLIT: usize = 4;
/// Most tokens `deltanet_recurrence` stages at once: their state-independent inputs (q, k and
/// their norms, v, β, the decay) are loaded and computed together, then the tokens run back to
/// back without a barrier, then their output norms together (`lin_stage`).
const LIN_STAGE_MAX: usize = 16;
/// Shared memory a block gets without asking for more.
const BLOCK_SHARED_UNASKED: usize = 48 * 1024;

/// Tokens `deltanet_recurrence` stages at once for heads of `dk` keys and `dv` values:
/// [`LIN_STAGE_MAX`], fewer where a stage's arrays (each token's q and k with a word of padding
/// a lane group, v and outputs, and five scalars) would not fit in [`BLOCK_SHARED_UNASKED`] (16
/// tokens are 33 KiB at Qwen3-Next's 128 and 128). The bits do not depend on it.
fn lin_stage(dk: usize, dv: usize) -> usize {
    let per_token = 4 * (2 * (dk + LIN_SPLIT) + 2 * dv + 5);
    ((BLOCK_SHARED_UNASKED - LIN_STAGE_SHARED_SLACK) / per_token).clamp(1, LIN_STAGE_MAX)
}

/// Shared bytes `deltanet_recurrence` takes beside its stage arrays (ptxas counted 4 of
/// alignment at 128 / 256 and 256 / 256); kept free when the stage is sized.
const LIN_STAGE_SHARED_SLACK: usize = 64;
/// Blocks (one cluster) of `deltanet_recurrence_split` a value head: a 1-stream step's 32
/// Qwen3-Next heads then run on 128 of the H200's 132 multiprocessors instead of 32.
const LIN_CLUSTER: usize = 4;
/// Tokens a window may average for a step to run `deltanet_recurrence_split`: a decode step (1)
/// and one verifying up to 3 drafts (4). Longer windows (prompts) wait on three cluster-wide
/// barriers a stage of tokens (`lin_stage`); block-wide ones are cheaper.
const LIN_CLUSTER_MAX_TOKENS: usize = 4;
/// `FLASHLANE_DELTANET_SPLIT=0` keeps every step on `deltanet_recurrence` (for A/B runs of one
/// binary: the bits do not change). Splitting every decode step (the fill condition of
/// [`splits_recurrence`] dropped) was measured 1 % slower at 8-64 streams on the A3B slice
/// (H100, bench/RESULTS.md session 47).
pub const DELTANET_SPLIT_ENV: &str = "FLASHLANE_DELTANET_SPLIT";
/// The decode steps (one token a window) that do not split run on `deltanet_recurrence_two` (two
/// blocks a multiprocessor, the same bits) instead of `deltanet_recurrence` (one: ncu on a
/// 64-stream A3B step, bench/RESULTS.md session 47, found 86 % of its cycles with no warp ready
/// and the HBM at 39 %). On the H100 (session 48, 2 rounds) the A3B slice decoded +1.9 % at 64
/// streams, even at 8 and 32 (0.998 / 1.006×). `FLASHLANE_DELTANET_TWO_BLOCKS=0` keeps them on
/// `deltanet_recurrence` (an A/B switch: the same bits).
pub const DELTANET_TWO_BLOCKS_ENV: &str = "FLASHLANE_DELTANET_TWO_BLOCKS";

/// `deltanet_recurrence_two`'s preferred shared-memory carve-out, in percent of the most a
/// multiprocessor has (228 KiB on Hopper): at least two blocks' 34 KiB, the least above.
const DELTANET_TWO_BLOCKS_CARVEOUT_PERCENT: i32 = 44;

/// Which kernel runs a DeltaNet step's recurrence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RecurrenceKernel {
    /// `deltanet_recurrence`: a block a (window, head), one a multiprocessor.
    Whole,
    /// `deltanet_recurrence_split`: a cluster of [`LIN_CLUSTER`] blocks a (window, head).
    Split,
    /// `deltanet_recurrence_two`: the whole kernel at two blocks a multiprocessor.
    TwoBlocks,
}

/// The recurrence's kernel for a step of `rows` tokens in `windows` windows: the split where
/// [`splits_recurrence`] takes the step (and `split` allows it), else for a decode step of one
/// token a window the two-block kernel where `two_blocks` asks for it, else the whole kernel.
/// All three give the same bits. Only rows and windows are known here (a round's graph is keyed
/// by them), so a step of longer windows never takes the two-block kernel: an average would let
/// a prompt chunk among decode windows run 128 tokens at 64 registers with spills.
fn recurrence_kernel(
    split: bool,
    two_blocks: bool,
    rows: usize,
    windows: usize,
    value_heads: usize,
    value_head_dim: usize,
    multiprocessors: usize,
) -> RecurrenceKernel {
    if split && splits_recurrence(rows, windows, value_heads, value_head_dim, multiprocessors) {
        RecurrenceKernel::Split
    } else if two_blocks && windows > 0 && rows == windows {
        RecurrenceKernel::TwoBlocks
    } else {
        RecurrenceKernel::Whole
    }
}

/// The DeltaNet layer's kernels.
struct DeltaNetKernels {
    conv: CudaFunction,
    whole: CudaFunction,
    split: CudaFunction,
    two_blocks: CudaFunction,
}

/// Threads per block of `deltanet_conv` (one per channel; a window's channels span blocks).
const CONV_THREADS: u32 = 256;
/// Threads per block of `swiglu_rows` (a grid-stride loop over every element of the batch).
const SWIGLU_THREADS: u32 = 256;
/// Blocks of `swiglu_rows` at most (each then loops): plenty to fill the GPU.
const SWIGLU_BLOCKS_MAX: usize = 1024;
/// Threads per row of the element-wise row kernels (embedding, row copies).
const ROW_THREADS: u32 = 128;
/// The most taps the depthwise conv keeps in registers.
const MAX_CONV_KERNEL: usize = 8;
/// Threads a block may have.
const BLOCK_THREADS_MAX: usize = 1024;
/// Heads (a warp each) per block of `attention_prep`: a row's heads span blocks, so any number
/// of heads fits (Qwen3-32B's 64 query and 8 KV heads are 9 blocks a row).
const ATT_PREP_WARPS: u32 = 8;

/// Widest attention head: a lane of `attention_gated` keeps 8 of its dims in registers.
const ATT_HEAD_DIM_MAX: usize = 256;

/// The sizes baked into the compiled kernels.
pub struct Dims {
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub rotary_dim: usize,
    /// Qwen3-Next's attention: q_proj holds a sigmoid gate per head beside the query, and its
    /// RMSNorms are zero-centred (`x̂·(1 + w)`); Qwen3's has neither.
    pub qwen3_next: bool,
    pub linear: Option<LinearAttentionConfig>,
    pub moe: Option<MoeConfig>,
    /// How the sessions' K and V rows are stored.
    pub kv: KvDtype,
    /// Whether x enters the matmuls' tensor cores as two bf16 halves (hi and lo, ~16 bits of
    /// mantissa: `MatmulInput::Exact`, the default) or as one bf16 (`--matmul-input bf16`): the
    /// matmuls (dense, FP8, tiled, the MoE's experts) then make half the tensor-core products,
    /// at bf16's 8 bits of x's mantissa, as vLLM's and llama.cpp's bf16 matmuls do (on the
    /// H200, session 17: 4-5 % faster decode at 1 stream, 20 % faster prefill on the Qwen3-4B
    /// shape). The replies change (each stays the same alone or batched), so the parity
    /// fixtures, made for the split, do not hold under it.
    pub matmul_split: bool,
    /// Whether the model's projections hold block-scaled FP8 weights (some or all): in hybrid
    /// models that compiles the warpgroup module for their decode rounds' FP8 split
    /// ([`hybrid_fp8_rounds_split`]).
    pub fp8_weights: bool,
    /// Which kernels the attention runs on (`--attention-kernel`).
    pub attention: crate::AttentionKernels,
}

/// `#define NAME VALUE` lines, one a (name, value).
fn defines_text(list: &[(&str, usize)]) -> String {
    list.iter()
        .map(|(name, v)| format!("#define {name} {v}\n"))
        .collect()
}

impl Dims {
    pub fn of(config: &Config, kv: KvDtype) -> Result<Dims, CudaError> {
        let dims = Dims {
            hidden: config.hidden_size,
            heads: config.num_heads,
            kv_heads: config.num_kv_heads,
            head_dim: config.head_dim,
            rotary_dim: config.rotary_dim,
            qwen3_next: config.arch == Arch::Qwen3Next,
            linear: config.linear.clone(),
            moe: config.moe.clone(),
            kv,
            matmul_split: true,
            fp8_weights: false,
            attention: crate::AttentionKernels::Simt,
        };
        dims.check()?;
        Ok(dims)
    }

    /// Query heads a KV head.
    pub fn group(&self) -> usize {
        self.heads / self.kv_heads.max(1)
    }

    /// Whether this model's attention can run on the kernels [`Dims::attention`] names: the
    /// tensor-core attention needs bf16 keys and values, heads a whole number of its MMA's 16
    /// dims and at most 8 query heads a KV head ([`att_mma_fits`]).
    pub fn check_attention(&self) -> Result<(), CudaError> {
        if !self.attention.uses_tensor_cores() || att_mma_fits(self).is_some() {
            return Ok(());
        }
        let group = self.group();
        Err(CudaError::Unsupported(format!(
            "--attention-kernel {}: this model's attention (keys and values as {}, \
             heads of {}, {group} query heads a KV head) does not fit the tensor-core kernels, \
             which need bf16 keys and values, heads a multiple of 16 wide and at most \
             {ATT_MMA_MAX_GROUP} query heads a KV head; use --attention-kernel simt",
            self.attention.name(),
            self.kv.name(),
            self.head_dim,
        )))
    }

    fn check(&self) -> Result<(), CudaError> {
        let unsupported = |what: String| Err(CudaError::Unsupported(what));
        if !self.hidden.is_multiple_of(MMA_K_ALIGN)
            || !(self.heads * self.head_dim).is_multiple_of(MMA_K_ALIGN)
        {
            return unsupported(format!(
                "hidden {} and heads·head_dim {} must be multiples of {MMA_K_ALIGN}",
                self.hidden,
                self.heads * self.head_dim
            ));
        }
        if self.head_dim > ATT_HEAD_DIM_MAX {
            return unsupported(format!(
                "head_dim {}: the attention kernel keeps a head's dims in registers, 8 a lane, at \
                 most {ATT_HEAD_DIM_MAX}",
                self.head_dim
            ));
        }
        if self.kv_heads == 0 || !self.heads.is_multiple_of(self.kv_heads) {
            return unsupported(format!(
                "{} query heads over {} KV heads: each KV head must serve the same number of query heads",
                self.heads, self.kv_heads
            ));
        }
        if let Some(l) = &self.linear {
            // `deltanet_recurrence` splits each key column over LIN_SPLIT lanes and runs whole
            // warps of them, a block per head.
            if !(2..=MAX_CONV_KERNEL).contains(&l.conv_kernel)
                || !(l.num_value_heads * l.value_head_dim).is_multiple_of(MMA_K_ALIGN)
                || !l.key_head_dim.is_multiple_of(LIN_SPLIT)
                || !(l.value_head_dim * LIN_SPLIT).is_multiple_of(32)
                || l.value_head_dim * LIN_SPLIT > BLOCK_THREADS_MAX
            {
                return unsupported(format!("linear attention sizes {l:?}"));
            }
        }
        if let Some(m) = &self.moe {
            // The expert matmuls read k (I, IS) in the matmul's pieces; `moe_gate_up` computes
            // 4·MMA_NT (16) units of I per block.
            if !m
                .expert_intermediate
                .is_multiple_of(MMA_K_ALIGN.max(4 * MMA_NT))
                || !m.shared_expert_intermediate.is_multiple_of(MMA_K_ALIGN)
            {
                return unsupported(format!(
                    "MoE widths {} and {} (shared) must be multiples of {}",
                    m.expert_intermediate,
                    m.shared_expert_intermediate,
                    MMA_K_ALIGN.max(4 * MMA_NT)
                ));
            }
            if !(1..=MOE_EXPERTS_MAX).contains(&m.num_experts)
                || !(1..=MOE_TOP_K_MAX.min(m.num_experts)).contains(&m.experts_per_token)
            {
                return unsupported(format!(
                    "{} experts, {} a token: the MoE kernels take at most {MOE_EXPERTS_MAX} \
                     experts and {MOE_TOP_K_MAX} a token",
                    m.num_experts, m.experts_per_token
                ));
            }
        }
        Ok(())
    }

    fn defines(&self) -> String {
        defines_text(&self.define_list())
    }

    /// The `#define`s the kernels are compiled with, as (name, value).
    fn define_list(&self) -> Vec<(&'static str, usize)> {
        let block = |v: u32| v as usize;
        let mut d = vec![
            ("MMA_WARPS", block(MMA_WARPS)),
            ("MMA_ROWS", MMA_ROWS),
            ("MMA_COLS", MMA_COLS),
            ("MMA_NT", MMA_NT),
            ("MMA_NARROW_DEPTH", narrow_depth()),
            (
                "MMA_NARROW_ONE_BLOCK",
                usize::from(narrow_depth() > MMA_NARROW_DEPTH),
            ),
            ("MMA_DEEP_DEPTH", MMA_DEEP_DEPTH),
            ("MMA_SPLIT", usize::from(self.matmul_split)),
            ("MMA_CHUNK", MMA_CHUNK),
            ("MMA_FP8_NARROW_DEPTH", MMA_FP8_NARROW_DEPTH),
            ("MMA_FP8_WIDE_DEPTH", MMA_FP8_WIDE_DEPTH),
            ("MMA_X_PRESPLIT", MMA_X_PRESPLIT),
            ("MOE_BF16_DEPTH", MOE_BF16_DEPTH),
            ("MOE_FP8_DEPTH", MOE_FP8_DEPTH),
            ("MMA_MIN_BLOCKS", MMA_MIN_BLOCKS),
            ("MMT_STAGES", MMT_STAGES),
            ("MMT_PROBE", MMT_PROBE),
            (
                "MMA_PREFETCH_MAX_BYTES",
                env_number(MATMUL_PREFETCH_MAX_MB_ENV)
                    .map_or(MMA_PREFETCH_MAX_BYTES, |mb| mb << 20),
            ),
            (
                "MMA_EARLY_WEIGHTS",
                usize::from(match std::env::var(MATMUL_EARLY_WEIGHTS_ENV).as_deref() {
                    Ok("0") => false,
                    Ok("1") => true,
                    _ => loads_weights_early(self),
                }),
            ),
            (
                "MMT_EARLY_WEIGHTS",
                usize::from(
                    match std::env::var(MATMUL_TILED_EARLY_WEIGHTS_ENV).as_deref() {
                        Ok("0") => false,
                        Ok("1") => true,
                        _ => loads_weights_early(self),
                    },
                ),
            ),
            (
                "MMT_WEIGHTS_EVICT_FIRST",
                usize::from(env_asked(MATMUL_EVICT_FIRST_ENV)),
            ),
            // The tiled kernels walk the k split of the 16-row kernels' MMA_WARPS warps.
            ("MMT_RESIDUES", block(MMA_WARPS)),
            ("MMT_ROWS", MMT_ROWS),
            ("MMT_OUTS", MMT_OUTS),
            ("SPLIT_THREADS", block(SPLIT_THREADS)),
            ("NORM_WARPS", block(NORM_WARPS)),
            ("MMA_NORM_LOADS", norm_loads(self.hidden)),
            ("MMA_NORM_TWINS", usize::from(norm_in_matmul_max_rows() > 0)),
            ("MOE_ROUTE_WARPS", block(MOE_ROUTE_WARPS)),
            ("MOE_GROUP_THREADS", block(MOE_GROUP_THREADS)),
            ("MOE_ROUTE_GROUP_WARPS", MOE_ROUTE_GROUP_WARPS),
            ("MOE_RANK_COMPARES", MOE_RANK_COMPARES),
            ("MOE_COMBINE_THREADS", block(MOE_COMBINE_THREADS)),
            ("ATT_THREADS", block(ATT_THREADS)),
            ("ATT_FEW_WARPS", ATT_FEW_WARPS),
            ("ATT_KV_AHEAD", attention_kv_ahead()),
            (
                "ATT_SHARED_SOFTMAX",
                usize::from(env_on(ATTENTION_SHARED_SOFTMAX_ENV)),
            ),
            ("ATT_STAGES", ATT_STAGES),
            ("ARGMAX_THREADS", block(ARGMAX_THREADS)),
            ("ARGMAX_BATCH", ARGMAX_BATCH),
            ("ARGMAX_SPLIT", block(ARGMAX_SPLIT)),
            ("DRAW_THREADS", block(DRAW_THREADS)),
            ("DRAW_SPLIT", block(DRAW_SPLIT)),
            ("DRAW_ASK_INTS", DRAW_ASK_INTS),
            ("ATT_HEADS", self.heads),
            ("ATT_KV_HEADS", self.kv_heads),
            (
                "ATT_GROUP",
                attention_group(self.heads, self.kv_heads, self.head_dim),
            ),
            ("ATT_HD", self.head_dim),
            ("ATT_ROT", self.rotary_dim),
            ("ATT_GATED", usize::from(self.qwen3_next)),
            // common.cu's NORM_PLAIN (0) or NORM_ZERO_CENTRED (1).
            ("ATT_NORM_KIND", usize::from(self.qwen3_next)),
            ("ATT_PREP_WARPS", block(ATT_PREP_WARPS)),
            ("ATT_KV_BF16", usize::from(self.kv == KvDtype::Bf16)),
            ("ATT_MMA_WARPS", ATT_MMA_WARPS),
            ("ATT_MMA_STAGES", ATT_MMA_STAGES),
            ("ATT_MMA_SPLITS", att_mma_splits(self.head_dim)),
            ("ATT_MMA_ROWS", att_mma_rows(self.group())),
        ];
        if let Some(l) = &self.linear {
            d.extend([
                ("LIN_HK", l.num_key_heads),
                ("LIN_HV", l.num_value_heads),
                ("LIN_DK", l.key_head_dim),
                ("LIN_DV", l.value_head_dim),
                ("LIN_CONV_K", l.conv_kernel),
                ("LIN_SPLIT", LIN_SPLIT),
                ("LIN_CLUSTER", LIN_CLUSTER),
                ("LIN_STAGE", lin_stage(l.key_head_dim, l.value_head_dim)),
            ]);
        }
        if let Some(m) = &self.moe {
            d.extend([
                ("MOE_E", m.num_experts),
                ("MOE_K", m.experts_per_token),
                ("MOE_I", m.expert_intermediate),
                ("MOE_IS", m.shared_expert_intermediate),
                ("MOE_NORM_TOPK", usize::from(m.norm_topk_prob)),
                ("MOE_H", self.hidden),
            ]);
        }
        // Only when asked, so that the kernels' source (and PTX) is otherwise as without it.
        if crate::timeline::timeline_on() {
            d.extend([
                ("FL_TIMELINE", 1),
                ("FL_TIMELINE_CAP", crate::timeline::TIMELINE_CAPACITY),
            ]);
        }
        d
    }

    /// The warpgroup matmul's module: the sizes, the warpgroup block's, the common code, the
    /// matmuls' and `matmul_wg.cu`.
    fn wgmma_source(&self) -> String {
        let mut defines = self.defines();
        for (name, v) in [
            ("MMW_ROWS", MMW_ROWS),
            ("MMW_OUTS", MMW_OUTS),
            ("MMW_STAGES", MMW_STAGES),
            ("MMW_THREADS", MMW_THREADS as usize),
            ("MWS_X_STAGES", MWS_X_STAGES),
            ("MWS_W_DEPTH", MWS_W_DEPTH),
        ] {
            defines.push_str(&format!("#define {name} {v}\n"));
        }
        for (name, v) in [
            ("MWK_TMA_STAGES_64", walk_tma_stages(64)),
            ("MWK_TMA_STAGES_32", walk_tma_stages(32)),
            ("MWK_TMA_STAGES_KG2", walk_kg_stages(2)),
            ("MWK_TMA_STAGES_KG3", walk_kg_stages(3)),
            ("MWK_TMA_STAGES_KG4", walk_kg_stages(4)),
            ("MWK_TMA_STAGES_W2", walk_wide_stages(2)),
            ("MWK_TMA_STAGES_W3", walk_wide_stages(3)),
            ("MWK_DEPTH", walk_depth()),
        ] {
            defines.push_str(&format!("#define {name} {v}\n"));
        }
        [
            defines,
            COMMON.into(),
            MATMUL.into(),
            MATMUL_WG.into(),
            MATMUL_WALK.into(),
        ]
        .concat()
    }

    /// Every source this model needs, after its sizes.
    fn source(&self) -> String {
        self.source_with(self.defines())
    }

    /// The source with `overrides` in place of the defines of those names (for measurements of
    /// other depths and launch bounds: `kernel_define_times`), or the first name that is not one
    /// of [`OVERRIDABLE_DEFINES`].
    #[cfg(test)]
    fn source_overriding(&self, overrides: &[(&str, usize)]) -> Result<String, String> {
        Ok(self.source_with(self.defines_overriding(overrides)?))
    }

    /// The `#define`s with `overrides` in place of those names, or the first name that is not one
    /// of [`OVERRIDABLE_DEFINES`].
    #[cfg(test)]
    fn defines_overriding(&self, overrides: &[(&str, usize)]) -> Result<String, String> {
        let mut list = self.define_list();
        for &(name, value) in overrides {
            if !OVERRIDABLE_DEFINES.contains(&name) {
                return Err(name.to_string());
            }
            let slot = list
                .iter_mut()
                .find(|(n, _)| *n == name)
                .ok_or_else(|| name.to_string())?;
            slot.1 = value;
        }
        Ok(defines_text(&list))
    }

    fn source_with(&self, defines: String) -> String {
        let mut parts = vec![defines, COMMON.into(), MATMUL.into(), NORM.into()];
        parts.push(ATTENTION.into());
        parts.push(MTP.into());
        parts.push(DRAW.into());
        parts.push(DENSE.into());
        if self.linear.is_some() {
            parts.push(DELTANET.into());
        }
        if self.moe.is_some() {
            parts.push(MOE.into());
        }
        parts.join("\n")
    }
}

/// The compiled kernels of one model.
pub struct Kernels {
    /// The wide bf16 matmul by n-tiles a block, as [`MATMUL_BLOCK_TILES`] lists them.
    matmul_by_tiles: [CudaFunction; MATMUL_BLOCK_TILES.len()],
    /// The deep kernels, as [`MATMUL_DEEP_TILES`] lists them.
    matmul_deep_by_tiles: [CudaFunction; MATMUL_DEEP_TILES.len()],
    /// The wide and the deep kernels with a dense MLP's SwiGLU (`matmul_bf16_swiglu_t3` …), in
    /// the same orders.
    matmul_swiglu_by_tiles: [CudaFunction; MATMUL_BLOCK_TILES.len()],
    matmul_swiglu_deep_by_tiles: [CudaFunction; MATMUL_DEEP_TILES.len()],
    /// Whether [`Kernels::gate_up_swiglu`] may put the SwiGLU in the matmul
    /// ([`SWIGLU_IN_GATE_UP_ENV`]).
    swiglu_in_gate_up: bool,
    /// The twins of the families above that compute their input's RMSNorm, where compiled
    /// (MMA_NORM_TWINS).
    norm_twins: Option<NormTwins>,
    /// The most rows whose norm goes into the matmul ([`NORM_IN_MATMUL_MAX_ROWS_ENV`]; none
    /// without the twins).
    pub(crate) norm_in_matmul_max_rows: usize,
    /// Whether a norm before the tiles goes into their split of x ([`NORM_IN_SPLIT_ENV`]).
    pub(crate) norm_in_split: bool,
    /// Whether a MoE layer's front projection may take its norm in its twin
    /// ([`MOE_NORM_IN_FRONT_ENV`]).
    pub(crate) moe_norm_in_front: bool,
    /// Whether `MatmulKernel::Auto` runs a matrix that [`deepens`] on a deep kernel
    /// ([`MATMUL_DEEP_ENV`]).
    matmul_deep: bool,
    /// Whether `MatmulKernel::Auto` picks the n-tiles a block by [`block_tiles`] (else MMA_NT),
    /// and for more than one row tile too ([`MATMUL_FIT_ENV`]).
    matmul_fit: (bool, bool),
    /// The GPU's multiprocessors (132 on an H200): the matmul's resident blocks are
    /// MMA_MIN_BLOCKS times as many (the deep kernels' one a multiprocessor).
    multiprocessors: usize,
    matmul_tiled: CudaFunction,
    /// The dynamic shared memory of `matmul_tiled` and `matmul_tiled_split`, and of
    /// `matmul_tiled_split32` (`mmt_shared_bytes` of the stages compiled: MMT_STAGES, or others
    /// in kernels compiled to measure them).
    tiled_shared_bytes: usize,
    split32_shared_bytes: usize,
    split_rows: CudaFunction,
    /// `split_rows_norm`: `rmsnorm_rows` and `split_rows` in one launch ([`NormPlace::InSplit`]).
    split_rows_norm: CudaFunction,
    matmul_tiled_split: CudaFunction,
    /// `matmul_bf16_tiled_split_fold` and `_fold_swiglu`, and `matmul_bf16_tiled_split32_fold`
    /// and its `_fold_swiglu`, and whether the mma.sync splits run them
    /// ([`MATMUL_CLUSTER_FOLD_ENV`]).
    matmul_tiled_split_fold: [CudaFunction; 2],
    matmul_tiled_split32_fold: [CudaFunction; 2],
    pub(crate) matmul_cluster_fold: ClusterFold,
    /// `matmul_bf16_tiled_split32`, and whether a k split of up to 32 rows runs it (`Auto`
    /// splits from 17; [`MATMUL_SPLIT32_ENV`]).
    matmul_tiled_split32: CudaFunction,
    matmul_split32: bool,
    /// Whether `Auto` splits a prompt's matmuls that [`runs_split_k_prompt`]
    /// ([`MATMUL_SPLIT_K_PROMPTS_ENV`]).
    matmul_split_k_prompts: bool,
    /// Which k splits `Auto` runs on the warpgroup MMA where its module is compiled
    /// ([`MATMUL_WG_SPLIT_ENV`]).
    matmul_wg_split: WgChoice,
    /// Which unsplit matmuls of a prompt `Auto` runs on `matmul_bf16_wg_swap` /
    /// `matmul_fp8_wg_swap` where their module is compiled ([`MATMUL_WG_SWAP_ENV`]).
    matmul_wg_swap: WgChoice,
    /// Whether a bf16 split of the 64-row blocks runs on the warpgroup MMA where its module is
    /// compiled ([`MATMUL_WG_FOLD_ENV`]).
    matmul_wg_fold: bool,
    /// How a round's bf16 split runs as the walk where the module is compiled
    /// ([`MATMUL_WALK_ENV`], [`walk_plan`]).
    matmul_walk: WalkAsk,
    matmul_fold: CudaFunction,
    /// `matmul_fold_residues_swiglu`: a split gate/up's fold with its SwiGLU.
    matmul_fold_swiglu: CudaFunction,
    /// Whether `MatmulKernel::Auto` splits k where [`runs_split_k`] ([`model_splits_k`], or
    /// [`MATMUL_SPLIT_K_ENV`]'s choice).
    matmul_split_k: bool,
    /// Whether `Auto` splits the FP8 matmuls of decode rounds ([`Kernels::fp8_round_splits`]) in
    /// a model whose bf16 matmuls do not split k ([`hybrid_fp8_rounds_split`]; not with
    /// `FLASHLANE_MATMUL_SPLIT_K=0`).
    fp8_rounds_split_alone: bool,
    /// [`MATMUL_SPLIT_K_MIN_OUTPUTS_ENV`]'s value, else 0.
    matmul_split_k_min_outputs: usize,
    /// Whether `MatmulKernel::Auto` may choose them ([`MATMUL_TILED_ENV`]).
    matmul_tiled_auto: bool,
    /// [`MATMUL_NARROW_MAX_BLOCKS`], or [`MATMUL_NARROW_MAX_BLOCKS_ENV`]'s value.
    matmul_narrow_max_blocks: usize,
    matmul_narrow: CudaFunction,
    /// The swapped chain (`matmul_bf16_swap`, `_swap_t2`): one and two output tiles of 16 a block.
    matmul_swap: [CudaFunction; 2],
    /// The swapped chain's gate/up with its SwiGLU (`matmul_bf16_swiglu_swap_t2`).
    matmul_swiglu_swap: CudaFunction,
    /// The swapped chain's FP8 kernels (`matmul_fp8_swap`, `_swap_t2`).
    matmul_fp8_swap: [CudaFunction; 2],
    /// Rounds of up to this many rows run their 16-row matmuls on the swapped chain
    /// ([`MATMUL_SWAP_ROWS_ENV`], [`MATMUL_SWAP_ROWS_FP8_ENV`]; 0: none).
    pub(crate) matmul_swap_rows: SwapRows,
    /// Tests: launches on the swapped chain so far (that a comparison ran it at all).
    #[cfg(test)]
    pub(crate) swapped_launches: std::sync::atomic::AtomicUsize,
    /// Tests: launches of the k split folded in its clusters so far.
    #[cfg(test)]
    pub(crate) cluster_fold_launches: std::sync::atomic::AtomicUsize,
    /// Tests: k splits run on the warpgroup MMA's 64-row blocks so far ([`MATMUL_WG_FOLD_ENV`]).
    #[cfg(test)]
    pub(crate) wg_split_launches: std::sync::atomic::AtomicUsize,
    /// Tests: k splits run as the walk so far ([`MATMUL_WALK_ENV`]).
    #[cfg(test)]
    pub(crate) walk_launches: std::sync::atomic::AtomicUsize,
    /// Tests: walks shared out in k groups so far ([`MATMUL_WALK_K_GROUPS_ENV`]).
    #[cfg(test)]
    pub(crate) walk_k_group_launches: std::sync::atomic::AtomicUsize,
    /// Tests: walks with several consumer warpgroups so far ([`MATMUL_WALK_OUTS_ENV`]).
    #[cfg(test)]
    pub(crate) walk_wide_launches: std::sync::atomic::AtomicUsize,
    /// Tests: wide walks shared out in k groups so far (`FLASHLANE_MATMUL_WALK=wide`).
    #[cfg(test)]
    pub(crate) walk_wide_k_group_launches: std::sync::atomic::AtomicUsize,
    matmul_fp8: CudaFunction,
    matmul_fp8_narrow: CudaFunction,
    rmsnorm: CudaFunction,
    embed: CudaFunction,
    attention_prep: CudaFunction,
    attention: CudaFunction,
    attention_grouped: CudaFunction,
    attention_grouped_few: CudaFunction,
    /// `attention_grouped_staged` and `attention_grouped_staged8` where they are compiled and
    /// their shared memory fits ([`att_staged_fits`]), `attention_grouped_staged_prep`, and
    /// their shared memory bytes.
    attention_staged: Option<StagedAttention>,
    /// The staged kernel that takes the grouped kernel's calls, if any ([`staged_choice`]).
    pub(crate) attention_staged_chosen: Option<AttentionKernel>,
    attention_gated_prep: CudaFunction,
    /// The tensor-core attention where it is compiled and fits ([`att_mma_fits`]).
    attention_mma: Option<MmaAttention>,
    /// The kernels the attention runs on ([`crate::attention_kernels_asked`]: `--attention-kernel`,
    /// or the tensor cores for every call under [`crate::ATTENTION_MMA_ENV`]); the tensor-core
    /// ones only where they are compiled.
    attention_kernels: crate::AttentionKernels,
    /// [`ATTENTION_MMA_ROWS_ENV`]: a prompt's rows take `attention_mma_rows` there.
    attention_mma_rows_asked: bool,
    /// [`PREP_IN_ATTENTION_ENV`]: whether [`prep_place`] may put the prep in the attention.
    prep_in_attention: bool,
    /// [`ATTENTION_FEW_WARPS_ENV`]: `Some` forces whether a prompt's attention runs
    /// `attention_grouped_few`; `None` lets [`attention_kernel`] choose by head dim and rows.
    attention_few_warps: Option<bool>,
    /// The rows from which [`attention_kernel`] groups heads ([`ATTENTION_GROUPED_MIN_ROWS_ENV`]).
    attention_grouped_min_rows: usize,
    mtp_input: CudaFunction,
    copy_rows: CudaFunction,
    argmax: CudaFunction,
    draw: CudaFunction,
    swiglu: CudaFunction,
    /// Where the model has DeltaNet layers.
    deltanet: Option<DeltaNetKernels>,
    /// Whether steps that suit it run `deltanet_recurrence_split` ([`DELTANET_SPLIT_ENV`]).
    deltanet_split: bool,
    /// Whether decode steps that do not split run `deltanet_recurrence_two`
    /// ([`DELTANET_TWO_BLOCKS_ENV`]).
    deltanet_two_blocks: bool,
    moe: Option<MoeKernels>,
    /// The warpgroup matmul, where compiled ([`Kernels::compile_wgmma`]).
    wgmma: Option<WgmmaKernels>,
    /// Where the main module's kernel timeline stamps are, when compiled with it
    /// (`FLASHLANE_TIMELINE=1`, `timeline.rs`).
    timeline_room: Option<crate::timeline::TimelineRoom>,
    /// The rows from which `MatmulKernel::Auto` runs it, if it does ([`MATMUL_WGMMA_ENV`]).
    matmul_wgmma_min_rows: Option<usize>,
}

/// The MoE layer's kernels, in launch order.
struct MoeKernels {
    route: CudaFunction,
    group: CudaFunction,
    /// `route` and `group` in one block, for at most [`MOE_ROUTE_GROUP_WARPS`] rows.
    route_group: CudaFunction,
    /// bf16 gate/up by n-tiles a block, as [`MOE_GATE_UP_TILES`] lists them (`moe_gate_up_t1`,
    /// `_t2`, `moe_gate_up`).
    gate_up_by_tiles: [CudaFunction; MOE_GATE_UP_TILES.len()],
    /// Whether a step's bf16 gate/up takes its n-tiles a block from [`moe_gate_up_tiles`] (else
    /// MMA_NT; off by [`MOE_FIT_ENV`]).
    gate_up_fit: bool,
    /// Tests: every step's bf16 gate/up at this many n-tiles a block.
    gate_up_tiles_forced: Option<usize>,
    down: CudaFunction,
    /// bf16 gate/up and down on the swapped chain, for rounds within [`MATMUL_SWAP_ROWS_ENV`].
    gate_up_swap: CudaFunction,
    down_swap: CudaFunction,
    gate_up_fp8: CudaFunction,
    down_fp8: CudaFunction,
    combine: CudaFunction,
    /// `combine` and the RMSNorm after the layer in one launch.
    combine_norm: CudaFunction,
}

/// `ceil(n / d)` as a grid dimension.
fn blocks(n: usize, d: u32) -> u32 {
    n.div_ceil(d as usize) as u32
}

fn rows_u32(rows: usize) -> u32 {
    u32::try_from(rows).expect("row counts fit a grid dimension")
}

impl Kernels {
    /// Compiles the sources for `dims` with NVRTC and loads them.
    pub fn compile(gpu: &Gpu, dims: &Dims) -> Result<Kernels, CudaError> {
        Self::compile_source(
            gpu,
            dims,
            dims.source(),
            MMT_STAGES,
            norm_in_matmul_max_rows() > 0,
        )
    }

    /// The kernels compiled with `overrides` in place of some of [`OVERRIDABLE_DEFINES`]
    /// (measurements only: the host keeps its own constants).
    #[cfg(test)]
    pub(crate) fn compile_overriding(
        gpu: &Gpu,
        dims: &Dims,
        overrides: &[(&str, usize)],
    ) -> Result<Kernels, CudaError> {
        let source = dims
            .source_overriding(overrides)
            .map_err(|name| CudaError::Compile(format!("{name} is not a define to override")))?;
        let stages = overrides
            .iter()
            .find(|(name, _)| *name == "MMT_STAGES")
            .map_or(MMT_STAGES, |&(_, stages)| stages);
        let norm_twins = overrides
            .iter()
            .find(|(name, _)| *name == "MMA_NORM_TWINS")
            .map_or(norm_in_matmul_max_rows() > 0, |&(_, on)| on != 0);
        Self::compile_source(gpu, dims, source, stages, norm_twins)
    }

    /// `tiled_stages`: the MMT_STAGES `source` has (other than MMT_STAGES where a measurement
    /// compiles other stages), of which the tiled blocks' shared memory follows; `norm_twins`:
    /// whether it holds the norm twins (MMA_NORM_TWINS).
    fn compile_source(
        gpu: &Gpu,
        dims: &Dims,
        source: String,
        tiled_stages: usize,
        norm_twins: bool,
    ) -> Result<Kernels, CudaError> {
        let tiled_shared_bytes = mmt_shared_bytes(tiled_stages, MMT_ROWS);
        let module = gpu.ctx.load_module(module_ptx(source, ARCH, "")?)?;
        let f = |name: &str| module.load_function(name);
        // The tiles' stages: over the 48 KiB a block gets without asking.
        let tiles = |name: &str| with_shared_bytes(f(name)?, tiled_shared_bytes);
        let matmul_tiled = tiles("matmul_bf16_tiled")?;
        let matmul_tiled_split = tiles("matmul_bf16_tiled_split")?;
        let split32_shared_bytes = mmt_shared_bytes(tiled_stages, SPLIT32_ROWS);
        let matmul_tiled_split32 = tiles("matmul_bf16_tiled_split32")?;
        let matmul_tiled_split_fold = [
            tiles("matmul_bf16_tiled_split_fold")?,
            tiles("matmul_bf16_tiled_split_fold_swiglu")?,
        ];
        let matmul_tiled_split32_fold = [
            tiles("matmul_bf16_tiled_split32_fold")?,
            tiles("matmul_bf16_tiled_split32_fold_swiglu")?,
        ];
        let matmul_cluster_fold = match std::env::var(MATMUL_CLUSTER_FOLD_ENV).as_deref() {
            Ok("0") => ClusterFold::Off,
            Ok("1") => ClusterFold::All,
            // A speed rule (`=waves` or unset): where the driver's occupancy queries fail, no
            // fold (the same bits).
            _ => cluster_fold_waves(
                gpu,
                [&matmul_tiled_split_fold[0], &matmul_tiled_split32_fold[0]],
                [&matmul_tiled_split, &matmul_tiled_split32],
                [tiled_shared_bytes, split32_shared_bytes],
            )
            .unwrap_or(ClusterFold::Off),
        };
        // The wide family `name` by MATMUL_BLOCK_TILES: `name_t3` …, the MMA_NT one without its
        // suffix where `bare_at_nt` (`matmul_bf16`, `matmul_bf16_norm`; the SwiGLU's have it).
        let tiles_of = |name: &str, bare_at_nt: bool| -> Result<[CudaFunction; 4], CudaError> {
            let one = |tiles: usize| match tiles {
                MMA_NT if bare_at_nt => f(name),
                other => f(&format!("{name}_t{other}")),
            };
            Ok([
                one(MATMUL_BLOCK_TILES[0])?,
                one(MATMUL_BLOCK_TILES[1])?,
                one(MATMUL_BLOCK_TILES[2])?,
                one(MATMUL_BLOCK_TILES[3])?,
            ])
        };
        let deep_of = |name: &str| -> Result<[CudaFunction; 2], CudaError> {
            Ok([
                f(&format!("{name}_t{}_deep", MATMUL_DEEP_TILES[0]))?,
                f(&format!("{name}_t{}_deep", MATMUL_DEEP_TILES[1]))?,
            ])
        };
        let mut kernels = Kernels {
            matmul_by_tiles: tiles_of("matmul_bf16", true)?,
            matmul_deep_by_tiles: deep_of("matmul_bf16")?,
            matmul_swiglu_by_tiles: tiles_of("matmul_bf16_swiglu", false)?,
            matmul_swiglu_deep_by_tiles: deep_of("matmul_bf16_swiglu")?,
            swiglu_in_gate_up: env_on(SWIGLU_IN_GATE_UP_ENV),
            norm_twins: match norm_twins {
                false => None,
                true => Some(NormTwins {
                    by_tiles: tiles_of("matmul_bf16_norm", true)?,
                    deep_by_tiles: deep_of("matmul_bf16_norm")?,
                    narrow: f("matmul_bf16_norm_narrow")?,
                    swap: [f("matmul_bf16_swap_norm")?, f("matmul_bf16_swap_norm_t2")?],
                    swiglu_swap: f("matmul_bf16_swiglu_swap_norm_t2")?,
                    swiglu_by_tiles: tiles_of("matmul_bf16_swiglu_norm", false)?,
                    swiglu_deep_by_tiles: deep_of("matmul_bf16_swiglu_norm")?,
                }),
            },
            norm_in_split: env_on(NORM_IN_SPLIT_ENV),
            norm_in_matmul_max_rows: if norm_twins {
                norm_in_matmul_max_rows()
            } else {
                0
            },
            moe_norm_in_front: env_asked(MOE_NORM_IN_FRONT_ENV),
            matmul_deep: env_on(MATMUL_DEEP_ENV),
            matmul_fit: match std::env::var(MATMUL_FIT_ENV).as_deref() {
                Ok("0") => (false, false),
                Ok("1") => (true, false),
                _ => (true, true),
            },
            multiprocessors: gpu.multiprocessors()?,
            matmul_tiled,
            tiled_shared_bytes,
            split32_shared_bytes,
            split_rows: f("split_rows")?,
            split_rows_norm: f("split_rows_norm")?,
            matmul_tiled_split,
            matmul_tiled_split32,
            matmul_tiled_split_fold,
            matmul_tiled_split32_fold,
            matmul_cluster_fold,
            matmul_split32: env_on(MATMUL_SPLIT32_ENV),
            matmul_split_k_prompts: env_on(MATMUL_SPLIT_K_PROMPTS_ENV),
            matmul_wg_split: WgChoice::from_env(MATMUL_WG_SPLIT_ENV),
            matmul_wg_swap: WgChoice::from_env(MATMUL_WG_SWAP_ENV),
            matmul_wg_fold: env_asked(MATMUL_WG_FOLD_ENV),
            matmul_walk: WalkAsk::from_env(),
            matmul_fold: f("matmul_fold_residues")?,
            matmul_fold_swiglu: f("matmul_fold_residues_swiglu")?,
            matmul_split_k: match std::env::var(MATMUL_SPLIT_K_ENV).as_deref() {
                Ok("0") => false,
                Ok("1") => true,
                _ => model_splits_k(dims),
            },
            fp8_rounds_split_alone: env_on(MATMUL_SPLIT_K_ENV) && hybrid_fp8_rounds_split(dims),
            matmul_split_k_min_outputs: env_number(MATMUL_SPLIT_K_MIN_OUTPUTS_ENV).unwrap_or(0),
            matmul_tiled_auto: env_on(MATMUL_TILED_ENV),
            matmul_narrow_max_blocks: env_number(MATMUL_NARROW_MAX_BLOCKS_ENV)
                .unwrap_or(MATMUL_NARROW_MAX_BLOCKS),
            matmul_narrow: f("matmul_bf16_narrow")?,
            matmul_swap: [f("matmul_bf16_swap")?, f("matmul_bf16_swap_t2")?],
            matmul_swiglu_swap: f("matmul_bf16_swiglu_swap_t2")?,
            matmul_fp8_swap: [f("matmul_fp8_swap")?, f("matmul_fp8_swap_t2")?],
            matmul_swap_rows: SwapRows::from_env(),
            #[cfg(test)]
            swapped_launches: std::sync::atomic::AtomicUsize::new(0),
            #[cfg(test)]
            cluster_fold_launches: std::sync::atomic::AtomicUsize::new(0),
            #[cfg(test)]
            wg_split_launches: std::sync::atomic::AtomicUsize::new(0),
            #[cfg(test)]
            walk_launches: std::sync::atomic::AtomicUsize::new(0),
            #[cfg(test)]
            walk_k_group_launches: std::sync::atomic::AtomicUsize::new(0),
            #[cfg(test)]
            walk_wide_launches: std::sync::atomic::AtomicUsize::new(0),
            #[cfg(test)]
            walk_wide_k_group_launches: std::sync::atomic::AtomicUsize::new(0),
            matmul_fp8: f("matmul_fp8")?,
            matmul_fp8_narrow: f("matmul_fp8_narrow")?,
            rmsnorm: f("rmsnorm_rows")?,
            embed: f("embed_rows")?,
            attention_prep: f("attention_prep")?,
            attention: f("attention_gated")?,
            attention_grouped: f("attention_grouped")?,
            attention_grouped_few: f("attention_grouped_few")?,
            attention_staged: {
                if let Some(bytes) = att_staged_fits(dims) {
                    let staged = |name: &str| with_shared_bytes(f(name)?, bytes);
                    Some(StagedAttention {
                        by_warps: [
                            staged("attention_grouped_staged")?,
                            staged("attention_grouped_staged8")?,
                        ],
                        with_prep: staged("attention_grouped_staged_prep")?,
                        shared_bytes: bytes as u32,
                    })
                } else {
                    None
                }
            },
            attention_staged_chosen: staged_choice(
                std::env::var(ATTENTION_STAGED_ENV).ok().as_deref(),
                attention_group(dims.heads, dims.kv_heads, dims.head_dim),
            ),
            attention_gated_prep: f("attention_gated_prep")?,
            attention_mma: match att_mma_fits(dims) {
                Some(
                    bytes @ MmaShared {
                        whole,
                        cluster,
                        rows,
                    },
                ) => Some(MmaAttention {
                    whole: (with_shared_bytes(f("attention_mma")?, whole)?, whole as u32),
                    cluster: (
                        with_shared_bytes(f("attention_mma_cluster")?, cluster)?,
                        cluster as u32,
                    ),
                    cluster_prep: with_shared_bytes(f("attention_mma_cluster_prep")?, cluster)?,
                    cluster_blocks: att_mma_splits(dims.head_dim) / ATT_MMA_WARPS,
                    rows: match bytes.rows_fit() {
                        true => Some((
                            with_shared_bytes(f("attention_mma_rows")?, rows)?,
                            rows as u32,
                        )),
                        false => None,
                    },
                }),
                None => None,
            },
            attention_kernels: crate::attention_kernels_asked(dims.attention),
            attention_mma_rows_asked: env_on(ATTENTION_MMA_ROWS_ENV),
            prep_in_attention: env_on(PREP_IN_ATTENTION_ENV),
            attention_few_warps: match std::env::var(ATTENTION_FEW_WARPS_ENV).as_deref() {
                Ok("0") => Some(false),
                Ok("1") => Some(true),
                _ => None,
            },
            attention_grouped_min_rows: env_number(ATTENTION_GROUPED_MIN_ROWS_ENV)
                .unwrap_or(ATT_GROUPED_MIN_ROWS),
            mtp_input: f("mtp_input")?,
            copy_rows: f("copy_rows")?,
            argmax: f("argmax_rows")?,
            draw: f("draw_rows")?,
            swiglu: f("swiglu_rows")?,
            deltanet: match dims.linear {
                Some(_) => Some(DeltaNetKernels {
                    conv: f("deltanet_conv")?,
                    whole: f("deltanet_recurrence")?,
                    split: f("deltanet_recurrence_split")?,
                    two_blocks: {
                        let two = f("deltanet_recurrence_two")?;
                        // Two blocks' stage arrays (33 KiB each at Qwen3-Next's heads, 1 KiB
                        // more each for the driver) need more than the 64 KiB of shared memory
                        // the driver may carve out: 44 % of Hopper's 228 KiB rounds up to its
                        // 100 KiB carve-out, leaving the rest to L1 (where its spills go).
                        two.set_attribute(
                            cudarc::driver::sys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                            DELTANET_TWO_BLOCKS_CARVEOUT_PERCENT,
                        )?;
                        two
                    },
                }),
                None => None,
            },
            deltanet_split: env_on(DELTANET_SPLIT_ENV),
            deltanet_two_blocks: env_on(DELTANET_TWO_BLOCKS_ENV),
            moe: match dims.moe {
                Some(_) => Some(MoeKernels {
                    route: f("moe_route")?,
                    group: f("moe_group")?,
                    route_group: f("moe_route_group")?,
                    gate_up_by_tiles: [
                        f("moe_gate_up_t1")?,
                        f("moe_gate_up_t2")?,
                        f("moe_gate_up")?,
                    ],
                    gate_up_fit: env_on(MOE_FIT_ENV),
                    gate_up_tiles_forced: None,
                    down: f("moe_down")?,
                    gate_up_swap: f("moe_gate_up_swap")?,
                    down_swap: f("moe_down_swap")?,
                    gate_up_fp8: f("moe_gate_up_fp8")?,
                    down_fp8: f("moe_down_fp8")?,
                    combine: f("moe_combine")?,
                    combine_norm: f("moe_combine_norm")?,
                }),
                None => None,
            },
            wgmma: None,
            timeline_room: crate::timeline::TimelineRoom::of(&module, gpu)?,
            matmul_wgmma_min_rows: None,
        };
        match std::env::var(MATMUL_WGMMA_ENV).as_deref() {
            Ok("0") => {}
            Ok("1") => {
                kernels.compile_wgmma(gpu, dims)?;
                kernels.matmul_wgmma_min_rows = Some(MMW_ROWS);
            }
            _ => {
                let compute_capability = gpu.ctx.compute_capability()?;
                if let Some(rows) = wgmma_default_min_rows(dims, compute_capability) {
                    // The tiles serve every row count: an NVRTC or driver without sm_90a (CUDA
                    // 12.0 and later have it) costs only the speed of many prompts at once.
                    if kernels.compile_wgmma(gpu, dims).is_ok() {
                        kernels.matmul_wgmma_min_rows = Some(rows);
                    }
                } else if compute_capability == (9, 0)
                    && hybrid_fp8_rounds_split(dims)
                    && ((kernels.fp8_rounds_split_alone
                        && kernels.matmul_wg_split != WgChoice::Off)
                        || kernels.matmul_wg_swap != WgChoice::Off)
                {
                    // For the FP8 matmuls alone: decode rounds' splits and prompts' swapped
                    // blocks, each by its own switch; the bf16 ones run as before. Where it does
                    // not compile the 16-row FP8 kernels take every round, as before.
                    let _compiled = kernels.compile_wgmma(gpu, dims).is_ok();
                }
            }
        }
        Ok(kernels)
    }

    /// Compiles the warpgroup matmul's module (`matmul_wg.cu`, sm_90a) for `MatmulKernel::Wgmma`
    /// (the kernel tests), and for `MatmulKernel::Auto` where the tiles would run (compiled at
    /// start then: [`MATMUL_WGMMA_ENV`]).
    pub(crate) fn compile_wgmma(&mut self, gpu: &Gpu, dims: &Dims) -> Result<(), CudaError> {
        let module = gpu.ctx.load_module(module_ptx(
            dims.wgmma_source(),
            ARCH_WGMMA,
            "matmul_wg.cu: ",
        )?)?;
        let load = |name: &str, bytes: usize| with_shared_bytes(module.load_function(name)?, bytes);
        let matmul = load("matmul_bf16_wgmma", MMW_SHARED_BYTES)?;
        // A prompt's swapped matmuls, bf16 and FP8.
        let swap =
            |weights: &str| load(&format!("matmul_{weights}_wg_swap"), MWS_SWAP_SHARED_BYTES);
        // The swapped split's kernels: [32 rows, 64 rows] a block, bf16 and FP8.
        let splits = |weights: &str| -> Result<[CudaFunction; 2], CudaError> {
            let n32 = module.load_function(&format!("matmul_{weights}_wg_split_n32"))?;
            let n64 = load(
                &format!("matmul_{weights}_wg_split_n64"),
                mws_shared_bytes(MWS_MAX_ROWS),
            )?;
            Ok([n32, n64])
        };
        // The 64-row blocks' split on it: cluster-folded (plain, with the SwiGLU), and unfolded.
        let fold = |name: &str| load(name, MWF_SHARED_BYTES);
        let walk_tma_shared = [mwk_tma_shared_bytes(32), mwk_tma_shared_bytes(64)];
        let walk_tma =
            |name: &str, rows: usize| load(name, walk_tma_shared[usize::from(rows == 64)]);
        // The walk apart: where its kernels do not load (their shared memory is Hopper's 227 KB),
        // it stays off and the rest of the module serves as before.
        let load_walk = || -> Result<WalkKernels, CudaError> {
            Ok(WalkKernels {
                tma: [
                    walk_tma("matmul_bf16_walk_tma_n32", 32)?,
                    walk_tma("matmul_bf16_walk_tma_n64", 64)?,
                ],
                tma_shared: walk_tma_shared,
                tma_swiglu: [
                    walk_tma("matmul_bf16_walk_tma_swiglu_n32", 32)?,
                    walk_tma("matmul_bf16_walk_tma_swiglu", 64)?,
                ],
                split_rows: module.load_function("split_rows_walk")?,
                split_rows_norm: module.load_function("split_rows_norm_walk")?,
                // Each apart again: a ring that does not fit beside its partials (a step of 7 or
                // 8 chunks: FLASHLANE_MATMUL_WALK_DEPTH) leaves that one out.
                k_groups: [2, 3, 4].map(|groups| {
                    let shared = mwk_kg_shared_bytes(groups);
                    load(&format!("matmul_bf16_walk_tma_kg{groups}"), shared)
                        .ok()
                        .map(|kernel| (kernel, shared))
                }),
                wide_k_groups: [2, 3].map(|warpgroups| {
                    MWK_WIDE_K_GROUPS.map(|groups| {
                        // A ring shortened by the A/B switches (FLASHLANE_MATMUL_WALK_STAGES,
                        // _DEPTH) may not hold the stash: that form stays unloaded.
                        if mwk_wide_ring_bytes(warpgroups)
                            < mwk_wide_stash_bytes(warpgroups, groups)
                        {
                            return None;
                        }
                        let shared = mwk_wide_shared_bytes(warpgroups);
                        let name = format!("matmul_bf16_walk_tma_w{warpgroups}_kg{groups}");
                        let kernel = load(&name, shared).ok()?;
                        let threads = mwk_wide_threads(warpgroups);
                        let clusters =
                            max_active_clusters(gpu, &kernel, groups, threads, shared).ok()?;
                        Some(WideKGroupWalk {
                            kernel,
                            shared,
                            clusters,
                        })
                    })
                }),
                wide: [2, 3].map(|groups| {
                    let shared = mwk_wide_shared_bytes(groups);
                    let plain = load(&format!("matmul_bf16_walk_tma_w{groups}"), shared).ok()?;
                    let swiglu =
                        load(&format!("matmul_bf16_walk_tma_swiglu_w{groups}"), shared).ok()?;
                    Some(WideWalk {
                        plain,
                        swiglu,
                        shared,
                    })
                }),
            })
        };
        // Set whole or not at all: a module compiled again replaces the one before, its
        // timeline room with it.
        self.wgmma = Some(WgmmaKernels {
            split_rows: module.load_function("split_rows_wg")?,
            split_rows_norm: module.load_function("split_rows_norm_wg")?,
            matmul,
            split_fold_bf16: [
                fold("matmul_bf16_wg_split_fold")?,
                fold("matmul_bf16_wg_split_fold_swiglu")?,
            ],
            split_partials_bf16: fold("matmul_bf16_wg_split_partials")?,
            walk: load_walk().ok(),
            split_bf16: splits("bf16")?,
            split_fp8: splits("fp8")?,
            swap_bf16: swap("bf16")?,
            swap_fp8: swap("fp8")?,
            timeline_room: crate::timeline::TimelineRoom::of(&module, gpu)?,
        });
        Ok(())
    }
}

/// How a k split runs on the warpgroup MMA's 64-row blocks ([`MATMUL_WG_FOLD_ENV`]): as the
/// tiles' split would be folded ([`folds_in_clusters`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WgSplitRun {
    /// In each tile's cluster (`matmul_bf16_wg_split_fold*`).
    FoldedInClusters,
    /// Into `Matmul::partials`, then the fold launch (`matmul_bf16_wg_split_partials`).
    Partials,
}

/// The warpgroup matmul's kernels ([`MATMUL_WGMMA_ENV`]).
struct WgmmaKernels {
    split_rows: CudaFunction,
    /// `split_rows_norm` in the warpgroup's k order, for the split on the 64-row blocks.
    split_rows_norm: CudaFunction,
    matmul: CudaFunction,
    /// `matmul_bf16_wg_split_fold` and `_fold_swiglu`, and the same split unfolded
    /// (`matmul_bf16_wg_split_partials`) ([`MATMUL_WG_FOLD_ENV`]).
    split_fold_bf16: [CudaFunction; 2],
    split_partials_bf16: CudaFunction,
    /// The walk ([`MATMUL_WALK_ENV`]), where its kernels loaded.
    walk: Option<WalkKernels>,
    /// The k split with the operands swapped ([`MATMUL_WG_SPLIT_ENV`]), of 32 and 64 rows a
    /// block, for bf16 and for block-scaled FP8 weights.
    split_bf16: [CudaFunction; 2],
    split_fp8: [CudaFunction; 2],
    /// The same operands unsplit, 64 rows a block ([`MATMUL_WG_SWAP_ENV`]), bf16 and FP8.
    swap_bf16: CudaFunction,
    swap_fp8: CudaFunction,
    /// Where this module's kernel timeline stamps are (`FLASHLANE_TIMELINE=1`).
    timeline_room: Option<crate::timeline::TimelineRoom>,
}

/// The walk's kernels ([`MATMUL_WALK_ENV`]).
struct WalkKernels {
    /// W by TMA: [32, 64] rows a block, plain and a gate/up's with its SwiGLU.
    tma: [CudaFunction; 2],
    tma_swiglu: [CudaFunction; 2],
    /// Their dynamic shared memory at [32, 64] rows ([`MATMUL_WALK_STAGES_ENV`]).
    tma_shared: [usize; 2],
    /// x's split (with its norm) in the walk's layout.
    split_rows: CudaFunction,
    split_rows_norm: CudaFunction,
    /// The TMA walk of 64 rows in 2, 3 and 4 k groups ([`MATMUL_WALK_K_GROUPS_ENV`]), with their
    /// dynamic shared memory, each where it loaded.
    k_groups: [Option<(CudaFunction, usize)>; 3],
    /// The TMA walk of 64 rows with 2 and 3 consumer warpgroups ([`MATMUL_WALK_OUTS_ENV`]), each
    /// where it loaded.
    wide: [Option<WideWalk>; 2],
    /// Those in 4 and 8 k groups (`FLASHLANE_MATMUL_WALK=wide`), each where it loaded:
    /// `[warpgroups − 2][k groups: 4, 8]`.
    wide_k_groups: [[Option<WideKGroupWalk>; 2]; 2],
}

impl WalkKernels {
    fn loaded(&self) -> WalkLoaded {
        WalkLoaded {
            k_groups: self.k_groups.each_ref().map(Option::is_some),
            wide: self.wide.each_ref().map(Option::is_some),
            wide_k_groups: self.wide_k_groups.each_ref().map(|forms| {
                forms
                    .each_ref()
                    .map(|form| form.as_ref().map(|walk| walk.clusters))
            }),
        }
    }
}

/// The wide walk in k groups: its kernel, dynamic shared memory, and the clusters the GPU holds
/// at once.
struct WideKGroupWalk {
    kernel: CudaFunction,
    shared: usize,
    clusters: usize,
}

/// The clusters of `function` (its cluster of `cluster_blocks` blocks along z compiled in, blocks
/// of `threads` threads and `shared` bytes of dynamic shared memory) the GPU holds at once.
fn max_active_clusters(
    gpu: &Gpu,
    function: &CudaFunction,
    cluster_blocks: usize,
    threads: u32,
    shared: usize,
) -> Result<usize, CudaError> {
    use cudarc::driver::sys;
    let config = sys::CUlaunchConfig {
        gridDimX: 1,
        gridDimY: 1,
        gridDimZ: cluster_blocks as u32,
        blockDimX: threads,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: u32::try_from(shared).expect("a block's shared memory fits u32"),
        hStream: std::ptr::null_mut(),
        attrs: std::ptr::null_mut(),
        numAttrs: 0,
    };
    let mut clusters: std::ffi::c_int = 0;
    gpu.ctx.bind_to_thread()?;
    // SAFETY: `config` names no attributes (its cluster is the kernel's own) and lives through
    // the call; `clusters` is the one int the driver writes.
    unsafe { sys::cuOccupancyMaxActiveClusters(&mut clusters, function.cu_function(), &config) }
        .result()?;
    Ok(usize::try_from(clusters).unwrap_or(0))
}

/// The TMA walk with several consumer warpgroups: plain, a gate/up's, their dynamic shared memory.
struct WideWalk {
    plain: CudaFunction,
    swiglu: CudaFunction,
    shared: usize,
}

/// Where a block-scaled FP8 matrix keeps its scales (`[n_out / block_rows, k / block_cols]`, f32).
#[derive(Clone, Copy, Debug)]
pub struct Fp8Scales {
    pub scales: u64,
    pub block_rows: usize,
    pub block_cols: usize,
}

/// One matmul: `rows` rows of `x` (stride `x_stride`, gathered by `row_index` when not 0)
/// against W `[n_out, k]` (bf16, or e4m3 bytes scaled by `fp8`) into `y` (stride `y_stride`),
/// added to `y` when `accumulate`.
#[derive(Clone, Copy)]
pub struct Matmul {
    /// Room for the rows split for `matmul_bf16_tiled` (`rows` · [`split_row_words`]`(k)` u32),
    /// or 0: then `MatmulKernel::Auto` never runs the tiled kernel.
    pub x_split: u64,
    /// Room for the k split's partials (`MATMUL_RESIDUES · rows · n_out` f32), or 0: then
    /// `MatmulKernel::Auto` never splits k.
    pub partials: u64,
    pub fp8: Option<Fp8Scales>,
    pub x: u64,
    pub x_stride: usize,
    pub row_index: u64,
    pub w: u64,
    pub k: usize,
    pub n_out: usize,
    pub y: u64,
    pub y_stride: usize,
    pub rows: usize,
    pub accumulate: bool,
}

/// The launch shapes of the Gated DeltaNet kernels of one layer.
pub struct DeltaNetLaunch {
    pub qkvz: u64,
    pub ba: u64,
    /// Floats between rows of `qkvz` (and of `ba`): the fused projection's width.
    pub proj_stride: usize,
    pub segs: u64,
    pub windows: usize,
    /// Tokens in all windows together.
    pub rows: usize,
    pub conv_w: u64,
    pub neg_a: u64,
    pub dt_bias: u64,
    pub norm_w: u64,
    pub eps: f32,
    pub state: u64,
    pub snaps: u64,
    /// Windows of at most this many tokens snapshot the state before each token.
    pub rollback: usize,
    pub lin_stride: usize,
    pub layer_off: usize,
    pub mixed: u64,
    pub out: u64,
}

/// Which matmul kernel computes a product (they give the same bits; see `matmul.cu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatmulKernel {
    /// bf16: the tiled kernel where [`runs_tiled`], else the wide one (its n-tiles a block by
    /// [`block_tiles`] and [`deep_fit`], or MMA_NT with [`MATMUL_FIT_ENV`] 0; its deep twin
    /// where [`deepens`], unless [`MATMUL_DEEP_ENV`] 0) unless one row tile makes at most
    /// [`MATMUL_NARROW_MAX_BLOCKS`] wide blocks; the tiles' rows of 48–64 with k split where
    /// [`model_splits_k`], and on the warpgroup MMA as [`MATMUL_WGMMA_ENV`] says; FP8: the
    /// warpgroup split for a round of 17–64 rows where [`wg_split_takes`], else the wide kernel
    /// from [`FP8_WIDE_MIN_BLOCKS`] blocks (MMA_NT n-tiles a block), else the narrow.
    Auto,
    /// `matmul_bf16_narrow`: one n-tile a block.
    Narrow,
    /// `matmul_bf16`: MMA_NT n-tiles a block.
    Wide,
    /// The wide kernel with this many n-tiles a block (one of [`MATMUL_BLOCK_TILES`]; FP8 runs
    /// MMA_NT).
    Tiles(usize),
    /// `matmul_bf16_tiled` (bf16 weights only; FP8 runs `Auto`'s choice).
    Tiled,
    /// `matmul_bf16_tiled_split` and `matmul_fold_residues` (bf16 only; needs `partials`).
    TiledSplitK,
    /// The deep kernel with this many n-tiles a block (one of [`MATMUL_DEEP_TILES`]; FP8 runs
    /// its wide kernel).
    Deep(usize),
    /// `split_rows_wg` and `matmul_bf16_wgmma` (bf16 only; needs [`Kernels::compile_wgmma`]).
    Wgmma,
    /// `split_rows`, `matmul_bf16_wg_split_n32` / `_n64` (FP8: `matmul_fp8_wg_split_*`) and
    /// `matmul_fold_residues` (needs [`Kernels::compile_wgmma`] and `partials`).
    WgmmaSplitK,
    /// `split_rows` and `matmul_bf16_wg_swap` (FP8: `matmul_fp8_wg_swap`; needs
    /// [`Kernels::compile_wgmma`]).
    WgmmaSwapped,
}

/// What every FP8 matmul kernel needs of the blocks of its scales.
fn check_fp8_blocks(fp8: &Fp8Scales, m: &Matmul) {
    assert!(
        fp8_blocks_fit(fp8.block_rows, fp8.block_cols, m.n_out, m.k),
        "matmul: FP8 blocks {}×{} of a [{}, {}] matrix",
        fp8.block_rows,
        fp8.block_cols,
        m.n_out,
        m.k
    );
}

/// The swapped warpgroup kernels (split and unsplit) address a matrix's rows in 32 bits.
fn check_wg_matrix_size(m: &Matmul) {
    let bytes = m.n_out * m.k * if m.fp8.is_some() { 1 } else { 2 };
    assert!(
        bytes < 1 << 32,
        "[matmul-wg-split-size] a [{}, {}] matrix past 4 GiB",
        m.n_out,
        m.k
    );
}

/// What every matmul kernel needs of its operands.
fn check_matmul(m: &Matmul) {
    // 16-byte loads (8 bf16 weights, 4 f32 inputs) in pieces of 16 elements: another k would
    // read past a row.
    assert!(
        m.k.is_multiple_of(MMA_K_ALIGN) && m.x_stride.is_multiple_of(4),
        "matmul: k {} must be a multiple of {MMA_K_ALIGN} and x_stride {} of 4",
        m.k,
        m.x_stride
    );
    debug_assert!(
        m.x.is_multiple_of(16) && m.w.is_multiple_of(16),
        "matmul: x and W must start 16-byte aligned"
    );
}

/// How a matmul runs, as [`Kernels`] chose for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MatmulLaunch {
    /// `split_rows_wg`, then `matmul_bf16_wgmma`.
    Wgmma,
    /// `split_rows` (or `split_rows_norm`: [`NormPlace::InSplit`]), then the k split on the
    /// warpgroup MMA ([`MATMUL_WG_SPLIT_ENV`]) and `matmul_fold_residues`.
    WgmmaSplitK,
    /// `split_rows`, then `matmul_bf16_wg_swap` or `matmul_fp8_wg_swap` ([`MATMUL_WG_SWAP_ENV`]).
    WgmmaSwapped,
    /// `split_rows` (or `split_rows_norm`: [`NormPlace::InSplit`]), then `matmul_bf16_tiled`,
    /// or with `split_k` `matmul_bf16_tiled_split` and `matmul_fold_residues`.
    Tiled { split_k: bool },
    /// A 16-row kernel of `tiles` n-tiles a block (1: the narrow kernel), deep or not (bf16; FP8
    /// runs its narrow kernel at 1, its wide one otherwise).
    RowTiles { tiles: usize, deep: bool },
}

/// The 16-row bf16 kernels' twins that compute their input's RMSNorm (`matmul_bf16_norm_t3` …,
/// `matmul_bf16_norm_narrow`, `matmul_bf16_swiglu_norm_t3` …), in the plain kernels' orders.
struct NormTwins {
    by_tiles: [CudaFunction; MATMUL_BLOCK_TILES.len()],
    deep_by_tiles: [CudaFunction; MATMUL_DEEP_TILES.len()],
    narrow: CudaFunction,
    /// The swapped chain's twins, one and two output tiles a block.
    swap: [CudaFunction; 2],
    /// The swapped chain's gate/up with its SwiGLU, with the norm.
    swiglu_swap: CudaFunction,
    swiglu_by_tiles: [CudaFunction; MATMUL_BLOCK_TILES.len()],
    swiglu_deep_by_tiles: [CudaFunction; MATMUL_DEEP_TILES.len()],
}

/// The RMSNorm a matmul's input takes first: `x`'s rows are the residual stream, each
/// normalised with weight `w` (k floats) before it is multiplied.
#[derive(Clone, Copy, Debug)]
pub struct InputNorm {
    pub w: u64,
    pub eps: f32,
    /// Qwen3-Next's x̂·(1 + w) rather than x̂·w.
    pub zero_centred: bool,
    /// Where `rmsnorm_rows` writes the normalised rows (`rows` × k floats) when the norm runs
    /// apart; the matmul then reads them there.
    pub out: u64,
    /// Whether `out` must hold the normalised rows wherever the norm runs (kernels after the
    /// matmul read them: the MoE's experts after its front projection): a norm twin then writes
    /// them there too, from the blocks of its first n-column, and the norm in the split of x
    /// every element. Without, neither writes any row.
    pub keep: bool,
}

/// Where a matmul's input norm runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormPlace {
    /// In the 16-row kernel's twin (`matmul_bf16_norm_*`, `matmul_bf16_swiglu_norm_*`): each
    /// block sums its rows' squares in `rmsnorm_rows`' order and normalises x as it loads it,
    /// so the products have the bits of the norm and the matmul apart, one launch fewer.
    InMatmul,
    /// In the split of x that the tiles read (`split_rows_norm`): each block sums its row's
    /// squares in `rmsnorm_rows`' order and splits the normalised elements, one launch fewer.
    InSplit,
    /// `rmsnorm_rows` into [`InputNorm::out`], then the matmul on those rows.
    Apart,
}

/// Where the input norm of a matmul that runs as `launch` over `rows` rows goes: into its bf16
/// 16-row kernel for up to `max_rows` rows ([`NORM_IN_MATMUL_MAX_ROWS`]; 0: none, the twins
/// then not compiled); into the split of x before the bf16 tiles (unsplit or split, on mma.sync
/// or the warpgroup split) of up to [`NORM_IN_SPLIT_MAX_ROWS`] rows where `in_split`
/// ([`NORM_IN_SPLIT_ENV`]); apart otherwise (the warpgroup MMA unsplit or swapped and FP8 have
/// neither).
fn norm_place(
    launch: MatmulLaunch,
    fp8: bool,
    rows: usize,
    max_rows: usize,
    in_split: bool,
) -> NormPlace {
    match launch {
        MatmulLaunch::RowTiles { .. } if !fp8 && max_rows > 0 && rows <= max_rows => {
            NormPlace::InMatmul
        }
        MatmulLaunch::Tiled { .. } | MatmulLaunch::WgmmaSplitK
            if !fp8 && in_split && rows <= NORM_IN_SPLIT_MAX_ROWS =>
        {
            NormPlace::InSplit
        }
        _ => NormPlace::Apart,
    }
}

/// Where a dense MLP's SwiGLU runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwigluPlace {
    /// In the gate/up matmul's last step (`matmul_bf16_swiglu_*`, the twin of the 16-row
    /// kernel the plain gate/up would run): one launch, and the products never go to memory.
    InGateUp { tiles: usize, deep: bool },
    /// In the fold of a gate/up whose k is split by residue (`matmul_fold_residues_swiglu`):
    /// one launch fewer, and the folded products never go to memory.
    InFold,
    /// `swiglu_rows` after the plain matmul: the unsplit tiles, the warpgroup MMA, the narrow
    /// kernel and FP8's 16-row kernels have no twin.
    Apart,
}

/// Where the SwiGLU of a gate/up matmul that runs as `launch` goes: into the matmul where its
/// bf16 16-row kernel of 3 n-tiles a block or more runs (decode rounds and short prompts), into
/// the fold where k is split (dense 4B and larger at 17–32 and 48–64 streams; FP8 too where its
/// k splits on the warpgroup MMA), when `enabled` (unless
/// [`SWIGLU_IN_GATE_UP_ENV`] is 0; apart otherwise).
fn swiglu_place(launch: MatmulLaunch, fp8: bool, enabled: bool) -> SwigluPlace {
    match launch {
        MatmulLaunch::RowTiles { tiles, deep }
            if enabled && !fp8 && MATMUL_BLOCK_TILES.contains(&tiles) =>
        {
            SwigluPlace::InGateUp { tiles, deep }
        }
        MatmulLaunch::Tiled { split_k: true } | MatmulLaunch::WgmmaSplitK if enabled => {
            SwigluPlace::InFold
        }
        _ => SwigluPlace::Apart,
    }
}

/// The arguments of every 16-row bf16 matmul kernel (`matmul_bf16`, `_t3` …, `_narrow`,
/// `_deep`), in order (`matmul_bf16_tiled` takes the split rows, then those from W on).
fn bf16_matmul_args(m: &Matmul) -> [Arg; 10] {
    [
        Arg::Ptr(m.x),
        Arg::I32(m.x_stride as i32),
        Arg::Ptr(m.row_index),
        Arg::Ptr(m.w),
        Arg::I32(m.k as i32),
        Arg::I32(m.n_out as i32),
        Arg::Ptr(m.y),
        Arg::I32(m.y_stride as i32),
        Arg::I32(i32::from(m.accumulate)),
        Arg::I32(m.rows as i32),
    ]
}

/// The arguments of the FP8 16-row kernels (`matmul_fp8`, `_narrow`, `_swap`, `_swap_t2`).
/// The bf16 kernels' arguments with the scales' address and blocks after the weights'.
fn fp8_matmul_args(m: &Matmul, fp8: &Fp8Scales) -> [Arg; 13] {
    let plain = bf16_matmul_args(m);
    std::array::from_fn(|i| match i {
        4 => Arg::Ptr(fp8.scales),
        5 => Arg::I32(fp8.block_rows as i32),
        6 => Arg::I32(fp8.block_cols as i32),
        0..=3 => plain[i],
        _ => plain[i - 3],
    })
}

/// The arguments of a norm twin (`matmul_bf16_norm_*`, `matmul_bf16_swiglu_norm_*`): the plain
/// kernel's, then the norm's weight, eps and kind, and where to keep the normalised rows (0:
/// nowhere).
fn bf16_norm_matmul_args(m: &Matmul, norm: &InputNorm) -> [Arg; 14] {
    let plain = bf16_matmul_args(m);
    std::array::from_fn(|i| match i {
        10 => Arg::Ptr(norm.w),
        11 => Arg::F32(norm.eps),
        12 => Arg::I32(i32::from(norm.zero_centred)),
        13 => Arg::Ptr(if norm.keep { norm.out } else { 0 }),
        _ => plain[i],
    })
}

/// N-tiles a block of the wide bf16 matmul for `row_tiles` × `n_tiles` with `resident` blocks
/// on the GPU at once: the count of [`MATMUL_BLOCK_TILES`] whose blocks run in the least time,
/// taking a wave of blocks to cost its n-tiles a block (a partial wave costs a whole one).
/// One row tile (a decode step of up to 16 rows): ties go to MMA_NT (the count measured
/// longest), then to fewer blocks; its mid-sized matrices then run in whole waves: the A3B
/// slice's 12,352-output DeltaNet input projection as 258 blocks of 6 (one wave of the H200's
/// 264) instead of 386 of 4 (1.46 waves), its 9,216-output attention q/k/v as 231 of 5. A matrix
/// of one wave at 3 a block (up to 792 n-tiles: Qwen3-0.6B's q/k/v and gate/up, Qwen3-4B's
/// q/k/v, o and down) takes 3, the most blocks (`matmul_kernel_times` at one row: as fast as 4
/// a block or faster on each, bench/RESULTS.md session 16; end to end measured on the A3B slice
/// only). More row
/// tiles read each weight once from memory for all of them, and a block of more n-tiles reads x
/// once for more outputs: from MMA_NT up only, ties to the most (`matmul_kernel_times` at 64
/// rows: 6 a block was the fastest or within 10 % of it on 10 of 13 matrices, 3 the slowest on
/// most). `multi_row` false keeps those at MMA_NT ([`MATMUL_FIT_ENV`] 1).
fn block_tiles(row_tiles: usize, n_tiles: usize, resident: usize, multi_row: bool) -> usize {
    match (row_tiles, multi_row) {
        (1, _) => one_row_tiles(n_tiles, resident),
        (_, true) => MATMUL_BLOCK_TILES
            .into_iter()
            .filter(|&tiles| tiles >= MMA_NT)
            .min_by_key(|&tiles| {
                (
                    wave_cost(row_tiles * n_tiles.div_ceil(tiles), tiles, resident),
                    std::cmp::Reverse(tiles),
                )
            })
            .expect("MATMUL_BLOCK_TILES holds MMA_NT"),
        (_, false) => MMA_NT,
    }
}

/// What a grid of `blocks` blocks of `tiles` n-tiles each costs with `resident` blocks on the
/// GPU at once: its waves (a partial wave as a whole one) times the n-tiles a block computes.
/// The measure every fit of blocks to waves takes (the bf16 matmuls, the MoE's gate/up).
fn wave_cost(blocks: usize, tiles: usize, resident: usize) -> usize {
    blocks.div_ceil(resident.max(1)) * tiles
}

/// The count of [`MATMUL_BLOCK_TILES`] for one row tile of `n_tiles` n-tiles whose
/// [`wave_cost`] is least; ties to MMA_NT, then to fewer blocks.
fn one_row_tiles(n_tiles: usize, resident: usize) -> usize {
    MATMUL_BLOCK_TILES
        .into_iter()
        .min_by_key(|&tiles| {
            (
                wave_cost(n_tiles.div_ceil(tiles), tiles, resident),
                tiles != MMA_NT,
                n_tiles.div_ceil(tiles),
            )
        })
        .expect("MATMUL_BLOCK_TILES is not empty")
}

/// The n-tiles a block of a matmul of `row_tiles` × `n_tiles` once [`block_tiles`] chose
/// `fitted`: where one row tile's fitted blocks outnumber the `multiprocessors` but a deep
/// kernel's count ([`MATMUL_DEEP_TILES`]) makes at most one a multiprocessor, the first such
/// count, so that [`deepens`] runs it deep. Qwen3-8B's o and down projections (4,096 outputs:
/// 171 blocks of 3, or 128 of 4) at 1 / 8 / 16 rows took 10.6 / 12.0 / 16.3 and 36.0 / 41.0 /
/// 48.3 µs fitted against 9.8 / 11.4 / 14.1 and 32.3 / 33.8 / 39.2 deep at 4, and Qwen3-0.6B's
/// q/k/v (4,096 outputs) 4.3 / 4.9 / 6.3 against 4.0 / 4.9 / 5.4 (`matmul_kernel_times`,
/// bench/RESULTS.md session 23).
fn deep_fit(row_tiles: usize, n_tiles: usize, fitted: usize, multiprocessors: usize) -> usize {
    if row_tiles != 1 || deepens(1, n_tiles.div_ceil(fitted), multiprocessors) {
        return fitted;
    }
    MATMUL_DEEP_TILES
        .into_iter()
        .find(|&tiles| deepens(1, n_tiles.div_ceil(tiles), multiprocessors))
        .unwrap_or(fitted)
}

/// Elements of a row each thread of a norm twin's block loads at once for its sum of squares
/// (MMA_NORM_LOADS, `tile_norms` in matmul.cu): the twins normalise a layer's input, rows of
/// `hidden` read by MMA_WARPS·32 threads, so that a row comes in one batch of loads (longer rows
/// take more); whole rounds of the NORM_WARPS / MMA_WARPS share-warps a thread sums.
fn norm_loads(hidden: usize) -> usize {
    let share_warps = (NORM_WARPS / MMA_WARPS) as usize;
    hidden
        .div_ceil(MMA_WARPS as usize * 32)
        .next_multiple_of(share_warps)
        .max(share_warps)
}

/// Whether a one-row-tile matmul of `blocks` wide blocks runs a deep kernel on a GPU of
/// `multiprocessors`: with at most one block a multiprocessor, each holds one block's 8 warps of
/// loads in flight, which one chunk at a time leaves the 4B shape's o and down projections (107
/// blocks of 3) reading at ~1.7 TB/s (ncu, bench/RESULTS.md session 17) against 2.8 for its
/// gate/up (487 blocks); the deep kernels read them at 2.6–2.8 (session 18).
fn deepens(row_tiles: usize, blocks: usize, multiprocessors: usize) -> bool {
    row_tiles == 1 && blocks <= multiprocessors
}

/// Whether a DeltaNet step of `rows` tokens in `windows` windows runs `deltanet_recurrence_split`
/// (a cluster of LIN_CLUSTER blocks a head) on a GPU of `multiprocessors`: windows of at most
/// LIN_CLUSTER_MAX_TOKENS tokens on average, too few (window, head) pairs to fill the
/// multiprocessors one block each, and heads whose columns split into whole warps.
fn splits_recurrence(
    rows: usize,
    windows: usize,
    value_heads: usize,
    value_head_dim: usize,
    multiprocessors: usize,
) -> bool {
    windows > 0
        && rows <= LIN_CLUSTER_MAX_TOKENS * windows
        && windows * value_heads <= multiprocessors
        && value_head_dim.is_multiple_of(LIN_CLUSTER)
        && (value_head_dim / LIN_CLUSTER * LIN_SPLIT).is_multiple_of(32)
}

/// Whether a model's matmuls split k where [`runs_split_k`]: a dense model (no experts, no
/// DeltaNet) whose every layer matrix splits into [`MATMUL_SPLIT_K_MIN_LAYER_BLOCKS`] blocks or
/// more. Measured on the H200 (session 22, bench/RESULTS.md), 64 streams: with all of a layer's
/// matrices split the Qwen3-4B shape decoded 9 % faster (6,024 → 6,561 tok/s) and Qwen3-8B 26 %
/// (3,879 → 4,897); with q/k/v and gate/up split but o and down on the 16-row kernels (a rule
/// by each matrix's own timing) 4B lost 11 %, Qwen3-0.6B 9 % and the A3B slice (whose experts
/// never split) 5 %. Whether all split pays where the narrow matrices make few blocks (0.6B's
/// 1,024 outputs: 64) or beside the experts is not measured: those stay unsplit.
fn model_splits_k(dims: &Dims) -> bool {
    dims.moe.is_none()
        && dims.linear.is_none()
        && dims.hidden.div_ceil(MMT_OUTS) * MATMUL_RESIDUES >= MATMUL_SPLIT_K_MIN_LAYER_BLOCKS
}

/// Whether a model splits k only in its FP8 matmuls' decode rounds of 17–64 rows (on the swapped
/// warpgroup split, [`wg_split_takes`]), its bf16 matmuls never: a hybrid model (experts or DeltaNet,
/// which [`model_splits_k`] keeps unsplit) with FP8 projections. Its prompts' FP8 matmuls run
/// on the swapped warpgroup MMA unsplit ([`wg_swap_takes`]), its bf16 ones as before: the warpgroup
/// module is compiled for it where either switch takes its FP8 matmuls.
/// Measured on the H100 (bench/RESULTS.md session 46, 2 rounds, against none): the A3B slice's
/// FP8 twin decoded +1.9 / +4.7 / +6.3 % at 24 / 40 / 64 streams, 8 streams and prompts even.
fn hybrid_fp8_rounds_split(dims: &Dims) -> bool {
    dims.fp8_weights && (dims.moe.is_some() || dims.linear.is_some()) && !model_splits_k(dims)
}

/// Rounds of these many rows launch their kernels one after another ([`Launches::Serial`]) in
/// the models of [`round_launches`]: the Qwen3-0.6B shape's decode (dummy weights, 128-token
/// prompts, session 29, `FLASHLANE_PDL=0` against overlapped in one binary, tok/s) ran 16
/// streams 9,974 → 10,194 (+2 %), 32 streams 14,271 / 14,557 → 15,491 / 15,531 (+7–9 %) and 64
/// 19,688 / 20,017 → 20,881 / 20,954 (+5–6 %) serial, but 1 and 8 streams 858 → 804 and 5,893 →
/// 5,807, and its prompts of 128 rows and more (1–64 × 128 tokens) 1–5 % slower.
const SERIAL_LAUNCH_ROWS: std::ops::RangeInclusive<usize> = 16..=64;
/// The widest hidden size of a dense model whose many-stream rounds launch serially. Qwen3-0.6B
/// (1,024) is measured faster serial; Qwen3-4B (2,560: 8, 32, 64 streams 2,072 / 4,524 / 6,553
/// overlapped against 1,923 / 4,389 / 6,393 serial) and the A3B slice (a hybrid: 1, 8, 64
/// streams 888 / 3,410 / 10,773 against 834 / 3,310 / 10,623; 32 within 1 %) faster overlapped.
/// Widths between are not measured and keep the overlap, as every model did before.
const SERIAL_LAUNCH_MAX_HIDDEN: usize = 1024;

/// How a round of `rows` rows launches its kernels (unless [`crate::device::PDL_ENV`] overrides
/// it): serially in the narrow dense models' rounds of [`SERIAL_LAUNCH_ROWS`] (decode rounds of
/// 16–64 streams as measured; prompt chunks and verify rounds of those sizes unmeasured),
/// overlapped everywhere else. Why the overlap loses there is not measured; a guess: the next kernel's
/// blocks, launched early to wait, take the multiprocessors' slots from the blocks of the kernel
/// ahead, which at 16–64 rows are several row tiles of short blocks.
pub fn round_launches(dims: &Dims, rows: usize) -> Launches {
    let dense = dims.moe.is_none() && dims.linear.is_none();
    if dense && dims.hidden <= SERIAL_LAUNCH_MAX_HIDDEN && SERIAL_LAUNCH_ROWS.contains(&rows) {
        Launches::Serial
    } else {
        Launches::Overlapped
    }
}

/// The rows from which a model's bf16 matmuls run on the warpgroup MMA by default on a GPU of
/// `compute_capability`, if they do: [`MMW_MIN_ROWS`] in the dense models whose layers split k
/// ([`model_splits_k`]: Qwen3-4B, -8B and wider), on 9.0 only (sm_90a code runs nowhere else).
/// Measured on the H200 (sessions 23–24, bench/RESULTS.md; prompts of 128 tokens, the tiles
/// against the warpgroup MMA from 128 rows, by rows a round): Qwen3-8B 128 rows 4,638 → 4,554
/// tok/s, 1,024 10,569 → 10,339, 8,192 9,116 → 10,057 (+10 %; session 23 +11 %); Qwen3-4B 2,048
/// 18,235 → 16,686, 4,096 17,291 → 18,160 (+5 %), 8,192 16,472 → 17,994 (+9 %; session 23 +7 %);
/// Qwen3-0.6B −6 % at 2,048 and 4,096 rows, −3 % at 8,192; the A3B slice within 1 % either way.
fn wgmma_default_min_rows(dims: &Dims, compute_capability: (i32, i32)) -> Option<usize> {
    (compute_capability == (9, 0) && model_splits_k(dims)).then_some(MMW_MIN_ROWS)
}

/// Whether a model's 16-row bf16 matmuls and tiles load their first weights before they wait for
/// the kernel ahead by default ([`MATMUL_EARLY_WEIGHTS_ENV`], [`MATMUL_TILED_EARLY_WEIGHTS_ENV`]):
/// in dense models, where both were measured faster.
fn loads_weights_early(dims: &Dims) -> bool {
    dims.moe.is_none() && dims.linear.is_none()
}

/// Whether a bf16 matmul of `rows` × `n_out` splits k (in a model that does): 48 to 64 rows that
/// the tiles do not take, of `min_outputs` outputs or more (0 by default:
/// [`MATMUL_SPLIT_K_MIN_OUTPUTS_ENV`]).
fn runs_split_k(rows: usize, n_out: usize, min_outputs: usize) -> bool {
    (MATMUL_SPLIT_K_MIN_ROWS..=MATMUL_SPLIT_K_MAX_ROWS).contains(&rows)
        && n_out >= min_outputs
        && !runs_tiled(rows, n_out)
}

/// Whether a bf16 matmul of `rows` × `n_out`, a prompt's, splits k where
/// [`MATMUL_SPLIT_K_PROMPTS_ENV`] asks: more rows than a decode round's split takes, too few
/// tile blocks for the tiles alone.
fn runs_split_k_prompt(rows: usize, n_out: usize) -> bool {
    rows > MATMUL_SPLIT_K_MAX_ROWS && !runs_tiled(rows, n_out)
}

/// Whether a bf16 matmul of `rows` × `n_out` runs `matmul_bf16_tiled`.
fn runs_tiled(rows: usize, n_out: usize) -> bool {
    let row_blocks = rows.div_ceil(MMT_ROWS);
    let least = match row_blocks {
        1 => MATMUL_TILED_MIN_BLOCKS_ONE_ROW_BLOCK,
        _ => MATMUL_TILED_MIN_BLOCKS,
    };
    rows >= MATMUL_TILED_MIN_ROWS && row_blocks * n_out.div_ceil(MMT_OUTS) >= least
}

/// The grid of a split of `m`'s rows (`split_rows`, `split_rows_wg`, `split_rows_norm`): a row
/// of blocks a row, a thread a word of hi.
fn split_rows_grid(m: &Matmul) -> (u32, u32, u32) {
    let hi_words = split_row_words(m.k) / 2;
    (
        rows_u32(m.rows),
        u32::try_from(hi_words.div_ceil(SPLIT_THREADS as usize)).expect("words fit a grid"),
        1,
    )
}

/// A split kernel's arguments: `head`, then the walk's block rows where it has them
/// (`split_rows_walk`, `split_rows_norm_walk`), then `m.x_split`.
fn launch_split(
    gpu: &Gpu,
    split: &CudaFunction,
    m: &Matmul,
    head: &[Arg],
    block_rows: Option<usize>,
) -> Result<(), CudaError> {
    // The longest head (`split_rows_norm`'s 7), the block rows and the split rows.
    const SPLIT_KERNEL_ARGS_MAX: usize = 9;
    let mut room = [Arg::Ptr(0); SPLIT_KERNEL_ARGS_MAX];
    room[..head.len()].copy_from_slice(head);
    let mut n = head.len();
    if let Some(rows) = block_rows {
        room[n] = Arg::I32(rows as i32);
        n += 1;
    }
    room[n] = Arg::Ptr(m.x_split);
    gpu.launch(split, split_rows_grid(m), SPLIT_THREADS, &room[..n + 1])
}

/// `m`'s rows of x into `m.x_split` as split rows, by `split_rows` or `split_rows_wg`, or in the
/// walk's layout for its blocks of `block_rows` rows (`split_rows_walk`).
fn launch_split_rows(
    gpu: &Gpu,
    split_rows: &CudaFunction,
    m: &Matmul,
    block_rows: Option<usize>,
) -> Result<(), CudaError> {
    let head = [
        Arg::Ptr(m.x),
        Arg::I32(m.x_stride as i32),
        Arg::Ptr(m.row_index),
        Arg::I32(m.rows as i32),
        Arg::I32(m.k as i32),
    ];
    launch_split(gpu, split_rows, m, &head, block_rows)
}

/// `m`'s rows of x normalised by `norm` and split into `m.x_split` by `split_rows_norm` (or in
/// the walk's layout for its blocks of `block_rows` rows: `split_rows_norm_walk`), the
/// normalised rows stored in `norm.out` where `norm.keep`.
fn launch_split_rows_norm(
    gpu: &Gpu,
    split_rows_norm: &CudaFunction,
    m: &Matmul,
    norm: &InputNorm,
    block_rows: Option<usize>,
) -> Result<(), CudaError> {
    assert!(
        m.row_index == 0 && m.x_stride == m.k,
        "[split-rows-norm-rows] the norm in the split reads whole rows of k in order"
    );
    let head = [
        Arg::Ptr(m.x),
        Arg::I32(m.rows as i32),
        Arg::I32(m.k as i32),
        Arg::Ptr(norm.w),
        Arg::F32(norm.eps),
        Arg::I32(i32::from(norm.zero_centred)),
        Arg::Ptr(if norm.keep { norm.out } else { 0 }),
    ];
    launch_split(gpu, split_rows_norm, m, &head, block_rows)
}

/// Most arguments a kernel over split rows takes ([`split_rows_args`]).
const SPLIT_ROWS_ARGS_MAX: usize = 12;

/// The arguments of a kernel over `m`'s split rows, written into `room`: the split rows and W,
/// FP8's scales and their blocks where `m` has them, then `tail` (no allocation: a round's
/// matmuls launch through here).
fn split_rows_args<'a>(
    m: &Matmul,
    tail: &[Arg],
    room: &'a mut [Arg; SPLIT_ROWS_ARGS_MAX],
) -> &'a [Arg] {
    room[0] = Arg::Ptr(m.x_split);
    room[1] = Arg::Ptr(m.w);
    let mut head = 2;
    if let Some(fp8) = m.fp8 {
        check_fp8_blocks(&fp8, m);
        room[2..5].copy_from_slice(&[
            Arg::Ptr(fp8.scales),
            Arg::I32(fp8.block_rows as i32),
            Arg::I32(fp8.block_cols as i32),
        ]);
        head = 5;
    }
    room[head..head + tail.len()].copy_from_slice(tail);
    &room[..head + tail.len()]
}

/// Floats from one residue's partial of `m`'s k split to the next (`[rows, n_out]` each).
fn partial_stride(m: &Matmul) -> i32 {
    i32::try_from(m.rows * m.n_out).expect("a partial fits i32 indices")
}

/// `m`'s rows of x split into `m.x_split` by `kernels.0`, then `kernels.1` over them with the
/// tiles' arguments (the split rows, then the 16-row kernels' from W on, FP8's scales and their
/// blocks after W where `m` has them), a block of `block.0` rows × `block.1` outputs.
fn launch_over_split_rows(
    gpu: &Gpu,
    kernels: (&CudaFunction, &CudaFunction),
    m: &Matmul,
    block: (usize, usize),
    threads: u32,
    shared_bytes: usize,
) -> Result<(), CudaError> {
    launch_split_rows(gpu, kernels.0, m, None)?;
    let mut room = [Arg::Ptr(0); SPLIT_ROWS_ARGS_MAX];
    let args = split_rows_args(m, &bf16_matmul_args(m)[4..], &mut room);
    gpu.launch_with_shared(
        kernels.1,
        (
            rows_u32(m.rows.div_ceil(block.0)),
            u32::try_from(m.n_out.div_ceil(block.1)).expect("outputs fit a grid"),
            1,
        ),
        threads,
        shared_bytes as u32,
        args,
    )
}

impl Kernels {
    /// The k split of `m` (its rows already split) folded in each tile's cluster by `kernels`
    /// (plain, SwiGLU: `matmul_bf16_tiled_split_fold*` or `matmul_bf16_tiled_split32_fold*` on
    /// mma.sync, [`MATMUL_CLUSTER_FOLD_ENV`]; `matmul_bf16_wg_split_fold*` on the warpgroup MMA,
    /// [`MATMUL_WG_FOLD_ENV`]) on the split's
    /// `row_blocks` row blocks of `shared` bytes each: into `m.y` as the fold writes it, or with
    /// `swiglu_act` the SwiGLU of its gate/up into that address.
    fn matmul_split_folded(
        &self,
        gpu: &Gpu,
        m: &Matmul,
        swiglu_act: Option<u64>,
        kernels: &[CudaFunction; 2],
        row_blocks: u32,
        shared: usize,
    ) -> Result<(), CudaError> {
        let (kernel, out_blocks, tail) = match swiglu_act {
            None => (
                &kernels[0],
                m.n_out.div_ceil(MMT_OUTS),
                [
                    Arg::I32(m.k as i32),
                    Arg::I32(m.n_out as i32),
                    Arg::Ptr(m.y),
                    Arg::I32(m.y_stride as i32),
                    Arg::I32(i32::from(m.accumulate)),
                    Arg::I32(m.rows as i32),
                ],
            ),
            Some(act) => {
                let width = m.n_out / 2;
                (
                    &kernels[1],
                    // A tile: MMT_OUTS / 2 units' gate rows and their up rows.
                    width.div_ceil(MMT_OUTS / 2),
                    [
                        Arg::I32(m.k as i32),
                        Arg::I32(m.n_out as i32),
                        Arg::Ptr(act),
                        Arg::I32(width as i32),
                        Arg::I32(0),
                        Arg::I32(m.rows as i32),
                    ],
                )
            }
        };
        let grid = (
            row_blocks,
            u32::try_from(out_blocks).expect("outputs fit a grid"),
            MATMUL_RESIDUES as u32,
        );
        #[cfg(test)]
        self.cluster_fold_launches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut room = [Arg::Ptr(0); SPLIT_ROWS_ARGS_MAX];
        let args = split_rows_args(m, &tail, &mut room);
        gpu.launch_with_shared(kernel, grid, MMT_THREADS, shared as u32, args)
    }

    /// Where a k split of `m` runs on the warpgroup MMA's 64-row blocks ([`MATMUL_WG_FOLD_ENV`]):
    /// where asked and compiled, a bf16 split on mma.sync's 64-row blocks (not the 32-row ones,
    /// not the swapped warpgroup split), folded in its clusters where [`folds_in_clusters`] folds
    /// the tiles' (whose blocks, grid and occupancy it keeps), into partials elsewhere.
    fn wg_split_run(
        &self,
        m: &Matmul,
        split_k: bool,
        on_wgmma: bool,
        swiglu: bool,
    ) -> Option<(&WgmmaKernels, WgSplitRun)> {
        let wg = self.wgmma.as_ref()?;
        let on_32_rows = self.matmul_split32 && m.rows <= SPLIT32_ROWS;
        if !(self.matmul_wg_fold && split_k && !on_wgmma && !on_32_rows && m.fp8.is_none()) {
            return None;
        }
        let shape = SplitShape {
            tiles: m.rows.div_ceil(MMT_ROWS) * m.n_out.div_ceil(MMT_OUTS),
            on_32_rows,
            swiglu,
        };
        let run = match folds_in_clusters(self.matmul_cluster_fold, shape) {
            true => WgSplitRun::FoldedInClusters,
            false => WgSplitRun::Partials,
        };
        Some((wg, run))
    }

    /// Where and how a k split of `m` runs as the walk ([`MATMUL_WALK_ENV`]): where its kernels
    /// loaded, a bf16 round's split the swapped warpgroup split does not take, as [`walk_plan`]
    /// says (`swiglu`: a gate/up's).
    fn walk_run(
        &self,
        m: &Matmul,
        split_k: bool,
        on_wgmma: bool,
        swiglu: bool,
    ) -> Option<(&WalkKernels, WalkPlan)> {
        let wg = self.wgmma.as_ref()?.walk.as_ref()?;
        if !split_k || on_wgmma || m.fp8.is_some() {
            return None;
        }
        let plan = walk_plan(
            &self.matmul_walk,
            wg.loaded(),
            m.rows,
            m.n_out,
            m.k.div_ceil(MMA_CHUNK),
            swiglu,
            self.multiprocessors,
        )?;
        Some((wg, plan))
    }

    /// x split in the walk's layout (with `norm`, normalised first in the same launch), then
    /// the walk over it by `plan` into `m.y`, or with `swiglu_act` a gate/up's act =
    /// silu(gate) · up into that address (stride: the units).
    fn matmul_walk(
        &self,
        gpu: &Gpu,
        wg: &WalkKernels,
        plan: WalkPlan,
        m: &Matmul,
        swiglu_act: Option<u64>,
        norm: Option<&InputNorm>,
    ) -> Result<(), CudaError> {
        let swiglu = swiglu_act.is_some();
        // The k groups give the tiles their blocks, and several warpgroups hold their outputs,
        // at 64 rows.
        let rows = match plan {
            WalkPlan::Rows(rows) => rows,
            WalkPlan::Wide(_) | WalkPlan::KGroups(_) | WalkPlan::WideKGroups { .. } => 64,
        };
        #[cfg(test)]
        self.walk_launches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match norm {
            None => launch_split_rows(gpu, &wg.split_rows, m, Some(rows))?,
            Some(norm) => launch_split_rows_norm(gpu, &wg.split_rows_norm, m, norm, Some(rows))?,
        }
        let (y, y_stride, accumulate) = match swiglu_act {
            None => (m.y, m.y_stride, m.accumulate),
            Some(act) => (act, m.n_out / 2, false),
        };
        // The kernel, its blocks along the outputs and along k, its threads, its shared memory
        // and the rows of W's boxes (a gate/up's: its units' gate rows, then their up rows: 32 a
        // warpgroup).
        let box_rows_a_warpgroup = if swiglu { MWK_OUTS / 2 } else { MWK_OUTS };
        let (kernel, out_blocks, z, threads, shared, box_rows) = match plan {
            WalkPlan::KGroups(groups) => {
                // The kernel counts a residue's chunks as at least one.
                assert!(
                    m.k.div_ceil(MMA_CHUNK) >= MMT_RESIDUES_OF_K,
                    "[walk-k-groups-residues] a walk in k groups needs a chunk in every residue (k {})",
                    m.k
                );
                let (kernel, shared) = wg.k_groups[groups - 2]
                    .as_ref()
                    .expect("[walk-plan-loaded] the plan's k groups' kernel loaded");
                #[cfg(test)]
                self.walk_k_group_launches
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let out_blocks = walk_out_blocks(m.n_out, false, 1);
                (kernel, out_blocks, groups, MWK_THREADS, *shared, MWK_OUTS)
            }
            WalkPlan::WideKGroups { warpgroups, groups } => {
                assert!(
                    m.k.div_ceil(MMA_CHUNK) >= MMT_RESIDUES_OF_K,
                    "[walk-k-groups-residues] a walk in k groups needs a chunk in every residue (k {})",
                    m.k
                );
                let at = MWK_WIDE_K_GROUPS
                    .iter()
                    .position(|&g| g == groups)
                    .expect("[walk-plan-groups] the plan's k groups are a wide walk's");
                let walk = wg.wide_k_groups[warpgroups - 2][at]
                    .as_ref()
                    .expect("[walk-plan-loaded] the plan's wide k groups' kernel loaded");
                #[cfg(test)]
                self.walk_wide_k_group_launches
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                (
                    &walk.kernel,
                    walk_out_blocks(m.n_out, false, warpgroups),
                    groups,
                    mwk_wide_threads(warpgroups),
                    walk.shared,
                    MWK_OUTS * warpgroups,
                )
            }
            WalkPlan::Wide(warpgroups) => {
                let wide = wg.wide[warpgroups - 2]
                    .as_ref()
                    .expect("[walk-plan-loaded] the plan's wide kernels loaded");
                #[cfg(test)]
                self.walk_wide_launches
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                (
                    if swiglu { &wide.swiglu } else { &wide.plain },
                    walk_out_blocks(m.n_out, swiglu, warpgroups),
                    1,
                    mwk_wide_threads(warpgroups),
                    wide.shared,
                    box_rows_a_warpgroup * warpgroups,
                )
            }
            WalkPlan::Rows(_) => {
                let at = usize::from(rows == 64);
                (
                    if swiglu {
                        &wg.tma_swiglu[at]
                    } else {
                        &wg.tma[at]
                    },
                    walk_out_blocks(m.n_out, swiglu, 1),
                    1,
                    MWK_THREADS,
                    wg.tma_shared[at],
                    box_rows_a_warpgroup,
                )
            }
        };
        gpu.launch_with_shared(
            kernel,
            (
                rows_u32(m.rows.div_ceil(rows)),
                u32::try_from(out_blocks).expect("outputs fit a grid"),
                z as u32,
            ),
            threads,
            shared as u32,
            &[
                Arg::Ptr(m.x_split),
                Arg::Map(weight_tensor_map(m, box_rows)?),
                Arg::I32(m.k as i32),
                Arg::I32(m.n_out as i32),
                Arg::Ptr(y),
                Arg::I32(y_stride as i32),
                Arg::I32(i32::from(accumulate)),
                Arg::I32(m.rows as i32),
            ],
        )
    }

    /// x split into `m.x_split` (`split_rows`; with `norm`, normalised first in the same launch:
    /// `split_rows_norm`), then the tiles over it, each residue of k's split into `m.partials`
    /// and folded into y when `split_k` (the split on the warpgroup MMA when `on_wgmma`; or,
    /// with `swiglu_act`, folded as a gate/up into `act = silu(gate) · up`:
    /// `matmul_fold_residues_swiglu`).
    /// Where [`folds_in_clusters`] (by default the 64-row splits by [`ClusterFold::Waves`];
    /// [`MATMUL_CLUSTER_FOLD_ENV`]) the split on mma.sync folds in its clusters instead
    /// ([`Kernels::matmul_split_folded`]).
    fn matmul_tiled(
        &self,
        gpu: &Gpu,
        m: &Matmul,
        split_k: bool,
        on_wgmma: bool,
        swiglu_act: Option<u64>,
        norm: Option<&InputNorm>,
    ) -> Result<(), CudaError> {
        assert!(
            m.x_split != 0,
            "[matmul-tiled-split] the tiled matmul needs room for its split rows (Matmul::x_split)"
        );
        assert!(
            m.fp8.is_none() || (split_k && on_wgmma),
            "[matmul-fp8-split] FP8 weights run here only as a k split on the warpgroup MMA"
        );
        assert!(
            !split_k || m.partials != 0,
            "[matmul-split-k-room] a split k needs room for its partials (Matmul::partials)"
        );
        let row_blocks = rows_u32(m.rows.div_ceil(MMT_ROWS));
        let out_blocks = u32::try_from(m.n_out.div_ceil(MMT_OUTS)).expect("outputs fit a grid");
        if let Some((wg, plan)) = self.walk_run(m, split_k, on_wgmma, swiglu_act.is_some()) {
            return self.matmul_walk(gpu, wg, plan, m, swiglu_act, norm);
        }
        if let Some((wg, run)) = self.wg_split_run(m, split_k, on_wgmma, swiglu_act.is_some()) {
            // x in the warpgroup's k order, then the tiles' split on wgmma, folded as theirs.
            check_wg_matrix_size(m);
            #[cfg(test)]
            self.wg_split_launches
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            match norm {
                None => launch_split_rows(gpu, &wg.split_rows, m, None)?,
                Some(norm) => launch_split_rows_norm(gpu, &wg.split_rows_norm, m, norm, None)?,
            }
            return match run {
                WgSplitRun::FoldedInClusters => self.matmul_split_folded(
                    gpu,
                    m,
                    swiglu_act,
                    &wg.split_fold_bf16,
                    row_blocks,
                    MWF_SHARED_BYTES,
                ),
                WgSplitRun::Partials => {
                    let tiles = (row_blocks, out_blocks);
                    let split = &wg.split_partials_bf16;
                    self.split_into_partials(gpu, m, split, tiles, MWF_SHARED_BYTES)?;
                    self.fold_partials(gpu, m, swiglu_act)
                }
            };
        }
        match norm {
            None => launch_split_rows(gpu, &self.split_rows, m, None)?,
            Some(norm) => launch_split_rows_norm(gpu, &self.split_rows_norm, m, norm, None)?,
        }
        if !split_k {
            // The 16-row kernels' arguments from W on, after the split rows.
            let mut room = [Arg::Ptr(0); SPLIT_ROWS_ARGS_MAX];
            return gpu.launch_with_shared(
                &self.matmul_tiled,
                (row_blocks, out_blocks, 1),
                MMT_THREADS,
                self.tiled_shared_bytes as u32,
                split_rows_args(m, &bf16_matmul_args(m)[4..], &mut room),
            );
        }
        assert!(
            swiglu_act.is_none() || split_k,
            "[matmul-fold-swiglu] only a split k's fold takes the SwiGLU"
        );
        let wgmma = match on_wgmma {
            true => Some(self.wgmma.as_ref().expect(
                "[matmul-wg-split-compiled] MatmulKernel::WgmmaSplitK needs Kernels::compile_wgmma first",
            )),
            false => None,
        };
        let on_32_rows = self.matmul_split32 && m.rows <= SPLIT32_ROWS;
        let (split, row_blocks, shared) = match (wgmma, on_32_rows) {
            (Some(wg), _) => {
                check_wg_matrix_size(m);
                let kernels = match m.fp8 {
                    Some(_) => &wg.split_fp8,
                    None => &wg.split_bf16,
                };
                let (kernel, rows) = match m.rows <= MWS_N32_ROWS {
                    true => (&kernels[0], MWS_N32_ROWS),
                    false => (&kernels[1], MWS_MAX_ROWS),
                };
                (
                    kernel,
                    rows_u32(m.rows.div_ceil(rows)),
                    mws_shared_bytes(rows),
                )
            }
            (None, true) => (
                &self.matmul_tiled_split32,
                rows_u32(m.rows.div_ceil(SPLIT32_ROWS)),
                self.split32_shared_bytes,
            ),
            (None, false) => (
                &self.matmul_tiled_split,
                row_blocks,
                self.tiled_shared_bytes,
            ),
        };
        // The splits on mma.sync (not the warpgroup's) may fold in clusters.
        let split_shape = SplitShape {
            tiles: row_blocks as usize * out_blocks as usize,
            on_32_rows,
            swiglu: swiglu_act.is_some(),
        };
        if wgmma.is_none() && folds_in_clusters(self.matmul_cluster_fold, split_shape) {
            let kernels = match on_32_rows {
                true => &self.matmul_tiled_split32_fold,
                false => &self.matmul_tiled_split_fold,
            };
            return self.matmul_split_folded(gpu, m, swiglu_act, kernels, row_blocks, shared);
        }
        self.split_into_partials(gpu, m, split, (row_blocks, out_blocks), shared)?;
        self.fold_partials(gpu, m, swiglu_act)
    }

    /// The unfolded k split `split` of `m` (its rows already split): each residue's partial into
    /// `m.partials`, a block of `shared` bytes for each of `tiles` (row blocks, output blocks).
    fn split_into_partials(
        &self,
        gpu: &Gpu,
        m: &Matmul,
        split: &CudaFunction,
        tiles: (u32, u32),
        shared: usize,
    ) -> Result<(), CudaError> {
        let grid = (tiles.0, tiles.1, MATMUL_RESIDUES as u32);
        let mut room = [Arg::Ptr(0); SPLIT_ROWS_ARGS_MAX];
        let args = split_rows_args(
            m,
            &[
                Arg::I32(m.k as i32),
                Arg::I32(m.n_out as i32),
                Arg::Ptr(m.partials),
                Arg::I32(partial_stride(m)),
                Arg::I32(m.rows as i32),
            ],
            &mut room,
        );
        gpu.launch_with_shared(split, grid, MMT_THREADS, shared as u32, args)
    }

    /// `m.partials` folded in residue order into `m.y` (`matmul_fold_residues`), or with
    /// `swiglu_act` a gate/up's into act = silu(gate) · up (`matmul_fold_residues_swiglu`).
    fn fold_partials(
        &self,
        gpu: &Gpu,
        m: &Matmul,
        swiglu_act: Option<u64>,
    ) -> Result<(), CudaError> {
        let part_stride = partial_stride(m);
        if let Some(act) = swiglu_act {
            let width = m.n_out / 2;
            return gpu.launch(
                &self.matmul_fold_swiglu,
                (blocks(m.rows * width, SPLIT_THREADS), 1, 1),
                SPLIT_THREADS,
                &[
                    Arg::Ptr(m.partials),
                    Arg::I32(part_stride),
                    Arg::I32(m.rows as i32),
                    Arg::I32(width as i32),
                    Arg::Ptr(act),
                ],
            );
        }
        gpu.launch(
            &self.matmul_fold,
            (blocks(m.rows * m.n_out, SPLIT_THREADS), 1, 1),
            SPLIT_THREADS,
            &[
                Arg::Ptr(m.partials),
                Arg::I32(part_stride),
                Arg::I32(m.rows as i32),
                Arg::I32(m.n_out as i32),
                Arg::Ptr(m.y),
                Arg::I32(m.y_stride as i32),
                Arg::I32(i32::from(m.accumulate)),
            ],
        )
    }

    /// x split into `m.x_split` in the warpgroup's k order (`split_rows_wg`), then
    /// `matmul_bf16_wgmma` over it.
    fn matmul_wgmma(&self, gpu: &Gpu, m: &Matmul) -> Result<(), CudaError> {
        let wg = self.wgmma.as_ref().expect(
            "[matmul-wgmma-compiled] MatmulKernel::Wgmma needs Kernels::compile_wgmma first",
        );
        assert!(
            m.x_split != 0,
            "[matmul-wgmma-split] the warpgroup matmul needs room for its split rows (Matmul::x_split)"
        );
        launch_over_split_rows(
            gpu,
            (&wg.split_rows, &wg.matmul),
            m,
            (MMW_ROWS, MMW_OUTS),
            MMW_THREADS,
            MMW_SHARED_BYTES,
        )
    }

    /// Whether `Auto` splits k by `m`'s rows and outputs in a model whose matmuls split k
    /// ([`model_splits_k`]): a decode round's 48–64 rows ([`runs_split_k`]), 17–32
    /// ([`MATMUL_SPLIT32_ENV`]), a prompt's few tiles ([`runs_split_k_prompt`]).
    fn rows_split(&self, m: &Matmul) -> bool {
        self.matmul_split_k
            && (runs_split_k(m.rows, m.n_out, self.matmul_split_k_min_outputs)
                || (self.matmul_split32 && (SPLIT32_MIN_ROWS..=SPLIT32_ROWS).contains(&m.rows))
                || (self.matmul_split_k_prompts && runs_split_k_prompt(m.rows, m.n_out)))
    }

    /// Whether `Auto` splits an FP8 matmul of a round of 17–64 rows for the swapped warpgroup
    /// split ([`wg_split_takes`]), 33–47 rows included, which no bf16 round splits: the 16-row FP8
    /// kernels take those as three row tiles, reading each weight three times, where the split's
    /// blocks of 64 rows read it once. Not measured at 33–47 rows by itself: both kernels' cost
    /// there is that of 48 rows (as many row tiles, one block of 64), where the split measured
    /// 1.41× (Qwen3-4B-FP8) and 1.13× (-8B-FP8) the 16-row kernels (bench/RESULTS.md session 44).
    fn fp8_round_splits(&self, m: &Matmul) -> bool {
        m.fp8.is_some()
            && m.rows >= SPLIT32_MIN_ROWS
            && self.wgmma.is_some()
            && wg_split_takes(self.matmul_wg_split, m.rows, true)
    }

    /// x split into `m.x_split` (`split_rows`), then `matmul_bf16_wg_swap` or, for FP8 weights,
    /// `matmul_fp8_wg_swap` over it.
    fn matmul_wg_swap(&self, gpu: &Gpu, m: &Matmul) -> Result<(), CudaError> {
        let wg = self.wgmma.as_ref().expect(
            "[matmul-wg-swap-compiled] MatmulKernel::WgmmaSwapped needs Kernels::compile_wgmma first",
        );
        assert!(
            m.x_split != 0,
            "[matmul-wg-swap-split] the swapped matmul needs room for its split rows (Matmul::x_split)"
        );
        check_wg_matrix_size(m);
        let kernel = match m.fp8 {
            Some(_) => &wg.swap_fp8,
            None => &wg.swap_bf16,
        };
        launch_over_split_rows(
            gpu,
            (&self.split_rows, kernel),
            m,
            (MWS_MAX_ROWS, MWS_OUTS),
            MWS_THREADS,
            MWS_SWAP_SHARED_BYTES,
        )
    }

    /// Whether `MatmulKernel::Auto` may split k ([`model_splits_k`], [`MATMUL_SPLIT_K_ENV`]): the scratch then
    /// keeps room for the partials.
    pub fn splits_k(&self) -> bool {
        self.matmul_tiled_auto
            && (self.matmul_split_k || (self.fp8_rounds_split_alone && self.wgmma.is_some()))
    }

    /// The f32 room a forward of `rows` rows needs for `Auto`'s k splits, whose widest matrix
    /// (not the lm_head, which never splits) has `widest` outputs: a decode round's split of up
    /// to 64 rows, and a prompt's where [`MATMUL_SPLIT_K_PROMPTS_ENV`] asks; 1 where k never
    /// splits.
    pub fn split_partials_floats(&self, rows: usize, widest: usize) -> usize {
        if !self.splits_k() {
            return 1;
        }
        let round = MATMUL_RESIDUES * rows.min(MATMUL_SPLIT_K_MAX_ROWS) * widest;
        let prompt = match self.matmul_split_k
            && self.matmul_split_k_prompts
            && rows > MATMUL_SPLIT_K_MAX_ROWS
        {
            true => SPLIT_K_PROMPT_PARTIALS_FLOATS,
            false => 0,
        };
        round.max(prompt).max(1)
    }

    pub fn matmul(&self, gpu: &Gpu, m: &Matmul) -> Result<(), CudaError> {
        self.matmul_with(gpu, m, MatmulKernel::Auto)
    }

    pub fn matmul_with(
        &self,
        gpu: &Gpu,
        m: &Matmul,
        kernel: MatmulKernel,
    ) -> Result<(), CudaError> {
        self.matmul_normed_with(gpu, m, None, kernel).map(|_| ())
    }

    /// `y (+)= norm(x) · Wᵀ`: the matmul `m` of rows that take `norm` first, the norm where
    /// [`norm_place`] puts it.
    pub fn normed_matmul(
        &self,
        gpu: &Gpu,
        m: &Matmul,
        norm: &InputNorm,
    ) -> Result<NormPlace, CudaError> {
        self.matmul_normed_with(gpu, m, Some(norm), MatmulKernel::Auto)
            .map(|place| place.expect("a norm is placed"))
    }

    /// [`Kernels::matmul_with`] whose rows take `norm` first, if any; where it ran.
    pub(crate) fn matmul_normed_with(
        &self,
        gpu: &Gpu,
        m: &Matmul,
        norm: Option<&InputNorm>,
        kernel: MatmulKernel,
    ) -> Result<Option<NormPlace>, CudaError> {
        check_matmul(m);
        let launch = self.plan_matmul(m, kernel);
        let (m, twin_norm, place) = self.place_norm(gpu, m, norm, launch)?;
        if m.rows > 0 {
            self.run_matmul(gpu, &m, launch, twin_norm.as_ref())?;
        }
        Ok(place)
    }

    /// `m` with its input norm placed for `launch` ([`norm_place`]): where it goes apart,
    /// `rmsnorm_rows` runs now and the matmul returned reads its rows; where it goes into the
    /// kernel, the norm comes back for the twin.
    fn place_norm(
        &self,
        gpu: &Gpu,
        m: &Matmul,
        norm: Option<&InputNorm>,
        launch: MatmulLaunch,
    ) -> Result<(Matmul, Option<InputNorm>, Option<NormPlace>), CudaError> {
        let Some(norm) = norm else {
            return Ok((*m, None, None));
        };
        assert!(
            m.row_index == 0 && m.x_stride == m.k,
            "[matmul-norm-rows] a normed matmul reads whole rows of k in order (row index {:#x}, \
             x stride {}, k {})",
            m.row_index,
            m.x_stride,
            m.k
        );
        let place = norm_place(
            launch,
            m.fp8.is_some(),
            m.rows,
            self.norm_in_matmul_max_rows,
            self.norm_in_split,
        );
        match place {
            NormPlace::InMatmul | NormPlace::InSplit => Ok((*m, Some(*norm), Some(place))),
            NormPlace::Apart => {
                self.rmsnorm(
                    gpu,
                    m.x,
                    norm.w,
                    m.k,
                    m.rows,
                    norm.eps,
                    norm.zero_centred,
                    norm.out,
                )?;
                Ok((Matmul { x: norm.out, ..*m }, None, Some(place)))
            }
        }
    }

    /// Where the modules' kernel timeline stamps are (none unless `FLASHLANE_TIMELINE=1`): the
    /// main module's, and the warpgroup matmul's where it was compiled.
    pub(crate) fn timeline_rooms(&self) -> Vec<crate::timeline::TimelineRoom> {
        let wgmma = self.wgmma.as_ref().and_then(|w| w.timeline_room);
        self.timeline_room.into_iter().chain(wgmma).collect()
    }

    /// The norm twins, which [`norm_place`] puts a norm into only where they were compiled
    /// (`norm_in_matmul_max_rows` is 0 without them).
    fn twins(&self) -> &NormTwins {
        self.norm_twins.as_ref().expect(
            "[norm-twins-compiled] a norm goes into a matmul only where its twins were compiled",
        )
    }

    /// Which kernel computes `m` when asked for `kernel` (`Auto`: the choice
    /// [`MatmulKernel::Auto`] describes).
    fn plan_matmul(&self, m: &Matmul, kernel: MatmulKernel) -> MatmulLaunch {
        let split_k = match kernel {
            MatmulKernel::Auto => {
                self.splits_k()
                    && m.x_split != 0
                    && m.partials != 0
                    && (self.rows_split(m) || self.fp8_round_splits(m))
            }
            MatmulKernel::TiledSplitK | MatmulKernel::WgmmaSplitK => true,
            _ => false,
        };
        let tiled = match kernel {
            MatmulKernel::Auto => {
                split_k || (self.matmul_tiled_auto && m.x_split != 0 && runs_tiled(m.rows, m.n_out))
            }
            MatmulKernel::Tiled
            | MatmulKernel::TiledSplitK
            | MatmulKernel::Wgmma
            | MatmulKernel::WgmmaSplitK
            | MatmulKernel::WgmmaSwapped => true,
            MatmulKernel::Narrow
            | MatmulKernel::Wide
            | MatmulKernel::Tiles(_)
            | MatmulKernel::Deep(_) => false,
        };
        let wgmma = match kernel {
            // Compiled at start whenever `matmul_wgmma_min_rows` is set.
            MatmulKernel::Auto => {
                !split_k && self.matmul_wgmma_min_rows.is_some_and(|min| m.rows >= min)
            }
            MatmulKernel::Wgmma => true,
            _ => false,
        };
        let wgmma_split = split_k
            && match kernel {
                MatmulKernel::Auto => {
                    self.wgmma.is_some()
                        && wg_split_takes(self.matmul_wg_split, m.rows, m.fp8.is_some())
                }
                MatmulKernel::WgmmaSplitK => true,
                _ => false,
            };
        // FP8 too: its chain is `mma_tile_fp8`'s, whose warps are this split's residues.
        if wgmma_split && !wgmma {
            return MatmulLaunch::WgmmaSplitK;
        }
        let wgmma_swap = !split_k
            && match kernel {
                MatmulKernel::Auto => {
                    self.wgmma.is_some()
                        && wg_swap_takes(self.matmul_wg_swap, m.rows, m.fp8.is_some())
                }
                MatmulKernel::WgmmaSwapped => true,
                _ => false,
            };
        if tiled && wgmma_swap {
            return MatmulLaunch::WgmmaSwapped;
        }
        if tiled && m.fp8.is_none() {
            return match wgmma {
                true => MatmulLaunch::Wgmma,
                false => MatmulLaunch::Tiled { split_k },
            };
        }
        let row_tiles = m.rows.div_ceil(MMA_ROWS);
        let n_tiles = m.n_out.div_ceil(MMA_COLS);
        // N-tiles a block: 1 is the narrow kernel.
        let tiles = match kernel {
            MatmulKernel::Auto
            | MatmulKernel::Tiled
            | MatmulKernel::TiledSplitK
            | MatmulKernel::Wgmma
            | MatmulKernel::WgmmaSplitK
            | MatmulKernel::WgmmaSwapped => {
                let wide_blocks = m.n_out.div_ceil(MMA_NT * MMA_COLS);
                let wide = match m.fp8 {
                    None => row_tiles > 1 || wide_blocks > self.matmul_narrow_max_blocks,
                    Some(_) => wide_blocks * row_tiles >= FP8_WIDE_MIN_BLOCKS,
                };
                let (fit, multi_row) = self.matmul_fit;
                let resident = self.multiprocessors * MMA_MIN_BLOCKS;
                match (wide, m.fp8.is_some()) {
                    (false, _) => 1,
                    (true, false) if fit => {
                        let fitted = block_tiles(row_tiles, n_tiles, resident, multi_row);
                        match self.matmul_deep {
                            true => deep_fit(row_tiles, n_tiles, fitted, self.multiprocessors),
                            false => fitted,
                        }
                    }
                    (true, _) => MMA_NT,
                }
            }
            MatmulKernel::Narrow => 1,
            MatmulKernel::Wide => MMA_NT,
            MatmulKernel::Deep(tiles) | MatmulKernel::Tiles(tiles) => {
                let (offered, which) = match kernel {
                    MatmulKernel::Deep(_) => (&MATMUL_DEEP_TILES[..], "the deep kernels'"),
                    _ => (&MATMUL_BLOCK_TILES[..], "the wide kernel's"),
                };
                assert!(
                    offered.contains(&tiles),
                    "matmul: {tiles} n-tiles a block is none of {which} {offered:?}"
                );
                // FP8 has the narrow kernel and MMA_NT only.
                if m.fp8.is_some() {
                    MMA_NT
                } else {
                    tiles
                }
            }
        };
        let deep_at = MATMUL_DEEP_TILES.iter().position(|&t| t == tiles);
        let deep = match kernel {
            MatmulKernel::Deep(_) => true,
            MatmulKernel::Auto => {
                self.matmul_deep
                    && deep_at.is_some()
                    && deepens(row_tiles, n_tiles.div_ceil(tiles), self.multiprocessors)
            }
            _ => false,
        };
        MatmulLaunch::RowTiles { tiles, deep }
    }

    /// `m` by the kernel `launch` names (with `norm`: its norm twin, [`NormPlace::InMatmul`], or
    /// the norm in the split of x, [`NormPlace::InSplit`]).
    fn run_matmul(
        &self,
        gpu: &Gpu,
        m: &Matmul,
        launch: MatmulLaunch,
        norm: Option<&InputNorm>,
    ) -> Result<(), CudaError> {
        assert!(
            norm.is_none()
                || (matches!(
                    launch,
                    MatmulLaunch::RowTiles { .. }
                        | MatmulLaunch::Tiled { .. }
                        | MatmulLaunch::WgmmaSplitK
                ) && m.fp8.is_none()),
            "[matmul-norm-in-kernel] only the bf16 16-row kernels and the split of x take a norm \
             ({launch:?})"
        );
        let (tiles, deep) = match launch {
            MatmulLaunch::Wgmma => return self.matmul_wgmma(gpu, m),
            MatmulLaunch::Tiled { split_k } => {
                return self.matmul_tiled(gpu, m, split_k, false, None, norm)
            }
            MatmulLaunch::WgmmaSplitK => return self.matmul_tiled(gpu, m, true, true, None, norm),
            MatmulLaunch::WgmmaSwapped => return self.matmul_wg_swap(gpu, m),
            MatmulLaunch::RowTiles { tiles, deep } => (tiles, deep),
        };
        let grid = (
            rows_u32(m.rows.div_ceil(MMA_ROWS)),
            u32::try_from(m.n_out.div_ceil(MMA_COLS).div_ceil(tiles)).expect("outputs fit a grid"),
            1,
        );
        let deep_at = MATMUL_DEEP_TILES.iter().position(|&t| t == tiles);
        if swaps(m.rows, self.matmul_swap_rows.of(m.fp8.is_some())) {
            self.count_swapped();
            let nt = swap_tiles(tiles, deep);
            let grid = (
                1,
                u32::try_from(m.n_out.div_ceil(16 * nt)).expect("outputs fit a grid"),
                1,
            );
            return match (m.fp8, norm) {
                (Some(fp8), _) => {
                    check_fp8_blocks(&fp8, m);
                    gpu.launch(
                        &self.matmul_fp8_swap[nt - 1],
                        grid,
                        MMA_WARPS * 32,
                        &fp8_matmul_args(m, &fp8),
                    )
                }
                (None, None) => gpu.launch(
                    &self.matmul_swap[nt - 1],
                    grid,
                    MMA_WARPS * 32,
                    &bf16_matmul_args(m),
                ),
                (None, Some(norm)) => gpu.launch(
                    &self.twins().swap[nt - 1],
                    grid,
                    MMA_WARPS * 32,
                    &bf16_norm_matmul_args(m, norm),
                ),
            };
        }
        let Some(fp8) = m.fp8 else {
            let (deep_kernels, wide_kernels, narrow) = match norm {
                None => (
                    &self.matmul_deep_by_tiles,
                    &self.matmul_by_tiles,
                    &self.matmul_narrow,
                ),
                Some(_) => {
                    let twins = self.twins();
                    (&twins.deep_by_tiles, &twins.by_tiles, &twins.narrow)
                }
            };
            let f = match (
                deep,
                deep_at,
                MATMUL_BLOCK_TILES.iter().position(|&t| t == tiles),
            ) {
                (true, Some(i), _) => &deep_kernels[i],
                (_, _, Some(i)) => &wide_kernels[i],
                (_, _, None) => narrow,
            };
            return match norm {
                None => gpu.launch(f, grid, MMA_WARPS * 32, &bf16_matmul_args(m)),
                Some(norm) => gpu.launch(f, grid, MMA_WARPS * 32, &bf16_norm_matmul_args(m, norm)),
            };
        };
        check_fp8_blocks(&fp8, m);
        let f = match tiles {
            1 => &self.matmul_fp8_narrow,
            _ => &self.matmul_fp8,
        };
        gpu.launch(f, grid, MMA_WARPS * 32, &fp8_matmul_args(m, &fp8))
    }

    /// `act[rows, width] = silu(gate) · up` of a dense MLP's gate/up matmul `m` (W `[gate (width)
    /// | up (width)]`, n_out = 2·width; `m.y`, of stride n_out, holds the products where they go
    /// through memory), as [`swiglu_place`] puts it.
    pub fn gate_up_swiglu(
        &self,
        gpu: &Gpu,
        m: &Matmul,
        act: u64,
    ) -> Result<SwigluPlace, CudaError> {
        self.gate_up_swiglu_with(gpu, m, act, None, MatmulKernel::Auto)
            .map(|(place, _)| place)
    }

    /// [`Kernels::gate_up_swiglu`] of rows that take `norm` first (a dense MLP's post-attention
    /// norm), the norm where [`norm_place`] puts it.
    pub fn gate_up_swiglu_normed(
        &self,
        gpu: &Gpu,
        m: &Matmul,
        act: u64,
        norm: &InputNorm,
    ) -> Result<(SwigluPlace, NormPlace), CudaError> {
        self.gate_up_swiglu_with(gpu, m, act, Some(norm), MatmulKernel::Auto)
            .map(|(place, norm)| (place, norm.expect("a norm is placed")))
    }

    /// [`Kernels::gate_up_swiglu`] with the matmul's kernel asked for (the tests), its rows
    /// normalised first by `norm` if any.
    pub(crate) fn gate_up_swiglu_with(
        &self,
        gpu: &Gpu,
        m: &Matmul,
        act: u64,
        norm: Option<&InputNorm>,
        kernel: MatmulKernel,
    ) -> Result<(SwigluPlace, Option<NormPlace>), CudaError> {
        assert!(
            m.n_out.is_multiple_of(2) && m.y_stride == m.n_out && !m.accumulate,
            "[gate-up-swiglu-shape] a gate/up matmul writes gate and up halves of one width \
             ({} outputs, y stride {}, accumulate {})",
            m.n_out,
            m.y_stride,
            m.accumulate
        );
        check_matmul(m);
        let width = m.n_out / 2;
        let launch = self.plan_matmul(m, kernel);
        let place = swiglu_place(launch, m.fp8.is_some(), self.swiglu_in_gate_up);
        let (m, twin_norm, norm_place) = self.place_norm(gpu, m, norm, launch)?;
        let m = &m;
        let places = (place, norm_place);
        if m.rows == 0 {
            return Ok(places);
        }
        let (tiles, deep) = match place {
            SwigluPlace::InGateUp { tiles, deep } => (tiles, deep),
            SwigluPlace::InFold => {
                let on_wgmma = launch == MatmulLaunch::WgmmaSplitK;
                self.matmul_tiled(gpu, m, true, on_wgmma, Some(act), twin_norm.as_ref())?;
                return Ok(places);
            }
            SwigluPlace::Apart => {
                self.run_matmul(gpu, m, launch, twin_norm.as_ref())?;
                self.swiglu(gpu, m.y, width, m.rows, act)?;
                return Ok(places);
            }
        };
        let fused = Matmul {
            y: act,
            y_stride: width,
            ..*m
        };
        if swaps(m.rows, self.matmul_swap_rows.bf16) {
            self.count_swapped();
            // Two output tiles a block: 16 units.
            let grid = (
                1,
                u32::try_from(width.div_ceil(16)).expect("units fit a grid"),
                1,
            );
            match twin_norm {
                None => gpu.launch(
                    &self.matmul_swiglu_swap,
                    grid,
                    MMA_WARPS * 32,
                    &bf16_matmul_args(&fused),
                )?,
                Some(norm) => gpu.launch(
                    &self.twins().swiglu_swap,
                    grid,
                    MMA_WARPS * 32,
                    &bf16_norm_matmul_args(&fused, &norm),
                )?,
            }
            return Ok(places);
        }
        let (deep_kernels, wide_kernels) = match twin_norm {
            None => (
                &self.matmul_swiglu_deep_by_tiles,
                &self.matmul_swiglu_by_tiles,
            ),
            Some(_) => {
                let twins = self.twins();
                (&twins.swiglu_deep_by_tiles, &twins.swiglu_by_tiles)
            }
        };
        let f = match (deep, MATMUL_DEEP_TILES.iter().position(|&t| t == tiles)) {
            (true, Some(i)) => &deep_kernels[i],
            _ => {
                let i = MATMUL_BLOCK_TILES
                    .iter()
                    .position(|&t| t == tiles)
                    .expect("swiglu_place puts the SwiGLU in MATMUL_BLOCK_TILES' kernels only");
                &wide_kernels[i]
            }
        };
        // Units (a gate and its up) a block: 4 an n-tile.
        let units = 4 * tiles;
        let grid = (
            rows_u32(m.rows.div_ceil(MMA_ROWS)),
            u32::try_from(width.div_ceil(units)).expect("outputs fit a grid"),
            1,
        );
        match twin_norm {
            None => gpu.launch(f, grid, MMA_WARPS * 32, &bf16_matmul_args(&fused))?,
            Some(norm) => gpu.launch(
                f,
                grid,
                MMA_WARPS * 32,
                &bf16_norm_matmul_args(&fused, &norm),
            )?,
        }
        Ok(places)
    }

    /// `out[r] = norm(x[r])` over rows of `n`, zero-centred weight when `zero_centred`.
    #[allow(clippy::too_many_arguments)]
    pub fn rmsnorm(
        &self,
        gpu: &Gpu,
        x: u64,
        w: u64,
        n: usize,
        rows: usize,
        eps: f32,
        zero_centred: bool,
        out: u64,
    ) -> Result<(), CudaError> {
        if rows == 0 {
            return Ok(());
        }
        gpu.launch(
            &self.rmsnorm,
            (rows_u32(rows), 1, 1),
            NORM_WARPS * 32,
            &[
                Arg::Ptr(x),
                Arg::Ptr(w),
                Arg::I32(n as i32),
                Arg::I32(rows as i32),
                Arg::F32(eps),
                Arg::I32(i32::from(zero_centred)),
                Arg::Ptr(out),
            ],
        )
    }

    pub fn embed(
        &self,
        gpu: &Gpu,
        tokens: u64,
        rows: usize,
        table: u64,
        hidden: usize,
        x: u64,
    ) -> Result<(), CudaError> {
        if rows == 0 {
            return Ok(());
        }
        gpu.launch(
            &self.embed,
            (rows_u32(rows), 1, 1),
            ROW_THREADS,
            &[
                Arg::Ptr(tokens),
                Arg::Ptr(table),
                Arg::I32(hidden as i32),
                Arg::Ptr(x),
            ],
        )
    }

    pub fn deltanet(&self, gpu: &Gpu, d: &DeltaNetLaunch, dims: &Dims) -> Result<(), CudaError> {
        let kernels = self
            .deltanet
            .as_ref()
            .expect("deltanet kernels exist for a model with linear layers");
        let l = dims.linear.as_ref().expect("linear sizes");
        if d.windows == 0 {
            return Ok(());
        }
        gpu.launch(
            &kernels.conv,
            (d.windows as u32, blocks(l.conv_channels(), CONV_THREADS), 1),
            CONV_THREADS,
            &[
                Arg::Ptr(d.qkvz),
                Arg::I32(d.proj_stride as i32),
                Arg::Ptr(d.segs),
                Arg::Ptr(d.conv_w),
                Arg::Ptr(d.state),
                Arg::Ptr(d.snaps),
                Arg::I32(d.rollback as i32),
                Arg::U64(d.lin_stride as u64),
                Arg::U64(d.layer_off as u64),
                Arg::Ptr(d.mixed),
            ],
        )?;
        let (f, cluster) = match recurrence_kernel(
            self.deltanet_split,
            self.deltanet_two_blocks,
            d.rows,
            d.windows,
            l.num_value_heads,
            l.value_head_dim,
            self.multiprocessors,
        ) {
            RecurrenceKernel::Split => (&kernels.split, LIN_CLUSTER),
            RecurrenceKernel::TwoBlocks => (&kernels.two_blocks, 1),
            RecurrenceKernel::Whole => (&kernels.whole, 1),
        };
        gpu.launch(
            f,
            (d.windows as u32, (l.num_value_heads * cluster) as u32, 1),
            (l.value_head_dim / cluster * LIN_SPLIT) as u32,
            &[
                Arg::Ptr(d.qkvz),
                Arg::Ptr(d.ba),
                Arg::I32(d.proj_stride as i32),
                Arg::Ptr(d.mixed),
                Arg::Ptr(d.segs),
                Arg::Ptr(d.neg_a),
                Arg::Ptr(d.dt_bias),
                Arg::Ptr(d.norm_w),
                Arg::F32(d.eps),
                Arg::Ptr(d.state),
                Arg::Ptr(d.snaps),
                Arg::I32(d.rollback as i32),
                Arg::U64(d.lin_stride as u64),
                Arg::U64(d.layer_off as u64),
                Arg::Ptr(d.out),
            ],
        )
    }
}

/// N-tiles a block of the bf16 experts' gate/up for `slots` tile slots of experts `width` wide
/// (MOE_I: width / 4 units of 4 gate and 4 up outputs) with `resident` blocks on the GPU at once.
/// A step that takes [`MOE_FIT_MAX_WAVES`] waves or more at MMA_NT keeps MMA_NT; a smaller one,
/// as `block_tiles`, the count of [`MOE_GATE_UP_TILES`] whose waves × n-tiles is least, ties to
/// the most. Rough on purpose: the slots include the shared expert's (whose gate/up blocks return
/// at once) and every count is taken at MMA_MIN_BLOCKS a multiprocessor (1 a block needs fewer
/// registers and fits 3). A 1-stream Qwen3-Next step (11 slots × 32 blocks of 4: 1.33 waves of
/// the H200's 264) gets 2 (704 blocks: 2.67 waves); steps of 2 streams and more (21 slots: 672
/// blocks), a stream verifying drafts, and prompts keep 4.
fn moe_gate_up_tiles(slots: usize, width: usize, resident: usize) -> usize {
    let blocks_at_mma_nt = slots * (width / 4 / MMA_NT);
    if blocks_at_mma_nt >= MOE_FIT_MAX_WAVES * resident.max(1) {
        return MMA_NT;
    }
    MOE_GATE_UP_TILES
        .into_iter()
        .filter(|&tiles| (width / 4).is_multiple_of(tiles))
        .min_by_key(|&tiles| {
            (
                wave_cost(slots * (width / 4 / tiles), tiles, resident),
                std::cmp::Reverse(tiles),
            )
        })
        .expect("MMA_NT divides every width the kernels take")
}

/// Tile slots the MoE kernels' grids cover for `rows` rows: an expert's pairs make
/// ceil(n / MMA_ROWS) tiles, at most `pairs / MMA_ROWS` full ones plus one part-full tile per
/// expert used (never more tiles than pairs), then the shared expert's tiles of rows.
pub fn moe_tile_slots(rows: usize, m: &MoeConfig) -> usize {
    let pairs = rows * m.experts_per_token;
    let expert = pairs.min(pairs.div_ceil(MMA_ROWS) + m.num_experts.min(pairs));
    let shared = if m.shared_expert_intermediate > 0 {
        rows.div_ceil(MMA_ROWS)
    } else {
        0
    };
    expert + shared
}

/// Where the parts of the MoE kernels' integer scratch sit (in i32s) for `rows` rows: the
/// fields of [`MoeLaunch`] that point into it, and its whole length.
pub(crate) struct MoeIndexLayout {
    pub(crate) ids: usize,
    pub(crate) pair_row: usize,
    pub(crate) pair_pos: usize,
    pub(crate) tiles: usize,
    pub(crate) n_tiles: usize,
    pub(crate) len: usize,
}

impl MoeIndexLayout {
    pub(crate) fn of(rows: usize, m: &MoeConfig) -> MoeIndexLayout {
        let pairs = rows * m.experts_per_token;
        let tiles = 3 * pairs;
        let n_tiles = tiles + 3 * moe_tile_slots(rows, m);
        MoeIndexLayout {
            ids: 0,
            pair_row: pairs,
            pair_pos: 2 * pairs,
            tiles,
            n_tiles,
            len: n_tiles + 2,
        }
    }
}

/// One MoE layer's launch: its rows, weights and scratch (device addresses).
/// The scales of a MoE layer's block-scaled FP8 experts (and shared expert's down projection):
/// `gate_up` `[E, 2I / block_rows, H / block_cols]`, `down` `[E, H / block_rows, I / block_cols]`,
/// `shared_down` `[H / block_rows, IS / block_cols]` (0 without a shared expert).
#[derive(Clone, Copy, Debug)]
pub struct MoeFp8 {
    pub gate_up_scales: u64,
    pub down_scales: u64,
    pub shared_down_scales: u64,
    pub block_rows: usize,
    pub block_cols: usize,
}

pub struct MoeLaunch {
    /// FP8 experts: `gate_up`, `down` and `shared_down` hold e4m3 bytes scaled by these.
    pub fp8: Option<MoeFp8>,
    pub rows: usize,
    /// Normed input rows `[rows, H]`.
    pub xn: u64,
    /// The front projection `[rows, E (+ 1 + 2·IS)]`.
    pub mo: u64,
    /// The residual rows the layer adds into.
    pub x: u64,
    /// `[E, 2I, H]`, gate rows then up rows.
    pub gate_up: u64,
    /// `[E, H, I]`.
    pub down: u64,
    /// `[H, IS]`, or 0 without a shared expert.
    pub shared_down: u64,
    /// i32 `[rows·K]`: each row's experts, ascending.
    pub ids: u64,
    /// f32 `[rows·K]`: their weights.
    pub probs: u64,
    /// i32 `[rows·K]`: the row of each pair in expert order.
    pub pair_row: u64,
    /// i32 `[rows·K]`: where each (row, slot) pair sits in expert order.
    pub pair_pos: u64,
    /// i32 `[3 · moe_tile_slots]`.
    pub tiles: u64,
    /// i32 `[2]`: expert tiles, all tiles.
    pub n_tiles: u64,
    /// f32 `[rows·K, I]`: silu(gate)·up per pair in expert order.
    pub act: u64,
    /// f32 `[rows, IS]`: the shared expert's silu(gate)·up.
    pub act_sh: u64,
    /// f32 `[rows·K, H]`: each pair's expert output in expert order.
    pub y_exp: u64,
    /// f32 `[rows, H]`: the shared expert's output.
    pub y_sh: u64,
}

/// Where a MoE layer's experts' outputs are summed into x, and what follows the sum
/// ([`Kernels::moe`]).
#[derive(Clone, Copy)]
pub enum MoeSum<'a> {
    /// `moe_combine_norm` after the experts: the sum, then the RMSNorm after the layer.
    WithNorm(&'a NormAfter),
    /// `moe_combine` alone (the kernel tests' reference).
    Alone,
}

/// Outputs of a MoE layer's front projection (`moe.cu`'s MOE_MO_W): the router logits, then with
/// a shared expert its gate, gate_proj and up_proj.
#[cfg(test)]
pub fn moe_front_width(m: &MoeConfig) -> usize {
    match m.shared_expert_intermediate {
        0 => m.num_experts,
        is => m.num_experts + 1 + 2 * is,
    }
}

/// The columns of `moe_down`'s blocks (its grid's y) for a model of `hidden` outputs.
pub fn moe_down_columns(hidden: usize) -> usize {
    hidden.div_ceil(MMA_NT * MMA_COLS)
}

/// The RMSNorm a MoE layer's last kernel applies to the rows it has just written:
/// `out[r] = norm(x[r])` with weight `w` (as [`Kernels::rmsnorm`]).
pub struct NormAfter {
    pub w: u64,
    pub eps: f32,
    pub zero_centred: bool,
    pub out: u64,
}

/// Which attention kernel computes a call (they give the same bits; see `attention.cu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionKernel {
    /// `attention_gated`: a block per (row, head).
    PerHead,
    /// `attention_grouped`: a block per (row, group of a KV head's query heads).
    Grouped,
    /// `attention_grouped_few`: as `Grouped`, by ATT_FEW_WARPS warps a block.
    GroupedFewWarps,
    /// `attention_grouped_staged`: as `Grouped`, each round of keys copied into shared memory
    /// ahead of its arithmetic ([`ATTENTION_STAGED_ENV`]).
    GroupedStaged,
    /// `attention_grouped_staged8`: as `GroupedStaged`, by 8 warps of two key splits each.
    GroupedStaged8,
    /// `attention_mma`: a block per (row, KV head), the products on the tensor cores (other
    /// bits than the other kernels': a row takes it or its twins wherever the process's choice
    /// and the row's position send it there, never by the rows beside it; [`ContextSplit`]).
    Mma,
    /// `attention_mma_cluster`: as `Mma`, the row's key splits over a cluster of blocks (the
    /// same bits).
    MmaCluster,
    /// `attention_mma_rows`: as `Mma`, a block taking a few rows of one session at once (a
    /// prompt's), their keys copied and multiplied once for all (the same bits).
    MmaRows,
}

/// The kernel that computes a call [`attention_kernel`] gave to `kernel`: the staged kernel
/// chosen, `staged` ([`staged_choice`]), in place of the grouped one where it was
/// compiled (`compiled`: its shared memory fits), else `kernel`.
fn staged_in_place(
    kernel: AttentionKernel,
    staged: Option<AttentionKernel>,
    compiled: bool,
) -> AttentionKernel {
    match (kernel, staged) {
        (AttentionKernel::Grouped, Some(staged)) if compiled => staged,
        _ => kernel,
    }
}

/// The kernel that computes a call of `rows` rows: the tensor-core attention for every call
/// where it was `asked` ([`crate::ATTENTION_MMA_ENV`]) and `compiled` ([`att_mma_fits`]), else
/// `kernel` (`asked` for a whole call: its bits are not the other kernels', so a call whose rows
/// are of both kinds is split before, [`ContextSplit::Both`]). Its cluster twin for calls of
/// fewer rows than `grouped_min_rows` (where the other kernels take a block a head: a few rows'
/// blocks would leave most multiprocessors idle); from there `attention_mma`, or
/// `attention_mma_rows` where rows of one session may share a block (not `one_row_a_session`:
/// a prompt's rows) and a block takes more than one (`rows_a_block`). The same bits, each.
fn mma_in_place(
    kernel: AttentionKernel,
    rows: usize,
    grouped_min_rows: usize,
    one_row_a_session: bool,
    rows_a_block: usize,
    asked: bool,
    compiled: bool,
) -> AttentionKernel {
    match (
        asked && compiled,
        rows >= grouped_min_rows,
        !one_row_a_session && rows_a_block > 1,
    ) {
        (false, _, _) => kernel,
        (true, false, _) => AttentionKernel::MmaCluster,
        (true, true, false) => AttentionKernel::Mma,
        (true, true, true) => AttentionKernel::MmaRows,
    }
}

/// The attention kernel for a call of `rows` rows of heads of `head_dim`: a block per head for
/// few rows, per group of a KV head's query heads for many (from
/// `grouped_min_rows`, [`ATT_GROUPED_MIN_ROWS`] unless [`ATTENTION_GROUPED_MIN_ROWS_ENV`]), by 4
/// warps where the heads are at most [`ATT_FEW_WARPS_MAX_HEAD_DIM`] and the rows
/// [`ATT_FEW_WARPS_MIN_ROWS`] or more (`few_warps`, [`ATTENTION_FEW_WARPS_ENV`], forces that
/// choice).
fn attention_kernel(
    rows: usize,
    head_dim: usize,
    few_warps: Option<bool>,
    grouped_min_rows: usize,
) -> AttentionKernel {
    let few = few_warps
        .unwrap_or(head_dim <= ATT_FEW_WARPS_MAX_HEAD_DIM && rows >= ATT_FEW_WARPS_MIN_ROWS);
    match (rows >= grouped_min_rows, few) {
        (false, _) => AttentionKernel::PerHead,
        (true, false) => AttentionKernel::Grouped,
        (true, true) => AttentionKernel::GroupedFewWarps,
    }
}

/// Rows of one attention call and where their positions and cache rows are.
#[derive(Clone, Copy, Debug)]
pub struct AttentionRows {
    pub rows: usize,
    pub pos: u64,
    pub kv_base: u64,
    pub k_cache: u64,
    pub v_cache: u64,
    /// Whether every row is its session's only one in the call (a round's windows are of
    /// distinct sessions, lane's contract, so: every window one row): then the keys before
    /// each row are in the cache before the call starts.
    pub one_row_a_session: bool,
    /// Which rows run on the tensor cores where the process chooses by context.
    pub by_context: ContextSplit,
}

/// How a call's rows divide between the simt and the tensor-core attention under
/// [`crate::AttentionKernels::ByContext`] ([`context_split`]); `P` says where the two position
/// arrays of `Both` are (device addresses; a round's metadata offsets before its upload).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContextSplit<P = u64> {
    /// The process's kernels for every row: a model that does not choose by context, and the
    /// MTP head's layer (the simt kernels where it does).
    Process,
    /// Every row before the position: the simt kernels.
    Simt,
    /// Every row from the position: the tensor cores.
    TensorCores,
    /// Rows of both: the prep apart, then the simt attention over the rows whose positions
    /// `simt_pos` holds and the tensor-core attention over those `tensor_cores_pos` holds (each an
    /// array of a position a row, −1 for the other kernel's rows, which the kernels leave).
    Both { simt_pos: P, tensor_cores_pos: P },
}

impl<P> ContextSplit<P> {
    /// Which kernels the call launches: what a captured round of it depends on (`None`: the
    /// process's).
    pub fn kinds(&self) -> Option<ContextKinds> {
        match self {
            ContextSplit::Process => None,
            ContextSplit::Simt => Some(ContextKinds::Simt),
            ContextSplit::TensorCores => Some(ContextKinds::TensorCores),
            ContextSplit::Both { .. } => Some(ContextKinds::Both),
        }
    }

    /// The same split with its arrays found by `at` (an offset made an address).
    pub fn map<Q>(self, at: impl Fn(P) -> Q) -> ContextSplit<Q> {
        match self {
            ContextSplit::Process => ContextSplit::Process,
            ContextSplit::Simt => ContextSplit::Simt,
            ContextSplit::TensorCores => ContextSplit::TensorCores,
            ContextSplit::Both {
                simt_pos,
                tensor_cores_pos,
            } => ContextSplit::Both {
                simt_pos: at(simt_pos),
                tensor_cores_pos: at(tensor_cores_pos),
            },
        }
    }
}

/// Which kernels a call's rows at `positions` take where the rows from `from` on run on the
/// tensor cores: the kind of all of them, or both. A row's kernel is a function of its own
/// position only, so its bits never depend on the rows beside it.
pub fn context_split(positions: impl IntoIterator<Item = usize>, from: u32) -> ContextKinds {
    let (mut simt, mut tensor_cores) = (false, false);
    for p in positions {
        match p >= from as usize {
            true => tensor_cores = true,
            false => simt = true,
        }
    }
    match (simt, tensor_cores) {
        (_, false) => ContextKinds::Simt,
        (false, true) => ContextKinds::TensorCores,
        (true, true) => ContextKinds::Both,
    }
}

/// The kinds of rows a call holds ([`context_split`]): all simt (no rows too), all on the tensor
/// cores, or both.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ContextKinds {
    Simt,
    TensorCores,
    Both,
}

/// The scale of a score, 1/√head_dim, as every attention kernel takes it.
fn attention_scale(dims: &Dims) -> f32 {
    1.0 / (dims.head_dim as f32).sqrt()
}

/// Where a call's q/k norms, RoPE and cache writes run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrepPlace {
    /// `attention_prep`, a launch ahead of the attention kernel.
    Apart,
    /// `attention_gated_prep` (or `attention_grouped_staged_prep`): in the attention kernel's
    /// blocks, ahead of their attention.
    InAttention,
}

/// The prep goes into the attention where it is allowed ([`PREP_IN_ATTENTION_ENV`]), the call
/// runs the per-head kernel (few rows), the 16-warp staged one ([`ATTENTION_STAGED_ENV`]:
/// `attention_grouped_staged_prep`; the other grouped kernels have no such twin) or the
/// tensor-core attention's cluster kernel (few rows: `attention_mma_cluster_prep`), and no row
/// needs a key another row of the call writes.
pub fn prep_place(kernel: AttentionKernel, one_row_a_session: bool, allowed: bool) -> PrepPlace {
    use AttentionKernel::{GroupedStaged, MmaCluster, PerHead};
    match (allowed, kernel, one_row_a_session) {
        (true, PerHead | GroupedStaged | MmaCluster, true) => PrepPlace::InAttention,
        _ => PrepPlace::Apart,
    }
}

/// How a prep-in-attention kernel is launched: the function, its blocks a row (y, z), threads a
/// block and dynamic shared bytes.
type PrepInAttentionLaunch<'a> = (&'a CudaFunction, (usize, usize), u32, u32);

/// A prep-in-attention kernel (`attention_gated_prep`, `attention_grouped_staged_prep`,
/// `attention_mma_cluster_prep`, as `launch` gives it) over `a`'s rows, each its session's only
/// one (callers check); `(q, out)` where q and the output go.
fn launch_prep_in_attention(
    gpu: &Gpu,
    (f, (blocks_y, blocks_z), threads, shared_bytes): PrepInAttentionLaunch,
    dims: &Dims,
    a: &AttentionRows,
    qkv: u64,
    prep: &PrepWeights,
    (q, out): (u64, u64),
) -> Result<(), CudaError> {
    assert!(
        a.one_row_a_session,
        "A1: the prep runs in the attention only where each row is its session's only one"
    );
    if a.rows == 0 {
        return Ok(());
    }
    let mut args = [Arg::Ptr(0); PREP_ARGS + 5];
    args[..PREP_ARGS].copy_from_slice(&prep_args(qkv, a, prep));
    args[PREP_ARGS..].copy_from_slice(&[
        Arg::F32(attention_scale(dims)),
        Arg::Ptr(q),
        Arg::Ptr(a.k_cache),
        Arg::Ptr(a.v_cache),
        Arg::Ptr(out),
    ]);
    gpu.launch_with_shared(
        f,
        (rows_u32(a.rows), blocks_y as u32, blocks_z as u32),
        threads,
        shared_bytes,
        &args,
    )
}

/// Arguments the prep's kernels take first ([`prep_args`]).
const PREP_ARGS: usize = 7;

/// The arguments every prep kernel (`attention_prep`, `attention_gated_prep`,
/// `attention_grouped_staged_prep`, `attention_mma_cluster_prep`) takes first: `qkv`, the rows'
/// positions and cache bases, the q and k norms' weights, RoPE's inverse frequencies and the
/// norms' epsilon.
fn prep_args(qkv: u64, a: &AttentionRows, prep: &PrepWeights) -> [Arg; PREP_ARGS] {
    [
        Arg::Ptr(qkv),
        Arg::Ptr(a.pos),
        Arg::Ptr(a.kv_base),
        Arg::Ptr(prep.q_norm),
        Arg::Ptr(prep.k_norm),
        Arg::Ptr(prep.inv_freq),
        Arg::F32(prep.eps),
    ]
}

/// What `attention_prep` applies to a layer's q and k heads: their RMSNorm weights, RoPE's
/// inverse frequencies and the norms' epsilon.
pub struct PrepWeights {
    pub q_norm: u64,
    pub k_norm: u64,
    pub inv_freq: u64,
    pub eps: f32,
}

impl Kernels {
    /// Norms, RoPE and the cache write of `qkv`'s rows; q into `q_out`.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_prep(
        &self,
        gpu: &Gpu,
        dims: &Dims,
        a: &AttentionRows,
        qkv: u64,
        prep: &PrepWeights,
        q_out: u64,
    ) -> Result<(), CudaError> {
        if a.rows == 0 {
            return Ok(());
        }
        let mut args = [Arg::Ptr(0); PREP_ARGS + 3];
        args[..PREP_ARGS].copy_from_slice(&prep_args(qkv, a, prep));
        args[PREP_ARGS..].copy_from_slice(&[
            Arg::Ptr(q_out),
            Arg::Ptr(a.k_cache),
            Arg::Ptr(a.v_cache),
        ]);
        gpu.launch(
            &self.attention_prep,
            (
                rows_u32(a.rows),
                blocks(dims.heads + dims.kv_heads, ATT_PREP_WARPS),
                1,
            ),
            ATT_PREP_WARPS * 32,
            &args,
        )
    }

    /// `attention_prep` then `attention` of `qkv`'s rows (q through `q`, the output into `out`),
    /// in one launch where [`prep_place`] puts the prep in the attention; says where it ran.
    #[allow(clippy::too_many_arguments)]
    pub fn prep_and_attention(
        &self,
        gpu: &Gpu,
        dims: &Dims,
        a: &AttentionRows,
        qkv: u64,
        prep: &PrepWeights,
        q: u64,
        out: u64,
    ) -> Result<PrepPlace, CudaError> {
        let simt = staged_in_place(
            attention_kernel(
                a.rows,
                dims.head_dim,
                self.attention_few_warps,
                self.attention_grouped_min_rows,
            ),
            self.attention_staged_chosen,
            self.attention_staged.is_some(),
        );
        // The call's kernel with its rows on the tensor cores or not.
        let kernel_of = |tensor_cores| {
            mma_in_place(
                simt,
                a.rows,
                self.attention_grouped_min_rows,
                a.one_row_a_session,
                self.mma_rows_a_block(dims),
                tensor_cores,
                self.attention_mma.is_some(),
            )
        };
        let tensor_cores = match a.by_context {
            ContextSplit::Process => self.attention_kernels == crate::AttentionKernels::TensorCores,
            ContextSplit::Simt => false,
            ContextSplit::TensorCores => true,
            ContextSplit::Both {
                simt_pos,
                tensor_cores_pos,
            } => {
                // Two launches over every row, each leaving the other's (their positions −1):
                // the prep apart (it writes every row's key before either reads), and the tensor
                // cores' kernel as the call's rows would choose it (`attention_mma_rows` takes a
                // block's rows a row at a time where one of them is left).
                self.attention_prep(gpu, dims, a, qkv, prep, q)?;
                let on = |pos| AttentionRows { pos, ..*a };
                self.attention_with(gpu, dims, &on(simt_pos), q, qkv, out, simt)?;
                let mma = kernel_of(true);
                assert!(
                    matches!(
                        mma,
                        AttentionKernel::Mma | AttentionKernel::MmaCluster | AttentionKernel::MmaRows
                    ),
                    "A2: a call that splits by context runs its long rows on the tensor cores, which \
                     are compiled wherever the process chooses by context"
                );
                self.attention_with(gpu, dims, &on(tensor_cores_pos), q, qkv, out, mma)?;
                return Ok(PrepPlace::Apart);
            }
        };
        let kernel = kernel_of(tensor_cores);
        let place = prep_place(kernel, a.one_row_a_session, self.prep_in_attention);
        match place {
            PrepPlace::Apart => {
                self.attention_prep(gpu, dims, a, qkv, prep, q)?;
                if a.rows > 0 {
                    self.attention_with(gpu, dims, a, q, qkv, out, kernel)?;
                }
            }
            PrepPlace::InAttention => {
                self.attention_with_prep(gpu, dims, a, qkv, prep, (q, out), kernel)?
            }
        }
        Ok(place)
    }

    /// The position from which rounds run a row's attention on the tensor cores, where the
    /// process chooses by context ([`crate::AttentionKernels::ByContext`]).
    pub fn attention_tensor_cores_from(&self) -> Option<u32> {
        self.attention_kernels
            .tensor_cores_from()
            .filter(|_| self.attention_mma.is_some())
    }

    /// Rows a block of the tensor-core attention takes in a call whose rows may share one:
    /// `attention_mma_rows`' where it is asked ([`ATTENTION_MMA_ROWS_ENV`]) and compiled, else 1.
    fn mma_rows_a_block(&self, dims: &Dims) -> usize {
        match (
            self.attention_mma_rows_asked,
            self.attention_mma
                .as_ref()
                .is_some_and(|m| m.rows.is_some()),
        ) {
            (true, true) => att_mma_rows(dims.group()),
            _ => 1,
        }
    }

    /// The tensor-core attention's kernels, which run only where they were compiled.
    fn mma_attention(&self) -> &MmaAttention {
        self.attention_mma.as_ref().expect(
            "[attention-mma-compiled] the tensor-core attention runs only where it is compiled",
        )
    }

    /// The staged attention's kernels, which run only where they were compiled.
    fn staged_attention(&self) -> &StagedAttention {
        self.attention_staged.as_ref().expect(
            "[attention-staged-compiled] the staged attention runs only where its shared memory fits",
        )
    }

    /// The prep, then `kernel`'s attention, in one launch over `a`'s rows, each its session's
    /// only one (callers check): `attention_gated_prep` for the per-head kernel,
    /// `attention_grouped_staged_prep` for the 16-warp staged one, `attention_mma_cluster_prep`
    /// for the tensor-core attention's cluster kernel (the kernels [`prep_place`] puts the prep
    /// in); `(q, out)` where q and the output go.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attention_with_prep(
        &self,
        gpu: &Gpu,
        dims: &Dims,
        a: &AttentionRows,
        qkv: u64,
        prep: &PrepWeights,
        (q, out): (u64, u64),
        kernel: AttentionKernel,
    ) -> Result<(), CudaError> {
        let launch = match kernel {
            AttentionKernel::PerHead => {
                (&self.attention_gated_prep, (dims.heads, 1), ATT_THREADS, 0)
            }
            AttentionKernel::GroupedStaged => {
                let staged = self.staged_attention();
                let group = attention_group(dims.heads, dims.kv_heads, dims.head_dim);
                (
                    &staged.with_prep,
                    (dims.heads / group, 1),
                    ATT_THREADS,
                    staged.shared_bytes,
                )
            }
            AttentionKernel::MmaCluster => {
                let mma = self.mma_attention();
                (
                    &mma.cluster_prep,
                    (dims.kv_heads, mma.cluster_blocks),
                    (att_mma_prep_warps(dims.group()) * 32) as u32,
                    mma.cluster.1,
                )
            }
            other => unreachable!(
                "[prep-in-attention-twin] the prep runs inside {other:?}, which has no twin"
            ),
        };
        launch_prep_in_attention(gpu, launch, dims, a, qkv, prep, (q, out))
    }

    /// Gated softmax attention of every (row, head) into `out` `[rows, heads·head_dim]` by
    /// `kernel` (each gives the same bits).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attention_with(
        &self,
        gpu: &Gpu,
        dims: &Dims,
        a: &AttentionRows,
        q: u64,
        qkv: u64,
        out: u64,
        kernel: AttentionKernel,
    ) -> Result<(), CudaError> {
        let scale = attention_scale(dims);
        let groups = dims.heads / attention_group(dims.heads, dims.kv_heads, dims.head_dim);
        let staged = |which: usize| {
            let staged = self.staged_attention();
            (
                &staged.by_warps[which],
                (groups, 1),
                ATT_THREADS >> which,
                staged.shared_bytes,
            )
        };
        let mma = |cluster: bool| {
            let mma = self.mma_attention();
            let ((f, bytes), z) = if cluster {
                (&mma.cluster, mma.cluster_blocks)
            } else {
                (&mma.whole, 1)
            };
            (f, (dims.kv_heads, z), (ATT_MMA_WARPS * 32) as u32, *bytes)
        };
        let (f, (head_blocks, z), threads, shared) = match kernel {
            AttentionKernel::PerHead => (&self.attention, (dims.heads, 1), ATT_THREADS, 0),
            AttentionKernel::Grouped => (&self.attention_grouped, (groups, 1), ATT_THREADS, 0),
            AttentionKernel::GroupedFewWarps => (
                &self.attention_grouped_few,
                (groups, 1),
                (ATT_FEW_WARPS * 32) as u32,
                0,
            ),
            AttentionKernel::GroupedStaged => staged(0),
            AttentionKernel::GroupedStaged8 => staged(1),
            AttentionKernel::Mma => mma(false),
            AttentionKernel::MmaCluster => mma(true),
            AttentionKernel::MmaRows => {
                let (f, bytes) = self.mma_attention().rows.as_ref().expect(
                    "[attention-mma-rows-fits] attention_mma_rows runs only where its blocks fit",
                );
                (f, (dims.kv_heads, 1), (ATT_MMA_WARPS * 32) as u32, *bytes)
            }
        };
        let args = [
            Arg::Ptr(q),
            Arg::Ptr(qkv),
            Arg::Ptr(a.k_cache),
            Arg::Ptr(a.v_cache),
            Arg::Ptr(a.pos),
            Arg::Ptr(a.kv_base),
            Arg::F32(scale),
            Arg::Ptr(out),
            Arg::I32(i32::try_from(a.rows).expect("a call's rows fit i32")),
        ];
        // `attention_mma_rows` takes a block per `att_mma_rows` rows, and the call's rows last.
        let (row_blocks, args) = match kernel {
            AttentionKernel::MmaRows => (a.rows.div_ceil(att_mma_rows(dims.group())), &args[..]),
            _ => (a.rows, &args[..8]),
        };
        gpu.launch_with_shared(
            f,
            (rows_u32(row_blocks), head_blocks as u32, z as u32),
            threads,
            shared,
            args,
        )
    }

    /// `act[rows, width] = silu(gate) · up` of `gate_up[rows, 2·width]` (a dense MLP's fused
    /// gate and up projections).
    pub fn swiglu(
        &self,
        gpu: &Gpu,
        gate_up: u64,
        width: usize,
        rows: usize,
        act: u64,
    ) -> Result<(), CudaError> {
        if rows == 0 {
            return Ok(());
        }
        let grid = (rows * width)
            .div_ceil(SWIGLU_THREADS as usize)
            .min(SWIGLU_BLOCKS_MAX);
        gpu.launch(
            &self.swiglu,
            (grid as u32, 1, 1),
            SWIGLU_THREADS,
            &[
                Arg::Ptr(gate_up),
                Arg::I32(width as i32),
                Arg::I32(rows as i32),
                Arg::Ptr(act),
            ],
        )
    }

    /// Counts a launch on the swapped chain (tests only: [`Kernels::swapped_launches`]).
    fn count_swapped(&self) {
        #[cfg(test)]
        self.swapped_launches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The MoE kernels, which a MoE model's kernels always have.
    fn moe_kernels(&self) -> &MoeKernels {
        self.moe
            .as_ref()
            .expect("MoE kernels exist for a MoE model")
    }

    /// The MoE layer over `l.rows` rows of `l.xn` (normed), adding into `l.x`; `l.mo` is the
    /// fused front projection of `l.xn` (see `moe.cu`), `sum` where the experts' outputs are
    /// added into x (and what follows).
    pub fn moe(
        &self,
        gpu: &Gpu,
        dims: &Dims,
        l: &MoeLaunch,
        sum: MoeSum<'_>,
    ) -> Result<(), CudaError> {
        if l.rows == 0 {
            return Ok(());
        }
        Self::moe_route(gpu, self.moe_kernels(), l)?;
        self.moe_routed(gpu, dims, l, sum)
    }

    /// The routing and grouping of `l`'s rows: one launch for a decode step's few rows, two
    /// otherwise.
    fn moe_route(gpu: &Gpu, k: &MoeKernels, l: &MoeLaunch) -> Result<(), CudaError> {
        // `moe_route`'s arguments, then `moe_group`'s (whose first two are the routes and the
        // rows); `moe_route_group` takes the first and the rest of the second.
        let route = [
            Arg::Ptr(l.mo),
            Arg::I32(l.rows as i32),
            Arg::Ptr(l.ids),
            Arg::Ptr(l.probs),
            Arg::Ptr(l.act_sh),
        ];
        let group = [
            Arg::Ptr(l.ids),
            Arg::I32(l.rows as i32),
            Arg::Ptr(l.pair_row),
            Arg::Ptr(l.pair_pos),
            Arg::Ptr(l.tiles),
            Arg::Ptr(l.n_tiles),
        ];
        if l.rows <= MOE_ROUTE_GROUP_WARPS {
            let both = [route.as_slice(), &group[2..]].concat();
            gpu.launch(&k.route_group, (1, 1, 1), MOE_GROUP_THREADS, &both)?;
        } else {
            let route_grid = (blocks(l.rows, MOE_ROUTE_WARPS), 1, 1);
            gpu.launch(&k.route, route_grid, MOE_ROUTE_WARPS * 32, &route)?;
            gpu.launch(&k.group, (1, 1, 1), MOE_GROUP_THREADS, &group)?;
        }
        Ok(())
    }

    /// A MoE layer after its routing ([`Kernels::moe`] but the routing): the experts, then
    /// `sum`.
    fn moe_routed(
        &self,
        gpu: &Gpu,
        dims: &Dims,
        l: &MoeLaunch,
        sum: MoeSum<'_>,
    ) -> Result<(), CudaError> {
        let k = self.moe_kernels();
        let m = dims.moe.as_ref().expect("MoE sizes");
        if l.rows == 0 {
            return Ok(());
        }
        let slots = u32::try_from(moe_tile_slots(l.rows, m)).expect("tile slots fit a grid");
        let resident = self.multiprocessors * MMA_MIN_BLOCKS;
        // The swapped chain's experts: 16 units a block of gate/up.
        let swap = l.fp8.is_none() && swaps(l.rows, self.matmul_swap_rows.bf16);
        if swap {
            self.count_swapped();
        }
        Self::moe_experts(gpu, dims, k, m, l, slots, resident, swap)?;
        match sum {
            MoeSum::WithNorm(norm) => Self::moe_sum(gpu, dims, k, l, Some(norm)),
            MoeSum::Alone => Self::moe_sum(gpu, dims, k, l, None),
        }
    }

    /// The experts' gate/up and down products of each tile (bf16 or FP8), `resident` blocks of
    /// them on the GPU at once; with `swap` (bf16, a round of up to MMA_COLS rows) on the swapped
    /// chain.
    #[allow(clippy::too_many_arguments)]
    fn moe_experts(
        gpu: &Gpu,
        dims: &Dims,
        k: &MoeKernels,
        m: &MoeConfig,
        l: &MoeLaunch,
        slots: u32,
        resident: usize,
        swap: bool,
    ) -> Result<(), CudaError> {
        let gate_up_grid = (slots, (m.expert_intermediate / (4 * MMA_NT)) as u32, 1);
        let tiles = match (k.gate_up_tiles_forced, k.gate_up_fit) {
            (Some(tiles), _) => tiles,
            (None, true) => moe_gate_up_tiles(slots as usize, m.expert_intermediate, resident),
            (None, false) => MMA_NT,
        };
        let at = MOE_GATE_UP_TILES
            .iter()
            .position(|&t| t == tiles)
            .expect("MoE gate/up n-tiles a block: one of MOE_GATE_UP_TILES");
        let down_grid = (slots, moe_down_columns(dims.hidden) as u32, 1);
        // The gate/up's and the down's first arguments, bf16 and FP8 alike.
        let gate_up_head = [
            Arg::Ptr(l.xn),
            Arg::Ptr(l.pair_row),
            Arg::Ptr(l.tiles),
            Arg::Ptr(l.n_tiles),
            Arg::Ptr(l.gate_up),
        ];
        let down_head = [
            Arg::Ptr(l.act),
            Arg::Ptr(l.act_sh),
            Arg::Ptr(l.tiles),
            Arg::Ptr(l.n_tiles),
            Arg::Ptr(l.down),
        ];
        match l.fp8 {
            None => {
                // The swapped chain's gate/up: 16 units a block.
                let (gate_up, grid) = match swap {
                    true => (
                        &k.gate_up_swap,
                        (slots, (m.expert_intermediate / 16) as u32, 1),
                    ),
                    false => (
                        &k.gate_up_by_tiles[at],
                        (slots, (m.expert_intermediate / (4 * tiles)) as u32, 1),
                    ),
                };
                gpu.launch(
                    gate_up,
                    grid,
                    MMA_WARPS * 32,
                    &[gate_up_head.as_slice(), &[Arg::Ptr(l.act)]].concat(),
                )?;
                let down_tail = [Arg::Ptr(l.shared_down), Arg::Ptr(l.y_exp), Arg::Ptr(l.y_sh)];
                gpu.launch(
                    if swap { &k.down_swap } else { &k.down },
                    down_grid,
                    MMA_WARPS * 32,
                    &[down_head.as_slice(), &down_tail].concat(),
                )?;
            }
            Some(f) => {
                assert!(
                    moe_fp8_blocks_fit(f.block_rows, f.block_cols, dims.hidden, m),
                    "MoE: FP8 blocks {}×{} of experts {}×{}",
                    f.block_rows,
                    f.block_cols,
                    m.expert_intermediate,
                    dims.hidden
                );
                gpu.launch(
                    &k.gate_up_fp8,
                    gate_up_grid,
                    MMA_WARPS * 32,
                    &[
                        gate_up_head.as_slice(),
                        &[
                            Arg::Ptr(f.gate_up_scales),
                            Arg::I32(f.block_rows as i32),
                            Arg::I32(f.block_cols as i32),
                            Arg::Ptr(l.act),
                        ],
                    ]
                    .concat(),
                )?;
                let down_tail = [
                    Arg::Ptr(f.down_scales),
                    Arg::Ptr(l.shared_down),
                    Arg::Ptr(f.shared_down_scales),
                    Arg::I32(f.block_rows as i32),
                    Arg::I32(f.block_cols as i32),
                    Arg::Ptr(l.y_exp),
                    Arg::Ptr(l.y_sh),
                ];
                gpu.launch(
                    &k.down_fp8,
                    down_grid,
                    MMA_WARPS * 32,
                    &[down_head.as_slice(), &down_tail].concat(),
                )?;
            }
        }
        Ok(())
    }

    /// Each row's experts summed into x, and with `then` the norm after the layer in the same
    /// launch (`moe_combine_norm`); without, `moe_combine` alone (the kernel tests' reference
    /// for the fused one).
    fn moe_sum(
        gpu: &Gpu,
        dims: &Dims,
        k: &MoeKernels,
        l: &MoeLaunch,
        then: Option<&NormAfter>,
    ) -> Result<(), CudaError> {
        let sum = [
            Arg::Ptr(l.mo),
            Arg::Ptr(l.probs),
            Arg::Ptr(l.pair_pos),
            Arg::Ptr(l.y_exp),
            Arg::Ptr(l.y_sh),
            Arg::Ptr(l.x),
        ];
        let Some(n) = then else {
            let grid = (
                blocks(dims.hidden, MOE_COMBINE_THREADS),
                rows_u32(l.rows),
                1,
            );
            return gpu.launch(&k.combine, grid, MOE_COMBINE_THREADS, &sum);
        };
        let norm = [
            Arg::Ptr(n.w),
            Arg::F32(n.eps),
            Arg::I32(i32::from(n.zero_centred)),
            Arg::Ptr(n.out),
        ];
        let grid = (rows_u32(l.rows), 1, 1);
        gpu.launch(
            &k.combine_norm,
            grid,
            NORM_WARPS * 32,
            &[sum.as_slice(), &norm].concat(),
        )
    }

    /// The MTP head's input rows `[rows, 2·hidden]`.
    #[allow(clippy::too_many_arguments)]
    pub fn mtp_input(
        &self,
        gpu: &Gpu,
        rows: usize,
        tokens: u64,
        embed: u64,
        hidden_rows: u64,
        store: u64,
        hidden_src: u64,
        w_embed: u64,
        w_hidden: u64,
        hidden: usize,
        eps: f32,
        cat: u64,
    ) -> Result<(), CudaError> {
        if rows == 0 {
            return Ok(());
        }
        gpu.launch(
            &self.mtp_input,
            (rows_u32(rows), 1, 1),
            64,
            &[
                Arg::Ptr(tokens),
                Arg::Ptr(embed),
                Arg::Ptr(hidden_rows),
                Arg::Ptr(store),
                Arg::Ptr(hidden_src),
                Arg::Ptr(w_embed),
                Arg::Ptr(w_hidden),
                Arg::I32(hidden as i32),
                Arg::F32(eps),
                Arg::Ptr(cat),
            ],
        )
    }

    /// `dst[pairs[2i+1]] = src[pairs[2i]]` for `n` pairs of rows of `width`.
    pub fn copy_rows(
        &self,
        gpu: &Gpu,
        src: u64,
        pairs: u64,
        n: usize,
        width: usize,
        dst: u64,
    ) -> Result<(), CudaError> {
        if n == 0 {
            return Ok(());
        }
        gpu.launch(
            &self.copy_rows,
            (rows_u32(n), 1, 1),
            ROW_THREADS,
            &[
                Arg::Ptr(src),
                Arg::Ptr(pairs),
                Arg::I32(width as i32),
                Arg::Ptr(dst),
            ],
        )
    }

    /// `out[r]` = the greedy token of logits row `r` (`rows × n`), `none` for a row with no
    /// finite logit.
    pub fn argmax(
        &self,
        gpu: &Gpu,
        logits: u64,
        rows: usize,
        n: usize,
        out: u64,
        none: i32,
    ) -> Result<(), CudaError> {
        if rows == 0 {
            return Ok(());
        }
        gpu.launch(
            &self.argmax,
            (rows_u32(rows), ARGMAX_SPLIT, 1),
            ARGMAX_THREADS,
            &[
                Arg::Ptr(logits),
                Arg::I32(n as i32),
                Arg::I32(none),
                Arg::Ptr(out),
            ],
        )
    }

    /// Draws one token for each of `draws` asks (`DRAW_ASK_INTS` ints each at `asks`, as
    /// `draw.cu` reads them) from the `n`-logit rows at `logits`, into the ids at `out`
    /// (`n` ≤ [`DRAW_MAX_VOCAB`]).
    pub fn draw(
        &self,
        gpu: &Gpu,
        logits: u64,
        n: usize,
        asks: u64,
        draws: usize,
        out: u64,
    ) -> Result<(), CudaError> {
        if draws == 0 {
            return Ok(());
        }
        assert!(n <= DRAW_MAX_VOCAB, "D1: a draw from {n} tokens");
        gpu.launch(
            &self.draw,
            (rows_u32(draws), DRAW_SPLIT, 1),
            DRAW_THREADS,
            &[
                Arg::Ptr(logits),
                Arg::I32(n as i32),
                Arg::Ptr(asks),
                Arg::Ptr(out),
            ],
        )
    }
}

mod ptx_cache;

#[cfg(test)]
mod tests;
