/* cuda/kernels/sample.cu - on-device sampling (contract and tolerance in sample.h).
 *
 * Computes, per logits row x (n floats; grid n_rows blocks of THREADS threads), the
 * token m40_sampler_sample() (daemon/engine/sampler.c) picks:
 *   1. penalties, in place, on the ids of the last penalty_last_n history tokens (a count
 *      per id in `work`, as the CPU's counts; float ops unfused, as the CPU's
 *      -ffp-contract=off build);
 *   2. one pass for the largest and smallest candidate: temperature <= 0 stops here
 *      (rows that have no penalties get it from k_scan, which cuts the row over up to
 *      SCAN_PARTS blocks and leaves their keys in `work`: the kernel reads those);
 *   3. the CPU's qsort order without sorting: each candidate i gets the 64-bit key
 *      C = (orderable bits of x[i]) << 32 | ~i, so "C larger" is "earlier in the sorted
 *      list" and every prefix of that list is {C >= bound}. Top-k, top-p and the draw
 *      each find where a running quantity (a count, or a probability mass) along that
 *      order reaches a target: a histogram of NB bins over the remaining key interval
 *      (one pass over the row; the interval shrinks NB-fold each round), then, once the
 *      target bin holds at most CAP candidates, those are gathered into shared memory,
 *      sorted (bitonic) and scanned. Once the surviving prefix itself is at most CAP
 *      long it is gathered and sorted once and every later step works on that list.
 *      Min-p is a threshold on the logit (found by bisection with the CPU's double exp).
 * Masses are exp weights w = expf((x - x0) / T) with the argument's rounding error
 * carried into a first-order correction, as 64-bit fixed point (2^F for the top
 * candidate, F = 63 - bits(n), so sums never overflow and are exact and order-free:
 * the result is deterministic). Weight error <= ~3 float ulps, so a normalized
 * cumulative probability is within ~2e-7 of the CPU's double one (M40_CUDA_SAMPLE_EPS =
 * 1e-6 is stated). Maxwell-clean: 32-bit shared atomics, 64-bit shared atomicAdd
 * (a CAS loop on sm_52), warp shuffles, FP32 and a few FP64 ops per row, no fp16. */
#include <errno.h>
#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "cuda/kernels/sample.h"
#include "m40/error.h"

#define THREADS      512
#define WARPS        (THREADS / 32)
#define NB           1024 /* histogram bins per round */
#define CAP          2048 /* candidates sorted in shared memory */
#define SCAN_THREADS 256
#define SCAN_PARTS   64   /* k_scan blocks per row, at most (k_sample reads one key per thread) */
#define SCAN_MIN     2048 /* logits per k_scan block, at least */

typedef unsigned long long u64;

static_assert(CAP % THREADS == 0 && NB % THREADS == 0, "scan chunks");
static_assert((CAP & (CAP - 1)) == 0, "bitonic sort needs a power of two");
static_assert(SCAN_PARTS <= THREADS, "k_sample reads the parts one per thread");

enum wmode { W_COUNT = 0, W_EXP1 = 1, W_EXPT = 2 };
enum skind { S_RANK = 0, S_TOPP = 1, S_DRAW = 2 };

struct smem {
        union {
                struct {
                        unsigned int cnt[NB];
                        u64 q[NB];
                } h;
                struct {
                        u64 c[CAP]; /* keys, sorted descending */
                        u64 w[CAP]; /* weights, then their inclusive prefix sums */
                } l;
        } u;
        u64 red64[WARPS];
        unsigned int red32[WARPS];
        u64 bc64[2];
        unsigned int bc32[2];
        unsigned int n_list;
};

/* How one select pass weighs candidates. */
struct wfn {
        int mode;    /* enum wmode */
        float x0;    /* the largest logit */
        float t;     /* temperature (W_EXPT) */
        float scale; /* 2^F */
};

struct selres {
        int found;
        u64 c;      /* key of the candidate where the target is reached */
        uint32_t m; /* its rank (1-based) in the sorted order */
        u64 total;  /* the quantity over the whole interval */
};

__device__ __forceinline__ bool fin(float v)
{
        return (__float_as_uint(v) & 0x7f800000u) != 0x7f800000u;
}

/* fkey - the float's bits, ordered as the values (-0 as +0, NaN below -inf). */
__device__ __forceinline__ uint32_t fkey(float v)
{
        uint32_t u = __float_as_uint(v);

        if (v != v)
                return 0;
        if (v == 0.0f)
                u = 0;
        return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float kval(uint32_t k)
{
        return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

__device__ __forceinline__ u64 ckey(float v, uint32_t i)
{
        return ((u64)fkey(v) << 32) | (uint32_t)~i;
}

__device__ __forceinline__ uint32_t cid(u64 c)
{
        return ~(uint32_t)c;
}

__device__ __forceinline__ float cval(u64 c)
{
        return kval((uint32_t)(c >> 32));
}

/* weight - floor(2^F exp((v - x0) / t)) (mode W_EXPT; W_EXP1: t = 1; W_COUNT: 1). The
 * difference v - x0 is carried exactly as d + e (TwoSum), the quotient as x + lo
 * (the FMA remainder), and exp(x + lo) ~ expf(x) (1 + lo). */
__device__ __forceinline__ u64 weight(const struct wfn &f, float v)
{
        float d, bb, e, x, lo = 0.0f, w;

        if (f.mode == W_COUNT)
                return 1;
        d = __fsub_rn(v, f.x0);
        if (!fin(d))
                return 0; /* exp(-inf); NaN logits are outside the contract */
        bb = __fsub_rn(d, v);
        e = __fadd_rn(__fsub_rn(v, __fsub_rn(d, bb)), __fsub_rn(-f.x0, bb));
        if (f.mode == W_EXP1) {
                x = d;
                lo = e;
        } else {
                x = __fdiv_rn(d, f.t);
                if (fin(x) && fin(f.t) && x != 0.0f)
                        lo = __fdiv_rn(__fadd_rn(__fmaf_rn(-x, f.t, d), e), f.t);
        }
        w = expf(x);
        if (w > 0.0f && lo != 0.0f)
                w = __fmaf_rn(w, lo, w);
        if (!(w > 0.0f))
                return 0;
        if (w > 1.0f)
                w = 1.0f;
        return __float2ull_rz(__fmul_rn(w, f.scale));
}

__device__ __forceinline__ u64 wsum64(u64 v)
{
        for (int o = 16; o; o >>= 1)
                v += __shfl_xor_sync(0xffffffffu, v, o);
        return v;
}

/* block_sum - the sum of v over the block (every thread gets it). */
__device__ u64 block_sum(u64 v, struct smem &s)
{
        const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
        u64 t = 0;

        v = wsum64(v);
        if (!lane)
                s.red64[w] = v;
        __syncthreads();
        for (int i = 0; i < WARPS; i++)
                t += s.red64[i];
        __syncthreads();
        return t;
}

/* warp_minmax - the largest and smallest of *mx and *mn over the warp, in every lane. */
__device__ __forceinline__ void warp_minmax(u64 *mx, u64 *mn)
{
        for (int o = 16; o; o >>= 1) {
                const u64 a = __shfl_xor_sync(0xffffffffu, *mx, o);
                const u64 b = __shfl_xor_sync(0xffffffffu, *mn, o);

                *mx = a > *mx ? a : *mx;
                *mn = b < *mn ? b : *mn;
        }
}

/* block_minmax - the largest and smallest of v over the block. */
__device__ void block_minmax(u64 mx, u64 mn, struct smem &s, u64 *ret_max, u64 *ret_min)
{
        const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;

        warp_minmax(&mx, &mn);
        if (!lane) {
                s.red64[w] = mx;
                s.u.h.q[w] = mn; /* free at this point */
        }
        __syncthreads();
        mx = s.red64[0];
        mn = s.u.h.q[0];
        for (int i = 1; i < WARPS; i++) {
                mx = s.red64[i] > mx ? s.red64[i] : mx;
                mn = s.u.h.q[i] < mn ? s.u.h.q[i] : mn;
        }
        __syncthreads();
        *ret_max = mx;
        *ret_min = mn;
}

/* block_scan - inclusive prefix sums of a[0..n) (n <= PER * THREADS) in place; returns
 * the total. Thread t owns a[t*PER .. t*PER+PER). */
template <int PER> __device__ u64 block_scan(u64 *a, int n, struct smem &s)
{
        const int t = threadIdx.x, lane = t & 31, w = t >> 5;
        u64 loc[PER], sum = 0, x, base, total;

        for (int k = 0; k < PER; k++) {
                const int i = t * PER + k;

                sum += i < n ? a[i] : 0;
                loc[k] = sum;
        }
        x = sum;
        for (int o = 1; o < 32; o <<= 1) {
                const u64 y = __shfl_up_sync(0xffffffffu, x, o);

                if (lane >= o)
                        x += y;
        }
        if (lane == 31)
                s.red64[w] = x;
        __syncthreads();
        if (w == 0) {
                u64 z = lane < WARPS ? s.red64[lane] : 0;

                for (int o = 1; o < 32; o <<= 1) {
                        const u64 y = __shfl_up_sync(0xffffffffu, z, o);

                        if (lane >= o)
                                z += y;
                }
                if (lane < WARPS)
                        s.red64[lane] = z;
        }
        __syncthreads();
        base = x - sum + (w ? s.red64[w - 1] : 0);
        for (int k = 0; k < PER; k++) {
                const int i = t * PER + k;

                if (i < n)
                        a[i] = base + loc[k];
        }
        total = s.red64[WARPS - 1];
        __syncthreads();
        return total;
}

/* gather_sort - the m (<= CAP) candidates with lo <= C <= hi into s.u.l.c, sorted
 * descending (keys are unique, so the order is deterministic). */
__device__ void gather_sort(const float *x, uint32_t n, u64 lo, u64 hi, uint32_t m, struct smem &s)
{
        uint32_t p2 = 1;

        if (threadIdx.x == 0)
                s.n_list = 0;
        __syncthreads();
        for (uint32_t i = threadIdx.x; i < n; i += THREADS) {
                const u64 c = ckey(x[i], i);

                if (c >= lo && c <= hi) {
                        const uint32_t p = atomicAdd(&s.n_list, 1u);

                        if (p < CAP)
                                s.u.l.c[p] = c;
                }
        }
        while (p2 < m)
                p2 <<= 1;
        __syncthreads();
        for (uint32_t i = m + threadIdx.x; i < p2; i += THREADS)
                s.u.l.c[i] = 0;
        __syncthreads();
        for (uint32_t k = 2; k <= p2; k <<= 1) {
                for (uint32_t j = k >> 1; j > 0; j >>= 1) {
                        for (uint32_t i = threadIdx.x; i < p2; i += THREADS) {
                                const uint32_t ij = i ^ j;

                                if (ij > i) {
                                        const u64 a = s.u.l.c[i], b = s.u.l.c[ij];

                                        if ((i & k) == 0 ? a < b : a > b) {
                                                s.u.l.c[i] = b;
                                                s.u.l.c[ij] = a;
                                        }
                                }
                        }
                        __syncthreads();
                }
        }
}

/* target - the running quantity to reach, from the total (0: unreachable). */
__device__ __forceinline__ u64 target(int kind, double param, u64 total)
{
        double g;

        if (kind == S_RANK)
                return (u64)param;
        if (kind == S_TOPP)
                g = ceil(param * (double)total);
        else
                g = floor(param * (double)total) + 1.0;
        return g > (double)total ? 0 : (u64)g;
}

/* list_select - on the sorted list s.u.l.c[0..m): the first candidate where the running
 * weight reaches the target. */
__device__ struct selres list_select(uint32_t m, const struct wfn &f, int kind, double param,
                                     struct smem &s)
{
        struct selres r = {0, 0, 0, 0};
        u64 g;

        for (uint32_t i = threadIdx.x; i < m; i += THREADS)
                s.u.l.w[i] = weight(f, cval(s.u.l.c[i]));
        __syncthreads();
        r.total = block_scan<CAP / THREADS>(s.u.l.w, (int)m, s);
        g = target(kind, param, r.total);
        if (!g)
                return r;
        for (uint32_t i = threadIdx.x; i < m; i += THREADS)
                if (s.u.l.w[i] >= g && (i == 0 || s.u.l.w[i - 1] < g))
                        s.bc32[0] = i;
        __syncthreads();
        r.found = 1;
        r.m = s.bc32[0] + 1;
        r.c = s.u.l.c[r.m - 1];
        __syncthreads();
        return r;
}

/* row_select - over the candidates with lo <= C <= hi of the whole row (the prefix of
 * the sorted order that survives so far, hi its first key): histogram rounds until the
 * bin where the target is reached holds at most CAP candidates, then list_select on it. */
__device__ struct selres row_select(const float *x, uint32_t n, u64 lo, u64 hi, const struct wfn &f,
                                    int kind, double param, struct smem &s)
{
        struct selres r = {0, 0, 0, 0};
        u64 acc_q = 0, g = 0;
        uint32_t acc_n = 0;
        bool first = true;

        for (;;) {
                const u64 span = hi - lo;
                uint32_t sh = 0, b, cb, bmax;
                u64 excl, nlo;

                while ((span >> sh) >= NB)
                        sh++;
                bmax = (uint32_t)(span >> sh);
                for (uint32_t i = threadIdx.x; i < NB; i += THREADS) {
                        s.u.h.cnt[i] = 0;
                        s.u.h.q[i] = 0;
                }
                __syncthreads();
                for (uint32_t i = threadIdx.x; i < n; i += THREADS) {
                        const float v = x[i];
                        const u64 c = ckey(v, i);

                        if (c >= lo && c <= hi) {
                                const uint32_t bin = (uint32_t)((hi - c) >> sh);

                                atomicAdd(&s.u.h.cnt[bin], 1u);
                                if (f.mode != W_COUNT)
                                        atomicAdd(&s.u.h.q[bin], weight(f, v));
                        }
                }
                __syncthreads();
                if (f.mode == W_COUNT) {
                        for (uint32_t i = threadIdx.x; i < NB; i += THREADS)
                                s.u.h.q[i] = s.u.h.cnt[i];
                        __syncthreads();
                }
                {
                        const u64 tot = block_scan<NB / THREADS>(s.u.h.q, NB, s);

                        if (first) {
                                r.total = tot;
                                g = target(kind, param, tot);
                                if (!g)
                                        return r;
                                first = false;
                        }
                }
                for (uint32_t i = threadIdx.x; i <= bmax; i += THREADS)
                        if (acc_q + s.u.h.q[i] >= g && (i == 0 || acc_q + s.u.h.q[i - 1] < g)) {
                                s.bc32[0] = i;
                                s.bc64[0] = i ? s.u.h.q[i - 1] : 0;
                        }
                __syncthreads();
                b = s.bc32[0];
                excl = s.bc64[0];
                cb = s.u.h.cnt[b];
                {
                        u64 before = 0;

                        for (uint32_t i = threadIdx.x; i < b; i += THREADS)
                                before += s.u.h.cnt[i];
                        acc_n += (uint32_t)block_sum(before, s); /* syncs */
                }
                acc_q += excl;
                nlo = b == bmax ? lo : hi - (((u64)b + 1) << sh) + 1;
                hi -= (u64)b << sh;
                lo = nlo;
                if (cb <= CAP || sh == 0) {
                        struct selres l;

                        gather_sort(x, n, lo, hi, cb, s);
                        /* finish on the bin's list: the target less what precedes it */
                        if (kind == S_RANK) {
                                l = list_select(cb, f, S_RANK, (double)(g - acc_q), s);
                        } else {
                                for (uint32_t i = threadIdx.x; i < cb; i += THREADS)
                                        s.u.l.w[i] = weight(f, cval(s.u.l.c[i]));
                                __syncthreads();
                                block_scan<CAP / THREADS>(s.u.l.w, (int)cb, s);
                                for (uint32_t i = threadIdx.x; i < cb; i += THREADS)
                                        if (acc_q + s.u.l.w[i] >= g &&
                                            (i == 0 || acc_q + s.u.l.w[i - 1] < g))
                                                s.bc32[1] = i;
                                __syncthreads();
                                l.m = s.bc32[1] + 1;
                                l.c = s.u.l.c[l.m - 1];
                                __syncthreads();
                        }
                        r.found = 1;
                        r.c = l.c;
                        r.m = acc_n + l.m;
                        return r;
                }
        }
}

/* row_minmax - this thread's largest and smallest key (ckey) of its share of row x,
 * folded into *cmax and *cmin. The row is read in 16-byte vectors from its first
 * 16-byte boundary, four per thread at a time (one block reads the whole row: with one
 * element per thread per step its load latencies were the time, ~40 us for 128K
 * logits on an H100); the elements outside the vectors one by one. Min and max are
 * exact and order-free: the same keys whatever the split. */
__device__ __forceinline__ void fold_key(u64 c, u64 *cmax, u64 *cmin)
{
        *cmax = c > *cmax ? c : *cmax;
        *cmin = c < *cmin ? c : *cmin;
}

__device__ void row_minmax(const float *x, uint32_t n, u64 *cmax, u64 *cmin)
{
        const uint32_t lead = (uint32_t)((16 - ((uintptr_t)x & 15)) & 15) / 4;
        const uint32_t head = lead < n ? lead : n, n4 = (n - head) / 4;
        const float4 *x4 = (const float4 *)(x + head);

        for (uint32_t i = threadIdx.x; i < head; i += THREADS)
                fold_key(ckey(x[i], i), cmax, cmin);
#pragma unroll 4
        for (uint32_t j = threadIdx.x; j < n4; j += THREADS) {
                const float4 v = x4[j];
                const uint32_t i = head + 4 * j;

                fold_key(ckey(v.x, i), cmax, cmin);
                fold_key(ckey(v.y, i + 1), cmax, cmin);
                fold_key(ckey(v.z, i + 2), cmax, cmin);
                fold_key(ckey(v.w, i + 3), cmax, cmin);
        }
        for (uint32_t i = head + 4 * n4 + threadIdx.x; i < n; i += THREADS)
                fold_key(ckey(x[i], i), cmax, cmin);
}

/* penalizes - whether penalize() changes row x of p (else x is read as it is). */
__device__ __forceinline__ bool penalizes(const struct m40_cuda_sample_row &p)
{
        return p.penalty_last_n != 0 &&
               (p.repeat_penalty != 1.0f || p.frequency_penalty != 0.0f ||
                p.presence_penalty != 0.0f) &&
               p.hist && p.n_hist;
}

/* penalize - sampler.c's penalize() on row x, in place. */
__device__ void penalize(float *x, uint32_t n, const struct m40_cuda_sample_row &p,
                         unsigned int *counts)
{
        uint32_t from = 0;

        if (!penalizes(p))
                return;
        if (p.penalty_last_n > 0 && p.n_hist > (uint32_t)p.penalty_last_n)
                from = p.n_hist - (uint32_t)p.penalty_last_n;
        for (uint32_t i = from + threadIdx.x; i < p.n_hist; i += THREADS) {
                const int32_t id = p.hist[i];

                if (id >= 0 && (uint32_t)id < n)
                        atomicAdd(&counts[id], 1u);
        }
        __syncthreads();
        for (uint32_t i = from + threadIdx.x; i < p.n_hist; i += THREADS) {
                const int32_t id = p.hist[i];
                uint32_t c;
                float l;

                if (id < 0 || (uint32_t)id >= n)
                        continue;
                c = atomicExch(&counts[id], 0u);
                if (!c)
                        continue; /* another thread applied it */
                l = x[id];
                if (p.repeat_penalty > 0.0f && p.repeat_penalty != 1.0f)
                        l = l <= 0.0f ? __fmul_rn(l, p.repeat_penalty)
                                      : __fdiv_rn(l, p.repeat_penalty);
                l = __fsub_rn(l, __fadd_rn(__fmul_rn(__uint2float_rn(c), p.frequency_penalty),
                                           p.presence_penalty));
                x[id] = l;
        }
        __syncthreads();
}

/* minp_key - the smallest orderable key k with exp((double)kval(k) - x0) >= min_p (the
 * CPU's test, monotone in k), or 0xffffffff when even x0 fails. One thread. */
__device__ uint32_t minp_key(float x0, float min_p)
{
        uint32_t lo = fkey(-INFINITY), hi = fkey(x0);

        if (!(exp((double)x0 - (double)x0) >= (double)min_p))
                return 0xffffffffu;
        while (hi - lo > 1) {
                const uint32_t mid = lo + (hi - lo) / 2;

                if (exp((double)kval(mid) - (double)x0) >= (double)min_p)
                        hi = mid;
                else
                        lo = mid;
        }
        return hi;
}

/* k_scan - the largest and smallest key of part b = blockIdx.x of row r = blockIdx.y
 * (parts of ceil(n / gridDim.x) elements) into part[r][b] = {max, min}, for rows that
 * penalize() leaves as they are (the others are scanned by k_sample after their
 * penalties). One block scanning a 128K-logit row took ~25 us of every decode step on
 * an H100 (ncu, 8B, kernel alone); SCAN_PARTS blocks share it, and k_sample reads their
 * keys. Same-run A/B of batch-1 decode in the step's graph (H100), one block -> k_scan:
 * 1B Q4_0 1481.4 -> 1515.5 tok/s, 8B Q8_0 273.5 -> 274.4, 135M Q8_0 (vocab 49152)
 * 1243.6 -> 1253.6, 135M F16 1302.0 -> 1290.3 (runs differ by ~1%). An M40's SM is
 * several times slower than an H100's, so the one-block scan costs it more of a step. */
__global__ void __launch_bounds__(SCAN_THREADS)
        k_scan(const float *logits, size_t ld, uint32_t n, const struct m40_cuda_sample_row *rows,
               u64 *part)
{
        __shared__ u64 smx[SCAN_THREADS / 32], smn[SCAN_THREADS / 32];
        const uint32_t r = blockIdx.y, per = (n + gridDim.x - 1) / gridDim.x;
        const uint32_t b0 = blockIdx.x * per, b1 = min(n, b0 + per);
        const float *x = logits + (size_t)r * ld;
        u64 mx = 0, mn = ~0ull;

        if (penalizes(rows[r]))
                return; /* the same for the whole block */
#pragma unroll 4
        for (uint32_t i = b0 + threadIdx.x; i < b1; i += SCAN_THREADS)
                fold_key(ckey(x[i], i), &mx, &mn);
        warp_minmax(&mx, &mn);
        if ((threadIdx.x & 31) == 0) {
                smx[threadIdx.x >> 5] = mx;
                smn[threadIdx.x >> 5] = mn;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
                for (int w = 1; w < SCAN_THREADS / 32; w++) {
                        mx = smx[w] > mx ? smx[w] : mx;
                        mn = smn[w] < mn ? smn[w] : mn;
                }
                part[((size_t)r * SCAN_PARTS + blockIdx.x) * 2] = mx;
                part[((size_t)r * SCAN_PARTS + blockIdx.x) * 2 + 1] = mn;
        }
}

__global__ void __launch_bounds__(THREADS)
        k_sample(float *logits, size_t ld, uint32_t n, struct m40_cuda_sample_row *rows,
                 unsigned int *work, u64 *part, uint32_t parts, int32_t *ret, float scale)
{
        __shared__ struct smem s;
        float *x = logits + (size_t)blockIdx.x * ld;
        const struct m40_cuda_sample_row p = rows[blockIdx.x];
        u64 cmax = 0, cmin = ~0ull, lo, rng = p.rng, z;
        uint32_t size = n, tok;
        bool listed = false;
        float x0;
        double u;
        struct wfn f = {W_COUNT, 0.0f, 1.0f, scale};
        struct selres r;

        if (penalizes(p) || !parts) {
                penalize(x, n, p, work + (size_t)blockIdx.x * n);
                row_minmax(x, n, &cmax, &cmin);
        } else if (threadIdx.x < parts) { /* k_scan's keys, left zeroed (see work_bytes) */
                u64 *k = part + ((size_t)blockIdx.x * SCAN_PARTS + threadIdx.x) * 2;

                cmax = k[0] > cmax ? k[0] : cmax;
                cmin = k[1] < cmin ? k[1] : cmin;
                k[0] = k[1] = 0;
        }
        block_minmax(cmax, cmin, s, &cmax, &cmin);
        if (p.temperature <= 0.0f) {
                /* the CPU's scan keeps index 0 when it is NaN (nothing compares greater) */
                tok = x[0] != x[0] ? 0 : cid(cmax);
                goto out;
        }
        /* splitmix64, as sampler.c */
        rng += 0x9e3779b97f4a7c15ull;
        z = rng;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        u = (double)(z >> 11) * 0x1p-53;
        lo = cmin;
        x0 = cval(cmax);

        if (p.top_k > 0 && (uint32_t)p.top_k < n) {
                r = row_select(x, n, cmin, cmax, f, S_RANK, (double)p.top_k, s);
                lo = r.c;
                size = (uint32_t)p.top_k;
        }
        if (!fin(x0)) {
                /* the CPU's probabilities are all NaN: no top-p cut; min-p keeps the first;
                 * the draw falls through to the last candidate */
                tok = p.min_p > 0.0f ? cid(cmax) : cid(lo);
                goto out;
        }
        f.x0 = x0;
        if (size <= CAP) {
                gather_sort(x, n, lo, cmax, size, s);
                listed = true;
        }
        if (p.top_p > 0.0f && p.top_p < 1.0f) {
                f.mode = W_EXP1;
                if (listed)
                        r = list_select(size, f, S_TOPP, (double)p.top_p, s);
                else
                        r = row_select(x, n, lo, cmax, f, S_TOPP, (double)p.top_p, s);
                if (r.found) {
                        lo = r.c;
                        size = r.m;
                }
                if (!listed && size <= CAP) {
                        gather_sort(x, n, lo, cmax, size, s);
                        listed = true;
                }
        }
        if (p.min_p > 0.0f) {
                if (threadIdx.x == 0)
                        s.bc32[0] = minp_key(x0, p.min_p);
                __syncthreads();
                {
                        const uint32_t kt = s.bc32[0];
                        const u64 t = kt == 0xffffffffu ? ~0ull : (u64)kt << 32;
                        u64 c_lo = ~0ull, dummy;
                        uint32_t keep = 0;

                        __syncthreads();
                        if (listed) {
                                for (uint32_t i = threadIdx.x; i < size; i += THREADS)
                                        keep += s.u.l.c[i] >= t;
                                keep = (uint32_t)block_sum(keep, s);
                                if (keep < 1)
                                        keep = 1;
                                if (keep < size) {
                                        size = keep;
                                        lo = s.u.l.c[size - 1];
                                }
                        } else {
                                const u64 bound = t > lo ? t : lo;

                                for (uint32_t i = threadIdx.x; i < n; i += THREADS) {
                                        const u64 c = ckey(x[i], i);

                                        if (c >= bound) {
                                                keep++;
                                                c_lo = c < c_lo ? c : c_lo;
                                        }
                                }
                                keep = (uint32_t)block_sum(keep, s);
                                block_minmax(0, c_lo, s, &dummy, &c_lo);
                                if (keep == 0) {
                                        size = 1;
                                        lo = cmax;
                                } else if (keep < size) {
                                        size = keep;
                                        lo = c_lo;
                                }
                                if (size <= CAP) {
                                        gather_sort(x, n, lo, cmax, size, s);
                                        listed = true;
                                }
                        }
                }
        }
        f.mode = W_EXPT;
        f.t = p.temperature;
        if (!fin(p.temperature) && fkey(cval(lo)) == fkey(-INFINITY)) {
                /* (-inf - x0) / inf is NaN on the CPU: the sum is NaN, the draw falls
                 * through to the last candidate */
                tok = cid(lo);
                goto out;
        }
        if (listed)
                r = list_select(size, f, S_DRAW, u, s);
        else
                r = row_select(x, n, lo, cmax, f, S_DRAW, u, s);
        tok = r.found ? cid(r.c) : cid(lo);
out:
        __syncthreads();
        if (threadIdx.x == 0) {
                ret[blockIdx.x] = (int32_t)tok;
                rows[blockIdx.x].rng = rng;
                if (p.hist && p.n_hist < p.hist_cap)
                        p.hist[p.n_hist] = (int32_t)tok;
        }
}

/* The scratch: per row, the counts of penalize() (n_vocab unsigned), then after all rows'
 * counts k_scan's SCAN_PARTS {max, min} keys per row. Both are zero between launches:
 * penalize() clears its counts, k_sample each key it read (a row whose keys k_scan did
 * not write was never read: those slots stay zero). */
static size_t counts_bytes(uint32_t n_vocab, uint32_t rows)
{
        return ((size_t)n_vocab * rows * sizeof(unsigned int) + 15) & ~(size_t)15;
}

extern "C" size_t m40_cuda_sample_work_bytes(uint32_t n_vocab, uint32_t max_rows)
{
        return counts_bytes(n_vocab, max_rows) + (size_t)max_rows * SCAN_PARTS * 2 * sizeof(u64);
}

extern "C" int m40_cuda_sample_work_init(void *work, uint32_t n_vocab, uint32_t max_rows,
                                         struct CUstream_st *stream)
{
        if (!work && n_vocab && max_rows)
                return -EINVAL;
        if (!n_vocab || !max_rows)
                return 0;
        if (cudaMemsetAsync(work, 0, m40_cuda_sample_work_bytes(n_vocab, max_rows), stream) !=
            cudaSuccess)
                return m40_cuda_launch_status("sample work init");
        return 0;
}

extern "C" int m40_cuda_sample(float *logits, size_t ld, uint32_t n_vocab,
                               struct m40_cuda_sample_row *rows, uint32_t n_rows, void *work,
                               int32_t *ret, struct CUstream_st *stream)
{
        int bits = 0;

        if (!n_rows)
                return 0;
        if (!logits || !rows || !work || !ret || !n_vocab || n_vocab >= (1u << 24) ||
            ld < n_vocab || n_rows > 65535)
                return -EINVAL;
        /* rows of more than SCAN_MIN logits: their first pass over k_scan's parts (as
         * many as give each block SCAN_MIN logits, at most SCAN_PARTS) */
        const uint32_t parts = n_vocab < SCAN_MIN                ? 0
                               : n_vocab / SCAN_MIN < SCAN_PARTS ? n_vocab / SCAN_MIN
                                                                 : SCAN_PARTS;
        u64 *part = (u64 *)((char *)work + counts_bytes(n_vocab, n_rows));

        if (parts)
                k_scan<<<dim3(parts, n_rows), SCAN_THREADS, 0, stream>>>(logits, ld, n_vocab, rows,
                                                                         part);
        while ((n_vocab >> bits) != 0)
                bits++;
        /* the top candidate weighs 2^F; n_vocab of them stay below 2^63 */
        k_sample<<<n_rows, THREADS, 0, stream>>>(logits, ld, n_vocab, rows, (unsigned int *)work,
                                                 part, parts, ret, ldexpf(1.0f, 63 - bits));
        return m40_cuda_launch_status("sample");
}
