/* tests/gpu/test_mmq.c - the batched kernel (matvec.h's m40_cuda_mmq(), cuda/kernels/mmq.cuh)
 * against the CPU reference.
 *
 * Owns the checks that for every weight type (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K
 * Q5_K Q6_K): every batch 1..64 and some larger ones (prompt chunks: several column
 * tiles; the batches that mr_takes() of cuda/kernels/mmr.cuh gives it take k_mmr, by type
 * up to 56, the others k_mmq),
 * rows of a whole number of 16 bytes and rows that are not, one to three matrices of
 * ragged row counts in one launch, y = x W^T and y += x W^T on random prior y, on the
 * shared schedule (tiles cut into pieces across blocks; mq_sched.cuh), with k split over
 * a grid (several splits, ragged last split) and without, give every output within the
 * bound of the double-precision reference, and that nothing outside y is written (y
 * poisoned with NaN first: guard columns and a guard row stay poisoned; the partial
 * buffer poisoned too, so a sum that is read before it is written shows); that every
 * call with partials leaves the counters at zero and gives the same bits when repeated.
 * Also the argument checks.
 * (The kernel without splits is m40_cuda_matmul_tiled(), which test_matvec checks on
 * more shapes.)
 *
 * Reference and error measure as test_matvec (testmat.h): ggml's reference quantizers,
 * the CPU engine's m40_cpu_dequant(), dot products in double; |y - ref| / sum|w x|,
 * bound 1e-5 (deq8 is exact, so only FP32 summation separates the two: a few 1e-7).
 * Fresh random inputs on every run (seed printed; M40_TEST_SEED repeats one).
 * M40_TEST_QUICK=1: fewer batches (memcheck); 2: one type per family (racecheck).
 *
 * Exit 0 pass, 1 fail, 77 skip (no GPU, or a build without CUDA). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef M40_HAVE_CUDA

int main(void)
{
        printf("SKIP: this build has no CUDA (meson -Dcuda=enabled)\n");
        return 77;
}

#else

#include <cuda_runtime_api.h>

#include "cuda/kernels/matvec.h"
#include "gputest.h"
#include "model/ggml_type.h"
#include "testmat.h"

#define MAX_TYPES TEST_TYPES
#define BOUND     1e-5

static double worst[MAX_TYPES];
static uint64_t checked[MAX_TYPES], launches[MAX_TYPES];

/* After a call with partials: the counters at the start of part are zero again, and the
 * same call on the same y0 gives the same bits (the sums' order does not depend on
 * timing). ys hold the first call's outputs. */
static void check_again(const struct m40_cuda_matrix *w, uint32_t nm, const float *dx, size_t ldx,
                        float *const *dys, const size_t *ldy, uint32_t batch, bool add,
                        float *dpart, size_t part_bytes, float *const *ys, float *const *y0s,
                        const size_t *ny, const char *what)
{
        unsigned sem[M40_CUDA_MMQ_SEM_BYTES / sizeof(unsigned)];
        const size_t sem_bytes =
                part_bytes < M40_CUDA_MMQ_SEM_BYTES ? part_bytes : M40_CUDA_MMQ_SEM_BYTES;
        int r;

        if (cudaMemcpy(sem, dpart, sem_bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
                fail("%s: counters: %s", what, cudaGetErrorString(cudaGetLastError()));
                return;
        }
        for (size_t i = 0; i < sem_bytes / sizeof(unsigned); i++)
                if (sem[i]) {
                        fail("%s %s batch %u: counter %zu left at %u", what,
                             m40_ggml_type_name(w[0].type), batch, i, sem[i]);
                        return;
                }
        for (uint32_t i = 0; i < nm; i++)
                if (cudaMemcpy(dys[i], y0s[i], sizeof(float) * ny[i], cudaMemcpyHostToDevice) !=
                    cudaSuccess) {
                        fail("y upload: %s", cudaGetErrorString(cudaGetLastError()));
                        return;
                }
        r = m40_cuda_mmq(w, nm, dx, ldx, dys, ldy, batch, add, dpart, part_bytes, NULL);
        if (r < 0) {
                fail("%s again: %d (%s)", what, r, m40_strerror(r));
                return;
        }
        for (uint32_t i = 0; i < nm; i++) {
                float *again = malloc(sizeof(float) * ny[i]);

                if (!again || cudaMemcpy(again, dys[i], sizeof(float) * ny[i],
                                         cudaMemcpyDeviceToHost) != cudaSuccess) {
                        fail("%s again: %s", what, cudaGetErrorString(cudaGetLastError()));
                        free(again);
                        return;
                }
                if (memcmp(again, ys[i], sizeof(float) * ny[i]))
                        fail("%s %s %ux%u batch %u: a second call gave other bits", what,
                             m40_ggml_type_name(w[0].type), w[i].n_out, w[i].n_in, batch);
                free(again);
        }
}

/* One call: y[i] (+)= x W[i]^T for the nm matrices of ms at `batch` columns, with
 * part_bytes of partial sums (0: none), checked against the reference. */
static void run_case(const struct mat *ms, uint32_t nm, int ti, uint32_t batch, bool add,
                     size_t part_bytes)
{
        const uint32_t n_in = ms[0].n_in;
        const size_t ldx = ((size_t)n_in + 3 + 4 * (batch & 1)) & ~(size_t)3;
        struct m40_cuda_matrix w[M40_CUDA_MATMUL_MAX_MATS];
        size_t ldy[M40_CUDA_MATMUL_MAX_MATS], ny[M40_CUDA_MATMUL_MAX_MATS];
        float *dys[M40_CUDA_MATMUL_MAX_MATS] = {NULL}, *ys[M40_CUDA_MATMUL_MAX_MATS] = {NULL};
        float *y0s[M40_CUDA_MATMUL_MAX_MATS] = {NULL};
        char what[64];
        const struct ycheck yc = {.what = what,
                                  .n_name = "batch",
                                  .col = "column",
                                  .row = "row",
                                  .bound = BOUND,
                                  .checked = &checked[ti],
                                  .worst = &worst[ti]};
        float *x = malloc(sizeof(float) * ldx * batch), *dx = NULL, *dpart = NULL;
        const size_t sem_bytes =
                part_bytes < M40_CUDA_MMQ_SEM_BYTES ? part_bytes : M40_CUDA_MMQ_SEM_BYTES;
        int r;

        snprintf(what, sizeof(what), "mmq%s (%u matrices, %zu B of partials)", add ? " add" : "",
                 nm, part_bytes);
        if (!x) {
                fail("out of host memory");
                goto out;
        }
        for (size_t i = 0; i < ldx * batch; i++)
                x[i] = rng_normal(&seed);
        if (cudaMalloc((void **)&dx, sizeof(float) * ldx * batch) != cudaSuccess ||
            cudaMemcpy(dx, x, sizeof(float) * ldx * batch, cudaMemcpyHostToDevice) != cudaSuccess ||
            (part_bytes && (cudaMalloc((void **)&dpart, part_bytes) != cudaSuccess ||
                            cudaMemset(dpart, 0xff, part_bytes) != cudaSuccess ||
                            cudaMemset(dpart, 0, sem_bytes) != cudaSuccess))) {
                fail("device buffers: %s", cudaGetErrorString(cudaGetLastError()));
                goto out;
        }
        for (uint32_t i = 0; i < nm; i++) {
                w[i] = mat_view(&ms[i]);
                ldy[i] = (size_t)ms[i].n_out + 1 + i; /* guard columns */
                ny[i] = ldy[i] * (batch + 1);         /* and a guard row */
                ys[i] = malloc(sizeof(float) * ny[i]);
                y0s[i] = malloc(sizeof(float) * ny[i]);
                if (!ys[i] || !y0s[i] ||
                    cudaMalloc((void **)&dys[i], sizeof(float) * ny[i]) != cudaSuccess) {
                        fail("buffers: %s", cudaGetErrorString(cudaGetLastError()));
                        goto out;
                }
                memset(y0s[i], 0xff, sizeof(float) * ny[i]);
                for (uint32_t c = 0; c < batch && add; c++)
                        for (uint32_t o = 0; o < ms[i].n_out; o++)
                                y0s[i][c * ldy[i] + o] = rng_normal(&seed);
                if (cudaMemcpy(dys[i], y0s[i], sizeof(float) * ny[i], cudaMemcpyHostToDevice) !=
                    cudaSuccess) {
                        fail("y upload: %s", cudaGetErrorString(cudaGetLastError()));
                        goto out;
                }
        }
        r = m40_cuda_mmq(w, nm, dx, ldx, dys, ldy, batch, add, dpart, part_bytes, NULL);
        if (r < 0) {
                fail("%s %s %ux%u batch %u: %d (%s) %s", what, m40_ggml_type_name(ms[0].type),
                     ms[0].n_out, n_in, batch, r, m40_strerror(r), m40_cuda_last_error());
                goto out;
        }
        launches[ti]++;
        for (uint32_t i = 0; i < nm; i++) {
                if (cudaMemcpy(ys[i], dys[i], sizeof(float) * ny[i], cudaMemcpyDeviceToHost) !=
                    cudaSuccess) {
                        fail("%s %s: kernel failed: %s", what, m40_ggml_type_name(ms[0].type),
                             cudaGetErrorString(cudaGetLastError()));
                        goto out;
                }
                mat_check_y(&ms[i], &yc, batch, x, ldx, ys[i], add ? y0s[i] : NULL, ldy[i]);
        }
        if (part_bytes)
                check_again(w, nm, dx, ldx, dys, ldy, batch, add, dpart, part_bytes, ys, y0s, ny,
                            what);
out:
        for (uint32_t i = 0; i < nm; i++) {
                free(ys[i]);
                free(y0s[i]);
                cudaFree(dys[i]);
        }
        cudaFree(dx);
        cudaFree(dpart);
        free(x);
}

/* The partial bytes that let a launch of rows (all matrices) at batch split 16 ways (too
 * few for the shared schedule's slots but on the tallest matrices). */
static size_t part_for(uint32_t rows, uint32_t batch)
{
        return M40_CUDA_MMQ_SEM_BYTES + (size_t)16 * rows * batch * sizeof(float);
}

/* What the engine gives (cuda_forward.c): room for the shared schedule at any batch. */
#define PART_SK   ((size_t)32 << 20)

/* The row length for type ti from lens[aligned ? 0 : 1][family], the families being
 * elements (F32 F16 BF16), 32-element blocks and 256-element blocks. */
static uint32_t row_len(int ti, const uint32_t lens[2][3], bool aligned)
{
        const uint32_t bs = m40_ggml_type_info(test_types[ti])->block_size;

        return lens[aligned ? 0 : 1][bs == 1 ? 0 : bs == 32 ? 1 : 2];
}

/* Every batch 1..64 (quick: a spread of them) on one small matrix of ragged rows whose
 * k splits (long rows, few tiles): odd batches split over a grid, batches of 4n on the
 * shared schedule, the rest not split; then larger batches. aligned: rows of a whole number
 * of 16 bytes (what model matrices have: the kernels' wide loads), else rows that are not
 * (and, for F32, a ragged last 8-element piece). */
static void run_batches(int ti, int quick, bool aligned)
{
        static const uint32_t lens[2][3] = {{2048, 32 * 72, 256 * 8}, {2051, 32 * 67, 256 * 9}};
        const uint32_t n_in = row_len(ti, lens, aligned);
        static const uint32_t big[] = {65, 100, 257};
        struct mat m;

        if (mat_make(&m, test_types[ti], n_in, 131) < 0)
                return;
        for (uint32_t b = 1; b <= 64; b++) {
                if (quick && b % 7 != 1 && b != 64)
                        continue;
                run_case(&m, 1, ti, b, b % 3 == 0, b % 2 ? part_for(131, b) : b % 4 ? 0 : PART_SK);
        }
        for (size_t i = 0; i < sizeof(big) / sizeof(big[0]) && quick < 2; i++)
                run_case(&m, 1, ti, big[i], i == 1, part_for(131, big[i]));
        /* a partial buffer that holds fewer splits than the launch would take */
        run_case(&m, 1, ti, 20, false, part_for(131, 20) / 5);
        mat_free(&m);
}

/* Three matrices of ragged row counts sharing x (q, k, v), and two (gate, up), each
 * with and without splits, adding and not; rows aligned as run_batches() says. */
static void run_multi(int ti, int quick, bool aligned)
{
        static const uint32_t lens[2][3] = {{512, 32 * 16, 256 * 8}, {520, 32 * 17, 256 * 3}};
        const uint32_t n_in = row_len(ti, lens, aligned);
        static const uint32_t rows[3] = {300, 77, 129};
        static const uint32_t batches[] = {5, 8, 9, 33, 64, 70};
        struct mat ms[3];
        uint32_t made = 0;

        for (; made < 3; made++)
                if (mat_make(&ms[made], test_types[ti], n_in, rows[made]) < 0)
                        goto out;
        for (size_t i = 0; i < sizeof(batches) / sizeof(batches[0]); i++) {
                if (quick && i % 2)
                        continue;
                run_case(ms, 3, ti, batches[i], i % 2, part_for(506, batches[i]));
                run_case(ms, 3, ti, batches[i], !(i % 2), 0);
                run_case(ms, 2, ti, batches[i], false, part_for(377, batches[i]));
                run_case(ms, 3, ti, batches[i], true, PART_SK);
        }
out:
        while (made)
                mat_free(&ms[--made]);
}

/* A tall matrix: many tiles, so k is not split even with partials, and the last row
 * tile is ragged. */
static void run_tall(int ti)
{
        const uint32_t bs = m40_ggml_type_info(test_types[ti])->block_size;
        struct mat m;

        if (mat_make(&m, test_types[ti], bs == 256 ? 256 : 64, 9001) < 0)
                return;
        run_case(&m, 1, ti, 40, false, part_for(9001, 40));
        run_case(&m, 1, ti, 64, true, part_for(9001, 64));
        mat_free(&m);
}

static void check_arguments(void)
{
        struct mat m;
        float *dx = NULL, *dy = NULL, *dp = NULL;
        size_t ldy = 64;
        int r;

        if (mat_make(&m, M40_GGML_Q4_0, 64, 64) < 0)
                return;
        if (cudaMalloc((void **)&dx, 4 * 64 * 4) != cudaSuccess ||
            cudaMalloc((void **)&dy, 4 * 64 * 4) != cudaSuccess ||
            cudaMalloc((void **)&dp, 4096) != cudaSuccess) {
                fail("argument buffers");
                goto out;
        }
        const struct m40_cuda_matrix w = mat_view(&m);
        r = m40_cuda_mmq(&w, 1, dx, 64, &dy, &ldy, 0, false, NULL, 0, NULL);
        CHECK(r == -EINVAL, "batch 0: %d", r);
        r = m40_cuda_mmq(&w, 1, dx, 64, &dy, &ldy, M40_CUDA_MMQ_MAX_BATCH + 1, false, NULL, 0,
                         NULL);
        CHECK(r == -EINVAL, "batch above the limit: %d", r);
        r = m40_cuda_mmq(&w, 0, dx, 64, &dy, &ldy, 4, false, NULL, 0, NULL);
        CHECK(r == -EINVAL, "no matrix: %d", r);
        r = m40_cuda_mmq(&w, 1, dx, 64, &dy, &ldy, 4, false, NULL, 4096, NULL);
        CHECK(r == -EINVAL, "part bytes without part: %d", r);
        r = m40_cuda_mmq(&w, 1, dx, 64, &dy, &ldy, 4, false, dp + 1, 1024, NULL);
        CHECK(r == -EINVAL, "misaligned part: %d", r);
        r = m40_cuda_mmq(&w, 1, dx, 60, &dy, &ldy, 4, false, NULL, 0, NULL);
        CHECK(r == -EINVAL, "ldx below n_in: %d", r);
        r = m40_cuda_mmq(&w, 1, dx, 64, &dx, &ldy, 4, false, NULL, 0, NULL);
        CHECK(r == -EINVAL, "y over x: %d", r);
out:
        cudaFree(dx);
        cudaFree(dy);
        cudaFree(dp);
        mat_free(&m);
}

int main(void)
{
        int code, quick = quick_mode();
        struct m40_cuda_device *d = gpu_open_seeded(quick, &code);

        if (!d)
                return code;
        check_arguments();
        for (int ti = 0; ti < MAX_TYPES; ti++) {
                const uint32_t t = test_types[ti];

                if (quick >= 2 && t != M40_GGML_F16 && t != M40_GGML_Q4_0 && t != M40_GGML_Q6_K)
                        continue;
                run_batches(ti, quick, true);
                run_batches(ti, quick, false);
                run_multi(ti, quick, true);
                run_multi(ti, quick, false);
                if (quick < 2)
                        run_tall(ti);
        }
        printf("%-5s %-6s %9s %8s %9s\n", "type", "bound", "worst", "launches", "outputs");
        for (int ti = 0; ti < MAX_TYPES; ti++)
                printf("%-5s %-6.0e %9.2e %8" PRIu64 " %9" PRIu64 "\n",
                       m40_ggml_type_name(test_types[ti]), BOUND, worst[ti], launches[ti],
                       checked[ti]);
        printf("(max |y - ref| / sum|w x| per type over every batch, split and matrix count)\n");
        m40_cuda_device_free(d);
        return finish();
}

#endif
