/* m40-gen - run an engine without the daemon: prompt token ids in, generated ids out.
 *
 *   m40-gen -m FILE (-p TEXT | --tokens 1,2,3[;4,5,...]) -n N [--temp T --top-k K
 *           --top-p P --min-p P --repeat-penalty R --seed S] [--threads N]
 *           [--act f32|ggml] [--print-tokens] [--logits-out FILE] [--backend cpu|cuda]
 *           [--ignore-eos] [--stats] [--vram-limit-mb N] [--mode steps|persistent]
 *
 * Owns nothing but its command line: it admits the prompt as one sequence into the CPU
 * engine, steps until it finishes, prints the generated ids (--print-tokens: space
 * separated on one line) and writes the final-position logits as raw float32
 * (--logits-out: the logits that produced the last generated token). --stats prints
 * prompt and generation speed to stderr. --act picks the CPU engine's activation mode
 * (engine.h: ggml, the default, or f32, the CUDA kernels' specification). --tokens may
 * hold several prompts separated by ';': each runs alone, one after the other, in the
 * same engine (the model is loaded once), printing one line of ids (and one --stats
 * line) each; --logits-out then holds one row of logits per prompt, in order. -p TEXT
 * tokenizes TEXT with the model's vocabulary (BOS as the model asks, special tokens not
 * parsed, as llama.cpp) and prints the generated text (streamed detokenization) unless
 * --print-tokens asks for ids. --backend cuda runs the CUDA engine on GPU 0 (f32
 * activations); --vram-limit-mb caps the device memory it takes (engine.h; a model that
 * does not fit fails with what it needs and what is available; the CPU engine ignores
 * it); --mode picks how the CUDA engine runs decode steps (engine.h, enum
 * m40_engine_mode; the CPU engine ignores it). Generation ends at the vocabulary's
 * end-of-generation tokens (as in m40d and llama.cpp; the file's EOS/EOT when it has no vocabulary
 * we read) unless --ignore-eos. Exit status: 0 done, 1 runtime failure, 2 usage error. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "m40-version.h"
#include "m40/error.h"
#include "model/gguf.h"
#include "text/detok.h"
#include "text/vocab.h"
#ifdef M40_HAVE_CUDA_ENGINE
#include "cuda/engine/cuda_engine.h"
#endif

#define MAX_PROMPT  65536 /* token ids over all prompts */
#define MAX_PROMPTS 1024

static void usage(FILE *f)
{
        fprintf(f, "usage: m40-gen -m FILE (-p TEXT | --tokens 1,2,3[;4,5,...]) -n N [--temp T]\n"
                   "               [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R]\n"
                   "               [--seed S] [--threads N] [--act f32|ggml] [--print-tokens]\n"
                   "               [--logits-out FILE] [--backend cpu|cuda] [--ignore-eos]\n"
                   "               [--stats] [--vram-limit-mb N] [--mode steps|persistent]\n"
                   "       m40-gen --help | --version\n");
}

/* parse_tokens - "1,2,3;4,5" into out (ids of every prompt, back to back) and start[]
 * (prompt i is out[start[i] .. start[i + 1])); *n_prompts set. */
static int parse_tokens(const char *s, int32_t *out, uint32_t *start, uint32_t *n_prompts)
{
        uint32_t n = 0, np = 0;
        char *end;

        start[0] = 0;
        for (;;) {
                long v;

                errno = 0;
                v = strtol(s, &end, 10);
                if (end == s || errno || v < 0 || v > INT32_MAX || n == MAX_PROMPT)
                        return -EINVAL;
                out[n++] = (int32_t)v;
                s = end;
                if (*s == ',' || *s == ' ') {
                        s++;
                } else if (*s == ';' || !*s) {
                        if (np == MAX_PROMPTS)
                                return -EINVAL;
                        start[++np] = n;
                        if (!*s)
                                break;
                        s++;
                } else {
                        return -EINVAL;
                }
        }
        *n_prompts = np;
        return 0;
}

static double now_s(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct run {
        uint32_t id, n_gen;
        int32_t *gen; /* (n_predict) */
        double t0, t_first, t1;
};

/* run_one - admit sp, step until it finishes, collect its tokens. Returns 0 or 1 (printed). */
static int run_one(struct m40_engine *e, const struct m40_seq_params *sp, long n_predict,
                   struct run *ru)
{
        int r = m40_engine_admit(e, sp, &ru->id);

        ru->n_gen = 0;
        ru->t_first = 0;
        if (r) {
                fprintf(stderr, "m40-gen: cannot admit the prompt: %s\n", m40_strerror(r));
                return 1;
        }
        ru->t0 = now_s();
        for (bool done = false; !done;) {
                struct m40_event ev[8];
                size_t n;

                r = m40_engine_step(e);
                if (r < 0) {
                        fprintf(stderr, "m40-gen: step failed: %s\n", m40_strerror(r));
                        return 1;
                }
                while ((n = m40_engine_events(e, ev, 8)) > 0) {
                        for (size_t i = 0; i < n; i++) {
                                if (ev[i].token >= 0 && ru->n_gen < (uint32_t)n_predict) {
                                        if (!ru->n_gen)
                                                ru->t_first = now_s();
                                        ru->gen[ru->n_gen++] = ev[i].token;
                                }
                                if (ev[i].finish != M40_FINISH_NONE)
                                        done = true;
                        }
                }
        }
        ru->t1 = now_s();
        return 0;
}

/* write_logits - append sequence id's kept logits (n_vocab floats) to f. */
static int write_logits(struct m40_engine *e, uint32_t id, uint32_t n_vocab, FILE *f,
                        const char *path)
{
        float *lg = malloc((size_t)n_vocab * sizeof(float));
        int rc = 1;

        if (!lg || m40_engine_logits(e, id, lg, n_vocab) ||
            fwrite(lg, sizeof(float), n_vocab, f) != n_vocab)
                fprintf(stderr, "m40-gen: cannot write %s: %s\n", path, strerror(errno));
        else
                rc = 0;
        free(lg);
        return rc;
}

/* load_vocab - the tokenizer of the parsed GGUF g in *ret; prints why on failure when
 * verbose. */
static int load_vocab(const struct m40_gguf *g, struct m40_vocab **ret, bool verbose)
{
        char err[M40_GGUF_ERRLEN] = "";
        int r = m40_vocab_new(g, ret, err, sizeof(err));

        if (r && verbose)
                fprintf(stderr, "m40-gen: %s\n", err[0] ? err : m40_strerror(r));
        return r;
}

/* tokenize_prompt - TEXT as the single prompt out[0..), start[] as parse_tokens fills it. */
static int tokenize_prompt(const struct m40_vocab *v, const char *text, int32_t *out,
                           uint32_t *start, uint32_t *ret_n)
{
        size_t n = 0;
        int r = m40_vocab_tokenize(v, text, strlen(text), M40_TOKENIZE_ADD_SPECIAL, out, MAX_PROMPT,
                                   &n);

        if (r || n == 0) {
                fprintf(stderr, "m40-gen: cannot tokenize -p: %s\n",
                        r ? m40_strerror(r) : "empty prompt");
                return r ? r : -EINVAL;
        }
        start[0] = 0;
        start[1] = (uint32_t)n;
        *ret_n = 1;
        return 0;
}

/* print_text - the text of ids, streamed through the detokenizer as m40d does, and a
 * newline. */
static int print_text(const struct m40_vocab *v, const int32_t *ids, uint32_t n)
{
        struct m40_detok *d = NULL;
        const char *t;
        size_t len;
        int r = m40_detok_new(v, 0, &d);

        for (uint32_t i = 0; !r && i < n; i++) {
                r = m40_detok_push(d, ids[i], &t, &len);
                if (!r)
                        fwrite(t, 1, len, stdout);
        }
        if (!r)
                r = m40_detok_flush(d, &t, &len);
        if (!r)
                fwrite(t, 1, len, stdout);
        m40_detok_free(d);
        printf("\n");
        if (r)
                fprintf(stderr, "m40-gen: detokenize: %s\n", m40_strerror(r));
        return fflush(stdout) || r ? -EIO : 0;
}

/* The engine's load notes (e.g. that the persistent mode does not take the model). */
static void engine_note(void *ctx, const char *msg)
{
        (void)ctx;
        fprintf(stderr, "m40-gen: %s\n", msg);
}

int main(int argc, char **argv)
{
        enum {
                O_TOKENS = 256,
                O_TEMP,
                O_TOPK,
                O_TOPP,
                O_MINP,
                O_REP,
                O_SEED,
                O_PRINT,
                O_LOGITS,
                O_BACKEND,
                O_THREADS,
                O_ACT,
                O_MODE,
                O_IGNORE_EOS,
                O_STATS,
                O_VRAM,
                O_VERSION
        };
        static const struct option opts[] = {
                {"model", required_argument, 0, 'm'},
                {"prompt", required_argument, 0, 'p'},
                {"n-predict", required_argument, 0, 'n'},
                {"tokens", required_argument, 0, O_TOKENS},
                {"temp", required_argument, 0, O_TEMP},
                {"top-k", required_argument, 0, O_TOPK},
                {"top-p", required_argument, 0, O_TOPP},
                {"min-p", required_argument, 0, O_MINP},
                {"repeat-penalty", required_argument, 0, O_REP},
                {"seed", required_argument, 0, O_SEED},
                {"print-tokens", no_argument, 0, O_PRINT},
                {"logits-out", required_argument, 0, O_LOGITS},
                {"backend", required_argument, 0, O_BACKEND},
                {"threads", required_argument, 0, O_THREADS},
                {"act", required_argument, 0, O_ACT},
                {"mode", required_argument, 0, O_MODE},
                {"ignore-eos", no_argument, 0, O_IGNORE_EOS},
                {"stats", no_argument, 0, O_STATS},
                {"vram-limit-mb", required_argument, 0, O_VRAM},
                {"help", no_argument, 0, 'h'},
                {"version", no_argument, 0, O_VERSION},
                {0, 0, 0, 0},
        };
        static int32_t prompt[MAX_PROMPT];
        static uint32_t start[MAX_PROMPTS + 1];
        struct m40_seq_params sp = {0};
        struct m40_engine_limits lim = {.load_note = engine_note};
        struct m40_engine_model info;
        struct m40_engine *e = NULL;
        const char *model = NULL, *text = NULL, *tokens = NULL, *logits_out = NULL;
        const char *backend = "cpu";
        struct m40_vocab *vocab = NULL;
        struct m40_gguf *g = NULL;
        bool print = false, stats = false;
        long n_predict = 16;
        char err[512] = "";
        struct run ru = {0};
        FILE *lf = NULL;
        uint32_t n_prompts = 0;
        int c, r, rc = 1;

        sp.sampling = m40_sampling_default();
        sp.stop = m40_stop_default();
        while ((c = getopt_long(argc, argv, "m:p:n:h", opts, NULL)) != -1) {
                switch (c) {
                case 'm':
                        model = optarg;
                        break;
                case 'p':
                        text = optarg;
                        break;
                case 'n':
                        n_predict = strtol(optarg, NULL, 10);
                        break;
                case O_TOKENS:
                        tokens = optarg;
                        break;
                case O_TEMP:
                        sp.sampling.temperature = strtof(optarg, NULL);
                        break;
                case O_TOPK:
                        sp.sampling.top_k = (int32_t)strtol(optarg, NULL, 10);
                        break;
                case O_TOPP:
                        sp.sampling.top_p = strtof(optarg, NULL);
                        break;
                case O_MINP:
                        sp.sampling.min_p = strtof(optarg, NULL);
                        break;
                case O_REP:
                        sp.sampling.repeat_penalty = strtof(optarg, NULL);
                        break;
                case O_SEED:
                        sp.sampling.seed = strtoull(optarg, NULL, 0);
                        break;
                case O_PRINT:
                        print = true;
                        break;
                case O_LOGITS:
                        logits_out = optarg;
                        break;
                case O_BACKEND:
                        backend = optarg;
                        break;
                case O_THREADS:
                        lim.n_threads = (uint32_t)strtoul(optarg, NULL, 10);
                        break;
                case O_ACT:
                        if (strcmp(optarg, "f32") == 0) {
                                lim.act = M40_ACT_F32;
                        } else if (strcmp(optarg, "ggml") == 0) {
                                lim.act = M40_ACT_GGML;
                        } else {
                                fprintf(stderr, "m40-gen: --act wants f32 or ggml\n");
                                return 2;
                        }
                        break;
                case O_MODE:
                        if (strcmp(optarg, "steps") == 0) {
                                lim.mode = M40_ENGINE_MODE_STEPS;
                        } else if (strcmp(optarg, "persistent") == 0) {
                                lim.mode = M40_ENGINE_MODE_PERSISTENT;
                        } else {
                                fprintf(stderr, "m40-gen: --mode wants steps or persistent\n");
                                return 2;
                        }
                        break;
                case O_IGNORE_EOS:
                        sp.stop.ignore_eos = true;
                        break;
                case O_STATS:
                        stats = true;
                        break;
                case O_VRAM: {
                        char *end;

                        errno = 0;
                        lim.vram_limit_mb = strtoull(optarg, &end, 10);
                        if (!*optarg || *end || errno || *optarg == '-' ||
                            lim.vram_limit_mb > (1u << 24)) {
                                fprintf(stderr, "m40-gen: --vram-limit-mb wants MiB in "
                                                "0..16777216\n");
                                return 2;
                        }
                        break;
                }
                case 'h':
                        usage(stdout);
                        return 0;
                case O_VERSION:
                        puts(M40_VERSION_TEXT("m40-gen"));
                        return 0;
                default:
                        usage(stderr);
                        return 2;
                }
        }
        if (!model || (!text == !tokens) || n_predict < 1 || n_predict > 1000000) {
                usage(stderr);
                return 2;
        }
        if (strcmp(backend, "cpu") != 0 && strcmp(backend, "cuda") != 0) {
                fprintf(stderr, "m40-gen: --backend is cpu or cuda, not '%s'\n", backend);
                return 2;
        }
#ifndef M40_HAVE_CUDA_ENGINE
        if (!strcmp(backend, "cuda")) {
                fprintf(stderr, "m40-gen: this build has no CUDA engine (meson -Dcuda=enabled)\n");
                return 2;
        }
#endif
        if (!text && parse_tokens(tokens, prompt, start, &n_prompts)) {
                fprintf(stderr, "m40-gen: --tokens wants comma-separated token ids, prompts "
                                "separated by ';'\n");
                return 2;
        }
        /* the file is opened and parsed once, for the tokenizer and the engine */
        r = m40_gguf_open(model, &g, err, sizeof(err));
        if (r) {
                fprintf(stderr, "m40-gen: %s\n", err);
                return 1;
        }
        if (text) {
                r = load_vocab(g, &vocab, true);
                r = r ? r : tokenize_prompt(vocab, text, prompt, start, &n_prompts);
                if (r)
                        goto out;
        }
        if (vocab || !load_vocab(g, &vocab, false)) {
                size_t n_eog;
                const int32_t *eog = m40_vocab_eog(vocab, &n_eog);

                if (n_eog <= M40_MAX_EOG_IDS) {
                        memcpy(lim.eog, eog, n_eog * sizeof(*eog));
                        lim.n_eog = (uint32_t)n_eog;
                }
        }
        sp.stop.max_tokens = (uint32_t)n_predict;
        sp.keep_logits = logits_out != NULL;
        lim.max_seqs = 1;
        lim.max_batch_tokens = 512;
#ifdef M40_HAVE_CUDA_ENGINE
        if (!strcmp(backend, "cuda")) {
                if (!lim.act)
                        lim.act = M40_ACT_F32; /* the CUDA engine computes the f32 spec */
                r = m40_cuda_engine_new(g, &lim, 0, &e, err, sizeof(err));
        } else
#endif
                r = m40_cpu_engine_new(g, &lim, &e, err, sizeof(err));
        if (r) {
                fprintf(stderr, "m40-gen: %s\n", err[0] ? err : m40_strerror(r));
                goto out;
        }
        m40_engine_model(e, &info);
        ru.gen = malloc((size_t)n_predict * sizeof(*ru.gen));
        if (!ru.gen)
                goto out;
        if (logits_out && !(lf = fopen(logits_out, "wb"))) {
                fprintf(stderr, "m40-gen: cannot create %s: %s\n", logits_out, strerror(errno));
                goto out;
        }
        for (uint32_t p = 0; p < n_prompts; p++) {
                sp.prompt = prompt + start[p];
                sp.n_prompt = start[p + 1] - start[p];
                if (run_one(e, &sp, n_predict, &ru))
                        goto out;
                if (print) {
                        for (uint32_t i = 0; i < ru.n_gen; i++)
                                printf("%s%d", i ? " " : "", ru.gen[i]);
                        printf("\n");
                        fflush(stdout);
                } else if (vocab && print_text(vocab, ru.gen, ru.n_gen)) {
                        goto out;
                }
                if (lf && write_logits(e, ru.id, info.n_vocab, lf, logits_out))
                        goto out;
                if (stats) {
                        const double pp = ru.t_first - ru.t0, tg = ru.t1 - ru.t_first;

                        fprintf(stderr,
                                "m40-gen: prompt %u tokens in %.3f s (%.1f tok/s, incl. first "
                                "token); generated %u tokens, %.2f tok/s after the first\n",
                                sp.n_prompt, pp, pp > 0 ? sp.n_prompt / pp : 0.0, ru.n_gen,
                                ru.n_gen > 1 && tg > 0 ? (ru.n_gen - 1) / tg : 0.0);
                }
        }
        if (lf && fclose(lf)) {
                lf = NULL;
                fprintf(stderr, "m40-gen: cannot write %s: %s\n", logits_out, strerror(errno));
                goto out;
        }
        lf = NULL;
        rc = 0;
out:
        if (lf)
                fclose(lf);
        free(ru.gen);
        m40_engine_free(e);
        m40_vocab_free(vocab);
        m40_gguf_free(g);
        return rc;
}
