/* cuda/attention_prompt.cu - causal attention for the tokens of one sequence (a prompt
 * chunk) in query tiles over the paged f16 KV cache (contract in ops.h).
 *
 * Computes: for token t and query head h, out[t][h] = softmax(q . K[p] * scale) V over
 * positions p <= pos[t]: what m40_cuda_attention() computes, but with every K/V tile read
 * once for the tile's queries of a KV head instead of once per token. m40_cuda_attention()
 * takes one block per (token, KV head): a 512-token prompt reads each of its K/V rows up
 * to 512 times, and on the H100 it took 47% of a 135M model's prefill (192 us of a layer's
 * ~400), against ~10 us for its FLOPs.
 *
 * k_attn_prompt<HD> (HD = head_dim: 32, 64, 96 or 128): block (x, kvh) takes AP_ROWS = 16
 * rows (token, query head) = the qt = 16 / group tokens x * qt .. + qt - 1 with the group
 * query heads of KV head kvh; AP_THREADS = 64 threads. Positions 0 .. max(pos of its
 * tokens) go in tiles of KT (64 for HD <= 64, else 32: the tiles then fit the 48 KB of
 * shared memory a block may have on an M40): the tile's K and V are loaded (16-byte
 * pieces, all in flight at once) into shared memory as floats, and the scores and the
 * weighted sum are two small matrix products in register tiles: thread (a, b) = (tid /
 * 16, tid % 16) scores rows 4a .. 4a + 3 against positions b, b + 16, .. (4 x KT / 16
 * products from 4 + KT / 16 shared loads per 4 dims), keeps an online softmax per row
 * (running max m over its half-warp, its own share of the sum, accumulators rescaled
 * when m grows), puts the tile's weights in shared memory, and adds them times V to rows
 * 4a .. 4a + 3 of its output dims 2b, 2b + 1 (+ 32, ...). Positions past a row's own pos
 * score -inf. Shared memory: (16 + 2 KT) * HD + 16 KT floats + padding: 39 KB for HD 64,
 * 43 KB for 128. The next tile's K/V loads (and the pages of the one after) are issued
 * before this tile's math and land in registers, so a tile costs its math or its load
 * latency, not both. Why register tiles: ncu (H100, 135M model, 512-token prompt) put the
 * first version of this kernel, one row per 8 threads each scoring 4 positions, at 7.5
 * warps per SM with 0.29 eligible, most waiting on shared memory: every 16-byte shared
 * load costs 4 wavefronts whatever its lanes share, and it did one per 4 products.
 * Deterministic: fixed orders; the one atomic, in shared memory, only finds the largest
 * position.
 * Tolerance: as m40_cuda_attention() (attention.cu): FP32 dot products and sums in
 * another order, expf's ulps, the rescaling; tests/gpu/test_attention.c holds both kernels
 * to the same bound. Maxwell-clean: f16 only converted, FP32 math, warp shuffles, shared
 * memory, shared-memory atomicMax (sm_20+), __syncwarp (a no-op before sm_70, where the
 * lanes of a warp run in lockstep). */
#include <errno.h>
#include <math.h>
#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/launch.h"
#include "cuda/ops.h"

#define AP_THREADS 64
#define AP_ROWS    16 /* rows (token, query head) per block: 4 per row quad a */

/* The tile shape for head_dim HD: KT positions, PT = KT / 16 scored per thread, DP float
 * pairs of output dims per thread, CPT 16-byte K (and V) pieces per thread and tile. */
template <int HD> struct ap_cfg {
        enum {
                KT = HD <= 64 ? 64 : 32,
                PT = KT / 16,
                DP = HD / 32,
                CPT = KT * HD / 8 / AP_THREADS
        };
        static_assert(HD % 32 == 0 && KT <= AP_THREADS && KT * HD / 8 % AP_THREADS == 0,
                      "whole pieces per thread, a thread per tile row");
};

struct ap_args {
        const float *q;
        size_t ldq;
        float *out;
        size_t ldo;
        uint32_t n_tok, group, qt; /* qt: tokens per block */
        float scale;
};

/* The 8 halves of u as floats into f[0..7]. */
static __device__ __forceinline__ void h8(const uint4 u, float *f)
{
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};

#pragma unroll
        for (int i = 0; i < 4; i++) {
                const float2 v = __half22float2(*(const __half2 *)&w[i]);

                f[2 * i] = v.x;
                f[2 * i + 1] = v.y;
        }
}

/* The page of position p (0 past last: not read). */
static __device__ __forceinline__ uint32_t ap_page(const struct m40_cuda_kv &kv, uint32_t tbl,
                                                   uint32_t p, uint32_t last)
{
        return p <= last ? kv.pages[tbl + p / kv.page_tokens] : 0;
}

/* Element offset of position p's K row (page pg) for KV head kvh of HD dims. */
static __device__ __forceinline__ size_t ap_off(const struct m40_cuda_kv &kv, uint32_t pg,
                                                uint32_t p, uint32_t kvh, int hd)
{
        return (size_t)pg * kv.page_elems +
               ((size_t)kv.layer * kv.page_tokens + p % kv.page_tokens) * kv.kv_dim +
               (size_t)kvh * hd;
}

/* This thread's 16-byte pieces of the K and V rows of tile p0 (koff: the rows' offsets),
 * zeros past last. */
template <int HD, int CPT>
static __device__ __forceinline__ void ap_load(const struct m40_cuda_kv &kv, const size_t *koff,
                                               uint32_t p0, uint32_t last, uint4 *kr, uint4 *vr)
{
#pragma unroll
        for (int i = 0; i < CPT; i++) {
                const int c = threadIdx.x + i * AP_THREADS, pi = c / (HD / 8), dc = c % (HD / 8);

                if (p0 + pi <= last) {
                        const uint16_t *k = kv.base + koff[pi] + 8 * dc;

                        kr[i] = __ldg((const uint4 *)k);
                        vr[i] = __ldg((const uint4 *)(k + kv.v_off));
                } else {
                        kr[i] = vr[i] = make_uint4(0, 0, 0, 0);
                }
        }
}

template <int HD>
static __global__ void __launch_bounds__(AP_THREADS)
        k_attn_prompt(const struct m40_cuda_kv kv, const struct ap_args a)
{
        typedef ap_cfg<HD> C;
        enum { KT = C::KT, PT = C::PT, DP = C::DP, CPT = C::CPT };
        enum { KS = HD + 4 }; /* K row stride: rows 16 bytes apart mod 128, no bank conflict */
        enum { PS = KT + 4 }; /* weight row stride */
        __shared__ __align__(16) float qs[AP_ROWS][HD];
        __shared__ __align__(16) float ks[KT][KS];
        __shared__ __align__(16) float vs[KT][HD];
        __shared__ __align__(16) float ps[AP_ROWS][PS];
        __shared__ size_t koff[KT];
        __shared__ uint32_t maxp;
        const int tid = threadIdx.x, qa = tid >> 4, qb = tid & 15;
        const uint32_t kvh = blockIdx.y, tbl = kv.tbl[0]; /* one sequence: every token's table */
        uint32_t mypos[4];                                /* rows 4qa + i: their pos, or none */
        bool valid[4];
        uint4 kr[CPT], vr[CPT]; /* the next tile's K and V, in flight during this one's math */
        uint32_t pg = 0;        /* tid < KT: the page of position tid of the tile after */
        float o[4][DP][2];      /* rows 4qa + i, dims 2qb + 32k + 0, 1 */
        float m[4], l[4];       /* per row: running max, this thread's share of the sum */

        if (tid == 0)
                maxp = 0;
        for (int e = tid; e < AP_ROWS * HD; e += AP_THREADS) {
                const uint32_t r = e / HD, ti = r / a.group, t = blockIdx.x * a.qt + ti;
                const uint32_t h = kvh * a.group + r % a.group;

                qs[r][e % HD] = ti < a.qt && t < a.n_tok
                                        ? a.q[(size_t)t * a.ldq + (size_t)h * HD + e % HD]
                                        : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
                const uint32_t r = 4 * qa + i, ti = r / a.group, t = blockIdx.x * a.qt + ti;

                valid[i] = ti < a.qt && t < a.n_tok;
                mypos[i] = valid[i] ? kv.pos[t] : 0;
                m[i] = -INFINITY;
                l[i] = 0.0f;
#pragma unroll
                for (int k = 0; k < DP; k++)
                        o[i][k][0] = o[i][k][1] = 0.0f;
        }
        __syncthreads();
        if (qb == 0)
#pragma unroll
                for (int i = 0; i < 4; i++)
                        if (valid[i])
                                atomicMax(&maxp, mypos[i]);
        __syncthreads();
        const uint32_t last = maxp;

        /* tile 0's rows and loads; tile 1's pages */
        if (tid < KT) {
                koff[tid] = ap_off(kv, ap_page(kv, tbl, tid, last), tid, kvh, HD);
                pg = ap_page(kv, tbl, KT + tid, last);
        }
        __syncthreads();
        ap_load<HD, CPT>(kv, koff, 0, last, kr, vr);

        for (uint32_t p0 = 0; p0 <= last; p0 += KT) {
                const uint32_t pn = p0 + KT; /* the next tile */

                __syncthreads(); /* the previous tile's readers are done */
#pragma unroll
                for (int i = 0; i < CPT; i++) {
                        const int c = tid + i * AP_THREADS, pi = c / (HD / 8), dc = c % (HD / 8);

                        h8(kr[i], &ks[pi][8 * dc]);
                        h8(vr[i], &vs[pi][8 * dc]);
                }
                if (tid < KT && pn <= last) { /* the next tile's rows, the pages after */
                        koff[tid] = ap_off(kv, pg, pn + tid, kvh, HD);
                        pg = ap_page(kv, tbl, pn + KT + tid, last);
                }
                __syncthreads();
                if (pn <= last)
                        ap_load<HD, CPT>(kv, koff, pn, last, kr, vr);

                /* scores: rows 4qa + i, positions p0 + qb + 16j */
                float s[4][PT];

#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                        for (int j = 0; j < PT; j++)
                                s[i][j] = 0.0f;
#pragma unroll 4
                for (int d = 0; d < HD; d += 4) {
                        float4 qv[4], kk[PT];

#pragma unroll
                        for (int i = 0; i < 4; i++)
                                qv[i] = *(const float4 *)&qs[4 * qa + i][d];
#pragma unroll
                        for (int j = 0; j < PT; j++)
                                kk[j] = *(const float4 *)&ks[qb + 16 * j][d];
#pragma unroll
                        for (int i = 0; i < 4; i++)
#pragma unroll
                                for (int j = 0; j < PT; j++) {
                                        s[i][j] = fmaf(qv[i].x, kk[j].x, s[i][j]);
                                        s[i][j] = fmaf(qv[i].y, kk[j].y, s[i][j]);
                                        s[i][j] = fmaf(qv[i].z, kk[j].z, s[i][j]);
                                        s[i][j] = fmaf(qv[i].w, kk[j].w, s[i][j]);
                                }
                }
                /* online softmax per row over the half-warp (the 16 lanes of one qa) */
#pragma unroll
                for (int i = 0; i < 4; i++) {
                        float mt = -INFINITY;

#pragma unroll
                        for (int j = 0; j < PT; j++) {
                                const uint32_t p = p0 + qb + 16 * j;

                                s[i][j] = valid[i] && p <= mypos[i] ? s[i][j] * a.scale : -INFINITY;
                                mt = fmaxf(mt, s[i][j]);
                        }
#pragma unroll
                        for (int off = 1; off < 16; off <<= 1)
                                mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off));
                        /* the row's new maximum; -inf while none of its positions was seen */
                        const float mn = fmaxf(m[i], mt);
                        const bool any = mn != -INFINITY;
                        const float corr = any ? expf(m[i] - mn) : 1.0f;
                        float sum = 0.0f;

#pragma unroll
                        for (int j = 0; j < PT; j++) {
                                const float w = any ? expf(s[i][j] - mn) : 0.0f;

                                ps[4 * qa + i][qb + 16 * j] = w;
                                sum += w;
                        }
                        l[i] = fmaf(l[i], corr, sum);
                        m[i] = mn;
#pragma unroll
                        for (int k = 0; k < DP; k++) {
                                o[i][k][0] *= corr;
                                o[i][k][1] *= corr;
                        }
                }
                __syncwarp(); /* this half-warp's weight rows are written; it alone reads them */

                /* o += weights x V, 4 positions at a time */
#pragma unroll 2
                for (int p = 0; p < KT; p += 4) {
                        float4 w[4];

#pragma unroll
                        for (int i = 0; i < 4; i++)
                                w[i] = *(const float4 *)&ps[4 * qa + i][p];
#pragma unroll
                        for (int u = 0; u < 4; u++)
#pragma unroll
                                for (int k = 0; k < DP; k++) {
                                        const float2 v =
                                                *(const float2 *)&vs[p + u][2 * qb + 32 * k];

#pragma unroll
                                        for (int i = 0; i < 4; i++) {
                                                const float wi = u == 0   ? w[i].x
                                                                 : u == 1 ? w[i].y
                                                                 : u == 2 ? w[i].z
                                                                          : w[i].w;

                                                o[i][k][0] = fmaf(wi, v.x, o[i][k][0]);
                                                o[i][k][1] = fmaf(wi, v.y, o[i][k][1]);
                                        }
                                }
                }
        }
#pragma unroll
        for (int i = 0; i < 4; i++) { /* each row's sum over its half-warp */
#pragma unroll
                for (int off = 1; off < 16; off <<= 1)
                        l[i] += __shfl_xor_sync(0xffffffffu, l[i], off);
                if (!valid[i])
                        continue;
                const uint32_t r = 4 * qa + i, t = blockIdx.x * a.qt + r / a.group;
                const uint32_t h = kvh * a.group + r % a.group;
                const float inv = 1.0f / l[i]; /* l >= 1: the maximum's own term */
                float *y = a.out + (size_t)t * a.ldo + (size_t)h * HD;

#pragma unroll
                for (int k = 0; k < DP; k++) {
                        y[2 * qb + 32 * k] = o[i][k][0] * inv;
                        y[2 * qb + 32 * k + 1] = o[i][k][1] * inv;
                }
        }
}

extern "C" int m40_cuda_attention_prompt(const struct m40_cuda_kv *kv, const float *q, size_t ldq,
                                         float *out, size_t ldo, uint32_t n_heads,
                                         uint32_t n_kv_heads, uint32_t head_dim, float scale,
                                         uint32_t n_tok, struct CUstream_st *stream)
{
        struct ap_args a;

        if (!kv || !q || !out || !n_kv_heads || n_heads % n_kv_heads || !head_dim ||
            ldq < (size_t)n_heads * head_dim || ldo < (size_t)n_heads * head_dim ||
            !kv->page_tokens || !kv->base)
                return -EINVAL;
        if (!n_tok || !n_heads)
                return 0;
        if (head_dim % 32 || head_dim > 128 || n_heads / n_kv_heads > AP_ROWS ||
            n_kv_heads > 65535 || (uintptr_t)kv->base % 16 || kv->kv_dim % 8 ||
            kv->page_elems % 8 || kv->v_off % 8)
                return -ENOTSUP;
        a.q = q;
        a.ldq = ldq;
        a.out = out;
        a.ldo = ldo;
        a.n_tok = n_tok;
        a.group = n_heads / n_kv_heads;
        a.qt = AP_ROWS / a.group;
        a.scale = scale;
        const dim3 grid((n_tok + a.qt - 1) / a.qt, n_kv_heads);

        switch (head_dim) {
        case 32:
                k_attn_prompt<32><<<grid, AP_THREADS, 0, stream>>>(*kv, a);
                break;
        case 64:
                k_attn_prompt<64><<<grid, AP_THREADS, 0, stream>>>(*kv, a);
                break;
        case 96:
                k_attn_prompt<96><<<grid, AP_THREADS, 0, stream>>>(*kv, a);
                break;
        default:
                k_attn_prompt<128><<<grid, AP_THREADS, 0, stream>>>(*kv, a);
                break;
        }
        return m40_cuda_launch_status("attention_prompt");
}
