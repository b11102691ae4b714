// Dense SwiGLU MLP (Qwen3), between its two matmuls: act[r, i] = silu(gate[r, i]) · up[r, i], where
// each row of `gate_up` is [gate_proj (width) | up_proj (width)] (one fused matmul). Element-wise:
// nothing is reduced, so the bits never depend on the batch.

extern "C" __global__ void swiglu_rows(const float* __restrict__ gate_up, int width, int rows,
                                       float* __restrict__ act) {
    pdl_start();
    const size_t n = (size_t)rows * width;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (size_t)gridDim.x * blockDim.x) {
        const size_t r = j / width, i = j % width;
        const float* g = gate_up + r * 2 * width;
        act[j] = siluf_(g[i]) * g[width + i];
    }
}
