/* generate.c - one generation of m40-gateway: a libm40 connection from the pool (gateway.h
 * says why one per generation), the submission, the events, and the HTTP answer - an SSE or
 * NDJSON stream read by libmicrohttpd from a content reader, or the whole answer at DONE.
 *
 * Waiting for an event watches the HTTP client's socket for a hang-up too (POLLRDHUP): a
 * client that leaves, before its first token or mid-stream, ends the wait at once and its
 * request is cancelled in m40d (the connection, whose state is then unknown, is closed
 * rather than pooled). The status of an answer is chosen at the first event, so a request
 * m40d refuses (bad fields, a prompt too long) gets its 4xx even when streamed. A
 * generation takes at most request_timeout; a silent m40d is asked for its STATUS every
 * STATUS_EVERY_S, and one that does not answer ends the generation with a 503. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <microhttpd.h>

#include "gateway.h"

#define POOL_MAX        256
#define CONNECT_MS      M40_DEFAULT_TIMEOUT_MS
#define STATUS_EVERY_S  30
#define MAX_WHOLE_BYTES (64u << 20) /* text of a non-streamed answer */
#define E_CLIENT_GONE   (-ECONNRESET)

volatile int m40gw_stopping;

static struct {
        pthread_mutex_t lock;
        struct m40_client *idle[POOL_MAX];
        size_t n_idle;
        uint32_t running;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

struct gen {
        struct m40gw_req q;
        const struct m40gw_config *cfg;
        struct m40_client *c;
        uint64_t id;
        int client_fd;
        char model[M40GW_MAX_MODEL_LEN + 1];
        struct m40gw_render rd;
        struct m40gw_usage u;
        uint64_t deadline_ns, t_last_ns, t_heard_ns;
        char *out; /* stream bytes not yet handed to libmicrohttpd: out[pos..len) */
        size_t pos, len;
        char *text; /* the whole answer's text (not streamed): (n_text) */
        size_t n_text;
        bool finished; /* DONE or ERROR read: the connection is clean */
        bool ended;    /* the stream's last record is in out */
        unsigned status;
        char why[M40_TEXT_MAX + 64];
};

/* pool_get - an idle connection or a new one. Returns 0 or the libm40 code. */
static int pool_get(const char *sock, struct m40_client **ret)
{
        struct m40_client *c = NULL;

        pthread_mutex_lock(&pool.lock);
        if (pool.n_idle)
                c = pool.idle[--pool.n_idle];
        pthread_mutex_unlock(&pool.lock);
        if (c) {
                *ret = c;
                return 0;
        }
        return m40_client_connect_timeout(sock, CONNECT_MS, ret);
}

static void pool_put(struct m40_client *c)
{
        pthread_mutex_lock(&pool.lock);
        if (pool.n_idle < POOL_MAX) {
                pool.idle[pool.n_idle++] = c;
                c = NULL;
        }
        pthread_mutex_unlock(&pool.lock);
        m40_client_disconnect(c);
}

void m40gw_pool_done(void)
{
        pthread_mutex_lock(&pool.lock);
        while (pool.n_idle)
                m40_client_disconnect(pool.idle[--pool.n_idle]);
        pthread_mutex_unlock(&pool.lock);
}

/* The HTTP status for a libm40 or m40d error code. */
static unsigned status_of(int err)
{
        switch (err) {
        case -EINVAL:
        case M40_ELIMIT:
        case M40_EFORMAT:
        case M40_ERANGE:
        case M40_ETYPE:
                return 400;
        case -E2BIG:
                return 413;
        case -EUSERS:
        case -EAGAIN:
                return 429;
        case -EPIPE:
        case -ENOENT:
        case -ECONNREFUSED:
        case -ECONNRESET:
        case -ETIMEDOUT:
        case -EACCES:
        case M40_EVERSION:
        case M40_EPROTO:
        case M40_ESHUTDOWN:
                return 503;
        default:
                return 500;
        }
}

static void fail(struct gen *g, int err, const char *msg)
{
        g->status = status_of(err);
        if (err == -EUSERS)
                snprintf(g->why, sizeof(g->why), "m40d has too many clients; retry later");
        else if (err == -E2BIG && !msg)
                snprintf(g->why, sizeof(g->why),
                         "the prompt is larger than m40d takes (its max_prompt_bytes)");
        else if (g->status == 503 && !msg)
                snprintf(g->why, sizeof(g->why), "m40d is unreachable: %s", m40_strerror(err));
        else
                snprintf(g->why, sizeof(g->why), "%s", msg ? msg : m40_strerror(err));
        if (g->status >= 500)
                fprintf(stderr, "m40-gateway: a request failed: %s\n", g->why);
}

/* wait_event - the next event of g's request. Returns 0, E_CLIENT_GONE when the HTTP
 * client hung up, -ETIMEDOUT past request_timeout, M40_ESHUTDOWN when the gateway stops,
 * -EPIPE when m40d is gone or stays silent and does not answer STATUS, or libm40's code. */
static int wait_event(struct gen *g, struct m40_reply *ev)
{
        for (;;) {
                struct pollfd p[2] = {{.fd = m40_client_fd(g->c), .events = POLLIN},
                                      {.fd = g->client_fd, .events = POLLRDHUP}};
                uint64_t now = m40gw_now_ns();
                int r = m40_client_next(g->c, 0, ev), ms;

                if (r != -EAGAIN) {
                        g->t_heard_ns = now;
                        return r;
                }
                if (m40gw_stopping)
                        return M40_ESHUTDOWN;
                if (now >= g->deadline_ns)
                        return -ETIMEDOUT;
                if (now - g->t_heard_ns > (uint64_t)STATUS_EVERY_S * 1000000000u) {
                        struct m40_status st;

                        if (m40_client_status(g->c, &st))
                                return -EPIPE;
                        g->t_heard_ns = now;
                }
                ms = (int)((g->deadline_ns - now) / 1000000u) + 1;
                r = poll(p, g->client_fd >= 0 ? 2 : 1, ms < 500 ? ms : 500);
                if (r < 0 && errno != EINTR)
                        return -errno;
                if (r > 0 && g->client_fd >= 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
                        return E_CLIENT_GONE;
        }
}

static int append(char **s, size_t *len, const char *add, size_t n)
{
        char *t;

        if (*len + n > MAX_WHOLE_BYTES)
                return -E2BIG;
        t = realloc(*s, *len + n + 1);
        if (!t)
                return -ENOMEM;
        memcpy(t + *len, add, n);
        *len += n;
        t[*len] = 0;
        *s = t;
        return 0;
}

/* on_event - takes ev into g: timings, text (streamed into out, or kept), the end. Returns
 * 1 when the request ended (DONE or ERROR: see g->status), 0 to go on, or -errno. */
static int on_event(struct gen *g, const struct m40_reply *ev, bool stream)
{
        uint64_t now = m40gw_now_ns();
        char *s;
        int r;

        switch (ev->type) {
        case M40_EVENT_ADMITTED:
                g->u.t_admitted_ns = ev->t_daemon_ns;
                return 0;
        case M40_EVENT_TEXT:
                if (!g->u.t_first_ns) {
                        g->u.t_first_ns = ev->t_daemon_ns ? ev->t_daemon_ns : now;
                        m40gw_metrics_ttft((double)(now - g->u.t_start_ns) / 1e9);
                } else {
                        m40gw_metrics_gap((double)(now - g->t_last_ns) / 1e9);
                }
                g->t_last_ns = now;
                if (!stream)
                        return append(&g->text, &g->n_text, ev->text, ev->len);
                s = m40gw_render_piece(&g->rd, ev->text, ev->len);
                if (!s)
                        return -ENOMEM;
                r = append(&g->out, &g->len, s, strlen(s));
                free(s);
                return r;
        case M40_EVENT_DONE:
                g->finished = true;
                g->u.finish = ev->finish;
                g->u.n_prompt = ev->n_prompt;
                g->u.n_generated = ev->n_generated;
                g->u.t_end_ns = now;
                g->status = 200;
                return 1;
        case M40_EVENT_ERROR:
                g->finished = true;
                fail(g, ev->error, ev->text);
                return 1;
        }
        return 0;
}

/* Queues an error body for g's request; ends the generation (nothing was sent yet). */
static unsigned queue_error(struct MHD_Connection *con, struct gen *g, const char *param)
{
        return m40gw_queue_json(con, g->status,
                                m40gw_render_error(g->q.api, g->status, g->why, param, false),
                                NULL);
}

/* Ends the generation: metrics, the connection back to the pool (or closed, after a
 * cancel, when its request may still run), the request freed. */
static void gen_free(struct gen *g)
{
        if (g->c && !g->finished) {
                m40_client_cancel(g->c, g->id);
                g->c = m40_client_disconnect(g->c);
        }
        if (g->c)
                pool_put(g->c);
        if (g->finished && g->status == 200)
                m40gw_metrics_generation(&g->u);
        else
                m40gw_metrics_generation(&(struct m40gw_usage){0});
        pthread_mutex_lock(&pool.lock);
        pool.running--;
        pthread_mutex_unlock(&pool.lock);
        m40gw_metrics_active(-1);
        m40gw_req_done(&g->q);
        free(g->out);
        free(g->text);
        free(g);
}

static void reader_free(void *cls)
{
        gen_free(cls);
}

/* libmicrohttpd's content reader of a stream: the records of g's events, then the end. */
static ssize_t reader(void *cls, uint64_t at, char *buf, size_t max)
{
        struct gen *g = cls;
        struct m40_reply ev;
        int r;

        (void)at;
        for (;;) {
                if (g->pos < g->len) {
                        size_t n = g->len - g->pos < max ? g->len - g->pos : max;

                        memcpy(buf, g->out + g->pos, n);
                        g->pos += n;
                        return (ssize_t)n;
                }
                free(g->out);
                g->out = NULL;
                g->pos = g->len = 0;
                if (g->ended)
                        return MHD_CONTENT_READER_END_OF_STREAM;
                r = wait_event(g, &ev);
                if (r == E_CLIENT_GONE)
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                if (!r)
                        r = on_event(g, &ev, true);
                if (r == 0)
                        continue;
                g->ended = true;
                if (r == 1 && g->status == 200) {
                        g->out = m40gw_render_end(&g->rd, &g->u);
                } else {
                        if (r < 0)
                                fail(g, r,
                                     r == -ETIMEDOUT ? "the request took longer than "
                                                       "request_timeout"
                                                     : NULL);
                        g->out = m40gw_render_error(g->q.api, g->status, g->why, NULL, true);
                        if (g->out &&
                            (g->q.api == M40GW_OPENAI_CHAT || g->q.api == M40GW_OPENAI_COMPLETION))
                                append(&g->out, &(size_t){strlen(g->out)}, "data: [DONE]\n\n", 14);
                }
                if (!g->out)
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                g->len = strlen(g->out);
        }
}

/* Starts the stream once the first event said the request runs. */
static unsigned queue_stream(struct MHD_Connection *con, struct gen *g)
{
        bool openai = g->q.api == M40GW_OPENAI_CHAT || g->q.api == M40GW_OPENAI_COMPLETION;
        struct MHD_Response *rsp;
        enum MHD_Result ok;

        rsp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, reader, g, reader_free);
        if (!rsp) {
                gen_free(g);
                return 0;
        }
        MHD_add_response_header(rsp, "Content-Type",
                                openai ? "text/event-stream" : "application/x-ndjson");
        MHD_add_response_header(rsp, "Cache-Control", "no-cache");
        MHD_add_response_header(rsp, "X-Accel-Buffering", "no"); /* nginx: do not buffer */
        ok = MHD_queue_response(con, 200, rsp);
        MHD_destroy_response(rsp); /* reader_free runs when the connection is done with it */
        return ok == MHD_YES ? 200 : 0;
}

/* Submits g's request. Returns 0 or a code for fail(). */
static int submit(struct gen *g)
{
        int r = pool_get(g->cfg->socket[0] ? g->cfg->socket : NULL, &g->c);

        if (r)
                return r;
        r = m40_client_submit(g->c, &g->q.rq, &g->id);
        if (r == -EPIPE || r == -ECONNRESET) {
                /* a pooled connection m40d closed meanwhile (restarted): one new try */
                g->c = m40_client_disconnect(g->c);
                r = m40_client_connect_timeout(g->cfg->socket[0] ? g->cfg->socket : NULL,
                                               CONNECT_MS, &g->c);
                if (!r)
                        r = m40_client_submit(g->c, &g->q.rq, &g->id);
        }
        return r;
}

/* Runs g to its end and queues the whole answer. */
static unsigned run_whole(struct MHD_Connection *con, struct gen *g)
{
        struct m40_reply ev;
        unsigned st;
        int r;

        do {
                r = wait_event(g, &ev);
                if (!r)
                        r = on_event(g, &ev, false);
        } while (r == 0);
        if (r == E_CLIENT_GONE) {
                gen_free(g);
                return 0;
        }
        if (r < 0)
                fail(g, r, r == -ETIMEDOUT ? "the request took longer than request_timeout" : NULL);
        st = g->status == 200 ? m40gw_queue_json(con, 200,
                                                 m40gw_render_whole(&g->rd, g->text ? g->text : "",
                                                                    g->n_text, &g->u),
                                                 NULL)
                              : queue_error(con, g, NULL);
        gen_free(g);
        return st;
}

unsigned m40gw_generate(struct MHD_Connection *con, const struct m40gw_config *cfg,
                        struct m40gw_req *q, const char *model_id, uint64_t t_start_ns)
{
        const union MHD_ConnectionInfo *ci =
                MHD_get_connection_info(con, MHD_CONNECTION_INFO_CONNECTION_FD);
        struct gen *g = calloc(1, sizeof(*g));
        struct m40_reply ev;
        unsigned st;
        int r;

        if (!g) {
                m40gw_req_done(q);
                return m40gw_queue_json(con, 500, NULL, NULL);
        }
        g->q = *q; /* taken over */
        memset(q, 0, sizeof(*q));
        g->cfg = cfg;
        g->client_fd = ci ? ci->connect_fd : -1;
        g->u.t_start_ns = t_start_ns;
        g->t_heard_ns = m40gw_now_ns();
        g->deadline_ns = t_start_ns + (uint64_t)cfg->request_timeout * 1000000000u;
        snprintf(g->model, sizeof(g->model), "%s", model_id);
        m40gw_render_init(&g->rd, g->q.api, g->model, g->q.include_usage);
        pthread_mutex_lock(&pool.lock);
        r = pool.running < cfg->max_requests ? 0 : -EAGAIN;
        pool.running += !r;
        pthread_mutex_unlock(&pool.lock);
        if (r) {
                g->status = 429;
                snprintf(g->why, sizeof(g->why),
                         "the gateway runs %u requests already (max_requests); retry later",
                         cfg->max_requests);
                st = queue_error(con, g, NULL);
                m40gw_req_done(&g->q);
                free(g);
                return st;
        }
        m40gw_metrics_active(1);
        r = submit(g);
        if (r) {
                fail(g, r, NULL);
                /* refused before it reached m40d: the connection stays clean */
                if (r != -E2BIG && r != -EINVAL)
                        g->c = m40_client_disconnect(g->c);
                g->finished = true;
                st = queue_error(con, g, NULL);
                gen_free(g);
                return st;
        }
        if (!g->q.stream)
                return run_whole(con, g);
        /* the first event decides the status: a refusal is a 4xx, not a 200 stream */
        do {
                r = wait_event(g, &ev);
                if (!r)
                        r = on_event(g, &ev, true);
        } while (r == 0 && ev.type == M40_EVENT_ADMITTED && !g->len);
        if (r == E_CLIENT_GONE) {
                gen_free(g);
                return 0;
        }
        if (r == 1 && g->status == 200) {
                /* done before any text: the whole stream is its last records */
                g->ended = true;
                g->out = m40gw_render_end(&g->rd, &g->u);
                g->len = g->out ? strlen(g->out) : 0;
                r = g->out ? 1 : -ENOMEM;
        }
        if (r < 0 || (r == 1 && g->status != 200)) {
                if (r < 0)
                        fail(g, r, NULL);
                st = queue_error(con, g, NULL);
                gen_free(g);
                return st;
        }
        return queue_stream(con, g);
}
