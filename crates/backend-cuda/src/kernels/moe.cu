// Sparse MoE with a gated shared expert (the maths of backend-cpu's `qwen3_next/moe.rs`), after
// the fused projection `mo` = [router logits (E) | shared-expert gate (1) | shared gate_proj
// (IS) | shared up_proj (IS)] (the router logits alone without a shared expert). Five kernels
// per layer, or three where the first two and the last two are fused:
// - `moe_route`: softmax over the experts in f32 (a warp a row, summed in a fixed order), top-k
//   with ties to the lower index (ranked over the block for 1–2 rows, else rounds of warp
//   maxima), renormalised when MOE_NORM_TOPK, the k choices in ascending expert index; and the
//   shared expert's silu(gate)·up (`route_rows`).
// - `moe_group`: one block: the (row, slot) pairs sorted by expert (rows ascending within an
//   expert) and cut into tiles of at most MMA_ROWS pairs of one expert, then the shared expert's
//   tiles of MMA_ROWS rows.
// - `moe_gate_up`: per expert tile, silu(gate)·up of its pairs on the tensor cores (the matmul's
//   `mma_tile`): each n-tile computes 4 gate and the 4 matching up outputs, so an expert's
//   weights are read once for every row routed to it.
// - `moe_down`: per tile, the expert's (or the shared expert's) down projection of its pairs.
// - `moe_combine`: per (row, output) Σ_slots p·down_e in ascending expert index, then
//   + sigmoid(shared gate)·shared_down, added to the residual `x`.
// `moe_route_group` (up to MOE_ROUTE_GROUP_WARPS rows: a decode step) runs the first two in one
// block, and `moe_combine_norm` the last with the RMSNorm after the layer, each the same code on
// the same values as the kernels it stands for.
//
// Batch invariance: a pair's products are `mma_tile` chains that depend on its own row and the
// weights only (not on the tile's other rows or where the tile sits), and every sum over slots
// or experts runs in a fixed order inside one thread. So a row's bits never depend on the rows
// routed beside it. No atomics: the grouping walks the pairs in order.
//
// Host defines: MOE_E, MOE_K, MOE_I, MOE_IS (0 without a shared expert), MOE_NORM_TOPK, MOE_H,
// MOE_ROUTE_WARPS, MOE_GROUP_THREADS, MOE_ROUTE_GROUP_WARPS, MOE_COMBINE_THREADS, NORM_WARPS,
// MOE_BF16_DEPTH, MOE_FP8_DEPTH, MOE_RANK_COMPARES (and the matmul's MMA_*).

// Without a shared expert `mo` holds the router logits only.
#define MOE_MO_W (MOE_IS > 0 ? MOE_E + 1 + 2 * MOE_IS : MOE_E)
// Experts each lane of a router warp weighs.
#define MOE_PER_LANE ((MOE_E + WARP - 1) / WARP)

// A candidate's weight in the choice: e^(l − max) ≥ 0, and a NaN weighs −0.5 (chosen after every
// number, so an index is always found).
__device__ __forceinline__ float choice_weight(float numerator) {
    return numerator != numerator ? -0.5f : numerator;
}

// Routes rows r0 … r0 + n − 1 (n at most the block's warps), every thread of the block calling
// it: writes ids and probs [r, K] (ascending expert index) and act_sh [r, IS]. `ex` is n · MOE_E
// floats and `chosen` n · MOE_K ints of shared memory.
// - Warp w, row r0 + w: the softmax's numerators e^(l − max) and their sum, in f32 (each lane its
//   experts in increasing order, then the lanes' sums by a fixed butterfly: every lane ends with
//   the same bits).
// - The top k, ties to the lower index: for few rows of few experts (n · E² compares at most
//   MOE_RANK_COMPARES a thread), the whole block by rank: expert e is the k-th choice when
//   exactly k experts beat it (a larger weight, or the same weight at a lower index). Otherwise
//   warp w in k rounds of warp-wide maxima, each taking the best left. Both give the same k
//   experts in the same order (integers, whoever counts them); the rounds kept one warp busy
//   ~1 µs of a 1-stream step (one row), the ranks cost ~E² compares a row spread over the block.
// - Warp w again: lane k takes the k-th choice, its probability (renormalised over the k chosen
//   when MOE_NORM_TOPK, summed most probable first as backend-cpu does), and its place in
//   ascending expert index (transformers' summation order).
// - The whole block: the shared expert's silu(gate)·up, an element a thread.
__device__ __forceinline__ void route_rows(const float* __restrict__ mo, int r0, int n, int* __restrict__ ids,
                                           float* __restrict__ probs, float* __restrict__ act_sh, float* ex,
                                           int* chosen) {
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, tid = threadIdx.x;
    float sum = 0.0f;
    if (warp < n) {
        const float* logits = mo + (size_t)(r0 + warp) * MOE_MO_W;
        float* exw = ex + warp * MOE_E;
        // Every loop over a row below has a compile-time count and is unrolled, so its loads are
        // issued together: as rolled loops (a load, its use, the branch back) a 1-row call waited
        // on ~20 memory latencies one after another.
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < MOE_PER_LANE; j++)
            if (lane + j * WARP < MOE_E) mx = fmaxf(mx, logits[lane + j * WARP]);
        for (int o = WARP / 2; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, o));
#pragma unroll
        for (int j = 0; j < MOE_PER_LANE; j++) {
            const int e = lane + j * WARP;
            if (e < MOE_E) exw[e] = expf(logits[e] - mx);
        }
        __syncwarp();
        // One lane summing all 512 experts of Qwen3-Next-80B one after another took a fifth of a
        // 1-stream MoE layer: hence lanes, then the butterfly.
#pragma unroll
        for (int j = 0; j < MOE_PER_LANE; j++)
            if (lane + j * WARP < MOE_E) sum += exw[lane + j * WARP];
        for (int o = WARP / 2; o > 0; o >>= 1) sum += __shfl_xor_sync(FULL_MASK, sum, o);
    }
    __syncthreads();
    if (n * MOE_E * MOE_E <= MOE_RANK_COMPARES * (int)blockDim.x) {
        // `per` consecutive lanes (a power of two up to a warp) count for one candidate, each
        // over the experts e' ≡ its lane (mod per), then add their counts by shuffles. Every lane
        // of the block runs the same iterations (a candidate past the end counts for nothing), so
        // the shuffles always have the whole warp.
        int per = 1;
        while (per < WARP && 2 * per * n * MOE_E <= (int)blockDim.x) per *= 2;
        const int candidates = n * MOE_E, groups = blockDim.x / per, q = tid % per;
        for (int base = 0; base < candidates; base += groups) {
            const int c = base + tid / per;
            int beaten_by = 0;
            if (c < candidates) {
                const int r = c / MOE_E, e = c % MOE_E;
                const float* exr = ex + r * MOE_E;
                const float v = choice_weight(exr[e]);
                for (int o = q; o < MOE_E; o += per) {
                    const float w = choice_weight(exr[o]);
                    beaten_by += (w > v || (w == v && o < e)) ? 1 : 0;
                }
            }
            for (int o = 1; o < per; o <<= 1) beaten_by += __shfl_xor_sync(FULL_MASK, beaten_by, o);
            if (c < candidates && q == 0 && beaten_by < MOE_K) chosen[(c / MOE_E) * MOE_K + beaten_by] = c % MOE_E;
        }
    } else if (warp < n) {
        // −1 marks no expert or one taken.
        const float* exw = ex + warp * MOE_E;
        float cand[MOE_PER_LANE];
#pragma unroll
        for (int j = 0; j < MOE_PER_LANE; j++) {
            const int e = lane + j * WARP;
            cand[j] = e < MOE_E ? choice_weight(exw[e]) : -1.0f;
        }
        for (int k = 0; k < MOE_K; k++) {
            float bv = -2.0f;
            int bi = MOE_E;
            // A lane's experts ascend with j: strict > keeps the lower index of a tie.
#pragma unroll
            for (int j = 0; j < MOE_PER_LANE; j++)
                if (cand[j] > bv) { bv = cand[j]; bi = lane + j * WARP; }
            for (int o = WARP / 2; o > 0; o >>= 1) {
                const float ov = __shfl_xor_sync(FULL_MASK, bv, o);
                const int oi = __shfl_xor_sync(FULL_MASK, bi, o);
                if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
            }
#pragma unroll
            for (int j = 0; j < MOE_PER_LANE; j++)
                if (lane + j * WARP == bi) cand[j] = -1.0f;
            if (lane == 0) chosen[warp * MOE_K + k] = bi;
        }
    }
    __syncthreads();
    if (warp < n) {
        const int r = r0 + warp;
        int my_id = 0;
        float my_p = 0.0f;
        if (lane < MOE_K) {
            my_id = chosen[warp * MOE_K + lane];
            my_p = ex[warp * MOE_E + my_id] / sum;
        }
        if (MOE_NORM_TOPK) {
            float s = 0.0f;
            for (int k = 0; k < MOE_K; k++) s += __shfl_sync(FULL_MASK, my_p, k);
            my_p /= s;
        }
        // A choice's place is the number of chosen experts below it.
        int place = 0;
        for (int k = 0; k < MOE_K; k++)
            if (__shfl_sync(FULL_MASK, my_id, k) < my_id) place++;
        if (lane < MOE_K) {
            ids[(size_t)r * MOE_K + place] = my_id;
            probs[(size_t)r * MOE_K + place] = my_p;
        }
    }
    if (MOE_IS > 0) {
        for (int i = tid; i < n * MOE_IS; i += blockDim.x) {
            const float* logits = mo + (size_t)(r0 + i / MOE_IS) * MOE_MO_W;
            const int u = i % MOE_IS;
            act_sh[(size_t)r0 * MOE_IS + i] =
                siluf_(logits[MOE_E + 1 + u]) * logits[MOE_E + 1 + MOE_IS + u];
        }
    }
}

// Grid 1. From ids [rows·K]: pair_pos[p] = where pair p (row p / K, slot p % K) sits in the
// order sorted by expert; pair_row[pos] = its row; tiles[3t..3t+3) = (expert, first position,
// pairs) of expert tile t, then (MOE_E, first row, rows) of the shared expert's tiles;
// n_tiles = [expert tiles, all tiles].
// Every thread of the block calls it (it synchronises the block), with MOE_GROUP_THREADS threads.
__device__ __forceinline__ void group_pairs(const int* __restrict__ ids, int rows, int* __restrict__ pair_row,
                                            int* __restrict__ pair_pos, int* __restrict__ tiles,
                                            int* __restrict__ n_tiles) {
    __shared__ int count[MOE_E];
    __shared__ int first[MOE_E];
    __shared__ int tile0[MOE_E];
    __shared__ int expert_tiles;
    const int tid = threadIdx.x, pairs = rows * MOE_K;
    for (int e = tid; e < MOE_E; e += blockDim.x) count[e] = 0;
    __syncthreads();
    // Warp 0 walks the pairs 32 at a time, in order: a pair's rank among its expert's pairs is
    // the count so far plus the lanes before it with the same expert.
    if (tid < WARP) {
        for (int base = 0; base < pairs; base += WARP) {
            const int p = base + tid;
            const int e = p < pairs ? ids[p] : -1 - tid;  // past the end: matches no lane
            const unsigned same = __match_any_sync(FULL_MASK, e);
            int rank = 0;
            if (p < pairs) rank = count[e] + __popc(same & ((1u << tid) - 1u));
            __syncwarp();
            if (p < pairs) {
                pair_pos[p] = rank;
                // The group's last lane moves its expert's count on.
                if ((same >> tid) == 1u) count[e] += __popc(same);
            }
            __syncwarp();
        }
        // Exclusive scans of the pair counts and the tile counts, 32 experts at a time.
        int run = 0, run_tiles = 0;
        for (int base = 0; base < MOE_E; base += WARP) {
            const int e = base + tid;
            const int c = e < MOE_E ? count[e] : 0;
            const int n_t = (c + MMA_ROWS - 1) / MMA_ROWS;
            int ic = c, it = n_t;
            for (int o = 1; o < WARP; o <<= 1) {
                const int a = __shfl_up_sync(FULL_MASK, ic, o);
                const int b = __shfl_up_sync(FULL_MASK, it, o);
                if (tid >= o) { ic += a; it += b; }
            }
            if (e < MOE_E) { first[e] = run + ic - c; tile0[e] = run_tiles + it - n_t; }
            run += __shfl_sync(FULL_MASK, ic, WARP - 1);
            run_tiles += __shfl_sync(FULL_MASK, it, WARP - 1);
        }
        if (tid == 0) expert_tiles = run_tiles;
    }
    __syncthreads();
    for (int p = tid; p < pairs; p += blockDim.x) {
        const int pos = first[ids[p]] + pair_pos[p];
        pair_pos[p] = pos;
        pair_row[pos] = p / MOE_K;
    }
    for (int e = tid; e < MOE_E; e += blockDim.x)
        for (int j = 0; j * MMA_ROWS < count[e]; j++) {
            int* tile = tiles + 3 * (tile0[e] + j);
            tile[0] = e;
            tile[1] = first[e] + j * MMA_ROWS;
            tile[2] = min(MMA_ROWS, count[e] - j * MMA_ROWS);
        }
    const int shared_tiles = MOE_IS > 0 ? (rows + MMA_ROWS - 1) / MMA_ROWS : 0;
    for (int j = tid; j < shared_tiles; j += blockDim.x) {
        int* tile = tiles + 3 * (expert_tiles + j);
        tile[0] = MOE_E;
        tile[1] = j * MMA_ROWS;
        tile[2] = min(MMA_ROWS, rows - j * MMA_ROWS);
    }
    if (tid == 0) {
        n_tiles[0] = expert_tiles;
        n_tiles[1] = expert_tiles + shared_tiles;
    }
}

// Grid ceil(rows / MOE_ROUTE_WARPS): a warp a row.
extern "C" __global__ void __launch_bounds__(MOE_ROUTE_WARPS * WARP)
moe_route(const float* __restrict__ mo, int rows, int* __restrict__ ids, float* __restrict__ probs,
          float* __restrict__ act_sh) {
    pdl_start();
    __shared__ float ex_s[MOE_ROUTE_WARPS * MOE_E];
    __shared__ int chosen_s[MOE_ROUTE_WARPS * MOE_K];
    const int r0 = blockIdx.x * MOE_ROUTE_WARPS;
    route_rows(mo, r0, min(MOE_ROUTE_WARPS, rows - r0), ids, probs, act_sh, ex_s, chosen_s);
}

// Grid 1.
extern "C" __global__ void __launch_bounds__(MOE_GROUP_THREADS)
moe_group(const int* __restrict__ ids, int rows, int* __restrict__ pair_row, int* __restrict__ pair_pos,
          int* __restrict__ tiles, int* __restrict__ n_tiles) {
    pdl_start();
    group_pairs(ids, rows, pair_row, pair_pos, tiles, n_tiles);
}

// `moe_route` then `moe_group` in one block, for a decode step's few rows (at most
// MOE_ROUTE_GROUP_WARPS): warp w routes row w, the block waits, then groups. The same code on the
// same values as the two kernels: the same bits, one launch fewer a layer.
extern "C" __global__ void __launch_bounds__(MOE_GROUP_THREADS)
moe_route_group(const float* __restrict__ mo, int rows, int* __restrict__ ids, float* __restrict__ probs,
                float* __restrict__ act_sh, int* __restrict__ pair_row, int* __restrict__ pair_pos,
                int* __restrict__ tiles, int* __restrict__ n_tiles) {
    pdl_start();
    __shared__ float ex_s[MOE_ROUTE_GROUP_WARPS * MOE_E];
    __shared__ int chosen_s[MOE_ROUTE_GROUP_WARPS * MOE_K];
    route_rows(mo, 0, min(rows, MOE_ROUTE_GROUP_WARPS), ids, probs, act_sh, ex_s, chosen_s);
    // The block's writes of ids are visible to the whole block past the barrier.
    __syncthreads();
    group_pairs(ids, rows, pair_row, pair_pos, tiles, n_tiles);
}

// Grid (tile slots, MOE_I / (4·NT)): block (t, b) computes gate units u0 … u0 + 4·NT − 1
// (u0 = 4·NT·b) and the matching up units of expert tile t, then act[pos, u] = silu(gate)·up for
// each pair of the tile. Tile slots vary fastest, so an expert's tiles run together and share
// its weights in L2. Slots past the expert tiles return at once. NT (n-tiles a block) changes
// which block computes a unit, never its chain (`mma_tile`'s): the same bits for every NT.
template <int NT>
__device__ __forceinline__ void gate_up_block(const float* __restrict__ xn, const int* __restrict__ pair_row,
                                              const int* __restrict__ tiles, const int* __restrict__ n_tiles,
                                              const bf16_t* __restrict__ gate_up, float* __restrict__ act,
                                              float (*part)[NT][WARP][4]) {
    pdl_start();
    if ((int)blockIdx.x >= n_tiles[0]) return;  // the whole block
    const int* tile = tiles + 3 * blockIdx.x;
    const int e = tile[0], start = tile[1], count = tile[2];
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, g = lane / 4, t = lane % 4;
    const int u0 = blockIdx.y * 4 * NT;
    const float* xa = g < count ? xn + (size_t)pair_row[start + g] * MOE_H : nullptr;
    const float* xb = g + 8 < count ? xn + (size_t)pair_row[start + g + 8] * MOE_H : nullptr;
    // N-tile j: outputs 0..3 are the gate rows of units u0 + 4j …, outputs 4..7 the up rows of
    // the same units.
    const bf16_t* wr[NT];
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const int unit = u0 + 4 * j + g % 4;
        wr[j] = gate_up + ((size_t)e * 2 * MOE_I + (g < 4 ? unit : MOE_I + unit)) * MOE_H;
    }
    float d[4];
    if (!mma_tile<NT, MOE_BF16_DEPTH>(xa, xb, wr, MOE_H, part, d)) return;
    // Lane (g, t) of warp j holds outputs 2t, 2t + 1 of n-tile j: gate for t < 2; lane t + 2
    // holds the matching up.
    float up[4];
#pragma unroll
    for (int i = 0; i < 4; i++) up[i] = __shfl_down_sync(FULL_MASK, d[i], 2);
    if (t >= 2) return;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = g + (i / 2) * 8;
        const int unit = u0 + 4 * warp + 2 * t + (i % 2);
        if (r < count) act[(size_t)(start + r) * MOE_I + unit] = siluf_(d[i]) * up[i];
    }
}

// The experts' gate/up at NT n-tiles a block: `moe_gate_up` MMA_NT, `moe_gate_up_t2` 2 and
// `moe_gate_up_t1` 1 (more blocks, for a decode step whose MMA_NT blocks make a partial second
// wave: the host's `moe_gate_up_tiles`).
#define MOE_GATE_UP(NAME, NT)                                                                             \
    extern "C" __global__ void __launch_bounds__(MMA_WARPS * WARP, MMA_MIN_BLOCKS)                      \
    NAME(const float* __restrict__ xn, const int* __restrict__ pair_row, const int* __restrict__ tiles,   \
         const int* __restrict__ n_tiles, const bf16_t* __restrict__ gate_up, float* __restrict__ act) {  \
        __shared__ float part[MMA_WARPS][NT][WARP][4];                                                  \
        gate_up_block<NT>(xn, pair_row, tiles, n_tiles, gate_up, act, part);                            \
    }
MOE_GATE_UP(moe_gate_up, MMA_NT)
MOE_GATE_UP(moe_gate_up_t2, 2)
MOE_GATE_UP(moe_gate_up_t1, 1)

// Row r's output o of the layer: Σ_slots p · down_e in ascending expert index, then
// + sigmoid(shared gate) · shared_down (`moe_combine`'s sum; `moe_combine_norm` writes the same
// expression). y_exp and y_sh through L2 (`__ldcg`), as when `moe_down` could sum them itself
// (sessions 51–55; removed, it measured slower): the loads' path, not their values.
__device__ __forceinline__ float combined(const float* __restrict__ mo, const float* __restrict__ probs,
                                          const int* __restrict__ pair_pos, const float* y_exp,
                                          const float* y_sh, int r, int o) {
    float total = 0.0f;
    for (int s = 0; s < MOE_K; s++) {
        const size_t p = (size_t)r * MOE_K + s;
        total += probs[p] * __ldcg(y_exp + (size_t)pair_pos[p] * MOE_H + o);
    }
    if (MOE_IS > 0) total += sigmoidf_(mo[(size_t)r * MOE_MO_W + MOE_E]) * __ldcg(y_sh + (size_t)r * MOE_H + o);
    return total;
}

// Grid (tile slots, ceil(MOE_H / (MMA_NT·MMA_COLS))): the down projection of tile t's pairs into
// y_exp [pairs, H] (expert tiles, k = I), or of its rows into y_sh [rows, H] (the shared
// expert's tiles, k = IS). Slots past the tiles return at once.
extern "C" __global__ void __launch_bounds__(MMA_WARPS * WARP, MMA_MIN_BLOCKS)
moe_down(const float* __restrict__ act, const float* __restrict__ act_sh, const int* __restrict__ tiles,
         const int* __restrict__ n_tiles, const bf16_t* __restrict__ down, const bf16_t* __restrict__ shared_down,
         float* y_exp, float* y_sh) {
    pdl_start();
    __shared__ float part[MMA_WARPS][MMA_NT][WARP][4];
    if ((int)blockIdx.x >= n_tiles[1]) return;  // the whole block
    const int* tile = tiles + 3 * blockIdx.x;
    const int e = tile[0], start = tile[1], count = tile[2];
    const bool shared = e == MOE_E;
    const int k = shared ? MOE_IS : MOE_I;
    const float* src = shared ? act_sh : act;
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, g = lane / 4, t = lane % 4;
    const int o0 = blockIdx.y * MMA_NT * MMA_COLS;
    const float* xa = g < count ? src + (size_t)(start + g) * k : nullptr;
    const float* xb = g + 8 < count ? src + (size_t)(start + g + 8) * k : nullptr;
    // Past the last output: the last valid row, computed and never written.
    const bf16_t* wr[MMA_NT];
#pragma unroll
    for (int j = 0; j < MMA_NT; j++) {
        const int o = min(o0 + j * MMA_COLS + g, MOE_H - 1);
        wr[j] = shared ? shared_down + (size_t)o * MOE_IS : down + ((size_t)e * MOE_H + o) * MOE_I;
    }
    float d[4];
    if (mma_tile<MMA_NT, MOE_BF16_DEPTH>(xa, xb, wr, k, part, d)) {
        float* y = shared ? y_sh : y_exp;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int r = g + (i / 2) * 8, o = o0 + warp * MMA_COLS + 2 * t + (i % 2);
            if (r < count && o < MOE_H) y[(size_t)(start + r) * MOE_H + o] = d[i];
        }
    }
}

// The bf16 experts of a round of up to MMA_COLS rows (every tile then holds at most MMA_COLS
// pairs: a row takes an expert once) on the swapped chain (`mma_tile_swapped`, matmul.cu: the same
// products in the same order as `mma_tile`'s, so the same bits; the host's
// FLASHLANE_MATMUL_SWAP_ROWS). `moe_gate_up_swap`: grid (tile slots, MOE_I / 16), block (t, b)
// units u0 … u0 + 15 (u0 = 16b) of expert tile t, output tile j's rows 0–7 the gate rows of units
// u0 + 8j …, 8–15 their up rows, so lane (g, t) holds a unit's gate and up: act = silu(gate)·up
// as `gate_up_block` writes it.
extern "C" __global__ void __launch_bounds__(MMA_WARPS * WARP, MMA_MIN_BLOCKS)
moe_gate_up_swap(const float* __restrict__ xn, const int* __restrict__ pair_row, const int* __restrict__ tiles,
                 const int* __restrict__ n_tiles, const bf16_t* __restrict__ gate_up, float* __restrict__ act) {
    pdl_start();
    __shared__ float part[MMA_WARPS][2][WARP][4];
    if ((int)blockIdx.x >= n_tiles[0]) return;  // the whole block
    const int* tile = tiles + 3 * blockIdx.x;
    const int e = tile[0], start = tile[1], count = tile[2];
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, g = lane / 4, t = lane % 4;
    const int u0 = blockIdx.y * 16;
    const float* xa = g < count ? xn + (size_t)pair_row[start + g] * MOE_H : nullptr;
    const bf16_t* wr[4];
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            wr[2 * j + h] = gate_up + ((size_t)e * 2 * MOE_I + h * MOE_I + u0 + 8 * j + g) * MOE_H;
    float d[4];
    if (!mma_tile_swapped<2, MOE_BF16_DEPTH>(xa, wr, MOE_H, part, d)) return;
    const int unit = u0 + 8 * warp + g;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int r = 2 * t + i;
        if (r < count) act[(size_t)(start + r) * MOE_I + unit] = siluf_(d[i]) * d[2 + i];
    }
}

// `moe_down` on the swapped chain (a round of up to MMA_COLS rows): grid (tile slots,
// ceil(MOE_H / 32)), two output tiles of 16 a block, the columns of `moe_down`'s blocks.
extern "C" __global__ void __launch_bounds__(MMA_WARPS * WARP, MMA_MIN_BLOCKS)
moe_down_swap(const float* __restrict__ act, const float* __restrict__ act_sh, const int* __restrict__ tiles,
              const int* __restrict__ n_tiles, const bf16_t* __restrict__ down,
              const bf16_t* __restrict__ shared_down, float* y_exp, float* y_sh) {
    static_assert(2 * 16 == MMA_NT * MMA_COLS, "moe_down's columns: 32 outputs a block");
    pdl_start();
    __shared__ float part[MMA_WARPS][2][WARP][4];
    if ((int)blockIdx.x >= n_tiles[1]) return;  // the whole block
    const int* tile = tiles + 3 * blockIdx.x;
    const int e = tile[0], start = tile[1], count = tile[2];
    const bool shared = e == MOE_E;
    const int k = shared ? MOE_IS : MOE_I;
    const float* src = shared ? act_sh : act;
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, g = lane / 4, t = lane % 4;
    const int o0 = blockIdx.y * 32;
    const float* xa = g < count ? src + (size_t)(start + g) * k : nullptr;
    // Past the last output: the last valid row, computed and never written.
    const bf16_t* wr[4];
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int o = min(o0 + 16 * j + g + 8 * h, MOE_H - 1);
            wr[2 * j + h] = shared ? shared_down + (size_t)o * MOE_IS : down + ((size_t)e * MOE_H + o) * MOE_I;
        }
    float d[4];
    if (mma_tile_swapped<2, MOE_BF16_DEPTH>(xa, wr, k, part, d)) {
        float* y = shared ? y_sh : y_exp;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int r = 2 * t + (i % 2), o = o0 + 16 * warp + g + 8 * (i / 2);
            if (r < count && o < MOE_H) y[(size_t)(start + r) * MOE_H + o] = d[i];
        }
    }
}

// moe_gate_up for block-scaled FP8 experts: gate_up e4m3 [E, 2I, H], scales f32
// [E, 2I / br, H / bc]. Lane (g, t)'s outputs 2t, 2t + 1 of n-tile j are gate rows (t < 2) or up
// rows of units u0 + 4j + 2(t % 2) …, whose scale row it reads.
extern "C" __global__ void __launch_bounds__(MMA_WARPS * WARP, MMA_MIN_BLOCKS)
moe_gate_up_fp8(const float* __restrict__ xn, const int* __restrict__ pair_row, const int* __restrict__ tiles,
                const int* __restrict__ n_tiles, const unsigned char* __restrict__ gate_up,
                const float* __restrict__ scales, int br, int bc, float* __restrict__ act) {
    pdl_start();
    __shared__ float part[MMA_WARPS][MMA_NT][WARP][4];
    if ((int)blockIdx.x >= n_tiles[0]) return;  // the whole block
    const int* tile = tiles + 3 * blockIdx.x;
    const int e = tile[0], start = tile[1], count = tile[2];
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, g = lane / 4, t = lane % 4;
    const int u0 = blockIdx.y * 4 * MMA_NT;
    const float* xa = g < count ? xn + (size_t)pair_row[start + g] * MOE_H : nullptr;
    const float* xb = g + 8 < count ? xn + (size_t)pair_row[start + g + 8] * MOE_H : nullptr;
    const unsigned char* wr[MMA_NT];
    const float* srow[MMA_NT];
#pragma unroll
    for (int j = 0; j < MMA_NT; j++) {
        const int unit = u0 + 4 * j + g % 4;
        wr[j] = gate_up + ((size_t)e * 2 * MOE_I + (g < 4 ? unit : MOE_I + unit)) * MOE_H;
        const int out_unit = u0 + 4 * j + 2 * (t % 2);
        const int out_row = t < 2 ? out_unit : MOE_I + out_unit;
        srow[j] = scales + ((size_t)e * (2 * MOE_I / br) + out_row / br) * (MOE_H / bc);
    }
    float d[4];
    if (!mma_tile_fp8<MMA_NT, MOE_FP8_DEPTH>(xa, xb, wr, srow, bc, MOE_H, part, d)) return;
    float up[4];
#pragma unroll
    for (int i = 0; i < 4; i++) up[i] = __shfl_down_sync(FULL_MASK, d[i], 2);
    if (t >= 2) return;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = g + (i / 2) * 8;
        const int unit = u0 + 4 * warp + 2 * t + (i % 2);
        if (r < count) act[(size_t)(start + r) * MOE_I + unit] = siluf_(d[i]) * up[i];
    }
}

// moe_down for block-scaled FP8: down e4m3 [E, H, I] with scales [E, H / br, I / bc], and the
// shared expert's shared_down e4m3 [H, IS] with scales [H / br, IS / bc].
extern "C" __global__ void __launch_bounds__(MMA_WARPS * WARP, MMA_MIN_BLOCKS)
moe_down_fp8(const float* __restrict__ act, const float* __restrict__ act_sh, const int* __restrict__ tiles,
             const int* __restrict__ n_tiles, const unsigned char* __restrict__ down,
             const float* __restrict__ down_scales, const unsigned char* __restrict__ shared_down,
             const float* __restrict__ shared_scales, int br, int bc, float* y_exp, float* y_sh) {
    pdl_start();
    __shared__ float part[MMA_WARPS][MMA_NT][WARP][4];
    if ((int)blockIdx.x >= n_tiles[1]) return;  // the whole block
    const int* tile = tiles + 3 * blockIdx.x;
    const int e = tile[0], start = tile[1], count = tile[2];
    const bool shared = e == MOE_E;
    const int k = shared ? MOE_IS : MOE_I;
    const float* src = shared ? act_sh : act;
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, g = lane / 4, t = lane % 4;
    const int o0 = blockIdx.y * MMA_NT * MMA_COLS;
    const float* xa = g < count ? src + (size_t)(start + g) * k : nullptr;
    const float* xb = g + 8 < count ? src + (size_t)(start + g + 8) * k : nullptr;
    const unsigned char* wr[MMA_NT];
    const float* srow[MMA_NT];
#pragma unroll
    for (int j = 0; j < MMA_NT; j++) {
        const int o = min(o0 + j * MMA_COLS + g, MOE_H - 1);
        const int os = min(o0 + j * MMA_COLS + 2 * t, MOE_H - 1);
        wr[j] = shared ? shared_down + (size_t)o * MOE_IS : down + ((size_t)e * MOE_H + o) * MOE_I;
        srow[j] = shared ? shared_scales + (size_t)(os / br) * (MOE_IS / bc)
                         : down_scales + ((size_t)e * (MOE_H / br) + os / br) * (MOE_I / bc);
    }
    float d[4];
    if (mma_tile_fp8<MMA_NT, MOE_FP8_DEPTH>(xa, xb, wr, srow, bc, k, part, d)) {
        float* y = shared ? y_sh : y_exp;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int r = g + (i / 2) * 8, o = o0 + warp * MMA_COLS + 2 * t + (i % 2);
            if (r < count && o < MOE_H) y[(size_t)(start + r) * MOE_H + o] = d[i];
        }
    }
}

// Grid (ceil(MOE_H / MOE_COMBINE_THREADS), rows).
extern "C" __global__ void __launch_bounds__(MOE_COMBINE_THREADS)
moe_combine(const float* __restrict__ mo, const float* __restrict__ probs, const int* __restrict__ pair_pos,
            const float* __restrict__ y_exp, const float* __restrict__ y_sh, float* __restrict__ x) {
    pdl_start();
    const int r = blockIdx.y, o = blockIdx.x * MOE_COMBINE_THREADS + threadIdx.x;
    if (o >= MOE_H) return;
    x[(size_t)r * MOE_H + o] += combined(mo, probs, pair_pos, y_exp, y_sh, r, o);
}

// `moe_combine` and then the RMSNorm that follows the layer (the next layer's input norm, or the
// model's final norm) in one launch: grid (rows), one block of NORM_WARPS warps a row. Each
// output is summed as `moe_combine` sums it, and the norm sums the squares in `rmsnorm_rows`'
// order (thread i takes outputs i, i + NORM_WARPS·WARP, …, then `block_sum`), so x and `out` hold
// the same bits as the two kernels one after the other.
#define MOE_COMBINE_NORM_PER_THREAD ((MOE_H + NORM_WARPS * WARP - 1) / (NORM_WARPS * WARP))
extern "C" __global__ void __launch_bounds__(NORM_WARPS * WARP)
moe_combine_norm(const float* __restrict__ mo, const float* __restrict__ probs, const int* __restrict__ pair_pos,
                 const float* __restrict__ y_exp, const float* __restrict__ y_sh, float* __restrict__ x,
                 const float* __restrict__ w, float eps, int kind, float* __restrict__ out) {
    __shared__ float warp_sums[NORM_WARPS];
    __shared__ float total_s;
    pdl_start();
    const int r = blockIdx.x;
    float* xr = x + (size_t)r * MOE_H;
    float p[MOE_K];
    int pos[MOE_K];
#pragma unroll
    for (int s = 0; s < MOE_K; s++) {
        p[s] = probs[(size_t)r * MOE_K + s];
        pos[s] = pair_pos[(size_t)r * MOE_K + s];
    }
    float v[MOE_COMBINE_NORM_PER_THREAD];
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < MOE_COMBINE_NORM_PER_THREAD; j++) {
        const int o = threadIdx.x + j * NORM_WARPS * WARP;
        if (o < MOE_H) {
            float total = 0.0f;
#pragma unroll
            for (int s = 0; s < MOE_K; s++) total += p[s] * y_exp[(size_t)pos[s] * MOE_H + o];
            if (MOE_IS > 0) total += sigmoidf_(mo[(size_t)r * MOE_MO_W + MOE_E]) * y_sh[(size_t)r * MOE_H + o];
            v[j] = xr[o] + total;
            xr[o] = v[j];
            acc += v[j] * v[j];
        }
    }
    const float total = block_sum<NORM_WARPS>(acc, warp_sums, &total_s);
    const float inv = 1.0f / sqrtf(total / (float)MOE_H + eps);
#pragma unroll
    for (int j = 0; j < MOE_COMBINE_NORM_PER_THREAD; j++) {
        const int o = threadIdx.x + j * NORM_WARPS * WARP;
        if (o < MOE_H) out[(size_t)r * MOE_H + o] = v[j] * inv * norm_scale(w[o], kind);
    }
}
