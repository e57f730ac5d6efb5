/* cuda/kernels/persist_step.h - the persistent step kernel: every layer of a one-token decode
 * step in one launch (issue 21's kernel, first form).
 *
 * A launch runs, for each layer, the work of the per-step path's fused decode launches
 * (matvec.h: q/k/v with the RMSNorm's scales, RoPE and the KV store; attention as
 * ops.h's m40_cuda_attention() in its blocks-of-tiles form; wo with the residual add and
 * the next norm's partials; gate and up with the SwiGLU; down with the residual add),
 * with the same inner loops (matvec.cuh's mv_block(), attention_decode.cuh's
 * attn_g_block()) on the same arguments, so the products' arithmetic is the per-step
 * path's (the attention takes 2 groups of tiles a block where the per-step launch may take
 * 4: the same sums in another order). Between phases, the grid meets at a barrier
 * (persist.cuh): 5 n_layers - 1 a step. Its grid is exactly the blocks the GPU holds at once (the
 * occupancy API, at setup), so every block is resident and no wait can depend on a block
 * that has not started.
 * What stays outside: the embedding before (it leaves the first norm's partials), the final
 * norm, the logits product and the sampling after; the host launches them as today.
 *
 * Limits of this form (m40_cuda_ps_new() says -ENOTSUP, and the caller runs the per-step
 * path): one token per step; every layer matrix of one GGML type,
 * rows 16-byte aligned; no q/k/v biases; RoPE in pairs of adjacent rows (not neox); heads of
 * at most 128 dims; contexts of at most M40_CUDA_PS_MAX_CTX positions (the attention's 2
 * groups of tiles per block, at most 32 splits).
 *
 * Failure: a barrier that waits longer than its limit (about a second) ends the kernel with a
 * trap; the CUDA context is then unusable and every later call fails with M40_ECUDA. That
 * needs a block that is not resident or a fault in the kernel; neither is expected. */
#ifndef M40_CUDA_PERSIST_STEP_H
#define M40_CUDA_PERSIST_STEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/kernels/matvec.h"
#include "cuda/kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define M40_CUDA_PS_MAX_CTX 2048

struct CUstream_st;
struct m40_cuda_ps;

/* One layer's matrices and norm weights (device), as the CUDA engine holds them. */
struct m40_cuda_ps_layer {
        struct m40_cuda_matrix wq, wk, wv, wo, gate, up, down;
        const float *attn_norm, *ffn_norm;
};

/* What a step reads and writes, all device memory the caller owns and keeps for the
 * life of the m40_cuda_ps: the layers (host array, n_layers), the scratch of one token
 * (x the residual stream, xn the normalized copy, q, k, v, att, gate, up; their strides
 * in floats), the fused norm's partials (rms.partial, partial_bytes, count, eps; the
 * embedding launch fills them for the first layer), RoPE, the KV cache (kv.layer
 * ignored; pos, tbl and pages the step's, written before each launch) and the
 * attention's workspace (ops.h, m40_cuda_attention_workspace()). */
struct m40_cuda_ps_desc {
        uint32_t n_layers;
        const struct m40_cuda_ps_layer *layers;
        uint32_t n_heads, n_kv_heads, head_dim;
        float scale;      /* attention's 1 / sqrt(head_dim) */
        uint32_t max_ctx; /* positions of a sequence (the workspace's size) */
        float *x, *xn, *q, *k, *v, *att, *gate, *up;
        size_t ld_dim, ld_q, ld_kv, ld_ff;
        struct m40_cuda_rms rms;
        struct m40_cuda_rope rope;
        struct m40_cuda_kv kv;
        void *attn_ws;
        size_t attn_ws_bytes;
        /* bytes of the layer's next matrices the blocks without attention work ask the L2
         * for during attention (the per-step path's budget, ops.h m40_cuda_l2_budget()) */
        size_t pf_bytes;
};

/* m40_cuda_ps_default - whether the engine's default mode is the persistent step kernel
 * (a build-time choice; persist_step.cu's PS_DEFAULT). */
bool m40_cuda_ps_default(void);

/* m40_cuda_ps_bytes - the device memory m40_cuda_ps_new() takes for n_layers layers. */
size_t m40_cuda_ps_bytes(uint32_t n_layers);

/* m40_cuda_ps_new - the launch plan of every layer (d checked as the per-step launchers
 * check theirs), the grid from the occupancy of the kernel for the layers' type, and the
 * barrier counters, in mem (m40_cuda_ps_bytes() of device memory, 16-byte aligned, the
 * caller's, kept until m40_cuda_ps_free()). Synchronous (it uploads the plan). Returns 0
 * and *ret; -ENOTSUP for a model this form does not take (see above), -EINVAL, -ENOMEM,
 * M40_ECUDA. */
int m40_cuda_ps_new(const struct m40_cuda_ps_desc *d, void *mem, size_t mem_bytes,
                    struct m40_cuda_ps **ret);

/* m40_cuda_ps_run - queue one step's layers on stream: the embedding's output and
 * partials, and the step's positions and tables in d->kv, in place; max_pos the largest
 * position the step may have (the attention's plan covers 0..max_pos; a CUDA graph
 * captures the launch with its bound). -ENOTSUP when max_pos + 1 is above
 * M40_CUDA_PS_MAX_CTX (the caller runs the per-step path), M40_ECUDA. */
int m40_cuda_ps_run(struct m40_cuda_ps *ps, uint32_t max_pos, struct CUstream_st *stream);

/* m40_cuda_ps_blocks - the grid of ps's launches (blocks of 256 threads). */
uint32_t m40_cuda_ps_blocks(const struct m40_cuda_ps *ps);

/* m40_cuda_ps_free - accepts NULL; returns NULL. The device memory stays the caller's. */
struct m40_cuda_ps *m40_cuda_ps_free(struct m40_cuda_ps *ps);

#ifdef __cplusplus
}
#endif

#endif
