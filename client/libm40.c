/* libm40.c - libm40: the client end of the m40d protocol (m40/m40.h, m40/proto.h).
 *
 * Owns a connection: the control socket, the mapped shared region, both doorbells and an
 * epoll descriptor joining the daemon's doorbell with the socket's hang-up. Reading an
 * event frees its ring slot and wakes a daemon that waits for room (m40/proto.h,
 * backpressure), so a client that reads slowly only slows its own requests. Three locks
 * make a connection thread-safe: sub_lock serialises the submission side (ring and
 * payload), ev_lock the event side, sock_lock the control socket.
 *
 * The control socket is non-blocking: every exchange on it (connect, handshake, STATUS)
 * waits with poll() for at most the connection's timeout, so a stopped daemon yields
 * -ETIMEDOUT instead of a hang. The region the daemon hands over is checked before it is
 * mapped: a sealed memfd (it cannot shrink later) at least as large as announced. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "m40/m40.h"
#include "m40/paths.h"
#include "m40/proto.h"

struct m40_client {
        int sock, region_fd, bell_in, bell_out, epfd; /* bell_in: daemon -> us */
        struct m40_proto_region *r;
        size_t region_bytes;
        struct m40_proto_sub *sub; /* (sub_entries) */
        struct m40_proto_ev *ev;   /* (ev_entries) */
        uint8_t *payload;          /* (payload_bytes) */
        struct m40_proto_welcome w;
        pthread_mutex_t sub_lock, ev_lock, sock_lock;
        uint32_t sub_tail, payload_tail, ev_head; /* our private copies of what we write */
        uint64_t next_id;
        int timeout_ms;    /* limit of one control exchange; < 0: none */
        uint32_t ctl_owed; /* bytes of a timed-out STATUS reply still to skip */
        bool dead;         /* the daemon hung up (atomic: set by the event side) */
};

static uint32_t load_acq(const struct m40_proto_ctl *c)
{
        return __atomic_load_n(&c->value, __ATOMIC_ACQUIRE);
}

static void store_rel(struct m40_proto_ctl *c, uint32_t v)
{
        __atomic_store_n(&c->value, v, __ATOMIC_RELEASE);
}

static uint64_t now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The deadline of an exchange that starts now: 0 for none. */
static uint64_t deadline_in(int timeout_ms)
{
        return timeout_ms < 0 ? 0 : now_ns() + (uint64_t)timeout_ms * 1000000u;
}

/* Waits until fd is ready for events or the deadline (0: none) passes. Returns 0 or
 * -ETIMEDOUT; a signal only restarts the wait. */
static int wait_fd(int fd, short events, uint64_t deadline)
{
        for (;;) {
                struct pollfd p = {.fd = fd, .events = events};
                int ms = -1, k;

                if (deadline) {
                        uint64_t t = now_ns();

                        if (t >= deadline)
                                return -ETIMEDOUT;
                        ms = (int)((deadline - t + 999999u) / 1000000u);
                }
                k = poll(&p, 1, ms);
                if (k > 0)
                        return 0;
                if (k < 0 && errno != EINTR)
                        return -errno;
        }
}

static int sock_error(void)
{
        return errno == ECONNRESET ? -EPIPE : -errno;
}

static int write_all(int fd, const void *buf, size_t n, uint64_t deadline)
{
        const char *p = buf;

        while (n) {
                ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
                int r;

                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0 && errno == EAGAIN) {
                        r = wait_fd(fd, POLLOUT, deadline);
                        if (r)
                                return r;
                        continue;
                }
                if (k < 0)
                        return sock_error();
                p += k;
                n -= (size_t)k;
        }
        return 0;
}

/* Reads n bytes into buf (NULL: discards them); *done counts the bytes read, also when it
 * fails. */
static int read_all(int fd, void *buf, size_t n, uint64_t deadline, size_t *done)
{
        char *p = buf, sink[256];

        *done = 0;
        while (*done < n) {
                size_t want = n - *done;
                ssize_t k;
                int r;

                if (!buf && want > sizeof(sink))
                        want = sizeof(sink);
                k = recv(fd, buf ? p + *done : sink, want, 0);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0 && errno == EAGAIN) {
                        r = wait_fd(fd, POLLIN, deadline);
                        if (r)
                                return r;
                        continue;
                }
                if (k < 0)
                        return sock_error();
                if (k == 0)
                        return -EPIPE;
                *done += (size_t)k;
        }
        return 0;
}

static int send_msg(int fd, uint32_t type, const void *body, uint32_t len, uint64_t deadline)
{
        struct m40_proto_msg m = {.type = type, .len = len};
        int r = write_all(fd, &m, sizeof(m), deadline);

        return r ? r : write_all(fd, body, len, deadline);
}

/* Reads the WELCOME message and its three descriptors. */
static int recv_welcome(struct m40_client *c, uint64_t deadline)
{
        struct {
                struct m40_proto_msg m;
                struct m40_proto_welcome w;
        } buf;
        union {
                char b[CMSG_SPACE(3 * sizeof(int))];
                struct cmsghdr align;
        } ctl;
        struct iovec iov = {.iov_base = &buf, .iov_len = sizeof(buf)};
        struct msghdr mh = {.msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = ctl.b,
                            .msg_controllen = sizeof(ctl.b)};
        struct cmsghdr *cm;
        int fds[3] = {-1, -1, -1}, nfds = 0, r;
        size_t rest;
        ssize_t k;

        for (;;) {
                k = recvmsg(c->sock, &mh, MSG_CMSG_CLOEXEC);
                if (k >= 0 || (errno != EINTR && errno != EAGAIN))
                        break;
                if (errno == EAGAIN) {
                        r = wait_fd(c->sock, POLLIN, deadline);
                        if (r)
                                return r;
                }
        }
        if (k < 0)
                return sock_error();
        for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
                if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
                        size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);

                        for (size_t i = 0; i < n; i++) {
                                int fd;

                                memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
                                if (nfds < 3)
                                        fds[nfds++] = fd;
                                else
                                        close(fd);
                        }
                }
        }
        c->region_fd = fds[0];
        c->bell_out = fds[1];
        c->bell_in = fds[2];
        if (k == 0)
                return -EPIPE;
        /* the descriptors came with the first byte; the rest may come later */
        r = read_all(c->sock, (char *)&buf + k, sizeof(buf) - (size_t)k, deadline, &rest);
        if (r)
                return r;
        if (buf.m.type != M40_PROTO_WELCOME || buf.m.len != sizeof(buf.w) ||
            (mh.msg_flags & MSG_CTRUNC))
                return M40_EPROTO;
        if (buf.w.status < 0)
                return buf.w.status;
        if (nfds != 3)
                return M40_EPROTO;
        c->w = buf.w;
        return 0;
}

/* Checks that the daemon's layout fits in the region, then maps it. */
static int map_region(struct m40_client *c)
{
        const struct m40_proto_welcome *w = &c->w;
        const int need_seals = F_SEAL_SHRINK;
        struct stat st;
        int seals;
        uint64_t sub_end = (uint64_t)w->sub_off + (uint64_t)w->sub_entries * sizeof(*c->sub);
        uint64_t ev_end = (uint64_t)w->ev_off + (uint64_t)w->ev_entries * sizeof(*c->ev);
        uint64_t pl_end = (uint64_t)w->payload_off + w->payload_bytes;
        void *p;

        if (w->version != M40_PROTO_VERSION)
                return M40_EVERSION;
        if (!w->sub_entries || (w->sub_entries & (w->sub_entries - 1)) || !w->ev_entries ||
            (w->ev_entries & (w->ev_entries - 1)) || !w->payload_bytes ||
            w->region_bytes < sizeof(struct m40_proto_region) || sub_end > w->region_bytes ||
            ev_end > w->region_bytes || pl_end > w->region_bytes ||
            w->sub_off < sizeof(struct m40_proto_region) ||
            w->max_request_bytes > w->payload_bytes / 2)
                return M40_EPROTO;
        /* a memfd that cannot shrink and holds region_bytes: else a touch past its end (now
         * or after the daemon truncates it) would raise SIGBUS here */
        if (fstat(c->region_fd, &st))
                return -errno;
        seals = fcntl(c->region_fd, F_GET_SEALS);
        if (!S_ISREG(st.st_mode) || st.st_size < (off_t)w->region_bytes || seals < 0 ||
            (seals & need_seals) != need_seals)
                return M40_EPROTO;
        p = mmap(NULL, w->region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, c->region_fd, 0);
        if (p == MAP_FAILED)
                return -errno;
        c->r = p;
        c->region_bytes = w->region_bytes;
        c->sub = (struct m40_proto_sub *)((char *)p + w->sub_off);
        c->ev = (struct m40_proto_ev *)((char *)p + w->ev_off);
        c->payload = (uint8_t *)p + w->payload_off;
        c->sub_tail = load_acq(&c->r->sub_tail);
        c->payload_tail = load_acq(&c->r->payload_tail);
        c->ev_head = load_acq(&c->r->ev_head);
        return 0;
}

static int setup_epoll(struct m40_client *c)
{
        struct epoll_event e = {.events = EPOLLIN};

        c->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (c->epfd < 0)
                return -errno;
        e.data.fd = c->bell_in;
        if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->bell_in, &e))
                return -errno;
        e.events = EPOLLRDHUP;
        e.data.fd = c->sock;
        if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->sock, &e))
                return -errno;
        return 0;
}

/* Connects the non-blocking c->sock to sa; a full listen backlog (a daemon that does not
 * accept) is retried until the deadline. */
static int connect_by(struct m40_client *c, const struct sockaddr_un *sa, uint64_t deadline)
{
        for (;;) {
                if (!connect(c->sock, (const struct sockaddr *)sa, sizeof(*sa)))
                        return 0;
                if (errno == EINPROGRESS)
                        return wait_fd(c->sock, POLLOUT, deadline);
                if (errno != EAGAIN && errno != EINTR)
                        return -errno;
                if (deadline && now_ns() >= deadline)
                        return -ETIMEDOUT;
                usleep(10000);
        }
}

int m40_client_connect(const char *path, struct m40_client **ret_client)
{
        return m40_client_connect_timeout(path, M40_DEFAULT_TIMEOUT_MS, ret_client);
}

int m40_client_connect_timeout(const char *path, int timeout_ms, struct m40_client **ret_client)
{
        struct m40_proto_hello h = {.magic = M40_PROTO_MAGIC, .version = M40_PROTO_VERSION};
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        uint64_t deadline = deadline_in(timeout_ms);
        struct m40_client *c;
        int r;

        if (!path || !*path) {
                r = m40_client_socket(sa.sun_path, sizeof(sa.sun_path));
                if (r)
                        return r;
                path = sa.sun_path;
        }
        if (strlen(path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        if (!timeout_ms)
                return -EINVAL;
        if (path != sa.sun_path)
                strcpy(sa.sun_path, path);
        c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->region_fd = c->bell_in = c->bell_out = c->epfd = -1;
        pthread_mutex_init(&c->sub_lock, NULL);
        pthread_mutex_init(&c->ev_lock, NULL);
        pthread_mutex_init(&c->sock_lock, NULL);
        c->next_id = 1;
        c->timeout_ms = timeout_ms;
        c->sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (c->sock < 0) {
                r = -errno;
                goto fail;
        }
        r = connect_by(c, &sa, deadline);
        if (r)
                goto fail;
        r = send_msg(c->sock, M40_PROTO_HELLO, &h, sizeof(h), deadline);
        if (r == -EPIPE) {
                /* a refusing daemon may close before our HELLO: its answer is still queued */
                int why = recv_welcome(c, deadline);

                if (why < 0 && why != -EPIPE && why != -ETIMEDOUT)
                        r = why;
        } else if (!r) {
                r = recv_welcome(c, deadline);
        }
        if (!r)
                r = map_region(c);
        if (!r)
                r = setup_epoll(c);
        if (r)
                goto fail;
        *ret_client = c;
        return 0;
fail:
        m40_client_disconnect(c);
        return r;
}

struct m40_client *m40_client_disconnect(struct m40_client *c)
{
        if (!c)
                return NULL;
        if (c->r)
                munmap(c->r, c->region_bytes);
        if (c->sock >= 0)
                close(c->sock);
        if (c->region_fd >= 0)
                close(c->region_fd);
        if (c->bell_in >= 0)
                close(c->bell_in);
        if (c->bell_out >= 0)
                close(c->bell_out);
        if (c->epfd >= 0)
                close(c->epfd);
        pthread_mutex_destroy(&c->sub_lock);
        pthread_mutex_destroy(&c->ev_lock);
        pthread_mutex_destroy(&c->sock_lock);
        free(c);
        return NULL;
}

void m40_request_init(struct m40_request *r)
{
        memset(r, 0, sizeof(*r));
        r->top_p = 1.0f;
        r->repeat_penalty = 1.0f;
}

/* Rings the daemon's doorbell when it sleeps (after our release store of the tail). */
static void ring_daemon(struct m40_client *c)
{
        uint64_t one = 1;

        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        if (load_acq(&c->r->daemon_sleeping) && write(c->bell_out, &one, sizeof(one)) < 0) {
                /* the eventfd counter is saturated: the daemon is awake anyway */
        }
}

static uint32_t role_kind(const char *role)
{
        if (!role)
                return 0;
        if (!strcmp(role, "system"))
                return M40_PROTO_ITEM_SYSTEM;
        if (!strcmp(role, "user"))
                return M40_PROTO_ITEM_USER;
        if (!strcmp(role, "assistant"))
                return M40_PROTO_ITEM_ASSISTANT;
        return 0;
}

/* Appends one record at payload offset *pos (within the contiguous run reserved). */
static void put_item(uint8_t *dst, size_t *pos, uint32_t kind, const char *s, size_t len)
{
        struct m40_proto_item it = {.kind = kind, .len = (uint32_t)len};

        memcpy(dst + *pos, &it, sizeof(it));
        memcpy(dst + *pos + sizeof(it), s, len);
        memset(dst + *pos + sizeof(it) + len, 0,
               m40_proto_item_size((uint32_t)len) - sizeof(it) - len);
        *pos += m40_proto_item_size((uint32_t)len);
}

static int request_size(const struct m40_client *c, const struct m40_request *rq,
                        uint32_t *ret_size)
{
        uint64_t n = 0;

        if (!rq->prompt == !rq->n_messages || rq->n_stop > M40_PROTO_MAX_STOPS ||
            (rq->n_stop && !rq->stop) || (rq->n_messages && !rq->messages))
                return -EINVAL;
        if (rq->n_messages > M40_PROTO_MAX_MESSAGES)
                return -E2BIG;
        if (rq->prompt)
                n += m40_proto_item_size(0) + strlen(rq->prompt) + 3;
        for (size_t i = 0; i < rq->n_messages; i++) {
                if (!role_kind(rq->messages[i].role) || !rq->messages[i].content)
                        return -EINVAL;
                n += m40_proto_item_size(0) + strlen(rq->messages[i].content) + 3;
        }
        for (size_t i = 0; i < rq->n_stop; i++) {
                size_t l = rq->stop[i] ? strlen(rq->stop[i]) : 0;

                if (!l || l > M40_PROTO_MAX_STOP_LEN)
                        return -EINVAL;
                n += m40_proto_item_size((uint32_t)l);
        }
        if (n > c->w.max_request_bytes)
                return -E2BIG;
        *ret_size = (uint32_t)n;
        return 0;
}

/* Reserves len contiguous payload bytes; returns the counter value where they start. */
static int payload_reserve(struct m40_client *c, uint32_t len, uint32_t *ret_pos)
{
        const uint32_t size = c->w.payload_bytes;
        uint32_t head = load_acq(&c->r->payload_head);
        uint32_t pos = c->payload_tail, off = pos % size, skip = 0;

        if (off + len > size)
                skip = size - off; /* records never wrap: start over at offset 0 */
        if ((uint32_t)(pos + skip + len - head) > size)
                return -EAGAIN;
        *ret_pos = pos + skip;
        return 0;
}

static int push_sub(struct m40_client *c, const struct m40_proto_sub *s)
{
        uint32_t head = load_acq(&c->r->sub_head);

        if ((uint32_t)(c->sub_tail - head) >= c->w.sub_entries)
                return -EAGAIN;
        c->sub[c->sub_tail & (c->w.sub_entries - 1)] = *s;
        c->sub_tail++;
        store_rel(&c->r->sub_tail, c->sub_tail);
        ring_daemon(c);
        return 0;
}

int m40_client_submit(struct m40_client *c, const struct m40_request *rq, uint64_t *ret_id)
{
        struct m40_proto_sub s = {.op = M40_PROTO_OP_SUBMIT};
        uint32_t size, pos;
        size_t at = 0;
        uint8_t *dst;
        int r = request_size(c, rq, &size);

        if (r)
                return r;
        s.flags = (rq->n_messages ? M40_PROTO_SUB_CHAT : 0) |
                  (rq->flags & M40_REQUEST_IGNORE_EOS ? M40_PROTO_SUB_IGNORE_EOS : 0) |
                  (rq->flags & M40_REQUEST_TOKENS ? M40_PROTO_SUB_TOKENS : 0);
        s.set = rq->set & M40_PROTO_SET_ALL;
        s.max_tokens = rq->max_tokens;
        s.temperature = rq->temperature;
        s.top_k = rq->top_k;
        s.top_p = rq->top_p;
        s.min_p = rq->min_p;
        s.repeat_penalty = rq->repeat_penalty;
        s.seed = rq->seed;
        s.presence_penalty = rq->presence_penalty;
        s.frequency_penalty = rq->frequency_penalty;
        pthread_mutex_lock(&c->sub_lock);
        if (__atomic_load_n(&c->dead, __ATOMIC_RELAXED)) {
                r = -EPIPE;
                goto unlock;
        }
        r = payload_reserve(c, size, &pos);
        if (r)
                goto unlock;
        /* the records may be shorter than size (strings were measured with padding) */
        dst = c->payload + pos % c->w.payload_bytes;
        if (rq->prompt)
                put_item(dst, &at, M40_PROTO_ITEM_PROMPT, rq->prompt, strlen(rq->prompt));
        for (size_t i = 0; i < rq->n_messages; i++)
                put_item(dst, &at, role_kind(rq->messages[i].role), rq->messages[i].content,
                         strlen(rq->messages[i].content));
        for (size_t i = 0; i < rq->n_stop; i++)
                put_item(dst, &at, M40_PROTO_ITEM_STOP, rq->stop[i], strlen(rq->stop[i]));
        s.payload_pos = pos;
        s.payload_len = (uint32_t)at;
        s.req = c->next_id;
        s.t_submit_ns = now_ns();
        r = push_sub(c, &s);
        if (r)
                goto unlock;
        c->payload_tail = pos + (uint32_t)at;
        store_rel(&c->r->payload_tail, c->payload_tail);
        *ret_id = c->next_id++;
unlock:
        pthread_mutex_unlock(&c->sub_lock);
        return r;
}

int m40_client_cancel(struct m40_client *c, uint64_t id)
{
        struct m40_proto_sub s = {.op = M40_PROTO_OP_CANCEL, .req = id};
        int r;

        s.t_submit_ns = now_ns();
        pthread_mutex_lock(&c->sub_lock);
        s.payload_pos = c->payload_tail;
        r = __atomic_load_n(&c->dead, __ATOMIC_RELAXED) ? -EPIPE : push_sub(c, &s);
        pthread_mutex_unlock(&c->sub_lock);
        return r;
}

/* Takes one event off the ring into *ret, ringing the daemon's doorbell when it waits for
 * room in the ring; -EAGAIN when empty. Caller holds ev_lock. */
static int pop_event(struct m40_client *c, struct m40_reply *ret)
{
        uint32_t tail = load_acq(&c->r->ev_tail);
        struct m40_proto_ev e;
        uint64_t one = 1;

        if (tail == c->ev_head)
                return -EAGAIN;
        if ((uint32_t)(tail - c->ev_head) > c->w.ev_entries)
                return M40_EPROTO;
        e = c->ev[c->ev_head & (c->w.ev_entries - 1)];
        c->ev_head++;
        store_rel(&c->r->ev_head, c->ev_head);
        /* a slot is free: wake a daemon that sleeps on our full ring (backpressure) */
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        if (load_acq(&c->r->ev_waiting) && write(c->bell_out, &one, sizeof(one)) < 0) {
                /* the eventfd counter is saturated: the daemon is awake anyway */
        }
        if (e.len > M40_PROTO_TEXT_MAX)
                return M40_EPROTO;
        memset(ret, 0, sizeof(*ret));
        ret->type = e.type;
        ret->id = e.req;
        memcpy(ret->text, e.text, e.len);
        ret->text[e.len] = 0;
        ret->len = e.len;
        ret->token = e.token;
        ret->finish = e.finish;
        ret->error = e.error;
        ret->n_prompt = e.n_prompt;
        ret->n_generated = e.n_generated;
        ret->t_daemon_ns = e.t_ns;
        ret->t_submit_ns = e.t_submit_ns;
        return 0;
}

static void drain_bell(struct m40_client *c)
{
        uint64_t v;

        if (read(c->bell_in, &v, sizeof(v)) < 0) {
                /* EAGAIN: nothing rang */
        }
}

static bool socket_hung_up(struct m40_client *c)
{
        struct pollfd p = {.fd = c->sock, .events = POLLRDHUP};

        return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

int m40_client_next(struct m40_client *c, int timeout_ms, struct m40_reply *ret)
{
        uint64_t deadline = timeout_ms > 0 ? now_ns() + (uint64_t)timeout_ms * 1000000u : 0;
        int r;

        pthread_mutex_lock(&c->ev_lock);
        for (;;) {
                struct epoll_event e[2];
                int wait_ms = timeout_ms;

                r = pop_event(c, ret);
                if (r != -EAGAIN)
                        break;
                /* about to sleep: raise the flag, then look once more */
                store_rel(&c->r->client_sleeping, 1);
                __atomic_thread_fence(__ATOMIC_SEQ_CST);
                r = pop_event(c, ret);
                if (r != -EAGAIN)
                        break;
                if (socket_hung_up(c)) {
                        __atomic_store_n(&c->dead, true, __ATOMIC_RELAXED);
                        r = -EPIPE;
                        break;
                }
                if (timeout_ms == 0) {
                        /* re-arm m40_client_fd(): clear the doorbell, then look once more;
                         * the flag stays raised, so a later event rings it again */
                        drain_bell(c);
                        r = pop_event(c, ret);
                        if (r != -EAGAIN)
                                break;
                        goto unlock;
                }
                if (timeout_ms > 0) {
                        uint64_t t = now_ns();

                        if (t >= deadline) {
                                r = -ETIMEDOUT;
                                break;
                        }
                        wait_ms = (int)((deadline - t + 999999u) / 1000000u);
                }
                r = epoll_wait(c->epfd, e, 2, wait_ms);
                if (r < 0 && errno == EINTR) {
                        r = -EINTR;
                        break;
                }
                drain_bell(c);
        }
        store_rel(&c->r->client_sleeping, 0);
unlock:
        pthread_mutex_unlock(&c->ev_lock);
        return r;
}

int m40_client_fd(struct m40_client *c)
{
        return c->epfd;
}

int m40_client_set_timeout(struct m40_client *c, int timeout_ms)
{
        if (!timeout_ms)
                return -EINVAL;
        pthread_mutex_lock(&c->sock_lock);
        c->timeout_ms = timeout_ms;
        pthread_mutex_unlock(&c->sock_lock);
        return 0;
}

size_t m40_client_max_request_bytes(const struct m40_client *c)
{
        return c->w.max_request_bytes;
}

static void copy_timing(struct m40_timing *to, const struct m40_proto_timing *from)
{
        to->count = from->count;
        to->sum_ns = from->sum_ns;
        to->max_ns = from->max_ns;
        to->p50_ns = from->p50_ns;
        to->p99_ns = from->p99_ns;
}

int m40_client_status(struct m40_client *c, struct m40_status *ret_status)
{
        const uint32_t whole = sizeof(struct m40_proto_msg) + sizeof(struct m40_proto_status);
        uint64_t deadline = deadline_in(c->timeout_ms);
        struct m40_proto_msg m;
        struct m40_proto_status s;
        size_t got = 0, got_body = 0;
        int r;

        pthread_mutex_lock(&c->sock_lock);
        /* the rest of a reply that came too late for an earlier call */
        r = read_all(c->sock, NULL, c->ctl_owed, deadline, &got);
        c->ctl_owed -= (uint32_t)got;
        if (r)
                goto unlock;
        r = send_msg(c->sock, M40_PROTO_STATUS_REQ, NULL, 0, deadline);
        if (r)
                goto unlock; /* a partial STATUS_REQ breaks the stream: the daemon hangs up */
        r = read_all(c->sock, &m, sizeof(m), deadline, &got);
        if (!r && (m.type != M40_PROTO_STATUS || m.len != sizeof(s)))
                r = M40_EPROTO;
        if (!r)
                r = read_all(c->sock, &s, sizeof(s), deadline, &got_body);
        if (r == -ETIMEDOUT)
                c->ctl_owed = whole - (uint32_t)(got + got_body);
unlock:
        pthread_mutex_unlock(&c->sock_lock);
        if (r)
                return r;
        memset(ret_status, 0, sizeof(*ret_status));
#define COPY_STR(dst, src)                                                                         \
        do {                                                                                       \
                memcpy(dst, src, sizeof(src));                                                     \
                dst[sizeof(src) - 1] = 0;                                                          \
        } while (0)
        COPY_STR(ret_status->model, s.model);
        COPY_STR(ret_status->arch, s.arch);
        COPY_STR(ret_status->backend, s.backend);
        COPY_STR(ret_status->chat_template, s.chat_tmpl);
#undef COPY_STR
        ret_status->clients = s.clients;
        ret_status->active = s.active;
        ret_status->queued = s.queued;
        ret_status->max_sequences = s.max_seqs;
        ret_status->kv_pages_used = s.kv_pages_used;
        ret_status->kv_pages_total = s.kv_pages_total;
        ret_status->n_ctx = s.n_ctx;
        ret_status->n_vocab = s.n_vocab;
        ret_status->prompt_tokens = s.prompt_tokens;
        ret_status->generated_tokens = s.generated_tokens;
        ret_status->requests = s.requests;
        ret_status->tokens_per_s = isfinite(s.tokens_per_s) ? s.tokens_per_s : 0;
        ret_status->draining = s.draining != 0;
        ret_status->kv_page_tokens = s.kv_page_tokens;
        ret_status->kv_page_bytes = s.kv_page_bytes;
        ret_status->held = s.held;
        ret_status->decode_width = s.decode_width;
        ret_status->decode_running = s.decode_running;
        copy_timing(&ret_status->step, &s.step);
        copy_timing(&ret_status->gap, &s.gap);
        copy_timing(&ret_status->wake, &s.wake);
        copy_timing(&ret_status->handover, &s.handover);
        return 0;
}

const char *m40_finish_name(uint32_t finish)
{
        static const char *const names[] = {"?",      "length",  "eos", "stop",
                                            "cancel", "context", "kv"};

        return finish < sizeof(names) / sizeof(names[0]) ? names[finish] : "?";
}
