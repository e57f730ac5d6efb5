/* cuda/kernels/quant.cuh - reading GGML weight blocks on the GPU: loads, exact conversions,
 * and one decoder per weight type (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K).
 *
 * Computes: the same numbers as the CPU engine's m40_cpu_dequant() (daemon/engine/
 * quant.h). deq8() is exact: every quant becomes a float without rounding (f16 by
 * cvt.f32.f16, bf16 by a shift, small integers by the 2^23 trick of bytes_f4()), then
 * the scale and min are applied in FP32 with the CPU's roundings (mul_add_rn(): no
 * fused multiply-add), so deq8() equals m40_cpu_dequant() bit for bit. The pieces are exact too but
 * cheaper for the 4/5/6-bit quants: one byte permute makes v = 0.5 + q * 2^S / 256 (nib_f4()), and
 * the group's scale and offset are rewritten so that d * v + m is still the weight; the GEMV then
 * sums v * x and x per group and applies d and m once. Tolerance: only the FP32
 * rounding of those sums, amplified (256 >> S) / 2 = 16 (4-bit), 32 (5-bit) or 64
 * (6-bit) times through the 0.5 in v: a few 1e-7 of sum |w x| over long rows, up to
 * ~1e-6 for single-block rows (the tests bound it at 1e-5).
 *
 * The K types' decoders (Q4_K, Q5_K, Q6_K) are in quant_k.cuh, included at the end.
 *
 * Two views of a block, both used by cuda/kernels/matvec.cuh:
 *  - pieces, for the matrix-vector kernels: a row is cut into pieces of EPP elements
 *    (8, or 32 for the K types), one per lane. A piece is loaded into registers once
 *    (`raw`), then read as NRUN runs of 4 elements whose activations are 4 contiguous
 *    floats at xoff(); runs fall into NG scale groups, and weight = d[g] * v + m[g]
 *    (m is 0 unless XSUM: then the kernel needs each group's sum of x as well). The
 *    32-element 4/5-bit types, whose scales lie apart from their quants in the split
 *    layout, also load the two separately (load_body(), load_meta()), so that the kernel
 *    can read a piece's scales ahead of it (matvec.cuh, mv_ahead).
 *  - deq8(): 8 contiguous weights, fully dequantized, for the tiled matrix kernels; in
 *    two halves, ld8() (the loads, into a `raw8`) and dec8() (the arithmetic), so that
 *    a kernel can issue the loads of its next step before the products of this one.
 *    ld32() loads 32 contiguous weights from k0 (a multiple of 32) with the widest loads
 *    the block allows (a whole Q block, a K sub-block), and run8(raw32, i) gives the
 *    raw8 of its elements 8i .. 8i + 7, which dec8() decodes as deq8() would.
 * Maxwell-clean: byte permutes, shifts, masks and FP32 adds/FMAs only; no __dp4a, no
 * fp16 arithmetic; weight loads go through the read-only path (__ldg), activation loads
 * too unless M40_LD_COHERENT (below). 32-bit integer multiplies are avoided in the loops
 * (Maxwell emulates them).
 *
 * The device layout (split rows): a GGML block of Q8_0 (34 bytes), Q4_0 (18), Q4_1 (20),
 * Q5_0 (22), Q5_1 (24) or Q6_K (210) is not a multiple of 16 bytes, so its quants can
 * only be read with 2-byte loads, which costs a matrix-vector product about half the
 * memory bandwidth. The engine therefore rewrites each row of these types once, after
 * loading (cuda/kernels/layout.cu), into its blocks' fields one after another: all quants, then
 * (Q5) all 5th bits, then all scales (cuda/kernels/layout.cuh: split_fields() says which bytes
 * of a block go where, split_row() makes such a row on the host). Row size and row
 * starts do not change; a row of nb blocks whose start is 16-byte aligned has its quants
 * 16-byte aligned too. The decoders below read that layout for those six types and
 * GGML's own for the rest.
 *
 * Alignment contract: a weight row starts 2-byte aligned and every block type keeps
 * the alignment its layout gives (Q4_1 4, Q5_1 8, Q4_K/Q5_K 16, F32 4), which holds
 * when the tensor itself is 16-byte aligned. Everything here is __host__ __device__ so
 * the decoders can be checked on the CPU as well. */
#ifndef M40_CUDA_QUANT_CUH
#define M40_CUDA_QUANT_CUH

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "model/ggml_type.h"
#ifdef __cplusplus
}
#endif

#define M40_HD static __host__ __device__ __forceinline__

/* #pragma unroll for the device pass only (the host compiler does not know it). */
#ifdef __CUDA_ARCH__
#define M40_UNROLL _Pragma("unroll")
#else
#define M40_UNROLL
#endif

/* M40_LD_COHERENT - define it to 1 before the first include of this file (or of
 * matvec.cuh) in a translation unit whose kernels read data that the same launch
 * writes, as a persistent kernel does (persist.cuh, "Memory"). Then the loads of such
 * data, ld_f32(), ld_f4() (activations) and ld_rw() (partial sums, outputs read back),
 * are plain loads, which the memory model orders after a wait on another block's
 * counter (the wait's fence also drops the SM's L1 lines: CCTL.IVALL on sm_70+; on
 * sm_52 plain loads are not kept in L1), while the read-only path (__ldg,
 * ld.global.nc) is not coherent within a launch. Plain, not L2 (__ldcg), loads: every
 * warp of a matrix-vector product reads all of x, which L1 keeps. The quantized and half weights
 * (ld_u8 .. ld_u128) keep the read-only path: nothing writes them in a launch (F32 weights, read by
 * ld_f32()/ld_f4(), take plain loads too). Undefined or 0: every load here is what it
 * was (activations by __ldg, ld_rw() a plain load), and so is the code. */
#ifndef M40_LD_COHERENT
#define M40_LD_COHERENT 0
#endif

/* ---- loads (weights: read-only path on the device) ---- */

M40_HD uint32_t ld_u16(const uint8_t *p) /* p 2-aligned */
{
#ifdef __CUDA_ARCH__
        return __ldg((const unsigned short *)p);
#else
        uint16_t v;
        memcpy(&v, p, 2);
        return v;
#endif
}

M40_HD uint32_t ld_u8(const uint8_t *p)
{
#ifdef __CUDA_ARCH__
        return __ldg((const unsigned char *)p);
#else
        return *p;
#endif
}

M40_HD uint32_t ld_u32(const uint8_t *p) /* p 4-aligned */
{
#ifdef __CUDA_ARCH__
        return __ldg((const unsigned int *)p);
#else
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
#endif
}

M40_HD uint2 ld_u64(const uint8_t *p) /* p 8-aligned */
{
#ifdef __CUDA_ARCH__
        return __ldg((const uint2 *)p);
#else
        uint2 v;
        memcpy(&v, p, 8);
        return v;
#endif
}

M40_HD uint4 ld_u128(const uint8_t *p) /* p 16-aligned */
{
#ifdef __CUDA_ARCH__
        return __ldg((const uint4 *)p);
#else
        uint4 v;
        memcpy(&v, p, 16);
        return v;
#endif
}

/* ---- loads of data a launch may write (M40_LD_COHERENT: plain loads) ---- */

M40_HD float ld_f32(const float *p) /* an activation (or an F32 weight) */
{
#if defined(__CUDA_ARCH__) && M40_LD_COHERENT
        return *p;
#elif defined(__CUDA_ARCH__)
        return __ldg(p);
#else
        return *p;
#endif
}

M40_HD float4 ld_f4(const float *p) /* 4 activations (or F32 weights), p 16-aligned */
{
#if defined(__CUDA_ARCH__) && M40_LD_COHERENT
        return *(const float4 *)p;
#elif defined(__CUDA_ARCH__)
        return __ldg((const float4 *)p);
#else
        float4 v;
        memcpy(&v, p, 16);
        return v;
#endif
}

/* *p, for data the kernels read with plain loads (partial sums, an output read back to
 * add to): a plain load, with or without M40_LD_COHERENT. */
template <class V> M40_HD V ld_rw(const V *p)
{
        return *p;
}

/* ---- bit tools ---- */

M40_HD uint32_t perm(uint32_t a, uint32_t b, uint32_t sel) /* __byte_perm */
{
#ifdef __CUDA_ARCH__
        return __byte_perm(a, b, sel);
#else
        uint64_t x = ((uint64_t)b << 32) | a;
        uint32_t r = 0;

        for (int i = 0; i < 4; i++)
                r |= (uint32_t)((x >> (8 * ((sel >> (4 * i)) & 7))) & 0xff) << (8 * i);
        return r;
#endif
}

/* 4 bytes at a 2-aligned address, as two 16-bit loads. */
M40_HD uint32_t ld_u32_a2(const uint8_t *p)
{
        return perm(ld_u16(p), ld_u16(p + 2), 0x5410);
}

/* 16 bytes at a 2-aligned address, with the widest loads its alignment allows (the
 * same for every lane that reads one row: no divergence). */
M40_HD uint4 ld_u128_a2(const uint8_t *p)
{
        const uintptr_t a = (uintptr_t)p;

        if (!(a & 15))
                return ld_u128(p);
        if (!(a & 3))
                return make_uint4(ld_u32(p), ld_u32(p + 4), ld_u32(p + 8), ld_u32(p + 12));
        return make_uint4(ld_u32_a2(p), ld_u32_a2(p + 4), ld_u32_a2(p + 8), ld_u32_a2(p + 12));
}

/* 8 bytes at a 2-aligned address, with the widest loads its alignment allows. */
M40_HD uint2 ld_u64_a2(const uint8_t *p)
{
        const uintptr_t a = (uintptr_t)p;

        if (!(a & 7))
                return ld_u64(p);
        if (!(a & 3))
                return make_uint2(ld_u32(p), ld_u32(p + 4));
        return make_uint2(ld_u32_a2(p), ld_u32_a2(p + 4));
}

/* Word i (0..3) of u, by selects (no local-memory indexing). */
M40_HD uint32_t word(const uint4 &u, int i)
{
        return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w;
}

M40_HD float as_float(uint32_t u)
{
#ifdef __CUDA_ARCH__
        return __uint_as_float(u);
#else
        float f;
        memcpy(&f, &u, 4);
        return f;
#endif
}

/* IEEE half (low 16 bits of h) to float, exactly. */
M40_HD float h2f(uint32_t h)
{
#ifdef __CUDA_ARCH__
        unsigned short hs = (unsigned short)h;
        float f;

        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(hs));
        return f;
#else
        uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;

        if (e == 0x1f)
                return as_float(sign | 0x7f800000u | (m << 13));
        if (e == 0) {
                float f = (float)m * 0x1p-24f;
                return sign ? -f : f;
        }
        return as_float(sign | ((e + 112) << 23) | (m << 13));
#endif
}

/* a * b + c with two roundings, never one fused multiply-add: what the CPU engine
 * (built with -ffp-contract=off) computes, bit for bit. */
M40_HD float mul_add_rn(float a, float b, float c)
{
#ifdef __CUDA_ARCH__
        return __fadd_rn(__fmul_rn(a, b), c);
#else
        volatile float p = a * b;

        return p + c;
#endif
}

M40_HD float bf2f(uint32_t h) /* bfloat16 in the low 16 bits */
{
        return as_float(h << 16);
}

/* The 4 bytes of w (each 0..255) as floats minus OFF, exactly: byte b is put in the
 * mantissa of 2^23 (0x4B0000bb = 8388608 + b) by one byte permute, and one FP32 add
 * takes 2^23 + OFF away. */
template <int OFF> M40_HD void bytes_f4(uint32_t w, float v[4])
{
        const float k = 8388608.0f + (float)OFF;

        v[0] = as_float(perm(w, 0x4B000000u, 0x7440)) - k;
        v[1] = as_float(perm(w, 0x4B000000u, 0x7441)) - k;
        v[2] = as_float(perm(w, 0x4B000000u, 0x7442)) - k;
        v[3] = as_float(perm(w, 0x4B000000u, 0x7443)) - k;
}

/* The 4 bytes of w (each 0..127) as v = 0.5 + b/256, exactly, with one byte permute
 * each: 0x3F bb 00 00 is 2^-1 * (1 + b * 2^16 / 2^23). Callers put a quant q of n bits
 * there as b = q << S, S = 7 - n (as high as it fits, so the rounding of the sums is
 * amplified least); then q - OFF = (256 >> S) v - (128 >> S) - OFF, which the scale
 * functions fold into the group's d and m (nib_dm()). */
M40_HD void nib_f4(uint32_t w, float v[4])
{
        v[0] = as_float(perm(w, 0x3F000000u, 0x7044));
        v[1] = as_float(perm(w, 0x3F000000u, 0x7144));
        v[2] = as_float(perm(w, 0x3F000000u, 0x7244));
        v[3] = as_float(perm(w, 0x3F000000u, 0x7344));
}

/* d and m of a group whose weights are d0 * (q - off) + m0, for nib_f4() values. */
template <int S> M40_HD void nib_dm(float d0, float m0, float off, float *d, float *m)
{
        *d = (float)(256 >> S) * d0;
        *m = m0 - ((float)(128 >> S) + off) * d0;
}

#define LO4(w)  ((w)&0x0F0F0F0Fu)
#define HI4(w)  (((w) >> 4) & 0x0F0F0F0Fu)
#define LO4S(w) (((w) << 3) & 0x78787878u) /* LO4(w) << 3: for nib_f4 with S = 3 */
#define HI4S(w) (((w) >> 1) & 0x78787878u) /* HI4(w) << 3 */

/* Bits 0..3 of hb moved to bit 4 of bytes 0..3 (the 5th bit of four Q5 quants).
 * hb * 0x204081 places copies at bits 0, 7, 14, 21: shifts and adds, no multiplier. */
M40_HD uint32_t spread4(uint32_t hb)
{
        uint32_t t = hb | (hb << 7);

        t |= t << 14;
        return (t & 0x01010101u) << 4;
}

/* Q4_K / Q5_K: the 6-bit scale and min of sub-block sb (0..7) from the 12 scale bytes
 * (bytes 4..15 of the block header h), as ggml's get_scale_min_k4(). */
M40_HD void k4_scale_min(uint4 h, int sb, uint32_t *sc, uint32_t *mn)
{
        const uint32_t s0 = h.y, s1 = h.z, s2 = h.w;
        const int sh = 8 * (sb & 3);

        if (sb < 4) {
                *sc = (s0 >> sh) & 63;
                *mn = (s1 >> sh) & 63;
        } else {
                *sc = ((s2 >> sh) & 0xF) | (((s0 >> sh) >> 6 & 3) << 4);
                *mn = ((s2 >> sh) >> 4 & 0xF) | (((s1 >> sh) >> 6 & 3) << 4);
        }
}

/* The scales and mins of sub-blocks 2j and 2j + 1 at once, branch-free: two 6-bit
 * values per 16-bit field, (sc0 | sc1 << 8) and (mn0 | mn1 << 8). */
M40_HD void k4_scale_pair(uint4 h, int j, uint32_t *sc, uint32_t *mn)
{
        const int sh = 16 * (j & 1);
        const uint32_t a0 = h.y >> sh, a1 = h.z >> sh, a2 = h.w >> sh;
        const uint32_t lo_sc = a0 & 0x3F3F, lo_mn = a1 & 0x3F3F;
        const uint32_t hi_sc = (a2 & 0x0F0F) | ((a0 >> 2) & 0x3030);
        const uint32_t hi_mn = ((a2 >> 4) & 0x0F0F) | ((a1 >> 2) & 0x3030);

        *sc = j < 2 ? lo_sc : hi_sc;
        *mn = j < 2 ? lo_mn : hi_mn;
}

/* ---- the decoders ---- */

template <int T> struct qt;

/* What every decoder D (below) has from its ld8() and dec8(): deq8(), 8 weights loaded
 * and decoded at once. */
template <class D> struct q_deq8 {
        M40_HD void deq8(const uint8_t *row, int k0, int n_in, float w[8])
        {
                typename D::raw8 r;

                D::ld8(row, k0, n_in, r);
                D::dec8(r, k0, n_in, w);
        }
};

/* ld32() and run8() of the float types, whose 32 weights are four runs of 8 as ld8()
 * loads them (each 16-byte run one load already). */
template <class D> struct q_runs4 : q_deq8<D> {
        struct raw32 {
                typename D::raw8 r[4];
        };
        M40_HD void ld32(const uint8_t *row, int k0, int n_in, raw32 &r)
        {
                for (int i = 0; i < 4; i++)
                        D::ld8(row, k0 + 8 * i, n_in, r.r[i]);
        }
        M40_HD auto run8(const raw32 &r, int i) /* auto: D is complete only here */
        {
                return r.r[i];
        }
};

/* The float types: a piece is 8 consecutive elements; rows of any length (the last
 * piece may be partial: what lies past n_in reads as 0). VEC: rows are 16-byte
 * aligned, so whole pieces load as 16-byte vectors. */
template <> struct qt<M40_GGML_F32> : q_runs4<qt<M40_GGML_F32>> {
        enum { EPP = 8, NRUN = 2, NG = 1, XSUM = 0, TAIL = 1, SPLIT = 0, ESIZE = 4 };
        struct raw {
                float f[8];
        };
        M40_HD int pieces(int n_in)
        {
                return (n_in + 7) >> 3;
        }
        template <bool VEC> M40_HD void load(raw &r, const uint8_t *row, int p, int n_in)
        {
                const float *q = (const float *)row + 8 * p;

                if (VEC && 8 * p + 8 <= n_in) {
                        float4 a = ld_f4(q), b = ld_f4(q + 4);
                        r.f[0] = a.x, r.f[1] = a.y, r.f[2] = a.z, r.f[3] = a.w;
                        r.f[4] = b.x, r.f[5] = b.y, r.f[6] = b.z, r.f[7] = b.w;
                } else {
                        for (int i = 0; i < 8; i++)
                                r.f[i] = 8 * p + i < n_in ? ld_f32(q + i) : 0.0f;
                }
        }
        M40_HD void scale(const raw &, int, int, float *d, float *m)
        {
                *d = 1.0f;
                *m = 0.0f;
        }
        M40_HD void run(const raw &r, int, int j, float v[4])
        {
                for (int i = 0; i < 4; i++)
                        v[i] = r.f[4 * j + i];
        }
        M40_HD int xoff(int p, int j)
        {
                return 8 * p + 4 * j;
        }
        struct raw8 {
                float f[8];
        };
        M40_HD void ld8(const uint8_t *row, int k0, int n_in, raw8 &r)
        {
                const float *q = (const float *)row + k0;

                if (k0 + 8 <= n_in && !((uintptr_t)q & 15)) {
                        const float4 a = ld_f4(q), b = ld_f4(q + 4);

                        r.f[0] = a.x, r.f[1] = a.y, r.f[2] = a.z, r.f[3] = a.w;
                        r.f[4] = b.x, r.f[5] = b.y, r.f[6] = b.z, r.f[7] = b.w;
                } else {
                        for (int i = 0; i < 8; i++)
                                r.f[i] = k0 + i < n_in ? ld_f32(q + i) : 0.0f;
                }
        }
        M40_HD void dec8(const raw8 &r, int, int, float w[8])
        {
                for (int i = 0; i < 8; i++)
                        w[i] = r.f[i];
        }
};

/* F16 and BF16 differ only in the conversion. */
template <bool BF> struct qt_half : q_runs4<qt_half<BF>> {
        enum { EPP = 8, NRUN = 2, NG = 1, XSUM = 0, TAIL = 1, SPLIT = 0, ESIZE = 2 };
        struct raw {
                uint32_t h[4]; /* 8 halves */
        };
        M40_HD float cvt(uint32_t h)
        {
                return BF ? bf2f(h & 0xffff) : h2f(h);
        }
        M40_HD int pieces(int n_in)
        {
                return (n_in + 7) >> 3;
        }
        template <bool VEC> M40_HD void load(raw &r, const uint8_t *row, int p, int n_in)
        {
                const uint8_t *q = row + 16 * p;

                if (VEC && 8 * p + 8 <= n_in) {
                        uint4 a = ld_u128(q);
                        r.h[0] = a.x, r.h[1] = a.y, r.h[2] = a.z, r.h[3] = a.w;
                } else {
                        for (int i = 0; i < 4; i++) {
                                uint32_t lo = 8 * p + 2 * i < n_in ? ld_u16(q + 4 * i) : 0;
                                uint32_t hi = 8 * p + 2 * i + 1 < n_in ? ld_u16(q + 4 * i + 2) : 0;
                                r.h[i] = lo | hi << 16;
                        }
                }
        }
        M40_HD void scale(const raw &, int, int, float *d, float *m)
        {
                *d = 1.0f;
                *m = 0.0f;
        }
        M40_HD void run(const raw &r, int, int j, float v[4])
        {
                v[0] = cvt(r.h[2 * j] & 0xffff);
                v[1] = cvt(r.h[2 * j] >> 16);
                v[2] = cvt(r.h[2 * j + 1] & 0xffff);
                v[3] = cvt(r.h[2 * j + 1] >> 16);
        }
        M40_HD int xoff(int p, int j)
        {
                return 8 * p + 4 * j;
        }
        struct raw8 {
                uint4 h; /* 8 halves; 0 past n_in */
        };
        M40_HD void ld8(const uint8_t *row, int k0, int n_in, raw8 &r)
        {
                const uint8_t *q = row + 2 * k0;

                if (k0 + 8 <= n_in) {
                        r.h = ld_u128_a2(q);
                } else {
                        uint32_t v[4];

                        for (int i = 0; i < 4; i++)
                                v[i] = (k0 + 2 * i < n_in ? ld_u16(q + 4 * i) : 0) |
                                       (k0 + 2 * i + 1 < n_in ? ld_u16(q + 4 * i + 2) : 0) << 16;
                        r.h = make_uint4(v[0], v[1], v[2], v[3]);
                }
        }
        M40_HD void dec8(const raw8 &r, int, int, float w[8])
        {
                for (int i = 0; i < 4; i++) {
                        w[2 * i] = cvt(word(r.h, i) & 0xffff);
                        w[2 * i + 1] = cvt(word(r.h, i) >> 16);
                }
        }
};
template <> struct qt<M40_GGML_F16> : qt_half<false> {
};
template <> struct qt<M40_GGML_BF16> : qt_half<true> {
};

/* Q8_0: d (f16), 32 x int8; x = q * d. Split row: qs[nb][32], then d[nb]. Piece p: 16
 * elements, qs bytes 16p .. 16p + 15 of the row (block p / 2), one 16-byte load on
 * 16-byte aligned rows (H100, 4096x14336: 0.74 of copy bandwidth, against 0.64 for
 * 8-element pieces of GGML blocks and 0.65 for 8-element pieces of split rows). */
template <> struct qt<M40_GGML_Q8_0> : q_deq8<qt<M40_GGML_Q8_0>> {
        enum { EPP = 16, NRUN = 4, NG = 1, XSUM = 0, TAIL = 0, SPLIT = 1, BB = 34 };
        struct raw {
                uint4 q;
                uint32_t d;
        };
        M40_HD int pieces(int n_in)
        {
                return n_in >> 4;
        }
        template <bool VEC> M40_HD void load(raw &r, const uint8_t *row, int p, int n_in)
        {
                r.q = VEC ? ld_u128(row + 16 * p) : ld_u128_a2(row + 16 * p);
                r.d = ld_u16(row + 32 * (n_in >> 5) + 2 * (p >> 1));
        }
        M40_HD void scale(const raw &r, int, int, float *d, float *m)
        {
                *d = h2f(r.d);
                *m = 0.0f;
        }
        M40_HD void run(const raw &r, int, int j, float v[4])
        {
                bytes_f4<128>(word(r.q, j) ^ 0x80808080u, v); /* int8 + 128 as a byte */
        }
        M40_HD int xoff(int p, int j)
        {
                return 16 * p + 4 * j;
        }
        struct raw8 {
                uint2 q;
                uint32_t d;
        };
        M40_HD void ld8(const uint8_t *row, int k0, int n_in, raw8 &r)
        {
                r.q = ld_u64_a2(row + k0); /* 32 quant bytes per block: byte k0 */
                r.d = ld_u16(row + 32 * (n_in >> 5) + 2 * (k0 >> 5));
        }
        struct raw32 { /* a whole block: its 32 quants and d */
                uint4 a, b;
                uint32_t d;
        };
        M40_HD void ld32(const uint8_t *row, int k0, int n_in, raw32 &r)
        {
                r.a = ld_u128_a2(row + k0);
                r.b = ld_u128_a2(row + k0 + 16);
                r.d = ld_u16(row + 32 * (n_in >> 5) + 2 * (k0 >> 5));
        }
        M40_HD raw8 run8(const raw32 &r, int i) /* elements 8i .. 8i + 7 */
        {
                const uint4 &u = i < 2 ? r.a : r.b;
                raw8 v;

                v.q = i & 1 ? make_uint2(u.z, u.w) : make_uint2(u.x, u.y);
                v.d = r.d;
                return v;
        }
        M40_HD void dec8(const raw8 &r, int, int, float w[8])
        {
                const float d = h2f(r.d);

                bytes_f4<128>(r.q.x ^ 0x80808080u, w);
                bytes_f4<128>(r.q.y ^ 0x80808080u, w + 4);
                for (int i = 0; i < 8; i++)
                        w[i] *= d;
        }
};

/* The 32-element 4/5-bit types: byte i of qs holds element i (low nibble) and
 * element i + 16 (high nibble); Q5's 5th bit of element i is bit i of qh. Split row:
 * qs[nb][16], then (Q5) qh[nb][4], then d or (d, m)[nb]. A piece is W (1, 2 or 4) words
 * of a block's qs, PPB = 4 / W pieces per block: piece p is block b = p / PPB, quant
 * bytes 4Wp .. 4Wp + 4W - 1 of the row, i.e. elements 4W(p % PPB) + 0 .. 4W - 1 (runs
 * 0 .. W - 1, low nibbles) and 16 + the same (runs W .. 2W - 1, high): adjacent lanes
 * read adjacent words and nearly adjacent activations. qt<T> has W = 1 (8 elements, a
 * scale per 8 weights); the matrix-vector kernel takes W = 2 at batch 1 and 2
 * (matvec.cuh, mv_q<T, NB>: Q4_0's loop 3.7 sm_90 instructions per weight instead of
 * 5.6, in more registers). (One lane per whole block, 16-byte loads, was measured slower on an
 * H100, 0.39 of copy bandwidth against 0.52: its lanes' activation reads are 128 bytes
 * apart, and the L1 then serves a line per lane.) The batched kernel of mmr.cuh, whose
 * 8 lanes along k read 8 adjacent blocks of a row (128 bytes) and whose activations are
 * in padded shared memory, takes W = 4: a piece is a whole block. */
template <int BBYTES, int QH, int OFF, bool HASMIN, int W = 1>
struct qt_q32 : q_deq8<qt_q32<BBYTES, QH, OFF, HASMIN, W>> {
        static_assert(W == 1 || W == 2 || W == 4, "pieces of one, two or four words");
        enum { PPB = 4 / W, PSH = W == 1 ? 2 : W == 2 ? 1 : 0 }; /* pieces per block, log2 */
        enum { EPP = 8 * W, NRUN = 2 * W, NG = 1, XSUM = 1, TAIL = 0, SPLIT = 1, BB = BBYTES };
        struct raw {
                uint32_t q[W], qh, dm;
        };
        M40_HD int pieces(int n_in)
        {
                return n_in >> (5 - PSH);
        }
        /* 4 bytes at a field start of 4 * k: 4-aligned when the row is (always when the
         * block size is a multiple of 4). */
        template <bool A4> M40_HD uint32_t ld4(const uint8_t *p)
        {
                return (A4 || BB % 4 == 0) ? ld_u32(p) : ld_u32_a2(p);
        }
        /* the qh (Q5) and d/dm fields of block b */
        template <bool A4>
        M40_HD void ld_meta(const uint8_t *row, int b, int nb, uint32_t *qh, uint32_t *dm)
        {
                const uint8_t *t = row + 16 * nb;

                *qh = 0;
                if (QH) {
                        *qh = ld4<A4>(t + 4 * b);
                        t += 4 * nb;
                }
                *dm = HASMIN ? ld4<A4>(t + 4 * b) : ld_u16(t + 2 * b);
        }
        /* VEC: the row is 16-byte aligned, so a piece is 4W-byte aligned */
        template <bool VEC> M40_HD void load_body(raw &r, const uint8_t *row, int p)
        {
                const uint8_t *q = row + 4 * W * p;

                if (VEC && W == 4) {
                        const uint4 u = ld_u128(q);

                        r.q[0] = u.x, r.q[W > 1 ? 1 : 0] = u.y;
                        r.q[W > 2 ? 2 : 0] = u.z, r.q[W > 3 ? 3 : 0] = u.w;
                } else if (VEC && W == 2) {
                        const uint2 u = ld_u64(q);

                        r.q[0] = u.x;
                        r.q[W - 1] = u.y; /* W - 1 is 1 here */
                } else {
                        M40_UNROLL
                        for (int i = 0; i < W; i++)
                                r.q[i] = ld4<VEC>(q + 4 * i);
                }
        }
        template <bool VEC> M40_HD void load_meta(raw &r, const uint8_t *row, int p, int n_in)
        {
                ld_meta<VEC>(row, p >> PSH, n_in >> 5, &r.qh, &r.dm);
        }
        template <bool VEC> M40_HD void load(raw &r, const uint8_t *row, int p, int n_in)
        {
                load_body<VEC>(r, row, p);
                load_meta<VEC>(r, row, p, n_in);
        }
        enum { S = QH ? 2 : 3 }; /* 5- or 4-bit quants, see nib_f4() */
        M40_HD void scale(const raw &r, int, int, float *d, float *m)
        {
                nib_dm<S>(h2f(r.dm & 0xffff), HASMIN ? h2f(r.dm >> 16) : 0.0f, (float)OFF, d, m);
        }
        M40_HD void run(const raw &r, int p, int j, float v[4])
        {
                const uint32_t w = r.q[j % W];
                uint32_t q;

                if (QH) /* the run's 5th bits: bits xoff(p, j) % 32 + 0..3 of qh */
                        q = ((j >= W ? HI4(w) : LO4(w)) |
                             spread4((r.qh >> (xoff(p, j) & 31)) & 0xF))
                            << 2;
                else
                        q = j >= W ? HI4S(w) : LO4S(w);
                nib_f4(q, v);
        }
        M40_HD int xoff(int p, int j)
        {
                return 32 * (p >> PSH) + 4 * W * (p & (PPB - 1)) + 4 * (j % W) + (j >= W ? 16 : 0);
        }
        struct raw8 {
                uint2 q;
                uint32_t qh, dm;
        };
        M40_HD void ld8(const uint8_t *row, int k0, int n_in, raw8 &r)
        {
                const int b = k0 >> 5, o = k0 & 31;

                ld_meta<false>(row, b, n_in >> 5, &r.qh, &r.dm);
                r.q = ld_u64_a2(row + 16 * b + (o & 15));
        }
        struct raw32 { /* a whole block */
                uint4 q;
                uint32_t qh, dm;
        };
        M40_HD void ld32(const uint8_t *row, int k0, int n_in, raw32 &r)
        {
                const int b = k0 >> 5;

                ld_meta<false>(row, b, n_in >> 5, &r.qh, &r.dm);
                r.q = ld_u128_a2(row + 16 * b);
        }
        M40_HD raw8 run8(const raw32 &r, int i) /* elements 8i .. 8i + 7: bytes (8i) & 15 */
        {
                raw8 v;

                v.q = i & 1 ? make_uint2(r.q.z, r.q.w) : make_uint2(r.q.x, r.q.y);
                v.qh = r.qh;
                v.dm = r.dm;
                return v;
        }
        M40_HD void dec8(const raw8 &r, int k0, int, float w[8])
        {
                const int o = k0 & 31, hi = o >= 16;
                const float d = h2f(r.dm & 0xffff), m = HASMIN ? h2f(r.dm >> 16) : 0.0f;

                for (int h = 0; h < 2; h++) {
                        uint32_t q = h ? r.q.y : r.q.x;

                        q = hi ? HI4(q) : LO4(q);
                        if (QH)
                                q |= spread4((r.qh >> (o + 4 * h)) & 0xF);
                        bytes_f4<OFF>(q, w + 4 * h);
                }
                for (int i = 0; i < 8; i++) /* no + 0 without a min: -0 stays -0, as on the CPU */
                        w[i] = HASMIN ? mul_add_rn(w[i], d, m) : w[i] * d;
        }
};
template <> struct qt<M40_GGML_Q4_0> : qt_q32<18, 0, 8, false> {
};
template <> struct qt<M40_GGML_Q4_1> : qt_q32<20, 0, 0, true> {
};
template <> struct qt<M40_GGML_Q5_0> : qt_q32<22, 1, 16, false> {
};
template <> struct qt<M40_GGML_Q5_1> : qt_q32<24, 1, 0, true> {
};

/* The same four types with two-word pieces (W = 2), for matvec.cuh's small batches;
 * every other type is its qt<T>. */
template <int T> struct qt_wide : qt<T> {
};
template <> struct qt_wide<M40_GGML_Q4_0> : qt_q32<18, 0, 8, false, 2> {
};
template <> struct qt_wide<M40_GGML_Q4_1> : qt_q32<20, 0, 0, true, 2> {
};
template <> struct qt_wide<M40_GGML_Q5_0> : qt_q32<22, 1, 16, false, 2> {
};
template <> struct qt_wide<M40_GGML_Q5_1> : qt_q32<24, 1, 0, true, 2> {
};

#include "cuda/kernels/quant_k.cuh" /* Q4_K, Q5_K, Q6_K */

#endif
