/* cuda/kernels/matvec_launch.cuh - how the kernels of matvec.cuh are launched: the split of a
 * row group over warps, rows per warp, and the per-family
 * entry points that matvec_f.cu, matvec_q.cu and matvec_k.cu instantiate (M40_MV_CASE)
 * and matvec.cu calls. Host code and templates only; the kernels and the inner loops a
 * persistent kernel calls stay in matvec.cuh. */
#ifndef M40_CUDA_MATVEC_LAUNCH_CUH
#define M40_CUDA_MATVEC_LAUNCH_CUH

#include "cuda/kernels/matvec.cuh"
#include "cuda/kernels/mmq.cuh"
#include "cuda/kernels/mmr.cuh"

/* Warps per row group for k_matvec (log2): split rows over warps until the grid has
 * about wps warps per SM. More, shorter warps fill the last waves of mid-sized matrices
 * (H100, batch 1, 4096x14336 alone: F16 0.81 -> 0.89 of copy bandwidth at 32, Q8_0 0.55
 * -> 0.65), but in a whole decode step fewer, longer warps won: 16 (8 for the K types,
 * whose pieces are 4x longer) against 32 (16), same-run A/B of batch-1 decode: 1B F16
 * 699 -> 714 tok/s, 8B Q4_0 297 -> 302, 8B Q4_K_M 238 -> 249, 8B F16 158 -> 159 (64
 * lost 2-6%; 8, and 2 or 4 steps per warp at least, gained on one model and lost on
 * another). No warp gets less than a full step of 32 pieces (steps: a row's steps):
 * short rows (d 576: 3 steps of 16-element pieces) split 8 ways left most warps without
 * a piece, and the grid bigger than one wave. The three constants are compile-time
 * knobs for such A/B builds (-D through NVCC_APPEND_FLAGS). */
#ifndef MV_WPS
#define MV_WPS 16 /* warps per SM the split aims for (MV_WPS_K for the K types) */
#endif
#ifndef MV_WPS_K
#define MV_WPS_K 8
#endif
#ifndef MV_SPLIT_STEPS
#define MV_SPLIT_STEPS 1 /* steps of 32 pieces a split warp gets, at least */
#endif
/* Whether rows of `steps` steps of 32 pieces cut in 2^s may be cut in 2^(s + 1): every
 * warp keeps MV_SPLIT_STEPS steps at least. */
static inline bool mv_split_fits(int s, int steps)
{
        return (MV_SPLIT_STEPS * 2) << s <= steps;
}

static inline int mv_split_log2(int groups, int sms, int wps, int steps)
{
        int s = 0;

        while (s < 3 && mv_split_fits(s, steps) && (long)groups << s < (long)wps * sms)
                s++;
        return s;
}

/* What launch_mv<T, NB, R, VEC> launches for a[0 .. n): the matrices, the grid's blocks
 * and the split. A persistent kernel runs the same work as mv_block() calls for virtual
 * blocks vb = 0 .. blocks - 1 with nvb = blocks. */
struct mv_plan {
        struct mv_mats mm;
        unsigned blocks;
        int split_log2;
};

/* mv_plan_of - the plan of k_matvec over the n (1..MV_MAX_MATS) matrices of a[] (same
 * type, n_in, row_bytes, x, batch; already checked by matvec.cu) on a GPU of sms SMs,
 * into *p; rms_mode 3: a[0] gate and a[1] up into a[0]'s output; 4: q, k, v. */
template <int T, int NB, int R>
static void mv_plan_of(const struct mv_args *a, int n, int sms, struct mv_plan *p)
{
        struct mv_mats &mm = p->mm;
        int groups = 0;

        /* MODE 3: a[0] gate, a[1] up, one output: groups of R / 2 rows of each */
        const int nm = a->rms_mode == 3 ? 1 : n, hr = a->rms_mode == 3 ? R / 2 : R;

        for (int i = 0; i < MV_MAX_MATS; i++) {
                const struct mv_args *b = &a[i < nm ? i : nm - 1];

                if (i < nm)
                        groups += (b->n_out + hr - 1) / hr;
                mm.w[i] = b->w;
                mm.y[i] = b->y;
                mm.n_out[i] = b->n_out;
                mm.ldy[i] = b->ldy;
                mm.g_end[i] = groups;
        }
        mm.add = a->add;
        mm.rms = a->rms;
        mm.hoff = a->rms_mode == 3 ? (ptrdiff_t)((uintptr_t)a[1].w - (uintptr_t)a[0].w) : 0;
        mm.rope = a->rope;
        p->split_log2 = mv_split_log2(groups, sms, mv_q<T, NB>::EPP == 32 ? MV_WPS_K : MV_WPS,
                                      (mv_q<T, NB>::pieces(a->n_in) + 31) / 32);
        const long items = (long)groups << p->split_log2;

        p->blocks = (unsigned)((items + MV_WARPS - 1) / MV_WARPS);
        /* the L2 hint goes to the last blocks, about one per SM */
        mm.rms.pf_from = p->blocks > (unsigned)sms && !MV_PF_ALL ? p->blocks - (unsigned)sms : 0;
}

/* MODES 3 and 4 (rows in pairs) need at least 2 rows per warp; matvec.cu does not ask
 * for them otherwise (mv_rows_of()). */
template <int T, int NB, int R, bool VEC, int U, int MODE> struct mv_paired {
        static int launch(const struct mv_plan &pl, const struct mv_args *a, cudaStream_t stream)
        {
                k_matvec<T, NB, R, VEC, MODE, U><<<pl.blocks, MV_THREADS, 0, stream>>>(
                        pl.mm, a->row_bytes, a->n_in, a->x, a->ldx, a->nb, pl.split_log2);
                return m40_cuda_launch_status("k_matvec");
        }
};
template <int T, int NB, bool VEC, int U, int MODE> struct mv_paired<T, NB, 1, VEC, U, MODE> {
        static int launch(const struct mv_plan &, const struct mv_args *, cudaStream_t)
        {
                return -ENOTSUP;
        }
};

/* k_matvec over the n (1..MV_MAX_MATS) matrices of a[] as mv_plan_of() plans it. */
template <int T, int NB, int R, bool VEC>
static int launch_mv(const struct mv_args *a, int n, int sms, cudaStream_t stream)
{
        struct mv_plan pl;

        enum { U = mv_unroll<T, NB>::U };

        mv_plan_of<T, NB, R>(a, n, sms, &pl);
        if (a->rms_mode == 3)
                return mv_paired<T, NB, R, VEC, U, 3>::launch(pl, a, stream);
        if (a->rms_mode == 4)
                return mv_paired<T, NB, R, VEC, U, 4>::launch(pl, a, stream);
        if (a->rms_mode == 1)
                k_matvec<T, NB, R, VEC, 1, U><<<pl.blocks, MV_THREADS, 0, stream>>>(
                        pl.mm, a->row_bytes, a->n_in, a->x, a->ldx, a->nb, pl.split_log2);
        else if (a->rms_mode == 2)
                k_matvec<T, NB, R, VEC, 2, U><<<pl.blocks, MV_THREADS, 0, stream>>>(
                        pl.mm, a->row_bytes, a->n_in, a->x, a->ldx, a->nb, pl.split_log2);
        else
                k_matvec<T, NB, R, VEC, 0, U><<<pl.blocks, MV_THREADS, 0, stream>>>(
                        pl.mm, a->row_bytes, a->n_in, a->x, a->ldx, a->nb, pl.split_log2);
        return m40_cuda_launch_status("k_matvec");
}

/* Rows per warp: as many as registers allow (at most 128 per thread, so that two
 * blocks fit an SM of 64K registers), to reuse each activation run for several rows;
 * at least 2 at every batch. The activations are most of what a lane reads through L1
 * (ncu, H100, 4096x128256 at batch 1: 4.6 (Q4_0) and 8.3 (Q4_K) times the weight
 * bytes; Q4_K's L1 88% busy, DRAM 42%), so the K types take 4 rows at batch 1, not 2
 * with U = 2: same-run A/B 8B Q4_K_M 267.6 -> 315.9 tok/s (1B Q4_K_M: 1110 against
 * 991 at dc74036, separate runs). The short-piece types stay at 4: 8 (2 blocks per SM instead of 4)
 * gave 8B Q4_0 367.9 -> 349.5, 8B Q8_0 266.4 -> 259.8, 1B Q4_0 1352 -> 1312, and 16
 * spills. With 1 for pieces of more than 4 words (F32, Q8_0, the K
 * types) at batch 3..8, the fused SwiGLU and q/k/v+RoPE launches, which pair rows, fell
 * back to separate ones, and same-run A/Bs (H100) 1 -> 2 gave at batch 8 8B Q8_0 234 ->
 * 428 tok/s, 8B Q4_K_M 244 -> 424, 1B Q8_0 1225 -> 2153, 135M Q8_0 3944 -> 5118; at
 * batch 4 8B Q8_0 222 -> 391, 8B Q4_K_M 245 -> 442, 1B Q8_0 1110 -> 1869. 2 rows at
 * batch 1 (fewer registers, so that the compiler issues all of a piece's loads before
 * its products) against 4, at 1e29dac (same run, 2 rounds): 8B Q8_0 286.2 -> 275.9,
 * 8B Q4_0 419.1 -> 311.7, 135M Q8_0 1434.4 -> 1475.0. */
#ifndef MV_R1
#define MV_R1 4 /* rows per warp at batch 1, pieces of at most 8 words (knob for A/B) */
#endif
#ifndef MV_R1_K
#define MV_R1_K 4 /* the same for longer pieces (the K types) */
#endif
/* Rows per warp at batch 5..8 for pieces of at most 8 words when the weights are scaled
 * before the products (mv_direct), whose sums then fit the registers of 4 rows (knob for
 * A/B). */
#ifndef MV_R8
#define MV_R8 4
#endif
/* The same at batch 3..4 for pieces of 5..8 words (Q8_0, the float types) (knob for A/B). */
#ifndef MV_R4W
#define MV_R4W 4
#endif
template <int T, int NB> struct mv_rows {
        enum { WORDS = sizeof(typename mv_q<T, NB>::raw) / 4 }; /* registers a piece holds */
        enum {
                R = NB == 1                                        ? (WORDS <= 8 ? MV_R1 : MV_R1_K)
                    : NB <= 2                                      ? (WORDS <= 8 ? 4 : 2)
                    : NB <= 4 && WORDS <= 4                        ? 4
                    : NB == 4 && mv_direct<T, NB>::V && WORDS <= 8 ? MV_R4W
                    : NB == 8 && mv_direct<T, NB>::V && WORDS <= 8 ? MV_R8
                                                                   : 2
        };
};

/* The rows per warp k_matvec takes for type T at batch nb (1..8). */
template <int T> static inline int mv_rows_of(int nb)
{
        const int r1 = mv_rows<T, 1>::R, r2 = mv_rows<T, 2>::R, r4 = mv_rows<T, 4>::R,
                  r8 = mv_rows<T, 8>::R;

        return nb == 1 ? r1 : nb == 2 ? r2 : nb <= 4 ? r4 : r8;
}

template <int T, bool VEC>
static int launch_matvec_t(const struct mv_args *a, int n, int sms, cudaStream_t stream)
{
        if (a->nb == 1)
                return launch_mv<T, 1, mv_rows<T, 1>::R, VEC>(a, n, sms, stream);
        if (a->nb == 2)
                return launch_mv<T, 2, mv_rows<T, 2>::R, VEC>(a, n, sms, stream);
        if (a->nb <= 4)
                return launch_mv<T, 4, mv_rows<T, 4>::R, VEC>(a, n, sms, stream);
        return launch_mv<T, 8, mv_rows<T, 8>::R, VEC>(a, n, sms, stream);
}

/* k_matvec for type T over a[0 .. n): the float and split types pick whole-vector loads
 * when rows allow (a[0].vec covers all n: same row_bytes, and their data 16-byte
 * aligned); the K types' blocks are multiples of 16 bytes and instantiate VEC only. */
template <int T>
static int launch_matvec(const struct mv_args *a, int n, int sms, cudaStream_t stream)
{
        if ((qt<T>::TAIL || qt<T>::SPLIT) && !a->vec)
                return launch_matvec_t<T, !(qt<T>::TAIL || qt<T>::SPLIT)>(a, n, sms, stream);
        return launch_matvec_t<T, true>(a, n, sms, stream);
}

/* The per-family entry points (matvec_f.cu, matvec_q.cu, matvec_k.cu): launch the
 * matrix-vector kernel over a[0 .. n) for a type of the family; -ENOTSUP for a type of
 * another family. (The batched kernel's: mmq.cuh.) */
int m40_mv_launch_f(uint32_t type, const struct mv_args *a, int n, int sms, cudaStream_t stream);
int m40_mv_launch_q(uint32_t type, const struct mv_args *a, int n, int sms, cudaStream_t stream);
int m40_mv_launch_k(uint32_t type, const struct mv_args *a, int n, int sms, cudaStream_t stream);

/* One family file's body: FAMILY is its entry point, the types are its cases. */
#define M40_MV_CASE(T)                                                                             \
        case T:                                                                                    \
                return launch_matvec<T>(a, n, sms, stream);

#endif
