/* m40ctl.h - the subcommands of m40ctl, each a main() of its own, and the helpers they
 * share. */
#ifndef M40CTL_H
#define M40CTL_H

#include <stddef.h>
#include <stdio.h>

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

/* m40ctl_json_str - writes n bytes of s as a JSON string (quotes and escapes) to f. */
void m40ctl_json_str(FILE *f, const char *s, size_t n);

#endif
