/* core.c - the engine core (see core.h): the engine interface over a backend's forward
 * pass and sampling, the limits' common defaults, admission with KV reservation, the
 * step and its statistics. */
#include "core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "m40/error.h"
#include "model.h"
#include "model/gguf.h"

static double now_s(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* kv_positions - the positions a reserved sequence of p may reach: its prompt and
 * max_tokens (0: the context), within max_ctx. */
static uint32_t kv_positions(const struct m40_core *c, const struct m40_seq_params *p)
{
        const uint64_t n =
                (uint64_t)p->n_prompt + (p->stop.max_tokens ? p->stop.max_tokens : c->lim.max_ctx);

        return n < c->lim.max_ctx ? (uint32_t)n : c->lim.max_ctx;
}

static uint32_t pages_of(const struct m40_core *c, uint32_t positions)
{
        return (uint32_t)(((uint64_t)positions + c->lim.page_tokens - 1) / c->lim.page_tokens);
}

static uint32_t core_kv_need(struct m40_engine *base, const struct m40_seq_params *p)
{
        const struct m40_core *c = (struct m40_core *)base;

        return pages_of(c, kv_positions(c, p));
}

static int core_admit(struct m40_engine *base, const struct m40_seq_params *p, uint32_t *ret_id)
{
        struct m40_core *c = (struct m40_core *)base;
        const uint32_t n_vocab = c->m->n_vocab;
        struct m40_seq *s;
        int r = m40_seq_check_params(p, n_vocab, &c->lim);

        if (r)
                return r;
        if (p->kv_reserve && pages_of(c, kv_positions(c, p)) >
                                     m40_kv_pages_total(c->pages) - m40_kv_pages_used(c->pages))
                return -ENOSPC;
        r = m40_seq_admit(c->seqs, &c->lim, n_vocab, p, &c->next_id, &c->next_order, &s);
        if (r)
                return r;
        if (p->kv_reserve) {
                r = m40_kv_table_reserve(c->pages, &s->kv, kv_positions(c, p));
                if (r) { /* -ENOMEM: the slot goes back unused, its id is spent */
                        m40_seq_finish(c->pages, s);
                        s->state = M40_SEQ_FREE;
                        return r;
                }
                s->kv_reserve = kv_positions(c, p);
        }
        if (c->be->admitted)
                c->be->admitted(c, s);
        *ret_id = s->id;
        return 0;
}

/* produce - emit the token that the backend produced for s, with any finish reason. */
static int produce(struct m40_core *c, struct m40_seq *s)
{
        const int32_t tok = c->tokens[s->row];
        uint32_t why;

        if (s->keep_logits) {
                memcpy(s->logits, c->logits + (size_t)s->row * c->m->n_vocab,
                       (size_t)c->m->n_vocab * sizeof(float));
                s->has_logits = true;
        }
        c->st.generated_tokens++;
        why = m40_seq_append(s, &c->lim, tok);
        if (why != M40_FINISH_NONE)
                m40_seq_finish(c->pages, s);
        return m40_seq_events_push(&c->evq, s, tok, why);
}

static int core_step(struct m40_engine *base)
{
        struct m40_core *c = (struct m40_core *)base;
        const double t0 = now_s();
        struct m40_plan_step ps;
        const uint32_t ready = m40_plan_ready(&c->plan);
        uint32_t active;
        int r;

        c->tick++;
        /* (the planner ignores the width in a step with prompt tokens) */
        c->plan.width = c->lim.width != M40_ENGINE_WIDTH_AUTO
                                ? c->lim.width
                                : m40_plan_width(&c->width, ready, c->tick);
        r = m40_plan_step(&c->plan, &ps);
        if (r)
                return r;
        if (ps.n_tokens)
                r = c->be->run(c, &ps);
        if (r) {
                m40_plan_undo(&c->plan); /* the step did not happen */
                return r;
        }
        c->plan.turn = ps.turn;
        if (ps.n_tokens && !ps.n_prompt && ps.n_decode == ps.n_tokens) {
                m40_width_record(&c->width, ps.n_decode, now_s() - t0, c->tick);
                c->st.decode_width = ps.n_decode;
                c->st.decode_running = ready;
        }
        c->st.prompt_tokens += ps.n_prompt;
        for (uint32_t i = 0; i < c->lim.max_seqs && !r; i++) {
                struct m40_seq *s = &c->seqs[i];

                if (s->state == M40_SEQ_ACTIVE && s->row >= 0)
                        r = produce(c, s);
        }
        active = m40_seq_count_active(c->seqs, c->lim.max_seqs);
        if (ps.n_tokens) {
                c->st.steps++;
                if (ps.n_rows)
                        c->st.decode_seconds += now_s() - t0;
                else
                        c->st.prompt_seconds += now_s() - t0;
        }
        return r ? r : (int)active;
}

static size_t core_events(struct m40_engine *base, struct m40_event *out, size_t max)
{
        struct m40_core *c = (struct m40_core *)base;

        return m40_seq_events_pop(&c->evq, out, max);
}

static int core_cancel(struct m40_engine *base, uint32_t id)
{
        struct m40_core *c = (struct m40_core *)base;

        return m40_seq_cancel(c->seqs, c->lim.max_seqs, c->pages, &c->evq, id);
}

/* core_hold - m40_engine_hold(); a reserved sequence gives back the pages past the
 * positions it has filled while held and takes them again on release. */
static int core_hold(struct m40_engine *base, uint32_t id, bool hold)
{
        struct m40_core *c = (struct m40_core *)base;
        struct m40_seq *s = m40_seq_find(c->seqs, c->lim.max_seqs, id, true);
        int r;

        if (!s)
                return -ENOENT;
        if (hold == s->held)
                return 0;
        if (s->kv_reserve && hold) {
                m40_kv_table_trim(c->pages, &s->kv, s->n_past);
        } else if (s->kv_reserve) {
                r = m40_kv_table_reserve(c->pages, &s->kv, s->kv_reserve);
                if (r)
                        return r;
        }
        return m40_seq_hold(c->seqs, c->lim.max_seqs, id, hold);
}

static int core_kv_pages(struct m40_engine *base, uint32_t id)
{
        struct m40_core *c = (struct m40_core *)base;
        const struct m40_seq *s = m40_seq_find(c->seqs, c->lim.max_seqs, id, true);

        return s ? (int)s->kv.n_pages : -ENOENT;
}

static int core_logits(struct m40_engine *base, uint32_t id, float *out, size_t n)
{
        struct m40_core *c = (struct m40_core *)base;

        return m40_seq_logits(c->seqs, c->lim.max_seqs, c->m->n_vocab, id, out, n);
}

static void core_stats(struct m40_engine *base, struct m40_engine_stats *ret)
{
        struct m40_core *c = (struct m40_core *)base;

        m40_seq_stats(&c->st, c->seqs, c->lim.max_seqs, c->pages, c->m->n_layers, c->m->kv_dim,
                      ret);
}

static void core_model(struct m40_engine *base, struct m40_engine_model *ret)
{
        const struct m40_model *m = ((struct m40_core *)base)->m;

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

static void core_destroy(struct m40_engine *base)
{
        struct m40_core *c = (struct m40_core *)base;

        m40_seq_slots_free(c->seqs, c->lim.max_seqs, c->pages);
        if (c->be && c->be->done)
                c->be->done(c);
        m40_kv_pages_free(c->pages);
        m40_model_free(c->m);
        free(c->batch);
        free(c->logits);
        free(c->tokens);
        free(c->width.t);
        free(c->width.at);
        m40_seq_events_done(&c->evq);
        free(c);
}

static const struct m40_engine_ops core_ops = {
        .admit = core_admit,
        .step = core_step,
        .events = core_events,
        .cancel = core_cancel,
        .hold = core_hold,
        .kv_need = core_kv_need,
        .kv_pages = core_kv_pages,
        .logits = core_logits,
        .stats = core_stats,
        .model = core_model,
        .destroy = core_destroy,
};

int m40_core_fail(struct m40_core *c, int r, char *err, size_t errlen)
{
        if (err && errlen && !err[0])
                snprintf(err, errlen, "%s: %s", c->path, m40_strerror(r));
        core_destroy(&c->base);
        return r;
}

/* fill_limits - resolve the defaults that every engine shares for model m. */
static void fill_limits(struct m40_engine_limits *lim, const struct m40_model *m, uint32_t act)
{
        if (!lim->max_seqs)
                lim->max_seqs = 16;
        if (!lim->max_ctx)
                lim->max_ctx = m->n_ctx_train && m->n_ctx_train < 4096 ? m->n_ctx_train : 4096;
        if (!lim->page_tokens)
                lim->page_tokens = 16;
        if (!lim->max_batch_tokens)
                lim->max_batch_tokens = 256;
        if (lim->act == M40_ACT_DEFAULT)
                lim->act = act;
}

/* core_open - m40_core_new() on the zeroed core c. */
static int core_open(struct m40_core *c, const struct m40_core_backend *be, struct m40_gguf *g,
                     const struct m40_engine_limits *lim, char *err, size_t errlen)
{
        const char *path = m40_gguf_path(g);
        int r;

        c->base.ops = &core_ops;
        c->be = be;
        c->path = path;
        if (lim)
                c->lim = *lim;
        if (c->lim.act > M40_ACT_GGML) {
                if (err)
                        snprintf(err, errlen, "unknown activation mode %u", c->lim.act);
                return -EINVAL;
        }
        if (c->lim.mode > M40_ENGINE_MODE_PERSISTENT) {
                if (err)
                        snprintf(err, errlen, "unknown engine mode %u", c->lim.mode);
                return -EINVAL;
        }
        if (be->act_f32_only && c->lim.act == M40_ACT_GGML) {
                if (err)
                        snprintf(err, errlen,
                                 "the %s engine computes with float32 activations only", be->name);
                return M40_EUNSUPPORTED;
        }
        r = be->map_weights ? m40_model_load(g,
                                             &(struct m40_model_progress){c->lim.load_progress,
                                                                          c->lim.load_ctx},
                                             &c->m, err, errlen)
                            : m40_model_open(g, &c->m, err, errlen);
        if (r)
                return r;
        fill_limits(&c->lim, c->m, be->act_default);
        r = m40_seq_limits_eog(&c->lim, c->m->n_vocab, c->m->eos_id, c->m->eot_id);
        if (r) {
                if (err)
                        snprintf(err, errlen, "%s: bad end-of-generation ids", path);
                return r;
        }
        c->page_bytes = 2ull * 2 * c->m->n_layers * c->lim.page_tokens * c->m->kv_dim;
        return 0;
}

int m40_core_new(size_t size, const struct m40_core_backend *be, struct m40_gguf *g,
                 const struct m40_engine_limits *lim, struct m40_core **ret, char *err,
                 size_t errlen)
{
        struct m40_core *c;
        int r;

        if (!g || size < sizeof(*c))
                return -EINVAL;
        if (err && errlen)
                err[0] = 0;
        c = calloc(1, size);
        if (!c)
                return -ENOMEM;
        r = core_open(c, be, g, lim, err, errlen);
        if (r) {
                core_destroy(&c->base);
                return r;
        }
        *ret = c;
        return 0;
}

int m40_core_kv_pages(const struct m40_core *c, const char *path, uint32_t *ret, char *err,
                      size_t errlen)
{
        const uint64_t n = c->lim.kv_bytes / c->page_bytes;

        if (c->lim.kv_bytes && (n == 0 || n > UINT32_MAX)) {
                if (err)
                        snprintf(err, errlen, "%s: KV memory of %llu bytes holds no page", path,
                                 (unsigned long long)c->lim.kv_bytes);
                return -EINVAL;
        }
        *ret = (uint32_t)n;
        return 0;
}

int m40_core_start(struct m40_core *c, uint32_t n_pages)
{
        const struct m40_engine_limits *lim = &c->lim;
        int r = m40_kv_pages_new(n_pages, lim->page_tokens, &c->pages);

        if (r)
                return r;
        c->lim.kv_bytes = (uint64_t)n_pages * c->page_bytes;
        c->seqs = calloc(lim->max_seqs, sizeof(*c->seqs));
        c->batch = calloc(lim->max_batch_tokens, sizeof(*c->batch));
        c->logits = malloc((size_t)lim->max_seqs * c->m->n_vocab * sizeof(float));
        c->tokens = calloc(lim->max_seqs, sizeof(*c->tokens));
        c->width.n = lim->max_seqs;
        c->width.t = calloc(lim->max_seqs + 1, sizeof(*c->width.t));
        c->width.at = calloc(lim->max_seqs + 1, sizeof(*c->width.at));
        if (!c->seqs || !c->batch || !c->logits || !c->tokens || !c->width.t || !c->width.at)
                return -ENOMEM;
        c->plan = (struct m40_plan){c->seqs, &c->lim, c->pages, &c->evq, c->batch, 0, 0};
        return 0;
}
