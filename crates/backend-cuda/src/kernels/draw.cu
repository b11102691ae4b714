// A sampled stream's token drawn on the GPU (lane's `Want::Draw`): one cluster of DRAW_SPLIT
// blocks a row (block s sweeps slice s of the row; the cluster's histograms are summed by every
// block from the others' shared memory, so each makes the same choice), so a row's draw reads
// nothing of the others and only its ids come back to the host.
//
// What it draws (docs/sampling.md, "On the GPU"): weights w = expf((l − max) / T) in f32 (NaN
// logits weigh nothing), held as fixed point W = floor(w · 2^44) in 64 bits: every total and
// every running sum below is then an exact integer, the same whatever order the threads add in
// (the row's bits alone decide the token). A token with W = 0 (a logit more than ~30 T below the
// row's largest; together at most ~1e-8 of the mass of a 151,936-token row) is never drawn.
// Candidates in the order "largest logit first, the lowest id first among equal logits" (so
// heaviest first), which is the order of R(i) = key(l_i) · 2^24 + (n − 1 − i), larger first
// (key: the logit's bits made order-preserving; +0 before −0). Top-k keeps the first k; top-p the shortest prefix whose mass reaches
// ceil(p · total); min-p then drops w < min_p (the heaviest weighs 1); the draw is the first
// candidate at which the running mass passes floor(u · total).
//
// Each "first candidate at which the running count or mass reaches a target" is a radix select
// over R, 8 bits a pass from the top: a pass histograms the candidates that share the digits
// chosen so far by their next digit (counts and masses, integer atomics in shared memory), and
// the digit whose bin the running sum reaches the target in is chosen. Once a chosen bin holds
// one candidate, one more sweep finds it. Every sum is of integers, so the split changes no bit.

#define DRAW_SCALE 17592186044416.0f  // 2^44: W of the heaviest token
#define DRAW_RANK_BITS 24
#define DRAW_R_BITS (32 + DRAW_RANK_BITS)
#define DRAW_BINS 256
// Histogram copies: two warps share one (fewer collisions on a popular bin).
#define DRAW_HISTS (DRAW_THREADS / WARP / 2)
// Bins a thread sums in registers before touching shared memory: a pass's candidates crowd into
// a few digits of the key's top bits.
#define DRAW_SLOTS 4

#define DRAW_BY_COUNT 0
#define DRAW_TOP_P 1
#define DRAW_PICK 2

struct DrawShared {
    unsigned int count[DRAW_HISTS][DRAW_BINS];
    unsigned long long mass[DRAW_HISTS][DRAW_BINS];
    // The cluster's bins (every block's count[0] and mass[0] summed), read by tid 0's scan.
    unsigned long long all_count[DRAW_BINS];
    unsigned long long all_mass[DRAW_BINS];
    float warp_max[DRAW_THREADS / WARP];
    float block_max;
    unsigned long long prefix;  // R's digits chosen so far
    unsigned long long above;   // count or mass of the candidates ahead of the chosen bins
    unsigned long long target;
    unsigned long long found;
    int single;  // the chosen bin holds one candidate
    int skip;    // top-k keeps every candidate
};

__device__ __forceinline__ unsigned draw_key(float l) {
    const unsigned b = __float_as_uint(l);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

struct DrawRow {
    const float* row;
    int n;
    int lo, hi;  // this block's slice of the row
    float max;
    float temperature;
    float min_p;
    unsigned long long r_min;  // candidates have R ≥ r_min (what top-k and top-p kept)
};

// Whether token i is a candidate sharing R's digits above bit `low` with `prefix`; its R and W.
__device__ __forceinline__ bool draw_candidate(const DrawRow& d, int i, unsigned long long prefix, int low,
                                               unsigned long long& r, unsigned long long& w) {
    const float l = d.row[i];
    if (isnan(l)) return false;
    r = ((unsigned long long)draw_key(l) << DRAW_RANK_BITS) | (unsigned long long)(d.n - 1 - i);
    if (r < d.r_min || ((r ^ prefix) >> low) != 0) return false;
    const float x = expf((l - d.max) / d.temperature);
    if (x < d.min_p) return false;
    w = (unsigned long long)(x * DRAW_SCALE);
    return w > 0;
}

// The R of the first candidate (heaviest first) at which the running count (DRAW_BY_COUNT:
// target k, or 0 when at most k are candidates) or mass (DRAW_TOP_P: ceil(p · total); DRAW_PICK:
// floor(u · total) + 1) reaches the target.
__device__ unsigned long long draw_select(const DrawRow& d, int kind, unsigned long long k, float p, double u,
                                          DrawShared& sh) {
    const int tid = threadIdx.x, h = tid / WARP / 2;
    const bool by_mass = kind != DRAW_BY_COUNT;
    // Every thread of the cluster has read the last select's answer (and every block's bins)
    // before anything is reset.
    cluster_sync();
    if (tid == 0) {
        sh.prefix = 0;
        sh.above = 0;
        sh.single = 0;
        sh.skip = 0;
        sh.found = 0;
    }
    for (int shift = DRAW_R_BITS - 8; shift >= 0; shift -= 8) {
        for (int b = tid; b < DRAW_HISTS * DRAW_BINS; b += DRAW_THREADS) {
            (&sh.count[0][0])[b] = 0;
            (&sh.mass[0][0])[b] = 0;
        }
        __syncthreads();
        const unsigned long long prefix = sh.prefix;
        if (sh.single) {
            // The one candidate with the digits chosen so far, in one block's slice: the
            // cluster's largest `found` (the others hold 0).
            for (int i = d.lo + tid; i < d.hi; i += DRAW_THREADS) {
                unsigned long long r, w;
                if (draw_candidate(d, i, prefix, shift + 8, r, w)) sh.found = r;
            }
            cluster_sync();
            unsigned long long found = 0;
            for (unsigned b = 0; b < DRAW_SPLIT; b++) {
                const unsigned long long f = cluster_load_u64(&sh.found, b);
                found = f > found ? f : found;
            }
            return found;
        }
        int sd[DRAW_SLOTS];
        unsigned sc[DRAW_SLOTS];
        unsigned long long sm[DRAW_SLOTS];
#pragma unroll
        for (int s = 0; s < DRAW_SLOTS; s++) {
            sd[s] = -1;
            sc[s] = 0;
            sm[s] = 0;
        }
        for (int i = d.lo + tid; i < d.hi; i += DRAW_THREADS) {
            unsigned long long r, w;
            if (!draw_candidate(d, i, prefix, shift + 8, r, w)) continue;
            const int digit = (int)((r >> shift) & (DRAW_BINS - 1));
            bool kept = false;
#pragma unroll
            for (int s = 0; s < DRAW_SLOTS; s++) {
                // Slots fill in order: an empty one comes after every used one.
                if (!kept && (sd[s] == digit || sd[s] < 0)) {
                    sd[s] = digit;
                    sc[s] += 1;
                    sm[s] += w;
                    kept = true;
                }
            }
            if (!kept) {
                atomicAdd(&sh.count[h][digit], 1u);
                atomicAdd(&sh.mass[h][digit], w);
            }
        }
#pragma unroll
        for (int s = 0; s < DRAW_SLOTS; s++) {
            if (sd[s] >= 0) {
                atomicAdd(&sh.count[h][sd[s]], sc[s]);
                atomicAdd(&sh.mass[h][sd[s]], sm[s]);
            }
        }
        __syncthreads();
        for (int b = tid; b < DRAW_BINS; b += DRAW_THREADS) {
            unsigned c = sh.count[0][b];
            unsigned long long m = sh.mass[0][b];
            for (int c2 = 1; c2 < DRAW_HISTS; c2++) {
                c += sh.count[c2][b];
                m += sh.mass[c2][b];
            }
            sh.count[0][b] = c;
            sh.mass[0][b] = m;
        }
        // Every block's bins are summed; each block adds up the cluster's.
        cluster_sync();
        for (int b = tid; b < DRAW_BINS; b += DRAW_THREADS) {
            unsigned long long c = 0, m = 0;
            for (unsigned r = 0; r < DRAW_SPLIT; r++) {
                c += cluster_load_u32(&sh.count[0][b], r);
                m += cluster_load_u64(&sh.mass[0][b], r);
            }
            sh.all_count[b] = c;
            sh.all_mass[b] = m;
        }
        __syncthreads();
        if (tid == 0) {
            if (shift == DRAW_R_BITS - 8) {
                // The first pass sees every candidate: the target follows from their total.
                unsigned long long total = 0;
                for (int b = 0; b < DRAW_BINS; b++) total += by_mass ? sh.all_mass[b] : sh.all_count[b];
                if (kind == DRAW_BY_COUNT) {
                    sh.skip = total <= k;
                    sh.target = k;
                } else if (kind == DRAW_TOP_P) {
                    const unsigned long long t = (unsigned long long)ceil((double)p * (double)total);
                    sh.target = t < 1 ? 1 : (t > total ? total : t);
                } else {
                    const unsigned long long t = (unsigned long long)(u * (double)total);
                    sh.target = (t >= total ? total - 1 : t) + 1;
                }
                // No candidate at all cannot happen (the heaviest always is one); kept total.
                if (total == 0) sh.skip = 1;
            }
            if (!sh.skip) {
                unsigned long long acc = sh.above;
                int chosen = 0;
                for (int b = DRAW_BINS - 1; b >= 0; b--) {
                    const unsigned long long v = by_mass ? sh.all_mass[b] : sh.all_count[b];
                    if (acc + v >= sh.target) {
                        chosen = b;
                        break;
                    }
                    acc += v;
                }
                sh.above = acc;
                sh.prefix |= (unsigned long long)chosen << shift;
                sh.single = sh.all_count[chosen] == 1;
            }
        }
        __syncthreads();
        if (sh.skip) return 0;
        // No block zeroes its bins for the next pass while another still reads them.
        cluster_sync();
    }
    return sh.prefix;
}

// asks: DRAW_ASK_INTS ints a draw: the logits row, top_k, the bits of temperature, top_p and
// min_p (f32), the uniform's low and high words (f64), and the index of `out` to write (the id,
// or −1 when no logit is finite). Grid (draws, DRAW_SPLIT) in clusters of a draw's blocks.
extern "C" __global__ void __cluster_dims__(1, DRAW_SPLIT, 1) __launch_bounds__(DRAW_THREADS)
draw_rows(const float* __restrict__ logits, int n, const int* __restrict__ asks, int* __restrict__ out) {
    pdl_start();
    __shared__ DrawShared sh;
    const int* a = asks + (size_t)blockIdx.x * DRAW_ASK_INTS;
    const int tid = threadIdx.x, lane = tid % WARP, warp = tid / WARP;
    DrawRow d;
    d.row = logits + (size_t)a[0] * n;
    d.n = n;
    const int slice = (n + DRAW_SPLIT - 1) / DRAW_SPLIT;
    d.lo = min(n, (int)blockIdx.y * slice);
    d.hi = min(n, d.lo + slice);
    float m = -INFINITY;
    for (int i = d.lo + tid; i < d.hi; i += DRAW_THREADS) {
        const float l = d.row[i];
        if (!isnan(l)) m = fmaxf(m, l);
    }
    for (int o = WARP / 2; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(FULL_MASK, m, o));
    if (lane == 0) sh.warp_max[warp] = m;
    __syncthreads();
    if (tid == 0) {
        float bm = sh.warp_max[0];
        for (int w = 1; w < DRAW_THREADS / WARP; w++) bm = fmaxf(bm, sh.warp_max[w]);
        sh.block_max = bm;
    }
    cluster_sync();
    m = -INFINITY;
    for (unsigned r = 0; r < DRAW_SPLIT; r++) m = fmaxf(m, __uint_as_float(cluster_load_u32(&sh.block_max, r)));
    if (!isfinite(m)) {
        if (tid == 0 && blockIdx.y == 0) out[a[7]] = -1;
        // No block leaves while another may still read its maximum.
        cluster_sync();
        return;
    }
    d.max = m;
    d.temperature = __int_as_float(a[2]);
    d.min_p = 0.0f;
    d.r_min = 0;
    const int top_k = a[1];
    const float top_p = __int_as_float(a[3]);
    if (top_k > 0) d.r_min = draw_select(d, DRAW_BY_COUNT, (unsigned long long)top_k, 1.0f, 0.0, sh);
    if (top_p < 1.0f) d.r_min = draw_select(d, DRAW_TOP_P, 0, top_p, 0.0, sh);
    d.min_p = __int_as_float(a[4]);
    const double u = __hiloint2double(a[6], a[5]);
    const unsigned long long r = draw_select(d, DRAW_PICK, 0, 1.0f, u, sh);
    if (tid == 0 && blockIdx.y == 0) out[a[7]] = n - 1 - (int)(r & ((1ull << DRAW_RANK_BITS) - 1));
    // No block leaves (and frees its shared memory) while another may still read it.
    cluster_sync();
}
