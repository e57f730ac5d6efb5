/* cuda/engine/cuda_weights.h - a model's weights on the device for the CUDA engine's forward pass
 * (cuda_forward.c): the matrices loaded from the GGUF file into the weights pool
 * (loader.h) and re-laid out once into the layout the matrix kernels read
 * (m40_cuda_relayout()), the norm vectors and biases as floats, and the RoPE table.
 * Everything lives in the allocator's weights pool; nothing is freed but the host
 * array of layers. Plain C11. */
#ifndef M40_CUDA_CUDA_WEIGHTS_H
#define M40_CUDA_CUDA_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "cuda/runtime/alloc.h"
#include "cuda/runtime/loader.h"
#include "cuda/kernels/matvec.h"
#include "engine/model.h"

/* One layer: its seven matrices (borrowed views into the weights pool) and its float
 * vectors (device; the biases NULL for llama). */
struct m40_cuda_layer_weights {
        struct m40_cuda_matrix wq, wk, wv, wo, gate, up, down;
        float *attn_norm, *ffn_norm, *bq, *bk, *bv;
};

struct m40_cuda_model_weights {
        struct m40_cuda_weights w;               /* the loaded tensors (loader.h) */
        struct m40_cuda_layer_weights *layers;   /* n_layers, host array */
        struct m40_cuda_matrix tok_embd, output; /* output: the table itself when tied */
        float *output_norm;                      /* device, dim floats */
        float *rope_cs; /* device, (max_ctx, n_rot): cos, sin of each pair at each position */
};

/* m40_cuda_model_weights_extra - the weights-pool bytes m40_cuda_model_weights_put()
 * needs besides the loader's (m40_cuda_load_plan()): the float vectors and the RoPE
 * table of max_ctx positions. */
uint64_t m40_cuda_model_weights_extra(const struct m40_model *m, uint32_t max_ctx);

/* m40_cuda_model_weights_bounce - the scratch bytes the relayout needs at least (the
 * longest row of a matrix); it takes up to 256 MiB of free scratch when there is more,
 * and gives it back. */
uint64_t m40_cuda_model_weights_bounce(const struct m40_model *m);

/* m40_cuda_model_weights_put - load m's tensors through a (load: the loader's options;
 * progress goes to its callback), re-lay out every matrix once (tied tables once), and
 * upload the float vectors and the RoPE table of max_ctx positions (from the CPU
 * reference's m40_cpu_rope()). Synchronous. Returns 0; -ENOMEM (host or pool),
 * M40_ECUDA, or the loader's errors, with a message in err. mw is zeroed by the caller
 * first; free it with m40_cuda_model_weights_free() whether or not this succeeded. */
int m40_cuda_model_weights_put(struct m40_cuda_model_weights *mw, const struct m40_model *m,
                               struct m40_cuda_alloc *a, uint32_t max_ctx,
                               const struct m40_cuda_load_opts *load, char *err, size_t errlen);

/* m40_cuda_model_weights_free - the host array of layers (the device memory goes with the
 * allocator). */
void m40_cuda_model_weights_free(struct m40_cuda_model_weights *mw);

#endif
