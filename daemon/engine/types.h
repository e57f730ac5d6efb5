/* types.h - the types every engine shares, owned by the engine core (core.h): what a
 * model's weights are (struct m40_weight, struct m40_rope, used by struct m40_model) and
 * what one step carries (struct m40_fwd_tok, the planner's batch). Types only: the CPU
 * engine's math (matmul.h, ops.h, forward.h) and the CUDA engine's device code both use
 * them, and neither needs the other's headers for them. */
#ifndef M40_ENGINE_TYPES_H
#define M40_ENGINE_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct m40_kv_table;

/* A borrowed view of one 2-D GGUF weight tensor. */
struct m40_weight {
        const void *data; /* n_out rows of row_bytes each, GGML blocks; borrowed */
        uint32_t type;    /* enum m40_ggml_type */
        uint32_t n_in;    /* ne[0]: row length, elements */
        uint32_t n_out;   /* ne[1]: rows */
        size_t row_bytes;
};

/* Rotary position embedding of a model (the CPU reference is ops.h m40_cpu_rope()). */
struct m40_rope {
        uint32_t n_rot;            /* leading dimensions of each head that rotate (even) */
        float freq_base;           /* theta base, e.g. 10000 */
        float freq_scale;          /* 1 / linear scaling factor; 1 when none */
        bool neox;                 /* pairs (i, i + n_rot/2) instead of (2i, 2i + 1) */
        const float *freq_factors; /* (n_rot / 2) divisors of theta, or NULL (llama3 rope_freqs) */
};

/* One token of a step, as the planner (plan.h) lays out the batch for a forward pass:
 * tokens of one sequence appear in position order, and its table holds pages for them. */
struct m40_fwd_tok {
        int32_t token;                 /* < n_vocab */
        uint32_t pos;                  /* position in its sequence */
        const struct m40_kv_table *kv; /* its sequence's pages */
        int32_t logit_row;             /* row of the logits output to fill, or -1 */
};

#endif
