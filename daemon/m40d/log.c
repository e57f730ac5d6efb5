/* log.c - m40d's journald-style stderr log (see log.h). */
#include <stdarg.h>
#include <stdio.h>

#include "m40/error.h"
#include "m40d/log.h"

static int max_level = LOG_INFO;

void m40d_log_set_level(int level)
{
        max_level = level;
}

static void emit(int prio, const char *suffix, const char *fmt, va_list ap)
{
        char buf[2048];

        vsnprintf(buf, sizeof(buf), fmt, ap);
        /* one write per line so concurrent writers do not interleave */
        fprintf(stderr, "<%d>%s%s%s\n", prio, buf, suffix ? ": " : "", suffix ? suffix : "");
}

int m40d_log(int prio, const char *fmt, ...)
{
        va_list ap;

        if (prio > max_level)
                return 0;
        va_start(ap, fmt);
        emit(prio, NULL, fmt, ap);
        va_end(ap);
        return 0;
}

int m40d_log_errno(int err, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        emit(LOG_ERR, m40_strerror(err), fmt, ap);
        va_end(ap);
        return err;
}
