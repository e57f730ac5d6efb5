/* model_info.c - gathers a model's shape and weight-type table from GGUF (see model_info.h). */
#include "model_info.h"

#include <stdio.h>
#include <string.h>

#include "m40/error.h"

static int arch_u32(const struct m40_gguf *g, const char *suffix, uint32_t def, uint32_t *ret,
                    char *err, size_t errlen)
{
        char key[160];
        int e;

        if (!m40_gguf_arch_key(g, suffix, key, sizeof(key)))
                return M40_EFORMAT;
        e = m40_gguf_get_u32(g, key, def, ret);
        if (e && err)
                snprintf(err, errlen, "%s: metadata %s: %s", m40_gguf_path(g), key,
                         m40_strerror(e));
        return e ? M40_EFORMAT : 0;
}

static int arch_f32(const struct m40_gguf *g, const char *suffix, float def, float *ret, char *err,
                    size_t errlen)
{
        char key[160];
        int e;

        if (!m40_gguf_arch_key(g, suffix, key, sizeof(key)))
                return M40_EFORMAT;
        e = m40_gguf_get_f32(g, key, def, ret);
        if (e && err)
                snprintf(err, errlen, "%s: metadata %s: %s", m40_gguf_path(g), key,
                         m40_strerror(e));
        return e ? M40_EFORMAT : 0;
}

static int str_or_fail(const struct m40_gguf *g, const char *key, const char *def, const char **ret,
                       char *err, size_t errlen)
{
        int e = m40_gguf_get_str(g, key, def, ret);

        if (e && err)
                snprintf(err, errlen, "%s: metadata %s: %s", m40_gguf_path(g), key,
                         m40_strerror(e));
        return e ? M40_EFORMAT : 0;
}

static void count_types(struct m40_model_info *info, const struct m40_gguf *g)
{
        for (uint64_t i = 0; i < m40_gguf_tensor_count(g); i++) {
                const struct m40_gguf_tensor *t = m40_gguf_tensor_at(g, i);
                struct m40_model_type_stat *s = NULL;

                for (size_t k = 0; k < info->n_types; k++)
                        if (info->types[k].type == t->type)
                                s = &info->types[k];
                if (!s) {
                        s = &info->types[info->n_types++];
                        s->type = t->type;
                }
                s->n_tensors++;
                s->n_elements += t->n_elements;
                s->bytes += t->size;
                info->n_params += t->n_elements;
                info->weight_bytes += t->size;
        }
}

int m40_model_info_init(struct m40_model_info *info, const struct m40_gguf *g, char *err,
                        size_t errlen)
{
        char key[160];
        uint32_t vtype;
        uint64_t n;
        const void *data;
        int e = 0;

        memset(info, 0, sizeof(*info));
        if (str_or_fail(g, "general.architecture", NULL, &info->arch, err, errlen))
                return M40_EFORMAT;
        if (!info->arch) {
                if (err)
                        snprintf(err, errlen, "%s: metadata general.architecture is missing",
                                 m40_gguf_path(g));
                return M40_EFORMAT;
        }
        e |= str_or_fail(g, "general.name", NULL, &info->name, err, errlen);
        e |= arch_u32(g, "context_length", 0, &info->context_length, err, errlen);
        e |= arch_u32(g, "block_count", 0, &info->n_layers, err, errlen);
        e |= arch_u32(g, "embedding_length", 0, &info->n_embd, err, errlen);
        e |= arch_u32(g, "feed_forward_length", 0, &info->n_ff, err, errlen);
        e |= arch_u32(g, "attention.head_count", 0, &info->n_heads, err, errlen);
        e |= arch_u32(g, "attention.head_count_kv", info->n_heads, &info->n_kv_heads, err, errlen);
        e |= arch_u32(g, "attention.key_length", info->n_heads ? info->n_embd / info->n_heads : 0,
                      &info->head_dim, err, errlen);
        e |= arch_u32(g, "rope.dimension_count", info->head_dim, &info->rope_dims, err, errlen);
        e |= arch_f32(g, "rope.freq_base", 10000.0f, &info->rope_freq_base, err, errlen);
        e |= arch_f32(g, "rope.scaling.factor", 0.0f, &info->rope_scaling_factor, err, errlen);
        e |= arch_f32(g, "attention.layer_norm_rms_epsilon", 0.0f, &info->rms_eps, err, errlen);
        if (m40_gguf_arch_key(g, "rope.scaling.type", key, sizeof(key)))
                e |= str_or_fail(g, key, "none", &info->rope_scaling, err, errlen);
        e |= str_or_fail(g, "tokenizer.ggml.model", NULL, &info->tokenizer, err, errlen);
        e |= str_or_fail(g, "tokenizer.ggml.pre", NULL, &info->tokenizer_pre, err, errlen);
        e |= str_or_fail(g, "tokenizer.chat_template", NULL, &info->chat_template, err, errlen);
        if (e)
                return M40_EFORMAT;
        if (m40_gguf_get_arr(g, "tokenizer.ggml.tokens", &vtype, &n, &data) == 0)
                info->vocab_size = n;
        else if (m40_gguf_arch_key(g, "vocab_size", key, sizeof(key)) &&
                 m40_gguf_get_u64(g, key, 0, &info->vocab_size))
                return M40_EFORMAT;
        count_types(info, g);
        return 0;
}
