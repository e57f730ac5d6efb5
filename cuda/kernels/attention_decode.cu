/* cuda/kernels/attention_decode.cu - k_attention_g, attention for the decode launches of one
 * query head per block (cuda/kernels/ops.h: m40_cuda_attention(), whose launcher in
 * attention.cu hands such launches here), its plan and launcher, and the plan of its
 * G = 2 launch for a kernel that runs the blocks itself (its block's body:
 * attention_decode.cuh; shared pieces in attention.cuh).
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
#include <errno.h>
#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/kernels/attention.cuh"
#include "cuda/kernels/attention_decode.cuh"

/* k_attention_g - the launch of attn_g_block()'s blocks (attention_decode.cuh): grid and
 * shared memory from m40_attn_plan_g(), ATTN_THREADS * G threads. */
template <int G>
__global__ void __launch_bounds__(ATTN_THREADS *G)
        k_attention_g(struct m40_cuda_kv kv, const float *__restrict__ q, size_t ldq,
                      float *__restrict__ out, size_t ldo, struct attn_plan pl)
{
        extern __shared__ __align__(16) float sh[];

        attn_g_body<G, false>(kv, q, ldq, out, ldo, pl, blockIdx.x, (int)blockIdx.y,
                              (int)blockIdx.z, gridDim.x, sh);
}

bool m40_attn_plan_g(const struct attn_call *c, int g, const struct attn_plan &pl,
                     struct attn_plan *ret_pl, dim3 *ret_grid, size_t *ret_shmem)
{
        const uint64_t ctx = (uint64_t)c->max_pos + 1;
        struct attn_plan p = pl;

        p.span = g * ATTN_TILE;
        p.n_split = (int)cdiv(ctx, p.span);
        if (p.n_split > ATTN_MAX_SPLITS)
                return false;
        p.acc = NULL;
        p.ml = NULL;
        if (p.n_split > 1) {
                const uint64_t slots = (uint64_t)c->n_tok * p.n_heads * p.n_split;
                const uint64_t need = M40_CUDA_ATTN_WS_COUNTERS +
                                      ws_al(slots * p.hd * sizeof(float)) +
                                      ws_al(slots * sizeof(float2));

                if (!c->ws || need > c->ws_bytes)
                        return false;
                p.acc = (float *)((char *)c->ws + M40_CUDA_ATTN_WS_COUNTERS);
                p.ml = (float2 *)((char *)p.acc + ws_al(slots * p.hd * sizeof(float)));
        }
        *ret_pl = p;
        *ret_grid = dim3((unsigned)(p.n_heads / p.group * p.nsub), c->n_tok, (unsigned)p.n_split);
        *ret_shmem = ((size_t)g * p.hd + (size_t)g * ATTN_TILE) * sizeof(float) +
                     (size_t)g * ATTN_TILE * p.hd * sizeof(__half);
        return true;
}

/* G: ATTN_G groups for contexts of more than two tiles, 2 for two, none (false: nothing
 * launched) for one tile, which k_attention's 128 threads take. */
#ifndef ATTN_G
#define ATTN_G 4 /* groups per block at most (1: k_attention_g off; knob for A/B) */
#endif
bool m40_attn_launch_g(const struct attn_call *c, const float *q, size_t ldq, float *out,
                       size_t ldo, const struct attn_plan &pl, cudaStream_t stream)
{
        const uint64_t tiles = cdiv((uint64_t)c->max_pos + 1, ATTN_TILE);
        const int g = tiles > 2 && ATTN_G >= 4 ? 4 : tiles > 1 && ATTN_G >= 2 ? 2 : 1;
        struct attn_plan p;
        dim3 grid;
        size_t shmem;

        if (g == 1 || !m40_attn_plan_g(c, g, pl, &p, &grid, &shmem))
                return false;
        if (g == 4)
                k_attention_g<4>
                        <<<grid, ATTN_THREADS * 4, shmem, stream>>>(*c->kv, q, ldq, out, ldo, p);
        else
                k_attention_g<2>
                        <<<grid, ATTN_THREADS * 2, shmem, stream>>>(*c->kv, q, ldq, out, ldo, p);
        return true;
}

/* The G = 2 plan for contexts up to ATTN_MAX_SPLITS spans of two tiles (2048 positions;
 * longer: -ENOTSUP): the launcher's at two tiles; at longer ones, where the launcher takes
 * G = 4, the same split code with spans of two tiles; at one tile, which the launcher
 * leaves to k_attention, one split (group 1 idles). No token or no query head: -ENOTSUP
 * (m40_cuda_attention() launches nothing). As the launch's, the plan holds for every
 * position up to max_pos: the blocks take a token's splits from its position. */
int m40_attn_plan_g2(const struct m40_cuda_kv *kv, uint32_t n_heads, uint32_t n_kv_heads,
                     uint32_t head_dim, float scale, uint32_t n_tok, uint32_t max_pos, void *ws,
                     size_t ws_bytes, struct attn_plan *pl, dim3 *grid, size_t *shmem)
{
        const struct attn_call c = {kv,      n_heads, n_kv_heads, head_dim, n_tok,
                                    max_pos, scale,   ws,         ws_bytes};
        struct attn_plan p;
        int path;

        if (!pl || !grid || !shmem)
                return -EINVAL;
        path = m40_attn_plan(&c, &p);
        if (path < 0)
                return path;
        if (path != ATTN_VT || p.hb != 1 || !m40_attn_plan_g(&c, 2, p, pl, grid, shmem))
                return -ENOTSUP;
        return 0;
}
