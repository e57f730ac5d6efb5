/* m40-tokenize.c - command-line front end to the tokenizers, and the harness the text
 * conformance tests drive.
 *
 *   m40-tokenize -m FILE [--no-bos] [--special] [--pieces] TEXT
 *       prints TEXT's token ids, space separated; --pieces adds one line per token with its
 *       id and piece. BOS/EOS are added as the vocabulary says unless --no-bos; --special
 *       parses control-token texts.
 *   m40-tokenize -m FILE [--no-bos] [--special] --batch
 *       reads one hex-encoded byte string per line of stdin, prints its ids per line.
 *   m40-tokenize -m FILE [--no-bos] [--special] --roundtrip
 *       as --batch, but prints the hex of the text streamed back through m40_detok one
 *       token at a time (M40_DETOK_STRIP_SPACE, and M40_DETOK_SPECIAL with --special).
 *   m40-tokenize -m FILE --info
 *       prints the vocabulary's kind, size, pre-tokenizer, special ids and flags.
 *   m40-tokenize -m FILE --dump-pieces
 *       prints "id hex(piece special=false) hex(piece special=true) attr" for every token.
 *   m40-tokenize [-m FILE] --chat TEMPLATE [--no-gen]
 *       formats the messages on stdin (lines "role hex(content)") with a built-in template
 *       (a name such as chatml, or @FILE holding Jinja source to detect from) and prints
 *       the hex of the text; with -m, a second line lists the stop tokens.
 *
 * Exit status: 0 success, 1 failure, 2 usage error. */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "m40/error.h"
#include "model/gguf.h"
#include "text/chat.h"
#include "text/detok.h"
#include "text/vocab.h"

static void usage(FILE *f)
{
        fputs("usage: m40-tokenize -m FILE [--no-bos] [--special] [--pieces] TEXT\n"
              "       m40-tokenize -m FILE [--no-bos] [--special] (--batch | --roundtrip)\n"
              "       m40-tokenize -m FILE (--info | --dump-pieces)\n"
              "       m40-tokenize [-m FILE] --chat TEMPLATE [--no-gen]\n",
              f);
}

static void put_hex(const char *s, size_t n)
{
        static const char hex[] = "0123456789abcdef";

        for (size_t i = 0; i < n; i++) {
                putchar(hex[(unsigned char)s[i] >> 4]);
                putchar(hex[(unsigned char)s[i] & 15]);
        }
}

static int hexval(char c)
{
        return c >= '0' && c <= '9'   ? c - '0'
               : c >= 'a' && c <= 'f' ? c - 'a' + 10
               : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                      : -1;
}

/* unhex - decodes the hex digits of line in place; returns the byte count or -1. */
static ssize_t unhex(char *line)
{
        size_t n = strcspn(line, "\r\n");

        if (n % 2)
                return -1;
        for (size_t i = 0; i < n; i += 2) {
                int hi = hexval(line[i]), lo = hexval(line[i + 1]);
                if (hi < 0 || lo < 0)
                        return -1;
                line[i / 2] = (char)(hi << 4 | lo);
        }
        return (ssize_t)(n / 2);
}

static int tokenize(const struct m40_vocab *v, const char *s, size_t n, unsigned flags,
                    int32_t **ids, size_t *cap, size_t *ret_n)
{
        int e = m40_vocab_tokenize(v, s, n, flags, *ids, *cap, ret_n);

        if (e == -ENOBUFS) {
                int32_t *p = realloc(*ids, (*ret_n + 16) * sizeof(*p));
                if (!p)
                        return -ENOMEM;
                *ids = p;
                *cap = *ret_n + 16;
                e = m40_vocab_tokenize(v, s, n, flags, *ids, *cap, ret_n);
        }
        return e;
}

static int roundtrip(struct m40_detok *d, const int32_t *ids, size_t n)
{
        const char *t;
        size_t len;

        for (size_t i = 0; i < n; i++) {
                int e = m40_detok_push(d, ids[i], &t, &len);
                if (e)
                        return e;
                put_hex(t, len);
        }
        m40_detok_flush(d, &t, &len);
        put_hex(t, len);
        return 0;
}

static int run_batch(const struct m40_vocab *v, unsigned flags, bool rt)
{
        struct m40_detok *d = NULL;
        char *line = NULL;
        size_t lcap = 0, cap = 0, n;
        int32_t *ids = NULL;
        int e = 0;

        if (rt &&
            (e = m40_detok_new(v,
                               M40_DETOK_STRIP_SPACE |
                                       (flags & M40_TOKENIZE_PARSE_SPECIAL ? M40_DETOK_SPECIAL : 0),
                               &d)))
                return e;
        while (!e && getline(&line, &lcap, stdin) >= 0) {
                ssize_t len = unhex(line);
                if (len < 0) {
                        fprintf(stderr, "m40-tokenize: bad hex line\n");
                        e = -EINVAL;
                        break;
                }
                e = tokenize(v, line, (size_t)len, flags, &ids, &cap, &n);
                if (e)
                        break;
                if (rt) {
                        e = roundtrip(d, ids, n);
                } else {
                        for (size_t i = 0; i < n; i++)
                                printf(i ? " %d" : "%d", ids[i]);
                }
                putchar('\n');
        }
        free(line);
        free(ids);
        m40_detok_free(d);
        return e;
}

static int run_text(const struct m40_vocab *v, unsigned flags, const char *text, bool pieces)
{
        int32_t *ids = NULL;
        size_t cap = 0, n;
        int e = tokenize(v, text, strlen(text), flags, &ids, &cap, &n);

        for (size_t i = 0; i < n && !e; i++)
                printf(i ? " %d" : "%d", ids[i]);
        if (!e)
                putchar('\n');
        for (size_t i = 0; i < n && pieces && !e; i++) {
                const char *p;
                size_t len;
                m40_vocab_piece(v, ids[i], true, &p, &len);
                printf("%d\t'", ids[i]);
                for (size_t k = 0; k < len; k++) {
                        unsigned char c = (unsigned char)p[k];
                        if (c < 0x20 || c == 0x7F || c == '\\' || c == '\'')
                                printf("\\x%02x", c);
                        else
                                putchar(c);
                }
                puts("'");
        }
        free(ids);
        return e;
}

static void dump_pieces(const struct m40_vocab *v)
{
        for (uint32_t id = 0; id < m40_vocab_n_tokens(v); id++) {
                const char *p;
                size_t n;
                printf("%u ", id);
                m40_vocab_piece(v, (int32_t)id, false, &p, &n);
                put_hex(p, n);
                putchar(' ');
                m40_vocab_piece(v, (int32_t)id, true, &p, &n);
                put_hex(p, n);
                printf(" %u\n", m40_vocab_token_attr(v, (int32_t)id));
        }
}

static void info(const struct m40_vocab *v)
{
        const struct m40_vocab_special *sp = m40_vocab_special(v);
        const int32_t *eog;
        size_t n;

        printf("type=%s n_tokens=%u pre=%s bos=%d eos=%d eot=%d unk=%d add_bos=%d add_eos=%d "
               "add_space_prefix=%d eog=",
               m40_vocab_type(v) == M40_VOCAB_SPM ? "spm" : "bpe", m40_vocab_n_tokens(v),
               m40_vocab_pre(v), sp->bos, sp->eos, sp->eot, sp->unk, sp->add_bos, sp->add_eos,
               sp->add_space_prefix);
        eog = m40_vocab_eog(v, &n);
        for (size_t i = 0; i < n; i++)
                printf(i ? ",%d" : "%d", eog[i]);
        putchar('\n');
}

static char *read_file(const char *path)
{
        FILE *f = fopen(path, "rb");
        char *s = NULL;
        size_t cap = 0;

        if (!f)
                return NULL;
        if (getdelim(&s, &cap, '\0', f) < 0) {
                free(s);
                s = feof(f) ? strdup("") : NULL; /* an empty file is an empty template */
        }
        fclose(f);
        return s;
}

static int run_chat(const struct m40_vocab *v, const char *tmpl_arg, bool gen)
{
        struct m40_chat_msg msgs[64];
        char *lines[64] = {0}, *src = NULL, *out = NULL;
        struct m40_chat_template t;
        size_t n = 0, cap = 0, len = 0;
        int e = 0;

        if (tmpl_arg[0] == '@' && !(src = read_file(tmpl_arg + 1)))
                return -errno;
        e = m40_chat_template_init(&t, src ? src : tmpl_arg);
        free(src);
        if (e == -ENOMEM)
                return e;
        if (e)
                fprintf(stderr, "m40-tokenize: unknown chat template, using chatml\n");
        e = 0;
        for (; n < 64 && getline(&lines[n], &cap, stdin) >= 0; n++, cap = 0) {
                char *sp = strchr(lines[n], ' ');
                ssize_t k = sp ? unhex(sp + 1) : -1;
                if (k < 0) {
                        e = -EINVAL;
                        break;
                }
                sp[1 + k] = 0;
                msgs[n] = (struct m40_chat_msg){lines[n], sp + 1};
                *sp = 0;
        }
        if (!e)
                e = m40_chat_render(&t, msgs, n, gen, NULL, 0, &len);
        if (e == -ENOBUFS && (out = malloc(len + 1)))
                e = m40_chat_render(&t, msgs, n, gen, out, len + 1, &len);
        if (!e) {
                fprintf(stderr, "template: %s%s\n", m40_chat_tmpl_name(t.tmpl),
                        t.default_system ? " with a default system message" : "");
                put_hex(out, len);
                putchar('\n');
        }
        if (!e && v) {
                int32_t ids[64];
                size_t k;
                e = m40_chat_stop_tokens(v, t.tmpl, ids, 64, &k);
                for (size_t i = 0; i < k && !e; i++)
                        printf(i ? " %d" : "%d", ids[i]);
                putchar('\n');
        }
        for (size_t i = 0; i <= n && i < 64; i++)
                free(lines[i]);
        free(out);
        m40_chat_template_done(&t);
        return e;
}

enum mode { TEXT, BATCH, ROUNDTRIP, DUMP, INFO, CHAT };

struct args {
        const char *model, *chat;
        unsigned flags;
        enum mode mode;
        bool pieces, gen;
};

/* parse - the command line into *a; returns -1 to go on, else the exit status. */
static int parse(int argc, char **argv, struct args *a)
{
        static const struct option opts[] = {
                {"model", required_argument, NULL, 'm'}, {"no-bos", no_argument, NULL, 'B'},
                {"special", no_argument, NULL, 'S'},     {"pieces", no_argument, NULL, 'p'},
                {"batch", no_argument, NULL, 'b'},       {"roundtrip", no_argument, NULL, 'r'},
                {"dump-pieces", no_argument, NULL, 'd'}, {"chat", required_argument, NULL, 'c'},
                {"no-gen", no_argument, NULL, 'G'},      {"info", no_argument, NULL, 'i'},
                {"help", no_argument, NULL, 'h'},        {0},
        };
        int c;

        *a = (struct args){.flags = M40_TOKENIZE_ADD_SPECIAL, .mode = TEXT, .gen = true};
        while ((c = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
                if (c == 'm')
                        a->model = optarg;
                else if (c == 'B')
                        a->flags &= ~(unsigned)M40_TOKENIZE_ADD_SPECIAL;
                else if (c == 'S')
                        a->flags |= M40_TOKENIZE_PARSE_SPECIAL;
                else if (c == 'p')
                        a->pieces = true;
                else if (c == 'G')
                        a->gen = false;
                else if (c == 'b' || c == 'r' || c == 'd' || c == 'i')
                        a->mode = c == 'b' ? BATCH : c == 'r' ? ROUNDTRIP : c == 'd' ? DUMP : INFO;
                else if (c == 'c')
                        a->mode = CHAT, a->chat = optarg;
                else if (c == 'h')
                        return usage(stdout), 0;
                else
                        return usage(stderr), 2;
        }
        if ((!a->model && a->mode != CHAT) || optind != argc - (a->mode == TEXT))
                return usage(stderr), 2;
        return -1;
}

int main(int argc, char **argv)
{
        char err[M40_GGUF_ERRLEN] = "";
        struct m40_gguf *g = NULL;
        struct m40_vocab *v = NULL;
        struct args a;
        int e = parse(argc, argv, &a);

        if (e >= 0)
                return e;
        if (a.model) {
                e = m40_gguf_open(a.model, &g, err, sizeof(err));
                if (!e)
                        e = m40_vocab_new(g, &v, err, sizeof(err));
                g = m40_gguf_free(g);
                if (e) {
                        fprintf(stderr, "m40-tokenize: %s: %s\n", a.model,
                                *err ? err : m40_strerror(e));
                        return 1;
                }
        }
        e = 0;
        if (a.mode == CHAT)
                e = run_chat(v, a.chat, a.gen);
        else if (a.mode == DUMP)
                dump_pieces(v);
        else if (a.mode == INFO)
                info(v);
        else if (a.mode == BATCH || a.mode == ROUNDTRIP)
                e = run_batch(v, a.flags, a.mode == ROUNDTRIP);
        else
                e = run_text(v, a.flags, argv[optind], a.pieces);
        m40_vocab_free(v);
        if (e)
                fprintf(stderr, "m40-tokenize: %s\n", m40_strerror(e));
        return e ? 1 : 0;
}
