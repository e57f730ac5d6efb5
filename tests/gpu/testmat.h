/* tests/gpu/testmat.h - what the matrix-kernel tests (test_matvec, test_gemm) share: the
 * seeded random source, random weight matrices (quantized by ggml's reference quantizers,
 * tests/tools/quantize.h, decoded by the CPU engine's m40_cpu_dequant() where it is
 * built, else by the test tools' m40_row_dequantize(); uploaded to the device and put
 * in its layout as the engine does), the list of weight types they cover, the
 * double-precision reference dot product, and the NaN poison that marks what a kernel
 * must not write.
 *
 * Header-only (static functions), after gputest.h; each test program includes it once.
 * Needs CUDA and the test tools (M40_HAVE_ENGINE: the CPU engine too). */
#ifndef M40_TESTS_TESTMAT_H
#define M40_TESTS_TESTMAT_H

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "cuda/kernels/matvec.h"
#include "gputest.h"
#include "model/ggml_type.h"
#include "quantize.h"

#ifdef M40_HAVE_ENGINE
#include "engine/quant.h"
#define REFERENCE "m40_cpu_dequant (CPU engine)"
#else
#define REFERENCE "m40_row_dequantize (tests/tools)"
#endif

/* Every weight type the matrix kernels take, in the order the tests report them. */
#define TEST_TYPES 11
static const uint32_t test_types[TEST_TYPES] = {
        M40_GGML_F32,  M40_GGML_F16,  M40_GGML_BF16, M40_GGML_Q8_0, M40_GGML_Q4_0, M40_GGML_Q4_1,
        M40_GGML_Q5_0, M40_GGML_Q5_1, M40_GGML_Q4_K, M40_GGML_Q5_K, M40_GGML_Q6_K,
};

/* The random source of every input; seed_init() sets it. */
static uint64_t seed;

/* Seed from M40_TEST_SEED, else fresh from the clock, and print the seed (to repeat a
 * run) with the reference in use. */
static inline void seed_init(int quick)
{
        seed = getenv("M40_TEST_SEED") ? strtoull(getenv("M40_TEST_SEED"), NULL, 0)
                                       : (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ULL + 1;
        printf("seed %" PRIu64 "%s; reference %s\n", seed, quick ? " (quick mode)" : "", REFERENCE);
}

/* gpu_open(), then seed_init(): how a matrix test starts. Returns GPU 0, or NULL with
 * *exit_code set (see gpu_open()). */
static inline struct m40_cuda_device *gpu_open_seeded(int quick, int *exit_code)
{
        struct m40_cuda_device *d = gpu_open(exit_code);

        if (d)
                seed_init(quick);
        return d;
}

/* One weight matrix: on the host (quantized and dequantized) and on the device. */
struct mat {
        uint32_t type;
        uint32_t n_in, n_out;
        size_t row_bytes;
        uint8_t *q; /* n_out * row_bytes */
        float *deq; /* n_out * n_in, what m40_cpu_dequant() makes of q */
        void *dev;
};

/* Free what mat_make() made and zero *m; a zeroed *m is fine. */
static inline void mat_free(struct mat *m)
{
        free(m->q);
        free(m->deq);
        cudaFree(m->dev);
        memset(m, 0, sizeof(*m));
}

/* Make *m: an n_out x n_in matrix of type `type`, random rows (normal, a spread of
 * magnitudes along the row) quantized, dequantized by the reference, and uploaded (256
 * bytes of slack after it on the device). Returns 0, or -1 after fail() with *m freed. */
static inline int mat_make(struct mat *m, uint32_t type, uint32_t n_in, uint32_t n_out)
{
        const struct m40_ggml_type_info *ti = m40_ggml_type_info(type);
        float *row = malloc(sizeof(float) * n_in);
        uint64_t rb = 0;
        int r = -1;

        memset(m, 0, sizeof(*m));
        if (!ti || m40_ggml_row_size(type, n_in, &rb) < 0 || !row)
                goto out;
        m->type = type;
        m->n_in = n_in;
        m->n_out = n_out;
        m->row_bytes = rb;
        m->q = malloc(rb * n_out);
        m->deq = malloc(sizeof(float) * n_in * n_out);
        if (!m->q || !m->deq)
                goto out;
        for (uint32_t o = 0; o < n_out; o++) {
                /* A spread of magnitudes along the row, so block scales differ. */
                for (uint32_t k = 0; k < n_in; k++)
                        row[k] = rng_normal(&seed) * (0.25f + (float)((k * 7 + o) % 13) / 8.0f);
                if (m40_row_quantize(type, row, m->q + o * rb, n_in) < 0)
                        goto out;
#ifdef M40_HAVE_ENGINE
                m40_cpu_dequant(type, m->q + o * rb, m->deq + (size_t)o * n_in,
                                n_in / ti->block_size);
#else
                if (m40_row_dequantize(type, m->q + o * rb, m->deq + (size_t)o * n_in, n_in) < 0)
                        goto out;
#endif
        }
        if (cudaMalloc(&m->dev, rb * n_out + 256) != cudaSuccess ||
            cudaMemcpy(m->dev, m->q, rb * n_out, cudaMemcpyHostToDevice) != cudaSuccess ||
            dev_relayout(m->dev, type, n_in, n_out, rb) < 0)
                goto out;
        r = 0;
out:
        free(row);
        if (r < 0) {
                fail("cannot set up a %s %ux%u matrix", m40_ggml_type_name(type), n_out, n_in);
                mat_free(m);
        }
        return r;
}

/* The kernels' view of m (borrowed: valid while m is). */
static inline struct m40_cuda_matrix mat_view(const struct mat *m)
{
        return (struct m40_cuda_matrix){m->dev, m->type, m->n_in, m->n_out, m->row_bytes};
}

/* For the argument checks: *m a Q4_0 matrix of 8 rows of 64, *dx and *dy device buffers
 * of 4096 bytes, *dx zeroed. Returns 0, or -1 after fail() with all of it freed; free it
 * with args_free(). */
static inline int args_make(struct mat *m, float **dx, float **dy)
{
        *dx = *dy = NULL;
        if (mat_make(m, M40_GGML_Q4_0, 64, 8) < 0)
                return -1;
        if (cudaMalloc((void **)dx, 4096) == cudaSuccess &&
            cudaMalloc((void **)dy, 4096) == cudaSuccess && cudaMemset(*dx, 0, 4096) == cudaSuccess)
                return 0;
        fail("argument buffers: %s", cudaGetErrorString(cudaGetLastError()));
        cudaFree(*dx);
        cudaFree(*dy);
        mat_free(m);
        return -1;
}

static inline void args_free(struct mat *m, float *dx, float *dy)
{
        cudaFree(dx);
        cudaFree(dy);
        mat_free(m);
}

/* Row o of m's dequantized weights dotted with x (n_in floats), in double precision;
 * *ret_mag gets sum_k |w_k x_k|, what the error is measured against. */
static inline double mat_dot(const struct mat *m, size_t o, const float *x, double *ret_mag)
{
        double ref = 0.0, mag = 0.0;

        for (uint32_t k = 0; k < m->n_in; k++) {
                const double p = (double)m->deq[o * m->n_in + k] * (double)x[k];

                ref += p;
                mag += fabs(p);
        }
        *ret_mag = mag;
        return ref;
}

static inline uint32_t bits(float v)
{
        uint32_t u;

        memcpy(&u, &v, 4);
        return u;
}

/* Whether v is still the poison (all bits set: a NaN) a buffer was filled with
 * (cudaMemset(.., 0xff, ..)) before a kernel ran. */
static inline int is_poison(float v)
{
        return bits(v) == 0xffffffffu;
}

/* How mat_check_y() names and counts what it checks. Its messages read "<what> <type>
 * <n_out>x<n_in> <n_name> <n>: ...", a guard written "wrote outside y at <col> <c> <row>
 * <o>" for y[c][o]. */
struct ycheck {
        const char *what;      /* the kernel (and variant) */
        const char *n_name;    /* what n counts: "batch", "n_tok" */
        const char *col, *row; /* the names of y's two indices */
        double bound;          /* the most |y - ref| / sum|w x| may be */
        uint64_t *checked;     /* += the outputs checked */
        double *worst;         /* raised to the largest error seen */
};

/* Check y (n + 1 rows of ldy floats: n_out outputs and guard columns, then a guard row)
 * against m's reference for x (n rows of ldx floats), plus y0 (laid out as y: what y held
 * before, for a kernel that adds; NULL: none): every output finite and within yc->bound
 * of |y - ref| / sum|w x| (sum|w x| counting |y0| too), every guard still poison. fail()s
 * each miss, and stops after 3. */
static inline void mat_check_y(const struct mat *m, const struct ycheck *yc, uint32_t n,
                               const float *x, size_t ldx, const float *y, const float *y0,
                               size_t ldy)
{
        double maxe = 0.0;
        int bad = 0;

        for (uint32_t c = 0; c <= n && bad < 3; c++)
                for (size_t o = 0; o < ldy && bad < 3; o++) {
                        const float got = y[c * ldy + o];
                        double ref, mag, e;

                        if (c == n || o >= m->n_out) {
                                if (!is_poison(got)) {
                                        fail("%s %s %ux%u %s %u: wrote outside y at %s %u %s %zu",
                                             yc->what, m40_ggml_type_name(m->type), m->n_out,
                                             m->n_in, yc->n_name, n, yc->col, c, yc->row, o);
                                        bad++;
                                }
                                continue;
                        }
                        ref = mat_dot(m, o, x + c * ldx, &mag);
                        if (y0) {
                                ref += (double)y0[c * ldy + o];
                                mag += fabs((double)y0[c * ldy + o]);
                        }
                        e = fabs((double)got - ref) / (mag > 0.0 ? mag : 1.0);
                        if (!isfinite(got) || !(e <= yc->bound)) {
                                fail("%s %s %ux%u %s %u: y[%u][%zu] = %.9g, reference %.9g "
                                     "(error %.3g of sum|wx| %.4g, bound %.1g)",
                                     yc->what, m40_ggml_type_name(m->type), m->n_out, m->n_in,
                                     yc->n_name, n, c, o, got, ref, e, mag, yc->bound);
                                bad++;
                        }
                        if (e > maxe)
                                maxe = e;
                        (*yc->checked)++;
                }
        if (maxe > *yc->worst)
                *yc->worst = maxe;
}

#endif
