/* quantize.h - float to GGML weight formats, as ggml's reference code writes them.
 *
 * Owns the conversions that the test tools use to produce model files: f32 -> f16 and
 * f32 -> bf16 (round to nearest even, as GGML_FP32_TO_FP16 / GGML_FP32_TO_BF16), and the
 * row quantizers for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K, each byte-exact to
 * ggml's quantize_row_<type>_ref() (what llama.cpp's quantize writes when no importance
 * matrix is given), provided the floating point is evaluated without FMA contraction
 * (the meson file builds this with -ffp-contract=off). Dequantizers exist for the tests.
 *
 * Rows are k elements, k a multiple of the type's block size (32, or 256 for the K
 * types); the output is k / block_size consecutive blocks in GGUF's layout. These are
 * test tools: nothing here is on the daemon's load path. */
#ifndef M40_TESTS_QUANTIZE_H
#define M40_TESTS_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

/* Scalar conversions. f16: NaN becomes 0x7e00 with the sign kept, overflow becomes inf,
 * subnormals are rounded exactly. bf16: NaN is kept with the quiet bit forced. */
uint16_t m40_f16_from_f32(float f);
float m40_f16_to_f32(uint16_t h);
uint16_t m40_bf16_from_f32(float f);
float m40_bf16_to_f32(uint16_t h);

/* Row quantizers: x[k] -> blocks at y. k must be a multiple of the block size. */
void m40_q8_0_quantize(const float *x, void *y, size_t k);
void m40_q4_0_quantize(const float *x, void *y, size_t k);
void m40_q4_1_quantize(const float *x, void *y, size_t k);
void m40_q5_0_quantize(const float *x, void *y, size_t k);
void m40_q5_1_quantize(const float *x, void *y, size_t k);
void m40_q4_k_quantize(const float *x, void *y, size_t k);
void m40_q5_k_quantize(const float *x, void *y, size_t k);
void m40_q6_k_quantize(const float *x, void *y, size_t k);

/* m40_row_quantize - convert the k floats at x to ggml type t (an enum m40_ggml_type:
 * F32, F16, BF16 or one of the quantized types above) at y. Returns 0, M40_EUNSUPPORTED
 * for any other type, M40_EFORMAT when k is not a multiple of t's block size. */
int m40_row_quantize(uint32_t t, const float *x, void *y, size_t k);

/* m40_row_dequantize - the inverse: k elements of type t at x to floats at y; same
 * returns. Follows ggml's dequantize_row_<type>(). */
int m40_row_dequantize(uint32_t t, const void *x, float *y, size_t k);

#endif
