/* cuda/kernels/quant_k.cuh - the decoders of the 256-element super-block types (Q4_K, Q5_K,
 * Q6_K) on the GPU: the part of quant.cuh (which includes this file at its end, and whose
 * comment gives the contract: pieces, deq8/ld32/run8/dec8, exactness, layouts) for the K
 * quants. Included on its own it brings quant.cuh with it. */
#ifndef M40_CUDA_QUANT_K_CUH
#define M40_CUDA_QUANT_K_CUH

#include "cuda/kernels/quant.cuh"

/* Q4_K and Q5_K (256 elements: d, dmin, 12 scale bytes, [qh 32,] qs 128): groups of 64
 * elements j = 0..3 use qs bytes 32j..32j+31, low nibbles for sub-block 2j, high ones
 * for 2j + 1; x = d * sc * q - dmin * mn. Piece s (0..7): j = s / 2, half hh = s % 2:
 * qs bytes 32j + 16hh .. +15, elements 64j + 16hh + 0..15 (runs 0-3, group 0) and
 * 64j + 32 + 16hh + 0..15 (runs 4-7, group 1). Q5_K's 5th bit of element l of group j
 * is bit 2j (low) or 2j + 1 (high) of qh[l]. */
template <bool Q5> struct qt_k45 : q_deq8<qt_k45<Q5>> {
        enum { EPP = 32, NRUN = 8, NG = 2, XSUM = 1, TAIL = 0, SPLIT = 0, BB = Q5 ? 176 : 144 };
        enum { QS = Q5 ? 48 : 16 };
        struct raw {
                uint4 h, q, qh;
        };
        M40_HD int pieces(int n_in)
        {
                return n_in >> 5;
        }
        template <bool VEC> M40_HD void load(raw &r, const uint8_t *row, int p, int)
        {
                const uint8_t *b = row + (p >> 3) * BB;
                const int j = (p & 7) >> 1, hh = p & 1;

                r.h = ld_u128(b);
                r.q = ld_u128(b + QS + 32 * j + 16 * hh);
                if (Q5)
                        r.qh = ld_u128(b + 16 + 16 * hh);
        }
        M40_HD void scale(const raw &r, int p, int g, float *d, float *m)
        {
                uint32_t sc, mn;

                k4_scale_pair(r.h, (p & 7) >> 1, &sc, &mn);
                nib_dm<Q5 ? 2 : 3>(h2f(r.h.x & 0xffff) * (float)((sc >> (8 * g)) & 0xff),
                                   -h2f(r.h.x >> 16) * (float)((mn >> (8 * g)) & 0xff), 0.0f, d, m);
        }
        M40_HD void run(const raw &r, int p, int t, float v[4])
        {
                const uint32_t w = word(r.q, t & 3);
                uint32_t q;

                if (Q5)
                        q = ((t >= 4 ? HI4(w) : LO4(w)) |
                             ((word(r.qh, t & 3) >> (2 * ((p & 7) >> 1) + (t >= 4))) & 0x01010101u)
                                     << 4)
                            << 2;
                else
                        q = t >= 4 ? HI4S(w) : LO4S(w);
                nib_f4(q, v);
        }
        M40_HD int xoff(int p, int t)
        {
                return 256 * (p >> 3) + 64 * ((p & 7) >> 1) + 16 * (p & 1) + 4 * (t & 3) +
                       (t >= 4 ? 32 : 0);
        }
        struct raw8 {
                uint4 h;
                uint2 q, qh;
        };
        M40_HD void ld8(const uint8_t *row, int k0, int, raw8 &r)
        {
                const uint8_t *b = row + (k0 >> 8) * BB;
                const int k = k0 & 255, j = k >> 6, l = k & 31;

                r.h = ld_u128(b);
                r.q = ld_u64(b + QS + 32 * j + l);
                r.qh = Q5 ? ld_u64(b + 16 + l) : make_uint2(0, 0);
        }
        struct raw32 { /* sub-block k0 / 32: the header, its 32 quant bytes (and 5th bits) */
                uint4 h, qa, qb, ha, hb;
        };
        M40_HD void ld32(const uint8_t *row, int k0, int, raw32 &r)
        {
                const uint8_t *b = row + (k0 >> 8) * BB;
                const int j = (k0 & 255) >> 6;

                r.h = ld_u128(b);
                r.qa = ld_u128(b + QS + 32 * j);
                r.qb = ld_u128(b + QS + 32 * j + 16);
                r.ha = Q5 ? ld_u128(b + 16) : make_uint4(0, 0, 0, 0);
                r.hb = Q5 ? ld_u128(b + 32) : make_uint4(0, 0, 0, 0);
        }
        M40_HD raw8 run8(const raw32 &r, int i) /* elements 8i .. 8i + 7: bytes 8i */
        {
                const uint4 &q = i < 2 ? r.qa : r.qb, &h = i < 2 ? r.ha : r.hb;
                raw8 v;

                v.h = r.h;
                v.q = i & 1 ? make_uint2(q.z, q.w) : make_uint2(q.x, q.y);
                v.qh = i & 1 ? make_uint2(h.z, h.w) : make_uint2(h.x, h.y);
                return v;
        }
        M40_HD void dec8(const raw8 &r, int k0, int, float w[8])
        {
                const int k = k0 & 255, sb = k >> 5, j = sb >> 1, hi = sb & 1;
                const uint4 h = r.h;
                const uint2 q = r.q, qh = r.qh;
                uint32_t sc, mn;

                k4_scale_min(h, sb, &sc, &mn);
                const float d = h2f(h.x & 0xffff) * (float)sc, m = h2f(h.x >> 16) * (float)mn;
                for (int e = 0; e < 2; e++) {
                        const uint32_t qw = e ? q.y : q.x, hw = e ? qh.y : qh.x;
                        uint32_t v = hi ? HI4(qw) : LO4(qw);

                        if (Q5)
                                v |= ((hw >> (2 * j + hi)) & 0x01010101u) << 4;
                        bytes_f4<0>(v, w + 4 * e);
                }
                for (int i = 0; i < 8; i++)
                        w[i] = mul_add_rn(w[i], d, -m);
        }
};
template <> struct qt<M40_GGML_Q4_K> : qt_k45<false> {
};
template <> struct qt<M40_GGML_Q5_K> : qt_k45<true> {
};

/* Q6_K (256 elements: ql[128], qh[64], int8 scales[16], d): two halves n of 128; in a
 * half, element 32m + l (m = 0..3, l = 0..31) is the low (m < 2) or high nibble of
 * ql[64n + 32(m & 1) + l] with bits 2m, 2m+1 of qh[32n + l] on top, minus 32, times
 * d * scales[8n + l / 16 + 2m]. Split row: the first 208 bytes of every block (ql, qh,
 * scales), then d[nb]. Piece s (0..7): n = s / 4, l0 = 8 (s % 4): elements 128n + 32m +
 * l0 + 0..7 for m = 0..3 (runs 2m, 2m + 1; group m); 8-byte loads when the row is
 * 16-byte aligned, 2-byte ones otherwise. */
template <> struct qt<M40_GGML_Q6_K> : q_deq8<qt<M40_GGML_Q6_K>> {
        enum { EPP = 32, NRUN = 8, NG = 4, XSUM = 1, TAIL = 0, SPLIT = 1, BB = 210, BODY = 208 };
        struct raw {
                uint32_t la[2], lb[2], qh[2], sc[2], d;
        };
        M40_HD int pieces(int n_in)
        {
                return n_in >> 5;
        }
        template <bool VEC> M40_HD void ld2w(const uint8_t *p, uint32_t v[2])
        {
                if (VEC) {
                        const uint2 u = ld_u64(p);
                        v[0] = u.x, v[1] = u.y;
                } else {
                        v[0] = ld_u32_a2(p), v[1] = ld_u32_a2(p + 4);
                }
        }
        template <bool VEC> M40_HD void load(raw &r, const uint8_t *row, int p, int n_in)
        {
                const uint8_t *b = row + (p >> 3) * BODY;
                const int n = (p >> 2) & 1, l0 = 8 * (p & 3);

                ld2w<VEC>(b + 64 * n + l0, r.la);
                ld2w<VEC>(b + 64 * n + 32 + l0, r.lb);
                ld2w<VEC>(b + 128 + 32 * n + l0, r.qh);
                ld2w<VEC>(b + 192 + 8 * n, r.sc);
                r.d = ld_u16(row + BODY * (n_in >> 8) + 2 * (p >> 3));
        }
        M40_HD void scale(const raw &r, int p, int g, float *d, float *m)
        {
                const int i = ((p & 3) >> 1) + 2 * g;          /* scale byte 0..7 of this half */
                const uint32_t w = i >= 4 ? r.sc[1] : r.sc[0]; /* no register indexing */
                const int8_t s = (int8_t)((w >> (8 * (i & 3))) & 0xff);

                nib_dm<1>(h2f(r.d) * (float)s, 0.0f, 32.0f, d, m); /* 6-bit quants */
        }
        M40_HD void run(const raw &r, int, int t, float v[4])
        {
                const int m = t >> 1, e = t & 1;
                const uint32_t src = (m & 1) ? r.lb[e] : r.la[e];
                const uint32_t nib = m >= 2 ? HI4(src) : LO4(src);

                nib_f4((nib | (((r.qh[e] >> (2 * m)) & 0x03030303u) << 4)) << 1, v);
        }
        M40_HD int xoff(int p, int t)
        {
                return 256 * (p >> 3) + 128 * ((p >> 2) & 1) + 32 * (t >> 1) + 8 * (p & 3) +
                       4 * (t & 1);
        }
        struct raw8 {
                uint2 q, h;
                uint32_t s, d;
        };
        M40_HD void ld8(const uint8_t *row, int k0, int n_in, raw8 &r)
        {
                const uint8_t *b = row + (k0 >> 8) * BODY;
                const int k = k0 & 255, n = k >> 7, m = (k >> 5) & 3, l = k & 31;

                r.q = ld_u64_a2(b + 64 * n + 32 * (m & 1) + l);
                r.h = ld_u64_a2(b + 128 + 32 * n + l);
                r.s = ld_u8(b + 192 + 8 * n + (l >> 4) + 2 * m);
                r.d = ld_u16(row + BODY * (n_in >> 8) + 2 * (k0 >> 8));
        }
        struct raw32 { /* elements k0 .. k0 + 31 (one m of a half): ql, qh, 2 scales, d */
                uint4 qa, qb, ha, hb;
                uint32_t s2, d;
        };
        M40_HD void ld32(const uint8_t *row, int k0, int n_in, raw32 &r)
        {
                const uint8_t *b = row + (k0 >> 8) * BODY;
                const int k = k0 & 255, n = k >> 7, m = (k >> 5) & 3;
                const uint8_t *src = b + 64 * n + 32 * (m & 1), *hp = b + 128 + 32 * n;

                r.qa = ld_u128_a2(src);
                r.qb = ld_u128_a2(src + 16);
                r.ha = ld_u128_a2(hp);
                r.hb = ld_u128_a2(hp + 16);
                r.s2 = ld_u16(b + 192 + 8 * n + 2 * m);
                r.d = ld_u16(row + BODY * (n_in >> 8) + 2 * (k0 >> 8));
        }
        M40_HD raw8 run8(const raw32 &r, int i) /* elements 8i .. 8i + 7: l = 8i */
        {
                const uint4 &q = i < 2 ? r.qa : r.qb, &h = i < 2 ? r.ha : r.hb;
                raw8 v;

                v.q = i & 1 ? make_uint2(q.z, q.w) : make_uint2(q.x, q.y);
                v.h = i & 1 ? make_uint2(h.z, h.w) : make_uint2(h.x, h.y);
                v.s = (r.s2 >> (8 * (i >> 1))) & 0xff;
                v.d = r.d;
                return v;
        }
        M40_HD void dec8(const raw8 &r, int k0, int, float w[8])
        {
                const int m = ((k0 & 255) >> 5) & 3;
                const int8_t s = (int8_t)r.s;
                const float d = h2f(r.d) * (float)s;

                for (int e = 0; e < 2; e++) {
                        const uint32_t q = e ? r.q.y : r.q.x, h = e ? r.h.y : r.h.x;
                        const uint32_t nib = m >= 2 ? HI4(q) : LO4(q);

                        bytes_f4<32>(nib | (((h >> (2 * m)) & 0x03030303u) << 4), w + 4 * e);
                }
                for (int i = 0; i < 8; i++)
                        w[i] *= d;
        }
};

#endif
