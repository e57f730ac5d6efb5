/* submit.c - `m40ctl submit` (one prompt, streamed to stdout) and `m40ctl run` (an
 * interactive chat with history: line editing through libedit on a terminal; the oldest
 * exchanges are forgotten when the conversation outgrows the context), both over libm40.
 * Ctrl-C cancels the running request. While a request waits for events, m40d's silence
 * longer than --timeout is checked with a STATUS exchange: a busy daemon answers it, a
 * stopped one ends the command with "did not answer". */
#include <editline/readline.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "m40/m40.h"
#include "m40ctl.h"

#define MAX_STDIN_PROMPT (16u << 20)
#define MAX_HISTORY      256
#define MAX_TOKENS       (1 << 20) /* --max-tokens; the daemon has its own, lower limit */
#define MAX_TOP_K        (1 << 20)
#define M40_MAX_STOPS    8 /* m40/m40.h: struct m40_request.stop */
#define M40_MAX_STOP_LEN 64

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
        (void)sig;
        interrupted = 1;
}

/* SIGINT without SA_RESTART, so a blocked read or wait returns EINTR. */
static void catch_sigint(void)
{
        struct sigaction sa = {.sa_handler = on_sigint};

        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
}

void m40ctl_json_str(FILE *f, const char *s, size_t n)
{
        fputc('"', f);
        for (size_t i = 0; i < n; i++) {
                unsigned char ch = (unsigned char)s[i];

                if (ch == '"' || ch == '\\')
                        fprintf(f, "\\%c", ch);
                else if (ch == '\n')
                        fputs("\\n", f);
                else if (ch == '\t')
                        fputs("\\t", f);
                else if (ch < 0x20 || ch == 0x7f)
                        fprintf(f, "\\u%04x", ch);
                else
                        fputc(ch, f);
        }
        fputc('"', f);
}

static int connect_or_say(const char *cmd, const char *sock, int timeout_ms,
                          struct m40_client **ret)
{
        int r = m40ctl_connect(cmd, sock, timeout_ms, ret);

        if (r)
                return r == -ENOMEM ? M40CTL_EXIT_FAIL : M40CTL_EXIT_UNREACHABLE;
        return 0;
}

/* Options shared by submit and run: sampling, limits, socket, timeout. */
enum {
        O_TEMP = 256,
        O_TOPK,
        O_TOPP,
        O_MINP,
        O_REP,
        O_SEED,
        O_STOP,
        O_SOCKET,
        O_JSON,
        O_IGNORE_EOS,
        O_SYSTEM,
        O_CHAT,
        O_TIMEOUT,
};

#define COMMON_OPTS                                                                                \
        {"max-tokens", required_argument, 0, 'n'}, {"temp", required_argument, 0, O_TEMP},         \
                {"top-k", required_argument, 0, O_TOPK}, {"top-p", required_argument, 0, O_TOPP},  \
                {"min-p", required_argument, 0, O_MINP},                                           \
                {"repeat-penalty", required_argument, 0, O_REP},                                   \
                {"seed", required_argument, 0, O_SEED}, {"stop", required_argument, 0, O_STOP},    \
                {"socket", required_argument, 0, O_SOCKET},                                        \
                {"ignore-eos", no_argument, 0, O_IGNORE_EOS},                                      \
                {"system", required_argument, 0, O_SYSTEM},                                        \
                {"timeout", required_argument, 0, O_TIMEOUT},                                      \
        {                                                                                          \
                "help", no_argument, 0, 'h'                                                        \
        }

struct common {
        const char *cmd; /* "submit" or "run", for messages */
        struct m40_request rq;
        const char *stop[M40_MAX_STOPS];
        const char *sock, *system;
        int timeout_ms; /* -1: none */
};

/* Reads a float option within [lo, hi] into *dst and marks it set. Returns 1, or -1. */
static int float_opt(struct common *c, const char *name, const char *arg, double lo, double hi,
                     uint32_t set, float *dst)
{
        double v;

        if (m40ctl_opt_num(c->cmd, name, arg, lo, hi, false, &v))
                return -1;
        c->rq.set |= set;
        *dst = (float)v;
        return 1;
}

/* Returns 1 when opt was one of the shared options, 0 when not, -1 for a bad value (said
 * on stderr). */
static int common_opt(struct common *c, int opt, const char *arg)
{
        double v;

        switch (opt) {
        case 'n':
                if (m40ctl_opt_num(c->cmd, "-n/--max-tokens", arg, 1, MAX_TOKENS, true, &v))
                        return -1;
                c->rq.max_tokens = (uint32_t)v;
                return 1;
        case O_TEMP:
                return float_opt(c, "--temp", arg, 0, 100, M40_SET_TEMPERATURE, &c->rq.temperature);
        case O_TOPK:
                if (m40ctl_opt_num(c->cmd, "--top-k", arg, 0, MAX_TOP_K, true, &v))
                        return -1;
                c->rq.set |= M40_SET_TOP_K;
                c->rq.top_k = (int32_t)v;
                return 1;
        case O_TOPP:
                return float_opt(c, "--top-p", arg, 0, 1, M40_SET_TOP_P, &c->rq.top_p);
        case O_MINP:
                return float_opt(c, "--min-p", arg, 0, 1, M40_SET_MIN_P, &c->rq.min_p);
        case O_REP:
                return float_opt(c, "--repeat-penalty", arg, 0.01, 100, M40_SET_REPEAT_PENALTY,
                                 &c->rq.repeat_penalty);
        case O_SEED:
                if (m40ctl_opt_u64(c->cmd, "--seed", arg, &c->rq.seed))
                        return -1;
                c->rq.set |= M40_SET_SEED;
                return 1;
        case O_TIMEOUT:
                return m40ctl_opt_timeout(c->cmd, arg, &c->timeout_ms) ? -1 : 1;
        case O_STOP:
                if (c->rq.n_stop == M40_MAX_STOPS || !*arg || strlen(arg) > M40_MAX_STOP_LEN) {
                        fprintf(stderr,
                                "m40ctl %s: --stop takes 1 to %d bytes, at most %d times; not "
                                "'%s'\n",
                                c->cmd, M40_MAX_STOP_LEN, M40_MAX_STOPS, arg);
                        return -1;
                }
                c->stop[c->rq.n_stop++] = arg;
                c->rq.stop = c->stop;
                return 1;
        case O_SOCKET:
                c->sock = arg;
                return 1;
        case O_IGNORE_EOS:
                c->rq.flags |= M40_REQUEST_IGNORE_EOS;
                return 1;
        case O_SYSTEM:
                c->system = arg;
                return 1;
        }
        return 0;
}

static const char common_help[] =
        "  -n, --max-tokens N    Generate at most N tokens, 1..1048576 (default: the\n"
        "                        daemon's).\n"
        "      --temp T          Temperature 0..100; 0 is greedy (default: the daemon's).\n"
        "      --top-k K         Sample from the K likeliest tokens, 0..1048576 (0: off).\n"
        "      --top-p P         Nucleus sampling, 0..1 (1: off).\n"
        "      --min-p P         Drop tokens below P x the likeliest one's, 0..1 (0: off).\n"
        "      --repeat-penalty R  0.01..100 (1: off).\n"
        "      --seed S          Sampling seed, 0..2^64-1.\n"
        "                        (Sampling defaults: m40d.ini's [sampling].)\n"
        "      --stop STR        Stop when STR appears (up to 8, 64 bytes each).\n"
        "      --ignore-eos      Keep generating past the model's end of text.\n"
        "      --system TEXT     A system message (chat).\n"
        "      --socket PATH     m40d's socket (default: see m40ctl --help).\n"
        "      --timeout S       Give up when m40d stays silent S seconds and does not\n"
        "                        answer a status request either (default 30; 0: never).\n"
        "                        A long reply that keeps streaming never times out.\n"
        "  -h, --help            Show this text.\n"
        "\n"
        "Exit status: 0 done; 1 failure; 2 bad command line; 3 m40d unreachable;\n"
        "4 the daemon rejected or failed the request; 130 interrupted by Ctrl-C.\n";

/* Submits, retrying while the rings are full. */
static int submit(struct m40_client *cl, const struct m40_request *rq, uint64_t *ret_id)
{
        for (;;) {
                int r = m40_client_submit(cl, rq, ret_id);

                if (r != -EAGAIN)
                        return r;
                usleep(1000);
        }
}

struct reply {
        char *text;
        size_t len, cap;
        int32_t *toks;
        size_t n_toks, cap_toks;
        struct m40_reply last;
};

static int reply_add(struct reply *rp, const struct m40_reply *ev)
{
        if (rp->len + ev->len + 1 > rp->cap) {
                size_t cap = 2 * (rp->len + ev->len + 64);
                char *t = realloc(rp->text, cap);

                if (!t)
                        return -ENOMEM;
                rp->text = t;
                rp->cap = cap;
        }
        memcpy(rp->text + rp->len, ev->text, ev->len);
        rp->len += ev->len;
        rp->text[rp->len] = 0;
        if (ev->token >= 0) {
                if (rp->n_toks == rp->cap_toks) {
                        size_t cap = rp->cap_toks ? 2 * rp->cap_toks : 64;
                        int32_t *t = realloc(rp->toks, cap * sizeof(*t));

                        if (!t)
                                return -ENOMEM;
                        rp->toks = t;
                        rp->cap_toks = cap;
                }
                rp->toks[rp->n_toks++] = ev->token;
        }
        return 0;
}

static uint64_t now_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Streams request id's text to out (when not NULL) until its last event, cancelling it on
 * Ctrl-C. After c->timeout_ms without an event, asks m40d for its status: a daemon that
 * answers is busy (the request waits its turn), one that does not ends the stream. Returns
 * an exit code: M40CTL_EXIT_REJECTED for an ERROR event, which is left in rp->last with the
 * final DONE (the caller says why). */
static int stream(struct m40_client *cl, const struct common *c, uint64_t id, FILE *out,
                  struct reply *rp)
{
        uint64_t heard = now_ms();
        bool cancelled = false;

        for (;;) {
                struct m40_reply ev;
                struct m40_status st;
                int r = m40_client_next(cl, 200, &ev);

                if (interrupted && !cancelled) {
                        cancelled = m40_client_cancel(cl, id) == 0;
                        interrupted = 0;
                }
                if ((r == -ETIMEDOUT || r == -EINTR) && c->timeout_ms > 0 &&
                    now_ms() - heard >= (uint64_t)c->timeout_ms) {
                        r = m40_client_status(cl, &st);
                        if (r) {
                                fputs(rp->len ? "\n" : "", stderr);
                                m40ctl_say_unreachable(c->cmd, c->sock, c->timeout_ms, r);
                                return M40CTL_EXIT_UNREACHABLE;
                        }
                        heard = now_ms();
                        continue;
                }
                if (r == -ETIMEDOUT || r == -EINTR)
                        continue;
                if (r) {
                        fprintf(stderr, "\nm40ctl: connection to m40d lost: %s\n", m40_strerror(r));
                        return M40CTL_EXIT_UNREACHABLE;
                }
                heard = now_ms();
                if (ev.id != id)
                        continue;
                if (ev.type == M40_EVENT_TEXT) {
                        if (reply_add(rp, &ev))
                                return M40CTL_EXIT_FAIL;
                        if (out) {
                                fwrite(ev.text, 1, ev.len, out);
                                fflush(out);
                        }
                } else if (ev.type == M40_EVENT_DONE || ev.type == M40_EVENT_ERROR) {
                        rp->last = ev;
                        if (ev.type == M40_EVENT_ERROR)
                                return M40CTL_EXIT_REJECTED;
                        return cancelled ? M40CTL_EXIT_INTERRUPTED : M40CTL_EXIT_OK;
                }
        }
}

static char *read_stdin(void)
{
        size_t len = 0, cap = 4096;
        char *buf = malloc(cap);

        while (buf) {
                size_t k = fread(buf + len, 1, cap - len - 1, stdin);

                len += k;
                if (k == 0)
                        break;
                if (len + 1 == cap) {
                        char *n = cap >= MAX_STDIN_PROMPT ? NULL : realloc(buf, 2 * cap);

                        if (!n) {
                                free(buf);
                                return NULL;
                        }
                        buf = n;
                        cap *= 2;
                }
        }
        if (buf)
                buf[len] = 0;
        return buf;
}

static void print_json(const struct reply *rp, uint64_t id)
{
        printf("{\"id\":%llu,\"text\":", (unsigned long long)id);
        m40ctl_json_str(stdout, rp->text ? rp->text : "", rp->len);
        printf(",\"tokens\":[");
        for (size_t i = 0; i < rp->n_toks; i++)
                printf("%s%d", i ? "," : "", rp->toks[i]);
        if (rp->last.type == M40_EVENT_ERROR) {
                printf("],\"error\":");
                m40ctl_json_str(stdout, rp->last.text, rp->last.len);
        } else {
                printf("],\"finish\":\"%s\"", m40_finish_name(rp->last.finish));
        }
        printf(",\"n_prompt\":%u,\"n_generated\":%u}\n", rp->last.n_prompt, rp->last.n_generated);
}

/* Bytes of text in rq: prompt, messages and stop strings. */
static size_t text_bytes(const struct m40_request *rq)
{
        size_t n = rq->prompt ? strlen(rq->prompt) : 0;

        for (size_t i = 0; i < rq->n_messages; i++)
                n += strlen(rq->messages[i].content);
        for (size_t i = 0; i < rq->n_stop; i++)
                n += strlen(rq->stop[i]);
        return n;
}

int m40ctl_submit(int argc, char **argv)
{
        static const struct option opts[] = {COMMON_OPTS,
                                             {"json", no_argument, 0, O_JSON},
                                             {"chat", no_argument, 0, O_CHAT},
                                             {0, 0, 0, 0}};
        struct common c = {.cmd = "submit", .timeout_ms = M40_DEFAULT_TIMEOUT_MS};
        struct reply rp = {0};
        struct m40_client *cl = NULL;
        struct m40_message msgs[2];
        bool json = false, chat = false;
        char *owned = NULL;
        uint64_t id;
        int opt, r;

        m40_request_init(&c.rq);
        while ((opt = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
                if (opt == 'h') {
                        printf("Usage: m40ctl submit [OPTIONS] [PROMPT|-]\n\n"
                               "Sends PROMPT (or stdin, for - or no PROMPT) to m40d and streams "
                               "the\ngenerated text to stdout as it arrives.\n\n"
                               "  --json                Print one JSON object at the end "
                               "instead (text,\n"
                               "                        token ids, finish reason, usage).\n"
                               "  --chat                Send PROMPT as a user message, "
                               "formatted with the\n"
                               "                        model's chat template.\n%s",
                               common_help);
                        return M40CTL_EXIT_OK;
                }
                if (opt == O_JSON) {
                        json = true;
                        continue;
                }
                if (opt == O_CHAT) {
                        chat = true;
                        continue;
                }
                r = common_opt(&c, opt, optarg);
                if (r <= 0) {
                        fprintf(stderr, "Try 'm40ctl submit --help'.\n");
                        return M40CTL_EXIT_USAGE;
                }
        }
        if (argc - optind > 1) {
                fprintf(stderr, "m40ctl submit: one PROMPT at most (quote it)\n");
                return M40CTL_EXIT_USAGE;
        }
        if (optind == argc || !strcmp(argv[optind], "-")) {
                owned = read_stdin();
                if (!owned) {
                        fprintf(stderr, "m40ctl submit: cannot read the prompt from stdin\n");
                        return M40CTL_EXIT_FAIL;
                }
                c.rq.prompt = owned;
        } else {
                c.rq.prompt = argv[optind];
        }
        if (chat || c.system) {
                size_t n = 0;

                if (c.system)
                        msgs[n++] = (struct m40_message){"system", c.system};
                msgs[n++] = (struct m40_message){"user", c.rq.prompt};
                c.rq.messages = msgs;
                c.rq.n_messages = n;
                c.rq.prompt = NULL;
        }
        if (json)
                c.rq.flags |= M40_REQUEST_TOKENS;
        r = connect_or_say("submit", c.sock, c.timeout_ms, &cl);
        if (r)
                goto out;
        catch_sigint();
        r = submit(cl, &c.rq, &id);
        if (r == -E2BIG) {
                fprintf(stderr,
                        "m40ctl submit: the prompt is too long: %zu bytes, and m40d takes at "
                        "most %zu bytes per request (prompt, messages and stop strings: "
                        "max_prompt_bytes in m40d.ini, plus their encoding)\n",
                        text_bytes(&c.rq), m40_client_max_request_bytes(cl));
                r = M40CTL_EXIT_REJECTED;
                goto out;
        }
        if (r) {
                fprintf(stderr, "m40ctl submit: %s\n", m40_strerror(r));
                r = r == -EPIPE ? M40CTL_EXIT_UNREACHABLE : M40CTL_EXIT_REJECTED;
                goto out;
        }
        r = stream(cl, &c, id, json ? NULL : stdout, &rp);
        if (r == M40CTL_EXIT_REJECTED)
                fprintf(stderr, "%sm40ctl submit: request failed: %s\n", rp.len ? "\n" : "",
                        rp.last.text);
        if (json &&
            (r == M40CTL_EXIT_OK || r == M40CTL_EXIT_REJECTED || r == M40CTL_EXIT_INTERRUPTED))
                print_json(&rp, id);
        else if (!json && rp.len && rp.text[rp.len - 1] != '\n' && isatty(STDOUT_FILENO))
                putchar('\n');
out:
        m40_client_disconnect(cl);
        free(rp.text);
        free(rp.toks);
        free(owned);
        return r;
}

/* The conversation of `m40ctl run`: hist[0..first) is the system message (kept), then
 * user and assistant messages in turn; contents are owned. */
struct chat {
        struct m40_message hist[MAX_HISTORY];
        size_t n, first;
};

/* Forgets the oldest exchange (a user message and its reply); false when there is none
 * besides the newest message. */
static bool chat_drop_oldest(struct chat *ch)
{
        if (ch->n - ch->first < 3)
                return false;
        free((char *)ch->hist[ch->first].content);
        free((char *)ch->hist[ch->first + 1].content);
        memmove(ch->hist + ch->first, ch->hist + ch->first + 2,
                (ch->n - ch->first - 2) * sizeof(*ch->hist));
        ch->n -= 2;
        return true;
}

/* Says why a reply ended early, on stderr. */
static void chat_marker(const struct common *c, const struct m40_reply *last)
{
        switch (last->finish) {
        case M40_FINISHED_LENGTH:
                fprintf(stderr, "[reply cut at max_tokens: %u tokens%s]\n", last->n_generated,
                        c->rq.max_tokens ? "; raise -n" : "; -n raises it");
                break;
        case M40_FINISHED_CONTEXT:
                fprintf(stderr, "[reply cut: the context window is full; the oldest turns "
                                "will be dropped]\n");
                break;
        case M40_FINISHED_KV:
                fprintf(stderr, "[reply cut: m40d ran out of KV cache memory]\n");
                break;
        }
}

/* One chat turn: submits the conversation (ending with the user's message), streams the
 * reply and keeps it. When the conversation does not fit - the request's size, or the
 * context window, which m40d reports with -E2BIG before any text - the oldest exchanges are
 * dropped until it does; a message that does not fit alone is dropped with a message.
 * Returns an exit code. */
static int chat_turn(struct m40_client *cl, struct common *c, struct chat *ch)
{
        struct reply rp = {0};
        uint64_t id;
        int r;

        for (;;) {
                c->rq.messages = ch->hist;
                c->rq.n_messages = ch->n;
                r = submit(cl, &c->rq, &id);
                if (!r)
                        r = stream(cl, c, id, stdout, &rp);
                if (!(r == -E2BIG ||
                      (r == M40CTL_EXIT_REJECTED && rp.last.error == -E2BIG && !rp.len)) ||
                    !chat_drop_oldest(ch))
                        break;
                fprintf(stderr, "[dropped the oldest exchange: the conversation outgrew %s]\n",
                        r == -E2BIG ? "m40d's request size" : "the context window");
        }
        if (r < 0) {
                if (r == -E2BIG)
                        fprintf(stderr,
                                "m40ctl run: the message is too long: %zu bytes, and m40d "
                                "takes at most %zu bytes per request (max_prompt_bytes in "
                                "m40d.ini, "
                                "plus the encoding)\n",
                                strlen(ch->hist[ch->n - 1].content),
                                m40_client_max_request_bytes(cl));
                else
                        fprintf(stderr, "m40ctl run: %s\n", m40_strerror(r));
                r = r == -EPIPE ? M40CTL_EXIT_UNREACHABLE : M40CTL_EXIT_REJECTED;
        } else if (r == M40CTL_EXIT_REJECTED) {
                fprintf(stderr, "%sm40ctl run: %s%s\n", rp.len ? "\n" : "",
                        rp.last.error == -E2BIG ? "the message does not fit: " : "", rp.last.text);
        } else {
                printf("\n");
                fflush(stdout);
        }
        if (r == M40CTL_EXIT_INTERRUPTED)
                fprintf(stderr, "[cancelled]\n");
        if (r == M40CTL_EXIT_OK || r == M40CTL_EXIT_INTERRUPTED) {
                chat_marker(c, &rp.last);
                ch->hist[ch->n++] =
                        (struct m40_message){"assistant", rp.text ? rp.text : strdup("")};
                free(rp.toks);
                return ch->hist[ch->n - 1].content ? M40CTL_EXIT_OK : M40CTL_EXIT_FAIL;
        }
        free(rp.text);
        free(rp.toks);
        free((char *)ch->hist[--ch->n].content); /* the unanswered user message */
        return r;
}

/* Reads one line without its end of line into *line (malloc'd, unbounded): through
 * libedit, with history, on a terminal. Returns its length (0 also when Ctrl-C dropped the
 * line being typed), or -1 at the end of input. */
static ssize_t chat_read(bool tty, char **line)
{
        size_t cap = 0;
        ssize_t len;

        free(*line);
        *line = NULL;
        if (tty) {
                *line = readline("> ");
                if (!*line && interrupted) {
                        fputc('\n', stderr); /* Ctrl-C drops the line being typed */
                        return 0;
                }
                if (!*line)
                        return -1;
                if (**line)
                        add_history(*line);
                return (ssize_t)strlen(*line);
        }
        for (;;) {
                errno = 0;
                len = getline(line, &cap, stdin);
                if (len >= 0 || errno != EINTR)
                        break;
                clearerr(stdin);
        }
        if (len < 0)
                return -1;
        while (len && ((*line)[len - 1] == '\n' || (*line)[len - 1] == '\r'))
                (*line)[--len] = 0;
        return len;
}

int m40ctl_run(int argc, char **argv)
{
        static const struct option opts[] = {COMMON_OPTS, {0, 0, 0, 0}};
        static struct chat ch;
        struct common c = {.cmd = "run", .timeout_ms = M40_DEFAULT_TIMEOUT_MS};
        struct m40_client *cl = NULL;
        struct m40_status st;
        bool tty = isatty(STDIN_FILENO);
        char *line = NULL;
        ssize_t len;
        int opt, r;

        m40_request_init(&c.rq);
        while ((opt = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
                if (opt == 'h') {
                        printf("Usage: m40ctl run [OPTIONS]\n\n"
                               "Chats with the model: each line is a user message; the "
                               "reply streams back.\nThe conversation is kept: when it "
                               "outgrows the context window or the\ndaemon's request size, "
                               "the oldest exchanges are dropped (and the chat says\nso). On "
                               "a terminal, lines can be edited and recalled (libedit). A "
                               "reply cut\nby -n or the context ends with a note in "
                               "brackets. Ctrl-C cancels the current\nreply; Ctrl-D, /quit "
                               "or /exit leave; /reset forgets the conversation.\n\n%s",
                               common_help);
                        return M40CTL_EXIT_OK;
                }
                r = common_opt(&c, opt, optarg);
                if (r <= 0) {
                        fprintf(stderr, "Try 'm40ctl run --help'.\n");
                        return M40CTL_EXIT_USAGE;
                }
        }
        r = connect_or_say("run", c.sock, c.timeout_ms, &cl);
        if (r)
                return r;
        if (tty && !m40_client_status(cl, &st))
                fprintf(stderr,
                        "m40ctl: chatting with %s (%s engine, %s template). Ctrl-C "
                        "cancels a reply, Ctrl-D leaves.\n",
                        st.model, st.backend, st.chat_template);
        catch_sigint();
        if (c.system) {
                ch.hist[ch.n++] = (struct m40_message){"system", strdup(c.system)};
                ch.first = 1;
        }
        for (r = M40CTL_EXIT_OK;;) {
                interrupted = 0;
                len = chat_read(tty, &line);
                if (len < 0)
                        break;
                if (!len)
                        continue;
                if (!strcmp(line, "/quit") || !strcmp(line, "/exit"))
                        break;
                if (!strcmp(line, "/reset")) {
                        while (ch.n > ch.first)
                                free((char *)ch.hist[--ch.n].content);
                        fprintf(stderr, "[conversation reset%s]\n",
                                ch.first ? "; the system message stays" : "");
                        continue;
                }
                if (ch.n + 2 > MAX_HISTORY)
                        chat_drop_oldest(&ch);
                ch.hist[ch.n++] = (struct m40_message){"user", line};
                line = NULL; /* owned by the conversation now */
                r = chat_turn(cl, &c, &ch);
                if (r == M40CTL_EXIT_UNREACHABLE || r == M40CTL_EXIT_FAIL)
                        break;
        }
        free(line);
        while (ch.n)
                free((char *)ch.hist[--ch.n].content);
        m40_client_disconnect(cl);
        return r == M40CTL_EXIT_REJECTED ? M40CTL_EXIT_OK : r;
}
