/* test_flood.c - issue 20 item 4 and acceptance 2: a busy event loop must not drop good
 * clients. 24 clients flood m40d with long prompts (each keeps its submission ring full and
 * reads its events) while a probe client connects, sends a 16-token request and
 * disconnects, again and again. Every flooding client must stay connected, every probe
 * must connect and finish, each within PROBE_MAX_S more than the slowest probe of the
 * idle daemon took just before (on a quiet machine a few ms: what the machine's own load
 * adds is not the daemon's doing), and the WATCHDOG=1 pings that m40d
 * sends to NOTIFY_SOCKET (a datagram socket read here, WATCHDOG_USEC set) must never be
 * further apart than half of WATCHDOG_USEC.
 *
 *   test_flood M40D MODEL.gguf MODE
 *
 * MODE 64k:  24 clients x 64 KB prompts, the daemon's defaults (acceptance 2).
 * MODE tok:  the same with max_context = 32768, so that every 64 KB prompt is tokenized
 *            in full (it fits no KV cache and is refused at admission): the per-round
 *            parse budget and the fair order, not the length check, keep the loop going.
 * MODE 8m:   max_prompt_bytes = 8 MiB, 2 clients x 8 MiB prompts.
 *
 * FLOOD_N=n in the environment overrides the number of flooders (0: the probe alone, a
 * baseline for the machine's load). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "itest.h"

#define WATCHDOG_US 4000000 /* the pings must come every 2 s at most */
#define PROBE_MAX_S 2.0
#define RUN_S       10.0
/* A flooder refills its ring (two prompts: the payload area holds two) every 20 ms, more
 * than m40d can tokenize in tok mode; without the pause the test's own copying of the
 * prompts would take the CPU of a 2-core machine from m40d. */
#define FLOOD_PAUSE_US 20000

static const char *sock;
static volatile int stop;
static char *big;
static size_t big_len;
static int n_flood;

static double now_s(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The pings: max gap between WATCHDOG=1 datagrams while the flood runs. */
static int nfd;
static double max_gap, t_flood_start;
static int n_pings;

static void *notify_reader(void *arg)
{
        double last = 0;

        (void)arg;
        while (!stop) {
                char buf[512];
                ssize_t k = recv(nfd, buf, sizeof(buf) - 1, 0);
                double t = now_s();

                if (k <= 0)
                        continue; /* SO_RCVTIMEO */
                buf[k] = 0;
                if (!strstr(buf, "WATCHDOG=1"))
                        continue;
                if (last && t_flood_start && last >= t_flood_start && t - last > max_gap)
                        max_gap = t - last;
                if (t_flood_start && t >= t_flood_start)
                        n_pings++;
                last = t;
        }
        return NULL;
}

struct flood {
        pthread_t th;
        int dropped; /* the daemon closed the connection */
        int connect_err;
        unsigned submitted, ended;
};

static void *flooder(void *arg)
{
        struct flood *f = arg;
        struct m40_client *c;
        struct m40_request rq;
        int r = m40_client_connect(sock, &c);

        if (r) {
                f->connect_err = r;
                return NULL;
        }
        m40_request_init(&rq);
        rq.prompt = big;
        rq.max_tokens = 16;
        while (!stop) {
                struct m40_reply ev;
                uint64_t id;

                /* keep the ring full, then read what came back */
                while (!stop && !(r = m40_client_submit(c, &rq, &id)))
                        f->submitted++;
                if (r && r != -EAGAIN) {
                        f->dropped = r;
                        break;
                }
                usleep(FLOOD_PAUSE_US);
                r = m40_client_next(c, 50, &ev);
                while (!r) {
                        if (ev.type == M40_EVENT_DONE || ev.type == M40_EVENT_ERROR)
                                f->ended++;
                        r = m40_client_next(c, 0, &ev);
                }
                if (r != -EAGAIN && r != -ETIMEDOUT) {
                        f->dropped = r;
                        break;
                }
        }
        m40_client_disconnect(c);
        return NULL;
}

/* One probe: connect, 16 tokens, disconnect; its seconds in *ret_s. */
static int probe(double *ret_s)
{
        double t0 = now_s(), t_conn;
        struct m40_client *c;
        struct m40_request rq;
        uint64_t id;
        char out[4096];
        int32_t toks[64];
        size_t n = 0;
        int r = m40_client_connect(sock, &c);

        if (r) {
                fprintf(stderr, "probe: connect: %s (after %.2f s)\n", strerror(-r), now_s() - t0);
                return r;
        }
        t_conn = now_s() - t0;
        m40_request_init(&rq);
        rq.prompt = itest_prompts[1];
        rq.max_tokens = 16;
        rq.set = M40_SET_TEMPERATURE;
        rq.temperature = 0;
        rq.flags = M40_REQUEST_IGNORE_EOS | M40_REQUEST_TOKENS;
        r = m40_client_submit(c, &rq, &id);
        if (!r)
                r = itest_collect(c, id, out, sizeof(out), toks, 64, &n);
        m40_client_disconnect(c);
        *ret_s = now_s() - t0;
        if (!r && n != 16) {
                fprintf(stderr, "probe: %zu tokens, not 16\n", n);
                r = -EIO;
        }
        if (r)
                fprintf(stderr, "probe: request: %d after %.2f s\n", r, *ret_s);
        if (*ret_s >= PROBE_MAX_S / 2)
                fprintf(stderr, "probe: slow: connected in %.3f s, done in %.3f s\n", t_conn,
                        *ret_s);
        return r;
}

int main(int argc, char **argv)
{
        struct itest_daemon d;
        struct flood fl[24];
        pthread_t nth;
        char ndir[] = "/tmp/m40-flood.XXXXXX", npath[128], extra[256];
        double worst = 0, base = 0, t_end;
        int n_probes = 0, fail = 0;
        const char *mode;

        if (argc != 4)
                return 2;
        if (access(argv[2], R_OK))
                return ITEST_SKIP;
        mode = argv[3];
        if (!strcmp(mode, "64k")) {
                n_flood = 24;
                big_len = 65536 - 64;
                snprintf(extra, sizeof(extra), "max_prompt_bytes = 65536\n");
        } else if (!strcmp(mode, "tok")) {
                n_flood = 24;
                big_len = 65536 - 64;
                snprintf(extra, sizeof(extra),
                         "max_prompt_bytes = 65536\n[engine]\nmax_context = 32768\n"
                         "kv_memory_mib = 1\n");
        } else if (!strcmp(mode, "8m")) {
                n_flood = 2;
                big_len = (8u << 20) - 64;
                snprintf(extra, sizeof(extra), "max_prompt_bytes = 8388608\n");
        } else {
                return 2;
        }
        if (getenv("FLOOD_N"))
                n_flood = atoi(getenv("FLOOD_N"));
        sock = NULL;
        big = malloc(big_len + 1);
        CHECK(big);
        for (size_t i = 0; i < big_len; i++) /* words of a few letters, like a story */
                big[i] = i % 6 == 5 ? ' ' : "etaoinshrdlucmfw"[(i * 7 + i / 6) % 16];
        big[big_len] = 0;

        CHECK(mkdtemp(ndir));
        nfd = itest_notify_open(ndir, npath, sizeof(npath), 200);
        CHECK(nfd >= 0);
        setenv("WATCHDOG_USEC", "4000000", 1);
        unsetenv("WATCHDOG_PID");
        CHECK(!pthread_create(&nth, NULL, notify_reader, NULL));
        if (itest_daemon_start(&d, argv[1], argv[2], extra, npath)) {
                stop = 1;
                pthread_join(nth, NULL);
                return 1;
        }
        sock = d.sock;

        /* the baseline: what the machine's load alone gives a probe */
        t_end = now_s() + 3.0;
        while (now_s() < t_end) {
                double s = 0;

                CHECK(!probe(&s));
                if (s > base)
                        base = s;
                usleep(200000);
        }

        t_flood_start = now_s();
        memset(fl, 0, sizeof(fl));
        for (int i = 0; i < n_flood; i++)
                CHECK(!pthread_create(&fl[i].th, NULL, flooder, &fl[i]));
        usleep(500000); /* let the rings fill */
        t_end = now_s() + RUN_S;
        while (now_s() < t_end) {
                double s = 0;

                n_probes++;
                if (probe(&s))
                        fail = 1;
                if (s > worst)
                        worst = s;
                usleep(300000);
        }
        stop = 1;
        for (int i = 0; i < n_flood; i++)
                pthread_join(fl[i].th, NULL);
        pthread_join(nth, NULL);

        {
                unsigned sub = 0, ended = 0;

                for (int i = 0; i < n_flood; i++) {
                        sub += fl[i].submitted;
                        ended += fl[i].ended;
                        if (fl[i].connect_err || fl[i].dropped) {
                                fprintf(stderr, "flooder %d: connect %d, dropped %d\n", i,
                                        fl[i].connect_err, fl[i].dropped);
                                fail = 1;
                        }
                }
                printf("%s: %d flooders, %u submitted, %u answered; %d probes, slowest "
                       "%.3f s (%.3f s without the flood); %d watchdog pings, largest gap "
                       "%.3f s\n",
                       mode, n_flood, sub, ended, n_probes, worst, base, n_pings, max_gap);
                fflush(stdout);
                if (!ended) {
                        fprintf(stderr, "no flood request was answered\n");
                        fail = 1;
                }
        }
        if (worst >= PROBE_MAX_S + base) {
                fprintf(stderr, "a probe took %.3f s (limit %.1f s + the idle daemon's %.3f s)\n",
                        worst, PROBE_MAX_S, base);
                fail = 1;
        }
        if (n_pings < 2 || max_gap > WATCHDOG_US / 2 / 1e6) {
                fprintf(stderr, "watchdog pings: %d, largest gap %.3f s (limit %.1f s)\n", n_pings,
                        max_gap, WATCHDOG_US / 2 / 1e6);
                fail = 1;
        }
        if (itest_daemon_stop(&d) != 0) {
                fprintf(stderr, "m40d did not exit cleanly; see %s\n", d.log);
                fail = 1;
        }
        unlink(npath);
        rmdir(ndir);
        free(big);
        return fail;
}
