/* test_fdlimit.c - issue 20 item 3: m40d and its open file limit.
 *  1. A soft RLIMIT_NOFILE below what max_clients needs is raised at start (up to the hard
 *     limit).
 *  2. Out of descriptors (the limit lowered under the running daemon with prlimit): new
 *     connections are refused promptly instead of hanging, m40d does not spin on accept
 *     (its CPU time stays low while they wait), says so in its log, and accepts again once
 *     descriptors are back.
 *  3. A hard limit too low for max_clients: m40d serves fewer clients, says how many, and
 *     refuses the next one instead of running out of descriptors.
 *
 *   test_fdlimit M40D MODEL.gguf */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "itest.h"

/* Soft open-file limit of pid, from /proc. */
static long soft_limit(pid_t pid)
{
        char path[64], line[256];
        long v = -1;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/limits", (int)pid);
        f = fopen(path, "r");
        if (!f)
                return -1;
        while (fgets(line, sizeof(line), f))
                if (!strncmp(line, "Max open files", 14))
                        v = strtol(line + 14, NULL, 10);
        fclose(f);
        return v;
}

static int n_fds(pid_t pid)
{
        char path[64];
        struct dirent *e;
        int n = 0;
        DIR *dir;

        snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
        dir = opendir(path);
        if (!dir)
                return -1;
        while ((e = readdir(dir)))
                n += e->d_name[0] != '.';
        closedir(dir);
        return n;
}

/* CPU seconds (user + system) pid has used. */
static double cpu_s(pid_t pid)
{
        return (double)itest_cpu_ticks(pid) / (double)sysconf(_SC_CLK_TCK);
}

/* Connects with libm40 in a child, waiting up to ms: 0 connected, 1 refused (an error
 * came back), 2 no answer in time (a hang). */
static int try_connect(const char *sock, int ms)
{
        pid_t pid = fork();

        if (pid == 0) {
                struct m40_client *c;
                int r = m40_client_connect(sock, &c);

                if (!r)
                        _exit(0);
                fprintf(stderr, "  (connect: %s)\n", strerror(-r));
                _exit(1);
        }
        for (int i = 0; i < ms / 20; i++) {
                int st;

                if (waitpid(pid, &st, WNOHANG) == pid)
                        return WIFEXITED(st) && WEXITSTATUS(st) <= 1 ? WEXITSTATUS(st) : 1;
                usleep(20000);
        }
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return 2;
}

static int raw_connect(const char *sock)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

        snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", sock);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
                close(fd);
                return -1;
        }
        return fd;
}

int main(int argc, char **argv)
{
        struct itest_daemon d;
        struct rlimit orig, rl;
        struct m40_client *keep[20];
        char out[256];
        int32_t toks[16];
        size_t n;
        int raw[3], k;
        double cpu;
        long soft;

        if (argc != 3)
                return 2;
        if (access(argv[2], R_OK))
                return ITEST_SKIP;
        CHECK(!getrlimit(RLIMIT_NOFILE, &orig));
        if (orig.rlim_max != RLIM_INFINITY && orig.rlim_max < 1024) {
                fprintf(stderr, "hard open file limit %llu < 1024\n",
                        (unsigned long long)orig.rlim_max);
                return ITEST_SKIP;
        }

        /* 1. the soft limit is raised to what max_clients needs */
        rl = (struct rlimit){.rlim_cur = 256, .rlim_max = orig.rlim_max};
        CHECK(!setrlimit(RLIMIT_NOFILE, &rl));
        k = itest_daemon_start(&d, argv[1], argv[2], "max_clients = 200", NULL);
        CHECK(!setrlimit(RLIMIT_NOFILE, &orig));
        CHECK(!k);
        soft = soft_limit(d.pid);
        printf("1. max_clients = 200 under a soft limit of 256: m40d's soft limit is %ld\n", soft);
        CHECK(soft >= 200 * 4 + 64);
        CHECK(itest_daemon_stop(&d) == 0);

        /* 2. out of descriptors under a running daemon */
        CHECK(!itest_daemon_start(&d, argv[1], argv[2], NULL, NULL));
        keep[0] = NULL;
        CHECK(!m40_client_connect(d.sock, &keep[0]));
        k = n_fds(d.pid);
        CHECK(k > 0);
        rl = (struct rlimit){.rlim_cur = (rlim_t)k, .rlim_max = orig.rlim_max};
        CHECK(!prlimit(d.pid, RLIMIT_NOFILE, &rl, NULL));
        for (int i = 0; i < 3; i++)
                raw[i] = raw_connect(d.sock); /* connected clients that wait for an accept */
        usleep(300000);
        cpu = cpu_s(d.pid);
        sleep(2);
        cpu = cpu_s(d.pid) - cpu;
        k = try_connect(d.sock, 5000);
        printf("2. at the limit: m40d used %.2f s of CPU in 2 s; a new client %s\n", cpu,
               k == 0   ? "connected"
               : k == 1 ? "was refused"
                        : "got no answer in 5 s");
        for (int i = 0; i < 3; i++)
                if (raw[i] >= 0)
                        close(raw[i]);
        CHECK(cpu < 0.3);
        CHECK(k == 1);
        if (!itest_file_has(d.log, "out of file descriptors")) {
                fprintf(stderr, "m40d's log does not mention it; see %s\n", d.log);
                return 1;
        }
        rl.rlim_cur = orig.rlim_cur;
        CHECK(!prlimit(d.pid, RLIMIT_NOFILE, &rl, NULL));
        usleep(300000); /* the pause after the last failed accept */
        CHECK(!itest_generate(d.sock, itest_prompts[0], 4, out, sizeof(out), toks, &n));
        m40_client_disconnect(keep[0]);
        CHECK(itest_daemon_stop(&d) == 0);

        /* 3. a hard limit of 128 leaves room for (128 - 64) / 4 = 16 clients */
        rl = (struct rlimit){.rlim_cur = 128, .rlim_max = 128};
        CHECK(!setrlimit(RLIMIT_NOFILE, &rl)); /* for good: this is the last part */
        CHECK(!itest_daemon_start(&d, argv[1], argv[2], "max_clients = 4096", NULL));
        if (!itest_file_has(d.log, "serving at most 16 clients")) {
                fprintf(stderr, "m40d's log does not say how many clients it serves; see %s\n",
                        d.log);
                return 1;
        }
        for (int i = 0; i < 16; i++)
                CHECK(!m40_client_connect(d.sock, &keep[i]));
        k = try_connect(d.sock, 5000);
        printf("3. hard limit 128: the 17th client %s\n", k == 0   ? "connected"
                                                          : k == 1 ? "was refused"
                                                                   : "got no answer in 5 s");
        CHECK(k == 1);
        for (int i = 0; i < 16; i++)
                m40_client_disconnect(keep[i]);
        CHECK(!itest_generate(d.sock, itest_prompts[0], 4, out, sizeof(out), toks, &n));
        CHECK(itest_daemon_stop(&d) == 0);
        return 0;
}
