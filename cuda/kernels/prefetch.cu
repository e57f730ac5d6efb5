/* cuda/kernels/prefetch.cu - ask the L2 cache for bytes that later kernels will read (contract in
 * ops.h).
 *
 * Computes nothing: k_prefetch_l2 issues one L2 prefetch (PTX prefetch.L2, generic
 * address) per PF_STEP bytes of its ranges, in order, grid-stride, at most PF_BLOCKS
 * blocks of 256 threads. A prefetch is a hint that returns no data, so a warp issues its
 * share and exits; the cache fills while other kernels run. Its use: a branch of the
 * decode step's graph beside the attention kernel, whose chain of load latencies leaves
 * DRAM idle, fetches the matrices after it (cuda_forward.c). Maxwell-clean: prefetch.L2
 * is PTX ISA 2.0 (sm_20 and newer). */
#include <errno.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "cuda/kernels/ops.h"

/* Knobs for A/B builds (tests/bench/ab-variants.sh): PF_MODE 0 launches nothing (the
 * step without the branch's work), PF_MAX_MB caps the budget at that many MiB. */
#ifndef PF_MODE
#define PF_MODE 1
#endif
#ifndef PF_MAX_MB
#define PF_MAX_MB 0
#endif
#define PF_STEP    128 /* bytes per prefetch: one L2 line */
#define PF_THREADS 256
#define PF_BLOCKS  512

struct pf_ranges {
        const char *p[M40_CUDA_PREFETCH_MAX];
        size_t end[M40_CUDA_PREFETCH_MAX]; /* steps of ranges 0 .. i together */
        int n;
};

__global__ void __launch_bounds__(PF_THREADS) k_prefetch_l2(struct pf_ranges r)
{
        const size_t total = r.end[r.n - 1];
        int k = 0;

        for (size_t i = (size_t)blockIdx.x * PF_THREADS + threadIdx.x; i < total;
             i += (size_t)gridDim.x * PF_THREADS) {
                while (i >= r.end[k])
                        k++;
                const size_t first = k ? r.end[k - 1] : 0;

                asm volatile("prefetch.L2 [%0];" : : "l"(r.p[k] + (i - first) * PF_STEP));
        }
}

extern "C" int m40_cuda_prefetch_l2(const struct m40_cuda_range *ranges, uint32_t n, size_t budget,
                                    struct CUstream_st *stream)
{
        struct pf_ranges r = {};
        size_t total = 0;

        if ((!ranges && n) || n > M40_CUDA_PREFETCH_MAX)
                return -EINVAL;
        if (PF_MAX_MB && budget > ((size_t)PF_MAX_MB << 20))
                budget = (size_t)PF_MAX_MB << 20;
        for (uint32_t i = 0; i < n; i++)
                if (!ranges[i].p && ranges[i].bytes)
                        return -EINVAL;
        for (uint32_t i = 0; i < n && total < budget / PF_STEP; i++) {
                /* whole steps only: a partial step at the end would reach past the range */
                size_t steps = ranges[i].bytes / PF_STEP;

                if (steps > budget / PF_STEP - total)
                        steps = budget / PF_STEP - total;
                if (!steps)
                        continue;
                total += steps;
                r.p[r.n] = (const char *)ranges[i].p;
                r.end[r.n++] = total;
        }
        if (!total || PF_MODE == 0)
                return 0;
        size_t blocks = (total + PF_THREADS - 1) / PF_THREADS;

        if (blocks > PF_BLOCKS)
                blocks = PF_BLOCKS;
        k_prefetch_l2<<<(unsigned)blocks, PF_THREADS, 0, stream>>>(r);
        return m40_cuda_launch_status("prefetch_l2");
}
