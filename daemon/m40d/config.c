/* config.c - parses m40d.ini with inih into struct m40d_config, checking every value's type
 * and range and refusing unknown sections and keys (a typo must not pass silently). */
#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "ipc/ipc.h"
#include "m40d/config.h"

void m40d_config_default(struct m40d_config *c)
{
        memset(c, 0, sizeof(*c));
        snprintf(c->model, sizeof(c->model),
                 "/var/lib/m40d/models/SmolLM2-135M-Instruct.Q4_1.gguf");
        c->backend = M40D_BACKEND_AUTO;
        c->max_sequences = 16;
        c->max_batch_tokens = 256;
        c->prefill_chunk_tokens = M40_PREFILL_CHUNK_DEFAULT;
        c->step_timeout_ms = M40D_STEP_TIMEOUT_MS_DEFAULT;
        c->chain_steps = M40D_CHAIN_AUTO;
        snprintf(c->socket, sizeof(c->socket), "/run/m40d/m40d.sock");
        snprintf(c->group, sizeof(c->group), "m40");
        c->max_clients = 64;
        c->max_requests_per_client = 64;
        c->max_sequences_per_client = 8;
        c->max_kv_percent_per_client = 50;
        c->held_sequences = 16;
        c->hold_timeout_s = 120;
        c->max_prompt_bytes = 65536;
        c->max_tokens = 4096;
        c->default_max_tokens = 512;
        c->shutdown_timeout_s = 10;
        c->log_level = LOG_INFO;
        c->parse_budget_ms = 20;
        c->temperature = 0.8f;
        c->top_k = 40;
        c->top_p = 0.95f;
        c->min_p = 0.05f;
        c->repeat_penalty = 1.0f;
}

const char *m40d_backend_name(enum m40d_backend b)
{
        return b == M40D_BACKEND_CUDA ? "cuda" : b == M40D_BACKEND_CPU ? "cpu" : "auto";
}

/* Errors kept with their lines; more are counted. Each syntax error costs inih one more
 * pass over the text (see m40d_config_parse), so this also bounds the passes. */
#define MAX_ERRORS 16

struct parse {
        struct m40d_config *c;
        const char *text; /* the reader's input: len bytes, read from pos on */
        size_t len, pos;
        uint32_t line; /* of the line inih works on: one reader call per line */
        /* lines inih found no sense in (its return value), handed to it blank later */
        uint32_t syntax[MAX_ERRORS], n_syntax;
        struct {
                uint32_t line; /* 0: the file as a whole */
                char msg[192];
        } err[MAX_ERRORS];
        uint32_t n_err; /* errors found, also those past MAX_ERRORS */
};

/* error - records an error on the current line. */
static void __attribute__((format(printf, 2, 3))) error(struct parse *p, const char *fmt, ...)
{
        va_list ap;

        if (p->n_err < MAX_ERRORS) {
                p->err[p->n_err].line = p->line;
                va_start(ap, fmt);
                vsnprintf(p->err[p->n_err].msg, sizeof(p->err[0].msg), fmt, ap);
                va_end(ap);
        }
        p->n_err++;
}

static int bad(struct parse *p, const char *sec, const char *key, const char *why)
{
        error(p, "[%s] %.64s: %s", sec, key, why);
        return 0;
}

static int get_u64(struct parse *p, const char *sec, const char *key, const char *v, uint64_t lo,
                   uint64_t hi, uint64_t *out)
{
        char *end, why[128];
        unsigned long long x;

        errno = 0;
        x = strtoull(v, &end, 10);
        if (!*v || *end || errno || *v == '-' || x < lo || x > hi) {
                snprintf(why, sizeof(why), "expected an integer in %llu..%llu, got '%.32s'",
                         (unsigned long long)lo, (unsigned long long)hi, v);
                return bad(p, sec, key, why);
        }
        *out = x;
        return 1;
}

static int get_u32(struct parse *p, const char *sec, const char *key, const char *v, uint32_t lo,
                   uint32_t hi, uint32_t *out)
{
        uint64_t x;

        if (!get_u64(p, sec, key, v, lo, hi, &x))
                return 0;
        *out = (uint32_t)x;
        return 1;
}

static int get_str(struct parse *p, const char *sec, const char *key, const char *v, char *out,
                   size_t cap)
{
        if (strlen(v) >= cap)
                return bad(p, sec, key, "value too long");
        strcpy(out, v);
        return 1;
}

static int model_key(struct parse *p, const char *key, const char *v)
{
        if (!strcmp(key, "path")) {
                if (!*v)
                        return bad(p, "model", key, "empty path");
                return get_str(p, "model", key, v, p->c->model, sizeof(p->c->model));
        }
        return bad(p, "model", key, "unknown key");
}

static int engine_key(struct parse *p, const char *key, const char *v)
{
        struct m40d_config *c = p->c;
        const char *s = "engine";

        if (!strcmp(key, "backend")) {
                if (!strcmp(v, "auto"))
                        c->backend = M40D_BACKEND_AUTO;
                else if (!strcmp(v, "cuda"))
                        c->backend = M40D_BACKEND_CUDA;
                else if (!strcmp(v, "cpu"))
                        c->backend = M40D_BACKEND_CPU;
                else
                        return bad(p, s, key, "expected auto, cuda or cpu");
                return 1;
        }
        if (!strcmp(key, "mode")) {
                if (!strcmp(v, "default"))
                        c->mode = M40_ENGINE_MODE_DEFAULT;
                else if (!strcmp(v, "steps"))
                        c->mode = M40_ENGINE_MODE_STEPS;
                else if (!strcmp(v, "persistent"))
                        c->mode = M40_ENGINE_MODE_PERSISTENT;
                else
                        return bad(p, s, key, "expected default, steps or persistent");
                return 1;
        }
        if (!strcmp(key, "decode_width")) {
                if (!strcmp(v, "auto"))
                        c->width = M40_ENGINE_WIDTH_AUTO;
                else if (!strcmp(v, "all"))
                        c->width = M40_ENGINE_WIDTH_ALL;
                else if (*v < '0' || *v > '9')
                        return bad(p, s, key, "expected auto, all or a count in 1..1024");
                else
                        return get_u32(p, s, key, v, 1, 1024, &c->width);
                return 1;
        }
        if (!strcmp(key, "chain_steps")) {
                if (!strcmp(v, "auto"))
                        c->chain_steps = M40D_CHAIN_AUTO;
                else if (!strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "1"))
                        c->chain_steps = M40D_CHAIN_ON;
                else if (!strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "0"))
                        c->chain_steps = M40D_CHAIN_OFF;
                else
                        return bad(p, s, key, "expected auto, true or false");
                return 1;
        }
        if (!strcmp(key, "threads"))
                return get_u32(p, s, key, v, 0, 1024, &c->threads);
        if (!strcmp(key, "max_sequences"))
                return get_u32(p, s, key, v, 1, 1024, &c->max_sequences);
        if (!strcmp(key, "kv_memory_mib"))
                return get_u64(p, s, key, v, 0, 1u << 20, &c->kv_memory_mib);
        if (!strcmp(key, "max_context"))
                return get_u32(p, s, key, v, 0, 1u << 20, &c->max_context);
        if (!strcmp(key, "max_batch_tokens"))
                return get_u32(p, s, key, v, 1, 65536, &c->max_batch_tokens);
        if (!strcmp(key, "prefill_chunk_tokens"))
                return get_u32(p, s, key, v, 0, 65536, &c->prefill_chunk_tokens);
        if (!strcmp(key, "vram_limit_mb"))
                return get_u64(p, s, key, v, 0, 1u << 24, &c->vram_limit_mb);
        if (!strcmp(key, "step_timeout_ms"))
                return get_u32(p, s, key, v, 0, M40D_STEP_TIMEOUT_MS_MAX, &c->step_timeout_ms);
        return bad(p, s, key, "unknown key");
}

static int server_key(struct parse *p, const char *key, const char *v)
{
        static const char *const levels[] = {"emerg",   "alert",  "crit", "err",
                                             "warning", "notice", "info", "debug"};
        struct m40d_config *c = p->c;
        const char *s = "server";

        if (!strcmp(key, "socket")) {
                if (v[0] != '/')
                        return bad(p, s, key, "expected an absolute path");
                c->socket_set = true;
                return get_str(p, s, key, v, c->socket, sizeof(c->socket));
        }
        if (!strcmp(key, "group")) {
                c->group_set = true;
                return get_str(p, s, key, v, c->group, sizeof(c->group));
        }
        if (!strcmp(key, "max_clients"))
                return get_u32(p, s, key, v, 1, 4096, &c->max_clients);
        if (!strcmp(key, "max_requests_per_client"))
                return get_u32(p, s, key, v, 1, 4096, &c->max_requests_per_client);
        if (!strcmp(key, "max_sequences_per_client"))
                return get_u32(p, s, key, v, 1, 1024, &c->max_sequences_per_client);
        if (!strcmp(key, "max_kv_percent_per_client"))
                return get_u32(p, s, key, v, 1, 100, &c->max_kv_percent_per_client);
        if (!strcmp(key, "held_sequences"))
                return get_u32(p, s, key, v, 0, 1024, &c->held_sequences);
        if (!strcmp(key, "hold_timeout"))
                return get_u32(p, s, key, v, 0, 86400, &c->hold_timeout_s);
        if (!strcmp(key, "max_prompt_bytes"))
                return get_u32(p, s, key, v, 256, M40_IPC_MAX_REQUEST_BYTES / 2,
                               &c->max_prompt_bytes);
        if (!strcmp(key, "max_tokens"))
                return get_u32(p, s, key, v, 1, 1u << 20, &c->max_tokens);
        if (!strcmp(key, "default_max_tokens"))
                return get_u32(p, s, key, v, 1, 1u << 20, &c->default_max_tokens);
        if (!strcmp(key, "shutdown_timeout"))
                return get_u32(p, s, key, v, 0, 3600, &c->shutdown_timeout_s);
        if (!strcmp(key, "log_level")) {
                for (int i = 0; i < 8; i++) {
                        if (!strcmp(v, levels[i])) {
                                c->log_level = i;
                                return 1;
                        }
                }
                return bad(p, s, key, "expected err, warning, notice, info or debug");
        }
        if (!strcmp(key, "parse_budget_ms"))
                return get_u32(p, s, key, v, 1, 1000, &c->parse_budget_ms);
        return bad(p, s, key, "unknown key");
}

/* The [sampling] keys take the ranges of m40_sampler_param_check(), as requests do. */
static int sampling_key(struct parse *p, const char *key, const char *v)
{
        static const char *const keys[] = {"temperature", "top_k", "top_p", "min_p",
                                           "repeat_penalty"};
        struct m40d_config *c = p->c;
        const char *s = "sampling", *range;
        char *end, why[160];
        size_t i;
        double x;

        if (!strcmp(key, "seed"))
                return get_u64(p, s, key, v, 0, UINT64_MAX, &c->seed);
        for (i = 0; i < sizeof(keys) / sizeof(keys[0]) && strcmp(key, keys[i]); i++)
                ;
        if (i == sizeof(keys) / sizeof(keys[0]))
                return bad(p, s, key, "unknown key");
        errno = 0;
        x = !strcmp(key, "top_k") ? (double)strtoll(v, &end, 10) : strtod(v, &end);
        if (!*v || *end || errno)
                x = NAN; /* never in range: the check still names the range */
        if (m40_sampler_param_check(key, x, &range)) {
                snprintf(why, sizeof(why), "expected %s, got '%.32s'", range, v);
                return bad(p, s, key, why);
        }
        if (!strcmp(key, "temperature"))
                c->temperature = (float)x;
        else if (!strcmp(key, "top_k"))
                c->top_k = (int32_t)x;
        else if (!strcmp(key, "top_p"))
                c->top_p = (float)x;
        else if (!strcmp(key, "min_p"))
                c->min_p = (float)x;
        else
                c->repeat_penalty = (float)x;
        return 1;
}

/* Every line's errors are recorded and the handler always says yes, so that inih's return
 * value names only the lines it could not parse itself. */
static int handler(void *user, const char *section, const char *key, const char *value)
{
        struct parse *p = user;

        if (!key) /* a section header alone (inih with INI_CALL_HANDLER_ON_NEW_SECTION) */
                return 1;
        if (!strcmp(section, "model"))
                model_key(p, key, value);
        else if (!strcmp(section, "engine"))
                engine_key(p, key, value);
        else if (!strcmp(section, "server"))
                server_key(p, key, value);
        else if (!strcmp(section, "sampling"))
                sampling_key(p, key, value);
        else
                error(p, "[%.64s] %.64s: unknown section", section, key);
        return 1;
}

static bool is_syntax_error(const struct parse *p, uint32_t line)
{
        for (uint32_t i = 0; i < p->n_syntax; i++)
                if (p->syntax[i] == line)
                        return true;
        return false;
}

/* surely_bad - whether inih will find no sense in the line s (n bytes, no NUL): one that
 * starts with neither whitespace (maybe a continuation), a comment nor a UTF-8 BOM (line 1)
 * and has no ']' for its '[' or no '=' or ':' at all. Lines this cannot tell are left to
 * inih: its return value catches the rest (more passes, the same report). */
static bool surely_bad(const char *s, size_t n, bool first)
{
        if (first && n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3)) {
                s += 3;
                n -= 3;
        }
        if (!n || isspace((unsigned char)s[0]) || s[0] == ';' || s[0] == '#')
                return false;
        if (s[0] == '[')
                return !memchr(s, ']', n);
        return !memchr(s, '=', n) && !memchr(s, ':', n);
}

/* reader - inih's fgets: the next line of p->text without its newline, or NULL at the
 * end. A line that is too long for inih's buffer (it would split it), holds a NUL byte or
 * did not parse in an earlier pass is recorded as an error and handed over blank. */
static char *reader(char *str, int num, void *user)
{
        struct parse *p = user;
        const char *s = p->text + p->pos, *nl;
        size_t n;

        if (p->pos >= p->len || num < 2)
                return NULL;
        nl = memchr(s, '\n', p->len - p->pos);
        n = nl ? (size_t)(nl - s) : p->len - p->pos;
        p->pos += n + (nl != NULL);
        p->line++;
        if (n > (size_t)num - 1) {
                error(p, "line longer than %d bytes", num - 1);
                n = 0;
        } else if (memchr(s, 0, n)) {
                error(p, "NUL byte in the line");
                n = 0;
        } else if (is_syntax_error(p, p->line) || surely_bad(s, n, p->line == 1)) {
                error(p, "syntax error (expected [section] or key = value)");
                n = 0;
        }
        memcpy(str, s, n);
        str[n] = 0;
        return str;
}

/* report - the errors of p into err, one line each, "name:line: message". */
static void report(const struct parse *p, const char *name, char *err, size_t errlen)
{
        size_t at = 0;
        uint32_t shown = 0;

        if (!errlen)
                return;
        err[0] = 0;
        for (uint32_t i = 0; i < p->n_err && i < MAX_ERRORS; i++) {
                char line[320];
                int n;

                if (p->err[i].line)
                        n = snprintf(line, sizeof(line), "%s%.128s:%u: %s", at ? "\n" : "", name,
                                     p->err[i].line, p->err[i].msg);
                else
                        n = snprintf(line, sizeof(line), "%s%.128s: %s", at ? "\n" : "", name,
                                     p->err[i].msg);
                if (n < 0 || (size_t)n + 64 >= errlen - at) /* keep room for the count */
                        break;
                memcpy(err + at, line, (size_t)n + 1);
                at += (size_t)n;
                shown++;
        }
        if (shown < p->n_err)
                snprintf(err + at, errlen - at, "%s%.128s: %u more errors", at ? "\n" : "", name,
                         p->n_err - shown);
}

int m40d_config_parse(struct m40d_config *c, const char *text, size_t len, const char *name,
                      char *err, size_t errlen)
{
        struct parse *p = calloc(1, sizeof(*p));
        int r;

        if (!p) {
                snprintf(err, errlen, "%s: out of memory", name);
                return -ENOMEM;
        }
        p->c = c;
        p->text = text;
        p->len = len;
        /* inih names only the first line it cannot parse: hand that line over blank and
         * parse again until every such line is known (or MAX_ERRORS are) */
        for (;;) {
                p->pos = 0;
                p->line = 0;
                p->n_err = 0;
                r = ini_parse_stream(reader, p, handler, p);
                if (r <= 0 || p->n_syntax == MAX_ERRORS)
                        break;
                p->syntax[p->n_syntax++] = (uint32_t)r;
        }
        if (r > 0)
                p->n_err++; /* the syntax error past MAX_ERRORS */
        if (r == -2) {
                snprintf(err, errlen, "%s: out of memory", name);
                free(p);
                return -ENOMEM;
        }
        if (c->default_max_tokens > c->max_tokens) {
                p->line = 0;
                error(p, "[server] default_max_tokens: %u is above max_tokens (%u)",
                      c->default_max_tokens, c->max_tokens);
        }
        r = p->n_err ? -EINVAL : 0;
        if (r)
                report(p, name, err, errlen);
        free(p);
        return r;
}

int m40d_config_load(struct m40d_config *c, const char *path, char *err, size_t errlen)
{
        struct stat st;
        char *text = NULL;
        size_t len = 0;
        int fd, r;

        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || fstat(fd, &st)) {
                r = -errno;
                goto fail_read;
        }
        if (S_ISDIR(st.st_mode)) {
                r = -EISDIR;
                goto fail_read;
        }
        text = malloc(M40D_CONFIG_MAX_BYTES + 1);
        if (!text) {
                r = -ENOMEM;
                goto fail_read;
        }
        for (;;) { /* to the end, whatever st_size says (pipes, /proc) */
                ssize_t k = read(fd, text + len, M40D_CONFIG_MAX_BYTES + 1 - len);

                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0) {
                        r = -errno;
                        goto fail_read;
                }
                if (!k)
                        break;
                len += (size_t)k;
                if (len > M40D_CONFIG_MAX_BYTES) {
                        snprintf(err, errlen, "%s: larger than %u bytes", path,
                                 M40D_CONFIG_MAX_BYTES);
                        r = -EFBIG;
                        goto fail;
                }
        }
        close(fd);
        r = m40d_config_parse(c, text, len, path, err, errlen);
        free(text);
        return r;
fail_read:
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(-r));
fail:
        if (fd >= 0)
                close(fd);
        free(text);
        return r;
}
