/* vocab.c - loading a vocabulary from GGUF metadata: token texts, scores, types, the lookup
 * table, the rendered pieces; plus the small accessors of vocab.h. Special tokens are in
 * vocab_special.c, BPE merges and pre-tokenizer selection in vocab_bpe.c. */
#include "text/vocab_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "m40/error.h"
#include "model/gguf.h"
#include "text/pretok.h"
#include "text/utf8.h"

/* GGUF tokenizer.ggml.token_type values (llama.cpp's llama_token_type). */
enum {
        TT_UNDEFINED = 0,
        TT_NORMAL = 1,
        TT_UNKNOWN = 2,
        TT_CONTROL = 3,
        TT_USER_DEFINED = 4,
        TT_UNUSED = 5,
        TT_BYTE = 6,
};

__attribute__((format(printf, 4, 5))) static int fail(char *err, size_t errlen, int code,
                                                      const char *fmt, ...)
{
        va_list ap;

        if (err && errlen) {
                va_start(ap, fmt);
                vsnprintf(err, errlen, fmt, ap);
                va_end(ap);
        }
        return code;
}

int m40_ids_push(struct m40_ids *ids, int32_t id)
{
        if (ids->n == ids->cap) {
                size_t cap = ids->cap ? ids->cap * 2 : 64;
                int32_t *p = realloc(ids->v, cap * sizeof(*p));
                if (!p)
                        return -ENOMEM;
                ids->v = p;
                ids->cap = cap;
        }
        ids->v[ids->n++] = id;
        return 0;
}

static uint32_t attr_from_type(int32_t t)
{
        switch (t) {
        case TT_UNKNOWN:
                return M40_TOKEN_UNKNOWN;
        case TT_UNUSED:
                return M40_TOKEN_UNUSED;
        case TT_NORMAL:
                return M40_TOKEN_NORMAL;
        case TT_CONTROL:
                return M40_TOKEN_CONTROL;
        case TT_USER_DEFINED:
                return M40_TOKEN_USER_DEFINED;
        case TT_BYTE:
                return M40_TOKEN_BYTE;
        default:
                return M40_TOKEN_UNDEFINED;
        }
}

/* load_texts - tokenizer.ggml.tokens into text_arena (empty entries become "[EMPTY_i]", as
 * llama.cpp names them), scores and attributes. */
static int load_texts(struct m40_vocab *v, const struct m40_gguf *g, char *err, size_t errlen)
{
        const struct m40_gguf_str *toks;
        const void *scores = NULL, *types = NULL;
        uint32_t type, stype = 0;
        uint64_t n, ns, nt, bytes = 0;
        int e;

        e = m40_gguf_get_arr(g, "tokenizer.ggml.tokens", &type, &n, (const void **)&toks);
        if (e == -ENOENT)
                return fail(err, errlen, M40_EFORMAT, "tokenizer.ggml.tokens is missing");
        if (e || type != M40_GGUF_STRING)
                return fail(err, errlen, M40_ETYPE, "tokenizer.ggml.tokens is not a string array");
        if (n == 0 || n > M40_VOCAB_MAX_TOKENS)
                return fail(err, errlen, M40_EFORMAT, "tokenizer.ggml.tokens: %llu entries",
                            (unsigned long long)n);
        e = m40_gguf_get_arr(g, "tokenizer.ggml.scores", &stype, &ns, &scores);
        if (e != -ENOENT && (e || (stype != M40_GGUF_F32 && stype != M40_GGUF_I32) || ns < n))
                return fail(err, errlen, M40_EFORMAT,
                            "tokenizer.ggml.scores: not an f32/i32 array of %llu entries",
                            (unsigned long long)n);
        e = m40_gguf_get_arr(g, "tokenizer.ggml.token_type", &type, &nt, &types);
        if (e != -ENOENT && (e || type != M40_GGUF_I32 || nt < n))
                return fail(err, errlen, M40_EFORMAT,
                            "tokenizer.ggml.token_type: not an i32 array of %llu entries",
                            (unsigned long long)n);
        for (uint64_t i = 0; i < n; i++) {
                if (toks[i].len > M40_VOCAB_MAX_TEXT)
                        return fail(err, errlen, M40_EFORMAT, "token %llu: text of %llu bytes",
                                    (unsigned long long)i, (unsigned long long)toks[i].len);
                bytes += toks[i].len ? toks[i].len : 32;
        }
        v->n_tokens = (uint32_t)n;
        v->text = calloc(n, sizeof(*v->text));
        v->score = calloc(n, sizeof(*v->score));
        v->attr = calloc(n, sizeof(*v->attr));
        v->text_arena = malloc(bytes + 1);
        if (!v->text || !v->score || !v->attr || !v->text_arena)
                return -ENOMEM;
        char *p = v->text_arena;
        for (uint32_t i = 0; i < n; i++) {
                size_t len = toks[i].len;
                if (len)
                        memcpy(p, toks[i].ptr, len);
                else
                        len = (size_t)sprintf(p, "[EMPTY_%u]", i);
                v->text[i] = (struct m40_span){p, (uint32_t)len};
                p += len;
                if (stype == M40_GGUF_F32 && scores)
                        v->score[i] = ((const float *)scores)[i];
                else if (scores)
                        v->score[i] = (float)((const int32_t *)scores)[i];
                v->attr[i] = types ? attr_from_type(((const int32_t *)types)[i]) : M40_TOKEN_NORMAL;
        }
        e = m40_strmap_init(&v->by_text, v->text, v->n_tokens);
        if (e)
                return e;
        for (uint32_t i = 0; i < n; i++)
                m40_strmap_put(&v->by_text, i);
        return 0;
}

/* spm_byte - llama.cpp's token_to_byte for SPM: the hex digits at text[3..5). */
static char spm_byte(const struct m40_span *t)
{
        char hex[3] = {0};

        if (t->len > 3)
                memcpy(hex, t->ptr + 3, t->len - 3 < 2 ? t->len - 3 : 2);
        return (char)strtol(hex, NULL, 16);
}

/* bpe_decode - llama.cpp's llama_decode_text: each code point back to its byte; one that
 * is no GPT-2 byte becomes "[UNK_BYTE_0x<hex of its UTF-8>" + the whole text + "]".
 * Writes into out (NULL: only count) and returns the length. */
static size_t bpe_decode(const struct m40_span *t, char *out)
{
        const uint8_t *s = (const uint8_t *)t->ptr;
        size_t i = 0, n = 0, adv;

        while (i < t->len) {
                uint32_t cpt = m40_utf8_decode_lenient(s + i, t->len - i, &adv);
                int b = m40_gpt2_cpt_byte(cpt);
                i += adv;
                if (b >= 0) {
                        if (out)
                                out[n] = (char)b;
                        n++;
                        continue;
                }
                char u[4], buf[40];
                size_t k = m40_utf8_encode(cpt, u), m = (size_t)sprintf(buf, "[UNK_BYTE_0x");
                for (size_t j = 0; j < k; j++)
                        m += (size_t)sprintf(buf + m, "%02x", (uint8_t)u[j]);
                if (out) {
                        memcpy(out + n, buf, m);
                        memcpy(out + n + m, t->ptr, t->len);
                        out[n + m + t->len] = ']';
                }
                n += m + t->len + 1;
        }
        return n;
}

/* piece_of - the piece of token i (special = true) into out (NULL: only count). */
static size_t piece_of(const struct m40_vocab *v, uint32_t i, char *out)
{
        const struct m40_span *t = &v->text[i];
        uint32_t a = v->attr[i];

        if (a & (M40_TOKEN_UNKNOWN | M40_TOKEN_CONTROL | M40_TOKEN_USER_DEFINED)) {
                if (out)
                        memcpy(out, t->ptr, t->len);
                return t->len;
        }
        if (a & M40_TOKEN_NORMAL) {
                if (v->type == M40_VOCAB_BPE)
                        return bpe_decode(t, out);
                size_t n = 0; /* SPM: U+2581 -> ' ' */
                for (uint32_t j = 0; j < t->len; n++) {
                        bool sp = j + 3 <= t->len && !memcmp(t->ptr + j, "\xE2\x96\x81", 3);
                        if (out)
                                out[n] = sp ? ' ' : t->ptr[j];
                        j += sp ? 3 : 1;
                }
                return n;
        }
        if (a & M40_TOKEN_BYTE) {
                if (out)
                        out[0] = spm_byte(t); /* <0xNN>, for SPM and BPE alike */
                return 1;
        }
        return 0;
}

static int build_pieces(struct m40_vocab *v)
{
        size_t total = 0;

        for (uint32_t i = 0; i < v->n_tokens; i++)
                total += piece_of(v, i, NULL);
        v->piece = calloc(v->n_tokens, sizeof(*v->piece));
        v->piece_arena = malloc(total + 1);
        if (!v->piece || !v->piece_arena)
                return -ENOMEM;
        char *p = v->piece_arena;
        for (uint32_t i = 0; i < v->n_tokens; i++) {
                size_t n = piece_of(v, i, p);
                v->piece[i] = (struct m40_span){p, (uint32_t)n};
                p += n;
        }
        return 0;
}

/* spm_bytes - llama.cpp's byte_to_token for SPM: <0xNN>, else the one-byte text. */
static void spm_bytes(struct m40_vocab *v)
{
        for (int b = 0; b < 256; b++) {
                char hex[8], one = (char)b;
                snprintf(hex, sizeof(hex), "<0x%02X>", b);
                int32_t id = m40_strmap_get(&v->by_text, hex, 6);
                if (id < 0)
                        id = m40_strmap_get(&v->by_text, &one, 1);
                v->byte_tok[b] = id >= 0 ? id : v->sp.unk;
        }
}

static int load_model_kind(struct m40_vocab *v, const struct m40_gguf *g, char *err, size_t errlen)
{
        const char *model = NULL;

        if (m40_gguf_get_str(g, "tokenizer.ggml.model", NULL, &model) || !model)
                return fail(err, errlen, M40_EFORMAT, "tokenizer.ggml.model is missing");
        if (!strcmp(model, "llama")) {
                v->type = M40_VOCAB_SPM;
                v->sp.add_space_prefix = true;
                v->sp.add_bos = true;
        } else if (!strcmp(model, "gpt2")) {
                v->type = M40_VOCAB_BPE;
                v->clean_spaces = true;
        } else {
                return fail(err, errlen, M40_EUNSUPPORTED,
                            "tokenizer.ggml.model '%s' is not supported (llama, gpt2)", model);
        }
        return 0;
}

int m40_vocab_new(const struct m40_gguf *g, struct m40_vocab **ret, char *err, size_t errlen)
{
        struct m40_vocab *v = calloc(1, sizeof(*v));
        int e;

        if (!v)
                return -ENOMEM;
        e = load_model_kind(v, g, err, errlen);
        if (!e)
                e = load_texts(v, g, err, errlen);
        if (!e && v->type == M40_VOCAB_BPE)
                e = m40_vocab_load_bpe(v, g, err, errlen);
        if (!e && m40_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", v->sp.add_space_prefix,
                                    &v->sp.add_space_prefix))
                e = fail(err, errlen, M40_ETYPE, "tokenizer.ggml.add_space_prefix is not a bool");
        if (!e)
                e = m40_vocab_load_special(v, g, err, errlen);
        if (!e && v->type == M40_VOCAB_SPM)
                spm_bytes(v);
        if (!e)
                e = build_pieces(v);
        if (e) {
                if (e == -ENOMEM)
                        fail(err, errlen, e, "out of memory loading the vocabulary");
                m40_vocab_free(v);
                return e;
        }
        *ret = v;
        return 0;
}

struct m40_vocab *m40_vocab_free(struct m40_vocab *v)
{
        if (!v)
                return NULL;
        m40_strmap_done(&v->by_text);
        m40_strmap_done(&v->by_raw);
        m40_strmap_done(&v->by_slow);
        m40_pairmap_done(&v->merges);
        m40_pretok_free(v->pretok);
        free(v->text);
        free(v->piece);
        free(v->score);
        free(v->attr);
        free(v->text_arena);
        free(v->piece_arena);
        free(v->raw);
        free(v->raw_arena);
        free(v->slow_key);
        free(v->slow_rank);
        free(v->slow_arena);
        free(v->specials);
        free(v->bucket);
        free(v->eog);
        free(v);
        return NULL;
}

enum m40_vocab_type m40_vocab_type(const struct m40_vocab *v)
{
        return v->type;
}

uint32_t m40_vocab_n_tokens(const struct m40_vocab *v)
{
        return v->n_tokens;
}

const char *m40_vocab_pre(const struct m40_vocab *v)
{
        return v->pre;
}

const struct m40_vocab_special *m40_vocab_special(const struct m40_vocab *v)
{
        return &v->sp;
}

static bool in_range(const struct m40_vocab *v, int32_t id)
{
        return id >= 0 && (uint32_t)id < v->n_tokens;
}

const char *m40_vocab_token_text(const struct m40_vocab *v, int32_t id, size_t *ret_len)
{
        if (!in_range(v, id))
                return NULL;
        *ret_len = v->text[id].len;
        return v->text[id].ptr;
}

uint32_t m40_vocab_token_attr(const struct m40_vocab *v, int32_t id)
{
        return in_range(v, id) ? v->attr[id] : 0;
}

float m40_vocab_token_score(const struct m40_vocab *v, int32_t id)
{
        return in_range(v, id) ? v->score[id] : 0.0f;
}

int32_t m40_vocab_find(const struct m40_vocab *v, const char *text, size_t n)
{
        return m40_strmap_get(&v->by_text, text, n);
}

bool m40_vocab_is_eog(const struct m40_vocab *v, int32_t id)
{
        size_t lo = 0, hi = v->n_eog;

        while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (v->eog[mid] == id)
                        return true;
                if (v->eog[mid] < id)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return false;
}

const int32_t *m40_vocab_eog(const struct m40_vocab *v, size_t *ret_n)
{
        *ret_n = v->n_eog;
        return v->eog;
}

int m40_vocab_piece(const struct m40_vocab *v, int32_t id, bool special, const char **ret,
                    size_t *ret_len)
{
        if (!in_range(v, id))
                return -EINVAL;
        if (!special && (v->attr[id] & (M40_TOKEN_UNKNOWN | M40_TOKEN_CONTROL))) {
                *ret = "";
                *ret_len = 0;
                return 0;
        }
        *ret = v->piece[id].ptr;
        *ret_len = v->piece[id].len;
        return 0;
}
