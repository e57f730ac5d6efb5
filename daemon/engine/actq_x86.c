/* actq_x86.c - AVX2 versions of actq.c's integer block dot products (see actq.h), selected
 * at run time on CPUs with AVX2 and FMA (all of which have F16C); elsewhere, and for the
 * float weight types, m40_act_dot_x86() returns NULL.
 *
 * Each kernel computes exactly the lanes and fma chains of its plain C specification:
 * bytes of weights (unsigned, or made unsigned with their signs moved onto the
 * activations) times int8 activations, pairs summed to int16 (maddubs: |pair| <= 2 * 128
 * * 127, never saturating), then pairs of those to int32 with the sub-block scale (madd);
 * lane j of a 32-byte vector is elements 4j..4j+3, as in actq.c. The results are bit-
 * identical to actq.c's, which tests/engine/test_actq.c checks on random blocks. */
#include "actq.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "dequant_inl.h"
#include "model/ggml_type.h"

#define AVX2 __attribute__((target("avx2,fma,f16c")))

AVX2 static inline float h2f(uint16_t h)
{
        return _cvtsh_ss(h);
}

/* hsum - the plain C reduction of eight lanes, so both kernels end identically. */
AVX2 static inline float hsum(__m256 acc)
{
        float a[8];

        _mm256_storeu_ps(a, acc);
        return m40_act_hsum8(a);
}

/* nib - 16 bytes of nibbles to 32 bytes: low nibbles (elements 0..15), then high. */
AVX2 static inline __m256i nib(const uint8_t *qs)
{
        const __m128i b = _mm_loadu_si128((const __m128i *)qs);

        return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(15));
}

/* bits - byte j is 0xff where bit j of the 32 bits at p is set, else 0. */
AVX2 static inline __m256i bits(const uint8_t *p)
{
        const __m256i pick =
                _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
        const __m256i mask = _mm256_set1_epi64x((long long)0x8040201008040201ull);
        uint32_t v;

        memcpy(&v, p, 4);
        const __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)v), pick);
        return _mm256_cmpeq_epi8(_mm256_and_si256(b, mask), mask);
}

/* lanes_u - unsigned bytes u times signed bytes s: 8 int32 lanes of 4 products each. */
AVX2 static inline __m256i lanes_u(__m256i u, __m256i s)
{
        return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* lanes_s - signed bytes x times signed bytes y (|y| <= 127). */
AVX2 static inline __m256i lanes_s(__m256i x, __m256i y)
{
        return lanes_u(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

AVX2 static inline __m256 fma_lanes(float d, __m256i lanes, __m256 acc)
{
        return _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), acc);
}

#define LOAD(p) _mm256_loadu_si256((const __m256i *)(p))

AVX2 static float dot_q4_0(const void *vw, const void *va, size_t n)
{
        const struct m40_block_q4_0 *w = vw;
        const struct m40_act_q8_0 *a = va;
        __m256 acc = _mm256_setzero_ps();

        for (size_t b = 0; b < n / M40_QK; b++) {
                const __m256i q = _mm256_sub_epi8(nib(w[b].qs), _mm256_set1_epi8(8));

                acc = fma_lanes(h2f(w[b].d) * a[b].d, lanes_s(q, LOAD(a[b].qs)), acc);
        }
        return hsum(acc);
}

AVX2 static float dot_q4_1(const void *vw, const void *va, size_t n)
{
        const struct m40_block_q4_1 *w = vw;
        const struct m40_act_q8_1 *a = va;
        __m256 acc = _mm256_setzero_ps();
        float summs = 0.0f;

        for (size_t b = 0; b < n / M40_QK; b++) {
                summs = fmaf(h2f(w[b].m), a[b].s, summs);
                acc = fma_lanes(h2f(w[b].d) * a[b].d, lanes_u(nib(w[b].qs), LOAD(a[b].qs)), acc);
        }
        return hsum(acc) + summs;
}

AVX2 static float dot_q5_0(const void *vw, const void *va, size_t n)
{
        const struct m40_block_q5_0 *w = vw;
        const struct m40_act_q8_0 *a = va;
        __m256 acc = _mm256_setzero_ps();

        for (size_t b = 0; b < n / M40_QK; b++) {
                __m256i q = _mm256_or_si256(nib(w[b].qs),
                                            _mm256_and_si256(bits(w[b].qh), _mm256_set1_epi8(16)));

                q = _mm256_sub_epi8(q, _mm256_set1_epi8(16));
                acc = fma_lanes(h2f(w[b].d) * a[b].d, lanes_s(q, LOAD(a[b].qs)), acc);
        }
        return hsum(acc);
}

AVX2 static float dot_q5_1(const void *vw, const void *va, size_t n)
{
        const struct m40_block_q5_1 *w = vw;
        const struct m40_act_q8_1 *a = va;
        __m256 acc = _mm256_setzero_ps();
        float summs = 0.0f;

        for (size_t b = 0; b < n / M40_QK; b++) {
                const __m256i q = _mm256_or_si256(
                        nib(w[b].qs), _mm256_and_si256(bits(w[b].qh), _mm256_set1_epi8(16)));

                summs = fmaf(h2f(w[b].m), a[b].s, summs);
                acc = fma_lanes(h2f(w[b].d) * a[b].d, lanes_u(q, LOAD(a[b].qs)), acc);
        }
        return hsum(acc) + summs;
}

AVX2 static float dot_q8_0(const void *vw, const void *va, size_t n)
{
        const struct m40_block_q8_0 *w = vw;
        const struct m40_act_q8_0 *a = va;
        __m256 acc = _mm256_setzero_ps();

        for (size_t b = 0; b < n / M40_QK; b++)
                acc = fma_lanes(h2f(w[b].d) * a[b].d, lanes_s(LOAD(w[b].qs), LOAD(a[b].qs)), acc);
        return hsum(acc);
}

/* k_scales - Q4_K/Q5_K sub-block scales and mins; *prod gets the minimum terms (as
 * actq.c's kmins()). */
AVX2 static inline void k_scales(const uint8_t *scales, const struct m40_act_q8_k *a, int16_t sc[8],
                                 int32_t prod[4])
{
        uint8_t s, m[8];

        for (int j = 0; j < 8; j++) {
                scale_min_k4(j, scales, &s, &m[j]);
                sc[j] = s;
        }
        for (int r = 0; r < 4; r++)
                prod[r] = m[2 * r] * (a->bsums[4 * r] + a->bsums[4 * r + 1]) +
                          m[2 * r + 1] * (a->bsums[4 * r + 2] + a->bsums[4 * r + 3]);
}

/* k_lanes - lanes of 4-or-5-bit sub-blocks: lo, hi (elements 64j..64j+31, +32..+63). */
AVX2 static inline __m256i k_lanes(__m256i lo, __m256i hi, const int8_t *y, int16_t s0, int16_t s1)
{
        const __m256i p0 =
                _mm256_madd_epi16(_mm256_maddubs_epi16(lo, LOAD(y)), _mm256_set1_epi16(s0));
        const __m256i p1 =
                _mm256_madd_epi16(_mm256_maddubs_epi16(hi, LOAD(y + 32)), _mm256_set1_epi16(s1));
        return _mm256_add_epi32(p0, p1);
}

AVX2 static float dot_q4_k(const void *vw, const void *va, size_t n)
{
        const struct m40_block_q4_k *w = vw;
        const struct m40_act_q8_k *a = va;
        const __m256i m4 = _mm256_set1_epi8(15);
        __m256 acc = _mm256_setzero_ps();
        float accm[4] = {0};
        int16_t sc[8];
        int32_t prod[4];

        for (size_t i = 0; i < n / M40_QK_K; i++) {
                const float d = a[i].d * h2f(w[i].d);
                const float dmin = -a[i].d * h2f(w[i].dmin);
                __m256i sumi = _mm256_setzero_si256();

                k_scales(w[i].scales, &a[i], sc, prod);
                for (int r = 0; r < 4; r++)
                        accm[r] = fmaf(dmin, (float)prod[r], accm[r]);
                for (int j = 0; j < 4; j++) {
                        const __m256i q = LOAD(w[i].qs + 32 * j);
                        const __m256i lo = _mm256_and_si256(q, m4);
                        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);

                        sumi = _mm256_add_epi32(
                                sumi, k_lanes(lo, hi, a[i].qs + 64 * j, sc[2 * j], sc[2 * j + 1]));
                }
                acc = fma_lanes(d, sumi, acc);
        }
        return hsum(acc) + m40_act_hsum4(accm);
}

AVX2 static float dot_q5_k(const void *vw, const void *va, size_t n)
{
        const struct m40_block_q5_k *w = vw;
        const struct m40_act_q8_k *a = va;
        const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
        __m256 acc = _mm256_setzero_ps();
        float summs = 0.0f;
        int16_t sc[8];
        int32_t prod[4];

        for (size_t i = 0; i < n / M40_QK_K; i++) {
                const float d = a[i].d * h2f(w[i].d);
                const float dmin = -a[i].d * h2f(w[i].dmin);
                const __m256i qh = LOAD(w[i].qh);
                __m256i sumi = _mm256_setzero_si256();

                k_scales(w[i].scales, &a[i], sc, prod);
                summs = fmaf(dmin, (float)(prod[0] + prod[1] + prod[2] + prod[3]), summs);
                for (int j = 0; j < 4; j++) {
                        const __m256i q = LOAD(w[i].qs + 32 * j);
                        /* bit 2j (low half) and 2j+1 (high half) of each qh byte, to 16 */
                        const __m256i h0 = _mm256_slli_epi16(
                                _mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one), 4);
                        const __m256i h1 = _mm256_slli_epi16(
                                _mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one), 4);
                        const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4), h0);
                        const __m256i hi =
                                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), h1);

                        sumi = _mm256_add_epi32(
                                sumi, k_lanes(lo, hi, a[i].qs + 64 * j, sc[2 * j], sc[2 * j + 1]));
                }
                acc = fma_lanes(d, sumi, acc);
        }
        return hsum(acc) + summs;
}

/* q6_chunk - sub-block pair c of 32 elements (scales sc[2c], sc[2c+1] for its halves). */
AVX2 static inline __m256i q6_chunk(__m256i q, const int8_t *y, const int8_t *sc)
{
        const __m256i s = _mm256_set_m128i(_mm_set1_epi16(sc[1]), _mm_set1_epi16(sc[0]));

        return _mm256_madd_epi16(_mm256_maddubs_epi16(q, LOAD(y)), s);
}

AVX2 static float dot_q6_k(const void *vw, const void *va, size_t n)
{
        const struct m40_block_q6_k *w = vw;
        const struct m40_act_q8_k *a = va;
        const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
        __m256 acc = _mm256_setzero_ps();

        for (size_t i = 0; i < n / M40_QK_K; i++) {
                const float d = a[i].d * h2f(w[i].d);
                const int8_t *sc = w[i].scales, *y = a[i].qs;
                const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
                __m256i sumi = _mm256_setzero_si256();

                for (int h = 0; h < 2; h++, sc += 8, y += 128) {
                        const __m256i l0 = LOAD(w[i].ql + 64 * h), l1 = LOAD(w[i].ql + 64 * h + 32);
                        const __m256i qh = LOAD(w[i].qh + 32 * h);
#define HI(s) _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, s), m2), 4)
                        const __m256i q0 = _mm256_or_si256(_mm256_and_si256(l0, m4), HI(0));
                        const __m256i q1 = _mm256_or_si256(_mm256_and_si256(l1, m4), HI(2));
                        const __m256i q2 = _mm256_or_si256(
                                _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), HI(4));
                        const __m256i q3 = _mm256_or_si256(
                                _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), HI(6));
#undef HI
                        sumi = _mm256_add_epi32(sumi, q6_chunk(q0, y, sc));
                        sumi = _mm256_add_epi32(sumi, q6_chunk(q1, y + 32, sc + 2));
                        sumi = _mm256_add_epi32(sumi, q6_chunk(q2, y + 64, sc + 4));
                        sumi = _mm256_add_epi32(sumi, q6_chunk(q3, y + 96, sc + 6));
                }
                const __m256i bs = _mm256_madd_epi16(LOAD(a[i].bsums), sc16);

                sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(bs, 5));
                acc = fma_lanes(d, sumi, acc);
        }
        return hsum(acc);
}

m40_act_dot_fn m40_act_dot_x86(uint32_t wtype)
{
        __builtin_cpu_init();
        if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
                return NULL;
        switch (wtype) {
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

#else

m40_act_dot_fn m40_act_dot_x86(uint32_t wtype)
{
        (void)wtype;
        return NULL;
}

#endif
