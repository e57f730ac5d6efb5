/* forward.h - one transformer forward pass over a batch of tokens from many sequences.
 *
 * Owns the CPU engine's KV storage (f16, paged: page i holds page_tokens positions of
 * every layer's K and V) and the scratch activations for up to max_tokens tokens. Each
 * token carries its position and its sequence's block table; tokens of one sequence must
 * appear in position order, and the table must already hold pages for their positions.
 * A token's results depend only on its own sequence, never on the rest of the batch. */
#ifndef M40_ENGINE_FORWARD_H
#define M40_ENGINE_FORWARD_H

#include <stdint.h>

#include "kv.h"
#include "model.h"
#include "pool.h"
#include "types.h"

struct m40_fwd {
        const struct m40_model *m;
        struct m40_pool *pool;
        uint32_t max_tokens, max_ctx, n_pages, page_tokens;
        uint16_t *k_cache, *v_cache; /* (n_pages, n_layers, page_tokens, kv_dim) f16 */
        size_t page_stride;          /* n_layers * page_tokens * kv_dim */
        float *x, *xn, *q, *k, *v, *att, *gate, *up, *tmp; /* (max_tokens, width) each */
        float *scores;       /* (threads, score_stride): attention scratch */
        size_t score_stride; /* max_ctx, plus 66 * head_dim in ggml mode */
        uint32_t act;        /* enum m40_act: M40_ACT_F32 or M40_ACT_GGML */
        void *xq;            /* ggml mode: converted activations, (max_tokens, widest row) */
        /* set per run for the worker threads */
        const struct m40_fwd_tok *toks;
        uint32_t n_toks, layer;
};

/* m40_fwd_init - scratch for max_tokens tokens of max_ctx positions and n_pages KV pages,
 * computing in activation mode act (M40_ACT_F32 or M40_ACT_GGML, engine.h). Returns 0 or
 * -ENOMEM (then call m40_fwd_done()). */
int m40_fwd_init(struct m40_fwd *f, const struct m40_model *m, struct m40_pool *pool,
                 uint32_t max_tokens, uint32_t max_ctx, uint32_t n_pages, uint32_t page_tokens,
                 uint32_t act);
void m40_fwd_done(struct m40_fwd *f);

/* m40_fwd_run - run n (<= max_tokens) tokens through the model, writing their K/V into the
 * cache; for every token with logit_row >= 0, logits row logit_row (n_vocab floats) of
 * logits is filled. */
void m40_fwd_run(struct m40_fwd *f, const struct m40_fwd_tok *toks, uint32_t n, float *logits);

#endif
