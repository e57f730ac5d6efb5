/* cpu_engine.c - the CPU reference engine behind the engine interface (see engine.h):
 * the engine core (core.h: admission, the step plan, stops, events, KV pages) over the
 * CPU's forward pass and sampling.
 *
 * Owns the backend's part: the forward pass of forward.c (its thread pool and f16 KV
 * storage), sampling with sampler.c on the host, and the limits' defaults of its own
 * (activation mode M40_ACT_GGML unless M40_ACT_F32 is asked for; a KV cache of at most
 * M40_CPU_ENGINE_KV_DEFAULT_MIB, bounded because host memory is shared with everything
 * else; n_threads the online CPUs; vram_limit_mb does not apply). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "engine.h"
#include "forward.h"
#include "m40/error.h"
#include "model.h"
#include "pool.h"
#include "sampler.h"

#define DEFAULT_KV_BYTES ((uint64_t)M40_CPU_ENGINE_KV_DEFAULT_MIB << 20)
/* Positions per sequence the CPU engine takes (its attention scratch is per context). */
#define MAX_CTX (1u << 24)

struct cpu_engine {
        struct m40_core core;
        struct m40_pool *pool;
        struct m40_fwd fwd;
        struct m40_sampler_scratch scratch;
};

/* cpu_run - the forward pass into the core's logits rows, then each row sampled from its
 * row on the host (m40_sampler_sample() reads the logits without changing them). */
static int cpu_run(struct m40_core *c, const struct m40_plan_step *ps)
{
        struct cpu_engine *e = (struct cpu_engine *)c;
        const uint32_t nv = c->m->n_vocab;

        m40_fwd_run(&e->fwd, c->batch, ps->n_tokens, c->logits);
        for (uint32_t i = 0; i < c->lim.max_seqs; i++) {
                struct m40_seq *s = &c->seqs[i];

                if (s->state == M40_SEQ_ACTIVE && s->row >= 0)
                        c->tokens[s->row] = m40_sampler_sample(&s->sampling, &s->rng,
                                                               c->logits + (size_t)s->row * nv,
                                                               s->toks, s->n_toks, &e->scratch);
        }
        return 0;
}

static void cpu_done(struct m40_core *c)
{
        struct cpu_engine *e = (struct cpu_engine *)c;

        m40_fwd_done(&e->fwd);
        m40_sampler_scratch_done(&e->scratch);
        m40_pool_free(e->pool);
}

static const struct m40_core_backend cpu_backend = {
        .name = "CPU",
        .act_default = M40_ACT_GGML,
        .act_f32_only = false,
        .map_weights = true,
        .run = cpu_run,
        .done = cpu_done,
};

/* fill_limits - resolve the CPU engine's own defaults of lim (the core did the rest):
 * n_threads, and kv_bytes within DEFAULT_KV_BYTES unless one sequence at max_ctx needs
 * more; page_bytes is one page's memory. */
static void fill_limits(struct m40_engine_limits *lim, uint64_t page_bytes)
{
        const uint64_t one =
                page_bytes * ((lim->max_ctx + lim->page_tokens - 1) / lim->page_tokens);
        const uint64_t full = one * lim->max_seqs;
        long ncpu;

        if (!lim->n_threads) {
                ncpu = sysconf(_SC_NPROCESSORS_ONLN);
                lim->n_threads = ncpu > 0 ? (uint32_t)ncpu : 1;
        }
        if (!lim->kv_bytes) {
                lim->kv_bytes = full < DEFAULT_KV_BYTES ? full : DEFAULT_KV_BYTES;
                if (lim->kv_bytes < one)
                        lim->kv_bytes = one;
        }
}

int m40_cpu_engine_new(struct m40_gguf *g, const struct m40_engine_limits *lim,
                       struct m40_engine **ret, char *err, size_t errlen)
{
        struct cpu_engine *e;
        struct m40_core *c;
        uint32_t n_pages = 0;
        int r;

        r = m40_core_new(sizeof(*e), &cpu_backend, g, lim, &c, err, errlen);
        if (r)
                return r;
        e = (struct cpu_engine *)c;
        fill_limits(&c->lim, c->page_bytes);
        r = m40_core_kv_pages(c, c->path, &n_pages, err, errlen);
        if (r)
                return m40_core_fail(c, r, err, errlen);
        if (c->lim.max_ctx > MAX_CTX) {
                if (err)
                        snprintf(err, errlen, "%s: max_ctx %u is above the CPU engine's %u",
                                 c->path, c->lim.max_ctx, MAX_CTX);
                return m40_core_fail(c, -EINVAL, err, errlen);
        }
        r = m40_pool_new(c->lim.n_threads, &e->pool);
        r = r ? r
              : m40_fwd_init(&e->fwd, c->m, e->pool, c->lim.max_batch_tokens, c->lim.max_ctx,
                             n_pages, c->lim.page_tokens, c->lim.act);
        r = r ? r : m40_sampler_scratch_init(&e->scratch, c->m->n_vocab);
        r = r ? r : m40_core_start(c, n_pages);
        if (r)
                return m40_core_fail(c, r, err, errlen);
        *ret = &c->base;
        return 0;
}
