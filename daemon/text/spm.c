/* spm.c - SentencePiece-style tokenization of one text fragment, as llama.cpp's
 * llm_tokenizer_spm_session: spaces become U+2581 (after an optional leading space), the
 * text starts as one symbol per UTF-8 character (lengths taken from lead bytes, so invalid
 * input still splits), the adjacent pair that forms the token with the highest score is
 * merged first (leftmost on ties), and a symbol that is no token falls back to byte tokens
 * <0xNN>. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "text/heap.h"
#include "text/utf8.h"
#include "text/vocab_impl.h"

struct ssym {
        uint32_t start, len; /* len 0: merged into its left neighbour */
        int32_t prev, next;
};

struct m40_spm_work {
        char *text;
        size_t cap_text;
        struct ssym *sym;
        size_t cap_sym;
        struct m40_bigram_heap heap;
};

struct m40_spm_work *m40_spm_work_free(struct m40_spm_work *w)
{
        if (!w)
                return NULL;
        free(w->text);
        free(w->sym);
        m40_bigram_heap_done(&w->heap);
        free(w);
        return NULL;
}

static int try_bigram(const struct m40_vocab *v, struct m40_spm_work *w, int32_t left,
                      int32_t right)
{
        if (left < 0 || right < 0)
                return 0;
        const struct ssym *l = &w->sym[left];
        uint32_t size = l->len + w->sym[right].len;
        int32_t id = m40_strmap_get(&v->by_text, w->text + l->start, size);
        if (id < 0)
                return 0;
        struct m40_bigram b = {-(double)v->score[id], left, right, size, id}; /* highest first */
        return m40_bigram_heap_push(&w->heap, &b);
}

/* escape - optional ' ' + text with every ' ' as U+2581, into w->text; returns its length. */
static int escape(struct m40_spm_work *w, const char *text, size_t n, bool prefix_space,
                  size_t *ret_len)
{
        size_t need = 3 * (n + 1), o = 0;

        if (need > w->cap_text) {
                char *p = realloc(w->text, need);
                if (!p)
                        return -ENOMEM;
                w->text = p;
                w->cap_text = need;
        }
        if (prefix_space) {
                memcpy(w->text, "\xE2\x96\x81", 3);
                o = 3;
        }
        for (size_t i = 0; i < n; i++) {
                if (text[i] == ' ') {
                        memcpy(w->text + o, "\xE2\x96\x81", 3);
                        o += 3;
                } else {
                        w->text[o++] = text[i];
                }
        }
        *ret_len = o;
        return 0;
}

static int emit(const struct m40_vocab *v, const struct m40_spm_work *w, const struct ssym *s,
                struct m40_ids *out)
{
        int32_t id = m40_strmap_get(&v->by_text, w->text + s->start, s->len);
        int e = 0;

        if (id >= 0)
                return m40_ids_push(out, id);
        for (uint32_t i = 0; i < s->len && !e; i++) {
                int32_t b = v->byte_tok[(uint8_t)w->text[s->start + i]];
                if (b >= 0)
                        e = m40_ids_push(out, b);
        }
        return e;
}

int m40_spm_fragment(const struct m40_vocab *v, const char *text, size_t n, bool prefix_space,
                     struct m40_spm_work **work, struct m40_ids *out)
{
        struct m40_spm_work *w = *work;
        struct m40_bigram b;
        size_t len, ns = 0;
        int e;

        if (!w && !(w = *work = calloc(1, sizeof(*w))))
                return -ENOMEM;
        e = escape(w, text, n, prefix_space, &len);
        if (e || len == 0)
                return e;
        if (len > w->cap_sym) {
                struct ssym *p = realloc(w->sym, len * sizeof(*p));
                if (!p)
                        return -ENOMEM;
                w->sym = p;
                w->cap_sym = len;
        }
        for (size_t o = 0; o < len; ns++) {
                size_t k = m40_utf8_seq_len((uint8_t)w->text[o]);
                k = k < len - o ? k : len - o;
                w->sym[ns] = (struct ssym){(uint32_t)o, (uint32_t)k, (int32_t)ns - 1, -1};
                if (ns)
                        w->sym[ns - 1].next = (int32_t)ns;
                o += k;
        }
        m40_bigram_heap_clear(&w->heap);
        for (size_t i = 1; i < ns && !e; i++)
                e = try_bigram(v, w, (int32_t)i - 1, (int32_t)i);
        while (!e && m40_bigram_heap_pop(&w->heap, &b)) {
                struct ssym *l = &w->sym[b.left], *r = &w->sym[b.right];
                if (!l->len || !r->len || l->len + r->len != b.size)
                        continue;
                l->len += r->len;
                r->len = 0;
                l->next = r->next;
                if (r->next >= 0)
                        w->sym[r->next].prev = b.left;
                e = try_bigram(v, w, l->prev, b.left);
                if (!e)
                        e = try_bigram(v, w, b.left, l->next);
        }
        for (int32_t i = 0; i >= 0 && !e; i = w->sym[i].next)
                e = emit(v, w, &w->sym[i], out);
        return e;
}
