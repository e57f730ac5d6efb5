/* vocab_special.c - special tokens: their ids from tokenizer.ggml.*_token_id, the
 * attribute fix-ups llama.cpp makes by token text (end-of-turn and FIM tokens become control,
 * "unused" control tokens become unused, ...), the end-of-generation set, BOS/EOS insertion
 * flags and the list of tokens the partitioner looks for in text.
 *
 * llama.cpp walks an unordered_map for the text-based detection, so when a vocabulary holds
 * several candidates for one role (e.g. "<|im_end|>" and "<|endoftext|>" for EOT) its choice
 * depends on hash order. Here the lowest id wins. The EOG set, which is what generation and
 * tokenization depend on, does not depend on that choice. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "m40/error.h"
#include "model/gguf.h"
#include "text/vocab_impl.h"

struct id_key {
        const char *key;
        size_t off; /* of the int32_t in struct m40_vocab_special */
};

#define SP(field) offsetof(struct m40_vocab_special, field)

static const struct id_key id_keys[] = {
        {"tokenizer.ggml.bos_token_id", SP(bos)},
        {"tokenizer.ggml.eos_token_id", SP(eos)},
        {"tokenizer.ggml.eot_token_id", SP(eot)},
        {"tokenizer.ggml.eom_token_id", SP(eom)},
        {"tokenizer.ggml.unknown_token_id", SP(unk)},
        {"tokenizer.ggml.seperator_token_id", SP(sep)},
        {"tokenizer.ggml.padding_token_id", SP(pad)},
        {"tokenizer.ggml.mask_token_id", SP(mask)},
        {"tokenizer.ggml.fim_pre_token_id", SP(fim_pre)},
        {"tokenizer.ggml.fim_suf_token_id", SP(fim_suf)},
        {"tokenizer.ggml.fim_mid_token_id", SP(fim_mid)},
        {"tokenizer.ggml.fim_pad_token_id", SP(fim_pad)},
        {"tokenizer.ggml.fim_rep_token_id", SP(fim_rep)},
        {"tokenizer.ggml.fim_sep_token_id", SP(fim_sep)},
        {"tokenizer.ggml.prefix_token_id", SP(fim_pre)}, /* deprecated names */
        {"tokenizer.ggml.suffix_token_id", SP(fim_suf)},
        {"tokenizer.ggml.middle_token_id", SP(fim_mid)},
};

/* Texts that name a role when metadata does not (llama.cpp's lists, same order). */
static const char *const eot_texts[] = {
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "<|end_of_text|>",
        "<EOT>",
        "_<EOT>",
        "[EOT]",
        "<\357\275\234end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
        "<end_of_utterance>",
        NULL,
};
static const char *const eom_texts[] = {"<|eom_id|>", NULL};
static const char *const fim_pre_texts[] = {
        "<|fim_prefix|>",
        "<fim-prefix>",
        "<fim_prefix>",
        "<\357\275\234fim\342\226\201begin\xEF\xBD\x9C>",
        "<PRE>",
        "\xE2\x96\x81<PRE>",
        "<|code_prefix|>",
        "<|prefix|>",
        NULL,
};
static const char *const fim_suf_texts[] = {
        "<|fim_suffix|>",
        "<fim-suffix>",
        "<fim_suffix>",
        "<\357\275\234fim\xE2\x96\x81hole\xEF\xBD\x9C>",
        "<SUF>",
        "\xE2\x96\x81<SUF>",
        "<|code_suffix|>",
        "<|suffix|>",
        NULL,
};
static const char *const fim_mid_texts[] = {
        "<|fim_middle|>",
        "<fim-middle>",
        "<fim_middle>",
        "<\357\275\234fim\342\226\201end\xEF\xBD\x9C>",
        "<MID>",
        "\xE2\x96\x81<MID>",
        "<|code_middle|>",
        "<|middle|>",
        NULL,
};
static const char *const fim_pad_texts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>",
                                            "<PAD>",       "[PAD]",     NULL};
static const char *const fim_rep_texts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                            "<REPO>",       "<reponame>",    NULL};
static const char *const fim_sep_texts[] = {"<|file_sep|>", NULL};
static const char *const eog_texts[] = {
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<|return|>",
        "<|call|>",
        "<|flush|>",
        "<|calls|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "</s>",
        "<|eom_id|>",
        "<EOT>",
        "_<EOT>",
        "[EOT]",
        "[EOS]",
        "<|end_of_text|>",
        "<end_of_utterance>",
        "<eos>",
        "<turn|>",
        "<|tool_response>",
        "<\357\275\234end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
        "[e~[",
        NULL,
};
static const char *const always_render[] = {"<|channel|>", "<|message|>", "<|start|>",
                                            "<|constrain|>", NULL};

static int32_t *field(struct m40_vocab_special *sp, size_t off)
{
        return (int32_t *)((char *)sp + off);
}

/* find_text - the id of text (the canonical one, as llama.cpp's token_to_id), or -1. */
static int32_t find_text(const struct m40_vocab *v, const char *text)
{
        return m40_strmap_get(&v->by_text, text, strlen(text));
}

static void make_control(struct m40_vocab *v, int32_t id)
{
        v->attr[id] |= M40_TOKEN_CONTROL;
}

/* detect_role - when *id is unset, the lowest id whose text is in texts, made control. */
static void detect_role(struct m40_vocab *v, int32_t *id, const char *const *texts)
{
        int32_t best = -1;

        if (*id != M40_TOKEN_NULL)
                return;
        for (size_t i = 0; texts[i]; i++) {
                int32_t t = find_text(v, texts[i]);
                if (t >= 0 && (best < 0 || t < best))
                        best = t;
        }
        if (best >= 0) {
                *id = best;
                make_control(v, best);
        }
}

static int read_ids(struct m40_vocab *v, const struct m40_gguf *g, char *err, size_t errlen)
{
        struct m40_vocab_special *sp = &v->sp;
        bool spm = v->type == M40_VOCAB_SPM;

        for (size_t i = 0; i < sizeof(id_keys) / sizeof(id_keys[0]); i++)
                *field(sp, id_keys[i].off) = M40_TOKEN_NULL;
        sp->bos = spm ? 1 : v->no_default_bos ? M40_TOKEN_NULL : 11; /* llama.cpp's defaults */
        sp->eos = spm ? 2 : 11;
        sp->unk = spm ? 0 : M40_TOKEN_NULL;
        for (size_t i = 0; i < sizeof(id_keys) / sizeof(id_keys[0]); i++) {
                int32_t *id = field(sp, id_keys[i].off);
                uint32_t u;
                if (*id >= 0 && (uint32_t)*id >= v->n_tokens)
                        *id = M40_TOKEN_NULL;
                if (!m40_gguf_find(g, id_keys[i].key))
                        continue;
                if (m40_gguf_get_u32(g, id_keys[i].key, 0, &u)) {
                        snprintf(err, errlen, "%s is not a u32", id_keys[i].key);
                        return M40_ETYPE;
                }
                if (u < v->n_tokens) /* else llama.cpp keeps the default */
                        *id = (int32_t)u;
        }
        if (m40_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", sp->add_bos, &sp->add_bos) ||
            m40_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", sp->add_eos, &sp->add_eos)) {
                snprintf(err, errlen, "tokenizer.ggml.add_bos_token/add_eos_token is not a bool");
                return M40_ETYPE;
        }
        if ((sp->add_bos && sp->bos < 0) || (sp->add_eos && sp->eos < 0)) {
                snprintf(err, errlen, "the vocabulary adds BOS/EOS but has no such token");
                return M40_EFORMAT;
        }
        return 0;
}

static void mark_unused(struct m40_vocab *v)
{
        for (uint32_t i = 0; i < v->n_tokens; i++) {
                if (!(v->attr[i] & M40_TOKEN_CONTROL) ||
                    m40_strmap_get(&v->by_text, v->text[i].ptr, v->text[i].len) != (int32_t)i)
                        continue;
                if (memmem(v->text[i].ptr, v->text[i].len, "unused", 6))
                        v->attr[i] |= M40_TOKEN_UNUSED;
        }
}

static int cmp_id(const void *a, const void *b)
{
        int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

        return (x > y) - (x < y);
}

static void eog_remove(struct m40_vocab *v, int32_t id, uint32_t attr)
{
        for (size_t i = 0; i < v->n_eog; i++) {
                if (v->eog[i] == id) {
                        memmove(&v->eog[i], &v->eog[i + 1], (v->n_eog - i - 1) * sizeof(int32_t));
                        v->n_eog--;
                        v->attr[id] = attr;
                        return;
                }
        }
}

static bool eog_has_text(const struct m40_vocab *v, const char *text)
{
        int32_t id = find_text(v, text);

        for (size_t i = 0; id >= 0 && i < v->n_eog; i++)
                if (v->eog[i] == id)
                        return true;
        return false;
}

/* build_eog - llama.cpp's special_eog_ids, including its two removal rules. */
static int build_eog(struct m40_vocab *v)
{
        const struct m40_vocab_special *sp = &v->sp;
        int32_t cand[64];
        size_t n = 0;

        int32_t fixed[] = {sp->fim_pad, sp->fim_rep, sp->fim_sep, sp->eos, sp->eot, sp->eom};
        for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
                if (fixed[i] >= 0)
                        cand[n++] = fixed[i];
        for (size_t i = 0; eog_texts[i]; i++) {
                int32_t id = find_text(v, eog_texts[i]);
                if (id >= 0) {
                        cand[n++] = id;
                        make_control(v, id);
                }
        }
        qsort(cand, n, sizeof(cand[0]), cmp_id);
        v->eog = malloc((n ? n : 1) * sizeof(int32_t));
        if (!v->eog)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                if (i == 0 || cand[i] != cand[i - 1])
                        v->eog[v->n_eog++] = cand[i];
        /* o200k_harmony / solar-open: "<|end|>" is not an end of generation there */
        bool call = eog_has_text(v, "<|call|>") || eog_has_text(v, "<|calls|>");
        if (((eog_has_text(v, "<|return|>") && call) || (call && eog_has_text(v, "<|flush|>"))) &&
            eog_has_text(v, "<|end|>"))
                eog_remove(v, find_text(v, "<|end|>"), M40_TOKEN_USER_DEFINED);
        /* gemma4 and plamo: "</s>" is a normal token */
        if ((eog_has_text(v, "<|tool_response>") || eog_has_text(v, "<|plamo:eos|>")) &&
            eog_has_text(v, "</s>"))
                eog_remove(v, find_text(v, "</s>"), M40_TOKEN_NORMAL);
        return 0;
}

static int cmp_u64(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

        return (x > y) - (x < y);
}

static unsigned bucket_of(const struct m40_span *t)
{
        return t->len < 2 ? M40_PAIR_BITS : m40_pair_bit((uint8_t)t->ptr[0], (uint8_t)t->ptr[1]);
}

/* build_buckets - the special tokens grouped by their first two bytes (vocab_impl.h). */
static int build_buckets(struct m40_vocab *v)
{
        uint32_t fill[M40_PAIR_BITS + 1] = {0};

        v->bucket = malloc((v->n_specials ? v->n_specials : 1) * sizeof(*v->bucket));
        if (!v->bucket)
                return -ENOMEM;
        memset(v->bucket_off, 0, sizeof(v->bucket_off));
        for (uint32_t k = 0; k < v->n_specials; k++)
                v->bucket_off[bucket_of(&v->text[v->specials[k]]) + 1]++;
        for (unsigned b = 0; b <= M40_PAIR_BITS; b++)
                v->bucket_off[b + 1] += v->bucket_off[b];
        for (uint32_t k = 0; k < v->n_specials; k++) {
                unsigned b = bucket_of(&v->text[v->specials[k]]);
                v->bucket[v->bucket_off[b] + fill[b]++] = k;
        }
        return 0;
}

/* build_specials - the partitioner's list: longest text first, then lowest id. */
static int build_specials(struct m40_vocab *v)
{
        const uint32_t mask = M40_TOKEN_CONTROL | M40_TOKEN_USER_DEFINED | M40_TOKEN_UNKNOWN;
        uint64_t *keys;
        uint32_t n = 0;

        for (uint32_t i = 0; i < v->n_tokens; i++)
                n += (v->attr[i] & mask) != 0;
        keys = malloc((n ? n : 1) * sizeof(*keys));
        v->specials = malloc((n ? n : 1) * sizeof(int32_t));
        if (!keys || !v->specials) {
                free(keys);
                return -ENOMEM;
        }
        for (uint32_t i = 0, k = 0; i < v->n_tokens; i++)
                if (v->attr[i] & mask)
                        keys[k++] = (uint64_t)(UINT32_MAX - v->text[i].len) << 32 | i;
        qsort(keys, n, sizeof(*keys), cmp_u64);
        for (uint32_t k = 0; k < n; k++)
                v->specials[k] = (int32_t)(uint32_t)keys[k];
        v->n_specials = n;
        free(keys);
        return build_buckets(v);
}

/* phi3_strip - llama.cpp strips spaces after special tokens of models named phi-3. */
static void phi3_strip(struct m40_vocab *v, const struct m40_gguf *g)
{
        const char *name = NULL;
        char low[256];
        size_t i;

        if (m40_gguf_get_str(g, "general.name", NULL, &name) || !name)
                return;
        for (i = 0; name[i] && i + 1 < sizeof(low); i++)
                low[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] + 32 : name[i]);
        low[i] = 0;
        if (!strstr(low, "phi-3") && !strstr(low, "phi3"))
                return;
        for (uint32_t k = 0; k < v->n_specials; k++)
                v->attr[v->specials[k]] |= M40_TOKEN_RSTRIP;
        int32_t id = find_text(v, "</s>");
        if (id >= 0)
                v->attr[id] |= M40_TOKEN_RSTRIP;
        const char *keep[] = {"<unk>", "<s>", "<|endoftext|>"};
        for (i = 0; i < 3; i++)
                if ((id = find_text(v, keep[i])) >= 0)
                        v->attr[id] &= ~(uint32_t)M40_TOKEN_RSTRIP;
}

int m40_vocab_load_special(struct m40_vocab *v, const struct m40_gguf *g, char *err, size_t errlen)
{
        struct m40_vocab_special *sp = &v->sp;
        int e = read_ids(v, g, err, errlen);

        if (e)
                return e;
        detect_role(v, &sp->eot, eot_texts);
        detect_role(v, &sp->eom, eom_texts);
        detect_role(v, &sp->fim_pre, fim_pre_texts);
        detect_role(v, &sp->fim_suf, fim_suf_texts);
        detect_role(v, &sp->fim_mid, fim_mid_texts);
        detect_role(v, &sp->fim_pad, fim_pad_texts);
        detect_role(v, &sp->fim_rep, fim_rep_texts);
        detect_role(v, &sp->fim_sep, fim_sep_texts);
        mark_unused(v);
        e = build_eog(v);
        if (e)
                return e;
        for (size_t i = 0; always_render[i]; i++) {
                int32_t id = find_text(v, always_render[i]);
                if (id >= 0)
                        v->attr[id] = M40_TOKEN_USER_DEFINED;
        }
        e = build_specials(v);
        if (!e)
                phi3_strip(v, g);
        return e;
}
