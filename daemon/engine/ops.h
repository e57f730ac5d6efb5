/* ops.h - the element-wise and per-head operations of a llama/qwen2 layer, on the CPU.
 *
 * Owns RMSNorm, RoPE (GGUF "normal" adjacent-pair layout for llama, NEOX half-split
 * layout for qwen2), softmax, SwiGLU and single-token attention over a paged f16 KV cache.
 * Each follows ggml's CPU operator of the same name (accumulation precision included) and
 * is the reference its CUDA kernel is tested against (M40_ACT_F32). The *_ggml variants
 * (ops_ggml.c) are the M40_ACT_GGML mode's: ggml's exact roundings and summation orders. */
#ifndef M40_ENGINE_OPS_H
#define M40_ENGINE_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "types.h"

/* m40_cpu_rmsnorm - y[i] = x[i] / sqrt(mean(x^2) + eps) * w[i] for i < n (mean summed in
 * double, as ggml); w may be NULL (no weight). y may equal x. */
void m40_cpu_rmsnorm(const float *x, const float *w, size_t n, float eps, float *y);

/* m40_cpu_rope - rotate x (n_heads, head_dim) in place for position pos. theta for pair i
 * is pos * freq_base^(-2i/n_rot) * freq_scale / freq_factors[i], stepped in float as
 * ggml_rope_cache_init() does. */
void m40_cpu_rope(const struct m40_rope *r, float *x, uint32_t n_heads, uint32_t head_dim,
                  int32_t pos);

/* m40_cpu_softmax - x[i] = exp(x[i] - max) / sum, the sum in double. */
void m40_cpu_softmax(float *x, size_t n);

/* m40_cpu_swiglu - gate[i] = silu(gate[i]) * up[i], silu(v) = v / (1 + exp(-v)). */
void m40_cpu_swiglu(float *gate, const float *up, size_t n);

/* One sequence's KV cache as attention reads it: position p of kv head h lives at
 * k_pages[table[p / page_tokens]] + ((p % page_tokens) * kv_stride + h * head_dim). */
struct m40_kv_view {
        const uint16_t *k_base; /* f16 storage of one layer: page i at base + i * page_stride */
        const uint16_t *v_base;
        size_t page_stride; /* elements between pages */
        size_t kv_stride;   /* elements between positions in a page (n_kv_heads * head_dim) */
        uint32_t page_tokens;
        const uint32_t *table; /* page ids of the sequence, in position order */
};

/* m40_cpu_attention_head - one query head at position pos attending over positions
 * 0..pos of kv head kvh: out (head_dim) = softmax(q . K^T * scale) V. scores has room for
 * pos + 1 floats. */
void m40_cpu_attention_head(const struct m40_kv_view *kv, const float *q, uint32_t kvh,
                            uint32_t head_dim, uint32_t pos, float scale, float *scores,
                            float *out);

/* ---- M40_ACT_GGML mode (ops_ggml.c): the same operations as ggml's x86 CPU backend
 * computes them, bit for bit (its AVX-512 build, as llama.cpp's CPU graph runs them
 * without flash attention, one token at a time). ---- */

/* m40_cpu_rope_ggml - m40_cpu_rope() with ggml's fused products: x0' = fma(x0, cos,
 * -(x1 sin)), x1' = fma(x0, sin, x1 cos). */
void m40_cpu_rope_ggml(const struct m40_rope *r, float *x, uint32_t n_heads, uint32_t head_dim,
                       int32_t pos);

/* m40_cpu_ggml_expf - ggml_v_expf(): e^x by ggml's range reduction and degree-5
 * polynomial (within 2 ulp of e^x; 0 below about -104, inf above about 88.7). */
float m40_cpu_ggml_expf(float x);

/* m40_cpu_swiglu_ggml - gate[i] = silu(gate[i]) * up[i] over n_tok rows of n, silu(v) =
 * v / (1 + ggml_expf(-v)) in blocks of 16 from each row's start, v / (1 + expf(-v)) for
 * a row's last n % 16 (ggml_vec_swiglu_f32). */
void m40_cpu_swiglu_ggml(float *gate, const float *up, size_t n_tok, size_t n);

/* m40_cpu_attention_head_ggml - m40_cpu_attention_head() as llama.cpp's CPU graph computes
 * it: q rounded to f16; q . k by ggml_vec_dot_f16 (64-element steps into 4 x 16 fma lanes,
 * a fixed tree, the rest in double); softmax by ggml_expf with per-16 sums in double;
 * the weights rounded to f16 and dotted with V the same way (positions in the lanes).
 * scratch has room for pos + 1 + 66 * head_dim floats. */
void m40_cpu_attention_head_ggml(const struct m40_kv_view *kv, const float *q, uint32_t kvh,
                                 uint32_t head_dim, uint32_t pos, float scale, float *scratch,
                                 float *out);

#endif
