/* main.c - m40-gateway's program: the command line, the [gateway] section of its config
 * file (inih), the bearer token file, the listening socket (passed by systemd, or bound to
 * --listen), libmicrohttpd started with a thread per connection and the limits, and the
 * lifecycle: sd_notify READY/STOPPING, SIGTERM/SIGINT end running generations and stop. */
#include <errno.h>
#include <getopt.h>
#include <ini.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>
#include <systemd/sd-daemon.h>

#include "gateway.h"
#include "m40-version.h"

#define STACK_BYTES (512u << 10) /* per connection thread */

static const char usage[] =
        "Usage: m40-gateway [OPTION]...\n"
        "HTTP gateway of m40d: serves OpenAI-compatible (/v1/chat/completions,\n"
        "/v1/completions, /v1/models) and Ollama-compatible (/api/chat, /api/generate,\n"
        "/api/tags, /api/ps, /api/show, /api/version) endpoints, /health and /metrics,\n"
        "and runs every request through m40d over libm40.\n"
        "\n"
        "  -l, --listen HOST:PORT  Address to listen on (default 127.0.0.1:8040; IPv6 as\n"
        "                          [::1]:8040). Ignored when systemd passes the socket.\n"
        "  -s, --socket PATH       m40d's socket (default $M40_SOCKET or\n"
        "                          /run/m40d/m40d.sock).\n"
        "  -c, --config FILE       Read settings from FILE's [gateway] section (see\n"
        "                          m40-gateway(8)); options given here override them.\n"
        "  -t, --token-file FILE   Require \"Authorization: Bearer TOKEN\" on every\n"
        "                          endpoint but /health, TOKEN being FILE's first line.\n"
        "      --max-connections N  HTTP connections at once, 1..4096 (default 64).\n"
        "      --max-requests N    Generations at once, 1..4096 (default 32); more get\n"
        "                          429.\n"
        "      --check-config      Check the settings and exit.\n"
        "  -V, --version           Print the version and exit.\n"
        "  -h, --help              Print this help and exit.\n"
        "\n"
        "Exit status: 0 after SIGTERM or SIGINT; 1 when it cannot start; 2 for a bad\n"
        "command line.\n";

void m40gw_config_default(struct m40gw_config *c)
{
        memset(c, 0, sizeof(*c));
        snprintf(c->listen, sizeof(c->listen), "127.0.0.1:%d", M40GW_DEFAULT_PORT);
        c->max_connections = 64;
        c->max_requests = 32;
        c->max_body_bytes = 1u << 20;
        c->max_header_bytes = 32u << 10;
        c->request_timeout = 600;
        c->idle_timeout = 60;
        c->body_timeout = 30;
}

struct num_key {
        const char *name;
        size_t off;
        unsigned long lo, hi;
};

static const struct num_key num_keys[] = {
        {"max_connections", offsetof(struct m40gw_config, max_connections), 1, 4096},
        {"max_requests", offsetof(struct m40gw_config, max_requests), 1, 4096},
        {"max_body_bytes", offsetof(struct m40gw_config, max_body_bytes), 1024, 64u << 20},
        {"max_header_bytes", offsetof(struct m40gw_config, max_header_bytes), 4096, 1u << 20},
        {"request_timeout", offsetof(struct m40gw_config, request_timeout), 1, 86400},
        {"idle_timeout", offsetof(struct m40gw_config, idle_timeout), 1, 3600},
        {"body_timeout", offsetof(struct m40gw_config, body_timeout), 1, 3600},
};

/* set_num - name's value v into c. Returns 0, -ENOENT for an unknown name, -ERANGE. */
static int set_num(struct m40gw_config *c, const char *name, const char *v)
{
        for (size_t i = 0; i < sizeof(num_keys) / sizeof(num_keys[0]); i++) {
                const struct num_key *k = &num_keys[i];
                unsigned long n;
                char *end;

                if (strcmp(name, k->name))
                        continue;
                errno = 0;
                n = strtoul(v, &end, 10);
                if (errno || end == v || *end || *v == '-' || n < k->lo || n > k->hi)
                        return -ERANGE;
                *(uint32_t *)((char *)c + k->off) = (uint32_t)n;
                return 0;
        }
        return -ENOENT;
}

static int set_str(char *dst, size_t len, const char *v)
{
        if (strlen(v) >= len)
                return -ERANGE;
        snprintf(dst, len, "%s", v);
        return 0;
}

struct load {
        struct m40gw_config *c;
        char *why;
        size_t whylen;
        const char *path;
};

static int on_key(void *user, const char *section, const char *name, const char *value)
{
        struct load *l = user;
        struct m40gw_config *c = l->c;
        int r;

        if (strcmp(section, "gateway")) {
                snprintf(l->why, l->whylen, "%s: unknown section [%s]", l->path, section);
                return 0;
        }
        if (!strcmp(name, "listen"))
                r = set_str(c->listen, sizeof(c->listen), value);
        else if (!strcmp(name, "socket"))
                r = set_str(c->socket, sizeof(c->socket), value);
        else if (!strcmp(name, "token_file"))
                r = set_str(c->token_file, sizeof(c->token_file), value);
        else
                r = set_num(c, name, value);
        if (r == -ENOENT)
                snprintf(l->why, l->whylen, "%s: unknown key '%s' in [gateway]", l->path, name);
        else if (r)
                snprintf(l->why, l->whylen, "%s: '%s' out of range or malformed: '%s'", l->path,
                         name, value);
        return !r;
}

int m40gw_config_load(struct m40gw_config *c, const char *path, char *why, size_t whylen)
{
        struct load l = {c, why, whylen, path};
        int r;

        why[0] = 0;
        r = ini_parse(path, on_key, &l);
        if (r == -1) {
                r = -errno;
                snprintf(why, whylen, "%s: %s", path, strerror(errno));
                return r ? r : -EIO;
        }
        if (r) {
                if (why[0]) {
                        size_t n = strlen(why);

                        snprintf(why + n, whylen - n, " (line %d)", r);
                } else {
                        snprintf(why, whylen, "%s: line %d: malformed", path, r);
                }
                return M40_EFORMAT;
        }
        return 0;
}

int m40gw_token_load(struct m40gw_config *c, const char *path, char *why, size_t whylen)
{
        FILE *f = fopen(path, "re");
        char line[512];
        size_t n;

        if (!f) {
                int r = -errno;

                snprintf(why, whylen, "%s: %s", path, strerror(errno));
                return r;
        }
        if (!fgets(line, sizeof(line), f))
                line[0] = 0;
        fclose(f);
        n = strcspn(line, "\r\n");
        line[n] = 0;
        for (size_t i = 0; i < n; i++)
                if (line[i] <= ' ' || line[i] > '~')
                        n = 0;
        if (n < 16 || n >= sizeof(c->token)) {
                snprintf(why, whylen,
                         "%s: the token must be one line of 16 to 255 printable characters "
                         "without spaces",
                         path);
                return M40_EFORMAT;
        }
        memcpy(c->token, line, n + 1);
        return 0;
}

/* split_listen - HOST:PORT ([HOST]:PORT) into host (NUL-terminated, brackets gone) and
 * *ret_port (0..65535; 0: any free port). Returns 0 or -EINVAL (why said). */
static int split_listen(const char *hostport, char *host, const char **ret_port, char *why,
                        size_t whylen)
{
        const char *colon = strrchr(hostport, ':');
        unsigned long port;
        size_t n;
        char *end;

        if (!colon || colon == hostport || !colon[1] || (size_t)(colon - hostport) >= 256)
                goto bad;
        errno = 0;
        port = strtoul(colon + 1, &end, 10);
        if (errno || *end || port > 65535 || colon[1] == '-' || colon[1] == '+')
                goto bad;
        n = (size_t)(colon - hostport);
        if (hostport[0] == '[' && n > 2 && hostport[n - 1] == ']')
                snprintf(host, 256, "%.*s", (int)n - 2, hostport + 1);
        else
                snprintf(host, 256, "%.*s", (int)n, hostport);
        *ret_port = colon + 1;
        return 0;
bad:
        snprintf(why, whylen, "--listen wants HOST:PORT with a port in 0..65535, not '%s'",
                 hostport);
        return -EINVAL;
}

/* listen_on - a listening TCP socket bound to HOST:PORT. Returns it or -errno (why said). */
static int listen_on(const char *hostport, char *why, size_t whylen)
{
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                                 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
        struct addrinfo *ai;
        char host[256];
        const char *port;
        int fd = -1, r, one = 1;

        r = split_listen(hostport, host, &port, why, whylen);
        if (r)
                return r;
        r = getaddrinfo(host, port, &hints, &ai);
        if (r) {
                snprintf(why, whylen, "cannot listen on '%s': %s", hostport, gai_strerror(r));
                return -EINVAL;
        }
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
            bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 128)) {
                r = -errno;
                snprintf(why, whylen, "cannot listen on %s: %s", hostport, strerror(errno));
                if (fd >= 0)
                        close(fd);
                fd = r;
        }
        freeaddrinfo(ai);
        return fd;
}

enum { O_MAXCONN = 256, O_MAXREQ, O_CHECK };

/* parse_args - the command line into *c (after the config file it names). Returns -1 to
 * go on, else the exit status. */
static int parse_args(int argc, char **argv, struct m40gw_config *c, bool *check)
{
        static const struct option opts[] = {
                {"listen", required_argument, 0, 'l'},
                {"socket", required_argument, 0, 's'},
                {"config", required_argument, 0, 'c'},
                {"token-file", required_argument, 0, 't'},
                {"max-connections", required_argument, 0, O_MAXCONN},
                {"max-requests", required_argument, 0, O_MAXREQ},
                {"check-config", no_argument, 0, O_CHECK},
                {"version", no_argument, 0, 'V'},
                {"help", no_argument, 0, 'h'},
                {0, 0, 0, 0},
        };
        const char *listen = NULL, *sock = NULL, *config = NULL, *token = NULL;
        const char *maxconn = NULL, *maxreq = NULL, *port;
        char why[512], host[256];
        int o;

        while ((o = getopt_long(argc, argv, "l:s:c:t:Vh", opts, NULL)) != -1) {
                switch (o) {
                case 'l':
                        listen = optarg;
                        break;
                case 's':
                        sock = optarg;
                        break;
                case 'c':
                        config = optarg;
                        break;
                case 't':
                        token = optarg;
                        break;
                case O_MAXCONN:
                        maxconn = optarg;
                        break;
                case O_MAXREQ:
                        maxreq = optarg;
                        break;
                case O_CHECK:
                        *check = true;
                        break;
                case 'V':
                        printf("%s\n", M40_VERSION_TEXT("m40-gateway"));
                        return 0;
                case 'h':
                        fputs(usage, stdout);
                        return 0;
                default:
                        fputs("Try 'm40-gateway --help'.\n", stderr);
                        return 2;
                }
        }
        if (optind < argc) {
                fprintf(stderr,
                        "m40-gateway: unexpected argument '%s'\nTry 'm40-gateway --help'.\n",
                        argv[optind]);
                return 2;
        }
        if (config && m40gw_config_load(c, config, why, sizeof(why))) {
                fprintf(stderr, "m40-gateway: %s\n", why);
                return 1;
        }
        if ((listen && set_str(c->listen, sizeof(c->listen), listen)) ||
            (sock && set_str(c->socket, sizeof(c->socket), sock)) ||
            (token && set_str(c->token_file, sizeof(c->token_file), token))) {
                fputs("m40-gateway: an option's value is too long\n", stderr);
                return 2;
        }
        if ((maxconn && set_num(c, "max_connections", maxconn)) ||
            (maxreq && set_num(c, "max_requests", maxreq))) {
                fputs("m40-gateway: --max-connections and --max-requests take 1..4096\n", stderr);
                return 2;
        }
        if ((c->token_file[0] && m40gw_token_load(c, c->token_file, why, sizeof(why))) ||
            split_listen(c->listen, host, &port, why, sizeof(why))) {
                fprintf(stderr, "m40-gateway: %s\n", why);
                return 1;
        }
        return -1;
}

/* The socket systemd passed (m40-gateway.socket), -ENOENT when none, or -EINVAL. */
static int passed_socket(void)
{
        int n = sd_listen_fds(1);

        if (n < 0)
                return n;
        if (n == 0)
                return -ENOENT;
        if (n > 1 || sd_is_socket(SD_LISTEN_FDS_START, AF_UNSPEC, SOCK_STREAM, 1) <= 0)
                return -EINVAL;
        return SD_LISTEN_FDS_START;
}

/* bound - the address fd listens on, as HOST:PORT ([HOST]:PORT for IPv6), in buf. */
static const char *bound(int fd, char *buf, size_t len)
{
        struct sockaddr_storage a;
        socklen_t n = sizeof(a);
        char host[NI_MAXHOST], port[NI_MAXSERV];

        if (getsockname(fd, (struct sockaddr *)&a, &n) ||
            getnameinfo((struct sockaddr *)&a, n, host, sizeof(host), port, sizeof(port),
                        NI_NUMERICHOST | NI_NUMERICSERV)) {
                buf[0] = 0;
                return buf;
        }
        snprintf(buf, len, a.ss_family == AF_INET6 ? " [%s]:%s" : " %s:%s", host, port);
        return buf;
}

static struct MHD_Daemon *start(struct m40gw_config *c, int fd)
{
        return MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                                        MHD_USE_POLL | MHD_USE_ERROR_LOG,
                                0, NULL, NULL, (MHD_AccessHandlerCallback)m40gw_http_answer, c,
                                MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT,
                                (unsigned)c->max_connections, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                                (size_t)c->max_header_bytes, MHD_OPTION_CONNECTION_TIMEOUT,
                                (unsigned)c->idle_timeout, MHD_OPTION_THREAD_STACK_SIZE,
                                (size_t)STACK_BYTES, MHD_OPTION_NOTIFY_COMPLETED,
                                m40gw_http_completed, NULL, MHD_OPTION_END);
}

int main(int argc, char **argv)
{
        struct m40gw_config cfg;
        struct MHD_Daemon *d;
        bool check = false;
        char why[512];
        sigset_t set;
        bool passed;
        int fd, sig, r;

        m40gw_config_default(&cfg);
        r = parse_args(argc, argv, &cfg, &check);
        if (r >= 0)
                return r;
        if (check) {
                printf("m40-gateway: settings are valid\n");
                return 0;
        }
        signal(SIGPIPE, SIG_IGN);
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        pthread_sigmask(SIG_BLOCK, &set, NULL); /* the threads inherit it: sigwait below */
        fd = passed_socket();
        passed = fd >= 0;
        if (fd == -ENOENT)
                fd = listen_on(cfg.listen, why, sizeof(why));
        else if (fd < 0)
                snprintf(why, sizeof(why),
                         "systemd passed an unusable socket (expected one "
                         "listening stream socket)");
        if (fd < 0) {
                fprintf(stderr, "m40-gateway: %s\n", why);
                return 1;
        }
        d = start(&cfg, fd);
        if (!d) {
                fprintf(stderr, "m40-gateway: libmicrohttpd did not start\n");
                close(fd);
                return 1;
        }
        fprintf(stderr, "m40-gateway: listening on%s%s, m40d at %s%s\n",
                bound(fd, why, sizeof(why)), passed ? " (passed by systemd)" : "",
                cfg.socket[0]          ? cfg.socket
                : getenv("M40_SOCKET") ? getenv("M40_SOCKET")
                                       : M40_DEFAULT_SOCKET,
                cfg.token[0] ? ", bearer token required" : "");
        sd_notify(0, "READY=1");
        while (sigwait(&set, &sig))
                ;
        fprintf(stderr, "m40-gateway: %s: stopping\n", strsignal(sig));
        sd_notify(0, "STOPPING=1");
        m40gw_stopping = 1;
        MHD_stop_daemon(d);
        close(fd);
        m40gw_pool_done();
        m40gw_status_done();
        return 0;
}
