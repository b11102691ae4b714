// Sparse MoE with a gated shared expert (QWEN3_NEXT.md "Sparse MoE"), after the fused projection
// `mo` = [router logits (E) | shared-expert gate (1) | shared gate_proj (IS) | shared up_proj (IS)]:
// - `moe_up`: per (row, slot, unit) silu(gate)·up of the row's slot-th routed expert (slots in
//   ascending expert index), or of the shared expert for the last slot. One warp per unit.
// - `moe_down`: per (row, output) Σ_slots p·down_e(act) in ascending expert index, then
//   + sigmoid(shared gate)·shared_down(act), added to the residual `x`. One warp per output.
// The router (softmax in f32, top-k with ties to the lower index, renormalised when
// MOE_NORM_TOPK) is recomputed per warp from the row's logits: the same bits every time.
//
// Host defines: MOE_E, MOE_K, MOE_I, MOE_IS (0 without a shared expert), MOE_NORM_TOPK, MOE_H,
// MOE_WARPS.

// Without a shared expert `mo` holds the router logits only.
#define MOE_MO_W (MOE_IS > 0 ? MOE_E + 1 + 2 * MOE_IS : MOE_E)
#define MOE_ACT_W (MOE_K * MOE_I + MOE_IS)

// The row's top-k experts in ascending index and their probabilities.
__device__ void route(const float* logits, int* ids, float* probs) {
    float mx = -INFINITY;
    for (int e = 0; e < MOE_E; e++) mx = fmaxf(mx, logits[e]);
    float ex[MOE_E];
    float sum = 0.0f;
    for (int e = 0; e < MOE_E; e++) { ex[e] = expf(logits[e] - mx); sum += ex[e]; }
    bool taken[MOE_E];
    for (int e = 0; e < MOE_E; e++) taken[e] = false;
    for (int k = 0; k < MOE_K; k++) {
        int best = -1;
        for (int e = 0; e < MOE_E; e++)
            if (!taken[e] && (best < 0 || ex[e] > ex[best])) best = e;
        taken[best] = true;
        ids[k] = best;
        probs[k] = ex[best] / sum;
    }
    if (MOE_NORM_TOPK) {
        float s = 0.0f;
        for (int k = 0; k < MOE_K; k++) s += probs[k];
        for (int k = 0; k < MOE_K; k++) probs[k] /= s;
    }
    // Ascending expert index (transformers' summation order).
    for (int a = 1; a < MOE_K; a++)
        for (int b = a; b > 0 && ids[b] < ids[b - 1]; b--) {
            const int ti = ids[b]; ids[b] = ids[b - 1]; ids[b - 1] = ti;
            const float tp = probs[b]; probs[b] = probs[b - 1]; probs[b - 1] = tp;
        }
}

// Grid (ceil(max(I, IS) / MOE_WARPS), rows, MOE_K + (MOE_IS > 0)).
extern "C" __global__ void __launch_bounds__(MOE_WARPS * WARP)
moe_up(const float* __restrict__ xn, const float* __restrict__ mo, const bf16_t* __restrict__ gate_up,
       float* __restrict__ act) {
    const int lane = threadIdx.x % WARP, i = blockIdx.x * MOE_WARPS + threadIdx.x / WARP;
    const int r = blockIdx.y, slot = blockIdx.z;
    const float* mo_r = mo + (size_t)r * MOE_MO_W;
    float* act_r = act + (size_t)r * MOE_ACT_W;
    if (slot < MOE_K) {
        if (i >= MOE_I) return;
        int ids[MOE_K];
        float probs[MOE_K];
        route(mo_r, ids, probs);
        const bf16_t* w = gate_up + (size_t)ids[slot] * 2 * MOE_I * MOE_H;
        const float* x = xn + (size_t)r * MOE_H;
        const float g = warp_dot_bf16(x, w + (size_t)i * MOE_H, MOE_H, lane);
        const float u = warp_dot_bf16(x, w + (size_t)(MOE_I + i) * MOE_H, MOE_H, lane);
        if (lane == 0) act_r[slot * MOE_I + i] = siluf_(g) * u;
    } else {
        if (i >= MOE_IS || lane != 0) return;
        act_r[MOE_K * MOE_I + i] = siluf_(mo_r[MOE_E + 1 + i]) * mo_r[MOE_E + 1 + MOE_IS + i];
    }
}

// Grid (ceil(H / MOE_WARPS), rows). `down` is [E, H, I]; `shared_down` [H, IS].
extern "C" __global__ void __launch_bounds__(MOE_WARPS * WARP)
moe_down(const float* __restrict__ mo, const float* __restrict__ act, const bf16_t* __restrict__ down,
         const bf16_t* __restrict__ shared_down, float* __restrict__ x) {
    const int lane = threadIdx.x % WARP, o = blockIdx.x * MOE_WARPS + threadIdx.x / WARP;
    const int r = blockIdx.y;
    if (o >= MOE_H) return;
    const float* mo_r = mo + (size_t)r * MOE_MO_W;
    const float* act_r = act + (size_t)r * MOE_ACT_W;
    int ids[MOE_K];
    float probs[MOE_K];
    route(mo_r, ids, probs);
    float total = 0.0f;
    for (int s = 0; s < MOE_K; s++) {
        const bf16_t* w = down + ((size_t)ids[s] * MOE_H + o) * MOE_I;
        total += probs[s] * warp_dot_bf16(act_r + s * MOE_I, w, MOE_I, lane);
    }
    if (MOE_IS > 0) {
        const float d = warp_dot_bf16(act_r + MOE_K * MOE_I, shared_down + (size_t)o * MOE_IS, MOE_IS, lane);
        total += sigmoidf_(mo_r[MOE_E]) * d;
    }
    if (lane == 0) x[(size_t)r * MOE_H + o] += total;
}
