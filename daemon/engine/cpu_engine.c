/* cpu_engine.c - the CPU reference engine behind the engine interface (see engine.h).
 *
 * Owns the sequence slots, the step scheduler (decode tokens first, then prompt chunks up
 * to max_batch_tokens, all in one forward pass), the event queue, stop conditions,
 * statistics and the resolution of the limits' defaults (activation mode M40_ACT_GGML
 * unless M40_ACT_F32 is asked for). The math is in forward.c, the KV page accounting in
 * kv.c, sampling in sampler.c. */
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
#include "pool.h"
#include "sampler.h"

#define DEFAULT_KV_BYTES (512ull << 20)
#define TAIL_MAX         (2 * M40_MAX_STOP_LEN + 256)

enum seq_state { SEQ_FREE = 0, SEQ_ACTIVE, SEQ_DONE };

struct seq {
        uint32_t id;
        enum seq_state state;
        uint64_t order; /* admission order: prompts prefill first come first */
        int32_t *toks;  /* prompt then generated, (cap) */
        uint32_t n_toks, cap, n_prompt, n_past, n_gen;
        struct m40_kv_table kv;
        struct m40_sampling sampling;
        struct m40_stop stop;
        uint64_t rng;
        bool keep_logits, has_logits;
        float *logits;       /* (n_vocab) when keep_logits */
        char tail[TAIL_MAX]; /* recent detokenized text, for stop strings */
        size_t tail_len;
        int32_t row; /* logits row in the current step, or -1 */
};

struct cpu_engine {
        struct m40_engine base;
        struct m40_model *m;
        struct m40_pool *pool;
        struct m40_kv_pages *pages;
        struct m40_fwd fwd;
        struct m40_engine_limits lim;
        struct seq *seqs;          /* (max_seqs) */
        struct m40_fwd_tok *batch; /* (max_batch_tokens) */
        float *logits;             /* (max_seqs, n_vocab) */
        struct m40_sampler_scratch scratch;
        struct m40_event *ev; /* queue: ev[ev_head, ev_tail) */
        size_t ev_head, ev_tail, ev_cap;
        uint32_t next_id;
        uint64_t next_order;
        struct m40_engine_stats st;
};

static inline uint32_t min_u32(uint32_t a, uint32_t b)
{
        return a < b ? a : b;
}

static double now_s(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int push_event(struct cpu_engine *e, const struct seq *s, int32_t token, uint32_t finish)
{
        if (e->ev_tail == e->ev_cap) {
                if (e->ev_head) {
                        memmove(e->ev, e->ev + e->ev_head,
                                (e->ev_tail - e->ev_head) * sizeof(*e->ev));
                        e->ev_tail -= e->ev_head;
                        e->ev_head = 0;
                }
                if (e->ev_tail == e->ev_cap) {
                        size_t cap = e->ev_cap ? e->ev_cap * 2 : 64;
                        struct m40_event *n = realloc(e->ev, cap * sizeof(*n));

                        if (!n)
                                return -ENOMEM;
                        e->ev = n;
                        e->ev_cap = cap;
                }
        }
        e->ev[e->ev_tail++] = (struct m40_event){
                .seq = s->id,
                .token = token,
                .finish = finish,
                .n_prompt = s->n_prompt,
                .n_generated = s->n_gen,
        };
        return 0;
}

/* finish - end s: return its pages; the slot keeps its logits until reused. */
static void finish(struct cpu_engine *e, struct seq *s)
{
        m40_kv_table_release(e->pages, &s->kv);
        s->state = SEQ_DONE;
}

static struct seq *find_seq(struct cpu_engine *e, uint32_t id, bool active_only)
{
        for (uint32_t i = 0; i < e->lim.max_seqs; i++) {
                struct seq *s = &e->seqs[i];

                if (s->state == SEQ_ACTIVE || (!active_only && s->state == SEQ_DONE))
                        if (s->id == id)
                                return s;
        }
        return NULL;
}

static int check_params(const struct cpu_engine *e, const struct m40_seq_params *p)
{
        if (!p->prompt || !p->n_prompt || p->stop.n_ids > M40_MAX_STOP_IDS ||
            p->stop.n_strings > M40_MAX_STOP_STRINGS)
                return -EINVAL;
        for (uint32_t i = 0; i < p->n_prompt; i++)
                if (p->prompt[i] < 0 || (uint32_t)p->prompt[i] >= e->m->n_vocab)
                        return -EINVAL;
        if (p->n_prompt > e->lim.max_ctx)
                return -E2BIG;
        for (uint32_t i = 0; i < p->stop.n_strings; i++)
                if (!p->stop.strings[i][0] ||
                    memchr(p->stop.strings[i], 0, M40_MAX_STOP_LEN + 1) == NULL)
                        return -EINVAL;
        if (p->stop.n_strings && !e->lim.piece)
                return M40_EUNSUPPORTED;
        if (p->sampling.top_k < 0 || p->sampling.temperature != p->sampling.temperature)
                return -EINVAL;
        return 0;
}

static int cpu_admit(struct m40_engine *base, const struct m40_seq_params *p, uint32_t *ret_id)
{
        struct cpu_engine *e = (struct cpu_engine *)base;
        struct seq *s = NULL;
        uint32_t cap;
        int r = check_params(e, p);

        if (r)
                return r;
        for (uint32_t i = 0; i < e->lim.max_seqs && !s; i++)
                if (e->seqs[i].state == SEQ_FREE)
                        s = &e->seqs[i];
        for (uint32_t i = 0; i < e->lim.max_seqs && !s; i++)
                if (e->seqs[i].state == SEQ_DONE)
                        s = &e->seqs[i];
        if (!s)
                return -EBUSY;
        cap = p->n_prompt + (p->stop.max_tokens ? p->stop.max_tokens : e->lim.max_ctx) + 1;
        if (cap > e->lim.max_ctx + 1)
                cap = e->lim.max_ctx + 1;
        if (cap > s->cap) {
                int32_t *t = realloc(s->toks, (size_t)cap * sizeof(int32_t));

                if (!t)
                        return -ENOMEM;
                s->toks = t;
                s->cap = cap;
        }
        if (p->keep_logits && !s->logits) {
                s->logits = malloc((size_t)e->m->n_vocab * sizeof(float));
                if (!s->logits)
                        return -ENOMEM;
        }
        memcpy(s->toks, p->prompt, (size_t)p->n_prompt * sizeof(int32_t));
        s->n_toks = s->n_prompt = p->n_prompt;
        s->n_past = 0;
        s->n_gen = 0;
        s->sampling = p->sampling;
        s->stop = p->stop;
        s->rng = m40_sampler_seed(p->sampling.seed);
        s->keep_logits = p->keep_logits;
        s->has_logits = false;
        s->tail_len = 0;
        s->id = e->next_id++;
        s->order = e->next_order++;
        s->state = SEQ_ACTIVE;
        *ret_id = s->id;
        return 0;
}

static bool is_stop_id(const struct cpu_engine *e, const struct seq *s, int32_t tok)
{
        if (!s->stop.ignore_eos && (tok == e->m->eos_id || tok == e->m->eot_id))
                return true;
        for (uint32_t i = 0; i < s->stop.n_ids; i++)
                if (s->stop.ids[i] == tok)
                        return true;
        return false;
}

/* stop_string - append tok's text to the tail and look for a stop string in it. */
static bool stop_string(struct cpu_engine *e, struct seq *s, int32_t tok)
{
        const char *piece;
        size_t n;

        if (!s->stop.n_strings)
                return false;
        n = e->lim.piece(e->lim.piece_ctx, tok, &piece);
        if (n > TAIL_MAX - M40_MAX_STOP_LEN) {
                piece += n - (TAIL_MAX - M40_MAX_STOP_LEN);
                n = TAIL_MAX - M40_MAX_STOP_LEN;
        }
        if (s->tail_len > M40_MAX_STOP_LEN) { /* keep the last MAX_STOP_LEN bytes */
                memmove(s->tail, s->tail + s->tail_len - M40_MAX_STOP_LEN, M40_MAX_STOP_LEN);
                s->tail_len = M40_MAX_STOP_LEN;
        }
        memcpy(s->tail + s->tail_len, piece, n);
        s->tail_len += n;
        for (uint32_t i = 0; i < s->stop.n_strings; i++) {
                const char *str = s->stop.strings[i];

                if (memmem(s->tail, s->tail_len, str, strlen(str)))
                        return true;
        }
        return false;
}

/* produce - sample s's next token from its logits row; emit it with any finish reason. */
static int produce(struct cpu_engine *e, struct seq *s)
{
        const float *lg = e->logits + (size_t)s->row * e->m->n_vocab;
        int32_t tok;
        uint32_t why = M40_FINISH_NONE;

        if (s->keep_logits) {
                memcpy(s->logits, lg, (size_t)e->m->n_vocab * sizeof(float));
                s->has_logits = true;
        }
        tok = m40_sampler_sample(&s->sampling, &s->rng, lg, s->toks, s->n_toks, &e->scratch);
        s->toks[s->n_toks++] = tok;
        s->n_gen++;
        e->st.generated_tokens++;
        if (is_stop_id(e, s, tok))
                why = M40_FINISH_EOS;
        else if (stop_string(e, s, tok))
                why = M40_FINISH_STOP;
        else if (s->stop.max_tokens && s->n_gen >= s->stop.max_tokens)
                why = M40_FINISH_LENGTH;
        else if (s->n_toks > e->lim.max_ctx)
                why = M40_FINISH_CONTEXT;
        if (why != M40_FINISH_NONE)
                finish(e, s);
        return push_event(e, s, tok, why);
}

/* plan - add s's next tokens (up to *budget) to the batch; false when s needs nothing. */
static int plan(struct cpu_engine *e, struct seq *s, uint32_t *n, uint32_t *rows)
{
        const uint32_t pending = s->n_toks - s->n_past;
        const uint32_t budget = e->lim.max_batch_tokens - *n;
        const uint32_t take = pending < budget ? pending : budget;
        int r;

        s->row = -1;
        if (!take)
                return 0;
        r = m40_kv_table_reserve(e->pages, &s->kv, s->n_past + take);
        if (r == -ENOSPC) {
                finish(e, s);
                return push_event(e, s, -1, M40_FINISH_KV);
        }
        if (r)
                return r;
        for (uint32_t i = 0; i < take; i++) {
                e->batch[*n + i] = (struct m40_fwd_tok){
                        .token = s->toks[s->n_past + i],
                        .pos = s->n_past + i,
                        .kv = &s->kv,
                        .logit_row = -1,
                };
        }
        *n += take;
        e->st.prompt_tokens +=
                min_u32(s->n_past + take, s->n_prompt) - min_u32(s->n_past, s->n_prompt);
        s->n_past += take;
        if (s->n_past == s->n_toks) {
                s->row = (int32_t)(*rows)++;
                e->batch[*n - 1].logit_row = s->row;
        }
        return 0;
}

static int cpu_step(struct m40_engine *base)
{
        struct cpu_engine *e = (struct cpu_engine *)base;
        const double t0 = now_s();
        uint32_t n = 0, rows = 0, active = 0;
        int r = 0;

        /* decode tokens first, then prompts in admission order */
        for (uint32_t i = 0; i < e->lim.max_seqs && !r; i++) {
                struct seq *s = &e->seqs[i];

                s->row = -1;
                if (s->state == SEQ_ACTIVE && s->n_toks - s->n_past == 1 && s->n_past)
                        r = plan(e, s, &n, &rows);
        }
        for (;;) {
                struct seq *best = NULL;

                for (uint32_t i = 0; i < e->lim.max_seqs; i++) {
                        struct seq *s = &e->seqs[i];

                        if (s->state == SEQ_ACTIVE && s->row < 0 && s->n_toks > s->n_past &&
                            (!best || s->order < best->order))
                                best = s;
                }
                if (!best || n == e->lim.max_batch_tokens || r)
                        break;
                r = plan(e, best, &n, &rows);
                if (best->row < 0 && best->state == SEQ_ACTIVE)
                        break; /* budget exhausted mid-prompt */
        }
        if (r)
                return r;
        if (n)
                m40_fwd_run(&e->fwd, e->batch, n, e->logits);
        for (uint32_t i = 0; i < e->lim.max_seqs && !r; i++) {
                struct seq *s = &e->seqs[i];

                if (s->state == SEQ_ACTIVE && s->row >= 0)
                        r = produce(e, s);
        }
        for (uint32_t i = 0; i < e->lim.max_seqs; i++)
                active += e->seqs[i].state == SEQ_ACTIVE;
        if (n) {
                e->st.steps++;
                if (rows)
                        e->st.decode_seconds += now_s() - t0;
                else
                        e->st.prompt_seconds += now_s() - t0;
        }
        return r ? r : (int)active;
}

static size_t cpu_events(struct m40_engine *base, struct m40_event *out, size_t max)
{
        struct cpu_engine *e = (struct cpu_engine *)base;
        size_t n = e->ev_tail - e->ev_head;

        if (n > max)
                n = max;
        if (!n)
                return 0;
        memcpy(out, e->ev + e->ev_head, n * sizeof(*out));
        e->ev_head += n;
        if (e->ev_head == e->ev_tail)
                e->ev_head = e->ev_tail = 0;
        return n;
}

static int cpu_cancel(struct m40_engine *base, uint32_t id)
{
        struct cpu_engine *e = (struct cpu_engine *)base;
        struct seq *s = find_seq(e, id, true);

        if (!s)
                return -ENOENT;
        finish(e, s);
        return push_event(e, s, -1, M40_FINISH_CANCEL);
}

static int cpu_logits(struct m40_engine *base, uint32_t id, float *out, size_t n)
{
        struct cpu_engine *e = (struct cpu_engine *)base;
        struct seq *s = find_seq(e, id, false);

        if (!s)
                return -ENOENT;
        if (n < e->m->n_vocab)
                return -EINVAL;
        if (!s->has_logits)
                return -ENODATA;
        memcpy(out, s->logits, (size_t)e->m->n_vocab * sizeof(float));
        return 0;
}

static void cpu_stats(struct m40_engine *base, struct m40_engine_stats *ret)
{
        struct cpu_engine *e = (struct cpu_engine *)base;

        *ret = e->st;
        ret->active_seqs = 0;
        for (uint32_t i = 0; i < e->lim.max_seqs; i++)
                ret->active_seqs += e->seqs[i].state == SEQ_ACTIVE;
        ret->kv_pages_total = m40_kv_pages_total(e->pages);
        ret->kv_pages_used = m40_kv_pages_used(e->pages);
        ret->kv_page_tokens = m40_kv_pages_page_tokens(e->pages);
        ret->kv_page_bytes = 2ull * 2 * e->m->n_layers * ret->kv_page_tokens * e->m->kv_dim;
        ret->tokens_per_s = e->st.decode_seconds > 0
                                    ? (double)e->st.generated_tokens / e->st.decode_seconds
                                    : 0;
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

        if (e->seqs) {
                for (uint32_t i = 0; i < e->lim.max_seqs; i++) {
                        if (e->pages)
                                m40_kv_table_done(e->pages, &e->seqs[i].kv);
                        free(e->seqs[i].toks);
                        free(e->seqs[i].logits);
                }
                free(e->seqs);
        }
        m40_fwd_done(&e->fwd);
        m40_sampler_scratch_done(&e->scratch);
        m40_kv_pages_free(e->pages);
        m40_pool_free(e->pool);
        m40_model_free(e->m);
        free(e->batch);
        free(e->logits);
        free(e->ev);
        free(e);
}

static const struct m40_engine_ops cpu_ops = {
        .name = "cpu",
        .admit = cpu_admit,
        .step = cpu_step,
        .events = cpu_events,
        .cancel = cpu_cancel,
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

int m40_cpu_engine_new(const char *path, const struct m40_engine_limits *lim,
                       struct m40_engine **ret, char *err, size_t errlen)
{
        struct cpu_engine *e = calloc(1, sizeof(*e));
        uint64_t page_bytes, n_pages;
        int r;

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
        r = m40_model_load(path, &e->m, err, errlen);
        if (r)
                goto out_free;
        fill_limits(&e->lim, e->m);
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
        *ret = &e->base;
        return 0;
out_err:
        if (err)
                snprintf(err, errlen, "%s: %s", path, m40_strerror(r));
out_free:
        cpu_destroy(&e->base);
        return r;
}
