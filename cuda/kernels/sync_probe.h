/* cuda/kernels/sync_probe.h - what the waits of a persistent kernel cost on this GPU, and
 * whether they hold: a probe kernel (cuda/kernels/sync_probe.cu) that runs chains of grid
 * barriers and of dataflow waits (cuda/kernels/persist.cuh) on exactly the blocks the GPU
 * holds at once, checks every value the chain carried against the host's replay of it,
 * and times them (issue 21, scope 2: how many global waits a token costs and what each
 * costs, measured). For m40-bench and the gpu test test_sync_probe.
 *
 * Plain C11; includes no CUDA header. */
#ifndef M40_CUDA_SYNC_PROBE_H
#define M40_CUDA_SYNC_PROBE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define M40_CUDA_SYNC_PROBE_MAX_STAGES 100000u

struct m40_cuda_sync_probe {
        int sms;           /* the GPU's multiprocessors */
        int blocks;        /* G: blocks of the probe (sms x blocks an SM) */
        int threads;       /* threads a block */
        uint32_t stages;   /* barriers timed, and dataflow waits in the timed chain */
        double launch_us;  /* a launch of the probe that only checks residency */
        double barrier_us; /* one grid barrier of the G blocks */
        double hop_us;     /* one dataflow wait: a block's arrival to another's leaving */
};

/* m40_cuda_sync_probe - on the current device, with per_sm blocks an SM (1..32, at most
 * what the occupancy API allows; the persistent kernel runs 1-2): checks that all G
 * blocks run at once, then runs `stages` (1..M40_CUDA_SYNC_PROBE_MAX_STAGES) grid
 * barriers and a chain of `stages` dataflow waits (block b at stage s reads what block
 * (b + s) mod G wrote at stage s - 1, waiting on that block's counter only), each stage
 * carrying values the host replays, and fills *out. Returns 0; -EINVAL for bad
 * arguments; -EIO when a wait ran out (about a second) or a carried value was wrong
 * (the waits do not order the data: a bug, or a GPU that does not keep the memory
 * model); M40_ECUDA when the runtime failed (m40_cuda_last_error() says how);
 * -ENOMEM. err (errlen bytes, may be NULL) gets a sentence on failure. Synchronous;
 * allocates and frees its buffers. */
int m40_cuda_sync_probe(int per_sm, uint32_t stages, struct m40_cuda_sync_probe *out, char *err,
                        size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
