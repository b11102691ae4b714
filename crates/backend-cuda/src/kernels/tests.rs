//! The generic kernels against backend-cpu's (the reference verified against transformers) and
//! lane's greedy choice, on fresh random inputs, plus rows alone vs in a batch bit for bit. The
//! model-specific kernels (Gated DeltaNet, gated attention, MoE, MTP input) are checked through
//! whole-model logits and drafts against `CpuTarget` in `tests/gpu_target.rs`. Every test skips
//! (and says why) without a CUDA device.

use super::{
    lin_stage, DeltaNetLaunch, Dims, Fp8Scales, Kernels, Matmul, MatmulKernel, MoeIndexLayout,
    MoeLaunch, BLOCK_SHARED_UNASKED, LIN_STAGE_MAX,
};
use crate::device::{Arg, Buf, Gpu};
use crate::CudaError;
use backend_cpu::kernels::activation::{sigmoid, silu};
use backend_cpu::kernels::norm::{rmsnorm, NormKind};
use backend_cpu::qwen3_next::moe::top_k_softmax;
use half::bf16;
use model::{Config, KvDtype, MoeConfig, TensorData};
use std::sync::Arc;

/// The CPU's exact matmul (f32 products): the reference every GPU matmul is checked against.
fn matmul(x: &[f32], w: TensorData<'_>, k: usize, y: &mut [f32]) {
    backend_cpu::kernels::matmul::matmul(x, w, k, y, model::MatmulInput::Exact)
}

/// Largest difference allowed relative to the largest reference magnitude: f32 sums in another
/// order, nothing more.
const TOLERANCE: f32 = 1e-5;

/// The MoE layer against backend-cpu: two matmuls in a chain (x carried in ~16 bits on the
/// tensor cores, the activation between them rounded again), so a few times the matmul's.
const MOE_TOLERANCE: f32 = 1e-4;

/// The GPU, or None (and why) without one.
fn open_gpu() -> Option<Arc<Gpu>> {
    match Gpu::open() {
        Ok(g) => Some(g),
        Err(CudaError::Unavailable(why)) => {
            crate::skip_without_gpu(&why);
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// Compiles the modules of every `dims` (with each list of overrides, `&[]` for none) at once, a
/// thread each, and drops them: NVRTC's compile and the driver's JIT take ~20 s a module on a
/// cold GPU machine, and a test that then compiles them one after another in its loop reads
/// them back from the PTX cache ([`super::ptx_cache`]) and the driver's own cache instead. Only
/// time: a module that fails here fails again, with its error, where the test compiles it.
fn warm_kernel_caches(gpu: &Gpu, modules: &[(Dims, &[(&str, usize)])]) {
    std::thread::scope(|threads| {
        for (dims, overrides) in modules {
            threads.spawn(move || match overrides.is_empty() {
                true => drop(Kernels::compile(gpu, dims)),
                false => drop(Kernels::compile_overriding(gpu, dims, overrides)),
            });
        }
    });
}

/// The default model's config and kernels.
fn setup() -> Option<(Arc<Gpu>, Kernels)> {
    let gpu = open_gpu()?;
    let (_, dims) = tiny_dims();
    let kernels = Kernels::compile(&gpu, &dims).expect("kernels");
    Some((gpu, kernels))
}

/// The warpgroup matmul's module compiled into `k` on compute capability 9.0 (the H200), where
/// it must compile, so that the tests run its kernels there: whether it is.
fn compile_wgmma_on_hopper(gpu: &Gpu, k: &mut Kernels) -> bool {
    let hopper = gpu.ctx.compute_capability().expect("compute capability") == (9, 0);
    if hopper {
        k.compile_wgmma(gpu, &tiny_dims().1)
            .expect("the warpgroup matmul compiles on compute capability 9.0");
    }
    hopper
}

fn tiny_dims() -> (Config, Dims) {
    let dir =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/flashlane-tiny");
    let config = Config::from_dir(&dir).expect("config");
    let dims = Dims::of(&config, KvDtype::F32).expect("dims");
    (config, dims)
}

fn bf16_vec(rng: &mut Rng, n: usize, scale: f32) -> Vec<bf16> {
    rng.vec(n)
        .into_iter()
        .map(|v| bf16::from_f32(scale * v))
        .collect()
}

/// The MoE layer of `moe.cu` on `rows` rows, `x` updated in place on the host.
struct MoeCase {
    m: MoeConfig,
    hidden: usize,
    /// The weights' values (bf16 widened, or FP8 dequantised), for the reference.
    gate_up: Vec<f32>,
    down: Vec<f32>,
    shared_down: Vec<f32>,
    /// The same three on the GPU as stored: bf16 bits, or e4m3 bytes with `fp8`'s scales.
    on_gpu: [Buf<u8>; 3],
    fp8: Option<([Buf<f32>; 3], usize, usize)>,
}

impl MoeCase {
    fn new(gpu: &Gpu, rng: &mut Rng, m: MoeConfig, hidden: usize) -> MoeCase {
        let (e, i, is) = (
            m.num_experts,
            m.expert_intermediate,
            m.shared_expert_intermediate,
        );
        let bytes = |v: &[bf16]| -> Buf<u8> {
            let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            Buf::from_host(gpu, &b).unwrap()
        };
        let widen = |v: &[bf16]| v.iter().map(|x| x.to_f32()).collect::<Vec<f32>>();
        let gate_up = bf16_vec(rng, e * 2 * i * hidden, 0.5);
        let down = bf16_vec(rng, e * hidden * i, 0.5);
        let shared_down = bf16_vec(rng, hidden * is, 0.5);
        MoeCase {
            on_gpu: [bytes(&gate_up), bytes(&down), bytes(&shared_down)],
            gate_up: widen(&gate_up),
            down: widen(&down),
            shared_down: widen(&shared_down),
            fp8: None,
            m,
            hidden,
        }
    }

    /// Block-scaled FP8 experts and shared down projection (blocks of `br × bc`), e4m3 values
    /// below 8 in magnitude times scales around 0.05.
    fn new_fp8(
        gpu: &Gpu,
        rng: &mut Rng,
        m: MoeConfig,
        hidden: usize,
        br: usize,
        bc: usize,
    ) -> MoeCase {
        let (e, i, is) = (
            m.num_experts,
            m.expert_intermediate,
            m.shared_expert_intermediate,
        );
        let table = model::e4m3_table();
        // (bytes, scales, values) of `count` matrices [rows, cols].
        let mut make = |count: usize, rows: usize, cols: usize| {
            let q: Vec<u8> = (0..count * rows * cols)
                .map(|_| loop {
                    let b = rng.below(256) as u8;
                    if table[b as usize].abs() < 8.0 {
                        break b;
                    }
                })
                .collect();
            let per = (rows / br) * (cols / bc);
            let scales: Vec<f32> = (0..count * per)
                .map(|_| (rng.below(100) as f32 + 1.0) * 1e-3)
                .collect();
            let values = (0..q.len())
                .map(|n| {
                    let (x, r, c) = (n / (rows * cols), n % (rows * cols) / cols, n % cols);
                    table[q[n] as usize] * scales[x * per + (r / br) * (cols / bc) + c / bc]
                })
                .collect::<Vec<f32>>();
            (q, scales, values)
        };
        let (gq, gs, gv) = make(e, 2 * i, hidden);
        let (dq, ds, dv) = make(e, hidden, i);
        let (sq, ss, sv) = make(1, hidden, is);
        let up = |b: &[u8]| Buf::from_host(gpu, b).unwrap();
        let upf = |b: &[f32]| Buf::from_host(gpu, b).unwrap();
        MoeCase {
            on_gpu: [up(&gq), up(&dq), up(&sq)],
            fp8: Some(([upf(&gs), upf(&ds), upf(&ss)], br, bc)),
            gate_up: gv,
            down: dv,
            shared_down: sv,
            m,
            hidden,
        }
    }

    fn mo_width(&self) -> usize {
        super::moe_front_width(&self.m)
    }

    /// backend-cpu's arithmetic: its router, its matmul per expert, the sums in its order.
    fn reference(&self, xn: &[f32], mo: &[f32], x: &[f32]) -> Vec<f32> {
        let (h, m) = (self.hidden, &self.m);
        let (e_n, i, is) = (
            m.num_experts,
            m.expert_intermediate,
            m.shared_expert_intermediate,
        );
        let mut out = x.to_vec();
        for (r, y) in out.chunks_mut(h).enumerate() {
            let xr = &xn[r * h..(r + 1) * h];
            let mor = &mo[r * self.mo_width()..(r + 1) * self.mo_width()];
            let mut total = vec![0f32; h];
            for (e, p) in top_k_softmax(&mor[..e_n], m.experts_per_token, m.norm_topk_prob) {
                let mut gu = vec![0f32; 2 * i];
                matmul(
                    xr,
                    TensorData::F32(&self.gate_up[e * 2 * i * h..(e + 1) * 2 * i * h]),
                    h,
                    &mut gu,
                );
                let act: Vec<f32> = (0..i).map(|j| silu(gu[j]) * gu[i + j]).collect();
                let mut d = vec![0f32; h];
                matmul(
                    &act,
                    TensorData::F32(&self.down[e * h * i..(e + 1) * h * i]),
                    i,
                    &mut d,
                );
                total.iter_mut().zip(&d).for_each(|(t, v)| *t += p * v);
            }
            if is > 0 {
                let act: Vec<f32> = (0..is)
                    .map(|j| silu(mor[e_n + 1 + j]) * mor[e_n + 1 + is + j])
                    .collect();
                let mut d = vec![0f32; h];
                matmul(&act, TensorData::F32(&self.shared_down), is, &mut d);
                let gate = sigmoid(mor[e_n]);
                total.iter_mut().zip(&d).for_each(|(t, v)| *t += gate * v);
            }
            y.iter_mut().zip(&total).for_each(|(a, t)| *a += t);
        }
        out
    }
}

/// splitmix64, seeded from the clock (the seed is printed on failure).
struct Rng(u64);

impl Rng {
    fn fresh() -> Rng {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        Rng(t | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> usize {
        (self.next() % n) as usize
    }

    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
            .collect()
    }
}

fn relative_diff(got: &[f32], want: &[f32]) -> f32 {
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-30);
    got.iter()
        .zip(want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()))
        / scale
}

/// Whether `a` and `b` hold the same floats bit for bit.
fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

fn f32_bytes(n: usize) -> u64 {
    (n * std::mem::size_of::<f32>()) as u64
}

#[test]
fn matmul_matches_backend_cpu_gathers_accumulates_and_is_the_same_alone_or_batched() {
    let Some((gpu, mut k)) = setup() else {
        return;
    };
    let mut rng = Rng::fresh();
    // The matmul reads k in pieces of MMA_K_ALIGN (16) elements; up to 5120 gives each of the
    // block's warps from 0 to 10 chunks of 64. Also fixed depths: one piece; and 3 rounds of the
    // 8 warps' chunks plus one piece (odd chunk counts, the last chunk in part: the narrow
    // kernel loads 2 chunks at once).
    for depth in [16 * (1 + rng.below(320)), 16, 3 * 8 * 64 + 16] {
        matmul_case(&gpu, &k, &mut rng, depth, 40, true);
    }
    // Rows over several blocks of the tiled kernel (64 rows a block), the last in part.
    let depth = 16 * (1 + rng.below(160));
    matmul_case(&gpu, &k, &mut rng, depth, 300, true);
    // The k split on 32-row blocks (`matmul_bf16_tiled_split32`) where `TiledSplitK` runs on up
    // to 32 rows: the other kernels' bits, gathered and accumulated. Its partials folded through
    // memory here (`ClusterFold::Off`; the default folds some 64-row splits in their clusters,
    // which runs below).
    k.matmul_cluster_fold = super::ClusterFold::Off;
    k.matmul_split32 = true;
    for depth in [16 * (1 + rng.below(320)), 3 * 8 * 64 + 16] {
        matmul_case(&gpu, &k, &mut rng, depth, 32, true);
    }
    // `Auto` splitting k as in Qwen3-4B and larger, a prompt's few tile blocks too
    // (`FLASHLANE_MATMUL_SPLIT_K_PROMPTS`): every row count past 64 here (at most 300 outputs:
    // 3 output blocks) splits, the other kernels' bits.
    k.matmul_split_k = true;
    k.matmul_split_k_prompts = true;
    let depth = 16 * (1 + rng.below(320));
    matmul_case(&gpu, &k, &mut rng, depth, 300, true);
    // The 64-row split folded in its clusters (`matmul_bf16_tiled_split_fold`,
    // FLASHLANE_MATMUL_CLUSTER_FOLD), the 32-row blocks off so that every split takes it: rounds
    // of 40 and 64 rows and rows over several row blocks, the other kernels' bits, gathered and
    // accumulated.
    k.matmul_cluster_fold = super::ClusterFold::All;
    k.matmul_split32 = false;
    k.cluster_fold_launches
        .store(0, std::sync::atomic::Ordering::Relaxed);
    // One piece of k (residues 1–7 of every tile empty: each block still meets the cluster's
    // barriers), three rounds of the residues plus a piece, and random depths.
    for (depth, rows) in [
        (16 * (1 + rng.below(320)), 40),
        (16, 64),
        (3 * 8 * 64 + 16, 64),
        (16 * (1 + rng.below(160)), 300),
    ] {
        matmul_case(&gpu, &k, &mut rng, depth, rows, true);
    }
    // And the 32-row blocks' split folded so (`matmul_bf16_tiled_split32_fold`): 32 and 20 rows.
    k.matmul_split32 = true;
    for (depth, rows) in [(16 * (1 + rng.below(320)), 32), (16, 20)] {
        matmul_case(&gpu, &k, &mut rng, depth, rows, true);
    }
    assert!(
        k.cluster_fold_launches
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0,
        "the split folded in its clusters never ran"
    );
    // How many of its clusters this GPU runs at once, and of the unfolded split's blocks
    // (the default, `ClusterFold::Waves`, compares their waves; the fold's A/B differs by
    // model), for the logs; at least one cluster, or its launches could not have run above.
    let waves = super::cluster_fold_waves(
        &gpu,
        [
            &k.matmul_tiled_split_fold[0],
            &k.matmul_tiled_split32_fold[0],
        ],
        [&k.matmul_tiled_split, &k.matmul_tiled_split32],
        [k.tiled_shared_bytes, k.split32_shared_bytes],
    )
    .expect("the occupancy queries");
    eprintln!(
        "cluster fold on {} multiprocessors (64-row blocks, 32-row blocks): {waves:?}",
        gpu.multiprocessors().expect("the multiprocessor count")
    );
    let super::ClusterFold::Waves {
        clusters_at_once, ..
    } = waves
    else {
        unreachable!("cluster_fold_waves gives Waves")
    };
    assert!(
        clusters_at_once.iter().all(|&c| c >= 1),
        "[cluster-fold-fits] no cluster of the fold fits the GPU: {waves:?}"
    );
}

/// `runs_split_k_prompt` (no device needed): Qwen3-4B's o, down and q/k/v for one 128-token
/// prompt split, its gate/up (304 tile blocks) and a 1,024-row prompt's matrices do not; and
/// no split it allows writes more partials than `split_partials_floats` makes room for.
#[test]
fn a_prompt_splits_k_only_where_its_tiles_are_few() {
    use super::{runs_split_k_prompt, MATMUL_RESIDUES, SPLIT_K_PROMPT_PARTIALS_FLOATS};
    assert!(runs_split_k_prompt(128, 2560));
    assert!(runs_split_k_prompt(128, 6144));
    assert!(!runs_split_k_prompt(128, 19456));
    assert!(!runs_split_k_prompt(1024, 2560));
    assert!(
        !runs_split_k_prompt(64, 2560),
        "a decode round's rows are runs_split_k's"
    );
    for rows in (65..=4096).step_by(7) {
        for n_out in (1..=40_000).step_by(97) {
            if runs_split_k_prompt(rows, n_out) {
                assert!(MATMUL_RESIDUES * rows * n_out <= SPLIT_K_PROMPT_PARTIALS_FLOATS);
            }
        }
    }
}

/// The matmuls compiled to take x as one bf16 (`FLASHLANE_MATMUL_INPUT=bf16`, MMA_SPLIT 0):
/// backend-cpu's product of x rounded to bf16, every kernel the same bits, a row alone the bits
/// it has in the batch. The dense bf16 kernels only: the FP8 and MoE kernels drop their lo
/// products by the same guard, unchecked here.
#[test]
fn matmul_with_bf16_inputs_matches_rounded_x_and_is_the_same_alone_or_batched() {
    let Some(gpu) = open_gpu() else { return };
    let (_, mut dims) = tiny_dims();
    dims.matmul_split = false;
    assert!(dims.source().contains("#define MMA_SPLIT 0\n"));
    let k = Kernels::compile(&gpu, &dims).expect("kernels");
    let mut rng = Rng::fresh();
    for depth in [16 * (1 + rng.below(320)), 3 * 8 * 64 + 16] {
        matmul_case(&gpu, &k, &mut rng, depth, 40, false);
    }
    let depth = 16 * (1 + rng.below(160));
    matmul_case(&gpu, &k, &mut rng, depth, 300, false);
}

/// The warpgroup matmul (`matmul_wg.cu`, [`super::MATMUL_WGMMA_ENV`]; written in session 22,
/// first run on a GPU in the next) and its k split with the operands swapped
/// ([`super::MATMUL_WG_SPLIT_ENV`]; written in session 38, passed on the H200 in session 44: 1–40 rows are
/// its blocks of 32 and 64 rows, 300 rows five row blocks of 64): in `matmul_case` beside every
/// other kernel, so the same bits as they, gathered and accumulated, with x split in hi and lo
/// and taken as one bf16.
#[test]
fn wgmma_matmul_gives_the_other_kernels_bits() {
    let Some(gpu) = open_gpu() else { return };
    let mut rng = Rng::fresh();
    for split in [true, false] {
        let (_, mut dims) = tiny_dims();
        dims.matmul_split = split;
        let mut k = Kernels::compile(&gpu, &dims).expect("kernels");
        k.compile_wgmma(&gpu, &dims)
            .expect("the warpgroup matmul compiles");
        for depth in [16 * (1 + rng.below(320)), 16, 3 * 8 * 64 + 16] {
            matmul_case(&gpu, &k, &mut rng, depth, 40, split);
        }
        // Up to 64 rows: the swapped split's blocks of 64 rows, in part; and depths of 8 and 9
        // chunks and of 5 and a part (the residues' edges: all of one chunk, one of two, empty
        // residues after a partial chunk) for the swapped kernels' chunk walks.
        for depth in [16 * (1 + rng.below(320)), 512, 576, 368] {
            matmul_case(&gpu, &k, &mut rng, depth, 64, split);
        }
        // Rows over several blocks (128 rows a block), the last in part.
        let depth = 16 * (1 + rng.below(160));
        matmul_case(&gpu, &k, &mut rng, depth, 300, split);
        // The 64-row blocks' split on the warpgroup MMA (FLASHLANE_MATMUL_WG_FOLD), every split
        // taking it (the 32-row blocks off, a prompt's few tiles split too), folded in its
        // clusters (`matmul_bf16_wg_split_fold`) and into partials (`_partials`): one piece of k
        // (residues 1–7 empty), three rounds of the residues plus a piece, random depths, rows
        // over several row blocks; the other kernels' bits, gathered and accumulated.
        k.matmul_wg_fold = true;
        k.matmul_split_k = true;
        k.matmul_split_k_prompts = true;
        k.matmul_split32 = false;
        for fold in [super::ClusterFold::All, super::ClusterFold::Off] {
            k.matmul_cluster_fold = fold;
            k.cluster_fold_launches
                .store(0, std::sync::atomic::Ordering::Relaxed);
            k.wg_split_launches
                .store(0, std::sync::atomic::Ordering::Relaxed);
            for (depth, rows) in [
                (16 * (1 + rng.below(320)), 64),
                (16, 64),
                (3 * 8 * 64 + 16, 40),
                (16 * (1 + rng.below(160)), 300),
            ] {
                matmul_case(&gpu, &k, &mut rng, depth, rows, split);
            }
            let folded = k
                .cluster_fold_launches
                .load(std::sync::atomic::Ordering::Relaxed);
            let on_wgmma = k
                .wg_split_launches
                .load(std::sync::atomic::Ordering::Relaxed);
            // Under All every cluster fold is the warpgroup's (the 32-row blocks are off).
            assert!(
                on_wgmma > 0,
                "the warpgroup's split never ran under {fold:?}"
            );
            assert_eq!(
                folded,
                match fold {
                    super::ClusterFold::All => on_wgmma,
                    _ => 0,
                },
                "the warpgroup's split folded in clusters {folded} of {on_wgmma} times under {fold:?}"
            );
        }
        // The walk (FLASHLANE_MATMUL_WALK=tma): every round's split of up to 64 rows, 17–32
        // rows too, in blocks of 32 rows (few outputs: `walk_rows`) and, with the
        // multiprocessors counted as one, of 64; a depth of one piece
        // (residues 1–7 empty), of three rounds of the residues plus a piece, of 8 and 9 chunks,
        // and random; the other kernels' bits, gathered and accumulated. A prompt's split (300
        // rows) stays on the tiles. The TMA walk in k groups too (FLASHLANE_MATMUL_WALK_K_GROUPS:
        // 2, 3 and 4, and by the rule, which gives these few outputs 4), where k gives every
        // residue a chunk (the rest in one block a tile).
        k.matmul_wg_fold = false;
        k.matmul_split32 = true;
        let multiprocessors = k.multiprocessors;
        use super::WalkChoice::Tma;
        use super::WalkKGroups::{Auto, Fixed, Off as OneGroup};
        // And with 2 and 3 consumer warpgroups a block (FLASHLANE_MATMUL_WALK_OUTS; the
        // multiprocessors counted as one, so that these few outputs take them), and the default
        // walk, which leaves every plain split to the tiles (it takes a gate/up's wide blocks
        // alone: `gate_up_swiglu_gives_the_bits_of_the_matmul_then_swiglu`).
        let default_walk = k.matmul_walk;
        let k_groups = [Auto, Fixed(2), Fixed(3), Fixed(4)].map(|g| (Tma, multiprocessors, g, 1));
        let wide = [2, 3].map(|warpgroups| (Tma, 1, OneGroup, warpgroups));
        // And `=wide`: plain splits in wide blocks shared out over 4 or 8 k groups, each form
        // forced (2 or 3 warpgroups; the fold shared out over the cluster), where k gives every
        // residue a chunk (the rest on the tiles).
        use super::WalkChoice::Wide;
        let wide_k_groups = [(2, 4), (2, 8), (3, 4), (3, 8)]
            .map(|(warpgroups, groups)| (Wide, multiprocessors, Fixed(groups), warpgroups));
        for (walk, counted, groups, warpgroups) in
            [(Tma, multiprocessors, OneGroup, 1), (Tma, 1, OneGroup, 1)]
                .into_iter()
                .chain(k_groups)
                .chain(wide)
                .chain([(super::WalkChoice::Measured, 1, OneGroup, 3)])
                .chain(wide_k_groups)
        {
            k.matmul_walk.choice = walk;
            k.multiprocessors = counted;
            k.matmul_walk.k_groups = groups;
            k.matmul_walk.warpgroups = warpgroups;
            k.walk_wide_launches
                .store(0, std::sync::atomic::Ordering::Relaxed);
            k.walk_launches
                .store(0, std::sync::atomic::Ordering::Relaxed);
            k.walk_k_group_launches
                .store(0, std::sync::atomic::Ordering::Relaxed);
            k.walk_wide_k_group_launches
                .store(0, std::sync::atomic::Ordering::Relaxed);
            for (depth, rows) in [
                (16 * (1 + rng.below(320)), 64),
                (16, 64),
                (3 * 8 * 64 + 16, 40),
                (512, 64),
                (576, 32),
                (16 * (1 + rng.below(160)), 300),
            ] {
                matmul_case(&gpu, &k, &mut rng, depth, rows, split);
            }
            // Exactly 64 rows (a whole block: x's chunk one copy) with residues of 6 chunks and a
            // piece (41 chunks: steps of 4 and 2, the total carried across a step), and 48.
            for rows in [64, 48] {
                matmul_case_of(&gpu, &k, &mut rng, 5 * 8 * 64 + 16, rows, split);
            }
            let walked = k.walk_launches.load(std::sync::atomic::Ordering::Relaxed);
            if walk == super::WalkChoice::Measured {
                assert_eq!(walked, 0, "the default walk ran a plain split");
                continue;
            }
            let wide_in_groups = k
                .walk_wide_k_group_launches
                .load(std::sync::atomic::Ordering::Relaxed);
            if walk == Wide {
                // Every walk of these plain splits is the wide one in k groups.
                assert!(
                    wide_in_groups > 0 && wide_in_groups == walked,
                    "the wide walk ({warpgroups} warpgroups, {groups:?}) ran in k groups {wide_in_groups} of {walked} times"
                );
                continue;
            }
            assert_eq!(
                wide_in_groups, 0,
                "the walk ({walk:?}) ran wide in k groups"
            );
            assert!(
                walked > 0,
                "the walk ({walk:?}) never ran with {counted} multiprocessors"
            );
            let in_groups = k
                .walk_k_group_launches
                .load(std::sync::atomic::Ordering::Relaxed);
            assert!(
                (groups == OneGroup) == (in_groups == 0),
                "the walk ({walk:?}, {groups:?}) ran in k groups {in_groups} times"
            );
            let wide = k
                .walk_wide_launches
                .load(std::sync::atomic::Ordering::Relaxed);
            assert!(
                (warpgroups > 1) == (wide > 0),
                "the walk ({walk:?}) ran with {warpgroups} warpgroups {wide} times"
            );
        }
        k.multiprocessors = multiprocessors;
        k.matmul_walk = default_walk;
    }
}

/// The tiles with their weights copied under an L2 evict-first policy
/// ([`super::MATMUL_EVICT_FIRST_ENV`]): a cache hint, so every kernel's bits, in `matmul_case`
/// beside the others and backend-cpu: the tiles (rows over several blocks), the k split of up
/// to 64 rows, its 32-row blocks and a prompt's split.
#[test]
fn tiles_with_the_l2_hint_give_the_other_kernels_bits() {
    let Some(gpu) = open_gpu() else { return };
    let mut k =
        Kernels::compile_overriding(&gpu, &tiny_dims().1, &[("MMT_WEIGHTS_EVICT_FIRST", 1)])
            .expect("kernels with the tiles' L2 hint");
    let mut rng = Rng::fresh();
    let depth = 16 * (1 + rng.below(160));
    matmul_case(&gpu, &k, &mut rng, depth, 300, true);
    k.matmul_split32 = true;
    k.matmul_split_k = true;
    for depth in [16 * (1 + rng.below(320)), 3 * 8 * 64 + 16] {
        matmul_case(&gpu, &k, &mut rng, depth, 64, true);
    }
    k.matmul_split_k_prompts = true;
    let depth = 16 * (1 + rng.below(320));
    matmul_case(&gpu, &k, &mut rng, depth, 300, true);
}

/// Every 16-row bf16 matmul kernel a test may ask for by name.
const SIXTEEN_ROW_KERNELS: [MatmulKernel; 7] = [
    MatmulKernel::Narrow,
    MatmulKernel::Wide,
    MatmulKernel::Tiles(3),
    MatmulKernel::Tiles(5),
    MatmulKernel::Tiles(6),
    MatmulKernel::Deep(3),
    MatmulKernel::Deep(super::MMA_NT),
];

/// One random matmul through every kernel (`k` compiled with the hi/lo split or without it:
/// `split`, the reference then taking x rounded to bf16).
fn matmul_case(
    gpu: &Arc<Gpu>,
    k: &Kernels,
    rng: &mut Rng,
    depth: usize,
    max_rows: usize,
    split: bool,
) {
    // Rows in one and in several 16-row tiles.
    let rows = 1 + rng.below(max_rows as u64);
    matmul_case_of(gpu, k, rng, depth, rows, split);
}

/// [`matmul_case`] at exactly `rows` rows.
fn matmul_case_of(
    gpu: &Arc<Gpu>,
    k: &Kernels,
    rng: &mut Rng,
    depth: usize,
    rows: usize,
    split: bool,
) {
    let (gpu, seed) = (gpu.as_ref(), rng.0);
    let n_out = 1 + rng.below(300);
    let w: Vec<bf16> = rng
        .vec(n_out * depth)
        .into_iter()
        .map(bf16::from_f32)
        .collect();
    let x = rng.vec(rows * depth);
    let mut want = vec![0f32; rows * n_out];
    // Products of bf16 are exact in f32: without the split only the sums' order differs.
    let x_in: Vec<f32> = match split {
        true => x.clone(),
        false => x.iter().map(|&v| bf16::from_f32(v).to_f32()).collect(),
    };
    matmul(&x_in, TensorData::Bf16(&w), depth, &mut want);
    let wb = Buf::from_host(gpu, &w.iter().map(|v| v.to_bits()).collect::<Vec<u16>>()).unwrap();
    let xb = Buf::from_host(gpu, &x).unwrap();
    // The tiled kernel's split rows, for every run's rows (at most rows + 2).
    let xs = Buf::<u32>::zeros(gpu, (rows + 2) * super::split_row_words(depth)).unwrap();
    // And the k split's partials.
    let partials = std::cell::RefCell::new(
        Buf::<f32>::zeros(gpu, super::MATMUL_RESIDUES * (rows + 2) * n_out).unwrap(),
    );
    let nan_partials = vec![f32::NAN; super::MATMUL_RESIDUES * (rows + 2) * n_out];
    // Room for the gathers below even when `rows` is 1.
    // NaN before every run that does not accumulate: an output a kernel leaves unwritten fails.
    let y = std::cell::RefCell::new(Buf::<f32>::zeros(gpu, (rows + 2) * n_out).unwrap());
    let nan = vec![f32::NAN; (rows + 2) * n_out];
    let run_with = |x: u64, row_index: u64, rows: usize, accumulate: bool, kernel| {
        if !accumulate {
            y.borrow_mut().write(gpu, &nan).unwrap();
        }
        // And the partials: a partial a split kernel leaves unwritten fails (the runs before
        // left theirs there).
        partials.borrow_mut().write(gpu, &nan_partials).unwrap();
        let m = Matmul {
            x_split: xs.at(0),
            partials: partials.borrow().at(0),
            fp8: None,
            x,
            x_stride: depth,
            row_index,
            w: wb.at(0),
            k: depth,
            n_out,
            y: y.borrow().at(0),
            y_stride: n_out,
            rows,
            accumulate,
        };
        k.matmul_with(gpu, &m, kernel).unwrap();
        y.borrow().read(gpu, rows * n_out).unwrap()
    };
    let run = |x: u64, row_index: u64, rows: usize, accumulate: bool| {
        run_with(x, row_index, rows, accumulate, MatmulKernel::Auto)
    };
    let all = run(xb.at(0), 0, rows, false);
    let d = relative_diff(&all, &want);
    assert!(
        d <= TOLERANCE,
        "seed {seed}, depth {depth}: relative diff {d}"
    );
    // The narrow, the wide at every n-tiles a block and every tiled kernel: the same bits,
    // gathered and accumulated too.
    let index: Vec<i32> = (0..rows as i32).rev().collect();
    let index = Buf::from_host(gpu, &index).unwrap();
    let reversed = run_with(xb.at(0), index.at(0), rows, false, MatmulKernel::Narrow);
    let twice = run_with(xb.at(0), index.at(0), rows, true, MatmulKernel::Narrow);
    // The warpgroup matmul and its k split with the operands swapped where the caller compiled
    // them (`Kernels::compile_wgmma`).
    let wgmma = match k.wgmma.is_some() {
        true => &[
            MatmulKernel::Wgmma,
            MatmulKernel::WgmmaSplitK,
            MatmulKernel::WgmmaSwapped,
        ][..],
        false => &[],
    };
    for kernel in SIXTEEN_ROW_KERNELS
        .into_iter()
        .chain([MatmulKernel::Tiled, MatmulKernel::TiledSplitK])
        .chain(wgmma.iter().copied())
    {
        let other = run_with(xb.at(0), 0, rows, false, kernel);
        // How far, and where first, says a wrong layout (far) from another order of sums (an
        // ulp or so).
        assert!(
            same_bits(&other, &all),
            "seed {seed}, depth {depth}, {rows} rows × {n_out} outputs: {kernel:?} differs \
             (relative {}, first at (row, output) {:?})",
            relative_diff(&other, &all),
            other
                .iter()
                .zip(&all)
                .position(|(a, b)| a.to_bits() != b.to_bits())
                .map(|i| (i / n_out, i % n_out))
        );
        let other = run_with(xb.at(0), index.at(0), rows, false, kernel);
        assert!(
            same_bits(&other, &reversed),
            "seed {seed}, depth {depth}: {kernel:?} gathered differs"
        );
        let other = run_with(xb.at(0), index.at(0), rows, true, kernel);
        assert!(
            same_bits(&other, &twice),
            "seed {seed}, depth {depth}: {kernel:?} accumulated differs"
        );
    }
    for r in 0..rows {
        let one = run(xb.at(0) + f32_bytes(r * depth), 0, 1, false);
        let same = same_bits(&one, &all[r * n_out..(r + 1) * n_out]);
        assert!(same, "seed {seed}: row {r} alone differs from the batch");
    }
    // Gather the last row then the first; then add the same rows again.
    let index = Buf::from_host(gpu, &[rows as i32 - 1, 0]).unwrap();
    let gathered = run(xb.at(0), index.at(0), 2, false);
    assert_eq!(gathered[..n_out], all[(rows - 1) * n_out..]);
    assert_eq!(gathered[n_out..], all[..n_out]);
    let doubled = run(xb.at(0), index.at(0), 2, true);
    for (d, g) in doubled.iter().zip(&gathered) {
        assert_eq!(*d, g + g, "seed {seed}: accumulate adds the product to y");
    }
    // Every row gathered in reverse order, plus the first twice (so rows land in other tiles and
    // row slots): each the bits of the row alone.
    let order: Vec<i32> = (0..rows as i32).rev().chain([0, 0]).collect();
    let index = Buf::from_host(gpu, &order).unwrap();
    let gathered = run(xb.at(0), index.at(0), order.len(), false);
    for (g, &r) in gathered.chunks(n_out).zip(&order) {
        let r = r as usize;
        assert!(
            same_bits(g, &all[r * n_out..(r + 1) * n_out]),
            "seed {seed}: gathered row {r} differs"
        );
    }
}

/// The kernels of the gate/up SwiGLU tests, and whether the warpgroup split compiled (Hopper):
/// the twins run only where the switch lets them (on unless FLASHLANE_SWIGLU_IN_GATE_UP=0), and
/// Auto splits k here as in Qwen3-4B and larger (the default model does not).
fn swiglu_setup() -> Option<(Arc<Gpu>, Kernels, bool)> {
    let (gpu, mut k) = setup()?;
    k.swiglu_in_gate_up = true;
    k.matmul_split_k = true;
    let wgmma_split = compile_wgmma_on_hopper(&gpu, &mut k);
    Some((gpu, k, wgmma_split))
}

/// A dense MLP's gate/up with its SwiGLU in the matmul (`matmul_bf16_swiglu_*`) or in a split
/// k's fold (`matmul_fold_residues_swiglu`): the bits of the plain matmul then `swiglu_rows`
/// through every 16-row kernel that has a twin and the k split, widths with a partial last
/// block and Qwen3-0.6B's, rows in one and in several row tiles and a 48–64-stream round's; a
/// row alone the bits it has in the batch; and backend-cpu's silu(gate) · up within the
/// matmul's tolerance.
#[test]
fn gate_up_swiglu_gives_the_bits_of_the_matmul_then_swiglu() {
    let Some((gpu, mut k, wgmma_split)) = swiglu_setup() else {
        return;
    };
    let gpu = gpu.as_ref();
    let mut rng = Rng::fresh();
    let seed = rng.0;
    // And residues of 6 chunks and a piece (the walk's steps of 4 and 2).
    let cases = [
        (1 + rng.below(200), 16 * (1 + rng.below(100))),
        (3072, 1024),
        (1 + rng.below(100), 5 * 8 * 64 + 16),
    ];
    for (width, depth) in cases {
        // And exactly 64 (the walk's whole blocks).
        let rows = [
            1,
            1 + rng.below(16),
            16 + 1 + rng.below(30),
            48 + rng.below(17),
            64,
        ];
        let max_rows = rows.iter().copied().max().unwrap();
        let x_host = rng.vec(max_rows * depth);
        let w_host = bf16_vec(&mut rng, 2 * width * depth, 0.05);
        let x = Buf::from_host(gpu, &x_host).unwrap();
        let w_bits: Vec<u16> = w_host.iter().map(|v| v.to_bits()).collect();
        let w = Buf::from_host(gpu, &w_bits).unwrap();
        let wide = Buf::<f32>::zeros(gpu, max_rows * 2 * width).unwrap();
        // The k split's split rows and partials.
        let xs = Buf::<u32>::zeros(gpu, max_rows * super::split_row_words(depth)).unwrap();
        let partials = std::cell::RefCell::new(
            Buf::<f32>::zeros(gpu, super::MATMUL_RESIDUES * max_rows * 2 * width).unwrap(),
        );
        let nan_partials = vec![f32::NAN; super::MATMUL_RESIDUES * max_rows * 2 * width];
        // NaN before every run: an output a kernel leaves unwritten fails.
        let act = std::cell::RefCell::new(Buf::<f32>::zeros(gpu, max_rows * width).unwrap());
        let nan = vec![f32::NAN; max_rows * width];
        // The partials too: a partial a split kernel leaves unwritten fails.
        let fresh_act = || {
            act.borrow_mut().write(gpu, &nan).unwrap();
            partials.borrow_mut().write(gpu, &nan_partials).unwrap();
            act.borrow().at(0)
        };
        let mut gate_up = vec![0.0f32; max_rows * 2 * width];
        matmul(&x_host, TensorData::Bf16(&w_host), depth, &mut gate_up);
        let want: Vec<f32> = gate_up
            .chunks(2 * width)
            .flat_map(|r| (0..width).map(move |i| silu(r[i]) * r[width + i]))
            .collect();
        // Each row count with the 64-row split's partials folded through memory, then in its
        // clusters (`matmul_bf16_tiled_split_fold*`, FLASHLANE_MATMUL_CLUSTER_FOLD), and on
        // Hopper the split on the warpgroup MMA (FLASHLANE_MATMUL_WG_FOLD), in its clusters
        // (`matmul_bf16_wg_split_fold_swiglu`) and into partials (`_partials`): the same bits.
        // And on Hopper the walk (FLASHLANE_MATMUL_WALK, `matmul_bf16_walk_tma_swiglu`), its
        // blocks of 64 rows and of 32 (FLASHLANE_MATMUL_WALK_ROWS, `_swiglu_n32`), and with 2 and
        // 3 consumer warpgroups (FLASHLANE_MATMUL_WALK_OUTS, `_swiglu_w2`, `_w3`; the
        // multiprocessors counted as one, so that these few units take them); and the default
        // walk, its multiprocessors counted as its wide blocks (one wave of them), which it
        // takes from 49 rows.
        use super::WalkChoice::{Measured, Tma};
        let folds = [
            (super::ClusterFold::Off, false, None),
            (super::ClusterFold::All, false, None),
            (super::ClusterFold::All, true, None),
            (super::ClusterFold::Off, true, None),
            (super::ClusterFold::Off, false, Some((Tma, None, 1))),
            (super::ClusterFold::Off, false, Some((Tma, Some(32), 1))),
            (super::ClusterFold::Off, false, Some((Tma, None, 2))),
            (super::ClusterFold::Off, false, Some((Tma, None, 3))),
            (super::ClusterFold::Off, false, Some((Measured, None, 3))),
        ];
        let folds = &folds[..if wgmma_split { folds.len() } else { 2 }];
        let multiprocessors = k.multiprocessors;
        for (rows, &(cluster_fold, wg_fold, walk)) in rows
            .into_iter()
            .flat_map(|r| folds.iter().map(move |f| (r, f)))
        {
            k.matmul_cluster_fold = cluster_fold;
            k.matmul_wg_fold = wg_fold;
            k.matmul_walk.choice = walk.map_or(super::WalkChoice::Off, |w| w.0);
            k.matmul_walk.rows = walk.and_then(|w| w.1);
            let warpgroups = walk.map_or(1, |w| w.2);
            k.matmul_walk.warpgroups = warpgroups;
            let default_walk = walk.is_some_and(|w| w.0 == Measured);
            k.multiprocessors = match (default_walk, warpgroups) {
                (true, _) => super::walk_out_blocks(2 * width, true, warpgroups),
                (false, 1) => multiprocessors,
                (false, _) => 1,
            };
            let wide_before = k
                .walk_wide_launches
                .load(std::sync::atomic::Ordering::Relaxed);
            let seed = format!(
                "{seed} (cluster fold {cluster_fold:?}, on wgmma {wg_fold}, walk {walk:?})"
            );
            let m = Matmul {
                x_split: xs.at(0),
                partials: partials.borrow().at(0),
                ..packed_matmul(x.at(0), w.at(0), depth, 2 * width, wide.at(0), rows, None)
            };
            // The plain path: the matmul with the kernel asked, then `swiglu_rows`.
            let apart = |kernel: MatmulKernel| {
                k.matmul_with(gpu, &m, kernel).unwrap();
                k.swiglu(gpu, wide.at(0), width, rows, fresh_act()).unwrap();
                act.borrow().read(gpu, rows * width).unwrap()
            };
            let fused = |kernel: MatmulKernel| {
                let place = k
                    .gate_up_swiglu_with(gpu, &m, fresh_act(), None, kernel)
                    .unwrap()
                    .0;
                (place, act.borrow().read(gpu, rows * width).unwrap())
            };
            let base = apart(MatmulKernel::Auto);
            let d = relative_diff(&base, &want[..rows * width]);
            assert!(
                d <= TOLERANCE,
                "seed {seed}, width {width}: relative diff {d}"
            );
            let kernels = [MatmulKernel::Auto, MatmulKernel::TiledSplitK];
            let on_wgmma = wgmma_split.then_some(MatmulKernel::WgmmaSplitK);
            for kernel in kernels
                .into_iter()
                .chain(on_wgmma)
                .chain(SIXTEEN_ROW_KERNELS)
            {
                let (place, got) = fused(kernel);
                // Auto's kernel (and so its place) depends on the width and the rows.
                use super::SwigluPlace::{Apart, InFold, InGateUp};
                let placed = match kernel {
                    MatmulKernel::Auto => {
                        (place == InFold)
                            == ((48..=64).contains(&rows)
                                || (k.matmul_split32
                                    && (super::SPLIT32_MIN_ROWS..=super::SPLIT32_ROWS)
                                        .contains(&rows)))
                    }
                    MatmulKernel::TiledSplitK | MatmulKernel::WgmmaSplitK => place == InFold,
                    MatmulKernel::Narrow => place == Apart,
                    _ => matches!(place, InGateUp { .. }),
                };
                assert!(
                    placed,
                    "seed {seed}, width {width}, {rows} rows, {kernel:?}: {place:?}"
                );
                assert!(
                    same_bits(&got, &base),
                    "seed {seed}, width {width}, depth {depth}, {rows} rows: {kernel:?} ({place:?}) differs"
                );
                assert!(
                    same_bits(&apart(kernel), &base),
                    "seed {seed}, width {width}: the plain {kernel:?} differs"
                );
            }
            // The default walk ran its wide blocks from 49 rows (Auto's kernel and the k split
            // asked), and never below.
            let wide_now = k
                .walk_wide_launches
                .load(std::sync::atomic::Ordering::Relaxed);
            assert!(
                !default_walk || (wide_now > wide_before) == (rows >= super::MWK_WIDE_MIN_ROWS),
                "seed {seed}, width {width}, {rows} rows: the default walk ran wide {} times",
                wide_now - wide_before
            );
            // The last row alone.
            let r = rows - 1;
            let one = Matmul {
                x: x.at(0) + f32_bytes(r * depth),
                rows: 1,
                ..packed_matmul(x.at(0), w.at(0), depth, 2 * width, wide.at(0), 1, None)
            };
            k.gate_up_swiglu(gpu, &one, fresh_act()).unwrap();
            let alone = act.borrow().read(gpu, width).unwrap();
            assert!(
                same_bits(&alone, &base[r * width..]),
                "seed {seed}, width {width}: row {r} alone differs from the batch of {rows}"
            );
        }
        k.multiprocessors = multiprocessors;
        k.matmul_walk.warpgroups = 1;
    }
    // The rounds of 48–64 rows took the warpgroup fold and the walk (with several warpgroups
    // too) where their module compiled: the comparisons above checked them, not the tiles twice.
    let wide = k
        .walk_wide_launches
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        !wgmma_split || wide > 0,
        "seed {seed}: the walk with several warpgroups never ran"
    );
    let on_wgmma = k
        .wg_split_launches
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        !wgmma_split || on_wgmma > 0,
        "seed {seed}: the warpgroup fold never ran"
    );
    let walked = k.walk_launches.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        !wgmma_split || walked > 0,
        "seed {seed}: the walk never ran"
    );
}

/// An FP8 gate/up of a decode round of 17–64 rows (33–47 included) runs the warpgroup split
/// by default where its module compiles (Hopper), its SwiGLU in the split's fold: the bits of the
/// FP8 16-row kernels' matmul then `swiglu_rows`, and of each row alone. Off Hopper only the
/// 16-row kernels run, and the test checks them against the reference.
#[test]
fn fp8_gate_up_swiglu_in_the_split_fold_gives_the_bits_of_the_matmul_then_swiglu() {
    let Some((gpu, k, wgmma_split)) = swiglu_setup() else {
        return;
    };
    let gpu = gpu.as_ref();
    let mut rng = Rng::fresh();
    let seed = rng.0;
    let (block_rows, block_cols, width, depth) = (128, 128, 256, 1024);
    let n_out = 2 * width;
    let (q, scales, w) = fp8_weights(&mut rng, n_out, depth, block_rows, block_cols);
    let rows_of = [17 + rng.below(16), 33 + rng.below(15), 48 + rng.below(17)];
    let max_rows = 64;
    let x_host = rng.vec(max_rows * depth);
    let mut gate_up = vec![0f32; max_rows * n_out];
    matmul(&x_host, TensorData::F32(&w), depth, &mut gate_up);
    let want: Vec<f32> = gate_up
        .chunks(n_out)
        .flat_map(|r| (0..width).map(move |i| silu(r[i]) * r[width + i]))
        .collect();
    let (qb, sb, x) = (
        Buf::from_host(gpu, &q).unwrap(),
        Buf::from_host(gpu, &scales).unwrap(),
        Buf::from_host(gpu, &x_host).unwrap(),
    );
    let wide = Buf::<f32>::zeros(gpu, max_rows * n_out).unwrap();
    let xs = Buf::<u32>::zeros(gpu, max_rows * super::split_row_words(depth)).unwrap();
    let partials = std::cell::RefCell::new(
        Buf::<f32>::zeros(gpu, super::MATMUL_RESIDUES * max_rows * n_out).unwrap(),
    );
    let act = std::cell::RefCell::new(Buf::<f32>::zeros(gpu, max_rows * width).unwrap());
    // NaN in the output and the partials before every run: what a kernel leaves unwritten fails.
    let fresh_act = || {
        act.borrow_mut()
            .write(gpu, &vec![f32::NAN; max_rows * width])
            .unwrap();
        partials
            .borrow_mut()
            .write(
                gpu,
                &vec![f32::NAN; super::MATMUL_RESIDUES * max_rows * n_out],
            )
            .unwrap();
        act.borrow().at(0)
    };
    let scales_of = || Fp8Scales {
        scales: sb.at(0),
        block_rows,
        block_cols,
    };
    for rows in rows_of {
        let m = Matmul {
            x_split: xs.at(0),
            partials: partials.borrow().at(0),
            ..packed_matmul(
                x.at(0),
                qb.at(0),
                depth,
                n_out,
                wide.at(0),
                rows,
                Some(scales_of()),
            )
        };
        // The FP8 wide kernel, then `swiglu_rows`.
        k.matmul_with(gpu, &m, MatmulKernel::Wide).unwrap();
        k.swiglu(gpu, wide.at(0), width, rows, fresh_act()).unwrap();
        let base = act.borrow().read(gpu, rows * width).unwrap();
        let d = relative_diff(&base, &want[..rows * width]);
        assert!(
            d <= TOLERANCE,
            "seed {seed}, {rows} rows: relative diff {d}"
        );
        let place = k.gate_up_swiglu(gpu, &m, fresh_act()).unwrap();
        let got = act.borrow().read(gpu, rows * width).unwrap();
        use super::SwigluPlace::{Apart, InFold};
        // (`FLASHLANE_MATMUL_WG_SPLIT=0` keeps FP8 on the 16-row kernels.)
        let split = wgmma_split && super::wg_split_takes(k.matmul_wg_split, rows, true);
        assert_eq!(
            place,
            if split { InFold } else { Apart },
            "seed {seed}, {rows} rows"
        );
        assert!(
            same_bits(&got, &base),
            "seed {seed}, {rows} rows: the FP8 gate/up with its SwiGLU ({place:?}) differs"
        );
        for r in [0, rows - 1] {
            let one = Matmul {
                x: x.at(0) + f32_bytes(r * depth),
                ..packed_matmul(
                    x.at(0),
                    qb.at(0),
                    depth,
                    n_out,
                    wide.at(0),
                    1,
                    Some(scales_of()),
                )
            };
            k.gate_up_swiglu(gpu, &one, fresh_act()).unwrap();
            let alone = act.borrow().read(gpu, width).unwrap();
            assert!(
                same_bits(&alone, &base[r * width..(r + 1) * width]),
                "seed {seed}: row {r} alone differs from the batch of {rows}"
            );
        }
    }
}

/// Where a dense MLP's SwiGLU runs: in the 16-row kernels that have a twin and in a split k's
/// fold, apart elsewhere.
#[test]
fn swiglu_goes_into_the_gate_up_kernels_that_have_a_twin() {
    use super::{swiglu_place, MatmulLaunch, SwigluPlace};
    let rows = |tiles, deep| MatmulLaunch::RowTiles { tiles, deep };
    assert_eq!(
        swiglu_place(rows(3, false), false, true),
        SwigluPlace::InGateUp {
            tiles: 3,
            deep: false
        }
    );
    assert_eq!(
        swiglu_place(rows(4, true), false, true),
        SwigluPlace::InGateUp {
            tiles: 4,
            deep: true
        }
    );
    for (split, fp8) in [
        (MatmulLaunch::Tiled { split_k: true }, false),
        (MatmulLaunch::WgmmaSplitK, false),
        (MatmulLaunch::WgmmaSplitK, true),
    ] {
        assert_eq!(swiglu_place(split, fp8, true), SwigluPlace::InFold);
    }
    for apart in [
        swiglu_place(rows(1, false), false, true),
        swiglu_place(rows(4, false), true, true),
        swiglu_place(rows(4, false), false, false),
        swiglu_place(MatmulLaunch::Tiled { split_k: true }, false, false),
        swiglu_place(MatmulLaunch::WgmmaSplitK, false, false),
        swiglu_place(MatmulLaunch::Tiled { split_k: false }, false, true),
        swiglu_place(MatmulLaunch::Wgmma, false, true),
        swiglu_place(MatmulLaunch::WgmmaSwapped, false, true),
    ] {
        assert_eq!(apart, SwigluPlace::Apart);
    }
}

/// Random block-scaled FP8 weights `[n_out, depth]`: e4m3 bytes (any but the two NaNs), a scale
/// per `block_rows × block_cols` block, and the weights they stand for dequantised to f32 (as the
/// model crate dequantises them for the CPU).
fn fp8_weights(
    rng: &mut Rng,
    n_out: usize,
    depth: usize,
    block_rows: usize,
    block_cols: usize,
) -> (Vec<u8>, Vec<f32>, Vec<f32>) {
    let table = model::e4m3_table();
    let q: Vec<u8> = (0..n_out * depth)
        .map(|_| {
            let b = rng.below(254) as u8;
            if b >= 0x7f {
                b + 1
            } else {
                b
            }
        })
        .collect();
    let bc = depth / block_cols;
    let scales: Vec<f32> = (0..(n_out / block_rows) * bc)
        .map(|_| (rng.below(1000) as f32 + 1.0) * 1e-4)
        .collect();
    let w: Vec<f32> = (0..n_out * depth)
        .map(|i| {
            let (o, c) = (i / depth, i % depth);
            table[q[i] as usize] * scales[(o / block_rows) * bc + c / block_cols]
        })
        .collect();
    (q, scales, w)
}

/// The FP8 matmul (e4m3 weights, f32 scales per block) against backend-cpu's f32 matmul on the
/// dequantised weights (`q · scale`, as the model crate dequantises them for the CPU); the narrow
/// and the wide kernel give the same bits, and a row alone the bits it has in the batch. Blocks
/// of Qwen's 128 × 128 and of the smallest shape the kernel takes (8 rows × 64 columns).
#[test]
fn fp8_matmul_matches_backend_cpu_on_dequantised_weights() {
    let Some((gpu, mut k)) = setup() else { return };
    let wgmma_split = compile_wgmma_on_hopper(&gpu, &mut k);
    let mut rng = Rng::fresh();
    let seed = rng.0;
    // Depths of at most one chunk a residue (k split's 8), then of several (the split's running
    // sum over chunks and its rings; 25 chunks: residues of 4 and 3), at rows of the split's
    // blocks of 32 and of 64, and a prompt's rows (the swapped matmul's blocks of 64, the last
    // one part empty).
    let cases = [
        (128, 128, 256, 384, 1 + rng.below(40)),
        (8, 64, 40, 192, 1 + rng.below(40)),
        (128, 128, 256, 2048, 17 + rng.below(16)),
        (8, 64, 40, 1600, 33 + rng.below(32)),
        (128, 128, 384, 1664, 65 + rng.below(100)),
        (8, 64, 40, 320, 65 + rng.below(100)),
    ];
    for (block_rows, block_cols, n_out, depth, rows) in cases {
        let (q, scales, w) = fp8_weights(&mut rng, n_out, depth, block_rows, block_cols);
        let x = rng.vec(rows * depth);
        let mut want = vec![0f32; rows * n_out];
        matmul(&x, TensorData::F32(&w), depth, &mut want);
        let (qb, sb, xb) = (
            Buf::from_host(&gpu, &q).unwrap(),
            Buf::from_host(&gpu, &scales).unwrap(),
            Buf::from_host(&gpu, &x).unwrap(),
        );
        // The split rows and partials of the k split; NaN in y and the partials before every
        // run: an output or partial a kernel leaves unwritten fails.
        let y = std::cell::RefCell::new(Buf::<f32>::zeros(&gpu, rows * n_out).unwrap());
        let xs = Buf::<u32>::zeros(&gpu, rows * super::split_row_words(depth)).unwrap();
        let partials = std::cell::RefCell::new(
            Buf::<f32>::zeros(&gpu, super::MATMUL_RESIDUES * rows * n_out).unwrap(),
        );
        let run = |x: u64, rows: usize, kernel| {
            let scales = Fp8Scales {
                scales: sb.at(0),
                block_rows,
                block_cols,
            };
            y.borrow_mut()
                .write(&gpu, &vec![f32::NAN; rows * n_out])
                .unwrap();
            partials
                .borrow_mut()
                .write(&gpu, &vec![f32::NAN; super::MATMUL_RESIDUES * rows * n_out])
                .unwrap();
            let m = Matmul {
                x_split: xs.at(0),
                partials: partials.borrow().at(0),
                ..packed_matmul(
                    x,
                    qb.at(0),
                    depth,
                    n_out,
                    y.borrow().at(0),
                    rows,
                    Some(scales),
                )
            };
            k.matmul_with(&gpu, &m, kernel).unwrap();
            y.borrow().read(&gpu, rows * n_out).unwrap()
        };
        let all = run(xb.at(0), rows, MatmulKernel::Auto);
        let d = relative_diff(&all, &want);
        assert!(
            d <= TOLERANCE,
            "seed {seed}, blocks {block_rows}×{block_cols}: relative diff {d}"
        );
        // The warpgroup split takes up to 64 rows; the swapped matmul any.
        let on_wgmma = [
            (wgmma_split && rows <= super::MWS_MAX_ROWS).then_some(MatmulKernel::WgmmaSplitK),
            wgmma_split.then_some(MatmulKernel::WgmmaSwapped),
        ];
        for kernel in [
            MatmulKernel::Narrow,
            MatmulKernel::Wide,
            MatmulKernel::Tiles(3),
            MatmulKernel::Tiles(6),
        ]
        .into_iter()
        .chain(on_wgmma.into_iter().flatten())
        {
            let other = run(xb.at(0), rows, kernel);
            assert!(
                same_bits(&other, &all),
                "seed {seed}, blocks {block_rows}×{block_cols}, {rows} rows: {kernel:?} differs \
                 (relative {})",
                relative_diff(&other, &all)
            );
        }
        for r in 0..rows {
            let one = run(xb.at(0) + f32_bytes(r * depth), 1, MatmulKernel::Auto);
            let same = same_bits(&one, &all[r * n_out..(r + 1) * n_out]);
            assert!(same, "seed {seed}: row {r} alone differs from the batch");
        }
    }
}

/// `deepens` (no device needed): one row tile and at most one block a multiprocessor; the 4B
/// shape's o and down projections at one row (2,560 outputs: 107 blocks of 3) on the H200's 132.
#[test]
fn deepens_takes_one_row_tile_of_at_most_a_block_a_multiprocessor() {
    use super::deepens;
    assert!(deepens(1, 107, 132));
    assert!(deepens(1, 132, 132));
    assert!(!deepens(1, 133, 132));
    assert!(!deepens(2, 107, 132));
    assert!(!deepens(4, 1, 132));
}

/// `deep_fit` (no device needed): one row tile whose fitted blocks outnumber the
/// multiprocessors takes the first deep count that makes at most one a multiprocessor; other
/// matrices keep their fit. The H200's 132 multiprocessors: Qwen3-8B's o and down (512 n-tiles:
/// 171 blocks of 3) run 128 blocks of 4; Qwen3-4B's (320: 107 of 3) and q/k/v (768: 256 of 3,
/// 192 of 4) stay.
#[test]
fn deep_fit_runs_one_row_tile_deep_where_a_deep_count_fits() {
    use super::{deep_fit, deepens, MATMUL_DEEP_TILES, MMA_NT};
    assert_eq!(deep_fit(1, 512, 3, 132), MMA_NT);
    assert_eq!(deep_fit(1, 320, 3, 132), 3);
    assert_eq!(deep_fit(1, 768, 3, 132), 3);
    assert_eq!(deep_fit(4, 512, 3, 132), 3);
    for mp in [1, 7, 132] {
        for n_tiles in 1..=1200 {
            for fitted in [3, MMA_NT, 5, 6] {
                let chosen = deep_fit(1, n_tiles, fitted, mp);
                if deepens(1, n_tiles.div_ceil(fitted), mp) {
                    assert_eq!(chosen, fitted);
                } else if chosen != fitted {
                    assert!(MATMUL_DEEP_TILES.contains(&chosen));
                    assert!(deepens(1, n_tiles.div_ceil(chosen), mp));
                } else {
                    assert!(MATMUL_DEEP_TILES.iter().all(|&t| !deepens(
                        1,
                        n_tiles.div_ceil(t),
                        mp
                    )));
                }
            }
        }
    }
}

/// `attention_group` (no device needed): the most of 4, 2, 1 that divides a KV head's query
/// heads with the merge in 512 dims.
#[test]
fn attention_groups_divide_the_query_heads_of_a_kv_head() {
    use super::attention_group;
    assert_eq!(attention_group(32, 8, 128), 4);
    assert_eq!(attention_group(64, 8, 128), 4);
    assert_eq!(attention_group(16, 8, 128), 2);
    assert_eq!(attention_group(16, 2, 256), 2);
    assert_eq!(attention_group(40, 8, 128), 1);
    assert_eq!(attention_group(64, 4, 64), 4);
    assert_eq!(attention_group(8, 8, 64), 1);
}

/// `prep_place` (no device needed): the prep goes into the attention only where allowed, on the
/// per-head kernel, for rows of their own sessions.
#[test]
fn the_prep_runs_in_the_attention_only_for_rows_of_their_own() {
    use super::{prep_place, AttentionKernel, PrepPlace};
    use AttentionKernel::{Grouped, GroupedFewWarps, GroupedStaged, GroupedStaged8, PerHead};
    // (kernel, rows of their own, allowed, where).
    let cases = [
        (PerHead, true, true, PrepPlace::InAttention),
        (PerHead, true, false, PrepPlace::Apart),
        (PerHead, false, true, PrepPlace::Apart),
        (Grouped, true, true, PrepPlace::Apart),
        (GroupedFewWarps, true, true, PrepPlace::Apart),
        (GroupedStaged, true, true, PrepPlace::InAttention),
        (GroupedStaged, false, true, PrepPlace::Apart),
        (GroupedStaged, true, false, PrepPlace::Apart),
        (GroupedStaged8, true, true, PrepPlace::Apart),
    ];
    for (kernel, own, allowed, want) in cases {
        assert_eq!(
            prep_place(kernel, own, allowed),
            want,
            "{kernel:?}, rows of their own {own}, allowed {allowed}"
        );
    }
}

/// `attention_kernel` (no device needed): a block per head under 32 rows (a decode round of few
/// streams, a short prompt), by groups of heads from 32 (many streams, a prompt), by few warps
/// from 512 rows for heads of at most 128 (Qwen3's dense shapes) unless the setting forces a
/// choice.
#[test]
fn attention_runs_by_groups_of_heads_for_many_rows() {
    use super::{attention_kernel, AttentionKernel, ATT_GROUPED_MIN_ROWS};
    use AttentionKernel::{Grouped, GroupedFewWarps, PerHead};
    assert_eq!(
        ATT_GROUPED_MIN_ROWS, 32,
        "the cases below assume the default bound"
    );
    // (rows, head dim, the setting's force, the rows from which heads are grouped, the kernel).
    let cases = [
        (1, 128, None, 32, PerHead),
        (16, 128, None, 32, PerHead),
        (31, 128, Some(true), 32, PerHead),
        (32, 128, None, 32, Grouped),
        (64, 256, None, 32, Grouped),
        (511, 128, None, 32, Grouped),
        (512, 128, None, 32, GroupedFewWarps),
        (8192, 256, None, 32, Grouped),
        (128, 128, Some(false), 32, Grouped),
        (8192, 256, Some(true), 32, GroupedFewWarps),
        // FLASHLANE_ATTENTION_GROUPED_MIN_ROWS=128 (the bound before session 33): a 64-stream
        // decode round a block a head.
        (64, 128, None, 128, PerHead),
        (128, 128, None, 128, Grouped),
    ];
    for (rows, head_dim, few, grouped_from, want) in cases {
        assert_eq!(
            attention_kernel(rows, head_dim, few, grouped_from),
            want,
            "{rows} rows of {head_dim}, few warps {few:?}, grouped from {grouped_from}"
        );
    }
}

/// `staged_in_place` (no device needed): the staged kernel chosen (`staged_choice`,
/// `FLASHLANE_ATTENTION_STAGED`) takes the grouped kernel's calls where it was compiled, and
/// no other kernel's.
#[test]
fn the_staged_attention_takes_only_the_grouped_kernels_calls() {
    use super::{staged_in_place, AttentionKernel};
    use AttentionKernel::{Grouped, GroupedFewWarps, GroupedStaged, GroupedStaged8, PerHead};
    // (the kernel chosen by rows and head dim, the one asked for, compiled, the kernel run).
    let cases = [
        (Grouped, None, true, Grouped),
        (Grouped, Some(GroupedStaged), true, GroupedStaged),
        (Grouped, Some(GroupedStaged8), true, GroupedStaged8),
        (Grouped, Some(GroupedStaged), false, Grouped),
        (PerHead, Some(GroupedStaged), true, PerHead),
        (GroupedFewWarps, Some(GroupedStaged8), true, GroupedFewWarps),
    ];
    for (chosen, asked, compiled, want) in cases {
        assert_eq!(
            staged_in_place(chosen, asked, compiled),
            want,
            "{chosen:?}, asked {asked:?}, compiled {compiled}"
        );
    }
}

/// `folds_in_clusters` (no device needed): off, all, and by waves — a split folds where its
/// clusters take no more waves than its unfolded blocks, by the kind of its row blocks, and a
/// gate/up's with its SwiGLU always.
#[test]
fn the_cluster_fold_by_waves_folds_where_its_clusters_take_no_more_waves() {
    use super::{folds_in_clusters, ClusterFold, SplitShape};
    // 30 clusters and 264 unfolded blocks at once on the 64-row blocks; 33 and 396 on the
    // 32-row ones.
    let waves = ClusterFold::Waves {
        clusters_at_once: [30, 33],
        blocks_at_once: [264, 396],
    };
    // (the choice, 32-row blocks, tiles, a SwiGLU's, folds).
    let cases = [
        (ClusterFold::Off, false, 20, false, false),
        (ClusterFold::Off, false, 20, true, false),
        (ClusterFold::All, false, 32, false, true),
        (ClusterFold::All, true, 34, false, true),
        // 20 tiles: 1 wave of clusters, 160 blocks in 1.
        (waves, false, 20, false, true),
        // 32 tiles: 2 waves of clusters against 256 blocks in 1.
        (waves, false, 32, false, false),
        // 48 tiles: 2 waves against 384 blocks in 2.
        (waves, false, 48, false, true),
        // 152 tiles: 6 waves against 1,216 blocks in 5; a gate/up's with its SwiGLU folds.
        (waves, false, 152, false, false),
        (waves, false, 152, true, true),
        // The 32-row blocks' counts: 33 tiles, 1 wave against 264 blocks in 1.
        (waves, true, 33, false, true),
        (waves, true, 34, false, false),
        (waves, true, 34, true, true),
    ];
    for (fold, on_32_rows, tiles, swiglu, want) in cases {
        let split = SplitShape {
            tiles,
            on_32_rows,
            swiglu,
        };
        assert_eq!(folds_in_clusters(fold, split), want, "{fold:?}, {split:?}");
    }
    // A GPU that runs none folds nothing.
    let none = ClusterFold::Waves {
        clusters_at_once: [0, 0],
        blocks_at_once: [264, 396],
    };
    for swiglu in [false, true] {
        let split = SplitShape {
            tiles: 1,
            on_32_rows: false,
            swiglu,
        };
        assert!(!folds_in_clusters(none, split));
    }
}

/// `staged_choice` (no device needed): the switch's values first; unset, the 8-warp staged
/// kernel where a block holds 4 query heads (Qwen3-4B, -8B), none where it holds fewer
/// (Qwen3-0.6B and the A3B slice: 2).
#[test]
fn the_staged_attention_is_the_default_where_a_block_holds_four_heads() {
    use super::{staged_choice, AttentionKernel::GroupedStaged, AttentionKernel::GroupedStaged8};
    // (the switch's value, query heads a block, the kernel chosen).
    let cases = [
        (None, 4, Some(GroupedStaged8)),
        (None, 2, None),
        (None, 1, None),
        (Some("0"), 4, None),
        (Some("1"), 2, Some(GroupedStaged)),
        (Some("8"), 1, Some(GroupedStaged8)),
        (Some("yes"), 4, Some(GroupedStaged8)),
        (Some("yes"), 2, None),
    ];
    for (asked, group, want) in cases {
        assert_eq!(
            staged_choice(asked, group),
            want,
            "asked {asked:?}, {group} heads a block"
        );
    }
}

/// `mma_in_place` (no device needed): the tensor-core attention takes every call where it is
/// asked and compiled, whatever kernel the call would run (its cluster twin under the grouped
/// kernels' bound of rows, the block kernel from there), and none elsewhere; the prep goes into
/// the cluster kernel where allowed, never into the block kernel (it has no prep twin).
#[test]
fn the_tensor_core_attention_takes_every_call_or_none() {
    use super::{mma_in_place, prep_place, AttentionKernel::*, PrepPlace};
    for kernel in [
        PerHead,
        Grouped,
        GroupedFewWarps,
        GroupedStaged,
        GroupedStaged8,
    ] {
        // (rows, each its session's only one, rows a block of attention_mma_rows, the kernel).
        for (rows, one_a_session, rows_a_block, want) in [
            (1, true, 2, MmaCluster),
            (31, true, 2, MmaCluster),
            (31, false, 2, MmaCluster),
            (32, true, 2, Mma),
            (4096, true, 2, Mma),
            // A prompt's rows: a block takes several where the group leaves columns for them.
            (32, false, 2, MmaRows),
            (4096, false, 4, MmaRows),
            (4096, false, 1, Mma),
        ] {
            assert_eq!(
                mma_in_place(kernel, rows, 32, one_a_session, rows_a_block, true, true),
                want,
                "{kernel:?} {rows} {one_a_session} {rows_a_block}"
            );
            for (asked, compiled) in [(true, false), (false, true)] {
                assert_eq!(
                    mma_in_place(
                        kernel,
                        rows,
                        32,
                        one_a_session,
                        rows_a_block,
                        asked,
                        compiled
                    ),
                    kernel
                );
            }
        }
    }
    // The cluster kernel has a prep twin (few rows, each its session's only one); the block
    // kernel none.
    assert_eq!(prep_place(MmaCluster, true, true), PrepPlace::InAttention);
    assert_eq!(prep_place(MmaCluster, false, true), PrepPlace::Apart);
    assert_eq!(prep_place(MmaCluster, true, false), PrepPlace::Apart);
    assert_eq!(prep_place(Mma, true, true), PrepPlace::Apart);
}

/// `context_split` (no device needed): a call's rows by position against the switch, all of
/// one kind (no rows: simt) or both; the position itself is the tensor cores'.
#[test]
fn by_context_rows_from_the_position_take_the_tensor_cores() {
    use super::{context_split, ContextKinds::*};
    for (positions, want) in [
        (vec![], Simt),
        (vec![0, 5, 1023], Simt),
        (vec![1024], TensorCores),
        (vec![4000, 1024, 9000], TensorCores),
        (vec![1023, 1024], Both),
        (vec![5000, 3, 70], Both),
    ] {
        assert_eq!(
            context_split(positions.clone(), 1024),
            want,
            "{positions:?}"
        );
    }
    assert_eq!(context_split([0], 0), TensorCores);
}

/// `att_mma_fits` (no device needed): compiled for bf16 caches of heads of 16-dim steps with at
/// most 8 query heads a KV head (every Qwen3 and the A3B slice), not for f32 caches nor wider
/// groups; two blocks' shared memory fits a multiprocessor with heads of 128. `--attention-kernel
/// tensor-cores` is refused where they are not compiled.
#[test]
fn the_tensor_core_attention_is_compiled_where_its_tiles_fit() {
    use super::{att_mma_fits, ATT_STAGED_SHARED_MAX};
    let dir =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/flashlane-tiny");
    let mut config = Config::from_dir(&dir).expect("config");
    // (query heads, KV heads, head dim, cache, compiled, the tensor cores by default): Qwen3-4B,
    // -8B-like groups of 4 and 8, the A3B slice, a narrow group of 4, Qwen3-0.6B's group of 2,
    // Qwen3-14B's group of 5, a group of 6 (fits, not a default group yet), an f32 cache, a group
    // of 16.
    let by_context = crate::AttentionKernels::ByContext {
        tensor_cores_from: crate::TENSOR_CORES_FROM_POSITION,
    };
    let cases = [
        (32, 8, 128, KvDtype::Bf16, true, true),
        (64, 8, 128, KvDtype::Bf16, true, true),
        (16, 2, 256, KvDtype::Bf16, true, true),
        (8, 2, 16, KvDtype::Bf16, true, true),
        (16, 8, 128, KvDtype::Bf16, true, false),
        (40, 8, 128, KvDtype::Bf16, true, true),
        (48, 8, 128, KvDtype::Bf16, true, false),
        (32, 8, 128, KvDtype::F32, false, false),
        (16, 1, 128, KvDtype::Bf16, false, false),
    ];
    for (heads, kv_heads, hd, kv, compiled, tensor_cores_by_default) in cases {
        config.num_heads = heads;
        config.num_kv_heads = kv_heads;
        config.head_dim = hd;
        config.rotary_dim = hd / 4;
        let mut dims = Dims::of(&config, kv).expect("dims");
        let fits = att_mma_fits(&dims);
        // Unless asked: by context where the group is wide enough and the kernels fit, which
        // always loads; simt elsewhere.
        let default = crate::default_attention_kernels(&config, kv);
        assert_eq!(
            default,
            match tensor_cores_by_default {
                true => by_context,
                false => crate::AttentionKernels::Simt,
            },
            "{heads}/{kv_heads} heads of {hd}, {kv:?}"
        );
        dims.attention = default;
        assert!(dims.check_attention().is_ok());
        dims.attention = crate::AttentionKernels::Simt;
        assert_eq!(
            fits.is_some(),
            compiled,
            "{heads}/{kv_heads} heads of {hd}, {kv:?}"
        );
        // `--attention-kernel tensor-cores` loads where they are compiled and is refused with
        // the flag and the shape named elsewhere; the default kernels load everywhere.
        assert!(dims.check_attention().is_ok());
        for kernels in [
            crate::AttentionKernels::TensorCores,
            crate::AttentionKernels::ByContext {
                tensor_cores_from: 1024,
            },
        ] {
            dims.attention = kernels;
            match dims.check_attention() {
                Ok(()) => assert!(
                    compiled,
                    "{kernels:?}: {heads}/{kv_heads} heads of {hd}, {kv:?}"
                ),
                Err(e) => {
                    assert!(
                        !compiled,
                        "{kernels:?}: {heads}/{kv_heads} heads of {hd}, {kv:?}"
                    );
                    let message = e.to_string();
                    assert!(
                        message.contains(&format!("--attention-kernel {}", kernels.name()))
                            && message.contains(&format!("heads of {hd}"))
                            && message.contains("--attention-kernel simt"),
                        "{message}"
                    );
                }
            }
        }
        if let Some(super::MmaShared {
            whole,
            cluster,
            rows,
        }) = fits
        {
            assert!(cluster < whole && whole <= rows && whole <= ATT_STAGED_SHARED_MAX);
            // Two blocks a multiprocessor (228 KiB, 1 KiB of it a block's own) where a block
            // holds at most 4 query heads of 128 (the prompts' kernel, 8 columns, one).
            if hd <= 128 && heads / kv_heads <= 4 {
                assert!(2 * (whole + 1024) <= 228 * 1024, "{hd}: {whole} bytes");
            }
        }
    }
}

/// `runs_split_k` (no device needed): k split for 48–64 rows, not at 32 (slower there), nor where
/// the tiles run (an lm_head).
#[test]
fn the_k_split_runs_for_48_to_64_rows_off_the_tiles() {
    use super::runs_split_k;
    for (rows, n_out, split) in [
        (32, 19456, false),
        (47, 19456, false),
        (48, 19456, true),
        (64, 19456, true),
        (65, 19456, false),
        (64, 2560, true),
        (64, 1024, true),
        (64, 151936, false),
    ] {
        assert_eq!(runs_split_k(rows, n_out, 0), split, "{rows} rows × {n_out}");
    }
    // A layer split in part, for the profile (FLASHLANE_MATMUL_SPLIT_K_MIN_OUTPUTS).
    assert!(runs_split_k(64, 6144, 4096));
    assert!(!runs_split_k(64, 2560, 4096));
}

/// The sizes of a real shape's config (`bench/shapes/SHAPE`), bf16 KV.
fn shape_dims(shape: &str) -> Dims {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/shapes");
    let config = Config::from_dir(&dir.join(shape)).expect("config");
    Dims::of(&config, KvDtype::Bf16).expect("dims")
}

/// `model_splits_k` (no device needed) on the real shapes' configs: the dense models whose
/// narrowest matrices split into 160 blocks or more (Qwen3-4B, -8B, -32B: measured or their
/// kind), not Qwen3-0.6B (64 blocks) nor the hybrid models (experts never split).
#[test]
fn models_split_k_as_measured() {
    use super::model_splits_k;
    for (shape, split) in [
        ("qwen3-0.6b", false),
        ("qwen3-4b", true),
        ("qwen3-8b", true),
        ("qwen3-32b", true),
        ("qwen3-next-a3b-slice", false),
        ("qwen3-next-80b-a3b", false),
    ] {
        assert_eq!(model_splits_k(&shape_dims(shape)), split, "{shape}");
    }
    assert!(
        !model_splits_k(&tiny_dims().1),
        "the default model is hybrid"
    );
}

/// `round_launches` (no device needed): serial launches only in Qwen3-0.6B's decode rounds of
/// 16–64 rows, where they were measured faster; overlapped in its 1–8-stream rounds and prompts,
/// in the wider dense models and in the hybrids (the default model too) at every row count.
#[test]
fn rounds_launch_serially_only_where_measured_faster() {
    use super::round_launches;
    use crate::device::Launches::{Overlapped, Serial};
    let small = shape_dims("qwen3-0.6b");
    for (rows, want) in [
        (1, Overlapped),
        (8, Overlapped),
        (15, Overlapped),
        (16, Serial),
        (32, Serial),
        (64, Serial),
        (65, Overlapped),
        (128, Overlapped),
        (8192, Overlapped),
    ] {
        assert_eq!(
            round_launches(&small, rows),
            want,
            "qwen3-0.6b, {rows} rows"
        );
    }
    for shape in [
        "qwen3-4b",
        "qwen3-8b",
        "qwen3-next-a3b-slice",
        "qwen3-next-small",
    ] {
        let dims = shape_dims(shape);
        for rows in [1, 8, 16, 32, 64, 128] {
            assert_eq!(
                round_launches(&dims, rows),
                Overlapped,
                "{shape}, {rows} rows"
            );
        }
    }
    let tiny = tiny_dims().1;
    for rows in [1, 16, 64] {
        assert_eq!(
            round_launches(&tiny, rows),
            Overlapped,
            "the default model, {rows} rows"
        );
    }
}

/// `wgmma_default_min_rows` (no device needed): the warpgroup matmul from 4,096 rows in the
/// dense models whose layers split k, on compute capability 9.0 only; not in Qwen3-0.6B or the
/// hybrid models, where it was measured slower or no faster.
#[test]
fn the_warpgroup_matmul_runs_by_default_where_measured_faster() {
    use super::{wgmma_default_min_rows, MMW_MIN_ROWS};
    for (shape, takes) in [
        ("qwen3-0.6b", false),
        ("qwen3-4b", true),
        ("qwen3-8b", true),
        ("qwen3-next-a3b-slice", false),
    ] {
        let dims = shape_dims(shape);
        let want = takes.then_some(MMW_MIN_ROWS);
        assert_eq!(wgmma_default_min_rows(&dims, (9, 0)), want, "{shape}");
        for other in [(8, 0), (8, 9), (10, 0), (12, 0)] {
            assert_eq!(
                wgmma_default_min_rows(&dims, other),
                None,
                "{shape} on {other:?}"
            );
        }
    }
}

/// `wg_split_takes` (no device needed): by default the swapped warpgroup split takes FP8 rounds
/// of any split size and bf16 rounds of up to 24 rows, as session 44 measured them faster; `=0`
/// none, `=1` every split of up to 64 rows.
#[test]
fn the_swapped_split_runs_where_measured_faster() {
    use super::{wg_split_takes, WgChoice, MWS_MAX_ROWS, WG_SPLIT_BF16_MAX_ROWS};
    for rows in [17, 24, 25, 32, 48, 64] {
        assert!(
            wg_split_takes(WgChoice::Measured, rows, true),
            "FP8 at {rows} rows"
        );
        assert_eq!(
            wg_split_takes(WgChoice::Measured, rows, false),
            rows <= WG_SPLIT_BF16_MAX_ROWS,
            "bf16 at {rows} rows"
        );
        for fp8 in [false, true] {
            assert!(wg_split_takes(WgChoice::All, rows, fp8));
            assert!(!wg_split_takes(WgChoice::Off, rows, fp8));
        }
    }
    for fp8 in [false, true] {
        for choice in [WgChoice::Measured, WgChoice::All] {
            assert!(
                !wg_split_takes(choice, MWS_MAX_ROWS + 1, fp8),
                "a prompt's rows"
            );
        }
    }
}

/// `walk_k_groups` and the k groups' shared memory (no device needed): by the rule, Qwen3-4B's
/// o and down at 48–64 rows (40 tiles of 64 outputs) share k over 3 blocks on the H100's 132
/// multiprocessors, Qwen3-8B's (64 tiles) over 2; q/k/v and any gate/up stay one block a tile;
/// nothing is shared where a residue would hold no chunk or none is asked; each ring fits
/// Hopper's 227 KB beside its partials and holds a step's chunks.
#[test]
fn the_walk_shares_k_where_its_tiles_leave_multiprocessors_idle() {
    use super::{
        mwk_kg_shared_bytes, walk_depth, walk_k_groups, walk_kg_stages, WalkKGroups,
        HOPPER_BLOCK_SHARED_BYTES, MMA_CHUNK,
    };
    use WalkKGroups::{Auto, Fixed, Off};
    let chunks = |k: usize| k.div_ceil(MMA_CHUNK);
    // (asked, outputs, chunks of k, a gate/up's, groups), at 48 and 64 rows.
    let cases = [
        // Qwen3-4B: o (4,096 → 2,560), down (9,728 → 2,560), q/k/v (2,560 → 6,144).
        (Auto, 2560, chunks(4096), false, 3),
        (Auto, 2560, chunks(9728), false, 3),
        (Auto, 6144, chunks(2560), false, 1),
        // Qwen3-8B: o and down (→ 4,096).
        (Auto, 4096, chunks(12288), false, 2),
        // A gate/up (its SwiGLU's units in one block), none asked, too little k.
        (Auto, 2560, chunks(4096), true, 1),
        (Off, 2560, chunks(4096), false, 1),
        (Fixed(4), 2560, 7, false, 1),
        (Fixed(2), 6144, 8, false, 2),
    ];
    for rows in [48, 64] {
        for (asked, n_out, chunks, swiglu, groups) in cases {
            assert_eq!(
                walk_k_groups(asked, rows, n_out, chunks, swiglu, 132),
                groups,
                "{asked:?}, {rows} rows, {n_out} outputs, {chunks} chunks, SwiGLU {swiglu}"
            );
        }
    }
    // 128 rows are two row blocks: 80 tiles, so 1 (80 · 2 ≥ 132).
    assert_eq!(walk_k_groups(Auto, 128, 2560, chunks(4096), false, 132), 1);
    for groups in 2..=4 {
        assert!(
            mwk_kg_shared_bytes(groups) <= HOPPER_BLOCK_SHARED_BYTES,
            "{groups} groups: {} bytes",
            mwk_kg_shared_bytes(groups)
        );
        assert!(walk_kg_stages(groups) >= walk_depth(), "{groups} groups");
    }
}

/// `walk_warpgroups` and the wide walk's shared memory (no device needed): asked for 192
/// outputs a block, Qwen3-4B's and -8B's gate/up at 48–64 rows take 3 consumer warpgroups (102
/// and 128 blocks on the H100's 132 multiprocessors), their q/k/v, o and down 1 (3 or 2 would
/// leave more than half the multiprocessors without a block); asked for 128, the gate/up takes 2;
/// each ring fits Hopper's 227 KB.
#[test]
fn the_walk_widens_its_blocks_where_they_still_fill_half_the_gpu() {
    use super::{mwk_wide_shared_bytes, walk_warpgroups, HOPPER_BLOCK_SHARED_BYTES};
    for rows in [48, 64] {
        assert_eq!(walk_warpgroups(3, rows, 2 * 9728, true, 132), 3);
        assert_eq!(walk_warpgroups(3, rows, 2 * 12288, true, 132), 3);
        assert_eq!(walk_warpgroups(2, rows, 2 * 9728, true, 132), 2);
        for n_out in [6144, 2560, 4096] {
            assert_eq!(walk_warpgroups(3, rows, n_out, false, 132), 1, "{n_out}");
        }
        assert_eq!(walk_warpgroups(1, rows, 2 * 9728, true, 132), 1);
    }
    for warpgroups in [2, 3] {
        assert!(mwk_wide_shared_bytes(warpgroups) <= HOPPER_BLOCK_SHARED_BYTES);
        // At the default stages the ring holds every k-group form's stash (w3 in 4 groups: 96
        // KB in 200).
        for groups in super::MWK_WIDE_K_GROUPS {
            assert!(
                super::mwk_wide_stash_bytes(warpgroups, groups)
                    <= super::mwk_wide_ring_bytes(warpgroups),
                "{warpgroups} warpgroups, {groups} groups"
            );
        }
    }
}

/// `walk_plan` (no device needed): by default (the walk's 3 warpgroups, 132 multiprocessors)
/// only Qwen3-4B's and -8B's gate/up from 49 rows to 64 walk, in wide blocks; their q/k/v, o and
/// down, Qwen3-0.6B's gate/up (too few units for wide blocks to fill half the GPU), plain splits
/// that wide blocks would hold (never measured), gate/ups of more wide blocks than a wave, 48
/// rows and fewer, more than 64 rows, or wide kernels that did not load stay on the tiles.
/// `=tma` walks every split of up to 64 rows: in k groups where asked and loaded, else in wide
/// blocks where asked and loaded, else in one warpgroup a block of 64 rows or (few outputs) 32,
/// but under `_NARROW=tiles` not those of 32; `=0` none.
#[test]
fn the_default_walk_takes_only_what_its_wide_blocks_hold() {
    use super::WalkChoice::{Measured, Off, Tma};
    use super::WalkKGroups;
    use super::WalkPlan::{KGroups, Rows, Wide};
    use super::{walk_plan, WalkAsk, WalkLoaded, MWK_MOST_WARPGROUPS};
    let all = WalkLoaded {
        k_groups: [true; 3],
        wide: [true; 2],
        wide_k_groups: [[Some(32); 2]; 2],
    };
    let ask = |choice| WalkAsk {
        choice,
        rows: None,
        k_groups: WalkKGroups::Off,
        warpgroups: if choice == Measured {
            MWK_MOST_WARPGROUPS
        } else {
            1
        },
        narrow_tiles: false,
    };
    // k of 2,560 (Qwen3-4B's hidden): 40 chunks.
    let plan = |ask: &WalkAsk, loaded, rows, n_out, swiglu| {
        walk_plan(ask, loaded, rows, n_out, 40, swiglu, 132)
    };
    let measured = ask(Measured);
    for rows in [49, 56, 64] {
        for units in [9728, 12288] {
            assert_eq!(
                plan(&measured, all, rows, 2 * units, true),
                Some(Wide(3)),
                "{rows} rows, {units}"
            );
        }
        for n_out in [6144, 2560, 4096] {
            assert_eq!(
                plan(&measured, all, rows, n_out, false),
                None,
                "{rows} rows, {n_out}"
            );
        }
        assert_eq!(
            plan(&measured, all, rows, 2 * 3072, true),
            None,
            "0.6B at {rows} rows"
        );
        // Wide blocks never measured: a plain split's (the A3B slice's q/k/v, 9,216 outputs,
        // and DeltaNet projection, 12,352, both in 2 warpgroups), and Qwen3-14B's gate/up
        // (182 blocks of 3 warpgroups: more than a wave).
        let tma_wide = WalkAsk {
            choice: Tma,
            ..measured
        };
        for n_out in [9216, 12352] {
            assert_eq!(plan(&measured, all, rows, n_out, false), None, "{n_out}");
            assert_eq!(plan(&tma_wide, all, rows, n_out, false), Some(Wide(2)));
        }
        assert_eq!(plan(&measured, all, rows, 2 * 17408, true), None, "14B");
    }
    for rows in [1, 17, 32, 48, 65, 128] {
        assert_eq!(
            plan(&measured, all, rows, 2 * 9728, true),
            None,
            "{rows} rows"
        );
    }
    // Only the 3 warpgroups' kernels missing: 3 are what the gate/up takes, so the tiles; asked
    // for 2 (FLASHLANE_MATMUL_WALK_OUTS=128), the 2 warpgroups' kernels where their blocks are
    // a wave (a gate/up of 8,192 units: 128 blocks), not Qwen3-4B's 152 (`=tma` takes those).
    let only_two = WalkLoaded {
        wide: [true, false],
        ..all
    };
    assert_eq!(plan(&measured, only_two, 64, 2 * 9728, true), None);
    let two = WalkAsk {
        warpgroups: 2,
        ..measured
    };
    assert_eq!(plan(&two, only_two, 64, 2 * 8192, true), Some(Wide(2)));
    assert_eq!(plan(&two, only_two, 64, 2 * 9728, true), None);
    let two_tma = WalkAsk { choice: Tma, ..two };
    assert_eq!(plan(&two_tma, only_two, 64, 2 * 9728, true), Some(Wide(2)));
    let tma = ask(Tma);
    for rows in [1, 32, 64] {
        assert_eq!(plan(&ask(Off), all, rows, 2 * 9728, true), None);
        // Qwen3-4B's q/k/v (96 blocks of 64 outputs) in blocks of 64 rows; its o (40: fewer
        // than half of 132) in blocks of 32.
        assert_eq!(plan(&tma, all, rows, 6144, false), Some(Rows(64)));
        assert_eq!(plan(&tma, all, rows, 2560, false), Some(Rows(32)));
    }
    assert_eq!(plan(&tma, all, 65, 6144, false), None);
    let narrow = WalkAsk {
        narrow_tiles: true,
        ..tma
    };
    assert_eq!(plan(&narrow, all, 64, 2560, false), None);
    assert_eq!(plan(&narrow, all, 64, 6144, false), Some(Rows(64)));
    // `=tma` with the gate/up's 3 warpgroups asked, and the o in k groups by the rule (3: 120
    // blocks), where their kernels loaded.
    let wide_tma = WalkAsk {
        warpgroups: 3,
        k_groups: WalkKGroups::Auto,
        ..tma
    };
    assert_eq!(plan(&wide_tma, all, 64, 2 * 9728, true), Some(Wide(3)));
    assert_eq!(plan(&wide_tma, all, 64, 2560, false), Some(KGroups(3)));
    let none_loaded = WalkLoaded {
        k_groups: [false; 3],
        wide: [false; 2],
        wide_k_groups: [[None; 2]; 2],
    };
    assert_eq!(
        plan(&wide_tma, none_loaded, 64, 2 * 9728, true),
        Some(Rows(64))
    );
    assert_eq!(
        plan(&wide_tma, none_loaded, 64, 2560, false),
        Some(Rows(32))
    );
}

/// `=wide` (no device needed): the gate/up as the default takes it; a plain split from 49 rows
/// to 64 in the wide form of the most blocks (then the most warpgroups) whose tiles fit one
/// wave, on the multiprocessors and in the clusters the GPU holds: on 132 multiprocessors
/// Qwen3-4B's q/k/v (6,144 outputs) in 32 tiles of 3 warpgroups × 4 groups, its o and down
/// (2,560) in 14 tiles × 8, Qwen3-8B's o and down (4,096) in 32 tiles of 2 warpgroups × 4; where
/// 32 clusters of 4 do not fit at once, the q/k/v's next form (2 warpgroups × 4 is 192 blocks:
/// the tiles). Fewer rows, fewer chunks than residues and forms not loaded go to the tiles; k
/// groups and warpgroups asked force their form at any rows up to 64.
#[test]
fn the_wide_walk_shares_plain_splits_out_in_k_groups_that_fit_a_wave() {
    use super::WalkChoice::Wide;
    use super::WalkKGroups;
    use super::WalkPlan::{self, WideKGroups};
    use super::{walk_plan, WalkAsk, WalkLoaded, MWK_MOST_WARPGROUPS};
    let loaded = |clusters: [[Option<usize>; 2]; 2]| WalkLoaded {
        k_groups: [true; 3],
        wide: [true; 2],
        wide_k_groups: clusters,
    };
    let roomy = loaded([[Some(64); 2]; 2]);
    let wide = WalkAsk {
        choice: Wide,
        rows: None,
        k_groups: WalkKGroups::Off,
        warpgroups: MWK_MOST_WARPGROUPS,
        narrow_tiles: false,
    };
    let plan = |ask: &WalkAsk, loaded, rows, n_out, chunks| {
        walk_plan(ask, loaded, rows, n_out, chunks, false, 132)
    };
    let form = |warpgroups, groups| Some(WideKGroups { warpgroups, groups });
    for rows in [49, 64] {
        assert_eq!(plan(&wide, roomy, rows, 6144, 40), form(3, 4), "q/k/v");
        assert_eq!(plan(&wide, roomy, rows, 2560, 152), form(3, 8), "4B down");
        assert_eq!(plan(&wide, roomy, rows, 4096, 64), form(2, 4), "8B o");
        // The gate/up as by default.
        assert_eq!(
            walk_plan(&wide, roomy, rows, 2 * 9728, 40, true, 132),
            Some(WalkPlan::Wide(3))
        );
    }
    for rows in [1, 32, 48, 65] {
        assert_eq!(plan(&wide, roomy, rows, 6144, 40), None, "{rows} rows");
    }
    assert_eq!(plan(&wide, roomy, 64, 6144, 7), None, "7 chunks");
    // 31 clusters of 4 at once: 32 tiles do not fit, and 2 warpgroups' 48 × 4 blocks are more
    // than the multiprocessors.
    let tight = loaded([[Some(31); 2]; 2]);
    assert_eq!(plan(&wide, tight, 64, 6144, 40), None);
    assert_eq!(plan(&wide, tight, 64, 2560, 40), form(3, 8));
    // Only 3 warpgroups in 4 groups loaded: the down in 14 × 4.
    let one_form = loaded([[None, None], [Some(64), None]]);
    assert_eq!(plan(&wide, one_form, 64, 2560, 152), form(3, 4));
    assert_eq!(plan(&wide, loaded([[None; 2]; 2]), 64, 2560, 152), None);
    // Forced: any rows up to 64, every form, where loaded and k allows.
    for (warpgroups, groups) in [(2, 4), (2, 8), (3, 4), (3, 8)] {
        let forced = WalkAsk {
            k_groups: WalkKGroups::Fixed(groups),
            warpgroups,
            ..wide
        };
        for rows in [1, 40, 64] {
            assert_eq!(
                plan(&forced, roomy, rows, 6144, 8),
                form(warpgroups, groups),
                "{rows} rows"
            );
        }
        assert_eq!(plan(&forced, roomy, 65, 6144, 8), None);
        assert_eq!(plan(&forced, roomy, 64, 6144, 7), None);
    }
}

/// Hybrid models with FP8 projections split k in their FP8 decode rounds alone (measured as a
/// bound, session 46); dense models split as `model_splits_k` says, and bf16 hybrids never (no
/// device needed).
#[test]
fn hybrid_fp8_models_split_only_their_fp8_rounds() {
    for (shape, split) in [
        ("qwen3-next-a3b-slice-fp8", true),
        ("qwen3-next-80b-a3b-fp8", true),
        ("qwen3-next-a3b-slice", false),
        ("qwen3-4b-fp8", false),
        ("qwen3-0.6b", false),
    ] {
        let mut dims = shape_dims(shape);
        dims.fp8_weights = shape.ends_with("-fp8");
        assert_eq!(super::hybrid_fp8_rounds_split(&dims), split, "{shape}");
    }
}

/// The swapped unsplit matmul takes only a prompt's rows (more than a split's 64), FP8 alone
/// by default, bf16 too with `=1`, none with `=0` (no device needed).
#[test]
fn the_swapped_matmul_takes_prompts_as_its_switch_says() {
    use super::{wg_swap_takes, WgChoice, MWS_MAX_ROWS};
    let prompt = MWS_MAX_ROWS + 1;
    for (choice, fp8, bf16) in [
        (WgChoice::Off, false, false),
        (WgChoice::Measured, true, false),
        (WgChoice::All, true, true),
    ] {
        assert_eq!(wg_swap_takes(choice, prompt, true), fp8, "{choice:?} FP8");
        assert_eq!(
            wg_swap_takes(choice, prompt, false),
            bf16,
            "{choice:?} bf16"
        );
        assert!(
            !wg_swap_takes(choice, MWS_MAX_ROWS, true),
            "{choice:?}: a split's rows"
        );
    }
}

/// The dense models' bf16 matmuls load their first weights before the wait (measured faster
/// there, session 44); hybrid models' as before (no device needed).
#[test]
fn dense_models_load_their_first_weights_early() {
    for (shape, early) in [
        ("qwen3-0.6b", true),
        ("qwen3-4b", true),
        ("qwen3-8b-fp8", true),
        ("qwen3-next-a3b-slice", false),
        ("qwen3-next-small", false),
    ] {
        assert_eq!(
            super::loads_weights_early(&shape_dims(shape)),
            early,
            "{shape}"
        );
    }
}

/// `runs_tiled` (no device needed): the tiled kernel where session 21's measurements found it
/// faster, end to end where they differed from the kernel's own timings, the 16-row kernels
/// elsewhere.
#[test]
fn the_tiled_matmul_runs_where_it_was_measured_faster() {
    use super::runs_tiled;
    // (rows, outputs, tiled): Qwen3-4B's gate/up (19,456), q/k/v (6,144) and o (2,560), the
    // A3B slice's DeltaNet input projection (12,352) and lm_head (151,936), Qwen3-0.6B's q/k/v
    // (4,096) and o (1,024).
    for (rows, n_out, tiled) in [
        (32, 19456, false),
        (64, 19456, false),
        (128, 19456, true),
        (64, 6144, false),
        (128, 6144, false),
        (256, 6144, true),
        (128, 2560, false),
        (64, 12352, false),
        (128, 12352, true),
        (32, 151936, false),
        (48, 151936, true),
        (64, 151936, true),
        (256, 4096, true),
        (8192, 1024, true),
    ] {
        assert_eq!(runs_tiled(rows, n_out), tiled, "{rows} rows × {n_out}");
    }
}

/// `block_tiles` (no device needed): a count of MATMUL_BLOCK_TILES whose waves cost least; for
/// one row tile MMA_NT on ties, for more from MMA_NT up and the most on ties (MMA_NT alone
/// without `multi_row`); the A3B slice's matrices as its doc says.
#[test]
fn block_tiles_runs_a_matrix_in_the_fewest_waves() {
    use super::{block_tiles, MATMUL_BLOCK_TILES, MMA_NT};
    let cost = |row_tiles: usize, n_tiles: usize, resident: usize, tiles: usize| {
        (row_tiles * n_tiles.div_ceil(tiles)).div_ceil(resident) * tiles
    };
    for resident in [1, 2, 7, 264] {
        for row_tiles in [1, 2, 4, 9] {
            for n_tiles in 1..=600 {
                let chosen = block_tiles(row_tiles, n_tiles, resident, true);
                let allowed: Vec<usize> = MATMUL_BLOCK_TILES
                    .into_iter()
                    .filter(|&t| row_tiles == 1 || t >= MMA_NT)
                    .collect();
                assert!(allowed.contains(&chosen));
                let best = allowed
                    .iter()
                    .map(|&t| cost(row_tiles, n_tiles, resident, t))
                    .min()
                    .unwrap();
                let mine = cost(row_tiles, n_tiles, resident, chosen);
                assert_eq!(mine, best, "{row_tiles}×{n_tiles} on {resident}: {chosen}");
                let tied = allowed
                    .iter()
                    .filter(|&&t| cost(row_tiles, n_tiles, resident, t) == best);
                if row_tiles == 1 {
                    if cost(1, n_tiles, resident, MMA_NT) == best {
                        assert_eq!(chosen, MMA_NT, "1×{n_tiles} on {resident}: a tie");
                    }
                } else {
                    assert_eq!(Some(&chosen), tied.max(), "{row_tiles}×{n_tiles}: a tie");
                    assert_eq!(block_tiles(row_tiles, n_tiles, resident, false), MMA_NT);
                }
            }
        }
    }
    // The H200 (132 multiprocessors × 2 blocks). One row tile: the DeltaNet input projection
    // (12,352 outputs), the attention q/k/v (9,216) and the lm_head (151,936, many waves: 4).
    assert_eq!(block_tiles(1, 1544, 264, true), 6);
    assert_eq!(block_tiles(1, 1152, 264, true), 5);
    assert_eq!(block_tiles(1, 18992, 264, true), MMA_NT);
    // 64 rows: the lm_head and the q/k/v at 6, the 2,048-output projections at 4.
    assert_eq!(block_tiles(4, 18992, 264, true), 6);
    assert_eq!(block_tiles(4, 1152, 264, true), 6);
    assert_eq!(block_tiles(4, 256, 264, true), MMA_NT);
}

/// `deltanet_recurrence_split` (a head over a cluster of blocks) and `deltanet_recurrence_two`
/// (two blocks a multiprocessor) against `deltanet_recurrence`: the same outputs, final states
/// and rollback snapshots, bit for bit, for windows of one token (a decode step) and of three
/// (drafts verified), from a stored state and from zero.
#[test]
fn deltanet_split_recurrence_gives_the_bits_of_one_block_a_head() {
    let Some((gpu, mut k)) = setup() else { return };
    let (config, dims) = tiny_dims();
    let l = config
        .linear
        .as_ref()
        .expect("the default model has linear layers");
    let mut rng = Rng::fresh();
    let seed = rng.0;
    let (hk, hv, dk, dv) = (
        l.num_key_heads,
        l.num_value_heads,
        l.key_head_dim,
        l.value_head_dim,
    );
    let qkvz_width = hk * (2 * dk + 2 * (hv / hk) * dv);
    let proj_stride = qkvz_width + 2 * hv;
    let lin_stride = (l.conv_kernel - 1) * l.conv_channels() + hv * dk * dv;
    let (sessions, rollback) = (4, 4);
    let multiprocessors = gpu.multiprocessors().unwrap();
    for tokens in [1, 3] {
        // Windows: (session, start): one from zero state.
        let windows = [(2usize, 7i32), (0, 0), (3, 40)];
        let rows = tokens * windows.len();
        assert!(
            super::splits_recurrence(rows, windows.len(), hv, dv, multiprocessors),
            "{tokens}-token windows: the step must split"
        );
        let segs: Vec<i32> = windows
            .iter()
            .enumerate()
            .flat_map(|(w, &(session, start))| {
                [(w * tokens) as i32, tokens as i32, start, session as i32]
            })
            .collect();
        let wide = rng.vec(rows * proj_stride);
        let state0 = rng.vec(sessions * lin_stride);
        let conv_w = rng.vec(l.conv_channels() * l.conv_kernel);
        let (neg_a, dt_bias, norm_w) = (rng.vec(hv), rng.vec(hv), rng.vec(dv));
        let run = |k: &Kernels| {
            let wide = Buf::from_host(&gpu, &wide).unwrap();
            let segs = Buf::from_host(&gpu, &segs).unwrap();
            let conv_w = Buf::from_host(&gpu, &conv_w).unwrap();
            let (neg_a, dt_bias, norm_w) = (
                Buf::from_host(&gpu, &neg_a).unwrap(),
                Buf::from_host(&gpu, &dt_bias).unwrap(),
                Buf::from_host(&gpu, &norm_w).unwrap(),
            );
            let state = Buf::from_host(&gpu, &state0).unwrap();
            let snaps = Buf::<f32>::zeros(&gpu, sessions * (rollback - 1) * lin_stride).unwrap();
            let mixed = Buf::<f32>::zeros(&gpu, rows * l.conv_channels()).unwrap();
            let out = Buf::<f32>::zeros(&gpu, rows * hv * dv).unwrap();
            let launch = DeltaNetLaunch {
                qkvz: wide.at(0),
                ba: wide.at(qkvz_width),
                proj_stride,
                segs: segs.at(0),
                windows: windows.len(),
                rows,
                conv_w: conv_w.at(0),
                neg_a: neg_a.at(0),
                dt_bias: dt_bias.at(0),
                norm_w: norm_w.at(0),
                eps: 1e-6,
                state: state.at(0),
                snaps: snaps.at(0),
                rollback,
                lin_stride,
                layer_off: 0,
                mixed: mixed.at(0),
                out: out.at(0),
            };
            k.deltanet(&gpu, &launch, &dims).unwrap();
            (
                out.read(&gpu, rows * hv * dv).unwrap(),
                state.read(&gpu, sessions * lin_stride).unwrap(),
                snaps
                    .read(&gpu, sessions * (rollback - 1) * lin_stride)
                    .unwrap(),
            )
        };
        k.deltanet_split = true;
        let split = run(&k);
        k.deltanet_split = false;
        k.deltanet_two_blocks = true;
        let two = run(&k);
        k.deltanet_two_blocks = false;
        let whole = run(&k);
        k.deltanet_split = true;
        assert!(split.0.iter().all(|v| v.is_finite()), "seed {seed}");
        for (name, other) in [("split", &split), ("two blocks", &two)] {
            assert!(
                same_bits(&other.0, &whole.0),
                "seed {seed}, {tokens}, {name}: outputs"
            );
            assert!(
                same_bits(&other.1, &whole.1),
                "seed {seed}, {tokens}, {name}: states"
            );
            assert!(
                same_bits(&other.2, &whole.2),
                "seed {seed}, {tokens}, {name}: snapshots"
            );
        }
    }
}

/// `recurrence_kernel` (no device needed): the split where it takes the step, else the
/// two-block kernel for decode steps of one token a window only when asked; drafts verified,
/// prompts, and a prompt chunk among decode windows on the whole kernel.
#[test]
fn recurrence_kernel_takes_decode_steps_to_two_blocks_only_when_asked() {
    use super::{recurrence_kernel, RecurrenceKernel as K};
    // Qwen3-Next's 32 heads of 128 on 132 multiprocessors: (rows, windows) of 4 streams
    // decoding, 64 streams decoding, 64 verifying 3 drafts each, one 128-token prompt, and 63
    // streams decoding beside a 128-token prompt chunk.
    for (two, expect) in [
        (false, [K::Split, K::Whole, K::Whole, K::Whole, K::Whole]),
        (true, [K::Split, K::TwoBlocks, K::Whole, K::Whole, K::Whole]),
    ] {
        for ((rows, windows), want) in [(4, 4), (64, 64), (256, 64), (128, 1), (191, 64)]
            .into_iter()
            .zip(expect)
        {
            assert_eq!(
                recurrence_kernel(true, two, rows, windows, 32, 128, 132),
                want,
                "two blocks {two}: {rows} rows in {windows} windows"
            );
        }
    }
    // The split off: decode steps go to two blocks where asked, else whole.
    assert_eq!(
        recurrence_kernel(false, true, 4, 4, 32, 128, 132),
        K::TwoBlocks
    );
    assert_eq!(
        recurrence_kernel(false, false, 4, 4, 32, 128, 132),
        K::Whole
    );
    assert_eq!(
        recurrence_kernel(false, true, 12, 4, 32, 128, 132),
        K::Whole
    );
}

/// `splits_recurrence` (no device needed): a step splits only with windows of at most
/// LIN_CLUSTER_MAX_TOKENS tokens on average, (window, head) pairs no more than the
/// multiprocessors, and heads whose columns split into whole warps.
#[test]
fn splits_recurrence_takes_steps_of_few_short_windows() {
    use super::{splits_recurrence, LIN_CLUSTER_MAX_TOKENS};
    // Qwen3-Next's 32 heads of 128 on the H200's 132 multiprocessors: 1 to 4 streams decoding,
    // or verifying up to 3 drafts, split; 5 streams, or prompts, do not.
    for windows in 1..=4 {
        assert!(splits_recurrence(windows, windows, 32, 128, 132));
        assert!(splits_recurrence(
            windows * LIN_CLUSTER_MAX_TOKENS,
            windows,
            32,
            128,
            132
        ));
        assert!(!splits_recurrence(
            windows * LIN_CLUSTER_MAX_TOKENS + 1,
            windows,
            32,
            128,
            132
        ));
    }
    assert!(!splits_recurrence(5, 5, 32, 128, 132));
    assert!(!splits_recurrence(128, 1, 32, 128, 132));
    assert!(!splits_recurrence(0, 0, 32, 128, 132));
    // The default model's 8 heads of 64 (16 columns a block: 64 threads); a head of 48 columns
    // would give 12 a block (48 threads: not whole warps).
    assert!(splits_recurrence(1, 1, 8, 64, 132));
    assert!(!splits_recurrence(1, 1, 8, 48, 132));
}

/// `moe_gate_up_tiles` (no device needed): a step of MOE_FIT_MAX_WAVES waves or more at MMA_NT
/// keeps MMA_NT; a smaller one a count of MOE_GATE_UP_TILES that divides the units, whose waves ×
/// n-tiles is least, the most on ties; Qwen3-Next's steps as its doc says.
#[test]
fn moe_gate_up_tiles_runs_a_step_in_the_fewest_waves() {
    use super::{moe_gate_up_tiles, MMA_NT, MOE_FIT_MAX_WAVES, MOE_GATE_UP_TILES};
    let cost = |slots: usize, width: usize, resident: usize, tiles: usize| {
        (slots * (width / 4 / tiles)).div_ceil(resident) * tiles
    };
    let mut fitted = 0;
    for resident in [1, 3, 264] {
        for slots in 1..=90 {
            for width in [16, 48, 64, 512] {
                let chosen = moe_gate_up_tiles(slots, width, resident);
                if slots * (width / 4 / MMA_NT) >= MOE_FIT_MAX_WAVES * resident {
                    assert_eq!(chosen, MMA_NT, "{slots} slots of {width} on {resident}");
                    continue;
                }
                fitted += 1;
                let fits: Vec<usize> = MOE_GATE_UP_TILES
                    .into_iter()
                    .filter(|&t| (width / 4).is_multiple_of(t))
                    .collect();
                let best = fits.iter().map(|&t| cost(slots, width, resident, t)).min();
                let tied = fits
                    .iter()
                    .filter(|&&t| Some(cost(slots, width, resident, t)) == best)
                    .max();
                assert_eq!(
                    Some(&chosen),
                    tied,
                    "{slots} slots of {width} on {resident}"
                );
            }
        }
    }
    assert!(fitted > 100, "the fit was tried on {fitted} steps only");
    assert_eq!(moe_gate_up_tiles(11, 512, 264), 2);
    assert_eq!(moe_gate_up_tiles(81, 512, 264), MMA_NT);
    // A 128-row prompt (216 slots): fitting would take 1 n-tile a block (105 waves × 1 < 27 × 4).
    assert_eq!(moe_gate_up_tiles(216, 512, 264), MMA_NT);
}

/// A normed gate/up's operands for the norm tests: `max_rows` rows of a residual stream whose
/// rows have different scales (as a model's), the norm's weight, bf16 W of 2·width outputs, and
/// room for the normalised rows (`xn`), the products (`y`) and the SwiGLU (`act`).
struct NormOperands {
    x: Buf<f32>,
    norm_w: Buf<f32>,
    w: Buf<u16>,
    xn: Buf<f32>,
    y: Buf<f32>,
    act: Buf<f32>,
}

impl NormOperands {
    fn new(gpu: &Gpu, rng: &mut Rng, max_rows: usize, depth: usize, width: usize) -> Self {
        let x: Vec<f32> = (0..max_rows * depth)
            .map(|i| (1 + i / depth % 7) as f32 * 3.0 * rng.vec(1)[0])
            .collect();
        let norm_w = rng.vec(depth);
        let w: Vec<u16> = bf16_vec(rng, 2 * width * depth, 0.05)
            .iter()
            .map(|v| v.to_bits())
            .collect();
        NormOperands {
            x: Buf::from_host(gpu, &x).unwrap(),
            norm_w: Buf::from_host(gpu, &norm_w).unwrap(),
            w: Buf::from_host(gpu, &w).unwrap(),
            xn: Buf::<f32>::zeros(gpu, max_rows * depth).unwrap(),
            y: Buf::<f32>::zeros(gpu, max_rows * 2 * width).unwrap(),
            act: Buf::<f32>::zeros(gpu, max_rows * width).unwrap(),
        }
    }
}

/// The norm tests' input norm: weight `w`, eps 1e-6, `out` its rows' place where they run apart,
/// none kept.
fn test_norm(w: &Buf<f32>, out: &Buf<f32>, zero_centred: bool) -> super::InputNorm {
    super::InputNorm {
        w: w.at(0),
        eps: 1e-6,
        zero_centred,
        out: out.at(0),
        keep: false,
    }
}

/// What a normed matmul left in its norm's `out` (`after`, filled with NaN before it), where the
/// norm went into a kernel: `rmsnorm_rows`' bits (`normed`) in every element of the first `rows`
/// rows where it keeps them, nothing there where it does not, and nothing past them.
fn assert_norm_rows(
    after: &[f32],
    rows: usize,
    depth: usize,
    normed: &[f32],
    keeps: bool,
    what: &str,
) {
    let (rows_part, past) = after.split_at(rows * depth);
    match keeps {
        true => assert!(same_bits(rows_part, normed), "{what}: the rows kept"),
        false => assert!(rows_part.iter().all(|v| v.is_nan()), "{what}: rows written"),
    }
    assert!(
        past.iter().all(|v| v.is_nan()),
        "{what}: written past the rows"
    );
}

/// The 16-row kernels' norm twins give the bits of `rmsnorm_rows` then the plain kernel, for every
/// 16-row kernel (the plain matmul and the gate/up with its SwiGLU), both kinds of norm, row
/// counts within one row tile and over several, and depths whose shares of the sum of squares
/// are uneven (k not a multiple of NORM_WARPS · 32).
#[test]
fn norm_twins_give_the_bits_of_the_norm_then_the_matmul() {
    let Some(gpu) = open_gpu() else { return };
    let mut k = Kernels::compile_overriding(&gpu, &tiny_dims().1, &[("MMA_NORM_TWINS", 1)])
        .expect("kernels with the norm twins");
    // Every row count into the twin, to check the twins across row tiles too.
    k.norm_in_matmul_max_rows = usize::MAX;
    k.swiglu_in_gate_up = true;
    let gpu = gpu.as_ref();
    let mut rng = Rng::fresh();
    let seed = rng.0;
    let max_rows = 40;
    for (depth, width) in [
        (1024, 96 + 8 * rng.below(40)),
        (2560, 200),
        (64 * (1 + rng.below(50)), 48),
    ] {
        let NormOperands {
            x: xb,
            norm_w: nb,
            w: wb,
            mut xn,
            mut y,
            mut act,
        } = NormOperands::new(gpu, &mut rng, max_rows, depth, width);
        let nan = vec![f32::NAN; max_rows * 2 * width];
        for zero_centred in [false, true] {
            let norm = test_norm(&nb, &xn, zero_centred);
            let kept = super::InputNorm { keep: true, ..norm };
            let xn_nan = vec![f32::NAN; max_rows * depth];
            for rows in [1, 2, 3, 4, 5, 16, 17, 33, max_rows] {
                let m = packed_matmul(xb.at(0), wb.at(0), depth, 2 * width, y.at(0), rows, None);
                let apart_m = Matmul { x: xn.at(0), ..m };
                let what = format!("seed {seed}, depth {depth}, width {width}, rows {rows}, zero-centred {zero_centred}");
                // `rmsnorm_rows` into xn, as the norm runs apart.
                let (x_at, norm_w_at, xn_at) = (xb.at(0), nb.at(0), xn.at(0));
                let norm_apart = |k: &Kernels| {
                    k.rmsnorm(gpu, x_at, norm_w_at, depth, rows, 1e-6, zero_centred, xn_at)
                        .unwrap()
                };
                norm_apart(&k);
                let normed = xn.read(gpu, rows * depth).unwrap();
                // A twin that keeps the normalised rows writes `rmsnorm_rows`' bits to `out`
                // (every row, every element); one that does not writes none.
                let xn_after = |xn: &Buf<f32>, keeps: bool, what: &str| {
                    let after = xn.read(gpu, max_rows * depth).unwrap();
                    assert_norm_rows(&after, rows, depth, &normed, keeps, what);
                };
                for kernel in SIXTEEN_ROW_KERNELS {
                    norm_apart(&k);
                    y.write(gpu, &nan).unwrap();
                    k.matmul_with(gpu, &apart_m, kernel).unwrap();
                    let want = y.read(gpu, rows * 2 * width).unwrap();
                    for (twin_norm, keeps) in [(&norm, false), (&kept, true)] {
                        xn.write(gpu, &xn_nan).unwrap();
                        y.write(gpu, &nan).unwrap();
                        let place = k
                            .matmul_normed_with(gpu, &m, Some(twin_norm), kernel)
                            .unwrap();
                        assert_eq!(
                            place,
                            Some(super::NormPlace::InMatmul),
                            "{what}, {kernel:?}"
                        );
                        let got = y.read(gpu, rows * 2 * width).unwrap();
                        assert!(
                            same_bits(&got, &want),
                            "{what}, {kernel:?}, keep {keeps}: the norm twin's bits differ"
                        );
                        xn_after(&xn, keeps, &format!("{what}, {kernel:?}"));
                    }
                    norm_apart(&k);
                    // The gate/up with its SwiGLU (in the twin, or apart after the narrow kernel).
                    act.write(gpu, &nan[..max_rows * width]).unwrap();
                    k.gate_up_swiglu_with(gpu, &apart_m, act.at(0), None, kernel)
                        .unwrap();
                    let want = act.read(gpu, rows * width).unwrap();
                    for (twin_norm, keeps) in [(&norm, false), (&kept, true)] {
                        xn.write(gpu, &xn_nan).unwrap();
                        act.write(gpu, &nan[..max_rows * width]).unwrap();
                        let (_, place) = k
                            .gate_up_swiglu_with(gpu, &m, act.at(0), Some(twin_norm), kernel)
                            .unwrap();
                        assert_eq!(
                            place,
                            Some(super::NormPlace::InMatmul),
                            "{what}, {kernel:?}"
                        );
                        let got = act.read(gpu, rows * width).unwrap();
                        assert!(
                            same_bits(&got, &want),
                            "{what}, {kernel:?}, keep {keeps}: the SwiGLU norm twin's bits differ"
                        );
                        xn_after(&xn, keeps, &format!("{what}, {kernel:?}, SwiGLU"));
                    }
                }
                norm_apart(&k);
                // Auto: the norm into its kernel up to the bound, apart (into `out`) past it;
                // the same bits either way.
                for bound in [0, 4] {
                    k.norm_in_matmul_max_rows = bound;
                    y.write(gpu, &nan).unwrap();
                    k.matmul_with(gpu, &apart_m, MatmulKernel::Auto).unwrap();
                    let want = y.read(gpu, rows * 2 * width).unwrap();
                    y.write(gpu, &nan).unwrap();
                    xn.write(gpu, &vec![f32::NAN; max_rows * depth]).unwrap();
                    let place = k.normed_matmul(gpu, &m, &norm).unwrap();
                    let got = y.read(gpu, rows * 2 * width).unwrap();
                    assert!(
                        same_bits(&got, &want),
                        "{what}, bound {bound}: Auto's bits differ"
                    );
                    assert_eq!(
                        place == super::NormPlace::InMatmul,
                        rows <= bound,
                        "{what}, bound {bound}: {place:?}"
                    );
                    // Apart, the norm's rows are in `out` (and the runs above read them there).
                    let written = xn.read(gpu, rows * depth).unwrap();
                    norm_apart(&k);
                    if place == super::NormPlace::Apart {
                        let normed = xn.read(gpu, rows * depth).unwrap();
                        assert!(same_bits(&written, &normed), "{what}: the norm apart");
                    }
                }
                k.norm_in_matmul_max_rows = usize::MAX;
            }
        }
    }
}

/// The input norm in the split of x (`split_rows_norm`, [`super::NORM_IN_SPLIT_ENV`]): the
/// tiles unsplit and their k split (blocks of 64 rows, and of 32 up to 32 rows; on compute
/// capability 9.0 the warpgroup split too), a matmul and a gate/up with its SwiGLU (apart after the tiles, in the
/// split's fold), for both kinds of norm and depths with a last chunk in part: the split rows
/// are word for word those of `rmsnorm_rows` then `split_rows`, the outputs the same bits; where
/// the norm's rows are kept, `out` holds `rmsnorm_rows`' bits for every row and nothing past
/// them, and where they are not, nothing. Every buffer a run writes holds NaN before it.
#[test]
fn norm_in_split_gives_the_bits_of_the_norm_then_the_matmul() {
    let Some((gpu, mut k)) = setup() else { return };
    let on_hopper = compile_wgmma_on_hopper(&gpu, &mut k);
    let gpu = gpu.as_ref();
    k.norm_in_split = true;
    k.swiglu_in_gate_up = true;
    k.matmul_split32 = true;
    let default_fold = k.matmul_cluster_fold;
    // (kernel, its split on the warpgroup MMA under this cluster fold: FLASHLANE_MATMUL_WG_FOLD,
    // `split_rows_norm_wg`; or as the walk: FLASHLANE_MATMUL_WALK, `split_rows_norm_walk`).
    // With the walk's consumer warpgroups a block: 3 (FLASHLANE_MATMUL_WALK_OUTS,
    // `matmul_bf16_walk_tma_w3`) with the multiprocessors counted as one, so that these few
    // outputs take them.
    use super::WalkChoice::{Off, Tma};
    let mut kernels = vec![
        (MatmulKernel::Tiled, None, Off, 1),
        (MatmulKernel::TiledSplitK, None, Off, 1),
    ];
    if on_hopper {
        kernels.push((MatmulKernel::WgmmaSplitK, None, Off, 1));
        kernels.push((
            MatmulKernel::TiledSplitK,
            Some(super::ClusterFold::All),
            Off,
            1,
        ));
        kernels.push((
            MatmulKernel::TiledSplitK,
            Some(super::ClusterFold::Off),
            Off,
            1,
        ));
        kernels.push((MatmulKernel::TiledSplitK, None, Tma, 1));
        kernels.push((MatmulKernel::TiledSplitK, None, Tma, 3));
    }
    let multiprocessors = k.multiprocessors;
    let mut rng = Rng::fresh();
    let seed = rng.0;
    // Decode rounds: the norm goes into the split up to NORM_IN_SPLIT_MAX_ROWS.
    let max_rows = super::NORM_IN_SPLIT_MAX_ROWS;
    for (depth, width) in [
        (1024, 96 + 8 * rng.below(40)),
        (64 * (1 + rng.below(50)), 200),
        // A last chunk of 16, 32 or 48 elements (zeros past k in the sum and the split).
        (16 * (1 + rng.below(3)) + 64 * (1 + rng.below(40)), 64),
    ] {
        let NormOperands {
            x: xb,
            norm_w: nb,
            w: wb,
            mut xn,
            mut y,
            mut act,
        } = NormOperands::new(gpu, &mut rng, max_rows, depth, width);
        let split_words = super::split_row_words(depth);
        let mut xs = Buf::<u32>::zeros(gpu, max_rows * split_words).unwrap();
        let mut partials =
            Buf::<f32>::zeros(gpu, super::MATMUL_RESIDUES * max_rows * 2 * width).unwrap();
        let nan = vec![f32::NAN; max_rows * 2 * width];
        let nan_partials = vec![f32::NAN; super::MATMUL_RESIDUES * max_rows * 2 * width];
        let xn_nan = vec![f32::NAN; max_rows * depth];
        // Two bf16 NaNs a word.
        let xs_nan = vec![u32::MAX; max_rows * split_words];
        for zero_centred in [false, true] {
            let norm = test_norm(&nb, &xn, zero_centred);
            let kept = super::InputNorm { keep: true, ..norm };
            for rows in [17, 32, 33, 48, 64] {
                let m = Matmul {
                    x_split: xs.at(0),
                    partials: partials.at(0),
                    ..packed_matmul(xb.at(0), wb.at(0), depth, 2 * width, y.at(0), rows, None)
                };
                let apart_m = Matmul { x: xn.at(0), ..m };
                let what = format!(
                    "seed {seed}, depth {depth}, width {width}, rows {rows}, zero-centred {zero_centred}"
                );
                let (x_at, norm_w_at, xn_at) = (xb.at(0), nb.at(0), xn.at(0));
                let norm_apart = |k: &Kernels| {
                    k.rmsnorm(gpu, x_at, norm_w_at, depth, rows, 1e-6, zero_centred, xn_at)
                        .unwrap()
                };
                norm_apart(&k);
                let normed = xn.read(gpu, rows * depth).unwrap();
                // The tiles' split's products and SwiGLU, which the warpgroup fold must give.
                let (mut tiles_split, mut tiles_swiglu) = (None, None);
                for &(kernel, wg_fold, walk, warpgroups) in &kernels {
                    // Every split on the warpgroup MMA, folded in clusters or not, or as the
                    // walk, where asked.
                    k.matmul_wg_fold = wg_fold.is_some();
                    k.matmul_cluster_fold = wg_fold.unwrap_or(default_fold);
                    k.matmul_walk.choice = walk;
                    k.matmul_walk.warpgroups = warpgroups;
                    k.multiprocessors = if warpgroups > 1 { 1 } else { multiprocessors };
                    let other = wg_fold.is_some() || walk != Off;
                    // The norm apart, then the kernel: its split rows and products.
                    norm_apart(&k);
                    xs.write(gpu, &xs_nan).unwrap();
                    y.write(gpu, &nan).unwrap();
                    partials.write(gpu, &nan_partials).unwrap();
                    k.matmul_with(gpu, &apart_m, kernel).unwrap();
                    let want_xs = xs.read(gpu, rows * split_words).unwrap();
                    let want = y.read(gpu, rows * 2 * width).unwrap();
                    match (kernel, other, &tiles_split) {
                        (MatmulKernel::TiledSplitK, false, _) => tiles_split = Some(want.clone()),
                        (_, true, Some(tiles)) => assert!(
                            same_bits(&want, tiles),
                            "{what}: the warpgroup fold's or the walk's ({walk:?}) products differ \
                             from the tiles' split"
                        ),
                        _ => {}
                    }
                    for (in_split, keeps) in [(&norm, false), (&kept, true)] {
                        let what = format!(
                            "{what}, {kernel:?} (on wgmma under {wg_fold:?}, walk {walk:?}), keep {keeps}"
                        );
                        xn.write(gpu, &xn_nan).unwrap();
                        xs.write(gpu, &xs_nan).unwrap();
                        y.write(gpu, &nan).unwrap();
                        partials.write(gpu, &nan_partials).unwrap();
                        let place = k
                            .matmul_normed_with(gpu, &m, Some(in_split), kernel)
                            .unwrap();
                        assert_eq!(place, Some(super::NormPlace::InSplit), "{what}");
                        let got_xs = xs.read(gpu, rows * split_words).unwrap();
                        assert!(want_xs == got_xs, "{what}: the split rows differ");
                        let got = y.read(gpu, rows * 2 * width).unwrap();
                        assert!(same_bits(&got, &want), "{what}: the products differ");
                        let after = xn.read(gpu, max_rows * depth).unwrap();
                        assert_norm_rows(&after, rows, depth, &normed, keeps, &what);
                    }
                    // The gate/up with its SwiGLU: apart after the unsplit tiles, in the fold
                    // of the split.
                    norm_apart(&k);
                    act.write(gpu, &nan[..max_rows * width]).unwrap();
                    y.write(gpu, &nan).unwrap();
                    partials.write(gpu, &nan_partials).unwrap();
                    k.gate_up_swiglu_with(gpu, &apart_m, act.at(0), None, kernel)
                        .unwrap();
                    let want = act.read(gpu, rows * width).unwrap();
                    match (kernel, other, &tiles_swiglu) {
                        (MatmulKernel::TiledSplitK, false, _) => tiles_swiglu = Some(want.clone()),
                        (_, true, Some(tiles)) => assert!(
                            same_bits(&want, tiles),
                            "{what}: the warpgroup fold's or the walk's ({walk:?}) SwiGLU differs \
                             from the tiles' split's"
                        ),
                        _ => {}
                    }
                    for (in_split, keeps) in [(&norm, false), (&kept, true)] {
                        let what = format!(
                            "{what}, {kernel:?} (on wgmma under {wg_fold:?}, walk {walk:?}), keep {keeps}, SwiGLU"
                        );
                        xn.write(gpu, &xn_nan).unwrap();
                        xs.write(gpu, &xs_nan).unwrap();
                        act.write(gpu, &nan[..max_rows * width]).unwrap();
                        y.write(gpu, &nan).unwrap();
                        partials.write(gpu, &nan_partials).unwrap();
                        let (_, place) = k
                            .gate_up_swiglu_with(gpu, &m, act.at(0), Some(in_split), kernel)
                            .unwrap();
                        assert_eq!(place, Some(super::NormPlace::InSplit), "{what}");
                        let got = act.read(gpu, rows * width).unwrap();
                        assert!(same_bits(&got, &want), "{what}: the SwiGLU differs");
                        let after = xn.read(gpu, max_rows * depth).unwrap();
                        assert_norm_rows(&after, rows, depth, &normed, keeps, &what);
                    }
                }
            }
        }
    }
    // The rounds of 33–64 rows took the warpgroup fold on Hopper (17 and 32 rows take the
    // 32-row blocks), and every round the walk: the comparisons with the tiles' split checked
    // them.
    let on_wgmma = k
        .wg_split_launches
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        !on_hopper || on_wgmma > 0,
        "seed {seed}: the warpgroup fold never ran"
    );
    let walked = k.walk_launches.load(std::sync::atomic::Ordering::Relaxed);
    assert!(!on_hopper || walked > 0, "seed {seed}: the walk never ran");
    let wide = k
        .walk_wide_launches
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        !on_hopper || wide > 0,
        "seed {seed}: the walk with several warpgroups never ran"
    );
}

/// The swapped chain (`matmul_bf16_swap*`, [`super::MATMUL_SWAP_ROWS_ENV`]) gives the 16-row
/// kernels' bits: every row count up to MMA_COLS, the narrow, wide, tiled and deep plans (one and
/// two output tiles a block), plain and accumulating, with the input norm in the kernel (its rows
/// kept), and a gate/up with its SwiGLU (plain and normed); output counts not a multiple of 16
/// and depths of a partial last chunk; and block-scaled FP8 weights.
#[test]
fn swapped_chain_gives_the_bits_of_the_16_row_kernels() {
    let Some(gpu) = open_gpu() else { return };
    let gpu = gpu.as_ref();
    let mut k = Kernels::compile_overriding(gpu, &tiny_dims().1, &[("MMA_NORM_TWINS", 1)])
        .expect("kernels with the norm twins");
    k.norm_in_matmul_max_rows = usize::MAX;
    let mut rng = Rng::fresh();
    let seed = rng.0;
    let max_rows = super::MMA_COLS;
    for (depth, n_out) in [
        (1024, 200 + rng.below(100)),
        // A last chunk of 16, 32 or 48 elements.
        (16 * (1 + rng.below(3)) + 64 * (1 + rng.below(40)), 24),
        (2048, 1153),
    ] {
        // The residual stream: rows of different scales.
        let x: Vec<f32> = (0..max_rows * depth)
            .map(|i| (1 + i / depth % 5) as f32 * 2.0 * rng.vec(1)[0])
            .collect();
        let w: Vec<u16> = bf16_vec(&mut rng, n_out * depth, 0.05)
            .iter()
            .map(|v| v.to_bits())
            .collect();
        let y0 = rng.vec(max_rows * n_out);
        let (xb, wb, nb) = (
            Buf::from_host(gpu, &x).unwrap(),
            Buf::from_host(gpu, &w).unwrap(),
            Buf::from_host(gpu, &rng.vec(depth)).unwrap(),
        );
        let mut y = Buf::<f32>::zeros(gpu, max_rows * n_out).unwrap();
        let mut xn = Buf::<f32>::zeros(gpu, max_rows * depth).unwrap();
        let xn_nan = vec![f32::NAN; max_rows * depth];
        for rows in 1..=max_rows {
            for kernel in [
                MatmulKernel::Narrow,
                MatmulKernel::Wide,
                MatmulKernel::Tiles(6),
                MatmulKernel::Deep(3),
            ] {
                let what =
                    format!("seed {seed}, depth {depth}, {n_out} outputs, {rows} rows, {kernel:?}");
                for accumulate in [false, true] {
                    let m = Matmul {
                        accumulate,
                        ..packed_matmul(xb.at(0), wb.at(0), depth, n_out, y.at(0), rows, None)
                    };
                    let what = format!("{what}, accumulate {accumulate}");
                    swapped_gives_the_16_row_bits(gpu, &mut k, &m, kernel, &mut y, &y0, &what);
                }
                let m = packed_matmul(xb.at(0), wb.at(0), depth, n_out, y.at(0), rows, None);
                let norm = super::InputNorm {
                    w: nb.at(0),
                    eps: 1e-6,
                    zero_centred: true,
                    out: xn.at(0),
                    keep: true,
                };
                let mut run = |swap_rows: usize| {
                    k.matmul_swap_rows = super::SwapRows::all(swap_rows);
                    y.write(gpu, &vec![f32::NAN; max_rows * n_out]).unwrap();
                    xn.write(gpu, &xn_nan).unwrap();
                    let place = k.matmul_normed_with(gpu, &m, Some(&norm), kernel).unwrap();
                    assert_eq!(place, Some(super::NormPlace::InMatmul), "{what}");
                    (
                        y.read(gpu, max_rows * n_out).unwrap(),
                        xn.read(gpu, max_rows * depth).unwrap(),
                    )
                };
                let (want, got) = (run(0), run(max_rows));
                assert!(
                    want.0[..rows * n_out].iter().all(|v| v.is_finite()),
                    "{what}: the 16-row twin left outputs unwritten"
                );
                assert!(
                    same_bits(&got.0, &want.0),
                    "{what}: the swapped norm twin's bits differ"
                );
                assert!(
                    same_bits(&got.1, &want.1),
                    "{what}: the swapped norm twin's kept rows differ"
                );
                assert!(ran_swapped(&k), "{what}: the swapped twin did not run");
                // The same weights as a gate/up of width n_out / 2 with its SwiGLU, plain and
                // with the norm.
                let width = n_out / 2;
                let gu = packed_matmul(xb.at(0), wb.at(0), depth, 2 * width, y.at(0), rows, None);
                let mut act = Buf::<f32>::zeros(gpu, max_rows * width).unwrap();
                for with_norm in [false, true] {
                    // The units, whether the swapped chain ran, and where the SwiGLU went.
                    let mut run = |swap_rows: usize| {
                        k.matmul_swap_rows = super::SwapRows::all(swap_rows);
                        act.write(gpu, &vec![f32::NAN; max_rows * width]).unwrap();
                        let norm = with_norm.then_some(&norm);
                        let (place, _) = k
                            .gate_up_swiglu_with(gpu, &gu, act.at(0), norm, kernel)
                            .unwrap();
                        (
                            act.read(gpu, max_rows * width).unwrap(),
                            ran_swapped(&k),
                            place,
                        )
                    };
                    let (want, _, _) = run(0);
                    assert!(
                        want[..rows * width].iter().all(|v| v.is_finite()),
                        "{what}, norm {with_norm}: the 16-row SwiGLU left units unwritten"
                    );
                    let (got, swapped, place) = run(max_rows);
                    // The SwiGLU in the swapped gate/up (`matmul_bf16_swiglu_swap_t2`, `_norm_t2`),
                    // but for the narrow plan's, which has no twin and runs it apart.
                    assert!(
                        matches!(kernel, MatmulKernel::Narrow)
                            || matches!(place, super::SwigluPlace::InGateUp { .. }),
                        "{what}, norm {with_norm}: the SwiGLU ran {place:?}"
                    );
                    assert!(
                        same_bits(&got, &want),
                        "{what}, norm {with_norm}: the swapped SwiGLU's bits differ"
                    );
                    assert!(swapped, "{what}: the swapped gate/up did not run");
                }
            }
        }
    }
    // FP8 weights (`matmul_fp8_swap`, `_swap_t2`) against the FP8 16-row kernels: blocks of
    // 128 × 128 and small ones, several to an output tile.
    for (br, bc, n_out, depth) in [
        (128, 128, 384, 1024),
        (8, 64, 200, 64 * (1 + rng.below(30))),
    ] {
        let (q, scales, _) = fp8_weights(&mut rng, n_out, depth, br, bc);
        let x = rng.vec(max_rows * depth);
        let y0 = rng.vec(max_rows * n_out);
        let (qb, sb, xb) = (
            Buf::from_host(gpu, &q).unwrap(),
            Buf::from_host(gpu, &scales).unwrap(),
            Buf::from_host(gpu, &x).unwrap(),
        );
        let mut y = Buf::<f32>::zeros(gpu, max_rows * n_out).unwrap();
        for rows in 1..=max_rows {
            for kernel in [MatmulKernel::Narrow, MatmulKernel::Wide] {
                for accumulate in [false, true] {
                    let what = format!(
                        "seed {seed}, FP8 {br}×{bc}, depth {depth}, {n_out} outputs, {rows} rows, \
                         {kernel:?}, accumulate {accumulate}"
                    );
                    let fp8 = Fp8Scales {
                        scales: sb.at(0),
                        block_rows: br,
                        block_cols: bc,
                    };
                    let m = Matmul {
                        accumulate,
                        ..packed_matmul(xb.at(0), qb.at(0), depth, n_out, y.at(0), rows, Some(fp8))
                    };
                    swapped_gives_the_16_row_bits(gpu, &mut k, &m, kernel, &mut y, &y0, &what);
                }
            }
        }
    }
}

/// `m` (its `y` in `y`, which starts from `y0` each run) through `kernel` without and then with
/// the swapped chain: the same bits, and the swapped chain ran.
fn swapped_gives_the_16_row_bits(
    gpu: &Gpu,
    k: &mut Kernels,
    m: &Matmul,
    kernel: MatmulKernel,
    y: &mut Buf<f32>,
    y0: &[f32],
    what: &str,
) {
    // The outputs and whether anything ran on the swapped chain.
    let mut run = |m: &Matmul, swap_rows: usize| {
        k.matmul_swap_rows = super::SwapRows::all(swap_rows);
        y.write(gpu, y0).unwrap();
        k.matmul_with(gpu, m, kernel).unwrap();
        (y.read(gpu, y0.len()).unwrap(), ran_swapped(k))
    };
    let (want, _) = run(m, 0);
    let (got, swapped) = run(m, super::MMA_COLS);
    assert!(
        same_bits(&got, &want),
        "{what}: the swapped chain's bits differ"
    );
    assert!(swapped, "{what}: the swapped chain did not run");
    // x's rows gathered (`row_index`: in reverse order).
    if m.row_index == 0 && m.rows > 1 {
        let order: Vec<i32> = (0..m.rows as i32).rev().collect();
        let index = Buf::from_host(gpu, &order).unwrap();
        let gathered = Matmul {
            row_index: index.at(0),
            ..*m
        };
        let (want, _) = run(&gathered, 0);
        let (got, swapped) = run(&gathered, super::MMA_COLS);
        assert!(
            same_bits(&got, &want) && swapped,
            "{what}: the swapped chain's bits differ, rows gathered"
        );
    }
}

/// Whether `k` launched anything on the swapped chain since the last call (and resets the count).
fn ran_swapped(k: &Kernels) -> bool {
    k.swapped_launches
        .swap(0, std::sync::atomic::Ordering::Relaxed)
        > 0
}

/// `swap_tiles` (no device needed): one output tile a block for the narrow and the deep plans,
/// two for the wide ones.
#[test]
fn swapped_blocks_hold_one_tile_for_narrow_and_deep_plans() {
    use super::swap_tiles;
    assert_eq!(swap_tiles(1, false), 1);
    assert_eq!(swap_tiles(3, true), 1);
    assert_eq!(swap_tiles(4, true), 1);
    assert_eq!(swap_tiles(3, false), 2);
    assert_eq!(swap_tiles(6, false), 2);
}

/// `swaps` (no device needed): within the bound and one MMA's B, never past either.
#[test]
fn swaps_within_the_bound_and_an_mma_s_rows() {
    use super::{swaps, MMA_COLS};
    assert!(!swaps(1, 0));
    assert!(swaps(1, 1));
    assert!(!swaps(2, 1));
    assert!(swaps(MMA_COLS, MMA_COLS));
    assert!(!swaps(MMA_COLS + 1, usize::MAX));
    assert!(swaps(MMA_COLS, usize::MAX));
}

/// A norm twin's thread loads a row of the model's width in one batch (`tile_norms`): enough
/// loads for every element, whole rounds of its share-warps, and no round more than that.
#[test]
fn norm_twins_load_a_row_of_the_hidden_width_at_once() {
    let threads = super::MMA_WARPS as usize * 32;
    let share_warps = (super::NORM_WARPS / super::MMA_WARPS) as usize;
    for hidden in (16..=8192).step_by(16) {
        let loads = super::norm_loads(hidden);
        assert!(loads * threads >= hidden, "hidden {hidden}: {loads} loads");
        assert!(
            loads.is_multiple_of(share_warps),
            "hidden {hidden}: {loads} loads"
        );
        assert!(
            loads == share_warps || (loads - share_warps) * threads < hidden,
            "hidden {hidden}: {loads} loads, a round more than a row needs"
        );
    }
    // Qwen3-0.6B, the A3B slice, Qwen3-4B, -8B.
    assert_eq!(super::norm_loads(1024), 4);
    assert_eq!(super::norm_loads(2048), 8);
    assert_eq!(super::norm_loads(2560), 12);
    assert_eq!(super::norm_loads(4096), 16);
}

/// Where a matmul's input norm runs: in a bf16 16-row kernel's twin up to the bound; in the
/// split of x before the bf16 tiles (unsplit or split, on the mma.sync tiles or the warpgroup
/// split) where the norm in the split is on; apart on the warpgroup MMA, FP8, past the bound,
/// and on the tiles where the norm in the split is off.
#[test]
fn the_norm_goes_into_the_row_tile_kernels_of_few_rows_or_the_split_before_the_tiles() {
    use super::{norm_place, MatmulLaunch, NormPlace};
    let row_tiles = MatmulLaunch::RowTiles {
        tiles: 4,
        deep: true,
    };
    let max = 4;
    for in_split in [false, true] {
        assert_eq!(
            norm_place(row_tiles, false, 1, max, in_split),
            NormPlace::InMatmul
        );
        assert_eq!(
            norm_place(row_tiles, false, max, max, in_split),
            NormPlace::InMatmul
        );
        for apart in [
            norm_place(row_tiles, false, max + 1, max, in_split),
            norm_place(row_tiles, true, 1, max, in_split),
            norm_place(row_tiles, false, 1, 0, in_split),
            norm_place(row_tiles, false, 0, 0, in_split),
            norm_place(MatmulLaunch::Wgmma, false, 1, max, in_split),
            norm_place(MatmulLaunch::WgmmaSwapped, false, 1, max, in_split),
            norm_place(MatmulLaunch::WgmmaSplitK, true, 24, max, in_split),
        ] {
            assert_eq!(apart, NormPlace::Apart);
        }
        for tiles in [
            MatmulLaunch::Tiled { split_k: false },
            MatmulLaunch::Tiled { split_k: true },
            MatmulLaunch::WgmmaSplitK,
        ] {
            let want = match in_split {
                true => NormPlace::InSplit,
                false => NormPlace::Apart,
            };
            assert_eq!(norm_place(tiles, false, 64, max, in_split), want);
            // A prompt's rows: apart.
            assert_eq!(
                norm_place(tiles, false, 65, max, in_split),
                NormPlace::Apart
            );
        }
    }
}

#[test]
fn rmsnorm_matches_backend_cpu_in_both_kinds() {
    let Some((gpu, k)) = setup() else { return };
    let mut rng = Rng::fresh();
    let seed = rng.0;
    let (n, rows) = (1 + rng.below(700), 1 + rng.below(40));
    let x: Vec<f32> = rng.vec(rows * n).iter().map(|v| 4.0 * v).collect();
    let w = rng.vec(n);
    let (xb, wb) = (
        Buf::from_host(&gpu, &x).unwrap(),
        Buf::from_host(&gpu, &w).unwrap(),
    );
    let out = Buf::<f32>::zeros(&gpu, rows * n).unwrap();
    for (kind, zero_centred) in [(NormKind::Plain, false), (NormKind::ZeroCentred, true)] {
        let mut want = vec![0f32; rows * n];
        rmsnorm(&x, &w, 1e-6, kind, &mut want);
        k.rmsnorm(
            &gpu,
            xb.at(0),
            wb.at(0),
            n,
            rows,
            1e-6,
            zero_centred,
            out.at(0),
        )
        .unwrap();
        let got = out.read(&gpu, rows * n).unwrap();
        let d = relative_diff(&got, &want);
        assert!(d <= TOLERANCE, "seed {seed} {kind:?}: relative diff {d}");
        // A row alone: the bits it has among the others.
        k.rmsnorm(
            &gpu,
            xb.at(0) + f32_bytes((rows - 1) * n),
            wb.at(0),
            n,
            1,
            1e-6,
            zero_centred,
            out.at(0),
        )
        .unwrap();
        let alone = out.read(&gpu, n).unwrap();
        assert!(
            same_bits(&alone, &got[(rows - 1) * n..]),
            "seed {seed} {kind:?}: a row alone differs"
        );
    }
}

#[test]
fn argmax_chooses_as_lanes_greedy_sampling() {
    let Some((gpu, k)) = setup() else { return };
    let mut rng = Rng::fresh();
    let seed = rng.0;
    // Rows shorter than the blocks a row is split over, and Qwen3's vocabulary.
    for n in [
        1 + rng.below(9000),
        1 + rng.below(8),
        151_936 - rng.below(100),
    ] {
        argmax_case(&gpu, &k, &mut rng, seed, n);
    }
}

fn argmax_case(gpu: &Gpu, k: &Kernels, rng: &mut Rng, seed: u64, n: usize) {
    // Few distinct values, so ties are common; NaN and infinities sprinkled in.
    let mut rows: Vec<Vec<f32>> = (0..6)
        .map(|_| (0..n).map(|_| (rng.below(7) as f32) - 3.0).collect())
        .collect();
    for row in rows.iter_mut() {
        for _ in 0..3 {
            let i = rng.below(n as u64);
            row[i] = [f32::NAN, f32::NEG_INFINITY, 2.5][rng.below(3)];
        }
    }
    rows[1][rng.below(n as u64)] = f32::INFINITY;
    rows[2].iter_mut().for_each(|v| *v = f32::NAN);
    let flat: Vec<f32> = rows.concat();
    let logits = Buf::from_host(gpu, &flat).unwrap();
    let out = Buf::<i32>::zeros(gpu, rows.len()).unwrap();
    for none in [0, -1] {
        k.argmax(gpu, logits.at(0), rows.len(), n, out.at(0), none)
            .unwrap();
        let got = out.read(gpu, rows.len()).unwrap();
        for (r, row) in rows.iter().enumerate() {
            let want = lane::sampling::argmax(row).map_or(none, |id| id as i32);
            assert_eq!(got[r], want, "seed {seed} n {n} row {r} (none = {none})");
        }
    }
}

/// `draw.cu`'s definition on the host: the candidates, in draw order (heaviest first, lowest id
/// first among equals), with their fixed-point weights. Its `exp` may differ from the GPU's
/// `expf` by an ulp, so a draw is held to it within a hair of its mass.
fn draw_reference(row: &[f32], ask: &lane::DrawAsk) -> Vec<(u32, u64)> {
    let n = row.len();
    let max = row
        .iter()
        .filter(|v| !v.is_nan())
        .fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    let key = |l: f32| {
        let b = l.to_bits();
        if b & 0x8000_0000 != 0 {
            !b
        } else {
            b | 0x8000_0000
        }
    };
    let mut c: Vec<(u64, u32, u64, f32)> = row
        .iter()
        .enumerate()
        .filter(|(_, l)| !l.is_nan())
        .map(|(i, &l)| {
            let x = ((l - max) / ask.temperature).exp();
            let r = (u64::from(key(l)) << 24) | (n - 1 - i) as u64;
            (r, i as u32, (x * 2f32.powi(44)) as u64, x)
        })
        .filter(|c| c.2 > 0)
        .collect();
    c.sort_by_key(|c| std::cmp::Reverse(c.0));
    if ask.top_k > 0 && c.len() > ask.top_k as usize {
        c.truncate(ask.top_k as usize);
    }
    if ask.top_p < 1.0 {
        let total: u64 = c.iter().map(|c| c.2).sum();
        let target = ((f64::from(ask.top_p) * total as f64).ceil() as u64).clamp(1, total);
        let mut acc = 0;
        let keep = c
            .iter()
            .position(|c| {
                acc += c.2;
                acc >= target
            })
            .map_or(c.len(), |p| p + 1);
        c.truncate(keep);
    }
    c.retain(|c| c.3 >= ask.min_p);
    c.into_iter().map(|c| (c.1, c.2)).collect()
}

/// Draws of `asks` (one a row of `rows`, each at its row, with its uniform 0) on the GPU.
fn gpu_draws(gpu: &Gpu, k: &Kernels, rows: &[Vec<f32>], asks: &[lane::DrawAsk]) -> Vec<i32> {
    let n = rows[0].len();
    let logits = Buf::from_host(gpu, &rows.concat()).unwrap();
    let ints: Vec<i32> = asks
        .iter()
        .enumerate()
        .flat_map(|(r, a)| crate::forward::draw_ask(r, a, a.uniform(0)))
        .collect();
    let asks_buf = Buf::from_host(gpu, &ints).unwrap();
    let out = Buf::<i32>::zeros(gpu, rows.len()).unwrap();
    k.draw(gpu, logits.at(0), n, asks_buf.at(0), asks.len(), out.at(0))
        .unwrap();
    out.read(gpu, rows.len()).unwrap()
}

#[test]
fn draws_follow_their_definition_and_ignore_the_batch() {
    let Some((gpu, k)) = setup() else { return };
    let mut rng = Rng::fresh();
    let seed = rng.0;
    let ask = |temperature: f32, top_k: u32, top_p: f32, min_p: f32, seed: u64| lane::DrawAsk {
        temperature,
        top_k,
        top_p,
        min_p,
        generator: lane::sampling::Rng::new(seed),
    };
    for n in [151_936 - rng.below(100), 16 + rng.below(3000)] {
        // Logits as a model's: a few strong tokens over a broad floor; NaN and −∞ sprinkled in.
        let mut rows: Vec<Vec<f32>> = (0..12)
            .map(|_| {
                let mut row: Vec<f32> = rng.vec(n).iter().map(|v| 4.0 * v).collect();
                for _ in 0..8 {
                    row[rng.below(n as u64)] = 8.0 + 6.0 * rng.vec(1)[0];
                }
                row[rng.below(n as u64)] = f32::NAN;
                row[rng.below(n as u64)] = f32::NEG_INFINITY;
                row
            })
            .collect();
        let settings = [
            (1.0, 0, 1.0, 0.0),
            (0.6, 20, 0.95, 0.0),
            (0.7, 0, 0.8, 0.0),
            (1.3, 50, 1.0, 0.02),
            (0.2, 0, 1.0, 0.0),
        ];
        let asks: Vec<lane::DrawAsk> = (0..rows.len())
            .map(|r| {
                let (t, top_k, top_p, min_p) = settings[r % settings.len()];
                ask(t, top_k, top_p, min_p, rng.next())
            })
            .collect();
        let got = gpu_draws(&gpu, &k, &rows, &asks);
        for (r, (row, a)) in rows.iter().zip(&asks).enumerate() {
            let cands = draw_reference(row, a);
            let total: u64 = cands.iter().map(|c| c.1).sum();
            let at = cands
                .iter()
                .position(|c| c.0 as i32 == got[r])
                .unwrap_or_else(|| panic!("seed {seed} n {n} row {r}: {} is no candidate", got[r]));
            let before: u64 = cands[..at].iter().map(|c| c.1).sum();
            let goal = a.uniform(0) * total as f64;
            let slack = total as f64 * 1e-5;
            assert!(
                goal + slack >= before as f64 && goal - slack < (before + cands[at].1) as f64,
                "seed {seed} n {n} row {r} ({a:?}): drew {} at mass {before}..{} of {total}, goal {goal}",
                got[r],
                before + cands[at].1
            );
        }
        // The same rows in another order, each alone: the same tokens.
        let order: Vec<usize> = (0..rows.len()).rev().collect();
        let shuffled: Vec<Vec<f32>> = order.iter().map(|&r| rows[r].clone()).collect();
        let shuffled_asks: Vec<lane::DrawAsk> = order.iter().map(|&r| asks[r]).collect();
        let again = gpu_draws(&gpu, &k, &shuffled, &shuffled_asks);
        for (j, &r) in order.iter().enumerate() {
            assert_eq!(
                again[j], got[r],
                "seed {seed} n {n}: row {r} in another batch"
            );
            let alone = gpu_draws(&gpu, &k, &rows[r..r + 1], &asks[r..r + 1]);
            assert_eq!(alone[0], got[r], "seed {seed} n {n}: row {r} alone");
        }
        // Exact cases: equal logits draw by id; top-k 1 is the greedy token; nothing finite: -1.
        rows[0].iter_mut().for_each(|v| *v = 0.5);
        rows[1][rng.below(n as u64)] = 30.0;
        rows[2].iter_mut().for_each(|v| *v = f32::NAN);
        let exact = [
            ask(1.0, 0, 1.0, 0.0, rng.next()),
            ask(0.9, 1, 1.0, 0.0, rng.next()),
            ask(1.0, 0, 1.0, 0.0, rng.next()),
        ];
        let got = gpu_draws(&gpu, &k, &rows[..3], &exact);
        // n equal weights: the draw of u is the token at ⌊u·n⌋ (ids in order among equals).
        let at = (exact[0].uniform(0) * n as f64) as i32;
        assert_eq!(got[0], at, "seed {seed} n {n}: equal logits");
        let greedy = lane::sampling::argmax(&rows[1]).unwrap() as i32;
        assert_eq!(got[1], greedy, "seed {seed} n {n}: top-k 1");
        assert_eq!(got[2], -1, "seed {seed} n {n}: no finite logit");
    }
}

/// The DeltaNet stage fits the shared memory a block gets unasked for every head size the host
/// takes (no device needed): 16 tokens at Qwen3-Next's 128 and 128, fewer for wider heads.
#[test]
fn deltanet_stages_fit_the_shared_memory_of_any_head() {
    assert_eq!(lin_stage(128, 128), LIN_STAGE_MAX);
    assert_eq!(lin_stage(64, 64), LIN_STAGE_MAX);
    // ptxas (tools/cuda_check) reported the kernel compiled with these stages at 33,600 bytes of
    // shared memory for 128 / 128 (16 tokens): the stage arrays' 4 × stage × (2·(dk + LIN_SPLIT)
    // + 2·dv + 5) bytes (q and k padded), up to 4 of alignment (none here; before the padding
    // 33,088, and 46,384 for 128 / 256 at 15 tokens, 45,280 for 256 / 256 at 11).
    assert_eq!(lin_stage(128, 256), 15);
    assert_eq!(lin_stage(256, 256), 11);
    for dk in (4..=512).step_by(4) {
        for dv in (8..=256).step_by(8) {
            let stage = lin_stage(dk, dv);
            assert!((1..=LIN_STAGE_MAX).contains(&stage), "{dk} {dv}: {stage}");
            assert!(
                stage * 4 * (2 * (dk + super::LIN_SPLIT) + 2 * dv + 5) + 4 <= BLOCK_SHARED_UNASKED,
                "heads of {dk} and {dv}: a stage of {stage}"
            );
        }
    }
}

/// Sizes the kernels cannot hold are refused at load with the reason, before any compile (no
/// device needed): heads of 64 (flashlane-tiny) and 256 (Qwen3-Next) fit, 512 do not; every head
/// layout of Qwen3 and Qwen3-Next fits; query heads that KV heads do not divide are refused.
#[test]
fn dims_take_every_head_layout_and_refuse_what_the_kernels_cannot_hold() {
    let dir =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/flashlane-tiny");
    let mut config = Config::from_dir(&dir).expect("config");
    assert!(Dims::of(&config, KvDtype::Bf16).is_ok());
    config.head_dim = 256;
    assert!(
        Dims::of(&config, KvDtype::Bf16).is_ok(),
        "Qwen3-Next's heads of 256"
    );
    config.head_dim = 512;
    match Dims::of(&config, KvDtype::Bf16) {
        Err(CudaError::Unsupported(why)) => assert!(why.contains("head_dim 512"), "{why}"),
        other => panic!("head_dim 512 accepted: {:?}", other.map(|_| ())),
    }
    // Qwen3 0.6B to 32B and Qwen3-Next: (query heads, KV heads, head_dim).
    for (heads, kv_heads, hd) in [
        (16, 8, 128),
        (32, 8, 128),
        (40, 8, 128),
        (64, 8, 128),
        (16, 2, 256),
        (64, 4, 64),
        (8, 1, 64),
    ] {
        config.num_heads = heads;
        config.num_kv_heads = kv_heads;
        config.head_dim = hd;
        config.rotary_dim = hd / 4;
        assert!(
            Dims::of(&config, KvDtype::Bf16).is_ok(),
            "{heads} heads over {kv_heads} of {hd}"
        );
    }
    config.num_heads = 30;
    config.num_kv_heads = 4;
    config.head_dim = 64;
    match Dims::of(&config, KvDtype::Bf16) {
        Err(CudaError::Unsupported(why)) => assert!(why.contains("30 query heads over 4"), "{why}"),
        other => panic!("30 heads over 4 accepted: {:?}", other.map(|_| ())),
    }
}

/// `attention_gated` against backend-cpu's causal attention × sigmoid(gate) (Qwen3-Next's gated
/// heads) on rows of several positions, grouped query heads, with the cache in `kv`: bf16 rows
/// are checked against the reference on the same rounded keys and values.
fn attention_matches_backend_cpu(
    gpu: Arc<Gpu>,
    kv: KvDtype,
    heads: usize,
    kv_heads: usize,
    hd: usize,
) {
    use backend_cpu::kernels::attention::{causal_attention, AttentionShape};
    let dims = attention_dims(kv, heads, kv_heads, hd);
    let k = Kernels::compile(&gpu, &dims).expect("kernels");
    let mut rng = Rng::fresh();
    let seed = rng.0;
    let mut random = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|_| rng.below(4001) as f32 / 1000.0 - 2.0)
            .collect()
    };
    // Rows at positions start..start+rows of one session whose cache holds start+rows rows: past
    // 64 keys, so each of the 16 warps takes several groups of 4, the last one partly full; and
    // a prompt's first rows, where most warps' key splits are empty.
    // Rows across the 64-key rounds of the staged kernels (61–64: the second round's first
    // keys) and rows 16 rounds deep (each of their three stages reused five times); and rows
    // from 1,023, whose `attention_mma_rows` blocks straddle a tile of 16 keys (a column's state
    // kept through the tile past its row).
    for (start, rows) in [(150, 5), (0, 6), (61, 4), (1020, 8), (1023, 6)] {
        let kv_row = kv_heads * hd;
        let q = random(rows * heads * hd);
        let mut keys = random((start + rows) * kv_row);
        let mut values = random((start + rows) * kv_row);
        let qkv_width = heads * 2 * hd + 2 * kv_row;
        let qkv = random(rows * qkv_width);
        let pos: Vec<i32> = (start..start + rows).map(|p| p as i32).collect();
        // The cache as the kernel stores it; the reference sees the stored values.
        let stored = |v: &mut Vec<f32>| -> Buf<u8> {
            let bytes: Vec<u8> = match kv {
                KvDtype::F32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                KvDtype::Bf16 => {
                    v.iter_mut().for_each(|x| *x = bf16::from_f32(*x).to_f32());
                    v.iter()
                        .flat_map(|x| bf16::from_f32(*x).to_le_bytes())
                        .collect()
                }
            };
            Buf::from_host(&gpu, &bytes).unwrap()
        };
        let (k_buf, v_buf) = (stored(&mut keys), stored(&mut values));
        let mut bufs = (
            Buf::from_host(&gpu, &q).unwrap(),
            Buf::from_host(&gpu, &qkv).unwrap(),
            Buf::from_host(&gpu, &pos).unwrap(),
            Buf::<i32>::zeros(&gpu, rows).unwrap(),
            Buf::<f32>::zeros(&gpu, rows * heads * hd).unwrap(),
        );
        let a = super::AttentionRows {
            rows,
            pos: bufs.2.at(0),
            kv_base: bufs.3.at(0),
            k_cache: k_buf.at(0),
            v_cache: v_buf.at(0),
            one_row_a_session: false,
            by_context: super::ContextSplit::Process,
        };
        // The call's output by `kernel` over `rows_at` (`a`, or other sessions' caches).
        let mut run_on = |rows_at: &super::AttentionRows, kernel: super::AttentionKernel| {
            bufs.4
                .write(&gpu, &vec![f32::NAN; rows * heads * hd])
                .unwrap();
            k.attention_with(
                &gpu,
                &dims,
                rows_at,
                bufs.0.at(0),
                bufs.1.at(0),
                bufs.4.at(0),
                kernel,
            )
            .unwrap();
            bufs.4.read(&gpu, rows * heads * hd).unwrap()
        };
        let got = run_on(&a, super::AttentionKernel::PerHead);
        // A block per group of a KV head's query heads (a prompt's rows), by 16 warps or by a few
        // that walk the 16 warps' key splits, and the staged kernels (each round of keys copied
        // into shared memory ahead: compiled wherever their stages fit, as bf16 heads of up to
        // 256 do): the same bits.
        assert!(
            k.attention_staged.is_some() || (kv == KvDtype::F32 && hd > 128),
            "{kv:?} cache, heads of {hd}: the staged attention was not compiled"
        );
        let mut kernels = vec![
            super::AttentionKernel::Grouped,
            super::AttentionKernel::GroupedFewWarps,
        ];
        if k.attention_staged.is_some() {
            kernels.push(super::AttentionKernel::GroupedStaged);
            kernels.push(super::AttentionKernel::GroupedStaged8);
        }
        for kernel in kernels {
            assert!(
                same_bits(&run_on(&a, kernel), &got),
                "seed {seed}, {kv:?} cache, {heads}/{kv_heads} heads of {hd}: {kernel:?} differs"
            );
        }
        let shape = AttentionShape {
            heads,
            kv_heads,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
        };
        let mut want = vec![0f32; q.len()];
        causal_attention(&q, &keys, &values, start, shape, &mut want);
        for r in 0..rows {
            for h in 0..heads {
                for d in 0..hd {
                    let gate = qkv[r * qkv_width + h * 2 * hd + hd + d];
                    want[(r * heads + h) * hd + d] *= 1.0 / (1.0 + (-gate).exp());
                }
            }
        }
        // Softmax sums in another order and the device's exp, as the layer tests allow.
        let d = relative_diff(&got, &want);
        assert!(
            d <= 1e-4,
            "seed {seed}, {kv:?} cache, {heads}/{kv_heads} heads of {hd}: relative diff {d}"
        );
        // The tensor-core kernels (FLASHLANE_ATTENTION_MMA), compiled for every bf16 shape here:
        // their own chain, so against the reference by the same tolerance; the block kernel and
        // its cluster twin the same bits; and the call's last row alone (as the cluster twin
        // takes a decode step of one stream) the bits it had in the call.
        assert_eq!(
            k.attention_mma.is_some(),
            kv == KvDtype::Bf16,
            "{kv:?} cache, {heads}/{kv_heads} heads of {hd}: attention_mma compiled?"
        );
        if k.attention_mma.is_some() {
            let mma = run_on(&a, super::AttentionKernel::Mma);
            // Every output written and finite (the buffer is NaN before each run, and
            // `relative_diff` and `same_bits` would let NaN through).
            assert!(
                mma.iter().all(|v| v.is_finite()),
                "seed {seed}, {heads}/{kv_heads} heads of {hd}: attention_mma left NaN or inf"
            );
            let d = relative_diff(&mma, &want);
            assert!(
                d <= 1e-4,
                "seed {seed}, {heads}/{kv_heads} heads of {hd}: attention_mma's relative diff {d}"
            );
            assert!(
                same_bits(&run_on(&a, super::AttentionKernel::MmaCluster), &mma),
                "seed {seed}, {heads}/{kv_heads} heads of {hd}: attention_mma_cluster differs"
            );
            // The prompts' kernel: the rows one session's, several a block where the group
            // leaves the MMA columns for them (and the last block's rows fewer).
            assert!(
                same_bits(&run_on(&a, super::AttentionKernel::MmaRows), &mma),
                "seed {seed}, {heads}/{kv_heads} heads of {hd}: attention_mma_rows differs"
            );
            let (last, width) = (rows - 1, heads * hd);
            let alone = super::AttentionRows {
                rows: 1,
                pos: bufs.2.at(last),
                kv_base: bufs.3.at(last),
                k_cache: k_buf.at(0),
                v_cache: v_buf.at(0),
                one_row_a_session: false,
                by_context: super::ContextSplit::Process,
            };
            let out_alone = Buf::<f32>::from_host(&gpu, &vec![f32::NAN; width]).unwrap();
            k.attention_with(
                &gpu,
                &dims,
                &alone,
                bufs.0.at(last * width),
                bufs.1.at(last * qkv_width),
                out_alone.at(0),
                super::AttentionKernel::MmaCluster,
            )
            .unwrap();
            assert!(
                same_bits(&out_alone.read(&gpu, width).unwrap(), &mma[last * width..]),
                "seed {seed}, {heads}/{kv_heads} heads of {hd}: attention_mma's row alone differs"
            );
            // Rows of two sessions side by side (`attention_mma_rows` then takes a block's rows
            // one at a time): a cache with a row more in front, the even rows' session from
            // its row 1 (the keys above), the odd rows' from its row 0 (other keys); the block
            // kernel's bits, every output finite.
            let front = |v: &[f32]| -> Vec<u8> {
                let mut row: Vec<f32> = v[..kv_row].iter().map(|x| -x).collect();
                row.extend_from_slice(v);
                row.iter()
                    .flat_map(|x| bf16::from_f32(*x).to_le_bytes())
                    .collect()
            };
            let k_two = Buf::from_host(&gpu, &front(&keys)).unwrap();
            let v_two = Buf::from_host(&gpu, &front(&values)).unwrap();
            let bases: Vec<i32> = (0..rows).map(|r| 1 - (r % 2) as i32).collect();
            let bases = Buf::from_host(&gpu, &bases).unwrap();
            let two = super::AttentionRows {
                kv_base: bases.at(0),
                k_cache: k_two.at(0),
                v_cache: v_two.at(0),
                ..a
            };
            let block = run_on(&two, super::AttentionKernel::Mma);
            assert!(
                block.iter().all(|v| v.is_finite()),
                "seed {seed}, {heads}/{kv_heads} heads of {hd}: two sessions, NaN or inf"
            );
            assert!(
                same_bits(&run_on(&two, super::AttentionKernel::MmaRows), &block),
                "seed {seed}, {heads}/{kv_heads} heads of {hd}: two sessions' attention_mma_rows differs"
            );
            by_context_rows_take_their_kinds_bits(
                &gpu,
                (&k, &dims),
                &a,
                (bufs.0.at(0), bufs.1.at(0), &mut bufs.4),
                (start, &pos, width),
                (&got, &mma),
            );
        }
    }
}

/// `--attention-kernel by-context`'s two launches (`ContextSplit::Both`): every simt kernel and
/// every tensor-core one (few rows, many, a prompt's) leave the rows at position −1 untouched,
/// so that the rows from the middle of `a`'s on get the tensor cores' bits (`mma`) and those
/// before the simt kernels' (`simt`), whichever of each kind runs.
fn by_context_rows_take_their_kinds_bits(
    gpu: &Arc<Gpu>,
    (k, dims): (&Kernels, &Dims),
    a: &super::AttentionRows,
    (q, qkv, out): (u64, u64, &mut Buf<f32>),
    (start, pos, width): (usize, &[i32], usize),
    (simt, mma): (&[f32], &[f32]),
) {
    use super::AttentionKernel::*;
    let rows = a.rows;
    let from = start + rows / 2;
    let of_kind = |tensor_cores: bool| -> Buf<i32> {
        let kept: Vec<i32> = pos
            .iter()
            .map(|&p| match (p as usize >= from) == tensor_cores {
                true => p,
                false => -1,
            })
            .collect();
        Buf::from_host(gpu, &kept).unwrap()
    };
    let (simt_pos, tensor_cores_pos) = (of_kind(false), of_kind(true));
    let mut simt_kernels = vec![PerHead, Grouped, GroupedFewWarps];
    if k.attention_staged.is_some() {
        simt_kernels.extend([GroupedStaged, GroupedStaged8]);
    }
    let launch = |out: &Buf<f32>, pos: &Buf<i32>, kernel| {
        let rows_at = super::AttentionRows {
            pos: pos.at(0),
            ..*a
        };
        k.attention_with(gpu, dims, &rows_at, q, qkv, out.at(0), kernel)
            .unwrap();
        out.read(gpu, rows * width).unwrap()
    };
    // The tensor cores' kernels in turn; the rows kernel where compiled (its blocks of a few
    // rows straddling the switch take their rows a row at a time, the left ones skipped).
    let mut mma_kernels = vec![Mma, MmaCluster];
    if k.attention_mma.as_ref().is_some_and(|m| m.rows.is_some()) {
        mma_kernels.push(MmaRows);
    }
    let simt_kernels: Vec<_> = match simt_kernels.len() < mma_kernels.len() {
        true => simt_kernels
            .into_iter()
            .cycle()
            .take(mma_kernels.len())
            .collect(),
        false => simt_kernels,
    };
    for (i, simt_kernel) in simt_kernels.into_iter().enumerate() {
        let mma_kernel = mma_kernels[i % mma_kernels.len()];
        out.write(gpu, &vec![f32::NAN; rows * width]).unwrap();
        let half = launch(out, &simt_pos, simt_kernel);
        let both = launch(out, &tensor_cores_pos, mma_kernel);
        for r in 0..rows {
            let at = r * width..(r + 1) * width;
            let (want, left) = match start + r >= from {
                true => (&mma[at.clone()], true),
                false => (&simt[at.clone()], false),
            };
            assert_eq!(
                half[at.clone()].iter().all(|v| v.is_nan()),
                left,
                "row {r} (position {}) of {rows}, from {from}: {simt_kernel:?} left or wrote it",
                start + r
            );
            assert!(
                same_bits(&both[at], want),
                "row {r} (position {}) of {rows}, from {from}: {simt_kernel:?} then {mma_kernel:?}",
                start + r
            );
        }
    }
}

/// flashlane-tiny's config with `heads` query heads over `kv_heads` of `hd` dims (a quarter of
/// them rotated) and the cache in `kv`.
fn attention_dims(kv: KvDtype, heads: usize, kv_heads: usize, hd: usize) -> Dims {
    let dir =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/flashlane-tiny");
    let mut config = Config::from_dir(&dir).expect("config");
    config.num_heads = heads;
    config.num_kv_heads = kv_heads;
    config.head_dim = hd;
    config.rotary_dim = hd / 4;
    Dims::of(&config, kv).expect("dims")
}

/// [`attention_matches_backend_cpu`] on each (cache, query heads, KV heads, head dim), their
/// modules compiled at once first ([`warm_kernel_caches`]).
fn attention_shapes_match_backend_cpu(shapes: &[(KvDtype, usize, usize, usize)]) {
    let Some(gpu) = open_gpu() else { return };
    let modules: Vec<(Dims, &[(&str, usize)])> = shapes
        .iter()
        .map(|&(kv, heads, kv_heads, hd)| (attention_dims(kv, heads, kv_heads, hd), &[][..]))
        .collect();
    warm_kernel_caches(&gpu, &modules);
    for &(kv, heads, kv_heads, hd) in shapes {
        attention_matches_backend_cpu(gpu.clone(), kv, heads, kv_heads, hd);
    }
}

#[test]
fn attention_of_wide_heads_matches_backend_cpu() {
    // flashlane-tiny's heads widened to Qwen3-Next's 256 (8 dims a lane).
    attention_shapes_match_backend_cpu(&[(KvDtype::F32, 4, 2, 256), (KvDtype::Bf16, 4, 2, 256)]);
}

#[test]
fn attention_of_narrow_heads_matches_backend_cpu() {
    // The dense test fixture's 8 query heads over 2 of 16 dims (half a warp's lanes idle, four
    // heads a group): the per-head and grouped kernels once fused their multiply-adds
    // differently there. And a query head a KV head (one head a group).
    attention_shapes_match_backend_cpu(&[
        (KvDtype::Bf16, 8, 2, 16),
        (KvDtype::F32, 8, 2, 16),
        (KvDtype::Bf16, 4, 4, 64),
    ]);
}

#[test]
fn attention_of_many_heads_matches_backend_cpu() {
    // Qwen3-32B's 64 query heads over 8, and Qwen3-8B's 32 over 8, heads of 128; Qwen3-0.6B's
    // 16 over 8 (the grouped kernels two heads a block); Qwen3-14B's 40 over 8 (groups of 5, the
    // tensor cores' by default since session 68).
    attention_shapes_match_backend_cpu(&[
        (KvDtype::Bf16, 64, 8, 128),
        (KvDtype::Bf16, 16, 8, 128),
        (KvDtype::Bf16, 40, 8, 128),
        (KvDtype::F32, 32, 8, 128),
    ]);
}

/// RoPE's inverse frequencies over `rotary_dim` dims (base 10⁶, Qwen3's).
fn rope_inv_freq(rotary_dim: usize) -> Vec<f32> {
    (0..rotary_dim / 2)
        .map(|d| 1e6f32.powf(-((2 * d) as f32) / rotary_dim as f32))
        .collect()
}

/// `attention_prep`'s inputs on the device.
struct PrepInputs {
    qkv: Buf<f32>,
    pos: Buf<i32>,
    kv_base: Buf<i32>,
    q_norm: Buf<f32>,
    k_norm: Buf<f32>,
    inv_freq: Buf<f32>,
}

impl PrepInputs {
    /// The prep's weights as the kernels take them, with the norms' `eps`.
    fn weights(&self, eps: f32) -> super::PrepWeights {
        super::PrepWeights {
            q_norm: self.q_norm.at(0),
            k_norm: self.k_norm.at(0),
            inv_freq: self.inv_freq.at(0),
            eps,
        }
    }

    fn upload(
        gpu: &Arc<Gpu>,
        qkv: &[f32],
        (pos, kv_base): (&[i32], &[i32]),
        (q_norm, k_norm): (&[f32], &[f32]),
        inv_freq: &[f32],
    ) -> PrepInputs {
        PrepInputs {
            qkv: Buf::from_host(gpu, qkv).unwrap(),
            pos: Buf::from_host(gpu, pos).unwrap(),
            kv_base: Buf::from_host(gpu, kv_base).unwrap(),
            q_norm: Buf::from_host(gpu, q_norm).unwrap(),
            k_norm: Buf::from_host(gpu, k_norm).unwrap(),
            inv_freq: Buf::from_host(gpu, inv_freq).unwrap(),
        }
    }
}

/// `attention_prep` for many heads (they span blocks) against a reference written here: each
/// head RMSNormed with its weight (plain, Qwen3's), the first `rotary_dim` dims rotated by
/// position (rotate-half), q to `q_out` and K, V into the cache rows in `kv`.
#[test]
fn attention_prep_of_many_heads_matches_a_reference() {
    let Some(gpu) = open_gpu() else { return };
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/qwen3_bf16/model");
    let mut config = Config::from_dir(&dir).expect("config");
    let (heads, kv_heads, hd) = (40, 8, 128);
    config.num_heads = heads;
    config.num_kv_heads = kv_heads;
    config.head_dim = hd;
    config.rotary_dim = hd;
    for kv in [KvDtype::Bf16, KvDtype::F32] {
        let dims = Dims::of(&config, kv).expect("dims");
        let k = Kernels::compile(&gpu, &dims).expect("kernels");
        let mut rng = Rng::fresh();
        let seed = rng.0;
        let rows = 3;
        let (q_w, kv_row) = (heads * hd, kv_heads * hd);
        let qkv_w = q_w + 2 * kv_row;
        let qkv = rng.vec(rows * qkv_w);
        let (q_norm, k_norm) = (rng.vec(hd), rng.vec(hd));
        let half = hd / 2;
        let inv_freq = rope_inv_freq(hd);
        // Rows of two sessions: cache rows from 0 and from 16, at positions 5, 6 and 3.
        let pos = [5i32, 6, 3];
        let kv_base = [0i32, 0, 16];
        let cache_rows = 24;
        let eps = 1e-6f32;
        let elem = kv.bytes() as usize;
        let b = PrepInputs::upload(&gpu, &qkv, (&pos, &kv_base), (&q_norm, &k_norm), &inv_freq);
        let q_buf = Buf::<f32>::zeros(&gpu, rows * q_w).unwrap();
        let k_buf = Buf::<u8>::zeros(&gpu, cache_rows * kv_row * elem).unwrap();
        let v_buf = Buf::<u8>::zeros(&gpu, cache_rows * kv_row * elem).unwrap();
        let a = super::AttentionRows {
            rows,
            pos: b.pos.at(0),
            kv_base: b.kv_base.at(0),
            k_cache: k_buf.at(0),
            v_cache: v_buf.at(0),
            one_row_a_session: false,
            by_context: super::ContextSplit::Process,
        };
        k.attention_prep(&gpu, &dims, &a, b.qkv.at(0), &b.weights(eps), q_buf.at(0))
            .unwrap();
        let q_out = q_buf.read(&gpu, rows * q_w).unwrap();
        let decode = |bytes: Vec<u8>| -> Vec<f32> {
            match kv {
                KvDtype::F32 => bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
                KvDtype::Bf16 => bytes
                    .chunks_exact(2)
                    .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())
                    .collect(),
            }
        };
        let k_cache = decode(k_buf.read(&gpu, cache_rows * kv_row * elem).unwrap());
        let v_cache = decode(v_buf.read(&gpu, cache_rows * kv_row * elem).unwrap());
        // The reference, in f64.
        let prep = |x: &[f32], w: &[f32], p: i32| -> Vec<f32> {
            let ms = x.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / hd as f64;
            let inv = 1.0 / (ms + eps as f64).sqrt();
            let n: Vec<f64> = x
                .iter()
                .zip(w)
                .map(|(v, w)| *v as f64 * inv * *w as f64)
                .collect();
            (0..hd)
                .map(|i| {
                    let d = i % half;
                    let angle = p as f64 * inv_freq[d] as f64;
                    let (a, bb) = (n[d], n[d + half]);
                    (if i < half {
                        a * angle.cos() - bb * angle.sin()
                    } else {
                        bb * angle.cos() + a * angle.sin()
                    }) as f32
                })
                .collect()
        };
        let stored = |v: f32| match kv {
            KvDtype::F32 => v,
            KvDtype::Bf16 => bf16::from_f32(v).to_f32(),
        };
        let (mut got, mut want) = (Vec::new(), Vec::new());
        for r in 0..rows {
            let row = &qkv[r * qkv_w..(r + 1) * qkv_w];
            for h in 0..heads {
                want.extend(prep(&row[h * hd..(h + 1) * hd], &q_norm, pos[r]));
                got.extend_from_slice(&q_out[(r * heads + h) * hd..(r * heads + h + 1) * hd]);
            }
            let cache_row = (kv_base[r] + pos[r]) as usize * kv_row;
            for h in 0..kv_heads {
                let kx = &row[q_w + h * hd..q_w + (h + 1) * hd];
                want.extend(prep(kx, &k_norm, pos[r]).into_iter().map(stored));
                got.extend_from_slice(&k_cache[cache_row + h * hd..cache_row + (h + 1) * hd]);
                let vx = &row[q_w + kv_row + h * hd..q_w + kv_row + (h + 1) * hd];
                want.extend(vx.iter().map(|v| stored(*v)));
                got.extend_from_slice(&v_cache[cache_row + h * hd..cache_row + (h + 1) * hd]);
            }
        }
        // f32 against f64 with the device's sin and cos; a bf16 store may round the other way
        // at a tie, one bf16 step (2⁻⁸ relative) at most.
        let tol = match kv {
            KvDtype::F32 => 1e-5,
            KvDtype::Bf16 => 1e-2,
        };
        let d = relative_diff(&got, &want);
        assert!(d <= tol, "seed {seed}, {kv:?}: relative diff {d}");
    }
}

/// `attention_gated_prep` (the prep inside the per-head attention) against `attention_prep` then
/// `attention_gated` on the same inputs: the same q, output and cache bits. Rows of sessions of
/// their own at random positions (0, within the first key group, past 64 keys so that every
/// warp walks several groups), the cache before each row filled with random stored keys and
/// values; heads of both kinds (Qwen3's plain norms and ungated heads, Qwen3-Next's zero-centred
/// and gated ones with partial RoPE), heads of 16 to 256 dims, the bf16 cache (and the f32 one
/// on two shapes). The same for `attention_grouped_staged_prep` (the prep inside the staged
/// attention) wherever the staged kernels were compiled. With the bf16 cache, every attention
/// kernel and the ways of loading the keys (ATT_KV_AHEAD) each shape lists give the same bits too,
/// and so do a key group's scores and exps taken by every lane (ATT_SHARED_SOFTMAX 0,
/// `FLASHLANE_ATTENTION_SHARED_SOFTMAX=0`; shared out over the warp's lanes by default) on
/// Qwen3-4B's heads (4 a block: 16 scores a key group), the narrow ones (4 a block, half a warp
/// idle) and those of 256 (2: 8), the per-head kernels' 4 in all three;
/// and the tensor-core attention (FLASHLANE_ATTENTION_MMA) its own bits, alike with its prep
/// inside its cluster kernel (`attention_mma_cluster_prep`), apart, and in its block kernel.
#[test]
fn prep_in_attention_gives_the_bits_of_prep_then_attention() {
    let Some(gpu) = open_gpu() else { return };
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    // Qwen3-0.6B's heads (two query heads a KV head), Qwen3-4B's (four), the dense fixture's
    // narrow ones (half a warp idle), Qwen3-Next's gated heads of 256; with the f32 cache too
    // where marked, and the other ways of loading the keys (ATT_KV_AHEAD) as listed. Each cache
    // type and each way is a compile of the whole module (~20 s on a cold GPU machine: with
    // every way on every shape and both caches everywhere, 15 of them, the test outran the
    // device calls' limits in sessions 56 and 57), so the f32 cache, which no model runs by
    // default, takes two shapes, and the ways other than the default the shapes whose kernels
    // they change: 0 and 1 with Qwen3-4B's heads (the per-head kernels load 2 ahead by default,
    // the grouped 1), 0 with the narrow heads and those of 256 (which load 1 ahead).
    struct Shape {
        dir: &'static str,
        heads: usize,
        kv_heads: usize,
        hd: usize,
        rot: usize,
        f32_too: bool,
        other_aheads: &'static [usize],
        shared_too: bool,
    }
    let shape = |dir, heads, kv_heads, hd, rot, f32_too, other_aheads, shared_too| Shape {
        dir,
        heads,
        kv_heads,
        hd,
        rot,
        f32_too,
        other_aheads,
        shared_too,
    };
    let fixture = "tests/fixtures/qwen3_bf16/model";
    let shapes = [
        shape(fixture, 16, 8, 128, 128, false, &[], false),
        shape(fixture, 32, 8, 128, 128, true, &[0, 1], true),
        shape(fixture, 8, 2, 16, 16, true, &[0], true),
        shape("models/flashlane-tiny", 16, 2, 256, 64, false, &[0], true),
    ];
    let config_of = |shape: &Shape| {
        let mut config = Config::from_dir(&root.join(shape.dir)).expect("config");
        config.num_heads = shape.heads;
        config.num_kv_heads = shape.kv_heads;
        config.head_dim = shape.hd;
        config.rotary_dim = shape.rot;
        config
    };
    let kvs_of = |shape: &Shape| -> &'static [KvDtype] {
        match shape.f32_too {
            true => &[KvDtype::Bf16, KvDtype::F32],
            false => &[KvDtype::Bf16],
        }
    };
    // Every module the loop compiles, at once first.
    let aheads: Vec<[(&str, usize); 1]> = (0..=8).map(|a| [("ATT_KV_AHEAD", a)]).collect();
    // The other chain of a key group's scores and exps than the process's (by default shared
    // out, so every lane taking each).
    let other_chain = usize::from(!super::env_on(super::ATTENTION_SHARED_SOFTMAX_ENV));
    let shared_pair = [("ATT_SHARED_SOFTMAX", other_chain)];
    let shared: &[(&str, usize)] = &shared_pair;
    let mut modules: Vec<(Dims, &[(&str, usize)])> = Vec::new();
    for shape in &shapes {
        let config = config_of(shape);
        for &kv in kvs_of(shape) {
            modules.push((Dims::of(&config, kv).expect("dims"), &[]));
        }
        for &ahead in shape.other_aheads {
            let bf16 = Dims::of(&config, KvDtype::Bf16).expect("dims");
            modules.push((bf16, &aheads[ahead][..]));
        }
        if shape.shared_too {
            modules.push((Dims::of(&config, KvDtype::Bf16).expect("dims"), shared));
        }
    }
    warm_kernel_caches(&gpu, &modules);
    for shape in &shapes {
        let config = config_of(shape);
        let &Shape {
            dir,
            heads,
            kv_heads,
            hd,
            rot,
            other_aheads,
            shared_too,
            ..
        } = shape;
        for &kv in kvs_of(shape) {
            let dims = Dims::of(&config, kv).expect("dims");
            let k = Kernels::compile(&gpu, &dims).expect("kernels");
            let mut rng = Rng::fresh();
            let seed = rng.0;
            let what =
                format!("seed {seed}, {dir}, {heads}/{kv_heads} heads of {hd}, {kv:?} cache");
            // Each row's session holds CACHE_ROWS cache rows from its base.
            const CACHE_ROWS: usize = 200;
            let pos: Vec<i32> = [0, 3, 70, 150, 199, rng.below(200) as i32]
                .into_iter()
                .collect();
            let rows = pos.len();
            let kv_base: Vec<i32> = (0..rows).map(|r| (r * CACHE_ROWS) as i32).collect();
            let kv_row = kv_heads * hd;
            let q_head_w = if dims.qwen3_next { 2 * hd } else { hd };
            let qkv_w = heads * q_head_w + 2 * kv_row;
            let qkv = rng.vec(rows * qkv_w);
            let (q_norm, k_norm) = (rng.vec(hd), rng.vec(hd));
            let inv_freq = rope_inv_freq(rot);
            let b = PrepInputs::upload(&gpu, &qkv, (&pos, &kv_base), (&q_norm, &k_norm), &inv_freq);
            let prep = b.weights(1e-6);
            // The caches: random stored values everywhere, K's and V's apart (the rows' own are
            // overwritten).
            let mut stored = || -> Vec<u8> {
                (0..rows * CACHE_ROWS * kv_row)
                    .flat_map(|_| {
                        let x = rng.vec(1)[0] * 2.0;
                        match kv {
                            KvDtype::F32 => x.to_le_bytes().to_vec(),
                            KvDtype::Bf16 => bf16::from_f32(x).to_le_bytes().to_vec(),
                        }
                    })
                    .collect()
            };
            let (k_bytes, v_bytes) = (stored(), stored());
            // The prep inside the attention of `Way::PrepIn`'s kernel (the per-head one's or the
            // staged one's), or apart and then `Way::Apart`'s.
            // `Split(from)`: `prep_and_attention` of a round whose rows from position `from` on
            // run on the tensor cores and those before on simt (`ContextSplit::Both`).
            #[derive(Clone, Copy, Debug)]
            enum Way {
                PrepIn(super::AttentionKernel),
                Apart(super::AttentionKernel),
                Split(i32),
            }
            let run = |k: &Kernels, way: Way| {
                // The two kinds' positions arrays of a split round (the other kind's rows −1).
                let kinds = match way {
                    Way::Split(from) => Some([false, true].map(|tensor_cores| {
                        let kept: Vec<i32> = pos
                            .iter()
                            .map(|&p| if (p >= from) == tensor_cores { p } else { -1 })
                            .collect();
                        Buf::from_host(&gpu, &kept).unwrap()
                    })),
                    _ => None,
                };
                let k_buf = Buf::from_host(&gpu, &k_bytes).unwrap();
                let v_buf = Buf::from_host(&gpu, &v_bytes).unwrap();
                let q = Buf::from_host(&gpu, &vec![f32::NAN; rows * heads * hd]).unwrap();
                let out = Buf::from_host(&gpu, &vec![f32::NAN; rows * heads * hd]).unwrap();
                let a = super::AttentionRows {
                    rows,
                    pos: b.pos.at(0),
                    kv_base: b.kv_base.at(0),
                    k_cache: k_buf.at(0),
                    v_cache: v_buf.at(0),
                    one_row_a_session: true,
                    by_context: super::ContextSplit::Process,
                };
                match way {
                    Way::PrepIn(kernel) => k
                        .attention_with_prep(
                            &gpu,
                            &dims,
                            &a,
                            b.qkv.at(0),
                            &prep,
                            (q.at(0), out.at(0)),
                            kernel,
                        )
                        .unwrap(),
                    Way::Apart(kernel) => {
                        k.attention_prep(&gpu, &dims, &a, b.qkv.at(0), &prep, q.at(0))
                            .unwrap();
                        k.attention_with(&gpu, &dims, &a, q.at(0), b.qkv.at(0), out.at(0), kernel)
                            .unwrap();
                    }
                    Way::Split(_) => {
                        let [simt, tensor_cores] = kinds.as_ref().expect("a split's positions");
                        let split = super::AttentionRows {
                            by_context: super::ContextSplit::Both {
                                simt_pos: simt.at(0),
                                tensor_cores_pos: tensor_cores.at(0),
                            },
                            ..a
                        };
                        let place = k
                            .prep_and_attention(
                                &gpu,
                                &dims,
                                &split,
                                b.qkv.at(0),
                                &prep,
                                q.at(0),
                                out.at(0),
                            )
                            .unwrap();
                        assert_eq!(place, super::PrepPlace::Apart, "a split round's prep");
                    }
                }
                let n = k_bytes.len();
                (
                    q.read(&gpu, rows * heads * hd).unwrap(),
                    out.read(&gpu, rows * heads * hd).unwrap(),
                    k_buf.read(&gpu, n).unwrap(),
                    v_buf.read(&gpu, n).unwrap(),
                )
            };
            use super::AttentionKernel::{
                Grouped, GroupedFewWarps, GroupedStaged, GroupedStaged8, PerHead,
            };
            let apart = run(&k, Way::Apart(PerHead));
            // The prep in the per-head kernel, and in the staged one where it was compiled.
            let mut preps = vec![Way::PrepIn(PerHead)];
            if k.attention_staged.is_some() {
                preps.push(Way::PrepIn(GroupedStaged));
            }
            for &way in &preps {
                let inside = run(&k, way);
                assert!(
                    inside.1.iter().all(|x| x.is_finite()),
                    "{what}, {way:?}: outputs left unwritten"
                );
                assert!(same_bits(&inside.0, &apart.0), "{what}, {way:?}: q differs");
                assert!(inside.2 == apart.2, "{what}, {way:?}: the K cache differs");
                assert!(inside.3 == apart.3, "{what}, {way:?}: the V cache differs");
                assert!(
                    same_bits(&inside.1, &apart.1),
                    "{what}, {way:?}: the attention differs"
                );
            }
            // Each way of loading the keys (ATT_KV_AHEAD), in every attention kernel: the same
            // bits. The default's kernels, then the other ways the shape lists (each a compile of
            // its own), only with the bf16 cache the models run with.
            if kv != KvDtype::Bf16 {
                continue;
            }
            // The tensor-core attention (FLASHLANE_ATTENTION_MMA, every bf16 shape here): its own
            // bits, the same with its prep inside its cluster kernel as apart, and the block
            // kernel's.
            {
                use super::AttentionKernel::{Mma, MmaCluster};
                assert!(
                    k.attention_mma.is_some(),
                    "{what}: attention_mma not compiled"
                );
                let mma_apart = run(&k, Way::Apart(MmaCluster));
                assert!(
                    mma_apart.1.iter().all(|x| x.is_finite()),
                    "{what}: the tensor-core attention left outputs unwritten"
                );
                assert!(same_bits(&mma_apart.0, &apart.0), "{what}: q differs");
                let inside = run(&k, Way::PrepIn(MmaCluster));
                assert!(
                    same_bits(&inside.0, &apart.0),
                    "{what}, MMA prep in: q differs"
                );
                assert!(
                    inside.2 == apart.2,
                    "{what}, MMA prep in: the K cache differs"
                );
                assert!(
                    inside.3 == apart.3,
                    "{what}, MMA prep in: the V cache differs"
                );
                for (way, got) in [("prep in", inside.1), ("block", run(&k, Way::Apart(Mma)).1)] {
                    assert!(
                        same_bits(&got, &mma_apart.1),
                        "{what}: the tensor-core attention's {way} differs"
                    );
                }
                // `--attention-kernel by-context`'s round of both kinds: the same prep (q and
                // the caches), each row the bits of its kind's kernels.
                let from = 100;
                let split = run(&k, Way::Split(from));
                assert!(same_bits(&split.0, &apart.0), "{what}, split: q differs");
                assert!(split.2 == apart.2, "{what}, split: the K cache differs");
                assert!(split.3 == apart.3, "{what}, split: the V cache differs");
                let width = heads * hd;
                for (r, &p) in pos.iter().enumerate() {
                    let at = r * width..(r + 1) * width;
                    let want = match p >= from {
                        true => &mma_apart.1[at.clone()],
                        false => &apart.1[at.clone()],
                    };
                    assert!(
                        same_bits(&split.1[at], want),
                        "{what}, split from {from}: row {r} at {p} is not its kind's"
                    );
                }
            }
            // The staged kernels, wherever their stages fit (every bf16 head here).
            assert!(
                k.attention_staged.is_some(),
                "{what}: the staged attention was not compiled"
            );
            let kernels = [
                Way::PrepIn(PerHead),
                Way::PrepIn(GroupedStaged),
                Way::Apart(PerHead),
                Way::Apart(Grouped),
                Way::Apart(GroupedFewWarps),
                Way::Apart(GroupedStaged),
                Way::Apart(GroupedStaged8),
            ];
            for &kernel in &kernels {
                assert!(
                    same_bits(&run(&k, kernel).1, &apart.1),
                    "{what}: the default's {kernel:?} differs"
                );
            }
            for &ahead in other_aheads {
                let k_ahead = Kernels::compile_overriding(&gpu, &dims, &[("ATT_KV_AHEAD", ahead)])
                    .expect("kernels");
                for &kernel in &kernels {
                    assert!(
                        same_bits(&run(&k_ahead, kernel).1, &apart.1),
                        "{what}: ATT_KV_AHEAD {ahead}, {kernel:?} differs"
                    );
                }
            }
            if shared_too {
                let k_shared = Kernels::compile_overriding(&gpu, &dims, shared).expect("kernels");
                for &kernel in &kernels {
                    assert!(
                        same_bits(&run(&k_shared, kernel).1, &apart.1),
                        "{what}: ATT_SHARED_SOFTMAX {other_chain}, {kernel:?} differs"
                    );
                }
            }
        }
    }
}

/// The MoE layer's index and intermediate buffers for up to `rows` rows.
struct MoeScratch {
    layout: MoeIndexLayout,
    ints: Buf<i32>,
    probs: Buf<f32>,
    act: Buf<f32>,
    act_sh: Buf<f32>,
    y_exp: Buf<f32>,
    y_sh: Buf<f32>,
}

impl MoeScratch {
    fn new(gpu: &Gpu, m: &MoeConfig, hidden: usize, rows: usize) -> MoeScratch {
        let pairs = rows * m.experts_per_token;
        let layout = MoeIndexLayout::of(rows, m);
        let f = |n: usize| Buf::<f32>::zeros(gpu, n).unwrap();
        MoeScratch {
            ints: Buf::<i32>::zeros(gpu, layout.len).unwrap(),
            probs: f(pairs),
            act: f(pairs * m.expert_intermediate),
            act_sh: f(rows * m.shared_expert_intermediate),
            y_exp: f(pairs * hidden),
            y_sh: f(rows * hidden),
            layout,
        }
    }

    /// The launch of `rows` rows (at most the scratch's) of `xn`, `mo` into `x`, with the
    /// weights `[gate_up, down, shared_down]` (0: no shared expert).
    fn launch(
        &self,
        rows: usize,
        fp8: Option<super::MoeFp8>,
        [xn, mo, x]: [u64; 3],
        [gate_up, down, shared_down]: [u64; 3],
    ) -> MoeLaunch {
        let (ints, layout) = (&self.ints, &self.layout);
        MoeLaunch {
            fp8,
            rows,
            xn,
            mo,
            x,
            gate_up,
            down,
            shared_down,
            ids: ints.at(layout.ids),
            probs: self.probs.at(0),
            pair_row: ints.at(layout.pair_row),
            pair_pos: ints.at(layout.pair_pos),
            tiles: ints.at(layout.tiles),
            n_tiles: ints.at(layout.n_tiles),
            act: self.act.at(0),
            act_sh: self.act_sh.at(0),
            y_exp: self.y_exp.at(0),
            y_sh: self.y_sh.at(0),
        }
    }
}

/// The GPU's MoE layer (`moe.cu`) on the given rows, summed as `sum` says (with a norm after
/// it: zero-centred): returns `x` after it and the normed rows (empty without a norm).
#[allow(clippy::too_many_arguments)]
fn run_moe(
    gpu: &Gpu,
    k: &Kernels,
    dims: &Dims,
    case: &MoeCase,
    xn: &[f32],
    mo: &[f32],
    x: &[f32],
    sum: TestSum<'_>,
) -> (Vec<f32>, Vec<f32>) {
    let (h, m) = (case.hidden, &case.m);
    let rows = x.len() / h;
    let f = |n: usize| Buf::<f32>::zeros(gpu, n).unwrap();
    let (xn_b, mo_b) = (
        Buf::from_host(gpu, xn).unwrap(),
        Buf::from_host(gpu, mo).unwrap(),
    );
    let x_b = Buf::from_host(gpu, x).unwrap();
    let scratch = MoeScratch::new(gpu, m, h, rows);
    let launch = scratch.launch(
        rows,
        case.fp8.as_ref().map(|(s, br, bc)| super::MoeFp8 {
            gate_up_scales: s[0].at(0),
            down_scales: s[1].at(0),
            shared_down_scales: s[2].at(0),
            block_rows: *br,
            block_cols: *bc,
        }),
        [xn_b.at(0), mo_b.at(0), x_b.at(0)],
        [
            case.on_gpu[0].at(0),
            case.on_gpu[1].at(0),
            if m.shared_expert_intermediate > 0 {
                case.on_gpu[2].at(0)
            } else {
                0
            },
        ],
    );
    let out = f(rows * h);
    let then_w = match sum {
        TestSum::WithNorm(w) => Some(Buf::from_host(gpu, w).unwrap()),
        TestSum::Alone => None,
    };
    let then = then_w.as_ref().map(|w| super::NormAfter {
        w: w.at(0),
        eps: NORM_EPS,
        zero_centred: true,
        out: out.at(0),
    });
    let sum = match (sum, &then) {
        (TestSum::WithNorm(_), Some(then)) => super::MoeSum::WithNorm(then),
        _ => super::MoeSum::Alone,
    };
    k.moe(gpu, dims, &launch, sum).unwrap();
    let normed = match then {
        Some(_) => out.read(gpu, rows * h).unwrap(),
        None => Vec::new(),
    };
    (x_b.read(gpu, rows * h).unwrap(), normed)
}

/// How `run_moe` sums the layer.
#[derive(Clone, Copy)]
enum TestSum<'a> {
    /// `moe_combine` (the reference).
    Alone,
    /// `moe_combine_norm` with this norm weight.
    WithNorm(&'a [f32]),
}

/// The norm the MoE tests apply after a layer.
const NORM_EPS: f32 = 1e-6;

#[test]
fn moe_matches_backend_cpu_and_a_row_is_the_same_alone_or_among_others() {
    let Some(gpu) = open_gpu() else { return };
    let mut rng = Rng::fresh();
    let seed = rng.0;
    let (_, tiny) = tiny_dims();
    let tiny_moe = tiny.moe.clone().expect("the default model has experts");
    // The default model's MoE; Qwen3-Next's 128 experts, 10 a token (narrow, to keep the test
    // small); and few experts without a shared expert or renormalisation, so that experts get
    // several tiles of pairs.
    let cases = [
        (tiny_moe, tiny.hidden, 1 + rng.below(40)),
        (
            MoeConfig {
                num_experts: 128,
                experts_per_token: 10,
                expert_intermediate: 64,
                shared_expert_intermediate: 32,
                norm_topk_prob: true,
            },
            256,
            1 + rng.below(70),
        ),
        (
            MoeConfig {
                num_experts: 4,
                experts_per_token: 2,
                expert_intermediate: 48,
                shared_expert_intermediate: 0,
                norm_topk_prob: false,
            },
            96,
            40 + rng.below(40),
        ),
    ];
    for (m, hidden, rows) in cases {
        let what = format!("seed {seed}, {m:?}, hidden {hidden}, {rows} rows");
        check_moe(&gpu, &mut rng, m.clone(), hidden, rows, None, false, &what);
        // Router logits of five values: most choices are ties, broken to the lower index.
        let what = format!("{what}, tied logits");
        check_moe(&gpu, &mut rng, m, hidden, rows, None, true, &what);
    }
}

/// Block-scaled FP8 experts (`moe_gate_up_fp8`, `moe_down_fp8`) against backend-cpu on the
/// dequantised weights, a row alone = in the batch = reversed: Qwen3-Next's 128 × 128 blocks on
/// its expert width (512, narrowed to 128 experts), and small blocks over several of them.
#[test]
fn fp8_moe_matches_backend_cpu_on_dequantised_weights() {
    let Some(gpu) = open_gpu() else { return };
    let mut rng = Rng::fresh();
    let seed = rng.0;
    let cases = [
        (
            MoeConfig {
                num_experts: 32,
                experts_per_token: 10,
                expert_intermediate: 512,
                shared_expert_intermediate: 512,
                norm_topk_prob: true,
            },
            256,
            (128, 128),
            1 + rng.below(40),
        ),
        (
            MoeConfig {
                num_experts: 8,
                experts_per_token: 2,
                expert_intermediate: 128,
                shared_expert_intermediate: 64,
                norm_topk_prob: false,
            },
            192,
            (8, 64),
            20 + rng.below(40),
        ),
    ];
    for (m, hidden, blocks, rows) in cases {
        let what = format!("seed {seed}, FP8 {blocks:?}, {m:?}, hidden {hidden}, {rows} rows");
        check_moe(&gpu, &mut rng, m, hidden, rows, Some(blocks), false, &what);
    }
}

/// The MoE layer of `m` on `rows` random rows against backend-cpu's, then each of three rows
/// alone and the rows reversed, bit for bit; FP8 experts in blocks of `fp8` when given; with
/// `tied`, router logits of five values only.
#[allow(clippy::too_many_arguments)]
fn check_moe(
    gpu: &Arc<Gpu>,
    rng: &mut Rng,
    m: MoeConfig,
    hidden: usize,
    rows: usize,
    fp8: Option<(usize, usize)>,
    tied: bool,
    what: &str,
) {
    let dims = Dims {
        hidden,
        moe: Some(m.clone()),
        ..tiny_dims().1
    };
    dims.check().expect("sizes the kernels take");
    let experts = m.num_experts;
    let mut k = Kernels::compile(gpu, &dims).expect("kernels");
    // The 16-row chain's experts (the swapped chain's default bound would take rounds of 1-2
    // rows): the reference the variants below are compared with, the swapped chain's included.
    k.matmul_swap_rows = super::SwapRows::all(0);
    let case = match fp8 {
        None => MoeCase::new(gpu, rng, m, hidden),
        Some((br, bc)) => MoeCase::new_fp8(gpu, rng, m, hidden, br, bc),
    };
    let w = case.mo_width();
    let xn = rng.vec(rows * hidden);
    let mo: Vec<f32> = rng
        .vec(rows * w)
        .iter()
        .enumerate()
        .map(|(i, v)| match tied && i % w < experts {
            true => (2.0 * v).round(),
            false => 4.0 * v,
        })
        .collect();
    let x = rng.vec(rows * hidden);
    let want = case.reference(&xn, &mo, &x);
    let all = run_moe(gpu, &k, &dims, &case, &xn, &mo, &x, TestSum::Alone).0;
    // The update against the reference's (x itself is exact on both sides).
    let delta = |v: &[f32]| v.iter().zip(&x).map(|(a, b)| a - b).collect::<Vec<f32>>();
    let d = relative_diff(&delta(&all), &delta(&want));
    assert!(d <= MOE_TOLERANCE, "{what}: relative diff {d}");
    // Each row alone, and the rows in reverse order (other tiles, other places in them).
    let row = |v: &[f32], r: usize| v[r * hidden..(r + 1) * hidden].to_vec();
    let row_of = |v: &[f32], r: usize, width: usize| v[r * width..(r + 1) * width].to_vec();
    for r in [0, rows / 2, rows - 1] {
        let one = run_moe(
            gpu,
            &k,
            &dims,
            &case,
            &row(&xn, r),
            &row_of(&mo, r, w),
            &row(&x, r),
            TestSum::Alone,
        )
        .0;
        assert!(
            same_bits(&one, &row(&all, r)),
            "{what}: row {r} alone differs from the batch"
        );
    }
    let rev = |v: &[f32], width: usize| -> Vec<f32> {
        v.chunks(width).rev().flatten().copied().collect()
    };
    let reversed = run_moe(
        gpu,
        &k,
        &dims,
        &case,
        &rev(&xn, hidden),
        &rev(&mo, w),
        &rev(&x, hidden),
        TestSum::Alone,
    )
    .0;
    assert!(
        same_bits(&reversed, &rev(&all, hidden)),
        "{what}: the rows in reverse order differ from the batch"
    );
    // bf16 experts' gate/up at every n-tiles a block: the batch's bits, and a row alone's.
    if fp8.is_none() {
        for tiles in super::MOE_GATE_UP_TILES {
            k.moe.as_mut().expect("MoE kernels").gate_up_tiles_forced = Some(tiles);
            let other = run_moe(gpu, &k, &dims, &case, &xn, &mo, &x, TestSum::Alone).0;
            assert!(
                same_bits(&other, &all),
                "{what}: gate/up at {tiles} n-tiles a block differs"
            );
            let r = rows - 1;
            let (xn_r, mo_r, x_r) = (row(&xn, r), row_of(&mo, r, w), row(&x, r));
            let one = run_moe(gpu, &k, &dims, &case, &xn_r, &mo_r, &x_r, TestSum::Alone).0;
            assert!(
                same_bits(&one, &row(&all, r)),
                "{what}: row {r} alone at {tiles} n-tiles a block differs"
            );
        }
        k.moe.as_mut().expect("MoE kernels").gate_up_tiles_forced = None;
    }
    // The swapped chain's experts (rounds of up to MMA_COLS rows, `moe_gate_up_swap` and
    // `moe_down_swap` where bf16): each row alone and the first rows together have the batch's
    // bits.
    k.matmul_swap_rows = super::SwapRows::all(super::MMA_COLS);
    let n = rows.min(super::MMA_COLS);
    let first = |v: &[f32], width: usize| v[..n * width].to_vec();
    {
        let sum = TestSum::Alone;
        ran_swapped(&k);
        let together = run_moe(
            gpu,
            &k,
            &dims,
            &case,
            &first(&xn, hidden),
            &first(&mo, w),
            &first(&x, hidden),
            sum,
        )
        .0;
        assert!(
            same_bits(&together, &first(&all, hidden)),
            "{what}: the first {n} rows on the swapped chain differ"
        );
        assert_eq!(
            ran_swapped(&k),
            fp8.is_none(),
            "{what}: the swapped chain ran for bf16 experts only"
        );
        for r in [0, rows - 1] {
            let (xn_r, mo_r, x_r) = (row(&xn, r), row_of(&mo, r, w), row(&x, r));
            let one = run_moe(gpu, &k, &dims, &case, &xn_r, &mo_r, &x_r, sum).0;
            assert!(
                same_bits(&one, &row(&all, r)),
                "{what}: row {r} alone on the swapped chain differs"
            );
        }
    }
    k.matmul_swap_rows = super::SwapRows::all(0);
    // The sum fused with the norm after the layer: the same x, and `rmsnorm_rows`' bits of it.
    let norm_w = rng.vec(hidden);
    let (fused, normed) = run_moe(
        gpu,
        &k,
        &dims,
        &case,
        &xn,
        &mo,
        &x,
        TestSum::WithNorm(&norm_w),
    );
    assert!(same_bits(&fused, &all), "{what}: the fused sum differs");
    let (x_b, w_b) = (
        Buf::from_host(gpu, &all).unwrap(),
        Buf::from_host(gpu, &norm_w).unwrap(),
    );
    let out = Buf::<f32>::zeros(gpu, rows * hidden).unwrap();
    k.rmsnorm(
        gpu,
        x_b.at(0),
        w_b.at(0),
        hidden,
        rows,
        NORM_EPS,
        true,
        out.at(0),
    )
    .unwrap();
    let want_normed = out.read(gpu, rows * hidden).unwrap();
    assert!(
        same_bits(&normed, &want_normed),
        "{what}: the fused norm differs from rmsnorm_rows"
    );
    // A row alone with the fused norm (`moe_combine_norm` of one row takes its pairs' places
    // without loading them): the batch's x and normed row.
    for r in [0, rows - 1] {
        let (xn_r, mo_r, x_r) = (row(&xn, r), row_of(&mo, r, w), row(&x, r));
        let (one, one_normed) = run_moe(
            gpu,
            &k,
            &dims,
            &case,
            &xn_r,
            &mo_r,
            &x_r,
            TestSum::WithNorm(&norm_w),
        );
        assert!(
            same_bits(&one, &row(&all, r)) && same_bits(&one_normed, &row(&want_normed, r)),
            "{what}: row {r} alone with the fused norm differs"
        );
    }
}

/// Not a test: each bf16 matmul kernel's time on the Qwen3-0.6B, -4B and -8B shapes' and the
/// A3B slice's matrices at decode and prefill row counts (`--ignored matmul_kernel_times
/// --nocapture` on the GPU), to choose which kernel `MatmulKernel::Auto` runs. Prints µs a launch, the weights' read rate and
/// the tensor cores' rate (hi and lo products counted once); `TiledSplitK/wg` is the split on
/// the warpgroup MMA (FLASHLANE_MATMUL_WG_FOLD), folded as the tiles' split folds.
#[test]
#[ignore]
fn matmul_kernel_times() {
    let Some((gpu, mut k)) = setup() else { return };
    k.compile_wgmma(&gpu, &tiny_dims().1)
        .expect("the warpgroup matmul compiles");
    // (name, n_out, k) of a layer's projections.
    let shapes = [
        ("0.6B qkv", 4096, 1024),
        ("0.6B o", 1024, 2048),
        ("0.6B gate_up", 6144, 1024),
        ("0.6B down", 1024, 3072),
        ("4B qkv", 6144, 2560),
        ("4B o", 2560, 4096),
        ("4B gate_up", 19456, 2560),
        ("4B down", 2560, 9728),
        ("8B qkv", 6144, 4096),
        ("8B o", 4096, 4096),
        ("8B gate_up", 24576, 4096),
        ("8B down", 4096, 12288),
        ("A3B lin in", 12352, 2048),
        ("A3B qkv", 9216, 2048),
        ("A3B o", 2048, 4096),
        ("A3B moe in", 1153, 2048),
        ("A3B lm_head", 151936, 2048),
    ];
    let max_rows = 8192;
    // The lm_head only at decode rows (its outputs at 8,192 rows would take 5 GB).
    let rows_of = |n_out: usize| {
        [1, 8, 16, 32, 48, 64, 128, 256, 512, 2048, 8192]
            .into_iter()
            .filter(move |&rows| n_out < 100_000 || rows <= 64)
    };
    // The widest k and the most outputs of a projection (the lm_head has its own bound above).
    let k_max = shapes.iter().map(|s| s.2).max().unwrap();
    let out_max = shapes
        .iter()
        .map(|s| s.1)
        .filter(|&n| n < 100_000)
        .max()
        .unwrap();
    let (x, w) = random_operands(&gpu, max_rows * k_max, 151936 * 2048);
    let y = Buf::<f32>::zeros(&gpu, max_rows * out_max).unwrap();
    let xs = Buf::<u32>::zeros(&gpu, max_rows * super::split_row_words(k_max)).unwrap();
    // The k split up to 256 rows of the projections (not the lm_head).
    let split_rows_max = 256;
    let partials =
        Buf::<f32>::zeros(&gpu, super::MATMUL_RESIDUES * split_rows_max * out_max).unwrap();
    // (kernel, the 64-row blocks' split on the warpgroup MMA: FLASHLANE_MATMUL_WG_FOLD).
    let kernels = [
        (MatmulKernel::Auto, false),
        (MatmulKernel::Narrow, false),
        (MatmulKernel::Wide, false),
        (MatmulKernel::Tiles(3), false),
        (MatmulKernel::Tiles(5), false),
        (MatmulKernel::Tiles(6), false),
        (MatmulKernel::Tiled, false),
        (MatmulKernel::TiledSplitK, false),
        (MatmulKernel::TiledSplitK, true),
        (MatmulKernel::Deep(3), false),
        (MatmulKernel::Deep(super::MMA_NT), false),
        (MatmulKernel::Wgmma, false),
        (MatmulKernel::WgmmaSplitK, false),
        (MatmulKernel::WgmmaSwapped, false),
    ];
    for (name, n_out, depth) in shapes {
        for rows in rows_of(n_out) {
            let m = Matmul {
                x_split: xs.at(0),
                partials: partials.at(0),
                ..packed_matmul(x.at(0), w.at(0), depth, n_out, y.at(0), rows, None)
            };
            let mut line = format!("{name:>13} rows {rows:>5}:");
            for &(kernel, wg_fold) in &kernels {
                k.matmul_wg_fold = wg_fold;
                // The deep kernels up to 64 rows: Auto runs them at one row tile, the rest
                // measures whether their x ahead helps a few row tiles too.
                let deep = matches!(kernel, MatmulKernel::Deep(_));
                let split = matches!(
                    kernel,
                    MatmulKernel::TiledSplitK | MatmulKernel::WgmmaSplitK
                );
                let many = matches!(
                    kernel,
                    MatmulKernel::Tiled | MatmulKernel::Wgmma | MatmulKernel::WgmmaSwapped
                );
                if (many && rows < 64)
                    || (deep && rows > 64)
                    || (split && (rows < 16 || rows > split_rows_max || n_out > out_max))
                {
                    continue;
                }
                let reps = if rows >= 2048 { 5 } else { 30 };
                let us = time_launches(&gpu, reps, || {
                    k.matmul_with(&gpu, &m, kernel).unwrap();
                });
                let tbs = (n_out * depth * 2) as f64 / us / 1e6;
                let tflops = (2 * rows * n_out * depth) as f64 / us / 1e6;
                let on = if wg_fold { "/wg" } else { "" };
                line += &format!("  {kernel:?}{on} {us:.1}us {tbs:.2}TB/s {tflops:.0}TF");
            }
            println!("{line}");
        }
    }
}

/// Not a test: whether a one-row matmul's time follows its blocks' balance over the
/// multiprocessors (`--ignored one_row_grid_balance_times --nocapture` on the GPU). A layer's
/// one-row launches read at 2.5–3.1 TB/s where the LM head's 4,748 blocks read at 4.6 (H200,
/// bench/RESULTS.md session 60); the o and down projections run 160 blocks of 16 outputs, so 28
/// multiprocessors hold two. Per depth, outputs in multiples of 16 from half a wave to four,
/// one row, each launch on the next copy of the weights, spanning more than L2, so that they
/// come from memory: µs a launch, the read rate, and µs per block a multiprocessor holds at most;
/// then Qwen3-4B's four one-row matrices whole, one and two output tiles a block (the default
/// model's kernels: its weights are loaded after the wait for the kernel ahead, Qwen3-4B's
/// before). Session 62 ran it on the H100 (bench/RESULTS.md): a launch's µs do not follow the
/// most blocks a multiprocessor holds (132 blocks 6.0 µs, 160 6.4, 264 9.3 at k 2,560).
/// Flat µs from 132 to 264 blocks: a block's own loads in flight bound it (more blocks, or
/// more bytes in flight a block, would help); µs doubling with the most a multiprocessor
/// holds: the multiprocessor's share of bandwidth does. The narrow kernel (16 outputs a block,
/// `matmul_bf16_swap` at one row) throughout, so that outputs / 16 are the blocks.
#[test]
#[ignore]
fn one_row_grid_balance_times() {
    let Some((gpu, k)) = setup() else { return };
    let sms = k.multiprocessors;
    // Matrices of up to 12,288 × 4,096 elements (100 MB); each launch reads the next of as many
    // copies as 800 MB holds, so that 48 launches of even the smallest (5.4 MB) span 260 MB,
    // past the H200's 60 MB of L2.
    let w_each = 12_288 * 4_096;
    let w_total = 8 * w_each;
    let (x, w) = random_operands(&gpu, 16 * 9_728, w_total);
    let y = Buf::<f32>::zeros(&gpu, 16 * 12_288).unwrap();
    // µs a one-row launch of `kernel` over `n_out` × `depth` weights (each the next copy) and its
    // read rate in TB/s.
    let time = |depth: usize, n_out: usize, kernel| {
        let copies = w_total / (n_out * depth);
        let mut copy = 0;
        let us = time_launches(&gpu, 48, || {
            let w_at = w.at(0) + (copy % copies * n_out * depth * 2) as u64;
            copy += 1;
            let m = packed_matmul(x.at(0), w_at, depth, n_out, y.at(0), 1, None);
            k.matmul_with(&gpu, &m, kernel).unwrap();
        });
        (us, (n_out * depth * 2) as f64 / us / 1e6)
    };
    for depth in [2_560, 4_096, 9_728] {
        let mut blocks_list = vec![sms / 2, sms, 160, sms + sms / 2, 2 * sms, 3 * sms, 4 * sms];
        blocks_list.sort_unstable();
        blocks_list.dedup();
        for blocks in blocks_list {
            let n_out = 16 * blocks;
            if n_out * depth > w_each {
                continue;
            }
            let (us, tbs) = time(depth, n_out, MatmulKernel::Narrow);
            let most = blocks.div_ceil(sms);
            println!(
                "depth {depth:>5} outputs {n_out:>6} blocks {blocks:>4} (at most {most} a \
                 multiprocessor): {us:6.1} us {tbs:.2} TB/s {:.1} us per block held",
                us / most as f64
            );
        }
    }
    // Qwen3-4B's one-row matrices as whole launches: one output tile a block (`Narrow`) and two
    // (`Wide`: the swapped chain's t2 blocks, as its q/k/v and gate/up take them with their
    // norms; the gate/up here without its SwiGLU).
    for (name, depth, n_out) in [
        ("q/k/v", 2_560, 6_144),
        ("o", 4_096, 2_560),
        ("gate/up", 2_560, 19_456),
        ("down", 9_728, 2_560),
    ] {
        for kernel in [MatmulKernel::Narrow, MatmulKernel::Wide] {
            let (us, tbs) = time(depth, n_out, kernel);
            println!("Qwen3-4B {name:<7} {kernel:?}: {us:6.1} us {tbs:.2} TB/s");
        }
    }
}

/// Not a test: writes the kernel source of the default model and of the A3B-slice and Qwen3-4B
/// shapes (bench/shapes), and each one's warpgroup matmul module (`NAME.wgmma.cu`, for
/// `cuda_check.py --arch sm_90a`), into the folder `FLASHLANE_KERNEL_SOURCES` names, so that
/// `tools/cuda_check.py` can compile them with NVRTC and ptxas on a machine without a GPU
/// (`--ignored write_kernel_sources`).
#[test]
#[ignore]
fn write_kernel_sources() {
    let out = std::path::PathBuf::from(
        std::env::var("FLASHLANE_KERNEL_SOURCES").expect("FLASHLANE_KERNEL_SOURCES: a folder"),
    );
    std::fs::create_dir_all(&out).expect("the sources' folder");
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    for (name, dir) in [
        ("flashlane-tiny", root.join("models/flashlane-tiny")),
        (
            "qwen3-next-a3b-slice",
            root.join("bench/shapes/qwen3-next-a3b-slice"),
        ),
        ("qwen3-4b", root.join("bench/shapes/qwen3-4b")),
        // The dense test fixture: heads of 16, four query heads a KV head.
        (
            "qwen3-bf16-fixture",
            root.join("tests/fixtures/qwen3_bf16/model"),
        ),
    ] {
        let config = Config::from_dir(&dir).expect("config");
        let dims = Dims::of(&config, KvDtype::Bf16).expect("dims");
        let path = out.join(format!("{name}.cu"));
        std::fs::write(&path, dims.source()).expect("write the source");
        println!("{}", path.display());
        // The warpgroup matmul's module (`cuda_check.py --arch sm_90a`).
        let path = out.join(format!("{name}.wgmma.cu"));
        std::fs::write(&path, dims.wgmma_source()).expect("write the source");
        println!("{}", path.display());
    }
}

/// `y = x · Wᵀ` over `rows` packed rows of `depth` into `n_out` packed outputs (FP8 weights where
/// `fp8` gives their scales), neither gathered nor accumulated, without room for the tiled
/// kernel's split rows (set `x_split` for it).
fn packed_matmul(
    x: u64,
    w: u64,
    depth: usize,
    n_out: usize,
    y: u64,
    rows: usize,
    fp8: Option<Fp8Scales>,
) -> Matmul {
    Matmul {
        x_split: 0,
        partials: 0,
        fp8,
        x,
        x_stride: depth,
        row_index: 0,
        w,
        k: depth,
        n_out,
        y,
        y_stride: n_out,
        rows,
        accumulate: false,
    }
}

/// Random operands for the kernel timings, as a model's: `x_len` f32 inputs and `w_len` bf16
/// weights (as bits). On zeros the tensor cores draw less power and the GPU holds higher clocks
/// than under real weights (session 23's kernel times were of zeros, and a prompt's end-to-end
/// gain with the warpgroup matmul did not show in them).
fn random_operands(gpu: &Arc<Gpu>, x_len: usize, w_len: usize) -> (Buf<f32>, Buf<u16>) {
    let mut rng = Rng::fresh();
    let x = Buf::from_host(gpu, &rng.vec(x_len)).unwrap();
    let w_host: Vec<u16> = bf16_vec(&mut rng, w_len, 0.05)
        .iter()
        .map(|v| v.to_bits())
        .collect();
    (x, Buf::from_host(gpu, &w_host).unwrap())
}

/// The kernels of each timing variant (a name and its define overrides) that compiles, in
/// order; one that does not is named with why. `FLASHLANE_TIMES_VARIANT=TEXT` keeps only the
/// variants whose name holds TEXT (one under ncu).
fn compiled_variants<'a>(
    gpu: &'a Arc<Gpu>,
    dims: &'a Dims,
    variants: &'a [(&'a str, &'a [(&'a str, usize)])],
) -> impl Iterator<Item = (&'a str, Kernels)> + 'a {
    let only = std::env::var("FLASHLANE_TIMES_VARIANT").ok();
    variants
        .iter()
        .filter(move |(name, _)| only.as_deref().is_none_or(|text| name.contains(text)))
        .filter_map(
            |&(name, overrides)| match Kernels::compile_overriding(gpu, dims, overrides) {
                Ok(k) => Some((name, k)),
                Err(err) => {
                    println!("{name:>24}: does not compile: {err}");
                    None
                }
            },
        )
}

/// µs a launch of `run` (after one launch to warm up), averaged over `reps`.
fn time_launches(gpu: &Gpu, reps: usize, mut run: impl FnMut()) -> f64 {
    run();
    gpu.sync().unwrap();
    let start = std::time::Instant::now();
    for _ in 0..reps {
        run();
    }
    gpu.sync().unwrap();
    start.elapsed().as_secs_f64() * 1e6 / reps as f64
}

/// Not a test: how other depths and launch bounds would change the kernels a decode step of the
/// A3B slice and the 4B shape spends most in (`--ignored kernel_define_times --nocapture` on the
/// GPU). Per variant (defines overridden when compiling: the bits never depend on them), the
/// MoE layer of the A3B slice's widths (bf16 and block-scaled FP8 experts, zero weights: the
/// same loads and products) at 1, 4, 8 and 64 rows, and the one-row matmuls that read slowest
/// (bf16 and FP8, the deep kernels where they apply), µs a launch and the weights' read rate.
#[test]
#[ignore]
fn kernel_define_times() {
    let Some(gpu) = open_gpu() else { return };
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../bench/shapes/qwen3-next-a3b-slice");
    let config = Config::from_dir(&dir).expect("the A3B slice's config");
    let dims = Dims::of(&config, KvDtype::Bf16).expect("dims");
    let m = dims.moe.clone().expect("the A3B slice has experts");
    let h = dims.hidden;
    let (e, i, is) = (
        m.num_experts,
        m.expert_intermediate,
        m.shared_expert_intermediate,
    );
    // FP8 blocks as Qwen's FP8 checkpoints cut them.
    let (br, bc) = (128, 128);
    let max_rows = 64;
    let f = |n: usize| Buf::<f32>::zeros(&gpu, n).unwrap();
    let bytes = |n: usize| Buf::<u8>::zeros(&gpu, n).unwrap();
    let mo_w = e + 1 + 2 * is;
    let mut rng = Rng::fresh();
    let (xn, mo, x) = (
        Buf::from_host(&gpu, &rng.vec(max_rows * h)).unwrap(),
        Buf::from_host(&gpu, &rng.vec(max_rows * mo_w)).unwrap(),
        f(max_rows * h),
    );
    let scratch = MoeScratch::new(&gpu, &m, h, max_rows);
    let normed = f(max_rows * h);
    let norm_w = f(h);
    let bf16_w = [
        bytes(e * 2 * i * h * 2),
        bytes(e * h * i * 2),
        bytes(h * is * 2),
    ];
    let fp8_w = [bytes(e * 2 * i * h), bytes(e * h * i), bytes(h * is)];
    let ones = |n: usize| Buf::from_host(&gpu, &vec![1f32; n]).unwrap();
    let fp8_scales = [
        ones(e * (2 * i / br) * (h / bc)),
        ones(e * (h / br) * (i / bc)),
        ones((h / br) * (is / bc)),
    ];
    let launch = |rows: usize, fp8: bool| {
        let w = if fp8 { &fp8_w } else { &bf16_w };
        scratch.launch(
            rows,
            fp8.then(|| super::MoeFp8 {
                gate_up_scales: fp8_scales[0].at(0),
                down_scales: fp8_scales[1].at(0),
                shared_down_scales: fp8_scales[2].at(0),
                block_rows: br,
                block_cols: bc,
            }),
            [xn.at(0), mo.at(0), x.at(0)],
            [w[0].at(0), w[1].at(0), w[2].at(0)],
        )
    };
    let then = super::NormAfter {
        w: norm_w.at(0),
        eps: NORM_EPS,
        zero_centred: true,
        out: normed.at(0),
    };
    // (name, n_out, k) of one-row matmuls: the narrow and few-block wide ones, and wide ones for
    // scale (the DeltaNet input projection's qkvz part: 12,288 outputs, whole FP8 blocks).
    let matrices = [
        ("A3B o", 2048, 4096),
        ("A3B qkvz", 12288, 2048),
        ("4B o", 2560, 4096),
        ("4B down", 2560, 9728),
        ("4B gate_up", 19456, 2560),
    ];
    let w_bytes = 19456 * 9728 * 2;
    // Up to 512 rows (a prefill chunk) of the widest matrix.
    let (w, xb, y) = (bytes(w_bytes), f(512 * 19456), f(512 * 19456));
    let xs = Buf::<u32>::zeros(&gpu, 512 * super::split_row_words(9728)).unwrap();
    let scales = ones((19456 / br + 1) * (9728 / bc + 1));
    // The depths and launch bounds of the kernels as built, each changed alone (session 18 ran
    // the MoE's depths 1 and 3 twice: both slower), and the probe of what the x split costs
    // (meaningless products, real times).
    let variants: [(&str, &[(&str, usize)]); 11] = [
        ("as built", &[]),
        ("X_PRESPLIT 1 (a probe)", &[("MMA_X_PRESPLIT", 1)]),
        ("MMA_NARROW_DEPTH 3", &[("MMA_NARROW_DEPTH", 3)]),
        ("MMA_DEEP_DEPTH 3", &[("MMA_DEEP_DEPTH", 3)]),
        ("MMA_FP8_WIDE_DEPTH 2", &[("MMA_FP8_WIDE_DEPTH", 2)]),
        ("MMA_FP8_WIDE_DEPTH 4", &[("MMA_FP8_WIDE_DEPTH", 4)]),
        ("MMA_FP8_NARROW_DEPTH 2", &[("MMA_FP8_NARROW_DEPTH", 2)]),
        ("MMA_FP8_NARROW_DEPTH 8", &[("MMA_FP8_NARROW_DEPTH", 8)]),
        ("MMA_MIN_BLOCKS 1", &[("MMA_MIN_BLOCKS", 1)]),
        ("MMA_MIN_BLOCKS 3", &[("MMA_MIN_BLOCKS", 3)]),
        ("MOE_FP8_DEPTH 1", &[("MOE_FP8_DEPTH", 1)]),
    ];
    let reps = 50;
    for (name, k) in compiled_variants(&gpu, &dims, &variants) {
        let mut line = format!("{name:>24}: MoE");
        for fp8 in [false, true] {
            line += if fp8 { " | FP8" } else { " bf16" };
            for rows in [1, 4, 8, 64] {
                let l = launch(rows, fp8);
                let us = time_launches(&gpu, reps, || {
                    k.moe(&gpu, &dims, &l, super::MoeSum::WithNorm(&then))
                        .unwrap();
                });
                line += &format!(" {rows}: {us:6.1}");
            }
        }
        line += " µs | one row:";
        // (rows, FP8 weights, kernel, label): at one row Auto's choice, the wide kernel at 3
        // n-tiles (Auto's for the 4B matrices without the deep kernels), the deep one at 3, and
        // FP8; Auto's choice at 64 rows (a decode round of 64 streams) and, bf16, at 512 (a
        // prefill chunk: the tiled kernel).
        let runs: [(usize, bool, MatmulKernel, &str); 7] = [
            (1, false, MatmulKernel::Auto, "bf16"),
            (1, false, MatmulKernel::Tiles(3), "t3"),
            (1, false, MatmulKernel::Deep(3), "deep"),
            (1, true, MatmulKernel::Auto, "fp8"),
            (64, false, MatmulKernel::Auto, "bf16@64"),
            (64, true, MatmulKernel::Auto, "fp8@64"),
            (512, false, MatmulKernel::Auto, "bf16@512"),
        ];
        for (matrix, n_out, depth) in matrices {
            for (rows, fp8, kernel, what) in runs {
                let fp8_scales = fp8.then(|| Fp8Scales {
                    scales: scales.at(0),
                    block_rows: br,
                    block_cols: bc,
                });
                let mm = Matmul {
                    x_split: xs.at(0),
                    ..packed_matmul(xb.at(0), w.at(0), depth, n_out, y.at(0), rows, fp8_scales)
                };
                let us = time_launches(&gpu, reps, || {
                    k.matmul_with(&gpu, &mm, kernel).unwrap();
                });
                let weight_bytes = (n_out * depth * if fp8 { 1 } else { 2 }) as f64;
                line += &format!(
                    " {matrix} {what} {us:.1} ({:.2} TB/s)",
                    weight_bytes / us / 1e6
                );
            }
        }
        println!("{line}");
    }
}

/// Not a test: where the tiles' time goes in a 64-stream decode round of the dense shapes (the k
/// split) and in a prompt (the tiles over 4,096 rows), on Qwen3-4B's and -8B's matrices with
/// random operands (`--ignored tiled_define_times --nocapture` on the GPU): the tiles as built,
/// with other stages and launch bounds, with bf16 inputs (`MMA_SPLIT` 0: half the products), and
/// the two probes (`MMT_PROBE`: the copies alone, the products alone). µs a launch, the
/// weights' read rate and the useful TFLOP/s.
#[test]
#[ignore]
fn tiled_define_times() {
    let Some(gpu) = open_gpu() else { return };
    let dir =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/shapes/qwen3-4b");
    let config = Config::from_dir(&dir).expect("the Qwen3-4B shape's config");
    let dims = Dims::of(&config, KvDtype::Bf16).expect("dims");
    // (name, n_out, k).
    let matrices = [
        ("4B qkv", 6144, 2560),
        ("4B o", 2560, 4096),
        ("4B gate_up", 19456, 2560),
        ("4B down", 2560, 9728),
        ("8B qkv", 6144, 4096),
        ("8B o", 4096, 4096),
        ("8B gate_up", 24576, 4096),
        ("8B down", 4096, 12288),
    ];
    let (max_rows, k_max, out_max) = (4096, 12288, 24576);
    let (x, w) = random_operands(&gpu, max_rows * k_max, out_max * 4096);
    let y = Buf::<f32>::zeros(&gpu, max_rows * out_max).unwrap();
    let xs = Buf::<u32>::zeros(&gpu, max_rows * super::split_row_words(k_max)).unwrap();
    let partials = Buf::<f32>::zeros(&gpu, super::MATMUL_RESIDUES * 64 * out_max).unwrap();
    let variants: [(&str, &[(&str, usize)]); 9] = [
        ("as built", &[]),
        ("MMT_STAGES 2", &[("MMT_STAGES", 2)]),
        ("MMT_STAGES 4", &[("MMT_STAGES", 4)]),
        (
            "STAGES 4, MIN_BLOCKS 1",
            &[("MMT_STAGES", 4), ("MMA_MIN_BLOCKS", 1)],
        ),
        (
            "STAGES 5, MIN_BLOCKS 1",
            &[("MMT_STAGES", 5), ("MMA_MIN_BLOCKS", 1)],
        ),
        ("MMA_MIN_BLOCKS 1", &[("MMA_MIN_BLOCKS", 1)]),
        ("MMA_SPLIT 0 (bf16 x)", &[("MMA_SPLIT", 0)]),
        ("PROBE 1 (copies only)", &[("MMT_PROBE", 1)]),
        ("PROBE 2 (no W copies)", &[("MMT_PROBE", 2)]),
    ];
    let runs = [
        (64, MatmulKernel::TiledSplitK, "split@64"),
        (64, MatmulKernel::Tiled, "tiled@64"),
        (4096, MatmulKernel::Tiled, "tiled@4096"),
    ];
    for (name, k) in compiled_variants(&gpu, &dims, &variants) {
        for (matrix, n_out, depth) in matrices {
            let mut line = format!("{name:>24} {matrix:>10}:");
            for (rows, kernel, what) in runs {
                let m = Matmul {
                    x_split: xs.at(0),
                    partials: partials.at(0),
                    ..packed_matmul(x.at(0), w.at(0), depth, n_out, y.at(0), rows, None)
                };
                let reps = if rows >= 2048 { 5 } else { 30 };
                let us = time_launches(&gpu, reps, || {
                    k.matmul_with(&gpu, &m, kernel).unwrap();
                });
                let tbs = (n_out * depth * 2) as f64 / us / 1e6;
                let tflops = (2 * rows * n_out * depth) as f64 / us / 1e6;
                line += &format!("  {what} {us:.1}us {tbs:.2}TB/s {tflops:.0}TF");
            }
            println!("{line}");
        }
    }
}

/// Not a test: what a warpgroup (wgmma) matmul would have to respect to keep `matmul.cu`'s chain
/// (`--ignored tensor_core_numerics_probe --nocapture` on the GPU; `probe_tc.cu`, compiled alone
/// for sm_90a). On random bf16 products of mixed magnitudes added to f32 accumulators, it counts
/// the outputs where one wgmma m64n8k16 and four mma.sync m16n8k16 over the same k-slots differ
/// in any bit, where an mma.sync with its 16 products in other k-slots differs from the
/// natural order, and where an mma.sync with its operands swapped (the weights in A, x in B:
/// `matmul_bf16_swap`'s chain) differs; and checks each against an f64 sum (a layout mistake in
/// the probe would show as large errors there, a difference of arithmetic as a last-bit one).
#[test]
#[ignore]
fn tensor_core_numerics_probe() {
    use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
    let Some(gpu) = open_gpu() else { return };
    let opts = CompileOptions {
        arch: Some("sm_90a"),
        ..Default::default()
    };
    let ptx = compile_ptx_with_opts(include_str!("probe_tc.cu"), opts).expect("the probe compiles");
    let module = gpu.ctx.load_module(ptx).expect("the probe loads");
    let f = module.load_function("tc_probe").expect("tc_probe");
    let mut rng = Rng::fresh();
    println!("seed {}", rng.0);
    // bf16 of mixed magnitudes: 2^(-8 … 8) × [1, 2), either sign.
    let value = |rng: &mut Rng| {
        let m = 1.0 + rng.below(1 << 16) as f32 / (1 << 16) as f32;
        let e = rng.below(17) as i32 - 8;
        let s = if rng.below(2) == 0 { 1.0 } else { -1.0 };
        bf16::from_f32(s * m * 2f32.powi(e))
    };
    let perms: [[i32; 16]; 3] = [
        // The halves swapped; each half reversed; the chain's order of `mma_tile` (slot 2t + j ←
        // 4t + j, slot 8 + 2t + j ← 4t + 2 + j, over one step's 16 elements).
        [8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7],
        [7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8],
        [0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15],
    ];
    let (mut outputs, mut wgmma_diff, mut worst_wgmma, mut worst_mma) =
        (0usize, 0usize, 0f64, 0f64);
    let (mut swapped, mut swap_diff, mut worst_swap) = (0usize, 0usize, 0f64);
    let mut perm_diff = [0usize; 3];
    for trial in 0..60 {
        let a: Vec<bf16> = (0..64 * 16).map(|_| value(&mut rng)).collect();
        let w: Vec<bf16> = (0..8 * 16).map(|_| value(&mut rng)).collect();
        let c: Vec<f32> = (0..64 * 8)
            .map(|_| value(&mut rng).to_f32() * if rng.below(4) == 0 { 64.0 } else { 1.0 })
            .collect();
        let perm = &perms[trial % perms.len()];
        let bits = |v: &[bf16]| v.iter().map(|x| x.to_bits()).collect::<Vec<u16>>();
        let (ab, wb) = (
            Buf::from_host(&gpu, &bits(&a)).unwrap(),
            Buf::from_host(&gpu, &bits(&w)).unwrap(),
        );
        let (cb, pb) = (
            Buf::from_host(&gpu, &c).unwrap(),
            Buf::from_host(&gpu, &perm[..]).unwrap(),
        );
        let outs: Vec<Buf<f32>> = (0..4).map(|_| Buf::zeros(&gpu, 64 * 8).unwrap()).collect();
        gpu.sync().unwrap();
        gpu.launch(
            &f,
            (1, 1, 1),
            128,
            &[
                Arg::Ptr(ab.at(0)),
                Arg::Ptr(wb.at(0)),
                Arg::Ptr(cb.at(0)),
                Arg::Ptr(pb.at(0)),
                Arg::Ptr(outs[0].at(0)),
                Arg::Ptr(outs[1].at(0)),
                Arg::Ptr(outs[2].at(0)),
                Arg::Ptr(outs[3].at(0)),
            ],
        )
        .unwrap();
        gpu.sync().unwrap();
        let [mma, permuted, wgmma, swap] =
            [0, 1, 2, 3].map(|i| outs[i].read(&gpu, 64 * 8).unwrap());
        for r in 0..64 {
            for n in 0..8 {
                let i = r * 8 + n;
                let exact: f64 = c[i] as f64
                    + (0..16)
                        .map(|k| a[r * 16 + k].to_f64() * w[n * 16 + k].to_f64())
                        .sum::<f64>();
                let err = |v: f32| (v as f64 - exact).abs() / exact.abs().max(1e-30);
                worst_mma = worst_mma.max(err(mma[i]));
                worst_wgmma = worst_wgmma.max(err(wgmma[i]));
                outputs += 1;
                wgmma_diff += usize::from(wgmma[i].to_bits() != mma[i].to_bits());
                perm_diff[trial % perms.len()] +=
                    usize::from(permuted[i].to_bits() != mma[i].to_bits());
                // The swapped probe covers each warp's first 8 rows.
                if r % 16 < 8 {
                    swapped += 1;
                    worst_swap = worst_swap.max(err(swap[i]));
                    swap_diff += usize::from(swap[i].to_bits() != mma[i].to_bits());
                }
            }
        }
    }
    println!(
        "{outputs} outputs: wgmma differs from mma.sync in {wgmma_diff}; mma.sync with slots \
         permuted differs from the natural order in {} / {} / {} (halves swapped / reversed / the \
         chain's order, a third of the outputs each); worst relative error against f64: mma.sync \
         {worst_mma:.2e}, wgmma {worst_wgmma:.2e}; mma.sync with its operands swapped differs \
         in {swap_diff} of {swapped} (worst {worst_swap:.2e})",
        perm_diff[0], perm_diff[1], perm_diff[2]
    );
    assert!(
        worst_wgmma < 1e-3,
        "the wgmma probe's layout is wrong (its sums are not A·B + C)"
    );
    assert!(
        worst_swap < 1e-3,
        "the swapped probe's layout is wrong (its sums are not W·xᵀ + C)"
    );
}
