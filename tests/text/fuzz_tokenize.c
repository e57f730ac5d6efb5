/* fuzz_tokenize.c - libFuzzer target over tokenize -> stream detokenize, for both
 * vocabulary kinds (issue 4, acceptance check 4), under ASan and UBSan. Meson builds it when
 * the C compiler is clang; CI runs it time-boxed (10^6 executions or 40 s; the long runs
 * are in tests/fuzz/FUZZING.md) with:
 *   CC=clang meson setup build-fuzz -Dcuda=disabled
 *   ninja -C build-fuzz tests/text/fuzz_tokenize
 *   meson test -C build-fuzz --no-rebuild --suite fuzz --print-errorlogs
 *
 * The first input byte picks a vocabulary and flags, the rest is the text. Vocabularies:
 * tiny in-memory SPM and BPE ones (always), and stories260K / SmolLM2 / Gemma 3 when found
 * ($M40_SOURCE_ROOT/../shared/models, ~/.cache/m40-llm/models). Properties checked:
 * tokenization succeeds with ids in range and a count that does not depend on the output
 * buffer; the streamed text is strictly valid UTF-8 whatever the input; and valid UTF-8
 * input comes back unchanged where the vocabulary can represent it (see roundtrip.py for
 * the two losses that belong to vocabularies). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mini_vocab.h"
#include "text/detok.h"
#include "text/utf8.h"
#include "text/vocab.h"

struct fz_vocab {
        struct m40_vocab *v;
        int exact; /* valid UTF-8 without parse_special round-trips exactly */
};

static struct fz_vocab vocabs[6];
static struct m40_tok_scratch *scratch;
static int n_vocabs;

static void add(struct gguf_mini img, int exact)
{
        char err[256];
        struct m40_vocab *v = NULL;

        if (mini_vocab(&img, &v, err, sizeof(err)) == 0)
                vocabs[n_vocabs++] = (struct fz_vocab){v, exact};
        else
                fprintf(stderr, "fuzz_tokenize: mini vocabulary: %s\n", err);
}

static void add_file(const char *path, int exact)
{
        char err[512];
        struct m40_gguf *g = NULL;
        struct m40_vocab *v = NULL;

        if (m40_gguf_open(path, &g, err, sizeof(err)))
                return;
        if (m40_vocab_new(g, &v, err, sizeof(err)) == 0)
                vocabs[n_vocabs++] = (struct fz_vocab){v, exact};
        m40_gguf_free(g);
        fprintf(stderr, "fuzz_tokenize: %s %s\n", v ? "using" : "cannot load", path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
        const char *root = getenv("M40_SOURCE_ROOT"), *home = getenv("HOME");
        char path[4096];

        if (m40_tok_scratch_new(&scratch))
                abort();
        add(mini_spm_gguf(), 1);
        add(mini_bpe_gguf("smollm", 1), 1);
        add(mini_bpe_gguf("llama-bpe", 1), 1);
        snprintf(path, sizeof(path), "%s/../shared/models/stories260K.gguf", root ? root : ".");
        add_file(path, 1);
        snprintf(path, sizeof(path), "%s/.cache/m40-llm/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 home ? home : ".");
        add_file(path, 0); /* SmolLM2 has no token for byte 0x1D: not exact */
        snprintf(path, sizeof(path), "%s/.cache/m40-llm/models/gemma-3-270m-q4_k_m.gguf",
                 home ? home : ".");
        add_file(path, 1);
        return 0;
}

/* exact_ok - whether text is valid UTF-8 free of what SPM vocabularies cannot give back
 * (U+2581, the space marker, and the user-defined "<|user|>" of the tiny one, after which
 * SPM inserts a space). */
static int exact_ok(const struct m40_vocab *v, const uint8_t *s, size_t n)
{
        if (m40_utf8_valid_len(s, n) != n)
                return 0;
        if (m40_vocab_type(v) != M40_VOCAB_SPM)
                return 1;
        return !memmem(s, n, "\xE2\x96\x81", 3) && !memmem(s, n, "<|user|>", 8);
}

static void check(const struct fz_vocab *fv, const uint8_t *s, size_t n, unsigned flags,
                  int short_buf)
{
        static int32_t ids[1 << 14];
        static char out[1 << 16];
        struct m40_detok *d;
        size_t nt, nt2, o = 0, len;
        const char *t;

        if (m40_vocab_tokenize_scratch(fv->v, scratch, (const char *)s, n, flags, ids, 1 << 14,
                                       &nt))
                abort();
        if (short_buf && (m40_vocab_tokenize(fv->v, (const char *)s, n, flags, ids, nt / 2, &nt2) !=
                                  (nt / 2 < nt ? -ENOBUFS : 0) ||
                          nt2 != nt))
                abort(); /* the count must not depend on the buffer */
        if (m40_detok_new(fv->v,
                          M40_DETOK_STRIP_SPACE |
                                  (flags & M40_TOKENIZE_PARSE_SPECIAL ? M40_DETOK_SPECIAL : 0),
                          &d))
                abort();
        for (size_t i = 0; i < nt; i++) {
                if (ids[i] < 0 || (uint32_t)ids[i] >= m40_vocab_n_tokens(fv->v))
                        abort();
                if (m40_detok_push(d, ids[i], &t, &len) || o + len > sizeof(out))
                        abort();
                memcpy(out + o, t, len);
                o += len;
        }
        m40_detok_flush(d, &t, &len);
        memcpy(out + o, t, len);
        o += len;
        m40_detok_free(d);
        if (m40_utf8_valid_len((const uint8_t *)out, o) != o)
                abort(); /* invalid UTF-8 escaped */
        if (fv->exact && !(flags & M40_TOKENIZE_PARSE_SPECIAL) && exact_ok(fv->v, s, n) &&
            (o != n || memcmp(out, s, n)))
                abort(); /* a valid string did not come back */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1 || size > 4096 || n_vocabs == 0)
                return 0;
        const struct fz_vocab *fv = &vocabs[(data[0] & 7) % n_vocabs];
        unsigned flags = (data[0] >> 3) & 3;

        check(fv, data + 1, size - 1, flags, data[0] >> 7);
        return 0;
}
