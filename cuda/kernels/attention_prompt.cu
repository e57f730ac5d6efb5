/* cuda/kernels/attention_prompt.cu - causal attention for the tokens of one sequence (a prompt
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
 * query heads of KV head kvh. Positions 0 .. max(pos of its tokens) go in tiles of AP_KT =
 * 32, dealt round robin to NG groups of AP_THREADS = 64 threads (NG = 2 for HD <= 64; one
 * above, where two groups' tiles would pass the 48 KB of shared memory a block may have on
 * an M40). In a group, the tile's K and V are loaded (16-byte pieces, all in flight at
 * once) into shared memory as floats, and the scores and the weighted sum are two small
 * matrix products in register tiles: thread (a, b) = (tid / 16, tid % 16) scores rows 4a ..
 * 4a + 3 against positions b and b + 16 (8 products from 6 shared loads per 4 dims), keeps
 * an online softmax per row (running max m over its half-warp, its own share of the sum,
 * accumulators rescaled when m grows), puts the tile's weights in shared memory, and adds
 * them times V to rows 4a .. 4a + 3 of its output dims 2b, 2b + 1 (+ 32, ...). Positions
 * past a row's own pos score -inf. At the end group 0 merges group 1's accumulators,
 * maxima and sums. Shared memory: (16 + NG * 2 * 32) * HD + NG * 16 * 36 floats + padding:
 * 43 KB for HD 64 and 128. The next tile's K/V loads (and the pages of the one after) are
 * issued before this tile's math and land in registers, so a tile costs its math or its
 * load latency, not both. Measured (H100, 135M model, 512-token prompt, ncu): the first
 * version, one row per 8 threads each scoring 4 positions, 128 threads, was 64 us a layer,
 * bound by shared memory (every 16-byte shared load costs 4 wavefronts whatever its lanes
 * share, and it did one per 4 products: 0.29 eligible warps, most waiting on it); the
 * register tiles (64 threads, tiles of 64) 49 us, then bound by the chain of tiles of the
 * last tokens' blocks, at 1.2 warps per scheduler; two groups of 32-position tiles 42 us.
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

#include "cuda/runtime/launch.h"
#include "cuda/kernels/ops.h"

#define AP_THREADS 64           /* per group */
#define AP_ROWS    16           /* rows (token, query head) per block: 4 per row quad a */
#define AP_KT      32           /* positions per tile */
#define AP_PT      (AP_KT / 16) /* positions a thread scores per tile */
/* Groups per block: AP_NG for head_dim <= 64, one above (a knob for A/B builds, as
 * tests/bench/ab-variants.sh takes them: 1 or 2). */
#ifndef AP_NG
#define AP_NG 2
#endif
static_assert(AP_NG == 1 || AP_NG == 2, "one or two groups");

/* The block shape for head_dim HD: NG groups, DP float pairs of output dims per thread,
 * CPT 16-byte K (and V) pieces per thread and tile. */
template <int HD> struct ap_cfg {
        enum { NG = HD <= 64 ? AP_NG : 1, DP = HD / 32, CPT = AP_KT * HD / 8 / AP_THREADS };
        static_assert(HD % 32 == 0 && AP_KT <= AP_THREADS && AP_KT * HD / 8 % AP_THREADS == 0,
                      "whole pieces per thread, a thread per tile row");
        /* groups 1.. hand their accumulators, maxima and sums over in their V tiles */
        static_assert(AP_THREADS * (8 * DP + 8) <= AP_KT * HD, "merge data fits a V tile");
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

/* Thread gt of a group: its 16-byte pieces of the K and V rows of tile p0 (koff: the
 * rows' offsets), zeros past last. */
template <int HD, int CPT>
static __device__ __forceinline__ void ap_load(const struct m40_cuda_kv &kv, const size_t *koff,
                                               uint32_t p0, uint32_t last, int gt, uint4 *kr,
                                               uint4 *vr)
{
#pragma unroll
        for (int i = 0; i < CPT; i++) {
                const int c = gt + i * AP_THREADS, pi = c / (HD / 8), dc = c % (HD / 8);

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
static __global__ void __launch_bounds__(AP_THREADS *ap_cfg<HD>::NG)
        k_attn_prompt(const struct m40_cuda_kv kv, const struct ap_args a)
{
        typedef ap_cfg<HD> C;
        enum { NG = C::NG, DP = C::DP, CPT = C::CPT, KT = AP_KT, PT = AP_PT };
        enum { KS = HD + 4 }; /* K row stride: rows 16 bytes apart mod 128, no bank conflict */
        enum { PS = KT + 4 }; /* weight row stride */
        __shared__ __align__(16) float qs[AP_ROWS][HD];
        __shared__ __align__(16) float ks[NG][KT][KS];
        __shared__ __align__(16) float vs[NG][KT][HD];
        __shared__ __align__(16) float ps[NG][AP_ROWS][PS];
        __shared__ size_t koff[NG][KT];
        __shared__ uint32_t maxp;
        const int gi = threadIdx.x / AP_THREADS, tid = threadIdx.x % AP_THREADS; /* group, thread */
        const int qa = tid >> 4, qb = tid & 15;
        const uint32_t kvh = blockIdx.y, tbl = kv.tbl[0]; /* one sequence: every token's table */
        uint32_t mypos[4];                                /* rows 4qa + i: their pos, or none */
        bool valid[4];
        uint4 kr[CPT], vr[CPT]; /* the next tile's K and V, in flight during this one's math */
        uint32_t pg = 0;        /* tid < KT: the page of position tid of the tile after */
        float o[4][DP][2];      /* rows 4qa + i, dims 2qb + 32k + 0, 1 */
        float m[4], l[4];       /* per row: running max, this thread's share of the sum */

        if (threadIdx.x == 0)
                maxp = 0;
        for (int e = threadIdx.x; e < AP_ROWS * HD; e += AP_THREADS * NG) {
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
        if (gi == 0 && qb == 0)
#pragma unroll
                for (int i = 0; i < 4; i++)
                        if (valid[i])
                                atomicMax(&maxp, mypos[i]);
        __syncthreads();
        const uint32_t last = maxp;
        const uint32_t step = NG * KT, first = gi * KT; /* this group's tiles: first + step k */

        /* this group's first tile's rows and loads; its second's pages */
        if (tid < KT) {
                koff[gi][tid] =
                        ap_off(kv, ap_page(kv, tbl, first + tid, last), first + tid, kvh, HD);
                pg = ap_page(kv, tbl, first + step + tid, last);
        }
        __syncthreads();
        ap_load<HD, CPT>(kv, koff[gi], first, last, tid, kr, vr);

        /* every group runs the loop as often as group 0 (the barriers); a group past last
         * only joins them */
        for (uint32_t base = 0; base <= last; base += step) {
                const uint32_t p0 = base + first, pn = p0 + step; /* this tile, the next */
                const bool mine = p0 <= last;

                __syncthreads(); /* the previous tile's readers are done */
#pragma unroll
                for (int i = 0; i < CPT; i++) {
                        const int c = tid + i * AP_THREADS, pi = c / (HD / 8), dc = c % (HD / 8);

                        h8(kr[i], &ks[gi][pi][8 * dc]);
                        h8(vr[i], &vs[gi][pi][8 * dc]);
                }
                if (tid < KT && pn <= last) { /* the next tile's rows, the pages after */
                        koff[gi][tid] = ap_off(kv, pg, pn + tid, kvh, HD);
                        pg = ap_page(kv, tbl, pn + step + tid, last);
                }
                __syncthreads();
                if (!mine)
                        continue;
                if (pn <= last)
                        ap_load<HD, CPT>(kv, koff[gi], pn, last, tid, kr, vr);

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
                                kk[j] = *(const float4 *)&ks[gi][qb + 16 * j][d];
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

                                ps[gi][4 * qa + i][qb + 16 * j] = w;
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
                                w[i] = *(const float4 *)&ps[gi][4 * qa + i][p];
#pragma unroll
                        for (int u = 0; u < 4; u++)
#pragma unroll
                                for (int k = 0; k < DP; k++) {
                                        const float2 v =
                                                *(const float2 *)&vs[gi][p + u][2 * qb + 32 * k];

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
        if (NG > 1) { /* groups 1.. hand (o, m, l) over in their V tiles; group 0 merges */
                enum { XN = 8 * DP + 8 }; /* floats per thread */
                __syncthreads();
                if (gi > 0) {
                        float *x = &vs[gi][0][0] + tid * XN;

#pragma unroll
                        for (int i = 0; i < 4; i++) {
#pragma unroll
                                for (int k = 0; k < DP; k++) {
                                        x[8 * k + 2 * i] = o[i][k][0];
                                        x[8 * k + 2 * i + 1] = o[i][k][1];
                                }
                                x[8 * DP + i] = m[i];
                                x[8 * DP + 4 + i] = l[i];
                        }
                }
                __syncthreads();
                if (gi > 0)
                        return;
                for (int g = 1; g < NG; g++) {
                        const float *x = &vs[g][0][0] + tid * XN;

#pragma unroll
                        for (int i = 0; i < 4; i++) {
                                /* m[i]: finite for a valid row (tile 0 holds position 0) */
                                const float m1 = x[8 * DP + i], mn = fmaxf(m[i], m1);
                                const float c0 = valid[i] ? expf(m[i] - mn) : 0.0f;
                                const float c1 = valid[i] && m1 != -INFINITY ? expf(m1 - mn) : 0.0f;

                                l[i] = l[i] * c0 + x[8 * DP + 4 + i] * c1;
                                m[i] = mn;
#pragma unroll
                                for (int k = 0; k < DP; k++) {
                                        o[i][k][0] = o[i][k][0] * c0 + x[8 * k + 2 * i] * c1;
                                        o[i][k][1] = o[i][k][1] * c0 + x[8 * k + 2 * i + 1] * c1;
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
                k_attn_prompt<32><<<grid, AP_THREADS * ap_cfg<32>::NG, 0, stream>>>(*kv, a);
                break;
        case 64:
                k_attn_prompt<64><<<grid, AP_THREADS * ap_cfg<64>::NG, 0, stream>>>(*kv, a);
                break;
        case 96:
                k_attn_prompt<96><<<grid, AP_THREADS * ap_cfg<96>::NG, 0, stream>>>(*kv, a);
                break;
        default:
                k_attn_prompt<128><<<grid, AP_THREADS * ap_cfg<128>::NG, 0, stream>>>(*kv, a);
                break;
        }
        return m40_cuda_launch_status("attention_prompt");
}
