/* test_actq.c - the M40_ACT_GGML matrix kernels (daemon/engine/actq.h): activation
 * converters against the rules they restate, every dot product against a float64 product
 * of the dequantized operands, the AVX2 kernels against the plain C ones bit for bit, and
 * m40_cpu_matmul_ggml() independent of thread count and batching.
 *
 * Weights are random blocks (random bytes, f16 scales replaced by random finite values),
 * so Q8_0 weights include -128 and every scale/bit pattern occurs; activations are random
 * floats of several magnitudes. Exit 0 pass, 1 fail. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/actq.h"
#include "engine/matmul.h"
#include "engine/pool.h"
#include "engine/quant.h"
#include "model/ggml_type.h"
#include "tests/check.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

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

static const uint32_t types[] = {M40_GGML_F32,  M40_GGML_F16,  M40_GGML_BF16, M40_GGML_Q4_0,
                                 M40_GGML_Q4_1, M40_GGML_Q5_0, M40_GGML_Q5_1, M40_GGML_Q8_0,
                                 M40_GGML_Q4_K, M40_GGML_Q5_K, M40_GGML_Q6_K};

/* rand_row - n elements of type t: random bytes, f16 scales (offsets below) replaced by
 * finite values of magnitude up to 0.05 (so float products stay well in range). */
static void rand_row(uint32_t t, uint8_t *row, size_t n)
{
        const struct m40_ggml_type_info *ti = m40_ggml_type_info(t);
        const size_t nb = n / ti->block_size, bs = ti->type_size;
        static const struct {
                uint32_t t;
                int off[2];
        } sc[] = {
                {M40_GGML_Q4_0, {0, -1}}, {M40_GGML_Q4_1, {0, 2}},    {M40_GGML_Q5_0, {0, -1}},
                {M40_GGML_Q5_1, {0, 2}},  {M40_GGML_Q8_0, {0, -1}},   {M40_GGML_Q4_K, {0, 2}},
                {M40_GGML_Q5_K, {0, 2}},  {M40_GGML_Q6_K, {208, -1}},
        };

        for (size_t i = 0; i < nb * bs; i++)
                row[i] = (uint8_t)rnd();
        if (t == M40_GGML_F32 || t == M40_GGML_F16 || t == M40_GGML_BF16) {
                for (size_t i = 0; i < n; i++) {
                        const float v = frand(1.0f);
                        uint32_t u;
                        uint16_t h;

                        memcpy(&u, &v, 4);
                        h = t == M40_GGML_F16 ? m40_cpu_f32_to_f16(v) : (uint16_t)(u >> 16);
                        if (t == M40_GGML_F32)
                                memcpy(row + 4 * i, &v, 4);
                        else
                                memcpy(row + 2 * i, &h, 2);
                }
                return;
        }
        for (size_t k = 0; k < sizeof(sc) / sizeof(sc[0]); k++)
                if (sc[k].t == t)
                        for (size_t b = 0; b < nb; b++)
                                for (int j = 0; j < 2; j++)
                                        if (sc[k].off[j] >= 0) {
                                                const uint16_t h = m40_cpu_f32_to_f16(frand(0.05f));

                                                memcpy(row + b * bs + sc[k].off[j], &h, 2);
                                        }
}

/* act_value - element i of a converted activation row, as a double. */
static double act_value(uint32_t wtype, const void *a, size_t i)
{
        switch (m40_act_type(wtype)) {
        case M40_GGML_Q8_0: {
                const struct m40_act_q8_0 *b = (const struct m40_act_q8_0 *)a + i / 32;
                return (double)b->d * b->qs[i % 32];
        }
        case M40_GGML_Q8_1: {
                const struct m40_act_q8_1 *b = (const struct m40_act_q8_1 *)a + i / 32;
                return (double)b->d * b->qs[i % 32];
        }
        case M40_GGML_Q8_K: {
                const struct m40_act_q8_k *b = (const struct m40_act_q8_k *)a + i / 256;
                return (double)b->d * b->qs[i % 256];
        }
        default:
                return ((const float *)a)[i];
        }
}

/* min_term_error - for Q4_1/Q5_1: sum over blocks of m * (s - d * sum q), the difference
 * between ggml's minimum term (m times the f16 s of the activation block) and the exact
 * one, which the float64 reference must include. */
static double min_term_error(uint32_t t, const uint8_t *row, const void *a, size_t n)
{
        const size_t bs = m40_ggml_type_info(t)->type_size;
        const struct m40_act_q8_1 *q = a;
        double e = 0.0;

        for (size_t b = 0; b < n / 32; b++) {
                uint16_t m;
                double sum = 0.0;

                memcpy(&m, row + b * bs + 2, 2);
                for (int i = 0; i < 32; i++)
                        sum += (double)q[b].d * q[b].qs[i];
                e += (double)m40_cpu_f16_to_f32(m) * ((double)q[b].s - sum);
        }
        return e;
}

/* Converters: the rules of actq.h on blocks built to hit them. */
static void test_convert(void)
{
        float x[256];
        struct m40_act_q8_0 q0;
        struct m40_act_q8_1 q1;
        struct m40_act_q8_k qk;
        float f[4];

        /* amax 127: id = 1, so q = x rounded half to even */
        for (int i = 0; i < 32; i++)
                x[i] = 0.0f;
        x[0] = 127.0f, x[1] = 0.5f, x[2] = 1.5f, x[3] = 2.5f, x[4] = -0.5f, x[5] = -3.5f;
        m40_act_convert(M40_GGML_Q4_0, x, &q0, 32);
        CHECK(q0.d == 1.0f && q0.qs[0] == 127 && q0.qs[1] == 0 && q0.qs[2] == 2 && q0.qs[3] == 2 &&
                      q0.qs[4] == 0 && q0.qs[5] == -4,
              "q8_0 rounding: d %g q %d %d %d %d %d %d", q0.d, q0.qs[0], q0.qs[1], q0.qs[2],
              q0.qs[3], q0.qs[4], q0.qs[5]);
        m40_act_convert(M40_GGML_Q4_1, x, &q1, 32);
        CHECK(q1.d == 1.0f && q1.s == 127.0f + 0 + 2 + 2 + 0 - 4, "q8_1 s %g", q1.s);
        /* zero block */
        memset(x, 0, sizeof(x));
        m40_act_convert(M40_GGML_Q8_0, x, &q0, 32);
        CHECK(q0.d == 0.0f && q0.qs[7] == 0, "q8_0 of zeros");
        m40_act_convert(M40_GGML_Q6_K, x, &qk, 256);
        CHECK(qk.d == 0.0f && qk.bsums[3] == 0, "q8_K of zeros");
        /* q8_K: scale from the signed max (-127 / max), sums of 16 */
        for (int i = 0; i < 256; i++)
                x[i] = frand(1.0f);
        x[77] = -2.0f;
        m40_act_convert(M40_GGML_Q4_K, x, &qk, 256);
        CHECK(qk.qs[77] == -127 && qk.d == 1.0f / (-127.0f / -2.0f), "q8_K max: q %d d %g",
              qk.qs[77], qk.d);
        for (int g = 0; g < 16; g++) {
                int s = 0;

                for (int i = 0; i < 16; i++)
                        s += qk.qs[16 * g + i];
                CHECK(s == qk.bsums[g], "q8_K bsums[%d] %d != %d", g, qk.bsums[g], s);
        }
        for (int i = 0; i < 256; i++)
                CHECK(fabs((double)qk.qs[i] * qk.d - x[i]) <= fabs(qk.d) * 0.5001,
                      "q8_K element %d: %d * %g vs %g", i, qk.qs[i], qk.d, x[i]);
        /* f16/bf16 rows hold the rounded values (nearest even) */
        x[0] = 1.0f + 0x1p-11f, x[1] = 1.0f + 3 * 0x1p-11f, x[2] = 1.0f + 0x1p-8f,
        x[3] = 1.0f + 3 * 0x1p-8f;
        m40_act_convert(M40_GGML_F16, x, f, 4);
        CHECK(f[0] == 1.0f && f[1] == 1.0f + 0x1p-9f, "f16 rounding %a %a", f[0], f[1]);
        m40_act_convert(M40_GGML_BF16, x + 2, f, 2);
        CHECK(f[0] == 1.0f && f[1] == 1.0f + 0x1p-6f, "bf16 rounding %a %a", f[0], f[1]);
}

/* Every kernel against float64, and the AVX2 kernels against the plain C ones. */
static void test_dots(void)
{
        enum { N = 1024 + 256 }; /* several blocks of every size, K types included */
        static uint8_t row[N * 4], act[N * 4 + 64];
        float x[N];

        for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
                const uint32_t t = types[k];
                const m40_act_dot_fn ref = m40_act_dot_ref(t), x86 = m40_act_dot_x86(t);
                const size_t n = t == M40_GGML_F32 || t == M40_GGML_F16 || t == M40_GGML_BF16
                                         ? N - 3 * 64 + 44 /* ragged: exercises the tails */
                                         : N;
                float wf[N];
                double worst = 0.0;

                CHECK(ref != NULL && m40_act_dot(t) != NULL, "%s has no kernel",
                      m40_ggml_type_name(t));
                if (!ref)
                        continue;
                for (int trial = 0; trial < 40; trial++) {
                        const float mag = trial % 4 == 0 ? 1e-3f : trial % 4 == 1 ? 1.0f : 30.0f;
                        const void *a = act;
                        double want = 0.0, scale = 0.0;

                        rand_row(t, row, n);
                        m40_cpu_dequant(t, row, wf,
                                        t == M40_GGML_F32 || t == M40_GGML_F16 || t == M40_GGML_BF16
                                                ? n
                                                : n / m40_ggml_type_info(t)->block_size);
                        for (size_t i = 0; i < n; i++)
                                x[i] = frand(mag);
                        if (m40_act_row_bytes(t, n))
                                m40_act_convert(t, x, act, n);
                        else
                                a = x;
                        for (size_t i = 0; i < n; i++) {
                                want += (double)wf[i] * act_value(t, a, i);
                                scale += fabs((double)wf[i] * act_value(t, a, i));
                        }
                        if (m40_act_type(t) == M40_GGML_Q8_1)         /* ggml takes the block's */
                                want += min_term_error(t, row, a, n); /* min times s (f16) */
                        const float got = ref(row, a, n);
                        const double err = fabs(got - want) / (scale + 1e-30);

                        worst = err > worst ? err : worst;
                        if (x86) {
                                const float g2 = x86(row, a, n);

                                CHECK(memcmp(&g2, &got, 4) == 0, "%s: AVX2 %.9g != C %.9g",
                                      m40_ggml_type_name(t), g2, got);
                        }
                }
                CHECK(worst < 2e-6, "%s: dot off float64 by %.3g of sum |w a|",
                      m40_ggml_type_name(t), worst);
                printf("%-5s dot vs float64: %.2e of sum|w a|%s\n", m40_ggml_type_name(t), worst,
                       x86 ? ", AVX2 = C bit for bit" : "");
        }
}

/* m40_cpu_matmul_ggml: each output is the kernel's, whatever the threads and batching. */
static void test_matmul(void)
{
        enum { N_IN = 512, N_OUT = 70, N_TOK = 5 };
        static uint8_t w[N_OUT * N_IN * 4];
        static float x[N_TOK * N_IN], y[N_TOK * N_OUT], y1[N_OUT];
        static uint8_t scratch[N_TOK * N_IN * 4 + 64], one[N_IN * 4 + 64];
        struct m40_pool *pools[3] = {NULL, NULL, NULL};

        for (int p = 0; p < 3; p++)
                if (m40_pool_new((unsigned)p + 1, &pools[p]))
                        CHECK(0, "pool of %d threads", p + 1);
        for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
                const uint32_t t = types[k];
                uint64_t rb;
                struct m40_weight mw;

                if (m40_ggml_row_size(t, N_IN, &rb))
                        continue;
                mw = (struct m40_weight){w, t, N_IN, N_OUT, rb};
                for (int o = 0; o < N_OUT; o++)
                        rand_row(t, w + o * rb, N_IN);
                for (size_t i = 0; i < N_TOK * N_IN; i++)
                        x[i] = frand(2.0f);
                for (int p = 0; p < 3 && pools[p]; p++) {
                        m40_cpu_matmul_ggml(pools[p], &mw, x, N_TOK, y, scratch);
                        for (int tk = 0; tk < N_TOK; tk++) {
                                const void *a = one;

                                m40_cpu_matmul_ggml(pools[p], &mw, x + tk * N_IN, 1, y1, scratch);
                                if (m40_act_row_bytes(t, N_IN))
                                        m40_act_convert(t, x + tk * N_IN, one, N_IN);
                                else
                                        a = x + tk * N_IN;
                                for (int o = 0; o < N_OUT; o++) {
                                        const float d = m40_act_dot(t)(w + o * rb, a, N_IN);

                                        CHECK(y[tk * N_OUT + o] == d && y1[o] == d,
                                              "%s threads %d token %d row %d: %g %g vs %g",
                                              m40_ggml_type_name(t), p + 1, tk, o,
                                              y[tk * N_OUT + o], y1[o], d);
                                }
                        }
                }
        }
        for (int p = 0; p < 3; p++)
                m40_pool_free(pools[p]);
}

int main(void)
{
        test_convert();
        test_dots();
        test_matmul();
        if (!m40_act_dot_x86(M40_GGML_Q4_0))
                printf("note: no AVX2 kernels on this CPU/build; the C kernels were tested\n");
        printf(failures ? "FAILED (%d)\n" : "all passed\n", failures);
        return failures ? 1 : 0;
}
