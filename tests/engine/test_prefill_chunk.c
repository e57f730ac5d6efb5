/* test_prefill_chunk.c - the step policy of engine.h on the CPU engine, through the engine
 * interface. A long prompt that arrives while three sequences decode is prefilled in
 * chunks of prefill_chunk tokens (7 and 32 here, neither a multiple of the 16-position KV
 * page): in every step until its first token, each decoding sequence gets exactly one
 * token and the step takes at most prefill_chunk prompt tokens (the engine's prompt_tokens
 * count), ceil(prompt / chunk) steps in all. Its greedy continuation and final logits are
 * bit for bit those of the same prompt prefilled whole in one step, alone, and the
 * decoders' tokens are those of a run without the newcomer. Each model in both activation
 * modes (engine.h).
 *
 * usage: test_prefill_chunk MODEL.gguf [MODEL.gguf ...]; a model that does not exist is
 * skipped, and the test exits 77 when none does. Exit 0 pass, 1 fail. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "m40/error.h"
#include "tests/check.h"
#include "tests/model_file.h"

#define N_DEC     3   /* sequences decoding when the long prompt arrives */
#define LONG      150 /* tokens of the long prompt */
#define N_GEN     16  /* tokens the long prompt generates */
#define DEC_GEN   40  /* tokens each decoder generates: outlasts the long prefill */
#define MAX_STEPS 400

static uint32_t act; /* the activation mode under test */

struct run {
        int32_t toks[N_DEC + 1][DEC_GEN];
        uint32_t n[N_DEC + 1];
        float *logits; /* (n_vocab) the long prompt's last */
};

static struct m40_engine *engine(const char *path, uint32_t chunk)
{
        struct m40_engine_limits lim = {
                .max_seqs = N_DEC + 1,
                .max_ctx = 256,
                .page_tokens = 16,
                .max_batch_tokens = 256,
                .prefill_chunk = chunk,
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

/* admit - sequence i: decoders 0..N_DEC-1 with short prompts, N_DEC the long one. */
static int admit(struct m40_engine *e, uint32_t n_vocab, int i, uint32_t *id)
{
        int32_t prompt[LONG];
        struct m40_seq_params p = {0};
        int r;

        p.n_prompt = i < N_DEC ? 3 + 2 * (uint32_t)i : LONG;
        for (uint32_t k = 0; k < p.n_prompt; k++)
                prompt[k] = (int32_t)(1 + ((uint32_t)i * 131u + k * 17u) % (n_vocab - 1));
        p.prompt = prompt;
        p.sampling = m40_sampling_default();
        p.stop = m40_stop_default();
        p.stop.max_tokens = i < N_DEC ? DEC_GEN : N_GEN;
        p.stop.ignore_eos = true;
        p.keep_logits = i == N_DEC;
        r = m40_engine_admit(e, &p, id);
        if (r)
                fprintf(stderr, "admit %d: %s\n", i, m40_strerror(r));
        return r;
}

/* drain - the step's events into out; per-sequence token counts of this step in got. */
static int drain(struct m40_engine *e, const uint32_t *ids, struct run *out, uint32_t *got,
                 int *active)
{
        struct m40_event ev[64];
        size_t k;

        memset(got, 0, (N_DEC + 1) * sizeof(*got));
        while ((k = m40_engine_events(e, ev, 64)) > 0) {
                for (size_t j = 0; j < k; j++) {
                        int i = 0;

                        while (i <= N_DEC && ids[i] != ev[j].seq)
                                i++;
                        if (i > N_DEC || ev[j].token < 0)
                                return -1;
                        got[i]++;
                        if (out->n[i] < DEC_GEN)
                                out->toks[i][out->n[i]++] = ev[j].token;
                        if (ev[j].finish != M40_FINISH_NONE)
                                (*active)--;
                }
        }
        return 0;
}

/* run - the decoders (when with_dec), one step, then the long prompt (when with_long)
 * under prefill_chunk chunk (the long prompt alone: prefilled whole in its first step), to
 * the end; checks the policy's promises step by step. */
static int run(const char *path, uint32_t chunk, bool with_dec, bool with_long, struct run *out)
{
        struct m40_engine *e = engine(path, chunk);
        struct m40_engine_model info;
        struct m40_engine_stats st0, st1;
        uint32_t ids[N_DEC + 1], got[N_DEC + 1], prefill_steps = 0;
        int active = 0, rc = -1;

        if (!e)
                return -1;
        m40_engine_model(e, &info);
        memset(out->n, 0, sizeof(out->n));
        memset(ids, 0xff, sizeof(ids)); /* no sequence */
        for (int i = 0; with_dec && i < N_DEC; i++, active++)
                if (admit(e, info.n_vocab, i, &ids[i]))
                        goto out;
        if (with_dec && (m40_engine_step(e) < 0 || drain(e, ids, out, got, &active)))
                goto out;
        if (with_long) {
                if (admit(e, info.n_vocab, N_DEC, &ids[N_DEC]))
                        goto out;
                active++;
        }
        for (int t = 0; active > 0; t++) {
                m40_engine_stats(e, &st0);
                if (t == MAX_STEPS || m40_engine_step(e) < 0 || drain(e, ids, out, got, &active))
                        goto out;
                m40_engine_stats(e, &st1);
                if (!with_long || out->n[N_DEC] > 1 || (out->n[N_DEC] == 1 && !got[N_DEC]))
                        continue;
                /* a step of the long prompt's prefill (the last one gives its first token) */
                prefill_steps++;
                for (int i = 0; with_dec && i < N_DEC; i++)
                        CHECK(got[i] == 1, "%s chunk %u: prefill step %u: decoder %d got %u tokens",
                              path, chunk, prefill_steps, i, got[i]);
                CHECK(st1.prompt_tokens - st0.prompt_tokens <= (with_dec ? chunk : LONG),
                      "%s chunk %u: prefill step %u took %llu prompt tokens", path, chunk,
                      prefill_steps, (unsigned long long)(st1.prompt_tokens - st0.prompt_tokens));
        }
        if (with_long) {
                const uint32_t want = with_dec ? (LONG + chunk - 1) / chunk : 1;

                CHECK(prefill_steps == want, "%s chunk %u: the prompt took %u steps, want %u", path,
                      chunk, prefill_steps, want);
                if (m40_engine_logits(e, ids[N_DEC], out->logits, info.n_vocab))
                        goto out;
        }
        rc = 0;
out:
        m40_engine_free(e);
        return rc;
}

static int check_model(const char *path)
{
        static const uint32_t chunks[] = {7, 32};
        struct run whole = {0}, dec_only = {0}, mixed = {0};
        struct m40_engine *e = engine(path, 0);
        struct m40_engine_model info;
        int before = failures;

        if (!e)
                return 1;
        m40_engine_model(e, &info);
        m40_engine_free(e);
        whole.logits = malloc(info.n_vocab * sizeof(float));
        mixed.logits = malloc(info.n_vocab * sizeof(float));
        if (!whole.logits || !mixed.logits || run(path, 256, false, true, &whole) ||
            run(path, 256, true, false, &dec_only)) {
                fprintf(stderr, "FAIL: %s: the reference runs did not run\n", path);
                return 1;
        }
        for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
                if (run(path, chunks[c], true, true, &mixed)) {
                        fprintf(stderr, "FAIL: %s chunk %u: did not run\n", path, chunks[c]);
                        failures++;
                        continue;
                }
                CHECK(mixed.n[N_DEC] == N_GEN && !memcmp(mixed.toks[N_DEC], whole.toks[N_DEC],
                                                         N_GEN * sizeof(int32_t)),
                      "%s chunk %u: the chunked prompt's tokens differ from the whole one's", path,
                      chunks[c]);
                CHECK(!memcmp(mixed.logits, whole.logits, info.n_vocab * sizeof(float)),
                      "%s chunk %u: the chunked prompt's final logits differ", path, chunks[c]);
                for (int i = 0; i < N_DEC; i++)
                        CHECK(mixed.n[i] == DEC_GEN && !memcmp(mixed.toks[i], dec_only.toks[i],
                                                               sizeof(mixed.toks[i])),
                              "%s chunk %u: decoder %d's tokens changed", path, chunks[c], i);
        }
        printf("%s (%s): a %u-token prompt in chunks of 7 and 32 beside %d decoders == whole "
               "(tokens and logits bit-exact), a decode token every step: %s\n",
               path, act == M40_ACT_F32 ? "f32" : "ggml", LONG, N_DEC,
               failures == before ? "yes" : "NO");
        free(whole.logits);
        free(mixed.logits);
        return failures == before ? 0 : 1;
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
