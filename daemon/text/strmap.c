/* strmap.c - open-addressing hash tables for token texts and BPE merges (see strmap.h). */
#include "text/strmap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static uint64_t mix(uint64_t a, uint64_t b)
{
        __uint128_t r = (__uint128_t)a * b;

        return (uint64_t)r ^ (uint64_t)(r >> 64);
}

uint64_t m40_hash(const void *p, size_t n)
{
        const uint8_t *s = p;
        uint64_t h = 0x243F6A8885A308D3ull ^ n;
        uint64_t w;

        while (n >= 8) {
                memcpy(&w, s, 8);
                h = mix(h ^ w, 0x9E3779B97F4A7C15ull);
                s += 8;
                n -= 8;
        }
        w = 0;
        if (n)
                memcpy(&w, s, n);
        h = mix(h ^ w, 0xBF58476D1CE4E5B9ull);
        return mix(h, 0x94D049BB133111EBull);
}

static uint32_t table_size(uint32_t n)
{
        uint32_t size = 16;

        while (size < 2 * (uint64_t)n + 1)
                size *= 2;
        return size;
}

int m40_strmap_init(struct m40_strmap *m, const struct m40_span *keys, uint32_t n)
{
        uint32_t size = table_size(n);

        m->slots = calloc(size, sizeof(*m->slots));
        if (!m->slots)
                return -ENOMEM;
        m->mask = size - 1;
        m->keys = keys;
        return 0;
}

void m40_strmap_done(struct m40_strmap *m)
{
        free(m->slots);
        m->slots = NULL;
}

static int key_eq(const struct m40_span *k, const char *s, size_t n)
{
        return k->len == n && (n == 0 || memcmp(k->ptr, s, n) == 0);
}

void m40_strmap_put(struct m40_strmap *m, uint32_t value)
{
        const struct m40_span *k = &m->keys[value];
        uint64_t h = m40_hash(k->ptr, k->len);
        uint64_t tag = h >> 32 << 32;

        for (uint32_t i = (uint32_t)h & m->mask;; i = (i + 1) & m->mask) {
                uint64_t s = m->slots[i];
                if (s == 0 ||
                    ((s >> 32 << 32) == tag && key_eq(&m->keys[(uint32_t)s - 1], k->ptr, k->len))) {
                        m->slots[i] = tag | (value + 1ull);
                        return;
                }
        }
}

int32_t m40_strmap_get(const struct m40_strmap *m, const char *str, size_t n)
{
        uint64_t h = m40_hash(str, n);
        uint64_t tag = h >> 32 << 32;

        for (uint32_t i = (uint32_t)h & m->mask;; i = (i + 1) & m->mask) {
                uint64_t s = m->slots[i];
                if (s == 0)
                        return -1;
                if ((s >> 32 << 32) == tag && key_eq(&m->keys[(uint32_t)s - 1], str, n))
                        return (int32_t)((uint32_t)s - 1);
        }
}

int m40_pairmap_init(struct m40_pairmap *m, uint32_t n)
{
        uint32_t size = table_size(n);

        m->keys = malloc((size_t)size * sizeof(*m->keys));
        m->rank = malloc((size_t)size * sizeof(*m->rank));
        m->result = malloc((size_t)size * sizeof(*m->result));
        if (!m->keys || !m->rank || !m->result) {
                m40_pairmap_done(m);
                return -ENOMEM;
        }
        memset(m->keys, 0xFF, (size_t)size * sizeof(*m->keys));
        m->mask = size - 1;
        return 0;
}

void m40_pairmap_done(struct m40_pairmap *m)
{
        free(m->keys);
        free(m->rank);
        free(m->result);
        m->keys = NULL;
        m->rank = m->result = NULL;
}

void m40_pairmap_put(struct m40_pairmap *m, uint32_t a, uint32_t b, int32_t rank, int32_t result)
{
        uint64_t key = (uint64_t)a << 32 | b;
        uint32_t i = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & m->mask;

        for (;; i = (i + 1) & m->mask) {
                if (m->keys[i] == key)
                        return;
                if (m->keys[i] == UINT64_MAX) {
                        m->keys[i] = key;
                        m->rank[i] = rank;
                        m->result[i] = result;
                        return;
                }
        }
}
