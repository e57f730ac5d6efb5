/* itest.c - helpers of the integration suite (see itest.h). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "itest.h"

const char *const itest_prompts[8] = {
        "Once upon a time",
        "Lily and Tom went to the park",
        "The cat sat",
        "One day, a little boy",
        "There was a big red ball",
        "Mom said",
        "The sun was shining and the birds",
        "A dog named Max",
};

int itest_daemon_start(struct itest_daemon *d, const char *m40d, const char *model,
                       const char *extra, const char *notify)
{
        char ini[160];
        FILE *f;

        snprintf(d->dir, sizeof(d->dir), "/tmp/m40-itest.XXXXXX");
        if (!mkdtemp(d->dir)) {
                perror("mkdtemp");
                return -1;
        }
        snprintf(d->sock, sizeof(d->sock), "%s/m40d.sock", d->dir);
        snprintf(d->log, sizeof(d->log), "%s/m40d.log", d->dir);
        snprintf(ini, sizeof(ini), "%s/m40d.ini", d->dir);
        f = fopen(ini, "w");
        if (!f)
                return -1;
        fprintf(f, "[model]\npath = %s\n[server]\nsocket = %s\ngroup =\n%s\n", model, d->sock,
                extra ? extra : "");
        if (getenv("M40_ITEST_INI")) /* a test run's variant, e.g. [engine] chain_steps */
                fprintf(f, "%s\n", getenv("M40_ITEST_INI"));
        fclose(f);
        d->pid = fork();
        if (d->pid < 0)
                return -1;
        if (d->pid == 0) {
                int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

                if (fd >= 0)
                        dup2(fd, 2);
                prctl(PR_SET_PDEATHSIG, SIGTERM); /* no daemon outlives a killed test */
                if (notify)
                        setenv("NOTIFY_SOCKET", notify, 1);
                else
                        unsetenv("NOTIFY_SOCKET");
                if (getenv("WATCHDOG_USEC")) { /* as systemd sets them: for this pid */
                        char pid[24];

                        snprintf(pid, sizeof(pid), "%d", (int)getpid());
                        setenv("WATCHDOG_PID", pid, 1);
                }
                unsetenv("LISTEN_FDS");
                unsetenv("LISTEN_PID");
                execl(m40d, m40d, "-c", ini, (char *)NULL);
                _exit(127);
        }
        for (int i = 0; i < 600; i++) {
                struct m40_client *c;
                int status;

                if (!m40_client_connect(d->sock, &c)) {
                        m40_client_disconnect(c);
                        return 0;
                }
                if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
                        fprintf(stderr, "m40d exited at start; see %s\n", d->log);
                        d->pid = 0;
                        return -1;
                }
                usleep(50000);
        }
        fprintf(stderr, "m40d did not come up in 30 s; see %s\n", d->log);
        return -1;
}

int itest_daemon_stop(struct itest_daemon *d)
{
        int status;

        if (d->pid <= 0)
                return -1;
        kill(d->pid, SIGTERM);
        if (waitpid(d->pid, &status, 0) != d->pid)
                return -1;
        d->pid = 0;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int itest_collect(struct m40_client *c, uint64_t id, char *out, size_t cap, int32_t *toks,
                  size_t cap_toks, size_t *n_toks)
{
        size_t len = 0;

        *n_toks = 0;
        out[0] = 0;
        for (;;) {
                struct m40_reply ev;
                int r = m40_client_next(c, 60000, &ev);

                if (r)
                        return r;
                if (ev.id != id)
                        continue;
                if (ev.type == M40_EVENT_TEXT) {
                        if (len + ev.len < cap) {
                                memcpy(out + len, ev.text, ev.len);
                                len += ev.len;
                                out[len] = 0;
                        }
                        if (ev.token >= 0 && *n_toks < cap_toks)
                                toks[(*n_toks)++] = ev.token;
                } else if (ev.type == M40_EVENT_DONE) {
                        return 0;
                } else if (ev.type == M40_EVENT_ERROR) {
                        return ev.error ? ev.error : -EIO;
                }
        }
}

int itest_generate(const char *sock, const char *prompt, uint32_t max_tokens, char *out, size_t cap,
                   int32_t *toks, size_t *n_toks)
{
        struct m40_client *c;
        struct m40_request rq;
        uint64_t id;
        int r = m40_client_connect(sock, &c);

        if (r)
                return r;
        m40_request_init(&rq);
        rq.prompt = prompt;
        rq.max_tokens = max_tokens;
        rq.set = M40_SET_TEMPERATURE;
        rq.temperature = 0;
        rq.flags = M40_REQUEST_TOKENS;
        r = m40_client_submit(c, &rq, &id);
        if (!r)
                r = itest_collect(c, id, out, cap, toks, 4096, n_toks);
        m40_client_disconnect(c);
        return r;
}

int itest_idle(const char *sock)
{
        struct m40_status st = {0};

        for (int i = 0; i < 100; i++) {
                struct m40_client *c;
                int r = m40_client_connect(sock, &c);

                if (!r) {
                        r = m40_client_status(c, &st);
                        m40_client_disconnect(c);
                }
                if (!r && !st.active && !st.queued && !st.kv_pages_used)
                        return 0;
                usleep(100000);
        }
        fprintf(stderr, "daemon not idle: %u active, %u queued, %u KV pages used\n", st.active,
                st.queued, st.kv_pages_used);
        return -1;
}

bool itest_file_has(const char *path, const char *needle)
{
        static char buf[1 << 16];
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;

        if (f)
                fclose(f);
        buf[n] = 0;
        if (strstr(buf, needle))
                return true;
        fprintf(stderr, "'%s' not in %s:\n%s\n", needle, path, buf);
        return false;
}

long itest_cpu_ticks(pid_t pid)
{
        char path[64], buf[1024], *p;
        unsigned long ut, stime;
        FILE *f;
        size_t n;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        f = fopen(path, "r");
        if (!f)
                return -1;
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = 0;
        p = strrchr(buf, ')');
        if (!p ||
            sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &stime) != 2)
                return -1;
        return (long)(ut + stime);
}

int itest_notify_open(const char *dir, char *path, size_t cap, int timeout_ms)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
        int fd;

        snprintf(path, cap, "%s/notify", dir);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", path);
        fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -1;
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv))) {
                close(fd);
                return -1;
        }
        return fd;
}

char *itest_story(int n)
{
        static const char *const words[] = {"the", "cat", "sat", "on",  "a",   "mat", "and",
                                            "dog", "ran", "to",  "big", "red", "ball"};
        char *p = malloc((size_t)n * 6 + 1), *w = p;

        if (!p)
                return NULL;
        for (int i = 0; i < n; i++)
                w += sprintf(w, "%s%s", i ? " " : "", words[(i * 7 + i / 13) % 13]);
        return p;
}
