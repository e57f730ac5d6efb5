/* cuda/runtime/ring_slots.h - the host's side of the persistent kernel's sequence slots (issue
 * 21, scope 3): which of the caller's sequences is in which slot of the kernel, the commands
 * that move one in and out (ring.h: ADMIT, CANCEL; DRAIN, SHUTDOWN for the whole kernel),
 * and the event ring's records turned into tokens of the caller's sequences.
 *
 * The kernel runs its steps on its own and takes commands between them; each step it puts
 * one event for each slot it ran (ring.h, struct m40_ring_ev). A slot here is
 *   FREE     no sequence; m40_ring_slots_admit() may give it to one;
 *   ACTIVE   its sequence's ADMIT was pushed; the slot's events are that sequence's tokens;
 *   LEAVING  its CANCEL was pushed; events of the slot before the kernel's acknowledgement
 *            are dropped (the caller stopped the sequence; the kernel made them before it
 *            took the command).
 * The kernel frees a slot, never the host: an event with M40_RING_EV_END or
 * M40_RING_EV_ERROR frees an ACTIVE slot (its sequence ended on the device: a stop the
 * device checks, or its KV pages were used up), and the event with M40_RING_EV_ACK and the
 * CANCEL's index frees a LEAVING one (every CANCEL is acknowledged, also for a sequence
 * that ended before the kernel took it: until then its END is dropped). So a slot goes to
 * a new sequence only once no event of the old one can follow, and the KV pages of a
 * sequence are the caller's again when the record that says it ended comes out of
 * m40_ring_slots_poll().
 *
 * The kernel's side of this contract (what a stand-in must do; tests/unit/test_ring_slots.c
 * has one): commands in ring order, between steps; ADMIT puts a FREE slot in use from the
 * next step; CANCEL ends the slot's sequence, or nothing if it has ended, and puts an
 * event {seq = the CANCEL's index, slot, token -1, flags ACK}; each event's seq is the
 * index of the last command taken before it was put; no event for a slot that is not in
 * use, and none after its END or ERROR until an ADMIT. An event that breaks it (a slot out
 * of range or FREE, a token of a slot whose ADMIT the kernel had not yet taken by its seq,
 * an ACK that is not the pending CANCEL's) is a corrupt ring: -EIO, and the caller stops
 * the kernel.
 *
 * One thread uses a struct m40_ring_slots and its ring's host ends (the persistent
 * engine's host thread). Nothing blocks and nothing logs: a full command ring gives
 * -EAGAIN with nothing changed (poll, then push again). HOLD is not issued yet: how a held
 * slot's sampler state comes back with the next ADMIT is the kernel's to define. */
#ifndef M40_CUDA_RING_SLOTS_H
#define M40_CUDA_RING_SLOTS_H

#include <stdbool.h>
#include <stdint.h>

#include "cuda/runtime/ring.h"

#ifdef __cplusplus
extern "C" {
#endif

enum m40_slot_state {
        M40_SLOT_FREE = 0,
        M40_SLOT_ACTIVE,
        M40_SLOT_LEAVING,
};

/* How a sequence ended, in the record that ends it (m40_slot_tok.end). */
enum m40_slot_end {
        M40_SLOT_GOES_ON = 0, /* a token; the sequence goes on */
        M40_SLOT_ENDED,       /* the kernel ended it (M40_RING_EV_END); token may be its last */
        M40_SLOT_FAILED,      /* the kernel failed it (M40_RING_EV_ERROR); token is -1 */
        M40_SLOT_CANCELLED,   /* the kernel took m40_ring_slots_cancel()'s command; token -1 */
};

/* One record for the caller: a token of sequence id, or the end of it. */
struct m40_slot_tok {
        uint64_t id;   /* the caller's sequence id (m40_ring_slots_admit()) */
        int32_t token; /* >= 0: the token; -1: none */
        uint32_t step; /* the kernel's step that made it */
        uint16_t slot;
        uint16_t end; /* enum m40_slot_end; the slot is FREE again when it is not GOES_ON */
};

struct m40_slot {
        uint64_t id;         /* the sequence in it (ACTIVE, LEAVING) */
        uint32_t admit_seq;  /* the command index of its ADMIT */
        uint32_t cancel_seq; /* LEAVING: of its CANCEL */
        uint8_t state;       /* enum m40_slot_state */
};

/* Caller storage; m40_ring_slots_init() fills it. */
struct m40_ring_slots {
        struct m40_ring *ring; /* borrowed: its host ends are this struct's thread's */
        uint32_t n_slots;
        uint32_t in_use;   /* slots ACTIVE or LEAVING */
        uint32_t stop_seq; /* the command index of the DRAIN or SHUTDOWN, if stopped */
        bool stopped;      /* m40_ring_slots_stop() pushed one: no more commands */
        struct m40_slot slot[M40_RING_MAX_SLOTS];
};

/* m40_ring_slots_init - n_slots (1..M40_RING_MAX_SLOTS) FREE slots over ring (borrowed,
 * kept by the caller while t is used; its command ring empty of ADMIT and CANCEL for these
 * slots: a fresh ring, or one whose kernel exited with every slot free). Returns 0;
 * -EINVAL for NULL or a count out of range. */
int m40_ring_slots_init(struct m40_ring_slots *t, struct m40_ring *ring, uint32_t n_slots);

/* m40_ring_slots_admit - gives sequence id the lowest FREE slot and pushes a copy of *cmd
 * as its ADMIT (op and slot set here; the other fields, the block table, position, first
 * token, sampler state and sampling parameters, are the caller's). Returns 0 and
 * *ret_slot; -EBUSY when no slot is FREE; -EEXIST when id is in a slot already; -EAGAIN
 * when the command ring is full; -EINVAL for NULL; -EPIPE after m40_ring_slots_stop();
 * -EIO when the ring is corrupt. Only a 0 changes anything. */
int m40_ring_slots_admit(struct m40_ring_slots *t, uint64_t id, const struct m40_ring_cmd *cmd,
                         uint32_t *ret_slot);

/* m40_ring_slots_cancel - pushes a CANCEL for sequence id's slot (ACTIVE -> LEAVING): no
 * token of id comes out after this call, and its M40_SLOT_CANCELLED record comes when the
 * kernel has taken the command. Returns 0; -ENOENT when id is in no slot or is LEAVING
 * already; -EAGAIN when the command ring is full; -EINVAL for NULL; -EPIPE after
 * m40_ring_slots_stop(); -EIO as above. */
int m40_ring_slots_cancel(struct m40_ring_slots *t, uint64_t id);

/* m40_ring_slots_stop - pushes DRAIN (drain true: the kernel exits once every slot has
 * ended) or SHUTDOWN (exits after its step); no command may follow (admit and cancel then
 * return -EPIPE; the kernel's acknowledgement of it makes no record). Returns 0, -EAGAIN,
 * -EINVAL, -EPIPE (stopped already), -EIO. */
int m40_ring_slots_stop(struct m40_ring_slots *t, bool drain);

/* m40_ring_slots_poll - takes up to max events from the ring and writes the records they
 * make into out[] (the dropped ones make none): at most max records. Returns their number
 * (0: none yet); -EINVAL for NULL out with max > 0; -EIO for a corrupt ring or an event
 * that breaks the contract above (the events taken before it are in out[] and the count
 * is lost: the kernel must be stopped). */
int m40_ring_slots_poll(struct m40_ring_slots *t, struct m40_slot_tok *out, uint32_t max);

/* m40_ring_slots_find - the slot of sequence id (ACTIVE or LEAVING), or -ENOENT. */
int m40_ring_slots_find(const struct m40_ring_slots *t, uint64_t id);

#ifdef __cplusplus
}
#endif

#endif
