/* cuda/kernels/attention.cu - RoPE with the KV-cache append, and attention over the paged f16 KV
 * cache, on the GPU (contracts in ops.h).
 *
 * Computes:
 *   k_rope_store  for token t at position pos[t]: rotate each pair of q (n_heads, hd) and
 *                 k (n_kv_heads, hd) by the host-built cos/sin table row pos[t] (the
 *                 values of m40_cpu_rope()), llama (2i, 2i+1) or NEOX (i, i + n_rot/2)
 *                 pairs, with the CPU's roundings (no fused multiply-add); then write k
 *                 and v as f16 (round to nearest even) into the token's page slot.
 *                 Grid (n_tok, up to 64: one item per thread for a decode token), 256
 *                 threads. Exact: q, k and the cache bit for bit.
 *   k_attention   flash-decoding: for token t and query head h, softmax(q . K[p] * scale)
 *                 weighted V over p <= pos[t]. The positions are cut into n_split spans
 *                 (the split count grows as tokens x heads shrink and the context grows:
 *                 make_plan(), about ATTN_TARGET blocks, spans of at least ATTN_SPAN_MIN
 *                 positions, at most ATTN_MAX_SPLITS); block (x, t, s) takes the <= 8
 *                 query heads of one KV head that x names (K and V read once for all of
 *                 them; fewer, down to one, when a launch would have under ATTN_MIN_BLOCKS
 *                 blocks) over span s in tiles of ATTN_TILE positions: scores (one warp per
 *                 position), an online softmax (running max m, sum l of e^(score - m) in
 *                 double, the partial weighted V rescaled when m grows), one thread per
 *                 output dim (its accumulators in registers: DPT = 1, 2 or 4 dims for
 *                 hd <= 128, 256, 512). One split writes out directly; otherwise each
 *                 split writes (m, l, acc) to the workspace, and the last split of (t, x)
 *                 to finish (a counter: atomicAdd after __threadfence) merges them:
 *                 out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s. 128 threads; shared
 *                 memory (hb * (hd + 32)) floats + ~1.5 KB, at most 18.5 KB (hd 512);
 *                 for hd <= 128 with 16-byte aligned rows in decode-sized launches also
 *                 the tile's K and V (2 x 32 x hd f16, all their loads in flight at
 *                 once: at most 22.9 KB). The heads per block are a template bound
 *                 (HB: 1, 2, 4, 8) and decode-sized launches take the smallest that
 *                 holds hb, so a block of one head (batch-1 decode of every model here)
 *                 runs no loop over eight: same-run A/B (H100, batch-1 decode at
 *                 contexts 16..144), HB = 8 -> hb: 8B Q8_0 255.8 -> 273.9 tok/s, 8B Q4_0
 *                 358.5 -> 395.9, 1B Q4_0 1244 -> 1489, 135M Q8_0 980 -> 1247; with the
 *                 score sums reduced together outside any branch (warp_sum_scatter; a
 *                 shuffle under a condition the compiler cannot prove uniform became a
 *                 collective fallback, ~5x the instructions), against the kernel before
 *                 both: 8B Q8_0 265.5 -> 273.9, 1B Q4_0 1372 -> 1489, 135M Q8_0 1123 ->
 *                 1247 (runs apart).
 *                 Decode and causal prefill are the same kernel: a prefill token sees
 *                 the K/V its chunk wrote before it. Decode launches of one query head
 *                 per block over more than one tile take k_attention_g instead
 *                 (attention_decode.cu).
 * Tolerance against m40_cpu_attention_head() (both read the same f16 K and V, so f16
 * rounding is not in the error): FP32 dot products and sums in another order, expf's
 * ulps and the rescaling by e^(m_old - m_new): |out - ref| <= 1e-5 * sum_p w_p |V_p|
 * (1 + S_p), S_p = scale * sum_j |q_j K_p[j]|: relative to the size of the terms the
 * output sums, each weight's error relative to its score's terms (a score's FP32 sum is
 * only as exact as S_p allows, on either side: ~3e-6 for head_dim 512). Maxwell-clean: f16 only
 * converted (cvt), FP32/ FP64 math, warp shuffles, __syncwarp, shared memory, plain atomicAdd +
 * __threadfence. */
#include <errno.h>
#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "m40/error.h"
#include "cuda/kernels/ops.h"
#include "cuda/kernels/attention.cuh"

/* One rotated pair (a, b) of v with the row's cos/sin (cs[2i], cs[2i + 1]), the CPU's
 * roundings: no contraction into fma (the CPU engine builds with -ffp-contract=off). */
__device__ __forceinline__ void rotate_pair(float *v, int i, int half, const float *cs, int neox,
                                            int *a, int *b, float *y0, float *y1)
{
        const float c = cs[2 * i], s = cs[2 * i + 1];

        *a = neox ? i : 2 * i;
        *b = neox ? i + half : 2 * i + 1;
        const float x0 = v[*a], x1 = v[*b];
        *y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        *y1 = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
        v[*a] = *y0;
        v[*b] = *y1;
}

/* Token blockIdx.x; its work items are cut over gridDim.y blocks: q's pairs, k's pairs
 * (rotated, then stored), k's elements past n_rot, v's elements (stored). Every item
 * touches its own elements: no barrier. */
__global__ void k_rope_store(struct m40_cuda_rope r, struct m40_cuda_kv kv, float *q, size_t ldq,
                             float *k, const float *__restrict__ v, size_t ldk, int n_heads,
                             int n_kv_heads, int hd)
{
        const int t = blockIdx.x, half = (int)r.n_rot / 2, rest = hd - (int)r.n_rot;
        const uint32_t pos = kv.pos[t];
        const float *cs = r.cs + (size_t)pos * r.n_rot;
        const size_t off = slot_in(kv, kv.pages[kv.tbl[t] + pos / kv.page_tokens], pos);
        __half *kc = (__half *)kv.base + off, *vc = (__half *)kv.base + kv.v_off + off;
        const int nq = n_heads * half, nk = n_kv_heads * half, nr = n_kv_heads * rest;
        const int nv = n_kv_heads * hd, total = nq + nk + nr + nv;
        float *qt = q + (size_t)t * ldq, *kt = k + (size_t)t * ldk;
        const float *vt = v + (size_t)t * ldk;

        for (int e = blockIdx.y * blockDim.x + threadIdx.x; e < total;
             e += gridDim.y * blockDim.x) {
                int a, b;
                float y0, y1;

                if (e < nq) {
                        rotate_pair(qt + (size_t)(e / half) * hd, e % half, half, cs, r.neox, &a,
                                    &b, &y0, &y1);
                } else if (e < nq + nk) {
                        const int h = (e - nq) / half;

                        rotate_pair(kt + (size_t)h * hd, (e - nq) % half, half, cs, r.neox, &a, &b,
                                    &y0, &y1);
                        kc[h * hd + a] = __float2half_rn(y0);
                        kc[h * hd + b] = __float2half_rn(y1);
                } else if (e < nq + nk + nr) {
                        const int x = e - nq - nk, i = (x / rest) * hd + (int)r.n_rot + x % rest;

                        kc[i] = __float2half_rn(kt[i]);
                } else {
                        const int i = e - nq - nk - nr;

                        vc[i] = __float2half_rn(vt[i]);
                }
        }
}

extern "C" int m40_cuda_rope_store(const struct m40_cuda_rope *r, const struct m40_cuda_kv *kv,
                                   float *q, size_t ldq, float *k, const float *v, size_t ldk,
                                   uint32_t n_heads, uint32_t n_kv_heads, uint32_t head_dim,
                                   uint32_t n_tok, struct CUstream_st *stream)
{
        if (!r || !kv || !q || !k || !v || r->n_rot > head_dim || (r->n_rot & 1) ||
            ldq < (size_t)n_heads * head_dim || ldk < (size_t)n_kv_heads * head_dim ||
            !kv->page_tokens)
                return -EINVAL;
        if (!n_tok)
                return 0;
        /* A token's items over as many 256-thread blocks as give each thread one (decode
         * has one token: its rotations and stores are latency, not throughput), at most
         * 64; prefill's many tokens need no more than one block each. */
        const uint32_t items = (n_heads + n_kv_heads) * (r->n_rot / 2) +
                               n_kv_heads * (head_dim - r->n_rot) + n_kv_heads * head_dim;
        uint32_t per = (items + 255) / 256;

        per = n_tok >= 64 ? 1 : per > 64 ? 64 : per ? per : 1;
        k_rope_store<<<dim3(n_tok, per), 256, 0, stream>>>(*r, *kv, q, ldq, k, v, ldk, (int)n_heads,
                                                           (int)n_kv_heads, (int)head_dim);
        return m40_cuda_launch_status("rope_store");
}

/* make_plan - the split of a launch (pointers not set); returns its workspace bytes
 * (0 when it needs none: one split). */
static uint64_t make_plan(uint32_t n_tok, uint32_t n_heads, uint32_t n_kv_heads, uint32_t head_dim,
                          uint32_t max_pos, struct attn_plan *p)
{
        const uint64_t ctx = (uint64_t)max_pos + 1, tiles = cdiv(ctx, ATTN_TILE);
        const uint32_t group = n_heads / n_kv_heads;
        uint32_t nsub = cdiv(group, ATTN_HB);

        /* Few blocks (decode of one or a few tokens): fewer query heads per block, down to
         * one, so more SMs work; the K/V loads they share come from L2 then. */
        while ((uint64_t)n_tok * n_kv_heads * nsub < ATTN_MIN_BLOCKS && nsub < group)
                nsub = 2 * nsub < group ? 2 * nsub : group;
        const uint64_t blocks = (uint64_t)n_tok * n_kv_heads * nsub;
        uint64_t s = blocks >= ATTN_TARGET ? 1 : cdiv(ATTN_TARGET, blocks), slots;

        if (s > ATTN_MAX_SPLITS)
                s = ATTN_MAX_SPLITS;
        if (s > cdiv(ctx, ATTN_SPAN_MIN))
                s = cdiv(ctx, ATTN_SPAN_MIN);
        p->span = ATTN_TILE * cdiv(tiles, s);
        s = cdiv(ctx, p->span); /* no empty split */
        p->n_heads = (int)n_heads;
        p->group = (int)group;
        p->nsub = (int)nsub;
        p->hb = (int)cdiv(group, nsub);
        p->hd = (int)head_dim;
        p->n_split = (int)s;
        p->rstep = p->cstep = 0; /* set by the VT launch */
        if (s == 1)
                return 0;
        slots = (uint64_t)n_tok * n_heads * s; /* s > 1: blocks < ATTN_TARGET */
        return M40_CUDA_ATTN_WS_COUNTERS + ws_al(slots * head_dim * sizeof(float)) +
               ws_al(slots * sizeof(float2));
}

extern "C" size_t m40_cuda_attention_workspace(uint32_t n_tok, uint32_t n_heads, uint32_t max_pos,
                                               uint32_t head_dim)
{
        /* n_split <= ceil(TARGET / (n_tok * gb)) and gb >= n_heads / HB, so the slots
         * n_tok * n_heads * n_split of any launch with at most n_tok tokens are at most
         * TARGET * HB + n_tok * n_heads; and at most n_tok * n_heads * MAX_SPLITS. */
        const uint64_t ctx = (uint64_t)max_pos + 1, th = (uint64_t)n_tok * n_heads;
        uint64_t a = cdiv(ctx, ATTN_SPAN_MIN), slots;

        if (a > ATTN_MAX_SPLITS)
                a = ATTN_MAX_SPLITS;
        if (a <= 1 || !th)
                return 0;
        slots = th * a;
        if (slots > (uint64_t)ATTN_TARGET * ATTN_HB + th)
                slots = (uint64_t)ATTN_TARGET * ATTN_HB + th;
        return (size_t)(M40_CUDA_ATTN_WS_COUNTERS + ws_al(slots * head_dim * sizeof(float)) +
                        ws_al(slots * sizeof(float2)));
}

template <int VEC> __device__ __forceinline__ void ld_kv(const __half *p, float &a, float &b)
{
        if (VEC == 2) {
                const float2 f = __half22float2(__ldg((const __half2 *)p));

                a = f.x;
                b = f.y;
        } else {
                a = __half2float(__ldg(p));
                b = 0.0f;
        }
}

/* VEC 2: K rows read as half2 (head_dim and every offset even), else 1. DPT: output
 * dims per thread, head_dim <= DPT * ATTN_THREADS (the accumulators live in registers).
 * VT: the tile's K and V rows are loaded into shared memory in 16-byte pieces, all in
 * flight at once, before the scores are computed (head_dim <= 128 and every offset a
 * multiple of 8 elements): one load latency per tile; else each warp reads K rows for
 * ATTN_PU positions at a time and each thread its V elements from global memory after
 * the softmax, 4 positions at a time. */
template <int VEC, int DPT, bool VT, int HB>
__global__ void __launch_bounds__(ATTN_THREADS)
        k_attention(struct m40_cuda_kv kv, const float *__restrict__ q, size_t ldq,
                    float *__restrict__ out, size_t ldo, struct attn_plan pl)
{
        /* q (nh, hd), then scores (nh, ATTN_TILE) floats; VT: then V and K (ATTN_TILE, hd)
         * f16 */
        extern __shared__ __align__(16) float sh[];
        __shared__ size_t s_off[ATTN_TILE];
        __shared__ float s_m[HB], s_a[HB];
        __shared__ double s_l[HB];
        const int t = blockIdx.y, split = blockIdx.z, hd = pl.hd;
        const int kvh = blockIdx.x / pl.nsub, j0 = (blockIdx.x % pl.nsub) * pl.hb;
        const int nh = min(pl.hb, pl.group - j0), h0 = kvh * pl.group + j0;
        const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
        const uint32_t pos = kv.pos[t], tbl = kv.tbl[t];
        /* splits of this token: those that hold a position <= pos (the last also takes
         * any position past n_split * span, should pos exceed the launch's max_pos) */
        const int n_split = (int)min(pos / pl.span + 1, (uint32_t)pl.n_split);
        const uint32_t p0 = (uint32_t)split * pl.span;
        const uint32_t p1 = split == n_split - 1 ? pos + 1 : p0 + pl.span;
        const __half *kb = (const __half *)kv.base + (size_t)kvh * hd;
        const __half *vb = kb + kv.v_off;
        float *qs = sh, *sc = sh + nh * hd;
        __half *vs = (__half *)(sh + pl.hb * (hd + ATTN_TILE)); /* VT */
        __half *kt = vs + ATTN_TILE * hd; /* VT: the tile's K rows, written by the block */
        const __half2 *ks = (const __half2 *)kt;
        float acc[HB][DPT];

        static_assert(!VT || (DPT == 1 && VEC == 2), "VT: head_dim <= 128, half2 K rows");
        static_assert(HB >= 1 && HB <= ATTN_HB && (HB & (HB - 1)) == 0, "HB: 1, 2, 4 or 8");

        if (split >= n_split)
                return; /* the whole block: no position of this token here */
        /* the first tile's page lookups in flight with q's loads (one round trip, not
         * two): its offsets are stored before the barrier below */
        uint32_t page0 = 0;

        if (ATTN_Q_EARLY && tid < (int)min(p1 - p0, (uint32_t)ATTN_TILE))
                page0 = __ldg(kv.pages + tbl + (p0 + tid) / kv.page_tokens);
        for (int e = threadIdx.x; e < nh * hd; e += ATTN_THREADS)
                qs[e] = q[(size_t)t * ldq + (size_t)h0 * hd + e];
        if (ATTN_Q_EARLY && tid < (int)min(p1 - p0, (uint32_t)ATTN_TILE))
                s_off[tid] = slot_in(kv, page0, p0 + tid);
        if (threadIdx.x < HB) {
                s_m[threadIdx.x] = -INFINITY;
                s_l[threadIdx.x] = 0.0;
        }
#pragma unroll
        for (int j = 0; j < HB; j++)
#pragma unroll
                for (int d = 0; d < DPT; d++)
                        acc[j][d] = 0.0f;
        __syncthreads();

        for (uint32_t tp = p0; tp < p1; tp += ATTN_TILE) {
                const int n = (int)min(p1 - tp, (uint32_t)ATTN_TILE);

                /* the tile's K/V offsets first, every thread one position: the page-table
                 * lookups in parallel, not one dependent load ahead of each score (the
                 * first tile's are in s_off already) */
                if (!ATTN_Q_EARLY || tp != p0) {
                        for (int pp = tid; pp < n; pp += ATTN_THREADS) {
                                const uint32_t p = tp + pp;

                                s_off[pp] =
                                        slot_in(kv, __ldg(kv.pages + tbl + p / kv.page_tokens), p);
                        }
                        __syncthreads();
                }

                /* VT: the tile's K and V rows, all loads issued at once; K is stored to
                 * shared memory for the scores, V after them (piece e: row e / cpr, 16
                 * bytes c = e % cpr of it) */
                const int cpr = hd / 8;
                uint4 vbuf[VT ? ATTN_VCH : 1];

                if (VT) {
                        uint4 kbuf[ATTN_VCH];

                        vt_load(kb, vb, s_off, n, cpr, tid, pl.rstep, pl.cstep, kbuf, vbuf);
                        vt_store(kt, kbuf, n, cpr, tid);
                        __syncthreads();
                }

                /* scores of the tile: one warp per position, ATTN_PU positions per pass with
                 * their K loads in flight together, K read once for nh heads (each score
                 * summed over the row's lanes, then reduced with the pass's others below) */
                for (int pb = warp * ATTN_PU; pb < n; pb += ATTN_WARPS * ATTN_PU) {
                        float s[ATTN_PU][HB];

#pragma unroll
                        for (int u = 0; u < ATTN_PU; u++)
#pragma unroll
                                for (int j = 0; j < HB; j++)
                                        s[u][j] = 0.0f;
                        for (int i = lane * VEC; i < hd; i += 32 * VEC) {
                                float k0[ATTN_PU], k1[ATTN_PU];

#pragma unroll
                                for (int u = 0; u < ATTN_PU; u++) {
                                        k0[u] = k1[u] = 0.0f;
                                        if (pb + u < n && VT) {
                                                const float2 f = __half22float2(
                                                        ks[((pb + u) * hd + i) >> 1]);

                                                k0[u] = f.x;
                                                k1[u] = f.y;
                                        } else if (pb + u < n) {
                                                ld_kv<VEC>(kb + s_off[pb + u] + i, k0[u], k1[u]);
                                        }
                                }
#pragma unroll
                                for (int u = 0; u < ATTN_PU; u++)
#pragma unroll
                                        for (int j = 0; j < HB; j++) {
                                                if (j < nh) {
                                                        s[u][j] += qs[j * hd + i] * k0[u];
                                                        if (VEC == 2)
                                                                s[u][j] +=
                                                                        qs[j * hd + i + 1] * k1[u];
                                                }
                                        }
                        }
                        /* all ATTN_PU x HB sums at once, outside any branch (a shuffle
                         * under a condition the compiler cannot prove the same for the
                         * warp costs it a collective fallback): value u * HB + j ends in
                         * lanes (u * HB + j) << SSH */
                        enum { NS = ATTN_PU * HB, SSH = 5 - warp_log2<NS>::V };
                        const float tot = warp_sum_scatter<NS>(&s[0][0]);
                        const int u = (lane >> SSH) / HB, j = (lane >> SSH) % HB;

                        if ((lane & ((1 << SSH) - 1)) == 0 && j < nh && pb + u < n)
                                sc[j * ATTN_TILE + pb + u] = tot * pl.scale;
                }
                if (VT)
                        vt_store(vs, vbuf, n, cpr, tid);
                __syncthreads();

                /* online softmax: new max, weights e^(s - max), the old sums rescaled */
                for (int j = warp; j < nh; j += ATTN_WARPS) {
                        float *sj = sc + j * ATTN_TILE, mx = -INFINITY;
                        double sum = 0.0;

                        for (int pp = lane; pp < n; pp += 32)
                                mx = fmaxf(mx, sj[pp]);
                        mx = fmaxf(warp_max(mx), s_m[j]);
                        for (int pp = lane; pp < n; pp += 32) {
                                const float e = expf(sj[pp] - mx);

                                sj[pp] = e;
                                sum += (double)e;
                        }
                        sum = warp_sum(sum);
                        __syncwarp(); /* every lane has read s_m[j] */
                        if (lane == 0) {
                                const float a = expf(s_m[j] - mx); /* 0 on the first tile */

                                s_a[j] = a;
                                s_l[j] = s_l[j] * (double)a + sum;
                                s_m[j] = mx;
                        }
                }
                __syncthreads();

                /* acc = acc * a + sum_p e_p V[p]: one thread per output dim, V read once
                 * for nh heads */
#pragma unroll
                for (int d = 0; d < DPT; d++) {
                        const int i = tid + d * ATTN_THREADS;

                        if (i < hd) {
#pragma unroll
                                for (int j = 0; j < HB; j++)
                                        if (j < nh)
                                                acc[j][d] *= s_a[j];
                                int pp = 0;

                                for (; pp + 4 <= n; pp += 4) { /* 4 loads in flight */
                                        float v[4];

#pragma unroll
                                        for (int u = 0; u < 4; u++)
                                                v[u] = VT ? __half2float(vs[(pp + u) * hd + i])
                                                          : __half2float(
                                                                    __ldg(vb + s_off[pp + u] + i));
#pragma unroll
                                        for (int u = 0; u < 4; u++)
#pragma unroll
                                                for (int j = 0; j < HB; j++)
                                                        if (j < nh)
                                                                acc[j][d] +=
                                                                        sc[j * ATTN_TILE + pp + u] *
                                                                        v[u];
                                }
                                for (; pp < n; pp++) {
                                        const float v =
                                                VT ? __half2float(vs[pp * hd + i])
                                                   : __half2float(__ldg(vb + s_off[pp] + i));

#pragma unroll
                                        for (int j = 0; j < HB; j++)
                                                if (j < nh)
                                                        acc[j][d] += sc[j * ATTN_TILE + pp] * v;
                                }
                        }
                }
                __syncthreads(); /* the next tile overwrites sc, s_off, s_a */
        }

        if (n_split == 1) {
#pragma unroll
                for (int j = 0; j < HB; j++) {
                        if (j < nh) {
                                const float inv = (float)(1.0 / s_l[j]);
                                float *o = out + (size_t)t * ldo + (size_t)(h0 + j) * hd;

#pragma unroll
                                for (int d = 0; d < DPT; d++)
                                        if (tid + d * ATTN_THREADS < hd)
                                                o[tid + d * ATTN_THREADS] = acc[j][d] * inv;
                        }
                }
                return;
        }

        /* publish this split's partials; the last split of (t, x) to finish merges */
        const size_t row = (size_t)t * pl.n_heads + h0; /* slot of head j: (row + j) * n_split */
#pragma unroll
        for (int j = 0; j < HB; j++) {
                if (j < nh) {
                        float *a = pl.acc + ((row + j) * pl.n_split + split) * hd;

#pragma unroll
                        for (int d = 0; d < DPT; d++)
                                if (tid + d * ATTN_THREADS < hd)
                                        a[tid + d * ATTN_THREADS] = acc[j][d];
                }
        }
        if (tid < nh)
                pl.ml[(row + tid) * pl.n_split + split] = make_float2(s_m[tid], (float)s_l[tid]);
        unsigned *cnt = pl.cnt + (size_t)t * gridDim.x + blockIdx.x;
        if (!attn_last(cnt, n_split))
                return;
        attn_merge<HB, DPT>(pl, row, nh, n_split, hd, out, ldo, t, h0, cnt);
}

template <int DPT>
static void launch(int vec, dim3 grid, size_t shmem, cudaStream_t stream, const m40_cuda_kv &kv,
                   const float *q, size_t ldq, float *out, size_t ldo, const attn_plan &pl)
{
        if (vec)
                k_attention<2, DPT, false, ATTN_HB>
                        <<<grid, ATTN_THREADS, shmem, stream>>>(kv, q, ldq, out, ldo, pl);
        else
                k_attention<1, DPT, false, ATTN_HB>
                        <<<grid, ATTN_THREADS, shmem, stream>>>(kv, q, ldq, out, ldo, pl);
}

/* Whether K rows can be read as half2: head_dim and every offset even. */
static bool kv_vec(const struct m40_cuda_kv *kv, uint32_t head_dim)
{
        return head_dim % 2 == 0 && kv->kv_dim % 2 == 0 && kv->page_elems % 2 == 0 &&
               kv->v_off % 2 == 0 && (uintptr_t)kv->base % 4 == 0;
}

int m40_attn_plan(const struct attn_call *c, struct attn_plan *pl)
{
        const struct m40_cuda_kv *kv = c->kv;
        const uint32_t hd = c->head_dim;
        struct attn_plan p;
        uint64_t need;

        if (!kv || !c->n_kv_heads || c->n_heads % c->n_kv_heads || !hd ||
            hd > M40_CUDA_MAX_HEAD_DIM || c->max_pos > M40_CUDA_ATTN_MAX_POS || c->n_tok > 65535 ||
            !kv->page_tokens || !kv->base || (uintptr_t)c->ws % WS_ALIGN)
                return -EINVAL;
        if (!c->n_tok || !c->n_heads)
                return ATTN_NONE;
        need = make_plan(c->n_tok, c->n_heads, c->n_kv_heads, hd, c->max_pos, &p);
        if (need > c->ws_bytes || (need && !c->ws))
                return -EINVAL;
        p.scale = c->scale;
        p.cnt = (unsigned *)c->ws;
        p.acc = NULL;
        p.ml = NULL;
        if (need) {
                const uint64_t slots = (uint64_t)c->n_tok * c->n_heads * p.n_split;

                p.acc = (float *)((char *)c->ws + M40_CUDA_ATTN_WS_COUNTERS);
                p.ml = (float2 *)((char *)p.acc + ws_al(slots * hd * sizeof(float)));
        }
        *pl = p;
        /* K and V tiles through shared memory (16-byte pieces of every row) for launches of
         * few blocks (decode), where a block's load latencies are the time; not for those
         * of many (prefill), where the shared memory would cost blocks per SM (H100, 512-
         * token prefill: 8B 84% -> 82% of SGEMM's rate, 1B 68% -> 64%) */
        if (!kv_vec(kv, hd) || hd > ATTN_THREADS || hd % 8 || kv->kv_dim % 8 ||
            kv->page_elems % 8 || kv->v_off % 8 || (uintptr_t)kv->base % 16 ||
            (uint64_t)c->n_tok * c->n_kv_heads * p.nsub >= ATTN_TARGET)
                return ATTN_PLAIN;
        pl->rstep = ATTN_THREADS / (int)(hd / 8);
        pl->cstep = ATTN_THREADS % (int)(hd / 8);
        return ATTN_VT;
}

extern "C" int m40_cuda_attention(const struct m40_cuda_kv *kv, const float *q, size_t ldq,
                                  float *out, size_t ldo, uint32_t n_heads, uint32_t n_kv_heads,
                                  uint32_t head_dim, float scale, uint32_t n_tok, uint32_t max_pos,
                                  void *ws, size_t ws_bytes, struct CUstream_st *stream)
{
        const struct attn_call c = {kv,      n_heads, n_kv_heads, head_dim, n_tok,
                                    max_pos, scale,   ws,         ws_bytes};
        struct attn_plan pl;
        int path;

        if (!q || !out || ldq < (size_t)n_heads * head_dim || ldo < (size_t)n_heads * head_dim)
                return -EINVAL;
        path = m40_attn_plan(&c, &pl);
        if (path <= ATTN_NONE) /* -EINVAL, or nothing to do */
                return path;
        const size_t shmem = (size_t)pl.hb * (head_dim + ATTN_TILE) * sizeof(float);
        const dim3 grid(n_kv_heads * pl.nsub, n_tok, pl.n_split);

        if (path == ATTN_VT) {
                const size_t vt_shmem = shmem + (size_t)ATTN_TILE * head_dim * 4;

                if (pl.hb == 1 && m40_attn_launch_g(&c, q, ldq, out, ldo, pl, stream))
                        return m40_cuda_launch_status("attention");
                if (pl.hb == 1)
                        k_attention<2, 1, true, 1><<<grid, ATTN_THREADS, vt_shmem, stream>>>(
                                *kv, q, ldq, out, ldo, pl);
                else if (pl.hb == 2)
                        k_attention<2, 1, true, 2><<<grid, ATTN_THREADS, vt_shmem, stream>>>(
                                *kv, q, ldq, out, ldo, pl);
                else if (pl.hb <= 4)
                        k_attention<2, 1, true, 4><<<grid, ATTN_THREADS, vt_shmem, stream>>>(
                                *kv, q, ldq, out, ldo, pl);
                else
                        k_attention<2, 1, true, ATTN_HB><<<grid, ATTN_THREADS, vt_shmem, stream>>>(
                                *kv, q, ldq, out, ldo, pl);
        } else if (head_dim <= ATTN_THREADS)
                launch<1>(kv_vec(kv, head_dim), grid, shmem, stream, *kv, q, ldq, out, ldo, pl);
        else if (head_dim <= 2 * ATTN_THREADS)
                launch<2>(kv_vec(kv, head_dim), grid, shmem, stream, *kv, q, ldq, out, ldo, pl);
        else
                launch<ATTN_DPT>(kv_vec(kv, head_dim), grid, shmem, stream, *kv, q, ldq, out, ldo,
                                 pl);
        return m40_cuda_launch_status("attention");
}
