/* bpe.c - byte-level BPE over one pre-tokenized word, merge for merge as llama.cpp's
 * llm_tokenizer_bpe_session: start from one symbol per byte, repeatedly merge the adjacent
 * pair with the lowest merge rank (leftmost on ties), then emit each symbol's token; a
 * symbol that is no token falls back to the one-byte-text tokens llama.cpp looks up. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "text/heap.h"
#include "text/vocab_impl.h"

struct sym {
        uint32_t start, len; /* bytes of the word; len 0: merged into its left neighbour */
        int32_t id;          /* token with exactly these bytes, or -1 */
        int32_t prev, next;
};

struct m40_bpe_work {
        struct sym *sym;
        size_t cap_sym;
        struct m40_bigram_heap heap;
        char *key;
        size_t cap_key;
};

struct m40_bpe_work *m40_bpe_work_free(struct m40_bpe_work *w)
{
        if (!w)
                return NULL;
        free(w->sym);
        m40_bigram_heap_done(&w->heap);
        free(w->key);
        free(w);
        return NULL;
}

/* slow_rank - the rank of a merge of two byte strings that are not both tokens. */
static int32_t slow_rank(const struct m40_vocab *v, struct m40_bpe_work *w, const uint8_t *word,
                         const struct sym *l, const struct sym *r)
{
        size_t need = 4 + (size_t)l->len + r->len;
        uint32_t la = l->len;

        if (need > w->cap_key) {
                char *p = realloc(w->key, need);
                if (!p)
                        return -1; /* as if absent; only exotic vocabularies get here */
                w->key = p;
                w->cap_key = need;
        }
        memcpy(w->key, &la, 4);
        memcpy(w->key + 4, word + l->start, l->len + (size_t)r->len);
        int32_t i = m40_strmap_get(&v->by_slow, w->key, need);
        return i < 0 ? -1 : v->slow_rank[i];
}

static int add_bigram(const struct m40_vocab *v, struct m40_bpe_work *w, const uint8_t *word,
                      int32_t left, int32_t right)
{
        struct sym *l, *r;
        struct m40_bigram b;
        int32_t rank;

        if (left < 0 || right < 0)
                return 0;
        l = &w->sym[left];
        r = &w->sym[right];
        if (l->id >= 0 && r->id >= 0) {
                rank = m40_pairmap_get(&v->merges, (uint32_t)l->id, (uint32_t)r->id, &b.result);
        } else {
                rank = v->n_slow ? slow_rank(v, w, word, l, r) : -1;
                b.result = -2; /* look it up when merging */
        }
        if (rank < 0)
                return 0;
        b.prio = rank;
        b.left = left;
        b.right = right;
        b.size = l->len + r->len;
        return m40_bigram_heap_push(&w->heap, &b);
}

static int emit(const struct m40_vocab *v, const struct sym *s, const uint8_t *word,
                struct m40_ids *out)
{
        int e = 0;

        if (s->id >= 0)
                return m40_ids_push(out, s->id);
        for (uint32_t i = 0; i < s->len && !e; i++) {
                const int32_t *fb = v->byte_fb[word[s->start + i]];
                for (int k = 0; k < 2 && fb[k] >= 0 && !e; k++)
                        e = m40_ids_push(out, fb[k]);
        }
        return e;
}

int m40_bpe_word(const struct m40_vocab *v, const uint8_t *word, size_t n,
                 struct m40_bpe_work **work, struct m40_ids *out)
{
        struct m40_bpe_work *w = *work;
        struct m40_bigram b;
        int e = 0;

        if (n == 0)
                return 0;
        if (v->ignore_merges) {
                int32_t id = m40_strmap_get(&v->by_raw, (const char *)word, n);
                if (id >= 0)
                        return m40_ids_push(out, id);
        }
        if (!w && !(w = *work = calloc(1, sizeof(*w))))
                return -ENOMEM;
        if (n > w->cap_sym) {
                struct sym *p = realloc(w->sym, n * sizeof(*p));
                if (!p)
                        return -ENOMEM;
                w->sym = p;
                w->cap_sym = n;
        }
        for (size_t i = 0; i < n; i++)
                w->sym[i] = (struct sym){(uint32_t)i, 1, v->byte_tok[word[i]], (int32_t)i - 1,
                                         i + 1 < n ? (int32_t)i + 1 : -1};
        m40_bigram_heap_clear(&w->heap);
        for (size_t i = 1; i < n && !e; i++)
                e = add_bigram(v, w, word, (int32_t)i - 1, (int32_t)i);
        while (!e && m40_bigram_heap_pop(&w->heap, &b)) {
                struct sym *l = &w->sym[b.left], *r = &w->sym[b.right];
                if (!l->len || !r->len || l->len + r->len != b.size)
                        continue;
                l->len += r->len;
                r->len = 0;
                l->next = r->next;
                if (r->next >= 0)
                        w->sym[r->next].prev = b.left;
                l->id = b.result != -2
                                ? b.result
                                : m40_strmap_get(&v->by_raw, (const char *)word + l->start, l->len);
                e = add_bigram(v, w, word, l->prev, b.left);
                if (!e)
                        e = add_bigram(v, w, word, b.left, l->next);
        }
        for (int32_t i = 0; i >= 0 && !e; i = w->sym[i].next)
                e = emit(v, &w->sym[i], word, out);
        return e;
}
