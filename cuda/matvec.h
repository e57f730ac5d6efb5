/* cuda/matvec.h - weight matrix times activations on the GPU (host launchers).
 *
 * Owns the public contract of the matrix-vector and small-batch matrix products the
 * decoder runs for every weight: y (batch, n_out) = x (batch, n_in) * W^T, W in any
 * weight type of DESIGN.md section 6 (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K
 * Q6_K) stored as in the GGUF file, FP32 arithmetic, batch 1..64. The same contract as
 * the CPU engine's m40_cpu_matmul() (daemon/engine/matmul.h), which is its reference;
 * the kernels are in matvec.cuh.
 *
 * Layouts (all device memory):
 *   W  n_out rows of row_bytes bytes; 16-byte aligned; row_bytes a multiple of the
 *      type's block bytes' alignment (2, or 4 for F32 and Q4_1, 8 for Q5_1, 16 for
 *      Q4_K and Q5_K: what consecutive GGUF rows have), and at least one row's blocks
 *   x  batch rows of ldx floats, 16-byte aligned, ldx >= n_in, ldx % 4 == 0
 *   y  batch rows of ldy floats, ldy >= n_out; exactly y[c][0..n_out) for c < batch is
 *      written. x and y must not overlap.
 * n_in is a multiple of the type's block size (32, or 256 for the K types; any n_in
 * for F32/F16/BF16). Kernels read x only below n_in and W only inside its rows (and,
 * at most, the rest of the aligned 16-byte words that hold them).
 *
 * Launchers are asynchronous on `stream` (NULL: the legacy default stream), allocate
 * nothing, and return 0; -EINVAL for a shape or alignment outside the contract;
 * M40_EUNSUPPORTED for a type they do not handle; M40_ECUDA when the launch failed
 * (m40_cuda_last_error() then has the runtime's message). They run on the current
 * device, sm_52 or newer. Plain C11; includes no CUDA header. */
#ifndef M40_CUDA_MATVEC_H
#define M40_CUDA_MATVEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/launch.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;

#define M40_CUDA_MATMUL_MAX_BATCH 64 /* most activation columns of one call */
#define M40_CUDA_MATVEC_MAX_BATCH 8  /* most columns of the matrix-vector kernel */

/* A weight matrix on the device: a borrowed view, like the CPU engine's m40_weight. */
struct m40_cuda_matrix {
        const void *data; /* n_out rows of row_bytes */
        uint32_t type;    /* enum m40_ggml_type */
        uint32_t n_in;    /* ne[0]: row length, elements */
        uint32_t n_out;   /* ne[1]: rows */
        size_t row_bytes;
};

/* m40_cuda_matmul - y = x * W^T for batch 1..64 columns, picking the kernel: the
 * matrix-vector kernel up to M40_CUDA_MATVEC_MAX_BATCH columns, the tiled one above. */
int m40_cuda_matmul(const struct m40_cuda_matrix *w, const float *x, size_t ldx, float *y,
                    size_t ldy, uint32_t batch, struct CUstream_st *stream);

/* m40_cuda_matmul_n - y[i] = x * w[i]^T for the n (1..M40_CUDA_MATMUL_MAX_MATS)
 * matrices of w, which share type, n_in and row_bytes (a layer's q, k and v; gate and
 * up), batch 1..64: up to M40_CUDA_MATVEC_MAX_BATCH columns in one launch of the
 * matrix-vector kernel (fewer launches, and small matrices like k and v fill the GPU
 * together), above it one tiled launch per matrix. Each y[i] (ldy[i]) is as for
 * m40_cuda_matmul(); outputs must not overlap each other or x. -EINVAL also when the
 * matrices differ in type, n_in or row_bytes. */
#define M40_CUDA_MATMUL_MAX_MATS 3
int m40_cuda_matmul_n(const struct m40_cuda_matrix *w, uint32_t n, const float *x, size_t ldx,
                      float *const *y, const size_t *ldy, uint32_t batch,
                      struct CUstream_st *stream);

/* m40_cuda_matvec - the matrix-vector kernel (k_matvec: weights streamed once, rows
 * per warp), batch 1..M40_CUDA_MATVEC_MAX_BATCH. */
int m40_cuda_matvec(const struct m40_cuda_matrix *w, const float *x, size_t ldx, float *y,
                    size_t ldy, uint32_t batch, struct CUstream_st *stream);

/* m40_cuda_matvec_add - as m40_cuda_matvec(), but adds the product to y (y += x W^T: a
 * residual connection without a separate add; the same sums, then one FP32 add). */
int m40_cuda_matvec_add(const struct m40_cuda_matrix *w, const float *x, size_t ldx, float *y,
                        size_t ldy, uint32_t batch, struct CUstream_st *stream);

/* m40_cuda_matmul_tiled - the tiled kernel (k_matmul: 64-row tiles dequantized into
 * shared memory), batch 1..M40_CUDA_MATMUL_MAX_BATCH. */
int m40_cuda_matmul_tiled(const struct m40_cuda_matrix *w, const float *x, size_t ldx, float *y,
                          size_t ldy, uint32_t batch, struct CUstream_st *stream);

/* m40_cuda_matmul_supports - whether the launchers handle GGML type id type. */
bool m40_cuda_matmul_supports(uint32_t type);

#ifdef __cplusplus
}
#endif

#endif
