/* tests/gpu/enginetest.h - what the whole-model GPU tests share (test_cuda_engine.c,
 * test_engine_churn.c): the CPU reference engine and the CUDA engine opened on one file
 * with the same limits. Header-only; include after gputest.h. */
#ifndef M40_TESTS_ENGINETEST_H
#define M40_TESTS_ENGINETEST_H

#include "cuda/engine/cuda_engine.h"
#include "gputest.h"
#include "tests/model_file.h"

/* engines_open - *ret_cpu and *ret_gpu on path with lim: 0, or -1 after fail() with the
 * engine's message (nothing left open). */
static inline int engines_open(const char *path, const struct m40_engine_limits *lim,
                               struct m40_engine **ret_cpu, struct m40_engine **ret_gpu)
{
        struct m40_engine *cpu = NULL, *gpu = NULL;
        char err[512] = "";
        int r = m40_cpu_engine_new(test_model_file(path, err, sizeof(err)), lim, &cpu, err,
                                   sizeof(err));

        if (r) {
                fail("%s: cpu engine: %s", path, err);
                return -1;
        }
        r = m40_cuda_engine_new(test_model_file(path, err, sizeof(err)), lim, 0, &gpu, err,
                                sizeof(err));
        if (r) {
                fail("%s: cuda engine: %d %s", path, r, err);
                m40_engine_free(cpu);
                return -1;
        }
        *ret_cpu = cpu;
        *ret_gpu = gpu;
        return 0;
}

#endif
