/* strmap.h - the fixed-size hash tables behind vocabulary lookups (internal to daemon/text).
 *
 * struct m40_strmap maps byte strings to 32-bit values. It does not copy keys: value v's
 * key is keys[v], an array the owner keeps alive (token texts, for instance), so a table of
 * a 262k-token vocabulary costs one 8-byte slot per entry at load factor <= 1/2.
 * struct m40_pairmap maps pairs of token ids to a BPE merge (rank, resulting token id). */
#ifndef M40_TEXT_STRMAP_H
#define M40_TEXT_STRMAP_H

#include <stddef.h>
#include <stdint.h>

struct m40_span {
        const char *ptr;
        uint32_t len;
};

struct m40_strmap {
        uint64_t *slots; /* (hash >> 32) << 32 | (value + 1); 0 = empty */
        uint32_t mask;
        const struct m40_span *keys;
};

struct m40_pairmap {
        uint64_t *keys; /* (uint64_t)a << 32 | b; UINT64_MAX = empty */
        int32_t *rank;
        int32_t *result;
        uint32_t mask;
};

/* m40_hash - a 64-bit hash of n bytes at p. */
uint64_t m40_hash(const void *p, size_t n);

/* m40_strmap_init - an empty table for up to n entries whose keys are keys[value];
 * returns 0 or -ENOMEM. */
int m40_strmap_init(struct m40_strmap *m, const struct m40_span *keys, uint32_t n);
void m40_strmap_done(struct m40_strmap *m);
/* m40_strmap_put - inserts value under keys[value]; an entry with an equal key is replaced
 * (the last value put wins, as llama.cpp's token_to_id). The table must not be full. */
void m40_strmap_put(struct m40_strmap *m, uint32_t value);
/* m40_strmap_get - the value stored under the n bytes at s, or -1. */
int32_t m40_strmap_get(const struct m40_strmap *m, const char *s, size_t n);

int m40_pairmap_init(struct m40_pairmap *m, uint32_t n);
void m40_pairmap_done(struct m40_pairmap *m);
/* m40_pairmap_put - adds (a, b) -> (rank, result) unless (a, b) is present (the first rank
 * wins, as llama.cpp's bpe_ranks.emplace). The table must not be full. */
void m40_pairmap_put(struct m40_pairmap *m, uint32_t a, uint32_t b, int32_t rank, int32_t result);
/* m40_pairmap_get - the rank of (a, b) with its result in *ret_result, or -1. */
static inline int32_t m40_pairmap_get(const struct m40_pairmap *m, uint32_t a, uint32_t b,
                                      int32_t *ret_result)
{
        uint64_t key = (uint64_t)a << 32 | b;
        uint32_t i = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & m->mask;

        for (;; i = (i + 1) & m->mask) {
                if (m->keys[i] == key) {
                        *ret_result = m->result[i];
                        return m->rank[i];
                }
                if (m->keys[i] == UINT64_MAX)
                        return -1;
        }
}

#endif
