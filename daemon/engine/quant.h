/* quant.h - GGML weight block layouts and their dequantization, as the CPU engine reads them.
 *
 * Owns: the block structs of every weight type in DESIGN.md section 6, byte for byte as
 * ggml's ggml-common.h defines them (checked by static_assert against ggml_type.c's sizes),
 * the f16/bf16 scalar conversions, and m40_cpu_dequant(): n blocks of a type to floats.
 * Dequantization follows ggml's dequantize_row_<type>() exactly (same formula, same
 * element order), so a dequantized weight here equals ggml's bit for bit. */
#ifndef M40_ENGINE_QUANT_H
#define M40_ENGINE_QUANT_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define M40_QK           32  /* elements per block of the 32-element types */
#define M40_QK_K         256 /* elements per super-block of the K types */
#define M40_K_SCALE_SIZE 12

struct m40_block_q4_0 {
        uint16_t d;     /* f16 scale */
        uint8_t qs[16]; /* x[j] = (lo nibble of qs[j] - 8) * d, x[j+16] = (hi nibble - 8) * d */
};
struct m40_block_q4_1 {
        uint16_t d, m; /* f16 scale and minimum: x = q * d + m */
        uint8_t qs[16];
};
struct m40_block_q5_0 {
        uint16_t d;
        uint8_t qh[4];  /* bit j: 5th bit of element j (little-endian u32) */
        uint8_t qs[16]; /* x = (q5 - 16) * d */
};
struct m40_block_q5_1 {
        uint16_t d, m;
        uint8_t qh[4];
        uint8_t qs[16]; /* x = q5 * d + m */
};
struct m40_block_q8_0 {
        uint16_t d;
        int8_t qs[32]; /* x = q * d */
};
struct m40_block_q4_k {
        uint16_t d, dmin;                 /* super-block scales of the 6-bit scales/mins */
        uint8_t scales[M40_K_SCALE_SIZE]; /* 8 sub-blocks of 32: 6-bit scale and min each */
        uint8_t qs[128];                  /* 4-bit quants */
};
struct m40_block_q5_k {
        uint16_t d, dmin;
        uint8_t scales[M40_K_SCALE_SIZE];
        uint8_t qh[32];  /* 5th bits */
        uint8_t qs[128]; /* low 4 bits */
};
struct m40_block_q6_k {
        uint8_t ql[128];   /* low 4 bits */
        uint8_t qh[64];    /* high 2 bits */
        int8_t scales[16]; /* 8-bit scales of 16 sub-blocks of 16 */
        uint16_t d;        /* f16 super-block scale */
};

static_assert(sizeof(struct m40_block_q4_0) == 18, "block_q4_0");
static_assert(sizeof(struct m40_block_q4_1) == 20, "block_q4_1");
static_assert(sizeof(struct m40_block_q5_0) == 22, "block_q5_0");
static_assert(sizeof(struct m40_block_q5_1) == 24, "block_q5_1");
static_assert(sizeof(struct m40_block_q8_0) == 34, "block_q8_0");
static_assert(sizeof(struct m40_block_q4_k) == 144, "block_q4_K");
static_assert(sizeof(struct m40_block_q5_k) == 176, "block_q5_K");
static_assert(sizeof(struct m40_block_q6_k) == 210, "block_q6_K");

/* m40_cpu_f16_to_f32 - IEEE half to float, exact (subnormals, inf, NaN kept). */
static inline float m40_cpu_f16_to_f32(uint16_t h)
{
        uint32_t sign = (uint32_t)(h & 0x8000) << 16;
        uint32_t exp = (h >> 10) & 0x1f;
        uint32_t man = h & 0x3ff;
        uint32_t bits;
        float f;

        if (exp == 0x1f) {
                bits = sign | 0x7f800000u | (man << 13);
        } else if (exp == 0) {
                /* zero or subnormal: man * 2^-24, exact in float */
                f = (float)man * 0x1p-24f;
                memcpy(&bits, &f, 4);
                bits |= sign;
        } else {
                bits = sign | ((exp + 112) << 23) | (man << 13);
        }
        memcpy(&f, &bits, 4);
        return f;
}

/* m40_cpu_f32_to_f16 - float to IEEE half, round to nearest even (as F16C / ggml). */
static inline uint16_t m40_cpu_f32_to_f16(float f)
{
        uint32_t x;
        uint32_t sign, exp, man;

        memcpy(&x, &f, 4);
        sign = (x >> 16) & 0x8000;
        exp = (x >> 23) & 0xff;
        man = x & 0x7fffff;
        if (exp == 0xff)
                return (uint16_t)(sign | 0x7c00 | (man ? 0x200 | (man >> 13) : 0));
        int e = (int)exp - 127 + 15;
        if (e >= 0x1f)
                return (uint16_t)(sign | 0x7c00);
        if (e <= 0) {
                if (e < -10)
                        return (uint16_t)sign;
                man |= 0x800000;
                uint32_t shift = (uint32_t)(14 - e);
                uint32_t h = man >> shift;
                uint32_t rem = man & ((1u << shift) - 1);
                uint32_t half = 1u << (shift - 1);
                if (rem > half || (rem == half && (h & 1)))
                        h++;
                return (uint16_t)(sign | h);
        }
        uint32_t h = ((uint32_t)e << 10) | (man >> 13);
        uint32_t rem = man & 0x1fff;
        if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
                h++; /* may carry into the exponent, which is correct (up to inf) */
        return (uint16_t)(sign | h);
}

/* m40_cpu_bf16_to_f32 - bfloat16 to float (the upper 16 bits of a float). */
static inline float m40_cpu_bf16_to_f32(uint16_t h)
{
        uint32_t bits = (uint32_t)h << 16;
        float f;

        memcpy(&f, &bits, 4);
        return f;
}

/* m40_cpu_dequant - decode nblocks consecutive blocks of GGML type t at src into floats at
 * dst (nblocks * block_size of them; block_size is 1 for F32/F16/BF16). t must be one of
 * the supported weight types (the caller has checked with m40_ggml_type_info()). */
void m40_cpu_dequant(uint32_t t, const void *src, float *dst, size_t nblocks);

#endif
