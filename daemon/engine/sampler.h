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

/* m40_sampler_param_check - whether x is in the range of the sampling parameter name, the
 * same for m40d.ini [sampling] and the wire (m40.h documents it):
 *   temperature     a number <= 100 (<= 0: greedy)
 *   top_k           an integer in the int32 range (<= 0: off)
 *   top_p           a number >= 0 (0 and >= 1: off)
 *   min_p           a number <= 1 (<= 0: off)
 *   repeat_penalty  a number in 0.01..100 (1: off)
 *   frequency_penalty, presence_penalty  a number in -100..100 (0: off)
 *   penalty_last_n  an integer >= -1 (0: off, -1: all)
 * Numbers must be finite. Returns 0, -EINVAL when x is out of range (NaN always is), or
 * -ENOENT for an unknown name. *ret_range (may be NULL) gets the range in words whenever
 * name is known. */
int m40_sampler_param_check(const char *name, double x, const char **ret_range);

/* m40_sampler_params_check - m40_sampler_param_check() over every field of p (seed takes
 * any value). Returns 0, or -EINVAL with the first bad field's name in *ret_name and its
 * range in *ret_range. */
int m40_sampler_params_check(const struct m40_sampling *p, const char **ret_name,
                             const char **ret_range);

/* m40_sampler_argmax - index of the largest of n values (the lowest index on ties). */
int32_t m40_sampler_argmax(const float *x, size_t n);

#endif
