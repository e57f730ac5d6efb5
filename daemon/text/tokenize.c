/* tokenize.c - m40_vocab_tokenize(): special-token partitioning, then SPM or BPE over each
 * text fragment, with llama.cpp's BOS/EOS rules.
 *
 * Invalid UTF-8, the way llama.cpp treats it (and so the way we must, to give the same
 * ids): SPM tokenizes raw bytes, so invalid bytes come out as byte tokens <0xNN>. BPE first
 * decodes each fragment to code points, turning every byte that does not start a complete
 * sequence into U+FFFD and accepting overlong forms and surrogates as decoded; the
 * re-encoded text is what gets pre-tokenized and merged. Surrogates cannot go through PCRE2,
 * so the regexes see U+E000 (like a surrogate: neither letter, number nor space) in their
 * place, at the same byte offsets; likewise code points newer than PCRE2's Unicode tables
 * (pretok.h). Sequences decoding past U+10FFFF make llama.cpp throw;
 * here they count as invalid bytes. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "text/pretok.h"
#include "text/utf8.h"
#include "text/vocab_impl.h"

struct frag {
        size_t off, len; /* text: bytes of the input */
        int32_t id;      /* >= 0: a special token */
};

struct frags {
        struct frag *v;
        size_t n, cap;
};

struct m40_tok_scratch {
        struct frags a, b;
        struct m40_ids ids;
        struct m40_spm_work *spm;
        struct m40_bpe_work *bpe;
        struct m40_pretok_work *pre;
        char *clean, *rx; /* BPE: the fragment re-encoded; the regexes' copy */
        size_t cap_clean;
        uint32_t *cand; /* positions in vocab->specials the text may hold */
        uint64_t *mark; /* the same as a bit set */
        size_t n_cand, cap_cand;
};

static int frag_push(struct frags *f, size_t off, size_t len, int32_t id)
{
        if (f->n == f->cap) {
                size_t cap = f->cap ? f->cap * 2 : 16;
                struct frag *p = realloc(f->v, cap * sizeof(*p));
                if (!p)
                        return -ENOMEM;
                f->v = p;
                f->cap = cap;
        }
        f->v[f->n++] = (struct frag){off, len, id};
        return 0;
}

static bool c_space(char c)
{
        return c == ' ' || (c >= '\t' && c <= '\r');
}

/* split_text - fragment (off, len) of text around every occurrence of token id, as
 * llama.cpp's tokenizer_st_partition (with its LSTRIP/RSTRIP rules), appended to out. */
static int split_text(const struct m40_vocab *v, const char *text, size_t off, size_t len,
                      int32_t id, struct frags *out)
{
        const struct m40_span *t = &v->text[id];
        uint32_t attr = v->attr[id];
        int e = 0;

        while (len && !e) {
                const char *m = memmem(text + off, len, t->ptr, t->len);
                if (!m)
                        break;
                size_t mo = (size_t)(m - text), left = mo - off;
                if (attr & M40_TOKEN_LSTRIP)
                        while (left && c_space(text[off + left - 1]))
                                left--;
                if (left)
                        e = frag_push(out, off, left, -1);
                if (!e)
                        e = frag_push(out, 0, 0, id);
                size_t end = off + len;
                off = mo + t->len;
                len = end - off;
                if (attr & M40_TOKEN_RSTRIP)
                        while (len && c_space(text[off])) {
                                off++;
                                len--;
                        }
        }
        if (len && !e)
                e = frag_push(out, off, len, -1);
        return e;
}

static void mark_bucket(const struct m40_vocab *v, unsigned b, uint64_t *mark)
{
        for (uint32_t k = v->bucket_off[b]; k < v->bucket_off[b + 1]; k++)
                mark[v->bucket[k] >> 6] |= 1ull << (v->bucket[k] & 63);
}

/* candidates - the positions in v->specials of the tokens text may hold, ascending: those
 * whose first two bytes occur in text, and those shorter than two bytes (vocabularies such
 * as Gemma's hold thousands of special tokens; a text holds few of their first bytes). */
static int candidates(const struct m40_vocab *v, const char *text, size_t len,
                      struct m40_tok_scratch *w)
{
        uint64_t set[M40_PAIR_BITS / 64] = {0};
        size_t words = (v->n_specials + 63) / 64, n = 0;

        w->n_cand = 0;
        if (!v->n_specials)
                return 0;
        for (size_t i = 0; i + 1 < len; i++) {
                unsigned b = m40_pair_bit((uint8_t)text[i], (uint8_t)text[i + 1]);
                set[b >> 6] |= 1ull << (b & 63);
        }
        if (v->n_specials > w->cap_cand) {
                uint32_t *p = realloc(w->cand, v->n_specials * sizeof(*p));
                uint64_t *m = p ? realloc(w->mark, words * sizeof(*m)) : NULL;
                if (p)
                        w->cand = p;
                if (!m)
                        return -ENOMEM;
                w->mark = m;
                w->cap_cand = v->n_specials;
        }
        memset(w->mark, 0, words * sizeof(*w->mark));
        mark_bucket(v, M40_PAIR_BITS, w->mark);
        for (unsigned i = 0; i < M40_PAIR_BITS / 64; i++)
                for (uint64_t m = set[i]; m; m &= m - 1)
                        mark_bucket(v, i * 64 + (unsigned)__builtin_ctzll(m), w->mark);
        for (size_t i = 0; i < words; i++)
                for (uint64_t m = w->mark[i]; m; m &= m - 1)
                        w->cand[n++] = (uint32_t)(i * 64 + (size_t)__builtin_ctzll(m));
        w->n_cand = n;
        return 0;
}

static int partition(const struct m40_vocab *v, const char *text, size_t len, bool parse_special,
                     struct m40_tok_scratch *w)
{
        int e;

        w->a.n = 0;
        if (!len)
                return 0;
        e = frag_push(&w->a, 0, len, -1);
        if (!e)
                e = candidates(v, text, len, w);
        for (size_t c = 0; c < w->n_cand && !e; c++) {
                int32_t id = v->specials[w->cand[c]];
                if (!parse_special && (v->attr[id] & (M40_TOKEN_CONTROL | M40_TOKEN_UNKNOWN)))
                        continue;
                if (v->text[id].len == 0 || v->text[id].len > len)
                        continue;
                w->b.n = 0;
                for (size_t i = 0; i < w->a.n && !e; i++) {
                        const struct frag *f = &w->a.v[i];
                        e = f->id >= 0 ? frag_push(&w->b, 0, 0, f->id)
                                       : split_text(v, text, f->off, f->len, id, &w->b);
                }
                struct frags t = w->a;
                w->a = w->b;
                w->b = t;
        }
        return e;
}

/* bpe_clean - the fragment as llama.cpp's BPE sees it (see the file comment): returns the
 * text to merge over in *ret_clean and the regexes' copy in *ret_rx (surrogates and the code
 * points PCRE2 is too old to know replaced by stand-ins of the same length, pretok.h). */
static int bpe_clean(const struct m40_pretok *p, struct m40_tok_scratch *w, const char *s, size_t n,
                     const char **ret_clean, const char **ret_rx, size_t *ret_n)
{
        size_t o = 0, adv;

        if (m40_utf8_valid_len((const uint8_t *)s, n) == n && !m40_pretok_needs_copy(p, s, n)) {
                *ret_clean = *ret_rx = s;
                *ret_n = n;
                return 0;
        }
        if (3 * n > w->cap_clean) {
                char *c = realloc(w->clean, 3 * n), *r;
                if (!c)
                        return -ENOMEM;
                w->clean = c;
                r = realloc(w->rx, 3 * n);
                if (!r)
                        return -ENOMEM;
                w->rx = r;
                w->cap_clean = 3 * n;
        }
        for (size_t i = 0; i < n; i += adv) {
                uint32_t cpt = m40_utf8_decode_lenient((const uint8_t *)s + i, n - i, &adv);
                uint32_t sub =
                        cpt >= 0xD800 && cpt <= 0xDFFF ? 0xE000 : m40_pretok_substitute(p, cpt);
                size_t k = m40_utf8_encode(cpt, w->clean + o);
                if (sub)
                        m40_utf8_encode(sub, w->rx + o);
                else
                        memcpy(w->rx + o, w->clean + o, k);
                o += k;
        }
        *ret_clean = w->clean;
        *ret_rx = w->rx;
        *ret_n = o;
        return 0;
}

static int bpe_fragment(const struct m40_vocab *v, const char *s, size_t n,
                        struct m40_tok_scratch *w)
{
        const struct m40_piece *pc;
        const char *clean, *rx;
        size_t np = 0, len;
        int e = bpe_clean(v->pretok, w, s, n, &clean, &rx, &len);

        if (!e)
                e = m40_pretok_split(v->pretok, rx, len, &w->pre, &pc, &np);
        for (size_t i = 0; i < np && !e; i++)
                e = m40_bpe_word(v, (const uint8_t *)clean + pc[i].off, pc[i].len, &w->bpe,
                                 &w->ids);
        return e;
}

static int run(const struct m40_vocab *v, const char *text, size_t len, unsigned flags,
               struct m40_tok_scratch *w)
{
        bool add = flags & M40_TOKENIZE_ADD_SPECIAL, prev_special = true;
        int e = partition(v, text, len, flags & M40_TOKENIZE_PARSE_SPECIAL, w);

        if (!e && add && v->sp.add_bos)
                e = m40_ids_push(&w->ids, v->sp.bos);
        for (size_t i = 0; i < w->a.n && !e; i++) {
                const struct frag *f = &w->a.v[i];
                if (f->id >= 0) {
                        e = m40_ids_push(&w->ids, f->id);
                        prev_special = true;
                } else if (v->type == M40_VOCAB_SPM) {
                        e = m40_spm_fragment(v, text + f->off, f->len,
                                             v->sp.add_space_prefix && prev_special, &w->spm,
                                             &w->ids);
                        prev_special = false;
                } else {
                        e = bpe_fragment(v, text + f->off, f->len, w);
                }
        }
        if (!e && add && v->sp.add_eos)
                e = m40_ids_push(&w->ids, v->sp.eos);
        return e;
}

int m40_tok_scratch_new(struct m40_tok_scratch **ret)
{
        struct m40_tok_scratch *w = calloc(1, sizeof(*w));

        if (!w)
                return -ENOMEM;
        *ret = w;
        return 0;
}

struct m40_tok_scratch *m40_tok_scratch_free(struct m40_tok_scratch *w)
{
        if (!w)
                return NULL;
        free(w->a.v);
        free(w->b.v);
        free(w->ids.v);
        free(w->clean);
        free(w->rx);
        free(w->cand);
        free(w->mark);
        m40_spm_work_free(w->spm);
        m40_bpe_work_free(w->bpe);
        m40_pretok_work_free(w->pre);
        free(w);
        return NULL;
}

int m40_vocab_tokenize_scratch(const struct m40_vocab *v, struct m40_tok_scratch *w,
                               const char *text, size_t len, unsigned flags, int32_t *out,
                               size_t cap, size_t *n_tokens)
{
        int e;

        if (len > M40_TOKENIZE_MAX_BYTES)
                return -E2BIG;
        w->ids.n = 0;
        e = run(v, text, len, flags, w);
        if (!e) {
                size_t n = w->ids.n < cap ? w->ids.n : cap;
                if (n)
                        memcpy(out, w->ids.v, n * sizeof(*out));
                *n_tokens = w->ids.n;
                e = w->ids.n > cap ? -ENOBUFS : 0;
        }
        return e;
}

int m40_vocab_tokenize(const struct m40_vocab *v, const char *text, size_t len, unsigned flags,
                       int32_t *out, size_t cap, size_t *n_tokens)
{
        struct m40_tok_scratch *w;
        int e = m40_tok_scratch_new(&w);

        if (e)
                return e;
        e = m40_vocab_tokenize_scratch(v, w, text, len, flags, out, cap, n_tokens);
        m40_tok_scratch_free(w);
        return e;
}
