/* cuda/engine/l2_plan.c - the plan of a decode step's L2 prefetches (see l2_plan.h).
 *
 * Why prefetch at all: a step's latency-bound phases leave DRAM idle, attention (a chain
 * of dependent loads, ~7.5 us per layer at 8B on an H100) and every kernel boundary
 * (~2.5 us). cuda_forward.c asks the L2 for the weights that come next in those gaps: a
 * graph branch beside attention takes the first budget of the layer's later matrices,
 * and each fused product's last blocks the next budget of the product after it.
 *
 * The budget is what DRAM delivers in L2_PLAN_NS at the peak rate (3.35 MB on the H100,
 * 288 KB on an M40). More keeps DRAM busy longer than attention leaves it idle and
 * delays attention's own loads; same-run A/Bs on the H100 (batch-1 decode, 3 rounds,
 * against no branch), budgets of 3, 6 and 12 MiB: 8B Q8_0 +2.0%, +0.7%, -0.2%; 8B Q4_0
 * +1.5%, 0, -1.0%; 1B Q4_0 +3.4%, +1.4%, -2.4%; 1B Q8_0 +2.8%, +3.2%, +2.3%; 135M Q8_0
 * +6.5%, +13.0%, +11.5%; half the L2 (25 MiB): 8B Q8_0 -1.5%, 1B Q4_0 -4.0%; 1 and 2 MiB
 * against this budget, seven models: 8B within 0.7%, 1B and 135M up to 4% lower (and
 * one 135M F16 figure 12% lower). The products' own requests on top, same run, batch 1:
 * 8B Q8_0 275.9 -> 279.4 tok/s, 8B Q4_0 395.1 -> 403.7, 8B Q4_K_M 323.0 -> 327.1, 8B
 * F16 169.2 -> 169.8, 1B F16 791.9 -> 816.5, 1B Q8_0 1158.7 -> 1184.9, 135M F16 1326.1
 * -> 1364.3, 135M Q8_0 1299.1 -> 1277.8 (-1.6%; -1.0% and -1.5% in two earlier runs);
 * batch 8 within 0.3%. Given to every block instead of the last ones they lost (8B Q8_0
 * -1.1%, 1B Q4_0 -3.9%); the q/k/v product's last blocks asking for the layer's K/V
 * pages for attention made no difference (within 0.6%) and are not asked to. */
#include "cuda/engine/l2_plan.h"

#include <string.h>

#define L2_PLAN_NS   1000
#define L2_PLAN_LINE 128 /* m40_cuda_prefetch_l2() asks for whole lines only */

size_t m40_cuda_l2_budget(const struct m40_cuda_device_info *d)
{
        const double b = d->peak_bw_gbs * L2_PLAN_NS; /* GB/s x ns = bytes */
        const size_t half = (size_t)(d->l2_bytes > 0 ? d->l2_bytes : 0) / 2;

        return b < (double)half ? (size_t)b : half;
}

void m40_cuda_l2_plan_init(struct m40_cuda_l2_plan *p, const struct m40_cuda_matrix *const *ms,
                           uint32_t n)
{
        memset(p, 0, sizeof(*p));
        for (uint32_t i = 0; i < n && i < M40_CUDA_L2_PLAN_MAX && ms[i]; i++)
                p->m[p->n++] = ms[i];
}

struct m40_cuda_range m40_cuda_l2_plan_take(struct m40_cuda_l2_plan *p, uint32_t i, size_t budget)
{
        const size_t line = ~(size_t)(L2_PLAN_LINE - 1);

        if (i >= p->n)
                return (struct m40_cuda_range){NULL, 0};
        const size_t size = ((size_t)p->m[i]->n_out * p->m[i]->row_bytes) & line;
        size_t bytes = size - p->done[i];

        if (bytes > (budget & line))
                bytes = budget & line;
        const struct m40_cuda_range r = {(const char *)p->m[i]->data + p->done[i], bytes};

        p->done[i] += bytes;
        return r;
}

uint32_t m40_cuda_l2_plan_first(struct m40_cuda_l2_plan *p, size_t budget,
                                struct m40_cuda_range *ret)
{
        uint32_t n = 0;

        for (uint32_t i = 0; i < p->n && budget >= L2_PLAN_LINE; i++) {
                ret[n] = m40_cuda_l2_plan_take(p, i, budget);
                budget -= ret[n++].bytes;
        }
        return n;
}
