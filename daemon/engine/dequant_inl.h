/* dequant_inl.h - the per-type block decoders behind m40_cpu_dequant(), as static inline
 * functions so that hot kernels (matmul.c) inline them into their vectorized clones.
 *
 * Each function is ggml's dequantize_row_<type>() restated: the same formula in the same
 * order, so results are bit-identical to ggml's. Included by dequant.c and matmul.c only. */
#ifndef M40_ENGINE_DEQUANT_INL_H
#define M40_ENGINE_DEQUANT_INL_H

#include "quant.h"
#include "simd.h"

M40_INLINE void dq_f16(const uint16_t *x, float *y, size_t n)
{
#ifdef M40_HAVE_FLOAT16
        const _Float16 *h = (const _Float16 *)x;

        for (size_t i = 0; i < n; i++)
                y[i] = (float)h[i];
#else
        for (size_t i = 0; i < n; i++)
                y[i] = m40_cpu_f16_to_f32(x[i]);
#endif
}

M40_INLINE void dq_bf16(const uint16_t *x, float *y, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                uint32_t bits = (uint32_t)x[i] << 16;
                memcpy(&y[i], &bits, 4);
        }
}

M40_INLINE void dq_q4_0(const struct m40_block_q4_0 *x, float *y, size_t nb)
{
        for (size_t i = 0; i < nb; i++, y += M40_QK) {
                const float d = m40_cpu_f16_to_f32(x[i].d);

                for (int j = 0; j < 16; j++) {
                        y[j] = (float)((x[i].qs[j] & 0x0f) - 8) * d;
                        y[j + 16] = (float)((x[i].qs[j] >> 4) - 8) * d;
                }
        }
}

M40_INLINE void dq_q4_1(const struct m40_block_q4_1 *x, float *y, size_t nb)
{
        for (size_t i = 0; i < nb; i++, y += M40_QK) {
                const float d = m40_cpu_f16_to_f32(x[i].d);
                const float m = m40_cpu_f16_to_f32(x[i].m);

                for (int j = 0; j < 16; j++) {
                        y[j] = (float)(x[i].qs[j] & 0x0f) * d + m;
                        y[j + 16] = (float)(x[i].qs[j] >> 4) * d + m;
                }
        }
}

M40_INLINE void dq_q5_0(const struct m40_block_q5_0 *x, float *y, size_t nb)
{
        for (size_t i = 0; i < nb; i++, y += M40_QK) {
                const float d = m40_cpu_f16_to_f32(x[i].d);
                uint32_t qh;

                memcpy(&qh, x[i].qh, 4);
                for (int j = 0; j < 16; j++) {
                        const uint8_t xh0 = (uint8_t)(((qh >> j) << 4) & 0x10);
                        const uint8_t xh1 = (uint8_t)((qh >> (j + 12)) & 0x10);
                        const int32_t x0 = ((x[i].qs[j] & 0x0f) | xh0) - 16;
                        const int32_t x1 = ((x[i].qs[j] >> 4) | xh1) - 16;

                        y[j] = (float)x0 * d;
                        y[j + 16] = (float)x1 * d;
                }
        }
}

M40_INLINE void dq_q5_1(const struct m40_block_q5_1 *x, float *y, size_t nb)
{
        for (size_t i = 0; i < nb; i++, y += M40_QK) {
                const float d = m40_cpu_f16_to_f32(x[i].d);
                const float m = m40_cpu_f16_to_f32(x[i].m);
                uint32_t qh;

                memcpy(&qh, x[i].qh, 4);
                for (int j = 0; j < 16; j++) {
                        const uint8_t xh0 = (uint8_t)(((qh >> j) << 4) & 0x10);
                        const uint8_t xh1 = (uint8_t)((qh >> (j + 12)) & 0x10);
                        const int x0 = (x[i].qs[j] & 0x0f) | xh0;
                        const int x1 = (x[i].qs[j] >> 4) | xh1;

                        y[j] = (float)x0 * d + m;
                        y[j + 16] = (float)x1 * d + m;
                }
        }
}

M40_INLINE void dq_q8_0(const struct m40_block_q8_0 *x, float *y, size_t nb)
{
        for (size_t i = 0; i < nb; i++, y += M40_QK) {
                const float d = m40_cpu_f16_to_f32(x[i].d);

                for (int j = 0; j < M40_QK; j++)
                        y[j] = (float)x[i].qs[j] * d;
        }
}

/* get_scale_min_k4 - the 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block. */
M40_INLINE void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
        if (j < 4) {
                *d = q[j] & 63;
                *m = q[j + 4] & 63;
        } else {
                *d = (uint8_t)((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
                *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
        }
}

M40_INLINE void dq_q4_k(const struct m40_block_q4_k *x, float *y, size_t nb)
{
        for (size_t i = 0; i < nb; i++) {
                const uint8_t *q = x[i].qs;
                const float d = m40_cpu_f16_to_f32(x[i].d);
                const float min = m40_cpu_f16_to_f32(x[i].dmin);
                uint8_t sc, m;

                for (int j = 0, is = 0; j < M40_QK_K; j += 64, is += 2, q += 32) {
                        scale_min_k4(is + 0, x[i].scales, &sc, &m);
                        const float d1 = d * sc, m1 = min * m;
                        scale_min_k4(is + 1, x[i].scales, &sc, &m);
                        const float d2 = d * sc, m2 = min * m;
                        for (int l = 0; l < 32; l++)
                                y[l] = d1 * (float)(q[l] & 0xf) - m1;
                        for (int l = 0; l < 32; l++)
                                y[l + 32] = d2 * (float)(q[l] >> 4) - m2;
                        y += 64;
                }
        }
}

M40_INLINE void dq_q5_k(const struct m40_block_q5_k *x, float *y, size_t nb)
{
        for (size_t i = 0; i < nb; i++) {
                const uint8_t *ql = x[i].qs;
                const uint8_t *qh = x[i].qh;
                const float d = m40_cpu_f16_to_f32(x[i].d);
                const float min = m40_cpu_f16_to_f32(x[i].dmin);
                uint8_t sc, m, u1 = 1, u2 = 2;

                for (int j = 0, is = 0; j < M40_QK_K; j += 64, is += 2, ql += 32) {
                        scale_min_k4(is + 0, x[i].scales, &sc, &m);
                        const float d1 = d * sc, m1 = min * m;
                        scale_min_k4(is + 1, x[i].scales, &sc, &m);
                        const float d2 = d * sc, m2 = min * m;
                        for (int l = 0; l < 32; l++)
                                y[l] = d1 * (float)((ql[l] & 0xf) + (qh[l] & u1 ? 16 : 0)) - m1;
                        for (int l = 0; l < 32; l++)
                                y[l + 32] = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
                        y += 64;
                        u1 = (uint8_t)(u1 << 2);
                        u2 = (uint8_t)(u2 << 2);
                }
        }
}

M40_INLINE void dq_q6_k(const struct m40_block_q6_k *x, float *y, size_t nb)
{
        for (size_t i = 0; i < nb; i++) {
                const float d = m40_cpu_f16_to_f32(x[i].d);
                const uint8_t *ql = x[i].ql;
                const uint8_t *qh = x[i].qh;
                const int8_t *sc = x[i].scales;

                for (int n = 0; n < M40_QK_K; n += 128) {
                        for (int l = 0; l < 32; l++) {
                                const int is = l / 16;
                                const int q1 = ((ql[l + 0] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
                                const int q2 =
                                        ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
                                const int q3 = ((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;

                                y[l + 0] = d * sc[is + 0] * q1;
                                y[l + 32] = d * sc[is + 2] * q2;
                                y[l + 64] = d * sc[is + 4] * q3;
                                y[l + 96] = d * sc[is + 6] * q4;
                        }
                        y += 128;
                        ql += 64;
                        qh += 32;
                        sc += 8;
                }
        }
}

#endif
