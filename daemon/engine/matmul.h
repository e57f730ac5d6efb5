/* matmul.h - weight matrices of any supported GGML type times activations.
 *
 * Owns the CPU engine's matrix products of struct m40_weight (types.h, a borrowed view of
 * one 2-D GGUF tensor), the operation that dominates decoding, in both activation modes:
 * m40_cpu_matmul() keeps activations float32 (M40_ACT_F32, the contract the CUDA kernels
 * implement); m40_cpu_matmul_ggml() converts them first as ggml's CPU backend does
 * (M40_ACT_GGML, actq.h), which is what llama.cpp computes and faster on CPUs. */
#ifndef M40_ENGINE_MATMUL_H
#define M40_ENGINE_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "pool.h"
#include "types.h"

#define M40_MATMUL_CHUNK 1024 /* elements dequantized at a time (a multiple of 256) */

/* m40_cpu_dot - sum of a[i] * b[i] over n floats, in the engine's fixed summation order
 * (16 interleaved partial sums, then a fixed tree): every caller gets the same rounding. */
float m40_cpu_dot(const float *a, const float *b, size_t n);

/* m40_cpu_matmul_rows - the serial kernel: for rows [r0, r1) and tokens t < n_tok,
 * y[t * ldy + o] = dot(dequant(W[o]), x[t * n_in ..]). x: (n_tok, n_in), y: (n_tok, ldy). */
void m40_cpu_matmul_rows(const struct m40_weight *w, const float *x, size_t n_tok, float *y,
                         size_t ldy, uint32_t r0, uint32_t r1);

/* m40_cpu_matmul - y (n_tok, n_out) = x (n_tok, n_in) times W^T, rows split over the
 * pool's threads. Each y element is computed identically whatever n_tok and the thread
 * count, so a sequence's results do not depend on what it is batched with. */
void m40_cpu_matmul(struct m40_pool *pool, const struct m40_weight *w, const float *x, size_t n_tok,
                    float *y);

/* m40_cpu_matmul_ggml - y (n_tok, n_out) = x (n_tok, n_in) times W^T as ggml's CPU backend
 * computes one token's product (actq.h): each x row is converted for W's type into
 * scratch (n_tok * m40_act_row_bytes(type, n_in) bytes; unused for F32 weights), then
 * each output is one ggml dot product. Results do not depend on n_tok, batching or the
 * thread count. */
void m40_cpu_matmul_ggml(struct m40_pool *pool, const struct m40_weight *w, const float *x,
                         size_t n_tok, float *y, void *scratch);

#endif
