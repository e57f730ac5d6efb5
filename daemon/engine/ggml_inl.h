/* ggml_inl.h - summation building blocks of ggml's AVX-512 float kernels, shared by the
 * M40_ACT_GGML code (actq.c's float dot products, ops_ggml.c's attention).
 *
 * ggml_vec_dot_f32 / ggml_vec_dot_f16 run 64-element steps into four 16-lane fma
 * accumulators: element i + j of a step goes to lane j (0..63 here). The lanes are folded
 * (0 + 2) + (1 + 3) and reduced by _mm512_reduce_add_ps (reduce16). Static inline, for
 * the vectorized clones of their callers. */
#ifndef M40_ENGINE_GGML_INL_H
#define M40_ENGINE_GGML_INL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "quant.h"
#include "simd.h"

/* reduce16 - _mm512_reduce_add_ps as GCC defines it: halves, quarters, (0 + 2) + (1 + 3). */
M40_INLINE float ggml_reduce16(const float a[16])
{
        float h[8], q[4];

        for (int j = 0; j < 8; j++)
                h[j] = a[8 + j] + a[j];
        for (int j = 0; j < 4; j++)
                q[j] = h[4 + j] + h[j];
        return (q[0] + q[2]) + (q[1] + q[3]);
}

/* ggml_fold64 - GGML_F32x16_REDUCE of 64 lanes (4 registers of 16) to one float. */
M40_INLINE float ggml_fold64(const float acc[64])
{
        float v[16];

        for (int l = 0; l < 16; l++)
                v[l] = (acc[l] + acc[32 + l]) + (acc[16 + l] + acc[48 + l]);
        return ggml_reduce16(v);
}

/* ggml_h2f - f16 to float, exactly, in integer and float operations the compiler can
 * vectorize (it does not vectorize _Float16 conversions without AVX512-FP16): the
 * magnitude bits moved into place and scaled by 2^112 (exact for normal and subnormal
 * halves), inf/NaN given the float exponent, then the sign. */
M40_INLINE float ggml_h2f(uint16_t h)
{
        const uint32_t t = (uint32_t)(h & 0x7fff) << 13;
        uint32_t u;
        float f;

        memcpy(&f, &t, 4);
        f *= 0x1p112f;
        memcpy(&u, &f, 4);
        if ((h & 0x7c00) == 0x7c00)
                u = t | 0x7f800000u;
        u |= (uint32_t)(h & 0x8000) << 16;
        memcpy(&f, &u, 4);
        return f;
}

/* ggml_dot_f16 - ggml_vec_dot_f16 (AVX-512 FP16 build) of f16-valued floats x and f16 y:
 * the 64-lane steps, then the remainder added in double. */
M40_INLINE float ggml_dot_f16(const float *x, const uint16_t *y, size_t n)
{
        const size_t np = n & ~(size_t)63;
        float acc[64] = {0};
        double s;

        for (size_t i = 0; i < np; i += 64)
                for (int j = 0; j < 64; j++)
                        acc[j] = fmaf(x[i + j], ggml_h2f(y[i + j]), acc[j]);
        s = ggml_fold64(acc);
        for (size_t i = np; i < n; i++)
                s += (double)(x[i] * ggml_h2f(y[i]));
        return (float)s;
}

#endif
