/* tests/gpu/gputest.h - what the GPU test programs share: failure counting, a seeded
 * random source, opening GPU 0 or skipping (exit 77) where there is none, device copies
 * (poisoned or of host data) and downloads, and putting uploaded GGML rows into the
 * kernels' device layout.
 *
 * Header-only (static functions); each test program includes it once. */
#ifndef M40_TESTS_GPUTEST_H
#define M40_TESTS_GPUTEST_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "cuda/runtime/device.h"
#include "cuda/kernels/matvec.h"
#include "m40/error.h"

#define EXIT_SKIP 77

static int failures;

static inline void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static inline void fail(const char *fmt, ...)
{
        va_list ap;

        fputs("FAIL: ", stdout);
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        fputc('\n', stdout);
        failures++;
}

#define CHECK(cond, ...)                                                                           \
        do {                                                                                       \
                if (!(cond))                                                                       \
                        fail(__VA_ARGS__);                                                         \
        } while (0)

/* xorshift64*, and a standard normal from it (Box-Muller). */
static inline uint64_t rng_next(uint64_t *s)
{
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        return *s * 0x2545f4914f6cdd1dULL;
}

static inline double rng_unit(uint64_t *s)
{
        return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

static inline float rng_normal(uint64_t *s)
{
        double u = rng_unit(s) + 1e-300, v = rng_unit(s);

        return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* Open GPU 0. Returns it, or NULL after printing SKIP (no GPU, no driver) or FAIL
 * (anything else); *exit_code says which. */
static inline struct m40_cuda_device *gpu_open(int *exit_code)
{
        struct m40_cuda_device *d = NULL;
        char err[512] = "";
        int r;

        r = m40_cuda_device_open(0, &d, err, sizeof(err));
        if (r == M40_ENODEVICE) {
                printf("SKIP: no usable GPU here (%s)\n", err);
                *exit_code = EXIT_SKIP;
                return NULL;
        }
        if (r < 0) {
                printf("FAIL: m40_cuda_device_open(0): %d (%s): %s\n", r, m40_strerror(r), err);
                *exit_code = 1;
                return NULL;
        }
        printf("GPU 0: %s (compute capability %d.%d)\n", m40_cuda_device_info(d)->name,
               m40_cuda_device_info(d)->cc_major, m40_cuda_device_info(d)->cc_minor);
        *exit_code = 0;
        return d;
}

/* Quick mode, for compute-sanitizer: M40_TEST_QUICK=1 fewer and smaller cases, 2 even
 * fewer (racecheck); 0 or unset: everything. */
static inline int quick_mode(void)
{
        const char *q = getenv("M40_TEST_QUICK");

        return q ? atoi(q) : 0;
}

/* dev_relayout - n_out GGML rows of row_bytes (type, n_in elements) uploaded at dev,
 * rewritten into the device layout as the engine does after loading
 * (m40_cuda_relayout(), through a bounce buffer of one row); waits for it. Returns 0,
 * or -1 after fail(). */
static inline int dev_relayout(void *dev, uint32_t type, uint32_t n_in, uint32_t n_out,
                               size_t row_bytes)
{
        const struct m40_cuda_matrix w = {dev, type, n_in, n_out, row_bytes};
        const size_t nb = m40_cuda_relayout_bounce(&w);
        void *bounce = NULL;
        int r;

        if (!nb)
                return 0;
        if (cudaMalloc(&bounce, nb) != cudaSuccess) {
                fail("relayout: cudaMalloc %zu bytes", nb);
                return -1;
        }
        r = m40_cuda_relayout(&w, bounce, nb, NULL);
        if (!r && cudaDeviceSynchronize() != cudaSuccess)
                r = M40_ECUDA;
        cudaFree(bounce);
        if (r)
                fail("relayout of a %ux%u matrix of type %u: %s %s", n_out, n_in, type,
                     m40_strerror(r), m40_cuda_last_error());
        return r ? -1 : 0;
}

/* dput - a device copy of n bytes of h (h NULL: poisoned); NULL after a failure. */
static inline void *dput(const void *h, size_t n)
{
        void *d = NULL;

        if (cudaMalloc(&d, n ? n : 1) != cudaSuccess) {
                fail("cudaMalloc(%zu): %s", n, cudaGetErrorString(cudaGetLastError()));
                return NULL;
        }
        if ((h ? cudaMemcpy(d, h, n, cudaMemcpyHostToDevice) : cudaMemset(d, 0xff, n)) !=
            cudaSuccess) {
                fail("upload: %s", cudaGetErrorString(cudaGetLastError()));
                cudaFree(d);
                return NULL;
        }
        return d;
}

static inline int dget(void *h, const void *d, size_t n, const char *what)
{
        if (cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost) != cudaSuccess) {
                fail("%s: kernel or download failed: %s", what,
                     cudaGetErrorString(cudaGetLastError()));
                return -1;
        }
        return 0;
}

static inline int finish(void)
{
        if (failures) {
                printf("%d check(s) failed\n", failures);
                return 1;
        }
        printf("all checks passed\n");
        return 0;
}

#endif
