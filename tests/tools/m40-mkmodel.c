/* m40-mkmodel.c - writes synthetic Llama- or Qwen2-architecture GGUF models for tests and
 * benchmarks.
 *
 * Owns which tensors a Llama model has and
 * in which ggml type each is stored (llama.cpp's quantization rules), the synthetic
 * SentencePiece-style vocabulary, the seeded random weights, and the parallel
 * generate -> quantize -> write pipeline. The GGUF layout is gguf_write.c's; the weight
 * formats are quantize.c's; --random-blocks rows are mkmodel_gen.c's; the command line
 * and the presets are mkmodel_args.c's. Run with --help for the contract. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gguf_write.h"
#include "m40/error.h"
#include "mkmodel.h"
#include "mkmodel_gen.h"
#include "model/ggml_type.h"
#include "quantize.h"

#define CHUNK_BYTES (8u << 20) /* output produced per pipeline step */

enum tkind { T_EMBD, T_OUTPUT, T_NORM, T_BIAS, T_ATTN_V, T_FFN_DOWN, T_MAT };

struct tplan {
        char name[64];
        enum tkind kind;
        uint32_t layer;
        uint32_t n_dims;
        uint64_t ne0, ne1; /* ne1 is 1 for vectors */
        uint32_t type;
        float mean, std; /* of the generated values */
        uint64_t row_bytes, size;
};

static volatile sig_atomic_t interrupted;

/* ---- tensor plan and type selection ---- */

/* llama.cpp's use_more_bits(): the layers Q4_K_M gives Q6_K in attn_v and ffn_down. */
static bool use_more_bits(uint64_t i, uint64_t n)
{
        int64_t il = (int64_t)i, nl = (int64_t)n;

        return il < nl / 8 || il >= 7 * nl / 8 || (il - nl / 8) % 3 == 2;
}

/* The type a tensor gets before shape fallbacks: llama_tensor_get_type() for Q4_K_M
 * (non-Falcon, no MoE, no imatrix, no overrides); a single TYPE applies to every matrix. */
static uint32_t wanted_type(const struct spec *s, const struct tplan *t)
{
        if (t->kind == T_NORM || t->kind == T_BIAS)
                return M40_GGML_F32;
        if (s->type != TYPE_Q4_K_M)
                return s->type;
        switch (t->kind) {
        case T_OUTPUT:
                return t->ne0 % 256 ? M40_GGML_Q8_0 : M40_GGML_Q6_K;
        case T_EMBD: /* tied: quantized like the output it also is */
                if (s->sh.tied)
                        return t->ne0 % 256 ? M40_GGML_Q8_0 : M40_GGML_Q6_K;
                return M40_GGML_Q4_K;
        case T_ATTN_V:
        case T_FFN_DOWN:
                return use_more_bits(t->layer, s->sh.layers) ? M40_GGML_Q6_K : M40_GGML_Q4_K;
        default:
                return M40_GGML_Q4_K;
        }
}

/* llama.cpp's tensor_type_fallback(): the type used when ne0 does not fit t's blocks. */
static uint32_t fallback_type(uint32_t t, uint64_t ne0)
{
        uint32_t f = t;

        if (ne0 % m40_ggml_type_info(t)->block_size == 0)
                return t;
        if (t == M40_GGML_Q4_K)
                f = M40_GGML_Q5_0;
        else if (t == M40_GGML_Q5_K)
                f = M40_GGML_Q5_1;
        else if (t == M40_GGML_Q6_K)
                f = M40_GGML_Q8_0;
        if (ne0 % m40_ggml_type_info(f)->block_size)
                f = M40_GGML_F16;
        return f;
}

static void plan_add(struct tplan *p, size_t *n, enum tkind kind, uint32_t layer, const char *name,
                     uint64_t ne0, uint64_t ne1, float mean, float std)
{
        p[*n] = (struct tplan){.kind = kind,
                               .layer = layer,
                               .n_dims = kind == T_NORM || kind == T_BIAS ? 1 : 2,
                               .ne0 = ne0,
                               .ne1 = ne1,
                               .mean = mean,
                               .std = std};
        snprintf(p[*n].name, sizeof(p[*n].name), "%s", name);
        (*n)++;
}

/* Fills p (2 + 12 * layers + 1 entries at most) in file order; returns the count. */
static size_t plan_build(const struct spec *s, struct tplan *p)
{
        uint64_t d = s->sh.dim, kv = s->sh.kv_heads * (s->sh.dim / s->sh.heads), f = s->sh.ffn;
        float sd = 1.0f / sqrtf((float)d), sf = 1.0f / sqrtf((float)f);
        char nm[64];
        size_t n = 0;

        plan_add(p, &n, T_EMBD, 0, "token_embd.weight", d, s->sh.vocab, 0, 0.02f);
        for (uint32_t i = 0; i < s->sh.layers; i++) {
#define BLK(kind, suffix, ne0, ne1, mean, std)                                                     \
        do {                                                                                       \
                snprintf(nm, sizeof(nm), "blk.%u." suffix, i);                                     \
                plan_add(p, &n, kind, i, nm, ne0, ne1, mean, std);                                 \
        } while (0)
                BLK(T_NORM, "attn_norm.weight", d, 1, 1.0f, 0.02f);
                BLK(T_MAT, "attn_q.weight", d, d, 0, sd);
                BLK(T_MAT, "attn_k.weight", d, kv, 0, sd);
                BLK(T_ATTN_V, "attn_v.weight", d, kv, 0, sd);
                if (s->qwen2) {
                        BLK(T_BIAS, "attn_q.bias", d, 1, 0, 0.5f);
                        BLK(T_BIAS, "attn_k.bias", kv, 1, 0, 0.5f);
                        BLK(T_BIAS, "attn_v.bias", kv, 1, 0, 0.5f);
                }
                BLK(T_MAT, "attn_output.weight", d, d, 0, sd);
                BLK(T_NORM, "ffn_norm.weight", d, 1, 1.0f, 0.02f);
                BLK(T_MAT, "ffn_gate.weight", d, f, 0, sd);
                BLK(T_MAT, "ffn_up.weight", d, f, 0, sd);
                BLK(T_FFN_DOWN, "ffn_down.weight", f, d, 0, sf);
#undef BLK
        }
        plan_add(p, &n, T_NORM, 0, "output_norm.weight", d, 1, 1.0f, 0.02f);
        if (!s->sh.tied)
                plan_add(p, &n, T_OUTPUT, 0, "output.weight", d, s->sh.vocab, 0, sd);
        return n;
}

/* Assign types, noting each kind of fallback once. */
static void plan_types(const struct spec *s, struct tplan *p, size_t n)
{
        bool noted[M40_GGML_TYPE_LIMIT][M40_GGML_TYPE_LIMIT] = {{false}};

        for (size_t i = 0; i < n; i++) {
                uint32_t want = wanted_type(s, &p[i]);
                p[i].type = fallback_type(want, p[i].ne0);
                if (p[i].type != want && !noted[want][p[i].type] && !s->quiet) {
                        noted[want][p[i].type] = true;
                        fprintf(stderr,
                                "m40-mkmodel: note: %s needs rows that are a multiple of %u; "
                                "tensors with %llu-element rows (e.g. %s) use %s, as llama.cpp "
                                "does\n",
                                mkmodel_type_name(want), m40_ggml_type_info(want)->block_size,
                                (unsigned long long)p[i].ne0, p[i].name,
                                mkmodel_type_name(p[i].type));
                }
        }
}

/* ---- vocabulary ---- */

struct vocab {
        char **tokens;
        float *scores;
        int32_t *types;
        char *text; /* storage of every token */
};

static void vocab_free(struct vocab *v)
{
        free(v->tokens);
        free(v->scores);
        free(v->types);
        free(v->text);
}

/* Piece k (k >= 0) of the filler: "\u2581" + word(k/2) for even k, word(k/2 + 1) for odd
 * k, where word(j) is j in bijective base 26 over a-z (word(0) = ""). All distinct. */
static size_t filler_piece(uint64_t k, char *out)
{
        char rev[16];
        size_t n = 0, len = 0;
        uint64_t j = k % 2 ? k / 2 + 1 : k / 2;

        if (k % 2 == 0) {
                memcpy(out, "\xe2\x96\x81", 3);
                n = 3;
        }
        while (j > 0) {
                j--;
                rev[len++] = (char)('a' + j % 26);
                j /= 26;
        }
        while (len > 0)
                out[n++] = rev[--len];
        out[n] = '\0';
        return n;
}

/* Tokens, scores and types of an n-token vocabulary; every piece fits 16 bytes. */
static int vocab_build(uint64_t n, struct vocab *v)
{
        static const char *const specials[] = {"<unk>", "<s>", "</s>"};
        char *t;

        v->tokens = calloc(n, sizeof(*v->tokens));
        v->scores = calloc(n, sizeof(*v->scores));
        v->types = calloc(n, sizeof(*v->types));
        v->text = t = malloc((size_t)n * 16);
        if (!v->tokens || !v->scores || !v->types || !v->text)
                return -ENOMEM;
        for (uint64_t i = 0; i < n; i++) {
                v->tokens[i] = t;
                if (i < 3) {
                        t += sprintf(t, "%s", specials[i]) + 1;
                        v->types[i] = i == 0 ? 2 : 3;
                } else if (i < 259) {
                        t += sprintf(t, "<0x%02X>", (unsigned)(i - 3)) + 1;
                        v->types[i] = 6;
                } else {
                        t += filler_piece(i - 259, t) + 1;
                        v->types[i] = 1;
                        v->scores[i] = -(float)(i - 258);
                }
        }
        return 0;
}

/* ---- metadata ---- */

static int write_metadata(struct m40_gguf_writer *w, const struct spec *s, const struct vocab *v)
{
        const char *arch = s->qwen2 ? "qwen2" : "llama";
        char name[128], key[96];
        uint32_t ftype = 0;
        int r = 0;

        ftype = mkmodel_ftype(s->type);
        snprintf(name, sizeof(name), "m40-mkmodel L%llu d%llu h%llu/%llu f%llu v%llu %s",
                 (unsigned long long)s->sh.layers, (unsigned long long)s->sh.dim,
                 (unsigned long long)s->sh.heads, (unsigned long long)s->sh.kv_heads,
                 (unsigned long long)s->sh.ffn, (unsigned long long)s->sh.vocab,
                 mkmodel_type_name(s->type));
        if (s->random_blocks)
                snprintf(name + strlen(name), sizeof(name) - strlen(name), " random-blocks");

#define KEY(k) (snprintf(key, sizeof(key), "%s." k, arch), key)
#define ADD(call)                                                                                  \
        do {                                                                                       \
                if (r == 0)                                                                        \
                        r = call;                                                                  \
        } while (0)
        ADD(m40_gguf_writer_add_str(w, "general.architecture", arch));
        ADD(m40_gguf_writer_add_str(w, "general.name", name));
        ADD(m40_gguf_writer_add_u32(w, "general.file_type", ftype));
        ADD(m40_gguf_writer_add_u32(w, "general.alignment", 32));
        if (s->type != M40_GGML_F32 && s->type != M40_GGML_F16 && s->type != M40_GGML_BF16)
                ADD(m40_gguf_writer_add_u32(w, "general.quantization_version", 2));
        ADD(m40_gguf_writer_add_u32(w, KEY("context_length"), (uint32_t)s->sh.ctx));
        ADD(m40_gguf_writer_add_u32(w, KEY("embedding_length"), (uint32_t)s->sh.dim));
        ADD(m40_gguf_writer_add_u32(w, KEY("block_count"), (uint32_t)s->sh.layers));
        ADD(m40_gguf_writer_add_u32(w, KEY("feed_forward_length"), (uint32_t)s->sh.ffn));
        ADD(m40_gguf_writer_add_u32(w, KEY("rope.dimension_count"),
                                    (uint32_t)(s->sh.dim / s->sh.heads)));
        ADD(m40_gguf_writer_add_u32(w, KEY("attention.head_count"), (uint32_t)s->sh.heads));
        ADD(m40_gguf_writer_add_u32(w, KEY("attention.head_count_kv"), (uint32_t)s->sh.kv_heads));
        ADD(m40_gguf_writer_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f));
        ADD(m40_gguf_writer_add_f32(w, KEY("rope.freq_base"), (float)s->sh.rope_base));
        ADD(m40_gguf_writer_add_u32(w, KEY("vocab_size"), (uint32_t)s->sh.vocab));
        ADD(m40_gguf_writer_add_str(w, "tokenizer.ggml.model", "llama"));
        ADD(m40_gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", s->sh.vocab,
                                          (const char *const *)v->tokens));
        ADD(m40_gguf_writer_add_array(w, "tokenizer.ggml.scores", M40_GGUF_F32, s->sh.vocab,
                                      v->scores));
        ADD(m40_gguf_writer_add_array(w, "tokenizer.ggml.token_type", M40_GGUF_I32, s->sh.vocab,
                                      v->types));
        ADD(m40_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1));
        ADD(m40_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 2));
        ADD(m40_gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", 0));
        ADD(m40_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true));
        ADD(m40_gguf_writer_add_bool(w, "tokenizer.ggml.add_eos_token", false));
#undef ADD
#undef KEY
        return r;
}

/* ---- random rows ---- */

/* Row r of tensor t: mean + std * (sum of four 16-bit uniforms, standardized). */
static void gen_row(const struct tplan *t, uint64_t seed, uint64_t ti, uint64_t row, float *x)
{
        struct mk_rng g;
        const float scale = t->std * (1.0f / 37837.227f); /* 65536 / sqrt(3) */

        mk_rng_seed(&g, seed, ti, row);
        for (uint64_t i = 0; i < t->ne0; i++) {
                const uint64_t v = mk_next(&g);
                int32_t sum = (int32_t)(v & 0xffff) + (int32_t)((v >> 16) & 0xffff) +
                              (int32_t)((v >> 32) & 0xffff) + (int32_t)(v >> 48);
                x[i] = t->mean + (float)(sum - 131070) * scale;
        }
}

/* ---- the pipeline: chunk k is generated by fresh threads while chunk k-1 is written ---- */

struct job {
        const struct tplan *t;
        uint64_t ti, row0, nrows, batch, seed;
        bool random; /* random blocks instead of generate + quantize */
        uint8_t *out;
        atomic_uint_fast64_t next; /* next row to claim */
};

struct worker {
        struct job *job;
        float *x; /* one row of floats */
        pthread_t tid;
};

static void *work(void *arg)
{
        struct worker *wk = arg;
        struct job *j = wk->job;
        uint64_t r;

        while ((r = atomic_fetch_add(&j->next, j->batch)) < j->nrows) {
                uint64_t end = r + j->batch < j->nrows ? r + j->batch : j->nrows;
                for (; r < end; r++) {
                        uint8_t *y = j->out + r * j->t->row_bytes;

                        if (j->random) {
                                m40_mkmodel_random_row(j->t->type, j->seed, j->ti, j->row0 + r,
                                                       j->t->std, y, j->t->ne0);
                                continue;
                        }
                        gen_row(j->t, j->seed, j->ti, j->row0 + r, wk->x);
                        m40_row_quantize(j->t->type, wk->x, y, j->t->ne0);
                }
        }
        return NULL;
}

/* Start n threads on j; returns how many started (the rest of j waits for them). */
static unsigned job_start(struct worker *wk, unsigned n, struct job *j)
{
        unsigned i;

        j->batch = j->nrows / (n * 4u) ? j->nrows / (n * 4u) : 1;
        atomic_store(&j->next, 0);
        for (i = 0; i < n; i++) {
                wk[i].job = j;
                if (pthread_create(&wk[i].tid, NULL, work, &wk[i]))
                        break;
        }
        return i;
}

static int job_join(struct worker *wk, unsigned started)
{
        for (unsigned i = 0; i < started; i++)
                pthread_join(wk[i].tid, NULL);
        return started ? 0 : -EAGAIN;
}

static double now_s(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct progress {
        bool on, tty;
        double t0, last;
        uint64_t total, done;
};

static void progress_tick(struct progress *pg, uint64_t more, bool final)
{
        double t = now_s();

        pg->done += more;
        if (!pg->on || (!final && t - pg->last < 1.0))
                return;
        pg->last = t;
        fprintf(stderr, "%sm40-mkmodel: %3.0f%%  %.0f / %.0f MB  %.0f MB/s%s", pg->tty ? "\r" : "",
                100.0 * (double)pg->done / (double)pg->total, (double)pg->done / 1e6,
                (double)pg->total / 1e6, (double)pg->done / 1e6 / (t - pg->t0 + 1e-9),
                pg->tty && !final ? "" : "\n");
}

/* Generate, quantize and write every tensor's data in file order. */
static int write_data(struct m40_gguf_writer *w, const struct spec *s, const struct tplan *p,
                      size_t n, struct progress *pg)
{
        size_t row_floats = s->sh.dim > s->sh.ffn ? s->sh.dim : s->sh.ffn;
        unsigned nt = (unsigned)s->threads, cur = 0;
        struct worker *wk = calloc(nt, sizeof(*wk));
        uint8_t *buf[2] = {malloc(CHUNK_BYTES + row_floats * 4),
                           malloc(CHUNK_BYTES + row_floats * 4)};
        static struct job job[2];
        uint64_t prev = 0;
        int r = wk && buf[0] && buf[1] ? 0 : -ENOMEM;

        for (unsigned i = 0; i < nt && r == 0; i++)
                if (!(wk[i].x = malloc(row_floats * sizeof(float))))
                        r = -ENOMEM;
        for (size_t ti = 0; ti < n && r == 0; ti++) {
                const struct tplan *t = &p[ti];
                uint64_t per = CHUNK_BYTES / t->row_bytes ? CHUNK_BYTES / t->row_bytes : 1;
                for (uint64_t row0 = 0; row0 < t->ne1 && r == 0; row0 += per) {
                        struct job *j = &job[cur];
                        j->t = t, j->ti = ti, j->row0 = row0, j->seed = s->seed;
                        j->random = s->random_blocks && m40_mkmodel_random_supported(t->type);
                        j->nrows = t->ne1 - row0 < per ? t->ne1 - row0 : per;
                        j->out = buf[cur];
                        unsigned started = job_start(wk, nt, j);
                        if (prev)
                                r = m40_gguf_writer_write(w, buf[cur ^ 1], prev);
                        progress_tick(pg, prev, false);
                        int rj = job_join(wk, started);
                        r = r ? r : rj ? rj : interrupted ? -EINTR : 0;
                        prev = j->nrows * t->row_bytes;
                        cur ^= 1;
                }
        }
        if (r == 0 && prev)
                r = m40_gguf_writer_write(w, buf[cur ^ 1], prev);
        for (unsigned i = 0; wk && i < nt; i++)
                free(wk[i].x);
        free(wk);
        free(buf[0]);
        free(buf[1]);
        return r;
}

static void on_signal(int sig)
{
        (void)sig;
        interrupted = 1;
}

int main(int argc, char **argv)
{
        struct m40_gguf_writer *w = NULL;
        struct progress pg = {0};
        struct vocab voc = {0};
        struct spec s;
        struct tplan *plan;
        uint64_t n_params = 0;
        size_t n;
        int r;

        mkmodel_parse_args(argc, argv, &s);
        struct sigaction sa = {.sa_handler = on_signal};
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);

        plan = calloc(3 + 12 * s.sh.layers, sizeof(*plan));
        if (!plan || vocab_build(s.sh.vocab, &voc) < 0) {
                fprintf(stderr, "m40-mkmodel: out of memory\n");
                r = -ENOMEM;
                goto out;
        }
        n = plan_build(&s, plan);
        plan_types(&s, plan, n);

        r = m40_gguf_writer_new(s.out, 32, &w);
        if (r < 0) {
                fprintf(stderr, "m40-mkmodel: cannot create %s.tmp: %s\n", s.out, m40_strerror(r));
                goto out;
        }
        r = write_metadata(w, &s, &voc);
        for (size_t i = 0; i < n && r == 0; i++) {
                const uint64_t ne[2] = {plan[i].ne0, plan[i].ne1};
                r = m40_gguf_writer_add_tensor(w, plan[i].name, plan[i].n_dims, ne, plan[i].type,
                                               &plan[i].size);
                plan[i].row_bytes = plan[i].size / plan[i].ne1;
                n_params += plan[i].ne0 * plan[i].ne1;
        }
        if (r == 0)
                r = m40_gguf_writer_begin_data(w);
        if (r < 0) {
                fprintf(stderr, "m40-mkmodel: %s: writing the header: %s\n", s.out,
                        m40_strerror(r));
                goto out;
        }

        pg.on = !s.quiet;
        pg.tty = isatty(STDERR_FILENO);
        pg.t0 = pg.last = now_s();
        pg.total = m40_gguf_writer_file_size(w);
        r = write_data(w, &s, plan, n, &pg);
        if (r == 0)
                r = m40_gguf_writer_finish(w);
        if (r < 0) {
                if (pg.tty && pg.on)
                        fputc('\n', stderr);
                fprintf(stderr, "m40-mkmodel: %s: %s\n", s.out,
                        r == -EINTR ? "interrupted" : m40_strerror(r));
                goto out;
        }
        pg.done = pg.total;
        progress_tick(&pg, 0, true);
        if (!s.quiet)
                fprintf(stderr,
                        "m40-mkmodel: wrote %s: %s%s, %llu tensors, %llu parameters, %.1f MB "
                        "in %.1f s\n",
                        s.out, mkmodel_type_name(s.type), s.random_blocks ? " (random blocks)" : "",
                        (unsigned long long)n, (unsigned long long)n_params, (double)pg.total / 1e6,
                        now_s() - pg.t0);
out:
        m40_gguf_writer_free(w);
        vocab_free(&voc);
        free(plan);
        return r < 0 ? 1 : 0;
}
