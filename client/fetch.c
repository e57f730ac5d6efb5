/* fetch.c - the HTTP(S) transfer of `m40ctl pull` (pull.h): one GET into the .part file,
 * resumed with a Range request guarded by If-Range, hashed as it is written, retried when
 * cut short; the response's status and headers decide what the body may be. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "pull.h"
#include "store.h"

volatile sig_atomic_t m40_pull_stop;

int m40_pull_hash_reset(struct pull *p)
{
        if (ftruncate(p->fd, 0))
                return -errno;
        p->have = 0;
        p->validator[0] = '\0';
        return EVP_DigestInit_ex(p->md, EVP_sha256(), NULL) == 1 ? 0 : -ENOMEM;
}

/* Header value of name in line (len bytes, "Name: value\r\n") into out, trimmed; false when
 * line is another header or the value does not fit. */
static bool header_value(const char *line, size_t len, const char *name, char *out, size_t n)
{
        size_t k = strlen(name);

        if (len <= k || strncasecmp(line, name, k) || line[k] != ':')
                return false;
        line += k + 1;
        len -= k + 1;
        while (len && (*line == ' ' || *line == '\t'))
                line++, len--;
        while (len && isspace((unsigned char)line[len - 1]))
                len--;
        if (len >= n)
                return false;
        memcpy(out, line, len);
        out[len] = '\0';
        return true;
}

static void response_reset(struct pull *p)
{
        p->status = 0;
        p->reason[0] = p->etag[0] = p->lastmod[0] = '\0';
        p->has_range = p->has_length = false;
        p->range_start = p->range_total = p->length = 0;
}

/* Content-Range: "bytes FIRST-LAST/TOTAL" or "bytes * /TOTAL" (on a 416) */
static void parse_content_range(struct pull *p, const char *v)
{
        unsigned long long a, b, t;

        if (sscanf(v, "bytes %llu-%llu/%llu", &a, &b, &t) == 3 && a <= b && b < t) {
                p->has_range = true;
                p->range_start = a;
                p->range_total = t;
        } else if (sscanf(v, "bytes */%llu", &t) == 1) {
                p->has_range = true;
                p->range_start = 0;
                p->range_total = t;
        }
}

static size_t on_header(char *buf, size_t size, size_t n, void *arg)
{
        struct pull *p = arg;
        size_t len = size * n;
        char v[PULL_VALIDATOR_MAX];
        const char *sp;

        if (len > 5 && !strncmp(buf, "HTTP/", 5)) { /* a new response (redirects, 100) */
                const char *end = buf + len;

                response_reset(p);
                sp = memchr(buf, ' ', len);
                if (sp && sscanf(sp, " %3ld", &p->status) == 1) {
                        sp = sp + 4 < end ? sp + 4 : end;
                        while (sp < end && *sp == ' ')
                                sp++;
                        while (end > sp && isspace((unsigned char)end[-1]))
                                end--;
                        snprintf(p->reason, sizeof(p->reason), "%.*s", (int)(end - sp), sp);
                }
        } else if (header_value(buf, len, "ETag", v, sizeof(v))) {
                memcpy(p->etag, v, sizeof(v));
        } else if (header_value(buf, len, "Last-Modified", v, sizeof(v))) {
                memcpy(p->lastmod, v, sizeof(v));
        } else if (header_value(buf, len, "Content-Range", v, sizeof(v))) {
                parse_content_range(p, v);
        } else if (header_value(buf, len, "Content-Length", v, sizeof(v))) {
                char *end;

                errno = 0;
                p->length = strtoull(v, &end, 10);
                p->has_length = !errno && !*end && isdigit((unsigned char)v[0]);
        }
        return len;
}

/* Writes the .part.meta file: the URL and the validator of the bytes in the .part. */
static int write_meta(struct pull *p)
{
        char tmp[PULL_PATH_MAX + 8];
        FILE *f;
        int r = 0;

        snprintf(tmp, sizeof(tmp), "%s.tmp", p->meta);
        f = fopen(tmp, "we");
        if (!f)
                return -errno;
        fprintf(f, "url %s\nvalidator %s\n", p->url, p->validator);
        if (fflush(f) || fsync(fileno(f)))
                r = -errno;
        if (fclose(f) && !r)
                r = -errno;
        if (!r && rename(tmp, p->meta))
                r = -errno;
        if (r)
                unlink(tmp);
        return r;
}

/* The first body byte of a response arrived: decide whether it may go into the .part. */
static int begin_body(struct pull *p)
{
        struct statvfs vfs;
        uint64_t need, room;

        if (p->status != 200 && p->status != 206)
                return snprintf(p->why, sizeof(p->why), "HTTP %ld", p->status), -EPROTO;
        if (p->status == 206 && (!p->has_range || p->range_start != p->have)) {
                snprintf(p->why, sizeof(p->why),
                         "the server sent a range other than the one asked for (from byte %" PRIu64
                         "); starting over",
                         p->range_start);
                p->restart = true;
                return -EPROTO;
        }
        if (p->status == 200 && p->have) {
                if (!p->quiet)
                        fprintf(stderr,
                                "m40ctl pull: the server sent the whole file (it changed since "
                                "the partial download, or cannot resume): starting over\n");
                p->werr = m40_pull_hash_reset(p);
                if (p->werr)
                        return snprintf(p->why, sizeof(p->why), "cannot empty %s: %s", p->part,
                                        strerror(-p->werr)),
                               -EIO;
        }
        p->total = p->status == 206 ? p->range_total : p->has_length ? p->length : 0;
        if (p->total && fstatvfs(p->fd, &vfs) == 0) {
                need = p->total - p->have;
                room = (uint64_t)vfs.f_bavail * vfs.f_frsize;
                if (room < need) {
                        char a[32], b[32];

                        snprintf(p->why, sizeof(p->why),
                                 "not enough space in %s: %s more needed, %s free", p->dir,
                                 m40_store_human_bytes(need, a, sizeof(a)),
                                 m40_store_human_bytes(room, b, sizeof(b)));
                        return p->werr = -ENOSPC, -ENOSPC;
                }
        }
        /* a strong ETag, else Last-Modified, lets a later run resume with If-Range */
        snprintf(p->validator, sizeof(p->validator), "%s",
                 p->etag[0] && strncmp(p->etag, "W/", 2) ? p->etag : p->lastmod);
        if ((p->werr = write_meta(p)))
                return snprintf(p->why, sizeof(p->why), "cannot write %s: %s", p->meta,
                                strerror(-p->werr)),
                       -EIO;
        if (p->prog_on) {
                m40_progress_init(&p->prog, stderr, p->tty, p->name, p->have, p->total);
                p->prog.drawn = false;
        }
        p->started = true;
        return 0;
}

static size_t on_body(char *buf, size_t size, size_t n, void *arg)
{
        struct pull *p = arg;
        size_t len = size * n, done = 0;
        ssize_t w;

        if (!p->started && begin_body(p))
                return 0; /* not len: curl stops with CURLE_WRITE_ERROR */
        if (p->total && p->have + len > p->total) {
                snprintf(p->why, sizeof(p->why), "the server sent more than its stated size");
                p->restart = true;
                return 0;
        }
        while (done < len) {
                w = pwrite(p->fd, buf + done, len - done, (off_t)(p->have + done));
                if (w < 0 && errno == EINTR)
                        continue;
                if (w < 0) {
                        p->werr = -errno;
                        snprintf(p->why, sizeof(p->why), "cannot write %s: %s", p->part,
                                 strerror(errno));
                        /* keep the whole-bytes prefix consistent with the hash */
                        if (ftruncate(p->fd, (off_t)p->have))
                                p->restart = true;
                        return 0;
                }
                done += (size_t)w;
        }
        EVP_DigestUpdate(p->md, buf, len);
        p->have += len;
        return len;
}

static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
        struct pull *p = arg;

        if (m40_pull_stop)
                return 1;
        if (p->prog_on && p->started)
                m40_progress_update(&p->prog, p->have);
        return 0;
}

static CURLcode attempt(struct pull *p)
{
        struct curl_slist *hdr = NULL;
        char range[32], ifr[PULL_VALIDATOR_MAX + 16];
        CURLcode rc;

        response_reset(p);
        p->started = false;
        p->werr = 0;
        p->why[0] = p->errbuf[0] = '\0';
        curl_easy_setopt(p->curl, CURLOPT_URL, p->url);
        curl_easy_setopt(p->curl, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(p->curl, CURLOPT_HEADERDATA, p);
        curl_easy_setopt(p->curl, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(p->curl, CURLOPT_WRITEDATA, p);
        curl_easy_setopt(p->curl, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(p->curl, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(p->curl, CURLOPT_XFERINFODATA, p);
        if (p->have) {
                snprintf(range, sizeof(range), "%" PRIu64 "-", p->have);
                curl_easy_setopt(p->curl, CURLOPT_RANGE, range);
                if (p->validator[0]) {
                        snprintf(ifr, sizeof(ifr), "If-Range: %s", p->validator);
                        hdr = curl_slist_append(NULL, ifr);
                }
        } else {
                curl_easy_setopt(p->curl, CURLOPT_RANGE, NULL);
        }
        curl_easy_setopt(p->curl, CURLOPT_HTTPHEADER, hdr);
        rc = curl_easy_perform(p->curl);
        curl_easy_setopt(p->curl, CURLOPT_HTTPHEADER, NULL);
        curl_slist_free_all(hdr);
        if (p->prog_on && p->started)
                m40_progress_end(&p->prog, rc == CURLE_OK && p->total && p->have == p->total);
        return rc;
}

enum outcome { DONE, RETRY, FAIL, STOPPED };

static const char *http_hint(long status)
{
        switch (status) {
        case 401:
        case 403:
                return " (access denied: a private file, or a URL that needs a token)";
        case 404:
        case 410:
                return " (no such file at this URL)";
        default:
                return "";
        }
}

static enum outcome http_error(struct pull *p)
{
        fprintf(stderr, "m40ctl pull: %s: HTTP %ld%s%s%s\n", p->url, p->status,
                p->reason[0] ? " " : "", p->reason, http_hint(p->status));
        return p->status == 408 || p->status == 429 || p->status >= 500 ? RETRY : FAIL;
}

/* 416 on a resume: the .part holds the whole file already when the server's size matches. */
static enum outcome range_refused(struct pull *p)
{
        if (p->has_range && p->range_total == p->have)
                return DONE;
        fprintf(stderr,
                "m40ctl pull: the server refused to resume at byte %" PRIu64 ": starting over\n",
                p->have);
        p->restart = true;
        return RETRY;
}

static bool transient(CURLcode rc)
{
        return rc == CURLE_PARTIAL_FILE || rc == CURLE_RECV_ERROR || rc == CURLE_SEND_ERROR ||
               rc == CURLE_GOT_NOTHING || rc == CURLE_OPERATION_TIMEDOUT ||
               rc == CURLE_COULDNT_CONNECT || rc == CURLE_HTTP2 || rc == CURLE_HTTP2_STREAM;
}

static bool tls_error(CURLcode rc)
{
        return rc == CURLE_SSL_CONNECT_ERROR || rc == CURLE_PEER_FAILED_VERIFICATION ||
               rc == CURLE_SSL_CERTPROBLEM || rc == CURLE_SSL_CIPHER ||
               rc == CURLE_SSL_CACERT_BADFILE || rc == CURLE_SSL_ISSUER_ERROR ||
               rc == CURLE_SSL_PINNEDPUBKEYNOTMATCH || rc == CURLE_SSL_INVALIDCERTSTATUS;
}

static enum outcome classify(struct pull *p, CURLcode rc)
{
        char a[32], b[32];

        if (m40_pull_stop || rc == CURLE_ABORTED_BY_CALLBACK)
                return STOPPED;
        if (rc == CURLE_OK || (rc == CURLE_WRITE_ERROR && p->why[0] && !p->werr)) {
                if (p->status == 416 && p->have)
                        return range_refused(p);
                if (p->status >= 400)
                        return http_error(p);
                if (p->restart) {
                        fprintf(stderr, "m40ctl pull: %s\n", p->why);
                        return RETRY;
                }
                if (rc != CURLE_OK || (p->status != 200 && p->status != 206)) {
                        fprintf(stderr, "m40ctl pull: %s: unexpected HTTP %ld %s\n", p->url,
                                p->status, p->reason);
                        return FAIL;
                }
                if (p->total && p->have != p->total) {
                        fprintf(stderr, "m40ctl pull: transfer ended at %s of %s\n",
                                m40_store_human_bytes(p->have, a, sizeof(a)),
                                m40_store_human_bytes(p->total, b, sizeof(b)));
                        return RETRY;
                }
                return DONE;
        }
        if (rc == CURLE_WRITE_ERROR && p->werr) {
                fprintf(stderr, "m40ctl pull: %s%s\n", p->why,
                        p->werr == -ENOSPC || p->werr == -EDQUOT ? " (free some space first)" : "");
                return FAIL;
        }
        if (tls_error(rc)) {
                fprintf(stderr, "m40ctl pull: %s: TLS: %s (m40ctl never skips the check)\n", p->url,
                        p->errbuf[0] ? p->errbuf : curl_easy_strerror(rc));
                return FAIL;
        }
        fprintf(stderr, "m40ctl pull: %s: %s\n", p->url,
                p->errbuf[0] ? p->errbuf : curl_easy_strerror(rc));
        if (transient(rc) && p->started)
                fprintf(stderr, "m40ctl pull: transfer cut short at %s%s%s\n",
                        m40_store_human_bytes(p->have, a, sizeof(a)), p->total ? " of " : "",
                        p->total ? m40_store_human_bytes(p->total, b, sizeof(b)) : "");
        return transient(rc) ? RETRY : FAIL;
}

/* Sleeps s seconds unless a signal asks to stop. */
static void backoff(unsigned s)
{
        struct timespec ts = {.tv_sec = s};

        while (!m40_pull_stop && nanosleep(&ts, &ts) && errno == EINTR)
                ;
}

int m40_pull_transfer(struct pull *p)
{
        enum outcome o;
        unsigned wait = 1;

        for (long i = 0;; i++) {
                int r = p->restart ? m40_pull_hash_reset(p) : 0;

                if (r) {
                        fprintf(stderr, "m40ctl pull: cannot empty %s: %s\n", p->part,
                                strerror(-r));
                        return -EIO;
                }
                p->restart = false;
                o = classify(p, attempt(p));
                if (o == DONE)
                        return 0;
                if (o == STOPPED)
                        return -EINTR;
                if (o == FAIL || i >= p->retries)
                        break;
                fprintf(stderr, "m40ctl pull: retrying in %u s (attempt %ld of %ld)\n", wait, i + 2,
                        p->retries + 1);
                backoff(wait);
                if (m40_pull_stop)
                        return -EINTR;
                wait = wait < 30 ? wait * 2 : 60;
        }
        if (p->have)
                fprintf(stderr,
                        "m40ctl pull: the partial download is kept (%s): run the same command "
                        "to resume\n",
                        p->part);
        return -EIO;
}

struct small {
        char *buf;
        size_t n, len;
        bool over;
};

static size_t on_small(char *buf, size_t size, size_t n, void *arg)
{
        struct small *s = arg;
        size_t len = size * n;

        if (s->len + len >= s->n) {
                s->over = true;
                return 0;
        }
        memcpy(s->buf + s->len, buf, len);
        s->len += len;
        s->buf[s->len] = '\0';
        return len;
}

long m40_pull_get_small(struct pull *p, const char *url, char *buf, size_t n)
{
        struct small s = {.buf = buf, .n = n};
        CURLcode rc;
        long status = 0;

        buf[0] = p->errbuf[0] = '\0';
        curl_easy_setopt(p->curl, CURLOPT_URL, url);
        curl_easy_setopt(p->curl, CURLOPT_RANGE, NULL);
        curl_easy_setopt(p->curl, CURLOPT_HEADERFUNCTION, NULL);
        curl_easy_setopt(p->curl, CURLOPT_HEADERDATA, NULL);
        curl_easy_setopt(p->curl, CURLOPT_WRITEFUNCTION, on_small);
        curl_easy_setopt(p->curl, CURLOPT_WRITEDATA, &s);
        p->started = false; /* on_progress: a stop check, no bar */
        curl_easy_setopt(p->curl, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(p->curl, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(p->curl, CURLOPT_XFERINFODATA, p);
        rc = curl_easy_perform(p->curl);
        curl_easy_getinfo(p->curl, CURLINFO_RESPONSE_CODE, &status);
        if (s.over && status == 200)
                return -EFBIG;
        if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && s.over)) {
                if (!p->errbuf[0])
                        snprintf(p->errbuf, sizeof(p->errbuf), "%s", curl_easy_strerror(rc));
                return -EIO;
        }
        return status;
}
