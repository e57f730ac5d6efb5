/* actq.h - activations as ggml's x86 CPU backend feeds them to weight matrices: the
 * CPU engine's M40_ACT_GGML mode (see engine.h).
 *
 * Before a matrix product, ggml converts the activation row to its weight type's
 * "vec_dot_type": Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for Q4_K/Q5_K/Q6_K,
 * f16 for F16, bf16 for BF16; F32 weights take float activations as they are. Owns:
 *   - the converted activation blocks (struct m40_act_q8_0, _q8_1, _q8_k);
 *   - the converters, as the llama.cpp build here runs them: quantize_row_q8_0/q8_1 of its
 *     AVX2 build (d = amax / 127 stored f16, q = x * (127 / amax) rounded half to even,
 *     Q8_1's s = f16(d * sum q)), quantize_row_q8_K_ref (q = -127 / max(x) * x rounded
 *     half to even, float d, sums of 16), f16/bf16 round to nearest even;
 *   - the dot products w . a (one weight row, one converted activation row) with the
 *     summation of ggml's kernels: for the quantized types its AVX2 ones, per block (32
 *     elements, or a K type's 256) eight int32 lanes, lane j holding the products of
 *     elements 4j..4j+3 of each 32 (times the sub-block scale for K types), scaled by
 *     fma(d_w * d_a, lane, acc[j]) into eight float accumulators; Q4_1/Q5_1/Q5_K add their
 *     minimum terms in one fma chain, Q4_K in four; the accumulators are reduced by
 *     m40_act_hsum8(). For F32/F16/BF16 weights its AVX-512 ggml_vec_dot_f32/f16/bf16
 *     (ggml_inl.h: 64 fma lanes per step and a fixed reduction tree).
 * The plain C kernels here are the specification; actq_x86.c holds AVX2 versions of the
 * integer ones that give the same bits (tests/engine/test_actq.c checks both). Which
 * ggml build is reproduced: the llama.cpp of llama-cpp-python 0.3.36 built for the x86-64
 * CPUs of this project's machines (GGML_NATIVE with AVX2, AVX-512 F/BF16/FP16/VNNI). */
#ifndef M40_ENGINE_ACTQ_H
#define M40_ENGINE_ACTQ_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include "quant.h"

/* The converted activation blocks. Their values are exactly ggml's block_q8_0, block_q8_1
 * and block_q8_K; the f16 scales of the first two are kept as the floats they round to
 * (ggml converts them back at every use), so kernels need not convert them per row. */
struct m40_act_q8_0 {
        float d;       /* f16 value of amax / 127 */
        int8_t qs[32]; /* x ~ q * d */
};
struct m40_act_q8_1 {
        float d; /* f16 value of amax / 127 */
        float s; /* f16 value of (amax / 127) * sum of qs */
        int8_t qs[32];
};
struct m40_act_q8_k {
        float d;             /* -max / 127, max the element of largest magnitude */
        int8_t qs[M40_QK_K]; /* x ~ q * d */
        int16_t bsums[16];   /* sums of qs in groups of 16 */
};
static_assert(sizeof(struct m40_act_q8_0) == 36, "act_q8_0");
static_assert(sizeof(struct m40_act_q8_1) == 40, "act_q8_1");
static_assert(sizeof(struct m40_act_q8_k) == 292, "act_q8_K");

/* m40_act_type - the type ggml converts activations to for weight type wtype: M40_GGML_Q8_0,
 * _Q8_1, _Q8_K, _F16, _BF16, or M40_GGML_F32 (unchanged, also for unknown types). */
uint32_t m40_act_type(uint32_t wtype);

/* m40_act_row_bytes - bytes of one activation row of n elements converted for weight type
 * wtype (n a multiple of its block size). F16 and BF16 rows are kept as floats holding the
 * rounded values (4 n bytes); F32 rows need no conversion (0: use the floats as they are). */
size_t m40_act_row_bytes(uint32_t wtype, size_t n);

/* m40_act_convert - convert the n floats at x for weight type wtype into dst
 * (m40_act_row_bytes(wtype, n) bytes). Does nothing for F32 weights. */
void m40_act_convert(uint32_t wtype, const float *x, void *dst, size_t n);

/* A dot product: weight row w (n elements of its type) times activation row a (converted
 * for that type; the float row itself for F32). */
typedef float (*m40_act_dot_fn)(const void *w, const void *a, size_t n);

/* m40_act_dot - the fastest kernel for weight type wtype on this CPU (AVX2 for the
 * quantized types where the CPU has AVX2 and FMA, the plain C kernel otherwise); NULL
 * for a type the engine does not support. */
m40_act_dot_fn m40_act_dot(uint32_t wtype);

/* m40_act_dot_ref - the plain C kernel, the specification (for tests); NULL as above. */
m40_act_dot_fn m40_act_dot_ref(uint32_t wtype);

/* m40_act_dot_x86 - the AVX2 kernel, or NULL when this build or CPU has none (tests). */
m40_act_dot_fn m40_act_dot_x86(uint32_t wtype);

/* hsum8 - the reduction of eight float accumulators that ends every kernel (ggml's
 * hsum_float_8: halves, then pairs, then the last two). */
static inline float m40_act_hsum8(const float a[8])
{
        return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/* m40_act_hsum4 - the reduction of Q4_K's four minimum-term accumulators. */
static inline float m40_act_hsum4(const float a[4])
{
        return (a[0] + a[2]) + (a[1] + a[3]);
}

#endif
