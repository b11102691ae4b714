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

// One lane's step of a dot product: `acc` plus the 8 products of x[0..8) and the 8 bf16 weights
// packed in `w8`, in element order (the MoE kernels' dot products; the dense matmul runs on the
// tensor cores, matmul.cu).
__device__ __forceinline__ float dot8_bf16(float acc, const float* x, uint4 w8) {
    const float4 x0 = *reinterpret_cast<const float4*>(x);
    const float4 x1 = *reinterpret_cast<const float4*>(x + 4);
    acc += x0.x * __uint_as_float(w8.x << 16);
    acc += x0.y * __uint_as_float(w8.x & 0xffff0000u);
    acc += x0.z * __uint_as_float(w8.y << 16);
    acc += x0.w * __uint_as_float(w8.y & 0xffff0000u);
    acc += x1.x * __uint_as_float(w8.z << 16);
    acc += x1.y * __uint_as_float(w8.z & 0xffff0000u);
    acc += x1.z * __uint_as_float(w8.w << 16);
    acc += x1.w * __uint_as_float(w8.w & 0xffff0000u);
    return acc;
}

// Dot product of an f32 row and a bf16 row of length k (k % 8 == 0, both 16-byte aligned) by one
// warp: lane l takes the 8-element chunks l, l + 32, ... in order, then warp_sum.
__device__ __forceinline__ float warp_dot_bf16(const float* x, const bf16_t* w, int k, int lane) {
    float acc = 0.0f;
    for (int i = lane * 8; i < k; i += WARP * 8)
        acc = dot8_bf16(acc, x + i, *reinterpret_cast<const uint4*>(w + i));
    return warp_sum(acc);
}

// Sum of squares of x[0..n) by one warp (strided partial sums, then the fixed tree).
__device__ __forceinline__ float warp_sum_squares(const float* x, int n, int lane) {
    float acc = 0.0f;
    for (int i = lane; i < n; i += WARP) acc += x[i] * x[i];
    return warp_sum(acc);
}

// How an RMSNorm applies its weight: x̂·w (Qwen3) or x̂·(1 + w) (Qwen3-Next, zero-centred).
#define NORM_PLAIN 0
#define NORM_ZERO_CENTRED 1

__device__ __forceinline__ float norm_scale(float w, int kind) {
    return kind == NORM_ZERO_CENTRED ? 1.0f + w : w;
}
