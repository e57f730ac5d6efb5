/* test_dequant.c - every dequantizer against an independent scalar reading of its format,
 * and the matmul kernel against a float64 reference.
 *
 * The reader below addresses each element by its index from the block layout (which byte,
 * which nibble, which bit, which scale) instead of walking the block like ggml's loops, so
 * a wrong shift or stride in dequant_inl.h shows up. Random blocks: random bytes, with the
 * f16 scales replaced by random finite values. Exit 0 pass, 1 fail. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/matmul.h"
#include "engine/quant.h"
#include "model/ggml_type.h"
#include "tests/check.h"

static uint64_t rng = 0x1234567;

static uint32_t rnd(void)
{
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return (uint32_t)(rng >> 11);
}

static float frand(float a)
{
        return ((float)(rnd() & 0xffffff) / 16777216.0f * 2.0f - 1.0f) * a;
}

static uint16_t rand_f16(float a)
{
        return m40_cpu_f32_to_f16(frand(a));
}

static float h(uint16_t x)
{
        return m40_cpu_f16_to_f32(x);
}

static void put16(uint8_t *p, uint16_t v)
{
        memcpy(p, &v, 2);
}

static uint16_t get16(const uint8_t *p)
{
        uint16_t v;

        memcpy(&v, p, 2);
        return v;
}

/* scale_min - 6-bit scale and min of sub-block s of a Q4_K/Q5_K scales[12] array:
 * bytes 0-3 low 6 bits: scales 0-3; bytes 4-7 low 6 bits: mins 0-3; bytes 8-11: low
 * nibble scale 4-7, high nibble min 4-7, whose top 2 bits are bytes 0-3 / 4-7 bits 6-7. */
static void scale_min(const uint8_t *sc, int s, int *scale, int *min)
{
        if (s < 4) {
                *scale = sc[s] & 63;
                *min = sc[s + 4] & 63;
        } else {
                *scale = (sc[s + 4] & 15) | ((sc[s - 4] >> 6) << 4);
                *min = (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
        }
}

/* ref_elem - element j of the block at b, read from the format description. */
static double ref_elem(uint32_t t, const uint8_t *b, int j)
{
        switch (t) {
        case M40_GGML_Q4_0: {
                int nib = j < 16 ? b[2 + j] & 15 : b[2 + j - 16] >> 4;
                return (double)(nib - 8) * h(get16(b));
        }
        case M40_GGML_Q4_1: {
                int nib = j < 16 ? b[4 + j] & 15 : b[4 + j - 16] >> 4;
                return (double)h(get16(b)) * nib + h(get16(b + 2));
        }
        case M40_GGML_Q5_0: {
                uint32_t qh = (uint32_t)b[2] | (uint32_t)b[3] << 8 | (uint32_t)b[4] << 16 |
                              (uint32_t)b[5] << 24;
                int nib = j < 16 ? b[6 + j] & 15 : b[6 + j - 16] >> 4;
                int q = nib | (int)((qh >> j) & 1) << 4;
                return (double)(q - 16) * h(get16(b));
        }
        case M40_GGML_Q5_1: {
                uint32_t qh = (uint32_t)b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16 |
                              (uint32_t)b[7] << 24;
                int nib = j < 16 ? b[8 + j] & 15 : b[8 + j - 16] >> 4;
                int q = nib | (int)((qh >> j) & 1) << 4;
                return (double)h(get16(b)) * q + h(get16(b + 2));
        }
        case M40_GGML_Q8_0:
                return (double)(int8_t)b[2 + j] * h(get16(b));
        case M40_GGML_Q4_K:
        case M40_GGML_Q5_K: {
                const bool five = t == M40_GGML_Q5_K;
                const uint8_t *qs = b + 16 + (five ? 32 : 0);
                int c = j / 64, l = j % 64, sc, mn;
                int nib = l < 32 ? qs[c * 32 + l] & 15 : qs[c * 32 + l - 32] >> 4;

                if (five)
                        nib += ((b[16 + l % 32] >> (2 * c + (l >= 32))) & 1) * 16;
                scale_min(b + 4, j / 32, &sc, &mn);
                return (double)(h(get16(b)) * sc) * nib - (double)(h(get16(b + 2)) * mn);
        }
        case M40_GGML_Q6_K: {
                const uint8_t *ql = b, *qh = b + 128;
                const int8_t *scales = (const int8_t *)(b + 192);
                int n = j / 128, r = j % 128, qd = r / 32, l = r % 32;
                int byte = ql[n * 64 + l + (qd & 1) * 32];
                int nib = qd < 2 ? byte & 15 : byte >> 4;
                int hb = (qh[n * 32 + l] >> (2 * qd)) & 3;
                int q = (nib | hb << 4) - 32;
                return (double)(h(get16(b + 208)) * scales[n * 8 + qd * 2 + l / 16]) * q;
        }
        case M40_GGML_F16:
                return h(get16(b));
        case M40_GGML_BF16:
                return m40_cpu_bf16_to_f32(get16(b));
        case M40_GGML_F32: {
                float f;

                memcpy(&f, b, 4);
                return f;
        }
        }
        return NAN;
}

/* random_blocks - n blocks of t with random bytes and sane random scales. */
static void random_blocks(uint32_t t, uint8_t *p, size_t n)
{
        const struct m40_ggml_type_info *ti = m40_ggml_type_info(t);

        for (size_t i = 0; i < n * ti->type_size; i++)
                p[i] = (uint8_t)rnd();
        for (size_t i = 0; i < n; i++) {
                uint8_t *b = p + i * ti->type_size;

                switch (t) {
                case M40_GGML_Q4_0:
                case M40_GGML_Q5_0:
                case M40_GGML_Q8_0:
                        put16(b, rand_f16(0.1f));
                        break;
                case M40_GGML_Q4_1:
                case M40_GGML_Q5_1:
                case M40_GGML_Q4_K:
                case M40_GGML_Q5_K:
                        put16(b, rand_f16(0.1f));
                        put16(b + 2, rand_f16(0.1f));
                        break;
                case M40_GGML_Q6_K:
                        put16(b + 208, rand_f16(0.01f));
                        break;
                case M40_GGML_F16:
                        put16(b, rand_f16(4.0f));
                        break;
                case M40_GGML_BF16:
                        put16(b, (uint16_t)(rand_f16(4.0f) & 0x7fff)); /* finite bf16 */
                        break;
                case M40_GGML_F32: {
                        float f = frand(4.0f);

                        memcpy(b, &f, 4);
                        break;
                }
                }
        }
}

static const uint32_t types[] = {M40_GGML_F32,  M40_GGML_F16,  M40_GGML_BF16, M40_GGML_Q8_0,
                                 M40_GGML_Q4_0, M40_GGML_Q4_1, M40_GGML_Q5_0, M40_GGML_Q5_1,
                                 M40_GGML_Q4_K, M40_GGML_Q5_K, M40_GGML_Q6_K};

static void test_dequant(uint32_t t)
{
        const struct m40_ggml_type_info *ti = m40_ggml_type_info(t);
        const size_t nb = 4096 / ti->block_size + 3;
        uint8_t *blocks = malloc(nb * ti->type_size);
        float *y = malloc(nb * ti->block_size * sizeof(float));
        int bad = 0;

        random_blocks(t, blocks, nb);
        m40_cpu_dequant(t, blocks, y, nb);
        for (size_t i = 0; i < nb && bad < 5; i++)
                for (uint32_t j = 0; j < ti->block_size; j++) {
                        double want = ref_elem(t, blocks + i * ti->type_size, (int)j);
                        double got = y[i * ti->block_size + j];

                        /* FMA contraction may move the last bit: allow 2 ulps */
                        if (fabs(got - want) > 2.5e-7 * (fabs(want) + 1e-3)) {
                                CHECK(0, "%s block %zu elem %u: got %.9g want %.9g", ti->name, i, j,
                                      got, want);
                                bad++;
                        }
                }
        printf("dequant %-5s %zu blocks: %s\n", ti->name, nb, bad ? "FAIL" : "ok");
        free(blocks);
        free(y);
}

static void test_f16(void)
{
        int bad = 0;

        for (uint32_t x = 0; x < 65536; x++) {
                float f = m40_cpu_f16_to_f32((uint16_t)x);
                uint16_t back = m40_cpu_f32_to_f16(f);

                if (f == f && back != x)
                        bad++;
#ifdef __FLT16_MAX__
                _Float16 hv;
                uint16_t u = (uint16_t)x;

                memcpy(&hv, &u, 2);
                if (f == f && f != (float)hv)
                        bad++;
#endif
        }
        for (int i = 0; i < 100000; i++) {
                float f = frand(60000.0f) * (i % 3 ? 1e-4f : 1.0f);
                uint16_t r = m40_cpu_f32_to_f16(f), mag = r & 0x7fff;

                /* nearest: no neighbour of the result is closer to f */
                if (mag > 0 && mag < 0x7bff &&
                    (fabsf(f - m40_cpu_f16_to_f32(r)) > fabsf(f - m40_cpu_f16_to_f32(r + 1)) ||
                     fabsf(f - m40_cpu_f16_to_f32(r)) > fabsf(f - m40_cpu_f16_to_f32(r - 1))))
                        bad++;
#ifdef __FLT16_MAX__
                _Float16 hv = (_Float16)f;
                uint16_t u;

                memcpy(&u, &hv, 2);
                if (m40_cpu_f32_to_f16(f) != u)
                        bad++;
#endif
        }
        CHECK(bad == 0, "f16 conversions: %d mismatches", bad);
        printf("f16 round trip and rounding: %s\n", bad ? "FAIL" : "ok");
}

/* matmul against float64 on ragged shapes, several thread counts, and batch independence */
static void test_matmul(uint32_t t, uint32_t n_in, uint32_t n_out, struct m40_pool **pools)
{
        const struct m40_ggml_type_info *ti = m40_ggml_type_info(t);
        const size_t nbr = n_in / ti->block_size, rb = nbr * ti->type_size;
        const size_t n_tok = 19;
        uint8_t *w = malloc(rb * n_out);
        float *wf = malloc((size_t)n_in * n_out * sizeof(float));
        float *x = malloc(n_tok * n_in * sizeof(float));
        float *y = malloc(n_tok * n_out * sizeof(float));
        float *y1 = malloc(n_out * sizeof(float));
        struct m40_weight mw = {w, t, n_in, n_out, rb};
        double worst = 0;
        int diff_batch = 0;

        random_blocks(t, w, nbr * n_out);
        for (uint32_t o = 0; o < n_out; o++)
                m40_cpu_dequant(t, w + o * rb, wf + (size_t)o * n_in, nbr);
        for (size_t i = 0; i < n_tok * n_in; i++)
                x[i] = frand(1.0f);
        for (int p = 0; p < 3; p++) {
                m40_cpu_matmul(pools[p], &mw, x, n_tok, y);
                for (size_t tk = 0; tk < n_tok; tk++)
                        for (uint32_t o = 0; o < n_out; o++) {
                                double ref = 0, mag = 0;

                                for (uint32_t i = 0; i < n_in; i++) {
                                        ref += (double)wf[(size_t)o * n_in + i] * x[tk * n_in + i];
                                        mag += fabs((double)wf[(size_t)o * n_in + i] *
                                                    x[tk * n_in + i]);
                                }
                                double err = fabs(y[tk * n_out + o] - ref) / (mag + 1e-30);
                                if (err > worst)
                                        worst = err;
                        }
                /* one token alone gives bit-identical rows */
                for (size_t tk = 0; tk < n_tok; tk += 6) {
                        m40_cpu_matmul(pools[p], &mw, x + tk * n_in, 1, y1);
                        diff_batch += memcmp(y1, y + tk * n_out, n_out * sizeof(float)) != 0;
                }
        }
        CHECK(worst < 1e-5, "matmul %s %ux%u: relative error %.3g", ti->name, n_out, n_in, worst);
        CHECK(diff_batch == 0, "matmul %s: batched rows differ from single-token rows", ti->name);
        printf("matmul  %-5s %5u x %-5u rel err %.2g (bound 1e-5), batch-independent: %s\n",
               ti->name, n_out, n_in, worst, diff_batch ? "NO" : "yes");
        free(w);
        free(wf);
        free(x);
        free(y);
        free(y1);
}

int main(void)
{
        struct m40_pool *pools[3];

        test_f16();
        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
                test_dequant(types[i]);
        for (unsigned p = 0; p < 3; p++)
                if (m40_pool_new(p + 1, &pools[p]))
                        return 1;
        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
                const struct m40_ggml_type_info *ti = m40_ggml_type_info(types[i]);

                if (ti->block_size == 1) {
                        test_matmul(types[i], 172, 37, pools); /* ragged: no 16-multiple */
                        test_matmul(types[i], 1031, 5, pools); /* crosses a chunk */
                } else {
                        test_matmul(types[i], ti->block_size * 5, 33, pools);
                        test_matmul(types[i], 2304, 17, pools); /* crosses the 1024 chunk */
                }
        }
        for (unsigned p = 0; p < 3; p++)
                m40_pool_free(pools[p]);
        printf("%s\n", failures ? "FAILED" : "all passed");
        return failures ? 1 : 0;
}
