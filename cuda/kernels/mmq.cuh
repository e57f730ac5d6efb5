/* cuda/kernels/mmq.cuh - the batched weight product: weight tiles dequantized once per step into
 * shared memory and multiplied by all of a step's activation columns in FP32 register
 * tiles (the kernel behind matvec.h's m40_cuda_mmq()), and the split-K reduction.
 *
 * Computes y[c][o] = sum_k W[o][k] * x[c][k] for c < nb columns, o < n_out rows, W in
 * GGML type T (device layout, quant.cuh), x (nb, ldx) and y (nb, ldy) row-major floats:
 * the CPU engine's m40_cpu_matmul() (daemon/engine/matmul.h), as k_matvec/k_matmul.
 *
 * mq_tile<T, S>() - the tile, a __device__ function a persistent kernel can call: the
 *   block (S::NT threads) computes the S::TM x S::TN outputs of rows row0.. and columns
 *   col0.. over k in [k0, k1), k0 and k1 multiples of MQ_KS (k1 may be n_in).
 *   Per step of MQ_KS = 32 k: thread t < TM loads row t's 32 weights with the widest
 *   loads its block allows (quant.cuh's ld32(): a whole Q block, a K sub-block) and
 *   decodes them (run8() + dec8(): exact, the CPU's dequantization bit for bit) into
 *   shared memory laid out [k][row] (a warp's lanes are 32 consecutive rows: its stores
 *   are conflict-free); the activation threads read the step's TN x 32 activations, 8
 *   lanes along each column's 128 bytes (coalesced), into [k][column] with the columns
 *   XOR-swizzled by k (mq_xs(): conflict-free stores, contiguous 16-byte reads). Then
 *   each thread accumulates an S::MR x S::NR block of outputs (rows ty*MR.., columns
 *   mq_col(tx, ..)) from the two tiles with FP32 FMAs. Software pipeline: the next step's
 *   loads are issued before this step's products and decoded after them (their latency
 *   hides behind the FMAs), into the other half of a double buffer (single buffer with a
 *   second barrier when two do not fit 48 KB).
 *   Why this shape (DESIGN.md section 3): a Maxwell SM does 128 FFMA and reads 128
 *   bytes of shared memory per clock, so a thread must do several FMAs per 4-byte shared
 *   load. With MR x NR = 8 x 4 (TN 64) a thread does 32 FMAs per 12 floats read as
 *   3 LDS.128 (the warp's a-loads are broadcasts of 2 addresses, its b-loads 256
 *   contiguous bytes); each dequantized weight, made once per step and block, serves TN
 *   columns, so dequantization costs about 3 instructions a weight against TN FMAs.
 *   Arithmetic intensity of a block step: 2 * TM * TN * KS FLOP per (TM * KS weight
 *   bytes + TN * KS * 4 activation bytes) from global memory: at TN 64, Q4_0 (0.5625
 *   bytes a weight): 2 * 64 / (0.5625 + 4 * 64 / 128) = 50 FLOP per byte, above either
 *   machine's balance (20-24). One lane per row and 32-weight block keeps the load
 *   instructions (each touches 32 rows' cache lines) 4x fewer than 8-weight runs: with
 *   those, L1 lookups and not the FMAs bounded the kernel. The 8 x 8 thread tile of
 *   classic Maxwell SGEMM (1 shared byte per FMA instead of 1.5) measured no faster
 *   here (knob MQ_S64; RESULTS.md).
 * k_mmq<T, S> - on the shared schedule (mq_sched.cuh; a.sem set): a 1-D grid of the
 *   resident blocks, each taking its share of the units (row tiles of up to MQ_MAX_MATS
 *   matrices that share x, numbered across them, times ceil(nb / TN) column tiles) x
 *   MQ_KS steps of k. Else grid (row tiles, ceil(nb / TN), splits): block (x, y, z) is
 *   tile x, columns TN * y.., and the z-th of `nsplit` equal k ranges (multiples of
 *   MQ_KS); with one split it writes (or adds to) y; with more it writes its partial
 *   sums to part[z][c][row across the matrices], and k_mmq_reduce adds the splits up in
 *   order into y. Either way deterministic.
 * Tolerance: FP32 sums of exact weights, in another order than k_matvec's: the same
 *   bound as matvec.cuh (tests/gpu/test_mmq.c: 1e-5 of sum |w x|).
 * Maxwell-clean (sm_52): FP32 FMA, at most 48 KB of static shared memory per block,
 * __launch_bounds__(NT, MINB) (two blocks of 256 threads per SM in 64K registers), no
 * sm_60+ feature. */
#ifndef M40_CUDA_MMQ_CUH
#define M40_CUDA_MMQ_CUH

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "cuda/runtime/launch.h"
#include "cuda/kernels/matvec.h"
#include "cuda/kernels/mq_sched.cuh"
#include "cuda/kernels/quant.cuh"

#define MQ_KS       32 /* k per step: one 32-element block of the Q types */
#define MQ_SMEM_MAX (48 * 1024)

/* A tile shape: TM rows x TN columns per block of NT (TM or 2 TM) threads, MR x NR
 * outputs per thread; MINB blocks per SM the registers are bounded for (64K / (NT x
 * MINB) each). Threads t < TM load and dequantize row t's 32 weights of a step; the
 * activations are loaded by the other TM threads (NT = 2 TM), or by all (NT = TM). */
template <int TM_, int TN_, int MR_, int NR_, int NT_, int MINB_> struct mq_shape {
        enum { TM = TM_, TN = TN_, MR = MR_, NR = NR_, NT = NT_, MINB = MINB_ };
        enum { TX = TN / NR, TY = NT / TX };
        enum { NXC = TN * MQ_KS / 4 }; /* 16-byte runs of activations a step */
        enum { XT0 = NT == 2 * TM ? TM : 0, XN = NT - XT0 }; /* the activation threads */
        enum { NX = (NXC + XN - 1) / XN };                   /* runs per activation thread */
        enum { WS = MQ_KS * TM, XS = MQ_KS * TN };           /* floats of one buffer */
        enum { DB = 2 * (WS + XS) * 4 <= MQ_SMEM_MAX };      /* double-buffered */
        enum { SMEM = (DB ? 2 : 1) * (WS + XS) };
        static_assert(TX * NR == TN && TY * TX == NT && TY * MR == TM, "thread grid");
        static_assert((NT == TM || NT == 2 * TM) && TM % 32 == 0 && TN % 8 == 0,
                      "whole warps load");
        static_assert(MR % 4 == 0 && (NR == 1 || NR == 2 || NR == 4 || NR == 8),
                      "vector shared loads");
        static_assert((WS + XS) * 4 <= MQ_SMEM_MAX, "one buffer fits");
        static_assert(TX <= 8 || (TX % 8 == 0 && NT % 32 == 0 && NT / 32 % (TX / 8) == 0),
                      "warps tile the thread grid (mq_ty, mq_tx)");
};

/* The shapes by column tile (matvec.cu picks TN from the batch). Knobs for A/B builds:
 * MQ_S64, MQ_S32, MQ_S16 1 take 128-thread blocks with 8-row thread tiles (fewer shared
 * loads per FMA, more blocks per SM) instead of 256-thread blocks with 4-row ones. On the
 * shared schedule (mq_sched.cuh) the 16- and 32-column tiles gain from it and the
 * 64-column one loses (its 8 x 8 thread tile leaves 3 blocks, 12 warps, an SM;
 * RESULTS.md), so MQ_S64 alone is 0 by default.
 * Register budget: the 256-thread shapes run two blocks an SM in 128 registers a thread,
 * and their tile needs ~110-120 of them with its shared loads pipelined (a k step's
 * operands read before the FMAs of the one before, mq_mul()); a kernel that calls it
 * keeps little else live across it (mq_sched.cuh's mq_sk_sum() takes its sums in chunks
 * for this), else ptxas drops the pipelining or spills. */
#ifndef MQ_S64
#define MQ_S64 0
#endif
#ifndef MQ_S32
#define MQ_S32 1
#endif
#ifndef MQ_S16
#define MQ_S16 1
#endif
template <bool WIDE, class A, class B> struct mq_pick {
        typedef B type;
};
template <class A, class B> struct mq_pick<true, A, B> {
        typedef A type;
};
typedef mq_pick<MQ_S64, mq_shape<128, 64, 8, 8, 128, 3>, mq_shape<128, 64, 8, 4, 256, 2>>::type
        mq_s64;
typedef mq_pick<MQ_S32, mq_shape<128, 32, 8, 4, 128, 4>, mq_shape<128, 32, 4, 4, 256, 2>>::type
        mq_s32;
typedef mq_pick<MQ_S16, mq_shape<128, 16, 8, 2, 128, 4>, mq_shape<128, 16, 4, 2, 256, 2>>::type
        mq_s16;
typedef mq_shape<128, 8, 4, 1, 256, 2> mq_s8;

/* The 64-column tile on 64-row tiles, for products of few row tiles (knob for A/B builds;
 * 0, the default, never takes it): MQ_NARROW_STEPS > 0 gives it the launches whose mq_s64
 * units (row tiles x column tiles) x k steps are fewer than MQ_NARROW_STEPS a resident
 * block (the SMs x mq_s64::MINB), such as a 1B model's q/k/v and wo (6 and 4 steps a
 * block at 64 columns on 132 SMs), whose few units cut each unit's k among many blocks
 * with short pipelines and large partial tiles. Half-height tiles make twice the units,
 * each block's k range twice as long and its partial tile half the size, for twice the
 * activation loads a weight. By units alone (at most 32: the 8B's wo and down as well)
 * it gave the 1B Q4_0 +2.5% and the 8B Q4_0 -1.5% at b64 (RESULTS.md). sm_90 compiles it
 * without spills (128 registers); sm_52 (clang + ptxas 12.9) spills 8-76 bytes. */
#ifndef MQ_NARROW_STEPS
#define MQ_NARROW_STEPS 0
#endif
template <int T> struct mq_narrow {
        /* the 32-element quant types and Q8_0 only: the K and float types' weight threads
         * beside 64 activation threads of 8 runs each spill 88-648 bytes on sm_90 */
        enum {
                ON = MQ_NARROW_STEPS != 0 &&
                     (T == M40_GGML_Q8_0 || T == M40_GGML_Q4_0 || T == M40_GGML_Q4_1 ||
                      T == M40_GGML_Q5_0 || T == M40_GGML_Q5_1)
        };
        typedef typename mq_pick<ON, mq_shape<64, 64, 8, 4, 128, 4>, mq_s64>::type S;
};

/* Registers of one step's loads: a weight thread's 32 weights as loaded (quant.cuh's
 * raw32: decoded when they go to shared memory, after the products of the step before),
 * or an activation thread's NX runs of 4. */
template <int T, class S> struct mq_regs {
        typename qt<T>::raw32 w;
        float4 x[S::NX];
};

/* Where activation (column col, k kk) lives in a buffer: columns XOR-swizzled by kk in
 * runs of 4, so that the activation threads' stores (8 lanes along k of one column, 4
 * columns a warp) hit 32 banks, and a thread's 4 contiguous columns stay contiguous. */
template <class S> __device__ __forceinline__ int mq_xs(int kk, int col)
{
        return kk * S::TN + (col ^ (kk & ~3 & (S::TN - 1)));
}

/* mq_tid - threadIdx.x, made anew where it is called: the addresses a k step derives from it
 * are then computed in that step (a few integer instructions) instead of being hoisted out of
 * the k loop into registers that the products need for their pipelined shared loads. */
__device__ __forceinline__ int mq_tid()
{
        int t = threadIdx.x;

        asm volatile("" : "+r"(t));
        return t;
}

/* Load the step at k into r: rows past n_rows, columns past ncols and k past k1 read
 * as 0 (mq_store() decodes those weights to 0). Activation run i is column i / 8, k
 * k + 4 (i % 8): 8 lanes read a column's 128 bytes. */
template <int T, class S>
__device__ __forceinline__ void mq_load(mq_regs<T, S> &r, const uint8_t *__restrict__ w,
                                        size_t row_bytes, int n_rows, int n_in, int k, int k1,
                                        const float *__restrict__ x, int ldx, int ncols)
{
        const int t = mq_tid();

        if (t < S::TM) {
                if (t < n_rows && k < k1)
                        qt<T>::ld32(w + (size_t)t * row_bytes, k, n_in, r.w);
                if (S::XT0)
                        return;
        }
#pragma unroll
        for (int j = 0; j < S::NX; j++) {
                const int i = t - S::XT0 + S::XN * j, col = i >> 3, kx = k + 4 * (i & 7);
                const float *xr = x + (size_t)col * ldx + kx;

                if (i < S::NXC && col < ncols && kx + 4 <= k1) {
                        r.x[j] = ld_f4(xr);
                } else {
                        const bool ok = i < S::NXC && col < ncols;

                        r.x[j] = make_float4(ok && kx < k1 ? ld_f32(xr) : 0.0f,
                                             ok && kx + 1 < k1 ? ld_f32(xr + 1) : 0.0f,
                                             ok && kx + 2 < k1 ? ld_f32(xr + 2) : 0.0f,
                                             ok && kx + 3 < k1 ? ld_f32(xr + 3) : 0.0f);
                }
        }
}

/* Decode r's weights of the step at k (0 where mq_load() read none) and store them and
 * the activations into one buffer of shared memory: ws [MQ_KS][TM], xs as mq_xs(). */
template <int T, class S>
__device__ __forceinline__ void mq_store(const mq_regs<T, S> &r, int n_rows, int n_in, int k,
                                         int k1, float *__restrict__ ws, float *__restrict__ xs)
{
        const int t = mq_tid();

        if (t < S::TM) {
                const bool ok = t < n_rows && k < k1;

#pragma unroll
                for (int q = 0; q < 4; q++) {
                        float v[8];

                        if (ok) {
                                qt<T>::dec8(qt<T>::run8(r.w, q), k + 8 * q, n_in, v);
                        } else {
#pragma unroll
                                for (int e = 0; e < 8; e++)
                                        v[e] = 0.0f;
                        }
#pragma unroll
                        for (int e = 0; e < 8; e++)
                                ws[(8 * q + e) * S::TM + t] = v[e];
                }
                if (S::XT0)
                        return;
        }
#pragma unroll
        for (int j = 0; j < S::NX; j++) {
                const int i = t - S::XT0 + S::XN * j, col = i >> 3, kk = 4 * (i & 7);

                if (i < S::NXC) {
                        xs[mq_xs<S>(kk, col)] = r.x[j].x;
                        xs[mq_xs<S>(kk + 1, col)] = r.x[j].y;
                        xs[mq_xs<S>(kk + 2, col)] = r.x[j].z;
                        xs[mq_xs<S>(kk + 3, col)] = r.x[j].w;
                }
        }
}

/* Thread t's row group ty (rows ty * MR..) and column group tx (columns mq_col(tx, ..)).
 * By default a warp covers 32 / TX row groups of TX column groups (t / TX, t % TX).
 * Knob MQ_WARP_TILE 1 (for A/B, not yet run on a GPU; 0, the default, keeps that): where TX
 * is above 8 (the 64-column tile's 16), a warp covers 4 row groups of 8 column groups
 * instead, the block's warps tiling the TY x TX grid, so that a half-warp's 128-bit
 * operand loads read 128 distinct bytes at most: the activations' LDS.128 takes 2 shared
 * wavefronts instead of 4, 6 a k step instead of 8 for the 8 x 4 thread tile (ncu of the
 * 64-column tile: 2 for each weight load and 4 for the activation load, no conflicts, and
 * FFMAs stalled on those loads the largest stall, with shared memory the co-limit of the
 * FMA pipe, RESULTS.md). Same outputs per thread, same arithmetic: only which thread
 * computes which tile of outputs changes (mq_mul(), mq_out(), the shared schedule's sums). */
#ifndef MQ_WARP_TILE
#define MQ_WARP_TILE 0
#endif
template <class S, class I> __device__ __forceinline__ int mq_ty(I t)
{
        if (MQ_WARP_TILE && S::TX > 8) /* warp t / 32: (t / 32) / (TX / 8) row block of 4 */
                return (int)((unsigned)t / (32u * (S::TX / 8)) * 4u + ((unsigned)t >> 3 & 3u));
        return (int)(t / S::TX);
}
template <class S, class I> __device__ __forceinline__ int mq_tx(I t)
{
        if (MQ_WARP_TILE && S::TX > 8)
                return (int)((unsigned)t / 32u % (S::TX / 8) * 8u + ((unsigned)t & 7u));
        return (int)(t % S::TX);
}

/* Column j (0..NR) of thread column tx: tx*NR + j, but with 8 columns a thread two runs
 * of 4 half a tile apart (tx*4 + j and TN/2 + tx*4 + j - 4), so that the 8 threads of a
 * warp row read 128 contiguous bytes per 16-byte load (one shared-memory wavefront,
 * where 8 contiguous columns each would be two). */
template <class S> __device__ __forceinline__ int mq_col(int tx, int j)
{
        return S::NR == 8 ? (j >> 2) * (S::TN / 2) + tx * 4 + (j & 3) : tx * S::NR + j;
}

/* acc += the step in ws/xs: thread (ty, tx) takes rows ty*MR.. and columns mq_col(tx, ..).
 * The operands of k step kk + 1 are read from shared memory before the FMAs of kk (two
 * register sets), so that a warp's FMAs hide its shared loads' latency. */
template <class S>
__device__ __forceinline__ void mq_frag(float (&a)[S::MR], float (&b)[S::NR],
                                        const float *__restrict__ ws, const float *__restrict__ xs,
                                        int ty, int tx, int kk)
{
        /* row kk's columns are at xb + kk * TN (mq_xs): made per k step, not kept for all
         * 8 runs of 4 k (registers the pipelined loads need) */
        const float *xb =
                xs + ((S::NR >= 4 ? mq_col<S>(tx, 0) : tx * S::NR) ^ (kk & ~3 & (S::TN - 1)));

#pragma unroll
        for (int i = 0; i < S::MR; i += 4) {
                const float4 v = *(const float4 *)&ws[kk * S::TM + ty * S::MR + i];

                a[i] = v.x, a[i + 1] = v.y, a[i + 2] = v.z, a[i + 3] = v.w;
        }
        if (S::NR >= 4) {
#pragma unroll
                for (int j = 0; j < S::NR; j += 4) {
                        /* mq_col(tx, j) - mq_col(tx, 0) is j or TN/2: bits the swizzle
                         * leaves alone */
                        const float4 v = *(const float4 *)(xb + kk * S::TN + mq_col<S>(0, j));

                        b[j] = v.x, b[S::NR > 1 ? j + 1 : 0] = v.y;
                        b[S::NR > 2 ? j + 2 : 0] = v.z, b[S::NR > 3 ? j + 3 : 0] = v.w;
                }
        } else if (S::NR == 2) {
                const float2 v = *(const float2 *)(xb + kk * S::TN);

                b[0] = v.x, b[S::NR > 1 ? 1 : 0] = v.y;
        } else {
                b[0] = xb[kk * S::TN];
        }
}

template <class S>
__device__ __forceinline__ void mq_mul(float (&acc)[S::MR][S::NR], const float *__restrict__ ws,
                                       const float *__restrict__ xs)
{
        const int t = threadIdx.x, ty = mq_ty<S>(t), tx = mq_tx<S>(t);
        float a[2][S::MR], b[2][S::NR];

        mq_frag<S>(a[0], b[0], ws, xs, ty, tx, 0);
#pragma unroll
        for (int kk = 0; kk < MQ_KS; kk++) {
                if (kk + 1 < MQ_KS)
                        mq_frag<S>(a[(kk + 1) & 1], b[(kk + 1) & 1], ws, xs, ty, tx, kk + 1);
#pragma unroll
                for (int i = 0; i < S::MR; i++)
#pragma unroll
                        for (int j = 0; j < S::NR; j++)
                                acc[i][j] = fmaf(a[kk & 1][i], b[kk & 1][j], acc[i][j]);
        }
}

/* mq_tile - acc = the block's tile of outputs over k in [k0, k1) (see the file comment):
 * w the tile's first row (n_rows of them valid, at most TM), x its first column (ncols
 * valid), smem S::SMEM floats of shared memory. Every thread of the block calls it (it
 * has barriers); smem may be reused after it returns. */
template <int T, class S>
__device__ __forceinline__ void
mq_tile(float (&acc)[S::MR][S::NR], const uint8_t *__restrict__ w, size_t row_bytes, int n_rows,
        int n_in, int k0, int k1, const float *__restrict__ x, int ldx, int ncols, float *smem)
{
        mq_regs<T, S> r;
        int buf = 0;

#pragma unroll
        for (int i = 0; i < S::MR; i++)
#pragma unroll
                for (int j = 0; j < S::NR; j++)
                        acc[i][j] = 0.0f;
        if (k0 >= k1)
                return;
        mq_load<T, S>(r, w, row_bytes, n_rows, n_in, k0, k1, x, ldx, ncols);
        mq_store<T, S>(r, n_rows, n_in, k0, k1, smem, smem + S::WS);
        __syncthreads();
        for (int k = k0; k < k1; k += MQ_KS) {
                float *ws = smem + buf * (S::WS + S::XS), *xs = ws + S::WS;
                const bool more = k + MQ_KS < k1;

                if (more) /* the next step's loads go out before this step's products */
                        mq_load<T, S>(r, w, row_bytes, n_rows, n_in, k + MQ_KS, k1, x, ldx, ncols);
                mq_mul<S>(acc, ws, xs);
                if (!more)
                        break;
                if (S::DB) {
                        buf ^= 1;
                        mq_store<T, S>(r, n_rows, n_in, k + MQ_KS, k1, smem + buf * (S::WS + S::XS),
                                       smem + buf * (S::WS + S::XS) + S::WS);
                } else {
                        __syncthreads(); /* everyone is done reading the one buffer */
                        mq_store<T, S>(r, n_rows, n_in, k + MQ_KS, k1, smem, smem + S::WS);
                }
                __syncthreads();
        }
        __syncthreads(); /* smem free for the caller */
}

/* mq_out - write thread (ty, tx)'s outputs acc of the unit at g: y (+)= acc, or with
 * k split (nsplit > 1) the partial sums of split z. */
template <class S>
__device__ __forceinline__ void mq_out(const struct mq_args &a, const struct mq_geom &g, int z,
                                       const float (&acc)[S::MR][S::NR])
{
        const int ty = mq_ty<S>(threadIdx.x), tx = mq_tx<S>(threadIdx.x);

#pragma unroll
        for (int j = 0; j < S::NR; j++) {
                const int c = mq_col<S>(tx, j);

                if (c >= g.ncols)
                        continue;
#pragma unroll
                for (int i = 0; i < S::MR; i++) {
                        const int o = ty * S::MR + i;

                        if (o >= g.n_rows)
                                continue;
                        if (a.nsplit > 1) {
                                a.part[((size_t)z * a.nb + g.col0 + c) * a.m.rows +
                                       a.m.r_base[g.mi] + g.row0 + o] = acc[i][j];
                        } else {
                                float *yo = a.m.y[g.mi] + (size_t)(g.col0 + c) * a.m.ldy[g.mi] +
                                            g.row0 + o;

                                *yo = a.m.add ? *yo + acc[i][j] : acc[i][j];
                        }
                }
        }
}

/* k_mmq - with a.sem the shared schedule (1-D grid), else the grid of the file comment. */
template <int T, class S>
static __global__ void __launch_bounds__(S::NT, S::MINB) k_mmq(const struct mq_args a)
{
        __shared__ __align__(16) float smem[S::SMEM];
        float acc[S::MR][S::NR];

        long long it = a.sem ? mq_sk_start(a.work, gridDim.x, blockIdx.x) : 0;
        const long long it1 = a.sem ? mq_sk_start(a.work, gridDim.x, blockIdx.x + 1) : 1;

        while (it < it1) { /* on a grid of tiles: once */
                const struct mq_piece pc = mq_next(a, &it, it1, S::TM, S::TN, MQ_KS);
                const struct mq_geom &g = pc.g;

                mq_tile<T, S>(acc, a.m.w[g.mi] + (size_t)g.row0 * a.row_bytes, a.row_bytes,
                              g.n_rows, a.n_in, pc.k0, pc.k1, a.x + (size_t)g.col0 * a.ldx, a.ldx,
                              g.ncols, smem);
                if (pc.whole) {
                        mq_out<S>(a, g, pc.z, acc);
                } else if (mq_sk_count<S::MR, S::NR, S::NT>(acc, a, pc.u, true, threadIdx.x)) {
                        mq_sk_sum<S::MR * S::NR, S::NT>(a, pc.u, [&](int e, float v) {
                                const int t = e % S::NT, i = e / S::NT / S::NR;
                                const int c = mq_col<S>(mq_tx<S>(t), e / S::NT % S::NR);
                                const int o = mq_ty<S>(t) * S::MR + i;

                                if (c < g.ncols && o < g.n_rows) {
                                        float *yo = a.m.y[g.mi] +
                                                    (size_t)(g.col0 + c) * a.m.ldy[g.mi] + g.row0 +
                                                    o;

                                        *yo = a.m.add ? *yo + v : v;
                                }
                        });
                }
        }
}

/* launch_mq_s - k_mmq<T, S> over a's matrices (t_end, nsplit, kper filled in here): on the
 * shared schedule where mq_sk_plan() allows, else on a grid of tiles, then k_mmq_reduce
 * when k is split; part_bytes of a.part bound the splits or slots. */
template <int T, class S>
static int launch_mq_s(struct mq_args a, int sms, size_t part_bytes, cudaStream_t stream)
{
        static int per_sm; /* resident blocks per SM (occupancy API), once per kernel */
        const int cols = (a.nb + S::TN - 1) / S::TN, steps = (a.n_in + MQ_KS - 1) / MQ_KS;
        const size_t col_bytes = (size_t)a.nb * a.m.rows * sizeof(float);
        int tiles = 0, r;

        for (int i = 0; i < a.m.n; i++) {
                tiles += (a.m.n_out[i] + S::TM - 1) / S::TM;
                a.m.t_end[i] = tiles;
        }
        if (!per_sm && (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_mmq<T, S>, S::NT,
                                                                      0) != cudaSuccess ||
                        per_sm < 1)) {
                (void)cudaGetLastError();
                per_sm = 1;
        }
        const int sk =
                mq_sk_plan(&a, tiles * cols, steps, cols, (long)sms * per_sm,
                           (size_t)S::TM * S::TN * sizeof(float), part_bytes, MQ_SPLIT_MIN_STEPS);
        if (sk) {
                k_mmq<T, S><<<(unsigned)sk, S::NT, 0, stream>>>(a);
                return m40_cuda_launch_status("k_mmq");
        }
        a.nsplit = a.part ? mq_split((long)tiles * cols, steps, (long)sms * per_sm,
                                     (int)(part_bytes / col_bytes), MQ_SPLIT_MIN_STEPS)
                          : 1;
        a.kper = (steps + a.nsplit - 1) / a.nsplit * MQ_KS;
        a.nsplit = (a.n_in + a.kper - 1) / a.kper;
        k_mmq<T, S>
                <<<dim3((unsigned)tiles, (unsigned)cols, (unsigned)a.nsplit), S::NT, 0, stream>>>(
                        a);
        r = m40_cuda_launch_status("k_mmq");
        return r || a.nsplit == 1 ? r : mq_reduce(&a, sms, stream);
}

/* launch_mq - the tile shape for a's batch: the narrowest column tile (8, 16, 32, 64)
 * that holds it, 64 above (on 64-row tiles where MQ_NARROW_STEPS says so). */
template <int T>
static int launch_mq(const struct mq_args *a, int sms, size_t part_bytes, cudaStream_t stream)
{
        if (a->nb <= 8)
                return launch_mq_s<T, mq_s8>(*a, sms, part_bytes, stream);
        if (a->nb <= 16)
                return launch_mq_s<T, mq_s16>(*a, sms, part_bytes, stream);
        if (a->nb <= 32)
                return launch_mq_s<T, mq_s32>(*a, sms, part_bytes, stream);
        if (mq_narrow<T>::ON) {
                long units = 0;

                for (int i = 0; i < a->m.n; i++)
                        units += (a->m.n_out[i] + mq_s64::TM - 1) / mq_s64::TM;
                units *= (a->nb + mq_s64::TN - 1) / mq_s64::TN;
                if (units * ((a->n_in + MQ_KS - 1) / MQ_KS) <
                    (long)MQ_NARROW_STEPS * sms * mq_s64::MINB)
                        return launch_mq_s<T, typename mq_narrow<T>::S>(*a, sms, part_bytes,
                                                                        stream);
        }
        return launch_mq_s<T, mq_s64>(*a, sms, part_bytes, stream);
}

/* The per-family entry points of the batched kernels (matvec_f.cu, matvec_q.cu,
 * matvec_k.cu): launch_mm<T> (mmr.cuh) for a type of the family, -ENOTSUP for another. */
int m40_mq_launch_f(uint32_t type, const struct mq_args *a, int sms, size_t part_bytes,
                    cudaStream_t stream);
int m40_mq_launch_q(uint32_t type, const struct mq_args *a, int sms, size_t part_bytes,
                    cudaStream_t stream);
int m40_mq_launch_k(uint32_t type, const struct mq_args *a, int sms, size_t part_bytes,
                    cudaStream_t stream);

/* (M40_MQ_CASE, the per-type case of those entry points, is in mmr.cuh: launch_mm<T>
 * picks k_mmr or k_mmq.) */

#endif
