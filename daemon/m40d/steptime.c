/* steptime.c - the timings of engine steps m40d keeps for STATUS (see steptime.h). */
#include "m40d/steptime.h"

/* bucket_of - v's bucket: v itself below 4, else 4 per octave from the octave of 4. */
static unsigned bucket_of(uint64_t v)
{
        unsigned k;

        if (v < 4)
                return (unsigned)v;
        k = 63u - (unsigned)__builtin_clzll(v); /* 2^k <= v < 2^(k+1), k >= 2 */
        return 4u * (k - 1u) + (unsigned)((v >> (k - 2u)) & 3u);
}

/* upper_of - the largest value in bucket i. */
static uint64_t upper_of(unsigned i)
{
        unsigned k = i / 4u + 1u;

        if (i < 4)
                return i;
        if (k == 63 && i % 4u == 3)
                return UINT64_MAX;
        return ((uint64_t)(4u + i % 4u + 1u) << (k - 2u)) - 1u;
}

void m40_steptime_add(struct m40_steptime *t, uint64_t ns)
{
        t->count++;
        t->sum_ns += ns;
        if (ns > t->max_ns)
                t->max_ns = ns;
        t->bucket[bucket_of(ns)]++;
}

/* quantile - the upper bound of the bucket holding the value of rank ceil(q * count). */
static uint64_t quantile(const struct m40_steptime *t, double q)
{
        uint64_t rank = (uint64_t)(q * (double)t->count), acc = 0;

        if (rank < 1)
                rank = 1;
        if ((double)rank < q * (double)t->count)
                rank++;
        for (unsigned i = 0; i < M40_STEPTIME_BUCKETS; i++) {
                acc += t->bucket[i];
                if (acc >= rank)
                        return upper_of(i) < t->max_ns ? upper_of(i) : t->max_ns;
        }
        return t->max_ns;
}

void m40_steptime_summary(const struct m40_steptime *t, struct m40_proto_timing *ret)
{
        ret->count = t->count;
        ret->sum_ns = t->sum_ns;
        ret->max_ns = t->max_ns;
        ret->p50_ns = t->count ? quantile(t, 0.5) : 0;
        ret->p99_ns = t->count ? quantile(t, 0.99) : 0;
}

/* since - b - a, or 0 when the clocks of two threads disagree (a after b). */
static uint64_t since(uint64_t a, uint64_t b)
{
        return b > a ? b - a : 0;
}

void m40_steptimes_pumped(struct m40_steptimes *t, uint64_t now)
{
        if (t->t_end_ns)
                m40_steptime_add(&t->gap, since(t->t_end_ns, now));
        t->t_end_ns = 0;
        t->t_pump_ns = now;
}

void m40_steptimes_collected(struct m40_steptimes *t, uint64_t begin, uint64_t end, uint64_t now)
{
        m40_steptime_add(&t->step, since(begin, end));
        m40_steptime_add(&t->wake, since(end, now));
        m40_steptime_add(&t->handover, since(t->t_pump_ns, begin));
        t->t_end_ns = end;
}

void m40_steptimes_idle(struct m40_steptimes *t)
{
        t->t_end_ns = 0;
}

void m40_steptimes_status(const struct m40_steptimes *t, struct m40_proto_status *ret)
{
        m40_steptime_summary(&t->step, &ret->step);
        m40_steptime_summary(&t->gap, &ret->gap);
        m40_steptime_summary(&t->wake, &ret->wake);
        m40_steptime_summary(&t->handover, &ret->handover);
}
