// The MTP head's input and hidden-row bookkeeping (models.md "MTP head").
// `mtp_input`: cat[r] = [zero-centred-norm(embed(tokens[r])) | zero-centred-norm(h)] where h is
// row `src` of `hidden` when src ≥ 0, else row −src−1 of `store` (the sessions' kept rows).
// One warp per half; H is MOE_H's hidden size, passed as `hidden`.

extern "C" __global__ void mtp_input(const int* __restrict__ tokens, const bf16_t* __restrict__ embed,
                                     const float* __restrict__ hidden_rows, const float* __restrict__ store,
                                     const int* __restrict__ hidden_src, const float* __restrict__ w_embed,
                                     const float* __restrict__ w_hidden, int hidden, float eps,
                                     float* __restrict__ cat) {
    pdl_start();
    const int r = blockIdx.x, lane = threadIdx.x % WARP;
    float* dst = cat + (size_t)r * 2 * hidden;
    if (threadIdx.x / WARP == 0) {
        const bf16_t* e = embed + (size_t)tokens[r] * hidden;
        float acc = 0.0f;
        for (int i = lane; i < hidden; i += WARP) acc += widen(e[i]) * widen(e[i]);
        const float inv = 1.0f / sqrtf(warp_sum(acc) / (float)hidden + eps);
        for (int i = lane; i < hidden; i += WARP) dst[i] = widen(e[i]) * inv * (1.0f + w_embed[i]);
    } else {
        const int src = hidden_src[r];
        const float* h = src >= 0 ? hidden_rows + (size_t)src * hidden : store + (size_t)(-src - 1) * hidden;
        const float inv = 1.0f / sqrtf(warp_sum_squares(h, hidden, lane) / (float)hidden + eps);
        for (int i = lane; i < hidden; i += WARP) dst[hidden + i] = h[i] * inv * (1.0f + w_hidden[i]);
    }
}

// dst[pairs[2i + 1]] = src[pairs[2i]], rows of `width` floats (one block per pair).
extern "C" __global__ void copy_rows(const float* __restrict__ src, const int* __restrict__ pairs, int width,
                                     float* __restrict__ dst) {
    pdl_start();
    const float* s = src + (size_t)pairs[2 * blockIdx.x] * width;
    float* d = dst + (size_t)pairs[2 * blockIdx.x + 1] * width;
    for (int i = threadIdx.x; i < width; i += blockDim.x) d[i] = s[i];
}

// Greedy choice per row, as lane::sampling::argmax: the largest logit, NaN and −∞ skipped, ties
// to the lowest id; `none` when no logit qualifies. Grid (rows, ARGMAX_SPLIT) in clusters of a
// row's ARGMAX_SPLIT blocks: block s takes slice s of the row, then the cluster's first block
// takes the best of the slices' bests from their shared memory. That choice has one answer
// whatever the split; one block a row read a 151,936-logit row at one multiprocessor's rate
// (18.8 µs against 7.0 split in 8, ncu, bench/RESULTS.md session 15).

// (v, i) beats (bv, bi): a valid id, and a larger logit or the same logit at a lower id.
__device__ __forceinline__ bool argmax_beats(float v, int i, float bv, int bi) {
    return i >= 0 && (bi < 0 || v > bv || (v == bv && i < bi));
}

extern "C" __global__ void __cluster_dims__(1, ARGMAX_SPLIT, 1) __launch_bounds__(ARGMAX_THREADS)
argmax_rows(const float* __restrict__ logits, int n, int none, int* __restrict__ out) {
    pdl_start();
    __shared__ float best_v[ARGMAX_THREADS];
    __shared__ int best_i[ARGMAX_THREADS];
    const float* row = logits + (size_t)blockIdx.x * n;
    const int slice = (n + ARGMAX_SPLIT - 1) / ARGMAX_SPLIT;
    const int lo = blockIdx.y * slice, hi = min(n, lo + slice);
    float v = 0.0f;
    int id = -1;
    // ARGMAX_BATCH loads a thread issued together, then taken in increasing index (a rolled loop
    // waited on each load in turn).
    for (int base = lo + threadIdx.x; base < hi; base += ARGMAX_BATCH * ARGMAX_THREADS) {
        float xs[ARGMAX_BATCH];
#pragma unroll
        for (int u = 0; u < ARGMAX_BATCH; u++) {
            const int i = base + u * ARGMAX_THREADS;
            xs[u] = i < hi ? row[i] : -INFINITY;
        }
#pragma unroll
        for (int u = 0; u < ARGMAX_BATCH; u++) {
            const float x = xs[u];
            if (isnan(x) || x == -INFINITY) continue;
            if (id < 0 || x > v) { v = x; id = base + u * ARGMAX_THREADS; }
        }
    }
    best_v[threadIdx.x] = v;
    best_i[threadIdx.x] = id;
    __syncthreads();
    for (int stride = ARGMAX_THREADS / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) {
            const float ov = best_v[threadIdx.x + stride];
            const int oi = best_i[threadIdx.x + stride];
            if (argmax_beats(ov, oi, best_v[threadIdx.x], best_i[threadIdx.x])) {
                best_v[threadIdx.x] = ov;
                best_i[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    // Slice s's best sits in best_*[0] of the cluster's block s (its rank: the cluster spans y).
    cluster_sync();
    if (blockIdx.y == 0 && threadIdx.x == 0) {
        float bv = best_v[0];
        int bi = best_i[0];
        for (unsigned s = 1; s < ARGMAX_SPLIT; s++) {
            const float ov = cluster_load_f32(&best_v[0], s);
            const int oi = (int)cluster_load_u32(&best_i[0], s);
            if (argmax_beats(ov, oi, bv, bi)) { bv = ov; bi = oi; }
        }
        out[blockIdx.x] = bi < 0 ? none : bi;
    }
    // No block leaves (and frees its shared memory) before the first one has read it.
    cluster_sync();
}
