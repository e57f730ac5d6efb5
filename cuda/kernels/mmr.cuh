/* cuda/kernels/mmr.cuh - the batched weight product for decode steps of 5 to 8 sequences: every
 * lane dequantizes its own rows' weights in registers and multiplies them by the step's
 * activation columns, which its warp reads from shared memory as broadcasts (the kernel
 * behind matvec.h's m40_cuda_mmq() up to MR_MAX_NB columns; mmq.cuh above).
 *
 * Computes y[c][o] = sum_k W[o][k] * x[c][k] for c < nb columns, o < n_out rows, W in
 * GGML type T (device layout, quant.cuh), x (nb, ldx) and y (nb, ldy) row-major floats:
 * the CPU engine's m40_cpu_matmul() (daemon/engine/matmul.h), as k_mmq.
 *
 * mr_warp<T, S>() - the tile, a __device__ function a persistent kernel can call: one
 *   warp accumulates the S::MR x S::NR outputs of each lane (rows lane, lane + 32, ..
 *   of its row tile of TM = 32 MR rows; columns 0 .. NR - 1 of its column tile) over
 *   the chunks first, first + stride, .. of its k range. A chunk is XK elements of k,
 *   the PPC consecutive pieces (quant.cuh) that cover them: for every type, piece p =
 *   PPC c + i of chunk c reads its activations at XK c + xoff(i, j) (the layouts are
 *   periodic), so the offsets in a chunk are compile-time constants. Per chunk: the
 *   warp stores the chunk's NR x XK activations, loaded into registers during the chunk
 *   before, into its shared-memory buffer ([run of 4][column], float4s), and each lane,
 *   for each piece and run of 4 elements, makes its MR rows' 4 weights whole in registers (w = d v
 * + m, quant.cuh's pieces: a byte permute and an FMA a weight) and adds w . x for every column,
 * reading each column's 4 activations with one 16-byte shared load that all lanes share (a
 * broadcast: one wavefront, never a bank conflict). The next chunk's weights and activations are
 *   loaded before this chunk's products (their latency hides behind the FMAs: with the
 *   activations loaded and stored at once, waits on L2 dominated the kernel's stalls).
 *   Why this shape (DESIGN.md section 3): a Maxwell SM reads 128 bytes of shared memory
 *   per clock, broadcasts included (a 16-byte broadcast load still delivers 16 bytes to
 *   each of 32 lanes), and does 128 FMAs: each 4-byte activation a lane reads must feed
 *   at least 4 FMAs. Here it feeds MR (one per row of the lane), so MR = 8 (8 x 8
 *   accumulators; with MR 2 the kernel measured shared-memory bound at ~0.3 of the FP32
 *   peak). A weight is decoded once per NR = 8 columns (a byte permute and an FMA, plus
 *   a share of a mask: ~2.3 instructions against 8 FMAs), so per run of 4 elements a
 *   lane issues 256 FMAs, 8 shared loads and ~72 decode instructions (0.76 FMAs). The
 *   K types take 4 rows and Q6_K 2 (their chunks, loaded one ahead, need more
 *   registers). Arithmetic intensity of a chunk from global memory: 2 TM NR XK FLOP per
 *   (TM XK weight bytes + NR XK 4 activation bytes, the latter L2 hits): Q4_0, TM 256:
 *   2 x 256 x 8 / (256 x 0.5625 + 32) = 23 FLOP per byte of traffic, 28 per weight byte.
 *   At 2..4 columns the matrix-vector kernel is faster (its weights stream at the
 *   bandwidth with the fused epilogues); from 9 columns mmq.cuh's tiles, which share
 *   each decoded weight across 16-64 columns (RESULTS.md has the A/B).
 * k_mmr<T, NR, VEC> - blocks of S::KG warps that take the chunks of the block's k range
 *   of a unit (row tile x column tile) in turn, then add their sums in shared memory in
 *   a fixed order (warp 0 writes). Scheduled as k_mmq: on the shared schedule
 *   (mq_sched.cuh; its steps are chunks), or on a grid (row tiles across up to
 *   MQ_MAX_MATS matrices, ceil(nb / NR), splits of k) with k_mmq_reduce.
 * Tolerance: FP32 sums of products with weights made whole by one FMA (d v + m, not the
 *   CPU's two roundings): a few 1e-7 of sum |w x| (the matrix-vector kernel's direct
 *   form, matvec.cuh mv_piece_direct); tests/gpu/test_mmq.c bounds it at 1e-5.
 * Maxwell-clean (sm_52): FP32 FMA, byte permutes, warp-synchronous shared memory
 * (__syncwarp), at most 48 KB of static shared memory per block, no sm_60+ feature.
 * Needs 16-byte aligned activation rows (launch_mm() takes mmq.cuh's kernel otherwise);
 * weight rows that are not 16-byte aligned take the decoders' narrow loads (VEC false). */
#ifndef M40_CUDA_MMR_CUH
#define M40_CUDA_MMR_CUH

#include "cuda/kernels/mmq.cuh"

/* Columns up to which m40_cuda_mmq() takes this kernel (0: never; knob for A/B builds). */
#ifndef MR_MAX_NB
#define MR_MAX_NB 8
#endif
/* Rows a lane (MR_ROWS; the K types take at most 4, Q6_K 2: their chunks hold more
 * registers), warps a block (MR_KG) and the widest column tile (MR_NR_MAX, 8 or 16;
 * 16 only with fewer rows: MR x NR accumulators): knobs for A/B builds. */
#ifndef MR_ROWS
#define MR_ROWS 8
#endif
#ifndef MR_KG
#define MR_KG 4
#endif
#ifndef MR_NR_MAX
#define MR_NR_MAX 8
#endif

/* The pieces this kernel reads: quant.cuh's, but for the 32-element 4/5-bit types whole
 * blocks (one 16-byte load of a block's quants). */
template <int T> struct mr_q : qt<T> {
};
template <> struct mr_q<M40_GGML_Q4_0> : qt_q32<18, 0, 8, false, 4> {
};
template <> struct mr_q<M40_GGML_Q4_1> : qt_q32<20, 0, 0, true, 4> {
};
template <> struct mr_q<M40_GGML_Q5_0> : qt_q32<22, 1, 16, false, 4> {
};
template <> struct mr_q<M40_GGML_Q5_1> : qt_q32<24, 1, 0, true, 4> {
};

/* Rows a lane and pieces a chunk of type T. A chunk holds the fewest pieces that cover a
 * period of the type's layout (Q4_K/Q5_K a pair, 64 elements; Q6_K four, a half block
 * of 128), and for the small pieces about 32 elements (16 with 8 rows a lane), so that a
 * lane's loaded chunk (and the next one's, in flight) stay within its registers. */
template <int T> struct mr_tc {
        enum { K45 = T == M40_GGML_Q4_K || T == M40_GGML_Q5_K, Q6 = T == M40_GGML_Q6_K };
        enum { HALF = T == M40_GGML_F16 || T == M40_GGML_BF16 };
        enum {
                MR = Q6    ? (MR_ROWS < 2 ? MR_ROWS : 2)
                     : K45 ? (MR_ROWS < 4 ? MR_ROWS : 4)
                           : MR_ROWS
        };
        enum { PPC = Q6 ? 4 : K45 ? 2 : MR >= 8 ? 1 : HALF ? 4 : 2 };
};

template <int T, int NR_> struct mr_shape {
        typedef mr_q<T> D;
        enum { MR = mr_tc<T>::MR, NR = NR_, KG = MR_KG, NT = 32 * KG, TM = 32 * MR };
        enum { PPC = mr_tc<T>::PPC, XK = D::EPP * PPC, RUNS = XK / 4 };
        enum { XF = NR * XK };                  /* floats of a warp's activation buffer */
        enum { NXL = (NR * RUNS + 31) / 32 };   /* float4s of it a lane loads */
        enum { RED = (KG - 1) * MR * NR * 32 }; /* floats of the warps' sums */
        enum { SMEM = XF * KG > RED ? XF *KG : RED };
        static_assert(XK % 4 == 0 && (NR == 8 || NR == 16), "runs of 4, column tiles");
        static_assert(SMEM * 4 <= MQ_SMEM_MAX, "static shared memory of sm_52");
        static_assert(MR * NR % KG == 0, "the block adds a unit's pieces up evenly");
};

/* Load chunk c's pieces of the lane's rows (rw[i]: row i's start) into r; pieces past
 * np are not loaded (mr_chunk() skips them). VEC: rows are 16-byte aligned (wide loads). */
template <int T, class S, bool VEC>
__device__ __forceinline__ void mr_load(typename S::D::raw (&r)[S::PPC][S::MR],
                                        const uint8_t *const (&rw)[S::MR], int c, int np, int n_in)
{
#pragma unroll
        for (int i = 0; i < S::PPC; i++) {
                const int p = c * S::PPC + i;

                if (p < np) {
#pragma unroll
                        for (int m = 0; m < S::MR; m++)
                                S::D::template load<VEC>(r[i][m], rw[m], p, n_in);
                }
        }
}

/* Load the activations of k [k0, k0 + XK) of the warp's columns into v (lane l holds
 * the float4s l, l + 32, .. of the chunk, [column][run]): columns past ncols and k past
 * k1 read as 0. mr_put() stores them into the warp's buffer. */
template <class S>
__device__ __forceinline__ void mr_getx(float4 (&v)[S::NXL], const float *__restrict__ x, int ldx,
                                        int ncols, int k0, int k1)
{
        const int lane = threadIdx.x & 31;

#pragma unroll
        for (int j = 0; j < S::NXL; j++) {
                const int i = lane + 32 * j, col = i / S::RUNS, k = k0 + 4 * (i % S::RUNS);
                const float *xr = x + (size_t)col * ldx + k;

                v[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (i < S::NR * S::RUNS && col < ncols) {
                        if (k + 4 <= k1) {
                                v[j] = ld_f4(xr);
                        } else {
                                v[j].x = k < k1 ? ld_f32(xr) : 0.0f;
                                v[j].y = k + 1 < k1 ? ld_f32(xr + 1) : 0.0f;
                                v[j].z = k + 2 < k1 ? ld_f32(xr + 2) : 0.0f;
                                v[j].w = k + 3 < k1 ? ld_f32(xr + 3) : 0.0f;
                        }
                }
        }
}

/* Store mr_getx()'s v into xs as [run][column] float4s. */
template <class S>
__device__ __forceinline__ void mr_putx(float *__restrict__ xs, const float4 (&v)[S::NXL])
{
        const int lane = threadIdx.x & 31;

#pragma unroll
        for (int j = 0; j < S::NXL; j++) {
                const int i = lane + 32 * j;

                if (i < S::NR * S::RUNS)
                        ((float4 *)xs)[(i % S::RUNS) * S::NR + i / S::RUNS] = v[j];
        }
}

/* acc += chunk c's products: its loaded pieces r times the activations in xs. */
template <int T, class S>
__device__ __forceinline__ void mr_chunk(float (&acc)[S::MR][S::NR],
                                         const typename S::D::raw (&r)[S::PPC][S::MR], int c,
                                         int np, const float *__restrict__ xs)
{
        typedef typename S::D D;
        enum { RPG = D::NRUN / D::NG }; /* runs per scale group */

#pragma unroll
        for (int i = 0; i < S::PPC; i++) {
                const int p = c * S::PPC + i;

                if (p >= np)
                        break;
#pragma unroll
                for (int g = 0; g < D::NG; g++) {
                        float d[S::MR], mn[S::MR];

#pragma unroll
                        for (int m = 0; m < S::MR; m++)
                                D::scale(r[i][m], p, g, &d[m], &mn[m]);
#pragma unroll
                        for (int jj = 0; jj < RPG; jj++) {
                                const int j = g * RPG + jj;
                                const float4 *xr =
                                        (const float4 *)xs + (D::xoff(i, j) >> 2) * S::NR;
                                float w[S::MR][4];

#pragma unroll
                                for (int m = 0; m < S::MR; m++) {
                                        D::run(r[i][m], p, j, w[m]);
#pragma unroll
                                        for (int e = 0; e < 4; e++)
                                                w[m][e] = D::XSUM ? fmaf(d[m], w[m][e], mn[m])
                                                                  : d[m] * w[m][e];
                                }
#pragma unroll
                                for (int col = 0; col < S::NR; col++) {
                                        const float4 v = xr[col];

#pragma unroll
                                        for (int m = 0; m < S::MR; m++) {
                                                acc[m][col] = fmaf(w[m][0], v.x, acc[m][col]);
                                                acc[m][col] = fmaf(w[m][1], v.y, acc[m][col]);
                                                acc[m][col] = fmaf(w[m][2], v.z, acc[m][col]);
                                                acc[m][col] = fmaf(w[m][3], v.w, acc[m][col]);
                                        }
                                }
                        }
                }
        }
}

/* mr_warp - acc += the warp's outputs over chunks first, first + stride, .. of k in
 * [k0, k1) (k0 a multiple of S::XK; see the file comment): w the row tile's first row
 * (n_rows >= 1 valid rows, at most TM; VEC: every row 16-byte aligned), x its first
 * column (16-byte aligned, ldx a multiple of 4; ncols valid), xs the warp's S::XF floats
 * of shared memory (16-byte aligned). All 32 lanes call it together. */
template <int T, class S, bool VEC>
__device__ __forceinline__ void mr_warp(float (&acc)[S::MR][S::NR], const uint8_t *__restrict__ w,
                                        size_t row_bytes, int n_rows, int n_in, int k0, int k1,
                                        const float *__restrict__ x, int ldx, int ncols,
                                        float *__restrict__ xs, int first, int stride)
{
        typedef typename S::D D;
        typename D::raw cur[S::PPC][S::MR], nxt[S::PPC][S::MR];
        const uint8_t *rw[S::MR];
        const int lane = threadIdx.x & 31, np = D::pieces(n_in);
        const int c1 = (k1 + S::XK - 1) / S::XK;
        int c = k0 / S::XK + first;

#pragma unroll
        for (int m = 0; m < S::MR; m++) /* rows past n_rows read the last one (not stored) */
                rw[m] = w + (size_t)min(32 * m + lane, n_rows - 1) * row_bytes;
        if (c >= c1)
                return;
        float4 xv[S::NXL];

        mr_load<T, S, VEC>(cur, rw, c, np, n_in);
        mr_getx<S>(xv, x, ldx, ncols, c * S::XK, k1);
        for (; c < c1; c += stride) {
                __syncwarp(); /* every lane is done with the last chunk's activations */
                mr_putx<S>(xs, xv);
                __syncwarp();
                if (c + stride < c1) { /* the next chunk's loads go out first */
                        mr_load<T, S, VEC>(nxt, rw, c + stride, np, n_in);
                        mr_getx<S>(xv, x, ldx, ncols, (c + stride) * S::XK, k1);
                }
                mr_chunk<T, S>(acc, cur, c, np, xs);
#pragma unroll
                for (int i = 0; i < S::PPC; i++)
#pragma unroll
                        for (int m = 0; m < S::MR; m++)
                                cur[i][m] = nxt[i][m];
        }
}

/* mr_unit - acc (warp 0's, the other warps' are spent) = the block's outputs of the unit
 * at g over k in [k0, k1) (k0 a multiple of S::XK): the KG warps take its chunks in
 * turn, then add their sums in shared memory in warp order. Every thread calls it;
 * smem is free again after a barrier. */
template <int T, class S, bool VEC>
__device__ __forceinline__ void mr_unit(float (&acc)[S::MR][S::NR], const struct mq_args &a,
                                        const struct mq_geom &g, int k0, int k1, float *smem)
{
        const int lane = threadIdx.x & 31, kw = threadIdx.x >> 5;

#pragma unroll
        for (int m = 0; m < S::MR; m++)
#pragma unroll
                for (int col = 0; col < S::NR; col++)
                        acc[m][col] = 0.0f;
        mr_warp<T, S, VEC>(acc, a.m.w[g.mi] + (size_t)g.row0 * a.row_bytes, a.row_bytes, g.n_rows,
                           a.n_in, k0, k1, a.x + (size_t)g.col0 * a.ldx, a.ldx, g.ncols,
                           smem + kw * S::XF, kw, S::KG);
        if (S::KG == 1)
                return;
        __syncthreads(); /* every warp is done with its activation buffer */
        if (kw) {
#pragma unroll
                for (int m = 0; m < S::MR; m++)
#pragma unroll
                        for (int col = 0; col < S::NR; col++)
                                smem[(((kw - 1) * S::MR + m) * S::NR + col) * 32 + lane] =
                                        acc[m][col];
        }
        __syncthreads();
        if (kw)
                return;
        for (int v = 0; v < S::KG - 1; v++)
#pragma unroll
                for (int m = 0; m < S::MR; m++)
#pragma unroll
                        for (int col = 0; col < S::NR; col++)
                                acc[m][col] += smem[((v * S::MR + m) * S::NR + col) * 32 + lane];
}

/* mr_out - warp 0 writes its outputs acc of the unit at g: y (+)= acc, or with k split
 * (nsplit > 1) the partial sums of split z. */
template <class S>
__device__ __forceinline__ void mr_out(const struct mq_args &a, const struct mq_geom &g, int z,
                                       const float (&acc)[S::MR][S::NR])
{
        const int lane = threadIdx.x & 31;

#pragma unroll
        for (int col = 0; col < S::NR; col++) {
                if (col >= g.ncols)
                        break;
#pragma unroll
                for (int m = 0; m < S::MR; m++) {
                        const int o = 32 * m + lane;

                        if (o >= g.n_rows)
                                continue;
                        if (a.nsplit > 1) {
                                a.part[((size_t)z * a.nb + g.col0 + col) * a.m.rows +
                                       a.m.r_base[g.mi] + g.row0 + o] = acc[m][col];
                        } else {
                                float *yo = a.m.y[g.mi] + (size_t)(g.col0 + col) * a.m.ldy[g.mi] +
                                            g.row0 + o;

                                *yo = a.m.add ? *yo + acc[m][col] : acc[m][col];
                        }
                }
        }
}

/* k_mmr - with a.sem the shared schedule (mq_sched.cuh; 1-D grid, units of S::XK-element
 * chunks), else the grid of the file comment. */
template <int T, int NR, bool VEC>
static __global__ void __launch_bounds__(mr_shape<T, NR>::NT) k_mmr(const struct mq_args a)
{
        typedef mr_shape<T, NR> S;
        __shared__ __align__(16) float smem[S::SMEM];
        float acc[S::MR][S::NR];
        const bool w0 = threadIdx.x < 32;
        long long it = a.sem ? mq_sk_start(a.work, gridDim.x, blockIdx.x) : 0;
        const long long it1 = a.sem ? mq_sk_start(a.work, gridDim.x, blockIdx.x + 1) : 1;

        while (it < it1) { /* on a grid of tiles: once */
                const struct mq_piece pc = mq_next(a, &it, it1, S::TM, NR, S::XK);
                const struct mq_geom &g = pc.g;

                mr_unit<T, S, VEC>(acc, a, g, pc.k0, pc.k1, smem);
                if (pc.whole) {
                        if (w0)
                                mr_out<S>(a, g, pc.z, acc);
                } else if (mq_sk_count<S::MR, NR, 32>(acc, a, pc.u, w0, threadIdx.x)) {
                        mq_sk_sum<S::MR * NR / S::KG, S::NT>(a, pc.u, [&](int e, float v) {
                                const int o = 32 * (e / 32 / NR) + e % 32, col = e / 32 % NR;

                                if (col < g.ncols && o < g.n_rows) {
                                        float *yo = a.m.y[g.mi] +
                                                    (size_t)(g.col0 + col) * a.m.ldy[g.mi] +
                                                    g.row0 + o;

                                        *yo = a.m.add ? *yo + v : v;
                                }
                        });
                }
                __syncthreads(); /* warp 0 is done with the warps' sums in smem */
        }
}

/* ---- launch (host) ---- */

/* launch_mr_s - k_mmr<T, NR, VEC> over a's matrices (t_end, nsplit, kper filled in here):
 * on the shared schedule where mq_sk_plan() allows, else on a grid of tiles, then
 * k_mmq_reduce when k is split (each block at least 2 chunks a warp either way). */
template <int T, int NR, bool VEC>
static int launch_mr_s(struct mq_args a, int sms, size_t part_bytes, cudaStream_t stream)
{
        typedef mr_shape<T, NR> S;
        static int per_sm; /* resident blocks per SM (occupancy API), once per kernel */
        const int cols = (a.nb + NR - 1) / NR;
        const int chunks = (S::D::pieces(a.n_in) + S::PPC - 1) / S::PPC;
        const size_t col_bytes = (size_t)a.nb * a.m.rows * sizeof(float);
        int tiles = 0, r;

        for (int i = 0; i < a.m.n; i++) {
                tiles += (a.m.n_out[i] + S::TM - 1) / S::TM;
                a.m.t_end[i] = tiles;
        }
        if (!per_sm && (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_mmr<T, NR, VEC>,
                                                                      S::NT, 0) != cudaSuccess ||
                        per_sm < 1)) {
                (void)cudaGetLastError();
                per_sm = 1;
        }
        const int sk = mq_sk_plan(&a, tiles * cols, chunks, cols, (long)sms * per_sm,
                                  (size_t)S::MR * NR * 32 * sizeof(float), part_bytes, 2 * S::KG);
        if (sk) {
                k_mmr<T, NR, VEC><<<(unsigned)sk, S::NT, 0, stream>>>(a);
                return m40_cuda_launch_status("k_mmr");
        }
        a.nsplit = a.part ? mq_split((long)tiles * cols, chunks, (long)sms * per_sm,
                                     (int)(part_bytes / col_bytes), 2 * S::KG)
                          : 1;
        a.kper = (chunks + a.nsplit - 1) / a.nsplit * S::XK;
        a.nsplit = (a.n_in + a.kper - 1) / a.kper;
        k_mmr<T, NR, VEC>
                <<<dim3((unsigned)tiles, (unsigned)cols, (unsigned)a.nsplit), S::NT, 0, stream>>>(
                        a);
        r = m40_cuda_launch_status("k_mmr");
        return r || a.nsplit == 1 ? r : mq_reduce(&a, sms, stream);
}

/* Whether k_mmr can take a (its activations 16-byte aligned), and whether its weight rows
 * are too (*vec: the wide loads). */
static inline bool mr_fits(const struct mq_args *a, bool *vec)
{
        uintptr_t bits = (uintptr_t)a->row_bytes;

        for (int i = 0; i < a->m.n; i++)
                bits |= (uintptr_t)a->m.w[i];
        *vec = !(bits & 15);
        return !(((uintptr_t)a->x | (uintptr_t)a->ldx * 4) & 15);
}

template <int T, int NR>
static int launch_mr_v(const struct mq_args *a, bool vec, int sms, size_t part_bytes,
                       cudaStream_t stream)
{
        return vec ? launch_mr_s<T, NR, true>(*a, sms, part_bytes, stream)
                   : launch_mr_s<T, NR, false>(*a, sms, part_bytes, stream);
}

/* launch_mm - the batched product for a's batch: k_mmr (8- or 16-column tiles) up to
 * MR_MAX_NB columns where the activations' alignment allows it, mmq.cuh's tiles above. */
template <int T>
static int launch_mm(const struct mq_args *a, int sms, size_t part_bytes, cudaStream_t stream)
{
        bool vec;

        if (a->nb <= MR_MAX_NB && mr_fits(a, &vec))
                return a->nb <= 8 ? launch_mr_v<T, 8>(a, vec, sms, part_bytes, stream)
                                  : launch_mr_v<T, MR_NR_MAX>(a, vec, sms, part_bytes, stream);
        return launch_mq<T>(a, sms, part_bytes, stream);
}

#define M40_MQ_CASE(T)                                                                             \
        case T:                                                                                    \
                return launch_mm<T>(a, sms, part_bytes, stream);

#endif
