/* chat_detect.c - chat template detection from marker strings, llama.cpp's rules in
 * llama.cpp's order (see chat_detect.h), and the default system message of a chatml
 * template. Markers of templates we do not format are tested
 * too, at their place in the order, so that a template llama.cpp would format as, say,
 * falcon3 is reported as unknown here instead of being mistaken for a later rule's match. */
#include "chat_detect.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "m40/error.h"

static const char *const tmpl_names[M40_CHAT_TMPL_COUNT] = {
        [M40_CHAT_TMPL_CHATML] = "chatml",
        [M40_CHAT_TMPL_LLAMA2] = "llama2",
        [M40_CHAT_TMPL_LLAMA2_SYS] = "llama2-sys",
        [M40_CHAT_TMPL_LLAMA2_SYS_BOS] = "llama2-sys-bos",
        [M40_CHAT_TMPL_LLAMA2_SYS_STRIP] = "llama2-sys-strip",
        [M40_CHAT_TMPL_MISTRAL_V1] = "mistral-v1",
        [M40_CHAT_TMPL_MISTRAL_V3] = "mistral-v3",
        [M40_CHAT_TMPL_MISTRAL_V3_TEKKEN] = "mistral-v3-tekken",
        [M40_CHAT_TMPL_MISTRAL_V7] = "mistral-v7",
        [M40_CHAT_TMPL_MISTRAL_V7_TEKKEN] = "mistral-v7-tekken",
        [M40_CHAT_TMPL_LLAMA3] = "llama3",
        [M40_CHAT_TMPL_GEMMA] = "gemma",
        [M40_CHAT_TMPL_PHI3] = "phi3",
        [M40_CHAT_TMPL_ZEPHYR] = "zephyr",
};

static bool has(const char *s, const char *needle)
{
        return strstr(s, needle) != NULL;
}

/* detect_inst - templates with [INST]: the mistral versions and the llama2 variants. */
static enum m40_chat_tmpl detect_inst(const char *t)
{
        if (has(t, "[SYSTEM_PROMPT]"))
                return M40_CHAT_TMPL_MISTRAL_V7;
        if (has(t, "' [INST] ' + system_message") || has(t, "[AVAILABLE_TOOLS]")) {
                if (has(t, " [INST]"))
                        return M40_CHAT_TMPL_MISTRAL_V1;
                if (has(t, "\"[INST]\""))
                        return M40_CHAT_TMPL_MISTRAL_V3_TEKKEN;
                return M40_CHAT_TMPL_MISTRAL_V3;
        }
        if (has(t, "content.strip()"))
                return M40_CHAT_TMPL_LLAMA2_SYS_STRIP;
        if (has(t, "bos_token + '[INST]"))
                return M40_CHAT_TMPL_LLAMA2_SYS_BOS;
        if (has(t, "<<SYS>>"))
                return M40_CHAT_TMPL_LLAMA2_SYS;
        return M40_CHAT_TMPL_LLAMA2;
}

/* detect - the template, or M40_CHAT_TMPL_COUNT for one we do not format. */
static enum m40_chat_tmpl detect(const char *t)
{
        for (int i = 0; i < M40_CHAT_TMPL_COUNT; i++)
                if (!strcmp(t, tmpl_names[i]))
                        return (enum m40_chat_tmpl)i;
        if (has(t, "<|im_start|>"))
                return has(t, "<|im_sep|>") || has(t, "<end_of_utterance>") ? M40_CHAT_TMPL_COUNT
                                                                            : M40_CHAT_TMPL_CHATML;
        if (!strncmp(t, "mistral", 7) || has(t, "[INST]"))
                return detect_inst(t);
        if (has(t, "<|assistant|>") && has(t, "<|end|>"))
                return M40_CHAT_TMPL_PHI3;
        if (has(t, "[gMASK]<sop>") || (has(t, "<|assistant|>") && has(t, "<|user|>")) ||
            (has(t, "<|{{ item['role'] }}|>") && has(t, "<|begin_of_image|>")))
                return M40_CHAT_TMPL_COUNT; /* chatglm4, falcon3, glmedge, exaone-moe */
        if (has(t, "<|user|>") && has(t, "<|endoftext|>"))
                return M40_CHAT_TMPL_ZEPHYR;
        if (has(t, "bos_token + message['role']"))
                return M40_CHAT_TMPL_COUNT; /* monarch */
        if (has(t, "<start_of_turn>"))
                return M40_CHAT_TMPL_GEMMA;
        if (has(t, "'\\n\\nAssistant: ' + eos_token") || has(t, "GPT4 Correct ") ||
            (has(t, "USER: ") && has(t, "ASSISTANT: ")) ||
            (has(t, "### Instruction:") && has(t, "<|EOT|>")) ||
            (has(t, "<|START_OF_TURN_TOKEN|>") && has(t, "<|USER_TOKEN|>")))
                return M40_CHAT_TMPL_COUNT; /* orion, openchat, vicuna, deepseek, command-r */
        if (has(t, "<|start_header_id|>") && has(t, "<|end_header_id|>"))
                return M40_CHAT_TMPL_LLAMA3;
        return M40_CHAT_TMPL_COUNT;
}

int m40_chat_tmpl_detect(const char *tmpl, enum m40_chat_tmpl *ret)
{
        enum m40_chat_tmpl t;

        if (!tmpl || !*tmpl)
                return -ENOENT;
        t = detect(tmpl);
        if (t == M40_CHAT_TMPL_COUNT)
                return M40_EUNSUPPORTED;
        *ret = t;
        return 0;
}

static const char sys_open[] = "<|im_start|>system\n";
static const char sys_close[] = "<|im_end|>\n";

/* unquote - the Jinja string literal whose opening quote is at q, unescaped into out (room
 * for cap bytes). Returns its length, or -1 when it is unterminated or longer than cap. */
static long unquote(const char *q, char *out, size_t cap)
{
        size_t n = 0;

        for (const char *p = q + 1; *p; p++) {
                char c = *p;

                if (c == *q)
                        return (long)n;
                if (c == '\\' && p[1]) {
                        c = *++p;
                        if (c == 'n' || c == 't' || c == 'r') {
                                c = c == 'n' ? '\n' : c == 't' ? '\t' : '\r';
                        } else if (c != '\\' && c != '\'' && c != '"') {
                                if (n == cap)
                                        return -1;
                                out[n++] = '\\'; /* an unknown escape keeps its backslash */
                        }
                }
                if (n == cap)
                        return -1;
                out[n++] = c;
        }
        return -1;
}

/* default_system - the content of the first string literal in src that is a whole chatml
 * system message, when src also tests the first message's role (so it writes that literal
 * only without a system message). Returns 0 with a new string in *ret or NULL when there
 * is none; -ENOMEM. */
static int default_system(const char *src, char **ret)
{
        const size_t lo = sizeof(sys_open) - 1, lc = sizeof(sys_close) - 1;
        const size_t cap = lo + M40_CHAT_MAX_DEFAULT_SYSTEM + lc;
        char *buf;

        *ret = NULL;
        if (!has(src, "messages[0]['role']") && !has(src, "messages[0][\"role\"]") &&
            !has(src, "messages[0].role"))
                return 0;
        buf = malloc(cap + 1);
        if (!buf)
                return -ENOMEM;
        for (const char *p = strstr(src, "<|im_start|>system"); p;
             p = strstr(p + 1, "<|im_start|>system")) {
                long n;

                if (p == src || (p[-1] != '\'' && p[-1] != '"'))
                        continue;
                n = unquote(p - 1, buf, cap);
                if (n < (long)(lo + lc) || memcmp(buf, sys_open, lo) ||
                    memcmp(buf + n - lc, sys_close, lc))
                        continue;
                buf[n - lc] = 0;
                if (strstr(buf + lo, "<|im_end|>"))
                        continue;
                memmove(buf, buf + lo, (size_t)n - lc - lo + 1);
                *ret = buf;
                return 0;
        }
        free(buf);
        return 0;
}

int m40_chat_template_init(struct m40_chat_template *t, const char *src)
{
        int r;

        *t = (struct m40_chat_template){M40_CHAT_TMPL_CHATML, NULL};
        r = m40_chat_tmpl_detect(src, &t->tmpl);
        if (!r && t->tmpl == M40_CHAT_TMPL_CHATML && default_system(src, &t->default_system))
                return -ENOMEM;
        return r;
}

void m40_chat_template_done(struct m40_chat_template *t)
{
        free(t->default_system);
        t->default_system = NULL;
}

const char *m40_chat_tmpl_name(enum m40_chat_tmpl t)
{
        return (unsigned)t < M40_CHAT_TMPL_COUNT ? tmpl_names[t] : "?";
}

enum m40_chat_family m40_chat_tmpl_family(enum m40_chat_tmpl t)
{
        switch (t) {
        case M40_CHAT_TMPL_CHATML:
                return M40_CHAT_CHATML;
        case M40_CHAT_TMPL_LLAMA2:
        case M40_CHAT_TMPL_LLAMA2_SYS:
        case M40_CHAT_TMPL_LLAMA2_SYS_BOS:
        case M40_CHAT_TMPL_LLAMA2_SYS_STRIP:
                return M40_CHAT_LLAMA2;
        case M40_CHAT_TMPL_MISTRAL_V1:
        case M40_CHAT_TMPL_MISTRAL_V3:
        case M40_CHAT_TMPL_MISTRAL_V3_TEKKEN:
        case M40_CHAT_TMPL_MISTRAL_V7:
        case M40_CHAT_TMPL_MISTRAL_V7_TEKKEN:
                return M40_CHAT_MISTRAL;
        case M40_CHAT_TMPL_LLAMA3:
                return M40_CHAT_LLAMA3;
        case M40_CHAT_TMPL_GEMMA:
                return M40_CHAT_GEMMA;
        case M40_CHAT_TMPL_PHI3:
                return M40_CHAT_PHI3;
        case M40_CHAT_TMPL_ZEPHYR:
                return M40_CHAT_ZEPHYR;
        default:
                return M40_CHAT_UNKNOWN;
        }
}

enum m40_chat_family m40_chat_detect(const char *t)
{
        enum m40_chat_tmpl tmpl;

        if (!t || !*t)
                return M40_CHAT_NONE;
        return m40_chat_tmpl_detect(t, &tmpl) ? M40_CHAT_UNKNOWN : m40_chat_tmpl_family(tmpl);
}

const char *m40_chat_family_name(enum m40_chat_family f)
{
        static const char *const names[] = {
                [M40_CHAT_NONE] = "none",       [M40_CHAT_CHATML] = "chatml",
                [M40_CHAT_LLAMA2] = "llama2",   [M40_CHAT_LLAMA3] = "llama3",
                [M40_CHAT_MISTRAL] = "mistral", [M40_CHAT_GEMMA] = "gemma",
                [M40_CHAT_PHI3] = "phi3",       [M40_CHAT_ZEPHYR] = "zephyr",
                [M40_CHAT_UNKNOWN] = "unknown",
        };

        return (unsigned)f < sizeof(names) / sizeof(names[0]) ? names[f] : "unknown";
}
