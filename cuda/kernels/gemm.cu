/* cuda/kernels/gemm.cu - the prefill GEMM of gemm.h: exact dequantization of weight tiles into
 * FP32 (k_dequant) and cuBLAS SGEMM on each tile.
 *
 * Computes y[t][o] = sum_k W[o][k] * x[t][k], t < n_tok, o < n_out; x (n_tok, ldx) and
 * y (n_tok, ldy) row-major. cuBLAS is column-major: x is then the n_in x n_tok matrix X
 * (ld ldx), a row-major tile of W rows [r0, r0 + m) and k range [k0, k0 + kc) is the
 * kc x m matrix A (ld ldt), and y from row r0 on is the n_out x n_tok matrix Y (ld ldy),
 * so Y[r0 .. r0 + m) (+)= A^T X[k0 .. k0 + kc): cublasSgemm(OP_T, OP_N, m, n_tok, kc,
 * A, ldt, x + k0, ldx, beta, y + r0, ldy), beta 0 for a row tile's first k range, 1
 * for the others ("TN", both operands k-contiguous: cuBLAS's fastest SGEMM layout).
 *
 * k_dequant<T> - out (n_rows, ldo) = W[r0 .. r0 + n_rows)[k0 .. k0 + n_k) via
 *   qt<T>::deq8 (exact: the CPU engine's numbers). Launch: DQ_THREADS threads along
 *   the k range (one run of 8 weights each), grid (ceil(n_k / 8 / DQ_THREADS),
 *   min(n_rows, 65535)), rows strided by gridDim.y. Consecutive threads store
 *   consecutive 32-byte runs of a row: coalesced. Memory-bound: reads the packed
 *   weights once (their block scales again from L1), writes 4 bytes per weight.
 *
 * Tiles: a matrix that fits a tile buffer is one tile (one dequantization, one SGEMM).
 * Else rows come in tiles of at least M40_CUDA_GEMM_MIN_ROWS (so each SGEMM has
 * M40_CUDA_GEMM_MIN_ROWS x n_tok outputs to spread over the GPU) and the k range is cut
 * to what fits, in multiples of M40_CUDA_GEMM_KSTEP; the partial sums of a row tile add
 * up in y (a write and a read of y per extra k range: a few % of the SGEMM's time at
 * n_tok 512).
 * Overlap (GEMM_BUFS 2, the default): the scratch holds two tile buffers, used in turn,
 * and the handle has a stream of its own for the dequantization, so that a tile is
 * dequantized while the SGEMM of the tile before it runs (the dequantization is
 * bandwidth-bound, ~5-10% of the compute-bound SGEMM at n_tok 512 on an H100 or H200,
 * ~15% on an M40: 2 n_tok FLOP per weight against ~9 bytes moved). Events order it:
 * a tile's SGEMM waits for its dequantization (ready[b]), the next dequantization into
 * the same buffer waits for that SGEMM (free[b]). The dequantization stream forks from
 * the caller's stream (an event) at the first call of a run (m40_cuda_gemm_begin() ..
 * m40_cuda_gemm_end(), else the call alone), so it is ordered after everything the
 * caller queued before, never waits on an event of another run, and joins the caller's
 * stream through the SGEMMs' waits: a run may be captured into a CUDA graph. With
 * GEMM_BUFS 1 a tile's dequantization waits for the SGEMM before it (one stream).
 *
 * Tolerance: the dequantized weights are exact, so the error is that of cuBLAS's FP32
 * sums (a few 1e-7 of sum |w x| for the rows tested); tests/gpu/test_gemm.c bounds it
 * at 1e-5 of sum |w x| against a double-precision reference. FP32 math mode: cuBLAS
 * never uses TF32 here. Maxwell-clean (sm_52): __ldg loads, plain stores. */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "cuda/kernels/gemm.h"
#include "cuda/runtime/launch.h"
#include "cuda/kernels/quant.cuh"
#include "m40/error.h"

#define DQ_THREADS   128
#define DQ_MAX_GRIDY 65535

/* Tile buffers (file comment: Overlap); knob for A/B builds. */
#ifndef GEMM_BUFS
#define GEMM_BUFS 2
#endif
static_assert(GEMM_BUFS == 1 || GEMM_BUFS == 2, "one or two tile buffers");

static_assert(M40_CUDA_GEMM_KSTEP % 256 == 0, "k ranges start on block boundaries");
static_assert(M40_CUDA_GEMM_MIN_ROWS % 128 == 0, "row tiles are multiples of 128");

struct m40_cuda_gemm {
        cublasHandle_t h;
        float *scratch;          /* the tile buffers: scratch_floats floats */
        uint64_t scratch_floats; /* all of the scratch */
        uint64_t buf_floats;     /* one tile buffer: buf[b] = scratch + b * buf_floats */
        int nbuf;                /* tile buffers (1 or 2: GEMM_BUFS, when the scratch holds 2) */
        void *ws;                /* cuBLAS's workspace */
        size_t ws_bytes;
        cudaStream_t stream; /* the stream cuBLAS was last given */
        /* the overlap (nbuf 2): the dequantization's stream and events */
        cudaStream_t ds;
        cudaEvent_t fork, ready[2], free_[2];
        bool used[2];             /* buffer b has a SGEMM queued in this run */
        int next;                 /* the buffer the next tile takes */
        bool open, forked;        /* a run is open (m40_cuda_gemm_begin); ds forked in it */
        cudaStream_t open_stream; /* the stream of the open run */
};

static __thread char gemm_error[320];

extern "C" const char *m40_cuda_gemm_last_error(void)
{
        return gemm_error;
}

static int blas_fail(cublasStatus_t s, const char *what)
{
        snprintf(gemm_error, sizeof(gemm_error), "%s: %s: %s", what, cublasGetStatusName(s),
                 cublasGetStatusString(s));
        return M40_ECUDA;
}

/* A launch's status; a failure's message goes into both records. */
static int launch_status(const char *what)
{
        int r = m40_cuda_launch_status(what);

        if (r)
                snprintf(gemm_error, sizeof(gemm_error), "%s", m40_cuda_last_error());
        return r;
}

/* ---- the dequantization kernel ---- */

template <int T>
static __global__ void __launch_bounds__(DQ_THREADS)
        k_dequant(const uint8_t *__restrict__ w, size_t row_bytes, int n_in, int k0, int n_k,
                  int n_rows, float *__restrict__ out, size_t ldo, bool vec)
{
        const int c = 8 * (int)(blockIdx.x * DQ_THREADS + threadIdx.x); /* tile column */
        const size_t wstep = (size_t)gridDim.y * row_bytes, ostep = (size_t)gridDim.y * ldo;
        const uint8_t *row = w + (size_t)blockIdx.y * row_bytes;
        float *o = out + (size_t)blockIdx.y * ldo + c;

        if (c >= n_k)
                return;
        for (int r = blockIdx.y; r < n_rows; r += gridDim.y, row += wstep, o += ostep) {
                float v[8];

                qt<T>::deq8(row, k0 + c, n_in, v);
                if (vec && c + 8 <= n_k) {
                        reinterpret_cast<float4 *>(o)[0] = make_float4(v[0], v[1], v[2], v[3]);
                        reinterpret_cast<float4 *>(o)[1] = make_float4(v[4], v[5], v[6], v[7]);
                } else {
#pragma unroll
                        for (int i = 0; i < 8; i++)
                                if (c + i < n_k)
                                        o[i] = v[i];
                }
        }
}

/* ---- argument checks ---- */

/* Block layout: elements and bytes per block; rows keep the alignment of the block size
 * (its lowest set bit, at most 16: what matvec.h asks of rows). */
static bool layout(uint32_t type, uint32_t *qk, uint32_t *bytes)
{
        static const struct {
                uint32_t type, qk, bytes;
        } tab[] = {
                {M40_GGML_F32, 1, 4},      {M40_GGML_F16, 1, 2},      {M40_GGML_BF16, 1, 2},
                {M40_GGML_Q8_0, 32, 34},   {M40_GGML_Q4_0, 32, 18},   {M40_GGML_Q4_1, 32, 20},
                {M40_GGML_Q5_0, 32, 22},   {M40_GGML_Q5_1, 32, 24},   {M40_GGML_Q4_K, 256, 144},
                {M40_GGML_Q5_K, 256, 176}, {M40_GGML_Q6_K, 256, 210},
        };

        for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++)
                if (tab[i].type == type) {
                        *qk = tab[i].qk;
                        *bytes = tab[i].bytes;
                        return true;
                }
        return false;
}

/* W against matvec.h's contract. */
static int check_matrix(const struct m40_cuda_matrix *w)
{
        uint32_t qk, bytes, align;

        if (!w || !w->data)
                return -EINVAL;
        if (!layout(w->type, &qk, &bytes))
                return M40_EUNSUPPORTED;
        align = bytes & (~bytes + 1); /* lowest set bit */
        align = align > 16 ? 16 : align;
        if (w->n_in < 1 || w->n_in > INT_MAX / 2 || w->n_out > INT_MAX / 2 || w->n_in % qk ||
            w->row_bytes < (size_t)(w->n_in / qk) * bytes || w->row_bytes % align ||
            (uintptr_t)w->data % 16)
                return -EINVAL;
        return 0;
}

/* Whether the byte ranges [a, a + na) and [b, b + nb) meet. */
static bool overlap(const void *a, size_t na, const void *b, size_t nb)
{
        const uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;

        return na && nb && pa < pb + nb && pb < pa + na;
}

static size_t ld4(size_t n)
{
        return (n + 3) & ~(size_t)3;
}

/* ---- dequantization ---- */

#define DQ_CASE(T)                                                                                 \
        case T:                                                                                    \
                k_dequant<T><<<grid, DQ_THREADS, 0, stream>>>(wr, w->row_bytes, (int)w->n_in,      \
                                                              (int)k0, (int)n_k, (int)n_rows, out, \
                                                              ldo, vec);                           \
                break;

extern "C" int m40_cuda_dequant_rows(const struct m40_cuda_matrix *w, uint32_t r0, uint32_t n_rows,
                                     uint32_t k0, uint32_t n_k, float *out, size_t ldo,
                                     struct CUstream_st *stream)
{
        const uint8_t *wr;
        uint32_t groups;
        bool vec;
        dim3 grid;
        int r = check_matrix(w);

        if (r)
                return r;
        if (!out || k0 % 8 || k0 > w->n_in || n_k > w->n_in - k0 || r0 > w->n_out ||
            n_rows > w->n_out - r0 || ldo < n_k || ldo > (size_t)INT_MAX)
                return -EINVAL;
        if (n_rows == 0 || n_k == 0)
                return 0;
        wr = (const uint8_t *)w->data + (size_t)r0 * w->row_bytes;
        groups = (n_k + 7) / 8;
        grid = dim3((groups + DQ_THREADS - 1) / DQ_THREADS,
                    n_rows < DQ_MAX_GRIDY ? n_rows : DQ_MAX_GRIDY);
        vec = (uintptr_t)out % 16 == 0 && ldo % 4 == 0;
        switch (w->type) {
                DQ_CASE(M40_GGML_F32)
                DQ_CASE(M40_GGML_F16)
                DQ_CASE(M40_GGML_BF16)
                DQ_CASE(M40_GGML_Q8_0)
                DQ_CASE(M40_GGML_Q4_0)
                DQ_CASE(M40_GGML_Q4_1)
                DQ_CASE(M40_GGML_Q5_0)
                DQ_CASE(M40_GGML_Q5_1)
                DQ_CASE(M40_GGML_Q4_K)
                DQ_CASE(M40_GGML_Q5_K)
                DQ_CASE(M40_GGML_Q6_K)
        default:
                return M40_EUNSUPPORTED;
        }
        return launch_status("dequant");
}

/* ---- the handle ---- */

extern "C" uint64_t m40_cuda_gemm_workspace_bytes(int cc_major)
{
        return (uint64_t)(cc_major >= 9 ? 32 : 4) << 20;
}

extern "C" uint64_t m40_cuda_gemm_scratch_bytes(uint32_t type, uint32_t n_in, uint32_t n_out)
{
        return type == M40_GGML_F32 ? 0 : (uint64_t)n_out * ld4(n_in) * sizeof(float);
}

extern "C" int m40_cuda_gemm_new(void *scratch, uint64_t scratch_bytes, void *workspace,
                                 uint64_t workspace_bytes, struct m40_cuda_gemm **ret, char *err,
                                 size_t errlen)
{
        struct m40_cuda_gemm *g;
        cublasStatus_t s;
        const char *what = "cublasCreate";

        if (!ret || (!scratch && scratch_bytes) || (uintptr_t)scratch % 16 || !workspace ||
            (uintptr_t)workspace % 256 || workspace_bytes < M40_CUDA_GEMM_WORKSPACE_MIN ||
            workspace_bytes > SIZE_MAX)
                return -EINVAL;
        g = (struct m40_cuda_gemm *)calloc(1, sizeof(*g));
        if (!g)
                return -ENOMEM;
        g->scratch = (float *)scratch;
        g->scratch_floats = scratch ? scratch_bytes / sizeof(float) : 0;
        g->nbuf = GEMM_BUFS == 2 && g->scratch_floats >= 2 * M40_CUDA_GEMM_KSTEP ? 2 : 1;
        g->buf_floats = g->scratch_floats / g->nbuf & ~(uint64_t)3; /* 16-byte aligned */
        g->ws = workspace;
        g->ws_bytes = (size_t)workspace_bytes;
        s = cublasCreate(&g->h);
        if (s == CUBLAS_STATUS_SUCCESS) {
                what = "cublasSetMathMode";
                s = cublasSetMathMode(g->h, CUBLAS_DEFAULT_MATH);
        }
        if (s == CUBLAS_STATUS_SUCCESS) {
                what = "cublasSetPointerMode";
                s = cublasSetPointerMode(g->h, CUBLAS_POINTER_MODE_HOST);
        }
        if (s == CUBLAS_STATUS_SUCCESS) {
                what = "cublasSetWorkspace";
                s = cublasSetWorkspace(g->h, g->ws, g->ws_bytes);
        }
        if (s != CUBLAS_STATUS_SUCCESS) {
                int r = blas_fail(s, what);

                if (err)
                        snprintf(err, errlen, "gemm: %s", gemm_error);
                m40_cuda_gemm_free(g);
                return r;
        }
        if (g->nbuf == 2) {
                cudaError_t e = cudaStreamCreateWithFlags(&g->ds, cudaStreamNonBlocking);
                int n = 0;

                while (e == cudaSuccess && n < 5) {
                        cudaEvent_t *ev[] = {&g->fork, &g->ready[0], &g->ready[1], &g->free_[0],
                                             &g->free_[1]};

                        e = cudaEventCreateWithFlags(ev[n], cudaEventDisableTiming);
                        n += e == cudaSuccess;
                }
                if (e != cudaSuccess) {
                        snprintf(gemm_error, sizeof(gemm_error), "gemm: its stream and events: %s",
                                 cudaGetErrorString(e));
                        if (err)
                                snprintf(err, errlen, "%s", gemm_error);
                        m40_cuda_gemm_free(g);
                        return M40_ECUDA;
                }
        }
        *ret = g;
        return 0;
}

extern "C" uint32_t m40_cuda_gemm_buffers(void)
{
        return GEMM_BUFS;
}

extern "C" void m40_cuda_gemm_begin(struct m40_cuda_gemm *g, struct CUstream_st *stream)
{
        if (!g)
                return;
        g->open = true;
        g->forked = false;
        g->open_stream = stream;
}

extern "C" void m40_cuda_gemm_end(struct m40_cuda_gemm *g)
{
        if (g)
                g->open = false;
}

extern "C" struct m40_cuda_gemm *m40_cuda_gemm_free(struct m40_cuda_gemm *g)
{
        if (!g)
                return NULL;
        if (g->h)
                cublasDestroy(g->h);
        if (g->ds) {
                cudaStreamSynchronize(g->ds);
                cudaStreamDestroy(g->ds);
        }
        cudaEvent_t ev[] = {g->fork, g->ready[0], g->ready[1], g->free_[0], g->free_[1]};

        for (size_t i = 0; i < sizeof(ev) / sizeof(ev[0]); i++)
                if (ev[i])
                        cudaEventDestroy(ev[i]);
        free(g);
        return NULL;
}

/* ---- the product ---- */

/* A tile: mt rows by kc of k, ldt floats per row. */
struct tiling {
        uint32_t mt, kc;
        size_t ldt;
};

/* The largest tiles that fit cap floats (see the file comment), or -ENOSPC. */
static int plan(uint32_t n_in, uint32_t n_out, uint64_t cap, struct tiling *t)
{
        const uint64_t ld = ld4(n_in),
                       want = n_out < M40_CUDA_GEMM_MIN_ROWS ? n_out : M40_CUDA_GEMM_MIN_ROWS;
        uint64_t rows = cap / ld;

        if (rows >= want) { /* whole rows: no partial sums; tiles of 128-row multiples */
                if (rows < n_out && rows >= 128)
                        rows &= ~(uint64_t)127;
                *t = (struct tiling){rows < n_out ? (uint32_t)rows : n_out, n_in, ld};
                return 0;
        }
        t->kc = (uint32_t)(cap / want / M40_CUDA_GEMM_KSTEP * M40_CUDA_GEMM_KSTEP);
        t->mt = (uint32_t)want;
        if (t->kc == 0) { /* not even want rows of one k step: fewer rows */
                t->kc = n_in < M40_CUDA_GEMM_KSTEP ? n_in : M40_CUDA_GEMM_KSTEP;
                rows = cap / ld4(t->kc);
                t->mt = rows < n_out ? (uint32_t)rows : n_out;
        }
        t->ldt = ld4(t->kc);
        return t->mt ? 0 : -ENOSPC;
}

/* An event call's status: 0, or M40_ECUDA with the runtime's message. */
static int ev_check(cudaError_t e, const char *what)
{
        if (e == cudaSuccess)
                return 0;
        snprintf(gemm_error, sizeof(gemm_error), "gemm: %s: %s", what, cudaGetErrorString(e));
        return M40_ECUDA;
}

/* fork_ds - make the dequantization stream follow `stream` from here on, once per run
 * (file comment: Overlap): a call outside an open run, or the first call of the run
 * m40_cuda_gemm_begin() opened on `stream`, records `fork` on stream and has ds wait for
 * it; the buffers then have no SGEMM of this run queued yet. */
static int fork_ds(struct m40_cuda_gemm *g, cudaStream_t stream)
{
        int r;

        if (g->open && g->open_stream == stream && g->forked)
                return 0;
        r = ev_check(cudaEventRecord(g->fork, stream), "fork");
        r = r ? r : ev_check(cudaStreamWaitEvent(g->ds, g->fork, 0), "fork");
        g->used[0] = g->used[1] = false;
        g->next = 0;
        g->forked = !r;
        return r;
}

/* Give cuBLAS the call's stream; setting a stream resets cuBLAS's workspace to its own
 * pool, so the workspace is set again after it. */
static int use_stream(struct m40_cuda_gemm *g, cudaStream_t stream)
{
        cublasStatus_t s;

        if (stream == g->stream)
                return 0;
        s = cublasSetStream(g->h, stream);
        if (s != CUBLAS_STATUS_SUCCESS)
                return blas_fail(s, "cublasSetStream");
        s = cublasSetWorkspace(g->h, g->ws, g->ws_bytes);
        if (s != CUBLAS_STATUS_SUCCESS)
                return blas_fail(s, "cublasSetWorkspace");
        g->stream = stream;
        return 0;
}

extern "C" int m40_cuda_gemm(struct m40_cuda_gemm *g, const struct m40_cuda_matrix *w,
                             const float *x, size_t ldx, float *y, size_t ldy, uint32_t n_tok,
                             struct CUstream_st *stream)
{
        const float one = 1.0f, zero = 0.0f;
        struct tiling t;
        cublasStatus_t s;
        size_t xbytes, ybytes;
        int r = check_matrix(w);

        if (r)
                return r;
        if (!g || !x || !y || n_tok < 1 || n_tok > INT_MAX || ldx < w->n_in || ldy < w->n_out ||
            ldx > (size_t)INT_MAX || ldy > (size_t)INT_MAX)
                return -EINVAL;
        xbytes = ((size_t)(n_tok - 1) * ldx + w->n_in) * sizeof(float);
        ybytes = ((size_t)(n_tok - 1) * ldy + w->n_out) * sizeof(float);
        if (overlap(x, xbytes, y, ybytes) ||
            overlap(g->scratch, g->scratch_floats * sizeof(float), y, ybytes) ||
            overlap(g->scratch, g->scratch_floats * sizeof(float), x, xbytes))
                return -EINVAL;
        if (w->n_out == 0)
                return 0;
        r = use_stream(g, stream);
        if (r)
                return r;
        if (w->type == M40_GGML_F32) { /* the weights are the tile */
                s = cublasSgemm(g->h, CUBLAS_OP_T, CUBLAS_OP_N, (int)w->n_out, (int)n_tok,
                                (int)w->n_in, &one, (const float *)w->data,
                                (int)(w->row_bytes / sizeof(float)), x, (int)ldx, &zero, y,
                                (int)ldy);
                return s == CUBLAS_STATUS_SUCCESS ? 0 : blas_fail(s, "cublasSgemm");
        }
        r = plan(w->n_in, w->n_out, g->buf_floats, &t);
        if (r)
                return r;
        r = g->nbuf == 2 ? fork_ds(g, stream) : 0;
        for (uint32_t r0 = 0; r0 < w->n_out && !r; r0 += t.mt) {
                const uint32_t m = w->n_out - r0 < t.mt ? w->n_out - r0 : t.mt;

                for (uint32_t k0 = 0; k0 < w->n_in && !r; k0 += t.kc) {
                        const uint32_t kc = w->n_in - k0 < t.kc ? w->n_in - k0 : t.kc;
                        const int b = g->next;
                        float *buf = g->scratch + (size_t)b * g->buf_floats;

                        g->next = (b + 1) % g->nbuf;
                        if (g->nbuf == 2 && g->used[b])
                                r = ev_check(cudaStreamWaitEvent(g->ds, g->free_[b], 0),
                                             "wait for a tile buffer");
                        r = r ? r
                              : m40_cuda_dequant_rows(w, r0, m, k0, kc, buf, t.ldt,
                                                      g->nbuf == 2 ? g->ds : stream);
                        if (!r && g->nbuf == 2) {
                                r = ev_check(cudaEventRecord(g->ready[b], g->ds), "tile ready");
                                r = r ? r
                                      : ev_check(cudaStreamWaitEvent(stream, g->ready[b], 0),
                                                 "wait for a tile");
                        }
                        if (r)
                                break;
                        s = cublasSgemm(g->h, CUBLAS_OP_T, CUBLAS_OP_N, (int)m, (int)n_tok, (int)kc,
                                        &one, buf, (int)t.ldt, x + k0, (int)ldx, k0 ? &one : &zero,
                                        y + r0, (int)ldy);
                        if (s != CUBLAS_STATUS_SUCCESS)
                                return blas_fail(s, "cublasSgemm");
                        if (g->nbuf == 2) {
                                r = ev_check(cudaEventRecord(g->free_[b], stream), "tile used");
                                g->used[b] = true;
                        }
                }
        }
        if (!(g->open && g->open_stream == stream))
                g->forked = false; /* a call alone is its own run */
        return r;
}
