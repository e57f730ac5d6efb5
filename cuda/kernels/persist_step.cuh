/* cuda/kernels/persist_step.cuh - the persistent step kernel k_ps and what its host side
 * shares with the family files that instantiate it (persist_step_f.cu, _q.cu, _k.cu); the
 * host side is persist_step.cu, the contract persist_step.h.
 *
 * k_ps<T> - blocks of MV_THREADS (256) threads, grid = the blocks the GPU holds at once.
 *   Per layer, five phases: q/k/v (k_matvec MODE 4), attention (k_attention_g<2>'s
 *   blocks), wo (MODE 2), gate and up (MODE 3), down (MODE 2). In a product phase,
 *   block b does the per-step launch's blocks b, b + G, b + 2G, ... (mv_block()); in the
 *   attention phase, its (head, split) blocks the same way. A grid barrier (persist.cuh)
 *   separates phases, since each reads what the whole previous one wrote (the fused
 *   norm's scales need every partial; attention every q and KV row of its head; the
 *   products every activation). The phase's plan (struct ps_phase, ~300 bytes) is
 *   copied to shared memory first, so mv_block() reads its fields there.
 * Barrier targets: the counter ctr[0] only grows; each launch adds nbar * G arrivals
 *   (nbar = 5 n_layers - 1), and ctr[1] counts the launches (block 0 adds one when it
 *   is done; every block read it before its first arrival, and the next launch starts
 *   after this one ends, stream order), so launch e waits for e nbar G + n G at its
 *   n-th barrier: no reset, and a CUDA graph replays the launch unchanged.
 * Memory: this header defines M40_LD_COHERENT, so the activations, partials, q and KV rows
 *   that earlier phases of the same launch wrote are read with plain or L2 loads, not
 *   through the read-only path (persist.cuh, "Memory"); the weights keep __ldg. A file
 *   includes it before any other kernel header. */
#ifndef M40_CUDA_PERSIST_STEP_CUH
#define M40_CUDA_PERSIST_STEP_CUH

#ifdef M40_CUDA_MATVEC_CUH
#error "persist_step.cuh must come before the other kernel headers (M40_LD_COHERENT)"
#endif
#define M40_LD_COHERENT 1

#include <errno.h>
#include <stdint.h>
#include <stdio.h>

#include <cuda_runtime.h>

#include "cuda/kernels/attention_decode.cuh"
#include "cuda/kernels/matvec_launch.cuh"
#include "cuda/kernels/persist.cuh"
#include "cuda/kernels/persist_step.h"
#include "cuda/runtime/launch.h"

/* Clock cycles a barrier waits before the kernel gives up (about a second at 1-2 GHz):
 * steps take milliseconds, so only a fault gets there. */
#define PS_LIMIT  (1ll << 31)
#define PS_PHASES 4 /* product phases a layer: q/k/v, wo, gate and up, down */

/* One product phase: what a k_matvec launch of the per-step path gets (mv_plan_of() and
 * its arguments). */
struct ps_phase {
        struct mv_mats mm;
        const float *x;
        size_t row_bytes;
        int n_in, ldx, split_log2;
        unsigned blocks;
        int vec; /* the launch's VEC (matvec_launch.cuh, launch_matvec()) */
};
static_assert(sizeof(struct ps_phase) % 4 == 0, "copied as words");

/* The L2 prefetch of a layer's attention phase: the blocks without attention work ask the
 * L2 for the first bytes of what the layer reads next (wo, gate, up, down, in order), as the
 * per-step path's graph branch beside attention does (cuda_forward.c). Knob for A/B
 * (0: none). */
#ifndef PS_PF
#define PS_PF 1
#endif
#define PS_PF_RANGES 4

struct ps_layer_plan {
        struct ps_phase ph[PS_PHASES];
        const char *pf[PS_PF_RANGES];
        unsigned pf_lines[PS_PF_RANGES]; /* 128-byte lines from pf[i] */
};

/* The launch's arguments (by value). */
struct ps_args {
        const struct ps_layer_plan *L;
        int n_layers;
        struct m40_cuda_kv kv; /* layer set per layer */
        const float *q;
        float *att;
        size_t ldq;
        struct attn_plan pl;
        unsigned agx, an_split; /* the attention's grid: (agx, 1, an_split) */
        unsigned *ctr;          /* [0] barrier arrivals, [1] launches */
        unsigned long long *tm; /* PS_TIMING's sums (PS_TM_WORDS) */
};

/* The blocks per SM k_ps<T>'s register budget keeps room for: 2 (128 registers a thread).
 * At the per-step kernel's batch-1 budget (mv_minb: 4 blocks of 64 registers for Q4_0 and
 * Q8_0) the attention, which needs more, makes the whole kernel spill (~1 KB a thread),
 * and every model measured slower (RESULTS.md, the persistent step kernel's A/Bs). Knob
 * for A/B (0: mv_minb's). */
#ifndef PS_MINB
#define PS_MINB 2
#endif
template <int T> struct ps_minb {
        enum { V = PS_MINB ? PS_MINB : mv_minb<T, 1>::V };
};

/* Rows a warp takes in the products (mv_rows' R at batch 1; even: MODES 3 and 4 pair
 * rows); knob for A/B (0: the per-step kernel's, mv_rows). With half the per-step
 * kernel's warps an SM (PS_MINB), 8 rows a warp keep more loads in flight: faster on the
 * 8B and 1B shapes, slower on rows of 576 (RESULTS.md); not the default yet: it spills
 * (~190 bytes a thread for Q4_0) and has not run the correctness test on a GPU. */
#ifndef PS_R1
#define PS_R1 0
#endif
/* Pieces a lane loads before it computes them in the products (mv_unroll's U at batch 1;
 * with 2 or more, Q4_0 and Q4_1 load a piece's scales with its quants, not one piece
 * ahead: mv_pieces). Two put twice the loads in flight in the warps that 128 registers
 * leave: faster on the 8B and 1B shapes, slower on rows of 576, and less of a gain than 8
 * rows a warp (PS_R1) on the large shapes (RESULTS.md). Knob for A/B (0: mv_unroll's). */
#ifndef PS_U
#define PS_U 0
#endif
template <int T> struct ps_shape {
        enum { R = PS_R1 ? PS_R1 : mv_rows<T, 1>::R, U = PS_U ? PS_U : mv_unroll<T, 1>::U };
        static_assert(R % 2 == 0, "rows in pairs");
};

/* Barrier number ++n of the launch (target: the previous one's). */
static __device__ __forceinline__ void ps_sync(unsigned *ctr, unsigned &target)
{
        target += gridDim.x;
        if (!ps_grid_sync(ctr, target, PS_LIMIT))
                __trap();
}

/* Block b of n's share of layer L's prefetch (a prefetch returns nothing: no wait). */
static __device__ __forceinline__ void ps_prefetch(const struct ps_layer_plan *L, unsigned b,
                                                   unsigned n)
{
        for (int r = 0; r < PS_PF_RANGES; r++) {
                const char *p = L->pf[r];
                const unsigned lines = L->pf_lines[r];

                for (unsigned i = b * MV_THREADS + threadIdx.x; i < lines; i += n * MV_THREADS)
                        asm volatile("prefetch.L2 [%0];" : : "l"(p + (size_t)i * 128));
        }
}

/* PS_TIMING (knob for measurement builds, 0: off): block 0's thread 0 reads the global
 * timer as it leaves each barrier and as it arrives at the next, and adds, per phase kind
 * (q/k/v, attention, wo, gate and up, down), the time from one barrier's exit to the
 * next's (the phase, its barrier included) and the part of it block 0 spent waiting
 * (barrier latency and the other blocks' lag) into a.tm; the last down of a launch, with
 * no barrier after it, is not counted. When the launch counter reaches PS_TIMING, block
 * 0 prints the means of the launches so far (a measurement build only: the kernel
 * prints). */
#ifndef PS_TIMING
#define PS_TIMING 0
#endif
#define PS_TM_WORDS 11 /* 5 phase sums, 5 wait sums, launches */
static __device__ __forceinline__ unsigned long long ps_now()
{
        unsigned long long t;

        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        return t;
}

/* Whether the phases are calls of their own (PS_CALLS 1) instead of inlined into k_ps,
 * each with its own register allocation within the kernel's budget (so the attention's
 * registers would not make the products spill): measured slower on every model, the
 * calls' convention costing more (RESULTS.md). Knob for A/B. */
#ifndef PS_CALLS
#define PS_CALLS 0
#endif
#if PS_CALLS
#define PS_PHASE __noinline__
#else
#define PS_PHASE __forceinline__
#endif

/* This block's share of the attention phase of layer l. The KV view is made here, from
 * the launch's parameters, so that the products phases hold none of it in registers. */
static __device__ PS_PHASE void ps_attention(const struct ps_args &a, int l, unsigned items,
                                             float *sh)
{
        struct m40_cuda_kv kv = a.kv;

        kv.layer = (uint32_t)l;
        for (unsigned it = blockIdx.x; it < items; it += gridDim.x)
                attn_g_block<2>(kv, a.q, a.ldq, a.att, a.ldq, a.pl, it % a.agx, 0, it / a.agx,
                                a.agx, sh);
}

/* This block's share of a product phase's blocks, with loads of whole vectors or not. */
template <int T, int MODE, bool VEC>
static __device__ __forceinline__ void ps_blocks(const struct ps_phase &s)
{
        enum { R = ps_shape<T>::R, U = ps_shape<T>::U };

        for (unsigned vb = blockIdx.x; vb < s.blocks; vb += gridDim.x)
                mv_block<T, 1, R, VEC, MODE, U>(s.mm, s.row_bytes, s.n_in, s.x, s.ldx, 1,
                                                s.split_log2, vb, s.blocks);
}

/* A product phase: g's plan into s (shared), then this block's share of its blocks; the
 * types that have a form without whole-vector loads take it where the launch would
 * (launch_matvec()), the others have only the vector form. */
template <int T, int MODE>
static __device__ PS_PHASE void ps_products(const struct ps_phase *g, struct ps_phase &s)
{
        const unsigned *src = (const unsigned *)g;
        unsigned *dst = (unsigned *)&s;

        __syncthreads(); /* no thread reads the previous phase's copy any more */
        for (unsigned i = threadIdx.x; i < sizeof(s) / 4; i += blockDim.x)
                dst[i] = src[i];
        __syncthreads();
        if ((qt<T>::TAIL || qt<T>::SPLIT) && !s.vec)
                ps_blocks<T, MODE, false>(s);
        else
                ps_blocks<T, MODE, true>(s);
}

template <int T>
static __global__ void __launch_bounds__(MV_THREADS, ps_minb<T>::V) k_ps(const struct ps_args a)
{
        extern __shared__ __align__(16) float sh[];
        __shared__ struct ps_phase s;
        const unsigned G = gridDim.x, items = a.agx * a.an_split;
        const unsigned gen = *(const volatile unsigned *)(a.ctr + 1);
        unsigned target = gen * ((5u * (unsigned)a.n_layers - 1u) * G);

        const bool tm = PS_TIMING && blockIdx.x == 0 && threadIdx.x == 0;
        unsigned long long t_exit = tm ? ps_now() : 0, tk[5] = {0, 0, 0, 0, 0},
                           tw[5] = {0, 0, 0, 0, 0};

        /* phase k of layer l: one call site per phase kind, so each MODE's code is in the
         * kernel once (wo and down share MODE 2's) */
        for (unsigned p = 0; p < 5u * (unsigned)a.n_layers; p++) {
                const unsigned l = p / 5, k = p % 5;
                const struct ps_layer_plan *L = a.L + l;

                if (p) {
                        const unsigned long long t_arr = tm ? ps_now() : 0;

                        ps_sync(a.ctr, target);
                        if (tm) {
                                const unsigned long long t = ps_now();
                                const unsigned pk = (k + 4) % 5; /* the phase that ended */

                                tk[pk] += t - t_exit;
                                tw[pk] += t - t_arr;
                                t_exit = t;
                        }
                }
                if (k == 0) {
                        ps_products<T, 4>(&L->ph[0], s);
                } else if (k == 1) {
                        ps_attention(a, (int)l, items, sh);
                        if (PS_PF && blockIdx.x >= items)
                                ps_prefetch(L, blockIdx.x - items, G - items);
                } else if (k == 3) {
                        ps_products<T, 3>(&L->ph[2], s);
                } else {
                        ps_products<T, 2>(&L->ph[k == 2 ? 1 : 3], s);
                }
        }
        if (tm) {
                for (int i = 0; i < 5; i++) {
                        a.tm[i] += tk[i];
                        a.tm[5 + i] += tw[i];
                }
                a.tm[10] += 1;
                if (gen + 1 == (unsigned)PS_TIMING) {
                        const double n = (double)a.tm[10], nl = (double)a.n_layers;
                        const char *name[5] = {"qkv", "attn", "wo", "gateup", "down"};

                        printf("k_ps timing: %.0f launches, %d layers, %u blocks; per token "
                               "(us), phase with its barrier / block 0's wait in it:\n",
                               n, a.n_layers, G);
                        for (int i = 0; i < 5; i++)
                                printf("k_ps timing: %-6s %8.2f / %8.2f  (%6.2f / %6.2f a "
                                       "phase)\n",
                                       name[i], 1e-3 * (double)a.tm[i] / n,
                                       1e-3 * (double)a.tm[5 + i] / n,
                                       1e-3 * (double)a.tm[i] / n / (i == 4 ? nl - 1 : nl),
                                       1e-3 * (double)a.tm[5 + i] / n / (i == 4 ? nl - 1 : nl));
                }
        }
        if (blockIdx.x == 0 && threadIdx.x == 0)
                *(volatile unsigned *)(a.ctr + 1) = gen + 1;
}

/* The split of a product phase's rows for a grid of G blocks (PS_BAL, knob for A/B; 0:
 * the per-step launch's, mv_split_log2()). The per-step launch splits rows until the
 * warps fill the GPU's warp slots; its blocks then run in one wave where k_ps's G blocks
 * (2 an SM at 128 registers) take their virtual blocks in rounds, so a phase of 1.45 G
 * virtual blocks (8B q/k/v) took two rounds of whole ones. This picks the split s (0..3,
 * within mv_split_fits(), the bound mv_split_log2() keeps) with the fewest rounds
 * times 2^-s (a round's time: rows cut in 2^s pieces), the smallest s on a tie; it counts
 * no fixed cost a virtual block, so on a tie less splitting wins. The splits of a row stay
 * consecutive warps of one block, as mv_block() needs. */
#ifndef PS_BAL
#define PS_BAL 1
#endif
static inline int ps_split_log2(long groups, int steps, unsigned G, int dflt)
{
        int best = 0;
        double best_t = 0.0;

        if (!PS_BAL || !G)
                return dflt;
        for (int s = 0; s <= 3; s++) {
                if (s && !mv_split_fits(s - 1, steps))
                        break;
                const long vbs = ((groups << s) + MV_WARPS - 1) / MV_WARPS;
                const double t = (double)((vbs + G - 1) / G) / (double)(1 << s);

                if (!s || t < best_t) {
                        best = s;
                        best_t = t;
                }
        }
        return best;
}

template <int T> struct ps_typed {
        static int plan(const struct mv_args *a, int n, int sms, unsigned G, struct ps_phase *ph)
        {
                struct mv_plan p;

                mv_plan_of<T, 1, ps_shape<T>::R>(a, n, sms, &p);
                const long groups = p.mm.g_end[MV_MAX_MATS - 1];

                p.split_log2 = ps_split_log2(groups, (mv_q<T, 1>::pieces(a->n_in) + 31) / 32, G,
                                             p.split_log2);
                p.blocks = (unsigned)(((groups << p.split_log2) + MV_WARPS - 1) / MV_WARPS);
                ph->vec = a[0].vec;
                ph->mm = p.mm;
                ph->x = a[0].x;
                ph->row_bytes = a[0].row_bytes;
                ph->n_in = a[0].n_in;
                ph->ldx = a[0].ldx;
                ph->split_log2 = p.split_log2;
                ph->blocks = p.blocks;
                return 0;
        }
        static int per_sm(size_t shmem, int *ret)
        {
                if (cudaFuncSetAttribute(k_ps<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)shmem) != cudaSuccess ||
                    cudaOccupancyMaxActiveBlocksPerMultiprocessor(ret, k_ps<T>, MV_THREADS,
                                                                  shmem) != cudaSuccess)
                        return m40_cuda_launch_status("k_ps occupancy");
                return 0;
        }
        static int launch(const struct ps_args *a, unsigned blocks, size_t shmem, cudaStream_t s)
        {
                k_ps<T><<<blocks, MV_THREADS, shmem, s>>>(*a);
                return m40_cuda_launch_status("k_ps");
        }
};

/* The per-type pieces: a phase's plan from its arguments, the kernel's blocks per SM,
 * and the launch; the family files (persist_step_f.cu, _q.cu, _k.cu) give them for their
 * types (false for another type). */
struct ps_ops {
        int (*plan)(const struct mv_args *a, int n, int sms, unsigned G, struct ps_phase *ph);
        int (*per_sm)(size_t shmem, int *ret);
        int (*launch)(const struct ps_args *a, unsigned blocks, size_t shmem, cudaStream_t s);
};
bool m40_ps_ops_f(uint32_t type, struct ps_ops *o);
bool m40_ps_ops_q(uint32_t type, struct ps_ops *o);
bool m40_ps_ops_k(uint32_t type, struct ps_ops *o);

#define M40_PS_CASE(T)                                                                             \
        case T:                                                                                    \
                *o = (struct ps_ops){ps_typed<T>::plan, ps_typed<T>::per_sm, ps_typed<T>::launch}; \
                return true;

#endif
