/* vocab_bpe.c - the parts of a vocabulary only byte-level BPE needs: the GPT-2 byte to
 * code point map, each token's text decoded back to bytes, the merge table and the
 * pre-tokenizer chosen by tokenizer.ggml.pre.
 *
 * BPE symbols are spans of raw bytes. A symbol matches a token when the token's text is
 * exactly the GPT-2 encoding of the symbol's bytes, so only tokens whose text is such an
 * encoding ("decodable") can ever be produced by merges; merges between two such tokens are
 * keyed by id, the rare merge naming a non-token string by its bytes ("slow" merges). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "m40/error.h"
#include "model/gguf.h"
#include "text/pretok.h"
#include "text/utf8.h"
#include "text/vocab_impl.h"

/* Bytes that stand for themselves in GPT-2's map: '!'..'~', 0xA1..0xAC, 0xAE..0xFF. */
static bool self_byte(unsigned b)
{
        return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

uint32_t m40_gpt2_byte_cpt(uint8_t b)
{
        unsigned n = 0;

        if (self_byte(b))
                return b;
        for (unsigned c = 0; c < b; c++)
                n += !self_byte(c);
        return 256 + n;
}

int m40_gpt2_cpt_byte(uint32_t cpt)
{
        unsigned n = 0;

        if (cpt < 256)
                return self_byte(cpt) ? (int)cpt : -1;
        if (cpt >= 256 + 68)
                return -1;
        for (unsigned c = 0; c < 256; c++)
                if (!self_byte(c) && n++ == cpt - 256)
                        return (int)c;
        return -1;
}

/* decode_raw - the bytes whose GPT-2 encoding is exactly t, into out; returns their count
 * or -1 when t is no such encoding. */
static int64_t decode_raw(const struct m40_span *t, char *out)
{
        const uint8_t *s = (const uint8_t *)t->ptr;
        size_t i = 0, n = 0, adv;

        while (i < t->len) {
                if (m40_utf8_check(s + i, t->len - i) <= 0)
                        return -1;
                uint32_t cpt = m40_utf8_decode_lenient(s + i, t->len - i, &adv);
                int b = m40_gpt2_cpt_byte(cpt);
                if (b < 0)
                        return -1;
                out[n++] = (char)b;
                i += adv;
        }
        return (int64_t)n;
}

static int load_raw(struct m40_vocab *v)
{
        size_t total = 0;
        int e;

        for (uint32_t i = 0; i < v->n_tokens; i++)
                total += v->text[i].len;
        v->raw = calloc(v->n_tokens, sizeof(*v->raw));
        v->raw_arena = malloc(total + 1);
        if (!v->raw || !v->raw_arena)
                return -ENOMEM;
        char *p = v->raw_arena;
        for (uint32_t i = 0; i < v->n_tokens; i++) {
                int64_t n = decode_raw(&v->text[i], p);
                v->raw[i] = (struct m40_span){p, n < 0 ? UINT32_MAX : (uint32_t)n};
                p += n < 0 ? 0 : n;
        }
        e = m40_strmap_init(&v->by_raw, v->raw, v->n_tokens);
        if (e)
                return e;
        for (uint32_t i = 0; i < v->n_tokens; i++)
                if (v->raw[i].len != UINT32_MAX)
                        m40_strmap_put(&v->by_raw, i);
        for (int b = 0; b < 256; b++) {
                char enc[4], one = (char)b;
                size_t k = m40_utf8_encode(m40_gpt2_byte_cpt((uint8_t)b), enc), m = 0;
                v->byte_tok[b] = m40_strmap_get(&v->by_raw, &one, 1);
                v->byte_fb[b][0] = v->byte_fb[b][1] = -1;
                for (size_t j = 0; j < k; j++) {
                        int32_t id = m40_strmap_get(&v->by_text, &enc[j], 1);
                        if (id >= 0)
                                v->byte_fb[b][m++] = id;
                }
        }
        return 0;
}

/* add_slow - a merge of byte strings a and b that are not both tokens. */
static int add_slow(struct m40_vocab *v, const char *a, size_t na, const char *b, size_t nb,
                    int32_t rank, size_t *used)
{
        uint32_t la = (uint32_t)na;
        char *p = v->slow_arena + *used;

        memcpy(p, &la, 4);
        memcpy(p + 4, a, na);
        memcpy(p + 4 + na, b, nb);
        v->slow_key[v->n_slow] = (struct m40_span){p, (uint32_t)(4 + na + nb)};
        v->slow_rank[v->n_slow++] = rank;
        *used += 4 + na + nb;
        return 0;
}

static int load_merges(struct m40_vocab *v, const struct m40_gguf *g, char *err, size_t errlen)
{
        const struct m40_gguf_str *m;
        uint32_t type;
        uint64_t n, bytes = 0;
        size_t used = 0;
        char *buf, *ra, *rb;
        int e = m40_gguf_get_arr(g, "tokenizer.ggml.merges", &type, &n, (const void **)&m);

        if (e == -ENOENT) {
                snprintf(err, errlen, "tokenizer.ggml.merges is missing");
                return M40_EFORMAT;
        }
        if (e || type != M40_GGUF_STRING || n > M40_VOCAB_MAX_TOKENS) {
                snprintf(err, errlen, "tokenizer.ggml.merges is not a string array");
                return M40_EFORMAT;
        }
        for (uint64_t i = 0; i < n; i++) {
                if (m[i].len > M40_VOCAB_MAX_TEXT) {
                        snprintf(err, errlen, "merge %llu: %llu bytes", (unsigned long long)i,
                                 (unsigned long long)m[i].len);
                        return M40_EFORMAT;
                }
                bytes += m[i].len + 4;
        }
        e = m40_pairmap_init(&v->merges, (uint32_t)n);
        buf = malloc(3 * (M40_VOCAB_MAX_TEXT + 1));
        v->slow_key = malloc((n ? n : 1) * sizeof(*v->slow_key));
        v->slow_rank = malloc((n ? n : 1) * sizeof(*v->slow_rank));
        v->slow_arena = malloc(bytes + 1);
        if (e || !buf || !v->slow_key || !v->slow_rank || !v->slow_arena) {
                free(buf);
                return -ENOMEM;
        }
        ra = buf + M40_VOCAB_MAX_TEXT + 1;
        rb = ra + M40_VOCAB_MAX_TEXT + 1;
        for (uint32_t i = 0; i < n; i++) {
                const char *s = m[i].ptr,
                           *sp = m[i].len > 1 ? memchr(s + 1, ' ', m[i].len - 1) : NULL;
                if (!sp)
                        continue; /* llama.cpp ranks the pair ("", ""): it never applies */
                struct m40_span a = {s, (uint32_t)(sp - s)};
                struct m40_span b = {sp + 1, (uint32_t)(m[i].len - a.len - 1)};
                int64_t na = decode_raw(&a, ra), nb = decode_raw(&b, rb);
                if (na < 0 || nb < 0)
                        continue; /* no symbol ever has this text */
                int32_t ia = m40_strmap_get(&v->by_text, a.ptr, a.len);
                int32_t ib = m40_strmap_get(&v->by_text, b.ptr, b.len);
                if (ia >= 0 && ib >= 0) {
                        memcpy(buf, a.ptr, a.len);
                        memcpy(buf + a.len, b.ptr, b.len);
                        m40_pairmap_put(&v->merges, (uint32_t)ia, (uint32_t)ib, (int32_t)i,
                                        m40_strmap_get(&v->by_text, buf, a.len + b.len));
                } else {
                        add_slow(v, ra, (size_t)na, rb, (size_t)nb, (int32_t)i, &used);
                }
        }
        free(buf);
        e = m40_strmap_init(&v->by_slow, v->slow_key, v->n_slow);
        if (e)
                return e;
        for (uint32_t i = v->n_slow; i-- > 0;) /* put in reverse: the first rank wins */
                m40_strmap_put(&v->by_slow, i);
        return 0;
}

int m40_vocab_load_bpe(struct m40_vocab *v, const struct m40_gguf *g, char *err, size_t errlen)
{
        struct m40_pretok_flags f;
        const char *pre = NULL;
        int e;

        if (m40_gguf_get_str(g, "tokenizer.ggml.pre", NULL, &pre)) {
                snprintf(err, errlen, "tokenizer.ggml.pre is not a string");
                return M40_ETYPE;
        }
        snprintf(v->pre, sizeof(v->pre), "%s", pre && *pre ? pre : "default");
        e = m40_pretok_new(pre ? pre : "", &v->pretok, &f, err, errlen);
        if (e)
                return e;
        v->ignore_merges = f.ignore_merges;
        v->clean_spaces = f.clean_spaces;
        v->no_default_bos = f.no_default_bos;
        v->sp.add_bos = f.add_bos;
        e = load_raw(v);
        if (!e)
                e = load_merges(v, g, err, errlen);
        return e;
}
