/* config.c - parses m40d.ini with inih into struct m40d_config, checking every value's type
 * and range and refusing unknown sections and keys (a typo must not pass silently). */
#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "engine/engine.h"
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

struct parse {
        struct m40d_config *c;
        char *err;
        size_t errlen;
        const char *path;
};

static int bad(struct parse *p, const char *sec, const char *key, const char *why)
{
        /* the line number is added by the caller from inih's return value */
        snprintf(p->err, p->errlen, "[%s] %s: %s", sec, key, why);
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

static int get_float(struct parse *p, const char *sec, const char *key, const char *v, float lo,
                     float hi, float *out)
{
        char *end, why[128];
        float x;

        errno = 0;
        x = strtof(v, &end);
        if (!*v || *end || errno || !isfinite(x) || x < lo || x > hi) {
                snprintf(why, sizeof(why), "expected a number in %g..%g, got '%.32s'", lo, hi, v);
                return bad(p, sec, key, why);
        }
        *out = x;
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
                return get_str(p, s, key, v, c->socket, sizeof(c->socket));
        }
        if (!strcmp(key, "group"))
                return get_str(p, s, key, v, c->group, sizeof(c->group));
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

static int sampling_key(struct parse *p, const char *key, const char *v)
{
        struct m40d_config *c = p->c;
        const char *s = "sampling";
        uint32_t k;

        if (!strcmp(key, "temperature"))
                return get_float(p, s, key, v, 0, 100, &c->temperature);
        if (!strcmp(key, "top_k")) {
                if (!get_u32(p, s, key, v, 0, 1u << 20, &k))
                        return 0;
                c->top_k = (int32_t)k;
                return 1;
        }
        if (!strcmp(key, "top_p"))
                return get_float(p, s, key, v, 0, 1, &c->top_p);
        if (!strcmp(key, "min_p"))
                return get_float(p, s, key, v, 0, 1, &c->min_p);
        if (!strcmp(key, "repeat_penalty"))
                return get_float(p, s, key, v, 0.01f, 100, &c->repeat_penalty);
        if (!strcmp(key, "seed"))
                return get_u64(p, s, key, v, 0, UINT64_MAX, &c->seed);
        return bad(p, s, key, "unknown key");
}

static int handler(void *user, const char *section, const char *key, const char *value)
{
        struct parse *p = user;

        if (!key) /* a section header alone (inih with INI_CALL_HANDLER_ON_NEW_SECTION) */
                return 1;
        if (!strcmp(section, "model"))
                return model_key(p, key, value);
        if (!strcmp(section, "engine"))
                return engine_key(p, key, value);
        if (!strcmp(section, "server"))
                return server_key(p, key, value);
        if (!strcmp(section, "sampling"))
                return sampling_key(p, key, value);
        snprintf(p->err, p->errlen, "[%s] %s: unknown section", section, key);
        return 0;
}

int m40d_config_load(struct m40d_config *c, const char *path, char *err, size_t errlen)
{
        struct parse p = {.c = c, .path = path};
        char msg[512] = "";
        int line;

        p.err = msg;
        p.errlen = sizeof(msg);
        line = ini_parse(path, handler, &p);
        if (line == -1) {
                int e = errno ? errno : ENOENT;

                snprintf(err, errlen, "%s: cannot read: %s", path, strerror(e));
                return -e;
        }
        if (line == -2) {
                snprintf(err, errlen, "%s: out of memory", path);
                return -ENOMEM;
        }
        if (line > 0) {
                snprintf(err, errlen, "%s:%d: %s", path, line,
                         msg[0] ? msg : "syntax error (expected [section] or key = value)");
                return -EINVAL;
        }
        if (c->default_max_tokens > c->max_tokens) {
                snprintf(err, errlen,
                         "%s: [server] default_max_tokens: %u is above max_tokens (%u)", path,
                         c->default_max_tokens, c->max_tokens);
                return -EINVAL;
        }
        return 0;
}
