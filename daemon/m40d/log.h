/* log.h - m40d's log: one line per message on stderr, prefixed with its syslog priority
 * ("<6>") so journald files it at the right level (sd-daemon(3)). Only the daemon's
 * program code logs; the libraries under daemon/ return errors instead. */
#ifndef M40D_LOG_H
#define M40D_LOG_H

#include <syslog.h>

/* m40d_log_set_level - drop messages less important than level (LOG_ERR ... LOG_DEBUG). */
void m40d_log_set_level(int level);

/* m40d_log - logs one message at priority prio (LOG_ERR, LOG_INFO, ...). Returns 0. */
int m40d_log(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* m40d_log_errno - logs "<message>: <m40_strerror(err)>" and returns err (negative), so a
 * caller can `return m40d_log_errno(r, "...")`. */
int m40d_log_errno(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
