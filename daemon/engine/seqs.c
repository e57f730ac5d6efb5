/* seqs.c - the per-sequence bookkeeping of the engine core (see seqs.h):
 * request validation, slot admission, stop conditions and the event queue. */
#include "seqs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "m40/error.h"
#include "sampler.h"

int m40_seq_check_params(const struct m40_seq_params *p, uint32_t n_vocab,
                         const struct m40_engine_limits *lim)
{
        const char *name, *range;

        if (!p->prompt || !p->n_prompt || p->stop.n_ids > M40_MAX_STOP_IDS ||
            p->stop.n_strings > M40_MAX_STOP_STRINGS)
                return -EINVAL;
        for (uint32_t i = 0; i < p->n_prompt; i++)
                if (p->prompt[i] < 0 || (uint32_t)p->prompt[i] >= n_vocab)
                        return -EINVAL;
        if (p->n_prompt > lim->max_ctx)
                return -E2BIG;
        for (uint32_t i = 0; i < p->stop.n_strings; i++)
                if (!p->stop.strings[i][0] ||
                    memchr(p->stop.strings[i], 0, M40_MAX_STOP_LEN + 1) == NULL)
                        return -EINVAL;
        if (p->stop.n_strings && !lim->piece)
                return M40_EUNSUPPORTED;
        return m40_sampler_params_check(&p->sampling, &name, &range);
}

int m40_seq_admit(struct m40_seq *seqs, const struct m40_engine_limits *lim, uint32_t n_vocab,
                  const struct m40_seq_params *p, uint32_t *next_id, uint64_t *next_order,
                  struct m40_seq **ret)
{
        struct m40_seq *s = NULL;
        uint32_t cap;
        int r = m40_seq_check_params(p, n_vocab, lim);

        if (r)
                return r;
        for (uint32_t i = 0; i < lim->max_seqs && !s; i++)
                if (seqs[i].state == M40_SEQ_FREE)
                        s = &seqs[i];
        for (uint32_t i = 0; i < lim->max_seqs && !s; i++)
                if (seqs[i].state == M40_SEQ_DONE)
                        s = &seqs[i];
        if (!s)
                return -EBUSY;
        cap = p->n_prompt + (p->stop.max_tokens ? p->stop.max_tokens : lim->max_ctx) + 1;
        if (cap > lim->max_ctx + 1)
                cap = lim->max_ctx + 1;
        if (cap > s->cap) {
                int32_t *t = realloc(s->toks, (size_t)cap * sizeof(int32_t));

                if (!t)
                        return -ENOMEM;
                s->toks = t;
                s->cap = cap;
        }
        if (p->keep_logits && !s->logits) {
                s->logits = malloc((size_t)n_vocab * sizeof(float));
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
        s->held = false;
        s->kv_reserve = 0;
        s->tail_len = 0;
        s->id = (*next_id)++;
        s->order = (*next_order)++;
        s->state = M40_SEQ_ACTIVE;
        *ret = s;
        return 0;
}

struct m40_seq *m40_seq_find(struct m40_seq *seqs, uint32_t n, uint32_t id, bool active_only)
{
        for (uint32_t i = 0; i < n; i++) {
                struct m40_seq *s = &seqs[i];

                if (s->state == M40_SEQ_ACTIVE || (!active_only && s->state == M40_SEQ_DONE))
                        if (s->id == id)
                                return s;
        }
        return NULL;
}

int m40_seq_hold(struct m40_seq *seqs, uint32_t n, uint32_t id, bool hold)
{
        struct m40_seq *s = m40_seq_find(seqs, n, id, true);

        if (!s)
                return -ENOENT;
        s->held = hold;
        return 0;
}

uint32_t m40_seq_count_active(const struct m40_seq *seqs, uint32_t n)
{
        uint32_t active = 0;

        for (uint32_t i = 0; i < n; i++)
                active += seqs[i].state == M40_SEQ_ACTIVE;
        return active;
}

int m40_seq_limits_eog(struct m40_engine_limits *lim, uint32_t n_vocab, int32_t eos_id,
                       int32_t eot_id)
{
        if (lim->n_eog > M40_MAX_EOG_IDS)
                return -EINVAL;
        for (uint32_t i = 0; i < lim->n_eog; i++)
                if (lim->eog[i] < 0 || (uint32_t)lim->eog[i] >= n_vocab)
                        return -EINVAL;
        if (lim->n_eog)
                return 0;
        if (eos_id >= 0 && (uint32_t)eos_id < n_vocab)
                lim->eog[lim->n_eog++] = eos_id;
        if (eot_id >= 0 && (uint32_t)eot_id < n_vocab && eot_id != eos_id)
                lim->eog[lim->n_eog++] = eot_id;
        return 0;
}

static bool is_stop_id(const struct m40_seq *s, const struct m40_engine_limits *lim, int32_t tok)
{
        for (uint32_t i = 0; i < lim->n_eog && !s->stop.ignore_eos; i++)
                if (lim->eog[i] == tok)
                        return true;
        for (uint32_t i = 0; i < s->stop.n_ids; i++)
                if (s->stop.ids[i] == tok)
                        return true;
        return false;
}

/* stop_string - append tok's text to the tail and look for a stop string in it. */
static bool stop_string(struct m40_seq *s, const struct m40_engine_limits *lim, int32_t tok)
{
        const char *piece;
        size_t n;

        if (!s->stop.n_strings)
                return false;
        n = lim->piece(lim->piece_ctx, tok, &piece);
        if (n > M40_SEQ_TAIL_MAX - M40_MAX_STOP_LEN) {
                piece += n - (M40_SEQ_TAIL_MAX - M40_MAX_STOP_LEN);
                n = M40_SEQ_TAIL_MAX - M40_MAX_STOP_LEN;
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

uint32_t m40_seq_append(struct m40_seq *s, const struct m40_engine_limits *lim, int32_t tok)
{
        s->toks[s->n_toks++] = tok;
        s->n_gen++;
        if (is_stop_id(s, lim, tok))
                return M40_FINISH_EOS;
        if (stop_string(s, lim, tok))
                return M40_FINISH_STOP;
        if (s->stop.max_tokens && s->n_gen >= s->stop.max_tokens)
                return M40_FINISH_LENGTH;
        if (s->n_toks > lim->max_ctx)
                return M40_FINISH_CONTEXT;
        return M40_FINISH_NONE;
}

void m40_seq_finish(struct m40_kv_pages *pages, struct m40_seq *s)
{
        m40_kv_table_release(pages, &s->kv);
        s->state = M40_SEQ_DONE;
        s->held = false;
}

int m40_seq_events_push(struct m40_seq_events *q, const struct m40_seq *s, int32_t token,
                        uint32_t finish)
{
        if (q->tail == q->cap) {
                if (q->head) {
                        memmove(q->ev, q->ev + q->head, (q->tail - q->head) * sizeof(*q->ev));
                        q->tail -= q->head;
                        q->head = 0;
                }
                if (q->tail == q->cap) {
                        size_t cap = q->cap ? q->cap * 2 : 64;
                        struct m40_event *n = realloc(q->ev, cap * sizeof(*n));

                        if (!n)
                                return -ENOMEM;
                        q->ev = n;
                        q->cap = cap;
                }
        }
        q->ev[q->tail++] = (struct m40_event){
                .seq = s->id,
                .token = token,
                .finish = finish,
                .n_prompt = s->n_prompt,
                .n_generated = s->n_gen,
        };
        return 0;
}

size_t m40_seq_events_pop(struct m40_seq_events *q, struct m40_event *out, size_t max)
{
        size_t n = q->tail - q->head;

        if (n > max)
                n = max;
        if (!n)
                return 0;
        memcpy(out, q->ev + q->head, n * sizeof(*out));
        q->head += n;
        if (q->head == q->tail)
                q->head = q->tail = 0;
        return n;
}

void m40_seq_events_done(struct m40_seq_events *q)
{
        free(q->ev);
        *q = (struct m40_seq_events){0};
}

int m40_seq_cancel(struct m40_seq *seqs, uint32_t n, struct m40_kv_pages *pages,
                   struct m40_seq_events *q, uint32_t id)
{
        struct m40_seq *s = m40_seq_find(seqs, n, id, true);

        if (!s)
                return -ENOENT;
        m40_seq_finish(pages, s);
        return m40_seq_events_push(q, s, -1, M40_FINISH_CANCEL);
}

int m40_seq_logits(struct m40_seq *seqs, uint32_t n_seqs, uint32_t n_vocab, uint32_t id, float *out,
                   size_t n)
{
        struct m40_seq *s = m40_seq_find(seqs, n_seqs, id, false);

        if (!s)
                return -ENOENT;
        if (n < n_vocab)
                return -EINVAL;
        if (!s->has_logits)
                return -ENODATA;
        memcpy(out, s->logits, (size_t)n_vocab * sizeof(float));
        return 0;
}

void m40_seq_stats(const struct m40_engine_stats *st, const struct m40_seq *seqs, uint32_t n,
                   struct m40_kv_pages *pages, uint32_t n_layers, uint32_t kv_dim,
                   struct m40_engine_stats *ret)
{
        *ret = *st;
        ret->active_seqs = m40_seq_count_active(seqs, n);
        ret->kv_pages_total = m40_kv_pages_total(pages);
        ret->kv_pages_used = m40_kv_pages_used(pages);
        ret->kv_page_tokens = m40_kv_pages_page_tokens(pages);
        ret->kv_page_bytes = 2ull * 2 * n_layers * ret->kv_page_tokens * kv_dim;
        ret->tokens_per_s =
                st->decode_seconds > 0 ? (double)st->generated_tokens / st->decode_seconds : 0;
}

void m40_seq_slots_free(struct m40_seq *seqs, uint32_t n, struct m40_kv_pages *pages)
{
        if (!seqs)
                return;
        for (uint32_t i = 0; i < n; i++) {
                if (pages)
                        m40_kv_table_done(pages, &seqs[i].kv);
                free(seqs[i].toks);
                free(seqs[i].logits);
        }
        free(seqs);
}
