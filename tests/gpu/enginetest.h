/* tests/gpu/enginetest.h - what the whole-model GPU tests share (test_cuda_engine.c,
 * test_engine_churn.c, test_persist_step.c): the CPU reference engine and the CUDA engine
 * opened on one file with the same limits, and a greedy driver of a few sequences. Header-only;
 * include after gputest.h. */
#ifndef M40_TESTS_ENGINETEST_H
#define M40_TESTS_ENGINETEST_H

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/engine/cuda_engine.h"
#include "gputest.h"
#include "tests/model_file.h"

/* engines_open - *ret_cpu and *ret_gpu on path with lim: 0, or -1 after fail() with the
 * engine's message (nothing left open). */
static inline int engines_open(const char *path, const struct m40_engine_limits *lim,
                               struct m40_engine **ret_cpu, struct m40_engine **ret_gpu)
{
        struct m40_engine *cpu = NULL, *gpu = NULL;
        char err[512] = "";
        int r = m40_cpu_engine_new(test_model_file(path, err, sizeof(err)), lim, &cpu, err,
                                   sizeof(err));

        if (r) {
                fail("%s: cpu engine: %s", path, err);
                return -1;
        }
        r = m40_cuda_engine_new(test_model_file(path, err, sizeof(err)), lim, 0, &gpu, err,
                                sizeof(err));
        if (r) {
                fail("%s: cuda engine: %d %s", path, r, err);
                m40_engine_free(cpu);
                return -1;
        }
        *ret_cpu = cpu;
        *ret_gpu = gpu;
        return 0;
}

/* What engine_drive() collects: each sequence's tokens and, when asked, its last
 * logits (malloc'ed; engine_run_free()). */
#define ENGINE_RUN_SEQS 4
#define ENGINE_RUN_GEN  128
struct engine_run {
        uint32_t n_gen[ENGINE_RUN_SEQS];
        int32_t toks[ENGINE_RUN_SEQS][ENGINE_RUN_GEN];
        float *logits[ENGINE_RUN_SEQS];
};

/* engine_drive_with - admit n_seqs (<= ENGINE_RUN_SEQS) sequences into e, sequence s with
 * a prompt of lens[s] (<= 512) ids made from s + s0 and n_vocab, gen[s] tokens out
 * (ignore_eos), sampled with *smp (its seed + s for sequence s; NULL: greedy),
 * keep_logits when keep; step until all end; their tokens (and with keep their last
 * logits) into out. 0 or the engine's error. */
static inline int engine_drive_with(struct m40_engine *e, uint32_t n_seqs, uint32_t s0,
                                    const uint32_t *lens, const uint32_t *gen, bool keep,
                                    const struct m40_sampling *smp, uint32_t n_vocab,
                                    struct engine_run *out)
{
        static int32_t prompt[512];
        uint32_t ids[ENGINE_RUN_SEQS];
        struct m40_event ev[64];
        int r;

        memset(out, 0, sizeof(*out));
        if (n_seqs > ENGINE_RUN_SEQS)
                return -EINVAL;
        for (uint32_t s = 0; s < n_seqs; s++) {
                struct m40_seq_params p = {.prompt = prompt, .n_prompt = lens[s]};

                if (lens[s] > sizeof(prompt) / sizeof(prompt[0]))
                        return -EINVAL;
                for (uint32_t i = 0; i < lens[s]; i++)
                        prompt[i] = (int32_t)((i * 7919u + (s + s0) * 104729u + 13u) % n_vocab);
                p.sampling = smp ? *smp : m40_sampling_default();
                p.sampling.seed += s;
                p.stop = m40_stop_default();
                p.stop.max_tokens = gen[s];
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
                                            out->n_gen[s] < ENGINE_RUN_GEN)
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

/* engine_drive - engine_drive_with(), greedy. */
static inline int engine_drive(struct m40_engine *e, uint32_t n_seqs, uint32_t s0,
                               const uint32_t *lens, const uint32_t *gen, bool keep,
                               uint32_t n_vocab, struct engine_run *out)
{
        return engine_drive_with(e, n_seqs, s0, lens, gen, keep, NULL, n_vocab, out);
}

static inline void engine_run_free(struct engine_run *r)
{
        for (int s = 0; s < ENGINE_RUN_SEQS; s++) {
                free(r->logits[s]);
                r->logits[s] = NULL;
        }
}

#endif
