/* cuda/runtime/ring_slots.c - the host's side of the persistent kernel's slots (the contract
 * is ring_slots.h): a slot table moved by the commands pushed here and by the kernel's
 * events. Plain C over ring.c; no CUDA (the unit test runs it against a CPU stand-in of
 * the kernel). */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "cuda/runtime/ring_slots.h"

#define POLL_BATCH 64u /* events taken from the ring at a time */

/* Whether command index a is at or after b (free-running indexes, ring.h). */
static bool at_or_after(uint32_t a, uint32_t b)
{
        return (int32_t)(a - b) >= 0;
}

int m40_ring_slots_init(struct m40_ring_slots *t, struct m40_ring *ring, uint32_t n_slots)
{
        if (!t || !ring || n_slots < 1 || n_slots > M40_RING_MAX_SLOTS)
                return -EINVAL;
        memset(t, 0, sizeof(*t));
        t->ring = ring;
        t->n_slots = n_slots;
        return 0;
}

int m40_ring_slots_find(const struct m40_ring_slots *t, uint64_t id)
{
        for (uint32_t i = 0; t && i < t->n_slots; i++)
                if (t->slot[i].state != M40_SLOT_FREE && t->slot[i].id == id)
                        return (int)i;
        return -ENOENT;
}

/* Pushes c (op and slot set) and returns its command index in *ret_seq; ring.c's codes. */
static int push(struct m40_ring_slots *t, const struct m40_ring_cmd *c, uint32_t *ret_seq)
{
        const int r = m40_ring_push_cmd(t->ring, c);

        if (r == 0)
                *ret_seq = t->ring->cmd.next - 1; /* the index push stamped into it */
        return r;
}

int m40_ring_slots_admit(struct m40_ring_slots *t, uint64_t id, const struct m40_ring_cmd *cmd,
                         uint32_t *ret_slot)
{
        struct m40_ring_cmd c;
        uint32_t i, seq;
        int r;

        if (!t || !cmd || !ret_slot)
                return -EINVAL;
        if (t->stopped)
                return -EPIPE;
        if (m40_ring_slots_find(t, id) >= 0)
                return -EEXIST;
        for (i = 0; i < t->n_slots && t->slot[i].state != M40_SLOT_FREE; i++)
                ;
        if (i == t->n_slots)
                return -EBUSY;
        c = *cmd;
        c.op = M40_RING_ADMIT;
        c.zero = 0;
        c.slot = (uint16_t)i;
        r = push(t, &c, &seq);
        if (r)
                return r;
        t->slot[i] = (struct m40_slot){.id = id, .admit_seq = seq, .state = M40_SLOT_ACTIVE};
        t->in_use++;
        *ret_slot = i;
        return 0;
}

int m40_ring_slots_cancel(struct m40_ring_slots *t, uint64_t id)
{
        struct m40_ring_cmd c = {.op = M40_RING_CANCEL};
        uint32_t seq;
        int i, r;

        if (!t)
                return -EINVAL;
        if (t->stopped)
                return -EPIPE;
        i = m40_ring_slots_find(t, id);
        if (i < 0 || t->slot[i].state != M40_SLOT_ACTIVE)
                return -ENOENT;
        c.slot = (uint16_t)i;
        r = push(t, &c, &seq);
        if (r)
                return r;
        t->slot[i].state = M40_SLOT_LEAVING;
        t->slot[i].cancel_seq = seq;
        return 0;
}

int m40_ring_slots_stop(struct m40_ring_slots *t, bool drain)
{
        const struct m40_ring_cmd c = {.op = drain ? M40_RING_DRAIN : M40_RING_SHUTDOWN};
        uint32_t seq;
        int r;

        if (!t)
                return -EINVAL;
        if (t->stopped)
                return -EPIPE;
        r = push(t, &c, &seq);
        if (r)
                return r;
        t->stop_seq = seq;
        t->stopped = true;
        return 0;
}

/* One event into at most one record (*out); 1 when it made one, 0 when it was dropped
 * or made none, -EIO when it breaks the contract. */
static int take(struct m40_ring_slots *t, const struct m40_ring_ev *ev, struct m40_slot_tok *out)
{
        const bool ack = ev->flags & M40_RING_EV_ACK;
        struct m40_slot *s;

        if (ev->flags & ~(uint16_t)(M40_RING_EV_END | M40_RING_EV_ERROR | M40_RING_EV_ACK))
                return -EIO;
        if (ack && t->stopped && ev->seq == t->stop_seq)
                return 0; /* the DRAIN's or SHUTDOWN's: no slot */
        if (ev->slot >= t->n_slots)
                return -EIO;
        s = &t->slot[ev->slot];
        if (s->state == M40_SLOT_FREE || !at_or_after(ev->seq, s->admit_seq))
                return -EIO;
        *out = (struct m40_slot_tok){.id = s->id, .token = -1, .step = ev->step, .slot = ev->slot};
        if (s->state == M40_SLOT_LEAVING) {
                if (!at_or_after(ev->seq, s->cancel_seq))
                        return ack ? -EIO : 0; /* made before the kernel took the CANCEL */
                if (!ack || ev->seq != s->cancel_seq)
                        return -EIO; /* nothing but the ACK follows the CANCEL */
                out->end = M40_SLOT_CANCELLED;
        } else if (ack) {
                return -EIO; /* no CANCEL pending */
        } else if (ev->flags & M40_RING_EV_ERROR) {
                out->end = M40_SLOT_FAILED;
        } else {
                if (ev->token < 0)
                        return -EIO;
                out->token = ev->token;
                if (!(ev->flags & M40_RING_EV_END))
                        return 1;
                out->end = M40_SLOT_ENDED;
        }
        s->state = M40_SLOT_FREE;
        t->in_use--;
        return 1;
}

int m40_ring_slots_poll(struct m40_ring_slots *t, struct m40_slot_tok *out, uint32_t max)
{
        struct m40_ring_ev ev[POLL_BATCH];
        uint32_t done = 0;

        if (!t || (!out && max))
                return -EINVAL;
        while (done < max) {
                const uint32_t want = max - done < POLL_BATCH ? max - done : POLL_BATCH;
                const int n = m40_ring_pop_events(t->ring, ev, want);

                if (n <= 0)
                        return n < 0 ? n : (int)done;
                for (int i = 0; i < n; i++) {
                        const int r = take(t, &ev[i], &out[done]);

                        if (r < 0)
                                return r;
                        done += (uint32_t)r;
                }
                if ((uint32_t)n < want)
                        break;
        }
        return (int)done;
}
