/* render.c - what m40-gateway answers, in each API's JSON: OpenAI chat completion chunks and
 * objects (SSE "data:" events ending "data: [DONE]"), text completions, Ollama's NDJSON
 * records with the final "done" record (eval counts, durations in nanoseconds), and the
 * error bodies of both. Built with jansson, so every string is escaped as JSON wants. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "gateway.h"

uint64_t m40gw_now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

char *m40gw_json_dump(json_t *j)
{
        char *s;

        if (!j)
                return NULL;
        s = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        return s;
}

static bool is_openai(enum m40gw_api api)
{
        return api == M40GW_OPENAI_CHAT || api == M40GW_OPENAI_COMPLETION;
}

/* frame - j as a stream record of api: "data: J\n\n" (OpenAI) or "J\n" (Ollama). */
static char *frame(enum m40gw_api api, json_t *j)
{
        char *s = m40gw_json_dump(j), *out = NULL;

        if (!s)
                return NULL;
        if (asprintf(&out, is_openai(api) ? "data: %s\n\n" : "%s\n", s) < 0)
                out = NULL;
        free(s);
        return out;
}

void m40gw_render_init(struct m40gw_render *r, enum m40gw_api api, const char *model,
                       bool include_usage)
{
        uint64_t rnd = 0;

        memset(r, 0, sizeof(*r));
        r->api = api;
        r->model = model;
        r->include_usage = include_usage;
        r->created = (long long)time(NULL);
        if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != sizeof(rnd))
                rnd = m40gw_now_ns();
        snprintf(r->id, sizeof(r->id), "%s-%016llx", api == M40GW_OPENAI_CHAT ? "chatcmpl" : "cmpl",
                 (unsigned long long)rnd);
}

/* RFC 3339 time of now, as Ollama's created_at. */
static json_t *created_at(void)
{
        struct timespec ts;
        struct tm tm;
        char buf[64];

        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        strftime(buf, 32, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), ".%09ldZ", ts.tv_nsec);
        return json_string(buf);
}

static const char *finish_openai(uint32_t finish)
{
        switch (finish) {
        case M40_FINISHED_LENGTH:
        case M40_FINISHED_CONTEXT:
        case M40_FINISHED_KV:
                return "length";
        default:
                return "stop";
        }
}

static json_t *usage_openai(const struct m40gw_usage *u)
{
        return json_pack("{s:I,s:I,s:I}", "prompt_tokens", (json_int_t)u->n_prompt,
                         "completion_tokens", (json_int_t)u->n_generated, "total_tokens",
                         (json_int_t)u->n_prompt + u->n_generated);
}

/* OpenAI: a chunk or a whole object with one choice. */
static json_t *openai_obj(struct m40gw_render *r, bool chunk, json_t *choice)
{
        const char *object = r->api == M40GW_OPENAI_CHAT
                                     ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                     : "text_completion";

        return json_pack("{s:s,s:s,s:I,s:s,s:s,s:[o]}", "id", r->id, "object", object, "created",
                         (json_int_t)r->created, "model", r->model, "system_fingerprint", "m40-llm",
                         "choices", choice);
}

static json_t *openai_choice(struct m40gw_render *r, const char *text, size_t n, bool chunk,
                             const char *finish)
{
        json_t *fin = finish ? json_string(finish) : json_null();

        if (r->api == M40GW_OPENAI_COMPLETION)
                return json_pack("{s:I,s:s%,s:n,s:o}", "index", (json_int_t)0, "text", text, n,
                                 "logprobs", "finish_reason", fin);
        if (!chunk)
                return json_pack("{s:I,s:{s:s,s:s%},s:n,s:o}", "index", (json_int_t)0, "message",
                                 "role", "assistant", "content", text, n, "logprobs",
                                 "finish_reason", fin);
        if (finish)
                return json_pack("{s:I,s:{},s:n,s:o}", "index", (json_int_t)0, "delta", "logprobs",
                                 "finish_reason", fin);
        if (!r->sent_role) {
                r->sent_role = true;
                return json_pack("{s:I,s:{s:s,s:s%},s:n,s:o}", "index", (json_int_t)0, "delta",
                                 "role", "assistant", "content", text, n, "logprobs",
                                 "finish_reason", fin);
        }
        return json_pack("{s:I,s:{s:s%},s:n,s:o}", "index", (json_int_t)0, "delta", "content", text,
                         n, "logprobs", "finish_reason", fin);
}

/* Ollama: a record of a stream or the whole answer; text NULL for the final record. */
static json_t *ollama_obj(struct m40gw_render *r, const char *text, size_t n)
{
        if (r->api == M40GW_OLLAMA_CHAT)
                return json_pack("{s:s,s:o,s:{s:s,s:s%},s:b}", "model", r->model, "created_at",
                                 created_at(), "message", "role", "assistant", "content",
                                 text ? text : "", text ? n : 0, "done", 0);
        return json_pack("{s:s,s:o,s:s%,s:b}", "model", r->model, "created_at", created_at(),
                         "response", text ? text : "", text ? n : 0, "done", 0);
}

/* Ollama's done fields: reason, counts and durations (ns) from u. */
static json_t *ollama_done(json_t *o, const struct m40gw_usage *u)
{
        uint64_t first = u->t_first_ns ? u->t_first_ns : u->t_end_ns;
        uint64_t adm = u->t_admitted_ns ? u->t_admitted_ns : u->t_start_ns;

        if (!o)
                return NULL;
        json_object_set_new(o, "done", json_true());
        json_object_set_new(o, "done_reason",
                            json_string(u->finish == M40_FINISHED_LENGTH ||
                                                        u->finish == M40_FINISHED_CONTEXT ||
                                                        u->finish == M40_FINISHED_KV
                                                ? "length"
                                        : u->finish ? "stop"
                                                    : "load"));
        json_object_set_new(o, "total_duration", json_integer(u->t_end_ns - u->t_start_ns));
        json_object_set_new(o, "load_duration", json_integer(adm - u->t_start_ns));
        json_object_set_new(o, "prompt_eval_count", json_integer(u->n_prompt));
        json_object_set_new(o, "prompt_eval_duration", json_integer(first - adm));
        json_object_set_new(o, "eval_count", json_integer(u->n_generated));
        json_object_set_new(o, "eval_duration", json_integer(u->t_end_ns - first));
        return o;
}

char *m40gw_render_piece(struct m40gw_render *r, const char *text, size_t n)
{
        if (!is_openai(r->api))
                return frame(r->api, ollama_obj(r, text, n));
        return frame(r->api, openai_obj(r, true, openai_choice(r, text, n, true, NULL)));
}

char *m40gw_render_end(struct m40gw_render *r, const struct m40gw_usage *u)
{
        json_t *last;
        char *a, *b = NULL, *out = NULL;

        if (!is_openai(r->api))
                return frame(r->api, ollama_done(ollama_obj(r, NULL, 0), u));
        last = openai_obj(r, true, openai_choice(r, "", 0, true, finish_openai(u->finish)));
        a = frame(r->api, last);
        if (r->include_usage) {
                /* OpenAI: a last chunk with no choices and the usage */
                json_t *j = openai_obj(r, true, json_null());

                if (j) {
                        json_object_set_new(j, "choices", json_array());
                        json_object_set_new(j, "usage", usage_openai(u));
                }
                b = frame(r->api, j);
                if (!b) {
                        free(a);
                        return NULL;
                }
        }
        if (a && asprintf(&out, "%s%sdata: [DONE]\n\n", a, b ? b : "") < 0)
                out = NULL;
        free(a);
        free(b);
        return out;
}

char *m40gw_render_whole(struct m40gw_render *r, const char *text, size_t n,
                         const struct m40gw_usage *u)
{
        json_t *j;

        if (!is_openai(r->api))
                return m40gw_json_dump(ollama_done(ollama_obj(r, text, n), u));
        j = openai_obj(r, false, openai_choice(r, text, n, false, finish_openai(u->finish)));
        if (j)
                json_object_set_new(j, "usage", usage_openai(u));
        return m40gw_json_dump(j);
}

static const char *openai_type(unsigned status)
{
        switch (status) {
        case 401:
                return "authentication_error";
        case 404:
                return "not_found_error";
        case 429:
                return "rate_limit_error";
        case 500:
        case 503:
        case 504:
                return "server_error";
        default:
                return "invalid_request_error";
        }
}

static const char *openai_code(unsigned status)
{
        switch (status) {
        case 401:
                return "invalid_api_key";
        case 404:
                return "model_not_found";
        case 413:
                return "request_too_large";
        case 429:
                return "queue_full";
        case 503:
                return "m40d_unavailable";
        default:
                return NULL;
        }
}

/* message as a JSON string; when it is not valid UTF-8 (jansson's reason for a body that is
 * not, a name cut short), its bytes outside printable ASCII become '?'. */
static json_t *message_str(const char *message)
{
        json_t *j = json_string(message);
        char *c;

        if (j)
                return j;
        c = strdup(message);
        if (!c)
                return NULL;
        for (char *p = c; *p; p++)
                if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
                        *p = '?';
        j = json_string(c);
        free(c);
        return j;
}

char *m40gw_render_error(enum m40gw_api api, unsigned status, const char *message,
                         const char *param, bool stream)
{
        json_t *j;

        if (is_openai(api)) {
                const char *code = openai_code(status);

                j = json_pack("{s:{s:o,s:s,s:o,s:o}}", "error", "message", message_str(message),
                              "type", openai_type(status), "param",
                              param && *param ? json_string(param) : json_null(), "code",
                              code ? json_string(code) : json_null());
        } else {
                j = json_pack("{s:o}", "error", message_str(message));
        }
        return stream ? frame(api, j) : m40gw_json_dump(j);
}
