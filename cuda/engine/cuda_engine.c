/* cuda/engine/cuda_engine.c - the per-op CUDA engine behind the engine interface (see
 * cuda_engine.h): the engine core (daemon/engine/core.h: admission, the step plan,
 * stops, events, KV page accounting, the common defaults of the limits, all shared with
 * the CPU engine) over the device's forward pass and sampling.
 *
 * Owns the backend's part: the device model and forward pass (cuda_forward.c), whose
 * allocator also sizes the KV pool by default (from the GPU's free memory), and sampling
 * on the device for every row (cuda/kernels/sample.h: the CPU engine's sampler, every option,
 * within the draw tolerance stated there): each step uploads the rows' parameters and
 * rng states, the kernel reads the penalty window from a device copy of each slot's
 * tokens (uploaded once per sequence, then appended to by the kernel), and only the token
 * ids come back; the rng state advances on the host as on the device. Only rows of
 * sequences with keep_logits copy their logits to the host. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "cuda/runtime/alloc.h"
#include "cuda/engine/cuda_engine.h"
#include "cuda/engine/cuda_forward.h"
#include "cuda/kernels/persist_step.h"
#include "cuda/runtime/launch.h"
#include "cuda/runtime/loader.h"
#include "cuda/kernels/ops.h"
#include "cuda/kernels/sample.h"
#include "engine/core.h"
#include "engine/engine.h"
#include "engine/model.h"
#include "m40/error.h"

struct cuda_engine {
        struct m40_core core;
        struct m40_cuda_fwd *fwd;
        struct m40_cuda_sample_row *srows;   /* (max_seqs) host: the step's sampling jobs */
        struct m40_cuda_sample_row *srows_d; /* (max_seqs) device copy */
        int32_t *tok_d;                      /* (max_seqs) device: the sampled tokens */
        int32_t *hist_d;  /* (max_seqs, max_ctx) device: each slot's tokens, for penalties */
        uint32_t *hist_n; /* (max_seqs) how many of the slot's tokens hist_d holds */
        void *swork;      /* device: m40_cuda_sample_work_bytes(n_vocab, max_seqs) */
};

static void cuda_admitted(struct m40_core *c, const struct m40_seq *s)
{
        struct cuda_engine *e = (struct cuda_engine *)c;

        e->hist_n[s - c->seqs] = 0; /* the slot's device tokens are another sequence's */
}

/* sample_prepare - before the forward pass (the stream is idle, so the pageable copies
 * do not wait): each planned row's sampling job to the device, and the tokens that the
 * penalty window of its sequence needs and the device copy lacks (the prompt, once). */
static int sample_prepare(struct cuda_engine *e, uint32_t rows)
{
        const struct m40_core *c = &e->core;
        struct CUstream_st *st = m40_cuda_fwd_stream(e->fwd);
        const uint32_t cap = c->lim.max_ctx;

        for (uint32_t i = 0; i < c->lim.max_seqs; i++) {
                const struct m40_seq *s = &c->seqs[i];
                int32_t *h = e->hist_d + (size_t)i * cap;

                if (s->state != M40_SEQ_ACTIVE || s->row < 0)
                        continue;
                if (m40_cuda_sample_uses_hist(&s->sampling) && e->hist_n[i] < s->n_toks) {
                        const int32_t last_n = s->sampling.penalty_last_n;
                        uint32_t from = e->hist_n[i];

                        /* older tokens are never read again: the window only moves on */
                        if (last_n > 0 && s->n_toks - from > (uint32_t)last_n)
                                from = s->n_toks - (uint32_t)last_n;
                        if (cudaMemcpyAsync(h + from, s->toks + from,
                                            (size_t)(s->n_toks - from) * sizeof(int32_t),
                                            cudaMemcpyHostToDevice, st) != cudaSuccess)
                                return m40_cuda_launch_status("history upload");
                        e->hist_n[i] = s->n_toks;
                }
                m40_cuda_sample_row_set(&e->srows[s->row], &s->sampling, s->rng, h, s->n_toks, cap);
        }
        if (rows && cudaMemcpyAsync(e->srows_d, e->srows, rows * sizeof(*e->srows),
                                    cudaMemcpyHostToDevice, st) != cudaSuccess)
                return m40_cuda_launch_status("sampling upload");
        return 0;
}

/* sample_run - after the forward pass: the kept rows' logits to the host, every row
 * sampled on the device, the tokens back. Synchronous. */
static int sample_run(struct cuda_engine *e, uint32_t rows)
{
        const struct m40_core *c = &e->core;
        struct CUstream_st *st = m40_cuda_fwd_stream(e->fwd);
        const uint32_t nv = c->m->n_vocab;
        float *lg = m40_cuda_fwd_logits(e->fwd);
        int r = 0;

        for (uint32_t i = 0; i < c->lim.max_seqs && !r; i++) {
                const struct m40_seq *s = &c->seqs[i];

                /* before the sampler penalizes the row in place */
                if (s->state == M40_SEQ_ACTIVE && s->row >= 0 && s->keep_logits &&
                    cudaMemcpyAsync(c->logits + (size_t)s->row * nv, lg + (size_t)s->row * nv,
                                    nv * sizeof(float), cudaMemcpyDeviceToHost, st) != cudaSuccess)
                        r = m40_cuda_launch_status("logits download");
        }
        r = r ? r : m40_cuda_sample(lg, nv, nv, e->srows_d, rows, e->swork, e->tok_d, st);
        if (!r && cudaMemcpyAsync(c->tokens, e->tok_d, rows * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost, st) != cudaSuccess)
                r = m40_cuda_launch_status("token download");
        if (cudaStreamSynchronize(st) != cudaSuccess && !r)
                r = m40_cuda_launch_status("sampling");
        return r;
}

/* cuda_run - the backend's step: the rows' sampling jobs up, the forward pass, the
 * sampling, the tokens down (synchronous); then each row's rng state advances as the
 * device's did, and the device copy of its slot's tokens counts the token the kernel
 * stored after them (a whole copy stays whole). */
static int cuda_run(struct m40_core *c, const struct m40_plan_step *ps)
{
        struct cuda_engine *e = (struct cuda_engine *)c;
        int r = 0;

        if (ps->n_rows)
                r = sample_prepare(e, ps->n_rows);
        r = r ? r : m40_cuda_fwd_run(e->fwd, c->batch, ps->n_tokens, ps->n_rows, NULL, NULL);
        if (!r && ps->n_rows)
                r = sample_run(e, ps->n_rows);
        if (r)
                return r;
        for (uint32_t i = 0; i < c->lim.max_seqs; i++) {
                struct m40_seq *s = &c->seqs[i];

                if (s->state != M40_SEQ_ACTIVE || s->row < 0)
                        continue;
                s->rng = m40_cuda_sample_rng_next(s->sampling.temperature, s->rng);
                if (e->hist_n[i] == s->n_toks && s->n_toks < c->lim.max_ctx)
                        e->hist_n[i]++;
        }
        return 0;
}

static void cuda_done(struct m40_core *c)
{
        struct cuda_engine *e = (struct cuda_engine *)c;

        m40_cuda_fwd_free(e->fwd);
        free(e->srows);
        free(e->hist_n);
}

static const struct m40_core_backend cuda_backend = {
        .name = "CUDA",
        .act_default = M40_ACT_F32,
        .act_f32_only = true,
        .map_weights = false,
        .run = cuda_run,
        .admitted = cuda_admitted,
        .done = cuda_done,
};

static uint64_t al(uint64_t n)
{
        return (n + M40_CUDA_ALLOC_ALIGN - 1) & ~(uint64_t)(M40_CUDA_ALLOC_ALIGN - 1);
}

/* sample_scratch_bytes - the device scratch sample_init() takes (rounded as the pool). */
static uint64_t sample_scratch_bytes(const struct m40_core *c)
{
        const uint64_t S = c->lim.max_seqs;

        return al(S * sizeof(struct m40_cuda_sample_row)) + al(S * sizeof(int32_t)) +
               al(S * c->lim.max_ctx * sizeof(int32_t)) +
               al(m40_cuda_sample_work_bytes(c->m->n_vocab, c->lim.max_seqs));
}

/* sample_init - the sampler's host buffers, and its device buffers from the forward
 * pass's scratch pool, its counts zeroed. */
static int sample_init(struct cuda_engine *e)
{
        const struct m40_core *c = &e->core;
        struct m40_cuda_alloc *a = m40_cuda_fwd_alloc(e->fwd);
        struct CUstream_st *st = m40_cuda_fwd_stream(e->fwd);
        const uint32_t S = c->lim.max_seqs;
        void *rows = NULL;
        int r;

        e->srows = calloc(S, sizeof(*e->srows));
        e->hist_n = calloc(S, sizeof(*e->hist_n));
        if (!e->srows || !e->hist_n)
                return -ENOMEM;
        r = m40_cuda_scratch_array(a, S, sizeof(*e->srows_d), &rows);
        r = r ? r : m40_cuda_scratch_i32(a, S, &e->tok_d);
        r = r ? r : m40_cuda_scratch_i32(a, (uint64_t)S * c->lim.max_ctx, &e->hist_d);
        r = r ? r
              : m40_cuda_scratch_alloc(a, m40_cuda_sample_work_bytes(c->m->n_vocab, S), &e->swork);
        if (r)
                return r;
        e->srows_d = rows;
        r = m40_cuda_sample_work_init(e->swork, c->m->n_vocab, S, st);
        if (!r && cudaStreamSynchronize(st) != cudaSuccess)
                r = m40_cuda_launch_status("sampler setup");
        return r;
}

/* The loader's callbacks, passed on to the limits' load_progress and load_note. */
static void load_progress(void *user, const struct m40_cuda_load_progress *p)
{
        const struct m40_engine_limits *lim = user;

        if (lim->load_progress)
                lim->load_progress(lim->load_ctx, p->bytes_done, p->bytes_total, p->seconds);
}

static void load_note(void *user, const char *msg)
{
        const struct m40_engine_limits *lim = user;

        if (lim->load_note)
                lim->load_note(lim->load_ctx, msg);
}

/* use_mode - the decode mode of the limits (engine.h, enum m40_engine_mode) on fwd: the
 * persistent step kernel when asked for and the model takes it; a model it does not take
 * runs per step, and the load note says why. */
static int use_mode(const struct m40_core *c, struct m40_cuda_fwd *fwd, char *err, size_t errlen)
{
        char why[256] = "";
        int r;

        const uint32_t mode = c->lim.mode != M40_ENGINE_MODE_DEFAULT ? c->lim.mode
                              : m40_cuda_ps_default()                ? M40_ENGINE_MODE_PERSISTENT
                                                                     : M40_ENGINE_MODE_STEPS;

        if (mode != M40_ENGINE_MODE_PERSISTENT)
                return 0;
        r = m40_cuda_fwd_persistent(fwd, why, sizeof(why));
        if (r == -ENOTSUP) {
                char msg[320];

                snprintf(msg, sizeof(msg), "%s; decode steps run per layer", why);
                load_note((void *)&c->lim, msg);
                return 0;
        }
        if (r && err)
                snprintf(err, errlen, "%s: %s", c->path, why);
        return r;
}

/* check_limits - what the device code cannot take: -EINVAL or M40_EUNSUPPORTED with a
 * message in err, else 0. */
static int check_limits(const struct m40_core *c, const char *path, char *err, size_t errlen)
{
        if (c->lim.max_ctx - 1 > M40_CUDA_ATTN_MAX_POS) { /* positions are 31-bit */
                if (err)
                        snprintf(err, errlen, "%s: max_ctx %u is above the CUDA engine's %u", path,
                                 c->lim.max_ctx, M40_CUDA_ATTN_MAX_POS + 1);
                return -EINVAL;
        }
        if (c->m->head_dim > M40_CUDA_MAX_HEAD_DIM) {
                if (err)
                        snprintf(err, errlen, "%s: head_dim %u is above the CUDA engine's %u", path,
                                 c->m->head_dim, M40_CUDA_MAX_HEAD_DIM);
                return M40_EUNSUPPORTED;
        }
        return 0;
}

int m40_cuda_engine_new(struct m40_gguf *g, const struct m40_engine_limits *lim, int device,
                        struct m40_engine **ret, char *err, size_t errlen)
{
        struct cuda_engine *e;
        struct m40_core *c;
        struct m40_cuda_load_opts load = {0};
        struct m40_cuda_alloc_stats as;
        uint32_t n_pages = 0; /* 0 with kv_bytes 0: sized by the allocator */
        int r;

        r = m40_core_new(sizeof(*e), &cuda_backend, g, lim, &c, err, errlen);
        if (r)
                return r;
        e = (struct cuda_engine *)c;
        r = check_limits(c, c->path, err, errlen);
        r = r ? r : m40_core_kv_pages(c, c->path, &n_pages, err, errlen);
        if (r)
                return m40_core_fail(c, r, err, errlen);
        load.progress = load_progress;
        load.note = load_note;
        load.user = &c->lim;
        r = m40_cuda_fwd_new(c->m, device, c->lim.max_batch_tokens, c->lim.max_seqs, c->lim.max_ctx,
                             n_pages, c->lim.page_tokens, c->lim.vram_limit_mb,
                             sample_scratch_bytes(c), &load, &e->fwd, err, errlen);
        if (r)
                return m40_core_fail(c, r, err, errlen);
        r = use_mode(c, e->fwd, err, errlen);
        if (r)
                return m40_core_fail(c, r, err, errlen);
        m40_cuda_alloc_stats(m40_cuda_fwd_alloc(e->fwd), &as);
        r = m40_core_start(c, as.kv_pages);
        if (r)
                return m40_core_fail(c, r, err, errlen);
        r = sample_init(e);
        if (r) {
                if (err)
                        snprintf(err, errlen, "%s: sampler setup: %s", c->path,
                                 r == M40_ECUDA ? m40_cuda_last_error() : m40_strerror(r));
                return m40_core_fail(c, r, err, errlen);
        }
        *ret = &c->base;
        return 0;
}
