/* cuda/kernels/ring_probe.cu - the echo probe of ring_probe.h: one thread works the device's
 * ends of the rings (ring.cuh) the way the persistent kernel will, taking every command,
 * checking it byte for byte, and answering it with one event.
 *
 * Launch: 1 block of 1 thread (the rings are single-consumer/single-producer). It exits on
 * SHUTDOWN, or when a wait runs out of `limit` clock cycles, leaving why in status. */
#include <errno.h>

#include <cuda_runtime.h>

#include "cuda/kernels/ring.cuh"
#include "cuda/kernels/ring_probe.h"
#include "cuda/runtime/launch.h"
#include "m40/error.h"

/* Whether *c is the probe's command for its index seq (its op may be SHUTDOWN instead). */
static __device__ bool rp_check(const struct m40_ring_cmd *c, uint32_t seq)
{
        struct m40_ring_cmd want;
        uint32_t a[M40_RING_CMD_BYTES / 4], b[M40_RING_CMD_BYTES / 4], diff = 0;

        m40_ring_probe_fill(&want, seq);
        if (c->op == M40_RING_SHUTDOWN)
                want.op = M40_RING_SHUTDOWN;
        memcpy(a, c, sizeof(a));
        memcpy(b, &want, sizeof(b));
        for (unsigned i = 0; i < M40_RING_CMD_BYTES / 4; i++)
                diff |= a[i] ^ b[i];
        return diff == 0;
}

static __global__ void k_ring_probe(struct m40_ring_dev v, uint32_t *status, long long limit)
{
        uint32_t taken = 0, bad = 0, first = 0, state = M40_RING_PROBE_NO_CMD;
        struct m40_ring_cmd c;
        struct m40_ring_ev ev;

        ps_ring_open(&v);
        for (;;) {
                long long t0 = clock64();
                bool ok;

                while (!(ok = ps_ring_take_cmd(&v, &c)) && clock64() - t0 <= limit)
                        ;
                if (!ok)
                        break; /* state NO_CMD */
                ev.seq = c.seq;
                ev.step = taken++;
                ev.token = c.token;
                ev.slot = c.slot;
                ev.flags = c.op == M40_RING_SHUTDOWN ? M40_RING_EV_END : 0;
                if (!rp_check(&c, v.cmd.next - 1)) {
                        ev.flags |= M40_RING_EV_ERROR;
                        if (bad++ == 0)
                                first = v.cmd.next - 1;
                }
                t0 = clock64();
                while (!(ok = ps_ring_put_event(&v, &ev)) && clock64() - t0 <= limit)
                        ;
                if (!ok) {
                        state = M40_RING_PROBE_NO_SPACE;
                        break;
                }
                if (c.op == M40_RING_SHUTDOWN) {
                        state = M40_RING_PROBE_DONE;
                        break;
                }
        }
        status[M40_RING_PROBE_STATE] = state;
        status[M40_RING_PROBE_TAKEN] = taken;
        status[M40_RING_PROBE_BAD] = bad;
        status[M40_RING_PROBE_FIRST] = first;
}

int m40_cuda_ring_probe(const struct m40_ring_dev *v, uint32_t *status, long long limit,
                        struct CUstream_st *stream)
{
        if (!v || !status || limit <= 0)
                return -EINVAL;
        k_ring_probe<<<1, 1, 0, stream>>>(*v, status, limit);
        return m40_cuda_launch_status("k_ring_probe");
}
