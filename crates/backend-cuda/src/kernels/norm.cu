// RMSNorm of whole rows: out[r] = x[r] · rsqrt(mean(x[r]²) + eps) · (w or 1 + w). One block of
// NW warps per row (a decode step's rows are few and long: one warp per row left the GPU idle
// while 64 loads a lane came in one after another). The sum of squares is strided per thread,
// then `block_sum`'s fixed trees (`warp_sums` NW floats and `total_s` one of the kernel's shared
// memory): a fixed order for every row, one per NW.
template <int NW>
__device__ __forceinline__ void rmsnorm_row(const float* __restrict__ x, const float* __restrict__ w, int n,
                                            float eps, int kind, float* __restrict__ out, float* warp_sums,
                                            float* total_s) {
    pdl_start();
    const int r = blockIdx.x;
    const float* xr = x + (size_t)r * n;
    float acc = 0.0f;
    for (int i = threadIdx.x; i < n; i += NW * WARP) acc += xr[i] * xr[i];
    const float total = block_sum<NW>(acc, warp_sums, total_s);
    const float inv = 1.0f / sqrtf(total / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += NW * WARP) out[(size_t)r * n + i] = xr[i] * inv * norm_scale(w[i], kind);
}

// NORM_WARPS warps a row: every norm by default.
extern "C" __global__ void __launch_bounds__(NORM_WARPS * WARP)
rmsnorm_rows(const float* __restrict__ x, const float* __restrict__ w, int n, int rows, float eps,
             int kind, float* __restrict__ out) {
    __shared__ float warp_sums[NORM_WARPS];
    __shared__ float total_s;
    rmsnorm_row<NORM_WARPS>(x, w, n, eps, kind, out, warp_sums, &total_s);
}

// NORM_FEW_WARPS warps a row (FLASHLANE_NORM_FEW_WARPS=1, an A/B of one binary, off by default):
// its own fixed order, the same for every row, so a row's bits still never depend on the batch;
// not those of `rmsnorm_rows`. A decode step's norm is one block of latency (ncu, session 32:
// 4.3 µs for one row at 32 warps); fewer warps wait on a cheaper barrier.
extern "C" __global__ void __launch_bounds__(NORM_FEW_WARPS * WARP)
rmsnorm_rows_few(const float* __restrict__ x, const float* __restrict__ w, int n, int rows, float eps,
                 int kind, float* __restrict__ out) {
    __shared__ float warp_sums[NORM_FEW_WARPS];
    __shared__ float total_s;
    rmsnorm_row<NORM_FEW_WARPS>(x, w, n, eps, kind, out, warp_sums, &total_s);
}

// Embedding rows: x[r] = widen(embed[tokens[r]]).
extern "C" __global__ void embed_rows(const int* __restrict__ tokens, const bf16_t* __restrict__ embed,
                                      int hidden, float* __restrict__ x) {
    pdl_start();
    const int r = blockIdx.x;
    const bf16_t* src = embed + (size_t)tokens[r] * hidden;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) x[(size_t)r * hidden + i] = widen(src[i]);
}
