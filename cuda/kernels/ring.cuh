/* cuda/kernels/ring.cuh - the device's ends of the persistent kernel's rings
 * (cuda/runtime/ring.h): it takes commands from the host and puts token events for it, in
 * mapped pinned host memory, while the host works the other ends.
 *
 * One thread of the kernel (say thread 0 of block 0, between steps) holds the view: it
 * opens it once a launch (ps_ring_open()) and then alone calls ps_ring_take_cmd() and
 * ps_ring_put_event() on it; the view is a local copy of the kernel's argument (its
 * next/seen words are that thread's private indexes; ring.h). Nothing here waits: a take
 * on an empty ring and a put on a full one return false at once, and the caller decides
 * how long to poll (the next step, or a spin with a limit).
 *
 * Order, with the sm_52 primitives only (volatile 32-bit accesses to the indexes,
 * __threadfence_system(), cache-bypassing vector accesses to the records; no
 * cuda::atomic_ref, no ld.acquire/st.release):
 *   take: volatile load of the head; __threadfence_system() (no record is read before the
 *         head that covers it); the record with __ldcv (not from a cache: a slot is
 *         rewritten every lap); __threadfence_system() (the record is read before the slot
 *         is given back); volatile store of the tail.
 *   put:  when the copy of the tail says full, a volatile load of the tail and a fence;
 *         the record with __stwt (written through to system memory);
 *         __threadfence_system() (the record is visible to the host before the head);
 *         volatile store of the head.
 * Cost: each shared access is a PCIe transaction. A take reads the head (one round trip,
 * ~1-2 us) only when its copy says empty, and the record (4 loads of 16 bytes, issued
 * together); the stores are posted. A put reads the tail only when its copy says full.
 *
 * The host is trusted, but an impossible index (a head more than cap ahead of the tail, a
 * tail ahead of the head) reads as an empty command ring or a full event ring, so a
 * corrupt ring stops the traffic instead of replaying stale records. */
#ifndef M40_CUDA_RING_CUH
#define M40_CUDA_RING_CUH

#include <stdint.h>
#include <string.h>

#include "cuda/runtime/ring.h"

/* ps_ring_open - reads the device's own indexes (the command tail, the event head) and the
 * host's event tail into v: once a launch, before the first take or put. */
__device__ __forceinline__ void ps_ring_open(struct m40_ring_dev *v)
{
        v->cmd.next = *(const volatile uint32_t *)v->cmd.tail;
        v->cmd.seen = v->cmd.next;
        v->ev.next = *(const volatile uint32_t *)v->ev.head;
        v->ev.seen = *(const volatile uint32_t *)v->ev.tail;
        __threadfence_system();
}

/* ps_ring_take_cmd - the oldest command the host published into *ret, its record given
 * back to the host. Returns whether one was taken (false: none, or an impossible head). */
__device__ __forceinline__ bool ps_ring_take_cmd(struct m40_ring_dev *v, struct m40_ring_cmd *ret)
{
        struct m40_ring_end *e = &v->cmd;
        const uint4 *src;
        uint4 w[M40_RING_CMD_BYTES / sizeof(uint4)];

        if (e->seen == e->next) {
                const uint32_t head = *(const volatile uint32_t *)e->head;

                if (head == e->next || head - e->next > e->cap)
                        return false;
                e->seen = head;
                __threadfence_system();
        }
        src = (const uint4 *)((const char *)e->rec +
                              (size_t)(e->next & (e->cap - 1)) * M40_RING_CMD_BYTES);
#pragma unroll
        for (unsigned k = 0; k < M40_RING_CMD_BYTES / sizeof(uint4); k++)
                w[k] = __ldcv(src + k);
        memcpy(ret, w, sizeof(*ret));
        __threadfence_system();
        e->next++;
        *(volatile uint32_t *)e->tail = e->next;
        return true;
}

/* ps_ring_put_event - appends *ev to the events. Returns false when the ring is full (the
 * host has not popped enough; no unread event is overwritten) or the host's tail is
 * impossible; the caller tries again later. */
__device__ __forceinline__ bool ps_ring_put_event(struct m40_ring_dev *v,
                                                  const struct m40_ring_ev *ev)
{
        struct m40_ring_end *e = &v->ev;
        uint4 w;

        if (e->next - e->seen >= e->cap) {
                const uint32_t tail = *(const volatile uint32_t *)e->tail;

                if (e->next - tail >= e->cap)
                        return false;
                e->seen = tail;
                __threadfence_system();
        }
        memcpy(&w, ev, sizeof(w));
        __stwt((uint4 *)((char *)e->rec + (size_t)(e->next & (e->cap - 1)) * M40_RING_EV_BYTES), w);
        __threadfence_system();
        e->next++;
        *(volatile uint32_t *)e->head = e->next;
        return true;
}

#endif
