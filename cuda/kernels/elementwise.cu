/* cuda/kernels/elementwise.cu - embedding lookup, RMSNorm, residual and bias adds, SwiGLU and
 * greedy argmax on the GPU (contracts in ops.h).
 *
 * Computes, for n_tok rows of activations (row-major, ld floats apart):
 *   k_embed    y[t] = dequant(table row tokens[t])       grid n_tok, 128 threads; exact
 *                                                         (quant.cuh deq8 is exact);
 *              for the fused RMSNorm (matvec.h) also xg[t] = y[t] * g and each token's
 *              sum of squares as the producer's partial of column t
 *   k_rmsnorm  y[r] = x[idx[r]] / sqrt(mean(x^2) + eps) * w  grid n_rows, 128 to 1024
 *              threads (about 4 elements each);
 *              the sum of squares in double as the CPU; tolerance a few float ulps
 *   k_add, k_bias, k_swiglu  element-wise, grid-stride, 256 threads; add/bias exact,
 *              swiglu within the ulps of expf
 *   k_argmax   ret[r] = argmax x[r], lowest index on ties; grid n_rows, 256 threads; exact
 * Maxwell-clean: FP32 and FP64 adds, warp shuffles, shared memory. */
#include <errno.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "m40/error.h"
#include "cuda/kernels/matvec.h"
#include "cuda/kernels/ops.h"
#include "cuda/kernels/quant.cuh"

/* block_sum - the sum of v over the block (blockDim.x a multiple of 32, <= 1024). */
template <typename V> __device__ V block_sum(V v, V *sh)
{
        for (int off = 16; off; off >>= 1)
                v += __shfl_xor_sync(0xffffffffu, v, off);
        if ((threadIdx.x & 31) == 0)
                sh[threadIdx.x >> 5] = v;
        __syncthreads();
        v = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++)
                v += sh[w];
        __syncthreads();
        return v;
}

template <int T>
__global__ void k_embed(const uint8_t *__restrict__ table, size_t row_bytes, int dim,
                        const int32_t *__restrict__ tokens, float *__restrict__ y, size_t ld,
                        const float *__restrict__ g, float *__restrict__ xg, size_t ldxg,
                        float *partial, unsigned *count)
{
        __shared__ double sh[32];
        const uint8_t *row = table + (size_t)tokens[blockIdx.x] * row_bytes;
        float *out = y + (size_t)blockIdx.x * ld;
        double s = 0.0;

        for (int k = 8 * threadIdx.x; k < dim; k += 8 * blockDim.x) {
                float w[8];

                qt<T>::deq8(row, k, dim, w);
                for (int i = 0; i < 8 && k + i < dim; i++) {
                        out[k + i] = w[i];
                        s += (double)(w[i] * w[i]);
                        if (xg)
                                xg[(size_t)blockIdx.x * ldxg + k + i] = w[i] * g[k + i];
                }
        }
        if (!partial) /* the same for the whole grid */
                return;
        s = block_sum(s, sh);
        if (threadIdx.x == 0) { /* one partial per token: the producer's layout, one block */
                partial[blockIdx.x] = (float)s;
                if (blockIdx.x == 0)
                        *count = 1;
        }
}

template <int T>
static void launch_embed(const void *table, size_t row_bytes, uint32_t dim, const int32_t *tokens,
                         uint32_t n_tok, float *y, size_t ld, const struct m40_cuda_rms *rms,
                         cudaStream_t stream)
{
        k_embed<T><<<n_tok, 128, 0, stream>>>((const uint8_t *)table, row_bytes, (int)dim, tokens,
                                              y, ld, rms ? rms->g : NULL,
                                              rms && rms->g ? rms->xg : NULL, rms ? rms->ldxg : 0,
                                              rms ? rms->partial : NULL, rms ? rms->count : NULL);
}

extern "C" int m40_cuda_embed(const void *table, uint32_t type, size_t row_bytes, uint32_t dim,
                              const int32_t *tokens, uint32_t n_tok, float *y, size_t ld,
                              struct CUstream_st *stream)
{
        return m40_cuda_embed_rms(table, type, row_bytes, dim, tokens, n_tok, y, ld, NULL, stream);
}

extern "C" int m40_cuda_embed_rms(const void *table, uint32_t type, size_t row_bytes, uint32_t dim,
                                  const int32_t *tokens, uint32_t n_tok, float *y, size_t ld,
                                  const struct m40_cuda_rms *rms, struct CUstream_st *stream)
{
        if (!table || !tokens || !y || ld < dim || !dim)
                return -EINVAL;
        if (rms && (!rms->partial || !rms->count || n_tok > M40_CUDA_MATVEC_MAX_BATCH ||
                    (rms->g && (!rms->xg || rms->ldxg < dim))))
                return -EINVAL;
        if (!n_tok)
                return 0;
        switch (type) {
#define E(T)                                                                                       \
        case T:                                                                                    \
                launch_embed<T>(table, row_bytes, dim, tokens, n_tok, y, ld, rms, stream);         \
                break
                E(M40_GGML_F32);
                E(M40_GGML_F16);
                E(M40_GGML_BF16);
                E(M40_GGML_Q8_0);
                E(M40_GGML_Q4_0);
                E(M40_GGML_Q4_1);
                E(M40_GGML_Q5_0);
                E(M40_GGML_Q5_1);
                E(M40_GGML_Q4_K);
                E(M40_GGML_Q5_K);
                E(M40_GGML_Q6_K);
#undef E
        default:
                return M40_EUNSUPPORTED;
        }
        return m40_cuda_launch_status("embed");
}

__global__ void k_rmsnorm(const float *__restrict__ x, size_t ldx, const int32_t *__restrict__ idx,
                          const float *__restrict__ w, int n, float eps, float *y, size_t ldy)
{
        __shared__ double sh[32];
        const float *xr = x + (size_t)(idx ? idx[blockIdx.x] : (int32_t)blockIdx.x) * ldx;
        float *yr = y + (size_t)blockIdx.x * ldy;
        double s = 0.0;

#pragma unroll 4
        for (int i = threadIdx.x; i < n; i += blockDim.x)
                s += (double)(xr[i] * xr[i]);
        s = block_sum(s, sh);
        const float mean = (float)(s / (double)n);
        const float scale = 1.0f / sqrtf(mean + eps);

#pragma unroll 4
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
                float v = xr[i] * scale;

                yr[i] = w ? v * w[i] : v;
        }
}

extern "C" int m40_cuda_rmsnorm(const float *x, size_t ldx, const int32_t *idx, const float *w,
                                uint32_t n, float eps, uint32_t n_rows, float *y, size_t ldy,
                                struct CUstream_st *stream)
{
        if (!x || !y || !n || ldx < n || ldy < n)
                return -EINVAL;
        if (!n_rows)
                return 0;
        /* about 4 elements per thread: a row is a chain of dependent loads per thread,
         * and decode has one row per token (one block on the whole GPU) */
        const unsigned threads = n >= 4096 ? 1024 : n <= 512 ? 128 : ((n / 4 + 31) & ~31u);

        k_rmsnorm<<<n_rows, threads, 0, stream>>>(x, ldx, idx, w, (int)n, eps, y, ldy);
        return m40_cuda_launch_status("rmsnorm");
}

enum ew_op { EW_ADD, EW_BIAS, EW_SWIGLU };

template <int OP>
__global__ void k_elementwise(float *x, const float *__restrict__ y, size_t ld, int n, int n_tok)
{
        const long total = (long)n * n_tok;

        for (long e = blockIdx.x * (long)blockDim.x + threadIdx.x; e < total;
             e += (long)gridDim.x * blockDim.x) {
                const int t = (int)(e / n), i = (int)(e % n);
                float *p = x + (size_t)t * ld + i;

                if (OP == EW_ADD)
                        *p += y[(size_t)t * ld + i];
                else if (OP == EW_BIAS)
                        *p += y[i];
                else
                        *p = *p / (1.0f + expf(-*p)) * y[(size_t)t * ld + i];
        }
}

template <int OP>
static int launch_ew(float *x, const float *y, size_t ld, uint32_t n, uint32_t n_tok,
                     cudaStream_t stream, const char *what)
{
        const long total = (long)n * n_tok;
        long blocks = (total + 255) / 256;

        if (!x || !y || ld < n)
                return -EINVAL;
        if (!total)
                return 0;
        if (blocks > 4096)
                blocks = 4096;
        k_elementwise<OP><<<(unsigned)blocks, 256, 0, stream>>>(x, y, ld, (int)n, (int)n_tok);
        return m40_cuda_launch_status(what);
}

extern "C" int m40_cuda_add(float *x, const float *y, size_t ld, uint32_t n, uint32_t n_tok,
                            struct CUstream_st *stream)
{
        return launch_ew<EW_ADD>(x, y, ld, n, n_tok, stream, "add");
}

extern "C" int m40_cuda_bias(float *x, const float *b, size_t ld, uint32_t n, uint32_t n_tok,
                             struct CUstream_st *stream)
{
        return launch_ew<EW_BIAS>(x, b, ld, n, n_tok, stream, "bias");
}

extern "C" int m40_cuda_swiglu(float *gate, const float *up, size_t ld, uint32_t n, uint32_t n_tok,
                               struct CUstream_st *stream)
{
        return launch_ew<EW_SWIGLU>(gate, up, ld, n, n_tok, stream, "swiglu");
}

/* better - (v, i) beats (bv, bi): larger, or equal and lower index. */
__device__ __forceinline__ bool better(float v, int i, float bv, int bi)
{
        return v > bv || (v == bv && i < bi);
}

__global__ void k_argmax(const float *__restrict__ x, size_t ld, int n, int32_t *ret)
{
        __shared__ float sv[32];
        __shared__ int si[32];
        const float *row = x + (size_t)blockIdx.x * ld;
        float bv = -INFINITY;
        int bi = n;

        for (int i = threadIdx.x; i < n; i += blockDim.x)
                if (better(row[i], i, bv, bi))
                        bv = row[i], bi = i;
        for (int off = 16; off; off >>= 1) {
                const float v = __shfl_xor_sync(0xffffffffu, bv, off);
                const int j = __shfl_xor_sync(0xffffffffu, bi, off);

                if (better(v, j, bv, bi))
                        bv = v, bi = j;
        }
        if ((threadIdx.x & 31) == 0) {
                sv[threadIdx.x >> 5] = bv;
                si[threadIdx.x >> 5] = bi;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
                for (int w = 1; w < (int)(blockDim.x >> 5); w++)
                        if (better(sv[w], si[w], bv, bi))
                                bv = sv[w], bi = si[w];
                ret[blockIdx.x] = bi < n ? bi : 0;
        }
}

extern "C" int m40_cuda_argmax(const float *x, size_t ld, uint32_t n, uint32_t n_rows, int32_t *ret,
                               struct CUstream_st *stream)
{
        if (!x || !ret || !n || ld < n)
                return -EINVAL;
        if (!n_rows)
                return 0;
        k_argmax<<<n_rows, 256, 0, stream>>>(x, ld, (int)n, ret);
        return m40_cuda_launch_status("argmax");
}
