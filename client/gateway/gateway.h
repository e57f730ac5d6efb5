/* gateway.h - m40-gateway, the HTTP front of m40d (m40-gateway(8)): OpenAI- and
 * Ollama-compatible endpoints, /health and /metrics, served by libmicrohttpd and talking to
 * m40d through libm40 only. The modules and what they own:
 *   main.c      command line, the [gateway] config file (inih), the listening socket
 *               (socket activation or --listen), the libmicrohttpd daemon, signals
 *   http.c      the request handler: routing, the bearer token, body limits, errors in
 *               each API's shape, the informational endpoints (models, tags, show, ...)
 *   parse.c     request bodies (JSON, jansson) into struct m40gw_req; pure, fuzzed
 *   generate.c  one generation: a pooled libm40 connection, its events, streaming
 *               (SSE / NDJSON) and whole answers, cancellation when the client leaves
 *   render.c    the JSON each API answers with (chunks, records, usage)
 *   metrics.c   counters and histograms, Prometheus text, m40d's STATUS for both
 *
 * Threading: libmicrohttpd runs a thread per connection (MHD_USE_THREAD_PER_CONNECTION).
 * A generation blocks its connection's thread on two descriptors - its libm40 connection's
 * event fd and the HTTP client's socket, watched for a hang-up (POLLRDHUP) - so a client
 * that leaves is noticed at once, not at the next write, and its request is cancelled in
 * m40d within one engine step. The threads are bounded by max_connections. Each running
 * generation has a libm40 connection of its own (taken from a pool of idle ones), so its
 * events need no demultiplexing and m40d's max_sequences_per_client never applies to the
 * gateway as a whole; max_requests bounds them (and m40d's max_clients bounds them too). */
#ifndef M40_GATEWAY_H
#define M40_GATEWAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "m40/m40.h"

#define M40GW_DEFAULT_PORT  8040
#define M40GW_MAX_STOPS     8  /* m40/m40.h: struct m40_request.stop */
#define M40GW_MAX_STOP_LEN  64 /* bytes of one stop string */
#define M40GW_MAX_MESSAGES  1024
#define M40GW_MAX_MODEL_LEN 256

/* Settings: built-in defaults, then the config file, then the command line. */
struct m40gw_config {
        char listen[256];          /* HOST:PORT; ignored under socket activation */
        char socket[256];          /* m40d's socket; empty: $M40_SOCKET or the default */
        char token[256];           /* bearer token (from token_file); empty: none needed */
        char token_file[256];      /* where token came from */
        uint32_t max_connections;  /* HTTP connections at once */
        uint32_t max_requests;     /* generations at once; more get 429 */
        uint32_t max_body_bytes;   /* request body */
        uint32_t max_header_bytes; /* request line and headers (per-connection memory) */
        uint32_t request_timeout;  /* seconds a generation may take; then it is cancelled */
        uint32_t idle_timeout;     /* seconds a connection may stay silent */
        uint32_t body_timeout;     /* seconds to receive a request's head and body */
};

/* ---- main.c ---- */

/* m40gw_config_default - fills *c with the built-in defaults. */
void m40gw_config_default(struct m40gw_config *c);

/* m40gw_config_load - reads the [gateway] section of the ini file path into *c. Returns 0,
 * or -errno / M40_EFORMAT after writing why (file, line, key) into why. */
int m40gw_config_load(struct m40gw_config *c, const char *path, char *why, size_t whylen);

/* m40gw_token_load - reads the bearer token from path (one line, 16..255 printable bytes)
 * into c->token. Returns 0, or -errno / M40_EFORMAT after writing why. */
int m40gw_token_load(struct m40gw_config *c, const char *path, char *why, size_t whylen);

/* ---- parse.c ---- */

enum m40gw_api {
        M40GW_OPENAI_CHAT = 1,   /* POST /v1/chat/completions */
        M40GW_OPENAI_COMPLETION, /* POST /v1/completions */
        M40GW_OLLAMA_CHAT,       /* POST /api/chat */
        M40GW_OLLAMA_GENERATE,   /* POST /api/generate */
};

/* A parsed generation request. rq points into the struct's own storage (messages, prompt,
 * stop strings), which lives until m40gw_req_done(). */
struct m40gw_req {
        enum m40gw_api api;
        char model[M40GW_MAX_MODEL_LEN + 1];
        bool stream;
        bool include_usage; /* OpenAI stream_options.include_usage */
        bool load_only;     /* Ollama generate without a prompt: load and answer done */
        struct m40_request rq;
        struct m40_message *msgs; /* (n_msgs) */
        size_t n_msgs;
        json_t *root; /* the parsed body: rq's strings are borrowed from it */
        char **strs;  /* strings built here (joined content parts): (n_strs) */
        size_t n_strs;
        const char *stop[M40GW_MAX_STOPS];
};

/* m40gw_req_parse - parses body (len bytes, not NUL-terminated) as a request of api into
 * *ret (caller storage; m40gw_req_done() frees it, also after a failure). Returns 0, or
 * -EINVAL with the reason in why and the offending field (or "") in param, or -ENOMEM. */
int m40gw_req_parse(enum m40gw_api api, const char *body, size_t len, struct m40gw_req *ret,
                    char *why, size_t whylen, char *param, size_t paramlen);

void m40gw_req_done(struct m40gw_req *r);

/* m40gw_model_match - whether name (as a client wrote it) names the model m40d serves,
 * whose file name is file ("x.gguf"): "x", "x.gguf", "x:latest", case-sensitively. */
bool m40gw_model_match(const char *name, const char *file);

/* m40gw_model_id - the id the gateway shows for file: its name without ".gguf". */
void m40gw_model_id(const char *file, char *ret, size_t len);

/* m40gw_bearer_ok - whether the Authorization header value hdr (NULL: none) carries token
 * ("Bearer TOKEN", the scheme case-insensitive); compares in constant time. */
bool m40gw_bearer_ok(const char *hdr, const char *token);

/* ---- render.c ---- */

/* Result of a finished generation, for usage figures and Ollama's durations. */
struct m40gw_usage {
        uint32_t n_prompt, n_generated;
        uint32_t finish;        /* enum m40_finish_reason; 0 while running */
        uint64_t t_start_ns;    /* the HTTP request arrived (CLOCK_MONOTONIC) */
        uint64_t t_admitted_ns; /* m40d admitted it */
        uint64_t t_first_ns;    /* first text */
        uint64_t t_end_ns;      /* DONE */
};

struct m40gw_render {
        enum m40gw_api api;
        const char *model; /* the id shown to the client */
        char id[48];       /* "chatcmpl-..." / "cmpl-..." */
        long long created; /* Unix seconds */
        bool include_usage;
        bool sent_role; /* OpenAI chat: the first chunk carried the role */
};

/* m40gw_render_init - fills *r for a generation of api on model (borrowed). */
void m40gw_render_init(struct m40gw_render *r, enum m40gw_api api, const char *model,
                       bool include_usage);

/* m40gw_render_piece - the streamed record for text (n bytes): an SSE "data: ...\n\n" event
 * or an NDJSON line. Returns a malloc'ed NUL-terminated string or NULL (no memory). */
char *m40gw_render_piece(struct m40gw_render *r, const char *text, size_t n);

/* m40gw_render_end - the stream's last records after u finished: finish reason, usage,
 * "data: [DONE]". Returns a malloc'ed string or NULL. */
char *m40gw_render_end(struct m40gw_render *r, const struct m40gw_usage *u);

/* m40gw_render_whole - the answer to a non-streamed request: text (n bytes) and u. Returns
 * a malloc'ed string or NULL. */
char *m40gw_render_whole(struct m40gw_render *r, const char *text, size_t n,
                         const struct m40gw_usage *u);

/* m40gw_render_error - an error body in api's shape (OpenAI: {"error":{"message","type",
 * "param","code"}}; Ollama: {"error": message}) for HTTP status; param may be NULL or "".
 * When stream is set, framed as a stream record (SSE event or NDJSON line). Returns a
 * malloc'ed string or NULL. */
char *m40gw_render_error(enum m40gw_api api, unsigned status, const char *message,
                         const char *param, bool stream);

/* m40gw_now_ns - CLOCK_MONOTONIC in nanoseconds. */
uint64_t m40gw_now_ns(void);

/* m40gw_json_dump - json_dumps(j, compact) and a json_decref(j); NULL when j is NULL. */
char *m40gw_json_dump(json_t *j);

/* ---- metrics.c ---- */

/* m40gw_status - m40d's STATUS over the gateway's control connection (connected on first
 * use, reconnected after a failure), or the last answer when it is at most max_age_ms old.
 * Returns 0, or the libm40 code. Thread-safe. */
int m40gw_status(const char *sock, unsigned max_age_ms, struct m40_status *ret);

/* m40gw_status_done - closes the control connection. */
void m40gw_status_done(void);

/* Figures for /metrics (thread-safe): one HTTP answer of endpoint (a path, else counted
 * as "other") with status; one generation that ended (finish 0: it failed or its client
 * left); the time from a request to its first text; the time between two text events; the
 * generations running, up or down by delta. */
void m40gw_metrics_request(const char *endpoint, unsigned status);
void m40gw_metrics_generation(const struct m40gw_usage *u);
void m40gw_metrics_ttft(double seconds);
void m40gw_metrics_gap(double seconds);
void m40gw_metrics_active(int delta);

/* m40gw_metrics_text - the Prometheus text exposition: the gateway's counters and
 * histograms, and m40d's figures from st (NULL: m40d unreachable, m40_up 0). Returns a
 * malloc'ed string or NULL. */
char *m40gw_metrics_text(const struct m40_status *st);

/* ---- generate.c ---- */

struct MHD_Connection;

/* m40gw_generate - runs parsed request q for connection con: takes a pooled libm40
 * connection, submits, and queues the response (a stream, the whole answer, or an error in
 * q's API shape). Returns the HTTP status it queued, or 0 when nothing could be queued. */
unsigned m40gw_generate(struct MHD_Connection *con, const struct m40gw_config *cfg,
                        struct m40gw_req *q, const char *model_id, uint64_t t_start_ns);

/* m40gw_pool_done - disconnects the idle connections of the pool. */
void m40gw_pool_done(void);

/* m40gw_stopping - set by main.c at SIGTERM: running generations end. */
extern volatile int m40gw_stopping;

/* ---- http.c ---- */

/* m40gw_http_answer - libmicrohttpd's access handler (MHD_AccessHandlerCallback); cls is
 * the struct m40gw_config. */
int m40gw_http_answer(void *cls, struct MHD_Connection *con, const char *url, const char *method,
                      const char *version, const char *upload, size_t *upload_size, void **con_cls);

/* m40gw_http_completed - MHD_OPTION_NOTIFY_COMPLETED: frees a request's state. */
void m40gw_http_completed(void *cls, struct MHD_Connection *con, void **con_cls, int toe);

/* m40gw_queue_json - queues body (malloc'ed, taken over; NULL: a 500) with status and
 * content type type (NULL: application/json). Returns status, or 0 on failure. */
unsigned m40gw_queue_json(struct MHD_Connection *con, unsigned status, char *body,
                          const char *type);

#endif
