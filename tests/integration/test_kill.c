/* test_kill.c - acceptance 3 of issue 5: 100 times, a client process is killed with
 * SIGKILL in the middle of its stream; meanwhile another client keeps streaming greedy
 * requests and every one must equal its reference; at the end the daemon must report no
 * active sequence and no used KV page.
 *
 *   test_kill M40D MODEL.gguf [ROUNDS]
 *   test_kill --child SOCKET   (the victim: streams until killed; writes 'x' to fd 3 once
 *                               its text is flowing) */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "itest.h"

#define TEXT_CAP 4096

static const char *sock;
static volatile int stop_observer;
static int observed, observer_bad;

static int child(const char *path)
{
        struct m40_client *c;
        struct m40_request rq;
        struct m40_reply ev;
        uint64_t id[4];
        int texts = 0;

        if (m40_client_connect(path, &c))
                return 1;
        m40_request_init(&rq);
        rq.prompt = itest_prompts[getpid() % 8];
        rq.max_tokens = 1000;
        rq.flags = M40_REQUEST_IGNORE_EOS;
        for (int i = 0; i < 4; i++) /* several sequences per victim */
                if (m40_client_submit(c, &rq, &id[i]))
                        return 1;
        while (!m40_client_next(c, 30000, &ev))
                if (ev.type == M40_EVENT_TEXT && ++texts == 8 && write(3, "x", 1) != 1)
                        return 1;
        return 1; /* the parent kills us before any request ends */
}

static void *observer(void *arg)
{
        char ref[8][TEXT_CAP], out[TEXT_CAP];
        int32_t toks[4096];
        size_t n;

        (void)arg;
        for (int p = 0; p < 8; p++)
                if (itest_generate(sock, itest_prompts[p], 40, ref[p], TEXT_CAP, toks, &n)) {
                        observer_bad = 1;
                        return NULL;
                }
        for (int i = 0; !stop_observer; i++) {
                if (itest_generate(sock, itest_prompts[i % 8], 40, out, TEXT_CAP, toks, &n) ||
                    strcmp(out, ref[i % 8])) {
                        fprintf(stderr, "observer: request %d differs or failed\n", i);
                        observer_bad = 1;
                        return NULL;
                }
                observed++;
        }
        return NULL;
}

int main(int argc, char **argv)
{
        struct itest_daemon d;
        pthread_t th;
        int rounds = 100;

        if (argc == 3 && !strcmp(argv[1], "--child"))
                return child(argv[2]);
        if (argc < 3)
                return 2;
        if (argc > 3)
                rounds = atoi(argv[3]);
        if (itest_daemon_start(&d, argv[1], argv[2], "[engine]\nthreads = 2\n", NULL))
                return 1;
        sock = d.sock;
        CHECK(pthread_create(&th, NULL, observer, NULL) == 0);
        for (int i = 0; i < rounds; i++) {
                int p[2], status;
                char x;
                pid_t pid;

                CHECK(pipe(p) == 0);
                pid = fork();
                CHECK(pid >= 0);
                if (pid == 0) {
                        dup2(p[1], 3);
                        execl("/proc/self/exe", argv[0], "--child", sock, (char *)NULL);
                        _exit(127);
                }
                close(p[1]);
                CHECK(read(p[0], &x, 1) == 1); /* its text is streaming */
                close(p[0]);
                kill(pid, SIGKILL);
                CHECK(waitpid(pid, &status, 0) == pid);
                CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        }
        stop_observer = 1;
        pthread_join(th, NULL);
        CHECK(!observer_bad);
        CHECK(observed > 0);
        CHECK(itest_idle(sock) == 0);
        CHECK(itest_daemon_stop(&d) == 0);
        printf("ok: %d clients killed mid-stream; %d observer requests undisturbed; no slot or "
               "KV page leaked\n",
               rounds, observed);
        return 0;
}
