/* region.c - one client's shared region: creation (sealed memfd, doorbells), the
 * submission ring read with copy-then-validate, the event ring written by the daemon, and
 * the sleeping-flag handshake (m40/proto.h). */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ipc/ipc.h"
#include "m40/error.h"

static uint32_t load_acq(const struct m40_proto_ctl *c)
{
        return __atomic_load_n(&c->value, __ATOMIC_ACQUIRE);
}

static void store_rel(struct m40_proto_ctl *c, uint32_t v)
{
        __atomic_store_n(&c->value, v, __ATOMIC_RELEASE);
}

static bool pow2(uint32_t v)
{
        return v && !(v & (v - 1));
}

static uint32_t round_up(uint32_t v, uint32_t a)
{
        return (v + a - 1) / a * a;
}

int m40_ipc_region_init(struct m40_ipc_region *g, uint32_t sub_entries, uint32_t ev_entries,
                        uint32_t max_request_bytes)
{
        struct m40_proto_welcome *w = &g->layout;
        uint32_t off;
        void *p;
        int r;

        memset(g, 0, sizeof(*g));
        g->memfd = g->bell_in = g->bell_out = -1;
        if (!pow2(sub_entries) || !pow2(ev_entries) || sub_entries > M40_IPC_MAX_ENTRIES ||
            ev_entries > M40_IPC_MAX_ENTRIES || !max_request_bytes ||
            max_request_bytes > M40_IPC_MAX_REQUEST_BYTES)
                return -EINVAL;
        w->version = M40_PROTO_VERSION;
        w->sub_entries = sub_entries;
        w->ev_entries = ev_entries;
        w->max_request_bytes = max_request_bytes;
        off = round_up(sizeof(struct m40_proto_region), 64);
        w->sub_off = off;
        off = round_up(off + sub_entries * (uint32_t)sizeof(struct m40_proto_sub), 64);
        w->ev_off = off;
        off = round_up(off + ev_entries * (uint32_t)sizeof(struct m40_proto_ev), 4096);
        w->payload_off = off;
        w->payload_bytes = round_up(2 * max_request_bytes, 4096);
        w->region_bytes = off + w->payload_bytes;

        g->memfd = memfd_create("m40-client", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (g->memfd < 0)
                goto fail_errno;
        if (ftruncate(g->memfd, w->region_bytes) ||
            fcntl(g->memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL))
                goto fail_errno;
        p = mmap(NULL, w->region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, g->memfd, 0);
        if (p == MAP_FAILED)
                goto fail_errno;
        g->r = p;
        g->bytes = w->region_bytes;
        g->sub = (struct m40_proto_sub *)((char *)p + w->sub_off);
        g->ev = (struct m40_proto_ev *)((char *)p + w->ev_off);
        g->payload = (uint8_t *)p + w->payload_off;
        g->r->magic = M40_PROTO_MAGIC;
        g->r->version = M40_PROTO_VERSION;
        g->bell_in = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        g->bell_out = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (g->bell_in < 0 || g->bell_out < 0)
                goto fail_errno;
        return 0;
fail_errno:
        r = -errno;
        m40_ipc_region_done(g);
        return r;
}

void m40_ipc_region_done(struct m40_ipc_region *g)
{
        if (g->r)
                munmap(g->r, g->bytes);
        if (g->memfd >= 0)
                close(g->memfd);
        if (g->bell_in >= 0)
                close(g->bell_in);
        if (g->bell_out >= 0)
                close(g->bell_out);
        memset(g, 0, sizeof(*g));
        g->memfd = g->bell_in = g->bell_out = -1;
}

bool m40_ipc_region_pending(const struct m40_ipc_region *g)
{
        return load_acq(&g->r->sub_tail) != g->sub_head;
}

int m40_ipc_region_pop(struct m40_ipc_region *g, struct m40_proto_sub *ret, uint8_t *buf)
{
        const uint32_t n = g->layout.sub_entries, size = g->layout.payload_bytes;
        uint32_t tail = load_acq(&g->r->sub_tail), off;
        struct m40_proto_sub s;

        if (tail == g->sub_head)
                return 0;
        if ((uint32_t)(tail - g->sub_head) > n)
                return M40_EPROTO;
        /* one copy of the entry; from here on only the copy is looked at */
        memcpy(&s, &g->sub[g->sub_head & (n - 1)], sizeof(s));
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        g->sub_head++;
        store_rel(&g->r->sub_head, g->sub_head);
        *ret = s;
        off = s.payload_pos % size;
        if (s.payload_len > g->layout.max_request_bytes || off + s.payload_len > size)
                return M40_EPROTO;
        memcpy(buf, g->payload + off, s.payload_len);
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        g->payload_head = s.payload_pos + s.payload_len;
        store_rel(&g->r->payload_head, g->payload_head);
        return 1;
}

int m40_ipc_region_space(struct m40_ipc_region *g)
{
        uint32_t head = load_acq(&g->r->ev_head), used = g->ev_tail - head;

        if (used > g->layout.ev_entries)
                return M40_EPROTO;
        return (int)(g->layout.ev_entries - used);
}

void m40_ipc_region_push(struct m40_ipc_region *g, const struct m40_proto_ev *e)
{
        g->ev[g->ev_tail & (g->layout.ev_entries - 1)] = *e;
        g->ev_tail++;
        store_rel(&g->r->ev_tail, g->ev_tail);
}

void m40_ipc_region_wake(struct m40_ipc_region *g)
{
        uint64_t one = 1;

        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        if (load_acq(&g->r->client_sleeping) && write(g->bell_out, &one, sizeof(one)) < 0) {
                /* EAGAIN: the counter is saturated, the client will wake anyway */
        }
}

void m40_ipc_region_sleep(struct m40_ipc_region *g, bool sleeping)
{
        store_rel(&g->r->daemon_sleeping, sleeping);
        if (sleeping)
                __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
