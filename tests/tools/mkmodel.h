/* mkmodel.h - what m40-mkmodel's files share: the model specification the command line
 * fills (mkmodel_args.c) and the generator reads (m40-mkmodel.c), its limits, and the
 * random source of generated rows (m40-mkmodel.c, mkmodel_gen.c). */
#ifndef M40_TESTS_MKMODEL_H
#define M40_TESTS_MKMODEL_H

#include <stdbool.h>
#include <stdint.h>

#define EXIT_USAGE  2
#define TYPE_Q4_K_M 1000 /* pseudo type id for the Q4_K_M mix */
#define MIN_VOCAB   260  /* 3 specials, 256 bytes, at least one piece */
#define MAX_VOCAB   (1u << 22)
#define MAX_DIM     (1u << 16)
#define MAX_FFN     (1u << 20)
#define MAX_LAYERS  1024u
#define MAX_CTX     (1u << 24)
#define MAX_THREADS 1024u

/* A model shape; the presets are shapes, and so is the start of struct spec. */
struct preset {
        const char *name;
        uint64_t layers, dim, heads, kv_heads, ffn, vocab, ctx;
        bool tied;
        double rope_base;
};

struct spec {
        struct preset sh;
        bool qwen2;    /* --arch qwen2: Q/K/V biases, NEOX RoPE (implied by the arch) */
        uint32_t type; /* ggml type id, or TYPE_Q4_K_M */
        uint64_t seed, threads;
        bool quiet;
        bool random_blocks; /* --random-blocks: quantized rows as random blocks */
        const char *out;
};

/* The random source of generated rows: xoshiro256**, seeded by chaining (seed, tensor,
 * row) through splitmix64, so every row can be made alone, on any thread. */
struct mk_rng {
        uint64_t s[4];
};

static inline uint64_t mk_splitmix64(uint64_t *x)
{
        uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));

        z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
        return z ^ (z >> 31);
}

static inline uint64_t mk_rotl(uint64_t x, int k)
{
        return (x << k) | (x >> (64 - k));
}

static inline void mk_rng_seed(struct mk_rng *g, uint64_t seed, uint64_t tensor, uint64_t row)
{
        uint64_t sm = seed;

        sm = mk_splitmix64(&sm) ^ tensor;
        sm = mk_splitmix64(&sm) ^ row;
        for (int i = 0; i < 4; i++)
                g->s[i] = mk_splitmix64(&sm);
}

static inline uint64_t mk_next(struct mk_rng *g)
{
        uint64_t *s = g->s, v = mk_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;

        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = mk_rotl(s[3], 45);
        return v;
}

/* mkmodel_parse_args - fill *s from the command line (a preset, then the options over it);
 * prints --help and exits 0, or prints a usage error and exits EXIT_USAGE. */
void mkmodel_parse_args(int argc, char **argv, struct spec *s);

/* mkmodel_type_name - the --type name of t (a ggml type id or TYPE_Q4_K_M). */
const char *mkmodel_type_name(uint32_t t);

/* mkmodel_ftype - llama.cpp's LLAMA_FTYPE number for --type t (general.file_type); 0 for an
 * unknown t. */
uint32_t mkmodel_ftype(uint32_t t);

#endif
