// Gated DeltaNet (models.md "Gated DeltaNet"), recurrent form, in two kernels per layer:
// `deltanet_conv` (depthwise causal conv + SiLU over [q | k | v], grid (window, channel block),
// one thread per channel, tokens in order) and `deltanet_recurrence` (the delta rule and the gated
// RMSNorm, one block per (window, value head), LIN_SPLIT threads per value column j holding
// S[:, j] in registers, tokens in order; `deltanet_recurrence_split` spreads a head over a
// cluster of blocks, with the same bits, for steps of few short windows). Every sum has a fixed
// order inside one block (or cluster), so a window's results never depend on the other windows
// of the launch.
//
// Session state, per linear layer: conv tail `[CONV_K − 1, C]` then S `[HV, DK, DV]`, f32, at
// `state + session·lin_stride + layer_off`. A window of at most `rollback` tokens (the sessions'
// rollback window) writes, before each token t ≥ 1, the state into snapshot slot t − 1 (`snaps +
// (session·(rollback − 1) + t − 1)·lin_stride + layer_off`): the state as of position start + t,
// one a rollback may return to. None before token 0: the engine never rolls a window back past
// its first token, so a decode window of one token writes no snapshot at all. A window starting
// at position 0 starts from zero state.
//
// `qkvz` and `ba` rows are `proj_stride` floats apart (one fused projection writes both).
//
// Host defines: LIN_HK, LIN_HV, LIN_DK, LIN_DV, LIN_CONV_K, LIN_SPLIT, LIN_CLUSTER, LIN_STAGE.

#define LIN_R (LIN_HV / LIN_HK)
#define LIN_GROUP (2 * LIN_DK + 2 * LIN_R * LIN_DV)
#define LIN_C (2 * LIN_HK * LIN_DK + LIN_HV * LIN_DV)
#define LIN_CONV_SIZE ((LIN_CONV_K - 1) * LIN_C)
#define L2_NORM_EPS 1e-6f
// Rows of a state column each lane of `deltanet_recurrence` keeps in registers.
#define LIN_ROWS (LIN_DK / LIN_SPLIT)
// A stage's q and k in shared memory with a word of padding after each lane's LIN_ROWS rows, so
// the LIN_SPLIT lanes of a column, which read row part·LIN_ROWS + i at the same time, read
// different banks (unpadded, LIN_ROWS = 32 put all four in one bank, 4-way conflicts on every
// read of the token loop; ncu counted 11 ways on average over the kernel's shared loads,
// bench/RESULTS.md session 47). Addresses only: the same bits.
#define LIN_DKP (LIN_DK + LIN_SPLIT)
#define LIN_PAD(i) ((i) + (i) / LIN_ROWS)

typedef unsigned long long u64;

// Where conv channel `ch` of the mixed row [q (HK·DK) | k (HK·DK) | v (HV·DV)] sits in a qkvz row
// grouped by key head: per group [q (DK) | k (DK) | v (R·DV) | z (R·DV)].
__device__ __forceinline__ int qkvz_offset(int ch) {
    if (ch < LIN_HK * LIN_DK) return (ch / LIN_DK) * LIN_GROUP + ch % LIN_DK;
    ch -= LIN_HK * LIN_DK;
    if (ch < LIN_HK * LIN_DK) return (ch / LIN_DK) * LIN_GROUP + LIN_DK + ch % LIN_DK;
    ch -= LIN_HK * LIN_DK;
    return (ch / (LIN_R * LIN_DV)) * LIN_GROUP + 2 * LIN_DK + ch % (LIN_R * LIN_DV);
}

extern "C" __global__ void deltanet_conv(const float* __restrict__ qkvz, int proj_stride, const int* __restrict__ segs,
                                         const float* __restrict__ conv_w, float* state, float* snaps,
                                         int rollback, u64 lin_stride, u64 layer_off, float* __restrict__ mixed) {
    pdl_start();
    const int row0 = segs[4 * blockIdx.x], n = segs[4 * blockIdx.x + 1];
    const int start = segs[4 * blockIdx.x + 2], session = segs[4 * blockIdx.x + 3];
    const bool keep = n <= rollback;
    float* tail_g = state + session * lin_stride + layer_off;
    const int ch = blockIdx.y * blockDim.x + threadIdx.x;
    if (ch < LIN_C) {
        const int src = qkvz_offset(ch);
        float tail[LIN_CONV_K - 1], w[LIN_CONV_K];
#pragma unroll
        for (int j = 0; j < LIN_CONV_K - 1; j++) tail[j] = start == 0 ? 0.0f : tail_g[j * LIN_C + ch];
#pragma unroll
        for (int j = 0; j < LIN_CONV_K; j++) w[j] = conv_w[ch * LIN_CONV_K + j];
        for (int t = 0; t < n; t++) {
            if (keep && t > 0) {
                float* snap = snaps + ((u64)session * (rollback - 1) + t - 1) * lin_stride + layer_off;
#pragma unroll
                for (int j = 0; j < LIN_CONV_K - 1; j++) snap[j * LIN_C + ch] = tail[j];
            }
            const float x = qkvz[(size_t)(row0 + t) * proj_stride + src];
            float s = 0.0f;
#pragma unroll
            for (int j = 0; j < LIN_CONV_K - 1; j++) s += w[j] * tail[j];
            s += w[LIN_CONV_K - 1] * x;
#pragma unroll
            for (int j = 0; j < LIN_CONV_K - 2; j++) tail[j] = tail[j + 1];
            tail[LIN_CONV_K - 2] = x;
            mixed[(size_t)(row0 + t) * LIN_C + ch] = siluf_(s);
        }
#pragma unroll
        for (int j = 0; j < LIN_CONV_K - 1; j++) tail_g[j * LIN_C + ch] = tail[j];
    }
}

// One value head's recurrence over a window, by a cluster of CS blocks (CS = 1: one block):
// block `rank` holds columns rank·COLS … rank·COLS + COLS − 1 of the head's state S (COLS =
// LIN_DV / CS), LIN_SPLIT consecutive lanes a column, each keeping LIN_DK / LIN_SPLIT of its rows
// in registers (a whole column would not fit: 128 rows spilled to local memory); their partial
// sums of u and o are added by a fixed xor-shuffle tree, which gives every lane of the group the
// same bits. A column's arithmetic never involves another column, so it is the same whichever
// block holds it. The L2 norms of q and k and the output's RMS are strided warp sums in a fixed
// order over the whole vector (the output's from the cluster's blocks' shared memory, sm_90
// distributed shared memory): the same bits in every block and for every CS. `out` is [rows,
// HV·DV], gated-normed.
//
// The window's tokens go in stages of LIN_STAGE (the host's `lin_stage`): a stage's inputs that do not depend on the state
// (q and k with their norms, v, β and the decay) are loaded and computed for all its tokens at
// once (each token's norms by one warp), then the stage's tokens update the state one after the
// other with no barrier between them, then each token's output norm (one warp a token) and the
// outputs. Per token the arithmetic is that of a token at a time, so the bits do not depend on
// LIN_STAGE; a prompt's tokens no longer wait on three barriers and a chain of loads each.
template <int CS>
__device__ __forceinline__ void recurrence_head(const float* __restrict__ qkvz, const float* __restrict__ ba,
                                                int proj_stride, const float* __restrict__ mixed,
                                                const int* __restrict__ segs, const float* __restrict__ neg_a,
                                                const float* __restrict__ dt_bias, const float* __restrict__ norm_w,
                                                float eps, float* state, float* snaps, int rollback,
                                                u64 lin_stride, u64 layer_off, float* __restrict__ out, int h,
                                                int rank) {
    constexpr int COLS = LIN_DV / CS;
    // A block of fewer than a warp is never launched (the host checks the head sizes); the
    // floor of one keeps the loops over warps finite in the kernels compiled for it anyway.
    constexpr int WARPS = COLS * LIN_SPLIT / WARP > 0 ? COLS * LIN_SPLIT / WARP : 1;
    // β and the decay of a stage's tokens are one thread's each; the host's stage fits the
    // shared memory a block gets unasked.
    static_assert(LIN_STAGE >= 1 && LIN_STAGE <= WARP, "a stage of 1 to 32 tokens");
    __shared__ float qs[LIN_STAGE][LIN_DKP], ks[LIN_STAGE][LIN_DKP], vs[LIN_STAGE][COLS], os[LIN_STAGE][COLS];
    __shared__ float q_inv_s[LIN_STAGE], k_inv_s[LIN_STAGE], o_inv_s[LIN_STAGE];
    __shared__ float beta_s[LIN_STAGE], decay_s[LIN_STAGE];
    const int row0 = segs[4 * blockIdx.x], n = segs[4 * blockIdx.x + 1];
    const int start = segs[4 * blockIdx.x + 2], session = segs[4 * blockIdx.x + 3];
    const int kh = h / LIN_R, ii = h % LIN_R;
    const int tid = threadIdx.x, jl = tid / LIN_SPLIT, j = rank * COLS + jl, part = tid % LIN_SPLIT;
    const int lane = tid % WARP, warp = tid / WARP;
    const int i0 = part * LIN_ROWS;  // this lane's first row of the column
    const int p0 = LIN_PAD(i0);      // where it sits in a stage's padded q and k
    const bool keep = n <= rollback;
    const u64 s_off = layer_off + LIN_CONV_SIZE + (u64)h * LIN_DK * LIN_DV + j;
    float* s_g = state + session * lin_stride + s_off;
    float s[LIN_ROWS];
#pragma unroll
    for (int i = 0; i < LIN_ROWS; i++) s[i] = start == 0 ? 0.0f : s_g[(i0 + i) * LIN_DV];
    const float scale = 1.0f / sqrtf((float)LIN_DK);
    const float neg_a_h = neg_a[h], dt_bias_h = dt_bias[h], norm_w_j = norm_w[j];
    for (int t0 = 0; t0 < n; t0 += LIN_STAGE) {
        const int tn = min(LIN_STAGE, n - t0);
        // The last stage's readers of the stage arrays (in any block of the cluster) are done.
        if (CS > 1) cluster_sync(); else __syncthreads();
        for (int x = tid; x < tn * LIN_DK; x += blockDim.x) {
            const int tt = x / LIN_DK, i = x % LIN_DK;
            const size_t row = row0 + t0 + tt;
            qs[tt][LIN_PAD(i)] = mixed[row * LIN_C + kh * LIN_DK + i];
            ks[tt][LIN_PAD(i)] = mixed[row * LIN_C + LIN_HK * LIN_DK + kh * LIN_DK + i];
        }
        for (int x = tid; x < tn * COLS; x += blockDim.x) {
            const int tt = x / COLS, c = x % COLS;
            vs[tt][c] = mixed[(size_t)(row0 + t0 + tt) * LIN_C + 2 * LIN_HK * LIN_DK + h * LIN_DV + rank * COLS + c];
        }
        if (tid < tn) {
            const float* bar = ba + (size_t)(row0 + t0 + tid) * proj_stride + kh * 2 * LIN_R;
            beta_s[tid] = sigmoidf_(bar[ii]);
            decay_s[tid] = expf(neg_a_h * softplusf_(bar[LIN_R + ii] + dt_bias_h));
        }
        __syncthreads();
        for (int tt = warp; tt < tn; tt += WARPS) {
            // warp_sum_squares' order over the padded rows.
            float qq = 0.0f, kk = 0.0f;
            for (int i = lane; i < LIN_DK; i += WARP) {
                const float qi = qs[tt][LIN_PAD(i)], ki = ks[tt][LIN_PAD(i)];
                qq += qi * qi;
                kk += ki * ki;
            }
            qq = warp_sum(qq);
            kk = warp_sum(kk);
            if (lane == 0) {
                q_inv_s[tt] = 1.0f / sqrtf(qq + L2_NORM_EPS);
                k_inv_s[tt] = 1.0f / sqrtf(kk + L2_NORM_EPS);
            }
        }
        __syncthreads();
        // One token after the other, not unrolled (two tokens' registers would not fit).
#pragma unroll 1
        for (int tt = 0; tt < tn; tt++) {
            const int t = t0 + tt;
            if (keep && t > 0) {
                float* snap = snaps + ((u64)session * (rollback - 1) + t - 1) * lin_stride + s_off;
#pragma unroll
                for (int i = 0; i < LIN_ROWS; i++) snap[(i0 + i) * LIN_DV] = s[i];
            }
            const float q_inv = q_inv_s[tt], k_inv = k_inv_s[tt];
            const float beta = beta_s[tt], decay = decay_s[tt], v = vs[tt][jl];
            // S ← e^g·S; u = Sᵀk; δ = β(v − u); S ← S + kδᵀ; o = Sᵀq.
            float u = 0.0f;
#pragma unroll
            for (int i = 0; i < LIN_ROWS; i++) { s[i] *= decay; u += s[i] * (ks[tt][p0 + i] * k_inv); }
#pragma unroll
            for (int o = 1; o < LIN_SPLIT; o <<= 1) u += __shfl_xor_sync(FULL_MASK, u, o);
            const float delta = beta * (v - u);
            float o = 0.0f;
#pragma unroll
            for (int i = 0; i < LIN_ROWS; i++) {
                s[i] += (ks[tt][p0 + i] * k_inv) * delta;
                o += s[i] * ((qs[tt][p0 + i] * q_inv) * scale);
            }
#pragma unroll
            for (int m = 1; m < LIN_SPLIT; m <<= 1) o += __shfl_xor_sync(FULL_MASK, o, m);
            if (part == 0) os[tt][jl] = o;
        }
        // Gated RMSNorm over the head's DV outputs (norm before gate): warp_sum_squares' order
        // over all DV of them, output c read from the block that holds it; one warp a token.
        if (CS > 1) cluster_sync(); else __syncthreads();
        for (int tt = warp; tt < tn; tt += WARPS) {
            float acc = 0.0f;
            for (int c = lane; c < LIN_DV; c += WARP) {
                float oc;
                if (CS > 1)
                    oc = cluster_load_f32(&os[tt][c % COLS], c / COLS);
                else
                    oc = os[tt][c];
                acc += oc * oc;
            }
            const float oo = warp_sum(acc);
            if (lane == 0) o_inv_s[tt] = 1.0f / sqrtf(oo / (float)LIN_DV + eps);
        }
        __syncthreads();
        if (part == 0) {
            for (int tt = 0; tt < tn; tt++) {
                const size_t row = row0 + t0 + tt;
                const float z = qkvz[row * proj_stride + kh * LIN_GROUP + 2 * LIN_DK + LIN_R * LIN_DV + ii * LIN_DV + j];
                out[row * LIN_HV * LIN_DV + h * LIN_DV + j] = norm_w_j * (os[tt][jl] * o_inv_s[tt]) * siluf_(z);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < LIN_ROWS; i++) s_g[(i0 + i) * LIN_DV] = s[i];
    // No block leaves while another of its cluster may still read its `os`.
    if (CS > 1) cluster_sync();
}

// The recurrence's kernels: NAME with CS blocks a head (a cluster of them when CS > 1, ATTRS its
// cluster dims), grid (windows, LIN_HV · CS), LIN_DV / CS · LIN_SPLIT threads a block (BOUNDS:
// its `__launch_bounds__`; an explicit minimum of one block changes ptxas's registers).
#define DELTANET_RECURRENCE(NAME, CS, ATTRS, BOUNDS)                                                       \
    extern "C" __global__ void ATTRS BOUNDS                                                               \
    NAME(const float* __restrict__ qkvz, const float* __restrict__ ba, int proj_stride,                   \
         const float* __restrict__ mixed, const int* __restrict__ segs, const float* __restrict__ neg_a,  \
         const float* __restrict__ dt_bias, const float* __restrict__ norm_w, float eps, float* state,    \
         float* snaps, int rollback, u64 lin_stride, u64 layer_off, float* __restrict__ out) {            \
        pdl_start();                                                                                      \
        recurrence_head<CS>(qkvz, ba, proj_stride, mixed, segs, neg_a, dt_bias, norm_w, eps, state, snaps, \
                            rollback, lin_stride, layer_off, out, blockIdx.y / (CS), blockIdx.y % (CS));  \
    }

// A block per (window, value head).
DELTANET_RECURRENCE(deltanet_recurrence, 1, , __launch_bounds__(LIN_DV * LIN_SPLIT))

// The same at two blocks a multiprocessor (64 registers a thread at Qwen3-Next's 512 threads,
// some spilled): one block's loads of its head's state can then run under the other's
// arithmetic and stores, where one block a multiprocessor (128 registers) does them one after
// the other. The same code: the same bits.
DELTANET_RECURRENCE(deltanet_recurrence_two, 1, , __launch_bounds__(LIN_DV * LIN_SPLIT, 2))

// A cluster of LIN_CLUSTER blocks per (window, value head), each LIN_DV / LIN_CLUSTER columns. A
// decode step's 32 heads on 32 blocks read their state (64 KiB a head at Qwen3-Next's sizes)
// through 32 of the H200's 132 multiprocessors; split in 4 they use 128. The same bits as
// `deltanet_recurrence`.
DELTANET_RECURRENCE(deltanet_recurrence_split, LIN_CLUSTER, __cluster_dims__(1, LIN_CLUSTER, 1),
                    __launch_bounds__(LIN_DV / LIN_CLUSTER * LIN_SPLIT))
