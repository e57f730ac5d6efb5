/* m40ctl.h - the subcommands of m40ctl, each a main() of its own, and the helpers they
 * share. */
#ifndef M40CTL_H
#define M40CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct m40_client;

/* Exit codes shared by every subcommand. */
enum {
        M40CTL_EXIT_OK = 0,
        M40CTL_EXIT_FAIL = 1,          /* the work failed (bad file, I/O error) */
        M40CTL_EXIT_USAGE = 2,         /* bad command line */
        M40CTL_EXIT_UNREACHABLE = 3,   /* no daemon answers, or it refused the connection */
        M40CTL_EXIT_REJECTED = 4,      /* the daemon rejected or failed the request */
        M40CTL_EXIT_INTERRUPTED = 130, /* SIGINT: the request was cancelled */
};

int m40ctl_show(int argc, char **argv);
int m40ctl_submit(int argc, char **argv);
int m40ctl_run(int argc, char **argv);
int m40ctl_status(int argc, char **argv);
int m40ctl_pull(int argc, char **argv);
int m40ctl_list(int argc, char **argv);
int m40ctl_rm(int argc, char **argv);

/* m40ctl_opt_num - option name's value arg as a finite number in [lo, hi] (an integer when
 * integer) into *ret. Returns 0, or -EINVAL after saying on stderr what name wants. */
int m40ctl_opt_num(const char *cmd, const char *name, const char *arg, double lo, double hi,
                   bool integer, double *ret);

/* m40ctl_opt_u64 - the same for an unsigned 64-bit integer (decimal, 0x hex or 0 octal). */
int m40ctl_opt_u64(const char *cmd, const char *name, const char *arg, uint64_t *ret);

/* m40ctl_opt_timeout - --timeout SECONDS (0: none) into *ret_ms (-1: none). Returns 0 or
 * -EINVAL after saying why. */
int m40ctl_opt_timeout(const char *cmd, const char *arg, int *ret_ms);

/* m40ctl_say_unreachable - says on stderr that m40d at sock (NULL: the default) could not
 * be reached, or did not answer within timeout_ms when err is -ETIMEDOUT. */
void m40ctl_say_unreachable(const char *cmd, const char *sock, int timeout_ms, int err);

/* m40ctl_connect - m40_client_connect_timeout(), saying why on stderr when it fails.
 * Returns 0 or its negative code. */
int m40ctl_connect(const char *cmd, const char *sock, int timeout_ms, struct m40_client **ret);

/* m40ctl_human_count - n as "1.24B", "135.0M", "292.5K" or "512" into buf; returns buf. */
const char *m40ctl_human_count(uint64_t n, char *buf, size_t len);

/* m40ctl_json_str - writes n bytes of s as a JSON string (quotes and escapes) to f. */
void m40ctl_json_str(FILE *f, const char *s, size_t n);

#endif
