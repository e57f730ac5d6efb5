/* cuda/cuda_engine.c - the per-op CUDA engine behind the engine interface (see
 * cuda_engine.h).
 *
 * Owns the step (the CPU engine's plan, daemon/engine/plan.c: decode tokens first, then
 * prompt chunks, all in one forward pass), the statistics counters and the defaults of
 * the limits: the CPU engine's semantics (cpu_engine.c), line for line, but the KV cache,
 * which by default the allocator sizes from the GPU's free memory. The sequence
 * slots, admission, stop conditions and the event queue are the CPU engine's seqs.c (shared
 * with it). The device work is in cuda_forward.c; KV page accounting is the CPU
 * engine's kv.c. Sampling runs on the device for every row (cuda/sample.h: the CPU
 * engine's sampler, every option, within the draw tolerance stated there): each step
 * uploads the rows' parameters and rng states, the kernel reads the penalty window from
 * a device copy of each slot's tokens (uploaded once per sequence, then appended to by
 * the kernel), and only the token ids come back; the rng state advances on the host as
 * on the device. Only rows of sequences with keep_logits copy their logits to the host. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "cuda/alloc.h"
#include "cuda/cuda_engine.h"
#include "cuda/cuda_forward.h"
#include "cuda/launch.h"
#include "cuda/loader.h"
#include "cuda/ops.h"
#include "cuda/sample.h"
#include "engine/engine.h"
#include "engine/forward.h"
#include "engine/kv.h"
#include "engine/model.h"
#include "engine/plan.h"
#include "engine/seqs.h"
#include "m40/error.h"

struct cuda_engine {
        struct m40_engine base;
        struct m40_model *m;
        struct m40_kv_pages *pages;
        struct m40_cuda_fwd *fwd;
        struct m40_engine_limits lim;
        struct m40_seq *seqs;                /* (max_seqs) */
        struct m40_fwd_tok *batch;           /* (max_batch_tokens) */
        float *logits;                       /* (max_seqs, n_vocab) host: the step's kept rows */
        int32_t *tokens;                     /* (max_seqs) host: the step's token of each row */
        struct m40_cuda_sample_row *srows;   /* (max_seqs) host: the step's sampling jobs */
        struct m40_cuda_sample_row *srows_d; /* (max_seqs) device copy */
        int32_t *tok_d;                      /* (max_seqs) device: the sampled tokens */
        int32_t *hist_d;  /* (max_seqs, max_ctx) device: each slot's tokens, for penalties */
        uint32_t *hist_n; /* (max_seqs) how many of the slot's tokens hist_d holds */
        void *swork;      /* device: m40_cuda_sample_work_bytes(n_vocab, max_seqs) */
        struct m40_seq_events evq;
        struct m40_plan plan; /* over seqs, lim, pages, evq and batch */
        uint32_t next_id;
        uint64_t next_order;
        struct m40_engine_stats st;
};

static double now_s(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cuda_admit(struct m40_engine *base, const struct m40_seq_params *p, uint32_t *ret_id)
{
        struct cuda_engine *e = (struct cuda_engine *)base;
        struct m40_seq *s;
        int r = m40_seq_admit(e->seqs, &e->lim, e->m->n_vocab, p, &e->next_id, &e->next_order, &s);

        if (r)
                return r;
        e->hist_n[s - e->seqs] = 0; /* the slot's device tokens are another sequence's */
        *ret_id = s->id;
        return 0;
}

/* produce - take s's token that the device sampled from its logits row; emit it with any
 * finish reason. */
static int produce(struct cuda_engine *e, struct m40_seq *s)
{
        const size_t slot = (size_t)(s - e->seqs);
        const int32_t tok = e->tokens[s->row];
        uint32_t why = M40_FINISH_NONE;

        if (s->keep_logits) {
                memcpy(s->logits, e->logits + (size_t)s->row * e->m->n_vocab,
                       (size_t)e->m->n_vocab * sizeof(float));
                s->has_logits = true;
        }
        s->rng = m40_cuda_sample_rng_next(s->sampling.temperature, s->rng);
        /* the kernel stored tok after the slot's tokens: a whole copy stays whole */
        if (e->hist_n[slot] == s->n_toks && s->n_toks < e->lim.max_ctx)
                e->hist_n[slot]++;
        e->st.generated_tokens++;
        why = m40_seq_append(s, &e->lim, tok);
        if (why != M40_FINISH_NONE)
                m40_seq_finish(e->pages, s);
        return m40_seq_events_push(&e->evq, s, tok, why);
}

/* sample_prepare - before the forward pass (the stream is idle, so the pageable copies
 * do not wait): each planned row's sampling job to the device, and the tokens that the
 * penalty window of its sequence needs and the device copy lacks (the prompt, once). */
static int sample_prepare(struct cuda_engine *e, uint32_t rows)
{
        struct CUstream_st *st = m40_cuda_fwd_stream(e->fwd);
        const uint32_t cap = e->lim.max_ctx;

        for (uint32_t i = 0; i < e->lim.max_seqs; i++) {
                struct m40_seq *s = &e->seqs[i];
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
        struct CUstream_st *st = m40_cuda_fwd_stream(e->fwd);
        const uint32_t nv = e->m->n_vocab;
        float *lg = m40_cuda_fwd_logits(e->fwd);
        int r = 0;

        for (uint32_t i = 0; i < e->lim.max_seqs && !r; i++) {
                const struct m40_seq *s = &e->seqs[i];

                /* before the sampler penalizes the row in place */
                if (s->state == M40_SEQ_ACTIVE && s->row >= 0 && s->keep_logits &&
                    cudaMemcpyAsync(e->logits + (size_t)s->row * nv, lg + (size_t)s->row * nv,
                                    nv * sizeof(float), cudaMemcpyDeviceToHost, st) != cudaSuccess)
                        r = m40_cuda_launch_status("logits download");
        }
        r = r ? r : m40_cuda_sample(lg, nv, nv, e->srows_d, rows, e->swork, e->tok_d, st);
        if (!r && cudaMemcpyAsync(e->tokens, e->tok_d, rows * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost, st) != cudaSuccess)
                r = m40_cuda_launch_status("token download");
        if (cudaStreamSynchronize(st) != cudaSuccess && !r)
                r = m40_cuda_launch_status("sampling");
        return r;
}

static int cuda_step(struct m40_engine *base)
{
        struct cuda_engine *e = (struct cuda_engine *)base;
        const double t0 = now_s();
        struct m40_plan_step ps;
        uint32_t active = 0;
        int r = m40_plan_step(&e->plan, &ps);

        if (r)
                return r;
        if (ps.n_rows)
                r = sample_prepare(e, ps.n_rows);
        if (!r && ps.n_tokens)
                r = m40_cuda_fwd_run(e->fwd, e->batch, ps.n_tokens, ps.n_rows, NULL, NULL);
        if (!r && ps.n_rows)
                r = sample_run(e, ps.n_rows);
        if (r) {
                m40_plan_undo(&e->plan); /* the step did not happen */
                return r;
        }
        e->st.prompt_tokens += ps.n_prompt;
        for (uint32_t i = 0; i < e->lim.max_seqs && !r; i++) {
                struct m40_seq *s = &e->seqs[i];

                if (s->state == M40_SEQ_ACTIVE && s->row >= 0)
                        r = produce(e, s);
        }
        active = m40_seq_count_active(e->seqs, e->lim.max_seqs);
        if (ps.n_tokens) {
                e->st.steps++;
                if (ps.n_rows)
                        e->st.decode_seconds += now_s() - t0;
                else
                        e->st.prompt_seconds += now_s() - t0;
        }
        return r ? r : (int)active;
}

static size_t cuda_events(struct m40_engine *base, struct m40_event *out, size_t max)
{
        struct cuda_engine *e = (struct cuda_engine *)base;

        return m40_seq_events_pop(&e->evq, out, max);
}

static int cuda_cancel(struct m40_engine *base, uint32_t id)
{
        struct cuda_engine *e = (struct cuda_engine *)base;

        return m40_seq_cancel(e->seqs, e->lim.max_seqs, e->pages, &e->evq, id);
}

static int cuda_hold(struct m40_engine *base, uint32_t id, bool hold)
{
        struct cuda_engine *e = (struct cuda_engine *)base;

        return m40_seq_hold(e->seqs, e->lim.max_seqs, id, hold);
}

static int cuda_logits(struct m40_engine *base, uint32_t id, float *out, size_t n)
{
        struct cuda_engine *e = (struct cuda_engine *)base;

        return m40_seq_logits(e->seqs, e->lim.max_seqs, e->m->n_vocab, id, out, n);
}

static void cuda_stats(struct m40_engine *base, struct m40_engine_stats *ret)
{
        struct cuda_engine *e = (struct cuda_engine *)base;

        m40_seq_stats(&e->st, e->seqs, e->lim.max_seqs, e->pages, e->m->n_layers, e->m->kv_dim,
                      ret);
}

static void cuda_model(struct m40_engine *base, struct m40_engine_model *ret)
{
        struct cuda_engine *e = (struct cuda_engine *)base;
        const struct m40_model *m = e->m;

        *ret = (struct m40_engine_model){
                .arch = m->arch == M40_ARCH_QWEN2 ? "qwen2" : "llama",
                .n_vocab = m->n_vocab,
                .n_ctx_train = m->n_ctx_train,
                .n_layers = m->n_layers,
                .dim = m->dim,
                .bos_id = m->bos_id,
                .eos_id = m->eos_id,
                .eot_id = m->eot_id,
                .weight_bytes = m->weight_bytes,
        };
}

static void cuda_destroy(struct m40_engine *base)
{
        struct cuda_engine *e = (struct cuda_engine *)base;

        m40_seq_slots_free(e->seqs, e->lim.max_seqs, e->pages);
        m40_cuda_fwd_free(e->fwd);
        m40_kv_pages_free(e->pages);
        m40_model_free(e->m);
        free(e->batch);
        free(e->logits);
        free(e->tokens);
        free(e->srows);
        free(e->hist_n);
        m40_seq_events_done(&e->evq);
        free(e);
}

static const struct m40_engine_ops cuda_ops = {
        .name = "cuda",
        .admit = cuda_admit,
        .step = cuda_step,
        .events = cuda_events,
        .cancel = cuda_cancel,
        .hold = cuda_hold,
        .logits = cuda_logits,
        .stats = cuda_stats,
        .model = cuda_model,
        .destroy = cuda_destroy,
};

static uint64_t al(uint64_t n)
{
        return (n + M40_CUDA_ALLOC_ALIGN - 1) & ~(uint64_t)(M40_CUDA_ALLOC_ALIGN - 1);
}

/* sample_scratch_bytes - the device scratch sample_init() takes (rounded as the pool). */
static uint64_t sample_scratch_bytes(const struct cuda_engine *e)
{
        const uint64_t S = e->lim.max_seqs;

        return al(S * sizeof(struct m40_cuda_sample_row)) + al(S * sizeof(int32_t)) +
               al(S * e->lim.max_ctx * sizeof(int32_t)) +
               al(m40_cuda_sample_work_bytes(e->m->n_vocab, e->lim.max_seqs));
}

/* sample_init - the sampler's device buffers from the forward pass's scratch pool, its
 * counts zeroed. */
static int sample_init(struct cuda_engine *e)
{
        struct m40_cuda_alloc *a = m40_cuda_fwd_alloc(e->fwd);
        struct CUstream_st *st = m40_cuda_fwd_stream(e->fwd);
        const uint32_t S = e->lim.max_seqs;
        void *rows = NULL;
        int r = m40_cuda_scratch_array(a, S, sizeof(*e->srows_d), &rows);

        r = r ? r : m40_cuda_scratch_i32(a, S, &e->tok_d);
        r = r ? r : m40_cuda_scratch_i32(a, (uint64_t)S * e->lim.max_ctx, &e->hist_d);
        r = r ? r
              : m40_cuda_scratch_alloc(a, m40_cuda_sample_work_bytes(e->m->n_vocab, S), &e->swork);
        if (r)
                return r;
        e->srows_d = rows;
        r = m40_cuda_sample_work_init(e->swork, e->m->n_vocab, S, st);
        if (!r && cudaStreamSynchronize(st) != cudaSuccess)
                r = m40_cuda_launch_status("sampler setup");
        return r;
}

/* fill_limits - resolve the defaults of lim for model m; kv_bytes 0 stays 0 (the
 * allocator sizes the KV cache from the device). */
static void fill_limits(struct m40_engine_limits *lim, const struct m40_model *m)
{
        if (!lim->max_seqs)
                lim->max_seqs = 16;
        if (!lim->max_ctx)
                lim->max_ctx = m->n_ctx_train && m->n_ctx_train < 4096 ? m->n_ctx_train : 4096;
        if (!lim->page_tokens)
                lim->page_tokens = 16;
        if (!lim->max_batch_tokens)
                lim->max_batch_tokens = 256;
        if (lim->act == M40_ACT_DEFAULT)
                lim->act = M40_ACT_F32;
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

int m40_cuda_engine_new(struct m40_gguf *g, const struct m40_engine_limits *lim, int device,
                        struct m40_engine **ret, char *err, size_t errlen)
{
        struct cuda_engine *e;
        struct m40_cuda_load_opts load = {0};
        struct m40_cuda_alloc_stats as;
        uint64_t page_bytes, n_pages;
        const char *path;
        int r;

        if (!g)
                return -EINVAL;
        path = m40_gguf_path(g);
        e = calloc(1, sizeof(*e));
        if (!e)
                return -ENOMEM;
        e->base.ops = &cuda_ops;
        if (lim)
                e->lim = *lim;
        load.progress = load_progress;
        load.note = load_note;
        load.user = &e->lim;
        r = -EINVAL;
        if (e->lim.act > M40_ACT_GGML) {
                if (err)
                        snprintf(err, errlen, "unknown activation mode %u", e->lim.act);
                goto out_free;
        }
        r = M40_EUNSUPPORTED;
        if (e->lim.act == M40_ACT_GGML) {
                if (err)
                        snprintf(err, errlen,
                                 "the CUDA engine computes with float32 activations only");
                goto out_free;
        }
        r = m40_model_open(g, &e->m, err, errlen);
        if (r)
                goto out_free;
        fill_limits(&e->lim, e->m);
        r = m40_seq_limits_eog(&e->lim, e->m->n_vocab, e->m->eos_id, e->m->eot_id);
        if (r) {
                if (err)
                        snprintf(err, errlen, "%s: bad end-of-generation ids", path);
                goto out_free;
        }
        page_bytes = 2ull * 2 * e->m->n_layers * e->lim.page_tokens * e->m->kv_dim;
        n_pages = e->lim.kv_bytes / page_bytes; /* 0 with kv_bytes 0: sized by the allocator */
        r = -EINVAL;
        if (e->lim.max_ctx - 1 > M40_CUDA_ATTN_MAX_POS) { /* positions are 31-bit */
                if (err)
                        snprintf(err, errlen, "%s: max_ctx %u is above the CUDA engine's %u", path,
                                 e->lim.max_ctx, M40_CUDA_ATTN_MAX_POS + 1);
                goto out_free;
        }
        if (e->m->head_dim > M40_CUDA_MAX_HEAD_DIM) {
                r = M40_EUNSUPPORTED;
                if (err)
                        snprintf(err, errlen, "%s: head_dim %u is above the CUDA engine's %u", path,
                                 e->m->head_dim, M40_CUDA_MAX_HEAD_DIM);
                goto out_free;
        }
        if (e->lim.kv_bytes && (n_pages == 0 || n_pages > UINT32_MAX)) {
                if (err)
                        snprintf(err, errlen, "%s: KV memory of %llu bytes holds no page", path,
                                 (unsigned long long)e->lim.kv_bytes);
                goto out_free;
        }
        r = m40_cuda_fwd_new(e->m, device, e->lim.max_batch_tokens, e->lim.max_seqs, e->lim.max_ctx,
                             (uint32_t)n_pages, e->lim.page_tokens, e->lim.vram_limit_mb,
                             sample_scratch_bytes(e), &load, &e->fwd, err, errlen);
        if (r)
                goto out_free;
        m40_cuda_alloc_stats(m40_cuda_fwd_alloc(e->fwd), &as);
        e->lim.kv_bytes = (uint64_t)as.kv_pages * page_bytes;
        r = m40_kv_pages_new(as.kv_pages, e->lim.page_tokens, &e->pages);
        if (r)
                goto out_err;
        e->seqs = calloc(e->lim.max_seqs, sizeof(*e->seqs));
        e->batch = calloc(e->lim.max_batch_tokens, sizeof(*e->batch));
        e->logits = malloc((size_t)e->lim.max_seqs * e->m->n_vocab * sizeof(float));
        e->tokens = calloc(e->lim.max_seqs, sizeof(*e->tokens));
        e->srows = calloc(e->lim.max_seqs, sizeof(*e->srows));
        e->hist_n = calloc(e->lim.max_seqs, sizeof(*e->hist_n));
        if (!e->seqs || !e->batch || !e->logits || !e->tokens || !e->srows || !e->hist_n) {
                r = -ENOMEM;
                goto out_err;
        }
        e->plan = (struct m40_plan){e->seqs, &e->lim, e->pages, &e->evq, e->batch};
        r = sample_init(e);
        if (r) {
                if (err)
                        snprintf(err, errlen, "%s: sampler setup: %s", path,
                                 r == M40_ECUDA ? m40_cuda_last_error() : m40_strerror(r));
                goto out_free;
        }
        *ret = &e->base;
        return 0;
out_err:
        if (err)
                snprintf(err, errlen, "%s: %s", path, m40_strerror(r));
out_free:
        cuda_destroy(&e->base);
        return r;
}
