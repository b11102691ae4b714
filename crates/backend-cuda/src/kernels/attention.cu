// Full attention after the fused projection `qkv` = [q_proj | k_proj | v_proj] per row: Qwen3-Next's
// gated attention (models.md "Gated attention layer": q_proj per head [query | gate], 2·HD;
// zero-centred QK-norm; partial RoPE) when ATT_GATED, else Qwen3's (query only, HD per head;
// plain QK-norm; RoPE over ATT_ROT = HD dimensions):
// - `attention_prep`: per row, q and k heads RMSNormed (ATT_NORM_KIND) and RoPE'd at the row's
//   position; q to `q_out`, K and V into the session's cache rows. One warp per head, a block
//   per (row, ATT_PREP_WARPS heads), so any number of heads fits.
// - `attention_gated`: per (row, head), softmax attention over the session's rows 0..=pos, then
//   × sigmoid(gate) when ATT_GATED (how the keys are split is below). The split depends on the
//   position only, never on the batch.
//
// Rows carry their own `pos` and `kv_base` (the session's first cache row), so windows of
// different sessions share a launch. Host defines: ATT_HEADS, ATT_KV_HEADS, ATT_HD, ATT_ROT,
// ATT_GATED, ATT_NORM_KIND, ATT_THREADS, ATT_PREP_WARPS, ATT_KV_BF16, ATT_GROUP, ATT_FEW_WARPS,
// ATT_KV_AHEAD, ATT_STAGES, ATT_SHARED_SOFTMAX.
//
// The cache holds K and V as bf16 (ATT_KV_BF16, rounded to nearest even when written) or f32;
// attention widens them exactly to f32, so everything after the store is the same arithmetic.

#if ATT_KV_BF16
typedef bf16_t kv_t;
__device__ __forceinline__ kv_t kv_store(float x) {
    unsigned short b;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(x));
    return b;
}
__device__ __forceinline__ float kv_load(kv_t v) { return widen(v); }
#else
typedef float kv_t;
__device__ __forceinline__ kv_t kv_store(float x) { return x; }
__device__ __forceinline__ float kv_load(kv_t v) { return v; }
#endif

// Floats of one head's slice of q_proj: [query | gate] when gated.
#define ATT_Q_HEAD_W ((ATT_GATED ? 2 : 1) * ATT_HD)
#define ATT_Q_W (ATT_HEADS * ATT_Q_HEAD_W)
#define ATT_QKV_W (ATT_Q_W + 2 * ATT_KV_HEADS * ATT_HD)
#define ATT_KV_ROW (ATT_KV_HEADS * ATT_HD)
// Head dims a lane of attention_prep takes.
#define ATT_PREP_DPL ((ATT_HD + WARP - 1) / WARP)

// One warp's part of a row's prep: query head w (< ATT_HEADS) RMSNormed and RoPE'd into q_out,
// or KV head w − ATT_HEADS's K so into the cache row and its V copied there; `buf` is ATT_HD
// floats of the warp's shared memory. `attention_prep` and `attention_gated_prep` both run it:
// every product and sum is rounded as written (`__fmul_rn` …), so that no compiler contracts
// them differently in the two kernels (they give the same bits, kernel test).
__device__ __forceinline__ void prep_head(const float* __restrict__ row, int w, int pos, size_t cache_row,
                                          const float* __restrict__ q_norm, const float* __restrict__ k_norm,
                                          const float* __restrict__ inv_freq, float eps, float* q_head,
                                          kv_t* k_cache, kv_t* v_cache, float* buf, int lane) {
    const bool query = w < ATT_HEADS;
    const int kvh = w - ATT_HEADS;
    const float* src = query ? row + w * ATT_Q_HEAD_W : row + ATT_Q_W + kvh * ATT_HD;
    const float* nw = query ? q_norm : k_norm;
    // The loops over a head's dims run ATT_PREP_DPL times, unrolled so that each one's loads
    // are issued together (rolled, a 1-row call waited on ~30 loads one after another).
    if (!query) {
        const float* v = row + ATT_Q_W + ATT_KV_ROW + kvh * ATT_HD;
#pragma unroll
        for (int j = 0; j < ATT_PREP_DPL; j++) {
            const int i = lane + j * WARP;
            if (i < ATT_HD) v_cache[cache_row + kvh * ATT_HD + i] = kv_store(v[i]);
        }
    }
    const float inv = 1.0f / sqrtf(warp_sum_squares_n<ATT_HD>(src, lane) / (float)ATT_HD + eps);
#pragma unroll
    for (int j = 0; j < ATT_PREP_DPL; j++) {
        const int i = lane + j * WARP;
        if (i < ATT_HD) buf[i] = __fmul_rn(__fmul_rn(src[i], inv), norm_scale(nw[i], ATT_NORM_KIND));
    }
    __syncwarp();
    const int half = ATT_ROT / 2;
#pragma unroll
    for (int j = 0; j < ATT_PREP_DPL; j++) {
        const int i = lane + j * WARP;
        if (i >= ATT_HD) break;
        float y = buf[i];
        if (i < ATT_ROT) {
            const int d = i < half ? i : i - half;
            const float angle = __fmul_rn((float)pos, inv_freq[d]);
            const float c = cosf(angle), s = sinf(angle);
            const float a = buf[d], b = buf[d + half];
            // a·c − b·s and b·c + a·s, as NVRTC and ptxas compiled them before they were pinned
            // (each with one product rounded and the other fused: ptxas contracted the first).
            y = i < half ? __fmaf_rn(a, c, -__fmul_rn(b, s)) : __fmaf_rn(a, s, __fmul_rn(b, c));
        }
        if (query) q_head[i] = y;
        else k_cache[cache_row + kvh * ATT_HD + i] = kv_store(y);
    }
}

extern "C" __global__ void __launch_bounds__(ATT_PREP_WARPS * WARP)
attention_prep(const float* __restrict__ qkv, const int* __restrict__ pos_arr,
               const int* __restrict__ kv_base_arr, const float* __restrict__ q_norm,
               const float* __restrict__ k_norm, const float* __restrict__ inv_freq, float eps,
               float* __restrict__ q_out, kv_t* __restrict__ k_cache, kv_t* __restrict__ v_cache) {
    pdl_start();
    __shared__ float bufs[ATT_PREP_WARPS][ATT_HD];
    const int r = blockIdx.x, lane = threadIdx.x % WARP;
    // Head w of the row: query heads first, then KV heads. A warp past the last head has none
    // (only warps sync below, never the block).
    const int w = blockIdx.y * ATT_PREP_WARPS + threadIdx.x / WARP;
    if (w >= ATT_HEADS + ATT_KV_HEADS) return;
    const int pos = pos_arr[r];
    const size_t cache_row = (size_t)(kv_base_arr[r] + pos) * ATT_KV_ROW;
    prep_head(qkv + (size_t)r * ATT_QKV_W, w, pos, cache_row, q_norm, k_norm, inv_freq, eps,
              q_out + ((size_t)r * ATT_HEADS + w) * ATT_HD, k_cache, v_cache, bufs[threadIdx.x / WARP], lane);
}

// attention_gated: ATT_WARPS warps split the keys 0..=pos in groups of ATT_KEY_GROUP consecutive
// keys (group i to warp i mod ATT_WARPS, in increasing order within a warp); a lane owns the head
// dims lane, lane + 32, …; a key's score is the lanes' partial dot products, then warp_sum. Each
// warp keeps an online softmax over its keys; the warps are merged in warp order.
//
// `attention_grouped` runs the same chain for ATT_GROUP query heads of one KV head in one block
// (a block per (row, group)): each key's K and V are loaded once for the group's heads instead of
// once per head, and a block's fixed work (q, the merge) is shared by more heads — for a prompt's
// many short rows, where that fixed work is most of a block's, and for a decode round of many
// streams, whose keys it loads a fraction as often. Every operation of a (row, head) is
// the one `attention_gated` does on the same values: the same bits (kernel test).
#define ATT_WARPS (ATT_THREADS / WARP)
static_assert(ATT_THREADS % WARP == 0, "attention_gated runs whole warps");
#define ATT_DPL ((ATT_HD + WARP - 1) / WARP)
#define ATT_KEY_GROUP 4  // the host's ATT_KEY_GROUP (kernels/mod.rs) is this

// The chain's multiply-adds, each rounded as written: the compiler would fuse `acc * c + e * v`
// either way round (fma(acc, c, e·v) or fma(e, v, acc·c)), and chose differently in the per-head
// and grouped kernels for heads of 16, so their bits differed (a 32-row decode round of the
// dense test fixture, session 34).
// A key's part of a score: part + q·k.
__device__ __forceinline__ float att_dot_step(float part, float q, float k) { return __fmaf_rn(q, k, part); }
// The online softmax's rescale of a running sum by c, adding e·v: acc·c + round(e·v).
__device__ __forceinline__ float att_rescale_add(float acc, float c, float e, float v) {
    return __fmaf_rn(acc, c, __fmul_rn(e, v));
}
static_assert((ATT_HEADS / ATT_KV_HEADS) % ATT_GROUP == 0, "a group's heads share their KV head");

// The lane's parts of key p0 + g's scores for G heads: q · k over its head dims (zeros for a key
// past pos), head dim lane + 32·j of the key's K from `k_at(g, j)`.
template <int G, typename KAt>
__device__ __forceinline__ void att_key_parts(KAt k_at, int g, int p0, int pos, int lane,
                                              const float (&qv)[G][ATT_DPL], float (&part)[G]) {
#pragma unroll
    for (int i = 0; i < G; i++) part[i] = 0.0f;
    if (p0 + g <= pos) {  // the same for the whole warp
#pragma unroll
        for (int j = 0; j < ATT_DPL; j++) {
            const int d = lane + WARP * j;
            if (d < ATT_HD) {
                const float kd = k_at(g, j);
#pragma unroll
                for (int i = 0; i < G; i++) part[i] = att_dot_step(part[i], qv[i][j], kd);
            }
        }
    }
}

// Key g's V at the lane's head dims (zeros past ATT_HD), from `v_at(g, j)`.
template <typename VAt>
__device__ __forceinline__ void att_key_v(VAt v_at, int g, int lane, float (&vd)[ATT_DPL]) {
#pragma unroll
    for (int j = 0; j < ATT_DPL; j++) {
        const int d = lane + WARP * j;
        vd[j] = d < ATT_HD ? v_at(g, j) : 0.0f;
    }
}

// One head's online softmax step for a key: its sum l and output acc rescaled by c, the key's
// weight e and its V added.
__device__ __forceinline__ void att_add_key(float (&acc)[ATT_DPL], float& l, float c, float e, int lane,
                                            const float (&vd)[ATT_DPL]) {
    l = __fmaf_rn(l, c, e);
#pragma unroll
    for (int j = 0; j < ATT_DPL; j++) {
        const int d = lane + WARP * j;
        if (d < ATT_HD) acc[j] = att_rescale_add(acc[j], c, e, vd[j]);
    }
}

// One key group of a split, keys p0 … p0 + ATT_KEY_GROUP − 1 (those up to pos): their scores,
// then the online softmax's steps, each lane taking every one of them (ATT_SHARED_SOFTMAX 0),
// head dim lane + 32·j of key p0 + g's K and V from `k_at(g, j)` and `v_at(g, j)` (as each way
// of loading the keys gives them: `attention_heads`).
template <int G, typename KAt, typename VAt>
__device__ __forceinline__ void att_group_lanes(KAt k_at, VAt v_at, int p0, int pos, int lane, float scale,
                                                const float (&qv)[G][ATT_DPL], float (&acc)[G][ATT_DPL],
                                                float (&m)[G], float (&l)[G]) {
    float s[ATT_KEY_GROUP][G];
#pragma unroll
    for (int g = 0; g < ATT_KEY_GROUP; g++) {
        float part[G];
        att_key_parts<G>(k_at, g, p0, pos, lane, qv, part);
        // Rounded as written, so that ptxas cannot fuse it into the softmax's `s - m_new` in one
        // kernel and not in another.
#pragma unroll
        for (int i = 0; i < G; i++) s[g][i] = __fmul_rn(warp_sum(part[i]), scale);
    }
#pragma unroll
    for (int g = 0; g < ATT_KEY_GROUP; g++) {
        if (p0 + g > pos) break;
        // One head takes each V element where it adds it (loaded there with ATT_KV_AHEAD 0: what
        // the per-head kernel had before ATT_KV_AHEAD; loaded ahead of the softmax's exps one key
        // at a time, the A3B slice's one-stream decode ran 1-2 % slower, bench/RESULTS.md session
        // 21; session 55's loads of whole groups superseded it); a group takes them once for its
        // heads. The same operations either way.
        if (G == 1) {
            const float m_new = fmaxf(m[0], s[g][0]);
            const float c = expf(m[0] - m_new), e = expf(s[g][0] - m_new);
            l[0] = __fmaf_rn(l[0], c, e);
#pragma unroll
            for (int j = 0; j < ATT_DPL; j++) {
                const int d = lane + WARP * j;
                if (d < ATT_HD) acc[0][j] = att_rescale_add(acc[0][j], c, e, v_at(g, j));
            }
            m[0] = m_new;
            continue;
        }
        float vd[ATT_DPL];
        att_key_v(v_at, g, lane, vd);
#pragma unroll
        for (int i = 0; i < G; i++) {
            const float m_new = fmaxf(m[i], s[g][i]);
            const float c = expf(m[i] - m_new), e = expf(s[g][i] - m_new);
            att_add_key(acc[i], l[i], c, e, lane, vd);
            m[i] = m_new;
        }
    }
}

// One offset `o` of the scores' butterfly over the first `n` of `v`'s sums, then the next with
// half as many (a template, so that every index is the compiler's constant: as a loop of two
// counters nvcc 13.2 left it rolled and put `v` in local memory).
template <int n, int o, int N>
__device__ __forceinline__ void att_halve(float (&v)[N], int lane) {
    if (n > 1) {
        const bool upper = (lane & o) != 0;
#pragma unroll
        for (int k = 0; k < n / 2; k++) {
            const float keep = upper ? v[k + n / 2] : v[k];
            const float send = upper ? v[k] : v[k + n / 2];
            v[k] = keep + __shfl_xor_sync(FULL_MASK, send, o);
        }
        // At n = 1 this names itself (never called), which ends the instantiations.
        att_halve<(n > 1 ? n / 2 : 1), (n > 1 ? o / 2 : o), N>(v, lane);
    }
}

// ATT_SHARED_SOFTMAX 1: `att_group_lanes`' scores and softmax steps, with the warp's lanes sharing
// the work every lane repeated there. Its scores' butterflies (5 shuffles and 5 adds a score,
// each lane's) run as one butterfly of all N = ATT_KEY_GROUP·G partial sums that halves them at
// each of warp_sum's offsets (at offset o a lane keeps the half its bit o picks and adds its
// partner's same half): each sum is warp_sum's, the same two values added at each offset in the
// same order, so the same bits; after it the lanes of score k (k = lane >> SHIFT) hold it. The
// softmax's two exps of a (key, head), each of which every lane took (expf, ~8 instructions; 32
// a group of 4 keys and 4 heads), are taken once, by one lane each (c by the score's first lane,
// e by the lane half way along its lanes), and shuffled to the others. The same arguments, the
// same expf, the same steps in the same order: the same bits (kernel test). Session 62's ncu had
// `attention_grouped_staged8` issue-bound at 64 streams (64 % of issue slots, DRAM 32 %). The
// default since session 73 (1.01–1.06× decode on an H100; FLASHLANE_ATTENTION_SHARED_SOFTMAX=0
// takes `att_group_lanes`).
template <int G, typename KAt, typename VAt>
__device__ __forceinline__ void att_group_shared(KAt k_at, VAt v_at, int p0, int pos, int lane, float scale,
                                                 const float (&qv)[G][ATT_DPL], float (&acc)[G][ATT_DPL],
                                                 float (&m)[G], float (&l)[G]) {
    constexpr int N = ATT_KEY_GROUP * G;  // a group's scores, slot g·G + i for key g, head i
    static_assert(N == 4 || N == 8 || N == 16, "a group's scores are 4, 8 or 16 (ATT_GROUP 1, 2 or 4)");
    constexpr int SHIFT = N == 16 ? 1 : N == 8 ? 2 : 3;  // log2(WARP / N): lanes a score
    float v[N];
#pragma unroll
    for (int g = 0; g < ATT_KEY_GROUP; g++) {
        float part[G];
        att_key_parts<G>(k_at, g, p0, pos, lane, qv, part);
#pragma unroll
        for (int i = 0; i < G; i++) v[g * G + i] = part[i];
    }
    // warp_sum's offsets 16, 8, … while more than one sum is left, each halving them.
    att_halve<N, WARP / 2, N>(v, lane);
    // The offsets left, as warp_sum takes them.
#pragma unroll
    for (int o = (WARP / 2) >> (5 - SHIFT); o > 0; o /= 2) v[0] += __shfl_xor_sync(FULL_MASK, v[0], o);
    // Rounded as written (as in `att_group_lanes`).
    const float own = __fmul_rn(v[0], scale);
    float s[ATT_KEY_GROUP][G];
#pragma unroll
    for (int g = 0; g < ATT_KEY_GROUP; g++) {
#pragma unroll
        for (int i = 0; i < G; i++) s[g][i] = __shfl_sync(FULL_MASK, own, (g * G + i) << SHIFT);
    }
    // This lane's exp: of its score's (key, head) k, c = exp(m − m_new) in the score's first
    // half of lanes, e = exp(s − m_new) in the second; m the head's running maximum before key g
    // (the keys past pos leave it as it is and their exps are never used).
    const int k = lane >> SHIFT;
    float m_before = 0.0f;
    {
        float run[G];
#pragma unroll
        for (int i = 0; i < G; i++) run[i] = m[i];
#pragma unroll
        for (int g = 0; g < ATT_KEY_GROUP; g++) {
#pragma unroll
            for (int i = 0; i < G; i++) {
                if (k == g * G + i) m_before = run[i];
                if (p0 + g <= pos) run[i] = fmaxf(run[i], s[g][i]);
            }
        }
    }
    const float m_new = fmaxf(m_before, own);
    const float ex = expf(((lane >> (SHIFT - 1)) & 1) ? own - m_new : m_before - m_new);
#pragma unroll
    for (int g = 0; g < ATT_KEY_GROUP; g++) {
        if (p0 + g > pos) break;  // the same for the whole warp
        float vd[ATT_DPL];
        att_key_v(v_at, g, lane, vd);
#pragma unroll
        for (int i = 0; i < G; i++) {
            const int first = (g * G + i) << SHIFT;
            const float c = __shfl_sync(FULL_MASK, ex, first);
            const float e = __shfl_sync(FULL_MASK, ex, first + (1 << (SHIFT - 1)));
            att_add_key(acc[i], l[i], c, e, lane, vd);
            m[i] = fmaxf(m[i], s[g][i]);
        }
    }
}

// One key group of a split (`att_group_shared` or `att_group_lanes`, by ATT_SHARED_SOFTMAX).
template <int G, typename KAt, typename VAt>
__device__ __forceinline__ void att_group(KAt k_at, VAt v_at, int p0, int pos, int lane, float scale,
                                          const float (&qv)[G][ATT_DPL], float (&acc)[G][ATT_DPL], float (&m)[G],
                                          float (&l)[G]) {
#if ATT_SHARED_SOFTMAX
    att_group_shared<G>(k_at, v_at, p0, pos, lane, scale, qv, acc, m, l);
#else
    att_group_lanes<G>(k_at, v_at, p0, pos, lane, scale, qv, acc, m, l);
#endif
}

// ATT_KV_AHEAD 1 and 2: a key group's K and V are loaded by `att_load_group` into registers, all
// of them issued together (a key past pos loads the row at pos, which it never uses, so that no
// load waits behind a branch), then `att_group` takes the same scores and the same softmax steps
// from them as from the cache: the same bits (kernel test). 2 is for the per-head
// kernels' blocks with heads of at most 128 dims; the others take 1 for it (`att_kv_ahead`).
__device__ __forceinline__ void att_load_group(kv_t (&kr)[ATT_KEY_GROUP][ATT_DPL], kv_t (&vr)[ATT_KEY_GROUP][ATT_DPL],
                                               const kv_t* k_cache, const kv_t* v_cache, size_t base, int p0,
                                               int pos, int kvh, int lane) {
#pragma unroll
    for (int g = 0; g < ATT_KEY_GROUP; g++) {
        const size_t at = (base + min(p0 + g, pos)) * ATT_KV_ROW + kvh * ATT_HD;
#pragma unroll
        for (int j = 0; j < ATT_DPL; j++) {
            const int d = lane + WARP * j;
            kr[g][j] = d < ATT_HD ? k_cache[at + d] : (kv_t)0;
            vr[g][j] = d < ATT_HD ? v_cache[at + d] : (kv_t)0;
        }
    }
}

// The ATT_KV_AHEAD a kernel's blocks run: at most AHEAD_MAX (2 for the per-head kernels, 1 for the
// grouped ones, whatever their group: on the H100, session 55, bench/RESULTS.md, they ran a
// 64-stream decode of Qwen3-0.6B 6 % slower with 2 than with 1, and its prompts 4-8 %), and 1 for
// heads of more than 128 dims (two groups' K and V of heads of 256 are 128 registers a thread:
// the kernels spilled, tools/cuda_check).
template <int AHEAD_MAX>
__device__ __forceinline__ constexpr int att_kv_ahead() {
    constexpr int most = ATT_DPL > 4 ? 1 : AHEAD_MAX;
    return ATT_KV_AHEAD < most ? ATT_KV_AHEAD : most;  // (NVRTC's `min` is not constexpr)
}

// Heads h0 … h0 + G − 1 of q's row r into qv: head dims lane + WARP·j (zeros past ATT_HD).
template <int G>
__device__ __forceinline__ void att_load_q(const float* q, int r, int h0, int lane, float (&qv)[G][ATT_DPL]) {
#pragma unroll
    for (int i = 0; i < G; i++) {
        const float* qr = q + ((size_t)r * ATT_HEADS + h0 + i) * ATT_HD;
#pragma unroll
        for (int j = 0; j < ATT_DPL; j++) {
            const int d = lane + WARP * j;
            qv[i][j] = d < ATT_HD ? qr[d] : 0.0f;
        }
    }
}

// Key split `lw`'s online softmax state (m, l, acc of G heads) into shared memory for the merge.
template <int G>
__device__ __forceinline__ void att_keep_split(float (&m_w)[G], float (&l_w)[G], float (&acc_w)[G][ATT_HD],
                                               const float (&m)[G], const float (&l)[G],
                                               const float (&acc)[G][ATT_DPL], int lane) {
#pragma unroll
    for (int i = 0; i < G; i++) {
        if (lane == 0) {
            m_w[i] = m[i];
            l_w[i] = l[i];
        }
#pragma unroll
        for (int j = 0; j < ATT_DPL; j++) {
            const int d = lane + WARP * j;
            if (d < ATT_HD) acc_w[i][d] = acc[i][j];
        }
    }
}

// Output (head h, dim d) of row r: y, × sigmoid(gate) when ATT_GATED.
__device__ __forceinline__ void att_store(const float* __restrict__ qkv, float* __restrict__ out, int r, int h, int d,
                                          float y) {
    if (ATT_GATED) y *= sigmoidf_(qkv[(size_t)r * ATT_QKV_W + h * ATT_Q_HEAD_W + ATT_HD + d]);
    out[((size_t)r * ATT_HEADS + h) * ATT_HD + d] = y;
}

// The largest of head i's splits' maxima in the merge.
template <int G>
__device__ __forceinline__ float att_splits_max(const float (*m_s)[G], int i) {
    float big = -INFINITY;
    for (int w = 0; w < ATT_WARPS; w++) big = fmaxf(big, m_s[w][i]);
    return big;
}
// A split's factor in the merge, of its maximum m and sum l: exp(m − big), 0 for a split without
// keys.
__device__ __forceinline__ float att_split_factor(float m, float l, float big) {
    return l == 0.0f ? 0.0f : expf(m - big);
}

// The merge of the ATT_WARPS key splits' states in split order (after a barrier), by THREADS
// threads, into heads h0 … h0 + G − 1 of row r of `out` (× sigmoid(gate) when ATT_GATED). With
// ATT_SHARED_SOFTMAX each split's factor of each head is taken once, by one thread (w·G + i),
// into shared memory, where otherwise every output of the head takes all ATT_WARPS of them
// (16 `expf` an output): the same expf of the same values, the same sums.
template <int G, int THREADS>
__device__ __forceinline__ void att_merge(const float* __restrict__ qkv, float* __restrict__ out, int r, int h0,
                                          float (*m_s)[G], float (*l_s)[G], float (*acc_s)[G][ATT_HD]) {
#if ATT_SHARED_SOFTMAX
    static_assert(ATT_WARPS * G <= THREADS, "a thread a split's factor of a head");
    __shared__ float f_s[ATT_WARPS][G];
    if (threadIdx.x < ATT_WARPS * G) {
        const int w = threadIdx.x / G, i = threadIdx.x % G;
        f_s[w][i] = att_split_factor(m_s[w][i], l_s[w][i], att_splits_max<G>(m_s, i));
    }
    __syncthreads();
#endif
    for (int x = threadIdx.x; x < G * ATT_HD; x += THREADS) {
        const int i = G == 1 ? 0 : x / ATT_HD, d = G == 1 ? x : x % ATT_HD, h = h0 + i;
#if !ATT_SHARED_SOFTMAX
        const float big = att_splits_max<G>(m_s, i);
#endif
        float f[ATT_WARPS];
        float total = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++) {
#if ATT_SHARED_SOFTMAX
            f[w] = f_s[w][i];
#else
            f[w] = att_split_factor(m_s[w][i], l_s[w][i], big);
#endif
            total = __fmaf_rn(l_s[w][i], f[w], total);
        }
        float a = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++) a = __fmaf_rn(acc_s[w][i][d], f[w], a);
        att_store(qkv, out, r, h, d, a / total);
    }
}

// Heads h0 … h0 + G − 1 (one KV head's) of row blockIdx.x, by PW warps: warp w walks the keys of
// ATT_WARPS' warps w, w + PW, … one after the other (each from a fresh state, kept in shared
// memory for the merge), so that every (row, head) is the same chain whatever PW.
// q, k_cache and v_cache carry no `__restrict__` here: `attention_gated_prep` writes them before
// it reads them (the kernels' own parameters say where they are read-only).
template <int G, int PW, int AHEAD_MAX>
__device__ __forceinline__ void attention_heads(const float* q, const float* __restrict__ qkv,
                                                const kv_t* k_cache,
                                                const kv_t* v_cache, const int* __restrict__ pos_arr,
                                                const int* __restrict__ kv_base_arr, float scale,
                                                float* __restrict__ out, int h0, float (*m_s)[G],
                                                float (*l_s)[G], float (*acc_s)[G][ATT_HD]) {
    const int r = blockIdx.x, warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const int kvh = h0 / (ATT_HEADS / ATT_KV_HEADS);
    const int pos = pos_arr[r];
    const size_t base = (size_t)kv_base_arr[r];
    static_assert(ATT_WARPS % PW == 0, "each warp walks as many of ATT_WARPS' warps");
    float qv[G][ATT_DPL], acc[G][ATT_DPL], m[G], l[G];
    att_load_q<G>(q, r, h0, lane, qv);
#pragma unroll
    for (int i = 0; i < G; i++) {
#pragma unroll
        for (int j = 0; j < ATT_DPL; j++) acc[i][j] = 0.0f;
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    // Key split lw; with PW = ATT_WARPS the loop runs once (the code of a warp a split).
    for (int lw = warp;;) {
        constexpr int stride = ATT_WARPS * ATT_KEY_GROUP, ahead = att_kv_ahead<AHEAD_MAX>();
        if (ahead == 0) {
            // Each key's K loaded where its score is taken, its V where it is added.
            for (int p0 = lw * ATT_KEY_GROUP; p0 <= pos; p0 += stride) {
                const auto in_cache = [&](const kv_t* cache, int g, int j) {
                    return kv_load(cache[(base + p0 + g) * ATT_KV_ROW + kvh * ATT_HD + lane + WARP * j]);
                };
                att_group<G>([&](int g, int j) { return in_cache(k_cache, g, j); },
                             [&](int g, int j) { return in_cache(v_cache, g, j); }, p0, pos, lane, scale, qv, acc,
                             m, l);
            }
        } else {
            // With `ahead` 2 the next group's loads are issued before this group's arithmetic.
            kv_t kn[ATT_KEY_GROUP][ATT_DPL], vn[ATT_KEY_GROUP][ATT_DPL];
            int p0 = lw * ATT_KEY_GROUP;
            if (ahead >= 2 && p0 <= pos) att_load_group(kn, vn, k_cache, v_cache, base, p0, pos, kvh, lane);
            for (; p0 <= pos; p0 += stride) {
                kv_t kr[ATT_KEY_GROUP][ATT_DPL], vr[ATT_KEY_GROUP][ATT_DPL];
                if (ahead >= 2) {
#pragma unroll
                    for (int g = 0; g < ATT_KEY_GROUP; g++) {
#pragma unroll
                        for (int j = 0; j < ATT_DPL; j++) {
                            kr[g][j] = kn[g][j];
                            vr[g][j] = vn[g][j];
                        }
                    }
                    if (p0 + stride <= pos)
                        att_load_group(kn, vn, k_cache, v_cache, base, p0 + stride, pos, kvh, lane);
                } else {
                    att_load_group(kr, vr, k_cache, v_cache, base, p0, pos, kvh, lane);
                }
                att_group<G>([&](int g, int j) { return kv_load(kr[g][j]); },
                             [&](int g, int j) { return kv_load(vr[g][j]); }, p0, pos, lane, scale, qv, acc, m, l);
            }
        }
        att_keep_split<G>(m_s[lw], l_s[lw], acc_s[lw], m, l, acc, lane);
        lw += PW;
        if (PW == ATT_WARPS || lw >= ATT_WARPS) break;
#pragma unroll
        for (int i = 0; i < G; i++) {
#pragma unroll
            for (int j = 0; j < ATT_DPL; j++) acc[i][j] = 0.0f;
            m[i] = -INFINITY;
            l[i] = 0.0f;
        }
    }
    __syncthreads();
    att_merge<G, PW * WARP>(qkv, out, r, h0, m_s, l_s, acc_s);
}

// Whether the block's row (blockIdx.x) is left to another launch: a call whose rows divide
// between the simt and the tensor-core attention by their positions (the host's
// `ContextSplit::Both`) launches both over every row, each with the other's rows at position −1.
// Every block of a row leaves before any barrier, so no block waits on one that left.
__device__ __forceinline__ bool att_row_left(const int* __restrict__ pos_arr) { return pos_arr[blockIdx.x] < 0; }

// The kernels: NAME computes G heads of one KV head a block (blockIdx.y their group) by PW warps,
// loading keys ahead by at most AHEAD_MAX (`att_kv_ahead`).
#define ATTENTION_KERNEL(NAME, G, PW, AHEAD_MAX)                                                         \
    extern "C" __global__ void __launch_bounds__(PW * WARP)                                              \
    NAME(const float* __restrict__ q, const float* __restrict__ qkv, const kv_t* __restrict__ k_cache,  \
         const kv_t* __restrict__ v_cache, const int* __restrict__ pos_arr,                             \
         const int* __restrict__ kv_base_arr, float scale, float* __restrict__ out) {                   \
        pdl_start();                                                                                     \
        if (att_row_left(pos_arr)) return;                                                               \
        __shared__ float m_s[ATT_WARPS][G], l_s[ATT_WARPS][G];                                           \
        __shared__ float acc_s[ATT_WARPS][G][ATT_HD];                                                    \
        attention_heads<G, PW, AHEAD_MAX>(q, qkv, k_cache, v_cache, pos_arr, kv_base_arr, scale, out,       \
                                          blockIdx.y * G, m_s, l_s, acc_s);                              \
    }
// A block per (row, head).
ATTENTION_KERNEL(attention_gated, 1, ATT_WARPS, 2)
// A block per (row, ATT_GROUP heads of one KV head).
ATTENTION_KERNEL(attention_grouped, ATT_GROUP, ATT_WARPS, 1)
// `attention_grouped` by ATT_FEW_WARPS warps, each walking several of ATT_WARPS' key splits: a
// prompt's short rows leave most of the 16 warps without keys (a row at position 40 has 11 groups
// of 4), and a block of fewer warps leaves the multiprocessor's warp slots to more rows. The
// same chain, the same bits.
ATTENTION_KERNEL(attention_grouped_few, ATT_GROUP, ATT_FEW_WARPS, 1)

// `attention_grouped` with the keys staged through shared memory (FLASHLANE_ATTENTION_STAGED):
// the block walks the keys in rounds of ATT_STAGE_KEYS, the next key group of every one of the
// ATT_WARPS key splits, and copies each round's K and V rows of its KV head into shared memory
// with cp.async, ATT_STAGES − 1 rounds ahead of the one it multiplies. In the other kernels a
// warp's next loads wait behind its arithmetic (a 64-stream decode round of Qwen3-4B read its
// caches at ~1.2 TB/s on the H200, 42.6 µs a layer, session 56); here a block has up to 64 KiB
// of keys in flight. PW warps each walk ATT_WARPS / PW key splits, their states live side by
// side (split w + PW·i in slot i), so that every (row, head) is the same chain as in the other
// kernels: the same scores, the same softmax steps in the same order, the same merge; the same
// bits (kernel test). Dynamic shared memory: ATT_STAGES rounds of K and V
// (`att_staged_shared_bytes` on the host), which the merge's states reuse once every round is done. Compiled only where a
// head's slice of a cache row is a whole number of 16-byte pieces (the host loads them only
// there: `att_staged_fits`).
#if ATT_KV_BF16 ? ATT_HD % 8 == 0 : ATT_HD % 4 == 0
#define ATT_STAGE_KEYS (ATT_WARPS * ATT_KEY_GROUP)
#define ATT_STAGE_ELEMS (2 * ATT_STAGE_KEYS * ATT_HD)  // kv_t: a round's K rows, then its V rows
#define ATT_PIECE (16 / (int)sizeof(kv_t))             // kv_t a 16-byte copy
// q, k_cache and v_cache carry no `__restrict__` here: `attention_grouped_staged_prep` writes
// them before it reads them (the kernels' own parameters say where they are read-only).
template <int G, int PW>
__device__ __forceinline__ void attention_heads_staged(const float* q, const float* __restrict__ qkv,
                                                       const kv_t* k_cache, const kv_t* v_cache,
                                                       const int* __restrict__ pos_arr,
                                                       const int* __restrict__ kv_base_arr, float scale,
                                                       float* __restrict__ out, int h0, kv_t* stages,
                                                       float (*m_s)[G], float (*l_s)[G]) {
    constexpr int SPLITS = ATT_WARPS / PW;  // key splits a warp walks, side by side
    static_assert(ATT_WARPS % PW == 0, "each warp walks as many key splits");
    static_assert(ATT_HD % ATT_PIECE == 0, "a head's row is whole 16-byte pieces");
    const int r = blockIdx.x, warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const int kvh = h0 / (ATT_HEADS / ATT_KV_HEADS);
    const int pos = pos_arr[r];
    const size_t base = (size_t)kv_base_arr[r];
    const int rounds = pos / ATT_STAGE_KEYS + 1;
    // Round `round`'s K and V rows of this KV head into its stage; keys past pos copy the row at
    // pos (never used), so that no copy reads past the session's rows.
    auto load_round = [&](int round) {
        kv_t* dst = stages + (size_t)(round % ATT_STAGES) * ATT_STAGE_ELEMS;
        for (int e = threadIdx.x * ATT_PIECE; e < ATT_STAGE_ELEMS; e += PW * WARP * ATT_PIECE) {
            const int half = ATT_STAGE_KEYS * ATT_HD;
            const int key = (e % half) / ATT_HD, d = e % ATT_HD;
            const size_t at = (base + min(round * ATT_STAGE_KEYS + key, pos)) * ATT_KV_ROW + kvh * ATT_HD + d;
            cp_async16(dst + e, (e < half ? k_cache : v_cache) + at, true);
        }
    };
#pragma unroll
    for (int s = 0; s < ATT_STAGES - 1; s++) {
        if (s < rounds) load_round(s);
        cp_async_commit();
    }
    float qv[G][ATT_DPL], acc[SPLITS][G][ATT_DPL], m[SPLITS][G], l[SPLITS][G];
    att_load_q<G>(q, r, h0, lane, qv);
#pragma unroll
    for (int i = 0; i < G; i++) {
#pragma unroll
        for (int sp = 0; sp < SPLITS; sp++) {
#pragma unroll
            for (int j = 0; j < ATT_DPL; j++) acc[sp][i][j] = 0.0f;
            m[sp][i] = -INFINITY;
            l[sp][i] = 0.0f;
        }
    }
    for (int round = 0; round < rounds; round++) {
        // This round's stage is in (its copies, every thread's) and every warp is done with the
        // round before, whose stage the next copies overwrite.
        cp_async_wait<ATT_STAGES - 2>();
        __syncthreads();
        if (round + ATT_STAGES - 1 < rounds) load_round(round + ATT_STAGES - 1);
        cp_async_commit();
        const kv_t* ks = stages + (size_t)(round % ATT_STAGES) * ATT_STAGE_ELEMS;
        const kv_t* vs = ks + ATT_STAGE_KEYS * ATT_HD;
#pragma unroll
        for (int sp = 0; sp < SPLITS; sp++) {
            const int lw = warp + PW * sp, p0 = round * ATT_STAGE_KEYS + lw * ATT_KEY_GROUP;
            if (p0 > pos) break;  // the same for the whole warp; later splits start later
            const int at = lw * ATT_KEY_GROUP * ATT_HD + lane;
            att_group<G>([&](int g, int j) { return kv_load(ks[at + g * ATT_HD + WARP * j]); },
                         [&](int g, int j) { return kv_load(vs[at + g * ATT_HD + WARP * j]); }, p0, pos, lane,
                         scale, qv, acc[sp], m[sp], l[sp]);
        }
    }
    // Every copy landed and every warp done with the stages before the states take their place.
    cp_async_wait<0>();
    __syncthreads();
    float(*acc_s)[G][ATT_HD] = reinterpret_cast<float(*)[G][ATT_HD]>(stages);
#pragma unroll
    for (int sp = 0; sp < SPLITS; sp++) {
        const int lw = warp + PW * sp;
        att_keep_split<G>(m_s[lw], l_s[lw], acc_s[lw], m[sp], l[sp], acc[sp], lane);
    }
    __syncthreads();
    att_merge<G, PW * WARP>(qkv, out, r, h0, m_s, l_s, acc_s);
}

// NAME: `attention_heads_staged` for ATT_GROUP heads a block by PW warps.
#define ATTENTION_STAGED_KERNEL(NAME, PW, MIN_BLOCKS)                                                   \
    extern "C" __global__ void __launch_bounds__(PW * WARP, MIN_BLOCKS)                                 \
    NAME(const float* __restrict__ q, const float* __restrict__ qkv, const kv_t* __restrict__ k_cache, \
         const kv_t* __restrict__ v_cache, const int* __restrict__ pos_arr,                            \
         const int* __restrict__ kv_base_arr, float scale, float* __restrict__ out) {                  \
        pdl_start();                                                                                    \
        if (att_row_left(pos_arr)) return;                                                              \
        __shared__ float m_s[ATT_WARPS][ATT_GROUP], l_s[ATT_WARPS][ATT_GROUP];                         \
        extern __shared__ float4 att_stages4[];                                                         \
        attention_heads_staged<ATT_GROUP, PW>(q, qkv, k_cache, v_cache, pos_arr, kv_base_arr, scale, out, \
                                              blockIdx.y * ATT_GROUP, reinterpret_cast<kv_t*>(att_stages4), \
                                              m_s, l_s);                                                \
    }
// 16 warps, one key split each; and 8 warps, two each, bounded to two blocks a multiprocessor
// (their registers at most 128 a thread; the shared memory of two fits with heads of 128).
ATTENTION_STAGED_KERNEL(attention_grouped_staged, ATT_WARPS, 1)
ATTENTION_STAGED_KERNEL(attention_grouped_staged8, ATT_WARPS / 2, 2)

// `attention_prep` then `attention_grouped_staged` in one launch, for calls whose every row is
// its session's only one (a decode round of many streams without drafts), as
// `attention_gated_prep` is for the per-head kernel: warps 0 … ATT_GROUP − 1 prep the block's
// query heads, warp ATT_GROUP its KV head (each of that KV head's groups' blocks writes the same
// bits to the same cache row), then the block's attention reads q back and copies the keys, the
// row's own among them, after the barrier: cp.async (not the bulk copies) is a generic-proxy
// read ordered after its thread's earlier instructions, so the barrier orders the prep warps'
// stores before it, as it does the plain loads of q (q, k_cache and v_cache are not
// `__restrict__` here, so no load takes the read-only path). The same prep and chain: the same
// bits (kernel test).
extern "C" __global__ void __launch_bounds__(ATT_WARPS * WARP)
attention_grouped_staged_prep(const float* __restrict__ qkv, const int* __restrict__ pos_arr,
                              const int* __restrict__ kv_base_arr, const float* __restrict__ q_norm,
                              const float* __restrict__ k_norm, const float* __restrict__ inv_freq, float eps,
                              float scale, float* q, kv_t* k_cache, kv_t* v_cache, float* __restrict__ out) {
    static_assert(ATT_GROUP + 1 <= ATT_WARPS, "a warp a query head of the group and one for its KV head");
    pdl_start();
    __shared__ float bufs[ATT_GROUP + 1][ATT_HD];
    __shared__ float m_s[ATT_WARPS][ATT_GROUP], l_s[ATT_WARPS][ATT_GROUP];
    extern __shared__ float4 att_stages4[];
    const int r = blockIdx.x, h0 = blockIdx.y * ATT_GROUP, warp = threadIdx.x / WARP;
    if (warp <= ATT_GROUP) {
        const int pos = pos_arr[r];
        const size_t cache_row = (size_t)(kv_base_arr[r] + pos) * ATT_KV_ROW;
        const int w = warp < ATT_GROUP ? h0 + warp : ATT_HEADS + h0 / (ATT_HEADS / ATT_KV_HEADS);
        // (The KV head's warp writes no q: its q_head is never written.)
        prep_head(qkv + (size_t)r * ATT_QKV_W, w, pos, cache_row, q_norm, k_norm, inv_freq, eps,
                  q + ((size_t)r * ATT_HEADS + min(w, ATT_HEADS - 1)) * ATT_HD, k_cache, v_cache, bufs[warp],
                  threadIdx.x % WARP);
    }
    __syncthreads();
    attention_heads_staged<ATT_GROUP, ATT_WARPS>(q, qkv, k_cache, v_cache, pos_arr, kv_base_arr, scale, out, h0,
                                                 reinterpret_cast<kv_t*>(att_stages4), m_s, l_s);
}
#endif

// `attention_prep` then `attention_gated` in one launch, for calls whose every row is its
// session's only one (a decode round without drafts, a draft step): such a row's keys before its
// own are in the cache from earlier launches, and its own is written by its block here. A block
// per (row, head): warp 0 preps the query head, warp 1 its KV head (each of that KV head's query
// heads' blocks writes the same bits to the same cache row), then the block's attention reads q
// and the new K and V back after the barrier, which makes its threads' global writes visible to
// each other. q, k_cache and v_cache are written here, so they are read through plain loads
// (not the read-only path a `const __restrict__` parameter allows). The same prep and the same
// chain as the two kernels: the same bits (kernel test).
extern "C" __global__ void __launch_bounds__(ATT_WARPS * WARP)
attention_gated_prep(const float* __restrict__ qkv, const int* __restrict__ pos_arr,
                     const int* __restrict__ kv_base_arr, const float* __restrict__ q_norm,
                     const float* __restrict__ k_norm, const float* __restrict__ inv_freq, float eps, float scale,
                     float* q, kv_t* k_cache, kv_t* v_cache, float* __restrict__ out) {
    pdl_start();
    __shared__ float bufs[2][ATT_HD];
    __shared__ float m_s[ATT_WARPS][1], l_s[ATT_WARPS][1];
    __shared__ float acc_s[ATT_WARPS][1][ATT_HD];
    const int r = blockIdx.x, h = blockIdx.y, warp = threadIdx.x / WARP;
    if (warp < 2) {
        const int pos = pos_arr[r];
        const size_t cache_row = (size_t)(kv_base_arr[r] + pos) * ATT_KV_ROW;
        const int w = warp == 0 ? h : ATT_HEADS + h / (ATT_HEADS / ATT_KV_HEADS);
        prep_head(qkv + (size_t)r * ATT_QKV_W, w, pos, cache_row, q_norm, k_norm, inv_freq, eps,
                  q + ((size_t)r * ATT_HEADS + h) * ATT_HD, k_cache, v_cache, bufs[warp], threadIdx.x % WARP);
    }
    __syncthreads();
    attention_heads<1, ATT_WARPS, 2>(q, qkv, k_cache, v_cache, pos_arr, kv_base_arr, scale, out, h, m_s, l_s, acc_s);
}

// The tensor-core attention (FLASHLANE_ATTENTION_MMA, an A/B switch that changes replies). The
// kernels above take a score as a warp's shuffle sum over the head's dims and the softmax a key
// and a head at a time: a 64-stream decode round of Qwen3-4B spent 64 % of its issue slots
// there and read its caches at 32 % of DRAM's rate (ncu, session 62). Here the products run on
// the tensor cores, for one row's query heads of one KV head (at most 8: an MMA's n = 8
// columns, the rest zeros):
// - the row's keys are tiles of 16 (the MMA's rows), and the tiles ATT_MMA_SPLITS key splits:
//   split s takes tiles s, s + SPLITS, … in order, from a fresh online-softmax state (a split
//   fixed by the position alone, as the kernels above fix theirs);
// - a warp walks a split's tiles, each copied by the warp into its own shared memory with
//   cp.async ATT_MMA_STAGES − 1 tiles ahead, and per tile takes the scores Sᵀ (16 keys × 8
//   heads) = K (`ldmatrix` of the bf16 rows) · qᵀ, q split into bf16 hi and lo as the matmuls
//   split x (two MMAs a step: q keeps ~16 bits); the online softmax over the tile's keys per
//   head (a fixed shuffle tree over the 8 lanes that hold a head's keys); and Oᵀ (ATT_HD × 8) =
//   Oᵀ·c + Vᵀ (`ldmatrix.trans` of the V rows) · Pᵀ, P split into hi and lo likewise and turned
//   from the scores' layout into the B operand's by `movmatrix`;
// - the splits' states are merged in split order (`att_mma_merge_weights`, `att_mma_merge_one`).
// `attention_mma` walks all the splits in one block (warp w splits w, w + 4, …, one after the
// other: many rows); `attention_mma_cluster` spreads them over a cluster of ATT_MMA_CLUSTER
// blocks, a split a warp, merged through distributed shared memory (few rows, whose keys would
// otherwise sit on a few multiprocessors). Every split is the same chain in both and so is the
// merge: the same bits (kernel test). A tensor-core step sums its 16 products in an order of its
// own, so these are other bits than the kernels above give (within the reference's tolerance,
// kernel test); a row runs one of them wherever the process's choice and its own position send
// it (every row under tensor-cores, those from a position on under by-context), so a row's bits
// still never depend on the batch. Compiled where the cache is bf16, a head a whole
// number of MMA steps and a KV head's query heads at most 8 (the host's `att_mma_fits` asks the
// same).
// Host defines: ATT_MMA_WARPS (a block's warps), ATT_MMA_STAGES (a warp's tiles in shared
// memory), ATT_MMA_SPLITS (key splits of a row: a multiple of ATT_MMA_WARPS), ATT_MMA_ROWS (rows
// a block of `attention_mma_rows` takes).
#if ATT_KV_BF16 && ATT_HD % 16 == 0 && ATT_HEADS / ATT_KV_HEADS <= 8
#define ATT_MMA_KEYS 16                           // keys of a tile: the MMA's 16 rows
#define ATT_MMA_STEPS (ATT_HD / 16)               // k-steps of a score tile; dim tiles of O
#define ATT_MMA_G (ATT_HEADS / ATT_KV_HEADS)      // query heads of a block
#define ATT_MMA_PIECES (ATT_HD / 8)               // 16-byte pieces of a head's K or V row
#define ATT_MMA_TILE (2 * ATT_MMA_KEYS * ATT_HD)  // bf16 of a tile: its K rows, then its V rows
#define ATT_MMA_CLUSTER (ATT_MMA_SPLITS / ATT_MMA_WARPS)
static_assert(ATT_MMA_SPLITS % ATT_MMA_WARPS == 0, "a cluster's blocks take a split a warp");
// A tile row's pieces are stored XOR-swizzled by the key, so that the 8 rows an `ldmatrix`
// matrix reads fall in different banks: by the largest of 8, 4, 2 that divides the pieces (the
// swizzle stays within the row).
#define ATT_MMA_SWZ ((ATT_MMA_PIECES % 8 == 0 ? 8 : ATT_MMA_PIECES % 4 == 0 ? 4 : 2) - 1)

// Where piece `piece` of key `key`'s row of a tile is stored, in bf16 from the tile's start.
__device__ __forceinline__ int att_mma_at(int key, int piece) {
    return key * ATT_HD + (piece ^ (key & ATT_MMA_SWZ)) * 8;
}

// An 8 × 8 matrix of bf16 pairs held as an MMA fragment (lane (g, t): row g, columns 2t, 2t + 1)
// transposed in the same layout.
__device__ __forceinline__ unsigned att_mma_transpose(unsigned m) {
    unsigned d;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(d) : "r"(m));
    return d;
}

// The largest of v over the 8 lanes of a warp that share lane % 4, by a fixed tree.
__device__ __forceinline__ float att_mma_column_max(float v) {
#pragma unroll
    for (int o = 4; o < WARP; o <<= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

// The sum of v over the same 8 lanes, by the same tree.
__device__ __forceinline__ float att_mma_column_sum(float v) {
#pragma unroll
    for (int o = 4; o < WARP; o <<= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

// Tiles of key split `split` for a row of `row_tiles` tiles (none past the last).
__device__ __forceinline__ int att_mma_split_tiles(int split, int row_tiles) {
    return split < row_tiles ? (row_tiles - split + ATT_MMA_SPLITS - 1) / ATT_MMA_SPLITS : 0;
}

// A split's online-softmax state in a warp: lane (g, t) holds Oᵀ's dim tile s as o[s]: dims
// 16s + g (0, 1) and 16s + g + 8 (2, 3) of heads 2t (0, 2) and 2t + 1 (1, 3); m and l of heads
// 2t and 2t + 1.
struct AttMmaState {
    float o[ATT_MMA_STEPS][4];
    float m0, m1, l0, l1;
};

__device__ __forceinline__ void att_mma_fresh(AttMmaState& st) {
#pragma unroll
    for (int s = 0; s < ATT_MMA_STEPS; s++) st.o[s][0] = st.o[s][1] = st.o[s][2] = st.o[s][3] = 0.0f;
    st.m0 = st.m1 = -INFINITY;
    st.l0 = st.l1 = 0.0f;
}

// A split's state into its slot of shared memory for the merge: m and l of each head of the
// group, then its G × ATT_HD outputs (heads past the group are dropped). `attention_mma_rows`
// keeps NC columns (a few rows' groups side by side) where the others keep the G heads.
struct AttMmaSlot {
    float* m;    // NC (ATT_MMA_G)
    float* l;    // NC
    float* acc;  // NC × ATT_HD
};

template <int NC = ATT_MMA_G>
__device__ __forceinline__ void att_mma_keep(const AttMmaState& st, AttMmaSlot slot, int lane) {
    const int g = lane / 4, t = lane % 4;
    const bool h0 = 2 * t < NC, h1 = 2 * t + 1 < NC;
    if (g == 0) {
        if (h0) {
            slot.m[2 * t] = st.m0;
            slot.l[2 * t] = st.l0;
        }
        if (h1) {
            slot.m[2 * t + 1] = st.m1;
            slot.l[2 * t + 1] = st.l1;
        }
    }
#pragma unroll
    for (int s = 0; s < ATT_MMA_STEPS; s++) {
        if (h0) {
            slot.acc[2 * t * ATT_HD + 16 * s + g] = st.o[s][0];
            slot.acc[2 * t * ATT_HD + 16 * s + g + 8] = st.o[s][2];
        }
        if (h1) {
            slot.acc[(2 * t + 1) * ATT_HD + 16 * s + g] = st.o[s][1];
            slot.acc[(2 * t + 1) * ATT_HD + 16 * s + g + 8] = st.o[s][3];
        }
    }
}

// One tile's scores, softmax step and products into `st`: K and V rows at ks and vs (a stage),
// keys p0 … p0 + 15, q's B fragments at qb; the lane's columns (2t, 2t + 1: a row's heads, or in
// `attention_mma_rows` heads of several rows) see keys up to pos_a and pos_b.
__device__ __forceinline__ void att_mma_tile(AttMmaState& st, const bf16_t* ks, const bf16_t* vs,
                                             const uint4* qb, int p0, int pos_a, int pos_b, float scale,
                                             int lane) {
    const int g = lane / 4, mat = lane / 8, mrow = lane % 8;
    // Scores: lane (g, t) gets keys g (0, 1) and g + 8 (2, 3) of heads 2t and 2t + 1.
    float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int s = 0; s < ATT_MMA_STEPS; s++) {
        // A = K's keys 0–15 × dims 16s … 16s + 15: matrices (keys 0–7 | 8–15) × (dims low | high).
        unsigned a0, a1, a2, a3;
        const int key = mrow + 8 * (mat & 1);
        ldmatrix_x4(reinterpret_cast<const unsigned*>(ks + att_mma_at(key, 2 * s + (mat >> 1))), a0, a1, a2, a3);
        const uint4 b = qb[s * WARP + lane];
        mma_16816(sc, a0, a1, a2, a3, b.x, b.y);
        mma_16816(sc, a0, a1, a2, a3, b.z, b.w);
    }
    const float s0 = p0 + g <= pos_a ? __fmul_rn(sc[0], scale) : -INFINITY;
    const float s1 = p0 + g <= pos_b ? __fmul_rn(sc[1], scale) : -INFINITY;
    const float s2 = p0 + g + 8 <= pos_a ? __fmul_rn(sc[2], scale) : -INFINITY;
    const float s3 = p0 + g + 8 <= pos_b ? __fmul_rn(sc[3], scale) : -INFINITY;
    // For a row's own columns every tile a split takes holds key p0 ≤ pos: the maxima are
    // finite. A column of `attention_mma_rows` whose row ends before the tile sees only −∞: its
    // state stays as it was (a maximum of −∞ taken as 0 in the exps, so that a fresh state
    // stays fresh, not NaN; a state with keys gets c = 1 and weights 0, and its products 0).
    const float n0 = fmaxf(st.m0, att_mma_column_max(fmaxf(s0, s2)));
    const float n1 = fmaxf(st.m1, att_mma_column_max(fmaxf(s1, s3)));
    const float b0 = n0 == -INFINITY ? 0.0f : n0, b1 = n1 == -INFINITY ? 0.0f : n1;
    const float c0 = expf(st.m0 - b0), c1 = expf(st.m1 - b1);
    const float e0 = expf(s0 - b0), e1 = expf(s1 - b1), e2 = expf(s2 - b0), e3 = expf(s3 - b1);
    st.l0 = __fmaf_rn(st.l0, c0, att_mma_column_sum(e0 + e2));
    st.l1 = __fmaf_rn(st.l1, c1, att_mma_column_sum(e1 + e3));
    st.m0 = n0;
    st.m1 = n1;
    // Pᵀ as the B operand: keys 2t, 2t + 1 (b0) and 8 + 2t, 9 + 2t (b1) of head g.
    unsigned top_hi, top_lo, bottom_hi, bottom_lo;
    split_pair(e0, e1, top_hi, top_lo);
    split_pair(e2, e3, bottom_hi, bottom_lo);
    const unsigned b0_hi = att_mma_transpose(top_hi), b1_hi = att_mma_transpose(bottom_hi);
    const unsigned b0_lo = att_mma_transpose(top_lo), b1_lo = att_mma_transpose(bottom_lo);
#pragma unroll
    for (int s = 0; s < ATT_MMA_STEPS; s++) {
        st.o[s][0] = __fmul_rn(st.o[s][0], c0);
        st.o[s][1] = __fmul_rn(st.o[s][1], c1);
        st.o[s][2] = __fmul_rn(st.o[s][2], c0);
        st.o[s][3] = __fmul_rn(st.o[s][3], c1);
        // A = Vᵀ's dims 16s … 16s + 15 × keys 0–15: V's matrices (keys 0–7 | 8–15) × (dims
        // low | high), transposed.
        unsigned a0, a1, a2, a3;
        const int key = mrow + 8 * (mat >> 1);
        ldmatrix_x4_trans(reinterpret_cast<const unsigned*>(vs + att_mma_at(key, 2 * s + (mat & 1))), a0, a1, a2, a3);
        mma_16816(st.o[s], a0, a1, a2, a3, b0_hi, b1_hi);
        mma_16816(st.o[s], a0, a1, a2, a3, b0_lo, b1_lo);
    }
}

// A group's G query heads at `heads` (ATT_HD floats a head, one after another: a row's in q, or
// the prep twin's in shared memory) as the score MMAs' B operand into qb, by the block's THREADS
// threads: step s, lane (g, t) holds head g's dims 16s + 2t, +1 (b0) and 16s + 8 + 2t, +1 (b1),
// hi in x and y, lo in z and w; heads past the group zeros.
// The caches carry no `__restrict__` in `att_mma_walk`: `attention_mma_cluster_prep` writes the
// row's own key before it reads it (the kernels' own parameters say where they are read-only).
// `att_mma_load_cols` takes the NC columns' q from column(c) instead (`attention_mma_rows`).
template <int THREADS, int NC, typename Column>
__device__ __forceinline__ void att_mma_load_cols(Column column, uint4* qb) {
    for (int x = threadIdx.x; x < ATT_MMA_STEPS * WARP; x += THREADS) {
        const int s = x / WARP, head = x % WARP / 4, col = x % 4;
        float f0 = 0.0f, f1 = 0.0f, f2 = 0.0f, f3 = 0.0f;
        const float* q_col = head < NC ? column(head) : nullptr;  // (none: a column unused)
        if (q_col != nullptr) {
            const float* qr = q_col + 16 * s + 2 * col;
            f0 = qr[0];
            f1 = qr[1];
            f2 = qr[8];
            f3 = qr[9];
        }
        uint4 b;
        split_pair(f0, f1, b.x, b.z);
        split_pair(f2, f3, b.y, b.w);
        qb[x] = b;
    }
}
template <int THREADS>
__device__ __forceinline__ void att_mma_load_q(const float* heads, uint4* qb) {
    att_mma_load_cols<THREADS, ATT_MMA_G>([&](int c) { return heads + c * ATT_HD; }, qb);
}

// One warp's walk of key splits first, first + step, … (below ATT_MMA_SPLITS) of row r's
// KV head kvh, each from a fresh state into `keep(split, state)`, through its ATT_MMA_STAGES
// stages at `stages` (one pipeline of copies across the splits). Splits without tiles are kept
// as empty states (m −∞, l 0, zeros), which the merge weighs 0. The tiles are a row's at `pos`;
// the lane's columns see keys up to pos_a and pos_b (pos, but in `attention_mma_rows`, where pos
// is the last row's). `before()` runs once the first tiles' copies are under way and before q's
// fragments at qb are read (the prep twin preps there, its copies in flight meanwhile); where
// `hold_last`, the walk's last tile (the row's own key's, written by that prep) is copied only
// after it.
template <typename Before, typename Keep>
__device__ __forceinline__ void att_mma_walk(int first, int step, int pos, int pos_a, int pos_b, size_t base, int kvh,
                                             const kv_t* k_cache, const kv_t* v_cache,
                                             const uint4* qb, float scale, bf16_t* stages, bool hold_last,
                                             Before before, Keep keep) {
    const int lane = threadIdx.x % WARP;
    const int row_tiles = pos / ATT_MMA_KEYS + 1;
    int items = 0;
    for (int sp = first; sp < ATT_MMA_SPLITS; sp += step) items += att_mma_split_tiles(sp, row_tiles);
    // The copies run ahead through the walk's (split, tile) items; a cursor is a split and the
    // index of its tile (tile split + SPLITS · j).
    int copy_split = first, copy_j = 0;
    auto copy_next = [&](int item) {
        bf16_t* dst = stages + (size_t)(item % ATT_MMA_STAGES) * ATT_MMA_TILE;
        const int p0 = (copy_split + ATT_MMA_SPLITS * copy_j) * ATT_MMA_KEYS;
        // Keys past pos copy the row at pos (never weighed: their scores are −∞, their weights
        // 0 times finite values).
#pragma unroll
        for (int i = 0; i < ATT_MMA_PIECES; i++) {  // 2 · 16 · PIECES pieces over 32 lanes
            const int e = lane + WARP * i;
            const int is_v = e / (ATT_MMA_KEYS * ATT_MMA_PIECES);
            const int key = e / ATT_MMA_PIECES % ATT_MMA_KEYS, piece = e % ATT_MMA_PIECES;
            const size_t at = (base + min(p0 + key, pos)) * ATT_KV_ROW + kvh * ATT_HD + piece * 8;
            cp_async16(dst + is_v * ATT_MMA_KEYS * ATT_HD + att_mma_at(key, piece), (is_v ? v_cache : k_cache) + at,
                       true);
        }
        if (++copy_j == att_mma_split_tiles(copy_split, row_tiles)) {
            copy_split += step;
            copy_j = 0;
        }
    };
    // The first ATT_MMA_STAGES − 1 items' copies, a commit group each in item order: those
    // before `before()` but a held last item, which (and any past it) after.
    const int early = hold_last ? items - 1 : items;
    int n0 = 0;
    for (; n0 < ATT_MMA_STAGES - 1 && (n0 < early || n0 >= items); n0++) {
        if (n0 < items) copy_next(n0);
        cp_async_commit();
    }
    before();
    for (; n0 < ATT_MMA_STAGES - 1; n0++) {
        if (n0 < items) copy_next(n0);
        cp_async_commit();
    }
    AttMmaState st;
    att_mma_fresh(st);
    int split = first, j = 0;
    for (int n = 0; n < items; n++) {
        // Item n is in (every lane's copies) and every lane is done with item n − 1, whose
        // stage the next copies overwrite.
        cp_async_wait<ATT_MMA_STAGES - 2>();
        __syncwarp();
        if (n + ATT_MMA_STAGES - 1 < items) copy_next(n + ATT_MMA_STAGES - 1);
        cp_async_commit();
        const bf16_t* ks = stages + (size_t)(n % ATT_MMA_STAGES) * ATT_MMA_TILE;
        att_mma_tile(st, ks, ks + ATT_MMA_KEYS * ATT_HD, qb, (split + ATT_MMA_SPLITS * j) * ATT_MMA_KEYS, pos_a,
                     pos_b, scale, lane);
        if (++j == att_mma_split_tiles(split, row_tiles)) {
            keep(split, st);
            att_mma_fresh(st);
            split += step;
            j = 0;
        }
    }
    // The splits past the row's tiles (the walk's last ones): empty states.
    for (; split < ATT_MMA_SPLITS; split += step) keep(split, st);
    cp_async_wait<0>();
}

// The merge of the ATT_MMA_SPLITS states, as the kernels above merge their splits, in two
// parts: each head's weights first, by a thread a head (`att_mma_merge_weights`: split s's
// weight exp(m_s − max m) into f[s][i], 0 for a split without keys, and the weighted sum of the
// l's into total[i]; m_at(s, i) and l_at(s, i) read the states), then after a barrier each output
// (`att_mma_merge_one`: head i, the splits' outputs by acc_at(s) weighed in split order).
// Every m and l is read first, all loads in flight at once: read inside the loop, each
// iteration's loads waited behind the last one's store to f (which may alias them), 16 round
// trips to distributed shared memory one after another in the cluster kernels (their SASS).
template <int THREADS, int NC = ATT_MMA_G, typename M, typename L>
__device__ __forceinline__ void att_mma_merge_weights(M m_at, L l_at, float (*f)[NC], float* total) {
    for (int i = threadIdx.x; i < NC; i += THREADS) {
        float m[ATT_MMA_SPLITS], l[ATT_MMA_SPLITS];
#pragma unroll
        for (int s = 0; s < ATT_MMA_SPLITS; s++) {
            m[s] = m_at(s, i);
            l[s] = l_at(s, i);
        }
        float big = -INFINITY;
#pragma unroll
        for (int s = 0; s < ATT_MMA_SPLITS; s++) big = fmaxf(big, m[s]);
        float sum = 0.0f;
#pragma unroll
        for (int s = 0; s < ATT_MMA_SPLITS; s++) {
            const float w = l[s] == 0.0f ? 0.0f : expf(m[s] - big);
            f[s][i] = w;
            sum = __fmaf_rn(l[s], w, sum);
        }
        total[i] = sum;
    }
}

template <int NC = ATT_MMA_G, typename A>
__device__ __forceinline__ float att_mma_merge_one(A acc_at, const float (*f)[NC], const float* total, int i) {
    float a = 0.0f;
    for (int s = 0; s < ATT_MMA_SPLITS; s++) a = __fmaf_rn(acc_at(s), f[s][i], a);
    return a / total[i];
}

// The kernels' dynamic shared memory (`att_mma_shared_bytes` on the host): q's B fragments
// (ATT_MMA_STEPS × 32 lanes × 4 words), each warp's ATT_MMA_STAGES tiles, then the states of
// SLOTS splits (m and l, ATT_MMA_G each, then ATT_MMA_G × ATT_HD outputs, a split after
// another; `attention_mma_rows`' of its NC columns).
struct AttMmaShared {
    uint4* qb;
    bf16_t* stages;
    float* slots;
};
__device__ __forceinline__ AttMmaShared att_mma_shared(uint4* base) {
    AttMmaShared s;
    s.qb = base;
    s.stages = reinterpret_cast<bf16_t*>(base + ATT_MMA_STEPS * WARP);
    s.slots = reinterpret_cast<float*>(s.stages + ATT_MMA_WARPS * ATT_MMA_STAGES * ATT_MMA_TILE);
    return s;
}
template <int NC = ATT_MMA_G>
__device__ __forceinline__ AttMmaSlot att_mma_slot(float* slots, int k) {
    float* p = slots + (size_t)k * (2 * NC + NC * ATT_HD);
    return AttMmaSlot{p, p + NC, p + 2 * NC};
}

// The block kernels' body: `n_rows` rows r0, r0 + 1, … of one session (their keys the same cache
// rows) for KV head kvh, as NC columns, column c row r0 + c / G's query head kvh · G + c % G
// (columns past the rows' unused). Warp w walks splits w, w + 4, … one after the other over the
// tiles of the rows' last key, each column seeing its own row's keys; every split's state is
// kept in shared memory, then the block merges them. A column's chain is its row's alone: the
// same bits as `attention_mma` and the cluster kernels give it (an MMA's element is its own
// row and column's sum; the tiles past a column's row leave its state as it was, their keys'
// weights 0 times the finite V rows of the session's later keys).
template <int NC>
__device__ __forceinline__ void att_mma_block_rows(const float* __restrict__ q, const float* __restrict__ qkv,
                                                   const kv_t* __restrict__ k_cache,
                                                   const kv_t* __restrict__ v_cache,
                                                   const int* __restrict__ pos_arr, size_t base, int r0, int n_rows,
                                                   int kvh, float scale, float* __restrict__ out,
                                                   const AttMmaShared& sh, float (*f_s)[NC], float* total_s) {
    constexpr int THREADS = ATT_MMA_WARPS * WARP;
    const int h0 = kvh * ATT_MMA_G, cols = n_rows * ATT_MMA_G;
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, t = lane % 4;
    att_mma_load_cols<THREADS, NC>(
        [&](int c) -> const float* {
            return c < cols ? q + ((size_t)(r0 + c / ATT_MMA_G) * ATT_HEADS + h0 + c % ATT_MMA_G) * ATT_HD : nullptr;
        },
        sh.qb);
    int last = 0;
    for (int i = 0; i < n_rows; i++) last = max(last, pos_arr[r0 + i]);
    // The lane's columns 2t and 2t + 1 (−1, no key, where unused).
    const int pos_a = 2 * t < cols ? pos_arr[r0 + 2 * t / ATT_MMA_G] : -1;
    const int pos_b = 2 * t + 1 < cols ? pos_arr[r0 + (2 * t + 1) / ATT_MMA_G] : -1;
    __syncthreads();
    att_mma_walk(warp, ATT_MMA_WARPS, last, pos_a, pos_b, base, kvh, k_cache, v_cache, sh.qb, scale,
                 sh.stages + (size_t)warp * ATT_MMA_STAGES * ATT_MMA_TILE, false, [] {},
                 [&](int split, const AttMmaState& st) {
                     att_mma_keep<NC>(st, att_mma_slot<NC>(sh.slots, split), lane);
                 });
    __syncthreads();
    att_mma_merge_weights<THREADS, NC>([&](int s, int i) { return att_mma_slot<NC>(sh.slots, s).m[i]; },
                                       [&](int s, int i) { return att_mma_slot<NC>(sh.slots, s).l[i]; }, f_s,
                                       total_s);
    __syncthreads();
    for (int x = threadIdx.x; x < cols * ATT_HD; x += THREADS) {
        const int i = x / ATT_HD, d = x % ATT_HD;
        const float y = att_mma_merge_one<NC>([&](int s) { return att_mma_slot<NC>(sh.slots, s).acc[i * ATT_HD + d]; },
                                              f_s, total_s, i);
        att_store(qkv, out, r0 + i / ATT_MMA_G, h0 + i % ATT_MMA_G, d, y);
    }
}

// A block per (row, KV head) (calls of many rows).
extern "C" __global__ void __launch_bounds__(ATT_MMA_WARPS * WARP)
attention_mma(const float* __restrict__ q, const float* __restrict__ qkv, const kv_t* __restrict__ k_cache,
              const kv_t* __restrict__ v_cache, const int* __restrict__ pos_arr,
              const int* __restrict__ kv_base_arr, float scale, float* __restrict__ out) {
    pdl_start();
    if (att_row_left(pos_arr)) return;
    __shared__ float f_s[ATT_MMA_SPLITS][ATT_MMA_G], total_s[ATT_MMA_G];
    extern __shared__ uint4 att_mma_base[];
    const AttMmaShared sh = att_mma_shared(att_mma_base);
    const int r = blockIdx.x;
    att_mma_block_rows<ATT_MMA_G>(q, qkv, k_cache, v_cache, pos_arr, (size_t)kv_base_arr[r], r, 1, blockIdx.y, scale,
                                  out, sh, f_s, total_s);
}

// A block per ATT_MMA_ROWS rows (of `rows`; the host's `att_mma_rows`: as many whole groups as
// fill an MMA's 8 columns) and KV head (a prompt's rows: calls whose rows need
// keys other rows of the call write): where the block's rows are one session's, it walks their
// keys once for all of them, its MMAs' columns their query heads side by side
// (`att_mma_block_rows`); else a row at a time. Every row gets `attention_mma`'s bits.
extern "C" __global__ void __launch_bounds__(ATT_MMA_WARPS * WARP)
attention_mma_rows(const float* __restrict__ q, const float* __restrict__ qkv, const kv_t* __restrict__ k_cache,
                   const kv_t* __restrict__ v_cache, const int* __restrict__ pos_arr,
                   const int* __restrict__ kv_base_arr, float scale, float* __restrict__ out, int rows) {
    constexpr int NC = ATT_MMA_ROWS * ATT_MMA_G;
    pdl_start();
    __shared__ float f_s[ATT_MMA_SPLITS][NC], total_s[NC];
    extern __shared__ uint4 att_mma_base[];
    const AttMmaShared sh = att_mma_shared(att_mma_base);
    const int r0 = blockIdx.x * ATT_MMA_ROWS, n_rows = min(ATT_MMA_ROWS, rows - r0);
    const int base = kv_base_arr[r0];
    // A row at position −1 is left to another launch (`att_row_left`: a round split by context,
    // whose prompt rows from the switch on come here): a block holding one takes its other rows a
    // row at a time.
    bool one_session = pos_arr[r0] >= 0;
    for (int i = 1; i < n_rows; i++) one_session = one_session && kv_base_arr[r0 + i] == base && pos_arr[r0 + i] >= 0;
    if (one_session) {
        att_mma_block_rows<NC>(q, qkv, k_cache, v_cache, pos_arr, (size_t)base, r0, n_rows, blockIdx.y, scale, out,
                               sh, f_s, total_s);
        return;
    }
    for (int i = 0; i < n_rows; i++) {
        if (pos_arr[r0 + i] < 0) continue;  // the same for the whole block
        __syncthreads();  // the last row's merge done with the states
        att_mma_block_rows<NC>(q, qkv, k_cache, v_cache, pos_arr, (size_t)kv_base_arr[r0 + i], r0 + i, 1,
                               blockIdx.y, scale, out, sh, f_s, total_s);
    }
}

// The cluster kernels' end, by a block of THREADS threads once its warps < ATT_MMA_WARPS have
// kept their splits' states in `slots` (split s's in slot s % 4 of block s / 4): after the
// cluster's barrier block z merges its share of row r's outputs of the group at h0, reading
// every split's state from the block that kept it; then it tells the cluster it has read them
// (an arrive, whose release waits for those loads, before the output's global stores, which it
// would wait for too) and stores its share while the others finish, and waits for every block's
// arrival before it leaves, so that no block's states go while another reads them.
template <int THREADS>
__device__ __forceinline__ void att_mma_cluster_merge(const float* __restrict__ qkv, float* __restrict__ out, int r,
                                                      int h0, float* slots, float (*f_s)[ATT_MMA_G],
                                                      float* total_s) {
    const int z = blockIdx.z;
    cluster_sync();
    const auto slot = [&](int s) { return att_mma_slot(slots, s % ATT_MMA_WARPS); };
    att_mma_merge_weights<THREADS>([&](int s, int i) { return cluster_load_f32(slot(s).m + i, s / ATT_MMA_WARPS); },
                                   [&](int s, int i) { return cluster_load_f32(slot(s).l + i, s / ATT_MMA_WARPS); },
                                   f_s, total_s);
    __syncthreads();
    constexpr int share = ATT_MMA_G * ATT_HD / ATT_MMA_CLUSTER, per_thread = (share + THREADS - 1) / THREADS;
    static_assert(ATT_MMA_G * ATT_HD % ATT_MMA_CLUSTER == 0, "the cluster's blocks merge equal shares");
    // Output x of the group (head x / ATT_HD, dim x % ATT_HD): this thread's x0 + k · THREADS.
    const int x0 = z * share + threadIdx.x;
    float y[per_thread];
#pragma unroll
    for (int k = 0; k < per_thread; k++) {
        const int x = x0 + k * THREADS;
        if (x < (z + 1) * share)
            y[k] = att_mma_merge_one([&](int s) { return cluster_load_f32(slot(s).acc + x, s / ATT_MMA_WARPS); }, f_s,
                                     total_s, x / ATT_HD);
    }
    cluster_arrive();
#pragma unroll
    for (int k = 0; k < per_thread; k++) {
        const int x = x0 + k * THREADS;
        if (x < (z + 1) * share) att_store(qkv, out, r, h0 + x / ATT_HD, x % ATT_HD, y[k]);
    }
    cluster_wait();
}

// A cluster of ATT_MMA_CLUSTER blocks per (row, KV head), along z: warp w of block z walks split
// 4z + w alone, then the cluster merges (`att_mma_cluster_merge`; calls of few rows).
extern "C" __global__ void __cluster_dims__(1, 1, ATT_MMA_CLUSTER) __launch_bounds__(ATT_MMA_WARPS * WARP)
attention_mma_cluster(const float* __restrict__ q, const float* __restrict__ qkv, const kv_t* __restrict__ k_cache,
                      const kv_t* __restrict__ v_cache, const int* __restrict__ pos_arr,
                      const int* __restrict__ kv_base_arr, float scale, float* __restrict__ out) {
    pdl_start();
    // (Every block of the cluster is of the same row: all of them leave, or none.)
    if (att_row_left(pos_arr)) return;
    __shared__ float f_s[ATT_MMA_SPLITS][ATT_MMA_G], total_s[ATT_MMA_G];
    extern __shared__ uint4 att_mma_base[];
    const AttMmaShared sh = att_mma_shared(att_mma_base);
    const int r = blockIdx.x, kvh = blockIdx.y, h0 = kvh * ATT_MMA_G, z = blockIdx.z;
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    att_mma_load_q<ATT_MMA_WARPS * WARP>(q + ((size_t)r * ATT_HEADS + h0) * ATT_HD, sh.qb);
    __syncthreads();
    const int pos = pos_arr[r];
    att_mma_walk(z * ATT_MMA_WARPS + warp, ATT_MMA_SPLITS, pos, pos, pos, (size_t)kv_base_arr[r], kvh, k_cache, v_cache,
                 sh.qb, scale, sh.stages + (size_t)warp * ATT_MMA_STAGES * ATT_MMA_TILE, false, [] {},
                 [&](int split, const AttMmaState& st) {
                     att_mma_keep(st, att_mma_slot(sh.slots, split % ATT_MMA_WARPS), lane);
                 });
    att_mma_cluster_merge<ATT_MMA_WARPS * WARP>(qkv, out, r, h0, sh.slots, f_s, total_s);
}

// Warps of a block of `attention_mma_cluster_prep` (the host's `att_mma_prep_warps`): a warp for
// each query head of the group and one for the KV head, at least the ATT_MMA_WARPS that walk.
#define ATT_MMA_PREP_WARPS (ATT_MMA_G + 1 > ATT_MMA_WARPS ? ATT_MMA_G + 1 : ATT_MMA_WARPS)

// `attention_prep` then `attention_mma_cluster` in one launch, for calls whose every row is its
// session's only one (a decode step of few streams, a draft step), as `attention_gated_prep` is
// for the per-head kernel. Each block of the cluster preps the group's query heads itself into
// shared memory (warp c head c; block 0 also stores them to q), so no block waits on another
// before its walk; the KV head is prepped (by warp G) only in the block whose split holds the
// row's own key, the walk's only reader of the cache row it writes (every other tile ends before
// it), and only after the block's barrier does that split's warp copy its last tile (`hold_last`;
// cp.async is a generic-proxy read ordered after its thread's earlier instructions, so the
// barrier orders the prep warp's stores before it, as in `attention_grouped_staged_prep`). The
// walking warps' first tiles are copied meanwhile. The same prep and chain: the same bits
// (kernel test).
extern "C" __global__ void __cluster_dims__(1, 1, ATT_MMA_CLUSTER) __launch_bounds__(ATT_MMA_PREP_WARPS * WARP)
attention_mma_cluster_prep(const float* __restrict__ qkv, const int* __restrict__ pos_arr,
                           const int* __restrict__ kv_base_arr, const float* __restrict__ q_norm,
                           const float* __restrict__ k_norm, const float* __restrict__ inv_freq, float eps,
                           float scale, float* __restrict__ q, kv_t* k_cache, kv_t* v_cache,
                           float* __restrict__ out) {
    constexpr int THREADS = ATT_MMA_PREP_WARPS * WARP;
    pdl_start();
    __shared__ float bufs[ATT_MMA_PREP_WARPS][ATT_HD];
    __shared__ float q_s[ATT_MMA_G * ATT_HD];
    __shared__ float f_s[ATT_MMA_SPLITS][ATT_MMA_G], total_s[ATT_MMA_G];
    extern __shared__ uint4 att_mma_base[];
    const AttMmaShared sh = att_mma_shared(att_mma_base);
    const int r = blockIdx.x, kvh = blockIdx.y, h0 = kvh * ATT_MMA_G, z = blockIdx.z;
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const int pos = pos_arr[r];
    const size_t base = (size_t)kv_base_arr[r];
    // The split whose last tile holds the row's own key, and so the block that preps the KV head.
    const int own_split = pos / ATT_MMA_KEYS % ATT_MMA_SPLITS;
    const auto prep_then_q = [&] {
        const int heads = ATT_MMA_G + (own_split / ATT_MMA_WARPS == z);
        if (warp < heads) {
            const int w = warp < ATT_MMA_G ? h0 + warp : ATT_HEADS + kvh;
            // (The KV head's warp writes no q: its q_head is never written.)
            prep_head(qkv + (size_t)r * ATT_QKV_W, w, pos, (base + pos) * ATT_KV_ROW, q_norm, k_norm, inv_freq, eps,
                      q_s + min(warp, ATT_MMA_G - 1) * ATT_HD, k_cache, v_cache, bufs[warp], lane);
        }
        __syncthreads();
        att_mma_load_q<THREADS>(q_s, sh.qb);
        if (z == 0)
            for (int x = threadIdx.x; x < ATT_MMA_G * ATT_HD; x += THREADS)
                q[((size_t)r * ATT_HEADS + h0) * ATT_HD + x] = q_s[x];
        __syncthreads();
    };
    if (warp < ATT_MMA_WARPS) {
        const int split = z * ATT_MMA_WARPS + warp;
        att_mma_walk(split, ATT_MMA_SPLITS, pos, pos, pos, base, kvh, k_cache, v_cache, sh.qb, scale,
                     sh.stages + (size_t)warp * ATT_MMA_STAGES * ATT_MMA_TILE, split == own_split, prep_then_q,
                     [&](int split, const AttMmaState& st) {
                         att_mma_keep(st, att_mma_slot(sh.slots, split % ATT_MMA_WARPS), lane);
                     });
    } else {
        prep_then_q();
    }
    att_mma_cluster_merge<THREADS>(qkv, out, r, h0, sh.slots, f_s, total_s);
}
#endif
