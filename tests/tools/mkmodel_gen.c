/* mkmodel_gen.c - random quantized blocks for m40-mkmodel --random-blocks (see
 * mkmodel_gen.h).
 *
 * A row is filled with random bytes from xoshiro256** (seeded from (seed, tensor, row)
 * through splitmix64, on a stream apart from the float generator's), then each block's
 * scale fields are overwritten with finite f16 values (and the K types' packed 6-bit
 * scales and mins with values in 32..63). Quants stay uniform: the dequantized value of a
 * block element is scale * (q - centre), whose spread is sd(uniform on 2^bits values) =
 * sqrt((4^bits - 1) / 12), so scale = std / that (K types: / the mean sub-block scale,
 * 47.5, too). Block layouts are ggml's (ggml-common.h), checked against the type table. */
#include "mkmodel_gen.h"

#include <errno.h>
#include <string.h>

#include "mkmodel.h"
#include "model/ggml_type.h"
#include "quantize.h"

#define SD4      4.6097722f                   /* sqrt(255 / 12) */
#define SD5      9.2330927f                   /* sqrt(1023 / 12) */
#define SD6      18.4684233f                  /* sqrt(4095 / 12) */
#define SD8      73.9003383f                  /* sqrt(65535 / 12) */
#define MEAN_SUB 47.5f                        /* mean of the K types' sub-block scales (32..63) */
#define STREAM   UINT64_C(0x6d6b6d6f64656c21) /* keeps these rows apart from float rows */

/* The rows' generator, on its own stream (seed ^ STREAM). */
static void rng_seed(struct mk_rng *g, uint64_t seed, uint64_t ti, uint64_t row)
{
        mk_rng_seed(g, seed ^ STREAM, ti, row);
}

static void fill(struct mk_rng *g, uint8_t *p, size_t n)
{
        for (; n >= 8; n -= 8, p += 8) {
                uint64_t v = mk_next(g);
                memcpy(p, &v, 8);
        }
        if (n) {
                uint64_t v = mk_next(g);
                memcpy(p, &v, n);
        }
}

static void put_f16(uint8_t *p, float f)
{
        uint16_t h = m40_f16_from_f32(f);

        memcpy(p, &h, 2);
}

/* Pack eight 6-bit scales and mins as ggml's get_scale_min_k4() unpacks them. */
static void pack_k4(uint8_t q[12], const uint8_t sc[8], const uint8_t m[8])
{
        for (int j = 0; j < 4; j++) {
                q[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
                q[j + 4] = (uint8_t)(m[j] | ((m[j + 4] >> 4) << 6));
                q[j + 8] = (uint8_t)((sc[j + 4] & 0xf) | ((m[j + 4] & 0xf) << 4));
        }
}

/* The K types' scales and mins: eight values in 32..63 from one draw; min = scale. */
static void k4_scales(struct mk_rng *g, uint8_t q[12])
{
        uint64_t v = mk_next(g);
        uint8_t sc[8];

        for (int j = 0; j < 8; j++)
                sc[j] = (uint8_t)(32 + ((v >> (5 * j)) & 31));
        pack_k4(q, sc, sc);
}

bool m40_mkmodel_random_supported(uint32_t t)
{
        switch (t) {
        case M40_GGML_Q8_0:
        case M40_GGML_Q4_0:
        case M40_GGML_Q4_1:
        case M40_GGML_Q5_0:
        case M40_GGML_Q5_1:
        case M40_GGML_Q4_K:
        case M40_GGML_Q5_K:
        case M40_GGML_Q6_K:
                return true;
        default:
                return false;
        }
}

/* Bytes per block of each layout written below (ggml-common.h's static_asserts). */
static uint32_t block_bytes(uint32_t t)
{
        switch (t) {
        case M40_GGML_Q8_0:
                return 2 + 32;
        case M40_GGML_Q4_0:
                return 2 + 16;
        case M40_GGML_Q4_1:
                return 4 + 16;
        case M40_GGML_Q5_0:
                return 2 + 4 + 16;
        case M40_GGML_Q5_1:
                return 4 + 4 + 16;
        case M40_GGML_Q4_K:
                return 4 + 12 + 128;
        case M40_GGML_Q5_K:
                return 4 + 12 + 32 + 128;
        case M40_GGML_Q6_K:
                return 128 + 64 + 16 + 2;
        default:
                return 0;
        }
}

int m40_mkmodel_random_row(uint32_t t, uint64_t seed, uint64_t ti, uint64_t row, float std,
                           void *out, uint64_t ne0)
{
        const struct m40_ggml_type_info *ti_ = m40_ggml_type_info(t);
        uint8_t *p = out;
        struct mk_rng g;
        uint64_t nb;
        uint32_t bb;

        if (!m40_mkmodel_random_supported(t) || !ti_ || ne0 % ti_->block_size ||
            block_bytes(t) != ti_->type_size)
                return -EINVAL;
        bb = ti_->type_size;
        nb = ne0 / ti_->block_size;
        rng_seed(&g, seed, ti, row);
        fill(&g, p, nb * bb);
        for (uint64_t b = 0; b < nb; b++, p += bb) {
                switch (t) {
                case M40_GGML_Q8_0: /* d, qs[32]: d * q */
                        put_f16(p, std / SD8);
                        break;
                case M40_GGML_Q4_0: /* d, qs[16]: d * (q - 8) */
                        put_f16(p, std / SD4);
                        break;
                case M40_GGML_Q4_1: /* d, m, qs[16]: d * q + m */
                        put_f16(p, std / SD4);
                        put_f16(p + 2, -7.5f * std / SD4);
                        break;
                case M40_GGML_Q5_0: /* d, qh[4], qs[16]: d * (q - 16) */
                        put_f16(p, std / SD5);
                        break;
                case M40_GGML_Q5_1: /* d, m, qh[4], qs[16]: d * q + m */
                        put_f16(p, std / SD5);
                        put_f16(p + 2, -15.5f * std / SD5);
                        break;
                case M40_GGML_Q4_K: /* d, dmin, scales[12], qs[128]: d sc q - dmin m */
                        put_f16(p, std / (SD4 * MEAN_SUB));
                        put_f16(p + 2, 7.5f * std / (SD4 * MEAN_SUB));
                        k4_scales(&g, p + 4);
                        break;
                case M40_GGML_Q5_K: /* d, dmin, scales[12], qh[32], qs[128] */
                        put_f16(p, std / (SD5 * MEAN_SUB));
                        put_f16(p + 2, 15.5f * std / (SD5 * MEAN_SUB));
                        k4_scales(&g, p + 4);
                        break;
                case M40_GGML_Q6_K: { /* ql[128], qh[64], scales[16] (int8), d */
                        uint64_t v = mk_next(&g), w = mk_next(&g);
                        for (int j = 0; j < 16; j++)
                                p[192 + j] =
                                        (uint8_t)(32 + (((j < 8 ? v : w) >> (5 * (j % 8))) & 31));
                        put_f16(p + 208, std / (SD6 * MEAN_SUB));
                        break;
                }
                }
        }
        return 0;
}
