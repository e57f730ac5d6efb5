/* chat.h - formatting a conversation with a built-in chat template, and the template's
 * end-of-turn stop tokens.
 *
 * The text is byte for byte what llama.cpp's llama_chat_apply_template() produces for the
 * same template and messages (its built-in formats, not the model's Jinja). Like llama.cpp,
 * the formatted text carries no BOS: tokenize it with M40_TOKENIZE_ADD_SPECIAL (the vocabulary
 * says whether a BOS goes first) and M40_TOKENIZE_PARSE_SPECIAL (so "<|im_start|>" and the
 * like become their control tokens). Templates that close assistant turns with EOS write it
 * as text ("</s>"), as llama.cpp does. */
#ifndef M40_TEXT_CHAT_H
#define M40_TEXT_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "text/chat_detect.h"

struct m40_vocab;

struct m40_chat_msg {
        const char *role;    /* "system", "user", "assistant" (others pass through) */
        const char *content; /* NUL-terminated */
};

/* m40_chat_format - the n messages (and, when add_generation_prompt, the opening of the
 * assistant's reply) in template t, into out with a terminating NUL.
 * Returns 0 when it fits, -ENOBUFS when cap < len + 1 (out holds nothing useful), storing
 * len (without the NUL) in *n_out in both cases; -EINVAL for a bad template or a message
 * with a NULL field; -ENOMEM. */
int m40_chat_format(enum m40_chat_tmpl t, const struct m40_chat_msg *msgs, size_t n,
                    bool add_generation_prompt, char *out, size_t cap, size_t *n_out);

/* m40_chat_render - m40_chat_format() with template t's semantics: its default system
 * message (struct m40_chat_template) goes first when the conversation has messages and the
 * first is not a system message. Same returns as m40_chat_format(). */
int m40_chat_render(const struct m40_chat_template *t, const struct m40_chat_msg *msgs, size_t n,
                    bool add_generation_prompt, char *out, size_t cap, size_t *n_out);

/* m40_chat_stop_tokens - the ids that end an assistant turn in template t for vocabulary v:
 * the template's end-of-turn token ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>",
 * "</s>", ...) where v has it, plus v's end-of-generation set (EOS included). Ascending,
 * without repeats. Returns 0 or -ENOBUFS as m40_chat_format(), with the count in *n_out. */
int m40_chat_stop_tokens(const struct m40_vocab *v, enum m40_chat_tmpl t, int32_t *out, size_t cap,
                         size_t *n_out);

#endif
