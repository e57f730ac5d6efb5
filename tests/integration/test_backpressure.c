/* test_backpressure.c - issue 5's "a full event ring applies backpressure to that sequence
 * only", against a real m40d: a client submits a long greedy generation (several times its
 * event ring) and does not read. The daemon must stop generating for it once the ring is
 * full (its generated-token count stays put a ring's worth of tokens in, so the daemon
 * buffers at most a step's events for it instead of the whole generation), must sleep
 * meanwhile instead of spinning, must serve a second client's request normally, and must
 * resume as soon as the slow client reads (the client's doorbell, not a timeout, wakes it).
 * Finally the slow client reads everything and gets exactly the tokens and text of an
 * uninterrupted run, and the daemon is idle with every KV page back.
 *
 *   test_backpressure M40D MODEL.gguf */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "itest.h"

#define N_LONG   1000 /* tokens of the slow request: almost 4 rings */
#define N_SHORT  48
#define EV_RING  256 /* event ring entries the daemon gives a client (sched.c) */
#define TEXT_CAP (64 * 1024)

/* One request's events as they are read. */
struct acc {
        uint64_t id;
        char text[TEXT_CAP];
        size_t len;
        int32_t toks[N_LONG + 8];
        size_t n_toks;
        int done; /* 1: DONE, -1: ERROR */
        uint32_t finish, n_generated;
};

static double now_s(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void take(struct acc *a, const struct m40_reply *ev)
{
        if (ev->id != a->id)
                return;
        if (ev->type == M40_EVENT_TEXT) {
                if (a->len + ev->len < sizeof(a->text)) {
                        memcpy(a->text + a->len, ev->text, ev->len);
                        a->len += ev->len;
                        a->text[a->len] = 0;
                }
                if (ev->token >= 0 && a->n_toks < sizeof(a->toks) / sizeof(a->toks[0]))
                        a->toks[a->n_toks++] = ev->token;
        } else if (ev->type == M40_EVENT_DONE) {
                a->done = 1;
                a->finish = ev->finish;
                a->n_generated = ev->n_generated;
        } else if (ev->type == M40_EVENT_ERROR) {
                a->done = -1;
                fprintf(stderr, "request %llu: error %d: %s\n", (unsigned long long)a->id,
                        ev->error, ev->text);
        }
}

static int submit_long(struct m40_client *c, struct acc *a)
{
        struct m40_request rq;

        m40_request_init(&rq);
        rq.prompt = itest_prompts[0];
        rq.max_tokens = N_LONG;
        rq.set = M40_SET_TEMPERATURE;
        rq.temperature = 0;
        rq.flags = M40_REQUEST_IGNORE_EOS | M40_REQUEST_TOKENS; /* an event per token */
        memset(a, 0, sizeof(*a));
        return m40_client_submit(c, &rq, &a->id);
}

static int read_all(struct m40_client *c, struct acc *a)
{
        while (!a->done) {
                struct m40_reply ev;
                int r = m40_client_next(c, 60000, &ev);

                if (r)
                        return r;
                take(a, &ev);
        }
        return a->done == 1 ? 0 : -EIO;
}

static uint64_t generated(struct m40_client *mon, struct m40_status *st)
{
        if (m40_client_status(mon, st))
                return UINT64_MAX;
        return st->generated_tokens;
}

/* settle - polls the daemon until its generated-token count has not moved for 0.5 s;
 * returns it, or UINT64_MAX after 60 s. */
static uint64_t settle(struct m40_client *mon, struct m40_status *st)
{
        uint64_t last = UINT64_MAX;
        int same = 0;

        for (int i = 0; i < 1200 && same < 10; i++) {
                uint64_t g = generated(mon, st);

                same = g == last ? same + 1 : 0;
                last = g;
                usleep(50000);
        }
        return same >= 10 ? last : UINT64_MAX;
}

int main(int argc, char **argv)
{
        static struct acc ref, slow;
        struct itest_daemon d;
        struct m40_client *c, *mon, *slow_c;
        struct m40_status st;
        char ref_short[4096], got_short[4096];
        int32_t ref_short_toks[4096], got_short_toks[4096];
        size_t ref_short_n, got_short_n;
        uint64_t g0, g1, g2;
        long t0, t1, hz = sysconf(_SC_CLK_TCK);
        double ts, t_short, t_ref;
        bool woke = false;

        if (argc < 3)
                return 2;
        if (access(argv[2], R_OK)) {
                printf("skip: %s not present\n", argv[2]);
                return ITEST_SKIP;
        }
        if (itest_daemon_start(&d, argv[1], argv[2], "[engine]\nthreads = 1\nmax_context = 2048\n",
                               NULL))
                return 1;

        /* the uninterrupted runs */
        CHECK(m40_client_connect(d.sock, &c) == 0);
        ts = now_s();
        CHECK(submit_long(c, &ref) == 0);
        CHECK(read_all(c, &ref) == 0);
        t_ref = now_s() - ts;
        m40_client_disconnect(c);
        CHECK(ref.n_toks == N_LONG && ref.finish == M40_FINISHED_LENGTH);
        CHECK(itest_generate(d.sock, itest_prompts[1], N_SHORT, ref_short, sizeof(ref_short),
                             ref_short_toks, &ref_short_n) == 0);

        /* the slow client submits and does not read */
        CHECK(m40_client_connect(d.sock, &mon) == 0);
        CHECK((g0 = generated(mon, &st)) != UINT64_MAX);
        CHECK(m40_client_connect(d.sock, &slow_c) == 0);
        CHECK(submit_long(slow_c, &slow) == 0);
        g1 = settle(mon, &st);
        CHECK(g1 != UINT64_MAX);
        fprintf(stderr, "slow client: %llu tokens generated, then held (ring of %d events)\n",
                (unsigned long long)(g1 - g0), EV_RING);
        /* held once its ring (ADMITTED + one event per token) was full: the daemon keeps at
         * most the events of one step beyond it */
        CHECK(g1 - g0 >= EV_RING / 2 && g1 - g0 <= EV_RING + 1);
        CHECK(st.active == 1 && st.queued == 0 && st.kv_pages_used > 0);

        /* asleep, not spinning, while its only sequence is held */
        t0 = itest_cpu_ticks(d.pid);
        usleep(1000000);
        t1 = itest_cpu_ticks(d.pid);
        fprintf(stderr, "m40d used %.2f s of CPU in 1 s while held\n", (double)(t1 - t0) / hz);
        CHECK(t0 >= 0 && t1 >= 0 && t1 - t0 < hz / 4);

        /* another client is served normally meanwhile */
        ts = now_s();
        CHECK(itest_generate(d.sock, itest_prompts[1], N_SHORT, got_short, sizeof(got_short),
                             got_short_toks, &got_short_n) == 0);
        t_short = now_s() - ts;
        CHECK(got_short_n == ref_short_n && !strcmp(got_short, ref_short) &&
              !memcmp(got_short_toks, ref_short_toks, ref_short_n * sizeof(int32_t)));
        CHECK(t_short < 30);
        g2 = settle(mon, &st);
        CHECK(g2 == g1 + got_short_n); /* the slow request did not move */

        /* reading one event wakes the daemon (the doorbell): a token follows at once */
        for (int attempt = 0; attempt < 5 && !woke; attempt++) {
                struct m40_reply ev;
                uint64_t before, after;

                before = settle(mon, &st); /* the daemon is asleep again, ring full */
                CHECK(before != UINT64_MAX);
                CHECK(m40_client_next(slow_c, 1000, &ev) == 0);
                take(&slow, &ev);
                usleep(400000);              /* well below the daemon's 1 s idle timeout */
                after = generated(mon, &st); /* answered before the round it wakes */
                woke = after > before;
        }
        CHECK(woke);

        /* now it reads everything: exactly the uninterrupted run */
        ts = now_s();
        CHECK(read_all(slow_c, &slow) == 0);
        fprintf(stderr, "slow client read the rest in %.2f s (uninterrupted run: %.2f s)\n",
                now_s() - ts, t_ref);
        CHECK(slow.n_toks == N_LONG && slow.finish == M40_FINISHED_LENGTH &&
              slow.n_generated == N_LONG);
        CHECK(!memcmp(slow.toks, ref.toks, N_LONG * sizeof(int32_t)));
        CHECK(slow.len == ref.len && !strcmp(slow.text, ref.text));
        m40_client_disconnect(slow_c);
        m40_client_disconnect(mon);
        CHECK(itest_idle(d.sock) == 0);
        CHECK(itest_daemon_stop(&d) == 0);
        printf("ok: a non-reading client's sequence held after %llu tokens; another client "
               "served in %.2f s meanwhile; all %d tokens identical once read; daemon idle\n",
               (unsigned long long)(g1 - g0), t_short, N_LONG);
        return 0;
}
