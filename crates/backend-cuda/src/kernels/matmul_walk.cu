// ---------------------------------------------------------------------------------------------
// The walk: a round's k split (up to 64 rows) as blocks that each walk the whole of k
// (FLASHLANE_MATMUL_WALK=tma, an A/B switch; compiled in the warpgroup module, after matmul_wg.cu).
// Written after cuBLAS's 64-row kernels (bench/RESULTS.md session 69): a block holds a tile of
// outputs by all its rows and walks all of k through a deep ring filled by a producer warp's
// bulk copies, one block a multiprocessor, where the tiles' split runs 8 short blocks a tile
// (5 chunks each on Qwen3-4B) and folds their partials in a cluster.
//
// Batch invariance: the chain of `matmul_bf16_wg_swap` (whose bits are the tiles'): the operands
// swapped (yᵀ = W · xᵀ, a wgmma m64nNk16's A the weights, B x's split rows in `split_rows`' word
// order), a step the tiles' step's 16 products, the hi then the lo product, residue 0's chunks
// (0, 8, 16, …) in order from zero, then residue 1's, …, each residue's partial folded into the
// total in residue order (total = p0, then total += pr; the empty residues' zeros one + 0), then
// y written once (+ y where it accumulates): `mmt_cluster_fold`'s sum, with no partial leaving
// the block.
//
// A block: a consumer warpgroup (warps 0–3; WGS of them below) and a producer warp (the last).
// The consumers hold 64 outputs (A's rows: lane (g, t) of warp q rows 16q + g and 16q + g + 8,
// the swapped split's) by N rows (32 or 64: B's columns). The producer fills a ring of
// MWK_TMA_STAGES_<N> stages with bulk copies completing on each stage's `full` barrier; the
// consumers read a stage's weights into registers (`ld.shared`), run its 8 wgmmas (4 with
// MMA_SPLIT off) and release the stage on its `empty` barrier once those are done, MWK_DEPTH
// chunks of a residue a step (their products issued back to back, then awaited together).
// - x: `split_rows_walk` / `split_rows_norm_walk` write the split rows in the blocks' layout:
//   block b's rows (nb = min(N, rows − bN) of them) from word bN · 64 · chunks on, chunk c's at
//   c · nb · 64 words into them, piece p (16 bytes: 0–7 hi, 8–15 lo) of row r of the block at
//   (p · nb + r) · 4 words into the chunk's. So a chunk's x is one copy of a whole block's rows,
//   or a copy a piece of nb · 16 bytes, to (p · N + r) · 16 in the stage (the swapped split's
//   place; rows past `rows` hold what they held: they are B's columns, whose sums are never
//   written).
// - W: a chunk is one tensor copy (`tma_load_2d`: a box of 64 elements × 64 rows of W's tensor
//   map, or with SWIGLU two of 32 rows: the gate rows then the up rows) under the 128-byte
//   swizzle (piece j of the stage's row r at j ^ (r & 7); zeros outside the matrix). Rows past
//   the outputs and pieces past k are masked where multiplied, as the swapped split masks them.
// With SWIGLU a block's 64 A rows are 32 units' gate and up rows: lane (g, t) of warp q holds
// unit u0 + 8q + g's gate row (g) and up row (g + 8), so a thread's sums hold both and it writes
// act = silu(gate) · up (`mmt_cluster_fold`'s expression on the same sums).
// (W's rows copied apart, 64 copies a chunk, and clusters of 2 or 4 blocks along the outputs
// multicasting x to each other ran at 0.24–0.36× the default's decode rate at 64 streams,
// H100, sessions 70 and 71, and were removed.)
//
// With KG k groups (FLASHLANE_MATMUL_WALK_K_GROUPS; 64 rows, no SwiGLU) the residues are shared
// out over a cluster of KG blocks along k (grid z): block g walks residues mwk_group_first(g) …
// mwk_group_first(g + 1) − 1 in order (2, 3, 3 of 8 for 3 groups), so a tile's walk takes KG
// multiprocessors where the outputs give fewer than half of them a block (Qwen3-4B's o and
// down: 40 tiles). The chain stays one block's: block 0 folds its residues (0 …) into its total as
// the walk does; each later block keeps each of its residues' partials apart, in its shared
// memory past the ring; after the cluster's barrier block 0 adds them to its total one by one in
// residue order (total += p_r, through distributed shared memory) and writes y. A later block's
// own sum of its residues would round differently, so none is made. Every residue holds a chunk
// (the host asks for chunks ≥ MMT_RESIDUES).
//
// With WGS consumer warpgroups (FLASHLANE_MATMUL_WALK_OUTS=128 or 192: 64 rows) a
// block holds 64 · WGS outputs (a gate/up's 32 · WGS units), warpgroup w the 64 of them from 64w
// (units from 32w), each as the one-warpgroup walk holds its 64, all on the same stage of x: at
// 64 rows a chunk of x's split is 16 KB and of a warpgroup's weights 8 KB, so x shared by 2 or 3
// warpgroups takes 2/3 or 5/9 of the bytes an output, and a multiprocessor has 2 or 3 consumer
// warpgroups in flight (ncu, H100, session 73: the walk is latency-bound, 7.6 % of the warp
// slots active in one warpgroup a block, 20 % in 3). Each warpgroup runs its own chain on its own outputs: the bits are
// the one-warpgroup walk's. A step takes at most 2 chunks there (the registers of 288 or 416
// threads a multiprocessor).
//
// With WGS warpgroups in KG k groups (FLASHLANE_MATMUL_WALK=wide: plain splits, KG 4 or 8, so 2
// or 1 residues a block, alike) a later group's partials would not fit beside the ring (48 KB a
// residue at 3 warpgroups): its first of two residues waits in `total`, its last in `acc`, and
// after the walk every block stashes its sums in its own ring, now idle — block 0 its total of
// residues 0 … (the chain's start), a later block each residue's partial apart. The fold is
// then shared out: block g's thread th folds its share of sums i (1/KG of them) of thread th in
// every block, total = block 0's, then += each later residue's in residue order — the sum block
// 0 alone would make — and writes those outputs, so no block reads more than its share.
//
// Host defines: MWK_TMA_STAGES_64, MWK_TMA_STAGES_32,
// MWK_TMA_STAGES_KG2, MWK_TMA_STAGES_KG3, MWK_TMA_STAGES_KG4, MWK_TMA_STAGES_W2,
// MWK_TMA_STAGES_W3, MWK_DEPTH.

#define MWK_CONSUMERS 128                                 // one warpgroup
#define MWK_THREADS (MWK_CONSUMERS + WARP)                // and the producer warp
#define MWK_OUTS 64                                       // A's rows a warpgroup
#define MWK_TMA_W_STAGE_BYTES (MWK_OUTS * MMA_CHUNK * 2)  // a box: 64 rows of 128 bytes, swizzled

// A CUtensorMap (128 opaque bytes the host encodes with cuTensorMapEncodeTiled, passed as a
// __grid_constant__ parameter).
struct __align__(64) tma_map_t {
    unsigned long long opaque[16];
};

__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
// One arrival that also expects `bytes` of copies to complete on the barrier.
__device__ __forceinline__ void mbar_arrive_expect(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}
// Until the barrier's phase of this parity has completed.
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "MWK_WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra MWK_WAIT;\n"
        "}\n" ::"r"(smem_u32(bar)),
        "r"(parity)
        : "memory");
}
// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to shared memory,
// completing on `bar`.
__device__ __forceinline__ void bulk_copy(void* smem, const void* gmem, unsigned bytes, unsigned long long* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_u32(smem)),
                 "l"(gmem), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
}
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

// The box of `map` at (element c0 of the inner dimension, row c1) into `dst` (1,024-byte aligned
// for the 128-byte swizzle), its bytes counted on `bar`. Elements outside the tensor are zeros.
__device__ __forceinline__ void tma_load_2d(void* dst, const tma_map_t* map, int c0, int c1,
                                            unsigned long long* bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
            smem_u32(dst)),
        "l"(map), "r"(c0), "r"(c1), "r"(smem_u32(bar))
        : "memory");
}

// The first residue of k group g of KG, MMT_RESIDUES for g = KG: residues shared out as evenly as
// they go, the fewer to the first groups (2, 3, 3 of 8 for 3 groups), as block 0 also folds and
// residue 0 holds the most chunks.
template <int KG>
__device__ __forceinline__ int mwk_group_first(int g) {
    return g * MMT_RESIDUES / KG;
}

// The chunk after c in the walk: the next of its residue, past a residue's last the next
// residue's first (residue 0's chunks 0, 8, 16, …, then 1's, …).
__device__ __forceinline__ int walk_next(int c, int chunks) {
    return c + MMT_RESIDUES < chunks ? c + MMT_RESIDUES : c % MMT_RESIDUES + 1;
}

// The block's output rows `y` (ceil(rows / N) × ceil(n_out / (64 · WGS)) blocks, × KG along z;
// SWIGLU: × ceil(width / (32 · WGS)), act into y with stride y_stride). `xs`: the rows split by
// `split_rows_walk` for N rows a block. W: `w_map` (boxes of 64 elements × 64 · WGS rows,
// 32 · WGS with SWIGLU).
template <int N, int STAGES, bool SWIGLU, int KG = 1, int WGS = 1>
__device__ __forceinline__ void matmul_walk_block(const unsigned* __restrict__ xs, const tma_map_t* w_map, int k,
                                                  int n_out, float* __restrict__ y, int y_stride, int accumulate,
                                                  int rows) {
    // The block's consumers (WGS warpgroups), its outputs (A's rows), a step's most chunks.
    constexpr int CONSUMERS = MWK_CONSUMERS * WGS, OUTS = MWK_OUTS * WGS;
    constexpr int DEPTH = WGS > 1 && MWK_DEPTH > 2 ? 2 : MWK_DEPTH;
    constexpr int X_STAGE_BYTES = N * MMT_X_PIECES * 16;
    constexpr int W_STAGE_BYTES = MWK_TMA_W_STAGE_BYTES * WGS;
    constexpr int STAGE_BYTES = X_STAGE_BYTES + W_STAGE_BYTES;
    static_assert(STAGE_BYTES % 1024 == 0, "stages 1,024-byte aligned (the swizzle's)");
    static_assert(STAGES >= DEPTH, "a step's chunks in the ring at once (the consumers release none before)");
    static_assert(WGS == 1 || N == 64, "several warpgroups: the 64-row walk alone");
    // Several warpgroups in k groups: each group's residues alike (1 or 2), their partials held
    // in registers through the walk and stashed in the ring after it, the fold shared out.
    constexpr bool STASH = WGS > 1 && KG > 1;
    constexpr int PER_GROUP = MMT_RESIDUES / KG;
    static_assert(!STASH || (PER_GROUP * KG == MMT_RESIDUES && PER_GROUP <= 2),
                  "wide k groups: 1 or 2 residues a group, every group alike");
    extern __shared__ float4 mwk_smem4[];
    unsigned char* smem = reinterpret_cast<unsigned char*>(mwk_smem4);
    // The swizzled boxes: the ring from the next 1,024-byte boundary (the host allows for it).
    smem += (1024u - (smem_u32(smem) & 1023u)) & 1023u;
    unsigned long long* full = reinterpret_cast<unsigned long long*>(smem + STAGES * STAGE_BYTES);
    unsigned long long* empty = full + STAGES;
    // The warp by a shuffle: known uniform across it, so that ptxas keeps the consumers' wgmmas
    // asynchronous (after a branch on threadIdx it serialised them: C7518).
    const int warp = __shfl_sync(~0u, threadIdx.x / WARP, 0), lane = threadIdx.x % WARP;
    const int r0 = blockIdx.x * N, nb = min(N, rows - r0);
    const int chunks = (k + MMA_CHUNK - 1) / MMA_CHUNK;
    // SWIGLU: units u0 … u0 + 32 · WGS − 1 of `width`.
    const int width = n_out / 2, u0 = blockIdx.y * (OUTS / 2), o0 = blockIdx.y * OUTS;
    // Row m (0–63) of warpgroup wg's A: its row of W, or -1 past the matrix.
    auto w_row = [&](int m, int wg) {
        if (SWIGLU) {
            const int unit = u0 + 32 * wg + 8 * (m / 16) + m % 8;
            return unit < width ? (m % 16 < 8 ? unit : width + unit) : -1;
        }
        return o0 + 64 * wg + m < n_out ? o0 + 64 * wg + m : -1;
    };

    static_assert(KG == 1 || (!SWIGLU && N == 64), "k groups: the plain 64-row walk alone");
    // This block's k group (its rank in a cluster along k) and its residues [first, end), the
    // chunks it walks (every residue holds one: chunks ≥ MMT_RESIDUES with KG > 1).
    const int group = KG > 1 ? (int)cluster_rank() : 0;
    const int first_residue = mwk_group_first<KG>(group), end_residue = mwk_group_first<KG>(group + 1);
    int walk_chunks = chunks;
    if (KG > 1) {
        walk_chunks = 0;
        for (int r = first_residue; r < end_residue; r++) walk_chunks += (chunks - 1 - r) / MMT_RESIDUES + 1;
    }
    // A later k group's residues' partials, past the ring's barriers: residue first + j's at
    // [j][i][thread] (consecutive threads' words side by side).
    float* parts = reinterpret_cast<float*>(smem + STAGES * (STAGE_BYTES + 16));
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(&full[s], 1);
            // Every consumer warp releases each stage.
            mbar_init(&empty[s], CONSUMERS / WARP);
        }
        // The barriers' initialisation visible to the copies (the async proxy).
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    pdl_launch_dependents();

    if (warp == CONSUMERS / WARP) {
        // The producer: lane 0 copies W's boxes and a whole block's x, lanes 0–15 x's piece l
        // where the block has fewer rows.
        const size_t x_block = (size_t)r0 * chunks * MMA_CHUNK;
        // A box counts its whole bytes, zeros outside the matrix included. With several
        // warpgroups one box holds all their rows (a gate/up's: all their units' gate rows, then
        // a box of their up rows).
        auto weights = [&](int s, int c) {
            unsigned char* ws = smem + s * STAGE_BYTES + X_STAGE_BYTES;
            if (lane == 0) {
                mbar_arrive_expect(&full[s], (unsigned)(nb * MMT_X_PIECES * 16 + W_STAGE_BYTES));
                if (SWIGLU) {
                    tma_load_2d(ws, w_map, c * MMA_CHUNK, u0, &full[s]);
                    tma_load_2d(ws + W_STAGE_BYTES / 2, w_map, c * MMA_CHUNK, width + u0, &full[s]);
                } else {
                    tma_load_2d(ws, w_map, c * MMA_CHUNK, o0, &full[s]);
                }
            }
        };
        // A whole block's rows are one copy (its pieces' places are the stage's); fewer, a copy
        // a piece.
        auto x_pieces = [&](int s, int c) {
            const unsigned* src = xs + x_block + (size_t)c * nb * MMA_CHUNK;
            if (nb == N) {
                if (lane == 0) bulk_copy(smem + s * STAGE_BYTES, src, N * MMT_X_PIECES * 16, &full[s]);
            } else if (lane < MMT_X_PIECES) {
                bulk_copy(smem + s * STAGE_BYTES + lane * N * 16, src + (size_t)lane * nb * 4, nb * 16, &full[s]);
            }
        };
        // The first stages' weights (never written while kernels run) before the wait for the
        // kernel ahead, whose output x is.
        const int first = min(STAGES, walk_chunks);
        int c = first_residue;
        for (int v = 0; v < first; v++, c = walk_next(c, chunks)) weights(v, c);
        pdl_wait();
        c = first_residue;
        for (int v = 0; v < first; v++, c = walk_next(c, chunks)) x_pieces(v, c);
        for (int v = first; v < walk_chunks; v++, c = walk_next(c, chunks)) {
            const int s = v % STAGES;
            // The consumers' release of the stage's use before.
            mbar_wait(&empty[s], (v / STAGES - 1) & 1);
            weights(s, c);
            x_pieces(s, c);
        }
        // The k groups' two barriers around the fold (every thread of the cluster takes part).
        if (KG > 1) {
            cluster_sync();
            cluster_sync();
        }
        return;
    }

    // The consumers: warpgroup wg, rows of A by lane (g, t) of its warp q: 16q + g and 16q + g + 8.
    pdl_wait();
    const int g = lane / 4, t = lane % 4, wg = warp / 4, q = warp % 4;
    const int ma = 16 * q + g, mb = ma + 8;
    const bool a_in = w_row(ma, wg) >= 0, b_in = w_row(mb, wg) >= 0;
    // The stage's rows of A's rows ma and mb (SWIGLU: the gate box's row 32wg + 8q + g, the up
    // box's OUTS / 2 rows on) and their 16-byte places of pieces 2t and 2t + 1 under the swizzle.
    const int sa = SWIGLU ? 32 * wg + 8 * q + g : 64 * wg + ma;
    const int sb = SWIGLU ? OUTS / 2 + 32 * wg + 8 * q + g : 64 * wg + mb;
    auto w_at = [&](int row, int piece) { return row * MMA_CHUNK * 2 + ((piece ^ (row & 7)) * 16); };
    float acc[N / 2], total[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; i++) acc[i] = total[i] = 0.0f;
    // Steps of up to MWK_DEPTH chunks of one residue in the walk's order: each chunk's weights
    // into its A registers, all their products issued back to back (a wgmma accumulates in
    // issue order, so the chunks' order and sums are the one-chunk walk's), then every product
    // awaited (A's registers and the stages free), the stages released and, at a residue's end,
    // the residue (c % 8) folded into the total in residue order, the next from zero. One chunk
    // a step spent ~600 cycles a chunk in waits at 32 rows (8 KB of weights a block every ~345
    // ns: Qwen3-4B's 64-row o and down in twice cuBLAS's time, H100, session 70); a step of
    // several pays them once for all its chunks, while the producer keeps the ring full.
    int v = 0, c = first_residue;
    while (v < walk_chunks) {
        // The step's chunks: c, c + 8, … while its residue lasts, DEPTH at most.
        const int left = (chunks - 1 - c) / MMT_RESIDUES + 1;
        const int n = min(DEPTH, left);
        unsigned a[DEPTH][4][4];
#pragma unroll
        for (int d = 0; d < DEPTH; d++) {
            if (d < n) {
                const int vd = v + d, cd = c + d * MMT_RESIDUES, s = vd % STAGES;
                mbar_wait(&full[s], (vd / STAGES) & 1);
                const unsigned char* ws = smem + s * STAGE_BYTES + X_STAGE_BYTES;
                const uint4 ga = *reinterpret_cast<const uint4*>(ws + w_at(sa, 2 * t));
                const uint4 ha = *reinterpret_cast<const uint4*>(ws + w_at(sa, 2 * t + 1));
                const uint4 gb = *reinterpret_cast<const uint4*>(ws + w_at(sb, 2 * t));
                const uint4 hb = *reinterpret_cast<const uint4*>(ws + w_at(sb, 2 * t + 1));
                // Pieces past k and rows past the matrix are zeros (TMA's zeros, and past a
                // gate/up's units its up rows, masked the same way).
                const bool k_in = cd * MMA_CHUNK + 16 * t < k;
                swapped_a(ga, ha, gb, hb, k_in && a_in ? ~0u : 0u, k_in && b_in ? ~0u : 0u, a[d]);
            }
        }
        // Every A register written before the fence (else ptxas fences each step's wgmma).
#pragma unroll
        for (int d = 0; d < DEPTH; d++)
#pragma unroll
            for (int st = 0; st < 4; st++)
#pragma unroll
                for (int q = 0; q < 4; q++) asm volatile("" : "+r"(a[d][st][q]));
        wgmma_pin_n<N>(acc);
        wgmma_fence();
#pragma unroll
        for (int d = 0; d < DEPTH; d++) {
            if (d < n) {
                const unsigned char* stage = smem + ((v + d) % STAGES) * STAGE_BYTES;
#pragma unroll
                for (int st = 0; st < 4; st++) {
                    wgmma_m64k16<N>(acc, a[d][st][0], a[d][st][1], a[d][st][2], a[d][st][3],
                                    wgmma_desc(stage + 2 * st * N * 16, N * 16, 128));
                    if (MMA_SPLIT)
                        wgmma_m64k16<N>(acc, a[d][st][0], a[d][st][1], a[d][st][2], a[d][st][3],
                                        wgmma_desc(stage + (8 + 2 * st) * N * 16, N * 16, 128));
                }
            }
        }
        wgmma_commit();
        wgmma_wait_all();
        wgmma_pin_n<N>(acc);
        __syncwarp();
        if (lane == 0) {
            for (int d = 0; d < n; d++) {
                mbar_arrive(&empty[(v + d) % STAGES]);
            }
        }
        const int last = c + (n - 1) * MMT_RESIDUES;
        if (last + MMT_RESIDUES >= chunks) {
            if (group == 0) {
#pragma unroll
                for (int i = 0; i < N / 2; i++) {
                    total[i] = c % MMT_RESIDUES == 0 ? acc[i] : total[i] + acc[i];
                    acc[i] = 0.0f;
                }
            } else if (STASH) {
                // A later group's first of two residues waits in `total`, its last in `acc`.
                if (PER_GROUP == 2 && c % MMT_RESIDUES == first_residue) {
#pragma unroll
                    for (int i = 0; i < N / 2; i++) {
                        total[i] = acc[i];
                        acc[i] = 0.0f;
                    }
                }
            } else {
                float* part = parts + (size_t)(c % MMT_RESIDUES - first_residue) * (N / 2) * CONSUMERS;
#pragma unroll
                for (int i = 0; i < N / 2; i++) {
                    part[i * CONSUMERS + threadIdx.x] = acc[i];
                    acc[i] = 0.0f;
                }
            }
        }
        v += n;
        c = walk_next(last, chunks);
    }
    if (STASH) {
        // The ring is free once every consumer is past its last product (each stage's copies
        // landed: its full barrier was awaited). Block g stashes its sums there, [slot][i][thread]:
        // group 0 its total (residues 0 … in order, the chain's start), a later group each of its
        // residues' partials apart. Then thread th of block g folds sums i of g's share (SUMS of
        // them) of thread th in every block, in residue order — total = group 0's, then
        // total += p_r — the sum block 0 alone would make, and writes them.
        constexpr int SLOT = (N / 2) * CONSUMERS;
        constexpr int SUMS = (N / 2) / KG;
        constexpr int SLOTS = 1 + MMT_RESIDUES - PER_GROUP;
        float* stash = reinterpret_cast<float*>(smem);
        asm volatile("bar.sync 1, %0;" ::"n"(CONSUMERS) : "memory");
#pragma unroll
        for (int i = 0; i < N / 2; i++) {
            stash[i * CONSUMERS + threadIdx.x] = group != 0 && PER_GROUP == 1 ? acc[i] : total[i];
            if (PER_GROUP == 2 && group != 0) stash[SLOT + i * CONSUMERS + threadIdx.x] = acc[i];
        }
        cluster_sync();
        // Every word of the share loaded first (one wait for the remote blocks), then added.
        float p[SUMS][SLOTS];
#pragma unroll
        for (int m = 0; m < SUMS; m++) {
            const float* at = stash + (group * SUMS + m) * CONSUMERS + threadIdx.x;
            p[m][0] = cluster_load_f32(at, 0);
#pragma unroll
            for (int s = 1; s < SLOTS; s++) {
                const int r = PER_GROUP + s - 1;  // residue r: group r / PER_GROUP's (r % PER_GROUP)th
                p[m][s] = cluster_load_f32(at + (r % PER_GROUP) * SLOT, r / PER_GROUP);
            }
        }
#pragma unroll
        for (int m = 0; m < SUMS; m++) {
            float sum = p[m][0];
#pragma unroll
            for (int s = 1; s < SLOTS; s++) sum += p[m][s];
            const int i = group * SUMS + m;
            const int r = r0 + (i / 4) * 8 + 2 * t + i % 2;
            const int o = o0 + 64 * wg + ((i % 4) / 2 ? mb : ma);
            if (r < rows && o < n_out) {
                float* out = y + (size_t)r * y_stride + o;
                *out = accumulate ? *out + sum : sum;
            }
        }
        // No block leaves before the others have read its stash.
        cluster_sync();
        return;
    }
    if (KG > 1) {
        // Every group's partials written; block 0 adds the later groups' residues to its total
        // in residue order (the same thread's words in each block), then no block leaves before
        // block 0 has read its shared memory.
        cluster_sync();
        if (group == 0) {
            for (int g2 = 1; g2 < KG; g2++) {
                const int residues = mwk_group_first<KG>(g2 + 1) - mwk_group_first<KG>(g2);
                for (int j = 0; j < residues; j++) {
                    // The residue's words loaded together (one wait for the remote blocks'
                    // latency), then added in order.
                    const float* part = parts + (size_t)j * (N / 2) * CONSUMERS + threadIdx.x;
                    float p[N / 2];
#pragma unroll
                    for (int i = 0; i < N / 2; i++) p[i] = cluster_load_f32(part + i * CONSUMERS, g2);
#pragma unroll
                    for (int i = 0; i < N / 2; i++) total[i] += p[i];
                }
            }
        }
        cluster_sync();
        if (group != 0) return;
    }
    // d[4j + i]: A row (i % 4) / 2 ? mb : ma, B column (row) 8j + 2t + i % 2. The empty
    // residues' zeros: one + 0 is all of them (x + 0 + 0 = x + 0).
#pragma unroll
    for (int i = 0; i < N / 2; i++) {
        if (chunks < MMT_RESIDUES) total[i] += 0.0f;
        const int r = r0 + (i / 4) * 8 + 2 * t + i % 2;
        if (r >= rows) continue;
        if (SWIGLU) {
            // Gate (row g) and up (row g + 8) of unit u0 + 32wg + 8q + g.
            const int unit = u0 + 32 * wg + 8 * q + g;
            if ((i % 4) / 2 == 0 && unit < width)
                y[(size_t)r * y_stride + unit] = siluf_(total[i]) * total[i + 2];
        } else {
            const int o = o0 + 64 * wg + ((i % 4) / 2 ? mb : ma);
            if (o < n_out) {
                float* out = y + (size_t)r * y_stride + o;
                *out = accumulate ? *out + total[i] : total[i];
            }
        }
    }
}

// Grid (ceil(rows / N), ceil(n_out / 64)), or for a dense MLP's gate/up (W: `width` gate rows
// then their up rows, n_out = 2 · width; act = silu(gate) · up into y, stride y_stride)
// (ceil(rows / N), ceil(width / 32)); the tiles' arguments, W as its tensor map `w_map` (boxes
// of 64 elements × 64 rows, a gate/up's of 32 rows), over rows split by `split_rows_walk` (or
// `split_rows_norm_walk`) for N rows a block: 64, or 32 (the row halves of a matrix with few
// output tiles; FLASHLANE_MATMUL_WALK_ROWS).
#define MWK_TMA_KERNEL(name, rows, stages, swiglu)                                                             \
    extern "C" __global__ void __launch_bounds__(MWK_THREADS, 1)                                               \
        name(const unsigned* __restrict__ xs, const __grid_constant__ tma_map_t w_map, int k, int n_out,        \
             float* __restrict__ y, int y_stride, int accumulate, int rows_) {                                  \
        matmul_walk_block<rows, stages, swiglu>(xs, &w_map, k, n_out, y, y_stride, accumulate, rows_);          \
    }
MWK_TMA_KERNEL(matmul_bf16_walk_tma_n64, 64, MWK_TMA_STAGES_64, false)
MWK_TMA_KERNEL(matmul_bf16_walk_tma_n32, 32, MWK_TMA_STAGES_32, false)
MWK_TMA_KERNEL(matmul_bf16_walk_tma_swiglu, 64, MWK_TMA_STAGES_64, true)
MWK_TMA_KERNEL(matmul_bf16_walk_tma_swiglu_n32, 32, MWK_TMA_STAGES_32, true)
#define MWK_KG2 __cluster_dims__(1, 1, 2)
#define MWK_KG3 __cluster_dims__(1, 1, 3)
#define MWK_KG4 __cluster_dims__(1, 1, 4)

// The TMA walk of 64 rows in k groups (FLASHLANE_MATMUL_WALK_K_GROUPS): grid (ceil(rows / 64),
// ceil(n_out / 64), KG), a cluster of KG blocks along k a tile.
#define MWK_KG_KERNEL(name, stages, kg, cluster)                                                               \
    extern "C" __global__ void __launch_bounds__(MWK_THREADS, 1) cluster                                       \
        name(const unsigned* __restrict__ xs, const __grid_constant__ tma_map_t w_map, int k, int n_out,        \
             float* __restrict__ y, int y_stride, int accumulate, int rows_) {                                  \
        matmul_walk_block<64, stages, false, kg>(xs, &w_map, k, n_out, y, y_stride, accumulate, rows_);         \
    }
MWK_KG_KERNEL(matmul_bf16_walk_tma_kg2, MWK_TMA_STAGES_KG2, 2, MWK_KG2)
MWK_KG_KERNEL(matmul_bf16_walk_tma_kg3, MWK_TMA_STAGES_KG3, 3, MWK_KG3)
MWK_KG_KERNEL(matmul_bf16_walk_tma_kg4, MWK_TMA_STAGES_KG4, 4, MWK_KG4)

// The TMA walk of 64 rows with WGS consumer warpgroups (FLASHLANE_MATMUL_WALK_OUTS): grid
// (ceil(rows / 64), ceil(n_out / (64 · WGS))), a gate/up's (ceil(rows / 64), ceil(width /
// (32 · WGS))); W's boxes of 64 · WGS rows (a gate/up's of 32 · WGS).
#define MWK_WIDE_KERNEL(name, stages, swiglu, wgs)                                                             \
    extern "C" __global__ void __launch_bounds__(MWK_CONSUMERS * wgs + WARP, 1)                                \
        name(const unsigned* __restrict__ xs, const __grid_constant__ tma_map_t w_map, int k, int n_out,        \
             float* __restrict__ y, int y_stride, int accumulate, int rows_) {                                  \
        matmul_walk_block<64, stages, swiglu, 1, wgs>(xs, &w_map, k, n_out, y, y_stride, accumulate, rows_);    \
    }
MWK_WIDE_KERNEL(matmul_bf16_walk_tma_w2, MWK_TMA_STAGES_W2, false, 2)
MWK_WIDE_KERNEL(matmul_bf16_walk_tma_w3, MWK_TMA_STAGES_W3, false, 3)
MWK_WIDE_KERNEL(matmul_bf16_walk_tma_swiglu_w2, MWK_TMA_STAGES_W2, true, 2)
MWK_WIDE_KERNEL(matmul_bf16_walk_tma_swiglu_w3, MWK_TMA_STAGES_W3, true, 3)
#define MWK_KG8 __cluster_dims__(1, 1, 8)

// The TMA walk of 64 rows with WGS consumer warpgroups in KG k groups (4: 2 residues a block;
// 8: one) (FLASHLANE_MATMUL_WALK=wide): grid (ceil(rows / 64), ceil(n_out / (64 · WGS)), KG), a
// cluster of KG blocks along k a tile, the fold shared out over the cluster.
#define MWK_WIDE_KG_KERNEL(name, stages, wgs, kg, cluster)                                                      \
    extern "C" __global__ void __launch_bounds__(MWK_CONSUMERS * wgs + WARP, 1) cluster                         \
        name(const unsigned* __restrict__ xs, const __grid_constant__ tma_map_t w_map, int k, int n_out,        \
             float* __restrict__ y, int y_stride, int accumulate, int rows_) {                                  \
        matmul_walk_block<64, stages, false, kg, wgs>(xs, &w_map, k, n_out, y, y_stride, accumulate, rows_);    \
    }
MWK_WIDE_KG_KERNEL(matmul_bf16_walk_tma_w2_kg4, MWK_TMA_STAGES_W2, 2, 4, MWK_KG4)
MWK_WIDE_KG_KERNEL(matmul_bf16_walk_tma_w2_kg8, MWK_TMA_STAGES_W2, 2, 8, MWK_KG8)
MWK_WIDE_KG_KERNEL(matmul_bf16_walk_tma_w3_kg4, MWK_TMA_STAGES_W3, 3, 4, MWK_KG4)
MWK_WIDE_KG_KERNEL(matmul_bf16_walk_tma_w3_kg8, MWK_TMA_STAGES_W3, 3, 8, MWK_KG8)

// x's rows split for the walk's blocks of `block_rows` rows (`split_rows_of`'s words, in the
// walk's layout: `split_word_at`). Grid `split_rows`'.
extern "C" __global__ void __launch_bounds__(SPLIT_THREADS)
split_rows_walk(const float* __restrict__ x, int x_stride, const int* __restrict__ row_index, int rows, int k,
                int block_rows, unsigned* __restrict__ xs) {
    split_rows_of<false>(x, x_stride, row_index, rows, k, xs, block_rows);
}

// `split_rows_norm` in the walk's layout.
extern "C" __global__ void __launch_bounds__(SPLIT_THREADS)
split_rows_norm_walk(const float* __restrict__ x, int rows, int k, const float* __restrict__ norm_w, float eps,
                     int kind, float* __restrict__ out, int block_rows, unsigned* __restrict__ xs) {
    split_rows_norm_of<false>(x, rows, k, norm_w, eps, kind, out, xs, block_rows);
}
