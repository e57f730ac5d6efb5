/* cuda/kernels/mmr.cuh - the batched weight product for decode steps of 5 to 56 sequences
 * (the batches mr_takes() gives it, by type) with a warp's lanes along k: each lane
 * dequantizes a few rows' weights of its own stretch of k in registers and multiplies them
 * by the step's activation columns, which the block stages in shared memory (the kernel
 * behind matvec.h's m40_cuda_mmq() at those batches; mmq.cuh at the others).
 *
 * Computes y[c][o] = sum_k W[o][k] * x[c][k] for c < nb columns, o < n_out rows, W in
 * GGML type T (device layout, quant.cuh), x (nb, ldx) and y (nb, ldy) row-major floats:
 * the CPU engine's m40_cpu_matmul() (daemon/engine/matmul.h), as k_mmq.
 *
 * mr_tile<T, S, VEC>() - the tile, a __device__ function a persistent kernel can call:
 *   the block (S::NW warps) accumulates the S::TM x S::NR outputs of a row tile and a
 *   column tile over the chunks of k in [k0, k1) (k0 a multiple of S::CK). A chunk is
 *   CK = 256 elements of k, cut into KL sub-chunks of XK elements (XK = 32, 64 or 128:
 *   the PPC pieces, quant.cuh, that cover a period of the type's layout, so that the
 *   activation offsets of a sub-chunk's pieces are compile-time constants). Lane
 *   (rg, kl) of a warp (lane = KL rg + kl, RG = 32 / KL row groups) takes sub-chunk kl
 *   of rows w RG MR + MR rg + m (m < MR): for each piece and run of 4 elements it makes
 *   its MR rows' 4 weights whole in registers (w = d v + m, quant.cuh's pieces) and adds
 *   w . x for every column, reading each column's 4 activations with one 16-byte shared
 *   load. When the rows' sums are done (mr_scatter()), each lane's MR x NR sums are
 *   added across its KL lanes with shuffles that also scatter them: lane kl ends with
 *   the E = MR NR / KL sums e = E kl .. E kl + E - 1 (row m = e / NR, column e % NR).
 *   Software pipeline: the next chunk's weights (registers) and activations (registers,
 *   then the other half of a double buffer in shared memory, one barrier a chunk) are
 *   loaded before this chunk's products.
 *   Why this shape (DESIGN.md section 3): the kernel before this one, whose lanes were
 *   rows (RESULTS.md), made every 16-byte weight load touch 32 rows' cache lines, and the
 *   L1's lookups bound it; here the KL lanes of a row group read KL adjacent pieces of one row
 * (Q4_0: 8 x 16 bytes, one 128-byte line), so a load touches RG lines, the fewest for its bytes.
 * The lanes of a warp read KL distinct addresses of shared memory (the RG row groups share them:
 * broadcasts), kept in distinct banks by a 4-float pad after every sub-chunk, so a 16-byte shared
 * load is one wavefront (128 bytes) and feeds 4 MR FMAs a lane: at MR = 4 the FMA pipes need a
 * quarter of the shared-memory bandwidth. A weight is decoded once per NR = 8 columns (about 2.3
 * instructions against 8 FMAs). The NW = 8 warps of a block share the staged activations (fewer
 * staging loads and barriers a row than with 4 warps; the kernel holds ~195 registers a thread
 * either way, so an SM holds 8 warps). Arithmetic intensity of a block chunk from global memory: 2
 * TM NR CK FLOP per (TM CK weight bytes + NR CK 4 activation bytes, the latter L2 hits): Q4_0, TM
 * 128, NR 8: 2 x 128 x 8 / (128 x 0.5625 + 32) = 20 FLOP per byte of traffic, 28 per weight byte.
 * k_mmr<T, NR, VEC> - scheduled as k_mmq: on the shared schedule (mq_sched.cuh; its steps
 *   are chunks; each thread holds E sums of a unit), or on a grid (row tiles across up to
 *   MQ_MAX_MATS matrices, ceil(nb / NR), splits of k) with k_mmq_reduce.
 * Tolerance: FP32 sums of products with weights made whole by one FMA (d v + m, not the
 *   CPU's two roundings): a few 1e-7 of sum |w x| (the matrix-vector kernel's direct
 *   form, matvec.cuh mv_piece_direct); tests/gpu/test_mmq.c bounds it at 1e-5.
 * Maxwell-clean (sm_52): FP32 FMA, byte permutes, warp shuffles (__shfl_xor_sync),
 * __syncthreads, at most 48 KB of static shared memory per block, no sm_60+ feature.
 * Needs 16-byte aligned activation rows (launch_mm() takes mmq.cuh's kernel otherwise);
 * weight rows that are not 16-byte aligned take the decoders' narrow loads (VEC false). */
#ifndef M40_CUDA_MMR_CUH
#define M40_CUDA_MMR_CUH

#include "cuda/kernels/mmq.cuh"

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

/* Warps a block, and blocks an SM that __launch_bounds__ asks registers for (knobs for
 * A/B builds). */
#ifndef MR_WARPS
#define MR_WARPS 8
#endif
#ifndef MR_ROWS /* rows a lane of the 32-element quant types */
#define MR_ROWS 4
#endif
#ifdef MR_MINB
#define MR_BOUNDS(...) __launch_bounds__(__VA_ARGS__, MR_MINB)
#else
#define MR_BOUNDS(...) __launch_bounds__(__VA_ARGS__)
#endif

/* Rows a lane and pieces a sub-chunk of type T: a sub-chunk covers a period of the
 * type's layout (Q4_K/Q5_K a pair of pieces, 64 elements; Q6_K four, 128; the others
 * 32 elements), and the rows a lane are as many as its loaded sub-chunks (the current
 * and the next one's, in flight) leave registers for. */
template <int T> struct mr_tc {
        enum { K45 = T == M40_GGML_Q4_K || T == M40_GGML_Q5_K, Q6 = T == M40_GGML_Q6_K };
        enum { FLT = T == M40_GGML_F16 || T == M40_GGML_BF16 || T == M40_GGML_F32 };
        enum { MR = Q6 || T == M40_GGML_F32 ? 1 : K45 || FLT ? 2 : MR_ROWS };
        enum { PPC = 32 * (Q6 ? 4 : K45 ? 2 : 1) / mr_q<T>::EPP };
};

template <int T, int NR_> struct mr_shape {
        typedef mr_q<T> D;
        enum { MR = mr_tc<T>::MR, NR = NR_, NW = MR_WARPS, NT = 32 * NW };
        enum { PPC = mr_tc<T>::PPC, XK = D::EPP * PPC, CK = 256, KL = CK / XK, RG = 32 / KL };
        enum { TM = NW * RG * MR, E = MR * NR / KL };
        enum { XS = XK + 4, CS = KL * XS, BUF = NR * CS }; /* shared floats: [col][kl][XS] */
        enum { NXL = NR * CK / 4 / NT };                   /* float4s a thread stages a chunk */
        static_assert(XK % 32 == 0 && KL * XK == CK && (KL & (KL - 1)) == 0, "sub-chunks");
        static_assert(NR * CK % (4 * NT) == 0 && MR * NR % KL == 0, "even shares");
        static_assert(MR * NR <= 32, "a lane's sums stay in registers");
        static_assert(2 * BUF * 4 <= MQ_SMEM_MAX, "static shared memory of sm_52");
};

/* Load sub-chunk s's pieces of the lane's rows (rw[m]: row m's start) into r; pieces
 * past np are not loaded (mr_chunk() skips them). */
template <class S, bool VEC>
__device__ __forceinline__ void mr_load(typename S::D::raw (&r)[S::PPC][S::MR],
                                        const uint8_t *const (&rw)[S::MR], int s, int np, int n_in)
{
#pragma unroll
        for (int i = 0; i < S::PPC; i++) {
                const int p = s * S::PPC + i;

                if (p < np) {
#pragma unroll
                        for (int m = 0; m < S::MR; m++)
                                S::D::template load<VEC>(r[i][m], rw[m], p, n_in);
                }
        }
}

/* Load the block's share of chunk c's activations (k in [CK c, CK c + CK) of the column
 * tile) into v: thread t holds float4s t, t + NT, .. of the chunk ([column][k / 4]);
 * columns past ncols and k past k1 read as 0. mr_putx() stores them. */
template <class S>
__device__ __forceinline__ void mr_getx(float4 (&v)[S::NXL], const float *__restrict__ x, int ldx,
                                        int ncols, int c, int k1)
{
#pragma unroll
        for (int j = 0; j < S::NXL; j++) {
                const int i = threadIdx.x + S::NT * j, col = i / (S::CK / 4);
                const int k = S::CK * c + 4 * (i % (S::CK / 4));
                const float *xr = x + (size_t)col * ldx + k;

                v[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (col < ncols) {
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

template <class S>
__device__ __forceinline__ void mr_putx(float *__restrict__ xs, const float4 (&v)[S::NXL])
{
#pragma unroll
        for (int j = 0; j < S::NXL; j++) {
                const int i = threadIdx.x + S::NT * j, col = i / (S::CK / 4);
                const int k = 4 * (i % (S::CK / 4));

                *(float4 *)(xs + col * S::CS + (k / S::XK) * S::XS + k % S::XK) = v[j];
        }
}

/* acc += sub-chunk s's products: its loaded pieces r times the activations of the lane's
 * sub-chunk xk (its column 0; columns S::CS floats apart). */
template <class S>
__device__ __forceinline__ void mr_chunk(float (&acc)[S::MR][S::NR],
                                         const typename S::D::raw (&r)[S::PPC][S::MR], int s,
                                         int np, const float *__restrict__ xk)
{
        typedef typename S::D D;
        enum { RPG = D::NRUN / D::NG }; /* runs per scale group */

#pragma unroll
        for (int i = 0; i < S::PPC; i++) {
                const int p = s * S::PPC + i;

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
                                const float *xr = xk + D::xoff(i, j);
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
                                        const float4 v = *(const float4 *)(xr + col * S::CS);

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

/* mr_tile - acc = the lane's partial sums (its sub-chunks only; mr_scatter() adds them
 * up) of the row tile at w (n_rows >= 1 valid rows, at most TM; VEC: every row 16-byte
 * aligned) times the column tile at x (16-byte aligned, ldx a multiple of 4; ncols
 * valid) over k in [k0, k1) (k0 a multiple of S::CK), xs 2 S::BUF floats of 16-byte
 * aligned shared memory. Every thread of the block calls it; xs is free again after. */
template <int T, class S, bool VEC>
__device__ __forceinline__ void mr_tile(float (&acc)[S::MR][S::NR], const uint8_t *__restrict__ w,
                                        size_t row_bytes, int n_rows, int n_in, int k0, int k1,
                                        const float *__restrict__ x, int ldx, int ncols,
                                        float *__restrict__ xs)
{
        typedef typename S::D D;
        typename D::raw cur[S::PPC][S::MR], nxt[S::PPC][S::MR];
        const uint8_t *rw[S::MR];
        const int lane = threadIdx.x & 31, kl = lane % S::KL, np = D::pieces(n_in);
        const int r0 = (threadIdx.x >> 5) * S::RG * S::MR + lane / S::KL * S::MR;
        const int c0 = k0 / S::CK, c1 = (k1 + S::CK - 1) / S::CK;
        float4 xv[S::NXL];

#pragma unroll
        for (int m = 0; m < S::MR; m++) {
#pragma unroll
                for (int col = 0; col < S::NR; col++)
                        acc[m][col] = 0.0f;
                /* rows past n_rows read the last one (their sums are not stored) */
                rw[m] = w + (size_t)min(r0 + m, n_rows - 1) * row_bytes;
        }
        if (c0 >= c1)
                return;
        mr_load<S, VEC>(cur, rw, c0 * S::KL + kl, np, n_in);
        mr_getx<S>(xv, x, ldx, ncols, c0, k1);
        mr_putx<S>(xs, xv);
        __syncthreads();
        for (int c = c0; c < c1; c++) {
                float *const buf = xs + ((c - c0) & 1) * S::BUF;

                if (c + 1 < c1) { /* the next chunk's loads go out first */
                        mr_load<S, VEC>(nxt, rw, (c + 1) * S::KL + kl, np, n_in);
                        mr_getx<S>(xv, x, ldx, ncols, c + 1, k1);
                }
                mr_chunk<S>(acc, cur, c * S::KL + kl, np, buf + kl * S::XS);
                if (c + 1 < c1)
                        mr_putx<S>(xs + (((c - c0) & 1) ^ 1) * S::BUF, xv);
                __syncthreads(); /* the next buffer is full, this one free */
#pragma unroll
                for (int i = 0; i < S::PPC; i++)
#pragma unroll
                        for (int m = 0; m < S::MR; m++)
                                cur[i][m] = nxt[i][m];
        }
}

/* mr_scatter - out = the lane's E sums of its row group (e = E kl + i: row m = e / NR,
 * column e % NR of the lane's rows), a (mr_tile()'s sums, flattened: [m][col]) added
 * across the KL lanes of the group. Each step halves the sums a lane holds: it keeps the
 * half its lane bit STEP picks and adds the partner's copy of that half (log2 KL
 * shuffles of half the sums, not KL of all). */
template <class S, int STEP = S::KL / 2, int N = S::MR *S::NR>
__device__ __forceinline__ void mr_scatter(float (&out)[S::E], const float (&a)[N])
{
        if (STEP == 0) {
#pragma unroll
                for (int i = 0; i < S::E; i++)
                        out[i] = a[i];
                return;
        }
        enum { H = N / 2 > 0 ? N / 2 : 1 };
        const bool up = ((threadIdx.x & 31) % S::KL) & STEP;
        float h[H];

#pragma unroll
        for (int i = 0; i < N / 2; i++) {
                const float send = up ? a[i] : a[i + N / 2];
                const float keep = up ? a[i + N / 2] : a[i];

                h[i] = keep + __shfl_xor_sync(0xffffffffu, send, STEP > 0 ? STEP : 1);
        }
        mr_scatter<S, STEP / 2, H>(out, h);
}

/* The output of thread t's sum i (mr_scatter()'s): its row in the tile and its column. */
template <class S> __device__ __forceinline__ void mr_at(int t, int i, int *row, int *col)
{
        const int lane = t & 31, e = S::E * (lane % S::KL) + i;

        *row = (t >> 5) * S::RG * S::MR + lane / S::KL * S::MR + e / S::NR;
        *col = e % S::NR;
}

/* k_mmr - with a.sem the shared schedule (mq_sched.cuh; 1-D grid, units of CK-element
 * chunks), else the grid of the file comment. */
template <int T, int NR, bool VEC>
static __global__ void MR_BOUNDS(mr_shape<T, NR>::NT) k_mmr(const struct mq_args a)
{
        typedef mr_shape<T, NR> S;
        __shared__ __align__(16) float xs[2 * S::BUF];
        float acc[S::MR][S::NR], out[1][S::E];
        long long it = a.sem ? mq_sk_start(a.work, gridDim.x, blockIdx.x) : 0;
        const long long it1 = a.sem ? mq_sk_start(a.work, gridDim.x, blockIdx.x + 1) : 1;

        while (it < it1) { /* on a grid of tiles: once */
                const struct mq_piece pc = mq_next(a, &it, it1, S::TM, NR, S::CK);
                const struct mq_geom &g = pc.g;
                /* y (+)= v for thread t's sum i, or split z's partial sums */
                auto put = [&](int t, int i, float v) {
                        int row, col;

                        mr_at<S>(t, i, &row, &col);
                        if (col >= g.ncols || row >= g.n_rows)
                                return;
                        if (a.nsplit > 1) {
                                a.part[((size_t)pc.z * a.nb + g.col0 + col) * a.m.rows +
                                       a.m.r_base[g.mi] + g.row0 + row] = v;
                        } else {
                                float *yo = a.m.y[g.mi] + (size_t)(g.col0 + col) * a.m.ldy[g.mi] +
                                            g.row0 + row;

                                *yo = a.m.add ? *yo + v : v;
                        }
                };

                mr_tile<T, S, VEC>(acc, a.m.w[g.mi] + (size_t)g.row0 * a.row_bytes, a.row_bytes,
                                   g.n_rows, a.n_in, pc.k0, pc.k1, a.x + (size_t)g.col0 * a.ldx,
                                   a.ldx, g.ncols, xs);
                float flat[S::MR * S::NR];

#pragma unroll
                for (int i = 0; i < S::MR * S::NR; i++)
                        flat[i] = acc[i / S::NR][i % S::NR];
                mr_scatter<S>(out[0], flat);
                if (pc.whole) {
#pragma unroll
                        for (int i = 0; i < S::E; i++)
                                put(threadIdx.x, i, out[0][i]);
                } else if (mq_sk_count<1, S::E, S::NT>(out, a, pc.u, true, threadIdx.x)) {
                        mq_sk_sum<S::E, S::NT>(
                                a, pc.u, [&](int e, float v) { put(e % S::NT, e / S::NT, v); });
                }
        }
}

/* ---- launch (host) ---- */

/* Chunks a block takes at least, on either schedule (knob for A/B builds). */
#ifndef MR_MIN_STEPS
#define MR_MIN_STEPS 2
#endif

/* launch_mr_s - k_mmr<T, NR, VEC> over a's matrices (t_end, nsplit, kper filled in here):
 * on the shared schedule where mq_sk_plan() allows, else on a grid of tiles, then
 * k_mmq_reduce when k is split. */
template <int T, int NR, bool VEC>
static int launch_mr_s(struct mq_args a, int sms, size_t part_bytes, cudaStream_t stream)
{
        typedef mr_shape<T, NR> S;
        static int per_sm; /* resident blocks per SM (occupancy API), once per kernel */
        const int cols = (a.nb + NR - 1) / NR, chunks = (a.n_in + S::CK - 1) / S::CK;
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
                                  (size_t)S::TM * NR * sizeof(float), part_bytes, MR_MIN_STEPS);
        if (sk) {
                k_mmr<T, NR, VEC><<<(unsigned)sk, S::NT, 0, stream>>>(a);
                return m40_cuda_launch_status("k_mmr");
        }
        a.nsplit = a.part ? mq_split((long)tiles * cols, chunks, (long)sms * per_sm,
                                     (int)(part_bytes / col_bytes), MR_MIN_STEPS)
                          : 1;
        a.kper = (chunks + a.nsplit - 1) / a.nsplit * S::CK;
        a.nsplit = (a.n_in + a.kper - 1) / a.kper;
        k_mmr<T, NR, VEC>
                <<<dim3((unsigned)tiles, (unsigned)cols, (unsigned)a.nsplit), S::NT, 0, stream>>>(
                        a);
        r = m40_cuda_launch_status("k_mmr");
        return r || a.nsplit == 1 ? r : mq_reduce(&a, sms, stream);
}

template <int T, int NR>
static int launch_mr_v(const struct mq_args *a, bool vec, int sms, size_t part_bytes,
                       cudaStream_t stream)
{
        return vec ? launch_mr_s<T, NR, true>(*a, sms, part_bytes, stream)
                   : launch_mr_s<T, NR, false>(*a, sms, part_bytes, stream);
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

/* Which batches m40_cuda_mmq() gives k_mmr, by type (mr_takes()); mmq.cuh's tiles take the
 * rest. Above 8 columns k_mmr's 8-column tiles of a row tile run side by side
 * (mq_sched.cuh's mq_geom_of()), the later ones reading the weights from L2, so its step costs
 * about ceil(nb / 8) tiles' worth, while mmq's column tile is 8, 16, 32 or 64 wide whatever nb is
 * (a 40-column step costs a 64-column one). The split follows same-run A/Bs of whole-model
 * decode (RESULTS.md): the 32-element types and Q8_0 run k_mmr up to 56 columns (mmq's
 * 64-column tile wins on every file only when it is full), the K types, whose k_mmr takes 2 rows
 * a lane, only up to 16 (mmq's pipelined 32- and 64-column tiles win above), the float types up
 * to 32 (not measured above). Knobs for A/B builds: MR_MAX_NB for the 32-element quant types and
 * Q8_0, MR_MAX_NB_F for the float types, MR_K_LO and MR_K_HI for the K types (k_mmr up to
 * MR_K_LO, and from 33 to MR_K_HI: none by default); 0 gives every batch to mmq. */
#ifndef MR_MAX_NB
#define MR_MAX_NB 56
#endif
#ifndef MR_MAX_NB_F
#define MR_MAX_NB_F 32
#endif
#ifndef MR_K_LO
#define MR_K_LO 16
#endif
#ifndef MR_K_HI
#define MR_K_HI 32
#endif
static_assert(MR_MAX_NB <= 64 && MR_MAX_NB_F <= 64 && MR_K_LO <= 32 && MR_K_HI <= 64,
              "k_mmr takes at most 64 columns");

template <int T> static inline bool mr_takes(int nb)
{
        if (mr_tc<T>::K45 || mr_tc<T>::Q6)
                return nb <= MR_K_LO || (nb > 32 && nb <= MR_K_HI);
        return nb <= (mr_tc<T>::FLT ? MR_MAX_NB_F : MR_MAX_NB);
}

/* The K types from 33 columns up to MR_K_SPLIT: mmq's 32-column tile on the first 32 columns,
 * then k_mmr's 8-column tiles on the rest, instead of mmq's 64-column tile, which costs a
 * whole 64-column step for 40 columns. The same-run A/B (RESULTS.md) favours the split up to
 * 40 columns on the 8B file and not above; the 1B file loses a little at 36..40, and the 8B
 * and larger files these types are for decide (knob for A/B builds; 32: no split). */
#ifndef MR_K_SPLIT
#define MR_K_SPLIT 40
#endif
static_assert(MR_K_SPLIT >= 32 && MR_K_SPLIT <= 64, "a split above 32 columns");

/* launch_mm - the batched product for a's batch: k_mmr (8-column tiles) where mr_takes()
 * says so and the activations' alignment allows it, mmq.cuh's tiles otherwise, or for the
 * K types at 33..MR_K_SPLIT columns both, one after the other on the two column ranges
 * (stream order: the second launch's counters and partial sums are free by then). */
template <int T>
static int launch_mm(const struct mq_args *a, int sms, size_t part_bytes, cudaStream_t stream)
{
        bool vec;

        if (mr_takes<T>(a->nb) && mr_fits(a, &vec))
                return launch_mr_v<T, 8>(a, vec, sms, part_bytes, stream);
        if ((mr_tc<T>::K45 || mr_tc<T>::Q6) && a->nb > 32 && a->nb <= MR_K_SPLIT &&
            mr_fits(a, &vec)) {
                struct mq_args lo = *a, hi = *a;
                int r;

                lo.nb = 32;
                hi.nb = a->nb - 32;
                hi.x = a->x + (size_t)32 * a->ldx;
                for (int i = 0; i < a->m.n; i++)
                        hi.m.y[i] = a->m.y[i] + (size_t)32 * a->m.ldy[i];
                r = launch_mq<T>(&lo, sms, part_bytes, stream);
                return r ? r : launch_mr_v<T, 8>(&hi, vec, sms, part_bytes, stream);
        }
        return launch_mq<T>(a, sms, part_bytes, stream);
}

#define M40_MQ_CASE(T)                                                                             \
        case T:                                                                                    \
                return launch_mm<T>(a, sms, part_bytes, stream);

#endif
