/* progress.h - a transfer's progress report for m40ctl: on a terminal a bar redrawn in place
 * with bytes, rate and ETA; elsewhere (a log, a pipe) one plain line per 10% of the total,
 * or every 30 s when the total is unknown. The caller owns the struct; nothing allocates. */
#ifndef M40CTL_PROGRESS_H
#define M40CTL_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define M40_PROGRESS_WINDOW 20 /* rate samples kept: about 5 s of 0.25 s steps */

struct m40_progress {
        FILE *f;
        bool tty;
        const char *label; /* borrowed: lives as long as the struct is used */
        uint64_t total;    /* bytes when complete; 0 when unknown */
        uint64_t start;    /* bytes present at the start (a resumed download) */
        uint64_t bytes;    /* bytes present now, counting those present at the start */
        double t0, last;   /* CLOCK_MONOTONIC seconds: start, last report */
        int decile;        /* last 10% step reported (plain lines) */
        bool drawn;        /* a bar is on the terminal's current line */
        double win_t[M40_PROGRESS_WINDOW];
        uint64_t win_b[M40_PROGRESS_WINDOW];
        int win_n, win_i;
};

/* m40_progress_init - starts a report on f, a bar when tty, else plain lines; label names
 * the transfer; start bytes are already there (a resumed download), total 0 when unknown. */
void m40_progress_init(struct m40_progress *p, FILE *f, bool tty, const char *label, uint64_t start,
                       uint64_t total);

/* m40_progress_total - sets the total once it becomes known (0: still unknown). */
void m40_progress_total(struct m40_progress *p, uint64_t total);

/* m40_progress_update - bytes are now present; redraws at most 4 times a second. */
void m40_progress_update(struct m40_progress *p, uint64_t bytes);

/* m40_progress_end - ends the report: the final bar and a newline on a terminal, a last
 * plain line elsewhere when done (not when it failed: the caller says why). */
void m40_progress_end(struct m40_progress *p, bool done);

/* m40_progress_rate - bytes per second over the last few seconds (0 before two samples). */
double m40_progress_rate(const struct m40_progress *p);

#endif
