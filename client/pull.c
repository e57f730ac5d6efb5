/* pull.c - `m40ctl pull URL [--name NAME] [--sha256 HEX]`: downloads a GGUF model into the
 * store (store.h). The bytes go to DIR/.NAME.gguf.part (fetch.c: resumable, hashed as they
 * arrive); the file is verified against a sha256 (given, or published as URL.sha256), opened
 * as a GGUF model, and only then renamed to DIR/NAME.gguf, so the final name never holds a
 * partial or corrupt file. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "m40-version.h"
#include "m40ctl.h"
#include "model/gguf.h"
#include "model/model_info.h"
#include "pull.h"
#include "store.h"

static void usage(FILE *f)
{
        fputs("Usage: m40ctl pull [OPTIONS] URL\n"
              "\n"
              "Downloads the GGUF model at URL (https:// or http://) into the model store,\n"
              "where m40ctl list/show/rm and `m40d -m NAME` find it by its name.\n"
              "\n"
              "The file is written to DIR/.NAME.gguf.part and renamed to DIR/NAME.gguf only\n"
              "when it is complete, matches its sha256 and opens as a GGUF model; a file that\n"
              "fails a check is removed. An interrupted pull (Ctrl-C, a lost connection, a\n"
              "full disk) keeps the .part: the same command resumes it with a Range request,\n"
              "and starts over when the server's file changed meanwhile (If-Range). A cut\n"
              "transfer is retried at once, --retries times.\n"
              "\n"
              "The sha256 checked is the one given with --sha256, else the one published\n"
              "beside the file as URL.sha256 (its first 64-hex-digit word); m40ctl says which,\n"
              "or that neither exists and only the GGUF check applies.\n"
              "\n"
              "Options:\n"
              "  --name NAME     Store the model as NAME (default: the URL's file name without\n"
              "                  .gguf). A name has 1..200 bytes, no '/' or control\n"
              "                  characters, and neither starts with '.' nor ends in .gguf\n"
              "                  (the rule of m40d -m NAME).\n"
              "  --sha256 HEX    The file's expected sha256 (64 hex digits).\n"
              "  --force         Replace a model of the same name already in the store.\n"
              "  --retries N     Retries of a transfer cut short, 0..100 (default 3).\n"
              "  -q, --quiet     No progress; errors only.\n"
              "  -h, --help      Show this text.\n"
              "\n"
              "Progress goes to stderr: a bar with bytes, rate and ETA on a terminal, a line\n"
              "per 10% otherwise. The store is $M40_MODELS, else /var/lib/m40d/models as root,\n"
              "else $XDG_DATA_HOME/m40/models (default ~/.local/share/m40/models). HTTPS\n"
              "certificates are always verified; proxies follow curl's environment variables\n"
              "(https_proxy, no_proxy).\n"
              "\n"
              "Exit status: 0 stored; 1 failed (the message says why; a resumable .part is\n"
              "named); 2 bad command line; 130 interrupted (the .part is kept).\n",
              f);
}

static void on_signal(int sig)
{
        (void)sig;
        m40_pull_stop = 1;
}

static int parse_hex(const char *s, unsigned char out[32])
{
        for (int i = 0; i < 64; i++)
                if (!isxdigit((unsigned char)s[i]))
                        return -EINVAL;
        for (int i = 0; i < 32; i++) {
                unsigned v;

                sscanf(s + 2 * i, "%2x", &v);
                out[i] = (unsigned char)v;
        }
        return 0;
}

static void hex(const unsigned char in[32], char out[65])
{
        for (int i = 0; i < 32; i++)
                snprintf(out + 2 * i, 3, "%02x", in[i]);
}

/* The URL checked (http or https, parsable) and, when no --name, the name from its file. */
static int check_url(struct pull *p, char *name, size_t n)
{
        CURLU *u = curl_url();
        char *scheme = NULL, *path = NULL, *base, *dot;
        const char *why = NULL;
        int r = M40CTL_EXIT_USAGE;

        if (!u || strlen(p->url) >= PULL_URL_MAX ||
            curl_url_set(u, CURLUPART_URL, p->url, 0) != CURLUE_OK ||
            curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
            (strcmp(scheme, "https") && strcmp(scheme, "http"))) {
                fprintf(stderr, "m40ctl pull: '%s' is not an http:// or https:// URL\n", p->url);
                goto out_free;
        }
        if (p->name) {
                r = 0;
                goto out_free;
        }
        if (curl_url_get(u, CURLUPART_PATH, &path, CURLU_URLDECODE) != CURLUE_OK)
                path = NULL;
        base = path ? strrchr(path, '/') : NULL;
        base = base ? base + 1 : path ? path : "";
        snprintf(name, n, "%s", base);
        dot = strlen(name) > 5 ? name + strlen(name) - 5 : NULL;
        if (dot && !strcmp(dot, ".gguf"))
                *dot = '\0';
        if (m40_store_name_check(name, &why)) {
                fprintf(stderr,
                        "m40ctl pull: cannot name the model after the URL's file '%s': "
                        "%s; give --name NAME\n",
                        base, why);
                goto out_free;
        }
        p->name = name;
        r = 0;
out_free:
        curl_free(path);
        curl_free(scheme);
        curl_url_cleanup(u);
        return r;
}

/* Paths in the store; refuses to overwrite a stored model without --force. */
static int store_paths(struct pull *p)
{
        const char *why;
        int r;

        if (m40_store_name_check(p->name, &why)) {
                fprintf(stderr, "m40ctl pull: bad --name '%s': %s\n", p->name, why);
                return M40CTL_EXIT_USAGE;
        }
        r = m40_store_dir(p->dir, sizeof(p->dir));
        if (!r)
                r = m40_store_path(p->dir, p->name, M40_STORE_MODEL, p->path, sizeof(p->path));
        if (!r)
                r = m40_store_path(p->dir, p->name, M40_STORE_PART, p->part, sizeof(p->part));
        if (!r)
                r = m40_store_path(p->dir, p->name, M40_STORE_META, p->meta, sizeof(p->meta));
        if (r) {
                fprintf(stderr, "m40ctl pull: no store directory: %s (set $M40_MODELS)\n",
                        strerror(-r));
                return M40CTL_EXIT_FAIL;
        }
        if (!p->force && access(p->path, F_OK) == 0) {
                fprintf(stderr,
                        "m40ctl pull: '%s' is in the store already (%s); --force "
                        "replaces it, m40ctl rm removes it\n",
                        p->name, p->path);
                return M40CTL_EXIT_FAIL;
        }
        r = m40_store_mkdir(p->dir);
        if (r) {
                fprintf(stderr, "m40ctl pull: cannot create the store %s: %s\n", p->dir,
                        strerror(-r));
                return M40CTL_EXIT_FAIL;
        }
        return 0;
}

/* The sha256 to check: --sha256, else URL.sha256 when the server publishes one. */
static int expected_hash(struct pull *p)
{
        char body[PULL_SHA_FILE_MAX];
        CURLU *u;
        char *path = NULL, *url = NULL, *newpath;
        long status = -ENOMEM;

        if (p->have_want)
                return snprintf(p->want_from, sizeof(p->want_from), "--sha256"), 0;
        u = curl_url();
        if (u && curl_url_set(u, CURLUPART_URL, p->url, 0) == CURLUE_OK &&
            curl_url_get(u, CURLUPART_PATH, &path, 0) == CURLUE_OK &&
            (newpath = malloc(strlen(path) + 8))) {
                sprintf(newpath, "%s.sha256", path);
                if (curl_url_set(u, CURLUPART_PATH, newpath, 0) == CURLUE_OK &&
                    curl_url_get(u, CURLUPART_URL, &url, 0) == CURLUE_OK)
                        status = m40_pull_get_small(p, url, body, sizeof(body));
                free(newpath);
        }
        curl_free(path);
        curl_url_cleanup(u);
        snprintf(p->want_from, sizeof(p->want_from), "%s", url ? url : "URL.sha256");
        curl_free(url);
        if (status == 200) {
                /* "HEX", "HEX  FILE" (sha256sum) or "SHA256 (FILE) = HEX" (BSD) */
                for (const char *s = body; *s; s++)
                        if ((s == body || !isxdigit((unsigned char)s[-1])) &&
                            !parse_hex(s, p->want) && !isxdigit((unsigned char)s[64]))
                                return p->have_want = true, 0;
                fprintf(stderr, "m40ctl pull: %s holds no sha256 (64 hex digits)\n", p->want_from);
                return -EPROTO;
        }
        if (status == -EFBIG) {
                fprintf(stderr, "m40ctl pull: %s is over %d bytes: not a sha256 file\n",
                        p->want_from, PULL_SHA_FILE_MAX);
                return -EPROTO;
        }
        if (m40_pull_stop)
                return -EINTR;
        if (status < 0) {
                fprintf(stderr, "m40ctl pull: cannot fetch %s: %s\n", p->want_from, p->errbuf);
                return -EIO;
        }
        if (!p->quiet)
                fprintf(stderr,
                        "m40ctl pull: no sha256 given or published (%s: HTTP %ld): the "
                        "file is checked as GGUF only\n",
                        p->want_from, status);
        return 0;
}

/* The URL and validator a .part.meta file records, or "" when it is absent or unreadable. */
static void read_meta(const char *path, char *url, size_t un, char *val, size_t vn)
{
        char buf[PULL_META_MAX];
        size_t len;
        char *nl, *v;
        FILE *f = fopen(path, "re");

        url[0] = val[0] = '\0';
        if (!f)
                return;
        len = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[len] = '\0';
        if (strncmp(buf, "url ", 4) || !(nl = strchr(buf, '\n')))
                return;
        *nl = '\0';
        v = nl + 1;
        if (strncmp(v, "validator ", 10) || !(nl = strchr(v, '\n')))
                return;
        *nl = '\0';
        if (strlen(buf + 4) >= un || strlen(v + 10) >= vn)
                return;
        memcpy(url, buf + 4, strlen(buf + 4) + 1);
        memcpy(val, v + 10, strlen(v + 10) + 1);
}

/* Opens and locks the .part; keeps its bytes when they came from this URL. */
static int open_part(struct pull *p)
{
        char url[PULL_URL_MAX];
        struct stat st;

        p->fd = open(p->part, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (p->fd < 0) {
                fprintf(stderr, "m40ctl pull: cannot create %s: %m\n", p->part);
                return -errno;
        }
        if (flock(p->fd, LOCK_EX | LOCK_NB)) {
                if (errno == EWOULDBLOCK)
                        fprintf(stderr, "m40ctl pull: another m40ctl pull of '%s' is running\n",
                                p->name);
                else
                        fprintf(stderr, "m40ctl pull: cannot lock %s: %m\n", p->part);
                return -EBUSY;
        }
        if (fstat(p->fd, &st)) {
                fprintf(stderr, "m40ctl pull: %s: %m\n", p->part);
                return -errno;
        }
        read_meta(p->meta, url, sizeof(url), p->validator, sizeof(p->validator));
        p->have = (uint64_t)st.st_size;
        if (p->have && strcmp(url, p->url)) {
                if (!p->quiet)
                        fprintf(stderr,
                                "m40ctl pull: discarding a partial download of '%s' "
                                "from another URL\n",
                                p->name);
                p->have = 0;
        }
        if (!p->have && ftruncate(p->fd, 0)) {
                fprintf(stderr, "m40ctl pull: cannot empty %s: %m\n", p->part);
                return -errno;
        }
        return 0;
}

/* The hash of the bytes already in the .part (a resume). */
static int hash_prefix(struct pull *p)
{
        static char buf[1 << 20];
        uint64_t off = 0, want = p->have;
        ssize_t n;
        char a[32];

        if (EVP_DigestInit_ex(p->md, EVP_sha256(), NULL) != 1)
                return -ENOMEM;
        if (!want)
                return 0;
        if (!p->quiet)
                fprintf(stderr, "m40ctl pull: resuming '%s' at %s\n", p->name,
                        m40_store_human_bytes(want, a, sizeof(a)));
        while (off < want && !m40_pull_stop) {
                n = pread(p->fd, buf, want - off < sizeof(buf) ? want - off : sizeof(buf),
                          (off_t)off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        fprintf(stderr, "m40ctl pull: cannot read %s: %s\n", p->part,
                                n ? strerror(errno) : "shorter than it was");
                        return -EIO;
                }
                EVP_DigestUpdate(p->md, buf, (size_t)n);
                off += (uint64_t)n;
        }
        return m40_pull_stop ? -EINTR : 0;
}

static void remove_part(struct pull *p)
{
        unlink(p->part);
        unlink(p->meta);
}

/* The whole file is in the .part: verify, check as GGUF, rename into place. */
static int finish(struct pull *p)
{
        unsigned char got[32];
        char gx[65], wx[65], err[M40_GGUF_ERRLEN], size[32], params[32];
        struct m40_gguf *g = NULL;
        struct m40_model_info info;
        unsigned len = 0;
        int r, dfd;

        if (fsync(p->fd)) {
                fprintf(stderr, "m40ctl pull: cannot write %s: %m\n", p->part);
                return M40CTL_EXIT_FAIL;
        }
        EVP_DigestFinal_ex(p->md, got, &len);
        hex(got, gx);
        if (p->have_want && memcmp(got, p->want, 32)) {
                hex(p->want, wx);
                remove_part(p);
                fprintf(stderr,
                        "m40ctl pull: sha256 mismatch for '%s': expected %s (from %s), "
                        "got %s; the download was removed\n",
                        p->name, wx, p->want_from, gx);
                return M40CTL_EXIT_FAIL;
        }
        r = m40_gguf_open(p->part, &g, err, sizeof(err));
        if (!r)
                r = m40_model_info_init(&info, g, err, sizeof(err));
        if (r) {
                remove_part(p);
                g = m40_gguf_free(g);
                fprintf(stderr,
                        "m40ctl pull: the download is not a usable GGUF model (%s); it "
                        "was removed\n",
                        err);
                return M40CTL_EXIT_FAIL;
        }
        r = renameat2(AT_FDCWD, p->part, AT_FDCWD, p->path, p->force ? 0 : RENAME_NOREPLACE);
        if (r && errno == EINVAL && !p->force) /* a file system without RENAME_NOREPLACE */
                r = link(p->part, p->path) ? -1 : unlink(p->part);
        if (r) {
                fprintf(stderr, "m40ctl pull: cannot rename %s to %s: %m\n", p->part, p->path);
                g = m40_gguf_free(g);
                return M40CTL_EXIT_FAIL;
        }
        unlink(p->meta);
        dfd = open(p->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
                fsync(dfd);
                close(dfd);
        }
        m40ctl_human_count(info.n_params, params, sizeof(params));
        printf("%s: %s model, %s parameters, %s, sha256 %s %s%s\n", p->name, info.arch, params,
               m40_store_human_bytes(p->have, size, sizeof(size)), gx,
               p->have_want ? "verified against " : "not verified (none given or published)",
               p->have_want ? p->want_from : "");
        g = m40_gguf_free(g);
        printf("%s: stored as %s\n", p->name, p->path);
        return fflush(stdout) ? M40CTL_EXIT_FAIL : M40CTL_EXIT_OK;
}

static int parse_args(struct pull *p, int argc, char **argv)
{
        static const struct option opts[] = {
                {"name", required_argument, NULL, 'n'},
                {"sha256", required_argument, NULL, 's'},
                {"force", no_argument, NULL, 'f'},
                {"retries", required_argument, NULL, 'r'},
                {"quiet", no_argument, NULL, 'q'},
                {"help", no_argument, NULL, 'h'},
                {0},
        };
        double v;
        int c;

        optind = 1;
        while ((c = getopt_long(argc, argv, "qh", opts, NULL)) != -1) {
                if (c == 'n') {
                        p->name = optarg;
                } else if (c == 's') {
                        if (strlen(optarg) != 64 || parse_hex(optarg, p->want)) {
                                fprintf(stderr,
                                        "m40ctl pull: --sha256 wants 64 hex digits, "
                                        "not '%s'\n",
                                        optarg);
                                return M40CTL_EXIT_USAGE;
                        }
                        p->have_want = true;
                } else if (c == 'f') {
                        p->force = true;
                } else if (c == 'r') {
                        if (m40ctl_opt_num("pull", "--retries", optarg, 0, 100, true, &v))
                                return M40CTL_EXIT_USAGE;
                        p->retries = (long)v;
                } else if (c == 'q') {
                        p->quiet = true;
                } else if (c == 'h') {
                        usage(stdout);
                        return -1;
                } else {
                        usage(stderr);
                        return M40CTL_EXIT_USAGE;
                }
        }
        if (optind != argc - 1) {
                fprintf(stderr, "m40ctl pull: expected exactly one URL\n");
                usage(stderr);
                return M40CTL_EXIT_USAGE;
        }
        p->url = argv[optind];
        return 0;
}

/* The curl handle: redirects, protocols, timeouts and messages as pull wants them. */
static CURL *new_curl(struct pull *p)
{
        CURL *c = curl_easy_init();

        if (!c)
                return NULL;
        curl_easy_setopt(c, CURLOPT_ERRORBUFFER, p->errbuf);
        curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
        curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(c, CURLOPT_USERAGENT, "m40ctl/" M40_VERSION " libcurl");
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
        /* a transfer that moves under 1 byte/s for 60 s is stalled: cut it (and retry) */
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
        curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, NULL); /* the bytes as stored */
        curl_easy_setopt(c, CURLOPT_FAILONERROR, 0L);
        return c;
}

static int run(struct pull *p, char *name, size_t name_n)
{
        int r = check_url(p, name, name_n);

        if (r)
                return r;
        r = store_paths(p);
        if (r)
                return r;
        if (open_part(p))
                return M40CTL_EXIT_FAIL;
        p->md = EVP_MD_CTX_new();
        p->curl = new_curl(p);
        if (!p->md || !p->curl) {
                fprintf(stderr, "m40ctl pull: out of memory\n");
                return M40CTL_EXIT_FAIL;
        }
        if (!p->quiet)
                fprintf(stderr, "m40ctl pull: %s -> %s\n", p->url, p->path);
        r = expected_hash(p);
        if (!r)
                r = hash_prefix(p);
        if (!r)
                r = m40_pull_transfer(p);
        if ((r == -EINTR || m40_pull_stop) && !p->have) {
                remove_part(p);
                fprintf(stderr, "m40ctl pull: interrupted\n");
                return M40CTL_EXIT_INTERRUPTED;
        }
        if (r == -EINTR || m40_pull_stop) {
                fsync(p->fd);
                fprintf(stderr,
                        "m40ctl pull: interrupted; %s kept (%" PRIu64 " bytes): run the "
                        "same command to resume\n",
                        p->part, p->have);
                return M40CTL_EXIT_INTERRUPTED;
        }
        if (r && !p->have)
                remove_part(p); /* nothing worth resuming: leave no trace */
        return r ? M40CTL_EXIT_FAIL : finish(p);
}

int m40ctl_pull(int argc, char **argv)
{
        struct pull *p = calloc(1, sizeof(*p));
        char name[M40_STORE_NAME_MAX + 64];
        struct sigaction sa = {.sa_handler = on_signal};
        int r;

        if (!p) {
                fprintf(stderr, "m40ctl pull: out of memory\n");
                return M40CTL_EXIT_FAIL;
        }
        p->fd = -1;
        p->retries = 3;
        r = parse_args(p, argc, argv);
        if (r) {
                free(p);
                return r < 0 ? M40CTL_EXIT_OK : r;
        }
        p->tty = isatty(STDERR_FILENO);
        p->prog_on = !p->quiet;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        /* CURLOPT_NOSIGNAL leaves SIGPIPE to us: a peer gone mid-TLS-write is an error */
        signal(SIGPIPE, SIG_IGN);
        if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
                fprintf(stderr, "m40ctl pull: libcurl failed to initialize\n");
                free(p);
                return M40CTL_EXIT_FAIL;
        }
        r = run(p, name, sizeof(name));
        if (p->curl)
                curl_easy_cleanup(p->curl);
        EVP_MD_CTX_free(p->md);
        if (p->fd >= 0)
                close(p->fd);
        curl_global_cleanup();
        free(p);
        return r;
}
