/* plan.c - the step planner of the CPU and CUDA engines (see plan.h): decode tokens first,
 * then prompt chunks, oldest prompt first, within max_batch_tokens and, beside decode
 * tokens, prefill_chunk. */
#include "plan.h"

#include <errno.h>

static inline uint32_t min_u32(uint32_t a, uint32_t b)
{
        return a < b ? a : b;
}

uint32_t m40_plan_prefill_chunk(const struct m40_engine_limits *lim)
{
        const uint32_t c = lim->prefill_chunk ? lim->prefill_chunk : M40_PREFILL_CHUNK_DEFAULT;

        return min_u32(c, lim->max_batch_tokens);
}

/* decoding - whether s's prompt is done: its one pending token is the last one sampled. */
static bool decoding(const struct m40_seq *s)
{
        return s->n_past && s->n_toks - s->n_past == 1;
}

/* add - put the next take (>= 1) pending tokens of s into the step. A sequence without KV
 * pages for them is finished with M40_FINISH_KV instead (0, or the event queue's error). */
static int add(const struct m40_plan *p, struct m40_seq *s, uint32_t take, struct m40_plan_step *st)
{
        int r = m40_kv_table_reserve(p->pages, &s->kv, s->n_past + take);

        if (r == -ENOSPC) {
                m40_seq_finish(p->pages, s);
                return m40_seq_events_push(p->evq, s, -1, M40_FINISH_KV);
        }
        if (r)
                return r;
        for (uint32_t i = 0; i < take; i++) {
                p->batch[st->n_tokens + i] = (struct m40_fwd_tok){
                        .token = s->toks[s->n_past + i],
                        .pos = s->n_past + i,
                        .kv = &s->kv,
                        .logit_row = -1,
                };
        }
        st->n_tokens += take;
        st->n_prompt += min_u32(s->n_past + take, s->n_prompt) - min_u32(s->n_past, s->n_prompt);
        s->n_past += take;
        if (s->n_past == s->n_toks) {
                s->row = (int32_t)st->n_rows++;
                p->batch[st->n_tokens - 1].logit_row = s->row;
        }
        return 0;
}

/* oldest_prompt - the runnable sequence with prompt tokens pending that was admitted
 * first, or NULL. */
static struct m40_seq *oldest_prompt(const struct m40_plan *p)
{
        struct m40_seq *best = NULL;

        for (uint32_t i = 0; i < p->lim->max_seqs; i++) {
                struct m40_seq *s = &p->seqs[i];

                if (m40_seq_runnable(s) && s->row < 0 && s->n_toks > s->n_past &&
                    (!best || s->order < best->order))
                        best = s;
        }
        return best;
}

int m40_plan_step(const struct m40_plan *p, struct m40_plan_step *ret)
{
        const uint32_t max = p->lim->max_batch_tokens;
        struct m40_plan_step st = {0};
        uint32_t budget;
        int r = 0;

        for (uint32_t i = 0; i < p->lim->max_seqs; i++) {
                p->seqs[i].row = -1;
                p->seqs[i].prev_past = p->seqs[i].n_past;
        }
        for (uint32_t i = 0; i < p->lim->max_seqs && st.n_tokens < max && !r; i++) {
                struct m40_seq *s = &p->seqs[i];

                if (m40_seq_runnable(s) && decoding(s)) {
                        r = add(p, s, 1, &st);
                        st.n_decode += s->row >= 0;
                }
        }
        budget = max - st.n_tokens;
        if (st.n_decode)
                budget = min_u32(budget, m40_plan_prefill_chunk(p->lim));
        while (budget && !r) {
                struct m40_seq *s = oldest_prompt(p);
                uint32_t take, before;

                if (!s)
                        break;
                take = min_u32(s->n_toks - s->n_past, budget);
                before = st.n_tokens;
                r = add(p, s, take, &st);
                budget -= st.n_tokens - before; /* 0 taken when s ran out of KV pages */
        }
        if (r) {
                m40_plan_undo(p);
                return r;
        }
        *ret = st;
        return 0;
}

void m40_plan_undo(const struct m40_plan *p)
{
        for (uint32_t i = 0; i < p->lim->max_seqs; i++) {
                struct m40_seq *s = &p->seqs[i];

                if (s->state == M40_SEQ_ACTIVE)
                        s->n_past = s->prev_past;
                s->row = -1;
        }
}
