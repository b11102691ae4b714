// Shared helpers for every flashlane kernel. The host prepends `#define`s for the model's sizes and
// the kernels' block shapes (see `kernels/mod.rs`, where each is defined once), so per-thread
// arrays have compile-time lengths and stay in registers.
//
// Batch invariance: every reduction below has a fixed order that depends only on the length
// reduced (per-lane strided partial sums, then a fixed xor-shuffle tree), never on how many
// rows or windows a launch covers. No atomics anywhere.

#define WARP 32
#define FULL_MASK 0xffffffffu

typedef unsigned short bf16_t;

// NVRTC compiles without the C headers that define it.
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

// bf16 is the top half of an f32: widening is exact.
__device__ __forceinline__ float widen(bf16_t w) { return __uint_as_float(((unsigned int)w) << 16); }

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float siluf_(float x) { return x / (1.0f + expf(-x)); }
// ln(1 + e^x), linear above 20 as torch computes it.
__device__ __forceinline__ float softplusf_(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Sum over the warp in a fixed butterfly order; every lane gets the same bits.
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

// Sum of squares of x[0..n) by one warp (strided partial sums, then the fixed tree).
__device__ __forceinline__ float warp_sum_squares(const float* x, int n, int lane) {
    float acc = 0.0f;
    for (int i = lane; i < n; i += WARP) acc += x[i] * x[i];
    return warp_sum(acc);
}

// The same sum for a length N known at compile time: the lane's loads are issued together (a
// rolled loop waits on each load before issuing the next), the sum in the same order.
template <int N>
__device__ __forceinline__ float warp_sum_squares_n(const float* x, int lane) {
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < (N + WARP - 1) / WARP; j++) {
        const int i = lane + j * WARP;
        if (i < N) acc += x[i] * x[i];
    }
    return warp_sum(acc);
}

// How an RMSNorm applies its weight: x̂·w (Qwen3) or x̂·(1 + w) (Qwen3-Next, zero-centred).
#define NORM_PLAIN 0
#define NORM_ZERO_CENTRED 1

__device__ __forceinline__ float norm_scale(float w, int kind) {
    return kind == NORM_ZERO_CENTRED ? 1.0f + w : w;
}
