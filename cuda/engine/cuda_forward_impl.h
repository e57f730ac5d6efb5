/* cuda/engine/cuda_forward_impl.h - struct m40_cuda_fwd and the step-shape limits, shared
 * by cuda_forward.c (a step: packing its data, the layers' kernels, CUDA graphs) and
 * cuda_forward_setup.c (sizing and allocating the device model, its scratch, streams and
 * prefill GEMM, and freeing them). Internal to the CUDA engine: nothing outside those two
 * files includes it. */
#ifndef M40_CUDA_CUDA_FORWARD_IMPL_H
#define M40_CUDA_CUDA_FORWARD_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "cuda/engine/cuda_weights.h"
#include "cuda/kernels/gemm.h"
#include "cuda/kernels/matvec.h"
#include "cuda/kernels/ops.h"
#include "engine/model.h"

/* Steps of fewer tokens than this (decode, short prompt chunks) run as CUDA graphs:
 * hundreds of small kernels per token cost more to launch one by one (a few us of host
 * time each) than they take to run on a small model. FWD_GRAPHS shapes are kept; the
 * attention bound is rounded up to FWD_GRAPH_POS positions so one graph serves many
 * steps (128: contexts below it stay in the attention's one-pass form, ops.h). A shape is
 * captured the second time it comes (the last FWD_SEEN new shapes are remembered): the
 * steps that admit a crowd of prompts (decode tokens plus a prompt chunk, each count
 * once) would otherwise pay a capture each (milliseconds) and push the steady shapes
 * out of the FWD_GRAPHS kept. */
#define FWD_GRAPH_MAX_TOKENS 64
#define FWD_GRAPHS           16
#define FWD_SEEN             32
#define FWD_GRAPH_POS        128

/* Matrix products of more than f->mv_max and at most FWD_MMQ_MAX_TOKENS
 * tokens run on the batched kernel (matvec.h, m40_cuda_mmq(): weight tiles dequantized
 * into shared memory once per step, FP32 register tiles over the step's columns, k split
 * over f->part when the tiles are too few to fill the GPU); larger ones as cuBLAS SGEMM
 * on dequantized weight tiles (cuda/kernels/gemm.h), which is then set up. Knob for A/B builds;
 * RESULTS.md has the measured choice per chunk size. */
#ifndef FWD_MMQ_MAX_TOKENS
#define FWD_MMQ_MAX_TOKENS 64
#endif

struct m40_cuda_fwd {
        const struct m40_model *m;
        struct m40_cuda_device *dev;
        struct m40_cuda_alloc *a;
        struct m40_cuda_model_weights mw; /* the weights on the device (cuda_weights.h) */
        cudaStream_t stream;
        /* the graph branch beside attention (cuda_forward.c, layer()): its stream, fork and join
         * events, and how many bytes of the next matrices it and each product's last blocks ask the
         * L2 for (cuda/engine/l2_plan.h; 0: none, no branch) */
        cudaStream_t side;
        cudaEvent_t fork, join;
        size_t pf_bytes;
        struct m40_cuda_gemm *gemm; /* the prefill GEMM; NULL when steps are too small */
        uint32_t mv_max; /* steps of up to this many tokens take the matrix-vector kernel */
        float *part;     /* m40_cuda_mmq()'s split partial sums, part_bytes */
        size_t part_bytes;
        uint16_t *kv; /* page 0 of the KV pool */
        size_t page_elems, v_off;
        uint32_t max_tokens, max_rows, max_ctx, page_tokens, max_tbl;
        size_t ld_dim, ld_q, ld_kv, ld_ff;
        float *x, *xn, *tmp, *q, *att, *k, *v, *gate, *up, *logits; /* device scratch */
        /* per-step data, host and device copies of one block:
         * tok (max_tokens) | idx (max_rows) | argmax (max_rows) | pos | tbl (max_tokens) |
         * pages (max_tbl) */
        void *meta_h, *meta_d;
        size_t meta_bytes;
        void *attn_ws; /* m40_cuda_attention()'s workspace (NULL when it needs none) */
        size_t attn_ws_bytes;
        /* the fused RMSNorm of small steps (matvec.h): partials and their count */
        struct m40_cuda_rms rms;
        /* CUDA graphs of small steps (see cuda_forward.c, run_graph()), most recently used first */
        struct fwd_graph {
                cudaGraphExec_t exec;
                uint32_t n, n_rows, bound;
        } graphs[FWD_GRAPHS];
        uint32_t n_graphs;
        /* shapes run once without a graph (exec unused), a ring: the next to go at seen_at */
        struct fwd_graph seen[FWD_SEEN];
        uint32_t n_seen, seen_at;
        /* the persistent step kernel of one-token steps (m40_cuda_fwd_persistent()); NULL:
         * every step per layer. Its plan and counters live in ps_mem (scratch). */
        struct m40_cuda_ps *ps;
        void *ps_mem;
        bool no_graphs; /* a capture failed: launch directly from then on */
        bool one_seq;   /* the step's tokens are all of one sequence (cuda_forward.c, pack()) */
};

/* fwd_kv - the KV cache as the kernels see it, for the step data in meta_d (tok | idx |
 * argmax | pos | tbl | pages); layer 0. */
static inline struct m40_cuda_kv fwd_kv(const struct m40_cuda_fwd *f)
{
        const int32_t *d_arg = (const int32_t *)f->meta_d + f->max_tokens + f->max_rows;
        const uint32_t *d_pos = (const uint32_t *)(d_arg + f->max_rows);
        const uint32_t *d_tbl = d_pos + f->max_tokens;

        return (struct m40_cuda_kv){
                .base = f->kv,
                .page_elems = f->page_elems,
                .v_off = f->v_off,
                .page_tokens = f->page_tokens,
                .kv_dim = f->m->kv_dim,
                .pos = d_pos,
                .tbl = d_tbl,
                .pages = d_tbl + f->max_tokens,
        };
}

#endif
