/* heap.h - the queue of merge candidates that the SPM and BPE tokenizers share (internal to
 * daemon/text): a binary min-heap of adjacent-symbol pairs ordered by priority, the leftmost
 * pair first on equal priority, as llama.cpp's llm_bigram_spm and llm_bigram_bpe queues.
 *
 * Both orders fit one key without loss: BPE's int32 merge rank (lowest first) and SPM's
 * float score (highest first, stored negated) are exact as doubles, and negation keeps
 * float comparison (NaN and signed zeros included) as it was. Push and pop are inline: they
 * run once or twice per byte of tokenized text. */
#ifndef M40_TEXT_HEAP_H
#define M40_TEXT_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One merge candidate: symbols left and right are neighbours when it is queued. */
struct m40_bigram {
        double prio;         /* lower pops first: BPE merge rank, SPM -score */
        int32_t left, right; /* symbol indexes */
        uint32_t size;       /* left.len + right.len when queued; a mismatch marks it stale */
        int32_t result;      /* the caller's: the token of the merged bytes, if it knows it */
};

/* Caller storage; zero-initialized it is an empty heap. */
struct m40_bigram_heap {
        struct m40_bigram *v; /* [cap], the first n heap-ordered */
        size_t n, cap;
};

/* m40_bigram_heap_grow - doubles h's storage (256 records at first); returns 0, or -ENOMEM
 * leaving h unchanged. */
int m40_bigram_heap_grow(struct m40_bigram_heap *h);

/* m40_bigram_heap_done - frees h's storage; h is empty afterwards and may be reused. */
void m40_bigram_heap_done(struct m40_bigram_heap *h);

/* m40_bigram_heap_clear - empties h, keeping its storage. */
static inline void m40_bigram_heap_clear(struct m40_bigram_heap *h)
{
        h->n = 0;
}

/* m40_bigram_before - a pops before b. */
static inline bool m40_bigram_before(const struct m40_bigram *a, const struct m40_bigram *b)
{
        return a->prio < b->prio || (a->prio == b->prio && a->left < b->left);
}

/* m40_bigram_heap_push - queues a copy of *b; returns 0, or -ENOMEM leaving h unchanged. */
static inline int m40_bigram_heap_push(struct m40_bigram_heap *h, const struct m40_bigram *b)
{
        size_t i;

        if (h->n == h->cap) {
                int e = m40_bigram_heap_grow(h);
                if (e)
                        return e;
        }
        for (i = h->n++; i > 0; i = (i - 1) / 2) {
                if (!m40_bigram_before(b, &h->v[(i - 1) / 2]))
                        break;
                h->v[i] = h->v[(i - 1) / 2];
        }
        h->v[i] = *b;
        return 0;
}

/* m40_bigram_heap_pop - when h is not empty, moves its first candidate (lowest prio, then
 * lowest left) into *ret and returns true; returns false otherwise. Candidates equal in
 * both come out in an order fixed by the sequence of pushes and pops. */
static inline bool m40_bigram_heap_pop(struct m40_bigram_heap *h, struct m40_bigram *ret)
{
        struct m40_bigram last;
        size_t i = 0, n;

        if (!h->n)
                return false;
        *ret = h->v[0];
        last = h->v[--h->n];
        n = h->n;
        for (;;) {
                size_t c = 2 * i + 1;
                if (c >= n)
                        break;
                if (c + 1 < n && m40_bigram_before(&h->v[c + 1], &h->v[c]))
                        c++;
                if (!m40_bigram_before(&h->v[c], &last))
                        break;
                h->v[i] = h->v[c];
                i = c;
        }
        if (n)
                h->v[i] = last;
        return true;
}

#endif
