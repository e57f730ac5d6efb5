/* cuda/engine/cuda_weights.c - a model's weights on the device (see cuda_weights.h). */
#include "cuda/engine/cuda_weights.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "cuda/runtime/launch.h"
#include "engine/ops.h"
#include "m40/error.h"

static size_t al(size_t n)
{
        return (n + M40_CUDA_ALLOC_ALIGN - 1) & ~(size_t)(M40_CUDA_ALLOC_ALIGN - 1);
}

/* upload - n floats from the host into the weights pool; NULL stays NULL. */
static int upload(struct m40_cuda_alloc *a, const float *h, size_t n, float **ret, char *err,
                  size_t errlen)
{
        void *d;
        int r;

        *ret = NULL;
        if (!h)
                return 0;
        r = m40_cuda_alloc_weights(a, n * sizeof(float), &d);
        if (r)
                return r;
        r = m40_cuda_status(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice), "upload",
                            err, errlen);
        *ret = d;
        return r;
}

static struct m40_cuda_matrix dmat(const struct m40_cuda_model_weights *mw,
                                   const struct m40_model *m, const struct m40_weight *w)
{
        const uint64_t file_off = (uint64_t)((const uint8_t *)w->data - (const uint8_t *)m->map);

        return (struct m40_cuda_matrix){
                .data = m40_cuda_weights_tensor(&mw->w, file_off),
                .type = w->type,
                .n_in = w->n_in,
                .n_out = w->n_out,
                .row_bytes = w->row_bytes,
        };
}

uint64_t m40_cuda_model_weights_bounce(const struct m40_model *m)
{
        uint64_t b = m->tok_embd.row_bytes > m->output.row_bytes ? m->tok_embd.row_bytes
                                                                 : m->output.row_bytes;

        for (uint32_t i = 0; i < m->n_layers; i++) {
                const struct m40_layer *l = &m->layers[i];
                const struct m40_weight *ws[] = {&l->wq,     &l->wk,   &l->wv,    &l->wo,
                                                 &l->w_gate, &l->w_up, &l->w_down};

                for (size_t j = 0; j < sizeof(ws) / sizeof(ws[0]); j++)
                        b = ws[j]->row_bytes > b ? ws[j]->row_bytes : b;
        }
        return b;
}

uint64_t m40_cuda_model_weights_extra(const struct m40_model *m, uint32_t max_ctx)
{
        const uint64_t per_layer = al(m->dim * 4) * 2 + al(m->q_dim * 4) + al(m->kv_dim * 4) * 2;

        return per_layer * m->n_layers + al(m->dim * 4) + al((size_t)max_ctx * m->rope.n_rot * 4);
}

/* The weight matrices the engine multiplies: every layer's seven, the embedding table
 * and the output (the same tensor as the table when tied): *n of them in ret. */
static size_t all_mats(const struct m40_cuda_model_weights *mw, uint32_t n_layers,
                       const struct m40_cuda_matrix **ret, size_t cap)
{
        size_t n = 0;

        for (uint32_t i = 0; i < n_layers && n + 7 <= cap; i++) {
                const struct m40_cuda_layer_weights *d = &mw->layers[i];
                const struct m40_cuda_matrix *ms[] = {&d->wq,   &d->wk, &d->wv,  &d->wo,
                                                      &d->gate, &d->up, &d->down};

                for (size_t j = 0; j < 7; j++)
                        ret[n++] = ms[j];
        }
        if (n + 2 <= cap) {
                ret[n++] = &mw->tok_embd;
                ret[n++] = &mw->output;
        }
        return n;
}

/* relayout - every weight matrix into the kernels' device layout (m40_cuda_relayout()),
 * each tensor once, through the scratch pool (still empty: released after). */
static int relayout(struct m40_cuda_model_weights *mw, uint32_t n_layers, struct m40_cuda_alloc *a,
                    char *err, size_t errlen)
{
        const size_t cap = (size_t)n_layers * 7 + 2;
        const struct m40_cuda_matrix **ms = malloc(cap * sizeof(*ms));
        const uint64_t mark = m40_cuda_scratch_mark(a);
        struct m40_cuda_alloc_stats st;
        size_t n, need = 0;
        uint64_t bytes;
        void *bounce = NULL;
        int r = 0;

        if (!ms)
                return -ENOMEM;
        n = all_mats(mw, n_layers, ms, cap);
        for (size_t i = 0; i < n; i++) {
                const size_t b = m40_cuda_relayout_bounce(ms[i]);

                need = b > need ? b : need;
        }
        m40_cuda_alloc_stats(a, &st);
        bytes = st.scratch.capacity - st.scratch.used;
        bytes = bytes < (256u << 20) ? bytes & ~(uint64_t)255 : (256u << 20);
        if (need && bytes < need) {
                snprintf(err, errlen,
                         "CUDA engine: %llu bytes of scratch for re-laying out "
                         "weight rows, %llu free",
                         (unsigned long long)need, (unsigned long long)bytes);
                r = -ENOMEM;
        }
        if (!r && need)
                r = m40_cuda_scratch_alloc(a, bytes, &bounce);
        for (size_t i = 0; i < n && need && !r; i++) {
                bool seen = false;

                for (size_t j = 0; j < i && !seen; j++)
                        seen = ms[j]->data == ms[i]->data;
                if (!seen)
                        r = m40_cuda_relayout(ms[i], bounce, bytes, NULL);
        }
        if (!r && need)
                r = m40_cuda_status(cudaDeviceSynchronize(), "weight relayout", err, errlen);
        m40_cuda_scratch_release(a, mark);
        free(ms);
        return r;
}

int m40_cuda_model_weights_put(struct m40_cuda_model_weights *mw, const struct m40_model *m,
                               struct m40_cuda_alloc *a, uint32_t max_ctx,
                               const struct m40_cuda_load_opts *load, char *err, size_t errlen)
{
        int r = m40_cuda_load_gguf(a, m->gguf, load, &mw->w, NULL, err, errlen);
        float *cs;

        mw->layers = calloc(m->n_layers, sizeof(*mw->layers));
        if (r || !mw->layers)
                return r ? r : -ENOMEM;
        for (uint32_t i = 0; i < m->n_layers && !r; i++) {
                const struct m40_layer *l = &m->layers[i];
                struct m40_cuda_layer_weights *d = &mw->layers[i];

                d->wq = dmat(mw, m, &l->wq);
                d->wk = dmat(mw, m, &l->wk);
                d->wv = dmat(mw, m, &l->wv);
                d->wo = dmat(mw, m, &l->wo);
                d->gate = dmat(mw, m, &l->w_gate);
                d->up = dmat(mw, m, &l->w_up);
                d->down = dmat(mw, m, &l->w_down);
                r = upload(a, l->attn_norm, m->dim, &d->attn_norm, err, errlen);
                r = r ? r : upload(a, l->ffn_norm, m->dim, &d->ffn_norm, err, errlen);
                r = r ? r : upload(a, l->bq, m->q_dim, &d->bq, err, errlen);
                r = r ? r : upload(a, l->bk, m->kv_dim, &d->bk, err, errlen);
                r = r ? r : upload(a, l->bv, m->kv_dim, &d->bv, err, errlen);
        }
        mw->tok_embd = dmat(mw, m, &m->tok_embd);
        mw->output = dmat(mw, m, &m->output);
        r = r ? r : relayout(mw, m->n_layers, a, err, errlen);
        r = r ? r : upload(a, m->output_norm, m->dim, &mw->output_norm, err, errlen);
        if (r)
                return r;
        /* the cos/sin of every position, from the CPU reference itself: rotating
         * (1, 0) pairs in the llama layout leaves (cos, sin) */
        cs = malloc((size_t)max_ctx * m->rope.n_rot * sizeof(float));
        if (!cs)
                return -ENOMEM;
        for (uint32_t p = 0; p < max_ctx; p++) {
                struct m40_rope rp = m->rope;
                float *row = cs + (size_t)p * m->rope.n_rot;

                rp.neox = false;
                for (uint32_t i = 0; i < m->rope.n_rot; i++)
                        row[i] = (i & 1) ? 0.0f : 1.0f;
                m40_cpu_rope(&rp, row, 1, m->rope.n_rot, (int32_t)p);
        }
        r = upload(a, cs, (size_t)max_ctx * m->rope.n_rot, &mw->rope_cs, err, errlen);
        free(cs);
        return r;
}

void m40_cuda_model_weights_free(struct m40_cuda_model_weights *mw)
{
        free(mw->layers);
        mw->layers = NULL;
}
