// RMSNorm of whole rows: out[r] = x[r] · rsqrt(mean(x[r]²) + eps) · (w or 1 + w). One block of
// NORM_WARPS warps per row (a decode step's rows are few and long: one warp per row left the
// GPU idle while 64 loads a lane came in one after another). The sum of squares is strided per
// thread, then `block_sum`'s fixed trees (`norm_share`): the order of every row, and of the
// matmuls that normalise their own input (`matmul_block`'s NORM), so their bits are these.
extern "C" __global__ void __launch_bounds__(NORM_WARPS * WARP)
rmsnorm_rows(const float* __restrict__ x, const float* __restrict__ w, int n, int rows, float eps,
             int kind, float* __restrict__ out) {
    __shared__ float warp_sums[NORM_WARPS];
    __shared__ float total_s;
    pdl_start();
    const int r = blockIdx.x;
    const float* xr = x + (size_t)r * n;
    const float total = block_sum<NORM_WARPS>(norm_share(xr, n, threadIdx.x), warp_sums, &total_s);
    const float inv = norm_inv(total, n, eps);
    for (int i = threadIdx.x; i < n; i += NORM_WARPS * WARP)
        out[(size_t)r * n + i] = xr[i] * inv * norm_scale(w[i], kind);
}

// Embedding rows: x[r] = widen(embed[tokens[r]]).
extern "C" __global__ void embed_rows(const int* __restrict__ tokens, const bf16_t* __restrict__ embed,
                                      int hidden, float* __restrict__ x) {
    pdl_start();
    const int r = blockIdx.x;
    const bf16_t* src = embed + (size_t)tokens[r] * hidden;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) x[(size_t)r * hidden + i] = widen(src[i]);
}
