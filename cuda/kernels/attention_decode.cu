/* cuda/kernels/attention_decode.cu - k_attention_g, attention for the decode launches of one
 * query head per block (cuda/kernels/ops.h: m40_cuda_attention(), whose launcher in
 * attention.cu hands such launches here; shared pieces in attention.cuh).
 *
 * Computes:
 *   k_attention_g the decode launches of one query head per block with the tile rows
 *                 through shared memory (batch-1 decode of every model here) when the
 *                 context is more than one tile: blocks of G = 2 or 4 groups of 128
 *                 threads take G tiles at once, one softmax over them, the groups' sums
 *                 added in shared memory: a context of up to G tiles is one block per
 *                 head with no merge through global memory. Same-run A/B (H100, batch-1
 *                 decode at contexts 16..144, 2 rounds), ATTN_G 1 -> 4: 8B Q8_0 275.8 ->
 *                 278.3 tok/s, 1B Q4_0 1481.5 -> 1508.8, 135M Q8_0 1280.5 -> 1307.2, 8B
 *                 Q4_0 397.9 -> 397.9; batch 8 (its own kernel) unchanged.
 * Tolerance and the primitives it uses: as k_attention (attention.cu). */
#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/kernels/attention.cuh"

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

/* Blocks of groups (k_attention_g) for a decode launch of one query head per block
 * (the VT kernel's shapes, pl from make_plan() with rstep and cstep set): ATTN_G groups
 * for contexts of more than two tiles, 2 for two, none (false: nothing launched) for
 * one tile, for chunks of more than ATTN_MAX_SPLITS splits, or a workspace too small. */
#ifndef ATTN_G
#define ATTN_G 4 /* groups per block at most (1: k_attention_g off; knob for A/B) */
#endif
bool m40_attn_launch_g(const m40_cuda_kv *kv, const float *q, size_t ldq, float *out, size_t ldo,
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
