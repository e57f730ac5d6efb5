/* http.c - m40-gateway's request handler (libmicrohttpd's access handler): routes, the
 * bearer token, the request body within max_body_bytes and body_timeout, errors in each
 * API's JSON shape, and the endpoints that only describe: /v1/models, /api/tags, /api/ps,
 * /api/show, /api/version, /health, /metrics. Generations go to generate.c. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <microhttpd.h>

#include "gateway.h"
#include "m40-version.h"
#include "m40/paths.h"

#define MODEL_AGE_MS 2000

enum kind {
        K_GENERATE = 1,
        K_MODELS,
        K_TAGS,
        K_PS,
        K_SHOW,
        K_VERSION,
        K_HEALTH,
        K_METRICS,
        K_ROOT,
};

struct route {
        const char *method, *path;
        enum kind kind;
        enum m40gw_api api; /* generations; else the error shape: OpenAI or Ollama */
};

static const struct route routes[] = {
        {"POST", "/v1/chat/completions", K_GENERATE, M40GW_OPENAI_CHAT},
        {"POST", "/v1/completions", K_GENERATE, M40GW_OPENAI_COMPLETION},
        {"GET", "/v1/models", K_MODELS, M40GW_OPENAI_CHAT},
        {"POST", "/api/chat", K_GENERATE, M40GW_OLLAMA_CHAT},
        {"POST", "/api/generate", K_GENERATE, M40GW_OLLAMA_GENERATE},
        {"GET", "/api/tags", K_TAGS, M40GW_OLLAMA_CHAT},
        {"GET", "/api/ps", K_PS, M40GW_OLLAMA_CHAT},
        {"POST", "/api/show", K_SHOW, M40GW_OLLAMA_CHAT},
        {"GET", "/api/version", K_VERSION, M40GW_OLLAMA_CHAT},
        {"GET", "/health", K_HEALTH, M40GW_OPENAI_CHAT},
        {"GET", "/metrics", K_METRICS, M40GW_OPENAI_CHAT},
        {"GET", "/", K_ROOT, M40GW_OLLAMA_CHAT},
};

/* One HTTP request's state between libmicrohttpd's calls. */
struct ctx {
        const struct route *rt;
        const char *endpoint; /* for the metrics */
        char *body;           /* (len) */
        size_t len;
        uint64_t t_start_ns;
        unsigned early; /* an error status chosen before the body was read */
        bool answered;  /* a response is queued: the rest of the body is dropped */
        const char *early_why;
};

unsigned m40gw_queue_json(struct MHD_Connection *con, unsigned status, char *body, const char *type)
{
        static char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                            "\"server_error\",\"param\":null,\"code\":null}}";
        struct MHD_Response *rsp;
        enum MHD_Result ok;

        if (!body)
                status = 500;
        rsp = body ? MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE)
                   : MHD_create_response_from_buffer(strlen(oom), oom, MHD_RESPMEM_PERSISTENT);
        if (!rsp) {
                free(body);
                return 0;
        }
        MHD_add_response_header(rsp, "Content-Type", type ? type : "application/json");
        if (status == 401)
                MHD_add_response_header(rsp, "WWW-Authenticate", "Bearer");
        ok = MHD_queue_response(con, status, rsp);
        MHD_destroy_response(rsp);
        return ok == MHD_YES ? status : 0;
}

static unsigned queue_error(struct MHD_Connection *con, enum m40gw_api api, unsigned status,
                            const char *why, const char *param)
{
        return m40gw_queue_json(con, status, m40gw_render_error(api, status, why, param, false),
                                NULL);
}

/* m40d's state, or a 503 queued (then returns the status, else 0 and *st filled). */
static unsigned need_status(struct MHD_Connection *con, const struct m40gw_config *cfg,
                            enum m40gw_api api, unsigned max_age_ms, struct m40_status *st)
{
        char why[160];
        int r = m40gw_status(cfg->socket[0] ? cfg->socket : NULL, max_age_ms, st);

        if (!r && st->model[0])
                return 0;
        snprintf(why, sizeof(why), "m40d is unreachable: %s",
                 r ? m40_strerror(r) : "no model loaded");
        return queue_error(con, api, 503, why, NULL);
}

static json_t *details(const struct m40_status *st)
{
        return json_pack("{s:s,s:s,s:s,s:[s],s:s,s:s}", "parent_model", "", "format", "gguf",
                         "family", st->arch, "families", st->arch, "parameter_size", "",
                         "quantization_level", "");
}

/* model_bytes - the size in bytes of file, the model file m40d serves as STATUS names it
 * (its base name: m40d does not say its directory). The file is looked for where the model
 * store keeps it (m40/paths.h): this user's store (m40_store_dir(): $M40_MODELS, else
 * root's or the XDG one), then the service's, M40_ROOT_STORE (m40d.service's models, when
 * the gateway runs as its own user). 0 when it is in neither (m40d was started on a path
 * outside the store, or the gateway may not look there) or file is no store model's name
 * (NAME.gguf, m40_store_name_check()): Ollama's size has no "unknown". A file of the same
 * name in the store that is not the one m40d loaded from elsewhere gives its own size. */
static uint64_t model_bytes(const char *file)
{
        const size_t len = strlen(file), ext = strlen(M40_STORE_EXT);
        char name[M40_STORE_NAME_MAX + 1], path[PATH_MAX];
        struct stat sb;

        if (len <= ext || len - ext > M40_STORE_NAME_MAX ||
            strcmp(file + len - ext, M40_STORE_EXT) != 0)
                return 0;
        memcpy(name, file, len - ext);
        name[len - ext] = '\0';
        if (m40_store_name_check(name, NULL))
                return 0;
        if (!m40_store_model(name, path, sizeof(path)) && !stat(path, &sb) && S_ISREG(sb.st_mode))
                return (uint64_t)sb.st_size;
        if (!m40_paths_put(path, sizeof(path), M40_ROOT_STORE, "/", file) && !stat(path, &sb) &&
            S_ISREG(sb.st_mode))
                return (uint64_t)sb.st_size;
        return 0;
}

/* The model as /api/tags and /api/ps list it. */
static json_t *ollama_model(const struct m40_status *st, const char *id, bool ps)
{
        char name[M40GW_MAX_MODEL_LEN + 16];
        json_t *m;

        snprintf(name, sizeof(name), "%s:latest", id);
        m = json_pack("{s:s,s:s,s:s,s:I,s:o}", "name", name, "model", name, "digest", "", "size",
                      (json_int_t)model_bytes(st->model), "details", details(st));
        if (m && ps) {
                json_object_set_new(m, "expires_at", json_string("2999-12-31T23:59:59Z"));
                json_object_set_new(m, "size_vram", json_integer(0));
        } else if (m) {
                json_object_set_new(m, "modified_at", json_string("1970-01-01T00:00:00Z"));
        }
        return m;
}

static unsigned show(struct MHD_Connection *con, const struct m40_status *st, const char *id,
                     const char *body, size_t len)
{
        json_t *o = json_loadb(body, len, 0, NULL), *info;
        const char *name = json_string_value(json_object_get(o, "model"));
        char why[M40GW_MAX_MODEL_LEN + 64], key[64];
        unsigned s;

        if (!name)
                name = json_string_value(json_object_get(o, "name"));
        if (!name) {
                json_decref(o);
                return queue_error(con, M40GW_OLLAMA_CHAT, 400, "'model' is required", NULL);
        }
        if (!m40gw_model_match(name, st->model)) {
                snprintf(why, sizeof(why), "model '%.*s' not found", M40GW_MAX_MODEL_LEN, name);
                json_decref(o);
                return queue_error(con, M40GW_OLLAMA_CHAT, 404, why, NULL);
        }
        json_decref(o);
        info = json_pack("{s:s,s:I}", "general.architecture", st->arch, "general.vocab_size",
                         (json_int_t)st->n_vocab);
        snprintf(key, sizeof(key), "%.20s.context_length", st->arch);
        if (info)
                json_object_set_new(info, key, json_integer(st->n_ctx));
        s = m40gw_queue_json(
                con, 200,
                m40gw_json_dump(json_pack(
                        "{s:s,s:s,s:s,s:o,s:o,s:[s],s:s}", "modelfile", "", "parameters", "",
                        "template", st->chat_template, "details", details(st), "model_info", info,
                        "capabilities", "completion", "modified_at", "1970-01-01T00:00:00Z")),
                NULL);
        (void)id;
        return s;
}

static unsigned describe(struct MHD_Connection *con, const struct m40gw_config *cfg,
                         const struct ctx *x)
{
        struct m40_status st;
        char id[M40GW_MAX_MODEL_LEN + 1];
        unsigned s;

        switch (x->rt->kind) {
        case K_VERSION:
                return m40gw_queue_json(con, 200,
                                        m40gw_json_dump(json_pack("{s:s}", "version", M40_VERSION)),
                                        NULL);
        case K_ROOT:
                return m40gw_queue_json(con, 200, strdup("m40-gateway is running\n"), "text/plain");
        case K_METRICS: {
                int r = m40gw_status(cfg->socket[0] ? cfg->socket : NULL, 0, &st);

                return m40gw_queue_json(con, 200, m40gw_metrics_text(r ? NULL : &st),
                                        "text/plain; version=0.0.4; charset=utf-8");
        }
        default:
                break;
        }
        s = need_status(con, cfg, x->rt->api, 0, &st);
        if (s)
                return s;
        m40gw_model_id(st.model, id, sizeof(id));
        switch (x->rt->kind) {
        case K_HEALTH:
                if (st.draining)
                        return queue_error(con, x->rt->api, 503, "m40d is shutting down", NULL);
                return m40gw_queue_json(
                        con, 200,
                        m40gw_json_dump(json_pack("{s:s,s:s,s:s}", "status", "ok", "model", id,
                                                  "backend", st.backend)),
                        NULL);
        case K_MODELS:
                return m40gw_queue_json(
                        con, 200,
                        m40gw_json_dump(json_pack("{s:s,s:[{s:s,s:s,s:I,s:s}]}", "object", "list",
                                                  "data", "id", id, "object", "model", "created",
                                                  (json_int_t)0, "owned_by", "m40-llm")),
                        NULL);
        case K_TAGS:
        case K_PS:
                return m40gw_queue_json(
                        con, 200,
                        m40gw_json_dump(json_pack("{s:[o]}", "models",
                                                  ollama_model(&st, id, x->rt->kind == K_PS))),
                        NULL);
        case K_SHOW:
                return show(con, &st, id, x->body ? x->body : "", x->len);
        default:
                return queue_error(con, x->rt->api, 500, "no handler", NULL);
        }
}

/* An Ollama generate without a prompt: the model is loaded; say done. */
static unsigned load_only(struct MHD_Connection *con, struct m40gw_req *q, const char *id,
                          uint64_t t0)
{
        struct m40gw_render rd;
        uint64_t now = m40gw_now_ns();
        struct m40gw_usage u = {.t_start_ns = t0,
                                .t_admitted_ns = now,
                                .t_first_ns = now,
                                .t_end_ns = now}; /* all of it was the load */
        char *s;

        m40gw_render_init(&rd, q->api, id, false);
        s = m40gw_render_whole(&rd, "", 0, &u);
        m40gw_req_done(q);
        return m40gw_queue_json(con, 200, s, NULL);
}

static unsigned generate(struct MHD_Connection *con, const struct m40gw_config *cfg,
                         const struct ctx *x)
{
        struct m40gw_req q;
        struct m40_status st;
        char why[2 * M40GW_MAX_MODEL_LEN + 64], param[32], id[M40GW_MAX_MODEL_LEN + 1];
        unsigned s;
        int r = m40gw_req_parse(x->rt->api, x->body ? x->body : "", x->len, &q, why, sizeof(why),
                                param, sizeof(param));

        if (r) {
                m40gw_req_done(&q);
                return r == -ENOMEM ? queue_error(con, x->rt->api, 500, "out of memory", NULL)
                                    : queue_error(con, x->rt->api, 400, why, param);
        }
        /* the model's name only: any earlier answer will do while the name matches (m40d
         * is busy with long steps under load: its state shows on the generation's own
         * connection); a name that does not match is checked against a fresh answer (m40d
         * may have restarted with another model) */
        s = need_status(con, cfg, x->rt->api, UINT_MAX, &st);
        if (!s && !m40gw_model_match(q.model, st.model))
                s = need_status(con, cfg, x->rt->api, MODEL_AGE_MS, &st);
        if (s) {
                m40gw_req_done(&q);
                return s;
        }
        m40gw_model_id(st.model, id, sizeof(id));
        if (!m40gw_model_match(q.model, st.model)) {
                snprintf(why, sizeof(why), "model '%s' not found: m40d serves '%s'", q.model, id);
                m40gw_req_done(&q);
                return queue_error(con, x->rt->api, 404, why, "model");
        }
        if (q.load_only)
                return load_only(con, &q, id, x->t_start_ns);
        return m40gw_generate(con, cfg, &q, id, x->t_start_ns);
}

static const struct route *find_route(const char *method, const char *url, bool *ret_path_known)
{
        *ret_path_known = false;
        for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
                if (strcmp(url, routes[i].path))
                        continue;
                *ret_path_known = true;
                if (!strcmp(method, routes[i].method))
                        return &routes[i];
        }
        return NULL;
}

/* First call for a request: route, token, declared size. Returns the ctx or NULL. */
static struct ctx *begin(struct MHD_Connection *con, const struct m40gw_config *cfg,
                         const char *url, const char *method)
{
        struct ctx *x = calloc(1, sizeof(*x));
        bool known;
        const char *cl;

        if (!x)
                return NULL;
        x->t_start_ns = m40gw_now_ns();
        x->rt = find_route(method, url, &known);
        x->endpoint = x->rt ? x->rt->path : "other";
        if (!x->rt) {
                x->early = known ? 405 : 404;
                x->early_why = known ? "method not allowed" : "no such endpoint";
                return x;
        }
        if (cfg->token[0] && x->rt->kind != K_HEALTH && x->rt->kind != K_ROOT &&
            !m40gw_bearer_ok(MHD_lookup_connection_value(con, MHD_HEADER_KIND,
                                                         MHD_HTTP_HEADER_AUTHORIZATION),
                             cfg->token)) {
                x->early = 401;
                x->early_why = "a valid bearer token is required (Authorization: Bearer ...)";
                return x;
        }
        cl = MHD_lookup_connection_value(con, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > cfg->max_body_bytes) {
                x->early = 413;
                x->early_why = "the request body is larger than max_body_bytes";
        }
        return x;
}

/* Takes a piece of the body. Returns 0, or an error status to answer with. */
static unsigned take_body(struct ctx *x, const struct m40gw_config *cfg, const char *data, size_t n)
{
        char *b;

        if (x->len + n > cfg->max_body_bytes) {
                x->early_why = "the request body is larger than max_body_bytes";
                return 413;
        }
        if (m40gw_now_ns() - x->t_start_ns > (uint64_t)cfg->body_timeout * 1000000000u) {
                x->early_why = "the request body took longer than body_timeout";
                return 408;
        }
        b = realloc(x->body, x->len + n + 1);
        if (!b)
                return 500;
        memcpy(b + x->len, data, n);
        x->len += n;
        b[x->len] = 0;
        x->body = b;
        return 0;
}

int m40gw_http_answer(void *cls, struct MHD_Connection *con, const char *url, const char *method,
                      const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
        const struct m40gw_config *cfg = cls;
        struct ctx *x = *con_cls;
        enum m40gw_api api;
        unsigned s;

        (void)version;
        if (!x) {
                x = begin(con, cfg, url, method);
                if (!x)
                        return MHD_NO;
                *con_cls = x;
                if (!x->early)
                        return MHD_YES;
        }
        if (x->answered) {
                *upload_size = 0;
                return MHD_YES;
        }
        api = x->rt ? x->rt->api
                    : (strncmp(url, "/api/", 5) ? M40GW_OPENAI_CHAT : M40GW_OLLAMA_CHAT);
        if (*upload_size && !x->early) {
                s = take_body(x, cfg, upload, *upload_size);
                *upload_size = 0;
                if (!s)
                        return MHD_YES;
                x->early = s;
        }
        if (x->early) {
                /* answered now; libmicrohttpd closes the connection after it */
                s = queue_error(con, api, x->early,
                                x->early == 500 ? "out of memory" : x->early_why, NULL);
        } else if (x->rt->kind == K_GENERATE) {
                s = generate(con, cfg, x);
        } else {
                s = describe(con, cfg, x);
        }
        *upload_size = 0;
        m40gw_metrics_request(x->endpoint, s ? s : 499);
        x->answered = true;
        return s ? MHD_YES : MHD_NO;
}

void m40gw_http_completed(void *cls, struct MHD_Connection *con, void **con_cls, int toe)
{
        struct ctx *x = *con_cls;

        (void)cls;
        (void)con;
        (void)toe;
        if (x) {
                free(x->body);
                free(x);
                *con_cls = NULL;
        }
}
