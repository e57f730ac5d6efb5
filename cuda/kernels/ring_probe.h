/* cuda/kernels/ring_probe.h - a kernel that echoes the persistent kernel's commands as events
 * (cuda/kernels/ring_probe.cu), to test the device's ends of the rings (ring.cuh) against
 * the host's (cuda/runtime/ring.h) while both run at once; and the rule by which a test
 * fills a command from its sequence number, so that both sides can check every byte.
 *
 * The probe (one thread) opens the view, then takes commands and, for each, checks that its
 * seq is the next index and that every other byte is m40_ring_probe_fill()'s for that seq
 * (op SHUTDOWN aside), and puts one event: seq the command's, step the count of commands
 * taken before it in this launch, token and slot the command's, flags M40_RING_EV_ERROR
 * when the check failed and M40_RING_EV_END for SHUTDOWN, after which it exits. Waiting for
 * a command or for space in the events, it spins at most `limit` clock cycles.
 *
 * Plain C11; includes no CUDA header. m40_ring_probe_fill() is also the device's. */
#ifndef M40_CUDA_RING_PROBE_H
#define M40_CUDA_RING_PROBE_H

#include <stdint.h>
#include <string.h>

#include "cuda/runtime/ring.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;

#ifdef __CUDACC__
#define M40_RING_PROBE_HD __host__ __device__
#else
#define M40_RING_PROBE_HD
#endif

/* What the probe leaves in status[0] when it exits. */
enum m40_ring_probe_state {
        M40_RING_PROBE_DONE = 1, /* took SHUTDOWN and put its event */
        M40_RING_PROBE_NO_CMD,   /* no command came within the limit */
        M40_RING_PROBE_NO_SPACE, /* the events stayed full for the limit */
};

/* status words (device memory, the caller's, 4 x uint32_t): */
#define M40_RING_PROBE_STATE 0 /* enum m40_ring_probe_state */
#define M40_RING_PROBE_TAKEN 1 /* commands taken */
#define M40_RING_PROBE_BAD   2 /* commands whose check failed */
#define M40_RING_PROBE_FIRST 3 /* seq of the first of those (valid when BAD > 0) */

/* m40_ring_probe_fill - the command of sequence number seq: an ADMIT, CANCEL or HOLD of a
 * slot, every other field a function of seq (floats as bit patterns), seq itself set. */
static inline M40_RING_PROBE_HD void m40_ring_probe_fill(struct m40_ring_cmd *c, uint32_t seq)
{
        uint32_t w[M40_RING_CMD_BYTES / 4];

        for (uint32_t i = 0; i < M40_RING_CMD_BYTES / 4; i++) {
                uint32_t x = seq * 0x9e3779b1u + i * 0x85ebca6bu;

                x ^= x >> 15;
                x *= 0x2c1b3c6du;
                w[i] = x ^ (x >> 13);
        }
        memcpy(c, w, sizeof(*c));
        c->seq = seq;
        c->op = (uint8_t)(M40_RING_ADMIT + seq % 3);
        c->zero = 0;
        c->slot = (uint16_t)(seq * 7u % M40_RING_MAX_SLOTS);
}

/* m40_cuda_ring_probe - queues the probe on stream over view v (by value), with status (4
 * words of device memory) and limit (clock cycles, > 0). Asynchronous: the caller works
 * the host's ends meanwhile, ends with a SHUTDOWN, and synchronizes. Returns 0, -EINVAL,
 * or M40_ECUDA (m40_cuda_last_error() says why). */
int m40_cuda_ring_probe(const struct m40_ring_dev *v, uint32_t *status, long long limit,
                        struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif

#endif
