/* chat_detect.c - chat-template family detection from marker strings (see chat_detect.h).
 * The order matters: more specific markers are tested before the ones they contain. */
#include "chat_detect.h"

#include <stddef.h>
#include <string.h>

static bool has(const char *s, const char *needle)
{
        return strstr(s, needle) != NULL;
}

enum m40_chat_family m40_chat_detect(const char *t)
{
        if (!t || !*t)
                return M40_CHAT_NONE;
        if (has(t, "<|im_start|>"))
                return M40_CHAT_CHATML;
        if (has(t, "<|start_header_id|>") && has(t, "<|end_header_id|>"))
                return M40_CHAT_LLAMA3;
        if (has(t, "<start_of_turn>"))
                return M40_CHAT_GEMMA;
        if (has(t, "[INST]"))
                return has(t, "<<SYS>>") ? M40_CHAT_LLAMA2 : M40_CHAT_MISTRAL;
        if (has(t, "<|assistant|>") && has(t, "<|end|>"))
                return M40_CHAT_PHI3;
        if (has(t, "<|user|>") && has(t, "</s>"))
                return M40_CHAT_ZEPHYR;
        return M40_CHAT_UNKNOWN;
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
