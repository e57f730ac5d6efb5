/* cuda/kernels/matvec.cu - the public launchers of matvec.h: argument checks against each
 * type's block layout, and dispatch to the family files (matvec_f.cu, matvec_q.cu,
 * matvec_k.cu) that instantiate the kernels of matvec.cuh. Host code only. */
#include <errno.h>
#include <limits.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "m40/error.h"
#include "cuda/kernels/matvec_args.cuh"
#include "cuda/kernels/matvec_launch.cuh"
#include "cuda/kernels/ops.h"

/* Block layout: elements, bytes, and the row alignment consecutive rows keep. */
struct layout {
        uint32_t qk, bytes, align;
};

static bool type_layout(uint32_t type, struct layout *l)
{
        switch (type) {
        case M40_GGML_F32:
                *l = (struct layout){1, 4, 4};
                return true;
        case M40_GGML_F16:
        case M40_GGML_BF16:
                *l = (struct layout){1, 2, 2};
                return true;
        case M40_GGML_Q8_0:
                *l = (struct layout){32, 34, 2};
                return true;
        case M40_GGML_Q4_0:
                *l = (struct layout){32, 18, 2};
                return true;
        case M40_GGML_Q4_1:
                *l = (struct layout){32, 20, 4};
                return true;
        case M40_GGML_Q5_0:
                *l = (struct layout){32, 22, 2};
                return true;
        case M40_GGML_Q5_1:
                *l = (struct layout){32, 24, 8};
                return true;
        case M40_GGML_Q4_K:
                *l = (struct layout){256, 144, 16};
                return true;
        case M40_GGML_Q5_K:
                *l = (struct layout){256, 176, 16};
                return true;
        case M40_GGML_Q6_K:
                *l = (struct layout){256, 210, 2};
                return true;
        default:
                return false;
        }
}

extern "C" bool m40_cuda_matmul_supports(uint32_t type)
{
        struct layout l;

        return type_layout(type, &l);
}

/* Check a call against matvec.h's contract and fill the kernel arguments. */
static int check(const struct m40_cuda_matrix *w, const float *x, size_t ldx, float *y, size_t ldy,
                 uint32_t batch, uint32_t max_batch, struct mv_args *a)
{
        struct layout l;
        uintptr_t xb, xe, yb, ye;

        if (!w || !x || !y || !w->data)
                return -EINVAL;
        if (!type_layout(w->type, &l))
                return M40_EUNSUPPORTED;
        if (batch < 1 || batch > max_batch || w->n_in < 1 || w->n_in > INT_MAX / 2 ||
            w->n_out > INT_MAX / 2)
                return -EINVAL;
        if (w->n_in % l.qk || w->row_bytes < (size_t)(w->n_in / l.qk) * l.bytes ||
            w->row_bytes % l.align || (uintptr_t)w->data % 16)
                return -EINVAL;
        if (ldx < w->n_in || ldx % 4 || (uintptr_t)x % 16 || ldy < w->n_out)
                return -EINVAL;
        if (ldx > (size_t)INT_MAX / batch || ldy > (size_t)INT_MAX / batch)
                return -EINVAL;
        xb = (uintptr_t)x;
        xe = xb + (uintptr_t)batch * ldx * sizeof(float);
        yb = (uintptr_t)y;
        ye = yb + (uintptr_t)batch * ldy * sizeof(float);
        if (xb < ye && yb < xe)
                return -EINVAL;

        a->w = (const uint8_t *)w->data;
        a->row_bytes = w->row_bytes;
        a->n_out = (int)w->n_out;
        a->n_in = (int)w->n_in;
        a->x = x;
        a->ldx = (int)ldx;
        a->y = y;
        a->ldy = (int)ldy;
        a->nb = (int)batch;
        a->vec = w->row_bytes % 16 == 0;
        a->add = false;
        a->rms = mv_rms();
        a->rope = mv_rope();
        a->rms_mode = 0;
        return 0;
}

static int sm_count(void)
{
        int dev = 0, sms = 0;

        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
            sms <= 0) {
                (void)cudaGetLastError();
                return 24; /* an M40's; only the split of rows over warps depends on it */
        }
        return sms;
}

static int launch(const struct mv_args *a, int n, uint32_t type, cudaStream_t stream)
{
        const int sms = sm_count();
        int rows = 0, r;

        for (int i = 0; i < n; i++)
                rows += a[i].n_out;
        if (rows == 0)
                return 0;
        r = m40_mv_launch_f(type, a, n, sms, stream);
        if (r == -ENOTSUP)
                r = m40_mv_launch_q(type, a, n, sms, stream);
        if (r == -ENOTSUP)
                r = m40_mv_launch_k(type, a, n, sms, stream);
        return r == -ENOTSUP ? M40_EUNSUPPORTED : r;
}

/* The batched kernel (mmq.cuh) over the n checked calls of a (one x, one type): one
 * launch, k split over up to part_bytes of partial sums (part NULL: not split). */
static int launch_mq(const struct mv_args *a, int n, uint32_t type, bool add, float *part,
                     size_t part_bytes, cudaStream_t stream)
{
        struct mq_args q = {};
        int r, sms;

        for (int i = 0; i < n; i++) {
                q.m.w[i] = a[i].w;
                q.m.y[i] = a[i].y;
                q.m.n_out[i] = a[i].n_out;
                q.m.ldy[i] = a[i].ldy;
                q.m.r_base[i] = q.m.rows;
                q.m.rows += a[i].n_out;
        }
        if (q.m.rows == 0)
                return 0;
        q.m.n = n;
        q.m.add = add;
        q.row_bytes = a[0].row_bytes;
        q.n_in = a[0].n_in;
        q.x = a[0].x;
        q.ldx = a[0].ldx;
        q.nb = a[0].nb;
        if (part_bytes > M40_CUDA_MMQ_SEM_BYTES) { /* the counters, then the partials */
                q.sem = (unsigned *)part;
                part += M40_CUDA_MMQ_SEM_BYTES / sizeof(float);
                part_bytes -= M40_CUDA_MMQ_SEM_BYTES;
        } else {
                part_bytes = 0;
        }
        q.part = part_bytes ? part : NULL;
        sms = sm_count();
        r = m40_mq_launch_f(type, &q, sms, part_bytes, stream);
        if (r == -ENOTSUP)
                r = m40_mq_launch_q(type, &q, sms, part_bytes, stream);
        if (r == -ENOTSUP)
                r = m40_mq_launch_k(type, &q, sms, part_bytes, stream);
        return r == -ENOTSUP ? M40_EUNSUPPORTED : r;
}

extern "C" int m40_cuda_matvec(const struct m40_cuda_matrix *w, const float *x, size_t ldx,
                               float *y, size_t ldy, uint32_t batch, struct CUstream_st *stream)
{
        struct mv_args a;
        int r = check(w, x, ldx, y, ldy, batch, M40_CUDA_MATVEC_MAX_BATCH, &a);

        return r < 0 ? r : launch(&a, 1, w->type, stream);
}

extern "C" int m40_cuda_matmul_tiled(const struct m40_cuda_matrix *w, const float *x, size_t ldx,
                                     float *y, size_t ldy, uint32_t batch,
                                     struct CUstream_st *stream)
{
        struct mv_args a;
        int r = check(w, x, ldx, y, ldy, batch, M40_CUDA_MATMUL_MAX_BATCH, &a);

        return r < 0 ? r : launch_mq(&a, 1, w->type, false, NULL, 0, stream);
}

extern "C" int m40_cuda_matmul(const struct m40_cuda_matrix *w, const float *x, size_t ldx,
                               float *y, size_t ldy, uint32_t batch, struct CUstream_st *stream)
{
        if (batch <= M40_CUDA_MATVEC_MAX_BATCH)
                return m40_cuda_matvec(w, x, ldx, y, ldy, batch, stream);
        return m40_cuda_matmul_tiled(w, x, ldx, y, ldy, batch, stream);
}

/* The checks of a call on n matrices that share x (m40_cuda_matmul_n and _rms): each as
 * check() with batch up to max_batch, one type, n_in and row_bytes, outputs apart. */
static int check_n(const struct m40_cuda_matrix *w, uint32_t n, const float *x, size_t ldx,
                   float *const *y, const size_t *ldy, uint32_t batch, uint32_t max_batch,
                   struct mv_args *a)
{
        uintptr_t yb[MV_MAX_MATS], ye[MV_MAX_MATS];

        if (!w || !y || !ldy || n < 1 || n > M40_CUDA_MATMUL_MAX_MATS)
                return -EINVAL;
        for (uint32_t i = 0; i < n; i++) {
                const int r = check(&w[i], x, ldx, y[i], ldy[i], batch, max_batch, &a[i]);

                if (r < 0)
                        return r;
                if (w[i].type != w[0].type || w[i].n_in != w[0].n_in ||
                    w[i].row_bytes != w[0].row_bytes)
                        return -EINVAL;
                yb[i] = (uintptr_t)y[i];
                ye[i] = yb[i] + (uintptr_t)batch * ldy[i] * sizeof(float);
                for (uint32_t j = 0; j < i; j++)
                        if (yb[i] < ye[j] && yb[j] < ye[i])
                                return -EINVAL;
        }
        return 0;
}

extern "C" int m40_cuda_matmul_n(const struct m40_cuda_matrix *w, uint32_t n, const float *x,
                                 size_t ldx, float *const *y, const size_t *ldy, uint32_t batch,
                                 struct CUstream_st *stream)
{
        struct mv_args a[MV_MAX_MATS];
        int r = check_n(w, n, x, ldx, y, ldy, batch, M40_CUDA_MATMUL_MAX_BATCH, a);

        if (r < 0)
                return r;
        if (batch <= M40_CUDA_MATVEC_MAX_BATCH)
                return launch(a, (int)n, w[0].type, stream);
        return launch_mq(a, (int)n, w[0].type, false, NULL, 0, stream);
}

extern "C" int m40_cuda_matvec_add(const struct m40_cuda_matrix *w, const float *x, size_t ldx,
                                   float *y, size_t ldy, uint32_t batch, struct CUstream_st *stream)
{
        struct mv_args a;
        int r = check(w, x, ldx, y, ldy, batch, M40_CUDA_MATVEC_MAX_BATCH, &a);

        a.add = true;
        return r < 0 ? r : launch(&a, 1, w->type, stream);
}

/* The L2 hint of rms (matvec.h) into a's kernel arguments: whole lines only. */
static void l2_hint(struct mv_args *a, const struct m40_cuda_rms *rms)
{
        for (int i = 0; i < 2; i++) {
                const size_t lines = MV_PF && rms->next[i].p ? rms->next[i].bytes / 128 : 0;

                a->rms.pf[i] = (const char *)rms->next[i].p;
                a->rms.pf_lines[i] = lines < UINT_MAX / 4 ? (unsigned)lines : UINT_MAX / 4;
        }
}

/* The fused RMSNorm's consumer arguments (rms checked by the caller) for k_matvec MODE
 * mode (1, 3 or 4) into a[0], which carries them for the launch. */
static void rms_consumer(struct mv_args *a, const struct m40_cuda_rms *rms, int mode)
{
        const size_t slots = rms->partial_bytes / (MV_NB_MAX * sizeof(float));

        l2_hint(a, rms);
        a->rms.ss_part = rms->partial;
        a->rms.ss_count = rms->count;
        a->rms.ss_cap = slots < UINT_MAX ? (unsigned)slots : UINT_MAX;
        a->rms.eps = rms->eps;
        a->rms_mode = mode;
}

extern "C" int m40_cuda_matmul_n_rms(const struct m40_cuda_matrix *w, uint32_t n, const float *xg,
                                     size_t ldx, const struct m40_cuda_rms *rms, float *const *y,
                                     const size_t *ldy, uint32_t batch, struct CUstream_st *stream)
{
        struct mv_args a[MV_MAX_MATS];
        const int r = rms && rms->partial && rms->count && rms->eps >= 0.0f
                              ? check_n(w, n, xg, ldx, y, ldy, batch, M40_CUDA_MATVEC_MAX_BATCH, a)
                              : -EINVAL;

        if (r < 0)
                return r;
        rms_consumer(&a[0], rms, 1);
        return launch(a, (int)n, w[0].type, stream);
}

/* k_matvec's rows per warp for type at batch nb (matvec.cuh's mv_rows); 0 for a type
 * it does not take. */
static int rows_of(uint32_t type, uint32_t nb)
{
        switch (type) {
#define ROWS(T)                                                                                    \
        case T:                                                                                    \
                return mv_rows_of<T>((int)nb);
                ROWS(M40_GGML_F32)
                ROWS(M40_GGML_F16)
                ROWS(M40_GGML_BF16)
                ROWS(M40_GGML_Q8_0)
                ROWS(M40_GGML_Q4_0)
                ROWS(M40_GGML_Q4_1)
                ROWS(M40_GGML_Q5_0)
                ROWS(M40_GGML_Q5_1)
                ROWS(M40_GGML_Q4_K)
                ROWS(M40_GGML_Q5_K)
                ROWS(M40_GGML_Q6_K)
#undef ROWS
        default:
                return 0;
        }
}

int m40_mv_args_swiglu_rms(const struct m40_cuda_matrix *gate, const struct m40_cuda_matrix *up,
                           const float *xg, size_t ldx, const struct m40_cuda_rms *rms, float *y,
                           float *y_up, size_t ldy, uint32_t batch, struct mv_args a[MV_MAX_MATS])
{
        struct m40_cuda_matrix w[2];
        float *const ys[2] = {y, y_up};
        const size_t lds[2] = {ldy, ldy};
        int r;

        if (!gate || !up || gate->n_out != up->n_out)
                return -EINVAL;
        w[0] = *gate;
        w[1] = *up;
        r = rms && rms->partial && rms->count && rms->eps >= 0.0f
                    ? check_n(w, 2, xg, ldx, ys, lds, batch, M40_CUDA_MATVEC_MAX_BATCH, a)
                    : -EINVAL;
        if (r < 0)
                return r;
        if (rows_of(gate->type, batch) < 2)
                return -ENOTSUP;
        rms_consumer(&a[0], rms, 3);
        return 0;
}

extern "C" int m40_cuda_matmul_swiglu_rms(const struct m40_cuda_matrix *gate,
                                          const struct m40_cuda_matrix *up, const float *xg,
                                          size_t ldx, const struct m40_cuda_rms *rms, float *y,
                                          float *y_up, size_t ldy, uint32_t batch,
                                          struct CUstream_st *stream)
{
        struct mv_args a[MV_MAX_MATS];
        int r = m40_mv_args_swiglu_rms(gate, up, xg, ldx, rms, y, y_up, ldy, batch, a);

        if (r == -ENOTSUP) { /* rows not in pairs: the two products, then the SwiGLU */
                const struct m40_cuda_matrix w[2] = {*gate, *up};
                float *const ys[2] = {y, y_up};
                const size_t lds[2] = {ldy, ldy};

                r = m40_cuda_matmul_n_rms(w, 2, xg, ldx, rms, ys, lds, batch, stream);
                return r ? r : m40_cuda_swiglu(y, y_up, ldy, gate->n_out, batch, stream);
        }
        return r < 0 ? r : launch(a, 2, gate->type, stream);
}

int m40_mv_args_add_rms(const struct m40_cuda_matrix *w, const float *x, size_t ldx, float *y,
                        size_t ldy, uint32_t batch, const struct m40_cuda_rms *rms,
                        struct mv_args *a)
{
        int r = check(w, x, ldx, y, ldy, batch, M40_CUDA_MATVEC_MAX_BATCH, a);

        if (r < 0)
                return r;
        if (!rms || !rms->partial || !rms->count ||
            rms->partial_bytes < M40_CUDA_RMS_PARTIAL_BYTES(w->n_out) ||
            (rms->g && (!rms->xg || rms->ldxg < w->n_out || rms->ldxg > (size_t)INT_MAX / batch)))
                return -EINVAL;
        if (rms->g) { /* xg must not overlap x or y */
                const uintptr_t gb = (uintptr_t)rms->xg,
                                ge = gb + (uintptr_t)batch * rms->ldxg * sizeof(float);
                const uintptr_t xb = (uintptr_t)x, xe = xb + (uintptr_t)batch * ldx * sizeof(float);
                const uintptr_t yb = (uintptr_t)y, ye = yb + (uintptr_t)batch * ldy * sizeof(float);

                if ((gb < xe && xb < ge) || (gb < ye && yb < ge))
                        return -EINVAL;
        }
        a->add = true;
        a->rms.g = rms->g;
        a->rms.xg = rms->g ? rms->xg : NULL;
        a->rms.ldxg = (int)rms->ldxg;
        a->rms.ss_part = rms->partial;
        a->rms.ss_count = rms->count;
        a->rms_mode = 2;
        l2_hint(a, rms);
        return 0;
}

extern "C" int m40_cuda_matvec_add_rms(const struct m40_cuda_matrix *w, const float *x, size_t ldx,
                                       float *y, size_t ldy, uint32_t batch,
                                       const struct m40_cuda_rms *rms, struct CUstream_st *stream)
{
        struct mv_args a;
        const int r = m40_mv_args_add_rms(w, x, ldx, y, ldy, batch, rms, &a);

        return r < 0 ? r : launch(&a, 1, w->type, stream);
}

int m40_mv_args_qkv_rope(const struct m40_cuda_matrix *w, const float *xg, size_t ldx,
                         const struct m40_cuda_rms *rms, const struct m40_cuda_rope *rope,
                         const struct m40_cuda_kv *kv, uint32_t head_dim, float *const *y,
                         const size_t *ldy, uint32_t batch, struct mv_args a[MV_MAX_MATS])
{
        int r;

        if (!w || !y || !ldy || !rope || !rope->cs || !kv || !kv->base || !kv->page_tokens ||
            !kv->pos || !kv->tbl || !kv->pages || !head_dim || head_dim % 2 ||
            rope->n_rot > head_dim || rope->n_rot % 2 || w[0].n_out % head_dim ||
            w[1].n_out % head_dim || w[1].n_out != w[2].n_out || ldy[1] != ldy[2] ||
            kv->kv_dim < w[1].n_out)
                return -EINVAL;
        r = rms && rms->partial && rms->count && rms->eps >= 0.0f
                    ? check_n(w, 3, xg, ldx, y, ldy, batch, M40_CUDA_MATVEC_MAX_BATCH, a)
                    : -EINVAL;
        if (r < 0)
                return r;
        if (rope->neox || rows_of(w[0].type, batch) < 2) /* pairs not in one warp */
                return -ENOTSUP;
        rms_consumer(&a[0], rms, 4);
        a[0].rope.cs = rope->cs;
        a[0].rope.n_rot = (int)rope->n_rot;
        a[0].rope.hd = (int)head_dim;
        a[0].rope.kv = *kv;
        return 0;
}

extern "C" int m40_cuda_matmul_qkv_rope(const struct m40_cuda_matrix *w, const float *xg,
                                        size_t ldx, const struct m40_cuda_rms *rms,
                                        const struct m40_cuda_rope *rope,
                                        const struct m40_cuda_kv *kv, uint32_t head_dim,
                                        float *const *y, const size_t *ldy, uint32_t batch,
                                        struct CUstream_st *stream)
{
        struct mv_args a[MV_MAX_MATS];
        int r = m40_mv_args_qkv_rope(w, xg, ldx, rms, rope, kv, head_dim, y, ldy, batch, a);

        if (r == -ENOTSUP) { /* the products, then RoPE and the store */
                r = m40_cuda_matmul_n_rms(w, 3, xg, ldx, rms, y, ldy, batch, stream);
                return r ? r
                         : m40_cuda_rope_store(rope, kv, y[0], ldy[0], y[1], y[2], ldy[1],
                                               w[0].n_out / head_dim, w[1].n_out / head_dim,
                                               head_dim, batch, stream);
        }
        return r < 0 ? r : launch(a, 3, w[0].type, stream);
}

/* Steps up to this many tokens take the matrix-vector kernel in the forward pass
 * (m40_cuda_matvec_steps_max()), quantized types and float types; knobs for A/B builds.
 * Above them the batched kernels (k_mmr or mmq, mmr.cuh's mr_takes()) are faster for the
 * quantized types from 5 columns; the float types keep the matrix-vector kernel to 8. */
#ifndef MV_FWD_MAX
#define MV_FWD_MAX 4
#endif
#ifndef MV_FWD_MAX_F
#define MV_FWD_MAX_F 8
#endif
static_assert(MV_FWD_MAX >= 1 && MV_FWD_MAX <= M40_CUDA_MATVEC_MAX_BATCH, "matvec batches");
static_assert(MV_FWD_MAX_F >= 1 && MV_FWD_MAX_F <= M40_CUDA_MATVEC_MAX_BATCH, "matvec batches");

extern "C" uint32_t m40_cuda_matvec_steps_max(uint32_t type)
{
        const bool flt = type == M40_GGML_F32 || type == M40_GGML_F16 || type == M40_GGML_BF16;

        return flt ? MV_FWD_MAX_F : MV_FWD_MAX;
}

extern "C" int m40_cuda_mmq(const struct m40_cuda_matrix *w, uint32_t n, const float *x, size_t ldx,
                            float *const *y, const size_t *ldy, uint32_t batch, bool add,
                            float *part, size_t part_bytes, struct CUstream_st *stream)
{
        struct mv_args a[MV_MAX_MATS];
        int r = check_n(w, n, x, ldx, y, ldy, batch, M40_CUDA_MMQ_MAX_BATCH, a);

        if (r < 0)
                return r;
        if (part_bytes && (!part || (uintptr_t)part % 16))
                return -EINVAL;
        return launch_mq(a, (int)n, w[0].type, add, part, part_bytes, stream);
}
