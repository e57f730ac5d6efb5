/* sampler.h - picking the next token from logits: greedy, penalties, top-k, top-p, min-p,
 * temperature and a per-sequence seeded draw.
 *
 * Owns the sampling chain of struct m40_sampling (engine.h) and the per-sequence random
 * state. Deterministic: the same logits, history, parameters and rng state give the same
 * token on every machine (the draw uses double precision and a splitmix64 generator). */
#ifndef M40_ENGINE_SAMPLER_H
#define M40_ENGINE_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"

struct m40_cand {
        int32_t id;
        float logit;
};

/* Scratch shared by all sequences of an engine (sampling runs on one thread). */
struct m40_sampler_scratch {
        uint32_t n_vocab;
        struct m40_cand *cand; /* (n_vocab) */
        uint32_t *counts;      /* (n_vocab), all zero between calls */
        double *probs;         /* (n_vocab) */
};

int m40_sampler_scratch_init(struct m40_sampler_scratch *s, uint32_t n_vocab);
void m40_sampler_scratch_done(struct m40_sampler_scratch *s);

/* m40_sampler_seed - the initial rng state for a seed. */
uint64_t m40_sampler_seed(uint64_t seed);

/* m40_sampler_sample - the next token for logits (n_vocab) given the sequence's history
 * (prompt and generated tokens, oldest first) and its rng state (advanced by one draw
 * unless greedy). Penalties apply to the last penalty_last_n history tokens. */
int32_t m40_sampler_sample(const struct m40_sampling *p, uint64_t *rng, const float *logits,
                           const int32_t *hist, size_t n_hist, struct m40_sampler_scratch *s);

/* m40_sampler_argmax - index of the largest of n values (the lowest index on ties). */
int32_t m40_sampler_argmax(const float *x, size_t n);

#endif
