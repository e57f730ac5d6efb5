/* model.h - a llama/qwen2 model's weights, mapped from its GGUF file for the CPU engine.
 *
 * Borrows the parsed file (struct m40_gguf, which must outlive the model) and maps it
 * through the descriptor the parse kept open (m40_gguf_fd()): the file is opened and
 * parsed once, by whoever made the struct m40_gguf. Owns the memory map of the file, the
 * hyperparameters read from metadata, views of every weight matrix (struct m40_weight,
 * borrowed from the map) and float copies of the small vectors (norms, biases, rope
 * frequency factors). Shared by the engines: its types are the core's (types.h), not the
 * CPU engine's math headers. Rejects architectures other than llama and qwen2, missing
 * tensors and tensors of the wrong shape with a message. */
#ifndef M40_ENGINE_MODEL_H
#define M40_ENGINE_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"
#include "types.h"

enum m40_arch {
        M40_ARCH_LLAMA = 0,
        M40_ARCH_QWEN2 = 1,
};

struct m40_layer {
        float *attn_norm;               /* (dim) */
        struct m40_weight wq;           /* (q_dim rows, dim) */
        struct m40_weight wk, wv;       /* (kv_dim rows, dim) */
        float *bq, *bk, *bv;            /* qwen2 biases (q_dim), (kv_dim); NULL for llama */
        struct m40_weight wo;           /* (dim rows, q_dim) */
        float *ffn_norm;                /* (dim) */
        struct m40_weight w_gate, w_up; /* (n_ff rows, dim) */
        struct m40_weight w_down;       /* (dim rows, n_ff) */
};

struct m40_model {
        struct m40_gguf *gguf; /* borrowed: the caller's, outlives the model */
        void *map;
        size_t map_size;
        enum m40_arch arch;
        uint32_t n_layers, dim, n_heads, n_kv_heads, head_dim, q_dim, kv_dim, n_ff;
        uint32_t n_vocab, n_ctx_train;
        float rms_eps;
        struct m40_rope rope;           /* freq_factors points at rope_freqs below when present */
        float *rope_freqs;              /* (n_rot / 2) or NULL */
        struct m40_weight tok_embd;     /* (n_vocab rows, dim) */
        struct m40_weight output;       /* (n_vocab rows, dim); tok_embd when tied */
        float *output_norm;             /* (dim) */
        struct m40_layer *layers;       /* n_layers */
        int32_t bos_id, eos_id, eot_id; /* -1 when the file names none */
        uint64_t weight_bytes;
};

/* Progress of reading the mapping in: fn(ctx, bytes done, bytes in all, seconds) after
 * every chunk, the last call with done == total. */
struct m40_model_progress {
        void (*fn)(void *ctx, uint64_t done, uint64_t total, double seconds);
        void *ctx;
};

/* m40_model_load - check the parsed GGUF g (from m40_gguf_open(); borrowed, kept alive by
 * the caller until m40_model_free()) and map its file, read in up front. Returns 0 and the
 * model in *ret (free with m40_model_free()); -errno (-EBADF for a g from
 * m40_gguf_open_mem()), M40_EFORMAT or M40_EUNSUPPORTED with a message in err otherwise.
 * pr (may be NULL) hears how the read-in goes. */
int m40_model_load(struct m40_gguf *g, const struct m40_model_progress *pr, struct m40_model **ret,
                   char *err, size_t errlen);

/* m40_model_open - as m40_model_load(), but the mapping is not read in up front: for an
 * engine that uploads the weights with its own reader (the CUDA engine's loader) and
 * touches only the small tensors through the map, so a cold file is read once. */
int m40_model_open(struct m40_gguf *g, struct m40_model **ret, char *err, size_t errlen);

/* m40_model_free - unmap and free (not the borrowed struct m40_gguf); accepts NULL;
 * returns NULL. */
struct m40_model *m40_model_free(struct m40_model *m);

/* m40_model_embed - the embedding row of token (< n_vocab) as floats into out (dim). */
void m40_model_embed(const struct m40_model *m, int32_t token, float *out);

#endif
