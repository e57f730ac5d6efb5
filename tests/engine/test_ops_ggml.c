/* test_ops_ggml.c - the M40_ACT_GGML layer operations (daemon/engine/ops_ggml.c) against
 * float64 references: ggml's exp over its whole range, RoPE in both layouts, SwiGLU on
 * ragged rows, and attention over paged f16 KV for several head sizes and positions
 * (q and the softmax weights are rounded to f16, so attention is held to 2e-3 of the
 * largest |V|). Bit-exactness against llama.cpp itself is the conformance suite's job.
 * Exit 0 pass, 1 fail. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/ops.h"
#include "engine/quant.h"
#include "tests/check.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;

static double frand(double a)
{
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return ((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0) * a;
}

static void test_expf(void)
{
        double worst = 0.0;

        CHECK(m40_cpu_ggml_expf(0.0f) == 1.0f, "exp(0)");
        CHECK(m40_cpu_ggml_expf(-200.0f) == 0.0f && m40_cpu_ggml_expf(-INFINITY) == 0.0f,
              "exp of large negatives");
        CHECK(isinf(m40_cpu_ggml_expf(200.0f)), "exp(200)");
        CHECK(isnan(m40_cpu_ggml_expf(NAN)), "exp(NaN)");
        for (int i = 0; i < 200000; i++) {
                const float x = (float)frand(87.0);
                const double want = exp((double)x), got = m40_cpu_ggml_expf(x);
                const double err = fabs(got - want) / want;

                worst = err > worst ? err : worst;
        }
        /* ggml states 1.45 ulp + 0.5: within 2 ulp of float (2^-23 relative) */
        CHECK(worst < 2.0 * 0x1p-23, "ggml expf relative error %.3g", worst);
        printf("ggml expf: max relative error %.2e (%.2f ulp)\n", worst, worst / 0x1p-23);
}

static void test_rope(void)
{
        for (int neox = 0; neox < 2; neox++) {
                const struct m40_rope r = {
                        .n_rot = 64, .freq_base = 10000.0f, .freq_scale = 1.0f, .neox = neox};
                float x[4 * 64], y[4 * 64];
                double worst = 0.0;

                for (int pos = 0; pos < 3000; pos += 37) {
                        for (int i = 0; i < 4 * 64; i++)
                                x[i] = y[i] = (float)frand(3.0);
                        m40_cpu_rope(&r, x, 4, 64, pos);
                        m40_cpu_rope_ggml(&r, y, 4, 64, pos);
                        for (int i = 0; i < 4 * 64; i++) {
                                const double e = fabs((double)x[i] - y[i]);

                                worst = e > worst ? e : worst;
                        }
                }
                /* the two differ only in which products are fused: an ulp or two */
                CHECK(worst < 2e-6, "rope_ggml (%s) off the float rope by %.3g",
                      neox ? "neox" : "normal", worst);
        }
}

static void test_swiglu(void)
{
        enum { N = 77, T = 3 };
        float g[N * T], u[N * T];
        double worst = 0.0;

        for (int i = 0; i < N * T; i++) {
                g[i] = (float)frand(12.0);
                u[i] = (float)frand(2.0);
        }
        float g0[N * T];

        memcpy(g0, g, sizeof(g));
        m40_cpu_swiglu_ggml(g, u, T, N);
        for (int i = 0; i < N * T; i++) {
                const double want = g0[i] / (1.0 + exp(-(double)g0[i])) * u[i];
                const double e = fabs(g[i] - want) / (fabs(want) + 1e-30);

                if (fabs(want) > 1e-20)
                        worst = e > worst ? e : worst;
        }
        CHECK(worst < 1e-6, "swiglu_ggml relative error %.3g", worst);
}

/* attention over pages of 4 positions scattered in a pool, against float64 */
static void test_attention(uint32_t head_dim, uint32_t pos)
{
        enum { PAGE = 4, N_KV = 2, MAX_POS = 300 };
        const uint32_t n_pages = MAX_POS / PAGE + 1, kv_stride = N_KV * head_dim;
        const size_t page_stride = (size_t)PAGE * kv_stride;
        uint16_t *k = calloc((size_t)n_pages * page_stride, 2);
        uint16_t *v = calloc((size_t)n_pages * page_stride, 2);
        uint32_t table[MAX_POS / PAGE + 1];
        float *scratch = malloc((pos + 1 + 66 * (size_t)head_dim) * sizeof(float));
        float q[256], out[256];
        double sc[MAX_POS + 1];

        for (uint32_t i = 0; i < n_pages; i++)
                table[i] = (i * 11 + 5) % n_pages;
        for (size_t i = 0; i < (size_t)n_pages * page_stride; i++) {
                k[i] = m40_cpu_f32_to_f16((float)frand(1.0));
                v[i] = m40_cpu_f32_to_f16((float)frand(1.0));
        }
        for (uint32_t i = 0; i < head_dim; i++)
                q[i] = (float)frand(1.0);
        const struct m40_kv_view kv = {k, v, page_stride, kv_stride, PAGE, table};
        const float scale = 1.0f / sqrtf((float)head_dim);

        for (uint32_t h = 0; h < N_KV; h++) {
                double m = -1e300, s = 0.0, worst = 0.0;

                m40_cpu_attention_head_ggml(&kv, q, h, head_dim, pos, scale, scratch, out);
                for (uint32_t p = 0; p <= pos; p++) {
                        const size_t b = table[p / PAGE] * page_stride + (p % PAGE) * kv_stride +
                                         (size_t)h * head_dim;
                        double d = 0.0;

                        for (uint32_t i = 0; i < head_dim; i++)
                                d += (double)q[i] * m40_cpu_f16_to_f32(k[b + i]);
                        sc[p] = d * scale;
                        m = sc[p] > m ? sc[p] : m;
                }
                for (uint32_t p = 0; p <= pos; p++)
                        s += sc[p] = exp(sc[p] - m);
                for (uint32_t i = 0; i < head_dim; i++) {
                        double o = 0.0;

                        for (uint32_t p = 0; p <= pos; p++) {
                                const size_t b = table[p / PAGE] * page_stride +
                                                 (p % PAGE) * kv_stride + (size_t)h * head_dim;

                                o += sc[p] / s * m40_cpu_f16_to_f32(v[b + i]);
                        }
                        worst = fabs(o - out[i]) > worst ? fabs(o - out[i]) : worst;
                }
                CHECK(worst < 2e-3, "attention_ggml head_dim %u pos %u: off by %.3g", head_dim, pos,
                      worst);
        }
        free(k);
        free(v);
        free(scratch);
}

int main(void)
{
        static const uint32_t dims[] = {8, 64, 96, 128};
        static const uint32_t poss[] = {0, 1, 15, 16, 63, 64, 65, 200, 300};

        test_expf();
        test_rope();
        test_swiglu();
        for (size_t d = 0; d < sizeof(dims) / sizeof(dims[0]); d++)
                for (size_t p = 0; p < sizeof(poss) / sizeof(poss[0]); p++)
                        test_attention(dims[d], poss[p]);
        printf(failures ? "FAILED (%d)\n" : "all passed\n", failures);
        return failures ? 1 : 0;
}
