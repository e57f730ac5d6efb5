/* test_quantize.c - unit test of tests/tools/quantize.c: f16/bf16 conversion on edge
 * values, hand-computed blocks of each simple type byte for byte, and the error bound of
 * quantize -> dequantize on random rows of every type. Exits 0 pass, 1 fail.
 * (Byte-exactness against ggml itself is checked by tests/conformance.) */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "m40/error.h"
#include "model/ggml_type.h"
#include "tests/tools/quantize.h"

static int failures;

#define CHECK(cond, ...)                                                                           \
        do {                                                                                       \
                if (!(cond)) {                                                                     \
                        failures++;                                                                \
                        fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond);                 \
                        fprintf(stderr, __VA_ARGS__);                                              \
                        fputc('\n', stderr);                                                       \
                }                                                                                  \
        } while (0)

static float from_bits(uint32_t u)
{
        float f;

        memcpy(&f, &u, sizeof(f));
        return f;
}

static void test_f16(void)
{
        static const struct {
                float f;
                uint16_t h;
        } cases[] = {
                {0.0f, 0x0000},
                {-0.0f, 0x8000},
                {1.0f, 0x3c00},
                {-2.0f, 0xc000},
                {0.1f, 0x2e66},
                {65504.0f, 0x7bff},  /* largest finite */
                {65519.99f, 0x7bff}, /* just below the halfway point to 65536 */
                {65520.0f, 0x7c00},  /* halfway: ties to even, which is inf */
                {1e10f, 0x7c00},     /* overflow */
                {INFINITY, 0x7c00},
                {-INFINITY, 0xfc00},
                {0x1p-14f, 0x0400},        /* smallest normal */
                {0x1p-24f, 0x0001},        /* smallest subnormal */
                {0x1p-25f, 0x0000},        /* halfway to it: ties to even (0) */
                {0x1.8p-25f, 0x0001},      /* above halfway */
                {0x1.8p-24f, 0x0002},      /* 1.5 ulp: ties to even (2) */
                {0x1.4p-24f, 0x0001},      /* 1.25 ulp */
                {1023 * 0x1p-24f, 0x03ff}, /* largest subnormal */
                {0x1.ffcp-15f, 0x0400},    /* rounds up into the normals */
                {1e-30f, 0x0000},
                {-1e-30f, 0x8000},
                {1.0f + 0x1p-11f, 0x3c00}, /* tie, even stays */
                {1.0f + 0x3p-11f, 0x3c02}, /* tie, odd rounds up */
                {2047.0f, 0x67ff},
                {2049.0f, 0x6800}, /* tie to even */
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                uint16_t h = m40_f16_from_f32(cases[i].f);
                CHECK(h == cases[i].h, "f16(%a) = 0x%04x, want 0x%04x", cases[i].f, h, cases[i].h);
        }
        CHECK(m40_f16_from_f32(NAN) == 0x7e00, "f16(NaN) = 0x%04x", m40_f16_from_f32(NAN));
        CHECK(m40_f16_from_f32(-NAN) == 0xfe00, "f16(-NaN) = 0x%04x", m40_f16_from_f32(-NAN));
        CHECK(m40_f16_from_f32(from_bits(0x7f800001)) == 0x7e00, "f16(sNaN)");

        /* every half except NaN survives f16 -> f32 -> f16 */
        for (uint32_t h = 0; h < 0x10000; h++) {
                float f = m40_f16_to_f32((uint16_t)h);
                if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
                        CHECK(isnan(f), "f16 0x%04x should be NaN", h);
                else
                        CHECK(m40_f16_from_f32(f) == h, "round trip of 0x%04x gave 0x%04x", h,
                              m40_f16_from_f32(f));
        }
        CHECK(m40_f16_to_f32(0x0001) == 0x1p-24f, "subnormal decode");
        CHECK(m40_f16_to_f32(0x7bff) == 65504.0f, "max decode");
}

static void test_bf16(void)
{
        static const struct {
                uint32_t f;
                uint16_t h;
        } cases[] = {
                {0x3f800000, 0x3f80}, /* 1.0 */
                {0x80000000, 0x8000}, /* -0 */
                {0x3f808000, 0x3f80}, /* tie, even stays */
                {0x3f818000, 0x3f82}, /* tie, odd rounds up */
                {0x3f808001, 0x3f81}, /* above halfway */
                {0x7f7fffff, 0x7f80}, /* FLT_MAX rounds to inf */
                {0x7f800000, 0x7f80}, /* inf */
                {0xff800000, 0xff80}, /* -inf */
                {0x7fc00000, 0x7fc0}, /* qNaN */
                {0x7f800001, 0x7fc0}, /* sNaN: quiet bit forced, stays NaN */
                {0xffff0000, 0xffff}, /* NaN payload kept */
                {0x00000001, 0x0000}, /* tiny subnormal */
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                uint16_t h = m40_bf16_from_f32(from_bits(cases[i].f));
                CHECK(h == cases[i].h, "bf16(0x%08x) = 0x%04x, want 0x%04x", cases[i].f, h,
                      cases[i].h);
        }
        CHECK(m40_bf16_to_f32(0x3f80) == 1.0f, "bf16 decode");
}

static void expect_bytes(const char *what, const uint8_t *got, const uint8_t *want, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                if (got[i] != want[i]) {
                        CHECK(got[i] == want[i], "%s: byte %zu is 0x%02x, want 0x%02x", what, i,
                              got[i], want[i]);
                        return;
                }
        }
}

/* Blocks worked out by hand from ggml's formulas. */
static void test_known_blocks(void)
{
        float x[32];
        uint8_t b[64], want[64];

        /* Q4_0, x = -8..7 then zeros: signed absmax -8, d = -8 / -8 = 1; q = (int)(x + 8.5) */
        for (int j = 0; j < 32; j++)
                x[j] = j < 16 ? (float)(j - 8) : 0.0f;
        m40_q4_0_quantize(x, b, 32);
        want[0] = 0x00, want[1] = 0x3c; /* f16 1.0 */
        for (int j = 0; j < 16; j++)
                want[2 + j] = (uint8_t)(j | 8 << 4);
        expect_bytes("q4_0 a", b, want, 18);

        /* Q4_0, absmax positive: x[0] = 8 gives d = -1, and 8 lands on level 0 */
        memset(x, 0, sizeof(x));
        x[0] = 8.0f;
        x[1] = -3.0f;
        m40_q4_0_quantize(x, b, 32);
        want[0] = 0x00, want[1] = 0xbc; /* f16 -1.0 */
        for (int j = 0; j < 16; j++)
                want[2 + j] = 0x88;
        want[2] = 0x80; /* q(8) = (int)(-8 + 8.5) = 0 */
        want[3] = 0x8b; /* q(-3) = (int)(3 + 8.5) = 11 */
        expect_bytes("q4_0 b", b, want, 18);

        /* Q8_0, x = j - 16: amax 16, d = 16/127 (f16 0x3008), q = round(x * 127/16) */
        for (int j = 0; j < 32; j++)
                x[j] = (float)(j - 16);
        m40_q8_0_quantize(x, b, 32);
        CHECK(b[0] == 0x08 && b[1] == 0x30, "q8_0 d = 0x%02x%02x", b[1], b[0]);
        CHECK((int8_t)b[2] == -127 && (int8_t)b[3] == -119 && (int8_t)b[4] == -111,
              "q8_0 low: %d %d %d", (int8_t)b[2], (int8_t)b[3], (int8_t)b[4]);
        CHECK(b[2 + 16] == 0 && b[2 + 17] == 8 && b[2 + 31] == 119, "q8_0 high: %d %d %d",
              (int8_t)b[18], (int8_t)b[19], (int8_t)b[33]);

        /* Q4_1, x = j: min 0, d = 31/15 (f16 0x4022), q = (int)(j * 15/31 + 0.5) */
        for (int j = 0; j < 32; j++)
                x[j] = (float)j;
        m40_q4_1_quantize(x, b, 32);
        want[0] = 0x22, want[1] = 0x40, want[2] = 0, want[3] = 0; /* d, m = 0 */
        for (int j = 0; j < 16; j++) {
                int q0 = (int)(j * 15.0 / 31 + 0.5), q1 = (int)((j + 16) * 15.0 / 31 + 0.5);
                want[4 + j] = (uint8_t)(q0 | q1 << 4);
        }
        CHECK(want[4] == 0x80 && want[4 + 15] == 0xf7, "hand values");
        expect_bytes("q4_1", b, want, 20);

        /* Q5_0, x = j - 16: d = 1, q = j; low nibbles j & 15, 5th bits of 16..31 set */
        for (int j = 0; j < 32; j++)
                x[j] = (float)(j - 16);
        m40_q5_0_quantize(x, b, 32);
        want[0] = 0x00, want[1] = 0x3c;
        want[2] = 0x00, want[3] = 0x00, want[4] = 0xff, want[5] = 0xff; /* qh = 0xffff0000 */
        for (int j = 0; j < 16; j++)
                want[6 + j] = (uint8_t)(j | j << 4);
        expect_bytes("q5_0", b, want, 22);

        /* Q5_1, x = j / 2: min 0, d = 0.5 (0x3800), q = j */
        for (int j = 0; j < 32; j++)
                x[j] = j * 0.5f;
        m40_q5_1_quantize(x, b, 32);
        want[0] = 0x00, want[1] = 0x38, want[2] = 0x00, want[3] = 0x00;
        want[4] = 0x00, want[5] = 0x00, want[6] = 0xff, want[7] = 0xff;
        for (int j = 0; j < 16; j++)
                want[8 + j] = (uint8_t)(j | j << 4);
        expect_bytes("q5_1", b, want, 24);

        /* an all-zero block: d = 0 / -8 = -0 (f16 0x8000, as ggml writes it), mid-level
         * quants, never NaN */
        memset(x, 0, sizeof(x));
        m40_q4_0_quantize(x, b, 32);
        CHECK(b[0] == 0 && b[1] == 0x80 && b[2] == 0x88, "q4_0 zero block: %02x %02x %02x", b[0],
              b[1], b[2]);
}

static uint64_t rng = 0x243f6a8885a308d3ull;

static float urand(void)
{
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return (float)((rng >> 40) * 0x1p-24);
}

static float nrand(void)
{
        return (urand() + urand() + urand() + urand() - 2.0f) * 1.7320508f;
}

/* Per-element bound for the simple types: the format's rounding step plus what storing
 * d (and m) as f16 adds. */
static void check_simple_bound(uint32_t t, const float *x, const float *y, size_t k)
{
        const int qk = 32;

        for (size_t i = 0; i < k; i += qk) {
                float amax = 0, mx = 0, min = x[i], max = x[i];
                for (int j = 0; j < qk; j++) {
                        if (fabsf(x[i + j]) > amax)
                                amax = fabsf(x[i + j]), mx = x[i + j];
                        min = fminf(min, x[i + j]);
                        max = fmaxf(max, x[i + j]);
                }
                float d, bound;
                switch (t) {
                case M40_GGML_Q8_0:
                        d = amax / 127;
                        bound = 0.5f * d + 128 * fabsf(d - m40_f16_to_f32(m40_f16_from_f32(d)));
                        break;
                case M40_GGML_Q4_0:
                case M40_GGML_Q5_0:
                        d = fabsf(mx) / (t == M40_GGML_Q4_0 ? 8 : 16);
                        bound = d + 17 * fabsf(d - m40_f16_to_f32(m40_f16_from_f32(d)));
                        break;
                default: /* Q4_1, Q5_1 */
                        d = (max - min) / (t == M40_GGML_Q4_1 ? 15 : 31);
                        bound = 0.5f * d + 32 * fabsf(d - m40_f16_to_f32(m40_f16_from_f32(d))) +
                                fabsf(min - m40_f16_to_f32(m40_f16_from_f32(min)));
                        break;
                }
                bound = bound * 1.0001f + 1e-7f * amax;
                for (int j = 0; j < qk; j++) {
                        float err = fabsf(x[i + j] - y[i + j]);
                        if (err > bound) {
                                CHECK(err <= bound, "%s: element %zu: |%g - %g| > %g",
                                      m40_ggml_type_name(t), i + j, x[i + j], y[i + j], bound);
                                return;
                        }
                }
        }
}

static void test_round_trip(void)
{
        static const uint32_t simple[] = {M40_GGML_Q8_0, M40_GGML_Q4_0, M40_GGML_Q4_1,
                                          M40_GGML_Q5_0, M40_GGML_Q5_1};
        /* relative RMS error ceilings for these rows (measured: 0.069, 0.036, 0.017-0.020) */
        static const struct {
                uint32_t t;
                double max_rel_rms;
        } kq[] = {{M40_GGML_Q4_K, 0.08}, {M40_GGML_Q5_K, 0.045}, {M40_GGML_Q6_K, 0.025}};
        enum { K = 4096 };
        static float x[K], y[K];
        static uint8_t q[K * 4];
        static const float scales[] = {1e-3f, 0.02f, 1.0f, 300.0f};

        for (int rep = 0; rep < 40; rep++) {
                float sc = scales[rep % 4];
                for (int i = 0; i < K; i++)
                        x[i] = (rep % 8 == 5 ? urand() : nrand()) * sc;
                for (size_t s = 0; s < sizeof(simple) / sizeof(simple[0]); s++) {
                        CHECK(m40_row_quantize(simple[s], x, q, K) == 0, "quantize");
                        CHECK(m40_row_dequantize(simple[s], q, y, K) == 0, "dequantize");
                        check_simple_bound(simple[s], x, y, K);
                }
                for (size_t s = 0; s < sizeof(kq) / sizeof(kq[0]); s++) {
                        double se = 0, sx = 0;
                        CHECK(m40_row_quantize(kq[s].t, x, q, K) == 0, "quantize");
                        CHECK(m40_row_dequantize(kq[s].t, q, y, K) == 0, "dequantize");
                        for (int i = 0; i < K; i++) {
                                se += (double)(x[i] - y[i]) * (x[i] - y[i]);
                                sx += (double)x[i] * x[i];
                        }
                        CHECK(sqrt(se / sx) < kq[s].max_rel_rms, "%s: relative RMS error %.4f",
                              m40_ggml_type_name(kq[s].t), sqrt(se / sx));
                }
                /* F16 and BF16: half an ulp of the format */
                CHECK(m40_row_quantize(M40_GGML_F16, x, q, K) == 0, "f16");
                m40_row_dequantize(M40_GGML_F16, q, y, K);
                for (int i = 0; i < K; i++)
                        if (fabsf(x[i]) > 1e-4f)
                                CHECK(fabsf(x[i] - y[i]) <= fabsf(x[i]) * 0x1p-11f, "f16 %g", x[i]);
                m40_row_quantize(M40_GGML_BF16, x, q, K);
                m40_row_dequantize(M40_GGML_BF16, q, y, K);
                for (int i = 0; i < K; i++)
                        CHECK(fabsf(x[i] - y[i]) <= fabsf(x[i]) * 0x1p-8f, "bf16 %g", x[i]);
                if (failures > 20)
                        return;
        }
}

static void test_errors(void)
{
        float x[33] = {0};
        uint8_t q[64];

        CHECK(m40_row_quantize(M40_GGML_Q4_0, x, q, 33) == M40_EFORMAT, "ragged row");
        CHECK(m40_row_quantize(M40_GGML_Q4_K, x, q, 32) == M40_EFORMAT, "short K row");
        CHECK(m40_row_quantize(M40_GGML_Q2_K, x, q, 256) == M40_EUNSUPPORTED, "Q2_K");
        CHECK(m40_row_dequantize(M40_GGML_I8, q, x, 1) == M40_EUNSUPPORTED, "I8");
}

int main(void)
{
        test_f16();
        test_bf16();
        test_known_blocks();
        test_round_trip();
        test_errors();
        if (failures) {
                fprintf(stderr, "test_quantize: %d failure(s)\n", failures);
                return 1;
        }
        printf("test_quantize: ok\n");
        return 0;
}
