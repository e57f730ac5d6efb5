/* cuda/kernels/mq_sched.cuh - how the batched weight products (mmq.cuh's k_mmq, mmr.cuh's
 * k_mmr) lay their work on the GPU: their launch arguments (the matrices that share x,
 * the columns, the partial sums), where a unit of work's outputs are, and the two
 * schedules: the shared schedule (stream-K: the resident blocks share every tile's k
 * steps evenly, the block that finishes a tile last adds its pieces up) and the grid of
 * tiles with k split and a second launch (k_mmq_reduce) to add the splits up. Both sum
 * in an order fixed by the shapes and the GPU's resident blocks: deterministic.
 * Maxwell-clean (sm_52): atomicAdd, __threadfence, L2 loads (__ldcg); no sm_60+ feature.
 * A kernel on the shared schedule needs every block resident at once only for speed,
 * never for progress: no block waits on another. */
#ifndef M40_CUDA_MQ_SCHED_CUH
#define M40_CUDA_MQ_SCHED_CUH

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "cuda/runtime/launch.h"
#include "cuda/kernels/matvec.h"

#define MQ_MAX_MATS 3

/* k_mmq's matrices: 1 to MQ_MAX_MATS of one type, n_in and row_bytes that multiply the
 * same x; row tiles numbered across them (matrix i: [t_end[i - 1], t_end[i])), and rows
 * across them for the partial sums (matrix i's rows start at r_base[i]). */
struct mq_mats {
        const uint8_t *w[MQ_MAX_MATS];
        float *y[MQ_MAX_MATS];
        int n_out[MQ_MAX_MATS], ldy[MQ_MAX_MATS], t_end[MQ_MAX_MATS], r_base[MQ_MAX_MATS];
        int n;    /* matrices */
        int rows; /* sum of n_out: a column's length in part */
        bool add; /* y += x W^T instead of y = x W^T */
};

struct mq_args {
        struct mq_mats m;
        size_t row_bytes;
        int n_in;
        const float *x;
        int ldx, nb;
        int nsplit, kper; /* splits of k, k per split (a multiple of MQ_KS) */
        float *part;      /* nsplit > 1: nsplit x nb x m.rows floats; sem: the slots */
        /* The shared schedule (sem set; mq_sk_* below): a 1-D grid of G blocks shares
         * the units (row tile x column tile) x steps (k steps of the kernel) evenly. */
        unsigned *sem;  /* a word per unit: zero between launches */
        long long work; /* units x steps */
        int steps;      /* k steps of a unit */
        int cols;       /* column tiles */
};

/* Where a unit's outputs are: matrix mi, rows row0.. (n_rows of them), columns col0..
 * (ncols): unit u is row tile u / cols (numbered across the matrices) and column tile
 * u % cols, so that the blocks that share a weight tile run side by side. */
struct mq_geom {
        int mi, row0, n_rows, col0, ncols;
};

__device__ __forceinline__ struct mq_geom mq_geom_of(const struct mq_args &a, int tile, int ct,
                                                     int tm, int tn)
{
        struct mq_geom g;

        g.mi = a.m.n > 1 && tile >= a.m.t_end[0] ? (a.m.n > 2 && tile >= a.m.t_end[1] ? 2 : 1) : 0;
        g.row0 = (tile - (g.mi ? a.m.t_end[g.mi - 1] : 0)) * tm;
        g.n_rows = min(tm, a.m.n_out[g.mi] - g.row0);
        g.col0 = ct * tn;
        g.ncols = min(tn, a.nb - g.col0);
        return g;
}

/* ---- the shared schedule (stream-K) ----
 * Block g of G takes the work items [g W / G, (g + 1) W / G) of W = units x steps, in
 * unit order: whole units where its range covers them, and pieces (segments: a range
 * of a unit's k steps) at its ends. So every block does the same work within a step
 * whatever the tile count, and no block waits on another: the GPU is filled without
 * splitting every tile's k (and with no second launch to add splits up). A unit done in
 * one segment is written directly; a unit cut into segments has each segment's sums
 * stored in its block's slot (2 a block: its first unit's and its last unit's), and the
 * block that finishes the unit's last segment (a counter per unit: atomicAdd after
 * __threadfence) adds the segments up in segment order (its own too, read back from its
 * slot), writes the outputs and clears the counter. The order of the sums depends only on G and W:
 * deterministic. */

/* mq_sk_start - the first work item of block g of G. */
__device__ __forceinline__ long long mq_sk_start(long long work, int nblk, int g)
{
        return (long long)g * work / nblk;
}

/* mq_sk_block - the block whose range holds work item i: the largest g with
 * floor(g W / G) <= i. */
__device__ __forceinline__ int mq_sk_block(long long i, long long work, int nblk)
{
        return (int)(((i + 1) * nblk - 1) / work);
}

/* mq_sk_slot - block b's slot for unit u: 0 for the unit its range starts in, else 1. */
__device__ __forceinline__ int mq_sk_slot(const struct mq_args &a, int b, int u)
{
        return 2 * b + (mq_sk_start(a.work, gridDim.x, b) / a.steps == u ? 0 : 1);
}

/* A block's piece of work: unit u (matrix, rows and columns g) over k in [k0, k1), whole
 * (its outputs are written directly: split z of a grid, or a unit the block's range
 * covers) or one of the unit's segments (mq_sk_count()). */
struct mq_piece {
        struct mq_geom g;
        int u, k0, k1, z;
        bool whole;
};

/* mq_next - the next piece of the block, whose work items [*it, it1) are left (a grid
 * of tiles: [0, 1), the block's tile and split), for tiles of tm x tn and steps of ks
 * elements of k; advances *it past it. */
__device__ __forceinline__ struct mq_piece mq_next(const struct mq_args &a, long long *it,
                                                   long long it1, int tm, int tn, int ks)
{
        struct mq_piece p;

        if (a.sem) {
                const int s0 = (int)(*it % a.steps);
                const int s1 = (int)min((long long)a.steps, s0 + (it1 - *it));

                p.u = (int)(*it / a.steps);
                p.g = mq_geom_of(a, p.u / a.cols, p.u % a.cols, tm, tn);
                p.k0 = s0 * ks;
                p.k1 = min(a.n_in, s1 * ks);
                p.z = 0;
                p.whole = s0 == 0 && s1 == a.steps;
                *it += s1 - s0;
        } else {
                p.u = 0;
                p.g = mq_geom_of(a, blockIdx.x, blockIdx.y, tm, tn);
                p.z = blockIdx.z;
                p.k0 = p.z * a.kper;
                p.k1 = min(a.n_in, p.k0 + a.kper);
                p.whole = true;
                *it = it1;
        }
        return p;
}

/* mq_sk_count - store the segment's sums v of unit u (holder threads h < NH hold R x C
 * each) into this block's slot of a.part (R x C x NH floats, [i][j][h]) and count the
 * segment; true in the block that counted the unit's last segment, which then calls
 * mq_sk_sum(). Every thread of the block calls it (barriers). */
template <int R, int C, int NH>
__device__ bool mq_sk_count(const float (&v)[R][C], const struct mq_args &a, int u, bool holder,
                            int h)
{
        const long long ub = (long long)u * a.steps;
        const int gf = mq_sk_block(ub, a.work, gridDim.x);
        const int gl = mq_sk_block(ub + a.steps - 1, a.work, gridDim.x);
        float *mine = a.part + (size_t)mq_sk_slot(a, blockIdx.x, u) * R * C * NH;

        if (holder) {
#pragma unroll
                for (int i = 0; i < R; i++)
#pragma unroll
                        for (int j = 0; j < C; j++)
                                mine[(i * C + j) * NH + h] = v[i][j];
        }
        __threadfence(); /* the sums are visible before the count is */
        __syncthreads();
        return __syncthreads_or(threadIdx.x == 0 &&
                                atomicAdd(&a.sem[u], 1u) == (unsigned)(gl - gf));
}

/* mq_sk_sum - in the block that counted unit u's last segment: out(e, s) for each of the
 * unit's E x NT sums (NT the block's threads, e an index into a slot; thread t takes e =
 * t + NT i), s its segments' sums added in segment order; clears the unit's counter.
 * Every thread of the block calls it. A thread's loads of a segment go out together (a
 * unit may have tens of segments, each an L2 round trip), MQ_SUM_CHUNK of its E sums at
 * a time: with all E of a wide tile (32) at once, the sums' registers and the 32 outputs'
 * places (hoisted by the compiler out of the caller's loop) crowd the tile's products out
 * of the registers their pipelined shared loads need, in the same kernel.
 * The unit's first block holds its first segment in slot 0 if its range starts at the
 * unit, else in slot 1; every later block's range starts in the unit: slot 0 (no
 * division per element). */
#ifndef MQ_SUM_CHUNK
#define MQ_SUM_CHUNK 16
#endif
template <int E, int NT, class F>
__device__ __forceinline__ void mq_sk_sum(const struct mq_args &a, int u, F out)
{
        enum { CH = E < MQ_SUM_CHUNK ? E : MQ_SUM_CHUNK };
        static_assert(E % CH == 0, "whole chunks");
        const long long ub = (long long)u * a.steps;
        const int gf = mq_sk_block(ub, a.work, gridDim.x);
        const int gl = mq_sk_block(ub + a.steps - 1, a.work, gridDim.x);
        const size_t n = (size_t)E * NT;
        const float *p0 =
                a.part + (2 * gf + (mq_sk_start(a.work, gridDim.x, gf) == ub ? 0 : 1)) * n;

        __threadfence(); /* the other segments' sums are read after their counts */
        /* not unrolled: the outputs' places, made per chunk, are not hoisted out of the
         * caller's loop either */
#pragma unroll 1
        for (int c0 = 0; c0 < E; c0 += CH) {
                float s[CH];

#pragma unroll
                for (int i = 0; i < CH; i++)
                        s[i] = __ldcg(p0 + threadIdx.x + NT * (c0 + i));
                for (int b = gf + 1; b <= gl; b++) {
                        const float *p = a.part + 2 * b * n;
                        float v[CH];

#pragma unroll
                        for (int i = 0; i < CH; i++)
                                v[i] = __ldcg(p + threadIdx.x + NT * (c0 + i));
#pragma unroll
                        for (int i = 0; i < CH; i++)
                                s[i] += v[i];
                }
#pragma unroll
                for (int i = 0; i < CH; i++)
                        out(threadIdx.x + NT * (c0 + i), s[i]);
        }
        if (threadIdx.x == 0)
                a.sem[u] = 0; /* for the next launch (stream order) */
        __syncthreads();      /* this block's slots are free */
}

/* k_mmq_reduce - y (+)= the nsplit partial sums of each output, split 0 first. One
 * thread per output: grid-stride over nb x m.rows. */
static __global__ void __launch_bounds__(256) k_mmq_reduce(const struct mq_args a)
{
        const size_t total = (size_t)a.nb * a.m.rows; /* also one split's stride */

        for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
             i += (size_t)gridDim.x * blockDim.x) {
                const int c = (int)(i / a.m.rows), row = (int)(i % a.m.rows);
                const int mi = a.m.n > 1 && row >= a.m.r_base[1]
                                       ? (a.m.n > 2 && row >= a.m.r_base[2] ? 2 : 1)
                                       : 0;
                float s = a.part[i];

                for (int z = 1; z < a.nsplit; z++)
                        s += a.part[i + (size_t)z * total];
                float *yo = a.m.y[mi] + (size_t)c * a.m.ldy[mi] + row - a.m.r_base[mi];
                *yo = a.m.add ? *yo + s : s;
        }
}

/* ---- launch (host) ---- */

/* Splits of k no fewer than this many steps each (k_mmq), and at most this many splits. */
#ifndef MQ_SPLIT_MIN_STEPS
#define MQ_SPLIT_MIN_STEPS 4
#endif
#define MQ_MAX_SPLIT 16

/* mq_split - the splits of k for `blocks` blocks of `steps` k steps on `slots` resident
 * blocks: the fewest that come within 2% of the best fill of the last wave (blocks x s /
 * (slots x waves)), at most MQ_MAX_SPLIT, steps / min_steps and max_split. */
static inline int mq_split(long blocks, int steps, long slots, int max_split, int min_steps)
{
        int best = 1, cap = steps / min_steps;
        double best_fill = 0.0;

        cap = cap < max_split ? cap : max_split;
        cap = cap < MQ_MAX_SPLIT ? cap : MQ_MAX_SPLIT;
        for (int s = 1; s <= (cap > 1 ? cap : 1); s++) {
                const long work = blocks * s, waves = (work + slots - 1) / slots;
                const double fill = (double)work / (double)(slots * waves);

                if (fill > best_fill + 0.02) {
                        best = s;
                        best_fill = fill;
                }
        }
        return best;
}

/* Whether the batched kernels take the shared schedule where they can (knob for A/B
 * builds: 0 splits k over a grid of tiles as before, with a second launch to add up),
 * and the most resident blocks per unit it takes (MQ_SK_SEGS: with more, a unit's pieces
 * are many and the block that adds them up waits long; the grid of tiles with k split
 * takes those launches). 16 lets the 8B's q/k/v, wo and down (32-48 row tiles) onto the
 * shared schedule at 64 columns, which whole-model A/Bs favour (RESULTS.md); at 4 they ran
 * on a grid with k split 8-16 ways and a second launch to add up. */
#ifndef MQ_SK
#define MQ_SK 1
#endif
#ifndef MQ_SK_SEGS
#define MQ_SK_SEGS 16
#endif

/* mq_sk_plan - a's shared schedule over units x steps (a.cols column tiles) on `slots`
 * resident blocks of which each takes at least min_steps steps, with slot_bytes for each
 * block's two slots in part_bytes of a.part: sets a.work, a.steps, a.cols and a.nsplit
 * = 1 and returns the grid, or clears a.sem and returns 0 where it cannot or should not
 * (no counters, partials or room, more units than counters, more than MQ_SK_SEGS blocks
 * a unit). */
static inline int mq_sk_plan(struct mq_args *a, int units, int steps, int cols, long slots,
                             size_t slot_bytes, size_t part_bytes, int min_steps)
{
        const long long work = (long long)units * steps;
        long long g = work / min_steps < slots ? work / min_steps : slots;

        g = g < 1 ? 1 : g;
        if (!MQ_SK || !a->sem || !a->part || units > (int)(M40_CUDA_MMQ_SEM_BYTES / 4) ||
            (long long)units * MQ_SK_SEGS < g || (size_t)(2 * g) * slot_bytes > part_bytes) {
                a->sem = NULL;
                return 0;
        }
        a->work = work;
        a->steps = steps;
        a->cols = cols;
        a->nsplit = 1;
        a->kper = 0;
        return (int)g;
}

/* mq_reduce - k_mmq_reduce over a (a.nsplit > 1): y (+)= the splits' partial sums. */
static inline int mq_reduce(const struct mq_args *a, int sms, cudaStream_t stream)
{
        const size_t outs = (size_t)a->nb * a->m.rows, want = (size_t)sms * 8;
        const size_t blocks = (outs + 255) / 256 < want ? (outs + 255) / 256 : want;

        k_mmq_reduce<<<(unsigned)blocks, 256, 0, stream>>>(*a);
        return m40_cuda_launch_status("k_mmq_reduce");
}

#endif
