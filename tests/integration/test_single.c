/* test_single.c - issue 20 item 5: one m40d per socket. A second m40d started on the
 * socket of a running one must refuse ("already running", with the first one's pid) and
 * exit 1, leaving the first one reachable; the first one removes its socket file when it
 * stops; a socket that systemd passed (socket activation) is never removed.
 *
 *   test_single M40D MODEL.gguf */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "itest.h"

/* Runs m40d -c ini with stderr to log; LISTEN_FDS=1 with lfd as fd 3 when lfd >= 0. */
static pid_t spawn(const char *m40d, const char *ini, const char *log, int lfd)
{
        pid_t pid = fork();

        if (pid == 0) {
                char buf[16];
                int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

                if (fd >= 0)
                        dup2(fd, 2);
                prctl(PR_SET_PDEATHSIG, SIGTERM);
                unsetenv("NOTIFY_SOCKET");
                unsetenv("LISTEN_FDS");
                unsetenv("LISTEN_PID");
                if (lfd >= 0) {
                        dup2(lfd, 3);
                        snprintf(buf, sizeof(buf), "%d", (int)getpid());
                        setenv("LISTEN_PID", buf, 1);
                        setenv("LISTEN_FDS", "1", 1);
                }
                execl(m40d, m40d, "-c", ini, (char *)NULL);
                _exit(127);
        }
        return pid;
}

/* Waits up to ms for pid; returns its exit status, or -1 if it still runs. */
static int wait_exit(pid_t pid, int ms)
{
        for (int i = 0; i < ms / 20; i++) {
                int st;

                if (waitpid(pid, &st, WNOHANG) == pid)
                        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                usleep(20000);
        }
        return -1;
}

int main(int argc, char **argv)
{
        struct itest_daemon d;
        struct stat st;
        char ini[160], log2[160], want[64], out[256], sock2[160];
        int32_t toks[32];
        size_t n;
        pid_t p2;
        int r, lfd;

        if (argc != 3)
                return 2;
        if (access(argv[2], R_OK))
                return ITEST_SKIP;
        if (itest_daemon_start(&d, argv[1], argv[2], NULL, NULL))
                return 1;
        snprintf(ini, sizeof(ini), "%s/m40d.ini", d.dir);
        snprintf(log2, sizeof(log2), "%s/second.log", d.dir);

        /* a second daemon on the same socket */
        p2 = spawn(argv[1], ini, log2, -1);
        CHECK(p2 > 0);
        r = wait_exit(p2, 20000);
        if (r < 0) {
                kill(p2, SIGKILL);
                waitpid(p2, NULL, 0);
        }
        printf("second m40d: exit %d\n", r);
        CHECK(r == 1);
        snprintf(want, sizeof(want), "already running (pid %d)", (int)d.pid);
        if (!itest_file_has(log2, want)) {
                fprintf(stderr, "the second m40d's log lacks \"%s\"; see %s\n", want, log2);
                return 1;
        }
        /* the first one still answers on its socket */
        CHECK(!itest_generate(d.sock, itest_prompts[0], 8, out, sizeof(out), toks, &n));
        CHECK(n == 8);

        /* it removes its socket when it stops */
        CHECK(itest_daemon_stop(&d) == 0);
        CHECK(lstat(d.sock, &st) && errno == ENOENT);

        /* a stale socket file is replaced: start again on it */
        {
                struct sockaddr_un sa = {.sun_family = AF_UNIX};
                int fd = socket(AF_UNIX, SOCK_STREAM, 0);

                snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", d.sock);
                CHECK(fd >= 0 && !bind(fd, (struct sockaddr *)&sa, sizeof(sa)));
                close(fd);
        }
        p2 = spawn(argv[1], ini, log2, -1);
        for (int i = 0; i < 600; i++) {
                struct m40_client *c;

                if (!m40_client_connect(d.sock, &c)) {
                        m40_client_disconnect(c);
                        break;
                }
                CHECK(wait_exit(p2, 40) < 0);
        }
        kill(p2, SIGTERM);
        CHECK(wait_exit(p2, 20000) == 0);
        CHECK(lstat(d.sock, &st) && errno == ENOENT);

        /* socket activation: the passed socket's file stays */
        snprintf(sock2, sizeof(sock2), "%s/activated.sock", d.dir);
        {
                struct sockaddr_un sa = {.sun_family = AF_UNIX};

                lfd = socket(AF_UNIX, SOCK_STREAM, 0);
                snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", sock2);
                CHECK(lfd >= 0 && !bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) &&
                      !listen(lfd, 16));
        }
        p2 = spawn(argv[1], ini, log2, lfd);
        close(lfd);
        for (int i = 0; i < 600; i++) {
                struct m40_client *c;

                if (!m40_client_connect(sock2, &c)) {
                        m40_client_disconnect(c);
                        break;
                }
                CHECK(wait_exit(p2, 40) < 0);
        }
        CHECK(!itest_generate(sock2, itest_prompts[2], 4, out, sizeof(out), toks, &n));
        kill(p2, SIGTERM);
        CHECK(wait_exit(p2, 20000) == 0);
        CHECK(!lstat(sock2, &st) && S_ISSOCK(st.st_mode));
        unlink(sock2);
        unlink(log2);
        unlink(d.log);
        snprintf(out, sizeof(out), "%s/m40d.ini", d.dir);
        unlink(out);
        rmdir(d.dir);
        return 0;
}
