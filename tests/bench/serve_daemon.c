/* tests/bench/serve_daemon.c - m40-serve-bench's m40d: a private configuration and socket in
 * a temporary directory, the process started, waited for, stopped and cleaned up (see
 * serve_bench.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "m40/m40.h"
#include "serve_bench.h"

static void sleep_ms(long ms)
{
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = ms % 1000 * 1000000L};

        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

/* Copies the file at path to f; 0 or -errno. */
static int copy_file(FILE *f, const char *path)
{
        char buf[4096];
        size_t n;
        FILE *in = fopen(path, "r");

        if (!in)
                return -errno;
        while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
                fwrite(buf, 1, n, f);
        n = (size_t)ferror(in);
        fclose(in);
        return n ? -EIO : 0;
}

/* The generated m40d.ini: the base file's keys, then ours (inih hands m40d every line in
 * order, so a later key overrides an earlier one). 0 or -errno with err filled. */
static int write_config(const struct serve_daemon *d, const struct serve_daemon_opts *o, char *err,
                        size_t errlen)
{
        FILE *f = fopen(d->ini, "w");
        int r = 0;

        if (!f) {
                r = -errno;
                snprintf(err, errlen, "cannot write %s: %s", d->ini, strerror(-r));
                return r;
        }
        if (o->base_config) {
                r = copy_file(f, o->base_config);
                if (r) {
                        snprintf(err, errlen, "--config: cannot read %s: %s", o->base_config,
                                 strerror(-r));
                        fclose(f);
                        return r;
                }
                fprintf(f, "\n");
        }
        fprintf(f, "; m40-serve-bench\n[model]\npath = %s\n", o->model);
        fprintf(f, "[engine]\nbackend = %s\nmax_sequences = %u\n", o->engine, o->max_sequences);
        if (o->threads >= 0)
                fprintf(f, "threads = %d\n", o->threads);
        fprintf(f, "[server]\nsocket = %s\ngroup =\nmax_clients = %u\nmax_tokens = %u\n", d->sock,
                o->max_clients, o->max_tokens);
        fprintf(f, "default_max_tokens = %u\nmax_prompt_bytes = %u\n",
                o->max_tokens < 512 ? o->max_tokens : 512, o->max_prompt_bytes);
        if (fclose(f) != 0) {
                r = -errno;
                snprintf(err, errlen, "cannot write %s: %s", d->ini, strerror(-r));
        }
        return r;
}

/* In the child: m40d with its output in the log, dying with this process. */
static void exec_m40d(const struct serve_daemon *d, const struct serve_daemon_opts *o, pid_t parent)
{
        int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int null = open("/dev/null", O_RDWR);

        if (fd < 0 || null < 0)
                _exit(127);
        dup2(null, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) /* the parent died before prctl */
                _exit(127);
        unsetenv("NOTIFY_SOCKET");
        unsetenv("LISTEN_FDS");
        unsetenv("LISTEN_PID");
        unsetenv("LISTEN_FDNAMES");
        execl(o->m40d, o->m40d, "-c", d->ini, (char *)NULL);
        dprintf(2, "m40-serve-bench: cannot run %s: %s\n", o->m40d, strerror(errno));
        _exit(127);
}

/* 0 once the socket accepts a client; -ECHILD, -ETIMEDOUT. */
static int wait_ready(struct serve_daemon *d, unsigned timeout_s, char *err, size_t errlen)
{
        struct timespec t0, t;

        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (;;) {
                struct m40_client *c;
                int status;

                if (!m40_client_connect(d->sock, &c)) {
                        m40_client_disconnect(c);
                        return 0;
                }
                if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
                        d->pid = 0;
                        if (WIFEXITED(status))
                                snprintf(err, errlen, "m40d exited at start with status %d",
                                         WEXITSTATUS(status));
                        else
                                snprintf(err, errlen, "m40d was killed at start by signal %d",
                                         WTERMSIG(status));
                        return -ECHILD;
                }
                clock_gettime(CLOCK_MONOTONIC, &t);
                if (t.tv_sec - t0.tv_sec >= (time_t)timeout_s) {
                        snprintf(err, errlen,
                                 "m40d did not accept clients within %u s (--start-timeout)",
                                 timeout_s);
                        return -ETIMEDOUT;
                }
                sleep_ms(50);
        }
}

int serve_daemon_start(struct serve_daemon *d, const struct serve_daemon_opts *o, char *err,
                       size_t errlen)
{
        const char *tmp = getenv("TMPDIR");
        pid_t parent = getpid();
        int r;

        memset(d, 0, sizeof(*d));
        if (!tmp || !*tmp)
                tmp = "/tmp";
        if ((size_t)snprintf(d->dir, sizeof(d->dir), "%s/m40-serve-bench.XXXXXX", tmp) >=
                    sizeof(d->dir) - 16 ||
            (size_t)snprintf(d->sock, sizeof(d->sock), "%s/m40d.sock", d->dir) >= sizeof(d->sock)) {
                d->dir[0] = 0;
                snprintf(err, errlen, "TMPDIR %s is too long for a socket path", tmp);
                return -ENAMETOOLONG;
        }
        if (!mkdtemp(d->dir)) {
                r = -errno;
                snprintf(err, errlen, "cannot make a directory in %s: %s", tmp, strerror(-r));
                d->dir[0] = 0;
                return r;
        }
        if ((size_t)snprintf(d->sock, sizeof(d->sock), "%s/m40d.sock", d->dir) >= sizeof(d->sock))
                return -ENAMETOOLONG; /* mkdtemp keeps the length: checked above */
        snprintf(d->ini, sizeof(d->ini), "%s/m40d.ini", d->dir);
        d->own_log = !o->log;
        if (o->log)
                snprintf(d->log, sizeof(d->log), "%s", o->log);
        else
                snprintf(d->log, sizeof(d->log), "%s/m40d.log", d->dir);
        r = write_config(d, o, err, errlen);
        if (r)
                return r;
        d->pid = fork();
        if (d->pid < 0) {
                r = -errno;
                d->pid = 0;
                snprintf(err, errlen, "cannot fork: %s", strerror(-r));
                return r;
        }
        if (d->pid == 0)
                exec_m40d(d, o, parent);
        r = wait_ready(d, o->start_timeout_s, err, errlen);
        if (r == -ETIMEDOUT)
                serve_daemon_stop(d, 10);
        return r;
}

int serve_daemon_stop(struct serve_daemon *d, unsigned timeout_s)
{
        int status;

        if (d->pid <= 0)
                return -ECHILD;
        kill(d->pid, SIGTERM);
        for (unsigned i = 0; i < timeout_s * 50u; i++) {
                if (waitpid(d->pid, &status, WNOHANG) == d->pid)
                        goto reaped;
                sleep_ms(20);
        }
        kill(d->pid, SIGKILL);
        if (waitpid(d->pid, &status, 0) != d->pid) {
                d->pid = 0;
                return -ECHILD;
        }
reaped:
        d->pid = 0;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void serve_daemon_done(struct serve_daemon *d, bool keep)
{
        DIR *dir;
        struct dirent *e;

        if (d->pid > 0)
                serve_daemon_stop(d, 30);
        if (keep || !d->dir[0])
                return;
        dir = opendir(d->dir);
        if (dir) {
                while ((e = readdir(dir)))
                        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                                unlinkat(dirfd(dir), e->d_name, 0);
                closedir(dir);
        }
        rmdir(d->dir);
        d->dir[0] = 0;
}

void serve_daemon_log_tail(const struct serve_daemon *d, FILE *f, int lines)
{
        static char buf[16384];
        FILE *in = fopen(d->log, "r");
        size_t n;
        char *p;
        int seen = 0;

        if (!in)
                return;
        if (fseek(in, 0, SEEK_END) == 0 && ftell(in) > (long)sizeof(buf) - 1)
                fseek(in, -(long)sizeof(buf) + 1, SEEK_END);
        else
                rewind(in);
        n = fread(buf, 1, sizeof(buf) - 1, in);
        fclose(in);
        buf[n] = 0;
        while (n && buf[n - 1] == '\n')
                buf[--n] = 0;
        for (p = buf + n; p > buf; p--)
                if (p[-1] == '\n' && ++seen == lines)
                        break;
        fprintf(f, "m40d's log (%s), last lines:\n", d->log);
        while (*p) {
                char *nl = strchr(p, '\n');

                fprintf(f, "    %.*s\n", nl ? (int)(nl - p) : (int)strlen(p), p);
                p = nl ? nl + 1 : p + strlen(p);
        }
}
