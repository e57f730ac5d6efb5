/* forward.c - the llama/qwen2 layer stack on the CPU (see forward.h).
 *
 * Per layer, for T tokens of width dim:
 *   xn = rmsnorm(x) * attn_norm;  q,k,v = xn Wq,Wk,Wv (+ bias);  rope(q, k)
 *   store k,v (f16) at each token's page slot;  att = softmax(q K^T / sqrt(hd)) V per head
 *   x += att Wo;  xn = rmsnorm(x) * ffn_norm;  x += (silu(xn Wg) * (xn Wu)) Wd
 * then logits = rmsnorm(x) * output_norm Wout for the tokens that ask for them.
 * In M40_ACT_GGML mode the products convert their activations (matmul.h), and RoPE,
 * SwiGLU and attention are ggml's (ops_ggml.c: its fused products, q and the softmax
 * weights rounded to f16, its exp and summation orders); RMSNorm, the residual adds and
 * the embedding lookup are the same in both modes (they already are ggml's, bit for bit). */
#include "forward.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "actq.h"
#include "engine.h"
#include "matmul.h"
#include "ops.h"
#include "quant.h"

static void *alloc_f(size_t n)
{
        return aligned_alloc(64, (n * sizeof(float) + 63) & ~(size_t)63);
}

static size_t max_size(size_t a, size_t b)
{
        return a > b ? a : b;
}

/* act_bytes - the widest converted activation row of any of m's products. */
static size_t act_bytes(const struct m40_model *m)
{
        size_t b = m40_act_row_bytes(m->output.type, m->output.n_in);

        for (uint32_t i = 0; i < m->n_layers; i++) {
                const struct m40_layer *l = &m->layers[i];
                const struct m40_weight *ws[] = {&l->wq,     &l->wk,   &l->wv,    &l->wo,
                                                 &l->w_gate, &l->w_up, &l->w_down};

                for (size_t j = 0; j < sizeof(ws) / sizeof(ws[0]); j++)
                        b = max_size(b, m40_act_row_bytes(ws[j]->type, ws[j]->n_in));
        }
        return b;
}

int m40_fwd_init(struct m40_fwd *f, const struct m40_model *m, struct m40_pool *pool,
                 uint32_t max_tokens, uint32_t max_ctx, uint32_t n_pages, uint32_t page_tokens,
                 uint32_t act)
{
        const size_t T = max_tokens;
        const size_t cache = (size_t)n_pages * m->n_layers * page_tokens * m->kv_dim;

        memset(f, 0, sizeof(*f));
        f->m = m;
        f->pool = pool;
        f->max_tokens = max_tokens;
        f->max_ctx = max_ctx;
        f->n_pages = n_pages;
        f->page_tokens = page_tokens;
        f->page_stride = (size_t)m->n_layers * page_tokens * m->kv_dim;
        f->k_cache = calloc(cache, sizeof(uint16_t));
        f->v_cache = calloc(cache, sizeof(uint16_t));
        f->x = alloc_f(T * m->dim);
        f->xn = alloc_f(T * m->dim);
        f->tmp = alloc_f(T * m->dim);
        f->q = alloc_f(T * m->q_dim);
        f->att = alloc_f(T * m->q_dim);
        f->k = alloc_f(T * m->kv_dim);
        f->v = alloc_f(T * m->kv_dim);
        f->gate = alloc_f(T * m->n_ff);
        f->up = alloc_f(T * m->n_ff);
        f->score_stride = max_ctx + (act == M40_ACT_GGML ? 66 * (size_t)m->head_dim : 0);
        f->scores = alloc_f((size_t)m40_pool_size(pool) * f->score_stride);
        f->act = act;
        if (act == M40_ACT_GGML) {
                const size_t xq = max_size(act_bytes(m) * T, 64);

                f->xq = aligned_alloc(64, (xq + 63) & ~(size_t)63);
                if (!f->xq)
                        return -ENOMEM;
        }
        if (!f->k_cache || !f->v_cache || !f->x || !f->xn || !f->tmp || !f->q || !f->att || !f->k ||
            !f->v || !f->gate || !f->up || !f->scores)
                return -ENOMEM;
        return 0;
}

void m40_fwd_done(struct m40_fwd *f)
{
        free(f->k_cache);
        free(f->v_cache);
        free(f->x);
        free(f->xn);
        free(f->tmp);
        free(f->q);
        free(f->att);
        free(f->k);
        free(f->v);
        free(f->gate);
        free(f->up);
        free(f->scores);
        free(f->xq);
        memset(f, 0, sizeof(*f));
}

static void add_bias(float *y, const float *b, uint32_t n_tok, uint32_t width)
{
        if (!b)
                return;
        for (uint32_t t = 0; t < n_tok; t++)
                for (uint32_t i = 0; i < width; i++)
                        y[(size_t)t * width + i] += b[i];
}

/* rope_store - rope q and k of every token, then write k and v into the cache. */
static void rope_store(struct m40_fwd *f)
{
        const struct m40_model *m = f->m;

        for (uint32_t t = 0; t < f->n_toks; t++) {
                const struct m40_fwd_tok *tk = &f->toks[t];
                float *q = f->q + (size_t)t * m->q_dim;
                float *k = f->k + (size_t)t * m->kv_dim;
                const float *v = f->v + (size_t)t * m->kv_dim;
                const size_t off =
                        (size_t)tk->kv->pages[tk->pos / f->page_tokens] * f->page_stride +
                        ((size_t)f->layer * f->page_tokens + tk->pos % f->page_tokens) * m->kv_dim;

                if (f->act == M40_ACT_GGML) {
                        m40_cpu_rope_ggml(&m->rope, q, m->n_heads, m->head_dim, (int32_t)tk->pos);
                        m40_cpu_rope_ggml(&m->rope, k, m->n_kv_heads, m->head_dim,
                                          (int32_t)tk->pos);
                } else {
                        m40_cpu_rope(&m->rope, q, m->n_heads, m->head_dim, (int32_t)tk->pos);
                        m40_cpu_rope(&m->rope, k, m->n_kv_heads, m->head_dim, (int32_t)tk->pos);
                }
                for (uint32_t i = 0; i < m->kv_dim; i++) {
                        f->k_cache[off + i] = m40_cpu_f32_to_f16(k[i]);
                        f->v_cache[off + i] = m40_cpu_f32_to_f16(v[i]);
                }
        }
}

static void attention_thread(void *ctx, unsigned ith, unsigned nth)
{
        struct m40_fwd *f = ctx;
        const struct m40_model *m = f->m;
        const uint32_t n_items = f->n_toks * m->n_heads;
        const uint32_t group = m->n_heads / m->n_kv_heads;
        const float scale = 1.0f / sqrtf((float)m->head_dim);
        float *scores = f->scores + (size_t)ith * f->score_stride;

        for (uint32_t it = ith; it < n_items; it += nth) {
                const uint32_t t = it / m->n_heads, h = it % m->n_heads;
                const struct m40_fwd_tok *tk = &f->toks[t];
                const struct m40_kv_view kv = {
                        .k_base = f->k_cache + (size_t)f->layer * f->page_tokens * m->kv_dim,
                        .v_base = f->v_cache + (size_t)f->layer * f->page_tokens * m->kv_dim,
                        .page_stride = f->page_stride,
                        .kv_stride = m->kv_dim,
                        .page_tokens = f->page_tokens,
                        .table = tk->kv->pages,
                };

                const float *q = f->q + (size_t)t * m->q_dim + (size_t)h * m->head_dim;
                float *out = f->att + (size_t)t * m->q_dim + (size_t)h * m->head_dim;

                if (f->act == M40_ACT_GGML)
                        m40_cpu_attention_head_ggml(&kv, q, h / group, m->head_dim, tk->pos, scale,
                                                    scores, out);
                else
                        m40_cpu_attention_head(&kv, q, h / group, m->head_dim, tk->pos, scale,
                                               scores, out);
        }
}

static void norm_all(const float *x, const float *w, uint32_t n_tok, uint32_t dim, float eps,
                     float *y)
{
        for (uint32_t t = 0; t < n_tok; t++)
                m40_cpu_rmsnorm(x + (size_t)t * dim, w, dim, eps, y + (size_t)t * dim);
}

static void add_to(float *x, const float *y, size_t n)
{
        for (size_t i = 0; i < n; i++)
                x[i] += y[i];
}

/* mm - y (n, w->n_out) = x (n, w->n_in) W^T in the engine's activation mode. */
static void mm(struct m40_fwd *f, const struct m40_weight *w, const float *x, uint32_t n, float *y)
{
        if (f->act == M40_ACT_GGML)
                m40_cpu_matmul_ggml(f->pool, w, x, n, y, f->xq);
        else
                m40_cpu_matmul(f->pool, w, x, n, y);
}

static void layer(struct m40_fwd *f, const struct m40_layer *l)
{
        const struct m40_model *m = f->m;
        const uint32_t T = f->n_toks;

        norm_all(f->x, l->attn_norm, T, m->dim, m->rms_eps, f->xn);
        mm(f, &l->wq, f->xn, T, f->q);
        mm(f, &l->wk, f->xn, T, f->k);
        mm(f, &l->wv, f->xn, T, f->v);
        add_bias(f->q, l->bq, T, m->q_dim);
        add_bias(f->k, l->bk, T, m->kv_dim);
        add_bias(f->v, l->bv, T, m->kv_dim);
        rope_store(f);
        m40_pool_run(f->pool, attention_thread, f);
        mm(f, &l->wo, f->att, T, f->tmp);
        add_to(f->x, f->tmp, (size_t)T * m->dim);

        norm_all(f->x, l->ffn_norm, T, m->dim, m->rms_eps, f->xn);
        mm(f, &l->w_gate, f->xn, T, f->gate);
        mm(f, &l->w_up, f->xn, T, f->up);
        if (f->act == M40_ACT_GGML)
                m40_cpu_swiglu_ggml(f->gate, f->up, T, m->n_ff);
        else
                m40_cpu_swiglu(f->gate, f->up, (size_t)T * m->n_ff);
        mm(f, &l->w_down, f->gate, T, f->tmp);
        add_to(f->x, f->tmp, (size_t)T * m->dim);
}

void m40_fwd_run(struct m40_fwd *f, const struct m40_fwd_tok *toks, uint32_t n, float *logits)
{
        const struct m40_model *m = f->m;
        uint32_t n_out = 0;
        int32_t max_row = -1;

        f->toks = toks;
        f->n_toks = n;
        for (uint32_t t = 0; t < n; t++)
                m40_model_embed(m, toks[t].token, f->x + (size_t)t * m->dim);
        for (f->layer = 0; f->layer < m->n_layers; f->layer++)
                layer(f, &m->layers[f->layer]);

        /* gather the tokens that want logits, in logit_row order, into xn */
        for (uint32_t t = 0; t < n; t++)
                if (toks[t].logit_row > max_row)
                        max_row = toks[t].logit_row;
        for (int32_t r = 0; r <= max_row; r++)
                for (uint32_t t = 0; t < n; t++)
                        if (toks[t].logit_row == r) {
                                m40_cpu_rmsnorm(f->x + (size_t)t * m->dim, m->output_norm, m->dim,
                                                m->rms_eps, f->xn + (size_t)r * m->dim);
                                n_out = (uint32_t)r + 1;
                        }
        if (n_out)
                mm(f, &m->output, f->xn, n_out, logits);
}
