/* test_reqlimit.c - max_requests_per_client is backpressure, not a reason to drop a client
 * that reads its events. A client submits a long generation it does not read for a while
 * (its event ring fills, the sequence is held), then more requests than the limit, several
 * times over, before it reads anything: it cannot know of the limit's errors it has not
 * read yet. The daemon must keep the client, take its submissions past the limit one at a
 * time (each after the previous one's error reached the client), leave the rest in the
 * client's submission ring meanwhile, sleep instead of spinning on them, and, once the
 * client reads, give every request exactly one end: DONE, or ERROR M40_ELIMIT. The long
 * request's tokens must equal an uninterrupted run's, and the daemon must end idle with
 * every KV page back.
 *
 *   test_reqlimit M40D MODEL.gguf */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "itest.h"
#include "m40/error.h"

#define LIMIT   4    /* max_requests_per_client */
#define N_SUB   16   /* requests the client submits before reading: 4 x LIMIT */
#define N_LONG  1000 /* tokens of the first request: several event rings (256) */
#define N_SHORT 8

struct end {
        uint64_t id;
        int state; /* 0 running, 1 DONE, 2 ERROR M40_ELIMIT, -1 another ERROR */
        size_t n_toks;
};

static int32_t ref_toks[N_LONG + 8], got_toks[N_LONG + 8];

static int submit(struct m40_client *c, uint32_t max_tokens, uint64_t *id)
{
        struct m40_request rq;

        m40_request_init(&rq);
        rq.prompt = itest_prompts[0];
        rq.max_tokens = max_tokens;
        rq.set = M40_SET_TEMPERATURE;
        rq.temperature = 0;
        rq.flags = M40_REQUEST_IGNORE_EOS | M40_REQUEST_TOKENS; /* an event per token */
        return m40_client_submit(c, &rq, id);
}

/* settle - polls until the daemon's generated-token count has not moved for 0.5 s. */
static int settle(struct m40_client *mon, struct m40_status *st)
{
        uint64_t last = UINT64_MAX;
        int same = 0;

        for (int i = 0; i < 1200 && same < 10; i++) {
                if (m40_client_status(mon, st))
                        return -1;
                same = st->generated_tokens == last ? same + 1 : 0;
                last = st->generated_tokens;
                usleep(50000);
        }
        return same >= 10 ? 0 : -1;
}

int main(int argc, char **argv)
{
        static struct end ends[N_SUB];
        struct itest_daemon d;
        struct m40_client *c, *mon;
        struct m40_status st;
        char ref_text[16384];
        size_t ref_n = 0, got_n = 0;
        long t0, t1, hz = sysconf(_SC_CLK_TCK);
        int n_done = 0, n_limit = 0, left = N_SUB;

        if (argc < 3)
                return 2;
        if (access(argv[2], R_OK)) {
                printf("skip: %s not present\n", argv[2]);
                return ITEST_SKIP;
        }
        if (itest_daemon_start(&d, argv[1], argv[2],
                               "[engine]\nthreads = 1\nmax_context = 2048\n"
                               "[server]\nmax_requests_per_client = 4\n",
                               NULL))
                return 1;

        /* the uninterrupted run of the long request */
        CHECK(m40_client_connect(d.sock, &c) == 0);
        CHECK(submit(c, N_LONG, &ends[0].id) == 0);
        CHECK(itest_collect(c, ends[0].id, ref_text, sizeof(ref_text), ref_toks, N_LONG + 8,
                            &ref_n) == 0);
        m40_client_disconnect(c);
        CHECK(ref_n == N_LONG);

        /* the long request, unread until its sequence is held */
        CHECK(m40_client_connect(d.sock, &mon) == 0);
        CHECK(m40_client_connect(d.sock, &c) == 0);
        CHECK(submit(c, N_LONG, &ends[0].id) == 0);
        CHECK(settle(mon, &st) == 0);
        CHECK(st.active == 1 && st.held == 1);

        /* then N_SUB - 1 more, unread: LIMIT - 1 within the limit, the rest past it */
        for (int i = 1; i < N_SUB; i++)
                CHECK(submit(c, N_SHORT, &ends[i].id) == 0);
        usleep(500000);
        CHECK(m40_client_status(mon, &st) == 0);
        fprintf(stderr, "after %d submissions: clients %u, active %u, queued %u, held %u\n", N_SUB,
                st.clients, st.active, st.queued, st.held);
        CHECK(st.clients == 2); /* the client is still there */
        CHECK(st.active == 1 && st.held == 1 && st.queued == LIMIT - 1);

        /* asleep, not spinning on the submissions it leaves in the ring */
        t0 = itest_cpu_ticks(d.pid);
        usleep(1000000);
        t1 = itest_cpu_ticks(d.pid);
        fprintf(stderr, "m40d used %.2f s of CPU in 1 s with submissions held back\n",
                (double)(t1 - t0) / hz);
        CHECK(t0 >= 0 && t1 >= 0 && t1 - t0 < hz / 4);

        /* the client reads: every request ends exactly once */
        while (left > 0) {
                struct m40_reply ev;
                struct end *e = NULL;
                int r = m40_client_next(c, 60000, &ev);

                if (r) {
                        fprintf(stderr, "reading: %s (%d requests without an end)\n",
                                m40_strerror(r), left);
                        return 1;
                }
                for (int i = 0; i < N_SUB; i++)
                        if (ends[i].id == ev.id)
                                e = &ends[i];
                CHECK(e != NULL);
                if (ev.type == M40_EVENT_TEXT) {
                        CHECK(e->state == 0);
                        if (e == &ends[0] && ev.token >= 0 && got_n < N_LONG + 8)
                                got_toks[got_n++] = ev.token;
                        e->n_toks += ev.token >= 0;
                } else if (ev.type == M40_EVENT_DONE) {
                        CHECK(e->state == 0);
                        e->state = 1;
                        left--;
                        n_done++;
                } else if (ev.type == M40_EVENT_ERROR) {
                        CHECK(e->state == 0);
                        e->state = ev.error == M40_ELIMIT ? 2 : -1;
                        if (e->state < 0)
                                fprintf(stderr, "request %d: error %d: %s\n", (int)(e - ends),
                                        ev.error, ev.text);
                        CHECK(e->state == 2);
                        left--;
                        n_limit++;
                }
        }
        fprintf(stderr, "%d DONE, %d ERROR M40_ELIMIT\n", n_done, n_limit);
        /* the first LIMIT were within the limit; the next one came while all of them were
         * there (the held one keeps the rest queued) */
        for (int i = 0; i < LIMIT; i++)
                CHECK(ends[i].state == 1);
        CHECK(ends[LIMIT].state == 2);
        for (int i = 1; i < N_SUB; i++)
                CHECK(ends[i].state != 1 || ends[i].n_toks == N_SHORT);
        CHECK(got_n == ref_n && !memcmp(got_toks, ref_toks, ref_n * sizeof(int32_t)));
        m40_client_disconnect(c);
        m40_client_disconnect(mon);
        CHECK(itest_idle(d.sock) == 0);
        CHECK(itest_daemon_stop(&d) == 0);
        printf("ok: %d requests past a limit of %d, the client kept\n", N_SUB - LIMIT, LIMIT);
        return 0;
}
