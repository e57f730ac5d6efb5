/* test_responsive.c - issue 21 (the asynchronous engine interface): m40d stays responsive
 * while a long CPU prefill runs. One client submits a prompt of a few thousand tokens that
 * the CPU engine prefills in one forward pass (max_batch_tokens = max_context); until its
 * first token arrives, probes connect, ask STATUS and disconnect, again and again, as
 * `m40ctl status` does, and one more client connects in the middle, completes its
 * handshake and has a short request served. Checks:
 *   - every probe that started during the prefill answers within STATUS_MAX_MS more than
 *     the slowest probe of the idle daemon took just before (what the machine's own load
 *     adds is not the daemon's doing), and half of them within STATUS_MEDIAN_MS: the
 *     issue's 50 ms;
 *   - STATUS during the prefill shows the prefilling sequence active;
 *   - the client that connects during the prefill is connected within STATUS_MAX_MS more
 *     than the idle baseline and gets its 16 tokens, the same as on the idle daemon;
 *   - the prefill took at least MIN_PREFILL_S, so that the probes had a step to wait for
 *     (a machine fast enough to prefill sooner makes the test fail, not pass: raise
 *     PROMPT_WORDS then).
 * Before the engine's steps ran on their own thread, a probe waited for the whole step
 * (seconds) and a client connecting during it was dropped for "no handshake within 5 s".
 *
 *   test_responsive M40D MODEL.gguf */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "itest.h"

#define STATUS_MAX_MS    150.0
#define STATUS_MEDIAN_MS 50.0
#define MIN_PREFILL_S    1.0
#define PROMPT_WORDS     1300 /* about 2000 tokens of stories260K */
#define MAX_PROBES       4096
#define PROBE_PAUSE_US   20000

static double now_s(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* probe - what `m40ctl status` does: connect, STATUS, disconnect. Its milliseconds in
 * *ret_ms, the reply in *ret_st. */
static int probe(const char *sock, double *ret_ms, struct m40_status *ret_st)
{
        double t0 = now_s();
        struct m40_client *c;
        int r = m40_client_connect(sock, &c);

        if (!r) {
                r = m40_client_status(c, ret_st);
                m40_client_disconnect(c);
        }
        *ret_ms = (now_s() - t0) * 1e3;
        if (r)
                fprintf(stderr, "probe: %s after %.1f ms\n", strerror(-r), *ret_ms);
        return r;
}

/* short_request - 16 greedy tokens of a short prompt on connected client c. */
static int short_request(struct m40_client *c, int32_t *toks, size_t *n)
{
        struct m40_request rq;
        char out[4096];
        uint64_t id;
        int r;

        m40_request_init(&rq);
        rq.prompt = itest_prompts[3];
        rq.max_tokens = 16;
        rq.set = M40_SET_TEMPERATURE;
        rq.temperature = 0;
        rq.flags = M40_REQUEST_IGNORE_EOS | M40_REQUEST_TOKENS;
        r = m40_client_submit(c, &rq, &id);
        return r ? r : itest_collect(c, id, out, sizeof(out), toks, 64, n);
}

static int cmp_double(const void *a, const void *b)
{
        const double x = *(const double *)a, y = *(const double *)b;

        return x < y ? -1 : x > y;
}

/* long_prompt - PROMPT_WORDS short words, like a story. */
static char *long_prompt(void)
{
        static const char *const words[] = {"the", "cat", "sat", "on",  "a",   "mat", "and",
                                            "dog", "ran", "to",  "big", "red", "ball"};
        char *p = malloc(PROMPT_WORDS * 6 + 1), *w = p;

        if (!p)
                return NULL;
        for (int i = 0; i < PROMPT_WORDS; i++)
                w += sprintf(w, "%s%s", i ? " " : "", words[(i * 7 + i / 13) % 13]);
        return p;
}

int main(int argc, char **argv)
{
        static double ms[MAX_PROBES];
        struct itest_daemon d;
        struct m40_client *a = NULL, *b = NULL;
        struct m40_request rq;
        struct m40_status st;
        int32_t ref[64], got[64];
        size_t n_ref = 0, n_got = 0;
        double base = 0, t_sub, t_first = 0, conn_ms = 0, prefill_s;
        int n = 0, n_active = 0, fail = 0;
        char *prompt;
        uint64_t id;

        if (argc != 3)
                return 2;
        if (access(argv[2], R_OK))
                return ITEST_SKIP;
        prompt = long_prompt();
        CHECK(prompt);
        if (itest_daemon_start(&d, argv[1], argv[2],
                               "max_prompt_bytes = 65536\n[engine]\nbackend = cpu\nthreads = 1\n"
                               "max_context = 4096\nmax_batch_tokens = 4096\n",
                               NULL))
                return 1;

        /* the baseline: the idle daemon's probes, and the short request's tokens */
        for (int i = 0; i < 20; i++) {
                double t;

                CHECK(!probe(d.sock, &t, &st));
                if (t > base)
                        base = t;
                usleep(10000);
        }
        CHECK(!m40_client_connect(d.sock, &b));
        CHECK(!short_request(b, ref, &n_ref) && n_ref == 16);
        b = m40_client_disconnect(b);

        CHECK(!m40_client_connect(d.sock, &a));
        m40_request_init(&rq);
        rq.prompt = prompt;
        rq.max_tokens = 4;
        rq.set = M40_SET_TEMPERATURE;
        rq.temperature = 0;
        rq.flags = M40_REQUEST_IGNORE_EOS;
        t_sub = now_s();
        CHECK(!m40_client_submit(a, &rq, &id));
        usleep(200000); /* the daemon tokenizes and admits it; then the prefill runs */
        {
                /* a new client, during the prefill */
                double t0 = now_s();

                CHECK(!m40_client_connect(d.sock, &b));
                conn_ms = (now_s() - t0) * 1e3;
        }
        while (!t_first && n < MAX_PROBES) {
                struct m40_reply ev;
                int r;

                /* the long request's first token ends the prefill */
                while (!t_first && !(r = m40_client_next(a, 0, &ev))) {
                        if (ev.type == M40_EVENT_TEXT)
                                t_first = now_s();
                        if (ev.type == M40_EVENT_ERROR)
                                fprintf(stderr, "the long request: error %d: %s\n", ev.error,
                                        ev.text);
                        CHECK(ev.type == M40_EVENT_TEXT || ev.type == M40_EVENT_ADMITTED);
                }
                if (t_first)
                        break;
                CHECK(r == -EAGAIN);
                CHECK(!probe(d.sock, &ms[n], &st));
                n_active += st.active == 1;
                n++;
                usleep(PROBE_PAUSE_US);
        }
        /* the last probe may have started after the first token: count only the others */
        prefill_s = t_first - t_sub;
        CHECK(!short_request(b, got, &n_got));
        b = m40_client_disconnect(b);
        a = m40_client_disconnect(a);
        qsort(ms, (size_t)n, sizeof(*ms), cmp_double);
        printf("prefill of %d words: %.2f s; %d STATUS probes during it: median %.1f ms, "
               "slowest %.1f ms (idle daemon: slowest %.1f ms); %d saw the sequence active; "
               "a client connected in %.1f ms\n",
               PROMPT_WORDS, prefill_s, n, n ? ms[n / 2] : 0.0, n ? ms[n - 1] : 0.0, base, n_active,
               conn_ms);
        fflush(stdout);
        if (prefill_s < MIN_PREFILL_S) {
                fprintf(stderr, "the prefill took %.2f s: too short to test\n", prefill_s);
                fail = 1;
        }
        if (n < 5) {
                fprintf(stderr, "%d STATUS answered during the prefill\n", n);
                fail = 1;
        }
        if (n && ms[n - 1] > STATUS_MAX_MS + base) {
                fprintf(stderr, "a STATUS took %.1f ms (limit %.0f ms + the idle %.1f ms)\n",
                        ms[n - 1], STATUS_MAX_MS, base);
                fail = 1;
        }
        if (n && ms[n / 2] > STATUS_MEDIAN_MS) {
                fprintf(stderr, "median STATUS %.1f ms (limit %.0f ms)\n", ms[n / 2],
                        STATUS_MEDIAN_MS);
                fail = 1;
        }
        if (n_active < n - 1) {
                fprintf(stderr, "only %d of %d STATUS replies showed the prefilling sequence\n",
                        n_active, n);
                fail = 1;
        }
        if (conn_ms > STATUS_MAX_MS + base) {
                fprintf(stderr, "connecting took %.1f ms\n", conn_ms);
                fail = 1;
        }
        if (n_got != n_ref || memcmp(got, ref, n_ref * sizeof(*ref))) {
                fprintf(stderr,
                        "the client that connected during the prefill got %zu tokens, "
                        "not the idle daemon's %zu\n",
                        n_got, n_ref);
                fail = 1;
        }
        if (itest_daemon_stop(&d) != 0) {
                fprintf(stderr, "m40d did not exit cleanly; see %s\n", d.log);
                fail = 1;
        }
        free(prompt);
        return fail;
}
