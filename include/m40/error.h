/* m40/error.h - project error codes shared by the daemon, the tools and libm40.
 *
 * Functions across m40-llm return 0 on success or a negative number on failure:
 * either -errno (-ENOMEM, -EIO, ...) or one of the negative project codes below,
 * which cover failures that no errno describes well. m40_strerror() turns either
 * kind into a short static English phrase. */
#ifndef M40_ERROR_H
#define M40_ERROR_H

#include <string.h>

/* Project codes live above every errno value Linux uses (< 4096). */
enum {
        M40_EFORMAT = -4097,      /* malformed file or message */
        M40_EUNSUPPORTED = -4098, /* well-formed, but a feature we do not implement */
        M40_ETYPE = -4099,        /* a value exists but has the wrong type */
        M40_ERANGE = -4100,       /* a value exists but does not fit the requested type */
        M40_ENODEVICE = -4101,    /* no usable GPU */
        M40_ECUDA = -4102,        /* the CUDA runtime reported an error */
        M40_EVERSION = -4103,     /* the other side speaks another protocol version */
        M40_ELIMIT = -4104,       /* a request exceeds a limit set in m40d.ini */
        M40_ESHUTDOWN = -4105,    /* the daemon is shutting down */
        M40_EPROTO = -4106,       /* the peer broke the protocol */
        M40_ENOTBUILT = -4107,    /* the feature is not built into this binary */
        M40_EUNREAD = -4108,      /* cancelled: its client left the events unread too long */
};

/* m40_strerror - a static description of err (negative); never NULL. */
static inline const char *m40_strerror(int err)
{
        switch (err) {
        case M40_EFORMAT:
                return "malformed input";
        case M40_EUNSUPPORTED:
                return "unsupported feature";
        case M40_ETYPE:
                return "value has the wrong type";
        case M40_ERANGE:
                return "value out of range";
        case M40_ENODEVICE:
                return "no usable GPU";
        case M40_ECUDA:
                return "CUDA runtime error";
        case M40_EVERSION:
                return "protocol version mismatch";
        case M40_ELIMIT:
                return "request exceeds a daemon limit";
        case M40_ESHUTDOWN:
                return "daemon is shutting down";
        case M40_EPROTO:
                return "protocol violation";
        case M40_ENOTBUILT:
                return "not built into this binary";
        case M40_EUNREAD:
                return "cancelled: its events went unread past the daemon's hold timeout";
        default:
                return strerror(err < 0 ? -err : err);
        }
}

#endif
