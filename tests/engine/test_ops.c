/* test_ops.c - RMSNorm, RoPE (normal and NEOX, partial rotation), softmax, SwiGLU and
 * paged attention against float64 references, and the KV page manager's accounting.
 * Exit 0 pass, 1 fail. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kv.h"
#include "engine/ops.h"
#include "engine/quant.h"
#include "tests/check.h"

static uint64_t rng = 42;

static double frand(double a)
{
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return ((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0) * a;
}

static void test_rmsnorm(void)
{
        const size_t sizes[] = {1, 8, 64, 172, 576, 2048};
        double worst = 0;

        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
                size_t n = sizes[s];
                float *x = malloc(n * 4), *w = malloc(n * 4), *y = malloc(n * 4);
                double ss = 0;

                for (size_t i = 0; i < n; i++) {
                        x[i] = (float)frand(3);
                        w[i] = (float)frand(2);
                        ss += (double)x[i] * x[i];
                }
                m40_cpu_rmsnorm(x, w, n, 1e-5f, y);
                for (size_t i = 0; i < n; i++) {
                        double ref = x[i] / sqrt(ss / n + 1e-5) * w[i];
                        double e = fabs(y[i] - ref) / (fabs(ref) + 1e-6);
                        worst = e > worst ? e : worst;
                }
                free(x);
                free(w);
                free(y);
        }
        CHECK(worst < 2e-6, "rmsnorm relative error %.3g", worst);
        printf("rmsnorm: worst relative error %.2g (bound 2e-6)\n", worst);
}

static void test_rope(bool neox, uint32_t head_dim, uint32_t n_rot, int32_t pos, double tol)
{
        const uint32_t n_heads = 3;
        struct m40_rope r = {
                .n_rot = n_rot, .freq_base = 10000.0f, .freq_scale = 1.0f, .neox = neox};
        float x[3 * 128];
        double ref[3 * 128], worst = 0;

        for (uint32_t i = 0; i < n_heads * head_dim; i++)
                ref[i] = x[i] = (float)frand(1);
        for (uint32_t h = 0; h < n_heads; h++)
                for (uint32_t i = 0; i < n_rot / 2; i++) {
                        double theta = pos * pow(10000.0, -2.0 * i / n_rot);
                        uint32_t a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
                        double x0 = x[h * head_dim + a], x1 = x[h * head_dim + b];

                        ref[h * head_dim + a] = x0 * cos(theta) - x1 * sin(theta);
                        ref[h * head_dim + b] = x0 * sin(theta) + x1 * cos(theta);
                }
        m40_cpu_rope(&r, x, n_heads, head_dim, pos);
        for (uint32_t i = 0; i < n_heads * head_dim; i++) {
                double e = fabs(x[i] - ref[i]);
                worst = e > worst ? e : worst;
        }
        CHECK(worst < tol, "rope %s hd %u rot %u pos %d: error %.3g", neox ? "neox" : "norm",
              head_dim, n_rot, pos, worst);
        printf("rope %-4s head_dim %3u n_rot %3u pos %5d: max error %.2g (bound %.0g)\n",
               neox ? "neox" : "norm", head_dim, n_rot, pos, worst, tol);
}

static void test_softmax_swiglu(void)
{
        float x[1000], g[100], u[100];
        double ref[1000], m = -1e30, s = 0, worst = 0;

        for (int i = 0; i < 1000; i++) {
                x[i] = (float)frand(20);
                m = x[i] > m ? x[i] : m;
        }
        for (int i = 0; i < 1000; i++)
                s += ref[i] = exp(x[i] - m);
        m40_cpu_softmax(x, 1000);
        for (int i = 0; i < 1000; i++) {
                double e = fabs(x[i] - ref[i] / s) / (ref[i] / s + 1e-30);
                worst = e > worst ? e : worst;
        }
        CHECK(worst < 1e-5, "softmax relative error %.3g", worst);
        printf("softmax: worst relative error %.2g (bound 1e-5)\n", worst);
        worst = 0;
        for (int i = 0; i < 100; i++) {
                g[i] = (float)frand(8);
                u[i] = (float)frand(3);
                ref[i] = g[i] / (1 + exp(-(double)g[i])) * u[i];
        }
        m40_cpu_swiglu(g, u, 100);
        for (int i = 0; i < 100; i++) {
                double e = fabs(g[i] - ref[i]) / (fabs(ref[i]) + 1e-6);
                worst = e > worst ? e : worst;
        }
        CHECK(worst < 1e-5, "swiglu relative error %.3g", worst);
        printf("swiglu: worst relative error %.2g (bound 1e-5)\n", worst);
}

/* attention over a shuffled page table against float64 over the same f16 K/V values */
static void test_attention(uint32_t head_dim, uint32_t n_kv, uint32_t page_tokens, uint32_t pos)
{
        const uint32_t n_pages_seq = pos / page_tokens + 1, n_pages = n_pages_seq + 5;
        const size_t kv_stride = (size_t)n_kv * head_dim, page_stride = page_tokens * kv_stride;
        uint16_t *k = calloc(n_pages * page_stride, 2), *v = calloc(n_pages * page_stride, 2);
        uint32_t *table = malloc(n_pages_seq * 4);
        float *q = malloc(head_dim * 4), *out = malloc(head_dim * 4);
        float *scores = malloc((pos + 1) * 4);
        double *sc = malloc((pos + 1) * sizeof(double)), worst = 0;
        const float scale = 1.0f / sqrtf((float)head_dim);

        for (uint32_t i = 0; i < n_pages_seq; i++)
                table[i] = (i * 7 + 3) % n_pages; /* distinct while n_pages is coprime to 7 */
        for (size_t i = 0; i < n_pages * page_stride; i++) {
                k[i] = m40_cpu_f32_to_f16((float)frand(2));
                v[i] = m40_cpu_f32_to_f16((float)frand(2));
        }
        for (uint32_t i = 0; i < head_dim; i++)
                q[i] = (float)frand(2);
        for (uint32_t kvh = 0; kvh < n_kv; kvh++) {
                struct m40_kv_view view = {k, v, page_stride, kv_stride, page_tokens, table};
                double m = -1e300, s = 0;

                m40_cpu_attention_head(&view, q, kvh, head_dim, pos, scale, scores, out);
                for (uint32_t p = 0; p <= pos; p++) {
                        size_t b = table[p / page_tokens] * page_stride +
                                   (p % page_tokens) * kv_stride + (size_t)kvh * head_dim;
                        double d = 0;

                        for (uint32_t i = 0; i < head_dim; i++)
                                d += (double)q[i] * m40_cpu_f16_to_f32(k[b + i]);
                        sc[p] = d * scale;
                        m = sc[p] > m ? sc[p] : m;
                }
                for (uint32_t p = 0; p <= pos; p++)
                        s += sc[p] = exp(sc[p] - m);
                for (uint32_t i = 0; i < head_dim; i++) {
                        double o = 0;

                        for (uint32_t p = 0; p <= pos; p++) {
                                size_t b = table[p / page_tokens] * page_stride +
                                           (p % page_tokens) * kv_stride + (size_t)kvh * head_dim;
                                o += sc[p] / s * m40_cpu_f16_to_f32(v[b + i]);
                        }
                        double e = fabs(out[i] - o);
                        worst = e > worst ? e : worst;
                }
        }
        CHECK(worst < 2e-5, "attention hd %u pos %u: error %.3g", head_dim, pos, worst);
        printf("attention head_dim %3u kv_heads %u page %2u pos %4u: max error %.2g (bound 2e-5)\n",
               head_dim, n_kv, page_tokens, pos, worst);
        free(k);
        free(v);
        free(table);
        free(q);
        free(out);
        free(scores);
        free(sc);
}

static void test_kv_pages(void)
{
        struct m40_kv_pages *p;
        struct m40_kv_table t[5] = {{0}};

        CHECK(m40_kv_pages_new(10, 16, &p) == 0, "kv pool");
        CHECK(m40_kv_table_reserve(p, &t[0], 1) == 0 && t[0].n_pages == 1, "1 token, 1 page");
        CHECK(m40_kv_table_reserve(p, &t[0], 16) == 0 && t[0].n_pages == 1, "16 tokens, 1 page");
        CHECK(m40_kv_table_reserve(p, &t[0], 17) == 0 && t[0].n_pages == 2, "17 tokens, 2 pages");
        CHECK(m40_kv_table_reserve(p, &t[1], 100) == 0 && t[1].n_pages == 7, "100 tokens, 7");
        CHECK(m40_kv_pages_used(p) == 9, "9 used");
        CHECK(m40_kv_table_reserve(p, &t[2], 33) == -ENOSPC && t[2].n_pages == 0,
              "no space leaves the table unchanged");
        CHECK(m40_kv_pages_used(p) == 9, "still 9 used after a failed reserve");
        m40_kv_table_release(p, &t[1]);
        CHECK(m40_kv_pages_used(p) == 2 && t[1].n_pages == 0, "release returns pages");
        CHECK(m40_kv_table_reserve(p, &t[2], 33) == 0, "reuse");
        for (int i = 0; i < 5; i++)
                m40_kv_table_done(p, &t[i]);
        CHECK(m40_kv_pages_used(p) == 0, "all pages back");
        m40_kv_pages_free(p);
        printf("kv page manager accounting: %s\n", failures ? "see failures" : "ok");
}

int main(void)
{
        test_rmsnorm();
        test_rope(false, 64, 64, 1, 1e-6);
        test_rope(false, 64, 64, 37, 1e-5);
        test_rope(true, 64, 64, 37, 1e-5);
        test_rope(true, 128, 64, 200, 5e-5); /* partial rotation */
        test_rope(false, 8, 8, 1000, 5e-4);
        test_rope(false, 128, 128, 4000, 3e-3); /* float theta stepping, as ggml */
        test_softmax_swiglu();
        test_attention(64, 2, 16, 0);
        test_attention(64, 3, 16, 100);
        test_attention(8, 4, 5, 47);
        test_attention(128, 1, 32, 700);
        test_kv_pages();
        printf("%s\n", failures ? "FAILED" : "all passed");
        return failures ? 1 : 0;
}
