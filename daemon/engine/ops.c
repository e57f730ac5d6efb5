/* ops.c - RMSNorm, RoPE, softmax, SwiGLU and paged attention on the CPU (see ops.h). */
#include "ops.h"

#include <math.h>
#include <string.h>

#include "quant.h"
#include "simd.h"

void m40_cpu_rmsnorm(const float *x, const float *w, size_t n, float eps, float *y)
{
        double sum = 0.0;

        for (size_t i = 0; i < n; i++)
                sum += (double)(x[i] * x[i]);
        const float mean = (float)(sum / (double)n);
        const float scale = 1.0f / sqrtf(mean + eps);

        for (size_t i = 0; i < n; i++) {
                y[i] = x[i] * scale;
                if (w)
                        y[i] *= w[i];
        }
}

void m40_cpu_rope(const struct m40_rope *r, float *x, uint32_t n_heads, uint32_t head_dim,
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

                        v[a] = x0 * c - x1 * s;
                        v[b] = x0 * s + x1 * c;
                }
        }
}

void m40_cpu_softmax(float *x, size_t n)
{
        float max = -INFINITY;
        double sum = 0.0;

        for (size_t i = 0; i < n; i++)
                if (x[i] > max)
                        max = x[i];
        for (size_t i = 0; i < n; i++) {
                x[i] = expf(x[i] - max);
                sum += (double)x[i];
        }
        const float inv = (float)(1.0 / sum);

        for (size_t i = 0; i < n; i++)
                x[i] *= inv;
}

void m40_cpu_swiglu(float *gate, const float *up, size_t n)
{
        for (size_t i = 0; i < n; i++)
                gate[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

static inline float h2f(uint16_t h)
{
#ifdef M40_HAVE_FLOAT16
        _Float16 f;

        memcpy(&f, &h, 2);
        return (float)f;
#else
        return m40_cpu_f16_to_f32(h);
#endif
}

M40_CLONES void m40_cpu_attention_head(const struct m40_kv_view *kv, const float *q, uint32_t kvh,
                                       uint32_t head_dim, uint32_t pos, float scale, float *scores,
                                       float *out)
{
        const size_t hoff = (size_t)kvh * head_dim;

        for (uint32_t p = 0; p <= pos; p++) {
                const size_t base = (size_t)kv->table[p / kv->page_tokens] * kv->page_stride +
                                    (size_t)(p % kv->page_tokens) * kv->kv_stride + hoff;
                const uint16_t *k = kv->k_base + base;
                float s = 0.0f;

                for (uint32_t i = 0; i < head_dim; i++)
                        s += q[i] * h2f(k[i]);
                scores[p] = s * scale;
        }
        m40_cpu_softmax(scores, (size_t)pos + 1);
        for (uint32_t i = 0; i < head_dim; i++)
                out[i] = 0.0f;
        for (uint32_t p = 0; p <= pos; p++) {
                const size_t base = (size_t)kv->table[p / kv->page_tokens] * kv->page_stride +
                                    (size_t)(p % kv->page_tokens) * kv->kv_stride + hoff;
                const uint16_t *v = kv->v_base + base;
                const float w = scores[p];

                for (uint32_t i = 0; i < head_dim; i++)
                        out[i] += w * h2f(v[i]);
        }
}
