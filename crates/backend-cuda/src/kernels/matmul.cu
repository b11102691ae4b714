// y[r, o] = x[row(r)] · W[o]  (or y[r, o] += … when `accumulate`): W `[n_out, k]` in bf16, f32
// accumulation. One warp per (row, output): the same warp_dot_bf16 whatever the batch, so a row's
// result is bit-identical alone or among many. `row_index` (or null) gathers input rows (the
// rows whose logits are wanted).

extern "C" __global__ void __launch_bounds__(MATMUL_WARPS * WARP)
matmul_bf16(const float* __restrict__ x, int x_stride, const int* __restrict__ row_index,
            const bf16_t* __restrict__ w, int k, int n_out,
            float* __restrict__ y, int y_stride, int accumulate) {
    const int lane = threadIdx.x % WARP;
    const int o = blockIdx.x * MATMUL_WARPS + threadIdx.x / WARP;
    const int r = blockIdx.y;
    if (o >= n_out) return;
    const int xr = row_index ? row_index[r] : r;
    const float d = warp_dot_bf16(x + (size_t)xr * x_stride, w + (size_t)o * k, k, lane);
    if (lane == 0) {
        float* out = y + (size_t)r * y_stride + o;
        *out = accumulate ? *out + d : d;
    }
}
