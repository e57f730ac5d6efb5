/* parse.c - the bodies of generation requests (OpenAI chat/completions, Ollama chat/
 * generate) into struct m40gw_req, checked field by field: wrong types, values out of range
 * and unsupported features fail with the field's name; unknown fields are ignored, as both
 * APIs' clients send extras. Also the model name match and the bearer token check. Pure
 * functions of their input (tests/fuzz/fuzz_gateway.c drives them). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gateway.h"

#define MAX_TOKENS_ASKED 1048576 /* m40d has its own, lower limit (max_tokens) */
#define MAX_CONTENT      (16u << 20)

struct ctx {
        struct m40gw_req *q;
        char *why, *param;
        size_t whylen, paramlen;
};

__attribute__((format(printf, 3, 4))) static int bad(struct ctx *x, const char *param,
                                                     const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(x->why, x->whylen, fmt, ap);
        va_end(ap);
        snprintf(x->param, x->paramlen, "%s", param);
        return -EINVAL;
}

/* Keeps s (malloc'ed) with the request; frees it on failure. */
static int keep(struct ctx *x, char *s, const char **ret)
{
        char **v;

        if (!s)
                return -ENOMEM;
        v = realloc(x->q->strs, (x->q->n_strs + 1) * sizeof(*v));
        if (!v) {
                free(s);
                return -ENOMEM;
        }
        x->q->strs = v;
        v[x->q->n_strs++] = s;
        *ret = s;
        return 0;
}

/* Whether o has key with a value that says something: not null, "", [] or {}. */
static bool present(json_t *o, const char *key)
{
        json_t *v = json_object_get(o, key);

        return v && !json_is_null(v) && !(json_is_array(v) && !json_array_size(v)) &&
               !(json_is_string(v) && !json_string_length(v)) &&
               !(json_is_object(v) && !json_object_size(v));
}

/* A string field: NULL when absent or null, -EINVAL when not a string. */
static int get_str(struct ctx *x, json_t *o, const char *key, const char **ret)
{
        json_t *v = json_object_get(o, key);

        *ret = NULL;
        if (!v || json_is_null(v))
                return 0;
        if (!json_is_string(v))
                return bad(x, key, "'%s' must be a string", key);
        *ret = json_string_value(v);
        return 0;
}

static int get_bool(struct ctx *x, json_t *o, const char *key, bool *ret)
{
        json_t *v = json_object_get(o, key);

        if (!v || json_is_null(v))
                return 0;
        if (!json_is_boolean(v))
                return bad(x, key, "'%s' must be true or false", key);
        *ret = json_is_true(v);
        return 0;
}

/* A number field within [lo, hi]: 0 when absent (*found false), 1 when read. */
static int get_num(struct ctx *x, json_t *o, const char *key, double lo, double hi, double *ret)
{
        json_t *v = json_object_get(o, key);
        double d;

        if (!v || json_is_null(v))
                return 0;
        if (!json_is_number(v))
                return bad(x, key, "'%s' must be a number", key);
        d = json_number_value(v);
        if (!isfinite(d) || d < lo || d > hi)
                return bad(x, key, "'%s' must lie in %g..%g, not %g", key, lo, hi, d);
        *ret = d;
        return 1;
}

static int get_int(struct ctx *x, json_t *o, const char *key, double lo, double hi, double *ret)
{
        json_t *v = json_object_get(o, key);

        if (v && !json_is_null(v) && !json_is_integer(v))
                return bad(x, key, "'%s' must be an integer", key);
        return get_num(x, o, key, lo, hi, ret);
}

/* stop: a string or an array of strings, up to M40GW_MAX_STOPS of 1..64 bytes. */
static int parse_stop(struct ctx *x, json_t *o, const char *key)
{
        json_t *v = json_object_get(o, key), *e;
        size_t i;

        if (!v || json_is_null(v))
                return 0;
        if (json_is_string(v)) {
                v = json_pack("[O]", v);
                if (!v)
                        return -ENOMEM;
        } else if (json_is_array(v)) {
                json_incref(v);
        } else {
                return bad(x, key, "'%s' must be a string or an array of strings", key);
        }
        if (json_array_size(v) > M40GW_MAX_STOPS) {
                json_decref(v);
                return bad(x, key, "'%s' takes at most %d strings", key, M40GW_MAX_STOPS);
        }
        json_array_foreach(v, i, e)
        {
                size_t n = json_is_string(e) ? json_string_length(e) : 0;

                if (!n || n > M40GW_MAX_STOP_LEN) {
                        json_decref(v);
                        return bad(x, key, "'%s' takes strings of 1 to %d bytes", key,
                                   M40GW_MAX_STOP_LEN);
                }
                if (strlen(json_string_value(e)) != n) {
                        json_decref(v);
                        return bad(x, key, "'%s' strings must not contain NUL", key);
                }
                x->q->stop[x->q->rq.n_stop++] = json_string_value(e);
        }
        x->q->rq.stop = x->q->stop;
        json_decref(v);
        return 0;
}

struct num_field {
        const char *key;
        double lo, hi;
        uint32_t set;
        size_t off; /* float in struct m40_request */
};

/* The sampling fields both APIs share (OpenAI ranges; Ollama takes the same names in
 * "options"). m40d checks them again against its own ranges. */
static const struct num_field sampling[] = {
        {"temperature", 0, 100, M40_SET_TEMPERATURE, offsetof(struct m40_request, temperature)},
        {"top_p", 0, 1, M40_SET_TOP_P, offsetof(struct m40_request, top_p)},
        {"min_p", 0, 1, M40_SET_MIN_P, offsetof(struct m40_request, min_p)},
        {"repeat_penalty", 0.01, 100, M40_SET_REPEAT_PENALTY,
         offsetof(struct m40_request, repeat_penalty)},
        {"presence_penalty", -2, 2, M40_SET_PRESENCE_PENALTY,
         offsetof(struct m40_request, presence_penalty)},
        {"frequency_penalty", -2, 2, M40_SET_FREQUENCY_PENALTY,
         offsetof(struct m40_request, frequency_penalty)},
};

static int parse_sampling(struct ctx *x, json_t *o)
{
        struct m40_request *rq = &x->q->rq;
        bool ignore_eos = false;
        double d;
        int r;

        /* llama.cpp's server takes ignore_eos too: generate past the end of text */
        r = get_bool(x, o, "ignore_eos", &ignore_eos);
        if (r)
                return r;
        if (ignore_eos)
                rq->flags |= M40_REQUEST_IGNORE_EOS;

        for (size_t i = 0; i < sizeof(sampling) / sizeof(sampling[0]); i++) {
                r = get_num(x, o, sampling[i].key, sampling[i].lo, sampling[i].hi, &d);
                if (r < 0)
                        return r;
                if (r) {
                        *(float *)((char *)rq + sampling[i].off) = (float)d;
                        rq->set |= sampling[i].set;
                }
        }
        r = get_int(x, o, "top_k", 0, 1 << 20, &d);
        if (r < 0)
                return r;
        if (r) {
                rq->top_k = (int32_t)d;
                rq->set |= M40_SET_TOP_K;
        }
        /* OpenAI seeds are signed 64-bit; they map onto m40d's unsigned ones */
        r = get_int(x, o, "seed", -9223372036854775808.0, 18446744073709551615.0, &d);
        if (r < 0)
                return r;
        if (r) {
                json_int_t s = json_integer_value(json_object_get(o, "seed"));

                rq->seed = (uint64_t)s;
                rq->set |= M40_SET_SEED;
        }
        return 0;
}

/* Message content: a string, or (OpenAI) an array of {"type":"text","text":...} parts. */
static int parse_content(struct ctx *x, json_t *m, const char **ret)
{
        json_t *c = json_object_get(m, "content"), *p;
        size_t i, n = 0;
        char *s;

        if (!c || json_is_null(c) || json_is_string(c)) {
                *ret = c && json_is_string(c) ? json_string_value(c) : "";
                return 0;
        }
        if (!json_is_array(c))
                return bad(x, "messages",
                           "a message's content must be a string or an array "
                           "of text parts");
        json_array_foreach(c, i, p)
        {
                json_t *t = json_object_get(p, "text");
                const char *type = json_string_value(json_object_get(p, "type"));

                if (!type || strcmp(type, "text") || !json_is_string(t))
                        return bad(x, "messages", "only text content parts are supported");
                n += json_string_length(t);
        }
        if (n > MAX_CONTENT)
                return bad(x, "messages", "a message is too long");
        s = malloc(n + 1);
        if (!s)
                return -ENOMEM;
        n = 0;
        json_array_foreach(c, i, p)
        {
                json_t *t = json_object_get(p, "text");

                memcpy(s + n, json_string_value(t), json_string_length(t));
                n += json_string_length(t);
        }
        s[n] = 0;
        return keep(x, s, ret);
}

static int parse_messages(struct ctx *x, json_t *o)
{
        json_t *a = json_object_get(o, "messages"), *m;
        size_t i;

        if (!json_is_array(a) || !json_array_size(a))
                return bad(x, "messages", "'messages' must be a non-empty array");
        if (json_array_size(a) > M40GW_MAX_MESSAGES)
                return bad(x, "messages", "at most %d messages", M40GW_MAX_MESSAGES);
        x->q->msgs = calloc(json_array_size(a), sizeof(*x->q->msgs));
        if (!x->q->msgs)
                return -ENOMEM;
        json_array_foreach(a, i, m)
        {
                const char *role = json_string_value(json_object_get(m, "role"));
                int r;

                if (!json_is_object(m) || !role)
                        return bad(x, "messages", "message %zu has no role", i);
                if (!strcmp(role, "developer"))
                        role = "system";
                if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant"))
                        return bad(x, "messages",
                                   "message %zu: role '%.32s' is not supported (system, "
                                   "developer, user, assistant)",
                                   i, role);
                if (present(m, "images") || present(m, "tool_calls"))
                        return bad(x, "messages", "images and tool calls are not supported");
                r = parse_content(x, m, &x->q->msgs[i].content);
                if (r)
                        return r;
                x->q->msgs[i].role = role;
                x->q->n_msgs++;
        }
        x->q->rq.messages = x->q->msgs;
        x->q->rq.n_messages = x->q->n_msgs;
        return 0;
}

/* Fields OpenAI defines that m40d cannot honour: refused rather than silently ignored. */
static int openai_unsupported(struct ctx *x, json_t *o)
{
        static const char *const refuse[] = {"tools",  "functions", "logit_bias",
                                             "suffix", "audio",     "prediction"};
        double n;
        int r;

        for (size_t i = 0; i < sizeof(refuse) / sizeof(refuse[0]); i++)
                if (present(o, refuse[i]))
                        return bad(x, refuse[i], "'%s' is not supported", refuse[i]);
        if (json_is_true(json_object_get(o, "logprobs")) ||
            json_is_integer(json_object_get(o, "logprobs")))
                return bad(x, "logprobs", "'logprobs' is not supported");
        if (json_is_true(json_object_get(o, "echo")))
                return bad(x, "echo", "'echo' is not supported");
        r = get_int(x, o, "n", 1, 1, &n);
        if (r < 0)
                return bad(x, "n", "only n = 1 is supported");
        r = get_int(x, o, "best_of", 1, 1, &n);
        if (r < 0)
                return bad(x, "best_of", "only best_of = 1 is supported");
        return 0;
}

static int parse_openai(struct ctx *x, json_t *o)
{
        struct m40gw_req *q = x->q;
        json_t *so = json_object_get(o, "stream_options");
        double d;
        int r = openai_unsupported(x, o);

        if (r)
                return r;
        if ((r = get_bool(x, o, "stream", &q->stream)) || (r = parse_sampling(x, o)) ||
            (r = parse_stop(x, o, "stop")))
                return r;
        if (so && !json_is_null(so) && !json_is_object(so))
                return bad(x, "stream_options", "'stream_options' must be an object");
        if (so && (r = get_bool(x, so, "include_usage", &q->include_usage)))
                return r;
        /* max_completion_tokens replaces max_tokens in OpenAI's chat API */
        r = get_int(x, o, "max_completion_tokens", 1, MAX_TOKENS_ASKED, &d);
        if (r == 0)
                r = get_int(x, o, "max_tokens", 1, MAX_TOKENS_ASKED, &d);
        if (r < 0)
                return r;
        if (r)
                q->rq.max_tokens = (uint32_t)d;
        if (q->api == M40GW_OPENAI_CHAT)
                return parse_messages(x, o);
        r = get_str(x, o, "prompt", &q->rq.prompt);
        if (r)
                return bad(x, "prompt",
                           "'prompt' must be a string (arrays of prompts or "
                           "tokens are not supported)");
        if (!q->rq.prompt)
                return bad(x, "prompt", "'prompt' is required");
        return 0;
}

static int parse_ollama_options(struct ctx *x, json_t *o)
{
        json_t *opt = json_object_get(o, "options");
        double d;
        int r;

        if (!opt || json_is_null(opt))
                return 0;
        if (!json_is_object(opt))
                return bad(x, "options", "'options' must be an object");
        if ((r = parse_sampling(x, opt)) || (r = parse_stop(x, opt, "stop")))
                return r;
        /* num_predict: -1 unlimited, -2 fill the context: both the daemon's default */
        r = get_int(x, opt, "num_predict", -2, MAX_TOKENS_ASKED, &d);
        if (r < 0)
                return r;
        if (r && d == 0)
                return bad(x, "num_predict", "'num_predict' must not be 0");
        if (r && d > 0)
                x->q->rq.max_tokens = (uint32_t)d;
        return 0;
}

static int parse_ollama(struct ctx *x, json_t *o)
{
        struct m40gw_req *q = x->q;
        const char *system = NULL;
        bool raw = false;
        int r;

        q->stream = true; /* Ollama streams unless told not to */
        if ((r = get_bool(x, o, "stream", &q->stream)) || (r = parse_ollama_options(x, o)))
                return r;
        if (present(o, "format"))
                return bad(x, "format", "'format' (structured output) is not supported");
        if (present(o, "tools") || present(o, "images"))
                return bad(x, "tools", "tools and images are not supported");
        if (q->api == M40GW_OLLAMA_CHAT)
                return parse_messages(x, o);
        if ((r = get_str(x, o, "prompt", &q->rq.prompt)) ||
            (r = get_str(x, o, "system", &system)) || (r = get_bool(x, o, "raw", &raw)))
                return r;
        if (present(o, "template") || present(o, "suffix"))
                return bad(x, "template", "'template' and 'suffix' are not supported");
        if (!q->rq.prompt || !*q->rq.prompt) {
                q->load_only = true; /* Ollama: load the model and answer done */
                q->rq.prompt = NULL;
                return 0;
        }
        if (raw)
                return system ? bad(x, "system", "'system' and 'raw' exclude each other") : 0;
        /* a prompt through the model's chat template, as Ollama does */
        q->msgs = calloc(2, sizeof(*q->msgs));
        if (!q->msgs)
                return -ENOMEM;
        if (system)
                q->msgs[q->n_msgs++] = (struct m40_message){"system", system};
        q->msgs[q->n_msgs++] = (struct m40_message){"user", q->rq.prompt};
        q->rq.prompt = NULL;
        q->rq.messages = q->msgs;
        q->rq.n_messages = q->n_msgs;
        return 0;
}

int m40gw_req_parse(enum m40gw_api api, const char *body, size_t len, struct m40gw_req *ret,
                    char *why, size_t whylen, char *param, size_t paramlen)
{
        struct ctx x = {ret, why, param, whylen, paramlen};
        json_error_t e;
        const char *model = NULL;
        int r;

        memset(ret, 0, sizeof(*ret));
        ret->api = api;
        m40_request_init(&ret->rq);
        param[0] = 0;
        /* strings of the request stay borrowed from the document, kept until done */
        ret->root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &e);
        if (!ret->root) {
                snprintf(why, whylen, "the body is not valid JSON: %s (at byte %d)", e.text,
                         e.position);
                return -EINVAL;
        }
        if (!json_is_object(ret->root))
                return bad(&x, "", "the body must be a JSON object");
        r = get_str(&x, ret->root, "model", &model);
        if (r)
                return r;
        if (!model || !*model)
                return bad(&x, "model", "'model' is required");
        if (strlen(model) > M40GW_MAX_MODEL_LEN)
                return bad(&x, "model", "'model' is longer than %d bytes", M40GW_MAX_MODEL_LEN);
        snprintf(ret->model, sizeof(ret->model), "%s", model);
        if (api == M40GW_OPENAI_CHAT || api == M40GW_OPENAI_COMPLETION)
                return parse_openai(&x, ret->root);
        return parse_ollama(&x, ret->root);
}

void m40gw_req_done(struct m40gw_req *r)
{
        for (size_t i = 0; i < r->n_strs; i++)
                free(r->strs[i]);
        free(r->strs);
        free(r->msgs);
        json_decref(r->root);
        memset(r, 0, sizeof(*r));
}

bool m40gw_model_match(const char *name, const char *file)
{
        size_t n = strlen(file), k = strlen(name);

        if (n > 5 && !strcmp(file + n - 5, ".gguf"))
                n -= 5;
        if (k > 7 && !strcmp(name + k - 7, ":latest"))
                k -= 7;
        else if (k == n + 5 && !strcmp(name + n, ".gguf"))
                k = n;
        return k == n && !strncmp(name, file, n);
}

void m40gw_model_id(const char *file, char *ret, size_t len)
{
        size_t n = strlen(file);

        if (n > 5 && !strcmp(file + n - 5, ".gguf"))
                n -= 5;
        snprintf(ret, len, "%.*s", (int)n, file);
}

bool m40gw_bearer_ok(const char *hdr, const char *token)
{
        size_t n = strlen(token), k;
        unsigned char d = 0;

        if (!hdr || strncasecmp(hdr, "Bearer ", 7))
                return false;
        hdr += 7;
        while (*hdr == ' ')
                hdr++;
        k = strlen(hdr);
        while (k && (hdr[k - 1] == ' ' || hdr[k - 1] == '\t'))
                k--;
        /* constant time in the token's length: every byte compared */
        for (size_t i = 0; i < n; i++)
                d |= (unsigned char)(token[i] ^ (i < k ? hdr[i] : 0));
        return !d && k == n;
}
