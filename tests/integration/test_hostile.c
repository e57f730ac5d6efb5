/* test_hostile.c - acceptance 4 of issue 5: hostile clients speaking the raw protocol
 * (m40/proto.h) write random and adversarial entries into their regions - bad lengths,
 * indexes past the rings, payloads outside the area, malformed records, entries changed
 * while the daemon reads them, a corrupted event-ring head, bad handshakes - while a good
 * client keeps streaming. The daemon must reject or disconnect each hostile client, keep
 * serving the good one with correct output, and stay up (run it in an ASan/UBSan build to
 * check memory safety too).
 *
 *   test_hostile M40D MODEL.gguf */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "itest.h"
#include "m40/proto.h"

#define TEXT_CAP 4096

static const char *sock;
static volatile int stop_good;
static int good_done, good_bad;

struct raw {
        int fd, fds[3]; /* region, bell to daemon, bell from daemon */
        struct m40_proto_welcome w;
        uint8_t *base;
        struct m40_proto_region *r;
        struct m40_proto_sub *sub;
        uint8_t *payload;
};

static int raw_connect(struct raw *x, uint32_t magic, uint32_t version)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct {
                struct m40_proto_msg m;
                struct m40_proto_hello h;
        } hello = {{M40_PROTO_HELLO, sizeof(struct m40_proto_hello)}, {magic, version, 0, 0}};
        struct {
                struct m40_proto_msg m;
                struct m40_proto_welcome w;
        } in;
        union {
                char b[CMSG_SPACE(3 * sizeof(int))];
                struct cmsghdr a;
        } ctl;
        struct iovec iov = {&in, sizeof(in)};
        struct msghdr mh = {.msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = ctl.b,
                            .msg_controllen = sizeof(ctl.b)};
        struct cmsghdr *cm;

        memset(x, 0, sizeof(*x));
        strcpy(sa.sun_path, sock);
        x->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (connect(x->fd, (struct sockaddr *)&sa, sizeof(sa)) ||
            write(x->fd, &hello, sizeof(hello)) != sizeof(hello) ||
            recvmsg(x->fd, &mh, MSG_WAITALL) != sizeof(in))
                return -1;
        x->w = in.w;
        if (in.w.status)
                return in.w.status;
        cm = CMSG_FIRSTHDR(&mh);
        if (!cm || cm->cmsg_len != CMSG_LEN(3 * sizeof(int)))
                return -1;
        memcpy(x->fds, CMSG_DATA(cm), sizeof(x->fds));
        x->base = mmap(NULL, in.w.region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, x->fds[0], 0);
        if (x->base == MAP_FAILED)
                return -1;
        x->r = (struct m40_proto_region *)x->base;
        x->sub = (struct m40_proto_sub *)(x->base + in.w.sub_off);
        x->payload = x->base + in.w.payload_off;
        return 0;
}

static void raw_close(struct raw *x)
{
        if (x->base && x->base != MAP_FAILED)
                munmap(x->base, x->w.region_bytes);
        for (int i = 0; i < 3; i++)
                if (x->fds[i] > 0)
                        close(x->fds[i]);
        close(x->fd);
}

static void ring(struct raw *x)
{
        uint64_t one = 1;

        if (write(x->fds[1], &one, sizeof(one)) != sizeof(one))
                perror("doorbell");
}

/* Whether the daemon closed our socket within ms. */
static bool dropped(struct raw *x, int ms)
{
        struct pollfd p = {.fd = x->fd, .events = POLLIN | POLLRDHUP};
        char b[512];

        while (poll(&p, 1, ms) > 0) {
                ssize_t k = recv(x->fd, b, sizeof(b), MSG_DONTWAIT);

                if (k <= 0)
                        return k == 0 || errno != EAGAIN;
        }
        return false;
}

/* Publishes n entries (already written) and rings. */
static void publish(struct raw *x, uint32_t tail)
{
        __atomic_store_n(&x->r->sub_tail.value, tail, __ATOMIC_RELEASE);
        ring(x);
}

static struct m40_proto_sub valid_sub(uint64_t req, uint32_t pos, const char *prompt,
                                      uint8_t *payload, uint32_t size)
{
        struct m40_proto_sub s = {.op = M40_PROTO_OP_SUBMIT, .req = req, .max_tokens = 8};
        struct m40_proto_item it = {M40_PROTO_ITEM_PROMPT, (uint32_t)strlen(prompt)};

        memcpy(payload + pos % size, &it, sizeof(it));
        memcpy(payload + pos % size + sizeof(it), prompt, it.len);
        s.payload_pos = pos;
        s.payload_len = m40_proto_item_size(it.len);
        return s;
}

static void *good(void *arg)
{
        char ref[TEXT_CAP], out[TEXT_CAP];
        int32_t toks[4096];
        size_t n;

        (void)arg;
        if (itest_generate(sock, itest_prompts[0], 32, ref, TEXT_CAP, toks, &n)) {
                good_bad = 1;
                return NULL;
        }
        while (!stop_good) {
                if (itest_generate(sock, itest_prompts[0], 32, out, TEXT_CAP, toks, &n) ||
                    strcmp(out, ref)) {
                        good_bad = 1;
                        return NULL;
                }
                good_done++;
        }
        return NULL;
}

struct flipper {
        struct raw *x;
        volatile int stop;
};

static void *flip(void *arg)
{
        struct flipper *f = arg;
        unsigned seed = 7;

        while (!f->stop) {
                uint32_t i = (uint32_t)rand_r(&seed);
                uint8_t *p = (uint8_t *)f->x->sub;

                p[i % (f->x->w.sub_entries * sizeof(struct m40_proto_sub))] ^= (uint8_t)i;
                f->x->payload[(i >> 8) % 256] ^= (uint8_t)(i >> 3);
        }
        return NULL;
}

/* A client whose entries change under the daemon's feet while it reads them. */
static int mutating_client(void)
{
        struct raw x;
        struct flipper f = {.x = &x};
        pthread_t th;
        uint32_t tail = 0, size;

        CHECK(raw_connect(&x, M40_PROTO_MAGIC, M40_PROTO_VERSION) == 0);
        size = x.w.payload_bytes;
        CHECK(pthread_create(&th, NULL, flip, &f) == 0);
        for (int i = 0; i < 2000 && !dropped(&x, 0); i++) {
                uint32_t head = __atomic_load_n(&x.r->sub_head.value, __ATOMIC_ACQUIRE);

                if (tail - head >= x.w.sub_entries)
                        continue;
                x.sub[tail % x.w.sub_entries] = valid_sub(i, 0, "The cat sat", x.payload, size);
                publish(&x, ++tail);
        }
        f.stop = 1;
        pthread_join(th, NULL);
        raw_close(&x);
        return 0;
}

static int random_client(unsigned seed)
{
        struct raw x;
        uint8_t *p;

        CHECK(raw_connect(&x, M40_PROTO_MAGIC, M40_PROTO_VERSION) == 0);
        p = x.base + sizeof(struct m40_proto_region);
        for (size_t i = 0; i < x.w.region_bytes - sizeof(struct m40_proto_region); i++)
                p[i] = (uint8_t)rand_r(&seed);
        publish(&x, (uint32_t)rand_r(&seed) % (2 * x.w.sub_entries));
        __atomic_store_n(&x.r->ev_head.value, (uint32_t)rand_r(&seed) % 4, __ATOMIC_RELEASE);
        dropped(&x, 200);
        raw_close(&x);
        return 0;
}

/* Each case must end with the daemon dropping the client (want_drop) or answering with
 * an ERROR event. */
static int adversarial(int which)
{
        struct raw x;
        struct m40_proto_sub s;
        uint32_t size;
        bool want_drop = true;

        CHECK(raw_connect(&x, M40_PROTO_MAGIC, M40_PROTO_VERSION) == 0);
        size = x.w.payload_bytes;
        s = valid_sub(1, 0, "Once upon a time", x.payload, size);
        switch (which) {
        case 0: /* tail far past the ring */
                publish(&x, 1000000);
                break;
        case 1: /* payload longer than the limit */
                s.payload_len = x.w.max_request_bytes + 1;
                x.sub[0] = s;
                publish(&x, 1);
                break;
        case 2: /* payload running off the end of the area */
                s.payload_pos = size - 4;
                x.sub[0] = s;
                publish(&x, 1);
                break;
        case 3: /* unknown operation */
                s.op = 99;
                x.sub[0] = s;
                publish(&x, 1);
                break;
        case 4: /* a record claiming more bytes than the payload has: ERROR event */
                ((struct m40_proto_item *)x.payload)->len = 1u << 30;
                x.sub[0] = s;
                publish(&x, 1);
                want_drop = false;
                break;
        case 5: /* event-ring head moved past what the daemon wrote */
                __atomic_store_n(&x.r->ev_head.value, 12345, __ATOMIC_RELEASE);
                x.sub[0] = s;
                publish(&x, 1);
                break;
        case 6: /* an unexpected control message */ {
                struct m40_proto_msg m = {77, 0};

                CHECK(write(x.fd, &m, sizeof(m)) == sizeof(m));
                break;
        }
        case 7: /* growing or shrinking the sealed region is refused */
                CHECK(ftruncate(x.fds[0], 4096) < 0 && errno == EPERM);
                CHECK(ftruncate(x.fds[0], (off_t)x.w.region_bytes * 2) < 0 && errno == EPERM);
                publish(&x, 1000000);
                break;
        }
        if (want_drop) {
                CHECK(dropped(&x, 5000));
        } else {
                uint32_t tail = 0;
                struct m40_proto_ev *ev = (struct m40_proto_ev *)(x.base + x.w.ev_off);

                for (int i = 0; i < 500 && !tail; i++) {
                        tail = __atomic_load_n(&x.r->ev_tail.value, __ATOMIC_ACQUIRE);
                        usleep(10000);
                }
                CHECK(tail == 1 && ev[0].type == M40_PROTO_EV_ERROR && ev[0].req == 1);
        }
        raw_close(&x);
        return 0;
}

int main(int argc, char **argv)
{
        struct itest_daemon d;
        struct raw x;
        pthread_t th;

        if (argc < 3)
                return 2;
        if (itest_daemon_start(&d, argv[1], argv[2], "[engine]\nthreads = 2\n", NULL))
                return 1;
        sock = d.sock;
        CHECK(pthread_create(&th, NULL, good, NULL) == 0);
        CHECK(raw_connect(&x, 0x12345678, M40_PROTO_VERSION) < 0); /* bad magic: dropped */
        raw_close(&x);
        CHECK(raw_connect(&x, M40_PROTO_MAGIC, 99) == M40_EVERSION);
        raw_close(&x);
        {
                /* A peer that never says HELLO is closed after the 5 s handshake window. */
                struct raw idle = {.fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)};
                struct sockaddr_un a = {.sun_family = AF_UNIX};

                snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock);
                CHECK(idle.fd >= 0 && connect(idle.fd, (struct sockaddr *)&a, sizeof(a)) == 0);
                CHECK(!dropped(&idle, 3000));
                CHECK(dropped(&idle, 4000));
                close(idle.fd);
        }
        for (int i = 0; i < 8; i++) {
                if (adversarial(i)) {
                        fprintf(stderr, "adversarial case %d failed\n", i);
                        return 1;
                }
                CHECK(kill(d.pid, 0) == 0);
        }
        for (unsigned i = 0; i < 200; i++)
                CHECK(random_client(i) == 0);
        CHECK(kill(d.pid, 0) == 0);
        CHECK(mutating_client() == 0);
        CHECK(kill(d.pid, 0) == 0);
        stop_good = 1;
        pthread_join(th, NULL);
        CHECK(!good_bad && good_done > 0);
        CHECK(itest_idle(sock) == 0);
        CHECK(itest_daemon_stop(&d) == 0);
        printf("ok: hostile clients rejected or dropped; %d good requests undisturbed\n",
               good_done);
        return 0;
}
