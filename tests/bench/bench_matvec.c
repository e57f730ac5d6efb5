/* tests/bench/bench_matvec.c - the matrix-kernel benchmark of m40-bench (see
 * bench_matvec.h): buffers, timing with CUDA events, and the report.
 *
 * Method: one pool of device memory holds as many copies of the weight matrix as
 * needed to cover three times the L2 cache (at least one); each call uses the next copy,
 * so weights come from DRAM as in decoding. Weight bytes are a fixed pattern that is a
 * finite number in every type (0x11 bytes); timing does not depend on values. Three
 * untimed calls, a probe of five, then enough calls for about 25 ms, timed with events
 * on one stream. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "bench_matvec.h"
#include "cuda/runtime/device.h"
#include "cuda/kernels/matvec.h"
#include "m40/error.h"
#include "model/ggml_type.h"

static const uint32_t shapes[BENCH_MV_SHAPES][2] = {
        /* n_in, n_out: Llama-3-8B's q/o, k/v, gate/up, down and output projections */
        {4096, 4096}, {4096, 1024}, {4096, 14336}, {14336, 4096}, {4096, 128256},
};
static const uint32_t types[BENCH_MV_TYPES] = {
        M40_GGML_F32,  M40_GGML_F16,  M40_GGML_BF16, M40_GGML_Q8_0, M40_GGML_Q4_0, M40_GGML_Q4_1,
        M40_GGML_Q5_0, M40_GGML_Q5_1, M40_GGML_Q4_K, M40_GGML_Q5_K, M40_GGML_Q6_K,
};
/* batch and kernel (1: m40_cuda_mmq) of each run */
static const struct {
        uint32_t batch;
        int mmq;
} runs[BENCH_MV_RUNS] = {
        {1, 0}, {2, 0}, {2, 1}, {4, 0}, {4, 1}, {8, 0}, {8, 1}, {16, 1}, {32, 1}, {64, 1},
};

#define MAX_IN     14336
#define MAX_OUT    128256
#define TARGET_MS  25.0
#define POOL_BYTES ((size_t)2560 << 20) /* the largest matrix (F32 output) plus room */
#define PART_BYTES ((size_t)32 << 20)   /* m40_cuda_mmq()'s split partials, as the engine's */

static void set_err(char *err, size_t errlen, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
}

struct bufs {
        uint8_t *pool;
        size_t pool_bytes;
        float *x, *y, *part;
        cudaStream_t s;
        cudaEvent_t e0, e1;
        size_t l2;
};

/* Issue n calls, rotating over copies, on b->s. */
static int calls(const struct bufs *b, struct m40_cuda_matrix *w, size_t stride, int copies,
                 int *next, uint32_t batch, int mmq, int n)
{
        for (int i = 0; i < n; i++) {
                int r;

                w->data = b->pool + (size_t)*next * stride;
                *next = (*next + 1) % copies;
                r = !mmq ? m40_cuda_matvec(w, b->x, MAX_IN, b->y, MAX_OUT, batch, b->s)
                         : m40_cuda_mmq(w, 1, b->x, MAX_IN, &b->y, &(size_t){MAX_OUT}, batch, false,
                                        b->part, PART_BYTES, b->s);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int timed(const struct bufs *b, struct m40_cuda_matrix *w, size_t stride, int copies,
                 int *next, uint32_t batch, int mmq, int n, double *ret_ms)
{
        float ms = 0.0f;
        int r;

        if (cudaEventRecord(b->e0, b->s) != cudaSuccess)
                return M40_ECUDA;
        r = calls(b, w, stride, copies, next, batch, mmq, n);
        if (r < 0)
                return r;
        if (cudaEventRecord(b->e1, b->s) != cudaSuccess ||
            cudaEventSynchronize(b->e1) != cudaSuccess ||
            cudaEventElapsedTime(&ms, b->e0, b->e1) != cudaSuccess)
                return M40_ECUDA;
        *ret_ms = ms;
        return 0;
}

static int measure(const struct bufs *b, uint32_t type, uint32_t n_in, uint32_t n_out,
                   uint32_t batch, int mmq, struct bench_mv_result *res, char *err, size_t errlen)
{
        struct m40_cuda_matrix w = {NULL, type, n_in, n_out, 0};
        uint64_t rb = 0;
        size_t bytes, stride;
        int copies, next = 0, iters = 5, r;
        double ms = 0.0;

        if (m40_ggml_row_size(type, n_in, &rb) < 0)
                return -EINVAL;
        w.row_bytes = rb;
        bytes = rb * n_out;
        stride = (bytes + 255) & ~(size_t)255;
        copies = (int)((3 * b->l2 + bytes - 1) / bytes);
        if (copies < 1)
                copies = 1;
        if ((size_t)copies * stride > b->pool_bytes)
                copies = (int)(b->pool_bytes / stride);
        if (copies < 1) {
                set_err(err, errlen, "%s %ux%u does not fit the %zu MiB pool",
                        m40_ggml_type_name(type), n_in, n_out, b->pool_bytes >> 20);
                return -ENOMEM;
        }
        r = calls(b, &w, stride, copies, &next, batch, mmq, 3);
        if (r == 0)
                r = timed(b, &w, stride, copies, &next, batch, mmq, 5, &ms);
        if (r == 0) {
                iters = (int)(TARGET_MS / (ms / 5.0 > 1e-4 ? ms / 5.0 : 1e-4));
                iters = iters < 5 ? 5 : iters > 5000 ? 5000 : iters;
                r = timed(b, &w, stride, copies, &next, batch, mmq, iters, &ms);
        }
        if (r < 0) {
                set_err(err, errlen, "%s %ux%u batch %u: %s %s", m40_ggml_type_name(type), n_in,
                        n_out, batch, m40_strerror(r), m40_cuda_last_error());
                return r;
        }
        res->n_in = n_in;
        res->n_out = n_out;
        res->type = type;
        res->batch = batch;
        res->kernel = mmq ? "mmq" : "matvec";
        res->us = ms * 1e3 / iters;
        res->gbs = (double)bytes / (res->us * 1e-6) / 1e9;
        res->gflops = 2.0 * n_in * n_out * batch / (res->us * 1e-6) / 1e9;
        return 0;
}

static void bufs_free(struct bufs *b)
{
        if (b->s)
                cudaStreamSynchronize(b->s);
        cudaFree(b->pool);
        cudaFree(b->x);
        cudaFree(b->y);
        cudaFree(b->part);
        if (b->e0)
                cudaEventDestroy(b->e0);
        if (b->e1)
                cudaEventDestroy(b->e1);
        if (b->s)
                cudaStreamDestroy(b->s);
        cudaGetLastError();
}

int bench_matvec_run(struct m40_cuda_device *d, double copy_gbs, struct bench_mv *ret, char *err,
                     size_t errlen)
{
        const struct m40_cuda_device_info *in = m40_cuda_device_info(d);
        struct bufs b = {0};
        size_t free_b = 0, total_b = 0;
        int r = 0;

        memset(ret, 0, sizeof(*ret));
        ret->copy_gbs = copy_gbs;
        b.l2 = in->l2_bytes > 0 ? (size_t)in->l2_bytes : (size_t)50 << 20;
        if (cudaSetDevice(in->ordinal) != cudaSuccess ||
            cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
                set_err(err, errlen, "cannot read the GPU's free memory");
                return M40_ECUDA;
        }
        b.pool_bytes = POOL_BYTES < free_b / 2 ? POOL_BYTES : free_b / 2;
        if (cudaMalloc((void **)&b.pool, b.pool_bytes) != cudaSuccess ||
            cudaMalloc((void **)&b.x, sizeof(float) * MAX_IN * 64) != cudaSuccess ||
            cudaMalloc((void **)&b.y, sizeof(float) * MAX_OUT * 64) != cudaSuccess ||
            cudaMalloc((void **)&b.part, PART_BYTES) != cudaSuccess ||
            cudaStreamCreateWithFlags(&b.s, cudaStreamNonBlocking) != cudaSuccess ||
            cudaEventCreate(&b.e0) != cudaSuccess || cudaEventCreate(&b.e1) != cudaSuccess ||
            cudaMemset(b.pool, 0x11, b.pool_bytes) != cudaSuccess ||
            cudaMemset(b.part, 0, M40_CUDA_MMQ_SEM_BYTES) != cudaSuccess || /* counters */
            cudaMemset(b.x, 0x3f, sizeof(float) * MAX_IN * 64) != cudaSuccess ||
            cudaDeviceSynchronize() != cudaSuccess) {
                set_err(err, errlen, "cannot set up the buffers (%zu MiB): %s", b.pool_bytes >> 20,
                        cudaGetErrorString(cudaGetLastError()));
                bufs_free(&b);
                return -ENOMEM;
        }
        for (int s = 0; s < BENCH_MV_SHAPES && r == 0; s++)
                for (int t = 0; t < BENCH_MV_TYPES && r == 0; t++)
                        for (int k = 0; k < BENCH_MV_RUNS && r == 0; k++) {
                                r = measure(&b, types[t], shapes[s][0], shapes[s][1], runs[k].batch,
                                            runs[k].mmq, &ret->r[ret->n], err, errlen);
                                if (r == 0)
                                        ret->n++;
                        }
        bufs_free(&b);
        return r;
}

static const struct bench_mv_result *find(const struct bench_mv *b, int s, uint32_t type,
                                          uint32_t batch, int mmq)
{
        for (int i = 0; i < b->n; i++)
                if (b->r[i].n_in == shapes[s][0] && b->r[i].n_out == shapes[s][1] &&
                    b->r[i].type == type && b->r[i].batch == batch &&
                    !strcmp(b->r[i].kernel, mmq ? "mmq" : "matvec"))
                        return &b->r[i];
        return NULL;
}

static void header(FILE *f)
{
        for (int s = 0; s < BENCH_MV_SHAPES; s++) {
                char name[32];

                snprintf(name, sizeof(name), "%ux%u", shapes[s][0], shapes[s][1]);
                fprintf(f, " %13s", name);
        }
}

void bench_matvec_text(const struct bench_mv *b, FILE *f)
{
        fprintf(f,
                "\nmatvec, batch 1: GB/s of weights streamed, and the fraction of the copy "
                "bandwidth (%.1f GB/s)\n%-6s",
                b->copy_gbs, "type");
        header(f);
        fprintf(f, "  (n_in x n_out)\n");
        for (int t = 0; t < BENCH_MV_TYPES; t++) {
                fprintf(f, "%-6s", m40_ggml_type_name(types[t]));
                for (int s = 0; s < BENCH_MV_SHAPES; s++) {
                        const struct bench_mv_result *r = find(b, s, types[t], 1, 0);

                        if (r)
                                fprintf(f, " %7.0f %5.2f", r->gbs, r->gbs / b->copy_gbs);
                        else
                                fprintf(f, " %13s", "-");
                }
                fprintf(f, "\n");
        }
        for (int k = 1; k < BENCH_MV_RUNS; k++) {
                fprintf(f, "\nbatch %u (%s kernel): GFLOP/s (FP32 arithmetic)\n%-6s", runs[k].batch,
                        runs[k].mmq ? "mmq" : "matvec", "type");
                header(f);
                fprintf(f, "\n");
                for (int t = 0; t < BENCH_MV_TYPES; t++) {
                        fprintf(f, "%-6s", m40_ggml_type_name(types[t]));
                        for (int s = 0; s < BENCH_MV_SHAPES; s++) {
                                const struct bench_mv_result *r =
                                        find(b, s, types[t], runs[k].batch, runs[k].mmq);

                                fprintf(f, " %13.0f", r ? r->gflops : 0.0);
                        }
                        fprintf(f, "\n");
                }
        }
}

void bench_matvec_json(const struct bench_mv *b, FILE *f)
{
        fprintf(f, "\"matvec\":{\"copy_gbs\":%.1f,\"results\":[", b->copy_gbs);
        for (int i = 0; i < b->n; i++) {
                const struct bench_mv_result *r = &b->r[i];

                fprintf(f,
                        "%s{\"n_in\":%u,\"n_out\":%u,\"type\":\"%s\",\"batch\":%u,"
                        "\"kernel\":\"%s\",\"us\":%.2f,\"gbs\":%.1f,\"of_copy\":%.3f,"
                        "\"gflops\":%.1f}",
                        i ? "," : "", r->n_in, r->n_out, m40_ggml_type_name(r->type), r->batch,
                        r->kernel, r->us, r->gbs, r->gbs / b->copy_gbs, r->gflops);
        }
        fprintf(f, "]}");
}
