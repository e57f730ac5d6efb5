/* cuda/kernels/gemm.h - the prefill GEMM: a weight matrix times many activation columns with
 * cuBLAS SGEMM on dequantized weight tiles.
 *
 * Owns the contract of the large-batch matrix product the forward pass runs when a step
 * has many tokens (a prompt chunk): y (n_tok, n_out) = x (n_tok, n_in) * W^T, W in any
 * weight type of cuda/kernels/matvec.h, FP32 arithmetic, any number of columns. The same numbers
 * as m40_cuda_matmul() (cuda/kernels/matvec.h) and the CPU engine's m40_cpu_matmul() up to the
 * rounding of FP32 sums. How: tiles of W (rows x a range of k) are dequantized exactly
 * (cuda/kernels/quant.cuh's deq8, the CPU engine's m40_cpu_dequant() bit for bit) into an FP32
 * scratch buffer the caller gives, and cublasSgemm multiplies each tile by the whole batch
 * of columns, summing the k ranges of a row tile into y (beta 1). F32 weights need no tile:
 * SGEMM reads them in place. cuBLAS runs in FP32 math mode (CUBLAS_DEFAULT_MATH, never
 * TF32) and only in the workspace the caller gives (cublasSetWorkspace), so a call
 * allocates no device memory.
 *
 * Layouts (device memory): W and its alignment as in cuda/kernels/matvec.h; x n_tok rows of ldx
 * floats (ldx >= n_in), y n_tok rows of ldy floats (ldy >= n_out), token-major as the
 * forward pass keeps them; exactly y[t][0..n_out) for t < n_tok is written; x and y
 * must not overlap each other nor the scratch.
 *
 * Errors: 0 or -errno (-EINVAL: a shape, pointer or alignment outside the contract;
 * -ENOSPC: the scratch cannot hold one tile), M40_EUNSUPPORTED (a weight type the
 * kernels do not handle), M40_ECUDA (a failed launch or cuBLAS call; the message, with
 * cuBLAS's status name where it was cuBLAS, is in m40_cuda_gemm_last_error(), and in
 * m40_cuda_last_error() too when it was a kernel launch). Nothing prints. Plain C11;
 * includes no CUDA header. */
#ifndef M40_CUDA_GEMM_H
#define M40_CUDA_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "cuda/kernels/matvec.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;

/* Scratch for the dequantized tiles when the caller has no better figure: 16 Mi floats,
 * e.g. a whole 4096 x 4096 matrix, or 4096 rows of a 4096-wide one. Small beside an
 * M40's 24 GB (an 8B F16 model takes 16 GB) and large enough that each SGEMM has at
 * least M40_CUDA_GEMM_MIN_ROWS rows to spread over the SMs. */
#define M40_CUDA_GEMM_SCRATCH_DEFAULT ((uint64_t)64 << 20)
/* The rows a tile keeps when a matrix does not fit the scratch whole: it then splits
 * the k range first (4096 x 512 SGEMM tiles still fill an H100's 132 SMs), rows second. */
#define M40_CUDA_GEMM_MIN_ROWS 4096u
/* The k ranges of a split matrix are multiples of this: of every block size (32, 256)
 * and of deq8's 8 elements. */
#define M40_CUDA_GEMM_KSTEP 256u

/* The least cuBLAS workspace that keeps every routine from failing for want of it. */
#define M40_CUDA_GEMM_WORKSPACE_MIN ((uint64_t)16 << 10)

struct m40_cuda_gemm;

/* m40_cuda_gemm_workspace_bytes - the cuBLAS workspace to give m40_cuda_gemm_new() on a
 * GPU of compute capability cc_major (what cuBLAS itself would take: 32 MiB on Hopper
 * and newer, 4 MiB before). */
uint64_t m40_cuda_gemm_workspace_bytes(int cc_major);

/* m40_cuda_gemm_scratch_bytes - the scratch with which a (n_out, n_in) matrix of `type`
 * is done in one tile: n_out rows of n_in floats rounded up to 4 (0 for F32, which
 * needs no tile). A caller takes the largest over its matrices, capped at
 * M40_CUDA_GEMM_SCRATCH_DEFAULT, times m40_cuda_gemm_buffers(). */
uint64_t m40_cuda_gemm_scratch_bytes(uint32_t type, uint32_t n_in, uint32_t n_out);

/* m40_cuda_gemm_buffers - the tile buffers m40_cuda_gemm() cuts its scratch into (2: a
 * tile is dequantized while the SGEMM of the one before runs; 1 in a build without
 * that overlap). */
uint32_t m40_cuda_gemm_buffers(void);

/* m40_cuda_gemm_new - a cuBLAS handle on the current device set up for m40_cuda_gemm():
 * FP32 math mode, host scalars, workspace `workspace` (workspace_bytes, 256-byte aligned,
 * at least M40_CUDA_GEMM_WORKSPACE_MIN: less can make cuBLAS fail with
 * CUBLAS_STATUS_ALLOC_FAILED; m40_cuda_gemm_workspace_bytes() is the size to give), tiles
 * in `scratch` (scratch_bytes, 16-byte aligned; NULL and 0 when only F32 weights are
 * multiplied). Both buffers are device memory the caller owns (from the arena) and keeps
 * until m40_cuda_gemm_free(). Returns 0 and *ret; -EINVAL, -ENOMEM, M40_ECUDA (cuBLAS's
 * status name and words in err, which may be NULL). */
int m40_cuda_gemm_new(void *scratch, uint64_t scratch_bytes, void *workspace,
                      uint64_t workspace_bytes, struct m40_cuda_gemm **ret, char *err,
                      size_t errlen);

/* m40_cuda_gemm_free - destroy the cuBLAS handle (cuBLAS synchronizes the device).
 * Accepts NULL; returns NULL. */
struct m40_cuda_gemm *m40_cuda_gemm_free(struct m40_cuda_gemm *g);

/* m40_cuda_gemm - y (n_tok, ldy) = x (n_tok, ldx) * W^T for n_tok >= 1 columns,
 * asynchronous on `stream` (NULL: the legacy default stream): every tile is dequantized
 * and multiplied once per call, so W is read once whatever n_tok is. With two tile
 * buffers the dequantization runs on a stream of the handle's own, forked from `stream`
 * (an event) at the call's start, or once per run (below); the call's work is joined
 * back into `stream` by the time its last SGEMM is queued there, so a caller that
 * captures `stream` into a CUDA graph gets all of it. Calls on one handle must not run
 * concurrently (one thread, and one stream at a time: the scratch is reused in stream
 * order). Errors as above. */
int m40_cuda_gemm(struct m40_cuda_gemm *g, const struct m40_cuda_matrix *w, const float *x,
                  size_t ldx, float *y, size_t ldy, uint32_t n_tok, struct CUstream_st *stream);

/* m40_cuda_gemm_begin, m40_cuda_gemm_end - bracket a run of m40_cuda_gemm() calls on
 * `stream` (a forward pass): within it the dequantization stream forks once, at the
 * run's first call, so a call's first tile is dequantized while the previous call's last
 * SGEMM runs (and beside whatever else the caller queued in between: the weights do not
 * depend on it). Outside a run every call is a run of its own. Begin queues nothing (a
 * run without calls touches no stream); end closes the run. Accept NULL. */
void m40_cuda_gemm_begin(struct m40_cuda_gemm *g, struct CUstream_st *stream);
void m40_cuda_gemm_end(struct m40_cuda_gemm *g);

/* m40_cuda_dequant_rows - out[r][c] = W[r0 + r][k0 + c] for r < n_rows, c < n_k, the
 * exact dequantized weights (the CPU engine's m40_cpu_dequant() bit for bit), into a
 * row-major FP32 tile of ldo floats per row (ldo >= n_k); every element of those
 * n_rows x n_k is written, nothing else. k0 is a multiple of 8, k0 + n_k <= n_in,
 * r0 + n_rows <= n_out; n_rows or n_k 0 does nothing. One thread makes 8 consecutive
 * weights, consecutive threads consecutive runs of a row (coalesced stores, 16-byte
 * ones when out and ldo allow). Asynchronous on stream; allocates nothing; errors as
 * above (M40_ECUDA: m40_cuda_last_error() has the runtime's message). */
int m40_cuda_dequant_rows(const struct m40_cuda_matrix *w, uint32_t r0, uint32_t n_rows,
                          uint32_t k0, uint32_t n_k, float *out, size_t ldo,
                          struct CUstream_st *stream);

/* m40_cuda_gemm_last_error - "what: CUBLAS_STATUS_...: words" (or the runtime's message
 * for a failed launch) of the last M40_ECUDA returned by m40_cuda_gemm() or
 * m40_cuda_dequant_rows() on this thread, "" when none has. Borrowed until the next
 * failure on this thread; never NULL. */
const char *m40_cuda_gemm_last_error(void);

#ifdef __cplusplus
}
#endif

#endif
