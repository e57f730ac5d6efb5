/* test_hold.c - m40_engine_hold() on the CPU engine: a held sequence produces nothing and
 * takes no part in steps while the others advance; held before its prompt, in the middle
 * of a chunked prompt or while decoding, then released, it produces exactly the tokens
 * and final logits (bit for bit) of a run where nothing was held; a step in which every
 * active sequence is held does nothing and is not counted; a held sequence keeps its KV
 * pages, cancel still ends it and frees them; hold of a sequence that is not active is
 * -ENOENT. Each model in both activation modes (engine.h).
 *
 * usage: test_hold MODEL.gguf [MODEL.gguf ...]; a model that does not exist is skipped,
 * and the test exits 77 when none does. Exit 0 pass, 1 fail. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "m40/error.h"
#include "tests/check.h"
#include "tests/model_file.h"

#define N_SEQ     4
#define N_GEN     20
#define MAX_STEPS 200

static uint32_t act; /* the activation mode under test */

struct run {
        int32_t toks[N_GEN];
        uint32_t n, finish;
        float *logits; /* (n_vocab) of the last token */
};

static struct m40_engine *engine(const char *path)
{
        struct m40_engine_limits lim = {
                .max_seqs = N_SEQ,
                .max_ctx = 128,
                .page_tokens = 16,
                .max_batch_tokens = 8, /* the 30-token prompt takes several chunks */
                .n_threads = 2,
                .act = act,
        };
        struct m40_engine *e = NULL;
        char err[512];

        if (m40_cpu_engine_new(test_model_file(path, err, sizeof(err)), &lim, &e, err,
                               sizeof(err))) {
                fprintf(stderr, "%s\n", err);
                return NULL;
        }
        return e;
}

/* The prompts: seq 2's is long enough to be prefilled in chunks. */
static uint32_t prompt_of(int i, uint32_t n_vocab, int32_t *p)
{
        static const uint32_t lens[N_SEQ] = {5, 3, 30, 1};

        for (uint32_t k = 0; k < lens[i]; k++)
                p[k] = (int32_t)(1 + ((uint32_t)i * 131u + k * 17u) % (n_vocab - 1));
        return lens[i];
}

static int admit_all(struct m40_engine *e, uint32_t n_vocab, uint32_t *ids)
{
        for (int i = 0; i < N_SEQ; i++) {
                int32_t prompt[64];
                struct m40_seq_params p = {0};
                int r;

                p.n_prompt = prompt_of(i, n_vocab, prompt);
                p.prompt = prompt;
                p.sampling = m40_sampling_default();
                if (i == 1) { /* a seeded draw: holding must not disturb its generator */
                        p.sampling.temperature = 0.9f;
                        p.sampling.top_k = 20;
                        p.sampling.seed = 1234;
                }
                p.stop = m40_stop_default();
                p.stop.max_tokens = N_GEN;
                p.stop.ignore_eos = true;
                p.keep_logits = true;
                r = m40_engine_admit(e, &p, &ids[i]);
                if (r) {
                        fprintf(stderr, "admit %d: %s\n", i, m40_strerror(r));
                        return r;
                }
        }
        return 0;
}

/* held - whether the schedule holds sequence i during step t: seq 0 before its prompt, seq
 * 2 in the middle of its chunked prompt, seq 1 while decoding, and every sequence in steps
 * 12..14. Seq 3 is otherwise never held. */
static bool held(int i, int t)
{
        if (t >= 12 && t <= 14)
                return true;
        switch (i) {
        case 0:
                return t <= 5;
        case 1:
                return t >= 3 && t <= 8;
        case 2:
                return t >= 2 && t <= 4;
        default:
                return false;
        }
}

/* run_all - run the N_SEQ sequences together to the end, applying the hold schedule when
 * with_holds, and check what a hold promises on the way. */
static int run_all(const char *path, bool with_holds, struct run *out)
{
        struct m40_engine *e = engine(path);
        struct m40_engine_model info;
        struct m40_engine_stats st0, st1;
        uint32_t ids[N_SEQ];
        int active = N_SEQ, rc = 1;

        if (!e)
                return 1;
        m40_engine_model(e, &info);
        if (admit_all(e, info.n_vocab, ids))
                goto out;
        for (int t = 0; active > 0; t++) {
                uint32_t got[N_SEQ] = {0}, is_held = 0, n_active = 0;
                const bool fin3 = out[3].finish != 0, started3 = out[3].n > 0;
                struct m40_event ev[16];
                size_t n;
                int r;

                if (t == MAX_STEPS) {
                        fprintf(stderr, "%s: no end after %d steps\n", path, t);
                        goto out;
                }
                for (int i = 0; with_holds && i < N_SEQ; i++) {
                        r = m40_engine_hold(e, ids[i], held(i, t));
                        if (out[i].finish) {
                                CHECK(r == -ENOENT, "hold of finished seq %d: %d", i, r);
                        } else {
                                CHECK(r == 0, "hold seq %d step %d: %d", i, t, r);
                                n_active++;
                                is_held += held(i, t);
                        }
                }
                m40_engine_stats(e, &st0);
                r = m40_engine_step(e);
                m40_engine_stats(e, &st1);
                if (r < 0) {
                        fprintf(stderr, "step %d: %s\n", t, m40_strerror(r));
                        goto out;
                }
                active = r;
                while ((n = m40_engine_events(e, ev, 16)) > 0) {
                        for (size_t k = 0; k < n; k++) {
                                int i = (int)(ev[k].seq - ids[0]);

                                if (i < 0 || i >= N_SEQ || ev[k].token < 0) {
                                        fprintf(stderr, "unexpected event seq %u token %d\n",
                                                ev[k].seq, ev[k].token);
                                        goto out;
                                }
                                got[i]++;
                                if (out[i].n < N_GEN)
                                        out[i].toks[out[i].n++] = ev[k].token;
                                if (ev[k].finish) {
                                        out[i].finish = ev[k].finish;
                                        out[i].logits = malloc(info.n_vocab * sizeof(float));
                                        if (!out[i].logits ||
                                            m40_engine_logits(e, ev[k].seq, out[i].logits,
                                                              info.n_vocab))
                                                goto out;
                                }
                        }
                }
                if (!with_holds)
                        continue;
                for (int i = 0; i < N_SEQ; i++)
                        CHECK(!held(i, t) || got[i] == 0, "step %d: held seq %d produced %u", t, i,
                              got[i]);
                /* seq 3, never held alone, decodes a token in every step it is not held */
                CHECK(held(3, t) || fin3 || !started3 || got[3] == 1,
                      "step %d: seq 3 got %u tokens", t, got[3]);
                CHECK(t < 6 || out[3].n > 0, "step %d: seq 3 has not started", t);
                if (is_held == n_active) { /* every active sequence held: nothing happens */
                        CHECK(st1.steps == st0.steps && st1.prompt_tokens == st0.prompt_tokens &&
                                      st1.generated_tokens == st0.generated_tokens &&
                                      st1.decode_seconds == st0.decode_seconds &&
                                      st1.prompt_seconds == st0.prompt_seconds,
                              "step %d: a step of held sequences counted", t);
                        CHECK(st1.kv_pages_used == st0.kv_pages_used && st1.kv_pages_used > 0,
                              "step %d: held sequences keep their pages (%u, %u)", t,
                              st0.kv_pages_used, st1.kv_pages_used);
                        CHECK(r == (int)n_active, "step %d: returned %d, %u active", t, r,
                              n_active);
                } else {
                        CHECK(st1.steps == st0.steps + 1, "step %d: not counted", t);
                }
        }
        m40_engine_stats(e, &st1);
        CHECK(st1.kv_pages_used == 0 && st1.active_seqs == 0, "at the end: %u pages, %u active",
              st1.kv_pages_used, st1.active_seqs);
        rc = 0;
out:
        m40_engine_free(e);
        return rc;
}

/* test_prompt_untouched - a sequence held before its first step has none of its prompt
 * fed and holds no page; once released it is prefilled. */
static void test_prompt_untouched(const char *path)
{
        struct m40_engine *e = engine(path);
        struct m40_engine_model info;
        struct m40_engine_stats st;
        struct m40_seq_params p = {0};
        int32_t prompt[64];
        uint32_t id;

        if (!e) {
                failures++;
                return;
        }
        m40_engine_model(e, &info);
        p.n_prompt = prompt_of(2, info.n_vocab, prompt);
        p.prompt = prompt;
        p.sampling = m40_sampling_default();
        p.stop = m40_stop_default();
        p.stop.max_tokens = 2;
        CHECK(m40_engine_admit(e, &p, &id) == 0, "admit");
        CHECK(m40_engine_hold(e, id, true) == 0, "hold");
        CHECK(m40_engine_hold(e, id, true) == 0, "hold twice");
        for (int t = 0; t < 3; t++)
                CHECK(m40_engine_step(e) == 1, "held step returns the active count");
        m40_engine_stats(e, &st);
        CHECK(st.steps == 0 && st.prompt_tokens == 0 && st.kv_pages_used == 0,
              "held from admission: %llu steps, %llu prompt tokens, %u pages",
              (unsigned long long)st.steps, (unsigned long long)st.prompt_tokens, st.kv_pages_used);
        CHECK(m40_engine_hold(e, id, false) == 0, "release");
        CHECK(m40_engine_step(e) == 1, "released step");
        m40_engine_stats(e, &st);
        CHECK(st.steps == 1 && st.prompt_tokens == 8, "released: %llu steps, %llu prompt tokens",
              (unsigned long long)st.steps, (unsigned long long)st.prompt_tokens);
        m40_engine_free(e);
}

/* test_cancel_held - cancel ends a held sequence and frees its pages; hold of a cancelled,
 * finished or unknown id is -ENOENT. */
static void test_cancel_held(const char *path)
{
        struct m40_engine *e = engine(path);
        struct m40_engine_model info;
        struct m40_engine_stats st;
        struct m40_event ev[16];
        uint32_t ids[N_SEQ], pages_before, cancelled = 0;
        size_t n;
        int r;

        if (!e) {
                failures++;
                return;
        }
        m40_engine_model(e, &info);
        if (admit_all(e, info.n_vocab, ids)) {
                failures++;
                goto out;
        }
        for (int t = 0; t < 6; t++) /* every prompt in, every sequence decoding */
                m40_engine_step(e);
        while (m40_engine_events(e, ev, 16) > 0)
                ;
        CHECK(m40_engine_hold(e, ids[0], true) == 0, "hold seq 0");
        m40_engine_step(e);
        while ((n = m40_engine_events(e, ev, 16)) > 0)
                for (size_t k = 0; k < n; k++)
                        CHECK(ev[k].seq != ids[0], "held seq 0 produced a token");
        m40_engine_stats(e, &st);
        pages_before = st.kv_pages_used;
        CHECK(m40_engine_cancel(e, ids[0]) == 0, "cancel of a held sequence");
        while ((n = m40_engine_events(e, ev, 16)) > 0)
                for (size_t k = 0; k < n; k++)
                        if (ev[k].seq == ids[0] && ev[k].token == -1 &&
                            ev[k].finish == M40_FINISH_CANCEL)
                                cancelled++;
        CHECK(cancelled == 1, "one cancel event for the held sequence, got %u", cancelled);
        m40_engine_stats(e, &st);
        CHECK(st.active_seqs == N_SEQ - 1 && st.kv_pages_used < pages_before,
              "cancel freed its slot and pages: %u active, %u -> %u pages", st.active_seqs,
              pages_before, st.kv_pages_used);
        CHECK(m40_engine_hold(e, ids[0], false) == -ENOENT, "release of a cancelled sequence");
        CHECK(m40_engine_hold(e, ids[0], true) == -ENOENT, "hold of a cancelled sequence");
        CHECK(m40_engine_hold(e, 999, true) == -ENOENT, "hold of an unknown id");
        while ((r = m40_engine_step(e)) > 0)
                while (m40_engine_events(e, ev, 16) > 0)
                        ;
        CHECK(r == 0, "the others finish: %d", r);
        CHECK(m40_engine_hold(e, ids[1], true) == -ENOENT, "hold of a finished sequence");
        m40_engine_stats(e, &st);
        CHECK(st.kv_pages_used == 0 && st.active_seqs == 0, "every page back: %u pages, %u active",
              st.kv_pages_used, st.active_seqs);
out:
        m40_engine_free(e);
}

static void check_model(const char *path)
{
        struct run ref[N_SEQ] = {0}, got[N_SEQ] = {0};
        struct m40_engine *e = engine(path);
        struct m40_engine_model info;
        int before = failures;

        if (!e) {
                failures++;
                return;
        }
        m40_engine_model(e, &info);
        m40_engine_free(e);
        if (run_all(path, false, ref) || run_all(path, true, got)) {
                failures++;
        } else {
                for (int i = 0; i < N_SEQ; i++) {
                        CHECK(ref[i].n == N_GEN && got[i].n == N_GEN &&
                                      !memcmp(ref[i].toks, got[i].toks, sizeof(ref[i].toks)),
                              "seq %d: tokens differ from the run without holds (%u, %u)", i,
                              ref[i].n, got[i].n);
                        CHECK(ref[i].finish == M40_FINISH_LENGTH &&
                                      got[i].finish == M40_FINISH_LENGTH,
                              "seq %d: finish %u, %u", i, ref[i].finish, got[i].finish);
                        CHECK(ref[i].logits && got[i].logits &&
                                      !memcmp(ref[i].logits, got[i].logits,
                                              info.n_vocab * sizeof(float)),
                              "seq %d: final logits differ", i);
                }
        }
        for (int i = 0; i < N_SEQ; i++) {
                free(ref[i].logits);
                free(got[i].logits);
        }
        test_prompt_untouched(path);
        test_cancel_held(path);
        printf("%s (%s): held sequences wait and then give the unheld tokens: %s\n", path,
               act == M40_ACT_F32 ? "f32" : "ggml", failures == before ? "yes" : "NO");
}

int main(int argc, char **argv)
{
        int ran = 0;

        for (int i = 1; i < argc; i++) {
                if (access(argv[i], R_OK)) {
                        printf("skip %s: not present\n", argv[i]);
                        continue;
                }
                ran++;
                for (act = M40_ACT_F32; act <= M40_ACT_GGML; act++)
                        check_model(argv[i]);
        }
        if (!ran)
                return 77;
        return failures ? 1 : 0;
}
