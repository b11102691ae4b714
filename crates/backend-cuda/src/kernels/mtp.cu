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
// to the lowest id; `none` when no logit qualifies. One block of ARGMAX_THREADS per row.

extern "C" __global__ void __launch_bounds__(ARGMAX_THREADS)
argmax_rows(const float* __restrict__ logits, int n, int none, int* __restrict__ out) {
    pdl_start();
    __shared__ float best_v[ARGMAX_THREADS];
    __shared__ int best_i[ARGMAX_THREADS];
    const float* row = logits + (size_t)blockIdx.x * n;
    float v = 0.0f;
    int id = -1;
    // ARGMAX_BATCH loads a thread issued together, then taken in increasing index as before (a
    // rolled loop waited on each of a 151,936-logit row's 148 loads a thread in turn).
    for (int base = threadIdx.x; base < n; base += ARGMAX_BATCH * ARGMAX_THREADS) {
        float xs[ARGMAX_BATCH];
#pragma unroll
        for (int u = 0; u < ARGMAX_BATCH; u++) {
            const int i = base + u * ARGMAX_THREADS;
            xs[u] = i < n ? row[i] : -INFINITY;
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
            const int mi = best_i[threadIdx.x];
            if (oi >= 0 && (mi < 0 || ov > best_v[threadIdx.x] || (ov == best_v[threadIdx.x] && oi < mi))) {
                best_v[threadIdx.x] = ov;
                best_i[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = best_i[0] < 0 ? none : best_i[0];
}
