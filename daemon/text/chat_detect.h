/* chat_detect.h - which built-in chat template a GGUF's tokenizer.chat_template asks for.
 *
 * m40-llm formats chat built in, per template, instead of running Jinja. The template is
 * picked from marker strings in the Jinja source with llama.cpp's own rules and in its
 * order (llm_chat_detect_template), so a model gets the same prompt format here as there.
 * Families group the variants (four llama2 flavours, five mistral ones). */
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
        M40_CHAT_UNKNOWN, /* a template we do not format; callers fall back to chatml */
};

/* The templates we format, named as llama.cpp names them (m40_chat_tmpl_name). */
enum m40_chat_tmpl {
        M40_CHAT_TMPL_CHATML,            /* "chatml" */
        M40_CHAT_TMPL_LLAMA2,            /* "llama2": no system prompt markers */
        M40_CHAT_TMPL_LLAMA2_SYS,        /* "llama2-sys": <<SYS>> */
        M40_CHAT_TMPL_LLAMA2_SYS_BOS,    /* "llama2-sys-bos": <s> inside the history */
        M40_CHAT_TMPL_LLAMA2_SYS_STRIP,  /* "llama2-sys-strip": contents trimmed */
        M40_CHAT_TMPL_MISTRAL_V1,        /* "mistral-v1" */
        M40_CHAT_TMPL_MISTRAL_V3,        /* "mistral-v3" */
        M40_CHAT_TMPL_MISTRAL_V3_TEKKEN, /* "mistral-v3-tekken" */
        M40_CHAT_TMPL_MISTRAL_V7,        /* "mistral-v7" */
        M40_CHAT_TMPL_MISTRAL_V7_TEKKEN, /* "mistral-v7-tekken" */
        M40_CHAT_TMPL_LLAMA3,            /* "llama3" */
        M40_CHAT_TMPL_GEMMA,             /* "gemma" */
        M40_CHAT_TMPL_PHI3,              /* "phi3" */
        M40_CHAT_TMPL_ZEPHYR,            /* "zephyr" */
        M40_CHAT_TMPL_COUNT,
};

/* m40_chat_tmpl_detect - the template for tmpl, which is either Jinja source or one of the
 * names above. Returns 0 and the template in *ret when recognised; -ENOENT when tmpl is
 * NULL or empty, M40_EUNSUPPORTED for a template we do not format, leaving *ret untouched.
 * On failure a caller formats with M40_CHAT_TMPL_CHATML and warns once that the model may
 * not follow it. */
int m40_chat_tmpl_detect(const char *tmpl, enum m40_chat_tmpl *ret);

/* m40_chat_tmpl_name - "chatml", "llama2-sys", ...; "?" past the enum. */
const char *m40_chat_tmpl_name(enum m40_chat_tmpl t);
/* m40_chat_tmpl_family - the family a template belongs to. */
enum m40_chat_family m40_chat_tmpl_family(enum m40_chat_tmpl t);

/* m40_chat_detect - the family of template tmpl (NULL or "": M40_CHAT_NONE). */
enum m40_chat_family m40_chat_detect(const char *tmpl);

/* m40_chat_family_name - "chatml", "llama3", ...; "none", "unknown". */
const char *m40_chat_family_name(enum m40_chat_family f);

#endif
