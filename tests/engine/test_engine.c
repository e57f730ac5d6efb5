/* test_engine.c - the engine interface on the CPU engine: admission errors, KV page
 * accounting through admit/step/finish/cancel (every page comes back), KV exhaustion,
 * KV reservation at admission (kv_reserve: admit, hold, release, -ENOSPC),
 * stop conditions (max tokens, stop ids, EOS), and the sampler (same seed -> same tokens,
 * top-k 1 == greedy, penalties change the choice, filters keep the draw in the top set).
 *
 * usage: test_engine MODEL.gguf (a small synthetic model). Exit 0 pass, 1 fail. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "m40/error.h"
#include "tests/check.h"
#include "tests/model_file.h"

static const char *model;

static struct m40_engine *engine(uint32_t max_seqs, uint64_t kv_bytes)
{
        struct m40_engine_limits lim = {
                .max_seqs = max_seqs,
                .max_ctx = 128,
                .kv_bytes = kv_bytes,
                .page_tokens = 16,
                .max_batch_tokens = 64,
                .n_threads = 2,
        };
        struct m40_engine *e = NULL;
        char err[512];

        if (m40_cpu_engine_new(test_model_file(model, err, sizeof(err)), &lim, &e, err,
                               sizeof(err))) {
                fprintf(stderr, "%s\n", err);
                exit(1);
        }
        return e;
}

static struct m40_seq_params params(const int32_t *prompt, uint32_t n, uint32_t max_tokens)
{
        struct m40_seq_params p = {0};

        p.prompt = prompt;
        p.n_prompt = n;
        p.sampling = m40_sampling_default();
        p.stop = m40_stop_default();
        p.stop.max_tokens = max_tokens;
        p.stop.ignore_eos = true;
        return p;
}

static uint32_t pages_for(uint32_t positions)
{
        return (positions + 15) / 16;
}

/* drain - read all events; count tokens per id (< 64) and remember finish reasons. */
static void drain(struct m40_engine *e, uint32_t *ntok, uint32_t *why)
{
        struct m40_event ev[32];
        size_t n;

        while ((n = m40_engine_events(e, ev, 32)) > 0)
                for (size_t i = 0; i < n; i++) {
                        if (ev[i].seq < 64 && ev[i].token >= 0)
                                ntok[ev[i].seq]++;
                        if (ev[i].seq < 64 && ev[i].finish)
                                why[ev[i].seq] = ev[i].finish;
                }
}

static void test_admission(void)
{
        struct m40_engine *e = engine(2, 0);
        int32_t prompt[200] = {1, 2, 3};
        struct m40_seq_params p = params(prompt, 3, 4);
        uint32_t id;

        CHECK(m40_engine_admit(e, &p, &id) == 0 && id == 0, "first admit");
        CHECK(m40_engine_admit(e, &p, &id) == 0 && id == 1, "second admit");
        CHECK(m40_engine_admit(e, &p, &id) == -EBUSY, "third admit: slots full");
        p.n_prompt = 0;
        m40_engine_cancel(e, 0);
        CHECK(m40_engine_admit(e, &p, &id) == -EINVAL, "empty prompt");
        p.n_prompt = 3;
        prompt[1] = 1 << 30;
        CHECK(m40_engine_admit(e, &p, &id) == -EINVAL, "token out of vocabulary");
        prompt[1] = 2;
        p.n_prompt = 129;
        CHECK(m40_engine_admit(e, &p, &id) == -E2BIG, "prompt longer than max_ctx");
        p.n_prompt = 3;
        p.stop.n_strings = 1;
        strcpy(p.stop.strings[0], "x");
        CHECK(m40_engine_admit(e, &p, &id) == M40_EUNSUPPORTED, "stop strings need a detokenizer");
        CHECK(m40_engine_cancel(e, 77) == -ENOENT, "cancel of an unknown id");
        m40_engine_free(e);
        printf("admission errors: done\n");
}

static void test_kv_accounting(void)
{
        struct m40_engine *e = engine(4, 0);
        int32_t prompt[64];
        const uint32_t lens[4] = {5, 20, 33, 1};
        uint32_t ids[4], ntok[64] = {0}, why[64] = {0};
        struct m40_engine_stats st;
        int r;

        for (int i = 0; i < 64; i++)
                prompt[i] = 1 + i;
        for (int i = 0; i < 4; i++) {
                struct m40_seq_params p = params(prompt, lens[i], 40);

                CHECK(m40_engine_admit(e, &p, &ids[i]) == 0, "admit %d", i);
        }
        m40_engine_stats(e, &st);
        CHECK(st.kv_pages_used == 0 && st.active_seqs == 4, "nothing held before the first step");
        for (int k = 1; k <= 3; k++) {
                uint32_t want = 0;

                r = m40_engine_step(e);
                CHECK(r == 4, "step %d: %d active", k, r);
                drain(e, ntok, why);
                for (int i = 0; i < 4; i++) /* fed: prompt + tokens generated before this step */
                        want += pages_for(lens[i] + (uint32_t)k - 1);
                m40_engine_stats(e, &st);
                CHECK(st.kv_pages_used == want, "step %d: %u pages used, want %u", k,
                      st.kv_pages_used, want);
        }
        CHECK(m40_engine_cancel(e, ids[2]) == 0, "cancel");
        drain(e, ntok, why);
        CHECK(why[ids[2]] == M40_FINISH_CANCEL, "cancel event");
        m40_engine_stats(e, &st);
        CHECK(st.kv_pages_used == pages_for(5 + 2) + pages_for(20 + 2) + pages_for(1 + 2),
              "cancel returns that sequence's pages (%u used)", st.kv_pages_used);
        while ((r = m40_engine_step(e)) > 0)
                drain(e, ntok, why);
        drain(e, ntok, why);
        m40_engine_stats(e, &st);
        CHECK(r == 0 && st.active_seqs == 0, "all finished");
        CHECK(st.kv_pages_used == 0, "every page returned (%u still used)", st.kv_pages_used);
        CHECK(ntok[ids[0]] == 40 && why[ids[0]] == M40_FINISH_LENGTH, "max_tokens: %u tokens",
              ntok[ids[0]]);
        CHECK(ntok[ids[2]] == 3, "cancelled after 3 tokens (%u)", ntok[ids[2]]);
        m40_engine_free(e);
        printf("kv accounting through admit/step/cancel/finish: done\n");
}

static void test_kv_exhaustion(void)
{
        struct m40_engine *e = engine(1, 0);
        int32_t prompt[100];
        uint32_t a, b, ntok[64] = {0}, why[64] = {0};
        struct m40_engine_stats st;

        m40_engine_stats(e, &st);
        m40_engine_free(e);
        e = engine(2, st.kv_page_bytes * 10); /* 10 pages of 16: a 160-position budget */
        m40_engine_stats(e, &st);
        CHECK(st.kv_pages_total == 10, "10 pages (%u)", st.kv_pages_total);

        for (int i = 0; i < 100; i++)
                prompt[i] = 1 + i % 50;
        struct m40_seq_params p = params(prompt, 100, 20);
        CHECK(m40_engine_admit(e, &p, &a) == 0, "admit a");
        p.n_prompt = 60;
        CHECK(m40_engine_admit(e, &p, &b) == 0, "admit b");
        while (m40_engine_step(e) > 0)
                drain(e, ntok, why);
        drain(e, ntok, why);
        m40_engine_stats(e, &st);
        CHECK(why[a] == M40_FINISH_LENGTH || why[a] == M40_FINISH_KV, "a ends");
        CHECK(why[b] == M40_FINISH_KV, "b runs out of KV pages (finish %u)", why[b]);
        CHECK(st.kv_pages_used == 0, "pages back after KV exhaustion (%u)", st.kv_pages_used);
        m40_engine_free(e);
        printf("kv exhaustion: finish reason %u, pages returned: done\n", why[b]);
}

/* used - the KV pages in use now. */
static uint32_t used(struct m40_engine *e)
{
        struct m40_engine_stats st;

        m40_engine_stats(e, &st);
        return st.kv_pages_used;
}

/* test_kv_reserve - kv_reserve (core.h): admission takes every page the sequence may
 * need or fails with -ENOSPC changing nothing; holding gives back the unfilled pages and
 * releasing takes them again or fails with -ENOSPC (still held); a reserved sequence
 * never ends with M40_FINISH_KV, a growing one beside it does. */
static void test_kv_reserve(void)
{
        struct m40_engine *e = engine(1, 0);
        struct m40_engine_stats st;
        int32_t prompt[100];
        uint32_t a, b, c, g, ntok[64] = {0}, why[64] = {0};
        struct m40_seq_params p;

        m40_engine_stats(e, &st);
        m40_engine_free(e);
        e = engine(3, st.kv_page_bytes * 10); /* 10 pages of 16 positions */
        for (int i = 0; i < 100; i++)
                prompt[i] = 1 + i % 50;
        p = params(prompt, 20, 40);
        p.kv_reserve = true;
        CHECK(m40_engine_kv_need(e, &p) == pages_for(60), "need: %u", m40_engine_kv_need(e, &p));
        p.stop.max_tokens = 0;
        CHECK(m40_engine_kv_need(e, &p) == pages_for(128), "need up to the context");
        p.stop.max_tokens = 40;
        CHECK(m40_engine_admit(e, &p, &a) == 0 && m40_engine_admit(e, &p, &b) == 0, "admit a, b");
        CHECK(used(e) == 8 && m40_engine_kv_pages(e, a) == 4, "reserved at admission (%u used)",
              used(e));
        CHECK(m40_engine_admit(e, &p, &c) == -ENOSPC && used(e) == 8, "c does not fit now");
        m40_engine_stats(e, &st);
        CHECK(st.active_seqs == 2, "a refused admission takes no slot (%u)", st.active_seqs);
        for (int k = 0; k < 3; k++) /* prompts in, 3 tokens each: 22 positions filled */
                CHECK(m40_engine_step(e) == 2, "step %d", k);
        drain(e, ntok, why);
        CHECK(used(e) == 8, "reserved tables do not grow (%u)", used(e));
        CHECK(m40_engine_hold(e, a, true) == 0 && m40_engine_kv_pages(e, a) == 2 && used(e) == 6,
              "held a keeps its 2 filled pages (%d, %u used)", m40_engine_kv_pages(e, a), used(e));
        CHECK(m40_engine_admit(e, &p, &c) == 0 && used(e) == 10, "c takes the freed pages");
        CHECK(m40_engine_hold(e, a, false) == -ENOSPC && used(e) == 10, "a cannot go on yet");
        CHECK(m40_engine_step(e) == 3, "step with a held");
        drain(e, ntok, why);
        CHECK(ntok[a] == 3, "held a produced nothing (%u)", ntok[a]);
        CHECK(m40_engine_cancel(e, c) == 0 && m40_engine_hold(e, a, false) == 0 &&
                      m40_engine_kv_pages(e, a) == 4 && used(e) == 8,
              "a takes its pages again once c is gone (%u used)", used(e));
        CHECK(m40_engine_kv_pages(e, c) == -ENOENT, "no pages for an ended sequence");
        p = params(prompt, 100, 20); /* growing: needs 8 pages, 2 are free */
        CHECK(m40_engine_admit(e, &p, &g) == 0, "admit a growing sequence");
        while (m40_engine_step(e) > 0)
                drain(e, ntok, why);
        drain(e, ntok, why);
        CHECK(why[a] == M40_FINISH_LENGTH && ntok[a] == 40 && why[b] == M40_FINISH_LENGTH &&
                      ntok[b] == 40,
              "reserved sequences run to max_tokens (%u %u, %u %u)", why[a], ntok[a], why[b],
              ntok[b]);
        CHECK(why[g] == M40_FINISH_KV, "the growing one runs out of pages (finish %u)", why[g]);
        CHECK(used(e) == 0, "every page back (%u)", used(e));
        m40_engine_free(e);
        printf("kv reservation at admission, hold and release: done\n");
}

static void gen(struct m40_engine *e, const struct m40_sampling *s, int32_t *out, uint32_t n,
                const int32_t *stop_ids, uint32_t n_stop, uint32_t *ret_n, uint32_t *ret_why)
{
        int32_t prompt[4] = {1, 17, 42, 7};
        struct m40_seq_params p = params(prompt, 4, n);
        struct m40_event ev[8];
        uint32_t id, k = 0;
        size_t m;

        p.sampling = *s;
        p.stop.n_ids = n_stop;
        if (n_stop)
                memcpy(p.stop.ids, stop_ids, n_stop * sizeof(int32_t));
        if (m40_engine_admit(e, &p, &id))
                exit(1);
        *ret_why = 0;
        while (m40_engine_step(e) > 0 || !*ret_why)
                while ((m = m40_engine_events(e, ev, 8)) > 0)
                        for (size_t i = 0; i < m; i++) {
                                if (ev[i].token >= 0)
                                        out[k++] = ev[i].token;
                                if (ev[i].finish)
                                        *ret_why = ev[i].finish;
                        }
        *ret_n = k;
}

static bool memchr_i32(const int32_t *a, uint32_t n, int32_t v)
{
        for (uint32_t i = 0; i < n; i++)
                if (a[i] == v)
                        return true;
        return false;
}

static int32_t e_eos(struct m40_engine *e)
{
        struct m40_engine_model m;

        m40_engine_model(e, &m);
        return m.eos_id;
}

static void test_sampling(void)
{
        struct m40_engine *e = engine(1, 0);
        struct m40_sampling g = m40_sampling_default(), s = g;
        int32_t a[32], b[32], c[32], d[32];
        uint32_t na, nb, nc, nd, why;

        gen(e, &g, a, 32, NULL, 0, &na, &why);
        CHECK(na == 32 && why == M40_FINISH_LENGTH, "greedy 32 tokens");
        s.temperature = 1.0f;
        s.top_k = 1;
        gen(e, &s, b, 32, NULL, 0, &nb, &why);
        CHECK(nb == 32 && !memcmp(a, b, sizeof(a)), "top-k 1 at temperature 1 equals greedy");
        s.top_k = 0;
        s.temperature = 1.5f;
        s.seed = 1234;
        gen(e, &s, b, 32, NULL, 0, &nb, &why);
        gen(e, &s, c, 32, NULL, 0, &nc, &why);
        CHECK(!memcmp(b, c, sizeof(b)), "same seed, same tokens");
        s.seed = 99;
        gen(e, &s, d, 32, NULL, 0, &nd, &why);
        CHECK(memcmp(b, d, sizeof(b)), "another seed, other tokens");
        /* a stop id: the first token of the greedy run not seen before position k >= 3 */
        uint32_t k = 3;
        while (k < 31 && (memchr_i32(a, k, a[k]) || a[k] == e_eos(e)))
                k++;
        gen(e, &g, b, 32, &a[k], 1, &nb, &why);
        CHECK(nb == k + 1 && why == M40_FINISH_EOS && b[k] == a[k],
              "stop id ends after token %u (%u)", k + 1, nb);
        s = g;
        s.repeat_penalty = 100.0f;
        s.penalty_last_n = -1;
        gen(e, &s, b, 32, NULL, 0, &nb, &why);
        for (uint32_t i = 0; i < nb; i++)
                for (uint32_t j = 0; j < i; j++)
                        CHECK(b[i] != b[j] || i == j, "a huge repeat penalty repeats no token");
        m40_engine_free(e);
        printf("sampling through the engine: done\n");
}

/* the chain on synthetic logits */
static void test_sampler_chain(void)
{
        struct m40_sampler_scratch sc;
        float logits[100];
        struct m40_sampling s = m40_sampling_default();
        uint64_t rng = m40_sampler_seed(7);
        int hits[100] = {0};

        m40_sampler_scratch_init(&sc, 100);
        for (int i = 0; i < 100; i++)
                logits[i] = (float)(i % 10); /* ids 9, 19, ... 99 share the top logit */
        CHECK(m40_sampler_sample(&s, &rng, logits, NULL, 0, &sc) == 9, "greedy: lowest id of ties");
        s.temperature = 1.0f;
        s.top_k = 3;
        for (int i = 0; i < 2000; i++)
                hits[m40_sampler_sample(&s, &rng, logits, NULL, 0, &sc)]++;
        CHECK(hits[9] + hits[19] + hits[29] == 2000, "top-k 3 keeps the 3 best");
        memset(hits, 0, sizeof(hits));
        s.top_k = 0;
        s.min_p = 0.5f; /* keeps logit 9 (p ratio 1) only: logit 8 has ratio e^-1 < 0.5 */
        for (int i = 0; i < 2000; i++)
                hits[m40_sampler_sample(&s, &rng, logits, NULL, 0, &sc)]++;
        int top = 0;
        for (int i = 9; i < 100; i += 10)
                top += hits[i];
        CHECK(top == 2000, "min-p 0.5 keeps only the top logit");
        s.min_p = 0.0f;
        s.top_p = 0.5f; /* the 10 top ids hold 1/(1+e^-1+...) ~ 0.63 of the mass */
        memset(hits, 0, sizeof(hits));
        for (int i = 0; i < 2000; i++)
                hits[m40_sampler_sample(&s, &rng, logits, NULL, 0, &sc)]++;
        top = 0;
        for (int i = 9; i < 100; i += 10)
                top += hits[i];
        CHECK(top == 2000, "top-p 0.5 keeps only the top logit's ids");
        CHECK(hits[9] > 100 && hits[79] > 100, "top-p draws spread over the kept ids");
        s = m40_sampling_default();
        s.presence_penalty = 0.5f;
        int32_t hist[1] = {9};
        CHECK(m40_sampler_sample(&s, &rng, logits, hist, 1, &sc) == 19, "presence penalty");
        m40_sampler_scratch_done(&sc);
        printf("sampler chain on synthetic logits: done\n");
}

/* test_act_modes - both activation modes run (and differ, the Q4_K model being quantized);
 * an unknown mode is refused with -EINVAL. */
static void test_act_modes(void)
{
        static const int32_t prompt[] = {1, 5, 100, 200, 17};
        float lg[2][512];
        int r;

        for (uint32_t act = M40_ACT_F32; act <= M40_ACT_GGML; act++) {
                struct m40_engine_limits lim = {.max_seqs = 1, .n_threads = 1, .act = act};
                struct m40_seq_params p = params(prompt, 5, 1);
                struct m40_engine *e = NULL;
                struct m40_event ev[4];
                uint32_t id;
                char err[256];

                p.keep_logits = true;
                r = m40_cpu_engine_new(test_model_file(model, err, sizeof(err)), &lim, &e, err,
                                       sizeof(err));
                CHECK(r == 0, "engine in mode %u: %s", act, err);
                if (r)
                        continue;
                CHECK(m40_engine_admit(e, &p, &id) == 0, "admit in mode %u", act);
                while (m40_engine_step(e) > 0)
                        while (m40_engine_events(e, ev, 4))
                                ;
                CHECK(m40_engine_logits(e, id, lg[act - M40_ACT_F32], 512) == 0,
                      "logits in mode %u", act);
                m40_engine_free(e);
        }
        CHECK(memcmp(lg[0], lg[1], sizeof(lg[0])) != 0, "f32 and ggml modes give the same logits");
        {
                struct m40_engine_limits lim = {.act = 3};
                struct m40_engine *e = NULL;
                char err[256] = "";

                r = m40_cpu_engine_new(test_model_file(model, err, sizeof(err)), &lim, &e, err,
                                       sizeof(err));
                CHECK(r == -EINVAL && e == NULL && err[0], "unknown activation mode: %d", r);
        }
        printf("activation modes f32 and ggml run; an unknown one is refused\n");
}

int main(int argc, char **argv)
{
        if (argc < 2)
                return 77;
        model = argv[1];
        test_act_modes();
        test_sampler_chain();
        test_admission();
        test_kv_accounting();
        test_kv_exhaustion();
        test_kv_reserve();
        test_sampling();
        printf("%s\n", failures ? "FAILED" : "all passed");
        return failures ? 1 : 0;
}
