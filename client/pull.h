/* pull.h - the state of one `m40ctl pull` shared by its command (pull.c) and its transfer
 * (fetch.c): the store paths, the expected hash, the .part file and the response at hand. */
#ifndef M40CTL_PULL_H
#define M40CTL_PULL_H

#include <curl/curl.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "progress.h"

#define PULL_URL_MAX       8192  /* bytes of a URL given on the command line */
#define PULL_PATH_MAX      4352  /* a store directory (4096) and a file name */
#define PULL_VALIDATOR_MAX 512   /* an ETag or Last-Modified value kept for If-Range */
#define PULL_SHA_FILE_MAX  4096  /* bytes of a published URL.sha256 file read */
#define PULL_META_MAX      16384 /* bytes of a .part.meta file read */

/* Set by SIGINT/SIGTERM: the transfer stops at its next progress call, the .part stays. */
extern volatile sig_atomic_t m40_pull_stop;

struct pull {
        const char *url, *name;
        char dir[4096], path[PULL_PATH_MAX], part[PULL_PATH_MAX], meta[PULL_PATH_MAX];
        bool force, quiet;
        long retries;
        unsigned char want[32]; /* the expected sha256 when have_want */
        bool have_want;
        char want_from[PULL_URL_MAX + 32]; /* where want came from, for messages */

        int fd;                             /* the .part, locked (flock) while we run */
        EVP_MD_CTX *md;                     /* sha256 of the .part's first `have` bytes */
        uint64_t have;                      /* bytes in the .part */
        char validator[PULL_VALIDATOR_MAX]; /* the .part's bytes came with it; "" none */
        CURL *curl;
        struct m40_progress prog;
        bool prog_on, tty;

        /* the response of the current attempt */
        long status;
        char reason[64];
        char etag[PULL_VALIDATOR_MAX], lastmod[PULL_VALIDATOR_MAX];
        bool has_range, has_length;
        uint64_t range_start, range_total, length;
        uint64_t total; /* size of the whole file when known, else 0 */
        bool started;   /* its body is being written */
        bool restart;   /* the .part cannot be resumed: start from byte 0 next time */
        int werr;       /* -errno of a failed write or check, 0 */
        char why[PULL_PATH_MAX + 512]; /* what stopped the body, when we did */
        char errbuf[CURL_ERROR_SIZE];
};

/* m40_pull_hash_reset - empties the .part and the hash (a fresh start). Returns 0/-errno. */
int m40_pull_hash_reset(struct pull *p);

/* m40_pull_transfer - downloads p->url into p->fd from byte p->have on, retrying cut
 * transfers p->retries times. Returns 0 when the whole file is in the .part; -EINTR when
 * stopped by a signal; -EIO after saying on stderr why it failed. */
int m40_pull_transfer(struct pull *p);

/* m40_pull_get_small - GETs url into buf (at most n - 1 bytes, NUL-terminated). Returns the
 * HTTP status (>= 100), or -EIO with the reason in p->errbuf (also when a signal stopped
 * it: m40_pull_stop is set then), -EFBIG when larger. */
long m40_pull_get_small(struct pull *p, const char *url, char *buf, size_t n);

#endif
