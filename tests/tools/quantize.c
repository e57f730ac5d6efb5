/* quantize.c - f16/bf16 conversion and ggml's reference row quantizers (see quantize.h).
 *
 * Block layouts are ggml's (ggml-common.h); the quantizers transcribe ggml-quants.c's
 * quantize_row_*_ref() step for step, including its float expressions and their order,
 * because byte-exact output is the point: llama.cpp must read back what its own quantizer
 * would have written from the same floats. */
#include "quantize.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "m40/error.h"
#include "model/ggml_type.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "GGUF blocks are little-endian; this code writes host-order integers"
#endif

#define QK           32  /* block size of the simple types */
#define QK_K         256 /* super-block size of the K types */
#define K_SCALE_SIZE 12

struct blk_q4_0 {
        uint16_t d;
        uint8_t qs[QK / 2];
};
struct blk_q4_1 {
        uint16_t d, m;
        uint8_t qs[QK / 2];
};
struct blk_q5_0 {
        uint16_t d;
        uint8_t qh[4];
        uint8_t qs[QK / 2];
};
struct blk_q5_1 {
        uint16_t d, m;
        uint8_t qh[4];
        uint8_t qs[QK / 2];
};
struct blk_q8_0 {
        uint16_t d;
        int8_t qs[QK];
};
struct blk_q4_k {
        uint16_t d, dmin;
        uint8_t scales[K_SCALE_SIZE]; /* 8 scales and 8 mins, 6 bits each */
        uint8_t qs[QK_K / 2];
};
struct blk_q5_k {
        uint16_t d, dmin;
        uint8_t scales[K_SCALE_SIZE];
        uint8_t qh[QK_K / 8];
        uint8_t qs[QK_K / 2];
};
struct blk_q6_k {
        uint8_t ql[QK_K / 2]; /* low 4 bits */
        uint8_t qh[QK_K / 4]; /* high 2 bits */
        int8_t scales[QK_K / 16];
        uint16_t d;
};

static_assert(sizeof(struct blk_q4_0) == 18, "block_q4_0");
static_assert(sizeof(struct blk_q4_1) == 20, "block_q4_1");
static_assert(sizeof(struct blk_q5_0) == 22, "block_q5_0");
static_assert(sizeof(struct blk_q5_1) == 24, "block_q5_1");
static_assert(sizeof(struct blk_q8_0) == 34, "block_q8_0");
static_assert(sizeof(struct blk_q4_k) == 144, "block_q4_K");
static_assert(sizeof(struct blk_q5_k) == 176, "block_q5_K");
static_assert(sizeof(struct blk_q6_k) == 210, "block_q6_K");

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

static uint32_t f32_bits(float f)
{
        uint32_t u;

        memcpy(&u, &f, sizeof(u));
        return u;
}

static float f32_from_bits(uint32_t u)
{
        float f;

        memcpy(&f, &u, sizeof(f));
        return f;
}

uint16_t m40_f16_from_f32(float f)
{
        uint32_t x = f32_bits(f);
        uint16_t sign = (x >> 16) & 0x8000;
        uint32_t ax = x & 0x7fffffff;
        uint32_t e, m, shift, r, rem, half;

        if (ax > 0x7f800000) /* NaN */
                return sign | 0x7e00;
        if (ax >= 0x477ff000) /* 65520 and up round to inf */
                return sign | 0x7c00;
        if (ax >= 0x38800000) { /* normal f16: round at bit 13, rebias the exponent */
                r = ax + 0xfff + ((ax >> 13) & 1);
                return sign | (uint16_t)((r - 0x38000000) >> 13);
        }
        e = ax >> 23;
        if (e < 102) /* at most 2^-25: rounds to zero */
                return sign;
        /* f16 subnormal: value / 2^-24 = m * 2^(e - 126), rounded to nearest even */
        m = (ax & 0x7fffff) | 0x800000;
        shift = 126 - e;
        r = m >> shift;
        rem = m & ((1u << shift) - 1);
        half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1)))
                r++;
        return sign | (uint16_t)r;
}

float m40_f16_to_f32(uint16_t h)
{
        uint32_t sign = (uint32_t)(h & 0x8000) << 16;
        uint32_t e = (h >> 10) & 0x1f;
        uint32_t m = h & 0x3ff;

        if (e == 0x1f)
                return f32_from_bits(sign | 0x7f800000 | (m << 13));
        if (e == 0) /* zero or subnormal: m * 2^-24, exact in f32 */
                return sign ? -(float)m * 0x1p-24f : (float)m * 0x1p-24f;
        return f32_from_bits(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t m40_bf16_from_f32(float f)
{
        uint32_t u = f32_bits(f);

        if ((u & 0x7fffffff) > 0x7f800000) /* NaN: keep it, force quiet */
                return (uint16_t)((u >> 16) | 64);
        return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

float m40_bf16_to_f32(uint16_t h)
{
        return f32_from_bits((uint32_t)h << 16);
}

#define F16(x) m40_f16_from_f32(x)
#define F32(h) m40_f16_to_f32(h)

void m40_q8_0_quantize(const float *x, void *vy, size_t k)
{
        struct blk_q8_0 *y = vy;

        for (size_t i = 0; i < k / QK; i++, x += QK) {
                float amax = 0.0f;
                for (int j = 0; j < QK; j++)
                        amax = MAX(amax, fabsf(x[j]));
                const float d = amax / ((1 << 7) - 1);
                const float id = d ? 1.0f / d : 0.0f;
                y[i].d = F16(d);
                for (int j = 0; j < QK; j++)
                        y[i].qs[j] = (int8_t)roundf(x[j] * id);
        }
}

/* Signed absmax of a block: the element of largest magnitude, first one on ties. */
static float signed_absmax(const float *x)
{
        float amax = 0.0f, max = 0.0f;

        for (int j = 0; j < QK; j++) {
                if (amax < fabsf(x[j])) {
                        amax = fabsf(x[j]);
                        max = x[j];
                }
        }
        return max;
}

void m40_q4_0_quantize(const float *x, void *vy, size_t k)
{
        struct blk_q4_0 *y = vy;

        for (size_t i = 0; i < k / QK; i++, x += QK) {
                const float d = signed_absmax(x) / -8;
                const float id = d ? 1.0f / d : 0.0f;
                y[i].d = F16(d);
                for (int j = 0; j < QK / 2; j++) {
                        const float x0 = x[j] * id;
                        const float x1 = x[QK / 2 + j] * id;
                        const uint8_t q0 = MIN(15, (int8_t)(x0 + 8.5f));
                        const uint8_t q1 = MIN(15, (int8_t)(x1 + 8.5f));
                        y[i].qs[j] = q0 | (uint8_t)(q1 << 4);
                }
        }
}

static void block_min_max(const float *x, float *ret_min, float *ret_max)
{
        float min = FLT_MAX, max = -FLT_MAX;

        for (int j = 0; j < QK; j++) {
                if (x[j] < min)
                        min = x[j];
                if (x[j] > max)
                        max = x[j];
        }
        *ret_min = min;
        *ret_max = max;
}

void m40_q4_1_quantize(const float *x, void *vy, size_t k)
{
        struct blk_q4_1 *y = vy;
        float min, max;

        for (size_t i = 0; i < k / QK; i++, x += QK) {
                block_min_max(x, &min, &max);
                const float d = (max - min) / ((1 << 4) - 1);
                const float id = d ? 1.0f / d : 0.0f;
                y[i].d = F16(d);
                y[i].m = F16(min);
                for (int j = 0; j < QK / 2; j++) {
                        const float x0 = (x[j] - min) * id;
                        const float x1 = (x[QK / 2 + j] - min) * id;
                        const uint8_t q0 = MIN(15, (int8_t)(x0 + 0.5f));
                        const uint8_t q1 = MIN(15, (int8_t)(x1 + 0.5f));
                        y[i].qs[j] = q0 | (uint8_t)(q1 << 4);
                }
        }
}

void m40_q5_0_quantize(const float *x, void *vy, size_t k)
{
        struct blk_q5_0 *y = vy;

        for (size_t i = 0; i < k / QK; i++, x += QK) {
                const float d = signed_absmax(x) / -16;
                const float id = d ? 1.0f / d : 0.0f;
                uint32_t qh = 0;
                y[i].d = F16(d);
                for (int j = 0; j < QK / 2; j++) {
                        const float x0 = x[j] * id;
                        const float x1 = x[QK / 2 + j] * id;
                        const uint8_t q0 = MIN(31, (int8_t)(x0 + 16.5f));
                        const uint8_t q1 = MIN(31, (int8_t)(x1 + 16.5f));
                        y[i].qs[j] = (q0 & 0x0f) | (uint8_t)((q1 & 0x0f) << 4);
                        qh |= ((q0 & 0x10u) >> 4) << j; /* 5th bits: element j at bit j */
                        qh |= ((q1 & 0x10u) >> 4) << (j + QK / 2);
                }
                memcpy(y[i].qh, &qh, sizeof(qh));
        }
}

void m40_q5_1_quantize(const float *x, void *vy, size_t k)
{
        struct blk_q5_1 *y = vy;
        float min, max;

        for (size_t i = 0; i < k / QK; i++, x += QK) {
                block_min_max(x, &min, &max);
                const float d = (max - min) / ((1 << 5) - 1);
                const float id = d ? 1.0f / d : 0.0f;
                uint32_t qh = 0;
                y[i].d = F16(d);
                y[i].m = F16(min);
                for (int j = 0; j < QK / 2; j++) {
                        const float x0 = (x[j] - min) * id;
                        const float x1 = (x[QK / 2 + j] - min) * id;
                        const uint8_t q0 = (uint8_t)(x0 + 0.5f);
                        const uint8_t q1 = (uint8_t)(x1 + 0.5f);
                        y[i].qs[j] = (q0 & 0x0f) | (uint8_t)((q1 & 0x0f) << 4);
                        qh |= ((q0 & 0x10u) >> 4) << j;
                        qh |= ((q1 & 0x10u) >> 4) << (j + QK / 2);
                }
                memcpy(y[i].qh, &qh, sizeof(qh));
        }
}

/* ggml's nearest_int(): round to nearest even through the float mantissa; |f| < 2^22. */
static int nearest_int(float fval)
{
        float val = fval + 12582912.f;
        int i;

        memcpy(&i, &val, sizeof(int));
        return (i & 0x007fffff) - 0x00400000;
}

/* ggml's make_qkx2_quants(): scale and min of n values for levels 0..nmax, searching
 * nstep+1 candidate scales for the smallest weighted squared error. Returns the scale,
 * stores -min in *the_min and the levels in L. */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                              float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep)
{
        float min = x[0], max = x[0];
        float sum_w = weights[0];
        float sum_x = sum_w * x[0];

        for (int i = 1; i < n; ++i) {
                if (x[i] < min)
                        min = x[i];
                if (x[i] > max)
                        max = x[i];
                float w = weights[i];
                sum_w += w;
                sum_x += w * x[i];
        }
        if (min > 0)
                min = 0;
        if (max == min) {
                for (int i = 0; i < n; ++i)
                        L[i] = 0;
                *the_min = -min;
                return 0.f;
        }
        float iscale = nmax / (max - min);
        float scale = 1 / iscale;
        float best_error = 0;
        for (int i = 0; i < n; ++i) {
                int l = nearest_int(iscale * (x[i] - min));
                L[i] = MAX(0, MIN(nmax, l));
                float diff = scale * L[i] + min - x[i];
                diff = diff * diff;
                best_error += weights[i] * diff;
        }
        for (int is = 0; is <= nstep; ++is) {
                iscale = (rmin + rdelta * is + nmax) / (max - min);
                float sum_l = 0, sum_l2 = 0, sum_xl = 0;
                for (int i = 0; i < n; ++i) {
                        int l = nearest_int(iscale * (x[i] - min));
                        l = MAX(0, MIN(nmax, l));
                        Laux[i] = l;
                        float w = weights[i];
                        sum_l += w * l;
                        sum_l2 += w * l * l;
                        sum_xl += w * l * x[i];
                }
                float D = sum_w * sum_l2 - sum_l * sum_l;
                if (D > 0) {
                        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
                        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
                        if (this_min > 0) {
                                this_min = 0;
                                this_scale = sum_xl / sum_l2;
                        }
                        float cur_error = 0;
                        for (int i = 0; i < n; ++i) {
                                float diff = this_scale * Laux[i] + this_min - x[i];
                                diff = diff * diff;
                                cur_error += weights[i] * diff;
                        }
                        if (cur_error < best_error) {
                                for (int i = 0; i < n; ++i)
                                        L[i] = Laux[i];
                                best_error = cur_error;
                                scale = this_scale;
                                min = this_min;
                        }
                }
        }
        *the_min = -min;
        return scale;
}

/* ggml's make_qx_quants() for rmse_type 1 and no importance weights: a signed scale for
 * levels -nmax..nmax-1, stored as L = level + nmax. */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L)
{
        float max = 0, amax = 0;

        for (int i = 0; i < n; ++i) {
                float ax = fabsf(x[i]);
                if (ax > amax) {
                        amax = ax;
                        max = x[i];
                }
        }
        if (amax < 1e-15f) { /* GROUP_MAX_EPS */
                for (int i = 0; i < n; ++i)
                        L[i] = 0;
                return 0.f;
        }
        float iscale = -nmax / max;
        float sumlx = 0, suml2 = 0;
        for (int i = 0; i < n; ++i) {
                int l = nearest_int(iscale * x[i]);
                l = MAX(-nmax, MIN(nmax - 1, l));
                L[i] = l + nmax;
                float w = x[i] * x[i];
                sumlx += w * x[i] * l;
                suml2 += w * l * l;
        }
        float scale = suml2 ? sumlx / suml2 : 0.0f;
        float best = scale * sumlx;
        for (int is = -9; is <= 9; ++is) {
                if (is == 0)
                        continue;
                iscale = -(nmax + 0.1f * is) / max;
                sumlx = suml2 = 0;
                for (int i = 0; i < n; ++i) {
                        int l = nearest_int(iscale * x[i]);
                        l = MAX(-nmax, MIN(nmax - 1, l));
                        float w = x[i] * x[i];
                        sumlx += w * x[i] * l;
                        suml2 += w * l * l;
                }
                if (suml2 > 0 && sumlx * sumlx > best * suml2) {
                        for (int i = 0; i < n; ++i) {
                                int l = nearest_int(iscale * x[i]);
                                L[i] = nmax + MAX(-nmax, MIN(nmax - 1, l));
                        }
                        scale = sumlx / suml2;
                        best = scale * sumlx;
                }
        }
        return scale;
}

/* The 12-byte scale layout of Q4_K/Q5_K: sub-block j's 6-bit scale and min. */
static void get_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
        if (j < 4) {
                *d = q[j] & 63;
                *m = q[j + 4] & 63;
        } else {
                *d = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
                *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
        }
}

/* The part Q4_K and Q5_K share: per 32-element sub-block scale/min search, the packed
 * 6-bit scales, d and dmin, and the final levels L[256] in 0..nmax. */
static void kquant_scales(const float *x, int nmax, float rmin, int nstep, uint8_t *scales_out,
                          uint16_t *ret_d, uint16_t *ret_dmin, uint8_t *L)
{
        uint8_t Laux[32];
        float weights[32], mins[QK_K / 32], scales[QK_K / 32];
        float max_scale = 0, max_min = 0;
        uint8_t sc, m;

        for (int j = 0; j < QK_K / 32; ++j) {
                float sum_x2 = 0;
                for (int l = 0; l < 32; ++l)
                        sum_x2 += x[32 * j + l] * x[32 * j + l];
                float av_x = sqrtf(sum_x2 / 32);
                for (int l = 0; l < 32; ++l)
                        weights[l] = av_x + fabsf(x[32 * j + l]);
                scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j],
                                             Laux, rmin, 0.1f, nstep);
                if (scales[j] > max_scale)
                        max_scale = scales[j];
                if (mins[j] > max_min)
                        max_min = mins[j];
        }

        float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
        float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
        memset(scales_out, 0, K_SCALE_SIZE);
        for (int j = 0; j < QK_K / 32; ++j) {
                uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]);
                uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
                ls = MIN(63, ls);
                lm = MIN(63, lm);
                if (j < 4) {
                        scales_out[j] = ls;
                        scales_out[j + 4] = lm;
                } else {
                        scales_out[j + 4] = (ls & 0xf) | (uint8_t)((lm & 0xf) << 4);
                        scales_out[j - 4] |= (uint8_t)((ls >> 4) << 6);
                        scales_out[j - 0] |= (uint8_t)((lm >> 4) << 6);
                }
        }
        *ret_d = F16(max_scale / 63.f);
        *ret_dmin = F16(max_min / 63.f);

        for (int j = 0; j < QK_K / 32; ++j) {
                get_scale_min_k4(j, scales_out, &sc, &m);
                const float d = F32(*ret_d) * sc;
                if (!d)
                        continue;
                const float dm = F32(*ret_dmin) * m;
                for (int ii = 0; ii < 32; ++ii) {
                        int l = nearest_int((x[32 * j + ii] + dm) / d);
                        L[32 * j + ii] = (uint8_t)MAX(0, MIN(nmax, l));
                }
        }
}

void m40_q4_k_quantize(const float *x, void *vy, size_t k)
{
        struct blk_q4_k *y = vy;
        uint8_t L[QK_K];

        for (size_t i = 0; i < k / QK_K; i++, x += QK_K) {
                kquant_scales(x, 15, -1.f, 20, y[i].scales, &y[i].d, &y[i].dmin, L);
                uint8_t *q = y[i].qs;
                for (int j = 0; j < QK_K; j += 64, q += 32)
                        for (int l = 0; l < 32; ++l)
                                q[l] = L[j + l] | (uint8_t)(L[j + l + 32] << 4);
        }
}

void m40_q5_k_quantize(const float *x, void *vy, size_t k)
{
        struct blk_q5_k *y = vy;
        uint8_t L[QK_K];

        for (size_t i = 0; i < k / QK_K; i++, x += QK_K) {
                kquant_scales(x, 31, -0.5f, 15, y[i].scales, &y[i].d, &y[i].dmin, L);
                uint8_t *qh = y[i].qh, *ql = y[i].qs;
                uint8_t m1 = 1, m2 = 2;
                memset(qh, 0, QK_K / 8);
                for (int n = 0; n < QK_K; n += 64, ql += 32) {
                        for (int j = 0; j < 32; ++j) {
                                int l1 = L[n + j], l2 = L[n + j + 32];
                                if (l1 > 15) {
                                        l1 -= 16;
                                        qh[j] |= m1;
                                }
                                if (l2 > 15) {
                                        l2 -= 16;
                                        qh[j] |= m2;
                                }
                                ql[j] = (uint8_t)(l1 | (l2 << 4));
                        }
                        m1 <<= 2;
                        m2 <<= 2;
                }
        }
}

void m40_q6_k_quantize(const float *x, void *vy, size_t k)
{
        struct blk_q6_k *y = vy;
        int8_t L[QK_K];
        float scales[QK_K / 16];

        for (size_t i = 0; i < k / QK_K; i++, x += QK_K) {
                float max_scale = 0, max_abs_scale = 0;
                for (int ib = 0; ib < QK_K / 16; ++ib) {
                        const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
                        scales[ib] = scale;
                        const float abs_scale = fabsf(scale);
                        if (abs_scale > max_abs_scale) {
                                max_abs_scale = abs_scale;
                                max_scale = scale;
                        }
                }
                if (max_abs_scale < 1e-15f) {
                        memset(&y[i], 0, sizeof(y[i]));
                        continue;
                }
                float iscale = -128.f / max_scale;
                y[i].d = F16(1 / iscale);
                for (int ib = 0; ib < QK_K / 16; ++ib)
                        y[i].scales[ib] = (int8_t)MIN(127, nearest_int(iscale * scales[ib]));
                for (int j = 0; j < QK_K / 16; ++j) {
                        float d = F32(y[i].d) * y[i].scales[j];
                        if (!d)
                                continue;
                        for (int ii = 0; ii < 16; ++ii) {
                                int l = nearest_int(x[16 * j + ii] / d);
                                L[16 * j + ii] = (int8_t)(MAX(-32, MIN(31, l)) + 32);
                        }
                }
                uint8_t *ql = y[i].ql, *qh = y[i].qh;
                for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
                        for (int l = 0; l < 32; ++l) {
                                const uint8_t q1 = L[j + l + 0] & 0xf;
                                const uint8_t q2 = L[j + l + 32] & 0xf;
                                const uint8_t q3 = L[j + l + 64] & 0xf;
                                const uint8_t q4 = L[j + l + 96] & 0xf;
                                ql[l + 0] = q1 | (uint8_t)(q3 << 4);
                                ql[l + 32] = q2 | (uint8_t)(q4 << 4);
                                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                                  ((L[j + l + 64] >> 4) << 4) |
                                                  ((L[j + l + 96] >> 4) << 6));
                        }
                }
        }
}

/* Dequantizers, after ggml's dequantize_row_*(). */

static void dq_simple(uint32_t t, const void *vx, float *y, size_t k)
{
        for (size_t i = 0; i < k / QK; i++, y += QK) {
                const uint8_t *qs;
                uint32_t qh = 0;
                float d, m = 0;
                int off;

                switch (t) {
                case M40_GGML_Q8_0: {
                        const struct blk_q8_0 *b = (const struct blk_q8_0 *)vx + i;
                        for (int j = 0; j < QK; j++)
                                y[j] = b->qs[j] * F32(b->d);
                        continue;
                }
                case M40_GGML_Q4_0: {
                        const struct blk_q4_0 *b = (const struct blk_q4_0 *)vx + i;
                        d = F32(b->d), qs = b->qs, off = -8;
                        break;
                }
                case M40_GGML_Q4_1: {
                        const struct blk_q4_1 *b = (const struct blk_q4_1 *)vx + i;
                        d = F32(b->d), m = F32(b->m), qs = b->qs, off = 0;
                        break;
                }
                case M40_GGML_Q5_0: {
                        const struct blk_q5_0 *b = (const struct blk_q5_0 *)vx + i;
                        d = F32(b->d), qs = b->qs, off = -16;
                        memcpy(&qh, b->qh, 4);
                        break;
                }
                default: { /* Q5_1 */
                        const struct blk_q5_1 *b = (const struct blk_q5_1 *)vx + i;
                        d = F32(b->d), m = F32(b->m), qs = b->qs, off = 0;
                        memcpy(&qh, b->qh, 4);
                        break;
                }
                }
                for (int j = 0; j < QK / 2; j++) {
                        int x0 = (qs[j] & 0x0f) | (((qh >> j) & 1) << 4);
                        int x1 = (qs[j] >> 4) | (((qh >> (j + QK / 2)) & 1) << 4);
                        y[j] = (x0 + off) * d + m;
                        y[j + QK / 2] = (x1 + off) * d + m;
                }
        }
}

static void dq_q4_k_q5_k(bool five, const void *vx, float *y, size_t k)
{
        for (size_t i = 0; i < k / QK_K; i++) {
                const struct blk_q4_k *b4 = (const struct blk_q4_k *)vx + i;
                const struct blk_q5_k *b5 = (const struct blk_q5_k *)vx + i;
                const uint8_t *q = five ? b5->qs : b4->qs;
                const uint8_t *sc_bytes = five ? b5->scales : b4->scales;
                const float d = F32(five ? b5->d : b4->d);
                const float min = F32(five ? b5->dmin : b4->dmin);
                uint8_t sc, m, u1 = 1, u2 = 2;

                for (int j = 0, is = 0; j < QK_K; j += 64, is += 2, q += 32) {
                        get_scale_min_k4(is + 0, sc_bytes, &sc, &m);
                        const float d1 = d * sc, m1 = min * m;
                        get_scale_min_k4(is + 1, sc_bytes, &sc, &m);
                        const float d2 = d * sc, m2 = min * m;
                        for (int l = 0; l < 32; ++l) {
                                int h1 = five && (b5->qh[l] & u1) ? 16 : 0;
                                *y++ = d1 * ((q[l] & 0xf) + h1) - m1;
                        }
                        for (int l = 0; l < 32; ++l) {
                                int h2 = five && (b5->qh[l] & u2) ? 16 : 0;
                                *y++ = d2 * ((q[l] >> 4) + h2) - m2;
                        }
                        u1 <<= 2;
                        u2 <<= 2;
                }
        }
}

static void dq_q6_k(const void *vx, float *y, size_t k)
{
        for (size_t i = 0; i < k / QK_K; i++) {
                const struct blk_q6_k *b = (const struct blk_q6_k *)vx + i;
                const float d = F32(b->d);
                const uint8_t *ql = b->ql, *qh = b->qh;
                const int8_t *sc = b->scales;

                for (int n = 0; n < QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
                        for (int l = 0; l < 32; ++l) {
                                int is = l / 16;
                                int q1 = ((ql[l + 0] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
                                int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
                                int q3 = ((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                                y[l + 0] = d * sc[is + 0] * q1;
                                y[l + 32] = d * sc[is + 2] * q2;
                                y[l + 64] = d * sc[is + 4] * q3;
                                y[l + 96] = d * sc[is + 6] * q4;
                        }
                }
        }
}

static int check_k(uint32_t t, size_t k)
{
        const struct m40_ggml_type_info *ti = m40_ggml_type_info(t);

        if (!ti)
                return M40_EUNSUPPORTED;
        return k % ti->block_size ? M40_EFORMAT : 0;
}

int m40_row_quantize(uint32_t t, const float *x, void *y, size_t k)
{
        int r = check_k(t, k);

        if (r < 0)
                return r;
        switch (t) {
        case M40_GGML_F32:
                memcpy(y, x, k * sizeof(float));
                return 0;
        case M40_GGML_F16:
                for (size_t i = 0; i < k; i++)
                        ((uint16_t *)y)[i] = m40_f16_from_f32(x[i]);
                return 0;
        case M40_GGML_BF16:
                for (size_t i = 0; i < k; i++)
                        ((uint16_t *)y)[i] = m40_bf16_from_f32(x[i]);
                return 0;
        case M40_GGML_Q8_0:
                m40_q8_0_quantize(x, y, k);
                return 0;
        case M40_GGML_Q4_0:
                m40_q4_0_quantize(x, y, k);
                return 0;
        case M40_GGML_Q4_1:
                m40_q4_1_quantize(x, y, k);
                return 0;
        case M40_GGML_Q5_0:
                m40_q5_0_quantize(x, y, k);
                return 0;
        case M40_GGML_Q5_1:
                m40_q5_1_quantize(x, y, k);
                return 0;
        case M40_GGML_Q4_K:
                m40_q4_k_quantize(x, y, k);
                return 0;
        case M40_GGML_Q5_K:
                m40_q5_k_quantize(x, y, k);
                return 0;
        case M40_GGML_Q6_K:
                m40_q6_k_quantize(x, y, k);
                return 0;
        default:
                return M40_EUNSUPPORTED;
        }
}

int m40_row_dequantize(uint32_t t, const void *x, float *y, size_t k)
{
        int r = check_k(t, k);

        if (r < 0)
                return r;
        switch (t) {
        case M40_GGML_F32:
                memcpy(y, x, k * sizeof(float));
                return 0;
        case M40_GGML_F16:
                for (size_t i = 0; i < k; i++)
                        y[i] = m40_f16_to_f32(((const uint16_t *)x)[i]);
                return 0;
        case M40_GGML_BF16:
                for (size_t i = 0; i < k; i++)
                        y[i] = m40_bf16_to_f32(((const uint16_t *)x)[i]);
                return 0;
        case M40_GGML_Q8_0:
        case M40_GGML_Q4_0:
        case M40_GGML_Q4_1:
        case M40_GGML_Q5_0:
        case M40_GGML_Q5_1:
                dq_simple(t, x, y, k);
                return 0;
        case M40_GGML_Q4_K:
        case M40_GGML_Q5_K:
                dq_q4_k_q5_k(t == M40_GGML_Q5_K, x, y, k);
                return 0;
        case M40_GGML_Q6_K:
                dq_q6_k(x, y, k);
                return 0;
        default:
                return M40_EUNSUPPORTED;
        }
}
