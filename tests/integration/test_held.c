/* test_held.c - issue 20 item 1, "one client starves everyone", against a real m40d
 * (stories260K, CPU engine): clients that submit long generations and never read their
 * events must not keep other clients' requests from running.
 *
 * 1. The shipped m40d.ini (model path and socket aside, and threads = 1: ONE_THREAD): 16
 *    clients, each its own connection, submit `-n 4096 --ignore-eos` requests (one of
 *    them -n 400, to keep the test short) and never read (as 16 stopped `m40ctl submit`
 *    processes). Once they are held, a 16-token request of another client completes in
 *    under 2 s (acceptance 2). Then the -n 400 one reads everything: exactly the tokens
 *    and text of an uninterrupted run (holding only delays).
 * 2. The same daemon: one client queues 64 such requests and never reads. It gets at most
 *    max_sequences_per_client (8) sequences, and a probe still completes in under 2 s.
 * 3. held_sequences = 0, hold_timeout = 2: the per-client cap alone keeps the probe fast;
 *    then the hold timeout cancels the never-read sequences (slots and KV pages freed),
 *    the daemon logs each cancel once, and the client, reading at last, gets its pending
 *    events and then ERROR M40_EUNREAD.
 * 4. max_kv_percent_per_client = 20: a client's running sequences never reserve more than
 *    a fifth of the KV pages (its first one excepted).
 *
 *   test_held M40D MODEL.gguf [PART]   (PART 1..4: only that part; default all) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "itest.h"
#include "m40/error.h"

#define N_HOLDERS  16
#define N_QUEUED   64
#define PER_CLIENT 8 /* m40d.ini's max_sequences_per_client */
#define PROBE_N    16
#define HOLDER0_N  400 /* tokens: more than its event ring (256) holds */
#define PROBE_MAX  2.0 /* seconds: acceptance 2 */
/* The one setting that differs from the shipped m40d.ini: an engine of one thread runs
 * stories260K in milliseconds per step and keeps that speed when other processes load the
 * CPUs (two threads that wait for each other at every op do not: 16 tokens took 2 s on a
 * 2-core machine at load 10). */
#define ONE_THREAD "[engine]\nthreads = 1\n"

static double now_s(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* submit_long - a greedy `-n 4096 --ignore-eos` request with an event per token. */
static int submit_long(struct m40_client *c, const char *prompt, uint32_t max_tokens,
                       uint64_t *ret_id)
{
        struct m40_request rq;

        m40_request_init(&rq);
        rq.prompt = prompt;
        rq.max_tokens = max_tokens;
        rq.set = M40_SET_TEMPERATURE;
        rq.temperature = 0;
        rq.flags = M40_REQUEST_IGNORE_EOS | M40_REQUEST_TOKENS;
        return m40_client_submit(c, &rq, ret_id);
}

static int status(const char *sock, struct m40_status *st)
{
        struct m40_client *c;
        int r = m40_client_connect(sock, &c);

        if (!r) {
                r = m40_client_status(c, st);
                m40_client_disconnect(c);
        }
        return r;
}

/* settle - polls until there are active sequences and every one of them is held: STATUS's
 * held count, the scheduler's own, which is current also while an engine step runs (the
 * token and KV figures are as of the step's start then, so a standstill of those would
 * prove nothing: a step of new prompts takes over a second in a sanitizer build). Returns
 * 0 with the last status, or -1 after 120 s (holding 16 sequences takes ~256 steps: ~55 s
 * in the ASan+UBSan debug build on a loaded 2-core machine). */
static int settle(const char *sock, struct m40_status *st)
{
        const double t0 = now_s();

        while (now_s() - t0 < 120.0) {
                if (status(sock, st))
                        return -1;
                if (st->active && st->held == st->active)
                        return 0;
                usleep(50000);
        }
        return -1;
}

/* probe - a 16-token request on a new connection; returns its seconds from connect to
 * DONE, or -1 when it fails or takes more than 10 s. */
static double probe(const char *sock)
{
        struct m40_client *c;
        struct m40_request rq;
        uint64_t id;
        double t0 = now_s(), t = -1;
        uint32_t n = 0;

        if (m40_client_connect(sock, &c))
                return -1;
        m40_request_init(&rq);
        rq.prompt = itest_prompts[2];
        rq.max_tokens = PROBE_N;
        rq.flags = M40_REQUEST_IGNORE_EOS;
        if (!m40_client_submit(c, &rq, &id)) {
                for (;;) {
                        struct m40_reply ev;
                        int left = (int)((t0 + 10.0 - now_s()) * 1000);

                        if (left <= 0 || m40_client_next(c, left, &ev)) {
                                fprintf(stderr, "probe: no DONE within 10 s\n");
                                break;
                        }
                        if (ev.type == M40_EVENT_ERROR) {
                                fprintf(stderr, "probe: error %d: %s\n", ev.error, ev.text);
                                break;
                        }
                        if (ev.type == M40_EVENT_DONE) {
                                n = ev.n_generated;
                                t = now_s() - t0;
                                break;
                        }
                }
        }
        m40_client_disconnect(c);
        return n == PROBE_N ? t : -1;
}

/* count_lines - lines of file path that contain needle. */
static int count_lines(const char *path, const char *needle)
{
        char line[1024];
        int n = 0;
        FILE *f = fopen(path, "r");

        if (!f)
                return -1;
        while (fgets(line, sizeof(line), f))
                n += strstr(line, needle) != NULL;
        fclose(f);
        return n;
}

/* part 1: 16 clients that never read, a probe, and one of them reading at last */
static int held_clients(struct itest_daemon *d)
{
        static int32_t ref[HOLDER0_N], got[HOLDER0_N];
        static char ref_text[16 * HOLDER0_N], got_text[16 * HOLDER0_N];
        struct m40_client *hc[N_HOLDERS], *c;
        struct m40_status st;
        uint64_t id[N_HOLDERS], rid;
        size_t n_ref, n_got;
        double t;

        /* the uninterrupted run of holder 0's request: shorter than the others, to keep
         * the test short, but longer than a ring of events, so that it is held */
        CHECK(m40_client_connect(d->sock, &c) == 0);
        CHECK(submit_long(c, itest_prompts[0], HOLDER0_N, &rid) == 0);
        CHECK(itest_collect(c, rid, ref_text, sizeof(ref_text), ref, HOLDER0_N, &n_ref) == 0 &&
              n_ref == HOLDER0_N);
        m40_client_disconnect(c);

        for (int i = 0; i < N_HOLDERS; i++) {
                CHECK(m40_client_connect(d->sock, &hc[i]) == 0);
                CHECK(submit_long(hc[i], itest_prompts[i % 8], i ? 4096 : HOLDER0_N, &id[i]) == 0);
        }
        CHECK(settle(d->sock, &st) == 0);
        fprintf(stderr,
                "%d clients not reading: %u sequences in the engine, %u queued, %u of %u "
                "KV pages used\n",
                N_HOLDERS, st.active, st.queued, st.kv_pages_used, st.kv_pages_total);
        CHECK(st.active == N_HOLDERS && st.queued == 0);
        t = probe(d->sock);
        fprintf(stderr, "probe beside %d held clients: %.3f s\n", N_HOLDERS, t);
        CHECK(t >= 0 && t < PROBE_MAX);

        /* holder 0 reads everything: the tokens of the uninterrupted run */
        CHECK(itest_collect(hc[0], id[0], got_text, sizeof(got_text), got, HOLDER0_N, &n_got) == 0);
        CHECK(n_got == n_ref && !memcmp(got, ref, n_ref * sizeof(int32_t)) &&
              !strcmp(got_text, ref_text));
        for (int i = 0; i < N_HOLDERS; i++)
                m40_client_disconnect(hc[i]);
        CHECK(itest_idle(d->sock) == 0);
        printf("ok: a 16-token request took %.3f s beside %d clients that do not read; held "
               "tokens identical once read\n",
               t, N_HOLDERS);
        return 0;
}

/* parts 2 and 3: one client queues 64 requests and never reads */
static int greedy_client(struct itest_daemon *d, const char *what)
{
        struct m40_client *c;
        struct m40_status st;
        uint64_t id;
        double t;

        CHECK(m40_client_connect(d->sock, &c) == 0);
        for (int i = 0; i < N_QUEUED; i++)
                CHECK(submit_long(c, itest_prompts[i % 8], 4096, &id) == 0);
        CHECK(settle(d->sock, &st) == 0);
        fprintf(stderr,
                "%s: one client with %d requests, not reading: %u in the engine, %u "
                "queued\n",
                what, N_QUEUED, st.active, st.queued);
        CHECK(st.active <= PER_CLIENT && st.active + st.queued == N_QUEUED);
        t = probe(d->sock);
        fprintf(stderr, "%s: probe beside it: %.3f s\n", what, t);
        CHECK(t >= 0 && t < PROBE_MAX);
        m40_client_disconnect(c);
        CHECK(itest_idle(d->sock) == 0);
        printf("ok (%s): a client with %d unread requests got %u sequences; a probe took "
               "%.3f s\n",
               what, N_QUEUED, st.active, t);
        return 0;
}

/* part 3's end: hold_timeout = 2 cancels a never-read sequence */
static int hold_timeout(struct itest_daemon *d)
{
        struct m40_client *c;
        struct m40_status st;
        uint64_t id[2];
        int n_err = 0, n_text = 0, logged;
        double t0;

        CHECK(m40_client_connect(d->sock, &c) == 0);
        CHECK(submit_long(c, itest_prompts[3], 4096, &id[0]) == 0);
        CHECK(submit_long(c, itest_prompts[4], 4096, &id[1]) == 0);
        CHECK(settle(d->sock, &st) == 0 && st.active == 2);
        t0 = now_s();
        do { /* cancelled within the timeout plus the daemon's 1 s idle wake-up */
                usleep(100000);
                CHECK(status(d->sock, &st) == 0);
        } while ((st.active || st.kv_pages_used) && now_s() - t0 < 10);
        fprintf(stderr, "hold_timeout 2 s: cancelled after %.2f s more\n", now_s() - t0);
        CHECK(!st.active && !st.kv_pages_used);
        logged = count_lines(d->log, "(hold_timeout)");
        CHECK(logged == 2);
        while (n_err < 2) {
                struct m40_reply ev;

                CHECK(m40_client_next(c, 5000, &ev) == 0);
                if (ev.type == M40_EVENT_TEXT)
                        n_text++;
                if (ev.type == M40_EVENT_DONE)
                        CHECK(!"a DONE instead of the hold timeout's ERROR");
                if (ev.type == M40_EVENT_ERROR) {
                        fprintf(stderr, "request %llu: error %d: %s (%s)\n",
                                (unsigned long long)ev.id, ev.error, ev.text,
                                m40_strerror(ev.error));
                        CHECK(ev.error == M40_EUNREAD && strstr(ev.text, "hold_timeout"));
                        n_err++;
                }
        }
        CHECK(n_text > 100);
        sleep(1); /* the daemon logs nothing more when the client reads */
        CHECK(count_lines(d->log, "(hold_timeout)") == 2);
        m40_client_disconnect(c);
        CHECK(itest_idle(d->sock) == 0);
        printf("ok: hold_timeout cancelled 2 unread sequences (logged once each); the client "
               "read %d events, then ERROR M40_EUNREAD\n",
               n_text);
        return 0;
}

/* part 4: a client's sequences reserve at most max_kv_percent_per_client of the pages */
static int kv_share(struct itest_daemon *d)
{
        const uint32_t n_req = 8, max_tok = 192;
        struct m40_client *c;
        struct m40_status st;
        uint32_t done = 0, most = 0, need, allowed;
        uint64_t id;

        CHECK(status(d->sock, &st) == 0);
        /* max_tok is a whole number of pages and every prompt takes 1..15 positions: one
         * page more */
        CHECK(max_tok % st.kv_page_tokens == 0 && st.kv_page_tokens == 16);
        need = max_tok / st.kv_page_tokens + 1;
        allowed = st.kv_pages_total * 20 / 100 / need;
        CHECK(allowed >= 2 && allowed < n_req);
        CHECK(m40_client_connect(d->sock, &c) == 0);
        for (uint32_t i = 0; i < n_req; i++)
                CHECK(submit_long(c, itest_prompts[i], max_tok, &id) == 0);
        for (uint32_t k = 0; done < n_req; k++) {
                struct m40_reply ev;

                CHECK(m40_client_next(c, 30000, &ev) == 0);
                CHECK(ev.type != M40_EVENT_ERROR);
                CHECK(ev.type != M40_EVENT_ADMITTED || (ev.n_prompt && ev.n_prompt < 16));
                done += ev.type == M40_EVENT_DONE;
                if (k % 32 == 0) {
                        CHECK(status(d->sock, &st) == 0);
                        most = st.active > most ? st.active : most;
                }
        }
        m40_client_disconnect(c);
        fprintf(stderr, "KV share 20%%: at most %u of %u sequences ran together (%u allowed)\n",
                most, n_req, allowed);
        CHECK(most >= 2 && most <= allowed);
        printf("ok: a client's sequences reserved at most 20%% of the KV pages (%u at once)\n",
               most);
        return 0;
}

int main(int argc, char **argv)
{
        struct itest_daemon d;
        int part = argc > 3 ? atoi(argv[3]) : 0, r = 0;

        if (argc < 3)
                return 2;
        if (access(argv[2], R_OK)) {
                printf("skip: %s not present\n", argv[2]);
                return ITEST_SKIP;
        }
        if (!part || part <= 2) {
                if (itest_daemon_start(&d, argv[1], argv[2], ONE_THREAD, NULL))
                        return 1;
                r = part == 2 ? 0 : held_clients(&d);
                r = r || part == 1 ? r : greedy_client(&d, "default caps");
                if (itest_daemon_stop(&d) != 0 || r)
                        return 1;
        }
        if (!part || part == 3) {
                if (itest_daemon_start(&d, argv[1], argv[2],
                                       "held_sequences = 0\nhold_timeout = 2\n" ONE_THREAD, NULL))
                        return 1;
                r = greedy_client(&d, "held_sequences = 0");
                r = r ? r : hold_timeout(&d);
                if (itest_daemon_stop(&d) != 0 || r)
                        return 1;
        }
        if (!part || part == 4) {
                if (itest_daemon_start(&d, argv[1], argv[2],
                                       "max_kv_percent_per_client = 20\n" ONE_THREAD
                                       "kv_memory_mib = 2\n",
                                       NULL))
                        return 1;
                r = kv_share(&d);
                if (itest_daemon_stop(&d) != 0 || r)
                        return 1;
        }
        return 0;
}
