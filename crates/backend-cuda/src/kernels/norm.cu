// RMSNorm of whole rows: out[r] = x[r] · rsqrt(mean(x[r]²) + eps) · (w or 1 + w). One warp per row.

extern "C" __global__ void __launch_bounds__(NORM_WARPS * WARP)
rmsnorm_rows(const float* __restrict__ x, const float* __restrict__ w, int n, int rows, float eps,
             int kind, float* __restrict__ out) {
    const int lane = threadIdx.x % WARP;
    const int r = blockIdx.x * NORM_WARPS + threadIdx.x / WARP;
    if (r >= rows) return;
    const float* xr = x + (size_t)r * n;
    const float inv = 1.0f / sqrtf(warp_sum_squares(xr, n, lane) / (float)n + eps);
    for (int i = lane; i < n; i += WARP) out[(size_t)r * n + i] = xr[i] * inv * norm_scale(w[i], kind);
}

// Embedding rows: x[r] = widen(embed[tokens[r]]).
extern "C" __global__ void embed_rows(const int* __restrict__ tokens, const bf16_t* __restrict__ embed,
                                      int hidden, float* __restrict__ x) {
    const int r = blockIdx.x;
    const bf16_t* src = embed + (size_t)tokens[r] * hidden;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) x[(size_t)r * hidden + i] = widen(src[i]);
}
