/* server.c - m40d's connections and event waiting (see server.h). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ipc/ipc.h"
#include "m40/error.h"
#include "m40d/log.h"
#include "m40d/server.h"

enum watch_kind { W_LISTEN, W_SIGNAL, W_CONN, W_BELL, W_ENGINE };

/* A connection that has not completed its HELLO by then is closed: it would otherwise hold
 * one of the max_clients places for as long as its peer likes. */
#define HANDSHAKE_TIMEOUT_MS 5000
/* Out of descriptors with no reserve to refuse on: accepting pauses this long. */
#define ACCEPT_PAUSE_MS 100
/* Running out of descriptors is logged at most this often. */
#define FD_LOG_EVERY_MS 60000

struct watch {
        enum watch_kind kind;
        struct conn *conn;
};

struct conn {
        struct conn *prev, *next;
        int fd;
        pid_t pid;
        uid_t uid;
        struct watch w_sock, w_bell;
        struct m40_sched_client *sc; /* NULL until the handshake is done */
        uint32_t version;            /* the client's protocol version (m40/proto.h) */
        int64_t deadline_ms;         /* CLOCK_MONOTONIC: end of the handshake window */
        size_t in_len;
        uint8_t in[sizeof(struct m40_proto_msg) + sizeof(struct m40_proto_hello)];
};

struct m40d_server {
        int epfd, lfd, sfd;
        gid_t gid;
        uint32_t max_clients, n_conns;
        struct m40_sched *s;
        struct m40_proto_status model;
        struct conn *conns;
        struct watch w_listen, w_signal, w_engine;
        int reserve_fd;     /* /dev/null, closed to accept-and-refuse at EMFILE */
        bool listen_paused; /* lfd is out of the epoll set until accept_resume_ms */
        int64_t accept_resume_ms;
        int64_t fd_log_ms;     /* when running out of descriptors was last logged */
        uint64_t n_fd_refused; /* connections refused for want of descriptors, unlogged */
};

static int64_t now_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int watch_add(struct m40d_server *srv, int fd, struct watch *w, uint32_t events)
{
        struct epoll_event e = {.events = events, .data.ptr = w};

        return epoll_ctl(srv->epfd, EPOLL_CTL_ADD, fd, &e) ? -errno : 0;
}

int m40d_server_new(int lfd, gid_t gid, uint32_t max_clients, struct m40_sched *s,
                    const struct m40_proto_status *model, struct m40d_server **ret)
{
        struct m40d_server *srv = calloc(1, sizeof(*srv));
        sigset_t set;
        int r, efd;

        if (!srv)
                return -ENOMEM;
        srv->lfd = lfd;
        srv->gid = gid;
        srv->max_clients = max_clients;
        srv->s = s;
        srv->model = *model;
        srv->w_listen.kind = W_LISTEN;
        srv->w_signal.kind = W_SIGNAL;
        srv->w_engine.kind = W_ENGINE;
        srv->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        srv->fd_log_ms = INT64_MIN / 2;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGHUP);
        srv->sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
        srv->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (srv->sfd < 0 || srv->epfd < 0 || srv->reserve_fd < 0) {
                r = -errno;
                goto fail;
        }
        efd = m40_sched_fd(s);
        r = efd < 0 ? efd : watch_add(srv, efd, &srv->w_engine, EPOLLIN);
        if (!r)
                r = watch_add(srv, lfd, &srv->w_listen, EPOLLIN);
        if (!r)
                r = watch_add(srv, srv->sfd, &srv->w_signal, EPOLLIN);
        if (r)
                goto fail;
        *ret = srv;
        return 0;
fail:
        srv->lfd = -1; /* the caller still owns it on failure */
        m40d_server_free(srv);
        return r;
}

static void conn_close(struct m40d_server *srv, struct conn *c, const char *why)
{
        if (why)
                m40d_log(LOG_INFO, "client pid %d uid %u: disconnected (%s)", (int)c->pid,
                         (unsigned)c->uid, why);
        /* the client holds a copy of the doorbell, so closing ours would not remove it */
        if (c->sc)
                epoll_ctl(srv->epfd, EPOLL_CTL_DEL, m40_sched_client_region(c->sc)->bell_in, NULL);
        c->sc = m40_sched_client_free(srv->s, c->sc);
        close(c->fd);
        if (c->prev)
                c->prev->next = c->next;
        else
                srv->conns = c->next;
        if (c->next)
                c->next->prev = c->prev;
        srv->n_conns--;
        free(c);
}

struct m40d_server *m40d_server_free(struct m40d_server *srv)
{
        if (!srv)
                return NULL;
        while (srv->conns)
                conn_close(srv, srv->conns, NULL);
        if (srv->lfd >= 0)
                close(srv->lfd);
        if (srv->sfd >= 0)
                close(srv->sfd);
        if (srv->epfd >= 0)
                close(srv->epfd);
        if (srv->reserve_fd >= 0)
                close(srv->reserve_fd);
        free(srv);
        return NULL;
}

void m40d_server_close_listener(struct m40d_server *srv)
{
        if (srv->lfd < 0)
                return;
        if (!srv->listen_paused)
                epoll_ctl(srv->epfd, EPOLL_CTL_DEL, srv->lfd, NULL);
        srv->listen_paused = false;
        close(srv->lfd);
        srv->lfd = -1;
}

/* refuse - answers a refusal and ends our side of the stream, so the client reads it
 * after EOF; what the client already sent is read away, so closing resets nothing. The
 * caller closes fd. */
static void refuse(int fd, int status)
{
        struct m40_proto_welcome w = {.status = status, .version = M40_PROTO_VERSION};
        char sink[256];

        m40_ipc_send(fd, M40_PROTO_WELCOME, &w, sizeof(w), NULL, 0);
        shutdown(fd, SHUT_WR);
        for (int i = 0; i < 16 && recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++) {
        }
}

/* Logs running out of descriptors, at most once per FD_LOG_EVERY_MS. */
static void log_fd_shortage(struct m40d_server *srv, int err, bool paused)
{
        int64_t now = now_ms();

        if (now - srv->fd_log_ms < FD_LOG_EVERY_MS)
                return;
        srv->fd_log_ms = now;
        m40d_log(LOG_WARNING,
                 "out of file descriptors (%s, %u clients): %llu connections refused%s; raise "
                 "LimitNOFILE= or lower max_clients",
                 m40_strerror(err), srv->n_conns, (unsigned long long)srv->n_fd_refused,
                 paused ? ", accepting paused" : "");
        srv->n_fd_refused = 0;
}

/* At EMFILE or ENFILE: gives the reserve descriptor up to accept one waiting connection
 * and refuse it with -EMFILE, so that its client hears why instead of hanging. Returns
 * whether a connection was taken off the queue. */
static bool refuse_on_reserve(struct m40d_server *srv)
{
        int fd;

        if (srv->reserve_fd < 0)
                return false;
        close(srv->reserve_fd);
        fd = accept4(srv->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd >= 0) {
                refuse(fd, -EMFILE);
                close(fd);
                srv->n_fd_refused++;
        }
        srv->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        return fd >= 0;
}

/* Takes the listener out of the epoll set for ACCEPT_PAUSE_MS (a level-triggered
 * listener that cannot be accepted from would wake us without end). */
static void pause_accept(struct m40d_server *srv)
{
        if (!srv->listen_paused)
                epoll_ctl(srv->epfd, EPOLL_CTL_DEL, srv->lfd, NULL);
        srv->listen_paused = true;
        srv->accept_resume_ms = now_ms() + ACCEPT_PAUSE_MS;
}

static void resume_accept(struct m40d_server *srv)
{
        if (!srv->listen_paused || now_ms() < srv->accept_resume_ms)
                return;
        srv->listen_paused = false;
        if (watch_add(srv, srv->lfd, &srv->w_listen, EPOLLIN))
                pause_accept(srv); /* try again later */
}

static void on_accept(struct m40d_server *srv)
{
        for (;;) {
                int fd = accept4(srv->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                struct conn *c;
                pid_t pid;
                uid_t uid;
                int r;

                if (fd < 0 && (errno == EINTR || errno == ECONNABORTED))
                        continue;
                if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
                        int err = -errno;

                        if (refuse_on_reserve(srv)) {
                                log_fd_shortage(srv, err, false);
                                continue;
                        }
                        pause_accept(srv);
                        log_fd_shortage(srv, err, true);
                        return;
                }
                if (fd < 0 && (errno == ENOBUFS || errno == ENOMEM)) {
                        pause_accept(srv);
                        return;
                }
                if (fd < 0)
                        return; /* EAGAIN, or the peer's error: epoll reports again */
                r = m40_ipc_peer_check(fd, srv->gid, &pid, &uid);
                if (r) {
                        if (r == -EACCES) /* peer_check read the credentials */
                                m40d_log(LOG_NOTICE, "refusing client pid %d uid %u: %s", (int)pid,
                                         (unsigned)uid, m40_strerror(r));
                        else
                                m40d_log(LOG_NOTICE, "refusing a client: no credentials: %s",
                                         m40_strerror(r));
                        refuse(fd, r);
                        close(fd);
                        continue;
                }
                if (srv->n_conns >= srv->max_clients) {
                        m40d_log(LOG_WARNING, "refusing client pid %d uid %u: %u clients already",
                                 (int)pid, (unsigned)uid, srv->n_conns);
                        refuse(fd, -EUSERS);
                        close(fd);
                        continue;
                }
                c = calloc(1, sizeof(*c));
                if (!c) {
                        close(fd);
                        continue;
                }
                c->fd = fd;
                c->deadline_ms = now_ms() + HANDSHAKE_TIMEOUT_MS;
                c->pid = pid;
                c->uid = uid;
                c->w_sock = (struct watch){.kind = W_CONN, .conn = c};
                c->w_bell = (struct watch){.kind = W_BELL, .conn = c};
                c->next = srv->conns;
                if (srv->conns)
                        srv->conns->prev = c;
                srv->conns = c;
                srv->n_conns++;
                if (watch_add(srv, fd, &c->w_sock, EPOLLIN | EPOLLRDHUP))
                        conn_close(srv, c, "epoll failed");
        }
}

static int handshake(struct m40d_server *srv, struct conn *c)
{
        struct m40_ipc_region *g;
        struct m40_proto_welcome w;
        int r;

        r = m40_ipc_hello_decode(c->in, sizeof(c->in), &c->version);
        if (r == M40_EVERSION)
                refuse(c->fd, r);
        if (r)
                return r;
        r = m40_sched_client_new(srv->s, &c->sc);
        if (r) {
                refuse(c->fd, r);
                return r;
        }
        g = m40_sched_client_region(c->sc);
        r = watch_add(srv, g->bell_in, &c->w_bell, EPOLLIN);
        if (r)
                return r;
        w = g->layout;
        w.status = 0;
        w.version = c->version; /* the region is the same in every served version */
        w.client_id = (uint32_t)c->fd;
        r = m40_ipc_send(c->fd, M40_PROTO_WELCOME, &w, sizeof(w),
                         (int[]){g->memfd, g->bell_in, g->bell_out}, 3);
        if (!r)
                m40d_log(LOG_INFO, "client pid %d uid %u: connected", (int)c->pid,
                         (unsigned)c->uid);
        return r;
}

/* status_reply - STATUS in the client's version: version 2 gets the first
 * M40_PROTO_STATUS_V2_BYTES, version 3 no held count (reserved then), versions 3 and 4
 * the first M40_PROTO_STATUS_V4_BYTES. */
static int status_reply(struct m40d_server *srv, struct conn *c)
{
        struct m40_proto_status st = srv->model;
        const uint32_t len = c->version >= 5   ? (uint32_t)sizeof(st)
                             : c->version >= 3 ? M40_PROTO_STATUS_V4_BYTES
                                               : M40_PROTO_STATUS_V2_BYTES;

        m40_sched_status(srv->s, &st);
        if (c->version < 4)
                st.held = 0;
        return m40_ipc_send(c->fd, M40_PROTO_STATUS, &st, len, NULL, 0);
}

/* Reads control messages; returns 0, or a reason to drop the connection. */
static int on_readable(struct m40d_server *srv, struct conn *c, const char **why)
{
        for (;;) {
                size_t want = c->sc ? sizeof(struct m40_proto_msg) : sizeof(c->in);
                ssize_t k = recv(c->fd, c->in + c->in_len, want - c->in_len, 0);
                struct m40_proto_msg m;
                int r;

                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0 && errno == EAGAIN)
                        return 0;
                if (k <= 0) {
                        *why = k ? "socket error" : "closed";
                        return -EPIPE;
                }
                c->in_len += (size_t)k;
                if (c->in_len < want)
                        continue;
                c->in_len = 0;
                if (!c->sc) {
                        r = handshake(srv, c);
                        if (r) {
                                *why = "handshake failed";
                                return r;
                        }
                        continue;
                }
                memcpy(&m, c->in, sizeof(m));
                if (m.type != M40_PROTO_STATUS_REQ || m.len) {
                        *why = "unexpected control message";
                        return M40_EPROTO;
                }
                r = status_reply(srv, c);
                if (r) {
                        *why = "cannot answer STATUS";
                        return r;
                }
        }
}

/* Closes connections that broke the protocol in their region or did not complete the
 * handshake in time; returns the ms until the next handshake deadline, or -1 if none. */
static int drop_broken(struct m40d_server *srv)
{
        struct conn *c = srv->conns;
        int64_t now = now_ms(), next_deadline = -1;

        while (c) {
                struct conn *next = c->next;
                const char *why = NULL;

                /* a HELLO may have come while the loop was busy: read it before judging */
                if (!c->sc && now >= c->deadline_ms && on_readable(srv, c, &why)) {
                        conn_close(srv, c, why);
                } else if (c->sc && m40_sched_client_broken(c->sc)) {
                        conn_close(srv, c, "protocol violation in its shared region");
                } else if (!c->sc && now >= c->deadline_ms) {
                        conn_close(srv, c, "no handshake within 5 s");
                } else if (!c->sc) {
                        int64_t left = c->deadline_ms - now;

                        if (next_deadline < 0 || left < next_deadline)
                                next_deadline = left;
                }
                c = next;
        }
        return (int)next_deadline;
}

int m40d_server_wait(struct m40d_server *srv, int timeout_ms)
{
        struct epoll_event ev[32];
        int sig = 0, n, until_deadline;

        resume_accept(srv);
        until_deadline = drop_broken(srv);
        if (srv->listen_paused) {
                int64_t left = srv->accept_resume_ms - now_ms();

                if (left < 0)
                        left = 0;
                if (until_deadline < 0 || left < until_deadline)
                        until_deadline = (int)left;
        }
        if (until_deadline >= 0 && (timeout_ms < 0 || until_deadline < timeout_ms))
                timeout_ms = until_deadline + 1;
        n = epoll_wait(srv->epfd, ev, 32, timeout_ms);
        for (int i = 0; i < n; i++) {
                struct watch *w = ev[i].data.ptr;
                const char *why = NULL;
                uint64_t v;

                switch (w->kind) {
                case W_LISTEN:
                        on_accept(srv);
                        break;
                case W_SIGNAL: {
                        struct signalfd_siginfo si;

                        while (read(srv->sfd, &si, sizeof(si)) == sizeof(si)) {
                                if (si.ssi_signo == SIGHUP)
                                        m40d_log(LOG_NOTICE, "SIGHUP: nothing to reload; "
                                                             "restart m40d to apply m40d.ini");
                                else
                                        sig = (int)si.ssi_signo;
                        }
                        break;
                }
                case W_ENGINE:
                        break; /* the step has finished: the caller's m40_sched_run collects it */
                case W_BELL:
                        if (read(m40_sched_client_region(w->conn->sc)->bell_in, &v, sizeof(v)) <
                            0) {
                                /* EAGAIN: rung and drained already */
                        }
                        break;
                case W_CONN:
                        if (on_readable(srv, w->conn, &why)) {
                                /* the bell watch of a closed conn may be later in ev[] */
                                for (int j = i + 1; j < n; j++)
                                        if (((struct watch *)ev[j].data.ptr)->conn == w->conn)
                                                ev[j].data.ptr = &srv->w_listen;
                                conn_close(srv, w->conn, why);
                        }
                        break;
                }
        }
        return sig;
}
