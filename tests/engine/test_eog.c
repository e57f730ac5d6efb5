/* test_eog.c - the engine's end-of-generation ids (m40_engine_limits.eog): their
 * resolution at creation (m40_seq_limits_eog: the file's EOS/EOT when none are given, a bad
 * id rejected), the stop they cause in m40_seq_append (not under ignore_eos; stop ids
 * always), and the CPU engine ending a greedy sequence at an id of the set that is not the
 * file's EOS (SmolLM2's set is {0, 2, 4}, its EOS only 2).
 *
 * usage: test_eog MODEL (a small GGUF, m40-mkmodel's). Exit 0 pass, 1 fail. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/seqs.h"
#include "m40/error.h"
#include "tests/check.h"
#include "tests/model_file.h"

#define N_VOCAB 100

static void test_limits(void)
{
        struct m40_engine_limits lim = {0};

        CHECK(m40_seq_limits_eog(&lim, N_VOCAB, 2, -1) == 0 && lim.n_eog == 1 && lim.eog[0] == 2,
              "EOS alone: %u ids", lim.n_eog);
        lim.n_eog = 0;
        CHECK(m40_seq_limits_eog(&lim, N_VOCAB, 2, 2) == 0 && lim.n_eog == 1,
              "EOS == EOT counted twice");
        lim.n_eog = 0;
        CHECK(m40_seq_limits_eog(&lim, N_VOCAB, 2, 7) == 0 && lim.n_eog == 2 && lim.eog[1] == 7,
              "EOS and EOT: %u ids", lim.n_eog);
        lim.n_eog = 0;
        CHECK(m40_seq_limits_eog(&lim, N_VOCAB, -1, N_VOCAB) == 0 && lim.n_eog == 0,
              "no valid EOS/EOT gave %u ids", lim.n_eog);
        lim = (struct m40_engine_limits){.n_eog = 3, .eog = {0, 2, 4}};
        CHECK(m40_seq_limits_eog(&lim, N_VOCAB, 9, 9) == 0 && lim.n_eog == 3 && lim.eog[2] == 4,
              "a given set was changed");
        lim.eog[1] = N_VOCAB;
        CHECK(m40_seq_limits_eog(&lim, N_VOCAB, 9, 9) == -EINVAL, "an id past n_vocab accepted");
        lim.eog[1] = -1;
        CHECK(m40_seq_limits_eog(&lim, N_VOCAB, 9, 9) == -EINVAL, "a negative id accepted");
        lim.n_eog = M40_MAX_EOG_IDS + 1;
        CHECK(m40_seq_limits_eog(&lim, N_VOCAB, 9, 9) == -EINVAL, "too many ids accepted");
}

static void test_append(void)
{
        struct m40_engine_limits lim = {.max_seqs = 1, .max_ctx = 64, .n_eog = 3, .eog = {0, 2, 4}};
        struct m40_seq *seqs = calloc(1, sizeof(*seqs)), *s = NULL;
        const int32_t prompt[] = {5, 6};
        struct m40_seq_params p = {.prompt = prompt, .n_prompt = 2};
        uint32_t id = 0;
        uint64_t order = 0;

        p.sampling = m40_sampling_default();
        p.stop = m40_stop_default();
        p.stop.max_tokens = 10;
        CHECK(seqs && m40_seq_admit(seqs, &lim, N_VOCAB, &p, &id, &order, &s) == 0, "admit");
        if (!s)
                goto out;
        CHECK(m40_seq_append(s, &lim, 7) == M40_FINISH_NONE, "7 ended the sequence");
        CHECK(m40_seq_append(s, &lim, 4) == M40_FINISH_EOS, "4 (in the set) did not end it");
        s->state = M40_SEQ_DONE;
        p.stop.ignore_eos = true;
        p.stop.n_ids = 1;
        p.stop.ids[0] = 9;
        CHECK(m40_seq_admit(seqs, &lim, N_VOCAB, &p, &id, &order, &s) == 0, "admit 2");
        CHECK(m40_seq_append(s, &lim, 0) == M40_FINISH_NONE &&
                      m40_seq_append(s, &lim, 4) == M40_FINISH_NONE,
              "ignore_eos: an end-of-generation id ended the sequence");
        CHECK(m40_seq_append(s, &lim, 9) == M40_FINISH_EOS, "ignore_eos: a stop id did not end it");
out:
        m40_seq_slots_free(seqs, 1, NULL);
}

/* run - one greedy sequence of n tokens in a new CPU engine with end-of-generation ids
 * eog (n_eog of them; 0: the file's); its tokens into out, the count returned (-1 on an
 * error), the finish reason in *finish. */
static int run(const char *path, const int32_t *eog, uint32_t n_eog, bool ignore_eos, int32_t *out,
               uint32_t n, uint32_t *finish)
{
        struct m40_engine_limits lim = {.max_seqs = 1, .max_ctx = 64, .n_threads = 1};
        const int32_t prompt[] = {1, 17, 42, 5};
        struct m40_seq_params p = {.prompt = prompt, .n_prompt = 4};
        struct m40_engine *e = NULL;
        struct m40_event ev[8];
        char err[512] = "";
        uint32_t id;
        int got = 0;

        if (n_eog)
                memcpy(lim.eog, eog, n_eog * sizeof(*eog));
        lim.n_eog = n_eog;
        if (m40_cpu_engine_new(test_model_file(path, err, sizeof(err)), &lim, &e, err,
                               sizeof(err))) {
                fprintf(stderr, "%s\n", err);
                return -1;
        }
        p.sampling = m40_sampling_default();
        p.stop = m40_stop_default();
        p.stop.max_tokens = n;
        p.stop.ignore_eos = ignore_eos;
        *finish = M40_FINISH_NONE;
        if (m40_engine_admit(e, &p, &id))
                got = -1;
        while (got >= 0 && *finish == M40_FINISH_NONE && m40_engine_step(e) >= 0) {
                size_t k = m40_engine_events(e, ev, 8);
                for (size_t i = 0; i < k; i++) {
                        if (ev[i].token >= 0 && (uint32_t)got < n)
                                out[got++] = ev[i].token;
                        *finish = ev[i].finish;
                }
        }
        m40_engine_free(e);
        return got;
}

static void test_engine(const char *path)
{
        int32_t ref[8], toks[8], bad[] = {0, 1 << 30};
        uint32_t finish;
        struct m40_engine *e = NULL;
        struct m40_engine_limits lim = {.max_seqs = 1, .max_ctx = 64, .n_eog = 2};
        char err[512] = "";
        int n = run(path, NULL, 0, true, ref, 8, &finish);

        CHECK(n == 8 && finish == M40_FINISH_LENGTH, "reference run: %d tokens, finish %u", n,
              finish);
        if (n != 8)
                return;
        /* the third greedy token ends generation when it is in the set */
        n = run(path, (const int32_t[]){ref[2] == 0 ? 1 : 0, ref[2]}, 2, false, toks, 8, &finish);
        CHECK(n == 3 && finish == M40_FINISH_EOS && !memcmp(toks, ref, sizeof(int32_t) * 3),
              "set {.., %d}: %d tokens, finish %u (want 3, EOS)", ref[2], n, finish);
        n = run(path, (const int32_t[]){ref[2]}, 1, true, toks, 8, &finish);
        CHECK(n == 8 && finish == M40_FINISH_LENGTH && !memcmp(toks, ref, sizeof(ref)),
              "ignore_eos: %d tokens, finish %u (want 8, length)", n, finish);
        memcpy(lim.eog, bad, sizeof(bad));
        CHECK(m40_cpu_engine_new(test_model_file(path, err, sizeof(err)), &lim, &e, err,
                                 sizeof(err)) == -EINVAL &&
                      !e && strstr(err, "end-of-generation"),
              "an id past n_vocab: engine made (%s)", err);
        m40_engine_free(e);
}

int main(int argc, char **argv)
{
        if (argc != 2) {
                fprintf(stderr, "usage: test_eog MODEL\n");
                return 1;
        }
        test_limits();
        test_append();
        test_engine(argv[1]);
        if (!failures)
                printf("end-of-generation checks passed\n");
        return failures ? 1 : 0;
}
