// Probes of the tensor cores' arithmetic, for the ignored test `tensor_core_numerics_probe` (not
// part of any model's kernels; compiled alone for sm_90a, which wgmma needs). They answer what a
// warpgroup (wgmma) tiled matmul would have to respect to keep the chain of `matmul.cu`:
// - does one wgmma m64n8k16 give, bit for bit, what four mma.sync m16n8k16 give on the same
//   products in the same k-slots (A in registers, B from shared memory)?
// - does an mma.sync's result depend on which k-slot holds which product (the same 16 products
//   placed by a permutation `perm`, slot s ← element perm[s], A and B alike)?
// - does it depend on which operand holds which factor (yᵀ = W · xᵀ: A the 8 outputs' weights,
//   rows 8–15 zeros, B the warp's first 8 rows of x; `matmul_bf16_swap`'s chain)?
typedef unsigned short bf16_t;

// Elements i and j of p as a 16-bit pair (i in the low half: the lower k-slot).
__device__ __forceinline__ unsigned tc_pair(const bf16_t* p, int i, int j) {
    return (unsigned)p[i] | ((unsigned)p[j] << 16);
}

__device__ __forceinline__ void tc_mma(float* d, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                       unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// a [64][16] bf16 (row-major), w [8][16] bf16 (output n's 16 elements of k), c [64][8] f32 (the
// accumulator each product sum is added to), perm [16]; out_* [64][8]. One warpgroup (128
// threads): warp q holds rows 16q … 16q + 15, as mma.sync's fragments lay them out.
extern "C" __global__ void __launch_bounds__(128)
tc_probe(const bf16_t* __restrict__ a, const bf16_t* __restrict__ w, const float* __restrict__ c,
         const int* __restrict__ perm, float* __restrict__ out_mma, float* __restrict__ out_perm,
         float* __restrict__ out_wgmma, float* __restrict__ out_swap) {
    // B for wgmma, K-major without swizzle: two core matrices of 8 outputs × 8 elements (16
    // bytes a row), k 0–7 then k 8–15, 128 bytes apart (both of the descriptor's strides say
    // 128, so either reading of which stride is K's finds the second one).
    __shared__ __align__(256) bf16_t ws[2 * 8 * 8];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    {
        const int n = threadIdx.x / 16, k = threadIdx.x % 16;
        ws[(k / 8) * 64 + n * 8 + k % 8] = w[n * 16 + k];
    }
    const bf16_t* ra = a + (size_t)(warp * 16 + g) * 16;
    const bf16_t* rb = ra + 8 * 16;
    const bf16_t* wn = w + g * 16;
    const int r0 = warp * 16 + g, r1 = r0 + 8;
    float d[4] = {c[r0 * 8 + 2 * t], c[r0 * 8 + 2 * t + 1], c[r1 * 8 + 2 * t], c[r1 * 8 + 2 * t + 1]};
    float p[4] = {d[0], d[1], d[2], d[3]};
    float e[4] = {d[0], d[1], d[2], d[3]};
    // Natural slots: slot s holds element s.
    const unsigned a0 = tc_pair(ra, 2 * t, 2 * t + 1), a1 = tc_pair(rb, 2 * t, 2 * t + 1);
    const unsigned a2 = tc_pair(ra, 8 + 2 * t, 9 + 2 * t), a3 = tc_pair(rb, 8 + 2 * t, 9 + 2 * t);
    tc_mma(d, a0, a1, a2, a3, tc_pair(wn, 2 * t, 2 * t + 1), tc_pair(wn, 8 + 2 * t, 9 + 2 * t));
    // Permuted slots.
    const int s0 = perm[2 * t], s1 = perm[2 * t + 1], s2 = perm[8 + 2 * t], s3 = perm[9 + 2 * t];
    tc_mma(p, tc_pair(ra, s0, s1), tc_pair(rb, s0, s1), tc_pair(ra, s2, s3), tc_pair(rb, s2, s3), tc_pair(wn, s0, s1),
           tc_pair(wn, s2, s3));
    // The operands swapped: D'[o][j] = Σ_k w[o][k] · a[16·warp + j][k] + c[16·warp + j][o] for
    // outputs o = g (rows 8–15 of A zeros) and the warp's rows j = 2t, 2t + 1 (B's columns).
    {
        const bf16_t* xr = a + (size_t)(warp * 16 + g) * 16;
        const int j0 = warp * 16 + 2 * t, j1 = j0 + 1;
        float q[4] = {c[j0 * 8 + g], c[j1 * 8 + g], 0.0f, 0.0f};
        tc_mma(q, tc_pair(wn, 2 * t, 2 * t + 1), 0u, tc_pair(wn, 8 + 2 * t, 9 + 2 * t), 0u,
               tc_pair(xr, 2 * t, 2 * t + 1), tc_pair(xr, 8 + 2 * t, 9 + 2 * t));
        out_swap[j0 * 8 + g] = q[0];
        out_swap[j1 * 8 + g] = q[1];
    }
    // The warpgroup's wgmma over the same A fragments and B from shared memory.
    __syncthreads();
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    const unsigned long long addr = (unsigned long long)__cvta_generic_to_shared(ws);
    const unsigned long long desc = ((addr & 0x3FFFF) >> 4) | ((unsigned long long)(128 >> 4) << 16) |
                                    ((unsigned long long)(128 >> 4) << 32);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %9, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n"
        "}\n"
        : "+f"(e[0]), "+f"(e[1]), "+f"(e[2]), "+f"(e[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(1));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    for (int i = 0; i < 4; i++) {
        const int r = i < 2 ? r0 : r1, col = 2 * t + i % 2;
        out_mma[r * 8 + col] = d[i];
        out_perm[r * 8 + col] = p[i];
        out_wgmma[r * 8 + col] = e[i];
    }
}
