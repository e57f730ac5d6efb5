/* cuda/kernels/attention.cuh - what the attention kernels share (attention.cu: k_attention, the
 * general kernel, and its launcher; attention_decode.cu/.cuh: k_attention_g, the decode
 * kernel of blocks of tiles, and its block's body): the tuning constants, the launch
 * plan and the checks that make it, the split merge and the loads of a tile's K and V
 * rows (a position's slot: kv_slot.cuh). Internal to those files and to kernels that run
 * k_attention_g's blocks themselves (attention_decode.cuh); the contracts are in ops.h.
 * Maxwell-clean (attention.cu says what each piece uses).
 *
 * M40_LD_COHERENT: a translation unit whose kernel writes the K/V cache or q in the same
 * launch as it reads them (a persistent kernel: persist.cuh, "Memory") defines it to 1
 * before its first include of this file: then attn_ld_kv() and attn_ld_in() are L2
 * loads (__ldcg), which see another block's writes once a wait on its counter has
 * returned; the read-only path (__ldg) is not coherent within a launch. Undefined or 0:
 * the loads, and so the code, are what they always were. The page and block tables and
 * positions (kv.pages, kv.tbl, kv.pos), written by the host before a launch, keep __ldg
 * or plain loads either way; the split partials are read with volatile loads. */
#ifndef M40_CUDA_ATTENTION_CUH
#define M40_CUDA_ATTENTION_CUH

#include <stddef.h>
#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/kernels/kv_slot.cuh"
#include "cuda/kernels/ops.h"
#include "cuda/kernels/warp.cuh"

#define ATTN_THREADS 128
#define ATTN_WARPS   (ATTN_THREADS / 32)
#define ATTN_HB      8 /* query heads of one KV head per block, at most */
#ifndef ATTN_TILE
#define ATTN_TILE 32 /* positions scored per pass of a block (and ATTN_SPAN_MIN's note) */
#endif
#ifndef ATTN_PU
#define ATTN_PU 4 /* positions a warp scores at once (their K loads in flight) */
#endif
/* Positions per split, at least: one tile. Decode launches have few blocks (8B: 32,
 * one per query head), so a split is parallelism the GPU otherwise lacks, and its merge
 * (one more load latency) costs less than a second tile in a row: same-run A/Bs of
 * batch-1 decode at contexts 16..144 (H100): tile 64 and spans of 128 -> 64: 135M F16
 * 974 -> 1054 tok/s, 1B F16 713 -> 737, 8B Q4_0 300 -> 312, 8B F16 158.4 -> 161.4;
 * then tile and span 64 -> 32: 8B F16 162.0 -> 165.4, 8B Q4_0 314 -> 327, 8B Q4_K_M
 * 258 -> 266, 1B F16 740 -> 760. */
#ifndef ATTN_SPAN_MIN
#define ATTN_SPAN_MIN 32
#endif
/* The first tile's page lookups issued with q's loads, not after them (one round trip
 * less per block); same-run A/B (H100, batch-1 decode, 3 rounds), after -> with: 8B
 * Q8_0 272.9 -> 274.4 tok/s, 8B Q4_0 384.1 -> 387.9, 1B Q4_0 1400.8 -> 1411.5, 1B F16
 * 780.6 -> 784.0, 135M Q8_0 1316.3 -> 1327.8. Knob for A/B. */
#ifndef ATTN_Q_EARLY
#define ATTN_Q_EARLY 1
#endif
#define ATTN_MAX_SPLITS 32   /* splits of one (token, head), at most: one lane each in the merge */
#define ATTN_TARGET     1024 /* blocks a launch aims for (H100: ~8 per SM, M40: ~43) */
#define ATTN_MIN_BLOCKS 128  /* below this, query heads of one KV head go to separate blocks */
#define ATTN_DPT        (M40_CUDA_MAX_HEAD_DIM / ATTN_THREADS) /* output dims per thread, at most */
#define WS_ALIGN        256

/* A launch splits only when n_tok * gb (its blocks of one split) is below ATTN_TARGET,
 * so its counters (one per (token, head group)) fit the workspace's fixed counter area,
 * which every launch leaves zero: launches of any shape can share one workspace. */
static_assert(ATTN_TARGET * sizeof(unsigned) <= M40_CUDA_ATTN_WS_COUNTERS, "counter area");

static_assert(ATTN_MAX_SPLITS == 32, "the merge gives each split one lane of a warp");
static_assert(M40_CUDA_MAX_HEAD_DIM % ATTN_THREADS == 0, "ATTN_DPT");
static_assert(ATTN_HB <= 32 && ATTN_SPAN_MIN % ATTN_TILE == 0 && ATTN_TILE <= ATTN_THREADS,
              "layout");

/* How a launch divides the work: blocks (gb = n_kv_heads * nsub, n_tok, n_split); block
 * (x, t, s) holds query heads kvh * group + sub * hb .. + nh of KV head kvh = x / nsub,
 * sub = x % nsub, and positions s * span .. of token t. */
struct attn_plan {
        int n_heads, group, nsub, hb, hd, n_split;
        int rstep, cstep; /* VT: ATTN_THREADS 16-byte pieces as rows and pieces of K/V rows */
        uint32_t span;
        float scale;
        float *acc;    /* (n_tok, n_heads, n_split, hd) partial sums of e^(s - m) V */
        float2 *ml;    /* (n_tok, n_heads, n_split) partial max m and sum of e^(s - m) */
        unsigned *cnt; /* (n_tok, gb) splits finished, in the counter area */
};

static inline uint32_t cdiv(uint64_t a, uint64_t b)
{
        return (uint32_t)((a + b - 1) / b);
}

static inline uint64_t ws_al(uint64_t n)
{
        return (n + WS_ALIGN - 1) & ~(uint64_t)(WS_ALIGN - 1);
}

static __device__ __forceinline__ float warp_max(float v)
{
        for (int off = 16; off; off >>= 1)
                v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
        return v;
}

static __device__ __forceinline__ double warp_sum(double v)
{
        for (int off = 16; off; off >>= 1)
                v += __shfl_xor_sync(0xffffffffu, v, off);
        return v;
}

/* Whether this block is the last of the n_split splits that count on cnt to finish,
 * after it wrote its partials (every thread of the block calls it; the last one sees
 * the others' partials after). */
static __device__ __forceinline__ bool attn_last(unsigned *cnt, int n_split)
{
        __shared__ int s_last;

        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0)
                s_last = atomicAdd(cnt, 1u) == (unsigned)n_split - 1;
        __syncthreads();
        if (!s_last)
                return false;
        __threadfence();
        return true;
}

/* The merge of the n_split partials of the nh (<= HB) query heads from row (their
 * slots: (row + j) * pl.n_split + s) by the last split to finish, into o (nh rows of
 * hd <= DPT * ATTN_THREADS): weight of split s = e^(m_s - M), one lane per split, out =
 * sum_s w_s acc_s / sum_s w_s l_s. Every thread of the block calls it: the first
 * ATTN_WARPS warps do the work (blocks of more threads: the others only pass the
 * barrier); it leaves the counter cnt zero for the next launch (every split of it has
 * counted). */
template <int HB, int DPT>
static __device__ __forceinline__ void attn_merge(const struct attn_plan &pl, size_t row, int nh,
                                                  int n_split, int hd, float *out, size_t ldo,
                                                  int t, int h0, unsigned *cnt)
{
        __shared__ float s_w[HB][ATTN_MAX_SPLITS], s_inv[HB];
        const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;

        for (int j = warp; j < nh; j += ATTN_WARPS) {
                const volatile float *ml = (const volatile float *)(pl.ml + (row + j) * pl.n_split);
                float m = -INFINITY, l = 0.0f;

                if (lane < n_split) {
                        m = ml[2 * lane];
                        l = ml[2 * lane + 1];
                }
                const float mx = warp_max(m);
                const float w = lane < n_split ? expf(m - mx) : 0.0f;
                const double sum = warp_sum((double)l * (double)w);

                s_w[j][lane] = w;
                if (lane == 0)
                        s_inv[j] = (float)(1.0 / sum);
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < HB; j++) {
#pragma unroll
                for (int d = 0; d < DPT; d++) {
                        const int i = tid + d * ATTN_THREADS;

                        if (j < nh && i < hd) {
                                const volatile float *a = pl.acc + (row + j) * pl.n_split * hd + i;
                                float v = 0.0f;

                                for (int s = 0; s < n_split; s++)
                                        v += a[(size_t)s * hd] * s_w[j][s];
                                out[(size_t)t * ldo + (size_t)(h0 + j) * hd + i] = v * s_inv[j];
                        }
                }
        }
        if (tid == 0)
                *cnt = 0;
}

/* A load of K/V cache rows: the read-only path, or L2 under M40_LD_COHERENT. */
template <class V> static __device__ __forceinline__ V attn_ld_kv(const V *p)
{
#if defined(M40_LD_COHERENT) && M40_LD_COHERENT
        return __ldcg(p);
#else
        return __ldg(p);
#endif
}

/* A load of q (the kernels' other input a launch may write): plain, or L2 under
 * M40_LD_COHERENT. */
template <class V> static __device__ __forceinline__ V attn_ld_in(const V *p)
{
#if defined(M40_LD_COHERENT) && M40_LD_COHERENT
        return __ldcg(p);
#else
        return *p;
#endif
}

#define ATTN_VCH (ATTN_TILE * 128 / 8 / ATTN_THREADS) /* VT: 16-byte pieces per thread, most */

/* VT: a tile's K and V rows (n rows at the element offsets off[], head_dim 8 * cpr) in
 * 16-byte pieces, ATTN_VCH per thread, all loads issued before any is used: piece tid +
 * k * ATTN_THREADS is row r, column c, stepped, not divided, from k to k + 1 (rstep rows
 * and cstep pieces). Pieces past the tile are not loaded. */
static __device__ __forceinline__ void vt_load(const __half *kb, const __half *vb,
                                               const size_t *off, int n, int cpr, int tid,
                                               int rstep, int cstep, uint4 *kbuf, uint4 *vbuf)
{
        int r = tid / cpr, c = tid - r * cpr;

#pragma unroll
        for (int k = 0; k < ATTN_VCH; k++) {
                if (r < n) {
                        const size_t o = off[r];

                        kbuf[k] = attn_ld_kv((const uint4 *)(kb + o) + c);
                        vbuf[k] = attn_ld_kv((const uint4 *)(vb + o) + c);
                }
                r += rstep;
                c += cstep;
                if (c >= cpr) {
                        c -= cpr;
                        r++;
                }
        }
}

/* VT: vt_load()'s pieces of one of K or V into the tile's rows in shared memory */
static __device__ __forceinline__ void vt_store(__half *tile, const uint4 *buf, int n, int cpr,
                                                int tid)
{
#pragma unroll
        for (int k = 0; k < ATTN_VCH; k++) {
                const int e = tid + k * ATTN_THREADS;

                if (e < n * cpr)
                        ((uint4 *)tile)[e] = buf[k];
        }
}

/* The shapes and workspace of one m40_cuda_attention() call (q and out aside). */
struct attn_call {
        const struct m40_cuda_kv *kv;
        uint32_t n_heads, n_kv_heads, head_dim, n_tok, max_pos;
        float scale;
        void *ws;
        size_t ws_bytes;
};

/* The kernel family m40_attn_plan() picks for a call. */
enum attn_path {
        ATTN_NONE,  /* no token or no query head: nothing to launch */
        ATTN_PLAIN, /* k_attention, K and V read from global memory */
        ATTN_VT     /* the tiles' K and V through shared memory (k_attention VT or, for
                     * one query head per block, k_attention_g) */
};

/* attention.cu: m40_cuda_attention()'s checks (those of its arguments but q, out, ldq and
 * ldo) and plan of call c: *pl is make_plan()'s split of the launch with the scale and
 * the workspace's counters and partials set (rstep and cstep for ATTN_VT); returns the
 * attn_path (pl untouched for ATTN_NONE), or -EINVAL for a call m40_cuda_attention()
 * rejects (a workspace too small for the plan included). */
int m40_attn_plan(const struct attn_call *c, struct attn_plan *pl);

/* attention_decode.cu: the plan of k_attention_g<g> (g 2 or 4) for call c, from
 * m40_attn_plan()'s ATTN_VT plan pl of one query head per block (pl.hb 1): spans of g
 * tiles, the partials' pointers in the workspace, its grid and dynamic shared memory,
 * written only on success; false (nothing written) when more than ATTN_MAX_SPLITS splits
 * or a workspace too small for the partials keep it from k_attention_g. */
bool m40_attn_plan_g(const struct attn_call *c, int g, const struct attn_plan &pl,
                     struct attn_plan *ret_pl, dim3 *ret_grid, size_t *ret_shmem);

/* attention_decode.cu: k_attention_g for call c, pl as m40_attn_plan_g() takes it, G by
 * the context (2 or 4 tiles a chunk); false when it does not take the launch (nothing
 * launched). */
bool m40_attn_launch_g(const struct attn_call *c, const float *q, size_t ldq, float *out,
                       size_t ldo, const struct attn_plan &pl, cudaStream_t stream);

#endif
