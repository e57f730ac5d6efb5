/* actq.c - ggml-mode activation conversion and the plain C dot products, the
 * specification of M40_ACT_GGML (see actq.h).
 *
 * Each integer kernel first unpacks a weight block to small integers in element order,
 * then forms ggml's eight lanes exactly (integer sums, so any order gives the same lanes)
 * and accumulates them with fmaf() in ggml's order. The float kernels follow ggml's
 * AVX-512 ggml_vec_dot_f32/f16/bf16 (ggml_inl.h). Every fused operation is an explicit
 * fmaf(); no expression here may be contracted differently by the compiler. */
#include "actq.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "dequant_inl.h"
#include "ggml_inl.h"
#include "model/ggml_type.h"
#include "simd.h"

uint32_t m40_act_type(uint32_t wtype)
{
        switch (wtype) {
        case M40_GGML_Q4_0:
        case M40_GGML_Q5_0:
        case M40_GGML_Q8_0:
                return M40_GGML_Q8_0;
        case M40_GGML_Q4_1:
        case M40_GGML_Q5_1:
                return M40_GGML_Q8_1;
        case M40_GGML_Q4_K:
        case M40_GGML_Q5_K:
        case M40_GGML_Q6_K:
                return M40_GGML_Q8_K;
        case M40_GGML_F16:
        case M40_GGML_BF16:
                return wtype;
        default:
                return M40_GGML_F32;
        }
}

size_t m40_act_row_bytes(uint32_t wtype, size_t n)
{
        switch (m40_act_type(wtype)) {
        case M40_GGML_Q8_0:
                return n / M40_QK * sizeof(struct m40_act_q8_0);
        case M40_GGML_Q8_1:
                return n / M40_QK * sizeof(struct m40_act_q8_1);
        case M40_GGML_Q8_K:
                return n / M40_QK_K * sizeof(struct m40_act_q8_k);
        case M40_GGML_F16:
        case M40_GGML_BF16:
                return n * sizeof(float);
        default:
                return 0;
        }
}

/* to_i8 - a rounded value as the AVX2 converter stores it: cvtps2dq then saturating
 * packs (NaN becomes INT32_MIN, then -128). */
static inline int8_t to_i8(float v)
{
        if (v >= -128.0f && v <= 127.0f)
                return (int8_t)(int)v;
        return v > 127.0f ? 127 : -128;
}

/* f16_round - the float an f16 store of x reads back as (round to nearest even). */
static inline float f16_round(float x)
{
        return m40_cpu_f16_to_f32(m40_cpu_f32_to_f16(x));
}

/* amax32 - the largest magnitude among 32 floats. */
M40_INLINE float amax32(const float *x)
{
        float m = 0.0f;

        for (int j = 0; j < M40_QK; j++)
                m = fabsf(x[j]) > m ? fabsf(x[j]) : m;
        return m;
}

M40_CLONES static void to_q8_0(const float *x, struct m40_act_q8_0 *y, size_t nb)
{
        for (size_t i = 0; i < nb; i++, x += M40_QK) {
                const float amax = amax32(x);
                const float id = amax != 0.0f ? 127.0f / amax : 0.0f;

                y[i].d = f16_round(amax / 127.0f);
                for (int j = 0; j < M40_QK; j++)
                        y[i].qs[j] = to_i8(rintf(x[j] * id));
        }
}

M40_CLONES static void to_q8_1(const float *x, struct m40_act_q8_1 *y, size_t nb)
{
        for (size_t i = 0; i < nb; i++, x += M40_QK) {
                const float amax = amax32(x);
                const float d = amax / 127.0f;
                const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
                int32_t sum = 0;

                for (int j = 0; j < M40_QK; j++) {
                        y[i].qs[j] = to_i8(rintf(x[j] * id));
                        sum += y[i].qs[j];
                }
                y[i].d = f16_round(d);
                y[i].s = f16_round(d * (float)sum);
        }
}

static void to_q8_k(const float *x, struct m40_act_q8_k *y, size_t nb)
{
        for (size_t i = 0; i < nb; i++, x += M40_QK_K) {
                float max = 0.0f, amax = 0.0f;

                for (int j = 0; j < M40_QK_K; j++) {
                        if (fabsf(x[j]) > amax) {
                                amax = fabsf(x[j]);
                                max = x[j];
                        }
                }
                memset(y[i].bsums, 0, sizeof(y[i].bsums));
                if (amax == 0.0f) {
                        y[i].d = 0.0f;
                        memset(y[i].qs, 0, sizeof(y[i].qs));
                        continue;
                }
                const float iscale = -127.0f / max;

                for (int j = 0; j < M40_QK_K; j++) {
                        const int8_t q = to_i8(rintf(iscale * x[j]));

                        y[i].qs[j] = q;
                        y[i].bsums[j / 16] = (int16_t)(y[i].bsums[j / 16] + q);
                }
                y[i].d = 1.0f / iscale;
        }
}

void m40_act_convert(uint32_t wtype, const float *x, void *dst, size_t n)
{
        float *f = dst;

        switch (m40_act_type(wtype)) {
        case M40_GGML_Q8_0:
                to_q8_0(x, dst, n / M40_QK);
                break;
        case M40_GGML_Q8_1:
                to_q8_1(x, dst, n / M40_QK);
                break;
        case M40_GGML_Q8_K:
                to_q8_k(x, dst, n / M40_QK_K);
                break;
        case M40_GGML_F16:
                for (size_t i = 0; i < n; i++)
                        f[i] = f16_round(x[i]);
                break;
        case M40_GGML_BF16:
                for (size_t i = 0; i < n; i++) {
                        uint32_t u;

                        memcpy(&u, &x[i], 4);
                        if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it, quiet */
                                u = (u | 0x00400000u) & 0xffff0000u;
                        else /* round to nearest even */
                                u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
                        memcpy(&f[i], &u, 4);
                }
                break;
        default:
                break;
        }
}

/* ---- the float kernels (F32, F16, BF16 weights), vectorized by the compiler ---- */

/* ggml_vec_dot_f32: 64 fma lanes, then the remainder added in order in float; the
 * compiled remainder loop multiplies 4 or 8 at a time (rounded products) and fuses only
 * its last n % 4 (the double product below is exact, so its rounding is the float one). */
M40_CLONES static float dot_f32(const void *vw, const void *va, size_t n)
{
        const float *w = vw, *x = va;
        const size_t np = n & ~(size_t)63, nu = n - (n - np) % 4;
        float acc[64] = {0}, s;
        size_t i;

        for (i = 0; i < np; i += 64)
                for (int j = 0; j < 64; j++)
                        acc[j] = fmaf(w[i + j], x[i + j], acc[j]);
        s = ggml_fold64(acc);
        for (i = np; i < nu; i++)
                s += (float)((double)w[i] * x[i]);
        for (; i < n; i++)
                s = fmaf(w[i], x[i], s);
        return s;
}

/* ggml_vec_dot_f16 on the f16-rounded activations (products exact). */
M40_CLONES static float dot_f16(const void *vw, const void *va, size_t n)
{
        return ggml_dot_f16(va, vw, n);
}

static inline float bf2f(uint16_t h)
{
        return m40_cpu_bf16_to_f32(h);
}

/* ggml_vec_dot_bf16 with AVX512-BF16: vdpbf16ps into two 16-lane accumulators per
 * 64-element step (lane l of the first takes elements 2l + 1, then 2l, of the step's first
 * 32; the second the next 32), each reduced into a double; the remainder in double.
 * (The instruction's flush of subnormals to zero is not reproduced.) */
M40_CLONES static float dot_bf16(const void *vw, const void *va, size_t n)
{
        const uint16_t *w = vw;
        const float *x = va;
        const size_t np = n & ~(size_t)63;
        float c[2][16] = {{0}};
        double s = 0.0;

        for (size_t i = 0; i < np; i += 64)
                for (int r = 0; r < 2; r++)
                        for (int l = 0; l < 16; l++) {
                                const size_t e = i + 32 * (size_t)r + 2 * (size_t)l;

                                c[r][l] = fmaf(bf2f(w[e + 1]), x[e + 1], c[r][l]);
                                c[r][l] = fmaf(bf2f(w[e]), x[e], c[r][l]);
                        }
        s += ggml_reduce16(c[0]);
        s += ggml_reduce16(c[1]);
        for (size_t i = np; i < n; i++)
                s += (double)(bf2f(w[i]) * x[i]);
        return (float)s;
}

/* ---- the integer kernels in plain C ---- */

/* lanes32 - ggml's lanes of one 32-element block: lane j = sum of w[e] * a[e], e = 4j..4j+3. */
static inline void lanes32(const int8_t *w, const int8_t *a, int32_t lane[8])
{
        for (int j = 0; j < 8; j++) {
                lane[j] = 0;
                for (int k = 0; k < 4; k++)
                        lane[j] += (int32_t)w[4 * j + k] * a[4 * j + k];
        }
}

/* acc32 - acc[j] += d * lane[j] for the lanes of one block, fused as ggml's fmadd. */
static inline void acc32(float acc[8], float d, const int8_t *w, const int8_t *a)
{
        int32_t lane[8];

        lanes32(w, a, lane);
        for (int j = 0; j < 8; j++)
                acc[j] = fmaf(d, (float)lane[j], acc[j]);
}

/* Unpack a block to its integers in element order (Q4_0/Q5_0 signed, Q4_1/Q5_1 not). */
static void unpack_q4(const uint8_t *qs, int off, int8_t *q)
{
        for (int j = 0; j < 16; j++) {
                q[j] = (int8_t)((qs[j] & 0x0f) - off);
                q[j + 16] = (int8_t)((qs[j] >> 4) - off);
        }
}

static void unpack_q5(const uint8_t *qs, const uint8_t *qhb, int off, int8_t *q)
{
        uint32_t qh;

        memcpy(&qh, qhb, 4);
        for (int j = 0; j < 16; j++) {
                q[j] = (int8_t)(((qs[j] & 0x0f) | ((qh >> j) & 1) << 4) - off);
                q[j + 16] = (int8_t)(((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - off);
        }
}

static float dot_q4_0(const void *vw, const void *va, size_t n)
{
        const struct m40_block_q4_0 *w = vw;
        const struct m40_act_q8_0 *a = va;
        float acc[8] = {0};
        int8_t q[M40_QK];

        for (size_t b = 0; b < n / M40_QK; b++) {
                unpack_q4(w[b].qs, 8, q);
                acc32(acc, m40_cpu_f16_to_f32(w[b].d) * a[b].d, q, a[b].qs);
        }
        return m40_act_hsum8(acc);
}

static float dot_q4_1(const void *vw, const void *va, size_t n)
{
        const struct m40_block_q4_1 *w = vw;
        const struct m40_act_q8_1 *a = va;
        float acc[8] = {0}, summs = 0.0f;
        int8_t q[M40_QK];

        for (size_t b = 0; b < n / M40_QK; b++) {
                summs = fmaf(m40_cpu_f16_to_f32(w[b].m), a[b].s, summs);
                unpack_q4(w[b].qs, 0, q);
                acc32(acc, m40_cpu_f16_to_f32(w[b].d) * a[b].d, q, a[b].qs);
        }
        return m40_act_hsum8(acc) + summs;
}

static float dot_q5_0(const void *vw, const void *va, size_t n)
{
        const struct m40_block_q5_0 *w = vw;
        const struct m40_act_q8_0 *a = va;
        float acc[8] = {0};
        int8_t q[M40_QK];

        for (size_t b = 0; b < n / M40_QK; b++) {
                unpack_q5(w[b].qs, w[b].qh, 16, q);
                acc32(acc, m40_cpu_f16_to_f32(w[b].d) * a[b].d, q, a[b].qs);
        }
        return m40_act_hsum8(acc);
}

static float dot_q5_1(const void *vw, const void *va, size_t n)
{
        const struct m40_block_q5_1 *w = vw;
        const struct m40_act_q8_1 *a = va;
        float acc[8] = {0}, summs = 0.0f;
        int8_t q[M40_QK];

        for (size_t b = 0; b < n / M40_QK; b++) {
                summs = fmaf(m40_cpu_f16_to_f32(w[b].m), a[b].s, summs);
                unpack_q5(w[b].qs, w[b].qh, 0, q);
                acc32(acc, m40_cpu_f16_to_f32(w[b].d) * a[b].d, q, a[b].qs);
        }
        return m40_act_hsum8(acc) + summs;
}

static float dot_q8_0(const void *vw, const void *va, size_t n)
{
        const struct m40_block_q8_0 *w = vw;
        const struct m40_act_q8_0 *a = va;
        float acc[8] = {0};

        for (size_t b = 0; b < n / M40_QK; b++)
                acc32(acc, m40_cpu_f16_to_f32(w[b].d) * a[b].d, w[b].qs, a[b].qs);
        return m40_act_hsum8(acc);
}

/* lanes_k - the lanes of a K super-block whose 8 sub-blocks of 32 have scales sc:
 * lane m = sum over sub-blocks c of sc[c] * (products of elements 32c + 4m .. 32c + 4m + 3). */
static void lanes_k(const int8_t *q, const int8_t *a, const int32_t sc[8], int32_t lane[8])
{
        for (int m = 0; m < 8; m++) {
                lane[m] = 0;
                for (int c = 0; c < 8; c++) {
                        int32_t s = 0;

                        for (int k = 0; k < 4; k++)
                                s += (int32_t)q[32 * c + 4 * m + k] * a[32 * c + 4 * m + k];
                        lane[m] += sc[c] * s;
                }
        }
}

/* kmins - Q4_K/Q5_K's minimum terms of a super-block: for r < 4,
 * prod[r] = mn[2r] * S(2r) + mn[2r + 1] * S(2r + 1), S(c) the sum of a over sub-block c. */
static void kmins(const struct m40_act_q8_k *a, const int32_t mn[8], int32_t prod[4])
{
        for (int r = 0; r < 4; r++) {
                const int32_t s0 = a->bsums[4 * r] + a->bsums[4 * r + 1];
                const int32_t s1 = a->bsums[4 * r + 2] + a->bsums[4 * r + 3];

                prod[r] = mn[2 * r] * s0 + mn[2 * r + 1] * s1;
        }
}

static void unpack_k_scales(const uint8_t *scales, int32_t sc[8], int32_t mn[8])
{
        for (int j = 0; j < 8; j++) {
                uint8_t s, m;

                scale_min_k4(j, scales, &s, &m);
                sc[j] = s;
                mn[j] = m;
        }
}

static float dot_q4_k(const void *vw, const void *va, size_t n)
{
        const struct m40_block_q4_k *w = vw;
        const struct m40_act_q8_k *a = va;
        float acc[8] = {0}, accm[4] = {0};
        int8_t q[M40_QK_K];
        int32_t sc[8], mn[8], lane[8], prod[4];

        for (size_t i = 0; i < n / M40_QK_K; i++) {
                const float d = a[i].d * m40_cpu_f16_to_f32(w[i].d);
                const float dmin = -a[i].d * m40_cpu_f16_to_f32(w[i].dmin);

                unpack_k_scales(w[i].scales, sc, mn);
                kmins(&a[i], mn, prod);
                for (int r = 0; r < 4; r++)
                        accm[r] = fmaf(dmin, (float)prod[r], accm[r]);
                for (int j = 0; j < 4; j++)
                        for (int l = 0; l < 32; l++) {
                                q[64 * j + l] = (int8_t)(w[i].qs[32 * j + l] & 0x0f);
                                q[64 * j + 32 + l] = (int8_t)(w[i].qs[32 * j + l] >> 4);
                        }
                lanes_k(q, a[i].qs, sc, lane);
                for (int m = 0; m < 8; m++)
                        acc[m] = fmaf(d, (float)lane[m], acc[m]);
        }
        return m40_act_hsum8(acc) + m40_act_hsum4(accm);
}

static float dot_q5_k(const void *vw, const void *va, size_t n)
{
        const struct m40_block_q5_k *w = vw;
        const struct m40_act_q8_k *a = va;
        float acc[8] = {0}, summs = 0.0f;
        int8_t q[M40_QK_K];
        int32_t sc[8], mn[8], lane[8], prod[4];

        for (size_t i = 0; i < n / M40_QK_K; i++) {
                const float d = a[i].d * m40_cpu_f16_to_f32(w[i].d);
                const float dmin = -a[i].d * m40_cpu_f16_to_f32(w[i].dmin);

                unpack_k_scales(w[i].scales, sc, mn);
                kmins(&a[i], mn, prod);
                summs = fmaf(dmin, (float)(prod[0] + prod[1] + prod[2] + prod[3]), summs);
                for (int j = 0; j < 4; j++)
                        for (int l = 0; l < 32; l++) {
                                const uint8_t h = w[i].qh[l];

                                q[64 * j + l] = (int8_t)((w[i].qs[32 * j + l] & 0x0f) |
                                                         ((h >> (2 * j)) & 1) << 4);
                                q[64 * j + 32 + l] = (int8_t)((w[i].qs[32 * j + l] >> 4) |
                                                              ((h >> (2 * j + 1)) & 1) << 4);
                        }
                lanes_k(q, a[i].qs, sc, lane);
                for (int m = 0; m < 8; m++)
                        acc[m] = fmaf(d, (float)lane[m], acc[m]);
        }
        return m40_act_hsum8(acc) + summs;
}

/* Q6_K: 16 sub-blocks of 16 with int8 scales, q in 0..63 (the -32 is applied through the
 * activation sums): lane m = sum over 32-element chunks c of sc[2c + (m >= 4)] times the
 * products of elements 32c + 4m .. + 3, minus 32 * (bsums[2m] sc[2m] + bsums[2m+1] sc[2m+1]). */
static float dot_q6_k(const void *vw, const void *va, size_t n)
{
        const struct m40_block_q6_k *w = vw;
        const struct m40_act_q8_k *a = va;
        float acc[8] = {0};
        int8_t q[M40_QK_K];

        for (size_t i = 0; i < n / M40_QK_K; i++) {
                const float d = a[i].d * m40_cpu_f16_to_f32(w[i].d);
                const int8_t *sc = w[i].scales;

                for (int h = 0; h < 2; h++) {
                        const uint8_t *ql = w[i].ql + 64 * h, *qh = w[i].qh + 32 * h;
                        int8_t *o = q + 128 * h;

                        for (int l = 0; l < 32; l++) {
                                o[l] = (int8_t)((ql[l] & 0x0f) | (qh[l] & 3) << 4);
                                o[l + 32] = (int8_t)((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4);
                                o[l + 64] = (int8_t)((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4);
                                o[l + 96] = (int8_t)((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4);
                        }
                }
                for (int m = 0; m < 8; m++) {
                        int32_t lane = 0;

                        for (int c = 0; c < 8; c++) {
                                int32_t s = 0;

                                for (int k = 0; k < 4; k++)
                                        s += (int32_t)q[32 * c + 4 * m + k] *
                                             a[i].qs[32 * c + 4 * m + k];
                                lane += sc[2 * c + (m >= 4)] * s;
                        }
                        lane -= 32 * (a[i].bsums[2 * m] * sc[2 * m] +
                                      a[i].bsums[2 * m + 1] * sc[2 * m + 1]);
                        acc[m] = fmaf(d, (float)lane, acc[m]);
                }
        }
        return m40_act_hsum8(acc);
}

m40_act_dot_fn m40_act_dot_ref(uint32_t wtype)
{
        switch (wtype) {
        case M40_GGML_F32:
                return dot_f32;
        case M40_GGML_F16:
                return dot_f16;
        case M40_GGML_BF16:
                return dot_bf16;
        case M40_GGML_Q4_0:
                return dot_q4_0;
        case M40_GGML_Q4_1:
                return dot_q4_1;
        case M40_GGML_Q5_0:
                return dot_q5_0;
        case M40_GGML_Q5_1:
                return dot_q5_1;
        case M40_GGML_Q8_0:
                return dot_q8_0;
        case M40_GGML_Q4_K:
                return dot_q4_k;
        case M40_GGML_Q5_K:
                return dot_q5_k;
        case M40_GGML_Q6_K:
                return dot_q6_k;
        default:
                return NULL;
        }
}

static m40_act_dot_fn best[M40_GGML_TYPE_LIMIT];
static pthread_once_t best_once = PTHREAD_ONCE_INIT;

static void pick_best(void)
{
        for (uint32_t t = 0; t < M40_GGML_TYPE_LIMIT; t++) {
                const m40_act_dot_fn f = m40_act_dot_x86(t);

                best[t] = f ? f : m40_act_dot_ref(t);
        }
}

m40_act_dot_fn m40_act_dot(uint32_t wtype)
{
        if (wtype >= M40_GGML_TYPE_LIMIT)
                return NULL;
        pthread_once(&best_once, pick_best);
        return best[wtype];
}
