/* detok.h - streaming detokenization: token ids in, complete UTF-8 text out.
 *
 * A token's piece may end inside a UTF-8 sequence (byte tokens, BPE pieces of CJK or emoji);
 * the detokenizer holds such a tail back until the next token completes it, so every piece
 * of text it returns is valid UTF-8 on its own. Bytes that can never become valid UTF-8
 * (a model may emit any byte sequence) are replaced by U+FFFD, one per maximal invalid
 * subpart as Unicode 15 section 3.9 recommends; an incomplete tail left at the end of a
 * stream becomes one U+FFFD at m40_detok_flush(). Valid input passes through unchanged, so
 * streaming the tokens of a valid string gives the string back.
 *
 * One struct m40_detok per sequence; not for concurrent use. Nothing here prints. */
#ifndef M40_TEXT_DETOK_H
#define M40_TEXT_DETOK_H

#include <stddef.h>
#include <stdint.h>

struct m40_vocab;
struct m40_detok;

enum {
        /* render control and unknown tokens ("<|im_end|>", "<s>") as their text; without it
         * they produce nothing (user-defined tokens always render) */
        M40_DETOK_SPECIAL = 1 << 0,
        /* drop the space an SPM vocabulary's tokenizer put in front of the text: one leading
         * ' ' of the first non-empty piece, when the vocabulary adds a space prefix. Use it
         * when detokenizing a prompt from its start, not when streaming a continuation. */
        M40_DETOK_STRIP_SPACE = 1 << 1,
};

/* m40_detok_new - a detokenizer over v (which must outlive it) with M40_DETOK_* flags.
 * Returns 0 and the object in *ret, or -ENOMEM. */
int m40_detok_new(const struct m40_vocab *v, unsigned flags, struct m40_detok **ret);
/* m40_detok_free - frees d; accepts NULL; returns NULL. */
struct m40_detok *m40_detok_free(struct m40_detok *d);
/* m40_detok_reset - forget pending bytes and start a new stream. */
void m40_detok_reset(struct m40_detok *d);

/* m40_detok_push - feeds token id. Returns 0 with the newly complete text in *ret_text and
 * *ret_len (possibly 0 bytes; valid until the next call on d), -EINVAL for an id outside
 * the vocabulary (nothing changes), or -ENOMEM. */
int m40_detok_push(struct m40_detok *d, int32_t id, const char **ret_text, size_t *ret_len);
/* m40_detok_flush - ends the stream: returns 0 with U+FFFD for a pending incomplete
 * sequence (or nothing) in *ret_text and *ret_len, and resets d. */
int m40_detok_flush(struct m40_detok *d, const char **ret_text, size_t *ret_len);

#endif
