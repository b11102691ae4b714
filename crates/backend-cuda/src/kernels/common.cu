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

// The sum over a block of NWARPS warps of each thread's `v`: each warp's butterfly, then warp 0
// adds the warps' sums by the same butterfly (lane w holding warp w's, zeros past NWARPS). A
// fixed order for a given NWARPS; every thread gets the total. `warp_sums` is NWARPS floats of
// shared memory, `total` one; every thread of the block must call it.
template <int NWARPS>
__device__ __forceinline__ float block_sum(float v, float* warp_sums, float* total) {
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    v = warp_sum(v);
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        const float t = warp_sum(lane < NWARPS ? warp_sums[lane] : 0.0f);
        if (lane == 0) *total = t;
    }
    __syncthreads();
    return *total;
}

// Programmatic dependent launch (sm_90; no-ops for a kernel launched without it): the host
// launches every kernel allowed to start before the one ahead of it on the stream has finished.
// Each kernel lets the next start at once (`pdl_launch_dependents`), and waits for the one ahead
// to finish, its writes visible, before it reads anything another kernel writes or writes
// anything (`pdl_wait`). Before the wait only the weights (never written while kernels run) may be
// touched: the matmuls pull theirs into L2 there, so a decode step's small matrices load while
// the kernel ahead of them still runs.
__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
#if FL_TIMELINE
// The kernel timeline (host: FLASHLANE_TIMELINE=1, `timeline.rs`; compiled in only then): thread
// 0 of each launch's block (0, 0, 0) takes a slot and writes there when it reached its wait for
// the kernel ahead, when that wait returned (%globaltimer, ns) and the return's rank among the
// module's (a second count, taken after the wait: a block 0 passes its wait only once the whole
// launch ahead, whose block 0 took its rank before finishing, has finished, so the ranks are the
// launches' order even where two stamps fall in one tick of the timer, and the slots, taken
// before the wait, need not be); FL_TIMELINE_CAP slots at most. The host zeroes both counts
// before a round and reads the slots after it. Only the slot is held across the wait, so that
// the probe adds as few live registers there as it can.
__device__ unsigned long long fl_timeline[3 * FL_TIMELINE_CAP];
// [0]: slots taken, [1]: returns ranked.
__device__ unsigned int fl_timeline_count[2];
__device__ __forceinline__ unsigned long long fl_globaltimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ void pdl_wait() {
    unsigned slot = FL_TIMELINE_CAP;
    if (threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) {
        const unsigned long long reached = fl_globaltimer();
        slot = atomicAdd(&fl_timeline_count[0], 1u);
        if (slot < FL_TIMELINE_CAP) fl_timeline[3 * slot] = reached;
    }
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (slot < FL_TIMELINE_CAP) {
        fl_timeline[3 * slot + 1] = fl_globaltimer();
        fl_timeline[3 * slot + 2] = atomicAdd(&fl_timeline_count[1], 1u);
    }
}
#else
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
#endif
// Both, for kernels with nothing to load before the wait.
__device__ __forceinline__ void pdl_start() {
    pdl_launch_dependents();
    pdl_wait();
}

// This thread's address of shared `p` in block `rank` of the cluster (sm_90 distributed shared
// memory).
__device__ __forceinline__ unsigned cluster_shared_addr(const void* p, unsigned rank) {
    unsigned long long generic = (unsigned long long)p, local;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(local) : "l"(generic));
    unsigned remote;
    asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"((unsigned)local), "r"(rank));
    return remote;
}

// A 32-bit float, word or 64-bit word at `p` (this block's address of it) in the shared memory of
// block `rank` of the cluster.
__device__ __forceinline__ float cluster_load_f32(const void* p, unsigned rank) {
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(cluster_shared_addr(p, rank)));
    return v;
}
__device__ __forceinline__ unsigned cluster_load_u32(const void* p, unsigned rank) {
    unsigned v;
    asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(cluster_shared_addr(p, rank)));
    return v;
}
__device__ __forceinline__ unsigned long long cluster_load_u64(const void* p, unsigned rank) {
    unsigned long long v;
    asm volatile("ld.shared::cluster.u64 %0, [%1];" : "=l"(v) : "r"(cluster_shared_addr(p, rank)));
    return v;
}

// The cluster's barrier in two halves, for work between them: this thread's arrival (its memory
// operations before it done and seen by the cluster's blocks after the wait), then its wait for
// every thread of the cluster's.
__device__ __forceinline__ void cluster_arrive() {
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

// Every thread of every block of the cluster waits here; writes to shared memory before it are
// seen by the cluster's blocks after it.
__device__ __forceinline__ void cluster_sync() {
    cluster_arrive();
    cluster_wait();
}

// Pulls `bytes` (a multiple of 16) from 16-byte-aligned global `p` into L2, without waiting.
__device__ __forceinline__ void prefetch_l2(const void* p, unsigned bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
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

// An RMSNorm's sum of squares has one order for every kernel that computes it (`rmsnorm_rows`,
// and the 16-row matmuls that normalise their own input): NORM_WARPS · WARP strided shares (share
// v sums elements v, v + NORM_WARPS · WARP, … in increasing order), each warp's 32 shares by
// `warp_sum`'s butterfly, then the NORM_WARPS warps' sums by the same butterfly.
static_assert(NORM_WARPS == WARP, "the warps' sums of a row are one warp's butterfly");

// Share `v` of a row's sum of squares (n elements).
__device__ __forceinline__ float norm_share(const float* xr, int n, int v) {
    float acc = 0.0f;
    for (int i = v; i < n; i += NORM_WARPS * WARP) acc += xr[i] * xr[i];
    return acc;
}

// 1 / RMS of a row of n elements whose sum of squares is `total`.
__device__ __forceinline__ float norm_inv(float total, int n, float eps) {
    return 1.0f / sqrtf(total / (float)n + eps);
}
