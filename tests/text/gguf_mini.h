/* gguf_mini.h - builds small metadata-only GGUF images in memory for the text tests and the
 * fuzzer: a vocabulary without a model file. Header-only; test code, so allocation failures
 * abort. */
#ifndef M40_TESTS_TEXT_GGUF_MINI_H
#define M40_TESTS_TEXT_GGUF_MINI_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gguf_mini {
        uint8_t *p;
        size_t n, cap;
        uint64_t n_kv;
};

static inline void gm_bytes(struct gguf_mini *g, const void *s, size_t n)
{
        if (g->n + n > g->cap) {
                g->cap = (g->n + n) * 2 + 64;
                g->p = realloc(g->p, g->cap);
                if (!g->p)
                        abort();
        }
        memcpy(g->p + g->n, s, n);
        g->n += n;
}

static inline void gm_u32(struct gguf_mini *g, uint32_t v)
{
        gm_bytes(g, &v, 4);
}

static inline void gm_u64(struct gguf_mini *g, uint64_t v)
{
        gm_bytes(g, &v, 8);
}

static inline void gm_str_n(struct gguf_mini *g, const char *s, size_t n)
{
        gm_u64(g, n);
        gm_bytes(g, s, n);
}

static inline void gm_str(struct gguf_mini *g, const char *s)
{
        gm_str_n(g, s, strlen(s));
}

/* gm_begin - the header; the KV count is patched by gm_end(). */
static inline void gm_begin(struct gguf_mini *g)
{
        memset(g, 0, sizeof(*g));
        gm_bytes(g, "GGUF", 4);
        gm_u32(g, 3);
        gm_u64(g, 0); /* tensors */
        gm_u64(g, 0); /* KVs, patched */
}

static inline void gm_end(struct gguf_mini *g)
{
        memcpy(g->p + 16, &g->n_kv, 8);
}

static inline void gm_key(struct gguf_mini *g, const char *key, uint32_t type)
{
        gm_str(g, key);
        gm_u32(g, type);
        g->n_kv++;
}

static inline void gm_kv_str(struct gguf_mini *g, const char *key, const char *v)
{
        gm_key(g, key, 8);
        gm_str(g, v);
}

static inline void gm_kv_u32(struct gguf_mini *g, const char *key, uint32_t v)
{
        gm_key(g, key, 4);
        gm_u32(g, v);
}

static inline void gm_kv_bool(struct gguf_mini *g, const char *key, int v)
{
        uint8_t b = (uint8_t) !!v;

        gm_key(g, key, 7);
        gm_bytes(g, &b, 1);
}

/* gm_kv_strs - a string array of n entries given with their lengths. */
static inline void gm_kv_strs(struct gguf_mini *g, const char *key, const char *const *v,
                              const size_t *len, size_t n)
{
        gm_key(g, key, 9);
        gm_u32(g, 8);
        gm_u64(g, n);
        for (size_t i = 0; i < n; i++)
                gm_str_n(g, v[i], len ? len[i] : strlen(v[i]));
}

static inline void gm_kv_f32s(struct gguf_mini *g, const char *key, const float *v, size_t n)
{
        gm_key(g, key, 9);
        gm_u32(g, 6);
        gm_u64(g, n);
        gm_bytes(g, v, 4 * n);
}

static inline void gm_kv_i32s(struct gguf_mini *g, const char *key, const int32_t *v, size_t n)
{
        gm_key(g, key, 9);
        gm_u32(g, 5);
        gm_u64(g, n);
        gm_bytes(g, v, 4 * n);
}

#endif
