/* tests/bench/serve_load.c - m40-serve-bench's load: the prompt text, the clients sweep and
 * the mixed load, each client a thread with its own libm40 connection; per request the
 * arrival time of every token event, reduced to the figures of serve_bench.h. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "m40/m40.h"
#include "serve_bench.h"

/* One request's measurements (times: CLOCK_MONOTONIC ns; 0: never). */
struct rec {
        uint64_t t_submit, t_first, t_done;
        uint64_t *t_tok; /* arrival of each token event (cap) */
        uint32_t cap;
        atomic_uint n_tok; /* token events so far */
        atomic_int state;  /* 0 waiting, 1 submitted (id valid), 2 ended */
        uint64_t id;
        uint32_t n_generated, n_prompt, finish; /* from DONE */
        int error;                              /* ERROR's code or a libm40 error; 0 */
        char why[M40_TEXT_MAX + 64];
};

/* Where the clients of a run wait to start together. */
struct gate {
        pthread_mutex_t m;
        pthread_cond_t c;
        bool open;
};

struct worker {
        pthread_t th;
        bool started;
        const struct serve_load *l;
        struct m40_client *c;
        const char *prompt;
        uint32_t max_tokens;
        struct gate *gate; /* NULL: start at start_at */
        uint64_t start_at;
        struct rec r;
};

static uint64_t now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t)
{
        struct timespec ts = {.tv_sec = (time_t)(t / 1000000000u),
                              .tv_nsec = (long)(t % 1000000000u)};

        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
                ;
}

static void sleep_ms(long ms)
{
        sleep_until(now_ns() + (uint64_t)ms * 1000000u);
}

static void rec_fail(struct rec *r, int err, const char *what)
{
        r->error = err;
        r->t_done = now_ns();
        snprintf(r->why, sizeof(r->why), "%s: %s", what, m40_strerror(err));
}

static void greedy(struct m40_request *rq, const char *prompt, uint32_t max_tokens)
{
        m40_request_init(rq);
        rq->prompt = prompt;
        rq->max_tokens = max_tokens;
        rq->set = M40_SET_TEMPERATURE;
        rq->temperature = 0;
        rq->flags = M40_REQUEST_IGNORE_EOS | M40_REQUEST_TOKENS;
}

/* Reads w's events until its request ends. */
static void read_events(struct worker *w)
{
        struct rec *r = &w->r;

        for (;;) {
                struct m40_reply ev;
                int e = m40_client_next(w->c, w->l->timeout_ms, &ev);
                uint64_t t = now_ns();

                if (e == -EINTR)
                        continue;
                if (e) {
                        rec_fail(r, e,
                                 e == -ETIMEDOUT ? "no event in --request-timeout"
                                                 : "reading events");
                        return;
                }
                if (ev.id != r->id)
                        continue;
                if (ev.type == M40_EVENT_TEXT && ev.token >= 0) {
                        uint32_t n = atomic_load(&r->n_tok);

                        if (n < r->cap)
                                r->t_tok[n] = t;
                        if (!n)
                                r->t_first = t;
                        atomic_store(&r->n_tok, n + 1);
                } else if (ev.type == M40_EVENT_DONE) {
                        r->n_generated = ev.n_generated;
                        r->n_prompt = ev.n_prompt;
                        r->finish = ev.finish;
                        r->t_done = t;
                        return;
                } else if (ev.type == M40_EVENT_ERROR) {
                        r->error = ev.error ? ev.error : -EIO;
                        r->t_done = t;
                        snprintf(r->why, sizeof(r->why), "request failed: %s", ev.text);
                        return;
                }
        }
}

static void *worker_main(void *arg)
{
        struct worker *w = arg;
        struct m40_request rq;
        int e;

        if (w->gate) {
                pthread_mutex_lock(&w->gate->m);
                while (!w->gate->open)
                        pthread_cond_wait(&w->gate->c, &w->gate->m);
                pthread_mutex_unlock(&w->gate->m);
        } else {
                sleep_until(w->start_at);
        }
        greedy(&rq, w->prompt, w->max_tokens);
        w->r.t_submit = now_ns();
        e = m40_client_submit(w->c, &rq, &w->r.id);
        if (e) {
                rec_fail(&w->r, e, "submit");
        } else {
                atomic_store(&w->r.state, 1);
                read_events(w);
        }
        atomic_store(&w->r.state, 2);
        return NULL;
}

/* n workers on new connections with their token-time arrays; a connection that fails is
 * recorded as the worker's error. Returns 0 or -ENOMEM. */
static int workers_new(const struct serve_load *l, uint32_t n, const char *prompt,
                       uint32_t max_tokens, struct worker **ret)
{
        struct worker *w = calloc(n, sizeof(*w));

        if (!w)
                return -ENOMEM;
        for (uint32_t i = 0; i < n; i++) {
                int e;

                w[i].l = l;
                w[i].prompt = prompt;
                w[i].max_tokens = max_tokens;
                w[i].r.cap = max_tokens;
                w[i].r.t_tok = malloc(max_tokens * sizeof(uint64_t));
                if (!w[i].r.t_tok) {
                        for (uint32_t j = 0; j <= i; j++)
                                free(w[j].r.t_tok);
                        free(w);
                        return -ENOMEM;
                }
                e = m40_client_connect(l->sock, &w[i].c);
                if (e) {
                        rec_fail(&w[i].r, e, "connect");
                        atomic_store(&w[i].r.state, 2);
                }
        }
        *ret = w;
        return 0;
}

static struct worker *workers_free(struct worker *w, uint32_t n)
{
        if (!w)
                return NULL;
        for (uint32_t i = 0; i < n; i++) {
                m40_client_disconnect(w[i].c);
                free(w[i].r.t_tok);
        }
        free(w);
        return NULL;
}

/* Starts a thread for each connected worker: waiting at gate (all at once when it opens),
 * or, gate NULL, sleeping until its start_at. A thread that cannot be made is recorded as
 * the worker's error. */
static void workers_start(struct worker *w, uint32_t n, struct gate *gate)
{
        for (uint32_t i = 0; i < n; i++) {
                int e;

                if (!w[i].c)
                        continue;
                w[i].gate = gate;
                e = pthread_create(&w[i].th, NULL, worker_main, &w[i]);
                if (e) {
                        rec_fail(&w[i].r, -e, "thread");
                        atomic_store(&w[i].r.state, 2);
                        continue;
                }
                w[i].started = true;
        }
}

static void gate_open(struct gate *g)
{
        pthread_mutex_lock(&g->m);
        g->open = true;
        pthread_cond_broadcast(&g->c);
        pthread_mutex_unlock(&g->m);
}

static void workers_join(struct worker *w, uint32_t n)
{
        for (uint32_t i = 0; i < n; i++)
                if (w[i].started)
                        pthread_join(w[i].th, NULL);
}

static int cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;

        return x < y ? -1 : x > y;
}

static void pct(double *v, size_t n, struct serve_pct *ret)
{
        memset(ret, 0, sizeof(*ret));
        ret->n = n;
        if (!n)
                return;
        qsort(v, n, sizeof(*v), cmp_double);
        ret->p50 = v[(size_t)ceil(0.50 * (double)n) - 1];
        ret->p99 = v[(size_t)ceil(0.99 * (double)n) - 1];
        ret->max = v[n - 1];
}

static void first_error(char *dst, size_t cap, const struct rec *r)
{
        if (!dst[0] && r->error)
                snprintf(dst, cap, "%s", r->why);
}

/* The token gaps (ms) of w[0..n) ending in [t0, t1] (t1 == 0: all) into v; their count. */
static size_t gaps(const struct worker *w, uint32_t n, uint64_t t0, uint64_t t1, double *v)
{
        size_t k = 0;

        for (uint32_t i = 0; i < n; i++) {
                uint32_t m = atomic_load(&w[i].r.n_tok);

                if (m > w[i].r.cap)
                        m = w[i].r.cap;
                for (uint32_t j = 1; j < m; j++) {
                        uint64_t t = w[i].r.t_tok[j];

                        if (t1 && (t < t0 || t > t1))
                                continue;
                        v[k++] = (double)(t - w[i].r.t_tok[j - 1]) / 1e6;
                }
        }
        return k;
}

static void reduce_run(const struct worker *w, uint32_t n, uint32_t max_tokens,
                       struct serve_run *ret)
{
        uint64_t t0 = UINT64_MAX, t1 = 0;
        size_t total = 0, k = 0;
        double *v;

        for (uint32_t i = 0; i < n; i++) {
                const struct rec *r = &w[i].r;

                total += r->cap;
                first_error(ret->error, sizeof(ret->error), r);
                if (r->error) {
                        ret->errors++;
                        continue;
                }
                if (r->t_submit && r->t_submit < t0)
                        t0 = r->t_submit;
                if (r->t_done > t1)
                        t1 = r->t_done;
                ret->finished++;
                ret->generated += r->n_generated;
                ret->prompt += r->n_prompt;
                if (r->finish != M40_FINISHED_LENGTH || r->n_generated != max_tokens) {
                        ret->short_runs++;
                        if (!ret->error[0])
                                snprintf(ret->error, sizeof(ret->error),
                                         "a request ended after %u of %u tokens (finish %s)",
                                         r->n_generated, max_tokens, m40_finish_name(r->finish));
                }
        }
        if (t1 > t0) {
                ret->seconds = (double)(t1 - t0) / 1e9;
                ret->tok_s = (double)ret->generated / ret->seconds;
        }
        v = malloc((total + n) * sizeof(*v));
        if (!v) {
                snprintf(ret->error, sizeof(ret->error), "out of memory for the percentiles");
                ret->errors++;
                return;
        }
        for (uint32_t i = 0; i < n; i++)
                if (w[i].r.t_first)
                        v[k++] = (double)(w[i].r.t_first - w[i].r.t_submit) / 1e6;
        pct(v, k, &ret->ttft);
        pct(v, gaps(w, n, 0, 0, v), &ret->itl);
        free(v);
}

int serve_run_clients(const struct serve_load *l, uint32_t n, const char *prompt,
                      uint32_t max_tokens, struct serve_run *ret)
{
        struct gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};
        struct worker *w;
        int e;

        memset(ret, 0, sizeof(*ret));
        ret->clients = n;
        ret->engine_tok_s = -1;
        e = workers_new(l, n, prompt, max_tokens, &w);
        if (e)
                return e;
        workers_start(w, n, &g);
        gate_open(&g);
        workers_join(w, n);
        reduce_run(w, n, max_tokens, ret);
        workers_free(w, n);
        return 0;
}

/* Waits until every stream has its first token; 0, or -EIO when one ended first. */
static int streams_running(struct worker *s, uint32_t n, struct serve_mixed *ret)
{
        for (uint32_t i = 0; i < n;) {
                if (atomic_load(&s[i].r.state) == 2) {
                        snprintf(ret->error, sizeof(ret->error), "stream %u ended at start: %s", i,
                                 s[i].r.error ? s[i].r.why : "no first token");
                        return -EIO;
                }
                if (atomic_load(&s[i].r.n_tok))
                        i++;
                else
                        sleep_ms(2);
        }
        return 0;
}

static void window(const struct worker *s, uint32_t n, uint64_t t0, uint64_t t1, double *v,
                   struct serve_window *ret)
{
        memset(ret, 0, sizeof(*ret));
        if (t1 <= t0)
                return;
        ret->seconds = (double)(t1 - t0) / 1e9;
        for (uint32_t i = 0; i < n; i++) {
                uint32_t m = atomic_load(&s[i].r.n_tok);

                for (uint32_t j = 0; j < m && j < s[i].r.cap; j++)
                        ret->tokens += s[i].r.t_tok[j] >= t0 && s[i].r.t_tok[j] < t1;
        }
        ret->tok_s = (double)ret->tokens / ret->seconds;
        pct(v, gaps(s, n, t0, t1, v), &ret->itl);
}

/* The figures once the newcomers are done and the streams cancelled. */
static void reduce_mixed(const struct worker *s, const struct worker *a,
                         const struct serve_mixed_opts *o, uint64_t t_w0, uint64_t t_end,
                         struct serve_mixed *ret)
{
        uint64_t t_b = UINT64_MAX;
        size_t total = o->arrivals, k = 0;
        double *v;

        for (uint32_t i = 0; i < o->arrivals; i++) {
                first_error(ret->error, sizeof(ret->error), &a[i].r);
                ret->errors += a[i].r.error != 0;
                ret->newcomers_finished += !a[i].r.error && a[i].r.t_done;
                if (a[i].r.t_submit && a[i].r.t_submit < t_b)
                        t_b = a[i].r.t_submit;
        }
        for (uint32_t i = 0; i < o->streams; i++) {
                const struct rec *r = &s[i].r;

                total += r->cap;
                if (r->error) {
                        first_error(ret->error, sizeof(ret->error), r);
                        ret->errors++;
                } else if (r->t_done && r->t_done <= t_end && r->finish != M40_FINISHED_CANCEL) {
                        ret->errors++;
                        if (!ret->error[0])
                                snprintf(ret->error, sizeof(ret->error),
                                         "stream %u ended (%s, %u tokens) before the burst did: "
                                         "raise --stream-tokens",
                                         i, m40_finish_name(r->finish), r->n_generated);
                }
        }
        v = malloc(total * sizeof(*v));
        if (!v || t_b == UINT64_MAX) {
                free(v);
                ret->errors++;
                if (!ret->error[0])
                        snprintf(ret->error, sizeof(ret->error), "%s",
                                 v ? "no newcomer was submitted" : "out of memory");
                return;
        }
        window(s, o->streams, t_w0, t_b, v, &ret->before);
        window(s, o->streams, t_b, t_end, v, &ret->during);
        if (ret->before.tok_s > 0)
                ret->ratio = ret->during.tok_s / ret->before.tok_s;
        for (uint32_t i = 0; i < o->arrivals; i++)
                if (a[i].r.t_first)
                        v[k++] = (double)(a[i].r.t_first - a[i].r.t_submit) / 1e6;
        pct(v, k, &ret->ttft);
        free(v);
}

int serve_run_mixed(const struct serve_load *l, const struct serve_mixed_opts *o,
                    const char *stream_prompt, const char *arrival_prompt, struct serve_mixed *ret)
{
        struct gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};
        struct worker *s = NULL, *a = NULL;
        uint64_t t_w0 = 0, t_end = 0;
        int e;

        memset(ret, 0, sizeof(*ret));
        e = workers_new(l, o->streams, stream_prompt, o->stream_tokens, &s);
        if (!e)
                e = workers_new(l, o->arrivals, arrival_prompt, o->arrival_tokens, &a);
        if (e)
                goto free_workers;
        workers_start(s, o->streams, &g);
        gate_open(&g);
        if (streams_running(s, o->streams, ret) == 0) {
                t_w0 = now_ns() + (uint64_t)o->warmup_ms * 1000000u;
                for (uint32_t i = 0; i < o->arrivals; i++)
                        a[i].start_at =
                                t_w0 +
                                ((uint64_t)o->window_ms + (uint64_t)i * o->interval_ms) * 1000000u;
                workers_start(a, o->arrivals, NULL);
                workers_join(a, o->arrivals);
                for (uint32_t i = 0; i < o->arrivals; i++) {
                        uint64_t t = a[i].r.t_first ? a[i].r.t_first : a[i].r.t_done;

                        if (t > t_end)
                                t_end = t;
                }
        } else {
                ret->errors++;
        }
        /* the window is closed: end the streams (a cancelled one ends with DONE) */
        for (uint32_t i = 0; i < o->streams; i++)
                if (atomic_load(&s[i].r.state) == 1)
                        m40_client_cancel(s[i].c, s[i].r.id);
        workers_join(s, o->streams);
        if (t_end)
                reduce_mixed(s, a, o, t_w0, t_end, ret);
free_workers:
        workers_free(a, o->arrivals);
        workers_free(s, o->streams);
        return e;
}

/* A story of plain words: prompts are its words, cycled. */
static const char story[] =
        "Once upon a time, there was a little girl named Lily. She loved to play outside in "
        "the sun with her big brown dog, Max. One day, Lily and Max went to the park. They saw "
        "a tall tree with red apples. Lily wanted an apple, but the tree was too high. Max "
        "barked and ran around the tree. Then a kind old man came and helped Lily reach the "
        "apples. Lily said thank you and gave one apple to Max. They were very happy and went "
        "home to tell Mom about their fun day.";

/* The first words words of the story, cycled; malloc'ed or NULL. */
static char *words_text(uint32_t words)
{
        size_t cap = (size_t)words * 16 + 1, len = 0;
        char *t = malloc(cap);
        const char *p = story;

        if (!t)
                return NULL;
        for (uint32_t i = 0; i < words; i++) {
                size_t n = strcspn(p, " ");

                if (len + n + 2 > cap)
                        break;
                if (i)
                        t[len++] = ' ';
                memcpy(t + len, p, n);
                len += n;
                p = p[n] ? p + n + 1 : story;
        }
        t[len] = 0;
        return t;
}

/* The daemon's prompt token count of text (one generated token); 0 or an error. */
static int probe(struct m40_client *c, const char *text, int timeout_ms, uint32_t *ret_n, char *err,
                 size_t errlen)
{
        struct m40_request rq;
        uint64_t id;
        int e;

        greedy(&rq, text, 1);
        e = m40_client_submit(c, &rq, &id);
        if (e) {
                snprintf(err, errlen, "submitting the prompt probe: %s", m40_strerror(e));
                return e;
        }
        for (;;) {
                struct m40_reply ev;

                e = m40_client_next(c, timeout_ms, &ev);
                if (e == -EINTR)
                        continue;
                if (e) {
                        snprintf(err, errlen, "reading the prompt probe: %s", m40_strerror(e));
                        return e;
                }
                if (ev.id != id)
                        continue;
                if (ev.type == M40_EVENT_DONE) {
                        *ret_n = ev.n_prompt;
                        return 0;
                }
                if (ev.type == M40_EVENT_ERROR) {
                        snprintf(err, errlen, "the prompt probe failed: %s", ev.text);
                        return ev.error ? ev.error : -EIO;
                }
        }
}

int serve_prompt_make(const struct serve_load *l, uint32_t tokens, char **ret_text,
                      uint32_t *ret_tokens, char *err, size_t errlen)
{
        uint32_t w = tokens, best_w = 1, best_n = 0, best_d = UINT32_MAX;
        struct m40_client *c;
        char *t;
        int e = m40_client_connect(l->sock, &c);

        if (e) {
                snprintf(err, errlen, "connecting to m40d: %s", m40_strerror(e));
                return e;
        }
        for (int i = 0; i < 8 && w >= 1; i++) {
                uint32_t n = 0, d, nw;

                t = words_text(w);
                e = t ? probe(c, t, l->timeout_ms, &n, err, errlen) : -ENOMEM;
                free(t);
                if (e)
                        goto disconnect;
                d = n > tokens ? n - tokens : tokens - n;
                if (d < best_d) {
                        best_d = d;
                        best_w = w;
                        best_n = n;
                }
                if (!d || !n)
                        break;
                nw = (uint32_t)(((uint64_t)w * tokens + n / 2) / n);
                if (nw == w)
                        nw = n < tokens ? w + 1 : w - 1;
                if (nw > 4u * SERVE_MAX_PROMPT)
                        break;
                w = nw;
        }
        t = words_text(best_w);
        if (!t) {
                e = -ENOMEM;
                snprintf(err, errlen, "out of memory");
                goto disconnect;
        }
        *ret_text = t;
        *ret_tokens = best_n;
disconnect:
        m40_client_disconnect(c);
        return e;
}

int serve_idle(const char *sock)
{
        for (int i = 0; i < 300; i++) {
                struct m40_status st;
                struct m40_client *c;
                int e = m40_client_connect(sock, &c);

                if (e)
                        return e;
                e = m40_client_status(c, &st);
                m40_client_disconnect(c);
                if (e)
                        return e;
                if (!st.active && !st.queued)
                        return 0;
                sleep_ms(100);
        }
        return -ETIMEDOUT;
}
