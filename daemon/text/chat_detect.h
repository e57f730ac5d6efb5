/* chat_detect.h - which chat-template family a GGUF's tokenizer.chat_template belongs to.
 *
 * m40-llm formats chat built in, per family, instead of running Jinja; this picks the
 * family from marker strings in the template. */
#ifndef M40_CHAT_DETECT_H
#define M40_CHAT_DETECT_H

#include <stdbool.h>

enum m40_chat_family {
        M40_CHAT_NONE, /* the model has no template */
        M40_CHAT_CHATML,
        M40_CHAT_LLAMA2,
        M40_CHAT_LLAMA3,
        M40_CHAT_MISTRAL,
        M40_CHAT_GEMMA,
        M40_CHAT_PHI3,
        M40_CHAT_ZEPHYR,
        M40_CHAT_UNKNOWN, /* a template we do not recognise; callers fall back to chatml */
};

/* m40_chat_detect - the family of template tmpl (NULL: no template). */
enum m40_chat_family m40_chat_detect(const char *tmpl);

/* m40_chat_family_name - "chatml", "llama3", ...; "none", "unknown". */
const char *m40_chat_family_name(enum m40_chat_family f);

#endif
