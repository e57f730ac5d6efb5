/* chat.c - the built-in chat templates, transcribed from llama.cpp's llm_chat_apply_template
 * (llama-chat.cpp) for the families we support, and their stop tokens (see chat.h). */
#include "text/chat.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "text/vocab.h"

struct sbuf {
        char *p;
        size_t n, cap;
        int err;
};

static void put_n(struct sbuf *b, const char *s, size_t n)
{
        if (b->err)
                return;
        if (b->n + n + 1 > b->cap) {
                size_t cap = b->cap ? b->cap : 256;
                while (cap < b->n + n + 1)
                        cap *= 2;
                char *p = realloc(b->p, cap);
                if (!p) {
                        b->err = -ENOMEM;
                        return;
                }
                b->p = p;
                b->cap = cap;
        }
        memcpy(b->p + b->n, s, n);
        b->n += n;
}

static void put(struct sbuf *b, const char *s)
{
        put_n(b, s, strlen(s));
}

static bool c_space(char c)
{
        return c == ' ' || (c >= '\t' && c <= '\r');
}

/* put_trim - s without leading and trailing C-locale whitespace (llama.cpp's trim()). */
static void put_trim(struct sbuf *b, const char *s)
{
        size_t n = strlen(s);

        while (n && c_space(*s)) {
                s++;
                n--;
        }
        while (n && c_space(s[n - 1]))
                n--;
        put_n(b, s, n);
}

static bool is(const char *role, const char *name)
{
        return !strcmp(role, name);
}

static void fmt_mistral_v7(struct sbuf *b, bool tekken, const struct m40_chat_msg *m, size_t n)
{
        const char *sp = tekken ? "" : " ";

        for (size_t i = 0; i < n; i++) {
                const char *open = "", *close = "</s>";
                if (is(m[i].role, "system")) {
                        open = "[SYSTEM_PROMPT]";
                        close = "[/SYSTEM_PROMPT]";
                } else if (is(m[i].role, "user")) {
                        open = "[INST]";
                        close = "[/INST]";
                }
                put(b, open);
                put(b, sp);
                put(b, m[i].content);
                put(b, close);
        }
}

static void fmt_mistral(struct sbuf *b, enum m40_chat_tmpl t, const struct m40_chat_msg *m,
                        size_t n)
{
        const char *lead = t == M40_CHAT_TMPL_MISTRAL_V1 ? " " : "";
        const char *trail = t == M40_CHAT_TMPL_MISTRAL_V3_TEKKEN ? "" : " ";
        bool in_turn = false;

        for (size_t i = 0; i < n; i++) {
                if (!in_turn) {
                        put(b, lead);
                        put(b, "[INST]");
                        put(b, trail);
                        in_turn = true;
                }
                if (is(m[i].role, "system")) {
                        put(b, m[i].content);
                        put(b, "\n\n");
                } else if (is(m[i].role, "user")) {
                        put(b, m[i].content);
                        put(b, lead);
                        put(b, "[/INST]");
                } else {
                        put(b, trail);
                        if (t == M40_CHAT_TMPL_MISTRAL_V3)
                                put_trim(b, m[i].content);
                        else
                                put(b, m[i].content);
                        put(b, "</s>");
                        in_turn = false;
                }
        }
}

static void fmt_llama2(struct sbuf *b, enum m40_chat_tmpl t, const struct m40_chat_msg *m, size_t n)
{
        bool sys = t != M40_CHAT_TMPL_LLAMA2, strip = t == M40_CHAT_TMPL_LLAMA2_SYS_STRIP;
        bool in_turn = true;

        put(b, "[INST] ");
        for (size_t i = 0; i < n; i++) {
                if (!in_turn) {
                        in_turn = true;
                        put(b, t == M40_CHAT_TMPL_LLAMA2_SYS_BOS ? "<s>[INST] " : "[INST] ");
                }
                if (is(m[i].role, "system") && sys)
                        put(b, "<<SYS>>\n");
                if (strip)
                        put_trim(b, m[i].content);
                else
                        put(b, m[i].content);
                if (is(m[i].role, "system")) {
                        put(b, sys ? "\n<</SYS>>\n\n" : "\n");
                } else if (is(m[i].role, "user")) {
                        put(b, " [/INST]");
                } else {
                        put(b, "</s>");
                        in_turn = false;
                }
        }
}

static void fmt_gemma(struct sbuf *b, const struct m40_chat_msg *m, size_t n, bool add_ass)
{
        struct sbuf sys = {0};

        for (size_t i = 0; i < n; i++) {
                if (is(m[i].role, "system")) {
                        put_trim(&sys, m[i].content);
                        continue;
                }
                bool model = is(m[i].role, "assistant");
                put(b, "<start_of_turn>");
                put(b, model ? "model" : m[i].role);
                put(b, "\n");
                if (sys.n && !model && !is(m[i].role, "model")) {
                        put_n(b, sys.p, sys.n);
                        put(b, "\n\n");
                        sys.n = 0;
                }
                put_trim(b, m[i].content);
                put(b, "<end_of_turn>\n");
        }
        if (sys.err)
                b->err = sys.err;
        free(sys.p);
        if (add_ass)
                put(b, "<start_of_turn>model\n");
}

/* fmt_simple - templates that wrap every message the same way: open + role + mid + content
 * + close, then gen when a reply is asked for. */
static void fmt_simple(struct sbuf *b, const struct m40_chat_msg *m, size_t n, bool add_ass,
                       const char *open, const char *mid, const char *close, const char *gen,
                       bool trim)
{
        for (size_t i = 0; i < n; i++) {
                put(b, open);
                put(b, m[i].role);
                put(b, mid);
                if (trim)
                        put_trim(b, m[i].content);
                else
                        put(b, m[i].content);
                put(b, close);
        }
        if (add_ass)
                put(b, gen);
}

static int format(struct sbuf *b, enum m40_chat_tmpl t, const struct m40_chat_msg *m, size_t n,
                  bool add_ass)
{
        switch (t) {
        case M40_CHAT_TMPL_CHATML:
                fmt_simple(b, m, n, add_ass, "<|im_start|>", "\n", "<|im_end|>\n",
                           "<|im_start|>assistant\n", false);
                break;
        case M40_CHAT_TMPL_MISTRAL_V7:
        case M40_CHAT_TMPL_MISTRAL_V7_TEKKEN:
                fmt_mistral_v7(b, t == M40_CHAT_TMPL_MISTRAL_V7_TEKKEN, m, n);
                break;
        case M40_CHAT_TMPL_MISTRAL_V1:
        case M40_CHAT_TMPL_MISTRAL_V3:
        case M40_CHAT_TMPL_MISTRAL_V3_TEKKEN:
                fmt_mistral(b, t, m, n);
                break;
        case M40_CHAT_TMPL_LLAMA2:
        case M40_CHAT_TMPL_LLAMA2_SYS:
        case M40_CHAT_TMPL_LLAMA2_SYS_BOS:
        case M40_CHAT_TMPL_LLAMA2_SYS_STRIP:
                fmt_llama2(b, t, m, n);
                break;
        case M40_CHAT_TMPL_PHI3:
                fmt_simple(b, m, n, add_ass, "<|", "|>\n", "<|end|>\n", "<|assistant|>\n", false);
                break;
        case M40_CHAT_TMPL_ZEPHYR:
                fmt_simple(b, m, n, add_ass, "<|", "|>\n", "<|endoftext|>\n", "<|assistant|>\n",
                           false);
                break;
        case M40_CHAT_TMPL_GEMMA:
                fmt_gemma(b, m, n, add_ass);
                break;
        case M40_CHAT_TMPL_LLAMA3:
                fmt_simple(b, m, n, add_ass, "<|start_header_id|>", "<|end_header_id|>\n\n",
                           "<|eot_id|>", "<|start_header_id|>assistant<|end_header_id|>\n\n", true);
                break;
        default:
                return -EINVAL;
        }
        return b->err;
}

int m40_chat_format(enum m40_chat_tmpl t, const struct m40_chat_msg *msgs, size_t n,
                    bool add_generation_prompt, char *out, size_t cap, size_t *n_out)
{
        struct sbuf b = {0};
        int e = 0;

        for (size_t i = 0; i < n; i++)
                if (!msgs[i].role || !msgs[i].content)
                        return -EINVAL;
        e = format(&b, t, msgs, n, add_generation_prompt);
        if (!e) {
                *n_out = b.n;
                if (cap < b.n + 1) {
                        e = -ENOBUFS;
                } else {
                        if (b.n)
                                memcpy(out, b.p, b.n);
                        out[b.n] = 0;
                }
        }
        free(b.p);
        return e;
}

int m40_chat_render(const struct m40_chat_template *t, const struct m40_chat_msg *msgs, size_t n,
                    bool add_generation_prompt, char *out, size_t cap, size_t *n_out)
{
        struct m40_chat_msg *all;
        int e;

        if (!t->default_system || !n || (msgs[0].role && is(msgs[0].role, "system")))
                return m40_chat_format(t->tmpl, msgs, n, add_generation_prompt, out, cap, n_out);
        all = malloc((n + 1) * sizeof(*all));
        if (!all)
                return -ENOMEM;
        all[0] = (struct m40_chat_msg){"system", t->default_system};
        memcpy(all + 1, msgs, n * sizeof(*msgs));
        e = m40_chat_format(t->tmpl, all, n + 1, add_generation_prompt, out, cap, n_out);
        free(all);
        return e;
}

/* The texts that end a turn, per family (looked up in the vocabulary). */
static const char *const *eot_texts(enum m40_chat_family f)
{
        static const char *const chatml[] = {"<|im_end|>", NULL};
        static const char *const eos[] = {"</s>", NULL};
        static const char *const llama3[] = {"<|eot_id|>", "<|eom_id|>", NULL};
        static const char *const gemma[] = {"<end_of_turn>", NULL};
        static const char *const phi3[] = {"<|end|>", NULL};
        static const char *const zephyr[] = {"<|endoftext|>", "</s>", NULL};

        switch (f) {
        case M40_CHAT_CHATML:
                return chatml;
        case M40_CHAT_LLAMA3:
                return llama3;
        case M40_CHAT_GEMMA:
                return gemma;
        case M40_CHAT_PHI3:
                return phi3;
        case M40_CHAT_ZEPHYR:
                return zephyr;
        default:
                return eos;
        }
}

static int cmp_id(const void *a, const void *b)
{
        int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

        return (x > y) - (x < y);
}

int m40_chat_stop_tokens(const struct m40_vocab *v, enum m40_chat_tmpl t, int32_t *out, size_t cap,
                         size_t *n_out)
{
        const char *const *texts = eot_texts(m40_chat_tmpl_family(t));
        size_t n_eog, n = 0, k = 0;
        const int32_t *eog = m40_vocab_eog(v, &n_eog);
        int32_t *ids = malloc((n_eog + 8) * sizeof(*ids));

        if (!ids)
                return -ENOMEM;
        for (size_t i = 0; i < n_eog; i++)
                ids[n++] = eog[i];
        for (size_t i = 0; texts[i]; i++) {
                int32_t id = m40_vocab_find(v, texts[i], strlen(texts[i]));
                if (id >= 0)
                        ids[n++] = id;
        }
        qsort(ids, n, sizeof(*ids), cmp_id);
        for (size_t i = 0; i < n; i++) {
                if (i && ids[i] == ids[i - 1])
                        continue;
                if (k < cap)
                        out[k] = ids[i];
                k++;
        }
        free(ids);
        *n_out = k;
        return k > cap ? -ENOBUFS : 0;
}
