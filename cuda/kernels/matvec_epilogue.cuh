/* cuda/kernels/matvec_epilogue.cuh - what k_matvec (matvec.cuh) does after its products in
 * decode steps: the fused RMSNorm's producer partials and consumer scales (struct
 * mv_rms), and RoPE with the KV-cache append for q/k/v (struct mv_rope), with the warp
 * sum they share. Included by matvec.cuh only, after MV_WARPS; the launch contracts are
 * in matvec.h and the references in ops.h (rmsnorm, rope_store). Maxwell-clean:
 * shuffles, shared memory, f16 conversion only. */
#ifndef M40_CUDA_MATVEC_EPILOGUE_CUH
#define M40_CUDA_MATVEC_EPILOGUE_CUH

#include <stddef.h>
#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/kernels/kv_slot.cuh"
#include "cuda/kernels/ops.h"
#include "cuda/kernels/quant.cuh" /* ld_rw */
#include "cuda/kernels/warp.cuh"

#ifndef MV_WARPS
#error "matvec_epilogue.cuh is part of matvec.cuh: include that"
#endif

/* RMSNorm fused into k_matvec (decode steps; ops.h's rmsnorm is the reference). With
 * y = x / rms(x) * g, y W^T = ((x * g) W^T) / rms(x): the norm's weight can be applied
 * where x is made and its scale after the sums, so the inner loop stays as it is:
 *  - producer (MODE 2, with add): after y += x W^T (y the residual stream) the kernel
 *    also writes xg[c][o] = y[c][o] * g[o] (g the next norm's weight, ldxg apart; none
 *    when g is NULL), and each block the sum of the squares of the outputs it wrote,
 *    ss_part[block * MV_NB_MAX + c]; block 0 stores the block count in *ss_count.
 *  - consumer (MODE 1): the product of xg; at its end every block adds the partials in
 *    block order (the same sum in every block: deterministic, and no fence or atomic
 *    anywhere), scale[c] = 1 / sqrt(sum / n_in + eps), and multiplies its sums by it.
 * (A last-block reduction in the producer, __threadfence and atomicAdd per block, made
 * the producer 35% slower on an H100: measured, replaced by this.) */
#define MV_NB_MAX 8
struct mv_rms {
        const float *g; /* producer */
        float *xg;
        int ldxg;
        float *ss_part; /* both: partials of MV_NB_MAX floats per producer block */
        unsigned *ss_count;
        unsigned ss_cap; /* consumer: the partial slots ss_part holds */
        float eps;       /* consumer */
        /* the L2 hint (matvec.h, m40_cuda_rms.next): lines of 128 bytes from pf[i], asked
         * for by (virtual) blocks pf_from .. nvb - 1 */
        const char *pf[2];
        unsigned pf_lines[2], pf_from;
};

/* RoPE and the KV-cache append in the epilogue of the q/k/v consumer (MODE 4): rows of
 * q (matrix 0) and k (1) whose index within their head (hd rows) is below n_rot are
 * rotated with the pair partner row (llama layout: rows 2i and 2i + 1, both in one
 * warp's group since R is even), and the rows of k and v are stored as f16 into each
 * column's KV slot: ops.h's m40_cuda_rope_store(), bit for bit (the same roundings, no
 * fused multiply-add). */
struct mv_rope {
        const float *cs; /* (positions, n_rot) cos, sin per pair */
        int n_rot, hd;
        struct m40_cuda_kv kv;
};

/* The L2 hint: this thread's share of rm's prefetches, when its block, vb of nvb
 * (k_matvec: blockIdx.x of gridDim.x), is one of the last (blocks pf_from ..); a
 * prefetch returns nothing, so the warp goes on at once. */
static __device__ __forceinline__ void l2_next(const struct mv_rms &rm, unsigned vb, unsigned nvb)
{
        const unsigned n0 = rm.pf_lines[0], n = n0 + rm.pf_lines[1];

        if (vb < rm.pf_from || !n)
                return;
        for (unsigned i = (vb - rm.pf_from) * MV_THREADS + threadIdx.x; i < n;
             i += (nvb - rm.pf_from) * MV_THREADS) {
                const char *a =
                        i < n0 ? rm.pf[0] + (size_t)i * 128 : rm.pf[1] + (size_t)(i - n0) * 128;

                asm volatile("prefetch.L2 [%0];" : : "l"(a));
        }
}

/* The producer's partial of block vb of nvb (k_matvec: blockIdx.x of gridDim.x): sq is
 * the square of the output this thread wrote (0 if none), in column c. Every thread of
 * the block calls it. */
template <int NB>
static __device__ void rms_partial(const struct mv_rms &rm, float sq, int c, unsigned vb,
                                   unsigned nvb)
{
        __shared__ float ws[MV_WARPS][NB];
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        float q[NB];

#pragma unroll
        for (int i = 0; i < NB; i++)
                q[i] = c == i ? sq : 0.0f;
        warp_sum<NB>(q);
        if (lane == 0)
#pragma unroll
                for (int i = 0; i < NB; i++)
                        ws[warp][i] = q[i];
        __syncthreads();
        if (threadIdx.x < MV_NB_MAX) {
                float b = 0.0f;

                for (int k = 0; k < MV_WARPS; k++)
                        b += threadIdx.x < NB ? ws[k][threadIdx.x] : 0.0f;
                rm.ss_part[(size_t)vb * MV_NB_MAX + threadIdx.x] = b;
        }
        if (vb == 0 && threadIdx.x == 0)
                *rm.ss_count = nvb;
}

/* What the consumer's epilogue reads of the producer's partials, loaded before the rest
 * of the epilogue (k_matvec: when it starts or after its products, mv_epi_ahead): the
 * count, and each column's partial in slot threadIdx.x (read whether or not the
 * producer wrote it, when the buffer has the slot: a slot past the count is not used). */
template <int NB> struct rms_pre {
        unsigned np;
        float first[NB];
};

template <int NB>
static __device__ __forceinline__ void rms_prefetch(const struct mv_rms &rm, rms_pre<NB> &p)
{
        p.np = ld_rw(rm.ss_count);
#pragma unroll
        for (int c = 0; c < NB; c++)
                p.first[c] = threadIdx.x < rm.ss_cap
                                     ? ld_rw(rm.ss_part + (size_t)threadIdx.x * MV_NB_MAX + c)
                                     : 0.0f;
}

/* The consumer's scales of columns 0 .. nb - 1 into scl, from the producer's partials
 * (n the norm's length; pre from rms_prefetch()). Every thread of the block calls it;
 * scl is ready after. */
template <int NB>
static __device__ void rms_scale(const struct mv_rms &rm, int nb, int n, float scl[MV_NB_MAX],
                                 const rms_pre<NB> &pre)
{
        __shared__ double tot[MV_WARPS];
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        const unsigned np = pre.np, b0 = threadIdx.x;
        const bool have = b0 < np && b0 < rm.ss_cap; /* slot b0 prefetched */

#pragma unroll
        for (int col = 0; col < NB; col++) {
                if (col >= nb)
                        break; /* nb is the same for the whole block */
                double t = have ? (double)pre.first[col] : 0.0;

                for (unsigned b = have ? b0 + blockDim.x : b0; b < np; b += blockDim.x)
                        t += (double)ld_rw(rm.ss_part + (size_t)b * MV_NB_MAX + col);
#pragma unroll
                for (int off = 16; off > 0; off >>= 1)
                        t += __shfl_xor_sync(0xffffffffu, t, off);
                if (lane == 0)
                        tot[warp] = t;
                __syncthreads();
                if (threadIdx.x == 0) {
                        double all = 0.0;

                        for (int k = 0; k < MV_WARPS; k++)
                                all += tot[k];
                        scl[col] = 1.0f / sqrtf((float)(all / (double)n) + rm.eps);
                }
                __syncthreads();
        }
}

/* MODE 4's operands of output row o of matrix m (0 q, 1 k, 2 v) in column c, loaded
 * before the rest of the epilogue (as rms_pre): the pair's cos and sin (q and k rows
 * below n_rot in their head) and the KV slot's element offset (k and v). */
struct rope_pre {
        float co, si;
        size_t off;
        bool rot; /* q or k, and the row is below n_rot in its head */
};

static __device__ __forceinline__ void rope_prefetch(const struct mv_rope &rp, int m, int o, int c,
                                                     rope_pre &p)
{
        const struct m40_cuda_kv &kv = rp.kv;
        const uint32_t pos = kv.pos[c];
        const int i = o % rp.hd;

        p.co = p.si = 0.0f;
        p.off = 0;
        p.rot = m < 2 && i < rp.n_rot;
        if (p.rot) { /* pair i / 2: x0 = row 2 (i / 2), x1 the next */
                const float *cs = rp.cs + (size_t)pos * rp.n_rot + (i & ~1);

                p.co = cs[0];
                p.si = cs[1];
        }
        if (m >= 1)
                p.off = slot_in(kv, kv.pages[kv.tbl[c] + pos / kv.page_tokens], pos) +
                        (m == 2 ? kv.v_off : 0) + o;
}

/* MODE 4's epilogue for that row: v its scaled sum, vp its pair partner's (row o ^ 1).
 * Returns the row's value after RoPE, and stores k and v rows as f16 into the column's
 * KV slot: what m40_cuda_rope_store() does to the pair, with its roundings. */
static __device__ __forceinline__ float rope_store_row(const struct mv_rope &rp, const rope_pre &p,
                                                       int m, int o, float v, float vp)
{
        if (p.rot)
                v = o & 1 ? __fadd_rn(__fmul_rn(vp, p.si), __fmul_rn(v, p.co))
                          : __fsub_rn(__fmul_rn(v, p.co), __fmul_rn(vp, p.si));
        if (m >= 1)
                rp.kv.base[p.off] = __half_as_ushort(__float2half_rn(v));
        return v;
}

#endif
