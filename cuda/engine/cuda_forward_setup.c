/* cuda/engine/cuda_forward_setup.c - the CUDA engine's device model set up and torn down
 * (m40_cuda_fwd_new(), m40_cuda_fwd_free(); see cuda_forward.h): the row strides and the
 * sizes of the arena's pools (weights, scratch, KV pages), the device scratch of a step
 * (activations, per-step data, the fused RMSNorm's partials, m40_cuda_mmq()'s split sums,
 * the attention workspace), the streams and events, and the prefill GEMM with its tile,
 * workspace and warm-up. The step itself is cuda_forward.c's. */
#include "cuda/engine/cuda_forward.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "cuda/engine/cuda_forward_impl.h"
#include "cuda/engine/cuda_weights.h"
#include "cuda/engine/l2_plan.h"
#include "cuda/kernels/gemm.h"
#include "cuda/kernels/matvec.h"
#include "cuda/kernels/persist_step.h"
#include "cuda/kernels/ops.h"
#include "cuda/runtime/alloc.h"
#include "cuda/runtime/device.h"
#include "cuda/runtime/loader.h"
#include "m40/error.h"

static size_t ld4(size_t n)
{
        return (n + 3) & ~(size_t)3;
}

static size_t al(size_t n)
{
        return (n + M40_CUDA_ALLOC_ALIGN - 1) & ~(size_t)(M40_CUDA_ALLOC_ALIGN - 1);
}

static int scratch(struct m40_cuda_fwd *f, char *err, size_t errlen)
{
        const size_t T = f->max_tokens;
        float **bufs[] = {&f->x, &f->xn, &f->tmp, &f->q, &f->att, &f->k, &f->v, &f->gate, &f->up};
        const size_t lds[] = {f->ld_dim, f->ld_dim, f->ld_dim, f->ld_q, f->ld_q,
                              f->ld_kv,  f->ld_kv,  f->ld_ff,  f->ld_ff};
        int r = 0;

        for (size_t i = 0; i < sizeof(lds) / sizeof(lds[0]) && !r; i++)
                r = m40_cuda_scratch_f32(f->a, T * lds[i], bufs[i]);
        r = r ? r : m40_cuda_scratch_f32(f->a, (size_t)f->max_rows * f->m->n_vocab, &f->logits);
        r = r ? r : m40_cuda_scratch_alloc(f->a, f->meta_bytes, &f->meta_d);
        f->rms.partial_bytes = M40_CUDA_RMS_PARTIAL_BYTES(f->m->dim);
        f->rms.eps = f->m->rms_eps;
        f->rms.xg = f->xn;
        f->rms.ldxg = f->ld_dim;
        r = r ? r : m40_cuda_scratch_f32(f->a, f->rms.partial_bytes / 4, &f->rms.partial);
        r = r ? r : m40_cuda_scratch_alloc(f->a, sizeof(unsigned), (void **)&f->rms.count);
        r = r ? r : m40_cuda_scratch_alloc(f->a, m40_cuda_ps_bytes(f->m->n_layers), &f->ps_mem);
        if (!r && f->part_bytes) { /* its counters start at zero (matvec.h, m40_cuda_mmq) */
                r = m40_cuda_scratch_alloc(f->a, f->part_bytes, (void **)&f->part);
                r = r ? r
                      : m40_cuda_status(cudaMemset(f->part, 0,
                                                   f->part_bytes < M40_CUDA_MMQ_SEM_BYTES
                                                           ? f->part_bytes
                                                           : M40_CUDA_MMQ_SEM_BYTES),
                                        "cudaMemset", err, errlen);
        }
        if (!r && f->attn_ws_bytes) { /* its counters start at zero (ops.h) */
                r = m40_cuda_scratch_alloc(f->a, f->attn_ws_bytes, &f->attn_ws);
                r = r ? r
                      : m40_cuda_status(cudaMemset(f->attn_ws, 0, f->attn_ws_bytes), "cudaMemset",
                                        err, errlen);
        }
        /* the memsets are done before any launch on the non-blocking stream */
        r = r ? r : m40_cuda_status(cudaDeviceSynchronize(), "cudaMemset", err, errlen);
        if (r)
                return r;
        f->meta_h = malloc(f->meta_bytes);
        if (!f->meta_h)
                return -ENOMEM;
        r = m40_cuda_status(cudaStreamCreateWithFlags(&f->stream, cudaStreamNonBlocking),
                            "cudaStreamCreate", err, errlen);
        r = r ? r
              : m40_cuda_status(cudaStreamCreateWithFlags(&f->side, cudaStreamNonBlocking),
                                "cudaStreamCreate", err, errlen);
        r = r ? r
              : m40_cuda_status(cudaEventCreateWithFlags(&f->fork, cudaEventDisableTiming),
                                "cudaEventCreate", err, errlen);
        r = r ? r
              : m40_cuda_status(cudaEventCreateWithFlags(&f->join, cudaEventDisableTiming),
                                "cudaEventCreate", err, errlen);
        f->pf_bytes = m40_cuda_l2_budget(m40_cuda_device_info(f->dev));
        return r;
}

/* The split partial sums' scratch: 16 splits of 64 columns of the widest launch, at
 * most this much. */
#define FWD_PART_MAX ((size_t)32 << 20)

/* gemm_tile_bytes - the GEMM's tile scratch: the largest matrix cuda_forward.c's mm() multiplies,
 * whole, at most M40_CUDA_GEMM_SCRATCH_DEFAULT (larger ones are cut into tiles), for each of
 * m40_cuda_gemm_buffers(). */
static uint64_t gemm_tile_bytes(const struct m40_model *m)
{
        uint64_t b = m40_cuda_gemm_scratch_bytes(m->output.type, m->output.n_in, m->output.n_out);

        for (uint32_t i = 0; i < m->n_layers; i++) {
                const struct m40_layer *l = &m->layers[i];
                const struct m40_weight *ws[] = {&l->wq,     &l->wk,   &l->wv,    &l->wo,
                                                 &l->w_gate, &l->w_up, &l->w_down};

                for (size_t j = 0; j < sizeof(ws) / sizeof(ws[0]); j++) {
                        const uint64_t t =
                                m40_cuda_gemm_scratch_bytes(ws[j]->type, ws[j]->n_in, ws[j]->n_out);

                        b = t > b ? t : b;
                }
        }
        return (b < M40_CUDA_GEMM_SCRATCH_DEFAULT ? b : M40_CUDA_GEMM_SCRATCH_DEFAULT) *
               m40_cuda_gemm_buffers();
}

/* part_bytes - m40_cuda_mmq()'s counters and partial sums for steps of up to n tokens: 16
 * splits of min(n, 64) columns of the widest launch (q, k and v together; gate and up;
 * the output matrix), at most FWD_PART_MAX in all; 0 when no step is wider than the
 * matrix-vector kernel. */
static size_t part_bytes(const struct m40_model *m, uint32_t n, uint32_t mv_max)
{
        const size_t cols = n < 64 ? n : 64;
        size_t rows = m->output.n_out, b;

        if (n <= mv_max)
                return 0;
        rows = rows > (size_t)m->q_dim + 2 * m->kv_dim ? rows : (size_t)m->q_dim + 2 * m->kv_dim;
        rows = rows > 2 * (size_t)m->n_ff ? rows : 2 * (size_t)m->n_ff;
        b = M40_CUDA_MMQ_SEM_BYTES + 16 * cols * rows * sizeof(float);
        return b < FWD_PART_MAX ? b : FWD_PART_MAX;
}

/* gemm_init - the GEMM's handle, its tile and cuBLAS's workspace from the scratch pool. */
static int gemm_init(struct m40_cuda_fwd *f, uint64_t tile_bytes, uint64_t ws_bytes, char *err,
                     size_t errlen)
{
        void *tile = NULL, *ws = NULL;
        int r = tile_bytes ? m40_cuda_scratch_alloc(f->a, tile_bytes, &tile) : 0;

        r = r ? r : m40_cuda_scratch_alloc(f->a, ws_bytes, &ws);
        return r ? r : m40_cuda_gemm_new(tile, tile_bytes, ws, ws_bytes, &f->gemm, err, errlen);
}

/* Whether the engine warms the prefill GEMM up when it starts (warm_gemm; knob for A/B
 * builds: -DFWD_WARM_GEMM=0 through c_args). */
#ifndef FWD_WARM_GEMM
#define FWD_WARM_GEMM 1
#endif

/* warm_gemm - run the prefill GEMM once on each matrix shape of layer 0 at step sizes
 * from FWD_MMQ_MAX_TOKENS + 1 to max_tokens (the least, each power of two between, the
 * most), on zeroed activations into scratch, then wait. CUDA loads a kernel's code on its
 * first launch and cuBLAS picks kernels by shape, so without this the first long prompt
 * a daemon serves pays for loading them (100-200 ms measured on an H100), in the middle
 * of the other clients' decoding. The weights are read, nothing the engine keeps is
 * written. */
static int warm_gemm(struct m40_cuda_fwd *f, char *err, size_t errlen)
{
        const struct m40_cuda_layer_weights *l = &f->mw.layers[0];
        const size_t T = f->max_tokens;
        const struct {
                const struct m40_cuda_matrix *w;
                const float *x;
                size_t ldx;
                float *y;
                size_t ldy;
        } mats[] = {
                {&l->wq, f->xn, f->ld_dim, f->q, f->ld_q},
                {&l->wk, f->xn, f->ld_dim, f->k, f->ld_kv},
                {&l->wv, f->xn, f->ld_dim, f->v, f->ld_kv},
                {&l->wo, f->att, f->ld_q, f->tmp, f->ld_dim},
                {&l->gate, f->xn, f->ld_dim, f->gate, f->ld_ff},
                {&l->up, f->xn, f->ld_dim, f->up, f->ld_ff},
                {&l->down, f->gate, f->ld_ff, f->tmp, f->ld_dim},
        };
        int r = m40_cuda_status(cudaMemsetAsync(f->xn, 0, T * f->ld_dim * 4, f->stream),
                                "cudaMemset", err, errlen);

        r = r ? r
              : m40_cuda_status(cudaMemsetAsync(f->att, 0, T * f->ld_q * 4, f->stream),
                                "cudaMemset", err, errlen);
        r = r ? r
              : m40_cuda_status(cudaMemsetAsync(f->gate, 0, T * f->ld_ff * 4, f->stream),
                                "cudaMemset", err, errlen);
        for (uint32_t n = FWD_MMQ_MAX_TOKENS + 1; n <= f->max_tokens && !r;) {
                for (size_t i = 0; i < sizeof(mats) / sizeof(mats[0]) && !r; i++)
                        r = m40_cuda_gemm(f->gemm, mats[i].w, mats[i].x, mats[i].ldx, mats[i].y,
                                          mats[i].ldy, n, f->stream);
                if (n == f->max_tokens)
                        break;
                n = n < 2 * FWD_MMQ_MAX_TOKENS ? 2 * FWD_MMQ_MAX_TOKENS : 2 * n;
                n = n < f->max_tokens ? n : f->max_tokens;
        }
        if (r == M40_ECUDA && err)
                snprintf(err, errlen, "CUDA engine: warming the prefill GEMM: %s",
                         m40_cuda_gemm_last_error());
        return r ? r
                 : m40_cuda_status(cudaStreamSynchronize(f->stream), "warming the prefill GEMM",
                                   err, errlen);
}

int m40_cuda_fwd_new(const struct m40_model *m, int device, uint32_t max_tokens, uint32_t max_rows,
                     uint32_t max_ctx, uint32_t n_pages, uint32_t page_tokens,
                     uint64_t vram_limit_mb, uint64_t extra_scratch,
                     const struct m40_cuda_load_opts *load, struct m40_cuda_fwd **ret, char *err,
                     size_t errlen)
{
        struct m40_cuda_fwd *f = calloc(1, sizeof(*f));
        struct m40_cuda_alloc_config cfg = {0};
        struct m40_cuda_alloc_stats st;
        uint64_t plan;
        uint64_t gemm_tile = 0, gemm_ws = 0;
        int r;

        if (!f)
                return -ENOMEM;
        f->m = m;
        f->max_tokens = max_tokens;
        f->max_rows = max_rows;
        f->max_ctx = max_ctx;
        f->page_tokens = page_tokens;
        f->max_tbl = max_rows * ((max_ctx + page_tokens - 1) / page_tokens);
        f->ld_dim = ld4(m->dim);
        f->ld_q = ld4(m->q_dim);
        f->ld_kv = ld4(m->kv_dim);
        f->ld_ff = ld4(m->n_ff);
        f->meta_bytes = 4 * ((size_t)max_tokens * 3 + (size_t)max_rows * 2 + f->max_tbl);
        r = m40_cuda_device_open(device, &f->dev, err, errlen);
        if (r)
                goto out;
        r = m40_cuda_load_plan(m->gguf, &plan);
        if (r)
                goto out;
        cfg.weight_bytes = plan + m40_cuda_model_weights_extra(m, max_ctx);
        cfg.scratch_bytes = al(f->meta_bytes) + al((size_t)max_rows * m->n_vocab * 4) +
                            al(max_tokens * f->ld_dim * 4) * 3 + al(max_tokens * f->ld_q * 4) * 2 +
                            al(max_tokens * f->ld_kv * 4) * 2 + al(max_tokens * f->ld_ff * 4) * 2;
        cfg.scratch_bytes += extra_scratch;
        cfg.scratch_bytes += al(M40_CUDA_RMS_PARTIAL_BYTES(m->dim)) + al(sizeof(unsigned));
        cfg.scratch_bytes += al(m40_cuda_ps_bytes(m->n_layers));
        cfg.scratch_bytes += al(m40_cuda_model_weights_bounce(m));
        f->attn_ws_bytes = m40_cuda_attention_workspace(max_tokens, m->n_heads,
                                                        max_ctx ? max_ctx - 1 : 0, m->head_dim);
        cfg.scratch_bytes += al(f->attn_ws_bytes);
        /* the layers' main type (a Q4_K_M file's gate is Q4_K) picks the step policy */
        f->mv_max =
                m40_cuda_matvec_steps_max(m->n_layers ? m->layers[0].w_gate.type : m->output.type);
        f->part_bytes = part_bytes(m, max_tokens > max_rows ? max_tokens : max_rows, f->mv_max);
        cfg.scratch_bytes += al(f->part_bytes);
        if (max_tokens > FWD_MMQ_MAX_TOKENS || max_rows > FWD_MMQ_MAX_TOKENS) {
                gemm_tile = gemm_tile_bytes(m);
                gemm_ws = m40_cuda_gemm_workspace_bytes(m40_cuda_device_info(f->dev)->cc_major);
                cfg.scratch_bytes += al(gemm_tile) + al(gemm_ws);
        }
        cfg.kv_page_bytes = 2ull * 2 * m->n_layers * page_tokens * m->kv_dim;
        cfg.kv_pages = n_pages; /* 0: fill, from one row's full context up to every row's */
        cfg.kv_pages_min = n_pages ? n_pages : (max_ctx + page_tokens - 1) / page_tokens;
        cfg.kv_pages_max = n_pages ? n_pages : f->max_tbl;
        cfg.staging_bytes = 8u << 20;
        cfg.staging_count = 2;
        cfg.vram_limit_mb = vram_limit_mb;
        r = m40_cuda_alloc_new(f->dev, &cfg, &f->a, err, errlen);
        if (r)
                goto out;
        m40_cuda_alloc_stats(f->a, &st);
        f->kv = m40_cuda_kv_base(f->a);
        f->page_elems = st.kv_page_bytes / 2;
        f->v_off = (size_t)m->n_layers * page_tokens * m->kv_dim;
        r = m40_cuda_model_weights_put(&f->mw, m, f->a, max_ctx, load, err, errlen);
        if (r)
                goto out;
        r = scratch(f, err, errlen);
        if (r)
                goto out;
        if (gemm_ws) {
                r = gemm_init(f, gemm_tile, gemm_ws, err, errlen);
                r = r || !FWD_WARM_GEMM || f->max_tokens <= FWD_MMQ_MAX_TOKENS
                            ? r
                            : warm_gemm(f, err, errlen);
                if (r)
                        goto out;
        }
        *ret = f;
        return 0;
out:
        if (err && !err[0])
                snprintf(err, errlen, "CUDA engine: %s", m40_strerror(r));
        m40_cuda_fwd_free(f);
        return r;
}

/* Why the persistent step kernel does not take f's model, or NULL when nothing here
 * says so (m40_cuda_ps_new() checks the rest). */
static const char *ps_refusal(const struct m40_cuda_fwd *f)
{
        const struct m40_cuda_layer_weights *l = f->mw.layers;

        if (f->mv_max < 1)
                return "one-token steps do not take the fused matrix-vector kernels";
        for (uint32_t i = 0; i < f->m->n_layers; i++)
                if (l[i].bq || l[i].bk || l[i].bv)
                        return "the model has q/k/v biases";
        if (f->m->rope.neox)
                return "the model's RoPE rotates halves (neox), not adjacent pairs";
        return NULL;
}

int m40_cuda_fwd_persistent(struct m40_cuda_fwd *f, char *err, size_t errlen)
{
        const struct m40_model *m = f->m;
        struct m40_cuda_ps_layer *ls;
        struct m40_cuda_ps_desc d = {0};
        const char *why = ps_refusal(f);
        int r;

        if (f->ps)
                return 0;
        if (why) {
                if (err)
                        snprintf(err, errlen, "persistent mode: %s", why);
                return -ENOTSUP;
        }
        ls = calloc(m->n_layers, sizeof(*ls));
        if (!ls)
                return -ENOMEM;
        for (uint32_t i = 0; i < m->n_layers; i++) {
                const struct m40_cuda_layer_weights *l = &f->mw.layers[i];

                ls[i] = (struct m40_cuda_ps_layer){l->wq,   l->wk,        l->wv,
                                                   l->wo,   l->gate,      l->up,
                                                   l->down, l->attn_norm, l->ffn_norm};
        }
        d.n_layers = m->n_layers;
        d.layers = ls;
        d.n_heads = m->n_heads;
        d.n_kv_heads = m->n_kv_heads;
        d.head_dim = m->head_dim;
        d.scale = 1.0f / sqrtf((float)m->head_dim);
        d.max_ctx = f->max_ctx;
        d.x = f->x;
        d.xn = f->xn;
        d.q = f->q;
        d.k = f->k;
        d.v = f->v;
        d.att = f->att;
        d.gate = f->gate;
        d.up = f->up;
        d.ld_dim = f->ld_dim;
        d.ld_q = f->ld_q;
        d.ld_kv = f->ld_kv;
        d.ld_ff = f->ld_ff;
        d.rms = f->rms;
        d.rope = (struct m40_cuda_rope){f->mw.rope_cs, m->rope.n_rot, m->rope.neox};
        d.kv = fwd_kv(f);
        d.attn_ws = f->attn_ws;
        d.attn_ws_bytes = f->attn_ws_bytes;
        d.pf_bytes = f->pf_bytes;
        r = m40_cuda_ps_new(&d, f->ps_mem, m40_cuda_ps_bytes(m->n_layers), &f->ps);
        free(ls);
        if (r == -ENOTSUP && err)
                snprintf(err, errlen,
                         "persistent mode: the layers' matrices are not all of one type it takes, "
                         "or the attention's shape is not one it takes");
        else if (r && err)
                snprintf(err, errlen, "persistent mode: %s",
                         r == M40_ECUDA ? m40_cuda_last_error() : m40_strerror(r));
        return r;
}

struct m40_cuda_fwd *m40_cuda_fwd_free(struct m40_cuda_fwd *f)
{
        if (!f)
                return NULL;
        for (uint32_t i = 0; i < f->n_graphs; i++)
                cudaGraphExecDestroy(f->graphs[i].exec);
        m40_cuda_ps_free(f->ps);
        m40_cuda_gemm_free(f->gemm); /* before its stream goes */
        if (f->stream) {
                cudaStreamSynchronize(f->stream);
                cudaStreamDestroy(f->stream);
        }
        if (f->side) {
                cudaStreamSynchronize(f->side);
                cudaStreamDestroy(f->side);
        }
        if (f->fork)
                cudaEventDestroy(f->fork);
        if (f->join)
                cudaEventDestroy(f->join);
        m40_cuda_alloc_free(f->a);
        m40_cuda_device_free(f->dev);
        m40_cuda_model_weights_free(&f->mw);
        free(f->meta_h);
        free(f);
        return NULL;
}
