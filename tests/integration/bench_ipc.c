/* bench_ipc.c - acceptance 6 of issue 5: the daemon's IPC overhead on this machine.
 * Measures, against a real m40d on a small model, (a) token delivery: CLOCK_MONOTONIC from
 * the moment the daemon takes a token from the engine (the event's t_daemon_ns) to the
 * moment the client has it from m40_client_next(), and (b) admission: from
 * m40_client_submit() to the daemon admitting the request into the engine (t_submit_ns to
 * the ADMITTED event's t_daemon_ns). Prints p50/p99/max for one client and for CLIENTS
 * concurrent clients, as text and one JSON line.
 *
 *   bench_ipc M40D MODEL.gguf [REQUESTS [CLIENTS]] */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "itest.h"

struct samples {
        uint64_t *v;
        size_t n, cap;
        pthread_mutex_t lock;
};

static struct samples tok_lat, adm_lat;
static const char *sock;
static int n_requests = 100;

static uint64_t now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void add(struct samples *s, uint64_t v)
{
        pthread_mutex_lock(&s->lock);
        if (s->n == s->cap) {
                size_t cap = s->cap ? 2 * s->cap : 4096;
                uint64_t *n = realloc(s->v, cap * sizeof(*n));

                if (!n)
                        abort(); /* a benchmark harness: nothing to recover */
                s->v = n;
                s->cap = cap;
        }
        s->v[s->n++] = v;
        pthread_mutex_unlock(&s->lock);
}

static int cmp(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

        return x < y ? -1 : x > y;
}

static double pct(struct samples *s, double p)
{
        size_t i = (size_t)(p * (double)(s->n - 1) + 0.5);

        return s->n ? (double)s->v[i] / 1000.0 : 0;
}

static void *client(void *arg)
{
        struct m40_client *c;

        (void)arg;
        if (m40_client_connect(sock, &c))
                return (void *)1;
        for (int i = 0; i < n_requests; i++) {
                struct m40_request rq;
                uint64_t id;
                bool end = false;

                m40_request_init(&rq);
                rq.prompt = itest_prompts[i % 8];
                rq.max_tokens = 32;
                rq.set = M40_SET_TEMPERATURE;
                rq.flags = M40_REQUEST_TOKENS | M40_REQUEST_IGNORE_EOS;
                if (m40_client_submit(c, &rq, &id))
                        return (void *)1;
                while (!end) {
                        struct m40_reply ev;

                        if (m40_client_next(c, 30000, &ev))
                                return (void *)1;
                        if (ev.type == M40_EVENT_TEXT)
                                add(&tok_lat, now_ns() - ev.t_daemon_ns);
                        else if (ev.type == M40_EVENT_ADMITTED)
                                add(&adm_lat, ev.t_daemon_ns - ev.t_submit_ns);
                        else
                                end = true;
                }
        }
        m40_client_disconnect(c);
        return NULL;
}

static int run(int n_clients, const char *label)
{
        pthread_t th[64];
        int bad = 0;

        tok_lat.n = adm_lat.n = 0;
        for (int i = 0; i < n_clients; i++)
                pthread_create(&th[i], NULL, client, NULL);
        for (int i = 0; i < n_clients; i++) {
                void *rv;

                pthread_join(th[i], &rv);
                bad |= rv != NULL;
        }
        if (bad)
                return 1;
        qsort(tok_lat.v, tok_lat.n, sizeof(uint64_t), cmp);
        qsort(adm_lat.v, adm_lat.n, sizeof(uint64_t), cmp);
        printf("%s: token delivery p50 %.1f us, p99 %.1f us, max %.1f us (%zu tokens); "
               "submit-to-admission p50 %.1f us, p99 %.1f us, max %.1f us (%zu requests)\n",
               label, pct(&tok_lat, 0.5), pct(&tok_lat, 0.99), pct(&tok_lat, 1), tok_lat.n,
               pct(&adm_lat, 0.5), pct(&adm_lat, 0.99), pct(&adm_lat, 1), adm_lat.n);
        printf("{\"bench\":\"ipc-overhead\",\"clients\":%d,\"token_p50_us\":%.1f,"
               "\"token_p99_us\":%.1f,\"admit_p50_us\":%.1f,\"admit_p99_us\":%.1f}\n",
               n_clients, pct(&tok_lat, 0.5), pct(&tok_lat, 0.99), pct(&adm_lat, 0.5),
               pct(&adm_lat, 0.99));
        return 0;
}

int main(int argc, char **argv)
{
        struct itest_daemon d;
        int n_clients = 8;

        if (argc < 3)
                return 2;
        if (argc > 3)
                n_requests = atoi(argv[3]);
        if (argc > 4)
                n_clients = atoi(argv[4]);
        if (n_requests < 1 || n_clients < 1 || n_clients > 64)
                return 2;
        pthread_mutex_init(&tok_lat.lock, NULL);
        pthread_mutex_init(&adm_lat.lock, NULL);
        if (itest_daemon_start(&d, argv[1], argv[2], "[engine]\nthreads = 1\n", NULL))
                return 1;
        sock = d.sock;
        CHECK(run(1, "1 client") == 0);
        CHECK(run(n_clients, "concurrent clients") == 0);
        CHECK(itest_daemon_stop(&d) == 0);
        return 0;
}
