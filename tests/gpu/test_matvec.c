/* tests/gpu/test_matvec.c - the matrix kernels (cuda/kernels/matvec.h) against the CPU reference.
 *
 * Owns the checks that for every weight type (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K
 * Q5_K Q6_K), several shapes with ragged edges (rows not a multiple of the 4-row warp
 * groups or 64-row tiles, row lengths not a multiple of 256 / 8 / 4, batches not a
 * multiple of the tile), and batches 1..64 through each kernel (m40_cuda_matvec,
 * m40_cuda_matmul_tiled, m40_cuda_matmul, m40_cuda_matmul_n with two and three matrices,
 * m40_cuda_matvec_add on random prior y, and the fused RMSNorm: m40_cuda_matmul_n_rms
 * of x * g and partial sums of squares against x normalized in double,
 * m40_cuda_matvec_add_rms's y * g (exact) and partials against the sum of squares of
 * the y it wrote; m40_cuda_matmul_swiglu_rms against silu(g) u of the normalized x's
 * products in double), every output element equals the reference
 * within the type's bound (both tile sizes of the tiled kernel: a tall matrix makes it
 * take the large one), and no element outside the output is written (y is poisoned
 * with NaN first, guard columns and a guard row stay poisoned). Also the argument
 * checks. The fused q/k/v + RoPE + KV append (m40_cuda_matmul_qkv_rope), which these
 * products feed, is test_matvec_qkv.c's.
 *
 * Reference: the weights quantized by ggml's reference quantizers (tests/tools/
 * quantize.h), decoded by the CPU engine's m40_cpu_dequant(), and the dot product with
 * the activations taken in double precision. Error measure: |y - ref| / sum_k |w_k x_k|,
 * the error relative to the size of the terms summed (what FP32 summation bounds; a plain
 * relative error is meaningless where the terms cancel to nearly 0). Bound: 1e-5 for
 * every type. The FP32 paths (F32 F16 BF16, whose weights convert exactly) and the exact
 * ones (Q8_0; every tiled-kernel type: deq8 is exact) reach a few 1e-7; the 4/5/6-bit
 * matrix-vector paths, whose sums carry an offset (quant.cuh's nib_f4), a few 1e-7 on
 * long rows and ~1e-6 on single-block rows. Fresh random inputs on every run (seed printed;
 * M40_TEST_SEED repeats one).
 *
 * Exit 0 pass, 1 fail, 77 skip (no GPU, or a build without CUDA). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
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

#define MAX_TYPES 11

struct tcase {
        uint32_t type;
        double bound;
};

static const struct tcase types[MAX_TYPES] = {
        {M40_GGML_F32, 1e-5},  {M40_GGML_F16, 1e-5},  {M40_GGML_BF16, 1e-5}, {M40_GGML_Q8_0, 1e-5},
        {M40_GGML_Q4_0, 1e-5}, {M40_GGML_Q4_1, 1e-5}, {M40_GGML_Q5_0, 1e-5}, {M40_GGML_Q5_1, 1e-5},
        {M40_GGML_Q4_K, 1e-5}, {M40_GGML_Q5_K, 1e-5}, {M40_GGML_Q6_K, 1e-5},
};

enum { K_MATVEC, K_TILED, K_AUTO, K_MULTI, K_ADD, K_NORM, K_ADDNORM, K_SWIGLU, K_COUNT };
static const char *const kname[K_COUNT] = {"matvec", "tiled",  "auto",    "multi",
                                           "add",    "rms-in", "rms-out", "swiglu"};
#define RMS_EPS   1e-5f

/* The fused RMSNorm's producer (K_ADDNORM): the worst relative error of the sum of its
 * partials against the sum of squares, in double, of the y it wrote. */
static double worst_scale;
#define RMS_PARTS 3 /* K_NORM: the partials the test hands the consumer */

/* The worst error seen per type and kernel, and how many outputs were checked. */
static double worst[MAX_TYPES][K_COUNT];
static uint64_t checked[MAX_TYPES][K_COUNT];

/* K_SWIGLU: y[c][o] (ldy apart, guard columns and a guard row poisoned) against silu(g) u,
 * g and u rows o of ms[0] (gate) and ms[1] (up) dotted with x[c] in double. Error measure:
 * |y - ref| over what the sums' errors can move it by (|silu'(g)| <= 1.1 times |u| sum|w
 * x| of gate, plus |silu(g)| sum|w x| of up) plus |ref| (the FP32 expf, divide and
 * products); bound yc->bound. */
static void check_swiglu(const struct mat *ms, const struct ycheck *yc, uint32_t n, const float *x,
                         size_t ldx, const float *y, size_t ldy)
{
        const struct mat *m = &ms[0];
        double maxe = 0.0;
        int bad = 0;

        for (uint32_t c = 0; c <= n && bad < 3; c++)
                for (size_t o = 0; o < ldy && bad < 3; o++) {
                        const float got = y[c * ldy + o];
                        double g, u, mg, mu, sl, ref, e;

                        if (c == n || o >= m->n_out) {
                                if (!is_poison(got)) {
                                        fail("swiglu %s %ux%u batch %u: wrote outside y at "
                                             "column %u row %zu",
                                             m40_ggml_type_name(m->type), m->n_out, m->n_in, n, c,
                                             o);
                                        bad++;
                                }
                                continue;
                        }
                        g = mat_dot(&ms[0], o, x + c * ldx, &mg);
                        u = mat_dot(&ms[1], o, x + c * ldx, &mu);
                        sl = g / (1.0 + exp(-g));
                        ref = sl * u;
                        e = fabs((double)got - ref) /
                            (1.1 * fabs(u) * mg + fabs(sl) * mu + fabs(ref));
                        if (!isfinite(got) || !(e <= yc->bound)) {
                                fail("swiglu %s %ux%u batch %u: y[%u][%zu] = %.9g, reference "
                                     "%.9g (error %.3g, bound %.1g)",
                                     m40_ggml_type_name(m->type), m->n_out, m->n_in, n, c, o, got,
                                     ref, e, yc->bound);
                                bad++;
                        }
                        if (e > maxe)
                                maxe = e;
                        (*yc->checked)++;
                }
        if (maxe > *yc->worst)
                *yc->worst = maxe;
}

/* Run kernel `k` on the n matrices ms (n > 1: K_MULTI, one m40_cuda_matmul_n call; all
 * of one type and n_in) for batch columns and check every output and guard. */
static void run_case_n(const struct mat *ms, uint32_t n, int ti, int k, uint32_t batch)
{
        const struct mat *m = &ms[0];
        const size_t ldx = ((size_t)m->n_in + 3 + 4 * (batch & 1)) & ~(size_t)3;
        struct m40_cuda_matrix w[M40_CUDA_MATMUL_MAX_MATS];
        size_t ldy[M40_CUDA_MATMUL_MAX_MATS], ny[M40_CUDA_MATMUL_MAX_MATS];
        float *dys[M40_CUDA_MATMUL_MAX_MATS] = {NULL}, *ys[M40_CUDA_MATMUL_MAX_MATS] = {NULL};
        float *y0 = NULL; /* K_ADD: what y held before */
        /* the fused RMSNorm: weight g, x * g (device), x normalized in double, scales */
        float *g = NULL, *xn = NULL, *xg = NULL, *dg = NULL, *dxg = NULL;
        unsigned *dcount = NULL;
        float *dpart = NULL;
        const size_t ldg = k == K_ADDNORM ? ((size_t)m->n_out + 3) & ~(size_t)3 : ldx; /* xg */
        double scale[M40_CUDA_MATVEC_MAX_BATCH];
        const struct ycheck yc = {.what = kname[k],
                                  .n_name = "batch",
                                  .col = "column",
                                  .row = "row",
                                  .bound = types[ti].bound,
                                  .checked = &checked[ti][k],
                                  .worst = &worst[ti][k]};
        float *x = malloc(sizeof(float) * ldx * batch), *dx = NULL;
        int r;

        if (!x) {
                fail("out of host memory");
                goto out;
        }
        for (size_t i = 0; i < ldx * batch; i++)
                x[i] = rng_normal(&seed);
        if (cudaMalloc((void **)&dx, sizeof(float) * ldx * batch) != cudaSuccess ||
            cudaMemcpy(dx, x, sizeof(float) * ldx * batch, cudaMemcpyHostToDevice) != cudaSuccess) {
                fail("device buffers: %s", cudaGetErrorString(cudaGetLastError()));
                goto out;
        }
        for (uint32_t i = 0; i < n; i++) {
                w[i] = mat_view(&ms[i]);
                ldy[i] = (size_t)ms[i].n_out + 3 + (k == K_SWIGLU ? 0 : i); /* guard columns */
                ny[i] = ldy[i] * (batch + 1);                               /* and a guard row */
                ys[i] = malloc(sizeof(float) * ny[i]);
                if (!ys[i] || cudaMalloc((void **)&dys[i], sizeof(float) * ny[i]) != cudaSuccess ||
                    cudaMemset(dys[i], 0xff, sizeof(float) * ny[i]) != cudaSuccess) {
                        fail("buffers: %s", cudaGetErrorString(cudaGetLastError()));
                        goto out;
                }
        }
        if (k == K_NORM || k == K_ADDNORM || k == K_SWIGLU) {
                const size_t pb =
                        M40_CUDA_RMS_PARTIAL_BYTES(m->n_out > RMS_PARTS ? m->n_out : RMS_PARTS);

                const uint32_t ng = k == K_ADDNORM ? m->n_out : m->n_in;

                g = malloc(sizeof(float) * ng);
                xn = malloc(sizeof(float) * ldx * batch);
                xg = malloc(sizeof(float) * ldg * batch);
                if (!g || !xn || !xg ||
                    cudaMalloc((void **)&dg, sizeof(float) * ng) != cudaSuccess ||
                    cudaMalloc((void **)&dxg, sizeof(float) * ldg * batch) != cudaSuccess ||
                    cudaMalloc((void **)&dcount, sizeof(unsigned)) != cudaSuccess ||
                    cudaMalloc((void **)&dpart, pb) != cudaSuccess) {
                        fail("norm buffers");
                        goto out;
                }
                /* the norm weight, and x normalized by it in double: the reference input */
                for (uint32_t i = 0; i < ng; i++)
                        g[i] = (float)(0.5 + rng_unit(&seed)) * (i % 3 ? 1.0f : -1.0f);
                for (uint32_t c = 0; c < batch; c++) {
                        double ss = 0.0;

                        for (uint32_t i = 0; i < m->n_in; i++)
                                ss += (double)x[c * ldx + i] * x[c * ldx + i];
                        scale[c] = 1.0 / sqrt(ss / m->n_in + RMS_EPS);
                        for (uint32_t i = 0; i < m->n_in && k != K_ADDNORM; i++) {
                                xn[c * ldx + i] = (float)((double)x[c * ldx + i] * g[i] * scale[c]);
                                xg[c * ldx + i] = x[c * ldx + i] * g[i];
                        }
                }
                { /* K_NORM: sum(x^2) as RMS_PARTS partials (uneven thirds of the row) */
                        double pd[RMS_PARTS][8] = {{0}};
                        float parts[RMS_PARTS][8];
                        const unsigned np = RMS_PARTS;

                        for (uint32_t c = 0; c < batch; c++)
                                for (uint32_t i = 0; i < m->n_in; i++)
                                        pd[i * RMS_PARTS / m->n_in][c] +=
                                                (double)x[c * ldx + i] * x[c * ldx + i];
                        for (int b = 0; b < RMS_PARTS; b++)
                                for (int c = 0; c < 8; c++)
                                        parts[b][c] = (float)pd[b][c];
                        if (cudaMemcpy(dg, g, sizeof(float) * ng, cudaMemcpyHostToDevice) !=
                                    cudaSuccess ||
                            (k != K_ADDNORM &&
                             (cudaMemcpy(dxg, xg, sizeof(float) * ldx * batch,
                                         cudaMemcpyHostToDevice) != cudaSuccess ||
                              cudaMemcpy(dpart, parts, sizeof(parts), cudaMemcpyHostToDevice) !=
                                      cudaSuccess ||
                              cudaMemcpy(dcount, &np, sizeof(np), cudaMemcpyHostToDevice) !=
                                      cudaSuccess))) {
                                fail("norm upload");
                                goto out;
                        }
                }
        }
        if (k == K_ADD || k == K_ADDNORM) { /* y: random values where the output goes */
                y0 = malloc(sizeof(float) * ny[0]);
                if (!y0) {
                        fail("out of host memory");
                        goto out;
                }
                memset(y0, 0xff, sizeof(float) * ny[0]);
                for (uint32_t c = 0; c < batch; c++)
                        for (uint32_t o = 0; o < m->n_out; o++)
                                y0[c * ldy[0] + o] = rng_normal(&seed);
                if (cudaMemcpy(dys[0], y0, sizeof(float) * ny[0], cudaMemcpyHostToDevice) !=
                    cudaSuccess) {
                        fail("y upload: %s", cudaGetErrorString(cudaGetLastError()));
                        goto out;
                }
        }
        if (k == K_MATVEC)
                r = m40_cuda_matvec(&w[0], dx, ldx, dys[0], ldy[0], batch, NULL);
        else if (k == K_TILED)
                r = m40_cuda_matmul_tiled(&w[0], dx, ldx, dys[0], ldy[0], batch, NULL);
        else if (k == K_AUTO)
                r = m40_cuda_matmul(&w[0], dx, ldx, dys[0], ldy[0], batch, NULL);
        else if (k == K_ADD)
                r = m40_cuda_matvec_add(&w[0], dx, ldx, dys[0], ldy[0], batch, NULL);
        else if (k == K_NORM || k == K_ADDNORM || k == K_SWIGLU) {
                const struct m40_cuda_rms ro = {
                        dg,
                        dxg,
                        ldg,
                        dpart,
                        M40_CUDA_RMS_PARTIAL_BYTES(m->n_out > RMS_PARTS ? m->n_out : RMS_PARTS),
                        dcount,
                        RMS_EPS,
                        /* the L2 hint over the weights and a ragged run of x: no effect */
                        {{w[0].data, (size_t)w[0].n_out * w[0].row_bytes},
                         {dx, sizeof(float) * ldx - 4}}};

                r = k == K_NORM ? m40_cuda_matmul_n_rms(w, n, dxg, ldx, &ro, dys, ldy, batch, NULL)
                    : k == K_SWIGLU
                            ? m40_cuda_matmul_swiglu_rms(&w[0], &w[1], dxg, ldx, &ro, dys[0],
                                                         dys[1], ldy[0], batch, NULL)
                            : m40_cuda_matvec_add_rms(&w[0], dx, ldx, dys[0], ldy[0], batch, &ro,
                                                      NULL);
        } else
                r = m40_cuda_matmul_n(w, n, dx, ldx, dys, ldy, batch, NULL);
        if (r < 0) {
                fail("%s %s %ux%u (%u matrices) batch %u: %d (%s) %s", kname[k],
                     m40_ggml_type_name(m->type), m->n_out, m->n_in, n, batch, r, m40_strerror(r),
                     m40_cuda_last_error());
                goto out;
        }
        for (uint32_t i = 0; i < n; i++) {
                if (cudaMemcpy(ys[i], dys[i], sizeof(float) * ny[i], cudaMemcpyDeviceToHost) !=
                    cudaSuccess) {
                        fail("%s %s: kernel failed: %s", kname[k], m40_ggml_type_name(m->type),
                             cudaGetErrorString(cudaGetLastError()));
                        goto out;
                }
                if (k == K_SWIGLU) { /* y = silu(g) u; the second output is scratch */
                        check_swiglu(ms, &yc, batch, xn, ldx, ys[0], ldy[0]);
                        break;
                }
                mat_check_y(&ms[i], &yc, batch, k == K_NORM ? xn : x, ldx, ys[i], y0, ldy[i]);
        }
        if (k == K_ADDNORM) { /* y * g exactly; the partials add up to sum(y^2) */
                float *parts = NULL;
                unsigned cnt = 0;
                int bad = 0;

                if (cudaMemcpy(xg, dxg, sizeof(float) * ldg * batch, cudaMemcpyDeviceToHost) !=
                            cudaSuccess ||
                    cudaMemcpy(&cnt, dcount, sizeof(cnt), cudaMemcpyDeviceToHost) != cudaSuccess) {
                        fail("partials download");
                        goto out;
                }
                if (cnt < 1 || cnt > m->n_out || !(parts = malloc(sizeof(float) * 8 * cnt)) ||
                    cudaMemcpy(parts, dpart, sizeof(float) * 8 * cnt, cudaMemcpyDeviceToHost) !=
                            cudaSuccess) {
                        fail("rms-out %s %ux%u batch %u: %u partials", m40_ggml_type_name(m->type),
                             m->n_out, m->n_in, batch, cnt);
                        free(parts);
                        goto out;
                }
                for (uint32_t c = 0; c < batch && bad < 3; c++)
                        for (uint32_t o = 0; o < m->n_out && bad < 3; o++)
                                if (xg[c * ldg + o] != ys[0][c * ldy[0] + o] * g[o]) {
                                        fail("rms-out %s %ux%u batch %u: xg[%u][%u] = %.9g, not "
                                             "y * g = %.9g",
                                             m40_ggml_type_name(m->type), m->n_out, m->n_in, batch,
                                             c, o, xg[c * ldg + o], ys[0][c * ldy[0] + o] * g[o]);
                                        bad++;
                                }
                for (uint32_t c = 0; c < batch; c++) {
                        double ss = 0.0, sp = 0.0, e;

                        for (uint32_t o = 0; o < m->n_out; o++)
                                ss += (double)ys[0][c * ldy[0] + o] * ys[0][c * ldy[0] + o];
                        for (unsigned b = 0; b < cnt; b++)
                                sp += parts[b * 8 + c];
                        e = fabs(sp - ss) / ss;
                        if (!(e <= 1e-6))
                                fail("rms-out %s %ux%u batch %u column %u: partials add up to "
                                     "%.9g, sum of squares %.9g (relative error %.2e, bound 1e-6)",
                                     m40_ggml_type_name(m->type), m->n_out, m->n_in, batch, c, sp,
                                     ss, e);
                        if (e > worst_scale)
                                worst_scale = e;
                }
                free(parts);
        }
out:
        cudaFree(dg);
        cudaFree(dxg);
        free(xg);
        cudaFree(dcount);
        cudaFree(dpart);
        free(g);
        free(xn);
        for (uint32_t i = 0; i < n; i++) {
                cudaFree(dys[i]);
                free(ys[i]);
        }
        cudaFree(dx);
        free(x);
        free(y0);
}

static void run_case(const struct mat *m, int ti, int k, uint32_t batch)
{
        run_case_n(m, 1, ti, k, batch);
}

/* Several matrices in one call (a layer's q, k, v; gate and up): row counts that are
 * not multiples of the warps' row groups, so the groups of one matrix end inside a
 * block whose other warps work on the next; batches through both kernels. */
static void run_multi(int ti, int quick)
{
        static const uint32_t rows[] = {101, 33, 67};
        static const uint32_t batches[] = {1, 2, 5, 8, 9, 40};
        const uint32_t bs = m40_ggml_type_info(types[ti].type)->block_size;
        const uint32_t n_in = bs == 256 ? 512 : bs == 32 ? 576 : 1003;
        struct mat ms[3];
        uint32_t made = 0;

        for (; made < 3; made++)
                if (mat_make(&ms[made], types[ti].type, n_in, rows[made]) < 0)
                        goto out;
        for (size_t i = 0; i < sizeof(batches) / sizeof(batches[0]); i++)
                if (!quick || i % 2 == 0) {
                        run_case_n(ms, 3, ti, K_MULTI, batches[i]);
                        run_case_n(ms, 2, ti, K_MULTI, batches[i]);
                        if (batches[i] <= M40_CUDA_MATVEC_MAX_BATCH)
                                run_case_n(ms, i % 2 ? 2 : 3, ti, K_NORM, batches[i]);
                }
out:
        while (made > 0)
                mat_free(&ms[--made]);
}

/* The fused gate/up + SwiGLU (K_SWIGLU): gate and up of 101 rows (not a multiple of a
 * warp's row pairs) through every batch width, and, unless quick, 9001 rows, enough row
 * groups that no warp splits a row (the other path of the kernel's epilogue). */
static void run_swiglu(int ti, int quick)
{
        static const uint32_t batches[] = {1, 2, 3, 5, 8};
        const uint32_t bs = m40_ggml_type_info(types[ti].type)->block_size;
        /* rows long enough that warps split them (2 steps of 32 pieces at least) */
        const uint32_t n_in = bs == 256 ? 2048 : bs == 32 ? 576 : 1003;
        struct mat ms[2];
        uint32_t made = 0;

        for (; made < 2; made++)
                if (mat_make(&ms[made], types[ti].type, n_in, 101) < 0)
                        goto out;
        for (size_t i = 0; i < sizeof(batches) / sizeof(batches[0]); i++)
                if (!quick || i % 2 == 0)
                        run_case_n(ms, 2, ti, K_SWIGLU, batches[i]);
        while (made > 0)
                mat_free(&ms[--made]);
        if (quick)
                return;
        for (; made < 2; made++)
                if (mat_make(&ms[made], types[ti].type, bs == 256 ? 256 : 64, 9001) < 0)
                        goto out;
        run_case_n(ms, 2, ti, K_SWIGLU, 1);
        run_case_n(ms, 2, ti, K_SWIGLU, 2);
out:
        while (made > 0)
                mat_free(&ms[--made]);
}

static const uint32_t b_matvec[] = {1, 2, 3, 4, 5, 8};
static const uint32_t b_tiled[] = {1, 9, 16, 17, 33, 64};
static const uint32_t b_auto[] = {1, 40};

/* Many short rows: enough 64-row tiles that the tiled kernel takes its large tile on a
 * big GPU (the small matrices above get 16-row tiles); fewer batches, the reference is
 * the cost. */
static void run_tall(int ti)
{
        static const uint32_t b_tall[] = {1, 17, 64};
        const uint32_t n_in = m40_ggml_type_info(types[ti].type)->block_size == 256 ? 256 : 64;
        struct mat m;

        if (mat_make(&m, types[ti].type, n_in, 16901) < 0)
                return;
        run_case(&m, ti, K_MATVEC, 3);
        for (size_t i = 0; i < sizeof(b_tall) / sizeof(b_tall[0]); i++)
                run_case(&m, ti, K_TILED, b_tall[i]);
        mat_free(&m);
}

/* Long rows (odd block counts) over thousands of rows, the shape of the large decode
 * matrices: each lane walks many pieces of a row, warps split rows at most in two. */
static void run_wide(int ti)
{
        const uint32_t bs = m40_ggml_type_info(types[ti].type)->block_size;
        struct mat m;

        if (bs == 1 || mat_make(&m, types[ti].type, bs == 32 ? 32 * 233 : 256 * 29, 9001) < 0)
                return;
        run_case(&m, ti, K_MATVEC, 1);
        run_case(&m, ti, K_MATVEC, 2);
        run_case(&m, ti, K_MATVEC, 5);
        run_case(&m, ti, K_MATVEC, 8);
        run_case(&m, ti, K_NORM, 1);
        run_case(&m, ti, K_ADDNORM, 2);
        mat_free(&m);
}

static void run_matrix(int ti, uint32_t n_in, uint32_t n_out, int quick)
{
        struct mat m;

        if (mat_make(&m, types[ti].type, n_in, n_out) < 0)
                return;
        for (size_t i = 0; i < sizeof(b_matvec) / sizeof(b_matvec[0]); i++)
                if (!quick || i % 2 == 0)
                        run_case(&m, ti, K_MATVEC, b_matvec[i]);
        for (size_t i = 0; i < sizeof(b_tiled) / sizeof(b_tiled[0]); i++)
                if (!quick || i % 2 == 1)
                        run_case(&m, ti, K_TILED, b_tiled[i]);
        for (size_t i = 0; i < sizeof(b_auto) / sizeof(b_auto[0]); i++)
                run_case(&m, ti, K_AUTO, b_auto[i]);
        run_case(&m, ti, K_ADD, 1);
        run_case(&m, ti, K_NORM, 1);
        run_case(&m, ti, K_ADDNORM, 1);
        if (!quick) {
                run_case(&m, ti, K_ADD, 5);
                run_case(&m, ti, K_NORM, 3);
                run_case(&m, ti, K_ADDNORM, 8);
        }
        mat_free(&m);
}

/* Shapes per type: a long row, a middle one, a short one; row counts that are not a
 * multiple of 4 (warp row groups) or 64 (tiles). The float types add row lengths that
 * are not a multiple of 8 or 4 (unaligned rows, partial last piece). */
static void run_type(int ti, int quick)
{
        const struct m40_ggml_type_info *in = m40_ggml_type_info(types[ti].type);
        const uint32_t bs = in->block_size;

        if (quick >= 2) {
                run_matrix(ti, bs == 1 ? 1003 : bs == 32 ? 576 : 768, 67, quick);
        } else if (bs == 1) {
                run_matrix(ti, 4096, quick ? 67 : 131, quick);
                run_matrix(ti, 1003, quick ? 37 : 1003, quick);
                run_matrix(ti, 1000, 66, quick);
                run_matrix(ti, 7, 5, quick);
        } else if (bs == 32) {
                run_matrix(ti, 4096, quick ? 67 : 131, quick);
                run_matrix(ti, 576, quick ? 37 : 1003, quick);
                run_matrix(ti, 96, 66, quick);
                run_matrix(ti, 32, 5, quick);
        } else {
                run_matrix(ti, 4096, quick ? 67 : 131, quick);
                run_matrix(ti, 768, quick ? 37 : 1003, quick);
                run_matrix(ti, 256, 5, quick);
        }
}

static void check_arguments(void)
{
        struct mat m;
        float *dx, *dy;
        struct m40_cuda_matrix w;

        if (args_make(&m, &dx, &dy) < 0)
                return;
        w = mat_view(&m);
        CHECK(m40_cuda_matmul(&w, dx, 64, dy, 8, 1, NULL) == 0, "valid call refused");
        CHECK(m40_cuda_matmul(&w, dx, 64, dy, 8, 0, NULL) == -EINVAL, "batch 0 accepted");
        CHECK(m40_cuda_matmul(&w, dx, 64, dy, 8, 65, NULL) == -EINVAL, "batch 65 accepted");
        CHECK(m40_cuda_matvec(&w, dx, 64, dy, 8, 9, NULL) == -EINVAL, "matvec batch 9 accepted");
        CHECK(m40_cuda_matmul(&w, dx, 62, dy, 8, 1, NULL) == -EINVAL, "ldx < n_in accepted");
        CHECK(m40_cuda_matmul(&w, dx, 66, dy, 8, 1, NULL) == -EINVAL, "ldx %% 4 != 0 accepted");
        CHECK(m40_cuda_matmul(&w, dx + 1, 64, dy + 64, 8, 1, NULL) == -EINVAL,
              "misaligned x accepted");
        CHECK(m40_cuda_matmul(&w, dx, 64, dy, 7, 1, NULL) == -EINVAL, "ldy < n_out accepted");
        CHECK(m40_cuda_matmul(&w, dx, 64, dx + 8, 8, 1, NULL) == -EINVAL, "overlap accepted");
        w.n_in = 48;
        CHECK(m40_cuda_matmul(&w, dx, 64, dy, 8, 1, NULL) == -EINVAL,
              "n_in not a multiple of 32 accepted for Q4_0");
        w.n_in = 64;
        w.row_bytes = 35;
        CHECK(m40_cuda_matmul(&w, dx, 64, dy, 8, 1, NULL) == -EINVAL, "short row accepted");
        w.row_bytes = m.row_bytes;
        w.type = M40_GGML_Q2_K;
        CHECK(m40_cuda_matmul(&w, dx, 256, dy, 8, 1, NULL) == M40_EUNSUPPORTED,
              "Q2_K not refused as unsupported");
        CHECK(!m40_cuda_matmul_supports(M40_GGML_Q2_K) && m40_cuda_matmul_supports(M40_GGML_Q6_K),
              "m40_cuda_matmul_supports");
        w.type = M40_GGML_Q4_0;
        {
                struct m40_cuda_matrix ws[4] = {w, w, w, w};
                float *ys[4] = {dy, dy + 16, dy + 32, dy + 48};
                const size_t lds[4] = {8, 8, 8, 8};

                CHECK(m40_cuda_matmul_n(ws, 3, dx, 64, ys, lds, 2, NULL) == 0,
                      "valid matmul_n refused");
                CHECK(m40_cuda_matmul_n(ws, 0, dx, 64, ys, lds, 1, NULL) == -EINVAL,
                      "matmul_n of 0 matrices accepted");
                CHECK(m40_cuda_matmul_n(ws, 4, dx, 64, ys, lds, 1, NULL) == -EINVAL,
                      "matmul_n of 4 matrices accepted");
                ys[1] = dy + 8;
                CHECK(m40_cuda_matmul_n(ws, 2, dx, 64, ys, lds, 2, NULL) == -EINVAL,
                      "matmul_n with overlapping outputs accepted");
                ys[1] = dy + 16;
                ws[1].type = M40_GGML_Q4_1;
                ws[1].row_bytes = 40;
                CHECK(m40_cuda_matmul_n(ws, 2, dx, 64, ys, lds, 1, NULL) == -EINVAL,
                      "matmul_n of two types accepted");
                ws[1] = w;
                ws[2].n_in = 32;
                CHECK(m40_cuda_matmul_n(ws, 3, dx, 64, ys, lds, 1, NULL) == -EINVAL,
                      "matmul_n of two row lengths accepted");
        }
        w.data = (const uint8_t *)m.dev + 2;
        CHECK(m40_cuda_matmul(&w, dx, 64, dy, 8, 1, NULL) == -EINVAL, "misaligned W accepted");
        CHECK(cudaDeviceSynchronize() == cudaSuccess, "the valid call failed on the device");
        args_free(&m, dx, dy);
}

int main(void)
{
        int code, quick = quick_mode();
        struct m40_cuda_device *d = gpu_open_seeded(quick, &code);

        if (!d)
                return code;
        check_arguments();
        for (int ti = 0; ti < MAX_TYPES; ti++) {
                const uint32_t t = types[ti].type;

                /* racecheck: one type of each family; the shared-memory code is the same */
                if (quick >= 2 && t != M40_GGML_F16 && t != M40_GGML_Q4_0 && t != M40_GGML_Q6_K)
                        continue;
                run_type(ti, quick);
                run_multi(ti, quick);
                run_swiglu(ti, quick);
                if (quick < 2)
                        run_tall(ti);
                if (!quick)
                        run_wide(ti);
        }

        printf("%-5s %-6s", "type", "bound");
        for (int k = 0; k < K_COUNT; k++)
                printf(" %9s", kname[k]);
        printf(" %8s\n", "outputs");
        for (int ti = 0; ti < MAX_TYPES; ti++) {
                uint64_t n = 0;

                printf("%-5s %-6.0e", m40_ggml_type_name(types[ti].type), types[ti].bound);
                for (int k = 0; k < K_COUNT; k++) {
                        printf(" %9.2e", worst[ti][k]);
                        n += checked[ti][k];
                }
                printf(" %8" PRIu64 "\n", n);
        }
        printf("(max |y - ref| / sum|w x| per type and kernel; rms-in: x normalized in double is "
               "the reference input)\nrms-out partials: max relative error of their sum %.2e "
               "(bound 1e-6)\n",
               worst_scale);
        m40_cuda_device_free(d);
        return finish();
}

#endif
