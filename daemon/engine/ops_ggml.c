/* ops_ggml.c - the layer operations of M40_ACT_GGML mode (see ops.h): RoPE, SwiGLU and
 * attention exactly as ggml's x86 CPU backend (AVX-512 build) computes them for one token.
 *
 * llama.cpp's CPU graph without flash attention computes a head's attention as two matrix
 * products on the f16 KV cache, so their float operand is converted to f16 first (q, then
 * the softmax weights), and each product is ggml_vec_dot_f16: 4 x 16 fma lanes over
 * 64-element steps, reduced (acc0 + acc2) + (acc1 + acc3) and then by
 * _mm512_reduce_add_ps's tree, the remainder added in double. Its KV rows are padded to a
 * multiple of 256 positions whose weights are 0, so every position lands in a lane and the
 * padding adds exact zeros. The softmax exponentials are ggml_v_expf() (reproduced here
 * with fmaf), summed 16 at a time into a double. RoPE rotates with the products its
 * compiler fused (x0 c - x1 s and x0 s + x1 c, each with the first product fused). Every
 * fused operation here is an explicit fmaf(); nothing else may be contracted. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ggml_inl.h"
#include "ops.h"
#include "quant.h"
#include "simd.h"

/* pow2 - 2^n as a double, for |n| <= 192. */
M40_INLINE double pow2(int n)
{
        const uint64_t bits = (uint64_t)(n + 1023) << 52;
        double d;

        memcpy(&d, &bits, 8);
        return d;
}

M40_INLINE float ggml_expf(float x)
{
        const float r = 0x1.8p23f;
        const float z = fmaf(x, 0x1.715476p+0f, r);
        const float n = z - r;
        const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));

        if (!(fabsf(n) <= 192.0f)) /* out of range (or NaN) */
                return n != n ? n : n <= 0.0f ? 0.0f : INFINITY;
        const float u = b * b;
        const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                  fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                             u, fmaf(0x1.ffffecp-1f, b, 1.0f));
        /* _mm512_scalef_ps: j * 2^n rounded once (the double product is exact) */
        return (float)((double)j * pow2((int)n));
}

float m40_cpu_ggml_expf(float x)
{
        return ggml_expf(x);
}

M40_CLONES void m40_cpu_swiglu_ggml(float *gate, const float *up, size_t n_tok, size_t n)
{
        const size_t nv = n - n % 16; /* the vector part of each row */

        for (size_t t = 0; t < n_tok; t++, gate += n, up += n) {
                size_t i = 0;

                for (; i < nv; i++)
                        gate[i] = gate[i] / (1.0f + ggml_expf(0.0f - gate[i])) * up[i];
                for (; i < n; i++)
                        gate[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
        }
}

void m40_cpu_rope_ggml(const struct m40_rope *r, float *x, uint32_t n_heads, uint32_t head_dim,
                       int32_t pos)
{
        const float theta_scale = powf(r->freq_base, -2.0f / (float)r->n_rot);
        float cache[2 * 256]; /* cos, sin per pair; n_rot <= 512 is checked at load */
        float theta = (float)pos;

        for (uint32_t i0 = 0; i0 < r->n_rot; i0 += 2) {
                const float ff = r->freq_factors ? r->freq_factors[i0 / 2] : 1.0f;
                const float t = r->freq_scale * (theta / ff);

                cache[i0] = cosf(t);
                cache[i0 + 1] = sinf(t);
                theta *= theta_scale;
        }
        for (uint32_t h = 0; h < n_heads; h++) {
                float *v = x + (size_t)h * head_dim;

                for (uint32_t i0 = 0; i0 < r->n_rot; i0 += 2) {
                        const float c = cache[i0], s = cache[i0 + 1];
                        const uint32_t a = r->neox ? i0 / 2 : i0;
                        const uint32_t b = r->neox ? i0 / 2 + r->n_rot / 2 : i0 + 1;
                        const float x0 = v[a], x1 = v[b];

                        v[a] = fmaf(x0, c, -(x1 * s));
                        v[b] = fmaf(x0, s, x1 * c);
                }
        }
}

static inline float round_f16(float x)
{
        return ggml_h2f(m40_cpu_f32_to_f16(x));
}

static const uint16_t *kv_row(const struct m40_kv_view *kv, const uint16_t *base, uint32_t p,
                              size_t hoff)
{
        return base + (size_t)kv->table[p / kv->page_tokens] * kv->page_stride +
               (size_t)(p % kv->page_tokens) * kv->kv_stride + hoff;
}

M40_CLONES void m40_cpu_attention_head_ggml(const struct m40_kv_view *kv, const float *q,
                                            uint32_t kvh, uint32_t head_dim, uint32_t pos,
                                            float scale, float *scratch, float *out)
{
        const size_t hoff = (size_t)kvh * head_dim;
        float *qh = scratch;         /* (head_dim) q rounded to f16 */
        float *zero = qh + head_dim; /* (head_dim) zeros: the lanes past pos */
        float *w = zero + head_dim;  /* (pos + 1) scores, then weights */
        float *acc = w + pos + 1;    /* (64 lanes, head_dim) of the V product */
        float max = -INFINITY, v[16];
        double sum = 0.0;

        for (uint32_t i = 0; i < head_dim; i++)
                qh[i] = round_f16(q[i]);
        for (uint32_t p = 0; p <= pos; p++) {
                w[p] = ggml_dot_f16(qh, kv_row(kv, kv->k_base, p, hoff), head_dim) * scale;
                max = w[p] > max ? w[p] : max;
        }
        for (uint32_t p0 = 0; p0 <= pos; p0 += 16) {
                for (uint32_t l = 0; l < 16; l++) {
                        v[l] = p0 + l <= pos ? ggml_expf(w[p0 + l] - max) : 0.0f;
                        if (p0 + l <= pos)
                                w[p0 + l] = v[l];
                }
                sum += (double)ggml_reduce16(v);
        }
        const float inv = (float)(1.0 / sum);

        /* lane p % 64 of the V product; the lanes past pos are zero and not stored */
        const uint32_t n_lanes = pos < 63 ? pos + 1 : 64;

        memset(acc, 0, (size_t)n_lanes * head_dim * sizeof(float));
        for (uint32_t p = 0; p <= pos; p++) {
                const float wp = round_f16(w[p] * inv);
                const uint16_t *vr = kv_row(kv, kv->v_base, p, hoff);
                float *a = acc + (size_t)(p % 64) * head_dim;

                for (uint32_t i = 0; i < head_dim; i++)
                        a[i] = fmaf(wp, ggml_h2f(vr[i]), a[i]);
        }
        /* ggml_fold64 and ggml_reduce16 for every output element at once, in place */
        const float *lane[64];

        memset(zero, 0, head_dim * sizeof(float));
        for (uint32_t l = 0; l < 64; l++)
                lane[l] = l < n_lanes ? acc + (size_t)l * head_dim : zero;
        for (uint32_t l = 0; l < 16; l++) {
                float *d = acc + (size_t)l * head_dim;
                const float *a0 = lane[l], *a1 = lane[16 + l], *a2 = lane[32 + l],
                            *a3 = lane[48 + l];

                for (uint32_t i = 0; i < head_dim; i++)
                        d[i] = (a0[i] + a2[i]) + (a1[i] + a3[i]);
        }
        for (uint32_t w8 = 8; w8 >= 4; w8 /= 2)
                for (uint32_t l = 0; l < w8; l++) {
                        float *d = acc + (size_t)l * head_dim;
                        const float *hi = acc + (size_t)(l + w8) * head_dim;

                        for (uint32_t i = 0; i < head_dim; i++)
                                d[i] = hi[i] + d[i];
                }
        for (uint32_t i = 0; i < head_dim; i++)
                out[i] = (acc[i] + acc[2 * (size_t)head_dim + i]) +
                         (acc[(size_t)head_dim + i] + acc[3 * (size_t)head_dim + i]);
}
