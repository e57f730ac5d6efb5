/* cuda/runtime/ring.c - the protocol of the persistent kernel's rings (ring.h): the layout over
 * a buffer, the host's ends (push commands, pop events) and the device's ends on the CPU, all
 * as one producer and one consumer routine over struct m40_ring_end.
 *
 * The shared indexes are accessed only with C11 atomics (acquire loads of the other end's
 * index, release stores of the own one; the memory is plain uint32_t, cast to _Atomic as
 * liburing does, since the device writes the same words). Records are copied with memcpy
 * between those accesses, so the acquire/release pair orders them. No CUDA here. */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "cuda/runtime/ring.h"

#define IDX_LINES 4u /* command head, command tail, event head, event tail */

static inline uint32_t load_acquire(const uint32_t *p)
{
        return atomic_load_explicit((_Atomic uint32_t *)p, memory_order_acquire);
}

static inline void store_release(uint32_t *p, uint32_t v)
{
        atomic_store_explicit((_Atomic uint32_t *)p, v, memory_order_release);
}

static bool cap_ok(uint32_t cap)
{
        return cap >= 1 && cap <= M40_RING_MAX_CAP && (cap & (cap - 1)) == 0;
}

static size_t round_line(size_t n)
{
        return (n + M40_RING_LINE - 1) / M40_RING_LINE * M40_RING_LINE;
}

size_t m40_ring_bytes(uint32_t cmd_cap, uint32_t ev_cap)
{
        if (!cap_ok(cmd_cap) || !cap_ok(ev_cap))
                return 0;
        return IDX_LINES * M40_RING_LINE + round_line((size_t)cmd_cap * M40_RING_CMD_BYTES) +
               round_line((size_t)ev_cap * M40_RING_EV_BYTES);
}

/* The ends of both rings over base (host or device addresses of the same layout). */
static void ends_over(char *base, uint32_t cmd_cap, uint32_t ev_cap, struct m40_ring_end *cmd,
                      struct m40_ring_end *ev)
{
        char *recs = base + IDX_LINES * M40_RING_LINE;

        *cmd = (struct m40_ring_end){.head = (uint32_t *)(void *)base,
                                     .tail = (uint32_t *)(void *)(base + M40_RING_LINE),
                                     .rec = recs,
                                     .cap = cmd_cap};
        *ev = (struct m40_ring_end){.head = (uint32_t *)(void *)(base + 2 * M40_RING_LINE),
                                    .tail = (uint32_t *)(void *)(base + 3 * M40_RING_LINE),
                                    .rec = recs + round_line((size_t)cmd_cap * M40_RING_CMD_BYTES),
                                    .cap = ev_cap};
}

int m40_ring_init(struct m40_ring *r, void *mem, void *dev_mem, size_t bytes, uint32_t cmd_cap,
                  uint32_t ev_cap, uint32_t start)
{
        const size_t need = m40_ring_bytes(cmd_cap, ev_cap);

        if (!r || !mem || !dev_mem || need == 0 || bytes < need || (uintptr_t)mem % M40_RING_LINE ||
            (uintptr_t)dev_mem % M40_RING_LINE)
                return -EINVAL;
        memset(mem, 0, need);
        *r = (struct m40_ring){0};
        ends_over(mem, cmd_cap, ev_cap, &r->cmd, &r->ev);
        ends_over(dev_mem, cmd_cap, ev_cap, &r->dev.cmd, &r->dev.ev);
        store_release(r->cmd.head, start);
        store_release(r->cmd.tail, start);
        store_release(r->ev.head, start);
        store_release(r->ev.tail, start);
        r->cmd.next = r->cmd.seen = start;
        r->ev.next = r->ev.seen = start;
        return 0;
}

/* The producer's step: copy size bytes of src into the next record and publish it.
 * 0, -EAGAIN when full, -EIO when the consumer's tail is impossible (ahead of the head or
 * more than cap behind it). */
static int end_push(struct m40_ring_end *e, const void *src, size_t size)
{
        if (e->next - e->seen >= e->cap) {
                const uint32_t tail = load_acquire(e->tail);

                if (e->next - tail > e->cap)
                        return -EIO;
                e->seen = tail;
                if (e->next - tail == e->cap)
                        return -EAGAIN;
        }
        memcpy((char *)e->rec + (size_t)(e->next & (e->cap - 1)) * size, src, size);
        e->next++;
        store_release(e->head, e->next);
        return 0;
}

/* The consumer's step: copy up to n records into dst and release them; the head is read
 * again only when the copy of it covers fewer than n. The number copied, or -EIO when the
 * producer's head is impossible (behind the tail or more than cap ahead of it). */
static int end_pop(struct m40_ring_end *e, void *dst, uint32_t n, size_t size)
{
        uint32_t k;

        if (e->seen - e->next < n) {
                const uint32_t head = load_acquire(e->head);

                if (head - e->next > e->cap)
                        return -EIO;
                e->seen = head;
        }
        k = e->seen - e->next;
        if (k > n)
                k = n;
        for (uint32_t i = 0; i < k; i++)
                memcpy((char *)dst + (size_t)i * size,
                       (const char *)e->rec + (size_t)((e->next + i) & (e->cap - 1)) * size, size);
        if (k) {
                e->next += k;
                store_release(e->tail, e->next);
        }
        return (int)k;
}

static bool cmd_ok(const struct m40_ring_cmd *c)
{
        if (c->op < M40_RING_ADMIT || c->op > M40_RING_OP_MAX || c->zero)
                return false;
        if (c->op == M40_RING_ADMIT || c->op == M40_RING_CANCEL || c->op == M40_RING_HOLD)
                return c->slot < M40_RING_MAX_SLOTS;
        return true;
}

int m40_ring_push_cmd(struct m40_ring *r, const struct m40_ring_cmd *cmd)
{
        struct m40_ring_cmd c;

        if (!r || !cmd || !cmd_ok(cmd))
                return -EINVAL;
        c = *cmd;
        c.seq = r->cmd.next;
        return end_push(&r->cmd, &c, sizeof(c));
}

uint32_t m40_ring_cmd_pending(struct m40_ring *r)
{
        const uint32_t tail = load_acquire(r->cmd.tail);

        if (r->cmd.next - tail <= r->cmd.cap)
                r->cmd.seen = tail;
        return r->cmd.next - r->cmd.seen;
}

int m40_ring_pop_events(struct m40_ring *r, struct m40_ring_ev *ev, uint32_t n)
{
        if (!r || (!ev && n))
                return -EINVAL;
        if (n == 0)
                return 0;
        return end_pop(&r->ev, ev, n, sizeof(*ev));
}

struct m40_ring_dev m40_ring_device(const struct m40_ring *r)
{
        return r->dev;
}

void m40_ring_dev_open(struct m40_ring_dev *v)
{
        v->cmd.next = load_acquire(v->cmd.tail);
        v->cmd.seen = v->cmd.next;
        v->ev.next = load_acquire(v->ev.head);
        v->ev.seen = load_acquire(v->ev.tail);
}

int m40_ring_dev_take_cmd(struct m40_ring_dev *v, struct m40_ring_cmd *ret)
{
        return end_pop(&v->cmd, ret, 1, sizeof(*ret));
}

int m40_ring_dev_put_event(struct m40_ring_dev *v, const struct m40_ring_ev *ev)
{
        return end_push(&v->ev, ev, sizeof(*ev));
}
