/* test_steptime.c - m40d's step timings (daemon/m40d/steptime.c): the median and 99th
 * percentile of random durations of several spreads against the exact order statistics
 * (never below them, at most 25% above, never above the maximum), count, sum and
 * maximum, the edges (0, 1..3 ns, UINT64_MAX, an empty set) and which pumps count a gap
 * (only one that follows a collected step with no idle round between). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "m40d/steptime.h"
#include "tests/check.h"

static int cmp_u64(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

        return x < y ? -1 : x > y;
}

/* exact - the value of rank ceil(q * n) (1-based) of sorted v. */
static uint64_t exact(const uint64_t *v, size_t n, double q)
{
        size_t rank = (size_t)(q * (double)n);

        if ((double)rank < q * (double)n)
                rank++;
        return v[(rank ? rank : 1) - 1];
}

/* check_quantile - got is the q-quantile's bucket bound: at least the exact value, at most
 * 25% above it, at most the maximum. */
static void check_quantile(const uint64_t *v, size_t n, double q, uint64_t got)
{
        uint64_t want = exact(v, n, q);

        CHECK(got >= want && (double)got <= (double)want * 1.25 + 1 && got <= v[n - 1],
              "n %zu q %.2f: %llu for exact %llu (max %llu)", n, q, (unsigned long long)got,
              (unsigned long long)want, (unsigned long long)v[n - 1]);
}

static void random_sets(void)
{
        static uint64_t v[20000];
        const uint64_t spread[] = {4, 1000, 70000, 5000000, 1ull << 40};
        const size_t sizes[] = {1, 2, 3, 99, 100, 101, 1000, 20000};

        srand(40);
        for (size_t s = 0; s < sizeof(spread) / sizeof(spread[0]); s++) {
                for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
                        struct m40_steptime t;
                        struct m40_proto_timing sum;
                        uint64_t total = 0;
                        size_t n = sizes[z];

                        memset(&t, 0, sizeof(t));
                        for (size_t i = 0; i < n; i++) {
                                uint64_t r = ((uint64_t)rand() << 31) ^ (uint64_t)rand();

                                /* a long tail: most values small, a few up to the spread */
                                v[i] = i % 17 ? r % (spread[s] / 8 + 1) : r % spread[s];
                                total += v[i];
                                m40_steptime_add(&t, v[i]);
                        }
                        qsort(v, n, sizeof(v[0]), cmp_u64);
                        m40_steptime_summary(&t, &sum);
                        CHECK(sum.count == n && sum.sum_ns == total && sum.max_ns == v[n - 1],
                              "count %llu sum %llu max %llu", (unsigned long long)sum.count,
                              (unsigned long long)sum.sum_ns, (unsigned long long)sum.max_ns);
                        check_quantile(v, n, 0.5, sum.p50_ns);
                        check_quantile(v, n, 0.99, sum.p99_ns);
                }
        }
}

static void edges(void)
{
        struct m40_steptime t;
        struct m40_proto_timing sum;

        memset(&t, 0, sizeof(t));
        m40_steptime_summary(&t, &sum);
        CHECK(!sum.count && !sum.sum_ns && !sum.max_ns && !sum.p50_ns && !sum.p99_ns,
              "an empty set is all 0");
        for (uint64_t v = 0; v < 4; v++) {
                memset(&t, 0, sizeof(t));
                m40_steptime_add(&t, v);
                m40_steptime_summary(&t, &sum);
                CHECK(sum.p50_ns == v && sum.p99_ns == v, "%llu ns: exact", (unsigned long long)v);
        }
        memset(&t, 0, sizeof(t));
        m40_steptime_add(&t, UINT64_MAX);
        m40_steptime_add(&t, UINT64_MAX - 1);
        m40_steptime_summary(&t, &sum);
        CHECK(sum.max_ns == UINT64_MAX && sum.p50_ns >= UINT64_MAX - 1 && sum.p99_ns == UINT64_MAX,
              "the top bucket");
        memset(&t, 0, sizeof(t));
        m40_steptime_add(&t, 1000);
        m40_steptime_add(&t, 1001);
        m40_steptime_summary(&t, &sum);
        CHECK(sum.p50_ns >= 1000 && sum.p50_ns <= 1001 && sum.p99_ns == 1001,
              "bounds clamp to the maximum: p50 %llu p99 %llu", (unsigned long long)sum.p50_ns,
              (unsigned long long)sum.p99_ns);
}

/* Steps pumped at 100, 1100, 2100; the first two collected at once, the third after an
 * idle round: two of the three pumps after the first count no gap or the right one. */
static void gaps(void)
{
        struct m40_steptimes t;
        struct m40_proto_status st;

        memset(&t, 0, sizeof(t));
        m40_steptimes_pumped(&t, 100);                 /* the first: no step before */
        m40_steptimes_collected(&t, 110, 900, 930);    /* hand-over 10, step 790, wake 30 */
        m40_steptimes_pumped(&t, 950);                 /* gap 50 */
        m40_steptimes_collected(&t, 960, 1900, 1940);  /* hand-over 10, step 940, wake 40 */
        m40_steptimes_idle(&t);                        /* nothing was waiting */
        m40_steptimes_pumped(&t, 5000);                /* no gap */
        m40_steptimes_collected(&t, 5020, 5500, 5490); /* the clocks disagree: wake 0 */
        memset(&st, 0, sizeof(st));
        m40_steptimes_status(&t, &st);
        CHECK(st.step.count == 3 && st.step.sum_ns == 790 + 940 + 480 && st.step.max_ns == 940,
              "steps: %llu, %llu ns", (unsigned long long)st.step.count,
              (unsigned long long)st.step.sum_ns);
        CHECK(st.gap.count == 1 && st.gap.sum_ns == 50, "gaps: %llu, %llu ns",
              (unsigned long long)st.gap.count, (unsigned long long)st.gap.sum_ns);
        CHECK(st.wake.count == 3 && st.wake.sum_ns == 70 && st.wake.max_ns == 40,
              "wake-ups: %llu, %llu ns", (unsigned long long)st.wake.count,
              (unsigned long long)st.wake.sum_ns);
        CHECK(st.handover.count == 3 && st.handover.sum_ns == 40, "hand-overs: %llu, %llu ns",
              (unsigned long long)st.handover.count, (unsigned long long)st.handover.sum_ns);
}

int main(void)
{
        random_sets();
        edges();
        gaps();
        if (failures)
                return 1;
        printf("ok: step timings: percentiles within 25%% above the exact ones, counts, sums, "
               "maxima, edges, gaps only between directly following steps\n");
        return 0;
}
