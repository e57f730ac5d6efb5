/* tests/gpu/test_gemm.c - the prefill GEMM (cuda/kernels/gemm.h) against the CPU reference.
 *
 * Owns the checks that, for every weight type (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1
 * Q4_K Q5_K Q6_K):
 *  - m40_cuda_dequant_rows() writes exactly the CPU engine's dequantized weights, bit for
 *    bit, for whole matrices and for row and k sub-ranges (odd starts, odd lengths, the
 *    16-byte store path and the scalar one), and nothing outside the tile (poisoned);
 *  - m40_cuda_gemm() gives y = x W^T within the bound below for ragged shapes: rows not a
 *    multiple of a tile, row lengths of several block counts (and for the float types not
 *    a multiple of 8), n_tok 1, 65, 200, 512, and every tiling of gemm.cu: the matrix
 *    whole, k ranges summed in y (scratch smaller than the matrix), row tiles by k ranges
 *    (scratch smaller than one k step of all rows), row tiles of whole rows (more rows
 *    than M40_CUDA_GEMM_MIN_ROWS); on the legacy default stream and on a created one;
 *    y poisoned with NaN first, its guard columns and guard row stay poisoned;
 *  - a run of calls (m40_cuda_gemm_begin() .. m40_cuda_gemm_end()) of three matrices of
 *    several tiles each, the tiles' dequantization overlapping the SGEMMs when the
 *    handle has two tile buffers: every output within the bound, and the same run
 *    captured into a CUDA graph (the dequantization stream must join the captured one)
 *    and replayed gives the same bits;
 *  - the argument checks, and -ENOSPC for a scratch that holds no tile.
 * Then, not a check, it prints the rate of m40_cuda_gemm() on 8B-shaped matrices at
 * n_tok 512 beside that of plain cuBLAS SGEMM on the same shape (an F32 matrix, which
 * m40_cuda_gemm() hands to cublasSgemm as it is): issue 6's "prefill >= 60% of the
 * cuBLAS SGEMM rate".
 *
 * Reference: the weights quantized by ggml's reference quantizers (tests/tools/
 * quantize.h), decoded by the CPU engine's m40_cpu_dequant(), the dot products in double
 * precision. Error measure: |y - ref| / sum_k |w_k x_k| (what FP32 summation bounds).
 * Bound: 1e-5 for every type: the dequantized weights are exact, so only cuBLAS's FP32
 * sums differ (a few 1e-7 expected; TF32 would show as ~1e-3). Fresh random inputs on
 * every run (seed printed; M40_TEST_SEED repeats one).
 *
 * Exit 0 pass, 1 fail, 77 skip (no GPU, or a build without CUDA). M40_TEST_QUICK=1
 * (compute-sanitizer): fewer and smaller cases, no timing. */
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

#include "cuda/kernels/gemm.h"
#include "gputest.h"
#include "model/ggml_type.h"
#include "quantize.h"
#include "testmat.h"

#define N_TYPES TEST_TYPES
#define BOUND   1e-5

/* Scratch sizes (floats) that force each tiling on the test shapes (see main()). */
enum { S_WHOLE, S_KSPLIT, S_TILES, S_ROWS, S_COUNT };
static const char *const sname[S_COUNT] = {"whole", "k-split", "tiles", "row-tiles"};

static double worst[N_TYPES][S_COUNT];
static uint64_t checked[N_TYPES][S_COUNT], deq_checked[N_TYPES];

/* Device buffers shared by all cases: the tile scratch and cuBLAS's workspace. */
static float *d_scratch;
static uint64_t scratch_bytes;
static void *d_ws;
static uint64_t ws_bytes;
static cudaStream_t stream;

/* Handles by scratch size, made once (cuBLAS handles are slow to make under
 * compute-sanitizer), each used on both streams in turn. */
static struct {
        uint64_t cap;
        struct m40_cuda_gemm *g;
} handles[16];

static struct m40_cuda_gemm *handle(uint64_t cap)
{
        char err[256] = "";
        size_t i;
        int r;

        for (i = 0; i < sizeof(handles) / sizeof(handles[0]) && handles[i].g; i++)
                if (handles[i].cap == cap)
                        return handles[i].g;
        if (i == sizeof(handles) / sizeof(handles[0])) {
                fail("too many scratch sizes");
                return NULL;
        }
        r = m40_cuda_gemm_new(d_scratch, cap * sizeof(float), d_ws, ws_bytes, &handles[i].g, err,
                              sizeof(err));
        if (r < 0) {
                fail("m40_cuda_gemm_new: %d (%s) %s", r, m40_strerror(r), err);
                return NULL;
        }
        handles[i].cap = cap;
        return handles[i].g;
}

static void handles_free(void)
{
        for (size_t i = 0; i < sizeof(handles) / sizeof(handles[0]); i++)
                handles[i].g = m40_cuda_gemm_free(handles[i].g);
}

static size_t ld4(size_t n)
{
        return (n + 3) & ~(size_t)3;
}

/* m40_cuda_dequant_rows() of rows [r0, r0 + n) and k [k0, k0 + nk) into a tile of ldo
 * floats per row (plus a guard row), starting `shift` floats into a poisoned buffer;
 * every element compared bit for bit, every other one still poisoned. */
static void dequant_case(const struct mat *m, int ti, uint32_t r0, uint32_t n, uint32_t k0,
                         uint32_t nk, size_t ldo, size_t shift)
{
        const struct m40_cuda_matrix w = mat_view(m);
        const size_t total = shift + ldo * (n + 1);
        float *h = malloc(sizeof(float) * total), *d = NULL;
        int r, bad = 0;

        if (!h || cudaMalloc((void **)&d, sizeof(float) * total) != cudaSuccess ||
            cudaMemset(d, 0xff, sizeof(float) * total) != cudaSuccess) {
                fail("dequant: buffers");
                goto out;
        }
        r = m40_cuda_dequant_rows(&w, r0, n, k0, nk, d + shift, ldo, NULL);
        if (r < 0) {
                fail("dequant %s rows %u+%u k %u+%u: %d (%s) %s", m40_ggml_type_name(m->type), r0,
                     n, k0, nk, r, m40_strerror(r), m40_cuda_last_error());
                goto out;
        }
        if (cudaMemcpy(h, d, sizeof(float) * total, cudaMemcpyDeviceToHost) != cudaSuccess) {
                fail("dequant %s: kernel failed: %s", m40_ggml_type_name(m->type),
                     cudaGetErrorString(cudaGetLastError()));
                goto out;
        }
        for (size_t i = 0; i < total && bad < 3; i++) {
                const size_t row = i < shift ? n : (i - shift) / ldo;
                const size_t col = i < shift ? 0 : (i - shift) % ldo;

                if (row < n && col < nk) {
                        const float want = m->deq[(size_t)(r0 + row) * m->n_in + k0 + col];

                        if (bits(h[i]) != bits(want)) {
                                fail("dequant %s %ux%u rows %u+%u k %u+%u ldo %zu: [%zu][%zu] = "
                                     "%.9g (0x%08x), CPU %.9g (0x%08x)",
                                     m40_ggml_type_name(m->type), m->n_out, m->n_in, r0, n, k0, nk,
                                     ldo, row, col, h[i], bits(h[i]), want, bits(want));
                                bad++;
                        }
                        deq_checked[ti]++;
                } else if (!is_poison(h[i])) {
                        fail("dequant %s %ux%u rows %u+%u k %u+%u ldo %zu: wrote outside the "
                             "tile at float %zu",
                             m40_ggml_type_name(m->type), m->n_out, m->n_in, r0, n, k0, nk, ldo, i);
                        bad++;
                }
        }
out:
        cudaFree(d);
        free(h);
}

static void check_dequant(const struct mat *m, int ti)
{
        const uint32_t n_in = m->n_in, n_out = m->n_out;
        const uint32_t r0 = n_out > 3 ? 3 : 0, n = n_out - r0 - (n_out > 5 ? 2 : 0);
        const uint32_t k0 = n_in >= 16 ? 8 : 0, nk = n_in - k0 - (n_in - k0 > 3 ? 3 : 0);
        const uint32_t k1 = (n_in / 2) & ~7u;

        dequant_case(m, ti, 0, n_out, 0, n_in, ld4(n_in), 0); /* whole, 16-byte stores */
        dequant_case(m, ti, r0, n, k0, nk, nk + 5, 1);        /* odd everything: scalar */
        dequant_case(m, ti, n_out - 1, 1, k1, n_in - k1, ld4(n_in - k1) + 4, 4); /* a k tail */
}

/* y = x W^T for n_tok columns with a handle whose scratch is `cap` floats, on the
 * legacy default stream or on `stream`; every output and guard checked. */
static void gemm_case(const struct mat *m, int ti, int sc, uint64_t cap, uint32_t n_tok,
                      bool on_stream)
{
        const size_t ldx = (size_t)m->n_in + 1 + 2 * (n_tok & 1);
        const size_t ldy = (size_t)m->n_out + 3; /* 3 guard columns per row */
        const size_t ny = ldy * (n_tok + 1);     /* and a guard row */
        const struct m40_cuda_matrix w = mat_view(m);
        cudaStream_t s = on_stream ? stream : NULL;
        struct m40_cuda_gemm *g = handle(cap);
        float *x = malloc(sizeof(float) * ldx * n_tok), *y = malloc(sizeof(float) * ny);
        float *dx = NULL, *dy = NULL;
        char what[32];
        const struct ycheck yc = {.what = what,
                                  .n_name = "n_tok",
                                  .col = "token",
                                  .row = "column",
                                  .bound = BOUND,
                                  .checked = &checked[ti][sc],
                                  .worst = &worst[ti][sc]};
        int r;

        snprintf(what, sizeof(what), "gemm %s", sname[sc]);
        if (!g)
                goto out;
        if (!x || !y) {
                fail("out of host memory");
                goto out;
        }
        for (size_t i = 0; i < ldx * n_tok; i++)
                x[i] = rng_normal(&seed);
        if (cudaMalloc((void **)&dx, sizeof(float) * ldx * n_tok) != cudaSuccess ||
            cudaMalloc((void **)&dy, sizeof(float) * ny) != cudaSuccess ||
            cudaMemcpy(dx, x, sizeof(float) * ldx * n_tok, cudaMemcpyHostToDevice) != cudaSuccess ||
            cudaMemset(dy, 0xff, sizeof(float) * ny) != cudaSuccess ||
            cudaDeviceSynchronize() != cudaSuccess) { /* the memset is on the legacy stream */
                fail("device buffers: %s", cudaGetErrorString(cudaGetLastError()));
                goto out;
        }
        r = m40_cuda_gemm(g, &w, dx, ldx, dy, ldy, n_tok, s);
        if (r < 0) {
                fail("gemm %s %s %ux%u n_tok %u: %d (%s) %s", sname[sc],
                     m40_ggml_type_name(m->type), m->n_out, m->n_in, n_tok, r, m40_strerror(r),
                     m40_cuda_gemm_last_error());
                goto out;
        }
        if (cudaStreamSynchronize(s) != cudaSuccess ||
            cudaMemcpy(y, dy, sizeof(float) * ny, cudaMemcpyDeviceToHost) != cudaSuccess) {
                fail("gemm %s %s: failed on the device: %s", sname[sc], m40_ggml_type_name(m->type),
                     cudaGetErrorString(cudaGetLastError()));
                goto out;
        }
        mat_check_y(m, &yc, n_tok, x, ldx, y, NULL, ldy);
out:
        cudaFree(dx);
        cudaFree(dy);
        free(x);
        free(y);
}

/* Shapes for type ti (scratch sizes per tile buffer, times m40_cuda_gemm_buffers()).
 * n_in: a middle row length (37 or 5 blocks, so a k range of
 * M40_CUDA_GEMM_KSTEP multiples ends short; the float types': not a multiple of 8), a
 * long one, a single block; n_out: not multiples of a tile. The scratch sizes make
 * gemm.cu take each tiling: S_KSPLIT holds fewer than all rows of the matrix but a k
 * step of each (k ranges summed in y); S_TILES not even that (tiles of fewer rows and
 * one k step); S_ROWS more than M40_CUDA_GEMM_MIN_ROWS whole rows but not all. */
static void run_type(int ti, int quick)
{
        const uint32_t type = test_types[ti], bs = m40_ggml_type_info(type)->block_size;
        const uint32_t mid = bs == 1 ? 1003 : bs == 32 ? 1184 : 1280, n_mid = quick ? 37 : 131;
        const uint64_t whole = scratch_bytes / sizeof(float), nb = m40_cuda_gemm_buffers();
        struct mat m;

        if (mat_make(&m, type, mid, n_mid) == 0) {
                static const uint32_t toks[] = {1, 65, 200, 512};

                check_dequant(&m, ti);
                for (size_t i = 0; i < sizeof(toks) / sizeof(toks[0]); i++)
                        if (!quick || toks[i] <= 65)
                                gemm_case(&m, ti, S_WHOLE, whole, toks[i], i & 1);
                gemm_case(&m, ti, S_KSPLIT, nb * n_mid * 600, quick ? 65 : 200, false);
                gemm_case(&m, ti, S_TILES, nb * 40 * 256, 65, true);
                if (!quick)
                        gemm_case(&m, ti, S_TILES, nb * 40 * 256, 512, false);
                mat_free(&m);
        }
        if (!quick && mat_make(&m, type, 4096, 67) == 0) {
                check_dequant(&m, ti);
                gemm_case(&m, ti, S_WHOLE, whole, 512, true);
                gemm_case(&m, ti, S_KSPLIT, nb * 67 * 1200, 65, false);
                mat_free(&m);
        }
        if (mat_make(&m, type, bs == 1 ? 7 : bs, 5) == 0) {
                check_dequant(&m, ti);
                gemm_case(&m, ti, S_WHOLE, whole, 1, false);
                gemm_case(&m, ti, S_WHOLE, whole, 65, true);
                if (!quick)
                        gemm_case(&m, ti, S_WHOLE, whole, 512, false);
                mat_free(&m);
        }
        if (!quick && mat_make(&m, type, bs == 256 ? 256 : 64, M40_CUDA_GEMM_MIN_ROWS + 37) == 0) {
                gemm_case(&m, ti, S_ROWS, nb * (M40_CUDA_GEMM_MIN_ROWS + 4) * m.n_in, 65, true);
                mat_free(&m);
        }
}

/* A run of three matrices of type ti (131, 67 and 200 rows of 1184 or 1280), several
 * tiles each (2 x 40 k steps of scratch a buffer), n_tok 65, on `stream`: checked
 * against the reference, then the same run captured into a graph and replayed must
 * give the same bits. */
static void run_case(int ti)
{
        const uint32_t type = test_types[ti], bs = m40_ggml_type_info(type)->block_size;
        const uint32_t n_in = bs == 32 ? 1184 : 1280, rows[3] = {131, 67, 200}, n_tok = 65;
        const size_t ldx = n_in + 4, ldy = 204; /* every matrix's rows and 4 guard columns */
        const size_t ny = ldy * (n_tok + 1);    /* and a guard row */
        struct m40_cuda_gemm *g = handle(m40_cuda_gemm_buffers() * 2 * 40 * 256);
        struct mat m[3] = {0};
        float *x = malloc(sizeof(float) * ldx * n_tok), *y = malloc(sizeof(float) * ny);
        float *y2 = malloc(sizeof(float) * ny);
        float *dx = NULL, *dy[2][3] = {{NULL}};
        cudaGraph_t graph = NULL;
        cudaGraphExec_t exec = NULL;
        const struct ycheck yc = {.what = "gemm run",
                                  .n_name = "n_tok",
                                  .col = "token",
                                  .row = "column",
                                  .bound = BOUND,
                                  .checked = &checked[ti][S_TILES],
                                  .worst = &worst[ti][S_TILES]};
        int r = 0, made = 0;

        if (!g || !x || !y || !y2) {
                fail("gemm run: out of memory");
                goto out;
        }
        for (size_t i = 0; i < ldx * n_tok; i++)
                x[i] = rng_normal(&seed);
        for (; made < 3; made++)
                if (mat_make(&m[made], type, n_in, rows[made]))
                        goto out;
        if (cudaMalloc((void **)&dx, sizeof(float) * ldx * n_tok) != cudaSuccess ||
            cudaMemcpy(dx, x, sizeof(float) * ldx * n_tok, cudaMemcpyHostToDevice) != cudaSuccess)
                goto dev;
        for (int c = 0; c < 2; c++)
                for (int j = 0; j < 3; j++)
                        if (cudaMalloc((void **)&dy[c][j], sizeof(float) * ny) != cudaSuccess ||
                            cudaMemset(dy[c][j], 0xff, sizeof(float) * ny) != cudaSuccess)
                                goto dev;
        if (cudaDeviceSynchronize() != cudaSuccess)
                goto dev;
        for (int c = 0; c < 2 && !r; c++) { /* c 0: run directly, 1: captured */
                if (c &&
                    cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
                        goto dev;
                m40_cuda_gemm_begin(g, stream);
                for (int j = 0; j < 3 && !r; j++) {
                        const struct m40_cuda_matrix w = mat_view(&m[j]);

                        r = m40_cuda_gemm(g, &w, dx, ldx, dy[c][j], ldy, n_tok, stream);
                }
                m40_cuda_gemm_end(g);
                if (c && (cudaStreamEndCapture(stream, &graph) != cudaSuccess ||
                          cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess ||
                          cudaGraphLaunch(exec, stream) != cudaSuccess))
                        goto dev;
                if (cudaStreamSynchronize(stream) != cudaSuccess)
                        goto dev;
        }
        if (r) {
                fail("gemm run %s: %d (%s) %s", m40_ggml_type_name(type), r, m40_strerror(r),
                     m40_cuda_gemm_last_error());
                goto out;
        }
        for (int j = 0; j < 3; j++) {
                if (cudaMemcpy(y, dy[0][j], sizeof(float) * ny, cudaMemcpyDeviceToHost) !=
                            cudaSuccess ||
                    cudaMemcpy(y2, dy[1][j], sizeof(float) * ny, cudaMemcpyDeviceToHost) !=
                            cudaSuccess)
                        goto dev;
                mat_check_y(&m[j], &yc, n_tok, x, ldx, y, NULL, ldy);
                if (memcmp(y, y2, sizeof(float) * ny))
                        fail("gemm run %s: matrix %d captured and replayed differs from the "
                             "direct run",
                             m40_ggml_type_name(type), j);
        }
        goto out;
dev:
        fail("gemm run %s: device: %s", m40_ggml_type_name(type),
             cudaGetErrorString(cudaGetLastError()));
out:
        if (exec)
                cudaGraphExecDestroy(exec);
        if (graph)
                cudaGraphDestroy(graph);
        for (int c = 0; c < 2; c++)
                for (int j = 0; j < 3; j++)
                        cudaFree(dy[c][j]);
        cudaFree(dx);
        for (int j = 0; j < made; j++)
                mat_free(&m[j]);
        free(x);
        free(y);
        free(y2);
}

static void check_arguments(void)
{
        struct mat m;
        float *dx = NULL, *dy = NULL;
        struct m40_cuda_matrix w;
        struct m40_cuda_gemm *g = NULL, *tiny = NULL;
        char err[256];

        if (mat_make(&m, M40_GGML_Q4_0, 256, 8) < 0)
                return;
        if (cudaMalloc((void **)&dx, 8192) != cudaSuccess ||
            cudaMalloc((void **)&dy, 8192) != cudaSuccess ||
            cudaMemset(dx, 0, 8192) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
                fail("cudaMalloc");
                goto out;
        }
        CHECK(m40_cuda_gemm_new(d_scratch, scratch_bytes, (char *)d_ws + 16, 1024, &g, err,
                                sizeof(err)) == -EINVAL,
              "a workspace not 256-byte aligned accepted");
        CHECK(m40_cuda_gemm_new(NULL, 64, d_ws, ws_bytes, &g, err, sizeof(err)) == -EINVAL,
              "a NULL scratch of 64 bytes accepted");
        CHECK(m40_cuda_gemm_new(d_scratch, scratch_bytes, d_ws, 4096, &g, err, sizeof(err)) ==
                      -EINVAL,
              "a workspace under M40_CUDA_GEMM_WORKSPACE_MIN accepted");
        if (m40_cuda_gemm_new(d_scratch, scratch_bytes, d_ws, ws_bytes, &g, err, sizeof(err)) ||
            m40_cuda_gemm_new(d_scratch, 100 * sizeof(float), d_ws, ws_bytes, &tiny, err,
                              sizeof(err))) {
                fail("m40_cuda_gemm_new: %s", err);
                goto out;
        }
        w = mat_view(&m);
        CHECK(m40_cuda_gemm(g, &w, dx, 256, dy, 8, 1, NULL) == 0, "valid call refused");
        CHECK(m40_cuda_gemm(g, &w, dx, 256, dy, 8, 1, stream) == 0, "call on a stream refused");
        CHECK(m40_cuda_gemm(g, &w, dx, 256, dy, 8, 1, NULL) == 0, "call back on NULL refused");
        CHECK(m40_cuda_gemm(g, &w, dx, 256, dy, 8, 0, NULL) == -EINVAL, "n_tok 0 accepted");
        CHECK(m40_cuda_gemm(g, &w, dx, 255, dy, 8, 1, NULL) == -EINVAL, "ldx < n_in accepted");
        CHECK(m40_cuda_gemm(g, &w, dx, 256, dy, 7, 1, NULL) == -EINVAL, "ldy < n_out accepted");
        CHECK(m40_cuda_gemm(g, &w, dx, 256, dx + 200, 8, 2, NULL) == -EINVAL, "overlap accepted");
        CHECK(m40_cuda_gemm(g, &w, d_scratch, 256, dy, 8, 1, NULL) == -EINVAL,
              "x in the scratch accepted");
        CHECK(m40_cuda_gemm(NULL, &w, dx, 256, dy, 8, 1, NULL) == -EINVAL, "NULL handle accepted");
        CHECK(m40_cuda_gemm(tiny, &w, dx, 256, dy, 8, 1, NULL) == -ENOSPC,
              "a scratch of 100 floats not refused with -ENOSPC");
        CHECK(m40_cuda_dequant_rows(&w, 0, 8, 4, 8, d_scratch, 8, NULL) == -EINVAL,
              "dequant: k0 not a multiple of 8 accepted");
        CHECK(m40_cuda_dequant_rows(&w, 4, 5, 0, 8, d_scratch, 8, NULL) == -EINVAL,
              "dequant: rows past n_out accepted");
        CHECK(m40_cuda_dequant_rows(&w, 0, 8, 248, 16, d_scratch, 16, NULL) == -EINVAL,
              "dequant: k past n_in accepted");
        CHECK(m40_cuda_dequant_rows(&w, 0, 8, 0, 16, d_scratch, 15, NULL) == -EINVAL,
              "dequant: ldo < n_k accepted");
        CHECK(m40_cuda_dequant_rows(&w, 0, 0, 0, 16, NULL, 16, NULL) == -EINVAL,
              "dequant: NULL out accepted");
        w.n_in = 48;
        CHECK(m40_cuda_gemm(g, &w, dx, 256, dy, 8, 1, NULL) == -EINVAL,
              "n_in not a multiple of 32 accepted for Q4_0");
        w.n_in = 256;
        w.row_bytes = 143;
        CHECK(m40_cuda_gemm(g, &w, dx, 256, dy, 8, 1, NULL) == -EINVAL, "short row accepted");
        w.row_bytes = m.row_bytes;
        w.data = (const uint8_t *)m.dev + 2;
        CHECK(m40_cuda_gemm(g, &w, dx, 256, dy, 8, 1, NULL) == -EINVAL, "misaligned W accepted");
        w.data = m.dev;
        w.type = M40_GGML_Q2_K;
        CHECK(m40_cuda_gemm(g, &w, dx, 256, dy, 8, 1, NULL) == M40_EUNSUPPORTED,
              "Q2_K not refused as unsupported");
        CHECK(m40_cuda_dequant_rows(&w, 0, 1, 0, 8, d_scratch, 8, NULL) == M40_EUNSUPPORTED,
              "dequant: Q2_K not refused as unsupported");
        CHECK(cudaDeviceSynchronize() == cudaSuccess, "the valid call failed on the device");
        CHECK(m40_cuda_gemm_free(NULL) == NULL, "m40_cuda_gemm_free(NULL)");
out:
        m40_cuda_gemm_free(g);
        m40_cuda_gemm_free(tiny);
        cudaFree(dx);
        cudaFree(dy);
        mat_free(&m);
}

/* Not a check: m40_cuda_gemm()'s rate at n_tok 512 on 8B-shaped matrices beside cuBLAS
 * SGEMM's on the same shape (F32 weights go to cublasSgemm as they are). The weights are
 * one quantized random row repeated: the rate does not depend on the values. */
static double rate(uint32_t type, uint32_t n_in, uint32_t n_out, uint32_t n_tok,
                   struct m40_cuda_gemm *g, const float *dx, float *dy)
{
        uint64_t rb = 0;
        float *row = malloc(sizeof(float) * n_in);
        uint8_t *q = NULL, *all = NULL;
        void *dw = NULL;
        cudaEvent_t e0 = NULL, e1 = NULL;
        struct m40_cuda_matrix w;
        float ms = 0.0f;
        double gflops = -1.0;
        const int reps = 5;

        if (!row || m40_ggml_row_size(type, n_in, &rb) < 0 || !(q = malloc(rb)))
                goto out;
        for (uint32_t k = 0; k < n_in; k++)
                row[k] = rng_normal(&seed);
        if (m40_row_quantize(type, row, q, n_in) < 0 || !(all = malloc(rb * n_out)))
                goto out;
        for (uint32_t o = 0; o < n_out; o++)
                memcpy(all + o * rb, q, rb);
        if (cudaMalloc(&dw, rb * n_out) != cudaSuccess ||
            cudaMemcpy(dw, all, rb * n_out, cudaMemcpyHostToDevice) != cudaSuccess)
                goto out;
        w = (struct m40_cuda_matrix){dw, type, n_in, n_out, rb};
        if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess ||
            m40_cuda_gemm(g, &w, dx, n_in, dy, n_out, n_tok, stream) < 0 ||
            cudaEventRecord(e0, stream) != cudaSuccess)
                goto out;
        m40_cuda_gemm_begin(g, stream); /* as a forward pass runs them */
        for (int i = 0; i < reps; i++)
                if (m40_cuda_gemm(g, &w, dx, n_in, dy, n_out, n_tok, stream) < 0) {
                        m40_cuda_gemm_end(g);
                        goto out;
                }
        m40_cuda_gemm_end(g);
        if (cudaEventRecord(e1, stream) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
            cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess || ms <= 0.0f)
                goto out;
        gflops = 2.0 * n_in * n_out * n_tok * reps / (ms * 1e-3) / 1e9;
out:
        if (gflops < 0)
                fail("timing %s %ux%u: %s %s", m40_ggml_type_name(type), n_out, n_in,
                     cudaGetErrorString(cudaGetLastError()), m40_cuda_gemm_last_error());
        if (e0)
                cudaEventDestroy(e0);
        if (e1)
                cudaEventDestroy(e1);
        cudaFree(dw);
        free(all);
        free(q);
        free(row);
        return gflops;
}

static void timing(void)
{
        static const uint32_t shapes[][2] = {{4096, 4096}, {4096, 14336}, {14336, 4096}};
        static const uint32_t ttypes[] = {M40_GGML_F16, M40_GGML_Q8_0, M40_GGML_Q4_0, M40_GGML_Q4_K,
                                          M40_GGML_Q6_K};
        const uint32_t n_tok = 512;
        struct m40_cuda_gemm *g = NULL;
        float *dx = NULL, *dy = NULL;
        char err[256] = "";

        if (cudaMalloc((void **)&dx, sizeof(float) * 14336 * n_tok) != cudaSuccess ||
            cudaMalloc((void **)&dy, sizeof(float) * 14336 * n_tok) != cudaSuccess ||
            cudaMemset(dx, 0, sizeof(float) * 14336 * n_tok) != cudaSuccess ||
            cudaDeviceSynchronize() != cudaSuccess ||
            m40_cuda_gemm_new(d_scratch, scratch_bytes, d_ws, ws_bytes, &g, err, sizeof(err))) {
                fail("timing: buffers or handle: %s", err);
                goto out;
        }
        printf("rate at n_tok %u, GFLOP/s (not a check; scratch %" PRIu64 " MiB; cuBLAS = "
               "cublasSgemm on F32 weights of the shape):\n",
               n_tok, scratch_bytes >> 20);
        for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
                const uint32_t n_in = shapes[s][0], n_out = shapes[s][1];
                const double base = rate(M40_GGML_F32, n_in, n_out, n_tok, g, dx, dy);

                printf("  %5u x %5u  cuBLAS %8.0f", n_out, n_in, base);
                for (size_t t = 0; t < sizeof(ttypes) / sizeof(ttypes[0]); t++) {
                        const double v = rate(ttypes[t], n_in, n_out, n_tok, g, dx, dy);

                        printf("  %s %8.0f (%3.0f%%)", m40_ggml_type_name(ttypes[t]), v,
                               base > 0 ? 100.0 * v / base : 0.0);
                }
                printf("\n");
        }
out:
        m40_cuda_gemm_free(g);
        cudaFree(dx);
        cudaFree(dy);
}

int main(void)
{
        int code, quick = quick_mode();
        struct m40_cuda_device *d = gpu_open_seeded(quick, &code);

        if (!d)
                return code;
        scratch_bytes = M40_CUDA_GEMM_SCRATCH_DEFAULT * m40_cuda_gemm_buffers();
        ws_bytes = m40_cuda_gemm_workspace_bytes(m40_cuda_device_info(d)->cc_major);
        if (cudaMalloc((void **)&d_scratch, scratch_bytes) != cudaSuccess ||
            cudaMalloc(&d_ws, ws_bytes) != cudaSuccess ||
            cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
                fail("scratch, workspace or stream: %s", cudaGetErrorString(cudaGetLastError()));
                goto out;
        }
        check_arguments();
        for (int ti = 0; ti < N_TYPES; ti++) {
                run_type(ti, quick);
                if (!quick || test_types[ti] == M40_GGML_Q4_0)
                        run_case(ti);
        }

        printf("%-5s %12s %10s %10s %10s %10s %9s\n", "type", "dequant", sname[S_WHOLE],
               sname[S_KSPLIT], sname[S_TILES], sname[S_ROWS], "outputs");
        for (int ti = 0; ti < N_TYPES; ti++)
                printf("%-5s %12" PRIu64 " %10.2e %10.2e %10.2e %10.2e %9" PRIu64 "\n",
                       m40_ggml_type_name(test_types[ti]), deq_checked[ti], worst[ti][S_WHOLE],
                       worst[ti][S_KSPLIT], worst[ti][S_TILES], worst[ti][S_ROWS],
                       checked[ti][S_WHOLE] + checked[ti][S_KSPLIT] + checked[ti][S_TILES] +
                               checked[ti][S_ROWS]);
        printf("(dequant: weights equal bit for bit; then max |y - ref| / sum|w x| per tiling, "
               "bound %.0e)\n",
               BOUND);
        if (!quick && !failures)
                timing();
out:
        handles_free();
        if (stream)
                cudaStreamDestroy(stream);
        cudaFree(d_scratch);
        cudaFree(d_ws);
        m40_cuda_device_free(d);
        return finish();
}

#endif
