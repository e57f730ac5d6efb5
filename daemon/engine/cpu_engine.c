/* cpu_engine.c - the CPU reference engine behind the engine interface (see engine.h).
 *
 * Owns the step (the plan of plan.c, shared with the CUDA engine: decode tokens first,
 * then prompt chunks, all in one forward pass; held sequences sit out), the statistics
 * counters and the resolution of the limits' defaults (activation mode M40_ACT_GGML unless
 * M40_ACT_F32 is asked for; a KV cache of at most M40_CPU_ENGINE_KV_DEFAULT_MIB, bounded
 * because host memory is shared with everything else; vram_limit_mb does not apply).
 * The sequence slots, admission, stop conditions and the event queue are in seqs.c, the
 * math in forward.c, the KV page accounting in kv.c, sampling in sampler.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "forward.h"
#include "kv.h"
#include "m40/error.h"
#include "model.h"
#include "plan.h"
#include "pool.h"
#include "sampler.h"
#include "seqs.h"

#define DEFAULT_KV_BYTES ((uint64_t)M40_CPU_ENGINE_KV_DEFAULT_MIB << 20)

struct cpu_engine {
        struct m40_engine base;
        struct m40_model *m;
        struct m40_pool *pool;
        struct m40_kv_pages *pages;
        struct m40_fwd fwd;
        struct m40_engine_limits lim;
        struct m40_seq *seqs;      /* (max_seqs) */
        struct m40_fwd_tok *batch; /* (max_batch_tokens) */
        float *logits;             /* (max_seqs, n_vocab) */
        struct m40_sampler_scratch scratch;
        struct m40_seq_events evq;
        struct m40_plan plan; /* over seqs, lim, pages, evq and batch */
        uint32_t next_id;
        uint64_t next_order;
        struct m40_engine_stats st;
};

static double now_s(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cpu_admit(struct m40_engine *base, const struct m40_seq_params *p, uint32_t *ret_id)
{
        struct cpu_engine *e = (struct cpu_engine *)base;
        struct m40_seq *s;
        int r = m40_seq_admit(e->seqs, &e->lim, e->m->n_vocab, p, &e->next_id, &e->next_order, &s);

        if (r)
                return r;
        *ret_id = s->id;
        return 0;
}

/* produce - sample s's next token from its logits row; emit it with any finish reason. */
static int produce(struct cpu_engine *e, struct m40_seq *s)
{
        const float *lg = e->logits + (size_t)s->row * e->m->n_vocab;
        int32_t tok;
        uint32_t why = M40_FINISH_NONE;

        if (s->keep_logits) {
                memcpy(s->logits, lg, (size_t)e->m->n_vocab * sizeof(float));
                s->has_logits = true;
        }
        tok = m40_sampler_sample(&s->sampling, &s->rng, lg, s->toks, s->n_toks, &e->scratch);
        e->st.generated_tokens++;
        why = m40_seq_append(s, &e->lim, tok);
        if (why != M40_FINISH_NONE)
                m40_seq_finish(e->pages, s);
        return m40_seq_events_push(&e->evq, s, tok, why);
}

static int cpu_step(struct m40_engine *base)
{
        struct cpu_engine *e = (struct cpu_engine *)base;
        const double t0 = now_s();
        struct m40_plan_step ps;
        uint32_t active = 0;
        int r = m40_plan_step(&e->plan, &ps);

        if (r)
                return r;
        e->st.prompt_tokens += ps.n_prompt;
        if (ps.n_tokens)
                m40_fwd_run(&e->fwd, e->batch, ps.n_tokens, e->logits);
        for (uint32_t i = 0; i < e->lim.max_seqs && !r; i++) {
                struct m40_seq *s = &e->seqs[i];

                if (s->state == M40_SEQ_ACTIVE && s->row >= 0)
                        r = produce(e, s);
        }
        active = m40_seq_count_active(e->seqs, e->lim.max_seqs);
        if (ps.n_tokens) {
                e->st.steps++;
                if (ps.n_rows)
                        e->st.decode_seconds += now_s() - t0;
                else
                        e->st.prompt_seconds += now_s() - t0;
        }
        return r ? r : (int)active;
}

static size_t cpu_events(struct m40_engine *base, struct m40_event *out, size_t max)
{
        struct cpu_engine *e = (struct cpu_engine *)base;

        return m40_seq_events_pop(&e->evq, out, max);
}

static int cpu_cancel(struct m40_engine *base, uint32_t id)
{
        struct cpu_engine *e = (struct cpu_engine *)base;

        return m40_seq_cancel(e->seqs, e->lim.max_seqs, e->pages, &e->evq, id);
}

static int cpu_hold(struct m40_engine *base, uint32_t id, bool hold)
{
        struct cpu_engine *e = (struct cpu_engine *)base;

        return m40_seq_hold(e->seqs, e->lim.max_seqs, id, hold);
}

static int cpu_logits(struct m40_engine *base, uint32_t id, float *out, size_t n)
{
        struct cpu_engine *e = (struct cpu_engine *)base;

        return m40_seq_logits(e->seqs, e->lim.max_seqs, e->m->n_vocab, id, out, n);
}

static void cpu_stats(struct m40_engine *base, struct m40_engine_stats *ret)
{
        struct cpu_engine *e = (struct cpu_engine *)base;

        m40_seq_stats(&e->st, e->seqs, e->lim.max_seqs, e->pages, e->m->n_layers, e->m->kv_dim,
                      ret);
}

static void cpu_model(struct m40_engine *base, struct m40_engine_model *ret)
{
        struct cpu_engine *e = (struct cpu_engine *)base;
        const struct m40_model *m = e->m;

        *ret = (struct m40_engine_model){
                .arch = m->arch == M40_ARCH_QWEN2 ? "qwen2" : "llama",
                .n_vocab = m->n_vocab,
                .n_ctx_train = m->n_ctx_train,
                .n_layers = m->n_layers,
                .dim = m->dim,
                .bos_id = m->bos_id,
                .eos_id = m->eos_id,
                .eot_id = m->eot_id,
                .weight_bytes = m->weight_bytes,
        };
}

static void cpu_destroy(struct m40_engine *base)
{
        struct cpu_engine *e = (struct cpu_engine *)base;

        m40_seq_slots_free(e->seqs, e->lim.max_seqs, e->pages);
        m40_fwd_done(&e->fwd);
        m40_sampler_scratch_done(&e->scratch);
        m40_kv_pages_free(e->pages);
        m40_pool_free(e->pool);
        m40_model_free(e->m);
        free(e->batch);
        free(e->logits);
        m40_seq_events_done(&e->evq);
        free(e);
}

static const struct m40_engine_ops cpu_ops = {
        .name = "cpu",
        .admit = cpu_admit,
        .step = cpu_step,
        .events = cpu_events,
        .cancel = cpu_cancel,
        .hold = cpu_hold,
        .logits = cpu_logits,
        .stats = cpu_stats,
        .model = cpu_model,
        .destroy = cpu_destroy,
};

/* fill_limits - resolve the defaults of lim for model m. */
static void fill_limits(struct m40_engine_limits *lim, const struct m40_model *m)
{
        uint64_t page_bytes, full;
        long ncpu;

        if (!lim->max_seqs)
                lim->max_seqs = 16;
        if (!lim->max_ctx)
                lim->max_ctx = m->n_ctx_train && m->n_ctx_train < 4096 ? m->n_ctx_train : 4096;
        if (!lim->page_tokens)
                lim->page_tokens = 16;
        if (!lim->max_batch_tokens)
                lim->max_batch_tokens = 256;
        if (lim->act == M40_ACT_DEFAULT)
                lim->act = M40_ACT_GGML;
        if (!lim->n_threads) {
                ncpu = sysconf(_SC_NPROCESSORS_ONLN);
                lim->n_threads = ncpu > 0 ? (uint32_t)ncpu : 1;
        }
        page_bytes = 2ull * 2 * m->n_layers * lim->page_tokens * m->kv_dim;
        full = page_bytes * lim->max_seqs *
               ((lim->max_ctx + lim->page_tokens - 1) / lim->page_tokens);
        if (!lim->kv_bytes) {
                lim->kv_bytes = full < DEFAULT_KV_BYTES ? full : DEFAULT_KV_BYTES;
                if (lim->kv_bytes <
                    page_bytes * ((lim->max_ctx + lim->page_tokens - 1) / lim->page_tokens))
                        lim->kv_bytes = page_bytes *
                                        ((lim->max_ctx + lim->page_tokens - 1) / lim->page_tokens);
        }
}

int m40_cpu_engine_new(struct m40_gguf *g, const struct m40_engine_limits *lim,
                       struct m40_engine **ret, char *err, size_t errlen)
{
        struct cpu_engine *e;
        uint64_t page_bytes, n_pages;
        const char *path;
        int r;

        if (!g)
                return -EINVAL;
        path = m40_gguf_path(g);
        e = calloc(1, sizeof(*e));
        if (!e)
                return -ENOMEM;
        e->base.ops = &cpu_ops;
        if (lim)
                e->lim = *lim;
        r = -EINVAL;
        if (e->lim.act > M40_ACT_GGML) {
                if (err)
                        snprintf(err, errlen, "unknown activation mode %u", e->lim.act);
                goto out_free;
        }
        r = m40_model_load(g, &(struct m40_model_progress){e->lim.load_progress, e->lim.load_ctx},
                           &e->m, err, errlen);
        if (r)
                goto out_free;
        fill_limits(&e->lim, e->m);
        r = m40_seq_limits_eog(&e->lim, e->m->n_vocab, e->m->eos_id, e->m->eot_id);
        if (r) {
                if (err)
                        snprintf(err, errlen, "%s: bad end-of-generation ids", path);
                goto out_free;
        }
        page_bytes = 2ull * 2 * e->m->n_layers * e->lim.page_tokens * e->m->kv_dim;
        n_pages = e->lim.kv_bytes / page_bytes;
        r = -EINVAL;
        if (n_pages == 0 || n_pages > UINT32_MAX || e->lim.max_ctx > (1u << 24)) {
                if (err)
                        snprintf(err, errlen, "%s: KV memory of %llu bytes holds no page", path,
                                 (unsigned long long)e->lim.kv_bytes);
                goto out_free;
        }
        r = m40_pool_new(e->lim.n_threads, &e->pool);
        r = r ? r : m40_kv_pages_new((uint32_t)n_pages, e->lim.page_tokens, &e->pages);
        r = r ? r
              : m40_fwd_init(&e->fwd, e->m, e->pool, e->lim.max_batch_tokens, e->lim.max_ctx,
                             (uint32_t)n_pages, e->lim.page_tokens, e->lim.act);
        r = r ? r : m40_sampler_scratch_init(&e->scratch, e->m->n_vocab);
        if (r)
                goto out_err;
        e->seqs = calloc(e->lim.max_seqs, sizeof(*e->seqs));
        e->batch = calloc(e->lim.max_batch_tokens, sizeof(*e->batch));
        e->logits = malloc((size_t)e->lim.max_seqs * e->m->n_vocab * sizeof(float));
        if (!e->seqs || !e->batch || !e->logits) {
                r = -ENOMEM;
                goto out_err;
        }
        e->plan = (struct m40_plan){e->seqs, &e->lim, e->pages, &e->evq, e->batch};
        *ret = &e->base;
        return 0;
out_err:
        if (err)
                snprintf(err, errlen, "%s: %s", path, m40_strerror(r));
out_free:
        cpu_destroy(&e->base);
        return r;
}
