/* tests/gpu/test_engine_churn.c - whole models greedy on the CUDA engine against the CPU
 * engine (M40_ACT_F32) while sequences join and leave: issue 19's acceptance 1 ("batches 1,
 * 5, 8, 17, 64 with sequences joining and leaving").
 *
 * One script, run on both engines (64 slots, max_batch_tokens 256, the default prefill
 * chunk): sequence 0 alone for 2 steps (batch 1), then admissions up to 5, 8, 17 and 64
 * sequences two steps apart, and 5 more once 5 have left; prompts of 1..40 tokens (decode
 * and prefill in the same steps), the first 17 sequences generating CH_GEN tokens, the
 * others 4..39 so that they leave one after another; from step 10 on, some of those are
 * cancelled at steps of their own (ch_cancels(); one that has ended by then is passed
 * over, alike on both engines). Both engines plan the same steps
 * (daemon/engine/plan.c), so each sees the same batches; the test checks that the
 * batches 1, 5, 8, 17 and 64 (active sequences at a step) all occurred, that both
 * engines cancelled the same sequences after as many tokens, and that every sequence's
 * greedy tokens are the CPU engine's. Where they part, the CPU engine replays
 * that sequence alone to the step and the two picks must be within LOGIT_TOL of max|logit|
 * in its logits (a near-tie of FP32 sums in another order), else the test fails.
 *
 * Arguments: [--mode steps|persistent] GGUF files (the gpu suite passes stories260K and
 * the random 135M Q4_1 model); a missing one is skipped. --mode is the CUDA engine's
 * decode mode (engine.h, m40_engine_limits.mode; default: the build's default): with
 * persistent, its one-sequence steps run the persistent step kernel (issue 21,
 * acceptance 1: alone and with sequences joining, leaving and being cancelled), and a
 * file it refuses fails the test. Exits 77 without a GPU; M40_TEST_QUICK (the
 * sanitizers): the first model only. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/runtime/launch.h"
#include "enginetest.h"
#include "gputest.h"

#define LOGIT_TOL 1e-3
#define CH_SLOTS  64
#define CH_SEQS   69 /* 64 at once at most, 5 more after some left */
#define CH_GEN    40

struct churn {
        uint32_t n_gen[CH_SEQS];
        int32_t toks[CH_SEQS][CH_GEN];
        bool ended[CH_SEQS];     /* its finish event came */
        bool cancelled[CH_SEQS]; /* m40_engine_cancel() took it */
        bool seen[CH_SLOTS + 1]; /* batches (active sequences at a step) that occurred */
};

static uint32_t ch_len(uint32_t s)
{
        return 1 + (s * 13u) % 40u;
}

static uint32_t ch_max(uint32_t s)
{
        return s < 17 ? CH_GEN : 4 + (s * 5u) % (CH_GEN - 4);
}

/* Whether sequence s is cancelled, and at which step: a quarter of those that join after
 * the first 17, from step 10 (all 64 have joined) on. */
static bool ch_cancels(uint32_t s)
{
        return s >= 17 && s % 4 == 1;
}

static uint32_t ch_cancel_at(uint32_t s)
{
        return 10 + (s * 7u) % 23u;
}

/* The prompt of sequence s (the same formula as test_cuda_engine.c's). */
static void ch_prompt(uint32_t s, uint32_t len, uint32_t n_vocab, int32_t *out)
{
        for (uint32_t i = 0; i < len; i++)
                out[i] = (int32_t)((i * 7919u + s * 104729u + 13u) % n_vocab);
}

static int ch_admit(struct m40_engine *e, uint32_t s, uint32_t max_tokens, bool keep,
                    uint32_t n_vocab, uint32_t *ret_id)
{
        int32_t prompt[64];
        struct m40_seq_params p = {.prompt = prompt, .n_prompt = ch_len(s)};

        ch_prompt(s, p.n_prompt, n_vocab, prompt);
        p.sampling = m40_sampling_default();
        p.sampling.temperature = 0.0f;
        p.stop = m40_stop_default();
        p.stop.max_tokens = max_tokens;
        p.stop.ignore_eos = true;
        p.keep_logits = keep;
        return m40_engine_admit(e, &p, ret_id);
}

/* drain - e's events into out (sequence s is ids[s], s < admitted); the finishes. */
static uint32_t drain(struct m40_engine *e, const uint32_t *ids, uint32_t admitted,
                      struct churn *out)
{
        struct m40_event ev[64];
        uint32_t done = 0;

        for (size_t n; (n = m40_engine_events(e, ev, 64)) > 0;)
                for (size_t i = 0; i < n; i++)
                        for (uint32_t s = 0; s < admitted; s++) {
                                if (ev[i].seq != ids[s])
                                        continue;
                                if (ev[i].token >= 0 && out->n_gen[s] < CH_GEN)
                                        out->toks[s][out->n_gen[s]++] = ev[i].token;
                                if (ev[i].finish) {
                                        out->ended[s] = true;
                                        done++;
                                }
                        }
        return done;
}

/* run - the script on e; 0, or the engine's error. */
static int run(struct m40_engine *e, uint32_t n_vocab, struct churn *out)
{
        static const struct {
                uint32_t step, upto; /* admit up to `upto` sequences before step `step` */
        } plan[] = {{0, 1}, {2, 5}, {4, 8}, {6, 17}, {8, 64}};
        uint32_t ids[CH_SEQS], admitted = 0, done = 0, k = 0;

        memset(out, 0, sizeof(*out));
        for (uint32_t step = 0;; step++) {
                int r;

                while (k < sizeof(plan) / sizeof(plan[0]) && plan[k].step == step) {
                        for (; admitted < plan[k].upto; admitted++) {
                                r = ch_admit(e, admitted, ch_max(admitted), false, n_vocab,
                                             &ids[admitted]);
                                if (r)
                                        return r;
                        }
                        k++;
                }
                /* 5 join once 5 have left (the slots they freed) */
                if (admitted == 64 && done >= 5) {
                        for (; admitted < CH_SEQS; admitted++) {
                                r = ch_admit(e, admitted, ch_max(admitted), false, n_vocab,
                                             &ids[admitted]);
                                if (r)
                                        return r;
                        }
                }
                for (uint32_t s = 0; s < admitted; s++) {
                        if (!ch_cancels(s) || ch_cancel_at(s) != step || out->ended[s])
                                continue;
                        r = m40_engine_cancel(e, ids[s]);
                        if (r && r != -ENOENT)
                                return r;
                        out->cancelled[s] = r == 0;
                }
                done += drain(e, ids, admitted, out); /* the cancels' events */
                if (admitted - done <= CH_SLOTS)
                        out->seen[admitted - done] = true;
                r = m40_engine_step(e);
                if (r < 0)
                        return r;
                done += drain(e, ids, admitted, out);
                if (r == 0 && k == sizeof(plan) / sizeof(plan[0]) && admitted == CH_SEQS)
                        return 0;
                if (step > 10000)
                        return -ETIMEDOUT;
        }
}

/* tie_gap - sequence s alone on the CPU engine to its d-th token: how far below the
 * CPU's pick tc the CUDA pick tg is in the CPU's logits (of max|logit|); -1 on failure. */
static double tie_gap(struct m40_engine *cpu, uint32_t s, uint32_t d, int32_t tc, int32_t tg,
                      uint32_t n_vocab)
{
        float *l = malloc(n_vocab * sizeof(float));
        struct m40_event ev[64];
        uint32_t id, got = 0;
        double maxl = 1, gap = -1;
        int r;

        if (!l || ch_admit(cpu, s, d + 1, true, n_vocab, &id))
                goto out;
        do {
                r = m40_engine_step(cpu);
                for (size_t n; (n = m40_engine_events(cpu, ev, 64)) > 0;)
                        for (size_t i = 0; i < n; i++)
                                got += ev[i].seq == id && ev[i].token >= 0;
        } while (r > 0);
        if (r < 0 || got != d + 1 || m40_engine_logits(cpu, id, l, n_vocab))
                goto out;
        for (uint32_t i = 0; i < n_vocab; i++)
                maxl = fmax(maxl, fabs(l[i]));
        gap = (l[tc] - l[tg]) / maxl;
out:
        free(l);
        return gap;
}

/* The engine's load notes: whether the persistent mode refused the file. */
static void note(void *ctx, const char *msg)
{
        if (strstr(msg, "persistent mode"))
                snprintf(ctx, 320, "%s", msg);
}

static void one_model(const char *path, uint32_t mode)
{
        char refused[320] = "";
        const struct m40_engine_limits lim = {
                .max_seqs = CH_SLOTS,
                .max_ctx = 256,
                .max_batch_tokens = 256,
                .act = M40_ACT_F32,
                .mode = mode,
                .load_note = note,
                .load_ctx = refused,
        };
        const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        static struct churn c, g;
        static const uint32_t want[] = {1, 5, 8, 17, 64};
        struct m40_engine *cpu = NULL, *gpu = NULL;
        struct m40_engine_model mi;
        uint32_t exact = 0, ties = 0, tokens = 0, cancels = 0;
        int r;

        if (engines_open(path, &lim, &cpu, &gpu))
                return;
        if (mode == M40_ENGINE_MODE_PERSISTENT && refused[0]) {
                fail("%s: %s", name, refused);
                goto out;
        }
        m40_engine_model(gpu, &mi);
        r = run(cpu, mi.n_vocab, &c);
        if (r)
                fail("%s: cpu run: %d (%s)", name, r, m40_strerror(r));
        r = r ? r : run(gpu, mi.n_vocab, &g);
        if (r) {
                fail("%s: cuda run: %d (%s) %s", name, r, m40_strerror(r), m40_cuda_last_error());
                goto out;
        }
        for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
                CHECK(c.seen[want[i]] && g.seen[want[i]], "%s: batch %u did not occur", name,
                      want[i]);
        for (uint32_t s = 0; s < CH_SEQS; s++) {
                uint32_t same = 0;

                CHECK(c.cancelled[s] == g.cancelled[s], "%s seq %u: cancelled on %s only", name, s,
                      c.cancelled[s] ? "cpu" : "cuda");
                if (c.cancelled[s]) {
                        cancels++;
                        CHECK(c.n_gen[s] == g.n_gen[s] && c.n_gen[s] < ch_max(s),
                              "%s seq %u (cancelled): %u cpu tokens, %u cuda, below %u", name, s,
                              c.n_gen[s], g.n_gen[s], ch_max(s));
                } else {
                        CHECK(c.n_gen[s] == ch_max(s) && g.n_gen[s] == ch_max(s),
                              "%s seq %u: %u cpu tokens, %u cuda, want %u", name, s, c.n_gen[s],
                              g.n_gen[s], ch_max(s));
                }
                CHECK(c.ended[s] && g.ended[s], "%s seq %u: no finish event", name, s);
                while (same < c.n_gen[s] && same < g.n_gen[s] && c.toks[s][same] == g.toks[s][same])
                        same++;
                tokens += same;
                if (same == c.n_gen[s]) {
                        exact++;
                        continue;
                }
                if (same < g.n_gen[s]) {
                        const double gap =
                                tie_gap(cpu, s, same, c.toks[s][same], g.toks[s][same], mi.n_vocab);

                        printf("%s seq %u: tokens differ at %u: cpu %d, cuda %d, %.3g apart in "
                               "the cpu logits (of max|logit|)\n",
                               name, s, same, c.toks[s][same], g.toks[s][same], gap);
                        CHECK(gap >= 0 && gap <= LOGIT_TOL,
                              "%s seq %u: tokens differ at %u and it is no near-tie", name, s,
                              same);
                        ties++;
                }
        }
        printf("%-28s churn (%s): %u sequences (batches 1, 5, 8, 17, 64 seen, joins, leaves, "
               "%u cancelled), %u greedy-identical, %u parted at a near-tie; %u tokens matched\n",
               name, mode == M40_ENGINE_MODE_PERSISTENT ? "persistent" : "steps", CH_SEQS, cancels,
               exact, ties, tokens);
out:
        m40_engine_free(gpu);
        m40_engine_free(cpu);
}

int main(int argc, char **argv)
{
        const int quick = quick_mode();
        uint32_t mode = M40_ENGINE_MODE_DEFAULT;
        int code, n = 0, i = 1;
        struct m40_cuda_device *d;

        if (argc > 2 && !strcmp(argv[1], "--mode")) {
                if (!strcmp(argv[2], "persistent"))
                        mode = M40_ENGINE_MODE_PERSISTENT;
                else if (!strcmp(argv[2], "steps"))
                        mode = M40_ENGINE_MODE_STEPS;
                else {
                        fprintf(stderr, "%s: --mode takes steps or persistent, not %s\n", argv[0],
                                argv[2]);
                        return 1;
                }
                i = 3;
        }
        d = gpu_open(&code);
        if (!d)
                return code;
        m40_cuda_device_free(d);
        for (; i < argc && !(quick && n); i++) {
                FILE *f = fopen(argv[i], "rb");

                if (!f) {
                        printf("SKIP %s: not found\n", argv[i]);
                        continue;
                }
                fclose(f);
                one_model(argv[i], mode);
                n++;
        }
        return finish();
}
