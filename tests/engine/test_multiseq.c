/* test_multiseq.c - acceptance 3 of issue 3: 16 sequences of different prompt lengths run
 * together produce, each, exactly what that sequence produces alone (greedy), tokens and
 * final logits bit for bit. Together they share steps, batches (prefill chunks of
 * different sequences interleave, max_batch_tokens is small) and the KV page pool. Each
 * model is checked in both activation modes (engine.h), and together twice: with the
 * default decode width and with a fixed width of 5 (decode steps of 5 sequences taking
 * turns, engine.h).
 *
 * usage: test_multiseq MODEL.gguf [MODEL.gguf ...]; a model that does not exist is
 * skipped, and the test exits 77 when none does. Exit 0 pass, 1 fail. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "m40/error.h"
#include "tests/model_file.h"

#define N_SEQ 16
#define N_GEN 24

static uint32_t act;   /* the activation mode under test */
static uint32_t width; /* the decode width of the engine made next (engine.h) */

struct run {
        int32_t toks[N_GEN];
        uint32_t n;
        float *logits;
};

static int make_engine(const char *path, uint32_t max_seqs, uint32_t batch, struct m40_engine **e)
{
        struct m40_engine_limits lim = {
                .max_seqs = max_seqs,
                .max_ctx = 256,
                .max_batch_tokens = batch,
                .page_tokens = 16,
                .n_threads = 2,
                .act = act,
                .width = width,
        };
        char err[512];
        int r = m40_cpu_engine_new(test_model_file(path, err, sizeof(err)), &lim, e, err,
                                   sizeof(err));

        if (r)
                fprintf(stderr, "%s\n", err);
        return r;
}

static void prompt_of(int i, uint32_t n_vocab, int32_t *p, uint32_t *n)
{
        *n = (uint32_t)(1 + (i * 37) % 45); /* 1 .. 45 tokens, all different lengths */
        for (uint32_t k = 0; k < *n; k++)
                p[k] = (int32_t)(1 + ((uint32_t)i * 131u + k * 17u) % (n_vocab - 1));
}

/* run_all - admit the sequences [0, n) into e (all at once) and run them to the end. */
static int run_all(struct m40_engine *e, int first, int n, uint32_t n_vocab, struct run *out)
{
        uint32_t ids[N_SEQ];
        int32_t prompt[64];
        int active = n;

        for (int i = 0; i < n; i++) {
                struct m40_seq_params sp = {0};
                uint32_t np;

                prompt_of(first + i, n_vocab, prompt, &np);
                sp.prompt = prompt;
                sp.n_prompt = np;
                sp.sampling = m40_sampling_default();
                sp.stop = m40_stop_default();
                sp.stop.max_tokens = N_GEN;
                sp.stop.ignore_eos = true;
                sp.keep_logits = true;
                if (m40_engine_admit(e, &sp, &ids[i]))
                        return -1;
                out[i].n = 0;
        }
        while (active > 0) {
                struct m40_event ev[64];
                size_t k;

                if (m40_engine_step(e) < 0)
                        return -1;
                while ((k = m40_engine_events(e, ev, 64)) > 0)
                        for (size_t j = 0; j < k; j++) {
                                int i = 0;

                                while (i < n && ids[i] != ev[j].seq)
                                        i++;
                                if (i == n)
                                        return -1;
                                if (ev[j].token >= 0 && out[i].n < N_GEN)
                                        out[i].toks[out[i].n++] = ev[j].token;
                                if (ev[j].finish != M40_FINISH_NONE)
                                        active--;
                        }
        }
        for (int i = 0; i < n; i++)
                if (m40_engine_logits(e, ids[i], out[i].logits, n_vocab))
                        return -1;
        return 0;
}

/* together - the N_SEQ sequences in one engine of decode width w, against alone. */
static int together_check(const char *path, const struct m40_engine_model *info, struct run *alone,
                          uint32_t w)
{
        struct m40_engine *e = NULL;
        struct m40_engine_stats st;
        struct run together[N_SEQ];
        int bad = 0;

        width = w;
        if (make_engine(path, N_SEQ, 64, &e))
                return 1;
        for (int i = 0; i < N_SEQ; i++)
                together[i].logits = malloc(info->n_vocab * sizeof(float));
        if (run_all(e, 0, N_SEQ, info->n_vocab, together)) {
                fprintf(stderr, "FAIL: %s: the 16 sequences together did not run\n", path);
                return 1;
        }
        m40_engine_stats(e, &st);
        if (st.kv_pages_used != 0) {
                fprintf(stderr, "FAIL: %s: %u KV pages still used after all finished\n", path,
                        st.kv_pages_used);
                bad++;
        }
        for (int i = 0; i < N_SEQ; i++) {
                if (alone[i].n != N_GEN || together[i].n != N_GEN ||
                    memcmp(alone[i].toks, together[i].toks, sizeof(alone[i].toks))) {
                        fprintf(stderr, "FAIL: %s: sequence %d differs alone vs together\n", path,
                                i);
                        bad++;
                } else if (memcmp(alone[i].logits, together[i].logits,
                                  info->n_vocab * sizeof(float))) {
                        fprintf(stderr, "FAIL: %s: sequence %d final logits differ\n", path, i);
                        bad++;
                }
                free(together[i].logits);
        }
        /* a fixed width of 5: the 16 x 23 decode tokens take 16 x 23 / 5 steps, but for
         * those that steps with prompt tokens carry (all running sequences decode in
         * them), at most a step a prompt */
        if (w == 5 && st.steps < (uint64_t)N_SEQ * (N_GEN - 1) / 5 - N_SEQ) {
                fprintf(stderr, "FAIL: %s: width 5 took %llu steps\n", path,
                        (unsigned long long)st.steps);
                bad++;
        }
        printf("%s (%s, decode width %s): %d sequences x %d tokens, together == alone (tokens "
               "and logits bit-exact): %s (%llu steps together)\n",
               path, act == M40_ACT_F32 ? "f32" : "ggml", w ? "5" : "auto", N_SEQ, N_GEN,
               bad ? "NO" : "yes", (unsigned long long)st.steps);
        m40_engine_free(e);
        return bad;
}

static int check_model(const char *path)
{
        struct m40_engine *e = NULL;
        struct m40_engine_model info;
        struct run alone[N_SEQ];
        int bad = 0;

        width = M40_ENGINE_WIDTH_AUTO;
        if (make_engine(path, 1, 64, &e))
                return 1;
        m40_engine_model(e, &info);
        for (int i = 0; i < N_SEQ; i++) {
                alone[i].logits = malloc(info.n_vocab * sizeof(float));
                if (run_all(e, i, 1, info.n_vocab, &alone[i])) {
                        fprintf(stderr, "FAIL: %s: sequence %d alone did not run\n", path, i);
                        return 1;
                }
        }
        m40_engine_free(e);
        bad += together_check(path, &info, alone, M40_ENGINE_WIDTH_AUTO);
        bad += together_check(path, &info, alone, 5);
        for (int i = 0; i < N_SEQ; i++)
                free(alone[i].logits);
        return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
        int ran = 0, rc = 0;

        for (int i = 1; i < argc; i++) {
                if (access(argv[i], R_OK)) {
                        printf("skip %s: not present\n", argv[i]);
                        continue;
                }
                ran++;
                for (act = M40_ACT_F32; act <= M40_ACT_GGML; act++)
                        rc |= check_model(argv[i]);
        }
        return ran ? rc : 77;
}
