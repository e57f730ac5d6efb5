/* cuda/attention.cu - RoPE with the KV-cache append, and attention over the paged f16 KV
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
 *                 the K/V its chunk wrote before it.
 *   k_attention_g the decode launches of one query head per block with the tile rows
 *                 through shared memory (batch-1 decode of every model here) when the
 *                 context is more than one tile: blocks of G = 2 or 4 groups of 128
 *                 threads take G tiles at once, one softmax over them, the groups' sums
 *                 added in shared memory: a context of up to G tiles is one block per
 *                 head with no merge through global memory. Same-run A/B (H100, batch-1
 *                 decode at contexts 16..144, 2 rounds), ATTN_G 1 -> 4: 8B Q8_0 275.8 ->
 *                 278.3 tok/s, 1B Q4_0 1481.5 -> 1508.8, 135M Q8_0 1280.5 -> 1307.2, 8B
 *                 Q4_0 397.9 -> 397.9; batch 8 (its own kernel) unchanged.
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
#include "cuda/ops.h"
#include "cuda/warp.cuh"

#define ATTN_THREADS 128
#define ATTN_WARPS   (ATTN_THREADS / 32)
#define ATTN_HB      8 /* query heads of one KV head per block, at most */
#ifndef ATTN_TILE
#define ATTN_TILE 32 /* positions scored per pass of a block (and ATTN_SPAN_MIN's note) */
#endif
#ifndef ATTN_PU
#define ATTN_PU 4 /* positions a warp scores at once (their K loads in flight) */
#endif
/* Positions per split, at least: one tile. Decode launches have few blocks (8B: 32,
 * one per query head), so a split is parallelism the GPU otherwise lacks, and its merge
 * (one more load latency) costs less than a second tile in a row: same-run A/Bs of
 * batch-1 decode at contexts 16..144 (H100): tile 64 and spans of 128 -> 64: 135M F16
 * 974 -> 1054 tok/s, 1B F16 713 -> 737, 8B Q4_0 300 -> 312, 8B F16 158.4 -> 161.4;
 * then tile and span 64 -> 32: 8B F16 162.0 -> 165.4, 8B Q4_0 314 -> 327, 8B Q4_K_M
 * 258 -> 266, 1B F16 740 -> 760. */
#ifndef ATTN_SPAN_MIN
#define ATTN_SPAN_MIN 32
#endif
/* The first tile's page lookups issued with q's loads, not after them (one round trip
 * less per block); same-run A/B (H100, batch-1 decode, 3 rounds), after -> with: 8B
 * Q8_0 272.9 -> 274.4 tok/s, 8B Q4_0 384.1 -> 387.9, 1B Q4_0 1400.8 -> 1411.5, 1B F16
 * 780.6 -> 784.0, 135M Q8_0 1316.3 -> 1327.8. Knob for A/B. */
#ifndef ATTN_Q_EARLY
#define ATTN_Q_EARLY 1
#endif
#define ATTN_MAX_SPLITS 32   /* splits of one (token, head), at most: one lane each in the merge */
#define ATTN_TARGET     1024 /* blocks a launch aims for (H100: ~8 per SM, M40: ~43) */
#define ATTN_MIN_BLOCKS 128  /* below this, query heads of one KV head go to separate blocks */
#define ATTN_DPT        (M40_CUDA_MAX_HEAD_DIM / ATTN_THREADS) /* output dims per thread, at most */
#define WS_ALIGN        256

/* A launch splits only when n_tok * gb (its blocks of one split) is below ATTN_TARGET,
 * so its counters (one per (token, head group)) fit the workspace's fixed counter area,
 * which every launch leaves zero: launches of any shape can share one workspace. */
static_assert(ATTN_TARGET * sizeof(unsigned) <= M40_CUDA_ATTN_WS_COUNTERS, "counter area");

static_assert(ATTN_MAX_SPLITS == 32, "the merge gives each split one lane of a warp");
static_assert(M40_CUDA_MAX_HEAD_DIM % ATTN_THREADS == 0, "ATTN_DPT");
static_assert(ATTN_HB <= 32 && ATTN_SPAN_MIN % ATTN_TILE == 0 && ATTN_TILE <= ATTN_THREADS,
              "layout");

/* The element offset of position p's K (V: + v_off) in the layer's slab of its page. */
__device__ __forceinline__ size_t slot_in(const struct m40_cuda_kv &kv, uint32_t page, uint32_t p)
{
        return (size_t)page * kv.page_elems +
               ((size_t)kv.layer * kv.page_tokens + p % kv.page_tokens) * kv.kv_dim;
}

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

/* How a launch divides the work: blocks (gb = n_kv_heads * nsub, n_tok, n_split); block
 * (x, t, s) holds query heads kvh * group + sub * hb .. + nh of KV head kvh = x / nsub,
 * sub = x % nsub, and positions s * span .. of token t. */
struct attn_plan {
        int n_heads, group, nsub, hb, hd, n_split;
        int rstep, cstep; /* VT: ATTN_THREADS 16-byte pieces as rows and pieces of K/V rows */
        uint32_t span;
        float scale;
        float *acc;    /* (n_tok, n_heads, n_split, hd) partial sums of e^(s - m) V */
        float2 *ml;    /* (n_tok, n_heads, n_split) partial max m and sum of e^(s - m) */
        unsigned *cnt; /* (n_tok, gb) splits finished, in the counter area */
};

static uint32_t cdiv(uint64_t a, uint64_t b)
{
        return (uint32_t)((a + b - 1) / b);
}

static uint64_t ws_al(uint64_t n)
{
        return (n + WS_ALIGN - 1) & ~(uint64_t)(WS_ALIGN - 1);
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

__device__ __forceinline__ float warp_max(float v)
{
        for (int off = 16; off; off >>= 1)
                v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
        return v;
}

__device__ __forceinline__ double warp_sum(double v)
{
        for (int off = 16; off; off >>= 1)
                v += __shfl_xor_sync(0xffffffffu, v, off);
        return v;
}

/* Whether this block is the last of the n_split splits that count on cnt to finish,
 * after it wrote its partials (every thread of the block calls it; the last one sees
 * the others' partials after). */
static __device__ __forceinline__ bool attn_last(unsigned *cnt, int n_split)
{
        __shared__ int s_last;

        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0)
                s_last = atomicAdd(cnt, 1u) == (unsigned)n_split - 1;
        __syncthreads();
        if (!s_last)
                return false;
        __threadfence();
        return true;
}

/* The merge of the n_split partials of the nh (<= HB) query heads from row (their
 * slots: (row + j) * pl.n_split + s) by the last split to finish, into o (nh rows of
 * hd <= DPT * ATTN_THREADS): weight of split s = e^(m_s - M), one lane per split, out =
 * sum_s w_s acc_s / sum_s w_s l_s. Every thread of the block calls it: the first
 * ATTN_WARPS warps do the work (blocks of more threads: the others only pass the
 * barrier); it leaves the counter cnt zero for the next launch (every split of it has
 * counted). */
template <int HB, int DPT>
static __device__ __forceinline__ void attn_merge(const struct attn_plan &pl, size_t row, int nh,
                                                  int n_split, int hd, float *out, size_t ldo,
                                                  int t, int h0, unsigned *cnt)
{
        __shared__ float s_w[HB][ATTN_MAX_SPLITS], s_inv[HB];
        const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;

        for (int j = warp; j < nh; j += ATTN_WARPS) {
                const volatile float *ml = (const volatile float *)(pl.ml + (row + j) * pl.n_split);
                float m = -INFINITY, l = 0.0f;

                if (lane < n_split) {
                        m = ml[2 * lane];
                        l = ml[2 * lane + 1];
                }
                const float mx = warp_max(m);
                const float w = lane < n_split ? expf(m - mx) : 0.0f;
                const double sum = warp_sum((double)l * (double)w);

                s_w[j][lane] = w;
                if (lane == 0)
                        s_inv[j] = (float)(1.0 / sum);
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < HB; j++) {
#pragma unroll
                for (int d = 0; d < DPT; d++) {
                        const int i = tid + d * ATTN_THREADS;

                        if (j < nh && i < hd) {
                                const volatile float *a = pl.acc + (row + j) * pl.n_split * hd + i;
                                float v = 0.0f;

                                for (int s = 0; s < n_split; s++)
                                        v += a[(size_t)s * hd] * s_w[j][s];
                                out[(size_t)t * ldo + (size_t)(h0 + j) * hd + i] = v * s_inv[j];
                        }
                }
        }
        if (tid == 0)
                *cnt = 0;
}

/* VEC 2: K rows read as half2 (head_dim and every offset even), else 1. DPT: output
 * dims per thread, head_dim <= DPT * ATTN_THREADS (the accumulators live in registers).
 * VT: the tile's K and V rows are loaded into shared memory in 16-byte pieces, all in
 * flight at once, before the scores are computed (head_dim <= 128 and every offset a
 * multiple of 8 elements): one load latency per tile; else each warp reads K rows for
 * ATTN_PU positions at a time and each thread its V elements from global memory after
 * the softmax, 4 positions at a time. */
#define ATTN_VCH (ATTN_TILE * 128 / 8 / ATTN_THREADS) /* VT: 16-byte pieces per thread, most */

/* VT: a tile's K and V rows (n rows at the element offsets off[], head_dim 8 * cpr) in
 * 16-byte pieces, ATTN_VCH per thread, all loads issued before any is used: piece tid +
 * k * ATTN_THREADS is row r, column c, stepped, not divided, from k to k + 1 (rstep rows
 * and cstep pieces). Pieces past the tile are not loaded. */
static __device__ __forceinline__ void vt_load(const __half *kb, const __half *vb,
                                               const size_t *off, int n, int cpr, int tid,
                                               int rstep, int cstep, uint4 *kbuf, uint4 *vbuf)
{
        int r = tid / cpr, c = tid - r * cpr;

#pragma unroll
        for (int k = 0; k < ATTN_VCH; k++) {
                if (r < n) {
                        const size_t o = off[r];

                        kbuf[k] = __ldg((const uint4 *)(kb + o) + c);
                        vbuf[k] = __ldg((const uint4 *)(vb + o) + c);
                }
                r += rstep;
                c += cstep;
                if (c >= cpr) {
                        c -= cpr;
                        r++;
                }
        }
}

/* VT: vt_load()'s pieces of one of K or V into the tile's rows in shared memory */
static __device__ __forceinline__ void vt_store(__half *tile, const uint4 *buf, int n, int cpr,
                                                int tid)
{
#pragma unroll
        for (int k = 0; k < ATTN_VCH; k++) {
                const int e = tid + k * ATTN_THREADS;

                if (e < n * cpr)
                        ((uint4 *)tile)[e] = buf[k];
        }
}

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

/* k_attention_g - k_attention<2, 1, true, 1> (decode-sized launches of one query head
 * per block, head_dim <= 128, the tiles' K and V through shared memory) in blocks of G
 * groups of ATTN_THREADS threads: a chunk of G tiles at a time, group gi loading and
 * scoring tile gi, one online softmax over the chunk's scores for the whole block, each
 * group its tile's weighted V, the groups' sums added in shared memory (group order).
 * A context of up to G tiles is one block per head with no merge: k_attention splits
 * it over blocks of one tile, whose partials go through global memory, a fence, a
 * counter and a second round of loads, each a load latency more. Longer contexts are
 * split in chunks over blocks (pl.span = G * ATTN_TILE positions per split at most) and
 * merged as k_attention's splits. */
template <int G>
__global__ void __launch_bounds__(ATTN_THREADS *G)
        k_attention_g(struct m40_cuda_kv kv, const float *__restrict__ q, size_t ldq,
                      float *__restrict__ out, size_t ldo, struct attn_plan pl)
{
        /* q (hd), scores (CH), the sums of groups 1.. ((G - 1) * hd) floats; then per
         * group its tile's K rows, replaced by its V rows (ATTN_TILE * hd f16) */
        enum { CH = G * ATTN_TILE };
        extern __shared__ __align__(16) float sh[];
        __shared__ size_t s_off[CH];
        __shared__ float s_m, s_a;
        __shared__ double s_l;
        const int t = blockIdx.y, split = blockIdx.z, hd = pl.hd;
        const int h0 = (blockIdx.x / pl.nsub) * pl.group + blockIdx.x % pl.nsub;
        const int gi = threadIdx.x / ATTN_THREADS, tid = threadIdx.x % ATTN_THREADS;
        const int lane = tid & 31, gw = tid >> 5; /* gw: the warp within the group */
        const uint32_t pos = kv.pos[t], tbl = kv.tbl[t];
        const int n_split = (int)min(pos / pl.span + 1, (uint32_t)pl.n_split);
        const uint32_t p0 = (uint32_t)split * pl.span;
        const uint32_t p1 = split == n_split - 1 ? pos + 1 : p0 + pl.span;
        const __half *kb = (const __half *)kv.base + (size_t)(h0 / pl.group) * hd;
        const __half *vb = kb + kv.v_off;
        float *qs = sh, *sc = sh + hd, *red = sc + CH;
        __half *kt = (__half *)(red + (G - 1) * hd) + (size_t)gi * ATTN_TILE * hd;
        const __half2 *ks = (const __half2 *)kt;
        const int cpr = hd / 8;
        float acc = 0.0f;

        if (split >= n_split)
                return; /* the whole block: no position of this token here */
        /* the first chunk's page lookups in flight with q's loads */
        {
                const uint32_t p = p0 + (uint32_t)(gi * ATTN_TILE + tid);
                const bool in = tid < ATTN_TILE && p < p1;
                uint32_t page0 = 0;

                if (in)
                        page0 = __ldg(kv.pages + tbl + p / kv.page_tokens);
                for (int e = threadIdx.x; e < hd; e += blockDim.x)
                        qs[e] = q[(size_t)t * ldq + (size_t)h0 * hd + e];
                if (in)
                        s_off[gi * ATTN_TILE + tid] = slot_in(kv, page0, p);
        }
        if (threadIdx.x == 0) {
                s_m = -INFINITY;
                s_l = 0.0;
        }
        __syncthreads();

        for (uint32_t cp = p0; cp < p1; cp += CH) {
                const uint32_t tp = cp + (uint32_t)(gi * ATTN_TILE);
                const int n = tp < p1 ? (int)min(p1 - tp, (uint32_t)ATTN_TILE) : 0;

                if (cp != p0) {
                        if (tid < n)
                                s_off[gi * ATTN_TILE + tid] = slot_in(
                                        kv, __ldg(kv.pages + tbl + (tp + tid) / kv.page_tokens),
                                        tp + tid);
                        __syncthreads();
                }
                /* the group's tile: its K and V loads all in flight, K to shared memory */
                uint4 kbuf[ATTN_VCH], vbuf[ATTN_VCH];

                vt_load(kb, vb, s_off + gi * ATTN_TILE, n, cpr, tid, pl.rstep, pl.cstep, kbuf,
                        vbuf);
                vt_store(kt, kbuf, n, cpr, tid);
                __syncthreads();

                /* scores of the tile: the group's warps, ATTN_PU positions at a time */
                for (int pb = gw * ATTN_PU; pb < n; pb += ATTN_WARPS * ATTN_PU) {
                        float sv[ATTN_PU];

#pragma unroll
                        for (int u = 0; u < ATTN_PU; u++)
                                sv[u] = 0.0f;
                        for (int i = lane * 2; i < hd; i += 64) {
#pragma unroll
                                for (int u = 0; u < ATTN_PU; u++) {
                                        if (pb + u < n) {
                                                const float2 f = __half22float2(
                                                        ks[((pb + u) * hd + i) >> 1]);

                                                sv[u] += qs[i] * f.x;
                                                sv[u] += qs[i + 1] * f.y;
                                        }
                                }
                        }
                        enum { SSH = 5 - warp_log2<ATTN_PU>::V };
                        const float tot = warp_sum_scatter<ATTN_PU>(sv);
                        const int u = lane >> SSH;

                        if ((lane & ((1 << SSH) - 1)) == 0 && pb + u < n)
                                sc[gi * ATTN_TILE + pb + u] = tot * pl.scale;
                }
                __syncthreads(); /* K is read: V takes its place */
                vt_store(kt, vbuf, n, cpr, tid);

                /* online softmax over the chunk's positions (one warp) */
                if (threadIdx.x < 32) {
                        const int m_n = (int)min(p1 - cp, (uint32_t)CH);
                        float mx = -INFINITY;
                        double sum = 0.0;

                        for (int pp = lane; pp < m_n; pp += 32)
                                mx = fmaxf(mx, sc[pp]);
                        mx = fmaxf(warp_max(mx), s_m);
                        for (int pp = lane; pp < m_n; pp += 32) {
                                const float e = expf(sc[pp] - mx);

                                sc[pp] = e;
                                sum += (double)e;
                        }
                        sum = warp_sum(sum);
                        __syncwarp(); /* every lane has read s_m */
                        if (lane == 0) {
                                const float a = expf(s_m - mx); /* 0 on the first chunk */

                                s_a = a;
                                s_l = s_l * (double)a + sum;
                                s_m = mx;
                        }
                }
                __syncthreads();

                /* acc = acc * a + sum_p e_p V[p] over the group's tile, one thread per dim */
                if (tid < hd) {
                        const float *e = sc + gi * ATTN_TILE;
                        int pp = 0;

                        acc *= s_a;
                        for (; pp + 4 <= n; pp += 4) {
                                float v[4];

#pragma unroll
                                for (int u = 0; u < 4; u++)
                                        v[u] = __half2float(kt[(pp + u) * hd + tid]);
#pragma unroll
                                for (int u = 0; u < 4; u++)
                                        acc += e[pp + u] * v[u];
                        }
                        for (; pp < n; pp++)
                                acc += e[pp] * __half2float(kt[pp * hd + tid]);
                }
                __syncthreads(); /* the next chunk overwrites sc, s_off and the tiles */
        }

        /* the groups' sums, in group order, into group 0's threads */
        if (gi > 0 && tid < hd)
                red[(gi - 1) * hd + tid] = acc;
        __syncthreads();
        if (gi == 0 && tid < hd)
                for (int g = 1; g < G; g++)
                        acc += red[(g - 1) * hd + tid];
        if (n_split == 1) {
                if (gi == 0 && tid < hd)
                        out[(size_t)t * ldo + (size_t)h0 * hd + tid] = acc * (float)(1.0 / s_l);
                return;
        }
        const size_t row = (size_t)t * pl.n_heads + h0;

        if (gi == 0 && tid < hd)
                pl.acc[(row * pl.n_split + split) * hd + tid] = acc;
        if (threadIdx.x == 0)
                pl.ml[row * pl.n_split + split] = make_float2(s_m, (float)s_l);
        unsigned *cnt = pl.cnt + (size_t)t * gridDim.x + blockIdx.x;
        if (attn_last(cnt, n_split))
                attn_merge<1, 1>(pl, row, 1, n_split, hd, out, ldo, t, h0, cnt);
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

/* Blocks of groups (k_attention_g) for a decode launch of one query head per block
 * (the VT kernel's shapes, pl from make_plan() with rstep and cstep set): ATTN_G groups
 * for contexts of more than two tiles, 2 for two, none (false: nothing launched) for
 * one tile, for chunks of more than ATTN_MAX_SPLITS splits, or a workspace too small. */
#ifndef ATTN_G
#define ATTN_G 4 /* groups per block at most (1: k_attention_g off; knob for A/B) */
#endif
static bool launch_g(const m40_cuda_kv *kv, const float *q, size_t ldq, float *out, size_t ldo,
                     uint32_t n_tok, uint32_t max_pos, void *ws, size_t ws_bytes, attn_plan pl,
                     cudaStream_t stream)
{
        const uint64_t ctx = (uint64_t)max_pos + 1, tiles = cdiv(ctx, ATTN_TILE);
        const int g = tiles > 2 && ATTN_G >= 4 ? 4 : tiles > 1 && ATTN_G >= 2 ? 2 : 1;
        uint64_t need = 0;

        if (g == 1)
                return false;
        pl.span = g * ATTN_TILE;
        pl.n_split = (int)cdiv(ctx, pl.span);
        if (pl.n_split > ATTN_MAX_SPLITS)
                return false;
        pl.acc = NULL;
        pl.ml = NULL;
        if (pl.n_split > 1) {
                const uint64_t slots = (uint64_t)n_tok * pl.n_heads * pl.n_split;

                need = M40_CUDA_ATTN_WS_COUNTERS + ws_al(slots * pl.hd * sizeof(float)) +
                       ws_al(slots * sizeof(float2));
                if (!ws || need > ws_bytes)
                        return false;
                pl.acc = (float *)((char *)ws + M40_CUDA_ATTN_WS_COUNTERS);
                pl.ml = (float2 *)((char *)pl.acc + ws_al(slots * pl.hd * sizeof(float)));
        }
        const dim3 grid((unsigned)(pl.n_heads / pl.group * pl.nsub), n_tok, (unsigned)pl.n_split);
        const size_t shmem = ((size_t)g * pl.hd + (size_t)g * ATTN_TILE) * sizeof(float) +
                             (size_t)g * ATTN_TILE * pl.hd * sizeof(__half);

        if (g == 4)
                k_attention_g<4>
                        <<<grid, ATTN_THREADS * 4, shmem, stream>>>(*kv, q, ldq, out, ldo, pl);
        else
                k_attention_g<2>
                        <<<grid, ATTN_THREADS * 2, shmem, stream>>>(*kv, q, ldq, out, ldo, pl);
        return true;
}

extern "C" int m40_cuda_attention(const struct m40_cuda_kv *kv, const float *q, size_t ldq,
                                  float *out, size_t ldo, uint32_t n_heads, uint32_t n_kv_heads,
                                  uint32_t head_dim, float scale, uint32_t n_tok, uint32_t max_pos,
                                  void *ws, size_t ws_bytes, struct CUstream_st *stream)
{
        struct attn_plan pl;
        uint64_t need;
        size_t shmem;
        int vec;

        if (!kv || !q || !out || !n_kv_heads || n_heads % n_kv_heads || !head_dim ||
            head_dim > M40_CUDA_MAX_HEAD_DIM || max_pos > M40_CUDA_ATTN_MAX_POS || n_tok > 65535 ||
            ldq < (size_t)n_heads * head_dim || ldo < (size_t)n_heads * head_dim ||
            !kv->page_tokens || !kv->base || (uintptr_t)ws % WS_ALIGN)
                return -EINVAL;
        if (!n_tok || !n_heads)
                return 0;
        need = make_plan(n_tok, n_heads, n_kv_heads, head_dim, max_pos, &pl);
        if (need > ws_bytes || (need && !ws))
                return -EINVAL;
        pl.scale = scale;
        pl.cnt = (unsigned *)ws;
        pl.acc = NULL;
        pl.ml = NULL;
        if (need) {
                const uint64_t slots = (uint64_t)n_tok * n_heads * pl.n_split;

                pl.acc = (float *)((char *)ws + M40_CUDA_ATTN_WS_COUNTERS);
                pl.ml = (float2 *)((char *)pl.acc + ws_al(slots * head_dim * sizeof(float)));
        }
        vec = head_dim % 2 == 0 && kv->kv_dim % 2 == 0 && kv->page_elems % 2 == 0 &&
              kv->v_off % 2 == 0 && (uintptr_t)kv->base % 4 == 0;
        shmem = (size_t)pl.hb * (head_dim + ATTN_TILE) * sizeof(float);
        const dim3 grid(n_kv_heads * pl.nsub, n_tok, pl.n_split);
        /* K and V tiles through shared memory (16-byte pieces of every row) for launches of
         * few blocks (decode), where a block's load latencies are the time; not for those
         * of many (prefill), where the shared memory would cost blocks per SM (H100, 512-
         * token prefill: 8B 84% -> 82% of SGEMM's rate, 1B 68% -> 64%) */
        const bool vt = vec && head_dim <= 128 && head_dim % 8 == 0 && kv->kv_dim % 8 == 0 &&
                        kv->page_elems % 8 == 0 && kv->v_off % 8 == 0 &&
                        (uintptr_t)kv->base % 16 == 0 && (uint64_t)n_tok * grid.x < ATTN_TARGET;
        if (vt && head_dim <= ATTN_THREADS) {
                const size_t vt_shmem = shmem + (size_t)ATTN_TILE * head_dim * 4;

                pl.rstep = ATTN_THREADS / (head_dim / 8);
                pl.cstep = ATTN_THREADS % (head_dim / 8);
                if (pl.hb == 1 &&
                    launch_g(kv, q, ldq, out, ldo, n_tok, max_pos, ws, ws_bytes, pl, stream))
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
                launch<1>(vec, grid, shmem, stream, *kv, q, ldq, out, ldo, pl);
        else if (head_dim <= 2 * ATTN_THREADS)
                launch<2>(vec, grid, shmem, stream, *kv, q, ldq, out, ldo, pl);
        else
                launch<ATTN_DPT>(vec, grid, shmem, stream, *kv, q, ldq, out, ldo, pl);
        return m40_cuda_launch_status("attention");
}
