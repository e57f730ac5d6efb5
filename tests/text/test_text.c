/* test_text.c - unit tests of daemon/text: UTF-8 helpers, SPM and BPE tokenization on tiny
 * in-memory vocabularies, their merge-candidate queue (order, ties, growth), special-token
 * parsing, the streaming detokenizer (UTF-8 holding back, U+FFFD replacement, SPM leading
 * space), chat formatting and detection, error reporting, concurrent use; plus a few known
 * ids of stories260K when it is present.
 * Usage: test_text [SOURCE_ROOT]. Exit 0 pass, 1 fail. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "m40/error.h"
#include "mini_vocab.h"
#include "text/chat.h"
#include "text/detok.h"
#include "text/heap.h"
#include "text/utf8.h"
#include "text/vocab.h"

static int failures;

#define CHECK(cond)                                                                                \
        do {                                                                                       \
                if (!(cond)) {                                                                     \
                        fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
                        failures++;                                                                \
                }                                                                                  \
        } while (0)

/* tok - tokenizes s; returns the count (ids in out[0..64)) or a negative error. */
static long tok(const struct m40_vocab *v, const char *s, unsigned flags, int32_t *out)
{
        size_t n;
        int e = m40_vocab_tokenize(v, s, strlen(s), flags, out, 64, &n);

        return e ? e : (long)n;
}

static int32_t id_of(const struct m40_vocab *v, const char *text)
{
        return m40_vocab_find(v, text, strlen(text));
}

/* ids_eq - out[0..n) equals the ids of the texts (NULL-terminated). */
static int ids_eq(const struct m40_vocab *v, const int32_t *out, long n, const char *const *texts)
{
        long i = 0;

        for (; texts[i]; i++)
                if (i >= n || out[i] != id_of(v, texts[i]))
                        return 0;
        return i == n;
}

/* detok_all - streams ids through a detokenizer with flags into buf; returns the length. */
static size_t detok_all(const struct m40_vocab *v, unsigned flags, const int32_t *ids, size_t n,
                        char *buf)
{
        struct m40_detok *d;
        const char *t;
        size_t len, o = 0;

        if (m40_detok_new(v, flags, &d))
                return 0;
        for (size_t i = 0; i < n; i++) {
                if (m40_detok_push(d, ids[i], &t, &len))
                        break;
                memcpy(buf + o, t, len);
                o += len;
        }
        m40_detok_flush(d, &t, &len);
        memcpy(buf + o, t, len);
        o += len;
        buf[o] = 0;
        m40_detok_free(d);
        return o;
}

static void test_utf8(void)
{
        const struct {
                const char *s;
                size_t n;
                int want;
        } cases[] = {
                {"A", 1, 1},
                {"\xC3\xA9", 2, 2},
                {"\xC3", 1, 0},
                {"\xC3\x41", 2, -1},
                {"\xE0\x80\x80", 3, -1},
                {"\xED\xA0\x80", 3, -1},
                {"\xF4\x90", 2, -1},
                {"\xF0\x9F\x98", 3, 0},
                {"\xF0\x9F\x98\x80", 4, 4},
                {"\xFF", 1, -1},
                {"\x80", 1, -1},
                {"\xE2\x82\x41", 3, -2},
                {"\xC0\x80", 2, -1},
                {"\xF5\x80\x80\x80", 4, -1},
        };
        size_t adv;

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
                CHECK(m40_utf8_check((const uint8_t *)cases[i].s, cases[i].n) == cases[i].want);
        CHECK(m40_utf8_decode_lenient((const uint8_t *)"\xC1\x81", 2, &adv) == 0x41 && adv == 2);
        CHECK(m40_utf8_decode_lenient((const uint8_t *)"\xED\xA0\x80", 3, &adv) == 0xD800);
        CHECK(m40_utf8_decode_lenient((const uint8_t *)"\xF4\x90\x80\x80", 4, &adv) == 0xFFFD &&
              adv == 1);
        CHECK(m40_utf8_decode_lenient((const uint8_t *)"\xE2\x82", 2, &adv) == 0xFFFD && adv == 1);
        CHECK(m40_utf8_valid_len((const uint8_t *)"ab\xC3\xA9\xFF", 5) == 4);
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(uint32_t n)
{
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return (uint32_t)(rng % n);
}

/* not_before - a does not pop before b: (a.prio, a.left) >= (b.prio, b.left). */
static int not_before(const struct m40_bigram *a, const struct m40_bigram *b)
{
        return a->prio > b->prio || (a->prio == b->prio && a->left >= b->left);
}

/* Heap: random pushes and pops over few distinct keys; result tags each record once. */
static void test_heap_order(void)
{
        enum { N = 5000 };
        static unsigned char seen[N];
        struct m40_bigram_heap h = {0};
        struct m40_bigram b, last = {0};
        int pushed = 0, popped = 0, have_last = 0;

        while (popped < N) {
                if (pushed < N && (h.n == 0 || rnd(3) != 0)) {
                        b = (struct m40_bigram){(double)rnd(20), (int32_t)rnd(30), 0, 0, pushed};
                        CHECK(m40_bigram_heap_push(&h, &b) == 0);
                        pushed++;
                        if (have_last && !not_before(&b, &last))
                                have_last = 0; /* a smaller key arrived after the last pop */
                        continue;
                }
                CHECK(m40_bigram_heap_pop(&h, &b));
                if (have_last)
                        CHECK(not_before(&b, &last));
                CHECK(b.result >= 0 && b.result < N && !seen[b.result]);
                if (b.result >= 0 && b.result < N)
                        seen[b.result] = 1;
                last = b;
                have_last = 1;
                popped++;
        }
        CHECK(h.n == 0);
        CHECK(h.cap >= 256);
        m40_bigram_heap_done(&h);
}

/* Heap: all pushed first (past the first growth), then drained: fully sorted by (prio, left). */
static void test_heap_drain(void)
{
        struct m40_bigram_heap h = {0};
        struct m40_bigram b, prev;

        for (int i = 0; i < 1000; i++) {
                b = (struct m40_bigram){(double)rnd(1000) - 500, (int32_t)rnd(1000), 0, 0, i};
                CHECK(m40_bigram_heap_push(&h, &b) == 0);
        }
        CHECK(h.n == 1000);
        CHECK(m40_bigram_heap_pop(&h, &prev));
        for (int i = 1; i < 1000; i++) {
                CHECK(m40_bigram_heap_pop(&h, &b));
                CHECK(not_before(&b, &prev));
                prev = b;
        }
        m40_bigram_heap_clear(&h);
        CHECK(!m40_bigram_heap_pop(&h, &b));
        m40_bigram_heap_done(&h);
}

/* Heap: SPM queues -score: the highest score first, equal scores (0.0 and -0.0) leftmost first. */
static void test_heap_scores(void)
{
        static const float score[] = {-1.5f, 0.0f, 3.25f, -0.0f, 3.25f, -1e30f, 1e30f};
        static const int32_t want[] = {6, 2, 4, 1, 3, 0, 5}; /* lefts in pop order */
        struct m40_bigram_heap h = {0};
        struct m40_bigram b;

        for (int32_t i = 0; i < 7; i++) {
                b = (struct m40_bigram){-(double)score[i], i, i + 1, 2, -1};
                CHECK(m40_bigram_heap_push(&h, &b) == 0);
        }
        for (int i = 0; i < 7; i++) {
                CHECK(m40_bigram_heap_pop(&h, &b));
                CHECK(b.left == want[i] && b.right == want[i] + 1 && b.size == 2);
        }
        memset(&b, 0x5a, sizeof(b));
        CHECK(!m40_bigram_heap_pop(&h, &b)); /* empty: *ret untouched */
        CHECK(b.left == 0x5a5a5a5a);
        m40_bigram_heap_done(&h);
        CHECK(h.v == NULL && h.n == 0 && h.cap == 0);
        m40_bigram_heap_done(&h); /* twice is harmless */
        CHECK(m40_bigram_heap_push(&h, &b) == 0);
        CHECK(m40_bigram_heap_pop(&h, &b) && b.left == 0x5a5a5a5a);
        m40_bigram_heap_done(&h);
}

/* The merge-candidate queue of the SPM and BPE tokenizers (text/heap.h). */
static void test_heap(void)
{
        test_heap_order();
        test_heap_drain();
        test_heap_scores();
}

static void test_spm(void)
{
        struct gguf_mini img = mini_spm_gguf();
        struct m40_vocab *v = NULL;
        char err[256] = "", buf[256];
        int32_t o[64];
        long n;
        size_t k;

        CHECK(mini_vocab(&img, &v, err, sizeof(err)) == 0);
        if (!v) {
                fprintf(stderr, "mini SPM: %s\n", err);
                failures++;
                return;
        }
        CHECK(m40_vocab_type(v) == M40_VOCAB_SPM && m40_vocab_n_tokens(v) == 272);
        CHECK(m40_vocab_special(v)->add_bos && m40_vocab_special(v)->add_space_prefix);
        n = tok(v, "abc", M40_TOKENIZE_ADD_SPECIAL, o);
        CHECK(n == 2 && o[0] == 1 && o[1] == id_of(v, "\342\226\201abc"));
        n = tok(v, "ab c", 0, o);
        CHECK(ids_eq(v, o, n, (const char *[]){"\342\226\201ab", "\xE2\x96\x81", "c", NULL}));
        n = tok(v, "\xC3\xBC", 0, o); /* no token: byte fallback */
        CHECK(ids_eq(v, o, n, (const char *[]){"\xE2\x96\x81", "<0xC3>", "<0xBC>", NULL}));
        n = tok(v, "\xFF", 0, o);
        CHECK(ids_eq(v, o, n, (const char *[]){"\xE2\x96\x81", "<0xFF>", NULL}));
        n = tok(v, "a<|user|>b", 0, o); /* user-defined: always parsed; a space follows it */
        CHECK(ids_eq(v, o, n,
                     (const char *[]){"\342\226\201a", "<|user|>", "\342\226\201b", NULL}));
        n = tok(v, "<s>", 0, o);
        CHECK(ids_eq(v, o, n,
                     (const char *[]){"\xE2\x96\x81", "<0x3C>", "<0x73>", "<0x3E>", NULL}));
        n = tok(v, "<s>", M40_TOKENIZE_PARSE_SPECIAL | M40_TOKENIZE_ADD_SPECIAL, o);
        CHECK(n == 2 && o[0] == 1 && o[1] == 1);
        CHECK(tok(v, "", M40_TOKENIZE_ADD_SPECIAL, o) == 1 && tok(v, "", 0, o) == 0);
        CHECK(m40_vocab_tokenize(v, "ab c", 4, 0, o, 1, &k) == -ENOBUFS && k == 3);
        CHECK(m40_vocab_tokenize(v, "ab c", 4, 0, NULL, 0, &k) == -ENOBUFS && k == 3);

        /* detokenization: leading space, held-back UTF-8, replacements, control tokens */
        int32_t ids[] = {1, id_of(v, "\xE2\x96\x81"), id_of(v, "<0xC3>"), id_of(v, "<0xBC>"),
                         id_of(v, "a")};
        CHECK(detok_all(v, M40_DETOK_STRIP_SPACE, ids, 5, buf) == 3 && !strcmp(buf, "\303\274a"));
        CHECK(detok_all(v, 0, ids, 5, buf) == 4 && !strcmp(buf, " \303\274a"));
        CHECK(detok_all(v, M40_DETOK_SPECIAL, ids, 2, buf) == 4 && !strcmp(buf, "<s> "));
        int32_t bad[] = {id_of(v, "<0xFF>"), id_of(v, "<0xC3>"), id_of(v, "<0x41>"),
                         id_of(v, "<0xE2>"), id_of(v, "<0x82>")};
        CHECK(detok_all(v, 0, bad, 5, buf) == 10 &&
              !strcmp(buf, "\357\277\275\357\277\275A\xEF\xBF\xBD"));
        struct m40_detok *d;
        const char *t;
        size_t len;
        CHECK(m40_detok_new(v, 0, &d) == 0);
        CHECK(m40_detok_push(d, bad[3], &t, &len) == 0 && len == 0); /* E2: held back */
        CHECK(m40_detok_push(d, bad[4], &t, &len) == 0 && len == 0); /* E2 82: still */
        CHECK(m40_detok_push(d, id_of(v, "<0xAC>"), &t, &len) == 0 && len == 3 &&
              !memcmp(t, "\xE2\x82\xAC", 3));
        CHECK(m40_detok_push(d, 272, &t, &len) == -EINVAL &&
              m40_detok_push(d, -1, &t, &len) == -EINVAL);
        m40_detok_free(d);
        m40_vocab_free(v);
}

static void test_bpe(void)
{
        struct gguf_mini img = mini_bpe_gguf("gpt-2", 1);
        struct m40_vocab *v = NULL;
        char err[256] = "", buf[256];
        int32_t o[64];
        long n;

        CHECK(mini_vocab(&img, &v, err, sizeof(err)) == 0);
        if (!v) {
                fprintf(stderr, "mini BPE: %s\n", err);
                failures++;
                return;
        }
        CHECK(m40_vocab_type(v) == M40_VOCAB_BPE && !strcmp(m40_vocab_pre(v), "gpt-2"));
        n = tok(v, " the", M40_TOKENIZE_ADD_SPECIAL, o);
        CHECK(ids_eq(v, o, n, (const char *[]){"\xC4\xA0the", NULL}));
        n = tok(v, "in the12", 0, o);
        CHECK(ids_eq(v, o, n, (const char *[]){"in", "\xC4\xA0the", "12", NULL}));
        n = tok(v, "<|endoftext|>", M40_TOKENIZE_PARSE_SPECIAL, o);
        CHECK(n == 1 && o[0] == 256);
        n = tok(v, "<|endoftext|>", 0, o);
        CHECK(n == 13 && o[0] == id_of(v, "<"));
        n = tok(v, "\xFF", 0, o); /* llama.cpp: U+FFFD, then its three bytes */
        CHECK(ids_eq(v, o, n, (const char *[]){"\xC3\xAF", "\xC2\xBF", "\xC2\xBD", NULL}));
        /* U+11F04 (Kawi, Unicode 15.0) is a letter to llama.cpp: "a" and it form one word,
         * so 'a' merges with its lead byte even where PCRE2's tables predate it */
        n = tok(v, "a\xF0\x91\xBC\x84", 0, o);
        CHECK(n == 4 && o[0] == id_of(v, "a\xC3\xB0"));
        n = tok(v, "a\xF0\x9F\x98\x80", 0, o); /* an emoji is no letter: two words */
        CHECK(n == 5 && o[0] == id_of(v, "a"));
        n = tok(v, "there", 0, o);
        CHECK(detok_all(v, M40_DETOK_STRIP_SPACE, o, (size_t)n, buf) == 5 && !strcmp(buf, "there"));
        n = tok(v, "\xE2\x82\xAC \xF0\x9F\x98\x80!", 0, o);
        CHECK(detok_all(v, 0, o, (size_t)n, buf) == 9 &&
              !strcmp(buf, "\xE2\x82\xAC \xF0\x9F\x98\x80!"));
        m40_vocab_free(v);

        img = mini_bpe_gguf("smollm", 1); /* digits split one by one before the BPE regex */
        CHECK(mini_vocab(&img, &v, err, sizeof(err)) == 0);
        n = v ? tok(v, "12", 0, o) : 0;
        CHECK(v && ids_eq(v, o, n, (const char *[]){"1", "2", NULL}));
        m40_vocab_free(v);
        v = NULL;

        img = mini_bpe_gguf("no-such-pre", 1);
        CHECK(mini_vocab(&img, &v, err, sizeof(err)) == M40_EUNSUPPORTED && !v);
        CHECK(strstr(err, "'no-such-pre'") != NULL);
        img = mini_bpe_gguf(NULL, 0);
        CHECK(mini_vocab(&img, &v, err, sizeof(err)) == M40_EFORMAT && strstr(err, "merges"));
        img = mini_bpe_gguf(NULL, 1);
        CHECK(mini_vocab(&img, &v, err, sizeof(err)) == 0 && !strcmp(m40_vocab_pre(v), "default"));
        m40_vocab_free(v);
}

static void test_chat(void)
{
        const struct m40_chat_msg conv[] = {
                {"system", "Be nice."}, {"user", " Hi "}, {"assistant", "Hello"}, {"user", "Bye"}};
        enum m40_chat_tmpl t;
        char out[512];
        size_t n;

        const char *chatml = "<|im_start|>system\nBe nice.<|im_end|>\n<|im_start|>user\n Hi "
                             "<|im_end|>\n<|im_start|>assistant\n";
        CHECK(m40_chat_format(M40_CHAT_TMPL_CHATML, conv, 2, true, out, sizeof(out), &n) == 0);
        CHECK(!strcmp(out, chatml) && n == strlen(chatml));
        CHECK(m40_chat_format(M40_CHAT_TMPL_CHATML, conv, 2, true, out, 10, &n) == -ENOBUFS &&
              n == strlen(chatml));
        CHECK(m40_chat_format(M40_CHAT_TMPL_GEMMA, conv, 4, true, out, sizeof(out), &n) == 0);
        CHECK(!strcmp(out,
                      "<start_of_turn>user\nBe nice.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
                      "Hello<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n"
                      "<start_of_turn>model\n"));
        CHECK(m40_chat_format(M40_CHAT_TMPL_LLAMA2_SYS, conv, 4, true, out, sizeof(out), &n) == 0);
        CHECK(!strcmp(out, "[INST] <<SYS>>\nBe nice.\n<</SYS>>\n\n Hi  [/INST]Hello</s>[INST] Bye "
                           "[/INST]"));
        CHECK(m40_chat_format(M40_CHAT_TMPL_COUNT, conv, 1, true, out, sizeof(out), &n) == -EINVAL);
        CHECK(m40_chat_tmpl_detect("{{'<|im_start|>' + message['role']}}", &t) == 0 &&
              t == M40_CHAT_TMPL_CHATML);
        CHECK(m40_chat_tmpl_detect("<|start_header_id|>x<|end_header_id|>", &t) == 0 &&
              t == M40_CHAT_TMPL_LLAMA3);
        CHECK(m40_chat_tmpl_detect("mistral-v7-tekken", &t) == 0 &&
              t == M40_CHAT_TMPL_MISTRAL_V7_TEKKEN);
        t = M40_CHAT_TMPL_GEMMA;
        CHECK(m40_chat_tmpl_detect("USER: x ASSISTANT: y", &t) == M40_EUNSUPPORTED &&
              t == M40_CHAT_TMPL_GEMMA);
        CHECK(m40_chat_tmpl_detect(NULL, &t) == -ENOENT && m40_chat_tmpl_detect("", &t) == -ENOENT);
        CHECK(m40_chat_detect(NULL) == M40_CHAT_NONE &&
              m40_chat_detect("[INST]") == M40_CHAT_LLAMA2);
        CHECK(m40_chat_detect("<|user|> <|endoftext|>") == M40_CHAT_ZEPHYR);
        CHECK(!strcmp(m40_chat_family_name(m40_chat_detect("<start_of_turn>")), "gemma"));

        struct gguf_mini img = mini_bpe_gguf("gpt-2", 1);
        struct m40_vocab *v = NULL;
        int32_t ids[8];
        CHECK(mini_vocab(&img, &v, out, sizeof(out)) == 0);
        CHECK(v && m40_chat_stop_tokens(v, M40_CHAT_TMPL_CHATML, ids, 8, &n) == 0 && n == 1 &&
              ids[0] == 256);
        m40_vocab_free(v);
}

struct thread_arg {
        const struct m40_vocab *v;
        int ok;
};

static const char *const thread_texts[] = {
        "in the there 12",
        "\xF0\x9F\x98\x80 the\xFF<|endoftext|>",
        "   the   in\n\n12345",
};

static void *thread_main(void *p)
{
        struct thread_arg *a = p;
        int32_t want[64], got[64];

        a->ok = 1;
        for (int it = 0; it < 2000; it++) {
                const char *s = thread_texts[it % 3];
                long n1 = tok(a->v, s, M40_TOKENIZE_PARSE_SPECIAL, want);
                long n2 = tok(a->v, s, M40_TOKENIZE_PARSE_SPECIAL, got);
                if (n1 != n2 || n1 < 0 || memcmp(want, got, (size_t)n1 * sizeof(int32_t)))
                        a->ok = 0;
        }
        return NULL;
}

static void test_threads(void)
{
        struct gguf_mini img = mini_bpe_gguf("llama-bpe", 1);
        struct m40_vocab *v = NULL;
        struct thread_arg a[4];
        pthread_t th[4];
        char err[256];

        CHECK(mini_vocab(&img, &v, err, sizeof(err)) == 0);
        for (int i = 0; v && i < 4; i++) {
                a[i].v = v;
                pthread_create(&th[i], NULL, thread_main, &a[i]);
        }
        for (int i = 0; v && i < 4; i++) {
                pthread_join(th[i], NULL);
                CHECK(a[i].ok);
        }
        m40_vocab_free(v);
}

/* test_stories - ids llama.cpp gives for stories260K (skipped when the file is absent). */
static void test_stories(const char *root)
{
        char path[4096], err[M40_GGUF_ERRLEN];
        struct m40_gguf *g = NULL;
        struct m40_vocab *v = NULL;
        int32_t o[64];
        const int32_t want[] = {1, 346, 306, 414, 263, 304, 341, 432, 353, 331, 407, 261, 378};

        snprintf(path, sizeof(path), "%s/../shared/models/stories260K.gguf", root);
        if (m40_gguf_open(path, &g, err, sizeof(err))) {
                fprintf(stderr, "note: %s absent, stories260K checks skipped\n", path);
                return;
        }
        CHECK(m40_vocab_new(g, &v, err, sizeof(err)) == 0);
        m40_gguf_free(g);
        long n = v ? tok(v, "Hello world, once upon a time", M40_TOKENIZE_ADD_SPECIAL, o) : 0;
        CHECK(n == 13 && !memcmp(o, want, sizeof(want)));
        m40_vocab_free(v);
}

/* eog_gguf - a byte-level BPE vocabulary: the n_sp control tokens sp first (ids 0..), then
 * the 256 GPT-2 byte tokens and "ab"; eos (and eot when >= 0) named in the metadata. */
static struct gguf_mini eog_gguf(const char *const *sp, int n_sp, uint32_t eos, int eot)
{
        static char enc[256][4];
        const char *toks[300], *merge[] = {"a b"};
        int32_t types[300];
        int n = 0;
        struct gguf_mini g;

        for (int i = 0; i < n_sp; i++) {
                toks[n] = sp[i];
                types[n++] = 3;
        }
        for (int b = 0, extra = 0; b < 256; b++) {
                bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
                enc[b][m40_utf8_encode(self ? (uint32_t)b : 256u + (uint32_t)extra++, enc[b])] = 0;
                toks[n] = enc[b];
                types[n++] = 1;
        }
        toks[n] = "ab";
        types[n++] = 1;
        gm_begin(&g);
        gm_kv_str(&g, "general.architecture", "llama");
        gm_kv_str(&g, "tokenizer.ggml.model", "gpt2");
        gm_kv_str(&g, "tokenizer.ggml.pre", "smollm");
        gm_kv_strs(&g, "tokenizer.ggml.tokens", toks, NULL, (size_t)n);
        gm_kv_i32s(&g, "tokenizer.ggml.token_type", types, (size_t)n);
        gm_kv_strs(&g, "tokenizer.ggml.merges", merge, NULL, 1);
        gm_kv_u32(&g, "tokenizer.ggml.bos_token_id", 1);
        gm_kv_u32(&g, "tokenizer.ggml.eos_token_id", eos);
        if (eot >= 0)
                gm_kv_u32(&g, "tokenizer.ggml.eot_token_id", (uint32_t)eot);
        gm_kv_bool(&g, "tokenizer.ggml.add_bos_token", 0);
        gm_end(&g);
        return g;
}

/* eog_is - whether v's end-of-generation set is exactly want[0..n), and agrees with
 * m40_vocab_is_eog() over every id. */
static bool eog_is(const struct m40_vocab *v, const int32_t *want, size_t n)
{
        size_t n_eog, k = 0;
        const int32_t *eog = m40_vocab_eog(v, &n_eog);

        if (n_eog != n || memcmp(eog, want, n * sizeof(*want)))
                return false;
        for (uint32_t id = 0; id < m40_vocab_n_tokens(v); id++) {
                bool in = k < n && want[k] == (int32_t)id;
                k += in;
                if (m40_vocab_is_eog(v, (int32_t)id) != in)
                        return false;
        }
        return true;
}

/* The end-of-generation set, derived as llama.cpp's vocabulary loader does: EOS, EOT, EOM,
 * the FIM pad/repo/sep tokens and the tokens whose text is a known end of turn. */
static void test_eog(void)
{
        static const char *const smollm[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>",
                                             "<repo_name>",   "<reponame>",   "<file_sep>"};
        static const char *const harmony[] = {"<|endoftext|>", "<|start|>", "<|return|>",
                                              "<|call|>",      "<|end|>",   "<|message|>"};
        struct gguf_mini img;
        struct m40_vocab *v = NULL;
        char err[256];

        /* SmolLM2: EOS <|im_end|>, EOT <|endoftext|> by its text, <reponame> as FIM repo */
        img = eog_gguf(smollm, 6, 2, -1);
        CHECK(mini_vocab(&img, &v, err, sizeof(err)) == 0);
        CHECK(v && eog_is(v, (const int32_t[]){0, 2, 4}, 3));
        CHECK(v && m40_vocab_special(v)->eot == 0 && m40_vocab_special(v)->fim_rep == 4);
        CHECK(v && (m40_vocab_token_attr(v, 4) & M40_TOKEN_CONTROL));
        v = m40_vocab_free(v);
        /* an EOT named in the metadata joins the set */
        img = eog_gguf(smollm, 6, 2, 5);
        CHECK(mini_vocab(&img, &v, err, sizeof(err)) == 0);
        CHECK(v && eog_is(v, (const int32_t[]){0, 2, 4, 5}, 4));
        v = m40_vocab_free(v);
        /* o200k_harmony: with <|return|> and <|call|>, <|end|> ends a message, not the
         * generation */
        img = eog_gguf(harmony, 6, 2, -1);
        CHECK(mini_vocab(&img, &v, err, sizeof(err)) == 0);
        CHECK(v && eog_is(v, (const int32_t[]){0, 2, 3}, 3));
        v = m40_vocab_free(v);
}

/* A chat template's default system message (SmolLM2's and Qwen2.5's Jinja write one when
 * the conversation opens without a system message), applied as their Jinja applies it. */
static void test_chat_template(void)
{
        static const char smollm2[] =
                "{% for message in messages %}{% if loop.first and messages[0]['role'] != "
                "'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
                "trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + "
                "message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
                "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
        static const char qwen[] =
                "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0]['role'] == "
                "'system' %}{{- messages[0]['content'] }}{%- else %}{{- 'You are Qwen.' }}"
                "{%- endif %}{%- else %}{%- if messages[0]['role'] == 'system' %}{{- "
                "'<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}"
                "{{- \"<|im_start|>system\\nYou are \\\"Qwen\\\", \\\\o/<|im_end|>\\n\" }}"
                "{%- endif %}{%- endif %}";
        const struct m40_chat_msg user[] = {{"user", "Hi"}},
                                  sys[] = {{"system", "S"}, {"user", "Hi"}};
        struct m40_chat_template t;
        char out[512];
        size_t n;

        CHECK(m40_chat_template_init(&t, smollm2) == 0 && t.tmpl == M40_CHAT_TMPL_CHATML);
        CHECK(t.default_system && !strcmp(t.default_system, "You are a helpful AI assistant named "
                                                            "SmolLM, trained by Hugging Face"));
        CHECK(m40_chat_render(&t, user, 1, true, out, sizeof(out), &n) == 0);
        CHECK(!strcmp(out, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
                           "trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                           "<|im_start|>assistant\n"));
        CHECK(m40_chat_render(&t, sys, 2, false, out, sizeof(out), &n) == 0);
        CHECK(!strcmp(out, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"));
        CHECK(m40_chat_render(&t, user, 1, true, out, 8, &n) == -ENOBUFS && n == 150);
        CHECK(m40_chat_render(&t, user, 0, true, out, sizeof(out), &n) == 0 &&
              !strcmp(out, "<|im_start|>assistant\n"));
        m40_chat_template_done(&t);
        m40_chat_template_done(&t);
        CHECK(m40_chat_template_init(&t, qwen) == 0 && t.default_system &&
              !strcmp(t.default_system, "You are \"Qwen\", \\o/"));
        m40_chat_template_done(&t);
        /* the literal without a test of the first message's role is not a default */
        CHECK(m40_chat_template_init(&t, "{{ '<|im_start|>system\nX<|im_end|>\n' }}") == 0 &&
              t.tmpl == M40_CHAT_TMPL_CHATML && !t.default_system);
        CHECK(m40_chat_template_init(&t, "chatml") == 0 && !t.default_system);
        CHECK(m40_chat_render(&t, user, 1, true, out, sizeof(out), &n) == 0 &&
              !strcmp(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
        t.tmpl = M40_CHAT_TMPL_GEMMA;
        CHECK(m40_chat_template_init(&t, "USER: x ASSISTANT: y") == M40_EUNSUPPORTED &&
              t.tmpl == M40_CHAT_TMPL_CHATML && !t.default_system);
        CHECK(m40_chat_template_init(&t, NULL) == -ENOENT && t.tmpl == M40_CHAT_TMPL_CHATML);
}

int main(int argc, char **argv)
{
        test_utf8();
        test_heap();
        test_spm();
        test_bpe();
        test_chat();
        test_eog();
        test_chat_template();
        test_threads();
        test_stories(argc > 1 ? argv[1] : ".");
        if (failures)
                fprintf(stderr, "%d checks failed\n", failures);
        else
                printf("all text checks passed\n");
        return failures ? 1 : 0;
}
