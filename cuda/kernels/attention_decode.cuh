/* cuda/kernels/attention_decode.cuh - the block of k_attention_g (attention_decode.cu) as a
 * __device__ function, for the kernel's own launches and for a kernel that runs its blocks
 * itself (the persistent decode kernel: its blocks loop over the blocks a k_attention_g<2>
 * launch would have had), and the plan of such a launch. What it computes and its
 * tolerance: attention.cu (k_attention) and attention_decode.cu; M40_LD_COHERENT, for a
 * kernel that writes the K/V cache or q in the same launch: attention.cuh. */
#ifndef M40_CUDA_ATTENTION_DECODE_CUH
#define M40_CUDA_ATTENTION_DECODE_CUH

#include <stddef.h>
#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/kernels/attention.cuh"

/* attn_g_body - block (bx, t, split) of a k_attention_g<G> launch of gridDim.x == gx;
 * attn_g_block()'s contract. SYNC: a barrier before the block first writes shared
 * memory (attn_g_block(): the block may have run other code, or another item, just
 * before); the launch's own blocks, which start with nothing in shared memory, run
 * without it. */
template <int G, bool SYNC>
static __device__ __forceinline__ void
attn_g_body(const struct m40_cuda_kv &kv, const float *q, size_t ldq, float *out, size_t ldo,
            const struct attn_plan &pl, unsigned bx, int t, int split, unsigned gx, float *sh)
{
        /* q (hd), scores (CH), the sums of groups 1.. ((G - 1) * hd) floats; then per
         * group its tile's K rows, replaced by its V rows (ATTN_TILE * hd f16) */
        enum { CH = G * ATTN_TILE };
        __shared__ size_t s_off[CH];
        __shared__ float s_m, s_a;
        __shared__ double s_l;
        const int hd = pl.hd;
        const int h0 = (bx / pl.nsub) * pl.group + bx % pl.nsub;
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
                /* what the block ran before (another item, other code) has read the shared
                 * memory this item writes (its statics and sh) */
                if (SYNC)
                        __syncthreads();
                for (int e = threadIdx.x; e < hd; e += blockDim.x)
                        qs[e] = attn_ld_in(q + (size_t)t * ldq + (size_t)h0 * hd + e);
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
        unsigned *cnt = pl.cnt + (size_t)t * gx + bx;
        if (attn_last(cnt, n_split))
                attn_merge<1, 1>(pl, row, 1, n_split, hd, out, ldo, t, h0, cnt);
}

/* attn_g_block - k_attention<2, 1, true, 1> (decode-sized launches of one query head per
 * block, head_dim <= 128, the tiles' K and V through shared memory) in blocks of G groups
 * of ATTN_THREADS threads: a chunk of G tiles at a time, group gi loading and scoring
 * tile gi, one online softmax over the chunk's scores for the whole block, each group its
 * tile's weighted V, the groups' sums added in shared memory (group order). A context of
 * up to G tiles is one block per head with no merge: k_attention splits it over blocks of
 * one tile, whose partials go through global memory, a fence, a counter and a second
 * round of loads, each a load latency more. Longer contexts are split in chunks over
 * blocks (pl.span = G * ATTN_TILE positions per split at most) and merged as
 * k_attention's splits.
 *
 * Does what block (blockIdx.x, blockIdx.y, blockIdx.z) == (bx, t, split) of a
 * k_attention_g<G> launch with gridDim.x == gx and plan pl does (m40_attn_plan_g(); for
 * G = 2 m40_attn_plan_g2() below), sh being its dynamic shared memory (16-byte aligned,
 * the launch's bytes). Every thread of the block calls it with the same arguments, and
 * blockDim.x must be ATTN_THREADS * G (one block: 256 threads for G = 2). A block may call
 * it for several items in a row, and run other code between: it waits at a barrier
 * before it writes shared memory (its static variables, those of attn_last() and
 * attn_merge(), and sh), so reads of the code before it are done; on return its warps
 * may still read those, so code after it syncs before it writes shared memory. The
 * split counters pl.cnt (one per (t, bx)) are left zero, as after a launch, once every
 * item of the plan has run (a phase that uses them again, the next layer's, waits for
 * that: a grid barrier); no block waits for another (the last split to finish merges),
 * so items may run in any order. */
template <int G>
static __device__ __forceinline__ void
attn_g_block(const struct m40_cuda_kv &kv, const float *q, size_t ldq, float *out, size_t ldo,
             const struct attn_plan &pl, unsigned bx, unsigned t, unsigned split, unsigned gx,
             float *sh)
{
        attn_g_body<G, true>(kv, q, ldq, out, ldo, pl, bx, (int)t, (int)split, gx, sh);
}

/* the k_attention_g<2> launch a decode step of n_tok tokens at positions up to max_pos
 * would make: the plan (pl.cnt/acc/ml set from ws as m40_cuda_attention() does), its grid
 * (gx, n_tok, n_split) and dynamic shared memory; -ENOTSUP when that shape does not take
 * k_attention_g (hb != 1, head_dim > 128, alignment, ...), -EINVAL as m40_cuda_attention()
 * (pl, grid and shmem are written only on success; they hold for every position up to
 * max_pos; contexts past ATTN_MAX_SPLITS spans of two tiles, 2048 positions: -ENOTSUP;
 * attention_decode.cu says more). Defined in attention_decode.cu. */
int m40_attn_plan_g2(const struct m40_cuda_kv *kv, uint32_t n_heads, uint32_t n_kv_heads,
                     uint32_t head_dim, float scale, uint32_t n_tok, uint32_t max_pos, void *ws,
                     size_t ws_bytes, struct attn_plan *pl, dim3 *grid, size_t *shmem);

#endif
