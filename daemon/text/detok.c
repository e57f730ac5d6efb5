/* detok.c - the streaming detokenizer (see detok.h). */
#include "text/detok.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "text/utf8.h"
#include "text/vocab.h"

struct m40_detok {
        const struct m40_vocab *v;
        unsigned flags;
        bool at_start;   /* no non-empty piece seen yet */
        uint8_t pend[4]; /* an incomplete UTF-8 sequence held back */
        size_t n_pend;
        char *buf; /* pending bytes + the piece, then the output */
        size_t cap;
};

int m40_detok_new(const struct m40_vocab *v, unsigned flags, struct m40_detok **ret)
{
        struct m40_detok *d = calloc(1, sizeof(*d));

        if (!d)
                return -ENOMEM;
        d->v = v;
        d->flags = flags;
        d->at_start = true;
        *ret = d;
        return 0;
}

struct m40_detok *m40_detok_free(struct m40_detok *d)
{
        if (d) {
                free(d->buf);
                free(d);
        }
        return NULL;
}

void m40_detok_reset(struct m40_detok *d)
{
        d->at_start = true;
        d->n_pend = 0;
}

static int reserve(struct m40_detok *d, size_t need)
{
        if (need <= d->cap)
                return 0;
        char *p = realloc(d->buf, need);
        if (!p)
                return -ENOMEM;
        d->buf = p;
        d->cap = need;
        return 0;
}

int m40_detok_push(struct m40_detok *d, int32_t id, const char **ret_text, size_t *ret_len)
{
        const char *piece;
        size_t n, in, o = 0, i = 0;
        int e = m40_vocab_piece(d->v, id, d->flags & M40_DETOK_SPECIAL, &piece, &n);

        if (e)
                return e;
        if (n && d->at_start) {
                d->at_start = false;
                if ((d->flags & M40_DETOK_STRIP_SPACE) &&
                    m40_vocab_special(d->v)->add_space_prefix && piece[0] == ' ') {
                        piece++;
                        n--;
                }
        }
        /* input at buf[in, in + n_pend + n), output written from buf[0]: each input byte
         * yields at most 3 output bytes, and output never overtakes input */
        in = 2 * (d->n_pend + n) + 4;
        if (reserve(d, in + d->n_pend + n + 4))
                return -ENOMEM;
        memcpy(d->buf + in, d->pend, d->n_pend);
        memcpy(d->buf + in + d->n_pend, piece, n);
        n += d->n_pend;
        d->n_pend = 0;
        const uint8_t *s = (const uint8_t *)d->buf + in;
        while (i < n) {
                int r = m40_utf8_check(s + i, n - i);
                if (r > 0) {
                        memmove(d->buf + o, s + i, (size_t)r);
                        o += (size_t)r;
                        i += (size_t)r;
                } else if (r == 0) {
                        d->n_pend = n - i;
                        memcpy(d->pend, s + i, d->n_pend);
                        break;
                } else {
                        memcpy(d->buf + o, M40_UTF8_REPLACEMENT_STR, 3);
                        o += 3;
                        i += (size_t)-r;
                }
        }
        *ret_text = d->buf;
        *ret_len = o;
        return 0;
}

int m40_detok_flush(struct m40_detok *d, const char **ret_text, size_t *ret_len)
{
        bool pending = d->n_pend > 0;

        m40_detok_reset(d);
        *ret_text = pending ? M40_UTF8_REPLACEMENT_STR : "";
        *ret_len = pending ? 3 : 0;
        return 0;
}
