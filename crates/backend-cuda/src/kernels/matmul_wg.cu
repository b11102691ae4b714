// Many rows on Hopper's warpgroup MMA (`wgmma`, sm_90a): `split_rows_wg`, then
// `matmul_bf16_wgmma`. Compiled into a module of its own (with common.cu and matmul.cu, for
// sm_90a, which wgmma needs) on compute capability 9.0 for the models it is taken by default in,
// or where asked (FLASHLANE_MATMUL_WGMMA=1). Its bits are the tiles' on the H200 (session 23). A
// second version with both operands from shared memory and `wait_group 1` (session 24) gave the
// same bits but took prompts 20–25 % longer than the tiles; this one takes the 4B and 8B shapes'
// rounds of 4,096 and 8,192 rows 4–10 % faster than they do, and smaller rounds or Qwen3-0.6B's
// up to 6 % slower (bench/RESULTS.md, session 24).
//
// Batch invariance: the chain of `matmul_tiled_block`. A k16 step of `mma.sync` sums the 16
// products of elements 16t + 4s + {0, 1, 2, 3} (t = 0..3) of a chunk; on the H200 a wgmma
// m64n8k16 gives bit for bit what four mma.sync give on the same products, and an mma.sync's
// result does not depend on which k-slot holds which product (`tensor_core_numerics_probe`,
// bench/RESULTS.md session 22). So each wgmma here takes one step's 16 elements, in an order of
// k-slots that lets both operands be copied in pieces of 8 bytes: slot 8c + 4u + j holds element
// 16(2c + u) + 4s + j. Per chunk, steps s = 0..3 in order, the hi then the lo product; the chunks
// of residue 0 (0, 8, 16, …), then of residue 1, …, each residue's partial from zero, folded into
// the total in residue order (total = p0, then total += pw): the tiles' operations on the same
// values.
//
// A block: MMW_ROWS rows (two warpgroups of 64) × MMW_OUTS outputs; warp q of warpgroup h holds
// rows 64h + 16q … + 15 as an mma.sync row tile (A from registers by `ldmatrix`, as the tiles
// load it), and each step is one m64n128k16 per warpgroup with B, the step's 128 × 16 weights,
// from shared memory: core matrices of 8 outputs × 8 k-slots (16 bytes a row), the two k-halves
// 2,048 bytes apart (the descriptor's leading offset) and the 16 groups of 8 outputs 128 bytes
// apart (its stride offset), a step's 4,096 bytes after the one before.
//
// Host defines: MMW_ROWS (128), MMW_OUTS (128), MMW_STAGES, MMW_THREADS (256).

#define MMW_X_STAGE_WORDS (MMW_ROWS * MMA_CHUNK)          // split rows of a chunk: 32 hi, 32 lo words a row
#define MMW_W_STAGE_BYTES (MMW_OUTS * MMA_CHUNK * 2)      // the weights of a chunk
#define MMW_STEP_BYTES (MMW_W_STAGE_BYTES / 4)            // of one k16 step
#define MMW_HALF_BYTES (MMW_STEP_BYTES / 2)               // of one k-half of a step
#define MMW_GROUP_BYTES 128                               // a core matrix: 8 outputs × 16 bytes

// x's rows split as `split_rows` splits them, in the warpgroup's k order (`split_rows_of`): per
// chunk, 32 words of hi, then 32 of lo; word 8s + 4c + 2u + j holds elements 16(2c + u) + 4s + 2j
// and + 1.
extern "C" __global__ void __launch_bounds__(SPLIT_THREADS)
split_rows_wg(const float* __restrict__ x, int x_stride, const int* __restrict__ row_index, int rows, int k,
              unsigned* __restrict__ xs) {
    split_rows_of<true>(x, x_stride, row_index, rows, k, xs);
}

// 8 bytes from global to shared memory (src-size 0: zeros, nothing read).
__device__ __forceinline__ void cp_async8(void* smem, const void* gmem, bool valid) {
    const unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(dst), "l"(gmem), "r"(valid ? 8 : 0));
}

// A shared-memory matrix descriptor without swizzle: start, leading (k) and stride (n) offsets.
__device__ __forceinline__ unsigned long long wgmma_desc(const void* smem, unsigned leading, unsigned stride) {
    const unsigned long long a = (unsigned long long)__cvta_generic_to_shared(smem);
    return ((a & 0x3FFFF) >> 4) | ((unsigned long long)(leading >> 4) << 16) |
           ((unsigned long long)(stride >> 4) << 32);
}

// d += A · B: A (64 × 16, this warp's 16 rows in mma.sync's fragment) from registers, B (16 × 128)
// by its descriptor; d as 16 mma.sync n-tiles, d[4j + i] that of n-tile j.
__device__ __forceinline__ void wgmma_m64n128k16(float* d, unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                                 unsigned long long b) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(1));
}

// Pins the accumulators in their registers across the asynchronous products (the compiler may
// otherwise move or copy them while a wgmma still writes them).
__device__ __forceinline__ void wgmma_pin(float* d) {
#pragma unroll
    for (int i = 0; i < MMW_OUTS / 2; i++) asm volatile("" : "+f"(d[i])::"memory");
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }

// A thread's copies into a stage of a warpgroup matmul of 256 threads and 128 outputs, the same
// for every chunk but for its offset: x pieces (16 bytes) of rows xr + 16i (piece xp, placed at
// xp ^ (row & 7) as the tiles place them), and weight runs (8 bytes: elements w_elem … + 3 of a
// chunk, w_elem = 16·tt + 4s) of local outputs wo + 16i, at w_dst + i · 2 groups of 8 outputs
// (outputs o and o + 16 are two groups apart) in the stage's weights (`MMW_*_BYTES` places).
struct WgCopies {
    int xr, xp, wo, w_elem, w_dst;
};

__device__ __forceinline__ WgCopies wg_copies() {
    WgCopies c;
    c.xr = threadIdx.x / 16;
    c.xp = threadIdx.x % 16;
    c.wo = threadIdx.x / 16;
    const int run = threadIdx.x % 16, tt = run / 4, ws = run % 4;
    c.w_elem = 16 * tt + 4 * ws;
    c.w_dst = ws * MMW_STEP_BYTES + (tt / 2) * MMW_HALF_BYTES + (c.wo / 8) * MMW_GROUP_BYTES + (c.wo % 8) * 16 +
              (tt % 2) * 8;
    return c;
}

// This thread's x pieces of chunk c of split rows r0 + xr + 16i (i < ROWS / 16) into a stage's
// split rows `xs_dst` (zeros past `rows`).
template <int ROWS>
__device__ __forceinline__ void wg_copy_x(unsigned* xs_dst, const unsigned* __restrict__ xs, size_t xs_stride, int r0,
                                          int rows, int c, const WgCopies& cp) {
#pragma unroll
    for (int i = 0; i < ROWS / 16; i++) {
        const int row = cp.xr + 16 * i;
        const bool in = r0 + row < rows;
        cp_async16(xs_dst + row * MMA_CHUNK + 4 * (cp.xp ^ (row & 7)),
                   in ? xs + (size_t)(r0 + row) * xs_stride + (size_t)c * MMA_CHUNK + 4 * cp.xp : xs, in);
    }
}

// This warp's A fragments of a chunk's four k16 steps from a stage's split rows: its ldmatrix
// row `x_row` (swizzle x_swz, the step's slot half x_half), the hi halves into ah and, with
// MMA_SPLIT, the lo halves into al.
__device__ __forceinline__ void wg_x_fragments(const unsigned* xs_s, int x_row, int x_half, int x_swz,
                                               unsigned (&ah)[4][4], unsigned (&al)[4][4]) {
#pragma unroll
    for (int s = 0; s < 4; s++) {
        const unsigned* at = xs_s + x_row + 4 * ((2 * s + x_half) ^ x_swz);
        ldmatrix_x4(at, ah[s][0], ah[s][1], ah[s][2], ah[s][3]);
        if (MMA_SPLIT) ldmatrix_x4(at + MMA_CHUNK / 2, al[s][0], al[s][1], al[s][2], al[s][3]);
    }
}

// y[r0 … r0 + MMW_ROWS, o0 … o0 + MMW_OUTS) (+)= x · Wᵀ over `xs`, the rows split by `split_rows_wg`.
extern "C" __global__ void __launch_bounds__(MMW_THREADS, 1)
matmul_bf16_wgmma(const unsigned* __restrict__ xs, const bf16_t* __restrict__ w, int k, int n_out,
                  float* __restrict__ y, int y_stride, int accumulate, int rows) {
    extern __shared__ float4 mmw_smem4[];
    unsigned char* smem = reinterpret_cast<unsigned char*>(mmw_smem4);
    constexpr int STAGE_BYTES = MMW_X_STAGE_WORDS * 4 + MMW_W_STAGE_BYTES;
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, g = lane / 4, t = lane % 4;
    const int r0 = blockIdx.x * MMW_ROWS, o0 = blockIdx.y * MMW_OUTS;
    matmul_start(w, o0, MMW_OUTS, n_out, (size_t)k * sizeof(bf16_t));
    const int chunks = (k + MMA_CHUNK - 1) / MMA_CHUNK;
    const size_t xs_stride = (size_t)chunks * MMA_CHUNK;

    // This thread's copies (`wg_copies`).
    static_assert(MMW_THREADS == 16 * 16 && MMW_OUTS == 128, "16 threads a row, 16 rows a pass, 128 outputs");
    const WgCopies cp = wg_copies();
    auto load = [&](int stage, int c) {
        unsigned char* base = smem + stage * STAGE_BYTES;
        wg_copy_x<MMW_ROWS>(reinterpret_cast<unsigned*>(base), xs, xs_stride, r0, rows, c, cp);
        unsigned char* w_base = base + MMW_X_STAGE_WORDS * 4;
        const bool k_in = c * MMA_CHUNK + cp.w_elem < k;
#pragma unroll
        for (int i = 0; i < MMW_OUTS / 16; i++) {
            const int o = cp.wo + 16 * i;
            const bool in = k_in && o0 + o < n_out;
            cp_async8(w_base + cp.w_dst + i * 2 * MMW_GROUP_BYTES,
                      in ? w + (size_t)(o0 + o) * k + (size_t)c * MMA_CHUNK + cp.w_elem : w, in);
        }
    };
    int load_c = 0, load_res = 0;
    auto next_load = [&]() {
        load_c += MMT_RESIDUES;
        if (load_c >= chunks) load_c = ++load_res;
    };

    // This lane's ldmatrix row of its warp's 16 and its swizzle; which half of a step's slots.
    const int x_row = ((warp / 4) * 64 + (warp % 4) * 16 + (lane & 15)) * MMA_CHUNK;
    const int x_swz = lane & 7, x_half = lane >> 4;

    float acc[MMW_OUTS / 2], total[MMW_OUTS / 2];
#pragma unroll
    for (int i = 0; i < MMW_OUTS / 2; i++) acc[i] = total[i] = 0.0f;

#pragma unroll
    for (int s = 0; s < MMW_STAGES - 1; s++) {
        if (s < chunks) {
            load(s, load_c);
            next_load();
        }
        cp_async_commit();
    }
    int v = 0;  // chunks multiplied
    for (int res = 0; res < MMT_RESIDUES; res++) {
        for (int c = res; c < chunks; c += MMT_RESIDUES, v++) {
            cp_async_wait<MMW_STAGES - 2>();
            // The copies are the generic proxy's writes; wgmma reads through the async proxy.
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            __syncthreads();
            if (v + MMW_STAGES - 1 < chunks) {
                load((v + MMW_STAGES - 1) % MMW_STAGES, load_c);
                next_load();
            }
            cp_async_commit();
            const unsigned char* stage = smem + (v % MMW_STAGES) * STAGE_BYTES;
            const unsigned* xs_s = reinterpret_cast<const unsigned*>(stage);
            const unsigned char* ws_s = stage + MMW_X_STAGE_WORDS * 4;
            unsigned ah[4][4], al[4][4];
            wg_x_fragments(xs_s, x_row, x_half, x_swz, ah, al);
            wgmma_pin(acc);
            wgmma_fence();
#pragma unroll
            for (int s = 0; s < 4; s++) {
                const unsigned long long b = wgmma_desc(ws_s + s * MMW_STEP_BYTES, MMW_HALF_BYTES, MMW_GROUP_BYTES);
                wgmma_m64n128k16(acc, ah[s][0], ah[s][1], ah[s][2], ah[s][3], b);
                if (MMA_SPLIT) wgmma_m64n128k16(acc, al[s][0], al[s][1], al[s][2], al[s][3], b);
            }
            wgmma_commit();
            // The A registers and this stage are free again only when the products are done.
            wgmma_wait_all();
            wgmma_pin(acc);
        }
        // Residue `res` done (or empty: a zero partial).
#pragma unroll
        for (int i = 0; i < MMW_OUTS / 2; i++) {
            total[i] = res == 0 ? acc[i] : total[i] + acc[i];
            acc[i] = 0.0f;
        }
    }
    cp_async_wait<0>();
#pragma unroll
    for (int i = 0; i < MMW_OUTS / 2; i++) {
        const int r = r0 + (warp / 4) * 64 + (warp % 4) * 16 + g + ((i % 4) / 2) * 8;
        const int o = o0 + (i / 4) * MMA_COLS + 2 * t + i % 2;
        if (r < rows && o < n_out) {
            float* out = y + (size_t)r * y_stride + o;
            *out = accumulate ? *out + total[i] : total[i];
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The k split of a decode round (17–64 rows) on the warpgroup MMA with the operands swapped
// (`matmul_bf16_wg_split_n32` / `_n64`, where `wg_split_takes` in mod.rs says): yᵀ = W · xᵀ, so a wgmma
// m64nNk16's A (64 outputs × 16 k-slots) is the weights, straight from global memory into
// registers as the 16-row kernels load them (lane (g, t) elements 16t … 16t + 15 of a chunk of
// its outputs g and g + 8: two 16-byte loads each, no shared memory, no 8-byte copies), and B
// (16 k-slots × N rows) is x's split rows from shared memory in `split_rows`' order, which is
// already the A fragment's: word 8s + 4h + t of a chunk holds elements 16t + 4s + 2h and + 1,
// the k-slots 8h + 2t + {0, 1} of step s, for W (a0, a1: h 0; a2, a3: h 1) and x alike. So a
// step sums the same 16 products as `mma_tile`'s step (a wgmma sums a step as mma.sync does,
// whatever the k-slots and whichever operand holds which factor: the tensor-core probe of
// session 22), the hi then the lo product; a block walks one residue's chunks (blockIdx.z) in
// order from a zero partial, and `matmul_fold_residues` folds the partials in residue order: the
// bits of `matmul_bf16_tiled_split`, whose partials and grid these are.
//
// A block: two warpgroups of 64 outputs (MWS_OUTS 128, the tiles' block), N rows. Shared
// memory: MWS_X_STAGES chunks of x, each 16-byte piece p (0–7 hi, 8–15 lo: 2s + h) of row r at
// (p·N + r)·16 — for step s a k-half's core matrices (8 rows × 16 bytes) 128 bytes apart, the
// other k-half N·16 bytes on (the descriptor's offsets). MWS_W_DEPTH chunks of weights are in
// registers ahead of the products (the loads of the first issued before the kernel ahead
// finishes: weights are never written while kernels run), loaded unconditionally and masked
// where multiplied.
//
// Host defines: MWS_X_STAGES, MWS_W_DEPTH.

#define MWS_OUTS 128
#define MWS_THREADS 256

// d += A · B for a warpgroup: A (64 × 16, this warp's 16 rows in mma.sync's fragment) from
// registers, B (16 × N) by its descriptor; d as N / 8 mma.sync n-tiles, d[4j + i] that of n-tile j.
template <int N>
__device__ __forceinline__ void wgmma_m64k16(float* d, unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                             unsigned long long b);

template <>
__device__ __forceinline__ void wgmma_m64k16<32>(float* d, unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                                 unsigned long long b) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(1));
}

template <>
__device__ __forceinline__ void wgmma_m64k16<64>(float* d, unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                                 unsigned long long b) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(1));
}

// A chunk's four steps' A registers of the swapped chain from a lane's 16 bf16 elements 16t …
// 16t + 15 of its two rows (ga, ha: row g's first and second 8; gb, hb: row g + 8's), each row's
// masked by ma / mb (all ones, or zeros where the row or the piece is outside the matrix): step
// s's k-slots 2t + {0, 1} (a[s][0] row g, a[s][1] row g + 8) and 8 + 2t + {0, 1} (a[s][2],
// a[s][3]) hold elements 16t + 4s + {0, 1} and + {2, 3}.
__device__ __forceinline__ void swapped_a(const uint4& ga, const uint4& ha, const uint4& gb, const uint4& hb,
                                          unsigned ma, unsigned mb, unsigned (&a)[4][4]) {
    const unsigned g_a[4][4] = {
        {ga.x, gb.x, ga.y, gb.y}, {ga.z, gb.z, ga.w, gb.w}, {ha.x, hb.x, ha.y, hb.y}, {ha.z, hb.z, ha.w, hb.w}};
#pragma unroll
    for (int s = 0; s < 4; s++)
#pragma unroll
        for (int q = 0; q < 4; q++) a[s][q] = g_a[s][q] & (q % 2 ? mb : ma);
}

template <int N>
__device__ __forceinline__ void wgmma_pin_n(float* d) {
#pragma unroll
    for (int i = 0; i < N / 2; i++) asm volatile("" : "+f"(d[i])::"memory");
}

// Residue blockIdx.z's partial of rows r0 … r0 + N × outputs o0 … o0 + MWS_OUTS into `part` +
// z · part_stride ([rows, n_out]); `xs` the rows split by `split_rows`. With ALL (a prompt's
// matmul, where `wg_swap_takes` in mod.rs says) the block walks every residue itself, residue 0's
// chunks, then 1's, … each residue's partial from zero folded into its total in residue order
// (total = p0, then total += pr: the tiles' operations, and the FP8 kernels' sum of their warps
// in warp order), and writes y (stride part_stride, added to it with `accumulate`) instead of a
// partial. With FP8, W is e4m3
// bytes scaled by `scales` in blocks of br × bc (`mma_tile_fp8`'s chain: each chunk's products
// summed unscaled from zero into `tmp`, then acc = fma(s, tmp, acc) with the output's scale):
// a lane's chunk of a row is one 16-byte piece, each word a step's four elements, widened
// exactly to bf16 pairs.
template <int N, bool FP8, bool ALL = false>
__device__ __forceinline__ void matmul_wg_split_block(const unsigned* __restrict__ xs, const void* __restrict__ w,
                                                      const float* __restrict__ scales, int br, int bc, int k,
                                                      int n_out, float* __restrict__ part, int part_stride,
                                                      int rows, int accumulate = 0) {
    constexpr int X_STAGE_BYTES = N * MMT_X_PIECES * 16;
    constexpr int X_PIECES = N * MMT_X_PIECES / MWS_THREADS;  // a thread's copies a chunk
    static_assert(X_PIECES * MWS_THREADS == N * MMT_X_PIECES, "every thread copies as many pieces");
    constexpr int ELEM = FP8 ? 1 : 2;    // bytes a weight
    constexpr int PIECES = FP8 ? 1 : 2;  // 16-byte pieces of a lane's 16 elements
    extern __shared__ float4 mws_smem4[];
    unsigned char* smem = reinterpret_cast<unsigned char*>(mws_smem4);
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, g = lane / 4, t = lane % 4;
    const int r0 = blockIdx.x * N, o0 = blockIdx.y * MWS_OUTS, res = ALL ? 0 : blockIdx.z;
    const int chunks = (k + MMA_CHUNK - 1) / MMA_CHUNK;
    const size_t xs_stride = (size_t)chunks * MMA_CHUNK;
    const int visits = ALL ? chunks : res < chunks ? (chunks - res + MMT_RESIDUES - 1) / MMT_RESIDUES : 0;
    // The chunk after c: the next of its residue, or with ALL past a residue's last the next
    // residue's first (residue-major order: residue 0's chunks 0, 8, 16 …, then 1's …). Three
    // cursors walk it: the weights' loads, x's copies and the products.
    auto next_chunk = [&](int c) {
        return !ALL || c + MMT_RESIDUES < chunks ? c + MMT_RESIDUES : c % MMT_RESIDUES + 1;
    };
    int w_next = res, x_next = res, c_next = res;

    // This lane's weight rows: outputs oa and oa + 8 of its warp's 16 (A's rows g and g + 8).
    const int oa = o0 + 64 * (warp / 4) + 16 * (warp % 4) + g;
    const bool a_in = oa < n_out, b_in = oa + 8 < n_out;
    // Byte offsets of the rows and the scale rows in 32 bits (the host asserts a matrix under
    // 4 GiB): 64-bit pointers cost FP8 n64 its last registers and spilled the scales between a
    // chunk's load and its products.
    const unsigned char* wbytes = reinterpret_cast<const unsigned char*>(w);
    const unsigned wa = ((unsigned)(a_in ? oa : 0) * k + 16 * t) * ELEM;
    const unsigned wb = ((unsigned)(b_in ? oa + 8 : 0) * k + 16 * t) * ELEM;
    // FP8: the rows' scales along k (a row block holds both rows of a lane only when br ≥ 16).
    const unsigned sa = FP8 ? (unsigned)(((a_in ? oa : 0) / br) * (k / bc)) : 0u;
    const unsigned sb = FP8 ? (unsigned)(((b_in ? oa + 8 : 0) / br) * (k / bc)) : 0u;
    // Chunk c's pieces of the lane's rows (q[0 …]: row g, q[PIECES …]: row g + 8), and with FP8
    // its two scales. Loaded whatever the bounds, from a row's start where the piece is past k
    // (k % 16 == 0: a piece is all in or all out; k ≥ 16) and from row 0 past n_out, and zeroed
    // by `chunk_mask` where the chunk is multiplied: a select at the load would make the
    // registers wait for the load there (ptxas builds the wgmma's register groups with moves
    // right after it), leaving one chunk in flight instead of MWS_W_DEPTH.
    auto load_w = [&](uint4* q, float* sc, int c) {
        const int e = c * MMA_CHUNK + 16 * t < k ? c * MMA_CHUNK : -16 * t;
#pragma unroll
        for (int p = 0; p < PIECES; p++) {
            q[p] = *reinterpret_cast<const uint4*>(wbytes + wa + (e + 8 * p) * ELEM);
            q[PIECES + p] = *reinterpret_cast<const uint4*>(wbytes + wb + (e + 8 * p) * ELEM);
        }
        if (FP8) {
            // c · 64 < k for every chunk a residue visits.
            sc[0] = scales[sa + c * MMA_CHUNK / bc];
            sc[1] = scales[sb + c * MMA_CHUNK / bc];
        }
    };
    // All ones where chunk c's pieces of the row (g: a_in; g + 8: b_in) are in the matrix.
    auto chunk_mask = [&](int c, bool row_in) { return c * MMA_CHUNK + 16 * t < k && row_in ? ~0u : 0u; };

    pdl_launch_dependents();
    // A split's first residue alone pulls the tile's weights into L2, as the tiles' split does.
    if (res == 0 && prefetches_rows(n_out, (size_t)k * ELEM))
        prefetch_rows_l2(w, o0, MWS_OUTS, n_out, (size_t)k * ELEM);
    uint4 wq[MWS_W_DEPTH][2 * PIECES];
    float wsc[MWS_W_DEPTH][2];
#pragma unroll
    for (int d = 0; d < MWS_W_DEPTH; d++)
        if (d < visits) {
            load_w(wq[d], wsc[d], w_next);
            w_next = next_chunk(w_next);
        }
    // x is the kernel ahead's output.
    pdl_wait();

    // This thread's x copies: with i = threadIdx.x + j · MWS_THREADS, pieces p = 2(i / 2N) +
    // i % 2 of rows r = (i / 2) % N — two lanes a row's 32 bytes, one sector — rows past `rows`
    // zeros.
    auto load_x = [&](int stage, int c) {
        unsigned char* base = smem + stage * X_STAGE_BYTES;
#pragma unroll
        for (int j = 0; j < X_PIECES; j++) {
            const unsigned i = threadIdx.x + j * MWS_THREADS;
            const int r = (i / 2) % N, p = 2 * (i / (2 * N)) + i % 2;
            const bool in = r0 + r < rows;
            cp_async16(base + (p * N + r) * 16,
                       in ? xs + (size_t)(r0 + r) * xs_stride + (size_t)c * MMA_CHUNK + 4 * p : xs, in);
        }
    };
#pragma unroll
    for (int s = 0; s < MWS_X_STAGES - 1; s++) {
        if (s < visits) {
            load_x(s, x_next);
            x_next = next_chunk(x_next);
        }
        cp_async_commit();
    }

    // The wgmmas accumulate into acc (bf16), or into tmp, a chunk's unscaled sum (FP8).
    float acc[N / 2], tmp[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; i++) acc[i] = tmp[i] = 0.0f;
    // With ALL, this thread's total in shared memory after the x stages, a column of its own
    // (no barrier): in registers beside acc and two chunks of weights it took 195 registers,
    // one block a multiprocessor; here 126, two (FP8's tmp beside acc: no third accumulator in
    // registers). Zero first: with k = 0 no residue folds.
    float* const total = reinterpret_cast<float*>(smem + MWS_X_STAGES * X_STAGE_BYTES) + threadIdx.x;
    if (ALL) {
#pragma unroll
        for (int i = 0; i < N / 2; i++) total[i * MWS_THREADS] = 0.0f;
    }
    float* const sum = FP8 ? tmp : acc;
    for (int v0 = 0; v0 < visits; v0 += MWS_W_DEPTH) {
#pragma unroll
        for (int d = 0; d < MWS_W_DEPTH; d++) {
            const int v = v0 + d;
            if (v >= visits) break;
            cp_async_wait<MWS_X_STAGES - 2>();
            // The copies are the generic proxy's writes; wgmma reads through the async proxy.
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            __syncthreads();
            if (v + MWS_X_STAGES - 1 < visits) {
                load_x((v + MWS_X_STAGES - 1) % MWS_X_STAGES, x_next);
                x_next = next_chunk(x_next);
            }
            cp_async_commit();
            const unsigned char* stage = smem + (v % MWS_X_STAGES) * X_STAGE_BYTES;
            const int c = c_next;
            c_next = next_chunk(c_next);
            const unsigned ma = chunk_mask(c, a_in), mb = chunk_mask(c, b_in);
            // Step s's A: k-slots 2t + {0, 1} (a[s][0] row g, a[s][1] row g + 8) and 8 + 2t +
            // {0, 1} (a[s][2], a[s][3]): elements 16t + 4s + {0, 1} and + {2, 3}.
            unsigned a[4][4];
            if (FP8) {
                const uint4 qa = wq[d][0], qb = wq[d][PIECES];
#pragma unroll
                for (int s = 0; s < 4; s++) {
                    const unsigned wa_s = s == 0 ? qa.x : s == 1 ? qa.y : s == 2 ? qa.z : qa.w;
                    const unsigned wb_s = s == 0 ? qb.x : s == 1 ? qb.y : s == 2 ? qb.z : qb.w;
                    a[s][0] = e4m3_pair(wa_s) & ma;
                    a[s][1] = e4m3_pair(wb_s) & mb;
                    a[s][2] = e4m3_pair(wa_s >> 16) & ma;
                    a[s][3] = e4m3_pair(wb_s >> 16) & mb;
                }
            } else {
                swapped_a(wq[d][0], wq[d][PIECES - 1], wq[d][PIECES], wq[d][2 * PIECES - 1], ma, mb, a);
            }
            // Every A register written before the fence (else ptxas fences each step's wgmma).
#pragma unroll
            for (int s = 0; s < 4; s++)
#pragma unroll
                for (int q = 0; q < 4; q++) asm volatile("" : "+r"(a[s][q]));
            // The chunk's weights are in `a` now: its registers take the chunk MWS_W_DEPTH on,
            // whose loads then fly during these products (the loads share one scoreboard, so a
            // wait for one waits for all: issued after the products, the next visit's wait
            // covered them too).
            const float s_a = FP8 ? wsc[d][0] : 0.0f, s_b = FP8 ? wsc[d][1] : 0.0f;
            if (v + MWS_W_DEPTH < visits) {
                load_w(wq[d], wsc[d], w_next);
                w_next = next_chunk(w_next);
            }
            wgmma_pin_n<N>(sum);
            wgmma_fence();
#pragma unroll
            for (int s = 0; s < 4; s++) {
                wgmma_m64k16<N>(sum, a[s][0], a[s][1], a[s][2], a[s][3],
                                wgmma_desc(stage + 2 * s * N * 16, N * 16, 128));
                if (MMA_SPLIT)
                    wgmma_m64k16<N>(sum, a[s][0], a[s][1], a[s][2], a[s][3],
                                    wgmma_desc(stage + (8 + 2 * s) * N * 16, N * 16, 128));
            }
            wgmma_commit();
            // The A registers and this stage are free again only when the products are done.
            wgmma_wait_all();
            wgmma_pin_n<N>(sum);
            if (FP8) {
                // d[4j + i] is output oa + 8·((i % 4) / 2): its scale, then the next chunk's
                // sum from zero.
#pragma unroll
                for (int i = 0; i < N / 2; i++) {
                    acc[i] = fmaf((i % 4) / 2 ? s_b : s_a, tmp[i], acc[i]);
                    tmp[i] = 0.0f;
                }
            }
            if (ALL && c + MMT_RESIDUES >= chunks) {
                // Residue c % 8 done: into the total in residue order, the next from zero.
#pragma unroll
                for (int i = 0; i < N / 2; i++) {
                    float& t_i = total[i * MWS_THREADS];
                    t_i = c % MMT_RESIDUES == 0 ? acc[i] : t_i + acc[i];
                    acc[i] = 0.0f;
                }
            }
        }
    }
    cp_async_wait<0>();
    // d[4j + i]: output oa + 8·((i % 4) / 2), row 8j + 2t + i % 2 (an empty residue: a zero
    // partial, as the tiles' split writes it; with ALL, its zero added to the total, as the
    // tiles add it: -0 + 0 is +0).
#pragma unroll
    for (int i = 0; i < N / 2; i++) {
        const int o = oa + 8 * ((i % 4) / 2);
        const int r = r0 + (i / 4) * 8 + 2 * t + i % 2;
        if (ALL) {
            // The empty residues' zeros: one + 0 is all of them (x + 0 + 0 = x + 0).
            float t_i = total[i * MWS_THREADS];
            if (chunks < MMT_RESIDUES) t_i += 0.0f;
            if (r < rows && o < n_out) {
                float* out = part + (size_t)r * part_stride + o;
                *out = accumulate ? *out + t_i : t_i;
            }
        } else if (r < rows && o < n_out) {
            part[(size_t)res * part_stride + (size_t)r * n_out + o] = acc[i];
        }
    }
}

// Grid (ceil(rows / N), ceil(n_out / MWS_OUTS), MMT_RESIDUES), as `matmul_bf16_tiled_split`'s.
extern "C" __global__ void __launch_bounds__(MWS_THREADS, 2)
matmul_bf16_wg_split_n32(const unsigned* __restrict__ xs, const bf16_t* __restrict__ w, int k, int n_out,
                         float* __restrict__ part, int part_stride, int rows) {
    matmul_wg_split_block<32, false>(xs, w, nullptr, 1, 1, k, n_out, part, part_stride, rows);
}

extern "C" __global__ void __launch_bounds__(MWS_THREADS, 2)
matmul_bf16_wg_split_n64(const unsigned* __restrict__ xs, const bf16_t* __restrict__ w, int k, int n_out,
                         float* __restrict__ part, int part_stride, int rows) {
    matmul_wg_split_block<64, false>(xs, w, nullptr, 1, 1, k, n_out, part, part_stride, rows);
}

// A prompt's matmul (`wg_swap_takes`): the tiles' arguments and their bits, each weight read once per
// 64 rows. Grid (ceil(rows / 64), ceil(n_out / MWS_OUTS)).
extern "C" __global__ void __launch_bounds__(MWS_THREADS, 2)
matmul_bf16_wg_swap(const unsigned* __restrict__ xs, const bf16_t* __restrict__ w, int k, int n_out,
                    float* __restrict__ y, int y_stride, int accumulate, int rows) {
    matmul_wg_split_block<64, false, true>(xs, w, nullptr, 1, 1, k, n_out, y, y_stride, rows, accumulate);
}

// FP8 (block-scaled e4m3, `scales` [n_out / br, k / bc]): the chain of `matmul_fp8`'s kernels,
// whose warps' sums in warp order are this split's partials folded in residue order.
extern "C" __global__ void __launch_bounds__(MWS_THREADS, 2)
matmul_fp8_wg_split_n32(const unsigned* __restrict__ xs, const unsigned char* __restrict__ w,
                        const float* __restrict__ scales, int br, int bc, int k, int n_out,
                        float* __restrict__ part, int part_stride, int rows) {
    matmul_wg_split_block<32, true>(xs, w, scales, br, bc, k, n_out, part, part_stride, rows);
}

extern "C" __global__ void __launch_bounds__(MWS_THREADS, 2)
matmul_fp8_wg_split_n64(const unsigned* __restrict__ xs, const unsigned char* __restrict__ w,
                        const float* __restrict__ scales, int br, int bc, int k, int n_out,
                        float* __restrict__ part, int part_stride, int rows) {
    matmul_wg_split_block<64, true>(xs, w, scales, br, bc, k, n_out, part, part_stride, rows);
}

// A prompt's FP8 matmul (`wg_swap_takes`): the chain of `matmul_fp8`'s kernels (a residue's chunks
// each summed from zero and scaled into its partial, the partials summed in residue order), each
// weight read once per 64 rows where the 16-row FP8 kernels read it once per 16. Grid
// (ceil(rows / 64), ceil(n_out / MWS_OUTS)).
extern "C" __global__ void __launch_bounds__(MWS_THREADS, 2)
matmul_fp8_wg_swap(const unsigned* __restrict__ xs, const unsigned char* __restrict__ w,
                   const float* __restrict__ scales, int br, int bc, int k, int n_out, float* __restrict__ y,
                   int y_stride, int accumulate, int rows) {
    matmul_wg_split_block<64, true, true>(xs, w, scales, br, bc, k, n_out, y, y_stride, rows, accumulate);
}

// ---------------------------------------------------------------------------------------------
// The k split of a 48–64-row decode round on the warpgroup MMA, folded as the tiles' split is:
// `matmul_bf16_tiled_split_fold`'s (or, unfolded, `matmul_bf16_tiled_split`'s) grid, cluster,
// arguments, partials and fold, with the products of `matmul_bf16_wgmma`
// (FLASHLANE_MATMUL_WG_FOLD=1, an A/B switch; session 68 found cuBLAS taking Qwen3-4B's 64-row
// projections in 0.58× the tiles' time on the H100).
//
// A block: 64 rows (x's split rows in the warpgroup's k order, `split_rows_wg` /
// `split_rows_norm_wg`, from registers by `ldmatrix` as `matmul_bf16_wgmma` loads them) × the
// tiles' 128 outputs, two warpgroups: warpgroup h multiplies all 64 rows by outputs 64h … 64h +
// 63 (m64n64k16, B the weights from shared memory by descriptor, copied in the 8-byte runs and
// core-matrix places of `matmul_bf16_wgmma`), so for a SwiGLU fold warpgroup 0 takes the tile's
// gate rows and warpgroup 1 their up rows. Residue blockIdx.z's chunks in order from a zero
// partial, each step the hi then the lo product: `matmul_bf16_wgmma`'s operations on the same
// values, whose bits are the tiles' (session 23), so the partial is the tiles' split's and the
// fold its fold.
#define MWF_ROWS 64
#define MWF_OUTS 128
#define MWF_THREADS 256
#define MWF_X_STAGE_BYTES (MWF_ROWS * MMA_CHUNK * 4)       // a chunk of the split rows: 32 hi, 32 lo words a row
// A chunk of the tile's weights, placed as `matmul_bf16_wgmma` places its 128 outputs' (`wg_copies`).
#define MWF_STAGE_BYTES (MWF_X_STAGE_BYTES + MMW_W_STAGE_BYTES)

// FOLD: MMT_FOLD_PLAIN or MMT_FOLD_SWIGLU, the cluster's fold into y (`mmt_cluster_fold`);
// MMT_FOLD_NONE, residue blockIdx.z's partial into y + z · part_stride ([rows, n_out], y_stride
// n_out), for `matmul_fold_residues` (`matmul_bf16_tiled_split`'s partials: a split the cluster
// rule leaves unfolded).
template <int FOLD>
__device__ __forceinline__ void matmul_wg_fold_block(const unsigned* __restrict__ xs, const bf16_t* __restrict__ w,
                                                     int k, int n_out, float* __restrict__ y, int y_stride,
                                                     int accumulate, int rows, int part_stride = 0) {
    static_assert(MWF_THREADS == MMT_WARPS * WARP, "mmt_cluster_fold walks the tiles' threads");
    static_assert(MMT_STAGES * MWF_STAGE_BYTES >= MWF_ROWS * (MWF_OUTS + MMT_FOLD_PAD) * 4,
                  "the stages' shared memory holds the block's partial for the cluster's fold");
    extern __shared__ float4 mwf_smem4[];
    unsigned char* smem = reinterpret_cast<unsigned char*>(mwf_smem4);
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, g = lane / 4, t = lane % 4;
    const int h = warp / 4;  // the warpgroup: outputs 64h … 64h + 63 of the tile
    const int r0 = blockIdx.x * MWF_ROWS, o0 = blockIdx.y * MWF_OUTS;
    const int chunks = (k + MMA_CHUNK - 1) / MMA_CHUNK;
    const size_t xs_stride = (size_t)chunks * MMA_CHUNK;
    const int res = blockIdx.z;
    const int visits = res < chunks ? (chunks - res + MMT_RESIDUES - 1) / MMT_RESIDUES : 0;
    auto chunk = [&](int v) { return res + v * MMT_RESIDUES; };  // the chunk of visit v
    // A SwiGLU tile: units u0 … u0 + 63, their gate rows (local outputs 0–63) then their up rows.
    const int width = n_out / 2, u0 = blockIdx.y * (MWF_OUTS / 2);
    // As the tiles' split starts (with MMT_EARLY_WEIGHTS the wait comes below).
    tile_start<FOLD>(w, k, n_out, o0, MWF_OUTS, u0, width, res == 0);

    // This thread's copies (`wg_copies`, `matmul_bf16_wgmma`'s).
    static_assert(MWF_THREADS == 16 * 16 && MWF_OUTS == MMW_OUTS,
                  "16 threads a row, 16 rows a pass, the weights placed as matmul_bf16_wgmma's");
    const WgCopies cp = wg_copies();
    auto load_x = [&](int stage, int c) {
        wg_copy_x<MWF_ROWS>(reinterpret_cast<unsigned*>(smem + stage * MWF_STAGE_BYTES), xs, xs_stride, r0, rows, c, cp);
    };
    auto load_w = [&](int stage, int c) {
        unsigned char* w_base = smem + stage * MWF_STAGE_BYTES + MWF_X_STAGE_BYTES;
        const bool k_in = c * MMA_CHUNK + cp.w_elem < k;
#pragma unroll
        for (int i = 0; i < MWF_OUTS / 16; i++) {
            const int ol = cp.wo + 16 * i;
            int o;
            bool in;
            if (FOLD == MMT_FOLD_SWIGLU) {
                const int unit = u0 + ol % (MWF_OUTS / 2);
                o = ol < MWF_OUTS / 2 ? unit : width + unit;
                in = k_in && unit < width;
            } else {
                o = o0 + ol;
                in = k_in && o < n_out;
            }
            cp_async8(w_base + cp.w_dst + i * 2 * MMW_GROUP_BYTES,
                      in ? w + (size_t)o * k + (size_t)c * MMA_CHUNK + cp.w_elem : w, in);
        }
    };
    auto load = [&](int stage, int c) {
        load_x(stage, c);
        load_w(stage, c);
    };

    // This lane's ldmatrix row of its warp's 16 (both warpgroups take all 64 rows) and its
    // swizzle; which half of a step's slots.
    const int x_row = ((warp % 4) * 16 + (lane & 15)) * MMA_CHUNK;
    const int x_swz = lane & 7, x_half = lane >> 4;

    float acc[32];
#pragma unroll
    for (int i = 0; i < 32; i++) acc[i] = 0.0f;

    if (MMT_EARLY_WEIGHTS) {
        // The first stages' weights (never written while kernels run) before the wait for the
        // kernel ahead, whose output x is; their copies join the first stage's commit group, so
        // that group's wait covers them all (as the tiles do).
#pragma unroll
        for (int s = 0; s < MMT_STAGES - 1; s++)
            if (s < visits) load_w(s, chunk(s));
        pdl_wait();
    }
#pragma unroll
    for (int s = 0; s < MMT_STAGES - 1; s++) {
        if (s < visits) {
            if (MMT_EARLY_WEIGHTS)
                load_x(s, chunk(s));
            else
                load(s, chunk(s));
        }
        cp_async_commit();
    }
    for (int v = 0; v < visits; v++) {
        cp_async_wait<MMT_STAGES - 2>();
        // The copies are the generic proxy's writes; wgmma reads through the async proxy.
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        if (v + MMT_STAGES - 1 < visits) load((v + MMT_STAGES - 1) % MMT_STAGES, chunk(v + MMT_STAGES - 1));
        cp_async_commit();
        const unsigned char* stage = smem + (v % MMT_STAGES) * MWF_STAGE_BYTES;
        const unsigned* xs_s = reinterpret_cast<const unsigned*>(stage);
        const unsigned char* ws_s = stage + MWF_X_STAGE_BYTES + h * 8 * MMW_GROUP_BYTES;
        unsigned ah[4][4], al[4][4];
        wg_x_fragments(xs_s, x_row, x_half, x_swz, ah, al);
        wgmma_pin_n<64>(acc);
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < 4; s++) {
            const unsigned long long b = wgmma_desc(ws_s + s * MMW_STEP_BYTES, MMW_HALF_BYTES, MMW_GROUP_BYTES);
            wgmma_m64k16<64>(acc, ah[s][0], ah[s][1], ah[s][2], ah[s][3], b);
            if (MMA_SPLIT) wgmma_m64k16<64>(acc, al[s][0], al[s][1], al[s][2], al[s][3], b);
        }
        wgmma_commit();
        // The A registers and this stage are free again only when the products are done.
        wgmma_wait_all();
        wgmma_pin_n<64>(acc);
    }
    cp_async_wait<0>();
    // Accumulator i's row and output in the tile (an m64n64 D fragment).
    auto tile_row = [&](int i) { return (warp % 4) * 16 + g + ((i % 4) / 2) * 8; };
    auto tile_out = [&](int i) { return 64 * h + (i / 4) * MMA_COLS + 2 * t + i % 2; };
    if (FOLD == MMT_FOLD_NONE) {
#pragma unroll
        for (int i = 0; i < 32; i++) {
            const int r = r0 + tile_row(i), o = o0 + tile_out(i);
            if (r < rows && o < n_out) y[(size_t)res * part_stride + (size_t)r * y_stride + o] = acc[i];
        }
        return;
    }
    // The partial into this block's shared memory (every warp done with the stages first), rows
    // MWF_OUTS + MMT_FOLD_PAD floats apart, then the cluster's fold.
    __syncthreads();
    float* mine = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int i = 0; i < 32; i++) mine[tile_row(i) * (MWF_OUTS + MMT_FOLD_PAD) + tile_out(i)] = acc[i];
    mmt_cluster_fold<MWF_ROWS, MWF_OUTS, FOLD>(mine, y, y_stride, accumulate, rows, n_out, r0, o0, u0, width);
}

// Grid (ceil(rows / 64), ceil(n_out / 128), MMT_RESIDUES); `matmul_bf16_tiled_split_fold`'s
// arguments, over rows split by `split_rows_wg` / `split_rows_norm_wg`.
extern "C" __global__ void __launch_bounds__(MWF_THREADS, 2) __cluster_dims__(1, 1, MMT_RESIDUES)
matmul_bf16_wg_split_fold(const unsigned* __restrict__ xs, const bf16_t* __restrict__ w, int k, int n_out,
                          float* __restrict__ y, int y_stride, int accumulate, int rows) {
    matmul_wg_fold_block<MMT_FOLD_PLAIN>(xs, w, k, n_out, y, y_stride, accumulate, rows);
}

// The same split unfolded: `matmul_bf16_tiled_split`'s arguments, grid and partials (then
// `matmul_fold_residues` or its SwiGLU twin), where the cluster rule folds no split.
extern "C" __global__ void __launch_bounds__(MWF_THREADS, 2)
matmul_bf16_wg_split_partials(const unsigned* __restrict__ xs, const bf16_t* __restrict__ w, int k, int n_out,
                              float* __restrict__ part, int part_stride, int rows) {
    matmul_wg_fold_block<MMT_FOLD_NONE>(xs, w, k, n_out, part, n_out, 0, rows, part_stride);
}

// The same for a dense MLP's gate/up: `matmul_bf16_tiled_split_fold_swiglu`'s arguments and grid
// (ceil(rows / 64), ceil(width / 64), MMT_RESIDUES).
extern "C" __global__ void __launch_bounds__(MWF_THREADS, 2) __cluster_dims__(1, 1, MMT_RESIDUES)
matmul_bf16_wg_split_fold_swiglu(const unsigned* __restrict__ xs, const bf16_t* __restrict__ w, int k, int n_out,
                                 float* __restrict__ y, int y_stride, int accumulate, int rows) {
    matmul_wg_fold_block<MMT_FOLD_SWIGLU>(xs, w, k, n_out, y, y_stride, accumulate, rows);
}

// `split_rows_norm` in the warpgroup's k order (`split_rows_norm_of`).
extern "C" __global__ void __launch_bounds__(SPLIT_THREADS)
split_rows_norm_wg(const float* __restrict__ x, int rows, int k, const float* __restrict__ norm_w, float eps,
                   int kind, float* __restrict__ out, unsigned* __restrict__ xs) {
    split_rows_norm_of<true>(x, rows, k, norm_w, eps, kind, out, xs);
}
