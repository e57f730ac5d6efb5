/* tests/bench/bench_matvec.h - m40-bench's matrix-kernel benchmark (m40-bench --matvec).
 *
 * Owns timing the matrix kernels on the Llama-3-8B weight shapes for every weight type:
 * at batch 1 the GB/s of weight bytes streamed (the decode roofline's numerator, to be
 * divided by the copy bandwidth), at batches 2..64 the GFLOP/s (2 x n_in x n_out x batch
 * per call): m40_cuda_matvec() at 1..8, m40_cuda_mmq() at 2..64 (both at 2, 4 and 8,
 * the batches where the engine could take either). Weights are rotated over enough copies
 * that they never sit in L2. */
#ifndef M40_BENCH_MATVEC_H
#define M40_BENCH_MATVEC_H

#include <stdint.h>
#include <stdio.h>

struct m40_cuda_device;

#define BENCH_MV_SHAPES 5
#define BENCH_MV_TYPES  11
#define BENCH_MV_RUNS   10 /* (batch, kernel) pairs per shape and type */

struct bench_mv_result {
        uint32_t n_in, n_out, type, batch;
        const char *kernel; /* "matvec" (m40_cuda_matvec) or "mmq" (m40_cuda_mmq, split) */
        double us;          /* per call */
        double gbs;         /* weight bytes / time, 1e9 B/s */
        double gflops;      /* 2 n_in n_out batch / time */
};

struct bench_mv {
        struct bench_mv_result r[BENCH_MV_SHAPES * BENCH_MV_TYPES * BENCH_MV_RUNS];
        int n;
        double copy_gbs; /* what fractions are of */
};

/* bench_matvec_run - measure every shape, type and batch on d; 0, or -errno / a project
 * code with err filled. */
int bench_matvec_run(struct m40_cuda_device *d, double copy_gbs, struct bench_mv *ret, char *err,
                     size_t errlen);

/* bench_matvec_text / _json - the results as tables, or as a JSON member
 * "matvec":{...} (no surrounding braces). */
void bench_matvec_text(const struct bench_mv *b, FILE *f);
void bench_matvec_json(const struct bench_mv *b, FILE *f);

#endif
