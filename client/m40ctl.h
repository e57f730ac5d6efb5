/* m40ctl.h - the subcommands of m40ctl, each a main() of its own. */
#ifndef M40CTL_H
#define M40CTL_H

/* Exit codes shared by every subcommand. */
enum {
        M40CTL_EXIT_OK = 0,
        M40CTL_EXIT_FAIL = 1,  /* the work failed (bad file, I/O error) */
        M40CTL_EXIT_USAGE = 2, /* bad command line */
};

int m40ctl_show(int argc, char **argv);

#endif
