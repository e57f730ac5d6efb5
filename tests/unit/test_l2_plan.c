/* tests/unit/test_l2_plan.c - the plan of a decode step's L2 prefetches (cuda/engine/l2_plan.h):
 * the budget from a device's bandwidth and L2, and the ranges the plan hands out: whole
 * 128-byte lines, each matrix asked for in order from its start, no byte twice, never
 * past a matrix or over a budget. Plain C, no GPU: the plan only does arithmetic on the
 * matrices' addresses (never dereferenced here). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda/engine/l2_plan.h"
#include "tests/check.h"

static char arena[1 << 20]; /* the matrices' addresses */

static struct m40_cuda_matrix mat(size_t off, uint32_t n_out, size_t row_bytes)
{
        return (struct m40_cuda_matrix){arena + off, 0, 0, n_out, row_bytes};
}

static void test_budget(void)
{
        struct m40_cuda_device_info d = {0};

        d.peak_bw_gbs = 3352.3; /* H100: 1 us of DRAM, far below half the L2 */
        d.l2_bytes = 50 << 20;
        CHECK(m40_cuda_l2_budget(&d) == 3352300, "H100 budget %zu", m40_cuda_l2_budget(&d));
        d.peak_bw_gbs = 288.4; /* M40 */
        d.l2_bytes = 3 << 20;
        CHECK(m40_cuda_l2_budget(&d) == 288400, "M40 budget %zu", m40_cuda_l2_budget(&d));
        d.l2_bytes = 256 << 10; /* a small L2: half of it */
        CHECK(m40_cuda_l2_budget(&d) == 128 << 10, "small-L2 budget %zu", m40_cuda_l2_budget(&d));
        d.l2_bytes = 0; /* unknown: no prefetching */
        CHECK(m40_cuda_l2_budget(&d) == 0, "unknown-L2 budget %zu", m40_cuda_l2_budget(&d));
}

static void test_fixed(void)
{
        const struct m40_cuda_matrix a = mat(0, 10, 100), b = mat(4096, 4, 1024),
                                     c = mat(16384, 3, 100);
        const struct m40_cuda_matrix *const ms[] = {&a, &b, &c};
        const struct m40_cuda_matrix *const holed[] = {&a, NULL, &c};
        struct m40_cuda_range rs[M40_CUDA_L2_PLAN_MAX], r;
        struct m40_cuda_l2_plan p;
        uint32_t n;

        m40_cuda_l2_plan_init(&p, ms, 3);
        /* a: 1000 bytes, 896 in whole lines; then 1104 left: 1024 of b; 80 left: stop */
        n = m40_cuda_l2_plan_first(&p, 2000, rs);
        CHECK(n == 2, "first: %u ranges", n);
        CHECK(rs[0].p == arena && rs[0].bytes == 896, "first[0]: +%td %zu",
              (const char *)rs[0].p - arena, rs[0].bytes);
        CHECK(rs[1].p == arena + 4096 && rs[1].bytes == 1024, "first[1]: +%td %zu",
              (const char *)rs[1].p - arena, rs[1].bytes);
        r = m40_cuda_l2_plan_take(&p, 1, 1000); /* b goes on where it stopped */
        CHECK(r.p == arena + 4096 + 1024 && r.bytes == 896, "b next: +%td %zu",
              (const char *)r.p - arena, r.bytes);
        r = m40_cuda_l2_plan_take(&p, 1, SIZE_MAX); /* the rest of b */
        CHECK(r.p == arena + 4096 + 1920 && r.bytes == 4096 - 1920, "b rest: +%td %zu",
              (const char *)r.p - arena, r.bytes);
        r = m40_cuda_l2_plan_take(&p, 1, SIZE_MAX);
        CHECK(r.bytes == 0, "b after all: %zu bytes", r.bytes);
        r = m40_cuda_l2_plan_take(&p, 0, SIZE_MAX); /* a's partial last line: never */
        CHECK(r.bytes == 0, "a after all: %zu bytes", r.bytes);
        r = m40_cuda_l2_plan_take(&p, 2, 127); /* less than a line */
        CHECK(r.bytes == 0, "c under a line: %zu bytes", r.bytes);
        r = m40_cuda_l2_plan_take(&p, 3, SIZE_MAX);
        CHECK(r.p == NULL && r.bytes == 0, "past the plan: %p %zu", r.p, r.bytes);

        m40_cuda_l2_plan_init(&p, holed, 3); /* the list ends at its first NULL */
        CHECK(p.n == 1, "holed: %u matrices", p.n);
        m40_cuda_l2_plan_init(&p, ms, 0); /* an empty plan asks for nothing */
        CHECK(m40_cuda_l2_plan_first(&p, SIZE_MAX, rs) == 0, "empty plan: ranges");
        r = m40_cuda_l2_plan_take(&p, 0, SIZE_MAX);
        CHECK(r.p == NULL && r.bytes == 0, "empty plan: take %zu", r.bytes);
}

/* Random plans and requests: every range whole lines, contiguous with the one before
 * for its matrix, inside the matrix, within its budget; first() within its budget. */
static void test_random(void)
{
        uint64_t x = 0x9e3779b97f4a7c15ULL;

        for (int round = 0; round < 2000; round++) {
                struct m40_cuda_matrix m[M40_CUDA_L2_PLAN_MAX];
                const struct m40_cuda_matrix *ms[M40_CUDA_L2_PLAN_MAX];
                size_t next[M40_CUDA_L2_PLAN_MAX], total = 0;
                struct m40_cuda_range rs[M40_CUDA_L2_PLAN_MAX];
                struct m40_cuda_l2_plan p;
                const uint32_t nm = 1 + (uint32_t)(x % M40_CUDA_L2_PLAN_MAX);
                uint32_t n;

                for (uint32_t i = 0; i < nm; i++) {
                        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
                        m[i] = mat(i * (128 << 10), 1 + (uint32_t)(x >> 58),
                                   1 + (size_t)((x >> 20) % 2000));
                        ms[i] = &m[i];
                        next[i] = 0;
                }
                m40_cuda_l2_plan_init(&p, ms, nm);
                x = x * 6364136223846793005ULL + 1442695040888963407ULL;
                const size_t budget = (size_t)(x >> 40) % 200000;

                n = m40_cuda_l2_plan_first(&p, budget, rs);
                for (uint32_t k = 0; k < n; k++)
                        total += rs[k].bytes;
                CHECK(total <= budget, "first: %zu bytes for a budget of %zu", total, budget);
                for (uint32_t k = 0; k < n; k++)
                        next[k] = rs[k].bytes;
                for (int t = 0; t < 20; t++) {
                        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
                        const uint32_t i = (uint32_t)(x >> 33) % nm;
                        const size_t b = (size_t)(x >> 45) % 50000;
                        const size_t size = (size_t)m[i].n_out * m[i].row_bytes;
                        const struct m40_cuda_range r = m40_cuda_l2_plan_take(&p, i, b);

                        CHECK(r.bytes % 128 == 0 && r.bytes <= b, "take: %zu bytes, budget %zu",
                              r.bytes, b);
                        CHECK((const char *)r.p == (const char *)m[i].data + next[i],
                              "take: not where matrix %u stopped", i);
                        next[i] += r.bytes;
                        CHECK(next[i] <= size, "take: past matrix %u (%zu of %zu)", i, next[i],
                              size);
                        CHECK(r.bytes > 0 || size - next[i] < 128 || b < 128,
                              "take: nothing, with %zu bytes left and a budget of %zu",
                              size - next[i], b);
                }
        }
}

int main(void)
{
        test_budget();
        test_fixed();
        test_random();
        if (!failures)
                printf("l2_plan: budgets, fixed and 2000 random plans ok\n");
        return failures ? 1 : 0;
}
