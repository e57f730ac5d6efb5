/* steptime.h - what m40d measures of its engine steps (STATUS's timings, m40/proto.h
 * version 5): the step on the engine's thread, the gap from a step's end to the start of
 * the next while work waits, the wake-up of m40d after a step and the hand-over of a step
 * to the engine's thread. Each is a running count, sum, maximum and a histogram of
 * quarter-octave buckets for the median and the 99th percentile. Caller-owned storage,
 * no allocation, nothing logs; the scheduler's thread only. */
#ifndef M40D_STEPTIME_H
#define M40D_STEPTIME_H

#include <stdint.h>

#include "m40/proto.h"

/* Buckets: values 0..3 ns have one each; above, every octave [2^k, 2^(k+1)) is split into
 * 4 equal buckets, so a bucket's upper bound is at most 25% above any value in it. */
#define M40_STEPTIME_BUCKETS 252

struct m40_steptime {
        uint64_t count, sum_ns, max_ns;
        uint64_t bucket[M40_STEPTIME_BUCKETS];
};

/* m40_steptime_add - counts one duration of ns. */
void m40_steptime_add(struct m40_steptime *t, uint64_t ns);

/* m40_steptime_summary - t's count, sum and maximum, and its median and 99th percentile
 * as the upper bound of the bucket that holds them (at most max_ns; 0 when t is empty),
 * into *ret. */
void m40_steptime_summary(const struct m40_steptime *t, struct m40_proto_timing *ret);

/* The four figures of the steps, and the times that link one step to the next. Zeroed
 * storage is an empty one. */
struct m40_steptimes {
        struct m40_steptime step, gap, wake, handover;
        uint64_t t_pump_ns; /* when the step in flight was pumped */
        uint64_t t_end_ns;  /* when the step collected last ended, while the next pump counts
                             * as a gap; 0 otherwise */
};

/* m40_steptimes_pumped - a step was pumped at now: counts the gap from the end of the
 * step before when one is pending (m40_steptimes_collected, no m40_steptimes_idle since). */
void m40_steptimes_pumped(struct m40_steptimes *t, uint64_t now);

/* m40_steptimes_collected - the step in flight, which the engine's thread ran from begin to
 * end (m40_engine_step_times), was collected at now: counts its step, wake and hand-over
 * times and makes the next pump count a gap. */
void m40_steptimes_collected(struct m40_steptimes *t, uint64_t begin, uint64_t end, uint64_t now);

/* m40_steptimes_idle - no step was pumped after the one collected last (no work was
 * waiting, or it waits for something other than m40d): the next pump counts no gap. */
void m40_steptimes_idle(struct m40_steptimes *t);

/* m40_steptimes_status - the four summaries into STATUS's step, gap, wake and handover. */
void m40_steptimes_status(const struct m40_steptimes *t, struct m40_proto_status *ret);

#endif
