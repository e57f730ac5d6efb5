/* chat_detect.h - which built-in chat template a GGUF's tokenizer.chat_template asks for.
 *
 * m40-llm formats chat built in, per template, instead of running Jinja. The template is
 * picked from marker strings in the Jinja source with llama.cpp's own rules and in its
 * order (llm_chat_detect_template), so a model gets the same prompt format here as there.
 * Families group the variants (four llama2 flavours, five mistral ones). */
#ifndef M40_CHAT_DETECT_H
#define M40_CHAT_DETECT_H

#include <stdbool.h>
#include <stddef.h>

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

/* A model's chat template as m40-llm applies it: the built-in format that llama.cpp's
 * detection picks, plus what the model's Jinja adds to that format which we reproduce: a
 * default system message. Chatml templates such as SmolLM2's and Qwen2's write one (a
 * string literal "<|im_start|>system\n...<|im_end|>\n") when the conversation does not
 * open with a system message; llama.cpp's built-in chatml does not, its Jinja path does. */
struct m40_chat_template {
        enum m40_chat_tmpl tmpl;
        char *default_system; /* NUL-terminated; NULL when the template has none */
};

/* Bytes of a default system message we take from a template; a longer one is ignored. */
#define M40_CHAT_MAX_DEFAULT_SYSTEM 4096u

/* m40_chat_template_init - fill caller storage t from src (Jinja source or a template
 * name; NULL or "": none). Returns m40_chat_tmpl_detect()'s result: 0 when recognised;
 * -ENOENT or M40_EUNSUPPORTED with t set to chatml without a default system message (the
 * fallback, about which a caller warns once); or -ENOMEM with t zeroed. Release with
 * m40_chat_template_done(). */
int m40_chat_template_init(struct m40_chat_template *t, const char *src);

/* m40_chat_template_done - free what t owns; t may be zeroed or already done. */
void m40_chat_template_done(struct m40_chat_template *t);

/* m40_chat_tmpl_name - "chatml", "llama2-sys", ...; "?" past the enum. */
const char *m40_chat_tmpl_name(enum m40_chat_tmpl t);
/* m40_chat_tmpl_family - the family a template belongs to. */
enum m40_chat_family m40_chat_tmpl_family(enum m40_chat_tmpl t);

/* m40_chat_detect - the family of template tmpl (NULL or "": M40_CHAT_NONE). */
enum m40_chat_family m40_chat_detect(const char *tmpl);

/* m40_chat_family_name - "chatml", "llama3", ...; "none", "unknown". */
const char *m40_chat_family_name(enum m40_chat_family f);

#endif
