/* cuda/kernels/matvec.cuh - weight matrix times activations, FP32 arithmetic on the weights'
 * own storage (fp16, bf16, quantized blocks): the kernels and the inner loops a
 * persistent kernel calls (their launch templates: matvec_launch.cuh).
 *
 * Computes y[c][o] = sum_k W[o][k] * x[c][k] for c < nb (batch, 1..64), o < n_out, with
 * W (n_out, n_in) in GGML type T (rows of row_bytes bytes) and x (nb, ldx), y (nb, ldy)
 * row-major floats: the CPU engine's m40_cpu_matmul() (daemon/engine/matmul.h).
 *
 * k_matvec<T, NB, R, VEC, MODE, U> - batch 1..8 (NB = 1, 2, 4, 8 columns, nb <= NB): the
 *   bandwidth kernel, one mv_block() call per block (a persistent kernel makes those calls
 *   itself). Launch: 256 threads = 8 warps per block, 1-D grid. Each warp owns
 *   R consecutive rows (1 to 4, see mv_rows in matvec_launch.cuh) and a 1/S share of
 *   their pieces (S = 1, 2, 4 or 8 warps of one block split a row group when rows are
 *   few, so every SM has warps to hide latency). Lane l takes pieces l, l + 32, ...:
 *   adjacent lanes read adjacent bytes of a row, every weight is loaded once and used
 *   for NB columns, every activation run is loaded once (16-byte read-only loads) and
 *   used for R rows. Sums: per lane and scale group, then the group scale, then a warp
 *   shuffle tree, then the S partials in split order: deterministic.
 * It writes exactly y[c][o] for c < nb, o < n_out, nothing else, and reads x only at
 * k < n_in. No atomics: a result does not depend on timing. Larger batches take the
 * tiled kernel of mmq.cuh.
 *
 * Tolerance against the double-precision dot product of the dequantized weights: the
 * error of FP32 sums, at most ~1e-6 of sum |w x| for the shapes tested (quant.cuh says
 * why the 4/5/6-bit paths come closest); tests/gpu/test_matvec.c bounds it at 1e-5.
 * Maxwell-clean (sm_52): shuffles (sm_30), __ldg, no sm_60+ feature. */
#ifndef M40_CUDA_MATVEC_CUH
#define M40_CUDA_MATVEC_CUH

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/runtime/launch.h"
#include "cuda/kernels/matvec.h"
#include "cuda/kernels/ops.h"
#include "cuda/kernels/quant.cuh"

#define MV_THREADS 256
/* k_matvec blocks per SM its register budget keeps room for (64K registers per SM: 4
 * blocks of 256 threads leave 64 per thread): 4 for the 32-element 4/5-bit types
 * (MV_MINB_Q) and Q8_0 (MV_MINB_Q8) at batch 1, 2 for the rest (MV_MINB). These
 * kernels wait on memory far more than they compute, so warps in flight decide their
 * speed as long as nothing spills. Same-run A/Bs of decode (H100): Q4_0-type cap 3 ->
 * 4 with two-word pieces (mv_q): 8B Q4_0 326 -> 362 tok/s, 1B Q4_0 1208 -> 1341 (5
 * blocks spill: 298); at batch 8 the cap cost more than it gave (8B Q4_0 b8 621 ->
 * 479 at cap 3), hence batch 1 only. Q8_0 cap 2 -> 4: 8B b1 259 -> 271, 1B b1 1042 ->
 * 1094, 135M b1 1199 -> 1117 (at batch 8 mixed, 8B 234 -> 231, 1B 1226 -> 1314, and
 * its batch-2 kernels spill at 64 registers: batch 1 only). The K types lost with
 * more (8B Q4_K_M 258 -> 247 at 3, 210 at 4). Again with the epilogue loads after the
 * products (1e29dac), 4 -> 3 blocks for Q8_0 and the Q4_0 types: 8B Q8_0 286.2 -> 269.5,
 * 8B Q4_0 419.1 -> 379.1, 135M Q8_0 1434.4 -> 1421.5 (same run, 2 rounds).
 * Knobs for A/B builds, as MV_WPS (matvec_launch.cuh). */
#ifndef MV_MINB
#define MV_MINB 2
#endif
#ifndef MV_MINB_Q
#define MV_MINB_Q 4
#endif
#ifndef MV_MINB_Q8
#define MV_MINB_Q8 4
#endif
/* mv_rowp() may hide the rows' start addresses from the compiler (mv_hoist; 0: never),
 * knob for A/B */
#ifndef MV_HOIST
#define MV_HOIST 1
#endif
/* The L2 hint of the fused decode launches (matvec.h, m40_cuda_rms.next); knobs for A/B:
 * MV_PF 0 drops it, MV_PF_ALL 1 gives it to every block instead of the last ones (about
 * one per SM). */
#ifndef MV_PF
#define MV_PF 1
#endif
#ifndef MV_PF_ALL
#define MV_PF_ALL 0
#endif
#define MV_WARPS (MV_THREADS / 32)

static_assert(MV_WARPS == 8, "k_matvec splits rows over up to 8 warps of a block");

#include "cuda/kernels/matvec_epilogue.cuh" /* the fused RMSNorm and RoPE epilogues */

/* The arguments every launcher takes (checked by matvec.cu). */
struct mv_args {
        const uint8_t *w;
        size_t row_bytes;
        int n_out, n_in;
        const float *x;
        int ldx;
        float *y;
        int ldy;
        int nb;
        bool vec;            /* rows and x are 16-byte aligned (float types: whole-piece loads) */
        bool add;            /* k_matvec: y += x W^T (all matrices of the call) */
        struct mv_rms rms;   /* k_matvec: the fused RMSNorm */
        struct mv_rope rope; /* k_matvec MODE 4 */
        int rms_mode;        /* 0 none, 1 consumer, 2 producer, 3 consumer + SwiGLU, 4 consumer +
                              * RoPE and KV store (k_matvec's MODE) */
};

/* k_matvec's matrices: 1 to MV_MAX_MATS weight matrices of one type, n_in and row_bytes
 * that multiply the same x in one launch (q, k, v; gate, up), each with its own output.
 * Row groups (R rows) are numbered across them: matrix i has groups [g_end[i - 1],
 * g_end[i]). Passed by value. */
#define MV_MAX_MATS 3
struct mv_mats {
        const uint8_t *w[MV_MAX_MATS];
        float *y[MV_MAX_MATS];
        int n_out[MV_MAX_MATS], ldy[MV_MAX_MATS], g_end[MV_MAX_MATS];
        int add; /* y += result (a residual connection) instead of y = result */
        struct mv_rms rms;
        ptrdiff_t hoff;      /* MODE 3: up's rows minus gate's (bytes) */
        struct mv_rope rope; /* MODE 4 */
};
static_assert(MV_MAX_MATS == M40_CUDA_MATMUL_MAX_MATS && MV_MAX_MATS == 3,
              "k_matvec selects among 3 matrices");

/* Activations x[off .. off + 3] of one column; past n_in (float types' last piece)
 * they read as 0 and are not loaded. */
template <bool TAIL> M40_HD void load_x4(const float *x, int off, int n_in, float v[4])
{
        if (TAIL && off + 4 > n_in) {
                for (int i = 0; i < 4; i++)
                        v[i] = off + i < n_in ? ld_f32(x + off + i) : 0.0f;
                return;
        }
        const float4 f = ld_f4(x + off);
        v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
}

/* Whether mv_rowp() hides the row starts from the compiler, for type T at batch NB:
 * everywhere but the 32-element 4/5-bit types at batch 4 and 8. Same-run A/B (H100)
 * without -> with: 8B F16 b1 163.8 -> 165.9 tok/s, 1B F16 736 -> 755, 8B Q4_0 b1 350
 * -> 362, 8B Q4_K_M 265.5 -> 268.5 (1B 986 -> 968), but 8B Q4_0 b8 623 -> 589. */
template <int T, int NB> struct mv_hoist {
        enum {
                V = MV_HOIST && !(NB >= 4 && (T == M40_GGML_Q4_0 || T == M40_GGML_Q4_1 ||
                                              T == M40_GGML_Q5_0 || T == M40_GGML_Q5_1))
        };
};

/* The R rows' starts, for mv_load(). Rows at or past nrows (1 <= nrows <= R) are not
 * read: their slots get row nrows - 1 again, so that the loads and the arithmetic have
 * no branch per row (their sums are never written). PAIR: rows r >= R / 2 are the
 * second half's, hoff bytes after the first's. OPAQUE: each start is hidden from the
 * compiler, which otherwise folds it back into every load's address and recomputes
 * row * row_bytes + offset per piece (~4 integer instructions a load: a sixth of the
 * Q4_0 loop). */
template <int R, bool PAIR, bool OPAQUE>
M40_HD void mv_rowp(const uint8_t *rp[R], const uint8_t *w, size_t row_bytes, int nrows,
                    ptrdiff_t hoff)
{
        enum { H = PAIR ? R / 2 : R };

        M40_UNROLL
        for (int r = 0; r < R; r++) {
                const int i = r % H;

                rp[r] = w + (r >= H ? hoff : 0) + (size_t)(i < nrows ? i : nrows - 1) * row_bytes;
#ifdef __CUDA_ARCH__
                if (OPAQUE)
                        asm("" : "+l"(rp[r]));
#endif
        }
}

/* The R rows' raw bytes of piece p (rows from mv_rowp()), decoder Q. */
template <class Q, int R, bool VEC>
M40_HD void mv_load(typename Q::raw raw[R], const uint8_t *const rp[R], int n_in, int p)
{
        M40_UNROLL
        for (int r = 0; r < R; r++)
                Q::template load<VEC>(raw[r], rp[r], p, n_in);
}

/* The decoder k_matvec uses for type T at batch NB: qt<T>, but two-word pieces
 * (qt_wide<T>) for the 32-element 4/5-bit types at batch NB <= MV_Q32_WIDE_NB, which
 * halves the scale work per weight and amortizes each piece's addressing over twice
 * the weights (Q4_0 at batch 1: 239 instructions per 64 weights against 178 per 32;
 * sm_90 SASS). Batch 4 and 8 keep one-word pieces: 16 activations per piece and
 * column no longer fit their register budget (spills). Knob for A/B builds (0: never
 * wide), as MV_WPS. */
#ifndef MV_Q32_WIDE_NB
#define MV_Q32_WIDE_NB 2
#endif
template <int T, bool WIDE> struct mv_q_sel : qt<T> {
};
template <int T> struct mv_q_sel<T, true> : qt_wide<T> {
};
template <int T, int NB> struct mv_q : mv_q_sel<T, NB <= MV_Q32_WIDE_NB> {
};

/* Whether k_matvec scales the weights before the products (mv_piece_direct) instead of
 * the products' sums: from batch MV_DIRECT_NB on (knob for A/B builds; above 8: never).
 * The sums' way costs per weight, besides its NB FMAs, a share of the sum of x that the
 * types with an offset need (4 FADDs a run and column) and of zeroing the per-group sums;
 * the direct way one FMA per weight and row, whatever the batch, and fewer registers, so
 * that 4 rows fit a warp at batch 8 (mv_rows). sm_90 SASS of the Q4_0 loop at batch 8:
 * 461 instructions for 128 products (2 rows) against 566 for 256 (4 rows). Same-run A/B
 * in RESULTS.md (batch 1 takes the sums' way: its weights serve one column). */
#ifndef MV_DIRECT_NB
#define MV_DIRECT_NB 2
#endif
template <int T, int NB> struct mv_direct {
        enum { V = NB >= MV_DIRECT_NB };
};

/* Piece p of R rows (already loaded) times NB columns, added to acc, where mv_direct
 * says so: each run's weights are made whole first (w = d * v + m: one FMA per
 * weight and row, whatever the batch), then multiplied into acc directly. Against
 * mv_piece's per-group sums this holds R x NB fewer registers (no s[R][NB], no sum of
 * x), which is what lets a warp take 4 rows at batch 8 (mv_rows) and so read each
 * activation run once for 4 rows instead of 2. */
template <int T, int NB, int R>
M40_HD void mv_piece_direct(const typename mv_q<T, NB>::raw raw[R], int n_in, int p, const float *x,
                            int ldx, int nb, float acc[R][NB])
{
        typedef mv_q<T, NB> Q;
        enum { RPG = Q::NRUN / Q::NG }; /* runs per scale group */

        M40_UNROLL
        for (int g = 0; g < Q::NG; g++) {
                float d[R], m[R];

                M40_UNROLL
                for (int r = 0; r < R; r++)
                        Q::scale(raw[r], p, g, &d[r], &m[r]);
                M40_UNROLL
                for (int jj = 0; jj < RPG; jj++) {
                        const int j = g * RPG + jj, xo = Q::xoff(p, j);
                        float xv[NB][4];

                        /* every column's loads first, with no branch between them (their
                         * latencies overlap) and before the weights are decoded; columns
                         * past nb read as 0 */
                        M40_UNROLL
                        for (int c = 0; c < NB; c++) {
                                if (NB == 1 || c < nb) { /* nb >= 1 */
                                        load_x4<Q::TAIL>(x + c * ldx, xo, n_in, xv[c]);
                                } else {
                                        xv[c][0] = xv[c][1] = xv[c][2] = xv[c][3] = 0.0f;
                                }
                        }

                        float w[R][4];

                        M40_UNROLL
                        for (int r = 0; r < R; r++) { /* rows past nrows: see mv_rowp */
                                Q::run(raw[r], p, j, w[r]);
                                M40_UNROLL
                                for (int i = 0; i < 4; i++)
                                        w[r][i] = Q::XSUM ? fmaf(d[r], w[r][i], m[r])
                                                          : d[r] * w[r][i];
                        }
                        M40_UNROLL
                        for (int c = 0; c < NB; c++)
                                M40_UNROLL
                        for (int r = 0; r < R; r++)
                                M40_UNROLL
                        for (int i = 0; i < 4; i++)
                                acc[r][c] = fmaf(w[r][i], xv[c][i], acc[r][c]);
                }
        }
}

/* Piece p of R rows (already loaded) times NB columns, added to acc, by scale group:
 * per group g, s = sum v * x and, when the type needs it, xs = sum x; then
 * acc += d * s + m * xs (weight = d * v + m, quant.cuh). Activation runs are loaded once
 * for all R rows. */
template <int T, int NB, int R>
M40_HD void mv_piece_groups(const typename mv_q<T, NB>::raw raw[R], int n_in, int p, const float *x,
                            int ldx, int nb, float acc[R][NB])
{
        typedef mv_q<T, NB> Q;
        enum { RPG = Q::NRUN / Q::NG }; /* runs per scale group */

        M40_UNROLL
        for (int g = 0; g < Q::NG; g++) {
                float s[R][NB], xs[NB];

                M40_UNROLL
                for (int c = 0; c < NB; c++) {
                        xs[c] = 0.0f;
                        M40_UNROLL
                        for (int r = 0; r < R; r++)
                                s[r][c] = 0.0f;
                }
                M40_UNROLL
                for (int jj = 0; jj < RPG; jj++) {
                        const int j = g * RPG + jj, xo = Q::xoff(p, j);
                        float xv[NB][4];

                        M40_UNROLL
                        for (int c = 0; c < NB; c++) {
                                if (NB == 1 || c < nb) { /* nb >= 1 */
                                        load_x4<Q::TAIL>(x + c * ldx, xo, n_in, xv[c]);
                                } else {
                                        xv[c][0] = xv[c][1] = xv[c][2] = xv[c][3] = 0.0f;
                                }
                                if (Q::XSUM)
                                        xs[c] += (xv[c][0] + xv[c][1]) + (xv[c][2] + xv[c][3]);
                        }
                        M40_UNROLL
                        for (int r = 0; r < R; r++) { /* rows past nrows: see mv_rowp */
                                float v[4];

                                Q::run(raw[r], p, j, v);
                                M40_UNROLL
                                for (int c = 0; c < NB; c++)
                                        M40_UNROLL
                                for (int i = 0; i < 4; i++)
                                        s[r][c] = fmaf(v[i], xv[c][i], s[r][c]);
                        }
                }
                M40_UNROLL
                for (int r = 0; r < R; r++) {
                        float d, m;

                        Q::scale(raw[r], p, g, &d, &m);
                        M40_UNROLL
                        for (int c = 0; c < NB; c++) {
                                acc[r][c] = fmaf(d, s[r][c], acc[r][c]);
                                if (Q::XSUM)
                                        acc[r][c] = fmaf(m, xs[c], acc[r][c]);
                        }
                }
        }
}

/* Piece p of R rows (already loaded) times NB columns, added to acc: mv_piece_direct()
 * where mv_direct says so, else mv_piece_groups(). (An if/else, not an early return:
 * nvcc flags code after a return under a constant condition as unreachable, #128-D.) */
template <int T, int NB, int R>
M40_HD void mv_piece(const typename mv_q<T, NB>::raw raw[R], int n_in, int p, const float *x,
                     int ldx, int nb, float acc[R][NB])
{
        if (mv_direct<T, NB>::V)
                mv_piece_direct<T, NB, R>(raw, n_in, p, x, ldx, nb, acc);
        else
                mv_piece_groups<T, NB, R>(raw, n_in, p, x, ldx, nb, acc);
}

/* Whether matvec_lane() reads a piece's meta fields (scales) one piece ahead, with the
 * quants of the piece before: for Q4_0 and Q4_1 at batch 1. Left to the compiler, the
 * scale loads of the 64-register kernels came after the products had begun (sm_90
 * SASS), a second memory round trip per piece. Same-run A/B (H100), ahead against not:
 * 8B Q4_0 b1 365.6 -> 377.0 tok/s, 1B Q4_0 b1 1345.9 -> 1374.5; but at batch 8 8B Q4_0
 * 630.4 -> 614.3 and at batch 1 8B Q8_0 265.1 -> 257.6, 1B Q8_0 1093.8 -> 1060.1 (its
 * fused-epilogue kernels then spill; with 3 blocks per SM instead of 4, so that they do
 * not: 8B Q8_0 265.6 -> 253.5, as 3 blocks alone, 253.2), and 8B Q4_K_M (Q6_K)
 * unchanged: hence those two types at batch 1 only. MV_META_AHEAD 0 turns it off
 * (knob for A/B builds). */
#ifndef MV_META_AHEAD
#define MV_META_AHEAD 1
#endif
template <int T, int NB> struct mv_ahead {
        enum { V = MV_META_AHEAD && NB == 1 && (T == M40_GGML_Q4_0 || T == M40_GGML_Q4_1) };
};

/* matvec_lane()'s loop over a lane's pieces p_begin + lane, + nlanes, ... below p_end:
 * U pieces loaded, then computed, at a time; with AHEAD (mv_ahead, U = 1), each piece's
 * scales loaded with the quants of the piece before (U = 2 and more: without). */
template <int T, int NB, int R, bool VEC, int U, bool AHEAD = (mv_ahead<T, NB>::V && U == 1)>
struct mv_pieces {
        M40_HD void run(const uint8_t *const rp[R], int n_in, int p_begin, int p_end, int lane,
                        int nlanes, const float *x, int ldx, int nb, float acc[R][NB])
        {
                for (int p = p_begin + lane; p < p_end; p += U * nlanes) {
                        typename mv_q<T, NB>::raw raw[U][R];

                        M40_UNROLL
                        for (int u = 0; u < U; u++)
                                if (p + u * nlanes < p_end)
                                        mv_load<mv_q<T, NB>, R, VEC>(raw[u], rp, n_in,
                                                                     p + u * nlanes);
                        M40_UNROLL
                        for (int u = 0; u < U; u++)
                                if (p + u * nlanes < p_end)
                                        mv_piece<T, NB, R>(raw[u], n_in, p + u * nlanes, x, ldx, nb,
                                                           acc);
                }
        }
};
template <int T, int NB, int R, bool VEC, int U> struct mv_pieces<T, NB, R, VEC, U, true> {
        static_assert(U == 1, "scales ahead: one piece at a time");
        typedef mv_q<T, NB> Q;
        M40_HD void run(const uint8_t *const rp[R], int n_in, int p_begin, int p_end, int lane,
                        int nlanes, const float *x, int ldx, int nb, float acc[R][NB])
        {
                typename Q::raw next[R];
                int p = p_begin + lane;

                if (p < p_end) {
                        M40_UNROLL
                        for (int r = 0; r < R; r++)
                                Q::template load_meta<VEC>(next[r], rp[r], p, n_in);
                }
                for (; p < p_end; p += nlanes) {
                        typename Q::raw raw[R];

                        M40_UNROLL
                        for (int r = 0; r < R; r++)
                                raw[r] = next[r];
                        M40_UNROLL
                        for (int r = 0; r < R; r++)
                                Q::template load_body<VEC>(raw[r], rp[r], p);
                        if (p + nlanes < p_end) {
                                M40_UNROLL
                                for (int r = 0; r < R; r++)
                                        Q::template load_meta<VEC>(next[r], rp[r], p + nlanes,
                                                                   n_in);
                        }
                        mv_piece<T, NB, R>(raw, n_in, p, x, ldx, nb, acc);
                }
        }
};

/* matvec_lane - the inner loop: one lane's share of R rows times NB columns.
 * Rows w + r * row_bytes for r < nrows (<= R); pieces p_begin + lane, + nlanes, ...
 * below p_end; adds to acc[r][c] for c < nb (<= NB); acc[r] of r >= nrows gets row
 * nrows - 1's sums again, for the caller to drop. PAIR: two halves of R / 2 rows, the
 * second hoff bytes after the first (gate and up rows of the same index), nrows (<= R /
 * 2) counting the rows of a half. A persistent kernel calls it with
 * its own lane/piece split and reduces acc itself. (Loading the next piece before
 * computing this one, U = 2, costs more warps per SM than the overlap gains: see
 * mv_unroll; Q4_0 and Q4_1 read only their scales ahead: see mv_ahead.) */
template <int T, int NB, int R, bool VEC, int U = 1, bool PAIR = false>
M40_HD void matvec_lane(const uint8_t *w, size_t row_bytes, int nrows, int n_in, int p_begin,
                        int p_end, int lane, int nlanes, const float *x, int ldx, int nb,
                        float acc[R][NB], ptrdiff_t hoff = 0)
{
        static_assert(!PAIR || R % 2 == 0, "paired rows come in two halves");
        const uint8_t *rp[R];

        mv_rowp<R, PAIR, mv_hoist<T, NB>::V>(rp, w, row_bytes, nrows, hoff);
        mv_pieces<T, NB, R, VEC, U>::run(rp, n_in, p_begin, p_end, lane, nlanes, x, ldx, nb, acc);
}

/* Pieces a lane loads before it computes them (matvec_lane's U): 1. Two made most types
 * slower (Q4_0 0.50 -> 0.45 of copy bandwidth, F16 0.88 -> 0.84: fewer warps fit an
 * SM; 8B Q8_0 decode 267 -> 254 tok/s), and the K types, which gained from it at 2
 * rows per warp (4096x14336: Q4_K 0.37 -> 0.41), gain more from 4 rows and U = 1 (see
 * mv_rows, matvec_launch.cuh). Knob for A/B builds. */
#ifndef MV_U_K
#define MV_U_K 1 /* mv_unroll's U for the 4/5-bit K types at batch 1 (knob for A/B) */
#endif
template <int T, int NB> struct mv_unroll {
        enum { U = NB == 1 && (T == M40_GGML_Q4_K || T == M40_GGML_Q5_K) ? MV_U_K : 1 };
};

/* k_matvec's minimum blocks per SM (__launch_bounds__), see MV_MINB */
template <int T, int NB> struct mv_minb {
        enum {
                V = NB > 1 ? MV_MINB
                    : T == M40_GGML_Q4_0 || T == M40_GGML_Q4_1 || T == M40_GGML_Q5_0 ||
                                    T == M40_GGML_Q5_1
                            ? MV_MINB_Q
                    : T == M40_GGML_Q8_0 ? MV_MINB_Q8
                                         : MV_MINB
        };
};

/* Where k_matvec issues its epilogue's loads (the consumer's count and first partial,
 * MODES 1, 3, 4; the producer's y before the add and the next norm's weight, MODE 2;
 * RoPE's cos/sin and the KV slot, MODE 4): when the kernel starts, so that their
 * latency hides behind the products, in the kernels of 128 registers; after the
 * products in those of 64 (4 blocks per SM, mv_minb), where holding them through the
 * inner loop cost more than the load latency they hide: same-run A/B (H100, batch-1
 * decode, 2 rounds), at the start -> after the products: 8B Q8_0 277.4 -> 283.2 tok/s,
 * 8B Q4_0 400.4 -> 414.9, 135M Q8_0 1303.8 -> 1365.4, but 1B Q4_K_M (128 registers)
 * 1191.0 -> 1166.8. MV_EPI_AHEAD (knob for A/B builds): 1 all at the start, 0 all
 * after the products, 2 by the register budget as above. */
#ifndef MV_EPI_AHEAD
#define MV_EPI_AHEAD 2
#endif
template <int T, int NB> struct mv_epi_ahead {
        enum { V = MV_EPI_AHEAD == 2 ? mv_minb<T, NB>::V < 4 : MV_EPI_AHEAD };
};

/* mv_block - k_matvec's work for block vb of a grid of nvb blocks: what k_matvec does
 * in block blockIdx.x == vb when gridDim.x == nvb (nvb and split_log2 as mv_plan_of()
 * plans them, matvec_launch.cuh). All MV_THREADS threads of the block call it, with the
 * same arguments; a persistent kernel calls it for vb = blockIdx.x, + gridDim.x, ..
 * below nvb, and for other MODEs in later phases (see the barrier below for what must
 * lie between calls). Loads of x, of the producer's partials and of y read back go
 * through ld_f32()/ld_f4()/ld_rw() (quant.cuh: M40_LD_COHERENT).
 * MODE: 0 the plain product, 1 the fused RMSNorm's consumer, 2 its producer (struct
 * mv_rms), 3 the consumer of gate and up at once: each warp's R rows are R / 2 rows of
 * gate and the same rows of up (mv_mats.hoff bytes after), and the output is ops.h's
 * silu(gate) * up of the two scaled sums, bit for bit the unfused consumer followed by
 * ops.h's swiglu; 4 the consumer of q, k and v with RoPE and the KV store (struct
 * mv_rope; R even). The plain kernel has none of their code (compiled into every launch,
 * it cost the quantized kernels 10-20% of their bandwidth on an H100). */
template <int T, int NB, int R, bool VEC, int MODE, int U>
static __device__ __forceinline__ void mv_block(const struct mv_mats &mm, size_t row_bytes,
                                                int n_in, const float *__restrict__ x, int ldx,
                                                int nb, int split_log2, unsigned vb, unsigned nvb)
{
        static_assert((MODE != 3 && MODE != 4) || R % 2 == 0, "rows in pairs");
        __shared__ float part[MV_WARPS][R * NB];
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

        /* A call's last reads of shared memory follow no barrier: the split-0 warp's of
         * the other warps' part[] (MODE 0 with a split) and threads 0-7's of ws[]
         * (rms_partial, MODE 2), so a warp that is done could, in the block's next call,
         * overwrite its slot before they are read. (scl[] and tot[] are written only
         * after a barrier of the call that every thread passes after its reads of the
         * one before.) Hence a barrier before a call that follows another without one
         * in between: vb != blockIdx.x, a block's second and later virtual blocks. A
         * first call (vb == blockIdx.x) needs a __syncthreads() since the block's last
         * call, which every grid barrier and dataflow wait holds (persist.cuh); in
         * k_matvec the test folds away. */
        if (vb != blockIdx.x)
                __syncthreads();
        const int item = vb * MV_WARPS + warp;
        const int split = item & ((1 << split_log2) - 1);
        const int g = item >> split_log2;
        /* which matrix (unused ends repeat the last); selects, not indexing, keep mm in
         * parameter space. The group ends and row counts are read once, into values: the
         * compiler then selects among them, as it did when this was k_matvec's body,
         * instead of branching to each load through the reference. */
        const int ge0 = mm.g_end[0], ge1 = mm.g_end[1], ge2 = mm.g_end[2];
        const int no0 = mm.n_out[0], no1 = mm.n_out[1], no2 = mm.n_out[2];
        const int m = g < ge0 ? 0 : g < ge1 ? 1 : 2;
        const int g0 = m == 0 ? 0 : m == 1 ? ge0 : ge1;
        enum { HR = MODE == 3 ? R / 2 : R }; /* rows of a group (MODE 3: and as many of up) */
        const int row0 = (g - g0) * HR;
        const int n_out = g >= ge2 ? 0 : m == 0 ? no0 : m == 1 ? no1 : no2;
        const int nrows = n_out - row0 < HR ? n_out - row0 : HR;
        const uint8_t *__restrict__ w = m == 0 ? mm.w[0] : m == 1 ? mm.w[1] : mm.w[2];
        float *__restrict__ y = m == 0 ? mm.y[0] : m == 1 ? mm.y[1] : mm.y[2];
        const int ldy = m == 0 ? mm.ldy[0] : m == 1 ? mm.ldy[1] : mm.ldy[2];
        const int np = mv_q<T, NB>::pieces(n_in), steps = (np + 31) >> 5;
        const int p0 = 32 * ((steps * split) >> split_log2);
        const int p1 = 32 * ((steps * (split + 1)) >> split_log2);
        /* MODES 1-4: lane wr * NB + wc of a group's first warp writes output (wr, wc) */
        const int wr = lane / NB, wc = lane % NB;
        const bool mine = split == 0 && lane < HR * NB && wr < nrows && wc < nb;
        /* the epilogue's operands, loaded by epi_loads() */
        rms_pre<NB> rpre;
        rope_pre ropre;
        float yold = 0.0f, grow = 0.0f; /* MODE 2: y before the add, the next norm's weight */
        float acc[R][NB];

        /* the epilogue's loads: at the start or after the products (mv_epi_ahead) */
        const auto epi_loads = [&]() {
                if (MODE == 1 || MODE == 3 || MODE == 4)
                        rms_prefetch<NB>(mm.rms, rpre);
                if (MODE == 2 && mine) {
                        yold = mm.add ? ld_rw(y + (size_t)wc * ldy + row0 + wr) : 0.0f;
                        grow = mm.rms.g ? mm.rms.g[row0 + wr] : 0.0f;
                }
                if (MODE == 4 && mine)
                        rope_prefetch(mm.rope, m, row0 + wr, wc, ropre);
        };
        if (mv_epi_ahead<T, NB>::V)
                epi_loads();
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
                for (int c = 0; c < NB; c++)
                        acc[r][c] = 0.0f;
        if (nrows > 0)
                matvec_lane<T, NB, R, VEC, U, MODE == 3>(w + (size_t)row0 * row_bytes, row_bytes,
                                                         nrows, n_in, p0, p1 < np ? p1 : np, lane,
                                                         32, x, ldx, nb, acc, mm.hoff);
        if (MODE != 0) {
                if (!mv_epi_ahead<T, NB>::V)
                        epi_loads();
                l2_next(mm.rms, vb, nvb); /* the next kernel's first bytes, by the last blocks */
        }
        /* the R x NB sums, scattered: lane i < R * NB gets sum i = (r, c) = (i / NB, i %
         * NB) (sum(i) reads it from any lane) */
        enum { NS = R * NB, SSH = 5 - warp_log2<NS>::V };
        static_assert(NS <= 32, "k_matvec: at most 32 sums per warp");
        const float tot = warp_sum_scatter<NS>(&acc[0][0]);
        const auto sum = [tot](int i) {
                return __shfl_sync(0xffffffffu, tot, (i & (NS - 1)) << SSH);
        };
        const float mysum = sum(lane);

        if (MODE == 0) {
                if (split_log2 == 0) { /* the same for the whole grid: no barrier is skipped */
                        const int r = lane / NB, c = lane % NB;

                        if (lane < NS && r < nrows && c < nb)
                                y[(size_t)c * ldy + row0 + r] =
                                        mm.add ? ld_rw(y + (size_t)c * ldy + row0 + r) + mysum
                                               : mysum;
                        return;
                }
                if (lane < NS)
                        part[warp][lane] = mysum;
                __syncthreads();
                if (split == 0 && lane < NS) {
                        const int r = lane / NB, c = lane % NB;

                        if (r < nrows && c < nb) {
                                float total = 0.0f;

                                for (int k = 0; k < (1 << split_log2); k++)
                                        total += part[warp + k][lane];
                                y[(size_t)c * ldy + row0 + r] =
                                        mm.add ? ld_rw(y + (size_t)c * ldy + row0 + r) + total
                                               : total;
                        }
                }
                return;
        }

        /* the lane that writes output (r, c) = (lane / NB, lane % NB): its sum (MODE 3:
         * and up's, vu) */
        __shared__ float scl[MV_NB_MAX];
        float v = 0.0f, vu = 0.0f; /* MODE 4: vu is the pair partner's sum (row wr ^ 1) */

        if (split_log2 == 0) { /* the same for the whole grid: no barrier below is skipped */
                v = mysum;
                if (MODE == 3)
                        vu = sum(lane + HR * NB);
                if (MODE == 4)
                        vu = sum(lane ^ NB);
        } else {
                if (lane < NS)
                        part[warp][lane] = mysum;
                __syncthreads();
                if (mine)
                        for (int k = 0; k < (1 << split_log2); k++) {
                                v += part[warp + k][lane];
                                if (MODE == 3)
                                        vu += part[warp + k][lane + HR * NB];
                                if (MODE == 4) /* (wr ^ 1) * NB + wc: NB a power of 2 */
                                        vu += part[warp + k][lane ^ NB];
                        }
        }
        if (MODE == 1 || MODE == 3 || MODE == 4)
                rms_scale<NB>(mm.rms, nb, n_in, scl, rpre);
        if (mine) {
                float *yo = y + (size_t)wc * ldy + row0 + wr;

                if (MODE == 1 || MODE == 3 || MODE == 4)
                        v *= scl[wc];
                if (MODE == 3) { /* ops.h's swiglu of the two scaled sums */
                        vu *= scl[wc];
                        v = v / (1.0f + expf(-v)) * vu;
                }
                if (MODE == 4)
                        v = rope_store_row(mm.rope, ropre, m, row0 + wr, v, vu * scl[wc]);
                if (mm.add)
                        v = (MODE == 2 ? yold : ld_rw(yo)) + v;
                *yo = v;
                if (MODE == 2 && mm.rms.g)
                        mm.rms.xg[(size_t)wc * mm.rms.ldxg + row0 + wr] = v * grow;
        }
        if (MODE == 2)
                rms_partial<NB>(mm.rms, mine ? v * v : 0.0f, wc, vb, nvb);
}

/* k_matvec - mv_block() of this block in a grid of gridDim.x (MV_THREADS threads). */
template <int T, int NB, int R, bool VEC, int MODE, int U>
static __global__ void __launch_bounds__(MV_THREADS, mv_minb<T, NB>::V)
        k_matvec(const struct mv_mats mm, size_t row_bytes, int n_in, const float *__restrict__ x,
                 int ldx, int nb, int split_log2)
{
        mv_block<T, NB, R, VEC, MODE, U>(mm, row_bytes, n_in, x, ldx, nb, split_log2, blockIdx.x,
                                         gridDim.x);
}

#endif
