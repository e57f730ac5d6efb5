/* model_info.h - the facts about a model that `m40ctl show` prints and the engines check,
 * gathered from a parsed GGUF's metadata and tensor table. */
#ifndef M40_MODEL_INFO_H
#define M40_MODEL_INFO_H

#include <stddef.h>
#include <stdint.h>

#include "ggml_type.h"
#include "gguf.h"

struct m40_model_type_stat {
        uint32_t type; /* enum m40_ggml_type */
        uint64_t n_tensors;
        uint64_t n_elements;
        uint64_t bytes;
};

struct m40_model_info {
        const char *arch;  /* general.architecture; owned by the gguf */
        const char *name;  /* general.name, or NULL */
        uint64_t n_params; /* elements over all tensors, as llama.cpp counts them */
        uint64_t weight_bytes;
        uint32_t context_length, n_layers, n_embd, n_heads, n_kv_heads, n_ff;
        uint32_t head_dim;         /* n_embd / n_heads, or <arch>.attention.key_length */
        uint32_t rope_dims;        /* <arch>.rope.dimension_count, default head_dim */
        float rope_freq_base;      /* default 10000 */
        const char *rope_scaling;  /* <arch>.rope.scaling.type, or "none" */
        float rope_scaling_factor; /* 0 when absent */
        float rms_eps;             /* <arch>.attention.layer_norm_rms_epsilon, 0 when absent */
        uint64_t vocab_size;       /* entries of tokenizer.ggml.tokens, else <arch>.vocab_size */
        const char *tokenizer;     /* tokenizer.ggml.model ("llama", "gpt2"), or NULL */
        const char *tokenizer_pre; /* tokenizer.ggml.pre, or NULL */
        const char *chat_template; /* tokenizer.chat_template, or NULL */
        struct m40_model_type_stat types[M40_GGML_TYPE_LIMIT]; /* by first appearance */
        size_t n_types;
};

/* m40_model_info_init - fill *info from g. Returns 0; M40_EFORMAT when
 * general.architecture is missing or a hyperparameter has the wrong type or range, with a
 * message in err. info borrows strings from g: keep g alive while info is used. */
int m40_model_info_init(struct m40_model_info *info, const struct m40_gguf *g, char *err,
                        size_t errlen);

#endif
