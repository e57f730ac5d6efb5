/* cuda/runtime/ring.h - the persistent kernel's two rings (issue 21, scope 3): commands from
 * the host to the device and token events from the device to the host, in mapped pinned
 * host memory that both sides read and write while the kernel runs.
 *
 * Each ring is single-producer single-consumer: exactly one writer of its records and its
 * head (the producer) and one writer of its tail (the consumer).
 *   commands  host -> device: the host (one thread) pushes, the kernel (one thread) takes;
 *   events    device -> host: the kernel (one thread) puts, the host (one thread) pops.
 * Indexes are free-running 32-bit counters (never masked when stored, never reset): the
 * record of index i lives at i & (cap - 1), cap a power of two; head - tail (modulo 2^32)
 * is the number of records in the ring, so empty is head == tail and full is head - tail
 * == cap, and the indexes wrap through UINT32_MAX with nothing special done. A command's
 * index is its sequence number (m40_ring_push_cmd() stamps it into the record).
 *
 * Order (the whole contract between the sides):
 *   producer: reads the consumer's tail (acquire) to see space; writes the record; makes
 *             it visible (host: a release store of the head; device: __threadfence_system()
 *             then a volatile store of the head); so the head never covers an unwritten
 *             record.
 *   consumer: reads the head (host: acquire; device: volatile load then
 *             __threadfence_system()); reads the records below it; then stores the new tail
 *             (host: release; device: fence then volatile store), so the producer never
 *             overwrites a record that is still being read.
 * Each end keeps a private copy of its own index (never read back from the shared memory
 * after the end opened) and of the other end's index as last read, which it reads again
 * only when the copy says full (producer) or holds fewer records than wanted (consumer): a
 * poll of an empty ring costs one read of the shared memory, which for the kernel is one
 * PCIe round trip.
 *
 * Layout of the memory (m40_ring_bytes()), 128-byte aligned: four 128-byte lines holding
 * one index each (command head, command tail, event head, event tail), so no two writers
 * share a line; then cmd_cap command records of 64 bytes; then ev_cap event records of 16
 * bytes. The host sees the memory at one address and the device at another (mapped pinned
 * memory: cudaHostGetDevicePointer()); m40_ring_device() gives the device's view.
 *
 * The host is trusted (m40d feeds its own kernel; no client writes here), but each side
 * still checks the other's index: a head more than cap ahead of the tail, or a tail ahead
 * of the head, is a corrupt ring (-EIO on the host; read as empty/full on the device).
 *
 * Plain C11; no CUDA type or header here (cuda/kernels/ring.cuh has the device's end).
 * ring.c holds the protocol (no CUDA: the unit test runs it on malloc'ed memory from two
 * threads), ring_pinned.c the pinned allocation. Nothing here logs; nothing blocks. */
#ifndef M40_CUDA_RING_H
#define M40_CUDA_RING_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define M40_RING_LINE      128u       /* bytes of each index's line and of the alignment */
#define M40_RING_CMD_BYTES 64u        /* one command record */
#define M40_RING_EV_BYTES  16u        /* one event record */
#define M40_RING_MAX_CAP   (1u << 16) /* records of one ring, at most */
#define M40_RING_MAX_SLOTS 64u        /* the kernel's sequence slots (issue 21: 1..64) */

/* What a command asks of the kernel; the kernel applies commands in order, between steps. */
enum m40_ring_op {
        M40_RING_ADMIT = 1, /* slot joins with the fields below, from its next step */
        M40_RING_CANCEL,    /* slot leaves; its KV pages are the host's once acknowledged */
        M40_RING_HOLD,      /* slot keeps its state but takes no steps until admitted again */
        M40_RING_DRAIN,     /* take no more commands until every slot has ended, then exit */
        M40_RING_SHUTDOWN,  /* exit after this step, whatever runs */
        M40_RING_OP_MAX = M40_RING_SHUTDOWN
};

/* One command (64 bytes). The sampling fields are struct m40_cuda_sample_row's parameters
 * (cuda/kernels/sample.h); the history of penalties is the slot's, in the kernel's memory. */
struct m40_ring_cmd {
        uint32_t seq;      /* the command's ring index: written by m40_ring_push_cmd() */
        uint8_t op;        /* enum m40_ring_op */
        uint8_t zero;      /* 0 */
        uint16_t slot;     /* < M40_RING_MAX_SLOTS, for ADMIT, CANCEL and HOLD */
        uint32_t tbl_off;  /* ADMIT: first entry of the slot's block table in the tables */
        uint32_t pages;    /* ADMIT: KV pages in that table */
        uint32_t pos;      /* ADMIT: position of the first token to decode */
        int32_t token;     /* ADMIT: that token */
        uint64_t rng;      /* ADMIT: the sampler's splitmix64 state before the token */
        float temperature; /* ADMIT: sampling parameters from here on */
        float top_p, min_p;
        float repeat_penalty, frequency_penalty, presence_penalty;
        int32_t top_k, penalty_last_n;
};

/* Flags of an event. */
#define M40_RING_EV_END   0x1u /* the slot's sequence ended with this token (stop or limit) */
#define M40_RING_EV_ERROR 0x2u /* the slot failed; token is not valid */
#define M40_RING_EV_ACK   0x4u /* no token: command seq (CANCEL, HOLD, DRAIN) took effect */

/* One event (16 bytes): one a slot a step, or an acknowledgement. */
struct m40_ring_ev {
        uint32_t seq;   /* the last command the kernel had taken when it wrote this one */
        uint32_t step;  /* the kernel's step number */
        int32_t token;  /* the token the slot produced */
        uint16_t slot;  /* the slot */
        uint16_t flags; /* M40_RING_EV_* */
};

#if defined(__cplusplus)
static_assert(sizeof(struct m40_ring_cmd) == M40_RING_CMD_BYTES, "command record size");
static_assert(sizeof(struct m40_ring_ev) == M40_RING_EV_BYTES, "event record size");
#else
_Static_assert(sizeof(struct m40_ring_cmd) == M40_RING_CMD_BYTES, "command record size");
_Static_assert(sizeof(struct m40_ring_ev) == M40_RING_EV_BYTES, "event record size");
#endif

/* One end of one ring, as the side that holds it sees the memory. head, tail and rec point
 * into the shared memory (the host's or the device's addresses of it); next and seen are
 * the end's private copies: next its own index (the producer's head, the consumer's tail),
 * seen the other end's index as last read. */
struct m40_ring_end {
        uint32_t *head; /* written by the producer only */
        uint32_t *tail; /* written by the consumer only */
        void *rec;      /* cap records */
        uint32_t cap;   /* a power of two */
        uint32_t next, seen;
};

/* The device's view (plain data, passed to a kernel by value): the consumer end of the
 * commands and the producer end of the events, in device addresses. Its next/seen are
 * filled by the end that opens it (ring.cuh's ps_ring_open(), or m40_ring_dev_open() for a
 * CPU stand-in), from the shared indexes: a view is opened once by the one thread that
 * uses it, after the previous user of the device's ends is done (a kernel exited). */
struct m40_ring_dev {
        struct m40_ring_end cmd, ev;
};

/* The host's ends (caller storage with m40_ring_init(), or m40_ring_new()). */
struct m40_ring {
        struct m40_ring_end cmd, ev; /* producer of commands, consumer of events */
        struct m40_ring_dev dev;     /* the device's view, next/seen unopened */
        void *pinned;                /* m40_ring_new()'s allocation, else NULL */
};

/* m40_ring_bytes - the bytes of memory two rings of cmd_cap and ev_cap records take (see
 * the layout above); 0 when a capacity is not a power of two in 1..M40_RING_MAX_CAP. */
size_t m40_ring_bytes(uint32_t cmd_cap, uint32_t ev_cap);

/* m40_ring_init - the rings over the caller's memory: mem (bytes, at least
 * m40_ring_bytes(cmd_cap, ev_cap), M40_RING_LINE-aligned) as the host addresses it and
 * dev_mem as the device does (the same memory; mem itself for a CPU stand-in). Writes all
 * four indexes as start (any value: a test starts near UINT32_MAX to wrap), zeroes the
 * records, and fills *r; the memory stays the caller's. No side may use the memory
 * meanwhile. Returns 0, or -EINVAL for a NULL pointer, a bad capacity, short or
 * misaligned memory. */
int m40_ring_init(struct m40_ring *r, void *mem, void *dev_mem, size_t bytes, uint32_t cmd_cap,
                  uint32_t ev_cap, uint32_t start);

/* m40_ring_new - the rings in new mapped pinned host memory
 * (cudaHostAlloc(cudaHostAllocMapped | cudaHostAllocPortable)), indexes from 0, on the
 * current device. Returns 0 and *ret; -EINVAL for a bad capacity or NULL ret, -ENOMEM, or
 * M40_ECUDA with the runtime's words in err (errlen bytes; err may be NULL). */
int m40_ring_new(uint32_t cmd_cap, uint32_t ev_cap, struct m40_ring **ret, char *err,
                 size_t errlen);

/* m40_ring_free - frees what m40_ring_new() made; no kernel may use the rings any more.
 * Accepts NULL; returns NULL. */
struct m40_ring *m40_ring_free(struct m40_ring *r);

/* m40_ring_push_cmd - appends a copy of *cmd, its seq set to its index, to the commands.
 * Returns 0; -EAGAIN when the ring is full (the kernel has not taken enough yet);
 * -EINVAL for NULL, an unknown op, a nonzero `zero` or a slot out of range for its op;
 * -EIO when the device published an impossible tail. From the host's one producer
 * thread. */
int m40_ring_push_cmd(struct m40_ring *r, const struct m40_ring_cmd *cmd);

/* m40_ring_cmd_pending - the commands pushed and not yet taken by the device, as last
 * seen (a cheap look; it reads the device's tail). From the producer thread. */
uint32_t m40_ring_cmd_pending(struct m40_ring *r);

/* m40_ring_pop_events - copies up to n of the oldest events into ev[] and releases their
 * records to the device. Returns the number copied (0 when there are none); -EINVAL for
 * NULL ev with n > 0; -EIO when the device published an impossible head. From the host's
 * one consumer thread. */
int m40_ring_pop_events(struct m40_ring *r, struct m40_ring_ev *ev, uint32_t n);

/* m40_ring_device - the device's view of r, by value, for a kernel's arguments. */
struct m40_ring_dev m40_ring_device(const struct m40_ring *r);

/* The device's end on the CPU: what cuda/kernels/ring.cuh does on the GPU, with C11 atomics
 * in place of volatile accesses and __threadfence_system(), over a view whose addresses the
 * calling thread can dereference (m40_ring_init() with dev_mem == mem). For the protocol's
 * tests and CPU stand-ins; one thread a view. */

/* m40_ring_dev_open - reads the device's own indexes into v (ps_ring_open()). */
void m40_ring_dev_open(struct m40_ring_dev *v);

/* m40_ring_dev_take_cmd - the oldest command into *ret (ps_ring_take_cmd()). Returns 1
 * with one, 0 when there is none, -EIO for an impossible head. */
int m40_ring_dev_take_cmd(struct m40_ring_dev *v, struct m40_ring_cmd *ret);

/* m40_ring_dev_put_event - appends *ev to the events (ps_ring_put_event()). Returns 0,
 * -EAGAIN when the ring is full (no unread event is overwritten), -EIO for an impossible
 * tail. */
int m40_ring_dev_put_event(struct m40_ring_dev *v, const struct m40_ring_ev *ev);

#ifdef __cplusplus
}
#endif

#endif
