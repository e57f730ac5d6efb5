/* bench_tokenize.c - tokenizer throughput: MB/s of a corpus through m40_vocab_tokenize().
 *
 * Usage: bench_tokenize MODEL [FLAGS] < corpus.hex   (one hex-encoded string per line;
 * FLAGS: 0 plain, 1 add special, 2 parse special, 3 both). Two figures, each the best of
 * five rounds of at least 0.3 s: "per-string" tokenizes every string with its own call;
 * "joined" tokenizes the concatenation as one text (newline-separated). Calls reuse one
 * struct m40_tok_scratch, as a daemon thread would. bench.py runs this
 * beside llama.cpp on the same corpus. Exit 0, or 1 on failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/gguf.h"
#include "text/vocab.h"

struct str {
        char *p;
        size_t n;
};

static double now(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static size_t read_corpus(struct str **ret)
{
        struct str *v = NULL;
        size_t n = 0, cap = 0, lcap = 0;
        char *line = NULL;
        ssize_t len;

        while ((len = getline(&line, &lcap, stdin)) > 0) {
                size_t h = strcspn(line, "\r\n") / 2;
                if (n == cap) {
                        cap = cap ? cap * 2 : 1024;
                        v = realloc(v, cap * sizeof(*v));
                }
                v[n].p = malloc(h + 1);
                for (size_t i = 0; i < h; i++) {
                        char hex[3] = {line[2 * i], line[2 * i + 1], 0};
                        v[n].p[i] = (char)strtoul(hex, NULL, 16);
                }
                v[n++].n = h;
        }
        free(line);
        *ret = v;
        return n;
}

/* rate - MB/s of tokenizing the n strings, best of five rounds. */
static double rate(const struct m40_vocab *v, struct m40_tok_scratch *w, const struct str *s,
                   size_t n, unsigned flags, int32_t *ids, size_t cap)
{
        size_t bytes = 0, nt;
        double best = 0;

        for (size_t i = 0; i < n; i++)
                bytes += s[i].n;
        for (int round = 0; round < 5; round++) {
                double t0 = now(), t;
                size_t reps = 0;
                do {
                        for (size_t i = 0; i < n; i++)
                                if (m40_vocab_tokenize_scratch(v, w, s[i].p, s[i].n, flags, ids,
                                                               cap, &nt))
                                        return -1;
                        reps++;
                } while ((t = now() - t0) < 0.3);
                double mbs = (double)bytes * (double)reps / t / 1e6;
                best = mbs > best ? mbs : best;
        }
        return best;
}

int main(int argc, char **argv)
{
        char err[M40_GGUF_ERRLEN] = "";
        struct m40_gguf *g = NULL;
        struct m40_vocab *v = NULL;
        struct str *s, joined = {0};
        unsigned flags = argc > 2 ? (unsigned)atoi(argv[2]) : 0;

        if (argc < 2) {
                fprintf(stderr, "usage: bench_tokenize MODEL [FLAGS] < corpus.hex\n");
                return 1;
        }
        if (m40_gguf_open(argv[1], &g, err, sizeof(err)) ||
            m40_vocab_new(g, &v, err, sizeof(err))) {
                fprintf(stderr, "bench_tokenize: %s\n", err);
                return 1;
        }
        m40_gguf_free(g);
        size_t n = read_corpus(&s), cap = 0;
        for (size_t i = 0; i < n; i++)
                joined.n += s[i].n + 1;
        joined.p = malloc(joined.n + 1);
        joined.n = 0;
        for (size_t i = 0; i < n; i++) {
                memcpy(joined.p + joined.n, s[i].p, s[i].n);
                joined.n += s[i].n;
                joined.p[joined.n++] = '\n';
        }
        cap = joined.n + 16;
        int32_t *ids = malloc(cap * sizeof(*ids));
        struct m40_tok_scratch *w = NULL;
        if (m40_tok_scratch_new(&w))
                return 1;
        double a = rate(v, w, s, n, flags, ids, cap), b = rate(v, w, &joined, 1, flags, ids, cap);
        printf("per-string %.2f MB/s\njoined %.2f MB/s\nstrings %zu bytes %zu\n", a, b, n,
               joined.n);
        for (size_t i = 0; i < n; i++)
                free(s[i].p);
        free(s);
        free(joined.p);
        free(ids);
        m40_tok_scratch_free(w);
        m40_vocab_free(v);
        return a < 0 || b < 0;
}
