/* itest.h - helpers of the integration suite: start a real m40d on a temporary config and
 * socket, stop it, and run one greedy request to completion with libm40. */
#ifndef M40_ITEST_H
#define M40_ITEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "m40/m40.h"

#define ITEST_SKIP 77

#define CHECK(cond)                                                                                \
        do {                                                                                       \
                if (!(cond)) {                                                                     \
                        fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);   \
                        return 1;                                                                  \
                }                                                                                  \
        } while (0)

struct itest_daemon {
        pid_t pid;
        char dir[64];
        char sock[128];
        char log[128];
};

/* itest_daemon_start - runs m40d (binary m40d) serving model, with extra lines appended to
 * its ini (may be NULL), then the environment's M40_ITEST_INI when set (the meson tests of
 * a variant: a section and its keys), and NOTIFY_SOCKET=notify when not NULL; when the caller's
 * environment has WATCHDOG_USEC, m40d gets it with WATCHDOG_PID = m40d's own pid, as systemd
 * sets them (sd_watchdog_enabled() is then on). Waits until the socket accepts a client. Returns 0,
 * or -1 (message on stderr). */
int itest_daemon_start(struct itest_daemon *d, const char *m40d, const char *model,
                       const char *extra, const char *notify);
/* itest_daemon_stop - SIGTERM, wait; returns m40d's exit status (128+signal if killed). */
int itest_daemon_stop(struct itest_daemon *d);

/* itest_generate - one greedy request of prompt for max_tokens on a new connection; its
 * text into out (NUL-terminated) and its token ids into toks (n_toks). Returns 0, or a
 * negative code. */
int itest_generate(const char *sock, const char *prompt, uint32_t max_tokens, char *out, size_t cap,
                   int32_t *toks, size_t *n_toks);

/* itest_collect - reads events of c until request id ends; text into out, tokens into
 * toks (cap_toks). Returns 0 on DONE, the ERROR's code, or a libm40 error. */
int itest_collect(struct m40_client *c, uint64_t id, char *out, size_t cap, int32_t *toks,
                  size_t cap_toks, size_t *n_toks);

/* itest_idle - waits up to 10 s until the daemon reports no active or queued sequence and
 * no used KV page; returns 0, or -1 with the last figures on stderr. */
int itest_idle(const char *sock);

/* itest_file_has - whether the file at path (its first 64 KiB, e.g. m40d's log) contains
 * needle; prints the file on stderr when not. */
bool itest_file_has(const char *path, const char *needle);

/* itest_cpu_ticks - user + system CPU time of process pid in clock ticks, or -1. */
long itest_cpu_ticks(pid_t pid);

/* itest_notify_open - a datagram socket bound at DIR/notify (its path into path) for m40d's
 * NOTIFY_SOCKET, whose recv() gives up after timeout_ms. Returns it, or -1. */
int itest_notify_open(const char *dir, char *path, size_t cap, int timeout_ms);

/* itest_story - n short words, like a story (malloc'd; NULL when out of memory): a prompt
 * of about 1.5 n tokens of stories260K. */
char *itest_story(int n);

/* A few prompts (stories260K-style). */
extern const char *const itest_prompts[8];

#endif
