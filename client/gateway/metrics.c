/* metrics.c - what /metrics exposes, in Prometheus' text format (version 0.0.4): the
 * gateway's own counters (HTTP requests by endpoint and status, tokens, generations
 * running) and histograms (time to first token, time between text events), and m40d's
 * figures from its STATUS answer (queue depth, active and held sequences, KV pages, tok/s,
 * and the timings of its engine steps as summaries).
 * Also the gateway's control connection to m40d, over which every STATUS goes. All of it
 * is shared by the connection threads: one mutex each for the figures and the connection. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway.h"

#define STATUS_TIMEOUT_MS 10000 /* m40d answers between engine steps */

static const char *const endpoints[] = {
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/models",
        "/api/chat",
        "/api/generate",
        "/api/tags",
        "/api/ps",
        "/api/show",
        "/api/version",
        "/health",
        "/metrics",
        "/",
        "other",
};
#define N_ENDPOINTS (sizeof(endpoints) / sizeof(endpoints[0]))
static const unsigned statuses[] = {200, 400, 401, 404, 405, 408, 413, 429, 500, 503};
#define N_STATUSES (sizeof(statuses) / sizeof(statuses[0]))

static const double ttft_bounds[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
static const double gap_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                    0.1,   0.25,   0.5,   1,    2.5};
#define N_BOUNDS 11

struct histogram {
        const double *bounds;
        uint64_t counts[N_BOUNDS + 1]; /* the last: above every bound */
        uint64_t n;
        double sum;
};

static struct {
        pthread_mutex_t lock;
        uint64_t requests[N_ENDPOINTS][N_STATUSES + 1]; /* the last: any other status */
        uint64_t prompt_tokens, generated_tokens, generations;
        uint64_t finish[7]; /* by enum m40_finish_reason; 0: failed */
        int active;
        struct histogram ttft, gap;
} m = {
        .lock = PTHREAD_MUTEX_INITIALIZER,
        .ttft = {.bounds = ttft_bounds},
        .gap = {.bounds = gap_bounds},
};

static struct {
        pthread_mutex_t lock;
        struct m40_client *c;
        struct m40_status last; /* the last answer, */
        uint64_t t_last_ns;     /* when it came (0: none) */
} ctl = {.lock = PTHREAD_MUTEX_INITIALIZER};

int m40gw_status(const char *sock, unsigned max_age_ms, struct m40_status *ret)
{
        uint64_t now = m40gw_now_ns();
        int r = 0;

        pthread_mutex_lock(&ctl.lock);
        if (ctl.t_last_ns && now - ctl.t_last_ns <= (uint64_t)max_age_ms * 1000000u) {
                *ret = ctl.last;
                goto unlock;
        }
        if (!ctl.c)
                r = m40_client_connect_timeout(sock, STATUS_TIMEOUT_MS, &ctl.c);
        if (!r)
                r = m40_client_status(ctl.c, &ctl.last);
        if (r) {
                ctl.c = m40_client_disconnect(ctl.c); /* next time: a new one */
                ctl.t_last_ns = 0;
        } else {
                ctl.t_last_ns = m40gw_now_ns();
                *ret = ctl.last;
        }
unlock:
        pthread_mutex_unlock(&ctl.lock);
        return r;
}

void m40gw_status_done(void)
{
        pthread_mutex_lock(&ctl.lock);
        ctl.c = m40_client_disconnect(ctl.c);
        pthread_mutex_unlock(&ctl.lock);
}

void m40gw_metrics_request(const char *endpoint, unsigned status)
{
        size_t e = N_ENDPOINTS - 1, s = N_STATUSES;

        for (size_t i = 0; i < N_ENDPOINTS - 1; i++)
                if (!strcmp(endpoint, endpoints[i]))
                        e = i;
        for (size_t i = 0; i < N_STATUSES; i++)
                if (status == statuses[i])
                        s = i;
        pthread_mutex_lock(&m.lock);
        m.requests[e][s]++;
        pthread_mutex_unlock(&m.lock);
}

void m40gw_metrics_generation(const struct m40gw_usage *u)
{
        pthread_mutex_lock(&m.lock);
        m.generations++;
        m.prompt_tokens += u->n_prompt;
        m.generated_tokens += u->n_generated;
        m.finish[u->finish < 7 ? u->finish : 0]++;
        pthread_mutex_unlock(&m.lock);
}

static void observe(struct histogram *h, double v)
{
        size_t i = 0;

        while (i < N_BOUNDS && v > h->bounds[i])
                i++;
        pthread_mutex_lock(&m.lock);
        h->counts[i]++;
        h->n++;
        h->sum += v;
        pthread_mutex_unlock(&m.lock);
}

void m40gw_metrics_ttft(double seconds)
{
        observe(&m.ttft, seconds);
}

void m40gw_metrics_gap(double seconds)
{
        observe(&m.gap, seconds);
}

void m40gw_metrics_active(int delta)
{
        pthread_mutex_lock(&m.lock);
        m.active += delta;
        pthread_mutex_unlock(&m.lock);
}

/* A growing text buffer; ok turns false when memory runs out. */
struct buf {
        char *s;
        size_t len, cap;
        bool ok;
};

__attribute__((format(printf, 2, 3))) static void put(struct buf *b, const char *fmt, ...)
{
        va_list ap;
        int n;

        for (int pass = 0; b->ok && pass < 2; pass++) {
                va_start(ap, fmt);
                n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
                va_end(ap);
                if (n < 0) {
                        b->ok = false;
                } else if ((size_t)n < b->cap - b->len) {
                        b->len += (size_t)n;
                        return;
                } else {
                        size_t cap = (b->cap + (size_t)n + 1) * 2;
                        char *s = realloc(b->s, cap);

                        if (!s)
                                b->ok = false;
                        b->s = s ? s : b->s;
                        b->cap = s ? cap : b->cap;
                }
        }
}

static void put_histogram(struct buf *b, const char *name, const char *help,
                          const struct histogram *h)
{
        uint64_t acc = 0;

        put(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
        for (size_t i = 0; i < N_BOUNDS; i++) {
                acc += h->counts[i];
                put(b, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i], (unsigned long long)acc);
        }
        put(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
            (unsigned long long)h->n, name, h->sum, name, (unsigned long long)h->n);
}

static void put_gateway(struct buf *b)
{
        put(b, "# HELP m40_gateway_http_requests_total HTTP requests answered, by endpoint and "
               "status.\n# TYPE m40_gateway_http_requests_total counter\n");
        for (size_t e = 0; e < N_ENDPOINTS; e++)
                for (size_t s = 0; s <= N_STATUSES; s++)
                        if (m.requests[e][s]) {
                                char code[8];

                                snprintf(code, sizeof(code), "%u",
                                         s < N_STATUSES ? statuses[s] : 0);
                                put(b,
                                    "m40_gateway_http_requests_total{endpoint=\"%s\",status=\"%s\"}"
                                    " %llu\n",
                                    endpoints[e], s < N_STATUSES ? code : "other",
                                    (unsigned long long)m.requests[e][s]);
                        }
        put(b, "# HELP m40_gateway_generations_total Generations that ended, by finish reason "
               "(error: failed, or the client left).\n"
               "# TYPE m40_gateway_generations_total counter\n");
        for (uint32_t f = 0; f < 7; f++)
                put(b, "m40_gateway_generations_total{finish=\"%s\"} %llu\n",
                    f ? m40_finish_name(f) : "error", (unsigned long long)m.finish[f]);
        put(b,
            "# HELP m40_gateway_prompt_tokens_total Prompt tokens of the gateway's "
            "generations.\n# TYPE m40_gateway_prompt_tokens_total counter\n"
            "m40_gateway_prompt_tokens_total %llu\n",
            (unsigned long long)m.prompt_tokens);
        put(b,
            "# HELP m40_gateway_generated_tokens_total Tokens generated for the gateway's "
            "clients.\n# TYPE m40_gateway_generated_tokens_total counter\n"
            "m40_gateway_generated_tokens_total %llu\n",
            (unsigned long long)m.generated_tokens);
        put(b,
            "# HELP m40_gateway_active_generations Generations running or queued now.\n"
            "# TYPE m40_gateway_active_generations gauge\nm40_gateway_active_generations %d\n",
            m.active);
        put_histogram(b, "m40_gateway_time_to_first_token_seconds",
                      "From the HTTP request to its first text.", &m.ttft);
        put_histogram(b, "m40_gateway_inter_token_seconds",
                      "Between successive text events of a generation.", &m.gap);
}

/* put_timing - t as a summary NAME (median, 99th percentile, sum, count) in seconds and
 * its maximum as the gauge NAME_max. */
static void put_timing(struct buf *b, const char *name, const char *help,
                       const struct m40_timing *t)
{
        put(b,
            "# HELP %s %s Since m40d started; quantiles are histogram bucket bounds, at most "
            "25%% high.\n# TYPE %s summary\n%s{quantile=\"0.5\"} %.9f\n"
            "%s{quantile=\"0.99\"} %.9f\n%s_sum %.9f\n%s_count %llu\n",
            name, help, name, name, t->p50_ns / 1e9, name, t->p99_ns / 1e9, name, t->sum_ns / 1e9,
            name, (unsigned long long)t->count);
        put(b, "# HELP %s_max The longest of %s.\n# TYPE %s_max gauge\n%s_max %.9f\n", name, name,
            name, name, t->max_ns / 1e9);
}

static void put_daemon(struct buf *b, const struct m40_status *st)
{
        const struct {
                const char *name, *type, *help;
                double v;
        } g[] = {
                {"m40_requests_total", "counter", "Requests m40d accepted (all its clients).",
                 (double)st->requests},
                {"m40_prompt_tokens_total", "counter", "Prompt tokens m40d processed.",
                 (double)st->prompt_tokens},
                {"m40_generated_tokens_total", "counter", "Tokens m40d generated.",
                 (double)st->generated_tokens},
                {"m40_tokens_per_second", "gauge", "m40d's recent generation rate.",
                 st->tokens_per_s},
                {"m40_queue_depth", "gauge", "Requests waiting in m40d's queue.",
                 (double)st->queued},
                {"m40_active_sequences", "gauge", "Sequences m40d is decoding or holding.",
                 (double)st->active},
                {"m40_held_sequences", "gauge",
                 "Of the active sequences, those m40d holds out of its steps until their "
                 "clients read their events.",
                 (double)st->held},
                {"m40_max_sequences", "gauge", "Sequences m40d decodes at once at most.",
                 (double)st->max_sequences},
                {"m40_decode_width", "gauge",
                 "Sequences m40d's last decode-only step carried (fewer than running when "
                 "its decode_width found that faster).",
                 (double)st->decode_width},
                {"m40_decode_running", "gauge",
                 "Sequences running at m40d's last decode-only step.", (double)st->decode_running},
                {"m40_clients", "gauge", "Connections to m40d.", (double)st->clients},
                {"m40_kv_pages_used", "gauge", "KV cache pages in use.", (double)st->kv_pages_used},
                {"m40_kv_pages_total", "gauge", "KV cache pages.", (double)st->kv_pages_total},
                {"m40_kv_used_ratio", "gauge", "Share of the KV cache in use.",
                 st->kv_pages_total ? (double)st->kv_pages_used / st->kv_pages_total : 0},
                {"m40_draining", "gauge", "1 while m40d shuts down.", st->draining},
        };

        for (size_t i = 0; i < sizeof(g) / sizeof(g[0]); i++)
                put(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", g[i].name, g[i].help, g[i].name,
                    g[i].type, g[i].name, g[i].v);
        put_timing(b, "m40_step_seconds", "m40d's engine running one step.", &st->step);
        put_timing(b, "m40_step_gap_seconds",
                   "From an engine step's end to the start of the next, when m40d started it "
                   "as soon as it had collected the step before (its own time between steps "
                   "while work waits).",
                   &st->gap);
        put_timing(b, "m40_step_wake_seconds",
                   "Of the step gap, from an engine step's end to m40d collecting it.", &st->wake);
        put_timing(b, "m40_step_handover_seconds",
                   "From m40d starting an engine step to the engine's thread taking it.",
                   &st->handover);
}

char *m40gw_metrics_text(const struct m40_status *st)
{
        struct buf b = {.s = malloc(16384), .cap = 16384, .ok = true};

        if (!b.s)
                return NULL;

        put(&b,
            "# HELP m40_up Whether m40d answered the gateway's status request.\n"
            "# TYPE m40_up gauge\nm40_up %d\n",
            st != NULL);
        pthread_mutex_lock(&m.lock);
        put_gateway(&b);
        pthread_mutex_unlock(&m.lock);
        if (st)
                put_daemon(&b, st);
        if (!b.ok) {
                free(b.s);
                return NULL;
        }
        return b.s;
}
