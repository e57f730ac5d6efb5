/* plan.c - the engine core's step planner (see plan.h): decode tokens first,
 * then prompts, oldest first, within max_batch_tokens; beside decode tokens, short prompts
 * go whole and the longer ones share prefill_chunk. */
#include "plan.h"

#include <errno.h>
#include <stdbool.h>

static inline uint32_t min_u32(uint32_t a, uint32_t b)
{
        return a < b ? a : b;
}

uint32_t m40_plan_prefill_chunk(const struct m40_engine_limits *lim)
{
        const uint32_t c = lim->prefill_chunk ? lim->prefill_chunk : M40_PREFILL_CHUNK_DEFAULT;

        return min_u32(c, lim->max_batch_tokens);
}

uint32_t m40_plan_whole_max(const struct m40_engine_limits *lim)
{
        const uint32_t c = m40_plan_prefill_chunk(lim);

        return c > M40_PREFILL_WHOLE ? c : M40_PREFILL_WHOLE;
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

/* next_prompt - the runnable sequence with prompt tokens pending (not a decoding one
 * that the decode width left out) and no logits row yet that was admitted first after admission
 * order `after` (any when !any_after), or NULL. */
static struct m40_seq *next_prompt(const struct m40_plan *p, bool any_after, uint64_t after)
{
        struct m40_seq *best = NULL;

        for (uint32_t i = 0; i < p->lim->max_seqs; i++) {
                struct m40_seq *s = &p->seqs[i];

                if (m40_seq_runnable(s) && s->row < 0 && s->n_toks > s->n_past && !decoding(s) &&
                    (!any_after || s->order > after) && (!best || s->order < best->order))
                        best = s;
        }
        return best;
}

uint32_t m40_plan_ready(const struct m40_plan *p)
{
        uint32_t n = 0;

        for (uint32_t i = 0; i < p->lim->max_seqs; i++)
                n += m40_seq_runnable(&p->seqs[i]) && decoding(&p->seqs[i]);
        return n;
}

static bool fresh(const struct m40_width_stats *w, uint32_t k, uint64_t tick)
{
        return w->t[k] > 0.0 && tick >= w->at[k] && tick - w->at[k] <= M40_WIDTH_REFRESH;
}

uint32_t m40_plan_width(const struct m40_width_stats *w, uint32_t n, uint64_t tick)
{
        const uint32_t lo = (n + 1) / 2;
        uint32_t best = n;
        double rate;

        if (n <= 4 || n > w->n || !fresh(w, n, tick))
                return n;
        if (tick % M40_WIDTH_EXPLORE == 0)
                for (uint32_t k = (n - 1) / 4 * 4; k >= lo && k >= 4; k -= 4)
                        if (!fresh(w, k, tick))
                                return k;
        rate = n / w->t[n] * M40_WIDTH_MARGIN;
        for (uint32_t k = (n - 1) / 4 * 4; k >= lo && k >= 4; k -= 4) {
                if (fresh(w, k, tick) && k / w->t[k] > rate) {
                        best = k;
                        rate = k / w->t[k];
                }
        }
        return best;
}

void m40_width_record(struct m40_width_stats *w, uint32_t k, double seconds, uint64_t tick)
{
        if (k < 1 || k > w->n || !(seconds > 0.0))
                return;
        w->t[k] = w->t[k] > 0.0 ? w->t[k] + (seconds - w->t[k]) / 4 : seconds;
        w->at[k] = tick;
}

/* turn_span - how many slots, from p->turn on in circular slot order, hold the first
 * p->width decoding slots: those that decode in this step; 0 (all of them) when the width
 * is 0 or there are fewer decoding slots. */
static uint32_t turn_span(const struct m40_plan *p)
{
        const uint32_t m = p->lim->max_seqs;
        uint32_t k = 0;

        if (!p->width)
                return 0;
        for (uint32_t d = 0; d < m; d++) {
                const struct m40_seq *s = &p->seqs[(p->turn + d) % m];

                if (m40_seq_runnable(s) && decoding(s) && ++k == p->width)
                        return d + 1;
        }
        return 0;
}

int m40_plan_step(const struct m40_plan *p, struct m40_plan_step *ret)
{
        const uint32_t max = p->lim->max_batch_tokens, m = p->lim->max_seqs;
        struct m40_plan_step st = {0};
        uint32_t chunk, span, turn = p->turn % m;
        bool prompts = false;
        int r = 0;

        for (uint32_t i = 0; i < m; i++) {
                struct m40_seq *s = &p->seqs[i];

                s->row = -1;
                s->prev_past = s->n_past;
                prompts |= m40_seq_runnable(s) && !decoding(s) && s->n_toks > s->n_past;
        }
        span = prompts ? 0 : turn_span(p); /* the width applies to decode-only steps */
        for (uint32_t i = 0; i < m && st.n_tokens < max && !r; i++) {
                struct m40_seq *s = &p->seqs[i];

                if (m40_seq_runnable(s) && decoding(s) && (!span || (i + m - turn) % m < span)) {
                        r = add(p, s, 1, &st);
                        st.n_decode += s->row >= 0;
                }
        }
        st.turn = span ? (turn + span) % m : turn;
        /* prompts in admission order: a short one (m40_plan_whole_max()) whole, within the
         * step's room; the longer ones share the chunk */
        chunk = st.n_decode ? m40_plan_prefill_chunk(p->lim) : max - st.n_tokens;
        for (struct m40_seq *s = next_prompt(p, false, 0); s && st.n_tokens < max && !r;
             s = next_prompt(p, true, s->order)) {
                const uint32_t rest = s->n_toks - s->n_past, room = max - st.n_tokens;
                const bool whole = s->n_prompt <= m40_plan_whole_max(p->lim);
                const uint32_t take = min_u32(rest, whole ? room : min_u32(chunk, room));
                const uint32_t before = st.n_tokens;

                if (!take)
                        continue;
                r = add(p, s, take, &st);
                if (!whole) /* what it took (0 when it ran out of KV pages) */
                        chunk -= st.n_tokens - before;
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
