/* test_stuck.c - issue 21 scope 5: an engine step that runs over [engine] step_timeout_ms
 * stops m40d's systemd watchdog pings. m40d runs with step_timeout_ms = STEP_TIMEOUT_MS,
 * NOTIFY_SOCKET a datagram socket read here and WATCHDOG_USEC = WATCHDOG_US with
 * WATCHDOG_PID its own pid (as systemd sets them, itest.h), so that it pings WATCHDOG=1
 * every WATCHDOG_US / 4. A long CPU prefill in one step (max_batch_tokens = max_context,
 * one thread) stands for a stuck engine: it must run at least MIN_STEP_S, several times
 * the timeout. Its length is fitted to the machine as test_responsive.c does (a sanitizer
 * build prefills some 25 times slower): the first prompt has FIRST_WORDS words, and while
 * a step takes less than MIN_STEP_S the test runs again with a prompt long enough for
 * twice that, up to MAX_WORDS; a machine that prefills MAX_WORDS in less than MIN_STEP_S
 * makes the test fail (too short to test). Checks of the last step, by the monotonic
 * clock that the daemon's event times use:
 *   - pings arrive before the step: at least MIN_PINGS in the WINDOW_S before it;
 *   - no ping from STEP_TIMEOUT_MS + SLACK_MS after the step's admission until its first
 *     token, and an sd_notify STATUS saying "engine stuck" in that time;
 *   - STATUS requests are still answered while the engine is stuck, showing the sequence;
 *   - the log has the LOG_CRIT line of the stuck step and the line of its recovery;
 *   - pings resume after it: at least MIN_PINGS in the WINDOW_S after the first token;
 *   - the request completes and m40d stops cleanly.
 * Before m40d watched its steps, the pings went on every WATCHDOG_US / 4 through the step.
 *
 *   test_stuck M40D MODEL.gguf */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "itest.h"

#define STEP_TIMEOUT_MS 250
#define WATCHDOG_US     400000 /* a ping every 100 ms */
#define SLACK_MS        150    /* a loop round late on a loaded machine */
#define MIN_STEP_S      1.0
#define WINDOW_S        1.0
#define MIN_PINGS       3
#define FIRST_WORDS     50
#define MAX_WORDS       2600 /* about 4000 tokens of stories260K: max_context 4096 */
#define MAX_NOTES       4096

static int nfd;
static volatile int stop;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* of what follows */
static int stuck_seen; /* a STATUS= with "engine stuck" arrived since the caller cleared it */
/* every WATCHDOG=1 (its time, ns), and the times of "engine stuck" STATUS= */
static uint64_t pings[MAX_NOTES], stucks[MAX_NOTES];
static int n_pings, n_stucks;

static uint64_t now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *notify_reader(void *arg)
{
        (void)arg;
        while (!stop) {
                char buf[1024];
                ssize_t k = recv(nfd, buf, sizeof(buf) - 1, 0);
                const uint64_t t = now_ns();

                if (k <= 0)
                        continue; /* SO_RCVTIMEO */
                buf[k] = 0;
                pthread_mutex_lock(&lock);
                if (strstr(buf, "WATCHDOG=1") && n_pings < MAX_NOTES)
                        pings[n_pings++] = t;
                if (strstr(buf, "STATUS=") && strstr(buf, "engine stuck") && n_stucks < MAX_NOTES) {
                        stucks[n_stucks++] = t;
                        stuck_seen = 1;
                }
                pthread_mutex_unlock(&lock);
        }
        return NULL;
}

/* count - the times of t[0..n) in [from, to). */
static int count(const uint64_t *t, int n, uint64_t from, uint64_t to)
{
        int k = 0;

        for (int i = 0; i < n; i++)
                k += t[i] >= from && t[i] < to;
        return k;
}

static bool is_stuck(void)
{
        bool r;

        pthread_mutex_lock(&lock);
        r = stuck_seen;
        pthread_mutex_unlock(&lock);
        return r;
}

/* long_step - submits a prompt of words words for 4 tokens; while it prefills, one STATUS
 * request once m40d has said the engine is stuck (it must show the sequence: *probed);
 * reads the request to its end. The daemon's times of its admission and first token in
 * *t_admit, *t_first. */
static int long_step(const char *sock, int words, uint64_t *t_admit, uint64_t *t_first,
                     bool *probed)
{
        struct m40_client *a;
        struct m40_request rq;
        char *prompt = itest_story(words);
        uint64_t id;

        pthread_mutex_lock(&lock);
        stuck_seen = 0;
        pthread_mutex_unlock(&lock);
        *probed = false;
        *t_admit = *t_first = 0;

        CHECK(prompt && !m40_client_connect(sock, &a));
        m40_request_init(&rq);
        rq.prompt = prompt;
        rq.max_tokens = 4;
        rq.set = M40_SET_TEMPERATURE;
        rq.temperature = 0;
        rq.flags = M40_REQUEST_IGNORE_EOS;
        CHECK(!m40_client_submit(a, &rq, &id));
        free(prompt);
        for (;;) {
                struct m40_reply ev;
                int r = m40_client_next(a, 20, &ev);

                if (r == -ETIMEDOUT || r == -EAGAIN) {
                        struct m40_client *p;
                        struct m40_status st;

                        if (*probed || *t_first || !is_stuck())
                                continue;
                        *probed = true;
                        CHECK(!m40_client_connect(sock, &p));
                        CHECK(!m40_client_status(p, &st));
                        m40_client_disconnect(p);
                        CHECK(st.active == 1);
                        continue;
                }
                CHECK(r == 0);
                if (ev.type == M40_EVENT_ADMITTED)
                        *t_admit = ev.t_daemon_ns;
                if (ev.type == M40_EVENT_TEXT && !*t_first)
                        *t_first = ev.t_daemon_ns;
                if (ev.type == M40_EVENT_ERROR)
                        fprintf(stderr, "the long request: error %d: %s\n", ev.error, ev.text);
                CHECK(ev.type != M40_EVENT_ERROR);
                if (ev.type == M40_EVENT_DONE)
                        break;
        }
        m40_client_disconnect(a);
        CHECK(*t_admit && *t_first > *t_admit);
        return 0;
}

/* judge - the pings and notes around the step [t_admit, t_first]. */
static int judge(const char *log, uint64_t t_submit, uint64_t t_admit, uint64_t t_first,
                 bool probed)
{
        const uint64_t w = (uint64_t)(WINDOW_S * 1e9);
        const uint64_t quiet = t_admit + (STEP_TIMEOUT_MS + SLACK_MS) * 1000000ull;
        const double step_s = (double)(t_first - t_admit) * 1e-9;
        const int before = count(pings, n_pings, t_submit - w, t_submit);
        const int during = count(pings, n_pings, quiet, t_first);
        const int after = count(pings, n_pings, t_first, t_first + w);
        const int stuck = count(stucks, n_stucks, t_admit, t_first);
        int fail = 0;

        printf("step %.2f s (timeout %d ms); WATCHDOG=1: %d in the %.1f s before it, %d from "
               "%d ms into it to its end, %d in the %.1f s after it; %d \"engine stuck\" "
               "STATUS during it\n",
               step_s, STEP_TIMEOUT_MS, before, WINDOW_S, during, STEP_TIMEOUT_MS + SLACK_MS, after,
               WINDOW_S, stuck);
        if (step_s < MIN_STEP_S) {
                fprintf(stderr, "the step took %.2f s: too short to test\n", step_s);
                fail = 1;
        }
        if (before < MIN_PINGS || after < MIN_PINGS) {
                fprintf(stderr, "too few pings before (%d) or after (%d) the step\n", before,
                        after);
                fail = 1;
        }
        if (during) {
                fprintf(stderr, "%d pings while the step was over its timeout\n", during);
                fail = 1;
        }
        if (!stuck) {
                fprintf(stderr, "no STATUS said the engine was stuck\n");
                fail = 1;
        }
        if (!probed) {
                fprintf(stderr, "no STATUS request was made while the engine was stuck\n");
                fail = 1;
        }
        if (!itest_file_has(log, "<2>the engine step has run for") ||
            !itest_file_has(log, "the stuck engine step finished after"))
                fail = 1;
        return fail;
}

/* run - waits WINDOW_S (the pings before), then long steps of growing prompts until one
 * takes MIN_STEP_S or has MAX_WORDS, each followed by WINDOW_S (the pings after, and
 * before the next). The last one's figures in the arguments. */
static int run(const char *sock, uint64_t *t_submit, uint64_t *t_admit, uint64_t *t_first,
               bool *probed)
{
        int words = FIRST_WORDS;

        usleep((useconds_t)(WINDOW_S * 1e6) + 200000);
        for (;;) {
                double step_s, more;

                *t_submit = now_ns();
                CHECK(!long_step(sock, words, t_admit, t_first, probed));
                usleep((useconds_t)(WINDOW_S * 1e6) + 200000);
                step_s = (double)(*t_first - *t_admit) * 1e-9;
                if (step_s >= MIN_STEP_S || words == MAX_WORDS)
                        return 0;
                printf("a step of %d words took %.2f s: longer\n", words, step_s);
                more = sqrt(2.0 * MIN_STEP_S / (step_s > 0.01 ? step_s : 0.01));
                words = more < 2.0 ? 2 * words : (int)(words * more);
                words = words < MAX_WORDS ? words : MAX_WORDS;
        }
}

int main(int argc, char **argv)
{
        struct itest_daemon d;
        char ndir[] = "/tmp/m40-stuck.XXXXXX", npath[128], extra[256], wd[32];
        uint64_t t_submit = 0, t_admit = 0, t_first = 0;
        bool probed = false;
        pthread_t nth;
        int fail;

        if (argc != 3)
                return 2;
        if (access(argv[2], R_OK))
                return ITEST_SKIP;
        CHECK(mkdtemp(ndir));
        nfd = itest_notify_open(ndir, npath, sizeof(npath), 100);
        CHECK(nfd >= 0);
        snprintf(wd, sizeof(wd), "%d", WATCHDOG_US);
        setenv("WATCHDOG_USEC", wd, 1);
        snprintf(extra, sizeof(extra),
                 "max_prompt_bytes = 65536\n[engine]\nbackend = cpu\nthreads = 1\n"
                 "max_context = 4096\nmax_batch_tokens = 4096\nstep_timeout_ms = %d\n",
                 STEP_TIMEOUT_MS);
        CHECK(!pthread_create(&nth, NULL, notify_reader, NULL));
        fail = itest_daemon_start(&d, argv[1], argv[2], extra, npath) ? 1 : 0;
        if (!fail) {
                fail = run(d.sock, &t_submit, &t_admit, &t_first, &probed);
                if (itest_daemon_stop(&d) != 0) {
                        fprintf(stderr, "m40d did not exit cleanly; see %s\n", d.log);
                        fail = 1;
                }
        }
        stop = 1;
        pthread_join(nth, NULL);
        close(nfd);
        unlink(npath);
        rmdir(ndir);
        if (!fail)
                fail = judge(d.log, t_submit, t_admit, t_first, probed);
        return fail;
}
