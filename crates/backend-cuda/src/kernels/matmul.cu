// y[r, o] = x[row(r)] · W[o]  (or y[r, o] += … when `accumulate`): W `[n_out, k]` in bf16, x in f32;
// `row_index` (or null) gathers input rows (the rows whose logits are wanted). On the tensor cores:
// `mma.sync` m16n8k16 (bf16 inputs, f32 accumulation). x is split into two bf16 halves, hi =
// bf16(x) and lo = bf16(x − hi), each multiplied by W (products of bf16 are exact in f32), so the
// sum carries ~16 bits of x's mantissa instead of bf16's 8.
//
// Batch invariance: a block computes a tile of MMA_ROWS rows × NT·MMA_COLS outputs; its
// MMA_WARPS warps split k by chunks of 64 (chunk i to warp i mod MMA_WARPS, in increasing order
// within a warp, 4 steps per chunk, each step the hi then the lo product) and the warps' sums
// are added in warp order. The split depends on k only. Each (row, output) pair is thus the same
// chain of operations whatever the tile holds beside it (an MMA's output element depends only on its own
// row of A and column of B). Every matmul of every batch size runs this chain (1 row is a tile
// with 15 rows of zeros; `matmul_bf16`, `_t3`, `_t5`, `_t6` and `matmul_bf16_narrow` differ only
// in how many n-tiles a block holds), so a row's bits never depend on how many rows came with it, nor on which tile
// or row slot it lands in. The k split gives a decode step's small matrices enough
// warps to keep many weight loads in flight.
//
// The k slots of a step: in chunk c, lane (g, t) (g = lane / 4, t = lane % 4) holds elements
// c + 16t … c + 16t + 15 of its rows (16-byte loads); step s feeds elements 16t + 4s + {0, 1}
// into MMA k-slots 2t + {0, 1} and 16t + 4s + {2, 3} into slots 8 + 2t + {0, 1}, for x and W
// alike, so a step sums whole products over a fixed set of 16 elements. k must be a multiple
// of 16 (a chunk's missing pieces are zeros).
//
// MMA_SPLIT 0 (`FLASHLANE_MATMUL_INPUT=bf16`, an A/B switch that changes replies) leaves the lo
// products out: x enters the tensor cores as one bf16, as vLLM's and llama.cpp's bf16 matmuls take
// it, for half the tensor-core work where a round is bound by it (many streams, prefill). Every
// kernel then computes that one chain, so a row's bits still never depend on the batch.
//
// Host defines: MMA_WARPS, MMA_NT, MMA_NARROW_DEPTH, MMA_DEEP_DEPTH, MMA_CHUNK (64), MMA_ROWS (16) and MMA_COLS (8),
// the m16n8k16 tile this code is written for; MMA_SPLIT (1: hi and lo products, 0: hi only).

// MMA_CHUNK (host define, 64): elements of k per chunk, 4 lanes × 16.

// Two f32 as a bf16 pair (round to nearest even): `first` in the low half (the lower k),
// `second` in the high half (cvt puts its first operand high).
__device__ __forceinline__ unsigned pack_pair(float first, float second) {
    unsigned d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(second), "f"(first));
    return d;
}

// The low (`high` false) or high half of a 16-bit pair as f32, exactly: a bf16 pair, or with
// F16 an f16 pair (e4m3's conversion gives f16).
template <bool F16 = false>
__device__ __forceinline__ float widen_half(unsigned pair, bool high) {
    if (!F16) return __uint_as_float(high ? pair & 0xffff0000u : pair << 16);
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)(high ? pair >> 16 : pair & 0xffffu)));
    return f;
}

// The bf16 pair of x0, x1 (hi) and of what it leaves out (lo). An infinite x gives lo = inf −
// inf = NaN, so an infinite input makes its outputs NaN rather than ±inf (hidden states are
// finite).
__device__ __forceinline__ void split_pair(float x0, float x1, unsigned& hi, unsigned& lo) {
    hi = pack_pair(x0, x1);
    lo = pack_pair(x0 - widen_half(hi, false), x1 - widen_half(hi, true));
}

// MMA_X_PRESPLIT (host define, 0; 1 only in `kernel_define_times`'s recompiled kernels): the
// tiles take each two floats of x as if they were already the hi and lo bf16 pairs of two
// elements (as x split once by the kernel that writes it would give them), leaving out the
// split's six instructions a pair. A probe of what splitting x in every block costs: the
// products are meaningless under it, the time is not. Measured on the H100 (bench/RESULTS.md
// session 51): a one-row output projection 4,096 → 2,048 took 6.1 µs against 6.9, the MoE's
// bf16 tiles of 4–64 rows 4–6 % longer.
__device__ __forceinline__ void split_x(float x0, float x1, unsigned& hi, unsigned& lo) {
    if (MMA_X_PRESPLIT) {
        hi = __float_as_uint(x0);
        lo = __float_as_uint(x1);
    } else {
        split_pair(x0, x1, hi, lo);
    }
}

// d += A · B for one m16n8k16 tile (A row-major 16 × 16, B column-major 16 × 8, bf16 pairs as
// above; d f32).
__device__ __forceinline__ void mma_16816(float* d, unsigned a0, unsigned a1, unsigned a2,
                                          unsigned a3, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// 16 floats of x at `p` (or zeros without a row).
__device__ __forceinline__ void load16(const float* p, float* v) {
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const float4 f = p ? *reinterpret_cast<const float4*>(p + 4 * q) : make_float4(0.f, 0.f, 0.f, 0.f);
        v[4 * q] = f.x; v[4 * q + 1] = f.y; v[4 * q + 2] = f.z; v[4 * q + 3] = f.w;
    }
}

// This lane's rows g and g + 8 of the row tile from r0 (gathered by `row_index` when not null;
// none past the end: null, read as zeros).
__device__ __forceinline__ void tile_inputs(const float* x, int x_stride, const int* row_index, int rows,
                                            int r0, const float*& xa, const float*& xb) {
    const int g = threadIdx.x % WARP / 4;
    const int ra = r0 + g, rb = r0 + g + 8;
    xa = ra < rows ? x + (size_t)(row_index ? row_index[ra] : ra) * x_stride : nullptr;
    xb = rb < rows ? x + (size_t)(row_index ? row_index[rb] : rb) * x_stride : nullptr;
}

// What `mma_tile` does between its first chunks' weight loads and the rest:
// with `InputsReady` nothing (the caller waited for the kernel ahead and found its rows, as the
// MoE's tiles must: their weight rows are the routing's output); with `InputsAfterWait` (the
// dense models' bf16 matmuls under MMA_EARLY_WEIGHTS) wait for the kernel ahead (`pdl_wait`)
// and only then find the input rows, so that the weights, never written while kernels run, are
// already on their way when the kernel ahead ends. The same loads of the same values: the same
// bits. (The FP8 kernels took it too and measured 0–2 % slower decode, 5 % slower prompts on
// Qwen3-4B-FP8: bench/RESULTS.md session 44.)
//
// Each also says whether x is the residual stream that `mma_tile` normalises as it loads it
// (NORM: `InputsNormed`); these two leave x as it is (`load_norm` and `normalise` do nothing).
#define INPUTS_AS_THEY_ARE                                                               \
    static constexpr bool NORM = false;                                                  \
    __device__ __forceinline__ void load_norm(int, bool, float*) const {}                \
    __device__ __forceinline__ void normalise(int, bool, float*, float*, const float*) const {}
struct InputsReady {
    static constexpr bool EARLY = false;
    INPUTS_AS_THEY_ARE
    __device__ __forceinline__ void operator()(const float*&, const float*&) {}
};
struct InputsAfterWait {
    static constexpr bool EARLY = true;
    INPUTS_AS_THEY_ARE
    const float* x;
    int x_stride;
    const int* row_index;
    int rows, r0;
    __device__ __forceinline__ void operator()(const float*& xa, const float*& xb) {
        pdl_wait();
        tile_inputs(x, x_stride, row_index, rows, r0, xa, xb);
    }
};

// 16 floats to `p` (16-byte aligned).
__device__ __forceinline__ void store16(float* p, const float* v) {
#pragma unroll
    for (int q = 0; q < 4; q++)
        *reinterpret_cast<float4*>(p + 4 * q) = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
}

// 16 floats of the norm's weight at `p` (or zeros past k).
__device__ __forceinline__ void load_norm16(const float* p, bool in, float* gm) {
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const float4 f = in ? *reinterpret_cast<const float4*>(p + 4 * q) : make_float4(0.f, 0.f, 0.f, 0.f);
        gm[4 * q] = f.x; gm[4 * q + 1] = f.y; gm[4 * q + 2] = f.z; gm[4 * q + 3] = f.w;
    }
}

// v[i] = v[i] · inv · scale(gm[i]): `rmsnorm_rows`' expression on the same values, so a row
// normalised here has the bits that kernel writes. Both products rounded (`__fmul_rn`): the value
// goes straight into the split's subtraction (`split_pair`), which a compiler may otherwise fuse
// with the last product into one FMA, where `rmsnorm_rows` stores the rounded product. Absent rows
// (inv 0) and elements past k (zeros) stay zeros.
__device__ __forceinline__ void normalise16(float* v, float inv, const float* gm, int kind) {
#pragma unroll
    for (int i = 0; i < 16; i++) v[i] = __fmul_rn(__fmul_rn(v[i], inv), norm_scale(gm[i], kind));
}

// 1 / RMS of each row of the row tile from r0 (`inv[i]` for row r0 + i; 0 past `rows`), summed in
// `norm_share`'s order (`rmsnorm_rows`'): share v of a row sums elements v, v + NORM_WARPS·WARP,
// … in increasing order, share-warp w (shares 32w … 32w + 31) is one butterfly into `sums`, then
// a warp a row adds a row's NORM_WARPS sums by the same butterfly (`block_sum`). Thread tid of
// the block's MMA_WARPS·WARP reads elements tid + MMA_WARPS·WARP·q of a row, MMA_NORM_LOADS (a
// multiple of NORM_SHARE_WARPS_A_THREAD) issued at once before any is summed: element q belongs
// to share tid + MMA_WARPS·WARP·(q % NORM_SHARE_WARPS_A_THREAD), so a row of the model's width
// costs one trip to L2, not one a share (session 32's twins walked the shares one after another
// and took 6–33 % longer than the norm apart). Every thread of the block must call it.
#define NORM_SHARE_WARPS_A_THREAD (NORM_WARPS / MMA_WARPS)
static_assert(NORM_SHARE_WARPS_A_THREAD * MMA_WARPS == NORM_WARPS, "the share-warps split evenly over a block");
static_assert(MMA_NORM_LOADS % NORM_SHARE_WARPS_A_THREAD == 0, "a batch of loads holds whole rounds of shares");
__device__ __forceinline__ void tile_norms(const float* x, int x_stride, const int* row_index, int rows, int r0,
                                           int k, float eps, float (*sums)[NORM_WARPS], float* inv) {
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const int tile_rows = min(MMA_ROWS, rows - r0);
    for (int i = 0; i < tile_rows; i++) {
        const float* xr = x + (size_t)(row_index ? row_index[r0 + i] : r0 + i) * x_stride;
        // `norm_share`'s sums: each share's elements in increasing order (the zeros past k add +0
        // to a sum of squares: the same bits).
        float share[NORM_SHARE_WARPS_A_THREAD];
#pragma unroll
        for (int j = 0; j < NORM_SHARE_WARPS_A_THREAD; j++) share[j] = 0.0f;
        for (int e0 = threadIdx.x; e0 < k; e0 += MMA_NORM_LOADS * MMA_WARPS * WARP) {
            float v[MMA_NORM_LOADS];
#pragma unroll
            for (int q = 0; q < MMA_NORM_LOADS; q++) {
                const int e = e0 + q * MMA_WARPS * WARP;
                v[q] = e < k ? xr[e] : 0.0f;
            }
#pragma unroll
            for (int q = 0; q < MMA_NORM_LOADS; q++)
                share[q % NORM_SHARE_WARPS_A_THREAD] += v[q] * v[q];
        }
#pragma unroll
        for (int j = 0; j < NORM_SHARE_WARPS_A_THREAD; j++) {
            const float s = warp_sum(share[j]);
            if (lane == 0) sums[i][warp + j * MMA_WARPS] = s;
        }
    }
    __syncthreads();
    for (int i = warp; i < MMA_ROWS; i += MMA_WARPS) {
        const float total = i < tile_rows ? warp_sum(sums[i][lane]) : 0.0f;
        if (lane == 0) inv[i] = i < tile_rows ? norm_inv(total, k, eps) : 0.0f;
    }
    __syncthreads();
}

// The inputs of a 16-row matmul that applies the input RMSNorm itself (`matmul_block`'s NORM):
// its weights' first loads go out before anything else (as `InputsAfterWait`'s: weights are never
// written while kernels run), then it waits for the kernel ahead (under MMA_EARLY_WEIGHTS; else
// the block waited before), finds its rows, sums their squares (`tile_norms`), and `mma_tile`
// normalises each chunk of x as it loads it (`w` the norm's weight, `kind` NORM_PLAIN or
// NORM_ZERO_CENTRED): the values `rmsnorm_rows` would have written. With `out` (not null) the
// blocks of the first n-column also store them there, rows of k floats as `rmsnorm_rows` writes
// them, for kernels after the matmul that read the normalised rows too (the MoE's experts after
// its front projection): each of a block's chunks is one warp's, so the block writes every
// element of its rows once.
struct InputsNormed {
    static constexpr bool EARLY = true;
    static constexpr bool NORM = true;
    const float* x;
    int x_stride;
    const int* row_index;
    int rows, r0, k;
    const float* w;
    float eps;
    int kind;
    float (*sums)[NORM_WARPS];
    float* inv_s;
    float* out;
    // 1 / RMS of this lane's rows g and g + 8 (0 for an absent row), once found.
    float inva, invb;
    __device__ __forceinline__ void operator()(const float*& xa, const float*& xb) {
        if (MMA_EARLY_WEIGHTS) pdl_wait();
        tile_inputs(x, x_stride, row_index, rows, r0, xa, xb);
        tile_norms(x, x_stride, row_index, rows, r0, k, eps, sums, inv_s);
        const int g = threadIdx.x % WARP / 4;
        inva = inv_s[g];
        invb = inv_s[g + 8];
    }
    __device__ __forceinline__ void load_norm(int e, bool in, float* gm) const { load_norm16(w + e, in, gm); }
    // Elements e … e + 15 of this lane's rows (`in`: within k), normalised in place, and kept
    // in `out` where asked.
    __device__ __forceinline__ void normalise(int e, bool in, float* va, float* vb, const float* gm) const {
        normalise16(va, inva, gm, kind);
        normalise16(vb, invb, gm, kind);
        if (out == nullptr || blockIdx.y != 0 || !in) return;
        const int ra = r0 + threadIdx.x % WARP / 4, rb = ra + 8;
        if (ra < rows) store16(out + (size_t)ra * k + e, va);
        if (rb < rows) store16(out + (size_t)rb * k + e, vb);
    }
};

// The block's sum over its MMA_WARPS warps (each a residue of k) of every warp's NT n-tiles, in
// warp order: warp j gets n-tile j's in d (false for warps past NT). Every thread calls it,
// with its warp and lane.
template <int NT>
__device__ __forceinline__ bool sum_warp_partials(const float (&acc)[NT][4], float (*part)[NT][WARP][4],
                                                  float* d, int warp, int lane) {
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) part[warp][j][lane][i] = acc[j][i];
    __syncthreads();
    if (warp >= NT) return false;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float sum = part[0][warp][lane][i];
#pragma unroll
        for (int v = 1; v < MMA_WARPS; v++) sum += part[v][warp][lane][i];
        d[i] = sum;
    }
    return true;
}

// This warp's share of one tile's k-split sum, then the warps' sums added in warp order. A tile
// is MMA_ROWS rows × NT n-tiles of MMA_COLS outputs: each warp loads a chunk's x once (and
// splits it into hi and lo once) for all its n-tiles. `xa` / `xb` are this lane's rows g and
// g + 8 (null: zeros), `wr[j]` its weight row of n-tile j's output g. Lane (g, t) of warp j <
// NT (at most MMA_WARPS) returns true with d = n-tile j's rows g (d[0], d[1]) and g + 8 (d[2], d[3]) × outputs
// 2t and 2t + 1; the other warps return false. Every thread of the block must call it (it
// synchronises the block). The matmul and the MoE's grouped expert matmuls share it, so a
// product has the same bits whichever kernel computes it.
//
// DEPTH chunks of a warp's weights are loaded before any of them is multiplied (DEPTH times the
// weight loads in flight, for matrices whose few blocks cannot otherwise keep the memory busy);
// they are multiplied in increasing order as with DEPTH 1, so the bits do not depend on DEPTH.
// x, a few rows read by every block, comes from L2: with X_AHEAD every chunk's x is loaded with
// the weights (one memory latency an iteration; 32 registers a chunk in flight), else chunk by
// chunk as it is multiplied (each chunk after the first then waits for its x from L2 behind the
// products of the one before: `kernel_define_times`, bench/RESULTS.md session 18). The same
// values either way: the bits do not depend on X_AHEAD.
//
// `ready` runs once every thread has issued its first DEPTH chunks' weight loads (see
// InputsReady); with InputsAfterWait it also finds xa and xb. With InputsNormed (Ready::NORM) x
// is the residual stream and each chunk's x is normalised (its norm weight loaded with x) before
// it is split: the values `rmsnorm_rows` would have written.
template <int NT, int DEPTH = 1, bool X_AHEAD = false, class Ready = InputsReady>
__device__ __forceinline__ bool mma_tile(const float* xa, const float* xb, const bf16_t* const* wr, int k,
                                         float (*part)[NT][WARP][4], float* d, Ready ready = Ready()) {
    static_assert(NT <= MMA_WARPS, "warp j sums n-tile j: at most MMA_WARPS n-tiles a block");
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, t = lane % 4;
    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[j][i] = 0.0f;
    float va[X_AHEAD ? DEPTH : 1][16], vb[X_AHEAD ? DEPTH : 1][16];
    // The norm's weight of each chunk's x (Ready::NORM only).
    float gm[Ready::NORM && X_AHEAD ? DEPTH : 1][16];
    uint4 w0[DEPTH][NT], w1[DEPTH][NT];
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    const int first = warp * MMA_CHUNK;
    if (Ready::EARLY) {
#pragma unroll
        for (int p = 0; p < DEPTH; p++) {
            const int e = first + p * MMA_WARPS * MMA_CHUNK + 16 * t;
            const bool in = e < k;
#pragma unroll
            for (int j = 0; j < NT; j++) {
                w0[p][j] = in ? *reinterpret_cast<const uint4*>(wr[j] + e) : zero;
                w1[p][j] = in ? *reinterpret_cast<const uint4*>(wr[j] + e + 8) : zero;
            }
        }
    }
    ready(xa, xb);
    for (int c0 = first; c0 < k; c0 += DEPTH * MMA_WARPS * MMA_CHUNK) {
#pragma unroll
        for (int p = 0; p < DEPTH; p++) {
            // Pieces past k are zeros (k % 16 == 0: a piece is all in or all out).
            const int e = c0 + p * MMA_WARPS * MMA_CHUNK + 16 * t;
            const bool in = e < k;
            // The first chunks' weights are in flight already where `ready` came after them.
            if (!Ready::EARLY || c0 != first) {
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    w0[p][j] = in ? *reinterpret_cast<const uint4*>(wr[j] + e) : zero;
                    w1[p][j] = in ? *reinterpret_cast<const uint4*>(wr[j] + e + 8) : zero;
                }
            }
            if (X_AHEAD) {
                load16(xa && in ? xa + e : nullptr, va[X_AHEAD ? p : 0]);
                load16(xb && in ? xb + e : nullptr, vb[X_AHEAD ? p : 0]);
                if (Ready::NORM) ready.load_norm(e, in, gm[X_AHEAD ? p : 0]);
            }
        }
#pragma unroll
        for (int p = 0; p < DEPTH; p++) {
            const int c = c0 + p * MMA_WARPS * MMA_CHUNK;
            // A chunk wholly past k adds nothing: skipped, as DEPTH 1 never reaches it (the
            // same for the whole warp).
            if (c >= k) break;
            const int e = c + 16 * t;
            const bool in = e < k;
            const int xs = X_AHEAD ? p : 0;
            if (!X_AHEAD) {
                load16(xa && in ? xa + e : nullptr, va[xs]);
                load16(xb && in ? xb + e : nullptr, vb[xs]);
                if (Ready::NORM) ready.load_norm(e, in, gm[0]);
            }
            if (Ready::NORM) ready.normalise(e, in, va[xs], vb[xs], gm[Ready::NORM && X_AHEAD ? p : 0]);
            // Step s: elements 4s … 4s + 3 of the lane's 16; each n-tile takes the hi then the
            // lo product.
#pragma unroll
            for (int s = 0; s < 4; s++) {
                unsigned a0h, a0l, a1h, a1l, a2h, a2l, a3h, a3l;
                split_x(va[xs][4 * s], va[xs][4 * s + 1], a0h, a0l);
                split_x(vb[xs][4 * s], vb[xs][4 * s + 1], a1h, a1l);
                split_x(va[xs][4 * s + 2], va[xs][4 * s + 3], a2h, a2l);
                split_x(vb[xs][4 * s + 2], vb[xs][4 * s + 3], a3h, a3l);
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    const uint4 lo = w0[p][j], hi = w1[p][j];
                    const unsigned b0 = s == 0 ? lo.x : s == 1 ? lo.z : s == 2 ? hi.x : hi.z;
                    const unsigned b1 = s == 0 ? lo.y : s == 1 ? lo.w : s == 2 ? hi.y : hi.w;
                    mma_16816(acc[j], a0h, a1h, a2h, a3h, b0, b1);
                    if (MMA_SPLIT) mma_16816(acc[j], a0l, a1l, a2l, a3l, b0, b1);
                }
            }
        }
    }
    return sum_warp_partials<NT>(acc, part, d, warp, lane);
}

// Writes (or adds) a tile's d: lane (g, t) of warp j holds rows g (d[0], d[1]) and g + 8 (d[2],
// d[3]) × outputs 2t and 2t + 1 of n-tile j; nothing past `rows` or `n_out`.
__device__ __forceinline__ void store_tile(const float* d, float* y, int y_stride, int accumulate, int rows,
                                           int n_out, int r0, int o0) {
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = r0 + g + (i / 2) * 8, o = o0 + warp * MMA_COLS + 2 * t + (i % 2);
        if (r < rows && o < n_out) {
            float* out = y + (size_t)r * y_stride + o;
            *out = accumulate ? *out + d[i] : d[i];
        }
    }
}

// The start of every matmul block under programmatic dependent launch (see common.cu): lets the
// next kernel start, pulls this block's weight rows [o0, o0 + outs) (`row_bytes` each, contiguous)
// into L2 (by the first row tile's block only: the others read the same rows; and only for a
// matrix of at most MMA_PREFETCH_MAX_BYTES, see `prefetches_rows`), then waits for the kernel
// ahead, whose output x may be. A decode step's small matrix then loads while the norm, the
// recurrence or the attention ahead of it runs, instead of after.
#define MMA_PREFETCH_PIECE 4096
// Weight rows [o0, min(o0 + outs, n_out)) of `w` (`row_bytes` each) into L2, the block's
// threads taking pieces in turn.
__device__ __forceinline__ void prefetch_rows_l2(const void* w, int o0, int outs, int n_out, size_t row_bytes) {
    const int last = min(o0 + outs, n_out);
    const size_t bytes = (size_t)(last - o0) * row_bytes;
    const char* base = (const char*)w + (size_t)o0 * row_bytes;
    for (size_t off = (size_t)threadIdx.x * MMA_PREFETCH_PIECE; off < bytes;
         off += (size_t)blockDim.x * MMA_PREFETCH_PIECE)
        prefetch_l2(base + off, (unsigned)min((size_t)MMA_PREFETCH_PIECE, bytes - off));
}

// Whether this block pulls its rows into L2: the first row tile's, where the whole matrix (n_out
// rows of row_bytes) is at most MMA_PREFETCH_MAX_BYTES (host define).
__device__ __forceinline__ bool prefetches_rows(int n_out, size_t row_bytes) {
    return blockIdx.x == 0 && (unsigned long long)n_out * row_bytes <= (unsigned long long)MMA_PREFETCH_MAX_BYTES;
}

// Without `wait` the caller waits itself, later (MMA_EARLY_WEIGHTS: after its first weight loads).
__device__ __forceinline__ void matmul_start(const void* w, int o0, int outs, int n_out, size_t row_bytes,
                                             bool wait = true) {
    pdl_launch_dependents();
    if (prefetches_rows(n_out, row_bytes)) prefetch_rows_l2(w, o0, outs, n_out, row_bytes);
    if (wait) pdl_wait();
}

// The start of a 16-row matmul block (`matmul_start`, its wait left to the inputs under
// MMA_EARLY_WEIGHTS): its weight rows [o0, o0 + outs) pulled into L2, or with SWIGLU (W = [gate
// (width) | up (width)], n_out = 2·width) the gate rows of units [u0, u0 + units) and their up rows.
template <bool SWIGLU>
__device__ __forceinline__ void matmul_block_start(const bf16_t* w, int k, int n_out, int o0, int outs, int width,
                                                   int u0, int units) {
    if (SWIGLU) {
        pdl_launch_dependents();
        if (prefetches_rows(n_out, (size_t)k * sizeof(bf16_t))) {
            prefetch_rows_l2(w, u0, units, width, (size_t)k * sizeof(bf16_t));
            prefetch_rows_l2(w + (size_t)width * k, u0, units, width, (size_t)k * sizeof(bf16_t));
        }
        if (!MMA_EARLY_WEIGHTS) pdl_wait();
    } else {
        matmul_start(w, o0, outs, n_out, (size_t)k * sizeof(bf16_t), !MMA_EARLY_WEIGHTS);
    }
}

// One matmul block of NT n-tiles. Grid (ceil(rows / MMA_ROWS), ceil(n_out / (NT·MMA_COLS))): row
// tiles vary fastest, so the blocks that read the same weights run together and share them in L2.
//
// With SWIGLU (a dense MLP's fused gate/up, `matmul_bf16_swiglu_*`): W is [gate (width) | up
// (width)], n_out = 2·width, and the block writes act[r, u] = silu(gate[r, u]) · up[r, u] to y
// (stride y_stride) instead of the products, as the MoE's `gate_up_block` does: n-tile j's
// outputs 0..3 are the gate rows of units u0 + 4j …, its outputs 4..7 the up rows of the same
// units, so lane (g, t < 2) holds a gate and lane t + 2 the matching up. Grid (row tiles,
// ceil(width / (4·NT))): as many blocks as the plain kernel for the same NT. Each product is
// the plain kernel's chain (an MMA's output depends only on its row of A and column of B), and
// silu · up is `swiglu_rows`' expression on the same values: the bits of the matmul and
// `swiglu_rows` one after the other, without the launch between them or the products' trip
// through memory. `accumulate` is ignored.
//
// With NORM (`matmul_bf16_norm_*`, `matmul_bf16_swiglu_norm_*`), x is the residual stream and the
// block applies the RMSNorm (weight `norm_w`, `eps`, `norm_kind`) that would run before it
// (`InputsNormed`): its first weights are loaded before the sums of squares (and, under
// MMA_EARLY_WEIGHTS, before the wait for the kernel ahead; else the block waited at its start),
// then each block sums its rows' squares in `rmsnorm_rows`' order (`tile_norms`) and normalises
// x as it loads it, so the products are those of the plain kernel on `rmsnorm_rows`' output: the
// same bits, without that launch or its rows' trip through memory. With `norm_out`, the first
// n-column's blocks also write the normalised rows there (`InputsNormed`), as `rmsnorm_rows`
// would have, for the kernels after it that read them.
template <int NT, int DEPTH, bool X_AHEAD = false, bool SWIGLU = false, bool NORM = false>
__device__ __forceinline__ void matmul_block(const float* __restrict__ x, int x_stride,
                                             const int* __restrict__ row_index, const bf16_t* __restrict__ w,
                                             int k, int n_out, float* __restrict__ y, int y_stride,
                                             int accumulate, int rows, float (*part)[NT][WARP][4],
                                             const float* __restrict__ norm_w = nullptr, float eps = 0.0f,
                                             int norm_kind = 0, float (*norm_sums)[NORM_WARPS] = nullptr,
                                             float* norm_inv_s = nullptr, float* __restrict__ norm_out = nullptr) {
    const int lane = threadIdx.x % WARP, g = lane / 4;
    const int r0 = blockIdx.x * MMA_ROWS;
    const int o0 = blockIdx.y * NT * MMA_COLS;
    const int width = n_out / 2, u0 = blockIdx.y * NT * 4;
    matmul_block_start<SWIGLU>(w, k, n_out, o0, NT * MMA_COLS, width, u0, 4 * NT);
    const float *xa = nullptr, *xb = nullptr;
    if (!MMA_EARLY_WEIGHTS) tile_inputs(x, x_stride, row_index, rows, r0, xa, xb);
    // This lane's outputs' weight rows (the last valid one past the end: computed, never written).
    const bf16_t* wr[NT];
#pragma unroll
    for (int j = 0; j < NT; j++) {
        if (SWIGLU) {
            const int unit = min(u0 + 4 * j + g % 4, width - 1);
            wr[j] = w + (size_t)(g < 4 ? unit : width + unit) * k;
        } else {
            wr[j] = w + (size_t)min(o0 + j * MMA_COLS + g, n_out - 1) * k;
        }
    }
    float d[4];
    bool mine;
    if (NORM)
        mine = mma_tile<NT, DEPTH, X_AHEAD>(
            xa, xb, wr, k, part, d,
            InputsNormed{x, x_stride, row_index, rows, r0, k, norm_w, eps, norm_kind, norm_sums, norm_inv_s,
                         norm_out, 0.0f, 0.0f});
    else if (MMA_EARLY_WEIGHTS)
        mine = mma_tile<NT, DEPTH, X_AHEAD>(xa, xb, wr, k, part, d, InputsAfterWait{x, x_stride, row_index, rows, r0});
    else
        mine = mma_tile<NT, DEPTH, X_AHEAD>(xa, xb, wr, k, part, d);
    if (!mine) return;
    if (!SWIGLU) {
        store_tile(d, y, y_stride, accumulate, rows, n_out, r0, o0);
    } else {
        float up[4];
#pragma unroll
        for (int i = 0; i < 4; i++) up[i] = __shfl_down_sync(FULL_MASK, d[i], 2);
        const int t = lane % 4, warp = threadIdx.x / WARP;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int r = r0 + g + (i / 2) * 8;
            const int unit = u0 + 4 * warp + 2 * t + (i % 2);
            if (t < 2 && r < rows && unit < width) y[(size_t)r * y_stride + unit] = siluf_(d[i]) * up[i];
        }
    }
}

// A 16-row bf16 matmul kernel NAME: `matmul_block` of NT n-tiles a block, DEPTH chunks of a
// warp's weights loaded at once (their x too with X_AHEAD), launch bounds of BLOCKS blocks a
// multiprocessor, with the SwiGLU in it or not. Every kernel below is one of these.
#define MATMUL_BF16_KERNEL(NAME, NT, DEPTH, X_AHEAD, BLOCKS, SWIGLU)                                    \
    extern "C" __global__ void __launch_bounds__(MMA_WARPS * WARP, BLOCKS)                              \
    NAME(const float* __restrict__ x, int x_stride, const int* __restrict__ row_index,                  \
         const bf16_t* __restrict__ w, int k, int n_out, float* __restrict__ y, int y_stride,           \
         int accumulate, int rows) {                                                                    \
        __shared__ float part[MMA_WARPS][NT][WARP][4];                                                  \
        matmul_block<NT, DEPTH, X_AHEAD, SWIGLU>(x, x_stride, row_index, w, k, n_out, y, y_stride,      \
                                                 accumulate, rows, part);                               \
    }

// NAME's twin with the input RMSNorm in it (`matmul_block`'s NORM): four arguments more, the
// norm's weight, eps and kind, and where to keep the normalised rows (null: nowhere).
#define MATMUL_BF16_NORM_KERNEL(NAME, NT, DEPTH, X_AHEAD, BLOCKS, SWIGLU)                               \
    extern "C" __global__ void __launch_bounds__(MMA_WARPS * WARP, BLOCKS)                              \
    NAME(const float* __restrict__ x, int x_stride, const int* __restrict__ row_index,                  \
         const bf16_t* __restrict__ w, int k, int n_out, float* __restrict__ y, int y_stride,           \
         int accumulate, int rows, const float* __restrict__ norm_w, float eps, int norm_kind,          \
         float* __restrict__ norm_out) {                                                                \
        __shared__ float part[MMA_WARPS][NT][WARP][4];                                                  \
        __shared__ float norm_sums[MMA_ROWS][NORM_WARPS];                                               \
        __shared__ float norm_inv_s[MMA_ROWS];                                                          \
        matmul_block<NT, DEPTH, X_AHEAD, SWIGLU, true>(x, x_stride, row_index, w, k, n_out, y, y_stride, \
                                                       accumulate, rows, part, norm_w, eps, norm_kind,    \
                                                       norm_sums, norm_inv_s, norm_out);                  \
    }

// Each 16-row kernel below and, where compiled (MMA_NORM_TWINS: the host asks for them only
// where a norm may go into a matmul, for with them NVRTC and ptxas take ~75 % longer), its
// norm twin (`matmul_bf16…` and `matmul_bf16_norm…`, `matmul_bf16_swiglu…` and
// `matmul_bf16_swiglu_norm…`).
#if MMA_NORM_TWINS
#define MATMUL_BF16_KERNELS(PLAIN, NORMED, NT, DEPTH, X_AHEAD, BLOCKS, SWIGLU) \
    MATMUL_BF16_KERNEL(PLAIN, NT, DEPTH, X_AHEAD, BLOCKS, SWIGLU)              \
    MATMUL_BF16_NORM_KERNEL(NORMED, NT, DEPTH, X_AHEAD, BLOCKS, SWIGLU)
#else
#define MATMUL_BF16_KERNELS(PLAIN, NORMED, NT, DEPTH, X_AHEAD, BLOCKS, SWIGLU) \
    MATMUL_BF16_KERNEL(PLAIN, NT, DEPTH, X_AHEAD, BLOCKS, SWIGLU)
#endif

// MMA_NT n-tiles a block: x read (and split) once per MMA_NT·MMA_COLS outputs.
MATMUL_BF16_KERNELS(matmul_bf16, matmul_bf16_norm, MMA_NT, 1, false, MMA_MIN_BLOCKS, false)

// One n-tile a block: four times the blocks, for matrices too narrow to fill the GPU otherwise
// (the same products in the same order: the same bits), and MMA_NARROW_DEPTH chunks of a warp
// loaded at once, their x too: a decode step's narrow matrices have too few blocks to keep
// enough loads in flight one chunk at a time (the A3B slice's o projection: 9.1 µs with x
// chunk by chunk, 7.0 with x ahead, `kernel_define_times`, bench/RESULTS.md session 18).
// With MMA_NARROW_ONE_BLOCK (the host's FLASHLANE_MATMUL_NARROW_DEPTH above the default, an A/B
// switch) its launch bounds are one block a multiprocessor, whose registers hold deeper chunks of
// weights and x without spilling.
#if MMA_NARROW_ONE_BLOCK
#define MMA_NARROW_BLOCKS 1
#else
#define MMA_NARROW_BLOCKS MMA_MIN_BLOCKS
#endif
MATMUL_BF16_KERNELS(matmul_bf16_narrow, matmul_bf16_norm_narrow, 1, MMA_NARROW_DEPTH, true, MMA_NARROW_BLOCKS, false)

// NT n-tiles a block for NT other than MMA_NT (3, 5, 6: `matmul_bf16_t3` …): the host picks the
// count that fills the GPU's resident blocks in the fewest waves (a 12,352-output decode matrix
// is 386 blocks of 4 n-tiles, 1.46 waves of the H200's 264, but 258 blocks of 6: one wave). The
// same products in the same order as `matmul_bf16`: the same bits.
#define MATMUL_BF16_TILES(NT) \
    MATMUL_BF16_KERNELS(matmul_bf16_t##NT, matmul_bf16_norm_t##NT, NT, 1, false, MMA_MIN_BLOCKS, false)
MATMUL_BF16_TILES(3)
MATMUL_BF16_TILES(5)
MATMUL_BF16_TILES(6)

// A dense MLP's gate/up with its SwiGLU (`matmul_block`'s SWIGLU) at NT n-tiles a block, NT of
// the plain kernels' counts (`matmul_bf16_swiglu_t3` … `_t6`): the host takes the count, and
// whether deep (below), that the plain gate/up would run.
#define MATMUL_BF16_SWIGLU_TILES(NT)                                                             \
    MATMUL_BF16_KERNELS(matmul_bf16_swiglu_t##NT, matmul_bf16_swiglu_norm_t##NT, NT, 1, false, MMA_MIN_BLOCKS, \
                        true)
MATMUL_BF16_SWIGLU_TILES(3)
MATMUL_BF16_SWIGLU_TILES(4)
MATMUL_BF16_SWIGLU_TILES(5)
MATMUL_BF16_SWIGLU_TILES(6)

// 3 and MMA_NT n-tiles a block with MMA_DEEP_DEPTH chunks of a warp's weights and their x
// loaded at once (`matmul_bf16_t3_deep`, `matmul_bf16_t4_deep`), for a one-row-tile matrix of
// few outputs and long k that leaves each multiprocessor one block at most (Qwen3-4B's o and
// down projections, 2,560 outputs: 107 blocks of 3 for 132 multiprocessors), each warp
// otherwise waiting on one chunk at a time. Launch bounds of one block a multiprocessor (the
// most such a grid puts there) leave ptxas the registers to hold it all without spills: at
// one row the 4B shape's o projection takes 7.5 µs against 9.4 for `matmul_bf16_t3`, its down
// projection 19.0 against 23.5 (`kernel_define_times`, bench/RESULTS.md session 18). The same
// products in the same order: the same bits.
#define MATMUL_BF16_DEEP(NT) \
    MATMUL_BF16_KERNELS(matmul_bf16_t##NT##_deep, matmul_bf16_norm_t##NT##_deep, NT, MMA_DEEP_DEPTH, true, 1, false)
static_assert(MMA_NT == 4, "the host finds the MMA_NT deep kernel as matmul_bf16_t{MMA_NT}_deep");
MATMUL_BF16_DEEP(3)
MATMUL_BF16_DEEP(4)

// The deep kernels with a dense MLP's SwiGLU (`matmul_bf16_swiglu_t3_deep`, `_t4_deep`).
#define MATMUL_BF16_SWIGLU_DEEP(NT)                                                                  \
    MATMUL_BF16_KERNELS(matmul_bf16_swiglu_t##NT##_deep, matmul_bf16_swiglu_norm_t##NT##_deep, NT, MMA_DEEP_DEPTH, \
                        true, 1, true)
MATMUL_BF16_SWIGLU_DEEP(3)
MATMUL_BF16_SWIGLU_DEEP(4)

// ---------------------------------------------------------------------------------------------
// The 16-row chain with the operands swapped, for rounds of up to MMA_COLS rows (`matmul_bf16_swap`,
// `_swap_t2`, and their norm twins; the host's FLASHLANE_MATMUL_SWAP_ROWS): yᵀ = W · xᵀ, so an
// m16n8k16's A is 16 outputs' weights (lane (g, t): its outputs g and g + 8, elements 16t … 16t + 15
// of a chunk, as the 16-row kernels' B takes its output g) and its B x's rows (column g: row g, the
// elements the 16-row kernels' A takes of row g). Step s puts elements 16t + 4s + {0, 1} in k-slots
// 2t + {0, 1} and 16t + 4s + {2, 3} in 8 + 2t + {0, 1} for both operands, as `mma_tile` does, so a
// step sums the same 16 products of each (row, output) (a tensor-core step sums them alike
// whichever operand holds which factor: the probe of session 22, see matmul_wg.cu), hi then lo;
// chunks go to warps and the warps' sums are added as there. The same chain: the same bits, with
// half the MMAs and half the splits of x a step (8 rows × 16 outputs instead of 16 × 8, where a
// decode round fills one or two of the 16 rows).

// `mma_tile` swapped: `wr[2j]`, `wr[2j + 1]` this lane's weight rows of outputs g and g + 8 of
// output tile j (16 outputs), `xa` its x row g (null: zeros). Lane (g, t) of warp j < NT returns
// true with d = output tile j's outputs g (d[0], d[1]) and g + 8 (d[2], d[3]) × rows 2t and 2t + 1;
// the other warps return false. Every thread of the block must call it. `ready` as there (its
// row g + 8 is always absent: vb stays zeros).
template <int NT, int DEPTH, class Ready = InputsReady>
__device__ __forceinline__ bool mma_tile_swapped(const float* xa, const bf16_t* const* wr, int k,
                                                 float (*part)[NT][WARP][4], float* d, Ready ready = Ready()) {
    static_assert(NT <= MMA_WARPS, "warp j sums output tile j: at most MMA_WARPS tiles a block");
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, t = lane % 4;
    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[j][i] = 0.0f;
    // vb: the absent row g + 8 that `ready.normalise` takes beside row g (zeros, set where used:
    // kept live across the loop they spilled; it never stores them, a round here has at most
    // MMA_COLS rows).
    float va[DEPTH][16], vb[16], gm[Ready::NORM ? DEPTH : 1][16];
    // Weights of outputs g (h = 0) and g + 8 (h = 1): elements 0-7 (w0) and 8-15 (w1) of the piece.
    uint4 w0[DEPTH][NT][2], w1[DEPTH][NT][2];
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    const int first = warp * MMA_CHUNK;
    const float* xb = nullptr;
    auto load_weights = [&](int c0) {
#pragma unroll
        for (int p = 0; p < DEPTH; p++) {
            const int e = c0 + p * MMA_WARPS * MMA_CHUNK + 16 * t;
            const bool in = e < k;
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    w0[p][j][h] = in ? *reinterpret_cast<const uint4*>(wr[2 * j + h] + e) : zero;
                    w1[p][j][h] = in ? *reinterpret_cast<const uint4*>(wr[2 * j + h] + e + 8) : zero;
                }
        }
    };
    if (Ready::EARLY) load_weights(first);
    ready(xa, xb);
    for (int c0 = first; c0 < k; c0 += DEPTH * MMA_WARPS * MMA_CHUNK) {
        if (!Ready::EARLY || c0 != first) load_weights(c0);
#pragma unroll
        for (int p = 0; p < DEPTH; p++) {
            const int e = c0 + p * MMA_WARPS * MMA_CHUNK + 16 * t;
            const bool in = e < k;
            load16(xa && in ? xa + e : nullptr, va[p]);
            if (Ready::NORM) ready.load_norm(e, in, gm[Ready::NORM ? p : 0]);
        }
#pragma unroll
        for (int p = 0; p < DEPTH; p++) {
            const int c = c0 + p * MMA_WARPS * MMA_CHUNK;
            if (c >= k) break;
            const int e = c + 16 * t;
            const bool in = e < k;
            if (Ready::NORM) {
#pragma unroll
                for (int i = 0; i < 16; i++) vb[i] = 0.0f;
                ready.normalise(e, in, va[p], vb, gm[Ready::NORM ? p : 0]);
            }
#pragma unroll
            for (int s = 0; s < 4; s++) {
                unsigned b0h, b0l, b1h, b1l;
                split_x(va[p][4 * s], va[p][4 * s + 1], b0h, b0l);
                split_x(va[p][4 * s + 2], va[p][4 * s + 3], b1h, b1l);
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    unsigned a[4];
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const uint4 lo = w0[p][j][h], hi = w1[p][j][h];
                        // Elements 4s, 4s + 1 (a[h]) and 4s + 2, 4s + 3 (a[2 + h]), as
                        // `mma_tile`'s b0 and b1.
                        a[h] = s == 0 ? lo.x : s == 1 ? lo.z : s == 2 ? hi.x : hi.z;
                        a[2 + h] = s == 0 ? lo.y : s == 1 ? lo.w : s == 2 ? hi.y : hi.w;
                    }
                    mma_16816(acc[j], a[0], a[1], a[2], a[3], b0h, b1h);
                    if (MMA_SPLIT) mma_16816(acc[j], a[0], a[1], a[2], a[3], b0l, b1l);
                }
            }
        }
    }
    return sum_warp_partials<NT>(acc, part, d, warp, lane);
}

// Writes (or adds) a swapped tile's d: lane (g, t) of warp j holds outputs g (d[0], d[1]) and
// g + 8 (d[2], d[3]) of output tile j × rows 2t and 2t + 1; nothing past `rows` or `n_out`.
__device__ __forceinline__ void store_swapped_tile(const float* d, float* y, int y_stride, int accumulate, int rows,
                                                   int n_out, int o0) {
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = 2 * t + (i % 2), o = o0 + 16 * warp + g + 8 * (i / 2);
        if (r < rows && o < n_out) {
            float* out = y + (size_t)r * y_stride + o;
            *out = accumulate ? *out + d[i] : d[i];
        }
    }
}

// One block of the swapped chain: NT tiles of 16 outputs, every row (at most MMA_COLS). Grid (1,
// ceil(n_out / (16·NT))). With NORM the input RMSNorm in it, as `matmul_block`'s (`InputsNormed`,
// its rows kept in `norm_out` where not null). With SWIGLU (a dense MLP's gate/up: W = [gate
// (width) | up (width)], n_out = 2·width) output tile j's rows 0–7 are the gate rows of units
// u0 + 8j … and rows 8–15 the up rows of the same units, so lane (g, t) holds a unit's gate (d[0],
// d[1]) and its up (d[2], d[3]) and writes act[r, u] = silu(gate) · up, `swiglu_rows`' expression
// (as `matmul_block`'s SWIGLU); grid (1, ceil(width / (8·NT))); `accumulate` ignored.
template <int NT, int DEPTH, bool NORM, bool SWIGLU = false>
__device__ __forceinline__ void matmul_swap_block(const float* __restrict__ x, int x_stride,
                                                  const int* __restrict__ row_index, const bf16_t* __restrict__ w,
                                                  int k, int n_out, float* __restrict__ y, int y_stride,
                                                  int accumulate, int rows, float (*part)[NT][WARP][4],
                                                  const float* __restrict__ norm_w, float eps, int norm_kind,
                                                  float (*norm_sums)[NORM_WARPS], float* norm_inv_s,
                                                  float* __restrict__ norm_out) {
    const int lane = threadIdx.x % WARP, g = lane / 4, t = lane % 4;
    const int o0 = blockIdx.y * NT * 16;
    const int width = n_out / 2, u0 = blockIdx.y * NT * 8;
    matmul_block_start<SWIGLU>(w, k, n_out, o0, NT * 16, width, u0, 8 * NT);
    const float *xa = nullptr, *xb = nullptr;
    if (!MMA_EARLY_WEIGHTS) tile_inputs(x, x_stride, row_index, rows, 0, xa, xb);
    // Outputs past the end: the last valid row, computed and never written.
    const bf16_t* wr[2 * NT];
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (SWIGLU) {
                const int unit = min(u0 + 8 * j + g, width - 1);
                wr[2 * j + h] = w + (size_t)(h * width + unit) * k;
            } else {
                wr[2 * j + h] = w + (size_t)min(o0 + 16 * j + g + 8 * h, n_out - 1) * k;
            }
        }
    float d[4];
    bool mine;
    if (NORM)
        mine = mma_tile_swapped<NT, DEPTH>(
            xa, wr, k, part, d,
            InputsNormed{x, x_stride, row_index, rows, 0, k, norm_w, eps, norm_kind, norm_sums, norm_inv_s,
                         norm_out, 0.0f, 0.0f});
    else if (MMA_EARLY_WEIGHTS)
        mine = mma_tile_swapped<NT, DEPTH>(xa, wr, k, part, d, InputsAfterWait{x, x_stride, row_index, rows, 0});
    else
        mine = mma_tile_swapped<NT, DEPTH>(xa, wr, k, part, d);
    if (!mine) return;
    const int warp = threadIdx.x / WARP;
    if (SWIGLU) {
        const int unit = u0 + 8 * warp + g;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int r = 2 * t + i;
            if (r < rows && unit < width) y[(size_t)r * y_stride + unit] = siluf_(d[i]) * d[2 + i];
        }
        return;
    }
    store_swapped_tile(d, y, y_stride, accumulate, rows, n_out, o0);
}

#define MATMUL_BF16_SWAP_KERNEL(NAME, NT, DEPTH, BLOCKS, SWIGLU)                                        \
    extern "C" __global__ void __launch_bounds__(MMA_WARPS * WARP, BLOCKS)                              \
    NAME(const float* __restrict__ x, int x_stride, const int* __restrict__ row_index,                  \
         const bf16_t* __restrict__ w, int k, int n_out, float* __restrict__ y, int y_stride,           \
         int accumulate, int rows) {                                                                    \
        __shared__ float part[MMA_WARPS][NT][WARP][4];                                                  \
        matmul_swap_block<NT, DEPTH, false, SWIGLU>(x, x_stride, row_index, w, k, n_out, y, y_stride,    \
                                                    accumulate, rows, part, nullptr, 0.0f, 0, nullptr,   \
                                                    nullptr, nullptr);                                   \
    }
#define MATMUL_BF16_SWAP_NORM_KERNEL(NAME, NT, DEPTH, BLOCKS, SWIGLU)                                   \
    extern "C" __global__ void __launch_bounds__(MMA_WARPS * WARP, BLOCKS)                              \
    NAME(const float* __restrict__ x, int x_stride, const int* __restrict__ row_index,                  \
         const bf16_t* __restrict__ w, int k, int n_out, float* __restrict__ y, int y_stride,           \
         int accumulate, int rows, const float* __restrict__ norm_w, float eps, int norm_kind,          \
         float* __restrict__ norm_out) {                                                                \
        __shared__ float part[MMA_WARPS][NT][WARP][4];                                                  \
        __shared__ float norm_sums[MMA_ROWS][NORM_WARPS];                                               \
        __shared__ float norm_inv_s[MMA_ROWS];                                                          \
        matmul_swap_block<NT, DEPTH, true, SWIGLU>(x, x_stride, row_index, w, k, n_out, y, y_stride,     \
                                                   accumulate, rows, part, norm_w, eps, norm_kind,       \
                                                   norm_sums, norm_inv_s, norm_out);                     \
    }
// One output tile a block (16 outputs, for narrow matrices: the narrow kernel's depth and launch
// bounds, which its A/B switch moves together) and two (depth 1, as the wide 16-row kernels: at
// the narrow depth its norm twin spilled 248 bytes); the norm twins with the others.
// With a dense MLP's SwiGLU: two output tiles a block (8 units each; a gate/up is a wide matrix).
MATMUL_BF16_SWAP_KERNEL(matmul_bf16_swap, 1, MMA_NARROW_DEPTH, MMA_NARROW_BLOCKS, false)
MATMUL_BF16_SWAP_KERNEL(matmul_bf16_swap_t2, 2, 1, MMA_MIN_BLOCKS, false)
MATMUL_BF16_SWAP_KERNEL(matmul_bf16_swiglu_swap_t2, 2, 1, MMA_MIN_BLOCKS, true)
#if MMA_NORM_TWINS
MATMUL_BF16_SWAP_NORM_KERNEL(matmul_bf16_swap_norm, 1, MMA_NARROW_DEPTH, MMA_NARROW_BLOCKS, false)
MATMUL_BF16_SWAP_NORM_KERNEL(matmul_bf16_swap_norm_t2, 2, 1, MMA_MIN_BLOCKS, false)
MATMUL_BF16_SWAP_NORM_KERNEL(matmul_bf16_swiglu_swap_norm_t2, 2, 1, MMA_MIN_BLOCKS, true)
#endif

// ---------------------------------------------------------------------------------------------
// Block-scaled FP8 weights (Qwen's -FP8 checkpoints): W[o, i] = q[o, i] · s[o / br, i / bc] with q
// in e4m3 (one byte) and s f32, `scales` [n_out / br, k / bc]. e4m3 widens exactly to bf16, so the
// tensor cores take q as they take bf16 weights (x split into hi and lo as above); a chunk of 64
// k-elements lies in one column block (bc % 64 == 0) and an n-tile in one row block (br % 8 == 0),
// so each chunk's products are summed unscaled into `tmp` and added as acc = fma(s, tmp, acc).
//
// Batch invariance: as the bf16 matmul's (the same chunks to the same warps, the same warp-order
// sum); the chain differs from the bf16 one by the per-chunk scaling. FP8 matrices run these
// kernels, or the warpgroup split's FP8 kernels (`matmul_fp8_wg_split_*` in matmul_wg.cu, decode
// rounds of 17–64 rows in the models that compile them), whose residues are these kernels' warps:
// the same chain, whatever the batch.

// Two e4m3 (low byte: the lower k) as a bf16 pair, exactly (every e4m3 value is an f16 and a
// bf16): the f16 pair cvt gives, widened and packed again as bf16. Four conversions a pair keep
// the FP8 matmuls busy at one row where the bf16 ones wait on memory (bench/RESULTS.md session
// 18: FP8 reads its half of the bytes at 0.8-1.0 TB/s, bf16 at 2.6-2.8). Measured on the H100
// in session 51 and removed: bit operations in their place (the byte placed in a bf16, scaled by
// 2^120 exactly; the same bits) no faster, and f16 tiles of one conversion a pair (other bits,
// and f16 cannot hold an x past 65,504) 0-9 % faster a matrix at one row.
__device__ __forceinline__ unsigned e4m3_pair(unsigned two) {
    unsigned h2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"((unsigned short)two));
    return pack_pair(widen_half<true>(h2, false), widen_half<true>(h2, true));
}

// The bf16 pairs of a word's four e4m3: bytes 0, 1 in `lo`, 2, 3 in `hi`.
__device__ __forceinline__ void e4m3_quad(unsigned word, unsigned& lo, unsigned& hi) {
    lo = e4m3_pair(word);
    hi = e4m3_pair(word >> 16);
}

// `mma_tile` for e4m3 weights: `wr[j]` is this lane's weight row (output g) of n-tile j, as
// there; `srow[j]` the scale row (the scales along k) of the outputs this lane's d holds, 2t and
// 2t + 1 of n-tile j, which may lie in another row block than output g (the MoE's gate/up tiles).
template <int NT, int DEPTH>
__device__ __forceinline__ bool mma_tile_fp8(const float* xa, const float* xb, const unsigned char* const* wr,
                                             const float* const* srow, int bc, int k,
                                             float (*part)[NT][WARP][4], float* d) {
    static_assert(NT <= MMA_WARPS, "warp j sums n-tile j: at most MMA_WARPS n-tiles a block");
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, t = lane % 4;
    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[j][i] = 0.0f;
    float va[16], vb[16];
    uint4 wq[DEPTH][NT];
    // Each chunk's scales are loaded with its weights, not after its products: a load issued
    // once the products are done would wait a whole memory latency more per chunk.
    float sc[DEPTH][NT];
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    for (int c0 = warp * MMA_CHUNK; c0 < k; c0 += DEPTH * MMA_WARPS * MMA_CHUNK) {
#pragma unroll
        for (int p = 0; p < DEPTH; p++) {
            const int c = c0 + p * MMA_WARPS * MMA_CHUNK;
            const int e = c + 16 * t;
            const bool in = e < k;
#pragma unroll
            for (int j = 0; j < NT; j++) {
                wq[p][j] = in ? *reinterpret_cast<const uint4*>(wr[j] + e) : zero;
                sc[p][j] = c < k ? srow[j][c / bc] : 0.0f;
            }
        }
#pragma unroll
        for (int p = 0; p < DEPTH; p++) {
            const int c = c0 + p * MMA_WARPS * MMA_CHUNK;
            if (c >= k) break;
            const int e = c + 16 * t;
            const bool in = e < k;
            load16(xa && in ? xa + e : nullptr, va);
            load16(xb && in ? xb + e : nullptr, vb);
            float tmp[NT][4];
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int i = 0; i < 4; i++) tmp[j][i] = 0.0f;
#pragma unroll
            for (int s = 0; s < 4; s++) {
                unsigned a0h, a0l, a1h, a1l, a2h, a2l, a3h, a3l;
                split_x(va[4 * s], va[4 * s + 1], a0h, a0l);
                split_x(vb[4 * s], vb[4 * s + 1], a1h, a1l);
                split_x(va[4 * s + 2], va[4 * s + 3], a2h, a2l);
                split_x(vb[4 * s + 2], vb[4 * s + 3], a3h, a3l);
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    // Elements 4s, 4s + 1 (b0) and 4s + 2, 4s + 3 (b1) of the lane's 16, as
                    // the bf16 kernel feeds them: bytes 4s … 4s + 3 of the piece, word s.
                    const uint4 q = wq[p][j];
                    const unsigned word = s == 0 ? q.x : s == 1 ? q.y : s == 2 ? q.z : q.w;
                    unsigned b0, b1;
                    e4m3_quad(word, b0, b1);
                    mma_16816(tmp[j], a0h, a1h, a2h, a3h, b0, b1);
                    if (MMA_SPLIT) mma_16816(tmp[j], a0l, a1l, a2l, a3l, b0, b1);
                }
            }
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int i = 0; i < 4; i++) acc[j][i] = fmaf(sc[p][j], tmp[j][i], acc[j][i]);
        }
    }
    return sum_warp_partials<NT>(acc, part, d, warp, lane);
}

template <int NT, int DEPTH>
__device__ __forceinline__ void matmul_fp8_block(const float* __restrict__ x, int x_stride,
                                                 const int* __restrict__ row_index,
                                                 const unsigned char* __restrict__ w,
                                                 const float* __restrict__ scales, int br, int bc, int k,
                                                 int n_out, float* __restrict__ y, int y_stride, int accumulate,
                                                 int rows, float (*part)[NT][WARP][4]) {
    const int lane = threadIdx.x % WARP, g = lane / 4;
    const int r0 = blockIdx.x * MMA_ROWS;
    const int o0 = blockIdx.y * NT * MMA_COLS;
    matmul_start(w, o0, NT * MMA_COLS, n_out, (size_t)k);
    const float *xa, *xb;
    tile_inputs(x, x_stride, row_index, rows, r0, xa, xb);
    const int t = lane % 4;
    const unsigned char* wr[NT];
    const float* srow[NT];
#pragma unroll
    for (int j = 0; j < NT; j++) {
        wr[j] = w + (size_t)min(o0 + j * MMA_COLS + g, n_out - 1) * k;
        // The scales of this lane's outputs 2t, 2t + 1 (see mma_tile_fp8).
        srow[j] = scales + (size_t)(min(o0 + j * MMA_COLS + 2 * t, n_out - 1) / br) * (k / bc);
    }
    float d[4];
    if (!mma_tile_fp8<NT, DEPTH>(xa, xb, wr, srow, bc, k, part, d)) return;
    store_tile(d, y, y_stride, accumulate, rows, n_out, r0, o0);
}

extern "C" __global__ void __launch_bounds__(MMA_WARPS * WARP, MMA_MIN_BLOCKS)
matmul_fp8(const float* __restrict__ x, int x_stride, const int* __restrict__ row_index,
           const unsigned char* __restrict__ w, const float* __restrict__ scales, int br, int bc, int k,
           int n_out, float* __restrict__ y, int y_stride, int accumulate, int rows) {
    __shared__ float part[MMA_WARPS][MMA_NT][WARP][4];
    matmul_fp8_block<MMA_NT, MMA_FP8_WIDE_DEPTH>(x, x_stride, row_index, w, scales, br, bc, k, n_out, y, y_stride,
                                accumulate, rows, part);
}

extern "C" __global__ void __launch_bounds__(MMA_WARPS * WARP, MMA_MIN_BLOCKS)
matmul_fp8_narrow(const float* __restrict__ x, int x_stride, const int* __restrict__ row_index,
                  const unsigned char* __restrict__ w, const float* __restrict__ scales, int br, int bc,
                  int k, int n_out, float* __restrict__ y, int y_stride, int accumulate, int rows) {
    __shared__ float part[MMA_WARPS][1][WARP][4];
    matmul_fp8_block<1, MMA_FP8_NARROW_DEPTH>(x, x_stride, row_index, w, scales, br, bc, k, n_out, y,
                                          y_stride, accumulate, rows, part);
}

// `mma_tile_fp8` on the swapped chain (`mma_tile_swapped`'s operands: A the e4m3 weights of
// outputs g and g + 8 of each output tile, widened as `mma_tile_fp8` widens them, B x's row g):
// `wr[2j + h]` this lane's weight row and `srow[2j + h]` its scale row (along k) of output
// g + 8h of tile j. Each chunk's products are summed unscaled, then acc = fma(s, tmp, acc) with
// each output's own scale, as there: the same chain, the same bits.
template <int NT, int DEPTH>
__device__ __forceinline__ bool mma_tile_fp8_swapped(const float* xa, const unsigned char* const* wr,
                                                     const float* const* srow, int bc, int k,
                                                     float (*part)[NT][WARP][4], float* d) {
    static_assert(NT <= MMA_WARPS, "warp j sums output tile j: at most MMA_WARPS tiles a block");
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, t = lane % 4;
    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[j][i] = 0.0f;
    float va[16];
    uint4 wq[DEPTH][NT][2];
    float sc[DEPTH][NT][2];
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    for (int c0 = warp * MMA_CHUNK; c0 < k; c0 += DEPTH * MMA_WARPS * MMA_CHUNK) {
#pragma unroll
        for (int p = 0; p < DEPTH; p++) {
            const int c = c0 + p * MMA_WARPS * MMA_CHUNK;
            const int e = c + 16 * t;
            const bool in = e < k;
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    wq[p][j][h] = in ? *reinterpret_cast<const uint4*>(wr[2 * j + h] + e) : zero;
                    sc[p][j][h] = c < k ? srow[2 * j + h][c / bc] : 0.0f;
                }
        }
#pragma unroll
        for (int p = 0; p < DEPTH; p++) {
            const int c = c0 + p * MMA_WARPS * MMA_CHUNK;
            if (c >= k) break;
            const int e = c + 16 * t;
            const bool in = e < k;
            load16(xa && in ? xa + e : nullptr, va);
            float tmp[NT][4];
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int i = 0; i < 4; i++) tmp[j][i] = 0.0f;
#pragma unroll
            for (int s = 0; s < 4; s++) {
                unsigned b0h, b0l, b1h, b1l;
                split_x(va[4 * s], va[4 * s + 1], b0h, b0l);
                split_x(va[4 * s + 2], va[4 * s + 3], b1h, b1l);
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    // Word s of each output's piece: its elements 4s … 4s + 3, as `mma_tile_fp8`.
                    unsigned a[4];
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const uint4 q = wq[p][j][h];
                        const unsigned word = s == 0 ? q.x : s == 1 ? q.y : s == 2 ? q.z : q.w;
                        e4m3_quad(word, a[h], a[2 + h]);
                    }
                    mma_16816(tmp[j], a[0], a[1], a[2], a[3], b0h, b1h);
                    if (MMA_SPLIT) mma_16816(tmp[j], a[0], a[1], a[2], a[3], b0l, b1l);
                }
            }
            // d[0], d[1] are output g's, d[2], d[3] output g + 8's.
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int i = 0; i < 4; i++) acc[j][i] = fmaf(sc[p][j][i / 2], tmp[j][i], acc[j][i]);
        }
    }
    return sum_warp_partials<NT>(acc, part, d, warp, lane);
}

// `matmul_fp8_block` on the swapped chain: NT tiles of 16 outputs, every row (at most MMA_COLS).
// Grid (1, ceil(n_out / (16·NT))).
template <int NT, int DEPTH>
__device__ __forceinline__ void matmul_fp8_swap_block(const float* __restrict__ x, int x_stride,
                                                      const int* __restrict__ row_index,
                                                      const unsigned char* __restrict__ w,
                                                      const float* __restrict__ scales, int br, int bc, int k,
                                                      int n_out, float* __restrict__ y, int y_stride,
                                                      int accumulate, int rows, float (*part)[NT][WARP][4]) {
    const int g = threadIdx.x % WARP / 4;
    const int o0 = blockIdx.y * NT * 16;
    matmul_start(w, o0, NT * 16, n_out, (size_t)k);
    const float *xa, *xb;
    tile_inputs(x, x_stride, row_index, rows, 0, xa, xb);
    const unsigned char* wr[2 * NT];
    const float* srow[2 * NT];
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int o = min(o0 + 16 * j + g + 8 * h, n_out - 1);
            wr[2 * j + h] = w + (size_t)o * k;
            srow[2 * j + h] = scales + (size_t)(o / br) * (k / bc);
        }
    float d[4];
    if (!mma_tile_fp8_swapped<NT, DEPTH>(xa, wr, srow, bc, k, part, d)) return;
    store_swapped_tile(d, y, y_stride, accumulate, rows, n_out, o0);
}

#define MATMUL_FP8_SWAP_KERNEL(NAME, NT, DEPTH)                                                        \
    extern "C" __global__ void __launch_bounds__(MMA_WARPS * WARP, MMA_MIN_BLOCKS)                     \
    NAME(const float* __restrict__ x, int x_stride, const int* __restrict__ row_index,                 \
         const unsigned char* __restrict__ w, const float* __restrict__ scales, int br, int bc, int k, \
         int n_out, float* __restrict__ y, int y_stride, int accumulate, int rows) {                   \
        __shared__ float part[MMA_WARPS][NT][WARP][4];                                                 \
        matmul_fp8_swap_block<NT, DEPTH>(x, x_stride, row_index, w, scales, br, bc, k, n_out, y,         \
                                         y_stride, accumulate, rows, part);                            \
    }
// One output tile a block at the narrow FP8 kernel's depth, two at the wide one's.
MATMUL_FP8_SWAP_KERNEL(matmul_fp8_swap, 1, MMA_FP8_NARROW_DEPTH)
MATMUL_FP8_SWAP_KERNEL(matmul_fp8_swap_t2, 2, MMA_FP8_WIDE_DEPTH)

// ---------------------------------------------------------------------------------------------
// Many rows (a prefill chunk, a decode round of 128+ streams): `split_rows`, then
// `matmul_bf16_tiled`. A block computes BM rows × BN outputs, its 8 warps each a 32-row × NT·8-output
// part of it, and stages each chunk of 64 k-elements of x (BM rows) and W (BN outputs) in shared
// memory with `cp.async`, MMT_STAGES chunks in flight: every weight is read from memory once per
// BM rows (the 16-row kernels above read it once per 16) and every x row once per BN outputs.
//
// x enters the tiles split already: `split_rows` writes each row (gathered by `row_index`) as
// the bf16 hi and lo pairs `split_pair` makes of it — the same values the 16-row kernels make in
// their registers — in the order the MMAs take them, so that one `ldmatrix` gives a warp the A
// fragment of a step. Splitting in every warp of every block (four warps share a row, 152 blocks
// share it on Qwen3-4B's gate/up) made the old tiles issue ~12 instructions per MMA (ncu,
// bench/RESULTS.md session 21).
//
// Batch invariance: the same chain as `mma_tile`. There, warp w sums the chunks w, w + 8, …
// (MMA_WARPS = 8) in increasing order, each chunk 4 steps of the hi then the lo product with the
// same k-slot feed, and the 8 warps' sums are added in warp order: sum = p0; sum += p1; … Here a
// warp walks the chunks in that order itself — the chunks of w = 0, then of w = 1, … — into a
// partial that starts at 0 for each w, and folds each finished partial into its total in the
// same order (total = p0, then total += pw). The products, the partials and the folds are the
// same operations on the same values, so the bits are those of the narrow and wide kernels,
// whatever the batch, tile or kernel. (The host defines MMT_RESIDUES as MMA_WARPS.)
//
// A split row: per chunk, 32 words (u32: two bf16) of hi, then 32 of lo; word w = 8s + 4h + t
// holds elements 16t + 4s + 2h and + 1 of the chunk (`mma_tile`'s feed: step s, lane t, h 0
// for MMA k-slots 2t + {0, 1}, 1 for 8 + 2t + {0, 1}). Elements past k are zeros, as are the
// tiles' weights there.
//
// Shared memory, per stage: xs[BM][64] words and ws[BN][64] bf16, in 16-byte pieces placed by
// an XOR swizzle so that the 8 row addresses of an `ldmatrix` matrix, and the 8 lanes of a
// 16-byte-load phase, hit 8 different bank groups: x piece p (0–7 hi, 8–15 lo) of row r at
// p ^ (r & 7), W piece p of row r at p ^ (r & 1) (a lane reads pieces 2t and 2t + 1).
//
// Host defines: MMT_STAGES, MMT_RESIDUES, MMT_ROWS, MMT_OUTS (the block: 64 × 128), SPLIT_THREADS,
// MMT_WEIGHTS_EVICT_FIRST (1: W's copies under an L2 evict-first policy, `cp_async16_hint`),
// MMT_PROBE (0; only `tiled_define_times`'s recompiled kernels set it: 1 copies the stages and
// multiplies nothing, 2 multiplies without copying W: what the copies alone and the products
// alone take, the results meaningless).

#define MMT_WARPS 8
#define MMT_X_PIECES 16                // 16-byte pieces of a chunk of a split row (8 hi, 8 lo)
#define MMT_W_PIECES (MMA_CHUNK / 8)  // of a chunk of W (bf16)

// The first of the two elements word w (< MMA_CHUNK / 2) of chunk c of a split row holds (with
// WG, in the warpgroup matmul's k order: `split_rows_of`).
template <bool WG>
__device__ __forceinline__ int split_word_element(int c, int w) {
    const int s = w / 8, h = (w / 4) % 2, t = w % 4;
    return WG ? c * MMA_CHUNK + 16 * (2 * h + t / 2) + 4 * s + 2 * (t % 2) : c * MMA_CHUNK + 16 * t + 4 * s + 2 * h;
}

// Elements x0, x1 split into word w of chunk c of split row r (of `chunks` chunks, `rows` rows)
// of `xs`: its hi half, and its lo half MMA_CHUNK / 2 words on; with `block_rows` (not 0) in
// the walk's layout for blocks of that many rows (`matmul_walk.cu`: block b's rows from word
// b · block_rows · 64 · chunks, chunk c's 16-byte pieces p of the block's nb rows at
// c · nb · 64 + (p · nb + row) · 4 words into it), the same words elsewhere.
__device__ __forceinline__ void store_split_word(unsigned* __restrict__ xs, int r, int rows, int chunks, int c, int w,
                                                 float x0, float x1, int block_rows) {
    unsigned hi, lo;
    split_pair(x0, x1, hi, lo);
    if (block_rows) {
        const int r0 = r - r % block_rows, nb = min(block_rows, rows - r0);
        unsigned* dst = xs + (size_t)r0 * chunks * MMA_CHUNK + (size_t)c * nb * MMA_CHUNK + (r - r0) * 4 + w % 4;
        dst[(w / 4) * nb * 4] = hi;
        dst[(MMA_CHUNK / 8 + w / 4) * nb * 4] = lo;
        return;
    }
    unsigned* dst = xs + (size_t)r * chunks * MMA_CHUNK + (size_t)c * MMA_CHUNK;
    dst[w] = hi;
    dst[MMA_CHUNK / 2 + w] = lo;
}

// x's rows as split rows (above): row r of `xs` is x's row `row_index[r]` (r without an index),
// ceil(k / 64) · 64 words. With WG, the warpgroup matmul's k order (`matmul_wg.cu`): word
// 8s + 4c + 2u + j holds elements 16(2c + u) + 4s + 2j and + 1.
// With `block_rows`, in the walk's layout (`store_split_word`).
template <bool WG>
__device__ __forceinline__ void split_rows_of(const float* __restrict__ x, int x_stride,
                                              const int* __restrict__ row_index, int rows, int k,
                                              unsigned* __restrict__ xs, int block_rows = 0) {
    pdl_launch_dependents();
    pdl_wait();
    const int chunks = (k + MMA_CHUNK - 1) / MMA_CHUNK;
    const int r = blockIdx.x;
    const int i = blockIdx.y * SPLIT_THREADS + threadIdx.x;  // the row's i-th word of hi
    if (r >= rows || i >= chunks * (MMA_CHUNK / 2)) return;
    const float* src = x + (size_t)(row_index ? row_index[r] : r) * x_stride;
    const int c = i / (MMA_CHUNK / 2), w = i % (MMA_CHUNK / 2);
    // k % 16 == 0: e < k means e + 1 < k too.
    const int e = split_word_element<WG>(c, w);
    const float x0 = e < k ? src[e] : 0.0f, x1 = e < k ? src[e + 1] : 0.0f;
    store_split_word(xs, r, rows, chunks, c, w, x0, x1, block_rows);
}

// Grid (rows, ceil(words of hi a row / SPLIT_THREADS)).
extern "C" __global__ void __launch_bounds__(SPLIT_THREADS)
split_rows(const float* __restrict__ x, int x_stride, const int* __restrict__ row_index, int rows, int k,
           unsigned* __restrict__ xs) {
    split_rows_of<false>(x, x_stride, row_index, rows, k, xs);
}

// `rmsnorm_rows` then `split_rows` in one launch, for a matmul over split rows whose input norm
// runs here (the host's NormPlace::InSplit, FLASHLANE_NORM_IN_SPLIT): block (r, y) sums row r's
// squares in `rmsnorm_rows`' order (`tile_norms`, the norm twins' sum), then splits its words of
// the normalised row, each element `normalise16`'s expression (`rmsnorm_rows`' value), and with
// `out` (not null) stores those elements there as `rmsnorm_rows` writes them. So the split rows,
// and `out`, hold the bits of the two kernels one after the other. x holds whole rows of k (no
// row index); the grid is `split_rows`'. With WG, in the warpgroup matmul's k order
// (`split_rows_norm_wg`, `matmul_wg.cu`); with `block_rows`, in the walk's layout.
template <bool WG>
__device__ __forceinline__ void split_rows_norm_of(const float* __restrict__ x, int rows, int k,
                                                   const float* __restrict__ norm_w, float eps, int kind,
                                                   float* __restrict__ out, unsigned* __restrict__ xs,
                                                   int block_rows = 0) {
    static_assert(SPLIT_THREADS == MMA_WARPS * WARP, "tile_norms sums a row over MMA_WARPS warps");
    __shared__ float sums[MMA_ROWS][NORM_WARPS];
    __shared__ float inv_s[MMA_ROWS];
    pdl_launch_dependents();
    pdl_wait();
    const int r = blockIdx.x;
    // Row r alone: a tile of one row from r (every thread of the block takes part).
    tile_norms(x, k, nullptr, r + 1, r, k, eps, sums, inv_s);
    const float inv = inv_s[0];
    const int chunks = (k + MMA_CHUNK - 1) / MMA_CHUNK;
    const int i = blockIdx.y * SPLIT_THREADS + threadIdx.x;  // the row's i-th word of hi
    if (r >= rows || i >= chunks * (MMA_CHUNK / 2)) return;
    const float* src = x + (size_t)r * k;
    const int c = i / (MMA_CHUNK / 2), w = i % (MMA_CHUNK / 2);
    const int e = split_word_element<WG>(c, w);
    float x0 = 0.0f, x1 = 0.0f;
    if (e < k) {  // k % 16 == 0: e + 1 < k too
        x0 = __fmul_rn(__fmul_rn(src[e], inv), norm_scale(norm_w[e], kind));
        x1 = __fmul_rn(__fmul_rn(src[e + 1], inv), norm_scale(norm_w[e + 1], kind));
        if (out != nullptr) {
            out[(size_t)r * k + e] = x0;
            out[(size_t)r * k + e + 1] = x1;
        }
    }
    store_split_word(xs, r, rows, chunks, c, w, x0, x1, block_rows);
}

extern "C" __global__ void __launch_bounds__(SPLIT_THREADS)
split_rows_norm(const float* __restrict__ x, int rows, int k, const float* __restrict__ norm_w, float eps,
                int kind, float* __restrict__ out, unsigned* __restrict__ xs) {
    split_rows_norm_of<false>(x, rows, k, norm_w, eps, kind, out, xs);
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
    const unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
    // src-size 0 fills the 16 bytes with zeros without reading (rows past the end, k past k).
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0));
}
// cp_async16 with an L2 policy (`l2_evict_first`): the tiles' weight copies under
// MMT_WEIGHTS_EVICT_FIRST (host define, FLASHLANE_MATMUL_EVICT_FIRST), so that a matrix streaming
// through L2 evicts its own lines before the rows of x, the k split's partials and the next
// matrix's prefetched rows. A cache hint: the same values copied, the same bits.
__device__ __forceinline__ void cp_async16_hint(void* smem, const void* gmem, bool valid, unsigned long long policy) {
    const unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;" ::"r"(dst), "l"(gmem),
                 "r"(valid ? 16 : 0), "l"(policy));
}
// An L2 policy that marks every line it touches first to go.
__device__ __forceinline__ unsigned long long l2_evict_first() {
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }

// Four 8 × 8 matrices of 16-bit pairs from shared memory: lane l gives the address of row l % 8
// of matrix l / 8 and receives word l % 4 of row l / 4 of each.
__device__ __forceinline__ void ldmatrix_x4(const unsigned* p, unsigned& r0, unsigned& r1, unsigned& r2,
                                            unsigned& r3) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(a));
}

// `ldmatrix_x4` transposed: lane l gives the address of row l % 8 of matrix l / 8 and receives
// elements 2(l % 4) and 2(l % 4) + 1 of column l / 4 of each.
__device__ __forceinline__ void ldmatrix_x4_trans(const unsigned* p, unsigned& r0, unsigned& r1, unsigned& r2,
                                                  unsigned& r3) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(a));
}

__device__ __forceinline__ int mmt_w_pos(int row, int p) { return p ^ (row & 1); }

// One chunk's products into warp (·, wc)'s accumulators: its 2 row tiles of x (split rows at
// xs_s, rows x_row[m] of the stage, swizzled by lane x_swz, k-slot half x_half) by its NT n-tiles
// of W (at ws, BN rows of MMA_CHUNK bf16): per step of 16 k-slots the hi product then the lo one,
// the chain every kernel of these tiles makes (so their bits).
template <int NT>
__device__ __forceinline__ void mmt_chunk_products(const unsigned* xs_s, const bf16_t* ws, float (&acc)[2][NT][4],
                                                   const int (&x_row)[2], int x_swz, int x_half, int wc, int g,
                                                   int t) {
    // This lane's W pieces 2t (steps 0, 1) and 2t + 1 (steps 2, 3) of each n-tile's output g.
    uint4 wlo[NT], whi[NT];
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const int o = (wc * NT + j) * MMA_COLS + g;
        const int pos_lo = mmt_w_pos(o, 2 * t), pos_hi = mmt_w_pos(o, 2 * t + 1);
        wlo[j] = *reinterpret_cast<const uint4*>(ws + o * MMA_CHUNK + 8 * pos_lo);
        whi[j] = *reinterpret_cast<const uint4*>(ws + o * MMA_CHUNK + 8 * pos_hi);
    }
#pragma unroll
    for (int s = 0; s < 4; s++) {
        // Rows g and g + 8 of each row tile, k-slots 2t + {0, 1} and 8 + 2t + {0, 1}:
        // pieces 2s and 2s + 1 (hi), 8 + 2s and 9 + 2s (lo).
        unsigned ah[2][4], al[2][4];
        const int piece = (2 * s + x_half) ^ x_swz;
#pragma unroll
        for (int m = 0; m < 2; m++) {
            const unsigned* at = xs_s + x_row[m] + 4 * piece;
            ldmatrix_x4(at, ah[m][0], ah[m][1], ah[m][2], ah[m][3]);
            if (MMA_SPLIT) ldmatrix_x4(at + MMA_CHUNK / 2, al[m][0], al[m][1], al[m][2], al[m][3]);
        }
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const uint4 lo = wlo[j], hi = whi[j];
            const unsigned b0 = s == 0 ? lo.x : s == 1 ? lo.z : s == 2 ? hi.x : hi.z;
            const unsigned b1 = s == 0 ? lo.y : s == 1 ? lo.w : s == 2 ? hi.y : hi.w;
#pragma unroll
            for (int m = 0; m < 2; m++) {
                mma_16816(acc[m][j], ah[m][0], ah[m][1], ah[m][2], ah[m][3], b0, b1);
                if (MMA_SPLIT) mma_16816(acc[m][j], al[m][0], al[m][1], al[m][2], al[m][3], b0, b1);
            }
        }
    }
}

// Where a k split's partials go (`matmul_tiled_block`'s FOLD): to memory for
// `matmul_fold_residues` (NONE), or folded in the tile's cluster into y (PLAIN) or into a
// gate/up's SwiGLU (SWIGLU).
#define MMT_FOLD_NONE 0
#define MMT_FOLD_PLAIN 1
#define MMT_FOLD_SWIGLU 2

// Floats past each row of a cluster-folded tile's partial in shared memory: a warp's stores (rows
// g, columns 2t + i) then meet at most two to a bank (4g + 2t, where BN alone would put the 8
// rows' same column in one bank).
#define MMT_FOLD_PAD 4

// The cluster's fold of a tile (`matmul_tiled_block`'s FOLD): every block's partial `mine` is in
// its shared memory ([BM][BN + MMT_FOLD_PAD] floats); after the cluster's barrier, block z folds
// the tile's rows z · BM / MMT_RESIDUES … in residue order, reading residue j's partial from block
// j (`ld.shared::cluster`): ((p0 + p1) + p2) + …, `matmul_fold_residues`' sum (and
// `matmul_fold_residues_swiglu`'s for a gate and its up, then silu(gate) · up), so the bits of the
// split and its fold without the partials' trip through memory or the fold's launch. A second
// barrier keeps every block's shared memory until the cluster has read it.
template <int BM, int BN, int FOLD>
__device__ __forceinline__ void mmt_cluster_fold(const float* mine, float* __restrict__ y, int y_stride,
                                                 int accumulate, int rows, int n_out, int r0, int o0, int u0,
                                                 int width) {
    constexpr int ROWS_A_BLOCK = BM / MMT_RESIDUES;
    static_assert(ROWS_A_BLOCK * MMT_RESIDUES == BM, "each block of the cluster folds as many rows");
    constexpr int PS = BN + MMT_FOLD_PAD;
    constexpr int COLS = FOLD == MMT_FOLD_SWIGLU ? BN / 2 : BN;  // units or outputs a row
    cluster_sync();
    const int z = blockIdx.z;  // the cluster's blocks are the tile's residues: rank z
    // The sum of the residues' partials at `at` (floats into a partial), in residue order.
    auto fold = [&](int at) {
        float total = cluster_load_f32(mine + at, 0);
#pragma unroll
        for (int j = 1; j < MMT_RESIDUES; j++) total += cluster_load_f32(mine + at, j);
        return total;
    };
    for (int e = threadIdx.x; e < ROWS_A_BLOCK * COLS; e += MMT_WARPS * WARP) {
        const int rl = z * ROWS_A_BLOCK + e / COLS, cl = e % COLS, r = r0 + rl;
        if (r >= rows) continue;
        if (FOLD == MMT_FOLD_SWIGLU) {
            const int unit = u0 + cl;
            if (unit >= width) continue;
            const float gate = fold(rl * PS + cl), up = fold(rl * PS + BN / 2 + cl);
            y[(size_t)r * y_stride + unit] = siluf_(gate) * up;
        } else {
            const int o = o0 + cl;
            if (o >= n_out) continue;
            const float total = fold(rl * PS + cl);
            float* out = y + (size_t)r * y_stride + o;
            *out = accumulate ? *out + total : total;
        }
    }
    cluster_sync();
}

// A tile's start (`matmul_tiled_block`, and the warpgroup split's `matmul_wg_fold_block`): the
// block that owns its weights (`first`: unsplit, or a split's residue 0) pulls its `outs` rows
// into L2 — with FOLD == MMT_FOLD_SWIGLU its outs / 2 units' gate rows (from u0 of `width`)
// and their up rows — and every block lets the next kernel start, then waits for the kernel
// ahead; with MMT_EARLY_WEIGHTS the wait comes later, after the block's first weight copies.
template <int FOLD>
__device__ __forceinline__ void tile_start(const bf16_t* __restrict__ w, int k, int n_out, int o0, int outs, int u0,
                                           int width, bool first) {
    if (FOLD == MMT_FOLD_SWIGLU && first) {
        pdl_launch_dependents();
        if (prefetches_rows(n_out, (size_t)k * sizeof(bf16_t))) {
            prefetch_rows_l2(w, u0, outs / 2, width, (size_t)k * sizeof(bf16_t));
            prefetch_rows_l2(w + (size_t)width * k, u0, outs / 2, width, (size_t)k * sizeof(bf16_t));
        }
        if (!MMT_EARLY_WEIGHTS) pdl_wait();
    } else if (first) {
        matmul_start(w, o0, outs, n_out, (size_t)k * sizeof(bf16_t), !MMT_EARLY_WEIGHTS);
    } else {
        pdl_launch_dependents();
        if (!MMT_EARLY_WEIGHTS) pdl_wait();
    }
}

// y[r0 … r0 + BM, o0 … o0 + BN) of a block: 8 warps as (BM / 32) × (8 / (BM / 32)), each 2 row
// tiles × NT n-tiles.
// SPLIT_K: the block computes residue blockIdx.z's partial alone into y + blockIdx.z ·
// part_stride (see `matmul_bf16_tiled_split`).
// FOLD (with SPLIT_K; the kernel's cluster the tile's MMT_RESIDUES blocks, rank blockIdx.z): the
// partial goes to the block's shared memory instead, and the cluster folds the tile there
// (`mmt_cluster_fold`): MMT_FOLD_PLAIN into y (stride y_stride, `accumulate` as the fold's),
// MMT_FOLD_SWIGLU the units' act = silu(gate) · up into y (stride y_stride), the tile's outputs
// BN / 2 units' gate rows then their up rows (units [blockIdx.y · BN / 2, …)).
template <int BM, int NT, bool SPLIT_K = false, int FOLD = MMT_FOLD_NONE>
__device__ __forceinline__ void matmul_tiled_block(const unsigned* __restrict__ xs, const bf16_t* __restrict__ w,
                                                   int k, int n_out, float* __restrict__ y, int y_stride,
                                                   int accumulate, int rows, int part_stride = 0) {
    constexpr int WR = BM / 32, WC = MMT_WARPS / WR, BN = WC * NT * MMA_COLS;
    constexpr int X_STAGE = BM * MMA_CHUNK;      // words: BM split rows of a chunk
    constexpr int W_STAGE = BN * MMA_CHUNK / 2;  // words: BN rows of 64 bf16
    constexpr int STAGE = X_STAGE + W_STAGE;
    constexpr int THREADS = MMT_WARPS * WARP;
    constexpr int XP = BM * MMT_X_PIECES / THREADS, WP = BN * MMT_W_PIECES / THREADS;
    static_assert(XP * THREADS == BM * MMT_X_PIECES && WP * THREADS == BN * MMT_W_PIECES,
                  "every thread copies as many pieces of a stage");
    static_assert(FOLD == MMT_FOLD_NONE || SPLIT_K, "a cluster folds a split's partials");
    static_assert(FOLD == MMT_FOLD_NONE || MMT_STAGES * STAGE >= BM * (BN + MMT_FOLD_PAD),
                  "the stages' shared memory holds the block's partial for the cluster's fold");
    extern __shared__ float4 mmt_smem4[];
    unsigned* smem = reinterpret_cast<unsigned*>(mmt_smem4);
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, g = lane / 4, t = lane % 4;
    const int wr = warp / WC, wc = warp % WC;
    // Row blocks vary fastest, as in the 16-row kernels: blocks that read the same weights run
    // together. (Walking groups of 16 row blocks instead, to keep a prefill's x in L2, measured
    // the same in session 9.)
    const int r0 = blockIdx.x * BM, o0 = blockIdx.y * BN;
    const int chunks = (k + MMA_CHUNK - 1) / MMA_CHUNK;
    const size_t xs_stride = (size_t)chunks * MMA_CHUNK;
    // The residues this block walks, and how many chunks it multiplies.
    const int res_first = SPLIT_K ? blockIdx.z : 0, res_end = SPLIT_K ? res_first + 1 : MMT_RESIDUES;
    const int visits =
        SPLIT_K ? (res_first < chunks ? (chunks - res_first + MMT_RESIDUES - 1) / MMT_RESIDUES : 0) : chunks;
    // A split's first residue alone pulls the tile's weights into L2 (the others read the same).
    // MMT_FOLD_SWIGLU: the tile's units and the matrix's (gate rows [0, width), up rows after).
    const int width = n_out / 2, u0 = blockIdx.y * (BN / 2);
    tile_start<FOLD>(w, k, n_out, o0, BN, u0, width, !SPLIT_K || blockIdx.z == 0);

    // This thread's pieces of every stage's copy: piece p of rows r, r + RX, r + 2·RX … of x
    // (RX = THREADS / 16) and of outputs o, o + RW, … of W (RW = THREADS / 8), the same for each
    // chunk but for its offset (and a row's swizzle the same for all of a thread's rows).
    static_assert(THREADS % MMT_X_PIECES == 0 && THREADS % MMT_W_PIECES == 0, "whole rows a pass");
    constexpr int RX = THREADS / MMT_X_PIECES, RW = THREADS / MMT_W_PIECES;
    static_assert(RX % 8 == 0 && RW % 2 == 0, "a thread's rows share their swizzle");
    const int xr = threadIdx.x / MMT_X_PIECES, xp = threadIdx.x % MMT_X_PIECES;
    const int wo = threadIdx.x / MMT_W_PIECES, wp = threadIdx.x % MMT_W_PIECES;
    const unsigned* x_src = xs + (size_t)min(r0 + xr, rows - 1) * xs_stride + 4 * xp;
    const int x_dst = xr * MMA_CHUNK + 4 * (xp ^ (xr & 7));
    // A SwiGLU fold's local output ol is unit u0 + ol % (BN / 2)'s gate row (ol < BN / 2) or its up
    // row: pass j's rows are the pass's first row's plus j · RW, plus width − BN / 2 from the up
    // rows on.
    const bf16_t* w_src = FOLD == MMT_FOLD_SWIGLU ? w + (size_t)min(u0 + wo, width - 1) * k + 8 * wp
                                                  : w + (size_t)min(o0 + wo, n_out - 1) * k + 8 * wp;
    const int w_dst = X_STAGE + wo * (MMA_CHUNK / 2) + 4 * mmt_w_pos(wo, wp);
    auto load_x = [&](int stage, int c) {
        unsigned* base = smem + stage * STAGE;
#pragma unroll
        for (int j = 0; j < XP; j++) {
            const bool in = r0 + xr + j * RX < rows;
            cp_async16(base + x_dst + j * RX * MMA_CHUNK,
                       in ? x_src + (size_t)j * RX * xs_stride + (size_t)c * MMA_CHUNK : xs, in);
        }
    };
#if MMT_WEIGHTS_EVICT_FIRST
    const unsigned long long w_policy = l2_evict_first();
#define MMT_W_COPY(dst, src, valid) cp_async16_hint(dst, src, valid, w_policy)
#else
#define MMT_W_COPY(dst, src, valid) cp_async16(dst, src, valid)
#endif
    auto load_w = [&](int stage, int c) {
        unsigned* base = smem + stage * STAGE;
        const bool k_in = c * MMA_CHUNK + 8 * wp < k;
        if (MMT_PROBE == 2) return;
#pragma unroll
        for (int j = 0; j < WP; j++) {
            if (FOLD == MMT_FOLD_SWIGLU) {
                static_assert(BN / 2 % RW == 0, "no pass of the copies straddles the gate and up rows");
                const int ol = wo + j * RW, row_step = j * RW + (j * RW >= BN / 2 ? width - BN / 2 : 0);
                const bool in = k_in && u0 + ol % (BN / 2) < width;
                MMT_W_COPY(base + w_dst + j * RW * (MMA_CHUNK / 2),
                           in ? w_src + (size_t)row_step * k + (size_t)c * MMA_CHUNK : w, in);
                continue;
            }
            const bool in = k_in && o0 + wo + j * RW < n_out;
            MMT_W_COPY(base + w_dst + j * RW * (MMA_CHUNK / 2),
                       in ? w_src + (size_t)j * RW * k + (size_t)c * MMA_CHUNK : w, in);
        }
    };
#undef MMT_W_COPY
    auto load = [&](int stage, int c) {
        load_x(stage, c);
        load_w(stage, c);
    };
    // The chunk the next load fetches: visits walk residue 0's chunks (0, R, 2R, …), then 1's, …
    int load_res = res_first, load_c = res_first;
    auto next_load = [&]() {
        load_c += MMT_RESIDUES;
        if (load_c >= chunks) load_c = ++load_res;
    };

    // This lane's ldmatrix row (of the 16 of a row tile), whose swizzle is lane & 7, and which
    // half of the step's k-slots its matrices hold (lanes 16–31: the second).
    int x_row[2];
#pragma unroll
    for (int m = 0; m < 2; m++) x_row[m] = (wr * 32 + m * 16 + (lane & 15)) * MMA_CHUNK;
    const int x_swz = lane & 7, x_half = lane >> 4;

    float acc[2][NT][4], total[2][NT][4];
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[m][j][i] = total[m][j][i] = 0.0f;

    if (MMT_EARLY_WEIGHTS) {
        // The first stages' weights (never written while kernels run) before the wait for the
        // kernel ahead, whose output x is; their copies join the first stage's commit group, so
        // that group's wait covers them all.
        int c = load_c, c_res = load_res;
#pragma unroll
        for (int s = 0; s < MMT_STAGES - 1; s++) {
            if (s < visits) {
                load_w(s, c);
                c += MMT_RESIDUES;
                if (c >= chunks) c = ++c_res;
            }
        }
        pdl_wait();
    }
#pragma unroll
    for (int s = 0; s < MMT_STAGES - 1; s++) {
        if (s < visits) {
            if (MMT_EARLY_WEIGHTS)
                load_x(s, load_c);
            else
                load(s, load_c);
            next_load();
        }
        cp_async_commit();
    }
    int v = 0;  // visits so far (chunks multiplied)
    for (int res = res_first; res < res_end; res++) {
        for (int c = res; c < chunks; c += MMT_RESIDUES, v++) {
            cp_async_wait<MMT_STAGES - 2>();
            __syncthreads();
            if (v + MMT_STAGES - 1 < visits) {
                load((v + MMT_STAGES - 1) % MMT_STAGES, load_c);
                next_load();
            }
            cp_async_commit();
            if (MMT_PROBE == 1) continue;
            const unsigned* xs_s = smem + (v % MMT_STAGES) * STAGE;
            mmt_chunk_products<NT>(xs_s, reinterpret_cast<const bf16_t*>(xs_s + X_STAGE), acc, x_row, x_swz, x_half,
                                   wc, g, t);
        }
        // Residue `res` done (or empty: a zero partial, as a warp without chunks sums there).
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    total[m][j][i] = SPLIT_K || res == 0 ? acc[m][j][i] : total[m][j][i] + acc[m][j][i];
                    acc[m][j][i] = 0.0f;
                }
    }
    cp_async_wait<0>();
    // Accumulator i of row tile m and n-tile j: the tile's row and output (an m16n8 D fragment).
    auto tile_row = [&](int m, int i) { return wr * 32 + m * 16 + g + (i / 2) * 8; };
    auto tile_out = [&](int j, int i) { return (wc * NT + j) * MMA_COLS + 2 * t + (i % 2); };
    if (FOLD != MMT_FOLD_NONE) {
        // The partial into this block's shared memory (every warp done with the stages first),
        // rows BN + MMT_FOLD_PAD floats apart, then the cluster's fold.
        __syncthreads();
        float* mine = reinterpret_cast<float*>(smem);
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int i = 0; i < 4; i++) mine[tile_row(m, i) * (BN + MMT_FOLD_PAD) + tile_out(j, i)] = total[m][j][i];
        mmt_cluster_fold<BM, BN, FOLD>(mine, y, y_stride, accumulate, rows, n_out, r0, o0, u0, width);
        return;
    }
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int r = r0 + tile_row(m, i), o = o0 + tile_out(j, i);
                if (r < rows && o < n_out) {
                    float* out = y + (SPLIT_K ? (size_t)blockIdx.z * part_stride : 0) + (size_t)r * y_stride + o;
                    *out = accumulate ? *out + total[m][j][i] : total[m][j][i];
                }
            }
}

// 64 rows × 128 outputs, two blocks a multiprocessor. `xs`: the rows split (`split_rows`).
extern "C" __global__ void __launch_bounds__(MMT_WARPS * WARP, MMA_MIN_BLOCKS)
matmul_bf16_tiled(const unsigned* __restrict__ xs, const bf16_t* __restrict__ w, int k, int n_out,
                  float* __restrict__ y, int y_stride, int accumulate, int rows) {
    static_assert(MMT_OUTS == MMT_WARPS / (MMT_ROWS / 32) * 4 * MMA_COLS, "4 n-tiles a warp make MMT_OUTS");
    matmul_tiled_block<MMT_ROWS, 4>(xs, w, k, n_out, y, y_stride, accumulate, rows);
}

// The tiles with k split by residue over blocks (grid z = MMT_RESIDUES): block z writes residue
// z's partial of its tile, unfolded, into `part` + z · part_stride ([rows, n_out] each), and
// `matmul_fold_residues` then folds the partials in residue order — the fold the tiles and the
// 16-row kernels' warp-order sum make — so the bits are theirs. A round of 32–64 rows (a decode
// round of that many streams) then has MMT_RESIDUES times the blocks of the tiles, each an
// eighth of k's chain long, and reads each weight once (the 16-row kernels' blocks read it once
// per row tile, and x once per 40–48 outputs).
extern "C" __global__ void __launch_bounds__(MMT_WARPS * WARP, MMA_MIN_BLOCKS)
matmul_bf16_tiled_split(const unsigned* __restrict__ xs, const bf16_t* __restrict__ w, int k, int n_out,
                        float* __restrict__ part, int part_stride, int rows) {
    matmul_tiled_block<MMT_ROWS, 4, true>(xs, w, k, n_out, part, n_out, 0, rows, part_stride);
}

// `matmul_bf16_tiled_split` with its fold in the cluster of a tile's MMT_RESIDUES blocks
// (FLASHLANE_MATMUL_CLUSTER_FOLD; `mmt_cluster_fold`): the arguments of `matmul_bf16_tiled` (y,
// its stride, `accumulate`), the fold's bits, no partials in memory and no fold launch. Grid
// (ceil(rows / 64), ceil(n_out / 128), MMT_RESIDUES).
extern "C" __global__ void __launch_bounds__(MMT_WARPS * WARP, MMA_MIN_BLOCKS) __cluster_dims__(1, 1, MMT_RESIDUES)
matmul_bf16_tiled_split_fold(const unsigned* __restrict__ xs, const bf16_t* __restrict__ w, int k, int n_out,
                             float* __restrict__ y, int y_stride, int accumulate, int rows) {
    matmul_tiled_block<MMT_ROWS, 4, true, MMT_FOLD_PLAIN>(xs, w, k, n_out, y, y_stride, accumulate, rows);
}

// The same for a dense MLP's gate/up (W = [gate (width) | up (width)], n_out = 2 · width): a tile
// is 64 units' gate rows and their up rows, folded into act[r, u] = silu(gate) · up
// (`matmul_fold_residues_swiglu`'s bits; y = act, y_stride = width). Grid (ceil(rows / 64),
// ceil(width / 64), MMT_RESIDUES).
extern "C" __global__ void __launch_bounds__(MMT_WARPS * WARP, MMA_MIN_BLOCKS) __cluster_dims__(1, 1, MMT_RESIDUES)
matmul_bf16_tiled_split_fold_swiglu(const unsigned* __restrict__ xs, const bf16_t* __restrict__ w, int k,
                                    int n_out, float* __restrict__ y, int y_stride, int accumulate, int rows) {
    matmul_tiled_block<MMT_ROWS, 4, true, MMT_FOLD_SWIGLU>(xs, w, k, n_out, y, y_stride, accumulate, rows);
}

// The k split of a round of 17–32 rows (unless FLASHLANE_MATMUL_SPLIT32=0): blocks of 32 rows × 128
// outputs (8 warps of 32 rows × 2 n-tiles), half the rows' x copies and products of the 64-row
// blocks, and each weight read once where the 16-row kernels read it once per row tile; the
// same partials, so the same fold and bits.
extern "C" __global__ void __launch_bounds__(MMT_WARPS * WARP, MMA_MIN_BLOCKS)
matmul_bf16_tiled_split32(const unsigned* __restrict__ xs, const bf16_t* __restrict__ w, int k, int n_out,
                          float* __restrict__ part, int part_stride, int rows) {
    matmul_tiled_block<32, 2, true>(xs, w, k, n_out, part, n_out, 0, rows, part_stride);
}

// `matmul_bf16_tiled_split32` folded in its clusters (`matmul_bf16_tiled_split_fold`'s way, each of
// a tile's 8 blocks folding 4 of its 32 rows): the same arguments and bits. Grid (ceil(rows / 32),
// ceil(n_out / 128), MMT_RESIDUES); for a gate/up with its SwiGLU (`_fold_swiglu`) ceil(width /
// 64) tiles.
extern "C" __global__ void __launch_bounds__(MMT_WARPS * WARP, MMA_MIN_BLOCKS) __cluster_dims__(1, 1, MMT_RESIDUES)
matmul_bf16_tiled_split32_fold(const unsigned* __restrict__ xs, const bf16_t* __restrict__ w, int k, int n_out,
                               float* __restrict__ y, int y_stride, int accumulate, int rows) {
    matmul_tiled_block<32, 2, true, MMT_FOLD_PLAIN>(xs, w, k, n_out, y, y_stride, accumulate, rows);
}

extern "C" __global__ void __launch_bounds__(MMT_WARPS * WARP, MMA_MIN_BLOCKS) __cluster_dims__(1, 1, MMT_RESIDUES)
matmul_bf16_tiled_split32_fold_swiglu(const unsigned* __restrict__ xs, const bf16_t* __restrict__ w, int k,
                                      int n_out, float* __restrict__ y, int y_stride, int accumulate, int rows) {
    matmul_tiled_block<32, 2, true, MMT_FOLD_SWIGLU>(xs, w, k, n_out, y, y_stride, accumulate, rows);
}

// y[r, o] (+)= ((part_0 + part_1) + part_2) + … (MMT_RESIDUES partials, `[rows, n_out]` each,
// part_stride apart). A thread an output.
extern "C" __global__ void __launch_bounds__(SPLIT_THREADS)
matmul_fold_residues(const float* __restrict__ part, int part_stride, int rows, int n_out, float* __restrict__ y,
                     int y_stride, int accumulate) {
    pdl_launch_dependents();
    pdl_wait();
    const int i = blockIdx.x * SPLIT_THREADS + threadIdx.x;
    if (i >= rows * n_out) return;
    float total = part[i];
#pragma unroll
    for (int z = 1; z < MMT_RESIDUES; z++) total += part[(size_t)z * part_stride + i];
    float* out = y + (size_t)(i / n_out) * y_stride + i % n_out;
    *out = accumulate ? *out + total : total;
}

// A dense MLP's gate/up split by residue, folded and its SwiGLU taken in one pass:
// act[r, i] = silu(gate) · up, gate and up each folded as `matmul_fold_residues` folds them
// (partials `[rows, 2 · width]`, gate outputs first), the product the expression of
// `swiglu_rows`: the bits of the fold into y and then `swiglu_rows`, without y's round trip and
// one launch fewer. A thread a unit (a gate and its up).
extern "C" __global__ void __launch_bounds__(SPLIT_THREADS)
matmul_fold_residues_swiglu(const float* __restrict__ part, int part_stride, int rows, int width,
                            float* __restrict__ act) {
    pdl_launch_dependents();
    pdl_wait();
    const int j = blockIdx.x * SPLIT_THREADS + threadIdx.x;
    if (j >= rows * width) return;
    const int r = j / width, i = j % width;
    const int gi = r * 2 * width + i, ui = gi + width;
    float gate = part[gi], up = part[ui];
#pragma unroll
    for (int z = 1; z < MMT_RESIDUES; z++) {
        gate += part[(size_t)z * part_stride + gi];
        up += part[(size_t)z * part_stride + ui];
    }
    act[j] = siluf_(gate) * up;
}
