/* cuda/cuda_forward.c - the CUDA engine's device model and forward pass (see
 * cuda_forward.h). Mirrors forward.c (M40_ACT_F32) op for op:
 *   x = embed(tokens); per layer: xn = rmsnorm(x) * attn_norm; q,k,v = xn Wq,Wk,Wv (+ b);
 *   rope q,k and store k,v (f16); att = attention; x += att Wo; xn = rmsnorm(x) * ffn_norm;
 *   x += (silu(xn Wg) * (xn Wu)) Wd; then logits = rmsnorm(x[rows]) * output_norm Wout.
 * Matrix products of more than M40_CUDA_MATMUL_MAX_BATCH tokens run as column tiles. */
#include "cuda/cuda_forward.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "cuda/alloc.h"
#include "cuda/device.h"
#include "cuda/loader.h"
#include "cuda/matvec.h"
#include "cuda/ops.h"
#include "m40/error.h"

struct dlayer {
        struct m40_cuda_matrix wq, wk, wv, wo, gate, up, down;
        float *attn_norm, *ffn_norm, *bq, *bk, *bv; /* device; biases NULL for llama */
};

struct m40_cuda_fwd {
        const struct m40_model *m;
        struct m40_cuda_device *dev;
        struct m40_cuda_alloc *a;
        struct m40_cuda_weights w;
        cudaStream_t stream;
        struct dlayer *layers;
        struct m40_cuda_matrix tok_embd, output;
        float *output_norm;
        float *rope_cs; /* (max_ctx, n_rot) */
        uint16_t *kv;   /* page 0 of the KV pool */
        size_t page_elems, v_off;
        uint32_t max_tokens, max_rows, max_ctx, page_tokens, max_tbl;
        size_t ld_dim, ld_q, ld_kv, ld_ff;
        float *x, *xn, *tmp, *q, *att, *k, *v, *gate, *up, *logits; /* device scratch */
        /* per-step data, host and device copies of one block:
         * tok (max_tokens) | idx (max_rows) | argmax (max_rows) | pos | tbl (max_tokens) |
         * pages (max_tbl) */
        void *meta_h, *meta_d;
        size_t meta_bytes;
};

static size_t ld4(size_t n)
{
        return (n + 3) & ~(size_t)3;
}

static size_t al(size_t n)
{
        return (n + M40_CUDA_ALLOC_ALIGN - 1) & ~(size_t)(M40_CUDA_ALLOC_ALIGN - 1);
}

static int cuda_fail(cudaError_t e, const char *what, char *err, size_t errlen)
{
        if (e == cudaSuccess)
                return 0;
        if (err)
                snprintf(err, errlen, "%s: %s: %s", what, cudaGetErrorName(e),
                         cudaGetErrorString(e));
        return M40_ECUDA;
}

/* upload - n floats from the host into the weights pool; NULL stays NULL. */
static int upload(struct m40_cuda_fwd *f, const float *h, size_t n, float **ret, char *err,
                  size_t errlen)
{
        void *d;
        int r;

        *ret = NULL;
        if (!h)
                return 0;
        r = m40_cuda_alloc_weights(f->a, n * sizeof(float), &d);
        if (r)
                return r;
        r = cuda_fail(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice), "upload", err,
                      errlen);
        *ret = d;
        return r;
}

static struct m40_cuda_matrix dmat(const struct m40_cuda_fwd *f, const struct m40_weight *w)
{
        const uint64_t file_off = (uint64_t)((const uint8_t *)w->data - (const uint8_t *)f->m->map);

        return (struct m40_cuda_matrix){
                .data = m40_cuda_weights_tensor(&f->w, file_off),
                .type = w->type,
                .n_in = w->n_in,
                .n_out = w->n_out,
                .row_bytes = w->row_bytes,
        };
}

/* small_bytes - weights-pool bytes of the float vectors and the RoPE table. */
static uint64_t small_bytes(const struct m40_model *m, uint32_t max_ctx)
{
        const uint64_t per_layer = al(m->dim * 4) * 2 + al(m->q_dim * 4) + al(m->kv_dim * 4) * 2;

        return per_layer * m->n_layers + al(m->dim * 4) + al((size_t)max_ctx * m->rope.n_rot * 4);
}

static int put_weights(struct m40_cuda_fwd *f, char *err, size_t errlen)
{
        const struct m40_model *m = f->m;
        int r = m40_cuda_load_gguf(f->a, m->gguf, NULL, &f->w, NULL, err, errlen);
        float *cs;

        f->layers = calloc(m->n_layers, sizeof(*f->layers));
        if (r || !f->layers)
                return r ? r : -ENOMEM;
        for (uint32_t i = 0; i < m->n_layers && !r; i++) {
                const struct m40_layer *l = &m->layers[i];
                struct dlayer *d = &f->layers[i];

                d->wq = dmat(f, &l->wq);
                d->wk = dmat(f, &l->wk);
                d->wv = dmat(f, &l->wv);
                d->wo = dmat(f, &l->wo);
                d->gate = dmat(f, &l->w_gate);
                d->up = dmat(f, &l->w_up);
                d->down = dmat(f, &l->w_down);
                r = upload(f, l->attn_norm, m->dim, &d->attn_norm, err, errlen);
                r = r ? r : upload(f, l->ffn_norm, m->dim, &d->ffn_norm, err, errlen);
                r = r ? r : upload(f, l->bq, m->q_dim, &d->bq, err, errlen);
                r = r ? r : upload(f, l->bk, m->kv_dim, &d->bk, err, errlen);
                r = r ? r : upload(f, l->bv, m->kv_dim, &d->bv, err, errlen);
        }
        f->tok_embd = dmat(f, &m->tok_embd);
        f->output = dmat(f, &m->output);
        r = r ? r : upload(f, m->output_norm, m->dim, &f->output_norm, err, errlen);
        if (r)
                return r;
        /* the cos/sin of every position, from the CPU reference itself: rotating
         * (1, 0) pairs in the llama layout leaves (cos, sin) */
        cs = malloc((size_t)f->max_ctx * m->rope.n_rot * sizeof(float));
        if (!cs)
                return -ENOMEM;
        for (uint32_t p = 0; p < f->max_ctx; p++) {
                struct m40_rope rp = m->rope;
                float *row = cs + (size_t)p * m->rope.n_rot;

                rp.neox = false;
                for (uint32_t i = 0; i < m->rope.n_rot; i++)
                        row[i] = (i & 1) ? 0.0f : 1.0f;
                m40_cpu_rope(&rp, row, 1, m->rope.n_rot, (int32_t)p);
        }
        r = upload(f, cs, (size_t)f->max_ctx * m->rope.n_rot, &f->rope_cs, err, errlen);
        free(cs);
        return r;
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
        if (r)
                return r;
        f->meta_h = malloc(f->meta_bytes);
        if (!f->meta_h)
                return -ENOMEM;
        return cuda_fail(cudaStreamCreateWithFlags(&f->stream, cudaStreamNonBlocking),
                         "cudaStreamCreate", err, errlen);
}

int m40_cuda_fwd_new(const struct m40_model *m, int device, uint32_t max_tokens, uint32_t max_rows,
                     uint32_t max_ctx, uint32_t n_pages, uint32_t page_tokens,
                     uint64_t vram_limit_mb, struct m40_cuda_fwd **ret, char *err, size_t errlen)
{
        struct m40_cuda_fwd *f = calloc(1, sizeof(*f));
        struct m40_cuda_alloc_config cfg = {0};
        struct m40_cuda_alloc_stats st;
        uint64_t plan;
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
        cfg.weight_bytes = plan + small_bytes(m, max_ctx);
        cfg.scratch_bytes = al(f->meta_bytes) + al((size_t)max_rows * m->n_vocab * 4) +
                            al(max_tokens * f->ld_dim * 4) * 3 + al(max_tokens * f->ld_q * 4) * 2 +
                            al(max_tokens * f->ld_kv * 4) * 2 + al(max_tokens * f->ld_ff * 4) * 2;
        cfg.kv_page_bytes = 2ull * 2 * m->n_layers * page_tokens * m->kv_dim;
        cfg.kv_pages = n_pages;
        cfg.kv_pages_min = n_pages;
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
        r = put_weights(f, err, errlen);
        if (r)
                goto out;
        r = scratch(f, err, errlen);
        if (r)
                goto out;
        *ret = f;
        return 0;
out:
        if (err && !err[0])
                snprintf(err, errlen, "CUDA engine: %s", m40_strerror(r));
        m40_cuda_fwd_free(f);
        return r;
}

struct m40_cuda_fwd *m40_cuda_fwd_free(struct m40_cuda_fwd *f)
{
        if (!f)
                return NULL;
        if (f->stream) {
                cudaStreamSynchronize(f->stream);
                cudaStreamDestroy(f->stream);
        }
        m40_cuda_alloc_free(f->a);
        m40_cuda_device_free(f->dev);
        free(f->layers);
        free(f->meta_h);
        free(f);
        return NULL;
}

/* mm - y (n, w->n_out) = x (n, w->n_in) W^T, in column tiles of the kernels' batch limit. */
static int mm(struct m40_cuda_fwd *f, const struct m40_cuda_matrix *w, const float *x, size_t ldx,
              float *y, size_t ldy, uint32_t n)
{
        int r = 0;

        for (uint32_t c = 0; c < n && !r; c += M40_CUDA_MATMUL_MAX_BATCH) {
                const uint32_t b =
                        n - c < M40_CUDA_MATMUL_MAX_BATCH ? n - c : M40_CUDA_MATMUL_MAX_BATCH;

                r = m40_cuda_matmul(w, x + (size_t)c * ldx, ldx, y + (size_t)c * ldy, ldy, b,
                                    f->stream);
        }
        return r;
}

static int layer(struct m40_cuda_fwd *f, const struct dlayer *l, const struct m40_cuda_kv *kv,
                 uint32_t T, uint32_t max_pos)
{
        const struct m40_model *m = f->m;
        const struct m40_cuda_rope rope = {f->rope_cs, m->rope.n_rot, m->rope.neox};
        const float scale = 1.0f / sqrtf((float)m->head_dim);
        cudaStream_t s = f->stream;
        int r;

        r = m40_cuda_rmsnorm(f->x, f->ld_dim, NULL, l->attn_norm, m->dim, m->rms_eps, T, f->xn,
                             f->ld_dim, s);
        r = r ? r : mm(f, &l->wq, f->xn, f->ld_dim, f->q, f->ld_q, T);
        r = r ? r : mm(f, &l->wk, f->xn, f->ld_dim, f->k, f->ld_kv, T);
        r = r ? r : mm(f, &l->wv, f->xn, f->ld_dim, f->v, f->ld_kv, T);
        if (!r && l->bq) {
                r = m40_cuda_bias(f->q, l->bq, f->ld_q, m->q_dim, T, s);
                r = r ? r : m40_cuda_bias(f->k, l->bk, f->ld_kv, m->kv_dim, T, s);
                r = r ? r : m40_cuda_bias(f->v, l->bv, f->ld_kv, m->kv_dim, T, s);
        }
        r = r ? r
              : m40_cuda_rope_store(&rope, kv, f->q, f->ld_q, f->k, f->v, f->ld_kv, m->n_heads,
                                    m->n_kv_heads, m->head_dim, T, s);
        r = r ? r
              : m40_cuda_attention(kv, f->q, f->ld_q, f->att, f->ld_q, m->n_heads, m->n_kv_heads,
                                   m->head_dim, scale, T, max_pos, s);
        r = r ? r : mm(f, &l->wo, f->att, f->ld_q, f->tmp, f->ld_dim, T);
        r = r ? r : m40_cuda_add(f->x, f->tmp, f->ld_dim, m->dim, T, s);
        r = r ? r
              : m40_cuda_rmsnorm(f->x, f->ld_dim, NULL, l->ffn_norm, m->dim, m->rms_eps, T, f->xn,
                                 f->ld_dim, s);
        r = r ? r : mm(f, &l->gate, f->xn, f->ld_dim, f->gate, f->ld_ff, T);
        r = r ? r : mm(f, &l->up, f->xn, f->ld_dim, f->up, f->ld_ff, T);
        r = r ? r : m40_cuda_swiglu(f->gate, f->up, f->ld_ff, m->n_ff, T, s);
        r = r ? r : mm(f, &l->down, f->gate, f->ld_ff, f->tmp, f->ld_dim, T);
        r = r ? r : m40_cuda_add(f->x, f->tmp, f->ld_dim, m->dim, T, s);
        return r;
}

/* pack - the step's token ids, positions, block tables and logit rows into meta_h;
 * returns the largest position, or -E2BIG when the tables do not fit. */
static int64_t pack(struct m40_cuda_fwd *f, const struct m40_fwd_tok *toks, uint32_t n,
                    uint32_t n_rows)
{
        int32_t *tok = f->meta_h, *idx = tok + f->max_tokens;
        uint32_t *pos = (uint32_t *)(idx + 2 * f->max_rows), *tbl = pos + f->max_tokens;
        uint32_t *pages = tbl + f->max_tokens, used = 0, max_pos = 0;

        for (uint32_t t = 0; t < n; t++) {
                const struct m40_kv_table *kt = toks[t].kv;

                tok[t] = toks[t].token;
                pos[t] = toks[t].pos;
                if (pos[t] >= f->max_ctx)
                        return -E2BIG;
                if (pos[t] > max_pos)
                        max_pos = pos[t];
                if (t && toks[t - 1].kv == kt) {
                        tbl[t] = tbl[t - 1];
                        continue;
                }
                if (kt->n_pages > f->max_tbl - used)
                        return -E2BIG;
                memcpy(pages + used, kt->pages, (size_t)kt->n_pages * sizeof(uint32_t));
                tbl[t] = used;
                used += kt->n_pages;
        }
        for (uint32_t t = 0; t < n; t++)
                if (toks[t].logit_row >= 0 && (uint32_t)toks[t].logit_row < n_rows)
                        idx[toks[t].logit_row] = (int32_t)t;
        return max_pos;
}

int m40_cuda_fwd_run(struct m40_cuda_fwd *f, const struct m40_fwd_tok *toks, uint32_t n,
                     uint32_t n_rows, float *logits, int32_t *argmax)
{
        const struct m40_model *m = f->m;
        int32_t *d_tok = f->meta_d, *d_idx = d_tok + f->max_tokens, *d_arg = d_idx + f->max_rows;
        uint32_t *d_pos = (uint32_t *)(d_arg + f->max_rows), *d_tbl = d_pos + f->max_tokens;
        struct m40_cuda_kv kv = {
                .base = f->kv,
                .page_elems = f->page_elems,
                .v_off = f->v_off,
                .page_tokens = f->page_tokens,
                .kv_dim = m->kv_dim,
                .pos = d_pos,
                .tbl = d_tbl,
                .pages = d_tbl + f->max_tokens,
        };
        int64_t max_pos;
        int r;

        if (n > f->max_tokens || n_rows > f->max_rows || (n_rows && !logits && !argmax))
                return -EINVAL;
        if (!n)
                return 0;
        max_pos = pack(f, toks, n, n_rows);
        if (max_pos < 0)
                return (int)max_pos;
        if (cudaMemcpyAsync(f->meta_d, f->meta_h, f->meta_bytes, cudaMemcpyHostToDevice,
                            f->stream) != cudaSuccess)
                return m40_cuda_launch_status("step upload");
        r = m40_cuda_embed(f->tok_embd.data, f->tok_embd.type, f->tok_embd.row_bytes, m->dim, d_tok,
                           n, f->x, f->ld_dim, f->stream);
        for (uint32_t i = 0; i < m->n_layers && !r; i++) {
                kv.layer = i;
                r = layer(f, &f->layers[i], &kv, n, (uint32_t)max_pos);
        }
        if (!r && n_rows) {
                r = m40_cuda_rmsnorm(f->x, f->ld_dim, d_idx, f->output_norm, m->dim, m->rms_eps,
                                     n_rows, f->xn, f->ld_dim, f->stream);
                r = r ? r : mm(f, &f->output, f->xn, f->ld_dim, f->logits, m->n_vocab, n_rows);
                if (!r && logits) {
                        if (cudaMemcpyAsync(logits, f->logits,
                                            (size_t)n_rows * m->n_vocab * sizeof(float),
                                            cudaMemcpyDeviceToHost, f->stream) != cudaSuccess)
                                r = m40_cuda_launch_status("logits download");
                } else if (!r) {
                        r = m40_cuda_argmax(f->logits, m->n_vocab, m->n_vocab, n_rows, d_arg,
                                            f->stream);
                        if (!r && cudaMemcpyAsync(argmax, d_arg, n_rows * sizeof(int32_t),
                                                  cudaMemcpyDeviceToHost, f->stream) != cudaSuccess)
                                r = m40_cuda_launch_status("argmax download");
                }
        }
        if (cudaStreamSynchronize(f->stream) != cudaSuccess && !r)
                r = m40_cuda_launch_status("step");
        return r;
}
