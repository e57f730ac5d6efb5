/* test_plan.c - the step planner (daemon/engine/plan.c) alone, on sequence slots filled by
 * m40_seq_admit() and no model: the step policy of engine.h, step by step. While sequences
 * decode, every one of them gets its token in every step, prompts of at most
 * prefill_chunk pending tokens go whole (a burst of them as many as the step holds) and the
 * longer ones share at most prefill_chunk tokens, oldest admission first, a long prompt cut
 * at the chunk boundary and continued from there; while nothing decodes (or only held sequences
 * would), prompts take max_batch_tokens; prefill_chunk 0 is M40_PREFILL_CHUNK_DEFAULT and a chunk
 * above max_batch_tokens acts as max_batch_tokens; the batch holds each sequence's next positions
 * in order with a logits row on the last token of each sequence that produces one; a
 * sequence without KV pages is finished with M40_FINISH_KV and the plan goes on;
 * m40_plan_undo() gives the tokens back.
 *
 * usage: test_plan. Exit 0 pass, 1 fail. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/plan.h"
#include "tests/check.h"

#define N_VOCAB  100
#define MAX_SEQS 8

struct bed {
        struct m40_engine_limits lim;
        struct m40_seq *seqs;
        struct m40_kv_pages *pages;
        struct m40_seq_events evq;
        struct m40_fwd_tok *batch;
        struct m40_plan plan;
        uint32_t next_id;
        uint64_t next_order;
};

static void bed_init(struct bed *b, uint32_t max_batch, uint32_t chunk, uint32_t n_pages)
{
        memset(b, 0, sizeof(*b));
        b->lim = (struct m40_engine_limits){
                .max_seqs = MAX_SEQS,
                .max_ctx = 512,
                .page_tokens = 16,
                .max_batch_tokens = max_batch,
                .prefill_chunk = chunk,
        };
        b->seqs = calloc(MAX_SEQS, sizeof(*b->seqs));
        b->batch = calloc(max_batch, sizeof(*b->batch));
        if (!b->seqs || !b->batch || m40_kv_pages_new(n_pages, 16, &b->pages)) {
                fprintf(stderr, "out of memory\n");
                exit(1);
        }
        b->plan = (struct m40_plan){b->seqs, &b->lim, b->pages, &b->evq, b->batch, 0, 0};
}

static void bed_done(struct bed *b)
{
        m40_seq_slots_free(b->seqs, MAX_SEQS, b->pages);
        m40_kv_pages_free(b->pages);
        m40_seq_events_done(&b->evq);
        free(b->batch);
}

/* admit - a sequence with a prompt of n tokens (ids i*7+k) generating up to 100. */
static struct m40_seq *admit(struct bed *b, uint32_t n)
{
        int32_t prompt[512];
        struct m40_seq_params p = {0};
        struct m40_seq *s = NULL;

        for (uint32_t k = 0; k < n; k++)
                prompt[k] = (int32_t)((b->next_id * 7 + k) % N_VOCAB);
        p.prompt = prompt;
        p.n_prompt = n;
        p.sampling = m40_sampling_default();
        p.stop = m40_stop_default();
        p.stop.max_tokens = 100;
        p.stop.ignore_eos = true;
        if (m40_seq_admit(b->seqs, &b->lim, N_VOCAB, &p, &b->next_id, &b->next_order, &s)) {
                fprintf(stderr, "admit failed\n");
                exit(1);
        }
        return s;
}

/* step - plan a step, check the batch's shape, and "produce" a token for every sequence
 * given a row, as an engine would after the forward pass. */
static struct m40_plan_step step(struct bed *b)
{
        struct m40_plan_step ps = {0};
        int r = m40_plan_step(&b->plan, &ps);
        uint32_t rows = 0;

        CHECK(r == 0, "plan: %d", r);
        CHECK(ps.n_tokens <= b->lim.max_batch_tokens, "%u tokens in a step of %u", ps.n_tokens,
              b->lim.max_batch_tokens);
        for (uint32_t i = 0; i < ps.n_tokens; i++) {
                const struct m40_fwd_tok *t = &b->batch[i];
                const struct m40_seq *s = NULL;

                for (uint32_t k = 0; k < MAX_SEQS; k++)
                        if (t->kv == &b->seqs[k].kv)
                                s = &b->seqs[k];
                CHECK(s && t->pos < s->n_past && t->token == s->toks[t->pos],
                      "token %u: not a planned position of its sequence", i);
                if (s && t->logit_row >= 0)
                        CHECK(t->logit_row == s->row && t->pos == s->n_toks - 1,
                              "token %u: logits row %d on position %u", i, t->logit_row, t->pos);
                rows += t->logit_row >= 0;
        }
        CHECK(rows == ps.n_rows, "%u logits rows in the batch, plan says %u", rows, ps.n_rows);
        for (uint32_t k = 0; k < MAX_SEQS; k++) {
                struct m40_seq *s = &b->seqs[k];

                if (s->state == M40_SEQ_ACTIVE && s->row >= 0)
                        m40_seq_append(s, &b->lim, 1);
        }
        return ps;
}

/* Three short prompts, then a long one and a short one arrive while they decode. */
static void test_decode_and_chunks(void)
{
        struct bed b;
        struct m40_seq *run[3], *lng, *late;
        struct m40_plan_step ps;
        uint32_t steps = 0;

        bed_init(&b, 64, 16, 256);
        for (int i = 0; i < 3; i++)
                run[i] = admit(&b, 4);
        ps = step(&b);
        CHECK(ps.n_tokens == 12 && ps.n_decode == 0 && ps.n_rows == 3 && ps.n_prompt == 12,
              "first step: %u tokens, %u decode, %u rows", ps.n_tokens, ps.n_decode, ps.n_rows);
        lng = admit(&b, 100);
        late = admit(&b, 10);
        /* beside the 3 decode tokens: the long prompt 16 a step (the chunk), the late one
         * (10 <= 16) whole in the first step, not behind the long one; the long one's last
         * 4 in the 7th step */
        for (uint32_t want_long = 16; lng->n_past < lng->n_prompt; want_long += 16) {
                const uint32_t before = lng->n_past, dec = steps ? 4 : 3;

                ps = step(&b);
                steps++;
                CHECK(ps.n_decode == dec && ps.n_tokens == dec + ps.n_prompt,
                      "step %u: %u decode tokens of %u, %u tokens", steps, ps.n_decode, dec,
                      ps.n_tokens);
                for (int i = 0; i < 3; i++)
                        CHECK(run[i]->row >= 0, "step %u: running sequence %d got no token", steps,
                              i);
                if (steps == 1) {
                        CHECK(lng->n_past == 16 && late->n_past == 10 && late->row >= 0 &&
                                      lng->row < 0 && ps.n_prompt == 26 && ps.n_rows == 4,
                              "step 1: long prompt at %u, late one at %u (row %d), %u prompt "
                              "tokens, %u rows",
                              lng->n_past, late->n_past, late->row, ps.n_prompt, ps.n_rows);
                } else if (want_long < 100) {
                        CHECK(lng->n_past - before == 16 && lng->row < 0 && ps.n_prompt == 16,
                              "step %u: long prompt %u..%u, %u prompt tokens", steps, before,
                              lng->n_past, ps.n_prompt);
                } else {
                        CHECK(lng->n_past == 100 && ps.n_prompt == 4 && lng->row >= 0 &&
                                      ps.n_rows == 5,
                              "step %u: long at %u, %u prompt tokens, %u rows", steps, lng->n_past,
                              ps.n_prompt, ps.n_rows);
                }
        }
        CHECK(steps == 7, "the long prompt took %u steps beside the decoders, want 7", steps);
        ps = step(&b);
        CHECK(ps.n_decode == 5 && ps.n_tokens == 5 && ps.n_prompt == 0,
              "after the prompts: %u decode tokens, %u tokens", ps.n_decode, ps.n_tokens);
        bed_done(&b);
}

/* A burst of short prompts while sequences decode: they go whole, as many as the step's
 * room holds (not one chunk's worth a step), and the one that meets the end of the room
 * is cut there. */
static void test_short_burst(void)
{
        struct bed b;
        struct m40_seq *run[3], *burst[5];
        struct m40_plan_step ps;

        bed_init(&b, 40, 16, 256);
        for (int i = 0; i < 3; i++)
                run[i] = admit(&b, 4);
        ps = step(&b);
        CHECK(ps.n_decode == 0 && ps.n_rows == 3, "first step: %u decode, %u rows", ps.n_decode,
              ps.n_rows);
        for (int i = 0; i < 5; i++)
                burst[i] = admit(&b, 10);
        ps = step(&b);
        /* 3 decode tokens + 3 prompts of 10 = 33 of 40; the 4th gets 7, the 5th none */
        CHECK(ps.n_decode == 3 && ps.n_tokens == 40 && ps.n_prompt == 37 && ps.n_rows == 6,
              "burst step: %u decode, %u tokens, %u prompt tokens, %u rows", ps.n_decode,
              ps.n_tokens, ps.n_prompt, ps.n_rows);
        for (int i = 0; i < 3; i++)
                CHECK(burst[i]->n_past == 10 && burst[i]->row >= 0, "burst %d at %u, row %d", i,
                      burst[i]->n_past, burst[i]->row);
        CHECK(burst[3]->n_past == 7 && burst[3]->row < 0 && burst[4]->n_past == 0,
              "burst 3 at %u, burst 4 at %u", burst[3]->n_past, burst[4]->n_past);
        for (int i = 0; i < 3; i++)
                CHECK(run[i]->row >= 0, "running sequence %d got no token", i);
        ps = step(&b);
        /* 6 decode tokens, then the 4th's 3 left and the 5th's 10, both short */
        CHECK(ps.n_decode == 6 && ps.n_prompt == 13 && burst[3]->row >= 0 && burst[4]->row >= 0,
              "after the burst: %u decode, %u prompt tokens", ps.n_decode, ps.n_prompt);
        bed_done(&b);

        /* short is by a prompt's whole length: 64 tokens (M40_PREFILL_WHOLE) go whole
         * beside a decoder, 65 share the chunk of 16 */
        bed_init(&b, 256, 16, 256);
        run[0] = admit(&b, 4);
        step(&b);
        burst[0] = admit(&b, M40_PREFILL_WHOLE);
        burst[1] = admit(&b, M40_PREFILL_WHOLE + 1);
        ps = step(&b);
        CHECK(ps.n_decode == 1 && ps.n_prompt == M40_PREFILL_WHOLE + 16 && burst[0]->row >= 0 &&
                      burst[1]->n_past == 16,
              "whole/cut: %u decode, %u prompt tokens, the long one at %u", ps.n_decode,
              ps.n_prompt, burst[1]->n_past);
        bed_done(&b);
}

/* Nothing decodes: prompts fill max_batch_tokens, a long one cut there. */
static void test_prefill_only(void)
{
        struct bed b;
        struct m40_seq *a, *c;
        struct m40_plan_step ps;

        bed_init(&b, 64, 16, 256);
        a = admit(&b, 100);
        c = admit(&b, 20);
        ps = step(&b);
        CHECK(ps.n_tokens == 64 && ps.n_rows == 0 && a->n_past == 64 && c->n_past == 0,
              "prefill step 1: %u tokens, a at %u, c at %u", ps.n_tokens, a->n_past, c->n_past);
        ps = step(&b);
        CHECK(ps.n_tokens == 56 && ps.n_rows == 2 && a->n_past == 100 && c->n_past == 20,
              "prefill step 2: %u tokens, a at %u, c at %u", ps.n_tokens, a->n_past, c->n_past);
        bed_done(&b);
}

/* Held decoders do not count as decoding; chunk 0 and chunks past max_batch_tokens. */
static void test_held_and_limits(void)
{
        struct bed b;
        struct m40_seq *d, *p;
        struct m40_plan_step ps;

        bed_init(&b, 64, 8, 256);
        d = admit(&b, 2);
        step(&b);
        p = admit(&b, 100);
        d->held = true;
        ps = step(&b);
        CHECK(ps.n_decode == 0 && ps.n_tokens == 64 && p->n_past == 64,
              "held decoder: %u decode, %u tokens", ps.n_decode, ps.n_tokens);
        d->held = false;
        ps = step(&b);
        CHECK(ps.n_decode == 1 && ps.n_tokens == 9 && p->n_past == 72,
              "released decoder: %u decode, %u tokens", ps.n_decode, ps.n_tokens);
        bed_done(&b);

        bed_init(&b, 512, 0, 256);
        CHECK(m40_plan_prefill_chunk(&b.lim) == M40_PREFILL_CHUNK_DEFAULT, "chunk 0 -> %u",
              m40_plan_prefill_chunk(&b.lim));
        d = admit(&b, 2);
        step(&b);
        p = admit(&b, 300);
        ps = step(&b);
        CHECK(ps.n_decode == 1 && ps.n_prompt == M40_PREFILL_CHUNK_DEFAULT,
              "default chunk: %u prompt tokens", ps.n_prompt);
        bed_done(&b);

        bed_init(&b, 64, 1000, 256);
        CHECK(m40_plan_prefill_chunk(&b.lim) == 64, "chunk 1000 of 64 -> %u",
              m40_plan_prefill_chunk(&b.lim));
        d = admit(&b, 2);
        step(&b);
        p = admit(&b, 300);
        ps = step(&b);
        CHECK(ps.n_decode == 1 && ps.n_tokens == 64 && p->n_past == 63,
              "chunk past the step: %u tokens", ps.n_tokens);
        bed_done(&b);
}

/* Two pages: the first prompt takes both, the second ends with M40_FINISH_KV, and the
 * plan still carries the first. Then undo. */
static void test_kv_and_undo(void)
{
        struct bed b;
        struct m40_seq *a, *c;
        struct m40_plan_step ps = {0};
        struct m40_event ev[4];
        size_t n;
        int r;

        bed_init(&b, 64, 16, 2);
        a = admit(&b, 20);
        c = admit(&b, 20);
        r = m40_plan_step(&b.plan, &ps);
        n = m40_seq_events_pop(&b.evq, ev, 4);
        CHECK(r == 0 && ps.n_tokens == 20 && a->n_past == 20 && c->state == M40_SEQ_DONE,
              "KV: %d, %u tokens, c state %d", r, ps.n_tokens, (int)c->state);
        CHECK(n == 1 && ev[0].seq == c->id && ev[0].token == -1 && ev[0].finish == M40_FINISH_KV,
              "KV event: %zu events", n);
        m40_plan_undo(&b.plan);
        CHECK(a->n_past == 0 && a->row < 0, "undo: a at %u, row %d", a->n_past, a->row);
        r = m40_plan_step(&b.plan, &ps);
        CHECK(r == 0 && ps.n_tokens == 20 && a->row == 0, "after undo: %d, %u tokens", r,
              ps.n_tokens);
        bed_done(&b);
}

/* The decode width: 6 sequences decoding at width 4 take turns in circular slot order,
 * each step's batch in slot order; a prompt pending, or a width that covers them,
 * decodes every one. */
static void test_width_turns(void)
{
        struct bed b;
        struct m40_seq *run[6];
        struct m40_plan_step ps;
        uint32_t got[6] = {0};

        bed_init(&b, 64, 16, 256);
        for (int i = 0; i < 6; i++)
                run[i] = admit(&b, 3);
        ps = step(&b); /* the prompts: width does not apply */
        CHECK(ps.n_rows == 6 && ps.n_decode == 0, "prompt step: %u rows", ps.n_rows);
        b.plan.width = 4;
        for (uint64_t t = 2; t < 8; t++) { /* 6 steps of 4: 24 tokens, 4 each */
                uint32_t prev = 0;

                ps = step(&b);
                b.plan.turn = ps.turn;
                CHECK(ps.n_decode == 4 && ps.n_tokens == 4, "tick %llu: %u decode tokens of %u",
                      (unsigned long long)t, ps.n_decode, ps.n_tokens);
                for (uint32_t i = 0; i < ps.n_tokens; i++) {
                        uint32_t k = 6;

                        for (uint32_t j = 0; j < 6; j++)
                                if (b.batch[i].kv == &run[j]->kv)
                                        k = j;

                        CHECK(k < 6 && (i == 0 || k > prev), "tick %llu: batch not in slot order",
                              (unsigned long long)t);
                        prev = k;
                        got[k < 6 ? k : 0]++;
                }
                for (int i = 0; i < 6; i++) /* nobody more than a turn behind */
                        for (int j = 0; j < 6; j++)
                                CHECK(got[i] <= got[j] + 1, "tick %llu: seq %d has %u, %d has %u",
                                      (unsigned long long)t, i, got[i], j, got[j]);
        }
        for (int i = 0; i < 6; i++)
                CHECK(got[i] == 4, "seq %d decoded %u times in 6 steps of 4", i, got[i]);
        admit(&b, 3); /* a prompt pending: every sequence decodes beside it */
        ps = step(&b);
        CHECK(ps.n_decode == 6 && ps.n_prompt == 3, "with a prompt: %u decode, %u prompt",
              ps.n_decode, ps.n_prompt);
        b.plan.width = 7; /* covers them */
        ps = step(&b);
        CHECK(ps.n_decode == 7, "width 7 of 7: %u decode", ps.n_decode);
        bed_done(&b);
}

/* m40_plan_width on made-up step times. */
static void test_width_choice(void)
{
        double t[17] = {0};
        uint64_t at[17] = {0};
        struct m40_width_stats w = {16, t, at};
        const uint64_t now = 1001, explore = 1008; /* 1008: a multiple of M40_WIDTH_EXPLORE */

        CHECK(m40_plan_width(&w, 12, now) == 12, "nothing measured: all");
        m40_width_record(&w, 12, 0.012, 1000);
        CHECK(m40_plan_width(&w, 12, now) == 12, "only 12 measured: %u",
              m40_plan_width(&w, 12, now));
        CHECK(m40_plan_width(&w, 12, explore) == 8,
              "explore: the widest candidate without a measurement first (8)");
        m40_width_record(&w, 8, 0.006, 1000);
        CHECK(m40_plan_width(&w, 12, explore) == 8,
              "explore: 8 measured and faster, 4 is below half of 12");
        CHECK(m40_plan_width(&w, 12, now) == 8, "8 a step of 6 ms beats 12 of 12 ms: %u",
              m40_plan_width(&w, 12, now));
        m40_width_record(&w, 8, 0.0084, 1000); /* the mean moves a quarter of the way */
        CHECK(t[8] > 0.0065 && t[8] < 0.0067, "smoothed: %g", t[8]);
        while (t[12] > 0.0098) /* 12 at 9.75 ms: 8 / 6.6 ms is within 3% of 12 / 9.75 */
                m40_width_record(&w, 12, 0.0097, 1000);
        CHECK(m40_plan_width(&w, 12, now) == 12, "within the margin: all (t12 %g, t8 %g)", t[12],
              t[8]);
        CHECK(m40_plan_width(&w, 12, 1000 + M40_WIDTH_REFRESH + 1) == 12, "stale: all again");
        m40_width_record(&w, 12, 0.1, 1000); /* 12 much slower again */
        CHECK(m40_plan_width(&w, 12, 1000 + M40_WIDTH_REFRESH + 1) == 12,
              "12 stale: it is measured again first");
        CHECK(m40_plan_width(&w, 12, 900) == 12, "a clock before the measurements: all");
        CHECK(m40_plan_width(&w, 4, now) == 4 && m40_plan_width(&w, 17, now) == 17,
              "4 and below, and past the table: all");
        m40_width_record(&w, 0, 1.0, now);
        m40_width_record(&w, 17, 1.0, now);
        m40_width_record(&w, 5, -1.0, now);
        CHECK(t[5] == 0.0, "bad records ignored");
}

int main(void)
{
        test_decode_and_chunks();
        test_short_burst();
        test_prefill_only();
        test_held_and_limits();
        test_kv_and_undo();
        test_width_turns();
        test_width_choice();
        if (!failures)
                printf("ok: decode every step, short prompts whole, long ones chunked by "
                       "prefill_chunk, "
                       "max_batch_tokens when nothing decodes, held, limits, KV, undo, decode "
                       "width\n");
        return failures ? 1 : 0;
}
