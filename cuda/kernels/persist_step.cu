/* cuda/kernels/persist_step.cu - the host side of the persistent step kernel (the contract is
 * persist_step.h, the kernel persist_step.cuh): the layers' launch plans, made once from the
 * per-step launchers' own arguments (matvec_args.cuh) and plans (matvec_launch.cuh,
 * mv_plan_of()), kept in device memory; the grid from the occupancy API; one launch per
 * step. */
#include "cuda/kernels/persist_step.cuh"

#include <stdlib.h>
#include <string.h>

#include "m40/error.h"
#include "cuda/kernels/matvec_args.cuh"

static bool ps_ops_of(uint32_t type, struct ps_ops *o)
{
        return m40_ps_ops_f(type, o) || m40_ps_ops_q(type, o) || m40_ps_ops_k(type, o);
}

struct m40_cuda_ps {
        struct ps_ops ops;
        struct ps_args a; /* every launch's, but the attention's plan */
        struct m40_cuda_ps_desc d;
        unsigned blocks;
        size_t shmem;
        uint32_t max_pos; /* the most a step may ask for */
};

/* The engine's default decode mode (engine.h, M40_ENGINE_MODE_DEFAULT): 0 per step, 1 the
 * persistent step kernel. A build-time choice, from the measured A/B in RESULTS.md; knob for
 * A/B builds (tests/bench/ab-variants.sh: -DPS_DEFAULT=1). */
#ifndef PS_DEFAULT
#define PS_DEFAULT 0
#endif

extern "C" bool m40_cuda_ps_default(void)
{
        return PS_DEFAULT != 0;
}

extern "C" size_t m40_cuda_ps_bytes(uint32_t n_layers)
{
        return (size_t)n_layers * sizeof(struct ps_layer_plan) + 16 + PS_TM_WORDS * 8;
}

/* Whether every layer matrix of d has the first one's type. */
static bool one_type(const struct m40_cuda_ps_desc *d)
{
        const uint32_t t = d->layers[0].wq.type;

        for (uint32_t i = 0; i < d->n_layers; i++) {
                const struct m40_cuda_ps_layer *l = &d->layers[i];
                const struct m40_cuda_matrix *w[] = {&l->wq,   &l->wk, &l->wv,  &l->wo,
                                                     &l->gate, &l->up, &l->down};

                for (size_t j = 0; j < sizeof(w) / sizeof(w[0]); j++)
                        if (w[j]->type != t)
                                return false;
        }
        return true;
}

/* Layer l's prefetch ranges: the first budget bytes of wo, gate, up and down, in order. */
static void pf_plan(const struct m40_cuda_ps_layer *l, size_t budget, struct ps_layer_plan *p)
{
        const struct m40_cuda_matrix *w[PS_PF_RANGES] = {&l->wo, &l->gate, &l->up, &l->down};

        for (int r = 0; r < PS_PF_RANGES; r++) {
                const size_t bytes = (size_t)w[r]->n_out * w[r]->row_bytes;
                const size_t take = bytes < budget ? bytes : budget;

                p->pf[r] = (const char *)w[r]->data;
                p->pf_lines[r] = (unsigned)(take / 128);
                budget -= take;
        }
}

/* Layer i's four phases from the per-step launchers' arguments. */
static int layer_plan(const struct m40_cuda_ps *ps, uint32_t i, int sms, struct ps_layer_plan *p)
{
        const struct m40_cuda_ps_desc *d = &ps->d;
        const struct m40_cuda_ps_layer *l = &d->layers[i];
        const struct m40_cuda_matrix qkv[3] = {l->wq, l->wk, l->wv};
        float *const y[3] = {d->q, d->k, d->v};
        const size_t ldy[3] = {d->ld_q, d->ld_kv, d->ld_kv};
        struct m40_cuda_rms rc = d->rms, rp = d->rms;
        struct m40_cuda_kv kv = d->kv;
        struct mv_args a[MV_MAX_MATS];
        int r;

        memset(rc.next, 0, sizeof(rc.next)); /* no L2 hints: a phase has no next kernel */
        memset(rp.next, 0, sizeof(rp.next));
        kv.layer = i;
        r = m40_mv_args_qkv_rope(qkv, d->xn, d->ld_dim, &rc, &d->rope, &kv, d->head_dim, y, ldy, 1,
                                 a);
        r = r ? r : ps->ops.plan(a, 3, sms, ps->blocks, &p->ph[0]);
        rp.g = l->ffn_norm;
        rp.xg = d->xn;
        rp.ldxg = d->ld_dim;
        r = r ? r : m40_mv_args_add_rms(&l->wo, d->att, d->ld_q, d->x, d->ld_dim, 1, &rp, a);
        r = r ? r : ps->ops.plan(a, 1, sms, ps->blocks, &p->ph[1]);
        r = r ? r
              : m40_mv_args_swiglu_rms(&l->gate, &l->up, d->xn, d->ld_dim, &rc, d->gate, d->up,
                                       d->ld_ff, 1, a);
        r = r ? r : ps->ops.plan(a, 2, sms, ps->blocks, &p->ph[2]);
        rp.g = i + 1 < d->n_layers ? d->layers[i + 1].attn_norm : NULL;
        r = r ? r : m40_mv_args_add_rms(&l->down, d->gate, d->ld_ff, d->x, d->ld_dim, 1, &rp, a);
        r = r ? r : ps->ops.plan(a, 1, sms, ps->blocks, &p->ph[3]);
        pf_plan(l, d->pf_bytes, p);
        return r;
}

/* The attention's plan for steps up to max_pos into ps->a; its shared memory. */
static int attn_plan(struct m40_cuda_ps *ps, uint32_t max_pos, size_t *shmem)
{
        const struct m40_cuda_ps_desc *d = &ps->d;
        dim3 grid;
        int r;

        r = m40_attn_plan_g2(&d->kv, d->n_heads, d->n_kv_heads, d->head_dim, d->scale, 1, max_pos,
                             d->attn_ws, d->attn_ws_bytes, &ps->a.pl, &grid, shmem);
        if (r)
                return r;
        ps->a.agx = grid.x;
        ps->a.an_split = grid.z;
        return 0;
}

static int sm_count(int *ret)
{
        int dev = 0;

        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(ret, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
                return m40_cuda_launch_status("SM count");
        return 0;
}

/* The plans of every layer, uploaded to mem; the counters and PS_TIMING's sums zeroed
 * after them. */
static int upload(struct m40_cuda_ps *ps, int sms, void *mem)
{
        const struct m40_cuda_ps_desc *d = &ps->d;
        const size_t bytes = (size_t)d->n_layers * sizeof(struct ps_layer_plan);
        struct ps_layer_plan *h = (struct ps_layer_plan *)calloc(d->n_layers, sizeof(*h));
        int r = h ? 0 : -ENOMEM;

        for (uint32_t i = 0; i < d->n_layers && !r; i++)
                r = layer_plan(ps, i, sms, &h[i]);
        if (!r && (cudaMemcpy(mem, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
                   cudaMemset((char *)mem + bytes, 0, 16 + PS_TM_WORDS * 8) != cudaSuccess))
                r = m40_cuda_launch_status("persistent step plan");
        free(h);
        ps->a.L = (const struct ps_layer_plan *)mem;
        ps->a.ctr = (unsigned *)((char *)mem + bytes);
        ps->a.tm = (unsigned long long *)((char *)mem + bytes + 16);
        return r;
}

extern "C" int m40_cuda_ps_new(const struct m40_cuda_ps_desc *d, void *mem, size_t mem_bytes,
                               struct m40_cuda_ps **ret)
{
        struct m40_cuda_ps *ps;
        int r, sms = 0, per_sm = 0;

        if (!d || !ret || !mem || !d->layers || !d->n_layers || !d->max_ctx ||
            (uintptr_t)mem % 16 || mem_bytes < m40_cuda_ps_bytes(d->n_layers) || d->n_layers > 4096)
                return -EINVAL;
        ps = (struct m40_cuda_ps *)calloc(1, sizeof(*ps));
        if (!ps)
                return -ENOMEM;
        ps->d = *d;
        ps->max_pos = (d->max_ctx < M40_CUDA_PS_MAX_CTX ? d->max_ctx : M40_CUDA_PS_MAX_CTX) - 1;
        r = one_type(d) && ps_ops_of(d->layers[0].wq.type, &ps->ops) ? 0 : -ENOTSUP;
        r = r ? r : sm_count(&sms);
        r = r ? r : attn_plan(ps, ps->max_pos, &ps->shmem);
        r = r ? r : ps->ops.per_sm(ps->shmem, &per_sm);
        /* a launch's arrivals stay within half the counters' range (persist.cuh) */
        if (!r && (per_sm < 1 || (uint64_t)(5 * d->n_layers) * per_sm * sms >= 1u << 31))
                r = -ENOTSUP;
        if (!r)
                ps->blocks = (unsigned)(per_sm * sms); /* the phases' plans are made for it */
        r = r ? r : upload(ps, sms, mem);
        if (r) {
                free(ps);
                return r;
        }
        ps->a.n_layers = (int)d->n_layers;
        ps->a.kv = d->kv;
        ps->a.q = d->q;
        ps->a.att = d->att;
        ps->a.ldq = d->ld_q;
        *ret = ps;
        return 0;
}

extern "C" int m40_cuda_ps_run(struct m40_cuda_ps *ps, uint32_t max_pos, struct CUstream_st *stream)
{
        size_t shmem = 0;
        int r;

        if (!ps)
                return -EINVAL;
        if (max_pos > ps->max_pos)
                return -ENOTSUP;
        r = attn_plan(ps, max_pos, &shmem);
        if (r)
                return r;
        if (shmem > ps->shmem) /* the occupancy was taken with ps->shmem */
                return -ENOTSUP;
        return ps->ops.launch(&ps->a, ps->blocks, ps->shmem, stream);
}

extern "C" uint32_t m40_cuda_ps_blocks(const struct m40_cuda_ps *ps)
{
        return ps ? ps->blocks : 0;
}

extern "C" struct m40_cuda_ps *m40_cuda_ps_free(struct m40_cuda_ps *ps)
{
        free(ps);
        return NULL;
}
