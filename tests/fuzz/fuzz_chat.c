/* fuzz_chat.c - libFuzzer target over chat formatting (daemon/text/chat.c, chat_detect.c),
 * under ASan and UBSan. Byte 0 picks the mode:
 *   even: the rest is a chat template's source (Jinja, or a template's name), NUL ended:
 *         m40_chat_tmpl_detect returns 0, -ENOENT (empty) or M40_EUNSUPPORTED, and
 *         m40_chat_detect names the same family;
 *   odd:  the rest is a conversation, messages separated by '|', each message's first byte
 *         its role ('s' system, 'u' user, 'a' assistant, anything else the role "tool"),
 *         formatted in the template (byte 0 >> 2) % count, with the generation prompt when
 *         bit 1 is set, first into a buffer of (byte 0 >> 6) * 16 bytes: the length does
 *         not depend on the buffer, -ENOBUFS exactly when it does not fit, the text is
 *         NUL-terminated, repeatable, and holds every message's content (trimmed; Gemma
 *         keeps system messages only before a user turn). */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "m40/error.h"
#include "text/chat.h"

#define MAX_MSGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* contains - whether hay holds s without its leading and trailing C-locale whitespace
 * (what the trimming templates keep). */
static bool contains(const char *hay, const char *s)
{
        static const char ws[] = " \t\n\v\f\r";
        size_t from = strspn(s, ws), to = strlen(s);

        while (to > from && strchr(ws, s[to - 1]))
                to--;
        return to == from || memmem(hay, strlen(hay), s + from, to - from);
}

static void detect(const char *src)
{
        enum m40_chat_tmpl t = M40_CHAT_TMPL_COUNT;
        enum m40_chat_family f = m40_chat_detect(src);
        int r = m40_chat_tmpl_detect(src, &t);

        if (r == 0) {
                if (t >= M40_CHAT_TMPL_COUNT || f != m40_chat_tmpl_family(t) ||
                    m40_chat_tmpl_detect(m40_chat_tmpl_name(t), &t) || f != m40_chat_tmpl_family(t))
                        abort();
        } else if (r == -ENOENT) {
                if (*src || f != M40_CHAT_NONE)
                        abort();
        } else if (r != M40_EUNSUPPORTED || f != M40_CHAT_UNKNOWN || t != M40_CHAT_TMPL_COUNT) {
                abort();
        }
}

static void format(enum m40_chat_tmpl t, const struct m40_chat_msg *m, size_t n, bool gen,
                   size_t small)
{
        static char out[1 << 16], again[1 << 16];
        size_t len = 0, len2 = 0;
        int r = m40_chat_format(t, m, n, gen, out, small, &len);

        if (r != (len + 1 > small ? -ENOBUFS : 0) || len + 1 > sizeof(out))
                abort();
        if (m40_chat_format(t, m, n, gen, out, len + 1, &len2) || len2 != len ||
            strlen(out) != len || m40_chat_format(t, m, n, gen, again, sizeof(again), &len2) ||
            len2 != len || memcmp(out, again, len + 1))
                abort();
        for (size_t i = 0; i < n; i++) {
                if (t == M40_CHAT_TMPL_GEMMA && !strcmp(m[i].role, "system"))
                        continue;
                if (!contains(out, m[i].content))
                        abort();
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        static char text[4097];
        struct m40_chat_msg m[MAX_MSGS];
        size_t n = 0;
        char *s;

        if (size < 1 || size > 4096)
                return 0;
        memcpy(text, data + 1, size - 1);
        text[size - 1] = 0;
        if (!(data[0] & 1)) {
                detect(text);
                return 0;
        }
        s = text;
        while (n < MAX_MSGS) {
                char *bar = strchr(s, '|');
                char c = *s;

                if (bar)
                        *bar = 0;
                m[n].role = c == 's'   ? "system"
                            : c == 'u' ? "user"
                            : c == 'a' ? "assistant"
                                       : "tool";
                m[n++].content = c ? s + 1 : s;
                if (!bar)
                        break;
                s = bar + 1;
        }
        format((enum m40_chat_tmpl)((data[0] >> 2) % M40_CHAT_TMPL_COUNT), m, n, data[0] & 2,
               (size_t)(data[0] >> 6) * 16);
        return 0;
}
