/* tests/bench/bench_sync.h - m40-bench's measure of the persistent kernel's waits
 * (m40-bench --sync).
 *
 * Owns running the sync probe (cuda/kernels/sync_probe.h) at 1 and 2 blocks an SM and
 * reporting, for each, what a launch, a grid barrier of the resident blocks and a
 * dataflow wait (one block's arrival to another's leaving its wait) cost: the figures
 * issue 21 asks for to count what a token's waits cost. */
#ifndef M40_BENCH_SYNC_H
#define M40_BENCH_SYNC_H

#include <stddef.h>
#include <stdio.h>

#include "cuda/kernels/sync_probe.h"

#define BENCH_SYNC_RUNS   2    /* 1 and 2 blocks an SM */
#define BENCH_SYNC_STAGES 5000 /* barriers and dataflow waits timed a run */

struct bench_sync {
        struct m40_cuda_sync_probe p[BENCH_SYNC_RUNS];
        int per_sm[BENCH_SYNC_RUNS];
        int n;
};

/* bench_sync_run - probe the current device; 0, or the probe's error with err filled. */
int bench_sync_run(struct bench_sync *ret, char *err, size_t errlen);

/* bench_sync_text / _json - the results as a table, or as a JSON member "sync":[...]
 * (no surrounding braces). */
void bench_sync_text(const struct bench_sync *b, FILE *f);
void bench_sync_json(const struct bench_sync *b, FILE *f);

#endif
