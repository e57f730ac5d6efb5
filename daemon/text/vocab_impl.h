/* vocab_impl.h - the layout of struct m40_vocab and the functions the tokenizer files share
 * (internal to daemon/text; users include text/vocab.h). */
#ifndef M40_TEXT_VOCAB_IMPL_H
#define M40_TEXT_VOCAB_IMPL_H

#include "text/strmap.h"
#include "text/vocab.h"

struct m40_gguf;
struct m40_pretok;

/* m40_pair_bit - a 12-bit hash of a byte pair, to find the special tokens a text may hold. */
#define M40_PAIR_BITS 4096
static inline unsigned m40_pair_bit(uint8_t a, uint8_t b)
{
        return (unsigned)((((uint32_t)a << 8 | b) * 0x9E3779B1u) >> 20);
}

/* A growable array of token ids (the tokenizers' output). */
struct m40_ids {
        int32_t *v;
        size_t n, cap;
};

struct m40_vocab {
        enum m40_vocab_type type;
        char pre[64];
        uint32_t n_tokens;
        struct m40_span *text;  /* [n_tokens] texts as in the file (into text_arena) */
        struct m40_span *piece; /* [n_tokens] llama_token_to_piece(special = true) */
        float *score;           /* [n_tokens] */
        uint32_t *attr;         /* [n_tokens] M40_TOKEN_* */
        char *text_arena, *piece_arena;
        struct m40_strmap by_text; /* text -> id; a repeated text maps to its last id */

        /* BPE: tokens whose text decodes through the GPT-2 byte map, keyed by those bytes;
         * merges between two such tokens by id, the rare others by bytes in slow_merges. */
        struct m40_span *raw; /* [n_tokens]; len UINT32_MAX: not decodable */
        char *raw_arena;
        struct m40_strmap by_raw;
        struct m40_pairmap merges;
        struct m40_span *slow_key; /* [n_slow] 4-byte length of a, bytes of a, bytes of b */
        int32_t *slow_rank;        /* [n_slow] */
        char *slow_arena;
        uint32_t n_slow;
        struct m40_strmap by_slow;
        int32_t byte_fb[256][2]; /* BPE: ids llama.cpp emits for a byte no merge covers */
        struct m40_pretok *pretok;
        bool ignore_merges, clean_spaces, no_default_bos;

        /* SPM: the token for byte b: <0xNN>, else the one-byte text, else unk;
         * BPE: the token whose text is b's GPT-2 code point, else -1 */
        int32_t byte_tok[256];

        struct m40_vocab_special sp;
        int32_t *specials; /* CONTROL | USER_DEFINED | UNKNOWN ids, longest text first */
        uint32_t n_specials;
        /* positions in specials by the hash of their first two bytes (m40_pair_bit), ascending
         * in each bucket: bucket b is bucket[bucket_off[b] .. bucket_off[b + 1]); texts
         * shorter than two bytes are in bucket M40_PAIR_BITS */
        uint32_t bucket_off[M40_PAIR_BITS + 2];
        uint32_t *bucket;
        int32_t *eog; /* ascending */
        size_t n_eog;
};

/* vocab_special.c: special ids from metadata, llama.cpp's text-based attribute fix-ups,
 * the end-of-generation set and the list of special tokens for partitioning. */
int m40_vocab_load_special(struct m40_vocab *v, const struct m40_gguf *g, char *err, size_t errlen);

/* vocab_bpe.c */
int m40_vocab_load_bpe(struct m40_vocab *v, const struct m40_gguf *g, char *err, size_t errlen);
/* m40_gpt2_byte_cpt - the GPT-2 byte-level code point standing for byte b. */
uint32_t m40_gpt2_byte_cpt(uint8_t b);
/* m40_gpt2_cpt_byte - the byte a GPT-2 code point stands for, or -1. */
int m40_gpt2_cpt_byte(uint32_t cpt);

int m40_ids_push(struct m40_ids *ids, int32_t id);

/* bpe.c: BPE merges over one pre-tokenized word (raw bytes), appending ids. */
struct m40_bpe_work;
struct m40_bpe_work *m40_bpe_work_free(struct m40_bpe_work *w);
int m40_bpe_word(const struct m40_vocab *v, const uint8_t *word, size_t n,
                 struct m40_bpe_work **work, struct m40_ids *out);

/* spm.c: SentencePiece merges over one text fragment, appending ids. prefix_space adds
 * the leading space SPM vocabularies expect. */
struct m40_spm_work;
struct m40_spm_work *m40_spm_work_free(struct m40_spm_work *w);
int m40_spm_fragment(const struct m40_vocab *v, const char *text, size_t n, bool prefix_space,
                     struct m40_spm_work **work, struct m40_ids *out);

#endif
