/* tests/gpu/test_cuda_engine.c - acceptance 2 of issue 6: whole models on the CUDA engine
 * against the CPU engine's float32 specification (M40_ACT_F32).
 *
 * For each GGUF named on the command line: one sequence (device argmax path) and a batch
 * of four sequences admitted together (prompts of 1, 5, 70 and 150 tokens: decode and
 * prefill in one step, chunks above the 64-column matmul tile, a prompt split across
 * steps by max_batch_tokens 128; host sampler path with kept logits), 64 greedy tokens
 * each. Checks: the same tokens as the CPU engine, and last-position logits within
 * LOGIT_TOL of the largest |logit| (FP32 sums in another order, over 64 tokens). Where
 * the tokens part, the test asks the CPU engine for its logits at that step: the two picks
 * must be within LOGIT_TOL there (a near-tie of a random model), else it fails.
 * Exits 77 without a GPU. M40_TEST_QUICK=1: 16 tokens (compute-sanitizer runs). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_engine.h"
#include "cuda/launch.h"
#include "gputest.h"

#define LOGIT_TOL 1e-3
#define MAX_SEQS  4

struct run {
        uint32_t n_gen[MAX_SEQS];
        int32_t toks[MAX_SEQS][128];
        float *logits[MAX_SEQS];
};

static int drive(struct m40_engine *e, uint32_t n_seqs, uint32_t s0, const uint32_t *lens,
                 uint32_t n_gen, bool keep, uint32_t n_vocab, struct run *out)
{
        uint32_t ids[MAX_SEQS];
        int32_t prompt[256];
        struct m40_event ev[64];
        int r;

        memset(out->n_gen, 0, sizeof(out->n_gen));
        for (uint32_t s = 0; s < n_seqs; s++) {
                struct m40_seq_params p = {.prompt = prompt, .n_prompt = lens[s]};

                for (uint32_t i = 0; i < lens[s]; i++)
                        prompt[i] = (int32_t)((i * 7919u + (s + s0) * 104729u + 13u) % n_vocab);
                p.sampling = m40_sampling_default();
                p.stop = m40_stop_default();
                p.stop.max_tokens = n_gen;
                p.stop.ignore_eos = true;
                p.keep_logits = keep;
                r = m40_engine_admit(e, &p, &ids[s]);
                if (r)
                        return r;
        }
        for (;;) {
                size_t n;

                r = m40_engine_step(e);
                if (r < 0)
                        return r;
                while ((n = m40_engine_events(e, ev, 64)) > 0)
                        for (size_t i = 0; i < n; i++)
                                for (uint32_t s = 0; s < n_seqs; s++)
                                        if (ev[i].seq == ids[s] && ev[i].token >= 0 &&
                                            out->n_gen[s] < 128)
                                                out->toks[s][out->n_gen[s]++] = ev[i].token;
                if (r == 0)
                        break;
        }
        for (uint32_t s = 0; s < n_seqs && keep; s++) {
                out->logits[s] = malloc(n_vocab * sizeof(float));
                if (!out->logits[s])
                        return -ENOMEM;
                r = m40_engine_logits(e, ids[s], out->logits[s], n_vocab);
                if (r)
                        return r;
        }
        return 0;
}

/* tie_gap - where the CUDA engine picked another token than the CPU engine at step d of
 * sequence s, how far below the CPU's pick the CUDA pick is in the CPU's own logits
 * (relative to max|logit|): a near-tie within LOGIT_TOL is FP32 rounding, not a bug. */
static double tie_gap(struct m40_engine *cpu, uint32_t s, uint32_t len, uint32_t d, int32_t tc,
                      int32_t tg, uint32_t n_vocab)
{
        static struct run r;
        double maxl = 1, gap = -1;

        if (drive(cpu, 1, s, &len, d + 1, true, n_vocab, &r) == 0 && r.n_gen[0] == d + 1) {
                for (uint32_t i = 0; i < n_vocab; i++)
                        maxl = fmax(maxl, fabs(r.logits[0][i]));
                gap = (r.logits[0][tc] - r.logits[0][tg]) / maxl;
        }
        free(r.logits[0]);
        memset(&r, 0, sizeof(r));
        return gap;
}

static void compare(struct m40_engine *cpu, const char *name, const char *what, uint32_t n_seqs,
                    const uint32_t *lens, const struct run *c, const struct run *g, bool keep,
                    uint32_t n_vocab)
{
        for (uint32_t s = 0; s < n_seqs; s++) {
                uint32_t same = 0;
                double maxd = 0, maxl = 1;

                while (same < c->n_gen[s] && same < g->n_gen[s] &&
                       c->toks[s][same] == g->toks[s][same])
                        same++;
                if (same < c->n_gen[s] && same < g->n_gen[s]) {
                        const double gap = tie_gap(cpu, s, lens[s], same, c->toks[s][same],
                                                   g->toks[s][same], n_vocab);

                        printf("%s %s seq %u: tokens differ at %u: cpu %d, cuda %d, %.3g apart "
                               "in the cpu logits (of max|logit|)\n",
                               name, what, s, same, c->toks[s][same], g->toks[s][same], gap);
                        CHECK(gap >= 0 && gap <= LOGIT_TOL,
                              "%s %s seq %u: tokens differ at %u and it is no near-tie", name, what,
                              s, same);
                        continue;
                }
                CHECK(same == c->n_gen[s] && same == g->n_gen[s],
                      "%s %s seq %u: %u cpu tokens, %u cuda", name, what, s, c->n_gen[s],
                      g->n_gen[s]);
                if (keep) {
                        for (uint32_t i = 0; i < n_vocab; i++) {
                                maxd = fmax(maxd, fabs(c->logits[s][i] - g->logits[s][i]));
                                maxl = fmax(maxl, fabs(c->logits[s][i]));
                        }
                        CHECK(maxd / maxl <= LOGIT_TOL, "%s %s seq %u: logits differ by %.3g", name,
                              what, s, maxd / maxl);
                }
                printf("%-28s %-6s seq %u: greedy %u/%u tokens match", name, what, s, same,
                       c->n_gen[s]);
                if (keep)
                        printf(", last logits max|d| %.3g (%.3g of max|logit| %.3g)", maxd,
                               maxd / maxl, maxl);
                printf("\n");
        }
}

static void free_run(struct run *r)
{
        for (int s = 0; s < MAX_SEQS; s++)
                free(r->logits[s]);
        memset(r, 0, sizeof(*r));
}

static void one_model(const char *path, uint32_t n_gen)
{
        const struct m40_engine_limits lim = {
                .max_seqs = MAX_SEQS,
                .max_ctx = 512,
                .max_batch_tokens = 128,
                .act = M40_ACT_F32,
        };
        const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        const uint32_t single[] = {20}, batch[] = {1, 5, 70, 150};
        struct m40_engine *cpu = NULL, *gpu = NULL;
        struct m40_engine_model mi;
        static struct run rc, rg;
        char err[512] = "";
        int r;

        r = m40_cpu_engine_new(path, &lim, &cpu, err, sizeof(err));
        if (r) {
                fail("%s: cpu engine: %s", path, err);
                return;
        }
        r = m40_cuda_engine_new(path, &lim, 0, &gpu, err, sizeof(err));
        if (r) {
                fail("%s: cuda engine: %d %s", path, r, err);
                m40_engine_free(cpu);
                return;
        }
        m40_engine_model(gpu, &mi);
        r = drive(cpu, 1, 0, single, n_gen, false, mi.n_vocab, &rc);
        r = r ? r : drive(gpu, 1, 0, single, n_gen, false, mi.n_vocab, &rg);
        if (r)
                fail("%s single: %d (%s) %s", name, r, m40_strerror(r), m40_cuda_last_error());
        else
                compare(cpu, name, "single", 1, single, &rc, &rg, false, mi.n_vocab);
        free_run(&rc);
        free_run(&rg);
        r = drive(cpu, MAX_SEQS, 0, batch, n_gen, true, mi.n_vocab, &rc);
        r = r ? r : drive(gpu, MAX_SEQS, 0, batch, n_gen, true, mi.n_vocab, &rg);
        if (r)
                fail("%s batch: %d (%s) %s", name, r, m40_strerror(r), m40_cuda_last_error());
        else
                compare(cpu, name, "batch", MAX_SEQS, batch, &rc, &rg, true, mi.n_vocab);
        free_run(&rc);
        free_run(&rg);
        m40_engine_free(gpu);
        m40_engine_free(cpu);
}

int main(int argc, char **argv)
{
        int code;
        struct m40_cuda_device *d = gpu_open(&code);

        if (!d)
                return code;
        m40_cuda_device_free(d);
        for (int i = 1; i < argc; i++) {
                FILE *f = fopen(argv[i], "rb");

                if (!f) {
                        printf("SKIP %s: not found\n", argv[i]);
                        continue;
                }
                fclose(f);
                one_model(argv[i], quick_mode() ? 16 : 64);
        }
        return finish();
}
