/* vocab.h - a model's vocabulary and tokenizer, loaded from GGUF metadata.
 *
 * Two vocabulary kinds, chosen by tokenizer.ggml.model: "llama" (SentencePiece-style: merges
 * by token score, byte fallback <0xNN>, a space prefix) and "gpt2" (byte-level BPE with merge
 * ranks, pre-tokenized by a PCRE2 regex set chosen by tokenizer.ggml.pre). Token ids are
 * identical to llama.cpp's llama_tokenize() for the same add_special/parse_special flags,
 * including its handling of invalid UTF-8 (described in tokenize.c). Verified against
 * llama.cpp by tests/text/conformance.py.
 *
 * A struct m40_vocab is immutable once made: every function taking a const vocab may run
 * on several threads at once. Nothing here prints. */
#ifndef M40_TEXT_VOCAB_H
#define M40_TEXT_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct m40_gguf;
struct m40_vocab;

#define M40_TOKEN_NULL (-1)

/* Limits on what a file or a client controls. */
#define M40_VOCAB_MAX_TOKENS   (1u << 22)  /* entries in tokenizer.ggml.tokens */
#define M40_VOCAB_MAX_TEXT     65536u      /* bytes of one token text or merge */
#define M40_TOKENIZE_MAX_BYTES (64u << 20) /* bytes of text per m40_vocab_tokenize() call */

enum m40_vocab_type {
        M40_VOCAB_SPM = 1, /* tokenizer.ggml.model "llama" */
        M40_VOCAB_BPE = 2, /* tokenizer.ggml.model "gpt2" */
};

/* Token attributes: llama.cpp's llama_token_attr bits, derived from tokenizer.ggml.token_type
 * and the same text-based fix-ups llama.cpp applies (end-of-turn tokens become control). */
enum {
        M40_TOKEN_UNDEFINED = 0,
        M40_TOKEN_UNKNOWN = 1 << 0,
        M40_TOKEN_UNUSED = 1 << 1,
        M40_TOKEN_NORMAL = 1 << 2,
        M40_TOKEN_CONTROL = 1 << 3,
        M40_TOKEN_USER_DEFINED = 1 << 4,
        M40_TOKEN_BYTE = 1 << 5,
        M40_TOKEN_LSTRIP = 1 << 7,
        M40_TOKEN_RSTRIP = 1 << 8,
};

/* m40_vocab_tokenize() flags. */
enum {
        /* add the vocabulary's BOS (and EOS) as tokenizer.ggml.add_bos_token/add_eos_token
         * say: llama.cpp's add_special, llama-cpp-python's add_bos */
        M40_TOKENIZE_ADD_SPECIAL = 1 << 0,
        /* recognise control-token texts such as "<|im_start|>" in the text; without it they
         * are plain text (user-defined tokens are always recognised, as in llama.cpp) */
        M40_TOKENIZE_PARSE_SPECIAL = 1 << 1,
};

/* The special ids of a vocabulary; M40_TOKEN_NULL where the model has none. */
struct m40_vocab_special {
        int32_t bos, eos, eot, eom, unk, sep, pad, mask;
        int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
        bool add_bos, add_eos, add_space_prefix;
};

/* m40_vocab_new - builds the vocabulary described by g's tokenizer.* metadata.
 * Returns 0 and a new vocabulary in *ret (free with m40_vocab_free()); on failure returns
 * M40_EFORMAT (missing or malformed keys), M40_EUNSUPPORTED (a tokenizer model or a
 * pre-tokenizer we do not implement: the message names it), M40_ETYPE or -ENOMEM, writes a
 * message into err (when not NULL) and leaves *ret untouched. g may be freed afterwards. */
int m40_vocab_new(const struct m40_gguf *g, struct m40_vocab **ret, char *err, size_t errlen);

/* m40_vocab_free - frees v; accepts NULL; returns NULL. */
struct m40_vocab *m40_vocab_free(struct m40_vocab *v);

enum m40_vocab_type m40_vocab_type(const struct m40_vocab *v);
uint32_t m40_vocab_n_tokens(const struct m40_vocab *v);
/* m40_vocab_pre - tokenizer.ggml.pre ("default" when absent); "" for SPM vocabularies. */
const char *m40_vocab_pre(const struct m40_vocab *v);
const struct m40_vocab_special *m40_vocab_special(const struct m40_vocab *v);

/* m40_vocab_token_text - token id's text as stored in the file (SPM spaces as U+2581, BPE
 * bytes as GPT-2 code points), its length in *ret_len; NULL for an id out of range. Owned by
 * v. */
const char *m40_vocab_token_text(const struct m40_vocab *v, int32_t id, size_t *ret_len);
/* m40_vocab_token_attr - M40_TOKEN_* bits of id; 0 for an id out of range. */
uint32_t m40_vocab_token_attr(const struct m40_vocab *v, int32_t id);
float m40_vocab_token_score(const struct m40_vocab *v, int32_t id);
/* m40_vocab_find - the id whose file text is exactly the n bytes at text, or M40_TOKEN_NULL. */
int32_t m40_vocab_find(const struct m40_vocab *v, const char *text, size_t n);

/* m40_vocab_is_eog - whether id ends generation (EOS, EOT, EOM and the end-of-turn tokens
 * llama.cpp recognises by text: "<|im_end|>", "<|eot_id|>", "<end_of_turn>", ...). */
bool m40_vocab_is_eog(const struct m40_vocab *v, int32_t id);
/* m40_vocab_eog - the end-of-generation ids, ascending; their count in *ret_n. */
const int32_t *m40_vocab_eog(const struct m40_vocab *v, size_t *ret_n);

/* m40_vocab_piece - the bytes token id stands for, as llama.cpp's llama_token_to_piece()
 * with lstrip 0: control and unknown tokens give their text when special is true and ""
 * otherwise; SPM "▁" becomes a space; byte tokens give their byte. The piece may be a
 * fragment of a UTF-8 sequence (use struct m40_detok to stream text). Returns 0 with the
 * piece in *ret and *ret_len (owned by v), or -EINVAL for an id out of range. */
int m40_vocab_piece(const struct m40_vocab *v, int32_t id, bool special, const char **ret,
                    size_t *ret_len);

/* m40_vocab_tokenize - tokenizes len bytes at text (any bytes: invalid UTF-8 is handled as
 * llama.cpp handles it) with M40_TOKENIZE_* flags into out[0..cap).
 * Returns 0 when all n tokens fit, -ENOBUFS when cap < n (out then holds the first cap),
 * storing n in *n_tokens in both cases so a caller can size its buffer (out may be NULL when
 * cap is 0). Other failures: -E2BIG (len > M40_TOKENIZE_MAX_BYTES), -ENOMEM, -EIO (the
 * regex engine failed on pathological input); *n_tokens is then untouched. */
int m40_vocab_tokenize(const struct m40_vocab *v, const char *text, size_t len, unsigned flags,
                       int32_t *out, size_t cap, size_t *n_tokens);

/* Scratch memory for tokenizing many texts without allocating each time: one per thread,
 * usable with any vocabulary. m40_vocab_tokenize() makes and frees one per call. */
struct m40_tok_scratch;
/* m40_tok_scratch_new - returns 0 and an empty scratch in *ret, or -ENOMEM. */
int m40_tok_scratch_new(struct m40_tok_scratch **ret);
/* m40_tok_scratch_free - frees w; accepts NULL; returns NULL. */
struct m40_tok_scratch *m40_tok_scratch_free(struct m40_tok_scratch *w);
/* m40_vocab_tokenize_scratch - m40_vocab_tokenize() using (and growing) w. */
int m40_vocab_tokenize_scratch(const struct m40_vocab *v, struct m40_tok_scratch *w,
                               const char *text, size_t len, unsigned flags, int32_t *out,
                               size_t cap, size_t *n_tokens);

#endif
