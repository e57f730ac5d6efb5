/* tests/gpu/testkv.h - what test_ops (rope_store) and test_attention share: the seeded
 * random source of a run, device copies and poison, and a paged f16 KV cache with steps
 * of tokens over it (scrambled block tables, as the engine's pool hands pages out).
 *
 * Header-only (static functions); a program includes it once, after gputest.h. */
#ifndef M40_TESTS_TESTKV_H
#define M40_TESTS_TESTKV_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda/kernels/ops.h"
#include "engine/quant.h"
#include "gputest.h"
#include "m40/error.h"

static uint64_t seed; /* the run's seed (printed, repeatable) */
static int quick;     /* quick_mode() */

static inline uint32_t rnd(uint32_t n) /* uniform in [0, n) */
{
        return (uint32_t)(rng_next(&seed) % n);
}

static inline int is_poison(float v)
{
        uint32_t u;

        memcpy(&u, &v, 4);
        return u == 0xffffffffu;
}

static inline int launched(int r, const char *what)
{
        if (r)
                fail("%s: launcher returned %d (%s) %s", what, r, m40_strerror(r),
                     m40_cuda_last_error());
        return r;
}

static inline float *host_poison(size_t n)
{
        float *p = malloc(n * sizeof(float) + 1);

        if (p)
                memset(p, 0xff, n * sizeof(float));
        return p;
}

/* ---- the paged KV cache ---- */

struct cache {
        uint32_t n_layers, page_tokens, kv_dim, n_pages, layer;
        size_t page_elems, v_off, elems;
        uint16_t *h; /* host copy */
        uint16_t *d;
};

static inline int cache_make(struct cache *c, uint32_t n_layers, uint32_t page_tokens,
                             uint32_t kv_dim, uint32_t n_pages, int poison)
{
        memset(c, 0, sizeof(*c));
        c->n_layers = n_layers;
        c->page_tokens = page_tokens;
        c->kv_dim = kv_dim;
        c->n_pages = n_pages;
        c->layer = rnd(n_layers);
        c->v_off = (size_t)n_layers * page_tokens * kv_dim;
        c->page_elems = 2 * c->v_off;
        c->elems = c->page_elems * n_pages;
        c->h = malloc(c->elems * 2);
        if (!c->h) {
                fail("out of host memory for a KV cache of %zu elements", c->elems);
                return -1;
        }
        for (size_t i = 0; i < c->elems; i++)
                c->h[i] = poison ? 0xffff : m40_cpu_f32_to_f16(rng_normal(&seed));
        c->d = dput(c->h, c->elems * 2);
        return c->d ? 0 : -1;
}

static inline void cache_free(struct cache *c)
{
        free(c->h);
        cudaFree(c->d);
}

/* A random permutation of 0..n-1 (the pool's pages handed out in scrambled order). */
static inline uint32_t *perm(uint32_t n)
{
        uint32_t *p = malloc(sizeof(uint32_t) * (n ? n : 1));

        if (!p)
                return NULL;
        for (uint32_t i = 0; i < n; i++)
                p[i] = i;
        for (uint32_t i = n; i > 1; i--) {
                const uint32_t j = rnd(i), t = p[i - 1];

                p[i - 1] = p[j];
                p[j] = t;
        }
        return p;
}

/* The tokens of one step: n_tok tokens of n_seq sequences; each sequence has its block
 * table (scrambled pages) in `pages` at tbl_of[s]; token t is of sequence seq[t] at
 * position pos[t]. */
struct step {
        uint32_t n_tok, n_seq, n_tbl, max_pos;
        uint32_t *pos, *tbl, *seq, *pages, *tbl_of;
        uint32_t *dpos, *dtbl, *dpages;
};

static inline void step_free(struct step *s)
{
        free(s->pos);
        free(s->tbl);
        free(s->seq);
        free(s->pages);
        free(s->tbl_of);
        cudaFree(s->dpos);
        cudaFree(s->dtbl);
        cudaFree(s->dpages);
        memset(s, 0, sizeof(*s));
}

/* step_make - decode (prefill 0): one token per sequence at a random position below
 * ctx[s]; prefill: sequence s's tokens are the last n_new[s] positions ctx[s] - n_new..
 * ctx[s] - 1, in order (causal). The sequences' pages are a scrambled slice of the pool.
 * Returns 0, or -1 when the pool is too small. */
static inline int step_make(struct step *s, const struct cache *c, uint32_t n_seq,
                            const uint32_t *ctx, const uint32_t *n_new)
{
        uint32_t *pool = perm(c->n_pages), used = 0, t = 0;
        int r = -1;

        memset(s, 0, sizeof(*s));
        s->n_seq = n_seq;
        for (uint32_t q = 0; q < n_seq; q++) {
                s->n_tok += n_new[q];
                s->n_tbl += (ctx[q] + c->page_tokens - 1) / c->page_tokens;
        }
        s->pos = malloc(sizeof(uint32_t) * s->n_tok);
        s->tbl = malloc(sizeof(uint32_t) * s->n_tok);
        s->seq = malloc(sizeof(uint32_t) * s->n_tok);
        s->pages = malloc(sizeof(uint32_t) * s->n_tbl);
        s->tbl_of = malloc(sizeof(uint32_t) * n_seq);
        if (!pool || !s->pos || !s->tbl || !s->seq || !s->pages || !s->tbl_of ||
            s->n_tbl > c->n_pages)
                goto out;
        for (uint32_t q = 0; q < n_seq; q++) {
                const uint32_t np = (ctx[q] + c->page_tokens - 1) / c->page_tokens;

                s->tbl_of[q] = used;
                memcpy(s->pages + used, pool + used, np * sizeof(uint32_t));
                used += np;
                for (uint32_t k = 0; k < n_new[q]; k++, t++) {
                        s->seq[t] = q;
                        s->tbl[t] = s->tbl_of[q];
                        s->pos[t] = ctx[q] - n_new[q] + k;
                        if (s->pos[t] > s->max_pos)
                                s->max_pos = s->pos[t];
                }
        }
        s->dpos = dput(s->pos, sizeof(uint32_t) * s->n_tok);
        s->dtbl = dput(s->tbl, sizeof(uint32_t) * s->n_tok);
        s->dpages = dput(s->pages, sizeof(uint32_t) * s->n_tbl);
        r = s->dpos && s->dtbl && s->dpages ? 0 : -1;
out:
        free(pool);
        if (r)
                fail("step set-up (%u pages needed, %u in the pool)", s->n_tbl, c->n_pages);
        return r;
}

static inline struct m40_cuda_kv kv_of(const struct cache *c, const struct step *s)
{
        return (struct m40_cuda_kv){
                .base = c->d,
                .page_elems = c->page_elems,
                .v_off = c->v_off,
                .layer = c->layer,
                .page_tokens = c->page_tokens,
                .kv_dim = c->kv_dim,
                .pos = s->dpos,
                .tbl = s->dtbl,
                .pages = s->dpages,
        };
}

/* slot - element offset of position p's K in the layer of c for a sequence's table. */
static inline size_t slot(const struct cache *c, const uint32_t *table, uint32_t p)
{
        return (size_t)table[p / c->page_tokens] * c->page_elems +
               ((size_t)c->layer * c->page_tokens + p % c->page_tokens) * c->kv_dim;
}

#endif
