/* cuda/kernels/matvec.h - weight matrix times activations on the GPU (host launchers).
 *
 * Owns the public contract of the matrix-vector and small-batch matrix products the
 * decoder runs for every weight: y (batch, n_out) = x (batch, n_in) * W^T, W in any
 * weight type of DESIGN.md section 6 (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K
 * Q6_K) in the device layout (GGUF's blocks; the rows of Q8_0, Q4_0, Q4_1, Q5_0, Q5_1
 * and Q6_K split into their fields by m40_cuda_relayout() first: cuda/kernels/quant.cuh says
 * why and how), FP32 arithmetic, batch 1..64. The same contract as
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

#include "cuda/runtime/launch.h"
#include "cuda/kernels/ops.h" /* struct m40_cuda_range */

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

/* m40_cuda_matvec_steps_max - the most tokens a forward step over matrices of GGML type
 * `type` runs on the matrix-vector kernel and its fused epilogues (1..
 * M40_CUDA_MATVEC_MAX_BATCH); wider steps take m40_cuda_mmq(). A build-time choice per
 * family (knobs MV_FWD_MAX for the quantized types, MV_FWD_MAX_F for F32/F16/BF16; the
 * measured A/B is in tests/bench/RESULTS.md). */
uint32_t m40_cuda_matvec_steps_max(uint32_t type);

/* m40_cuda_matmul - y = x * W^T for batch 1..64 columns, picking the kernel: the
 * matrix-vector kernel up to M40_CUDA_MATVEC_MAX_BATCH columns, the batched one (not
 * split) above. */
int m40_cuda_matmul(const struct m40_cuda_matrix *w, const float *x, size_t ldx, float *y,
                    size_t ldy, uint32_t batch, struct CUstream_st *stream);

/* m40_cuda_matmul_n - y[i] = x * w[i]^T for the n (1..M40_CUDA_MATMUL_MAX_MATS)
 * matrices of w, which share type, n_in and row_bytes (a layer's q, k and v; gate and
 * up), batch 1..64: up to M40_CUDA_MATVEC_MAX_BATCH columns in one launch of the
 * matrix-vector kernel (fewer launches, and small matrices like k and v fill the GPU
 * together), above it one launch of the batched kernel for all of them (not split). Each y[i]
 * (ldy[i]) is as for m40_cuda_matmul(); outputs must not overlap each other or x. -EINVAL also when
 * the matrices differ in type, n_in or row_bytes. */
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

/* m40_cuda_matmul_tiled - the batched kernel (m40_cuda_mmq() below) without split
 * partial sums, batch 1..M40_CUDA_MATMUL_MAX_BATCH. */
int m40_cuda_matmul_tiled(const struct m40_cuda_matrix *w, const float *x, size_t ldx, float *y,
                          size_t ldy, uint32_t batch, struct CUstream_st *stream);

/* m40_cuda_mmq - y[i] = x * w[i]^T (add: y[i] += x * w[i]^T) for the n (1..
 * M40_CUDA_MATMUL_MAX_MATS) matrices of w, which share type, n_in and row_bytes, and
 * batch 1..M40_CUDA_MMQ_MAX_BATCH columns (decode steps of many sequences, prompt
 * chunks): one launch of the batched kernel (cuda/kernels/mmq.cuh: weight tiles dequantized
 * once per step into shared memory, FP32 register tiles over all columns), W read once
 * per 64 columns. `part` (device scratch, 16-byte aligned, part_bytes; NULL and 0: none)
 * lets it fill the GPU when its tiles are too few: its first M40_CUDA_MMQ_SEM_BYTES are
 * counters that must be zero before the first call (cudaMemset once) and that every
 * call leaves zero, the rest holds partial sums: the resident blocks share the tiles'
 * k steps evenly and the block that finishes a tile last adds its pieces up (mmq.cuh,
 * the shared schedule), or, where that does not fit, k is split over a grid of tiles and
 * a second launch adds the splits up (a split takes batch x the matrices' n_out floats);
 * either in a fixed order: deterministic. Each y[i] (ldy[i]) as for m40_cuda_matmul();
 * outputs must not overlap each other, x or part. Errors as m40_cuda_matmul_n(), -EINVAL
 * also for a misaligned part. */
#define M40_CUDA_MMQ_MAX_BATCH 65536
#define M40_CUDA_MMQ_SEM_BYTES ((size_t)16384)
int m40_cuda_mmq(const struct m40_cuda_matrix *w, uint32_t n, const float *x, size_t ldx,
                 float *const *y, const size_t *ldy, uint32_t batch, bool add, float *part,
                 size_t part_bytes, struct CUstream_st *stream);

/* The RMSNorm fused into the matrix-vector kernel (decode steps, batch 1..
 * M40_CUDA_MATVEC_MAX_BATCH), so that a layer needs no normalization kernel of its own.
 * With xn = x / rms(x) * g: xn W^T = ((x * g) W^T) / rms(x), so the product that updates
 * the residual stream x (m40_cuda_matvec_add_rms()) also writes xg = x * g for the next
 * norm's weight g and partial sums of x^2 per column; the products that read the
 * normalized x (m40_cuda_matmul_n_rms()) multiply xg, add the partials up (in a fixed
 * order: deterministic) and scale each sum by 1 / sqrt(mean(x[c]^2) + eps). That is
 * ops.h's m40_cuda_rmsnorm() followed by the product up to FP32 rounding (the scale
 * applied after the sums instead of before: a few 1e-7 relative). One struct carries
 * what both sides share; the producer's partials stay valid until the next producer. */
#define M40_CUDA_RMS_PARTIAL_BYTES(n_out) ((size_t)(n_out)*8 * sizeof(float))
struct m40_cuda_rms {
        const float *g;       /* producer: the next norm's weight (n_out floats), or NULL */
        float *xg;            /* producer: batch rows of ldxg floats, y * g (when g is set) */
        size_t ldxg;          /* >= n_out */
        float *partial;       /* partial sums, partial_bytes */
        size_t partial_bytes; /* at least M40_CUDA_RMS_PARTIAL_BYTES(the producer's n_out);
                               * the consumer may read all of it */
        unsigned *count;      /* one word: how many partials the producer left */
        float eps;            /* consumer: the norm's epsilon */
        /* Not the norm's: an L2 hint that every launcher taking this struct carries. The
         * blocks that start last (about one per SM) ask the L2 for these ranges (one line
         * per whole 128-byte step from p, as ops.h's m40_cuda_prefetch_l2()) as their
         * products end, so that DRAM fetches what the step's next kernel reads first
         * while this one drains and the next one starts. No effect on any result; p
         * NULL: none. */
        struct m40_cuda_range next[2];
};

/* m40_cuda_matvec_add_rms - m40_cuda_matvec_add(), then, for the updated y[c][0 ..
 * n_out): rms->xg[c] = y[c] * rms->g (when g is set) and the partial sums of y^2 in
 * rms->partial and rms->count. -EINVAL also for a short partial buffer or an xg that
 * overlaps x or y. */
int m40_cuda_matvec_add_rms(const struct m40_cuda_matrix *w, const float *x, size_t ldx, float *y,
                            size_t ldy, uint32_t batch, const struct m40_cuda_rms *rms,
                            struct CUstream_st *stream);

/* m40_cuda_matmul_n_rms - m40_cuda_matmul_n() of the normalized x from xg and the
 * partials above (m40_cuda_matvec_add_rms()'s or m40_cuda_embed_rms()'s; rms->eps, and
 * n_in as the norm's length): y[i][c] = (xg[c] W[i]^T) / sqrt(mean(x[c]^2) + eps), one
 * launch, batch 1..M40_CUDA_MATVEC_MAX_BATCH. */
int m40_cuda_matmul_n_rms(const struct m40_cuda_matrix *w, uint32_t n, const float *xg, size_t ldx,
                          const struct m40_cuda_rms *rms, float *const *y, const size_t *ldy,
                          uint32_t batch, struct CUstream_st *stream);

/* m40_cuda_matmul_swiglu_rms - the feed-forward's first half from the fused RMSNorm's
 * xg and partials (as m40_cuda_matmul_n_rms()): y[c][i] = silu(g) * u with g and u the
 * normalized x[c] times row i of gate and of up (same type, n_in, row_bytes, n_out),
 * batch 1..M40_CUDA_MATVEC_MAX_BATCH, bit for bit m40_cuda_matmul_n_rms() of both
 * followed by ops.h's m40_cuda_swiglu(). One launch that reads each gate row with its up
 * row, where the kernel's rows per warp allow (2 or more at this type and batch);
 * otherwise exactly those two calls, with y_up (also ldy apart) as the second output:
 * y_up is scratch either way. Outputs must not overlap each other or xg. */
int m40_cuda_matmul_swiglu_rms(const struct m40_cuda_matrix *gate, const struct m40_cuda_matrix *up,
                               const float *xg, size_t ldx, const struct m40_cuda_rms *rms,
                               float *y, float *y_up, size_t ldy, uint32_t batch,
                               struct CUstream_st *stream);

/* m40_cuda_matmul_qkv_rope - an attention block's input for a decode step: q, k, v
 * (w[0], w[1], w[2]: same type, n_in, row_bytes; q's rows n_heads heads of head_dim,
 * k's and v's n_kv_heads heads) times the normalized x from the fused RMSNorm's xg and
 * partials (as m40_cuda_matmul_n_rms()), then RoPE of q and k at each column's position
 * and k and v appended to each column's KV slot: bit for bit m40_cuda_matmul_n_rms() of
 * the three followed by ops.h's m40_cuda_rope_store() (y[0] q, y[1] k, y[2] v; ldy[1] ==
 * ldy[2]; all three rows as that pair leaves them). One launch, where the kernel's rows
 * per warp hold the rotation pairs (llama layout, 2 or more rows per warp at this type
 * and batch); otherwise (NEOX pairs, one row per warp) exactly those two calls. kv as for
 * m40_cuda_rope_store(), its kv_dim >= k's rows; batch 1..M40_CUDA_MATVEC_MAX_BATCH;
 * outputs must not overlap each other or xg. */
struct m40_cuda_rope;
struct m40_cuda_kv;
int m40_cuda_matmul_qkv_rope(const struct m40_cuda_matrix *w, const float *xg, size_t ldx,
                             const struct m40_cuda_rms *rms, const struct m40_cuda_rope *rope,
                             const struct m40_cuda_kv *kv, uint32_t head_dim, float *const *y,
                             const size_t *ldy, uint32_t batch, struct CUstream_st *stream);

/* m40_cuda_relayout - rewrite w's rows, as loaded from the GGUF file, into the device
 * layout the kernels here read (quant.cuh: the fields of each block type whose blocks
 * are not 16-byte multiples, one after another in every row; other types are left as
 * they are), in place. bounce is device scratch of bounce_bytes, at least one row
 * (m40_cuda_relayout_bounce()); rows go through it in as large batches as fit. Asynchronous
 * on stream; the data must not be read before the stream gets past it. Returns 0;
 * -EINVAL for a NULL argument, a shape against the layout above, or a bounce smaller
 * than a row; M40_ECUDA when a copy or launch failed. Run it once per tensor: twice
 * scrambles the rows. */
int m40_cuda_relayout(const struct m40_cuda_matrix *w, void *bounce, size_t bounce_bytes,
                      struct CUstream_st *stream);

/* m40_cuda_relayout_bounce - the bounce bytes m40_cuda_relayout() needs for w: one row
 * for the types it rewrites, 0 for the rest. */
size_t m40_cuda_relayout_bounce(const struct m40_cuda_matrix *w);

/* m40_cuda_matmul_supports - whether the launchers handle GGML type id type. */
bool m40_cuda_matmul_supports(uint32_t type);

#ifdef __cplusplus
}
#endif

#endif
