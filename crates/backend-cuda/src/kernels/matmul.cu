// y[r, o] = x[row(r)] · W[o]  (or y[r, o] += … when `accumulate`): W `[n_out, k]` in bf16, f32
// accumulation; `row_index` (or null) gathers input rows (the rows whose logits are wanted).
//
// Batch invariance: every (row, output) pair is one warp's dot product in warp_dot_bf16's order
// (lane l takes the 8-element chunks l, l + 32, … through dot8_bf16, then warp_sum), whichever
// kernel computes it and whatever else that kernel computes beside it. So a row's result is
// bit-identical alone, in a tile, or among many rows, and the host may pick either kernel.
// - `matmul_bf16`: one warp per (row, output). A few rows: every warp streams its weight row.
// - `matmul_bf16_tiled`: one warp per MATMUL_TILE_COLS outputs × MATMUL_TILE_ROWS rows, each pair
//   with its own accumulator: the weight rows are read once per tile of rows instead of once per
//   row, and each x chunk loaded serves MATMUL_TILE_COLS outputs.

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

// Grid (ceil(n_out / (MATMUL_WARPS · MATMUL_TILE_COLS)), ceil(rows / MATMUL_TILE_ROWS)).
extern "C" __global__ void __launch_bounds__(MATMUL_WARPS * WARP)
matmul_bf16_tiled(const float* __restrict__ x, int x_stride, const int* __restrict__ row_index,
                  const bf16_t* __restrict__ w, int k, int n_out,
                  float* __restrict__ y, int y_stride, int accumulate, int rows) {
    const int lane = threadIdx.x % WARP;
    const int o0 = (blockIdx.x * MATMUL_WARPS + threadIdx.x / WARP) * MATMUL_TILE_COLS;
    const int r0 = blockIdx.y * MATMUL_TILE_ROWS;
    if (o0 >= n_out) return;
    // Rows and outputs past the ends repeat the last valid one (computed, never written), so
    // the loops below have compile-time bounds and keep the accumulators in registers.
    const float* xs[MATMUL_TILE_ROWS];
#pragma unroll
    for (int j = 0; j < MATMUL_TILE_ROWS; j++) {
        const int r = min(r0 + j, rows - 1);
        xs[j] = x + (size_t)(row_index ? row_index[r] : r) * x_stride;
    }
    const bf16_t* ws[MATMUL_TILE_COLS];
#pragma unroll
    for (int c = 0; c < MATMUL_TILE_COLS; c++) ws[c] = w + (size_t)min(o0 + c, n_out - 1) * k;
    float acc[MATMUL_TILE_ROWS][MATMUL_TILE_COLS];
#pragma unroll
    for (int j = 0; j < MATMUL_TILE_ROWS; j++)
#pragma unroll
        for (int c = 0; c < MATMUL_TILE_COLS; c++) acc[j][c] = 0.0f;
    for (int i = lane * 8; i < k; i += WARP * 8) {
        uint4 w8[MATMUL_TILE_COLS];
#pragma unroll
        for (int c = 0; c < MATMUL_TILE_COLS; c++) w8[c] = *reinterpret_cast<const uint4*>(ws[c] + i);
#pragma unroll
        for (int j = 0; j < MATMUL_TILE_ROWS; j++)
#pragma unroll
            for (int c = 0; c < MATMUL_TILE_COLS; c++) acc[j][c] = dot8_bf16(acc[j][c], xs[j] + i, w8[c]);
    }
#pragma unroll
    for (int j = 0; j < MATMUL_TILE_ROWS; j++)
#pragma unroll
        for (int c = 0; c < MATMUL_TILE_COLS; c++) {
            const float d = warp_sum(acc[j][c]);
            const int r = r0 + j, o = o0 + c;
            if (lane == 0 && r < rows && o < n_out) {
                float* out = y + (size_t)r * y_stride + o;
                *out = accumulate ? *out + d : d;
            }
        }
}
