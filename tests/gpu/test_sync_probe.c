/* tests/gpu/test_sync_probe.c - the waits of the persistent kernel (cuda/kernels/persist.cuh)
 * through the probe of cuda/kernels/sync_probe.h.
 *
 * Owns the checks that, on exactly the blocks the GPU holds at once (1 and 2 an SM), every
 * block of the probe runs at once; that a chain of grid barriers and a chain of dataflow
 * waits (a block waits only for the block whose value it reads) order the data: every
 * value the chains carried equals the host's replay (each stage in its own row, poisoned
 * first); that the counters, never reset, keep working across launches (each probe
 * launches several times on the same counters); and that bad arguments are refused. It
 * prints what a launch, a grid barrier and a dataflow wait cost (m40-bench --sync gives
 * the same figures for RESULTS.md).
 *
 * Exit 0 pass, 1 fail, 77 skip (no GPU, or a build without CUDA). */
#include <errno.h>
#include <stdio.h>

#ifndef M40_HAVE_CUDA

int main(void)
{
        printf("SKIP: this build has no CUDA (meson -Dcuda=enabled)\n");
        return 77;
}

#else

#include "cuda/kernels/sync_probe.h"
#include "gputest.h"

static void probe(int per_sm, uint32_t stages)
{
        struct m40_cuda_sync_probe p;
        char err[256] = "";
        int r = m40_cuda_sync_probe(per_sm, stages, &p, err, sizeof(err));

        CHECK(r == 0, "probe (%d an SM, %u stages): %d (%s): %s %s", per_sm, stages, r,
              m40_strerror(r), err, m40_cuda_last_error());
        if (r)
                return;
        CHECK(p.blocks >= p.sms && p.blocks <= per_sm * p.sms, "%d blocks on %d SMs", p.blocks,
              p.sms);
        printf("%d an SM: %d blocks of %d threads, %u stages: launch %.2f us, grid barrier "
               "%.3f us, dataflow wait %.3f us\n",
               per_sm, p.blocks, p.threads, p.stages, p.launch_us, p.barrier_us, p.hop_us);
}

int main(void)
{
        int code, quick = quick_mode();
        struct m40_cuda_device *d = gpu_open(&code);
        struct m40_cuda_sync_probe p;

        if (!d)
                return code;
        CHECK(m40_cuda_sync_probe(0, 10, &p, NULL, 0) == -EINVAL, "0 blocks an SM taken");
        CHECK(m40_cuda_sync_probe(1, 0, &p, NULL, 0) == -EINVAL, "0 stages taken");
        CHECK(m40_cuda_sync_probe(1, M40_CUDA_SYNC_PROBE_MAX_STAGES + 1, &p, NULL, 0) == -EINVAL,
              "too many stages taken");
        CHECK(m40_cuda_sync_probe(1, 10, NULL, NULL, 0) == -EINVAL, "no result taken");
        probe(1, quick ? 50 : 2000);
        probe(2, quick ? 50 : 2000);
        if (!quick)
                probe(1, 1); /* one stage: the chain's ends */
        m40_cuda_device_free(d);
        return finish();
}

#endif
