/* cuda/engine/l2_plan.h - which weight bytes a decode step asks the L2 for, and when.
 *
 * Owns the plan behind the step's L2 prefetches (ops.h's m40_cuda_prefetch_l2(),
 * matvec.h's m40_cuda_rms.next): the budget of one request, from the device's
 * bandwidth, and, for one layer, the matrices it reads after attention in order with
 * how much of each was asked for, so that each request continues where the last one
 * stopped. cuda_forward.c turns the ranges into launches. Plain C11, no CUDA call. */
#ifndef M40_CUDA_L2_PLAN_H
#define M40_CUDA_L2_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "cuda/runtime/device.h"
#include "cuda/kernels/matvec.h"

/* m40_cuda_l2_budget - the bytes of one request: what DRAM delivers in 1 us at d's peak
 * rate, at most half its L2 (0 when the L2 size is unknown: no prefetching). */
size_t m40_cuda_l2_budget(const struct m40_cuda_device_info *d);

/* The matrices (borrowed) in the order they are read, and the bytes of each that were
 * asked for: a prefix of whole 128-byte lines. */
#define M40_CUDA_L2_PLAN_MAX 7
struct m40_cuda_l2_plan {
        const struct m40_cuda_matrix *m[M40_CUDA_L2_PLAN_MAX];
        size_t done[M40_CUDA_L2_PLAN_MAX];
        uint32_t n;
};

/* m40_cuda_l2_plan_init - a plan of the first n (at most M40_CUDA_L2_PLAN_MAX) of ms up
 * to the first NULL, nothing asked for yet. */
void m40_cuda_l2_plan_init(struct m40_cuda_l2_plan *p, const struct m40_cuda_matrix *const *ms,
                           uint32_t n);

/* m40_cuda_l2_plan_take - the next range of matrix i (whole 128-byte lines after what was
 * asked for, at most budget bytes; { NULL, 0 } for an i past the plan), counted as asked
 * for. */
struct m40_cuda_range m40_cuda_l2_plan_take(struct m40_cuda_l2_plan *p, uint32_t i, size_t budget);

/* m40_cuda_l2_plan_first - the ranges of the plan's matrices in order, taken until budget
 * bytes are asked for, into ret (room for M40_CUDA_L2_PLAN_MAX); returns their count. */
uint32_t m40_cuda_l2_plan_first(struct m40_cuda_l2_plan *p, size_t budget,
                                struct m40_cuda_range *ret);

#endif
