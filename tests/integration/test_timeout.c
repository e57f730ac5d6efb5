/* test_timeout.c - issue 20 item 9: clients do not hang on a stopped daemon. With m40d
 * stopped (SIGSTOP), `m40ctl status`, `submit` and `run` with --timeout 1 end within a few
 * seconds with "m40d did not answer within 1 s" (exit 3); libm40's connect and STATUS
 * return -ETIMEDOUT within their timeout; after SIGCONT a connection whose STATUS timed
 * out works again. The timeout is for silence only: a request that waits its turn behind
 * another one (max_sequences = 1, the slot held by a client that does not read) for
 * longer than --timeout still completes, because m40d answers the status probes.
 *
 *   test_timeout M40D M40CTL MODEL.gguf */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "itest.h"

static const char *m40ctl;
static char errpath[160];

static double now_s(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ctl - runs m40ctl with args (NULL-terminated), stdin from input (may be NULL: /dev/null),
 * stderr into errpath; kills it after 20 s. Returns its exit status (-1 when killed) and
 * the seconds it took in *secs. */
static int ctl(const char *input, double *secs, char *const args[])
{
        char *argv[16] = {(char *)m40ctl};
        double t0 = now_s();
        int status, pipefd[2], n = 1;
        pid_t pid;

        for (; args[n - 1] && n < 15; n++)
                argv[n] = args[n - 1];
        argv[n] = NULL;
        if (pipe(pipefd))
                return -1;
        pid = fork();
        if (pid == 0) {
                int e = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
                int o = open("/dev/null", O_WRONLY);

                dup2(pipefd[0], 0);
                dup2(o, 1);
                dup2(e, 2);
                close(pipefd[1]);
                alarm(20);
                execv(m40ctl, argv);
                _exit(127);
        }
        close(pipefd[0]);
        if (input && write(pipefd[1], input, strlen(input)) < 0)
                perror("write");
        close(pipefd[1]);
        waitpid(pid, &status, 0);
        *secs = now_s() - t0;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* A stopped daemon: each command ends, exit 3, with the message, in under 8 s. */
static int stopped_cli(const char *sock)
{
        static const char *const msg = "m40d did not answer within 1 s";
        double t;
        int r;

        r = ctl(NULL, &t, (char *[]){"status", "--timeout", "1", "--socket", (char *)sock, NULL});
        printf("status on a stopped m40d: exit %d after %.1f s\n", r, t);
        CHECK(r == 3 && t < 8 && itest_file_has(errpath, msg));
        r = ctl(NULL, &t,
                (char *[]){"submit", "--timeout", "1", "--socket", (char *)sock, "Once", NULL});
        printf("submit on a stopped m40d: exit %d after %.1f s\n", r, t);
        CHECK(r == 3 && t < 8 && itest_file_has(errpath, msg));
        r = ctl("hello\n", &t, (char *[]){"run", "--timeout", "1", "--socket", (char *)sock, NULL});
        printf("run on a stopped m40d: exit %d after %.1f s\n", r, t);
        CHECK(r == 3 && t < 8 && itest_file_has(errpath, msg));
        return 0;
}

/* A request queued behind a held slot for longer than --timeout completes. */
static int queued_silence(const char *sock)
{
        struct m40_client *holder;
        struct m40_request rq;
        struct m40_status st;
        uint64_t id;
        double t;
        pid_t pid;
        int r;

        /* the holder, a child, never reads: its event ring fills and its sequence keeps
         * the only slot until the child exits after 3 s */
        pid = fork();
        if (pid == 0) {
                m40_request_init(&rq);
                rq.prompt = "Once upon a time";
                rq.max_tokens = 1500;
                rq.flags = M40_REQUEST_IGNORE_EOS;
                if (m40_client_connect(sock, &holder) || m40_client_submit(holder, &rq, &id))
                        _exit(1);
                sleep(3);
                _exit(0);
        }
        for (int i = 0; i < 100; i++) {
                if (!m40_client_connect(sock, &holder)) {
                        r = m40_client_status(holder, &st);
                        m40_client_disconnect(holder);
                        if (!r && st.active)
                                break;
                }
                usleep(20000);
        }
        r = ctl(NULL, &t,
                (char *[]){"submit", "--timeout", "1", "-n", "4", "--socket", (char *)sock,
                           "The cat", NULL});
        waitpid(pid, NULL, 0);
        printf("submit queued behind a held slot: exit %d after %.1f s\n", r, t);
        if (r)
                itest_file_has(errpath, "(m40ctl should have exited 0)");
        CHECK(r == 0);
        return 0;
}

int main(int argc, char **argv)
{
        struct itest_daemon d;
        struct m40_client *a, *b;
        struct m40_status st;
        double t;
        int r, bad = 0;

        if (argc != 4)
                return 2;
        m40ctl = argv[2];
        if (access(argv[3], R_OK))
                return ITEST_SKIP;
        if (itest_daemon_start(&d, argv[1], argv[3], "[engine]\nmax_sequences = 1", NULL))
                return 1;
        snprintf(errpath, sizeof(errpath), "%s/ctl.err", d.dir);
        CHECK(m40_client_connect(d.sock, &a) == 0);
        CHECK(m40_client_set_timeout(a, 0) == -EINVAL);
        CHECK(m40_client_set_timeout(a, 1000) == 0);
        CHECK(m40_client_status(a, &st) == 0);

        kill(d.pid, SIGSTOP);
        bad |= stopped_cli(d.sock);
        t = now_s();
        r = m40_client_connect_timeout(d.sock, 1000, &b);
        t = now_s() - t;
        printf("libm40 connect to a stopped m40d: %s after %.1f s\n", m40_strerror(r), t);
        bad |= r != -ETIMEDOUT || t < 0.9 || t > 8;
        t = now_s();
        r = m40_client_status(a, &st);
        t = now_s() - t;
        printf("libm40 status from a stopped m40d: %s after %.1f s\n", m40_strerror(r), t);
        bad |= r != -ETIMEDOUT || t < 0.9 || t > 8;
        kill(d.pid, SIGCONT);
        /* the late answer of the timed-out STATUS is skipped: the next one is right */
        memset(&st, 0, sizeof(st));
        r = m40_client_status(a, &st);
        printf("libm40 status after SIGCONT: %s, n_ctx %u\n", m40_strerror(r), st.n_ctx);
        bad |= r != 0 || st.n_ctx != 2048;
        m40_client_disconnect(a);

        bad |= queued_silence(d.sock);
        CHECK(itest_daemon_stop(&d) == 0);
        return bad;
}
