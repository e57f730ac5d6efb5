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
 * k_attn_prompt<HD> (HD = head_dim: 32, 64, 96 or 128): block (x, kvh) takes AP_ROWS rows
 * (token, query head) = the qt = AP_ROWS / group tokens x0 * qt .. + qt - 1 with the group
 * query heads of KV head kvh; AP_THREADS threads, AP_GROUP per row. Positions 0 ..
 * max(pos of its tokens) go in tiles of AP_KT: the tile's K and V are loaded (16-byte
 * pieces, all in flight at once) into shared memory as floats, each row's AP_GROUP
 * threads score AP_KT / AP_GROUP positions each (dot products from shared memory), an
 * online softmax per row (running max m, sum l in double, accumulators rescaled when m
 * grows), and each thread adds the weighted V to its HD / AP_GROUP output dims (4
 * consecutive dims every 32). Positions past a row's own pos score -inf. Shared memory:
 * (AP_ROWS + 2 AP_KT) * HD floats + padding: 41 KB for HD 128. The next tile's K/V loads
 * (and the pages of the one after) are issued before this tile's math and land in
 * registers, so a tile costs its math or its load latency, not both. Deterministic: fixed
 * orders; the one atomic, in shared memory, only finds the largest position.
 * Tolerance: as m40_cuda_attention() (attention.cu): FP32 dot products and sums in
 * another order, expf's ulps, the rescaling; tests/gpu/test_ops.c holds both kernels to
 * the same bound. Maxwell-clean: f16 only converted, FP32/FP64 math, warp shuffles,
 * shared memory, shared-memory atomicMax (sm_20+). */
#include <errno.h>
#include <math.h>
#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/launch.h"
#include "cuda/ops.h"

#define AP_THREADS 128
#define AP_GROUP   8 /* threads per row */
#define AP_ROWS    (AP_THREADS / AP_GROUP)
#define AP_KT      32                 /* positions per tile */
#define AP_SPT     (AP_KT / AP_GROUP) /* positions a thread scores per tile */

static_assert(AP_ROWS == 16 && AP_SPT == 4, "16 rows of 8 threads, 4 positions each");
static_assert(AP_KT <= AP_THREADS, "one thread per tile position finds its K/V row");

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
        enum { KS = HD + 4 }; /* K row stride: rows 16 bytes apart mod 128, no bank conflict */
        enum { NCH = AP_KT * HD / 8, CPT = NCH / AP_THREADS }; /* 16-byte pieces per tile */
        enum { DPT = HD / 32 };                                /* float4 output groups per thread */
        static_assert(NCH % AP_THREADS == 0, "whole pieces per thread");
        __shared__ __align__(16) float qs[AP_ROWS][HD];
        __shared__ __align__(16) float ks[AP_KT][KS];
        __shared__ __align__(16) float vs[AP_KT][HD];
        __shared__ size_t koff[AP_KT];
        __shared__ uint32_t maxp;
        const int tid = threadIdx.x, r = tid / AP_GROUP, j = tid % AP_GROUP, lane = tid & 31;
        const uint32_t kvh = blockIdx.y, ti = (uint32_t)r / a.group, g = (uint32_t)r % a.group;
        const uint32_t t = blockIdx.x * a.qt + ti;
        const bool valid = ti < a.qt && t < a.n_tok;
        const uint32_t h = kvh * a.group + g;
        const uint32_t mypos = valid ? kv.pos[t] : 0;
        const uint32_t tbl = kv.tbl[0]; /* one sequence: every token's table */
        uint4 kr[CPT], vr[CPT]; /* the next tile's K and V, in flight during this one's math */
        uint32_t pg = 0;        /* tid < AP_KT: the page of position tid of the tile after */
        float o[DPT][4];
        float m = -INFINITY;
        double l = 0.0;

        if (tid == 0)
                maxp = 0;
#pragma unroll
        for (int i = 0; i < HD / AP_GROUP; i++) {
                const int d = j + AP_GROUP * i;

                qs[r][d] = valid ? a.q[(size_t)t * a.ldq + (size_t)h * HD + d] : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < DPT; i++)
                o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
        __syncthreads();
        if (valid && j == 0)
                atomicMax(&maxp, mypos);
        __syncthreads();
        const uint32_t last = maxp;

        /* tile 0's rows and loads; tile 1's pages */
        if (tid < AP_KT) {
                koff[tid] = ap_off(kv, ap_page(kv, tbl, tid, last), tid, kvh, HD);
                pg = ap_page(kv, tbl, AP_KT + tid, last);
        }
        __syncthreads();
        ap_load<HD, CPT>(kv, koff, 0, last, kr, vr);

        for (uint32_t p0 = 0; p0 <= last; p0 += AP_KT) {
                const uint32_t pn = p0 + AP_KT; /* the next tile */

                __syncthreads(); /* the previous tile's readers are done */
#pragma unroll
                for (int i = 0; i < CPT; i++) {
                        const int c = tid + i * AP_THREADS, pi = c / (HD / 8), dc = c % (HD / 8);

                        h8(kr[i], &ks[pi][8 * dc]);
                        h8(vr[i], &vs[pi][8 * dc]);
                }
                if (tid < AP_KT && pn <= last) { /* the next tile's rows, the pages after */
                        koff[tid] = ap_off(kv, pg, pn + tid, kvh, HD);
                        pg = ap_page(kv, tbl, pn + AP_KT + tid, last);
                }
                __syncthreads();
                if (pn <= last)
                        ap_load<HD, CPT>(kv, koff, pn, last, kr, vr);

                /* scores of positions p0 + j + 8k, k < AP_SPT */
                float s[AP_SPT];

#pragma unroll
                for (int k = 0; k < AP_SPT; k++)
                        s[k] = 0.0f;
#pragma unroll 8
                for (int d = 0; d < HD; d += 4) {
                        const float4 qv = *(const float4 *)&qs[r][d];

#pragma unroll
                        for (int k = 0; k < AP_SPT; k++) {
                                const float4 kk = *(const float4 *)&ks[j + AP_GROUP * k][d];

                                s[k] = fmaf(qv.x, kk.x, s[k]);
                                s[k] = fmaf(qv.y, kk.y, s[k]);
                                s[k] = fmaf(qv.z, kk.z, s[k]);
                                s[k] = fmaf(qv.w, kk.w, s[k]);
                        }
                }
                float mt = -INFINITY;

#pragma unroll
                for (int k = 0; k < AP_SPT; k++) {
                        const uint32_t p = p0 + j + AP_GROUP * k;

                        s[k] = valid && p <= mypos ? s[k] * a.scale : -INFINITY;
                        mt = fmaxf(mt, s[k]);
                }
#pragma unroll
                for (int off = 1; off < AP_GROUP; off <<= 1)
                        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off));
                /* the row's new maximum; -inf while none of its positions was seen */
                const float mn = fmaxf(m, mt);
                const bool any = mn != -INFINITY;
                const float corr = any ? expf(m - mn) : 1.0f;
                float ps = 0.0f;

#pragma unroll
                for (int k = 0; k < AP_SPT; k++) {
                        s[k] = any ? expf(s[k] - mn) : 0.0f;
                        ps += s[k];
                }
#pragma unroll
                for (int off = 1; off < AP_GROUP; off <<= 1)
                        ps += __shfl_xor_sync(0xffffffffu, ps, off);
                l = l * (double)corr + (double)ps;
                m = mn;
#pragma unroll
                for (int i = 0; i < DPT; i++)
#pragma unroll
                        for (int e = 0; e < 4; e++)
                                o[i][e] *= corr;
                                /* o += sum_p w_p V[p]: w of position j' + 8k from lane j' of the
                                 * row */
#pragma unroll
                for (int pi = 0; pi < AP_KT; pi++) {
                        const float w = __shfl_sync(0xffffffffu, s[pi / AP_GROUP],
                                                    (lane & ~(AP_GROUP - 1)) | (pi % AP_GROUP));

#pragma unroll
                        for (int i = 0; i < DPT; i++) {
                                const float4 v = *(const float4 *)&vs[pi][4 * j + 32 * i];

                                o[i][0] = fmaf(w, v.x, o[i][0]);
                                o[i][1] = fmaf(w, v.y, o[i][1]);
                                o[i][2] = fmaf(w, v.z, o[i][2]);
                                o[i][3] = fmaf(w, v.w, o[i][3]);
                        }
                }
        }
        if (!valid)
                return;
        const float inv = (float)(1.0 / l); /* l >= 1: the maximum's own term */
        float *y = a.out + (size_t)t * a.ldo + (size_t)h * HD;

#pragma unroll
        for (int i = 0; i < DPT; i++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                        y[4 * j + 32 * i + e] = o[i][e] * inv;
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
