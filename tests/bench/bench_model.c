/* tests/bench/bench_model.c - the model benchmark of m40-bench (see bench_model.h): the
 * model's shape figures, the run in order (load tests in bench_load.c, then decode and
 * prefill on one engine), the cuBLAS SGEMM reference; the report is bench_report.c's.
 *
 * Method. Shape figures come from the GGUF's tensor table: bytes read per decoded token
 * are every blk.* tensor, output_norm, the output matrix (token_embd when tied) and one
 * embedding row; matrix parameters are those of the 2-D blk.* tensors plus the output
 * matrix. Decode and prefill run on one engine created with limits that fit every test
 * (max_seqs = the largest batch, max_batch_tokens = max(prefill, largest batch, 64),
 * prefill_chunk = max_batch_tokens so that the untimed prompts of a decode batch are not
 * held back beside the sequences already decoding, KV pages for all of it); each step is
 * synchronous (m40_engine_step() returns when the GPU is done), so steps are timed with the
 * monotonic clock. A 4-token batch-1 run warms a fresh engine up first. */
#include "bench_model.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "cuda/engine/cuda_engine.h"
#include "cuda/runtime/launch.h"
#include "engine/engine.h"
#include "m40/error.h"
#include "model/ggml_type.h"
#include "model/gguf.h"

#define PAGE_TOKENS  16u
#define SGEMM_TARGET 0.2 /* seconds of timed SGEMM passes */
#define MAX_EVENTS   512

void bench_set_err(char *err, size_t errlen, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
}

void bench_note(const struct bench_model_opts *o, const char *fmt, ...)
{
        va_list ap;

        if (!o->verbose)
                return;
        fputs("m40-bench: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
}

double bench_now(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
        const double x = *(const double *)a, y = *(const double *)b;

        return x < y ? -1 : x > y;
}

/* ---- shape figures ---- */

/* FP32 lanes per SM by compute capability (CUDA C Programming Guide, arithmetic
 * instruction throughput): 0 when unknown. */
static int fp32_lanes(int major, int minor)
{
        switch (major) {
        case 5:
                return 128; /* Maxwell: 5.0, 5.2 (M40), 5.3 */
        case 6:
                return minor == 0 ? 64 : 128; /* P100: 64; 6.1, 6.2: 128 */
        case 7:
                return 64; /* V100, Turing */
        case 8:
                return minor == 0 ? 64 : 128; /* A100: 64; 8.6, 8.7, 8.9: 128 */
        case 9:
                return 128; /* H100, H200 */
        case 10:
        case 12:
                return 128; /* Blackwell */
        default:
                return 0;
        }
}

static int shape_figures(const struct bench_model_opts *o, struct bench_model *b, char *err,
                         size_t errlen)
{
        const struct m40_gguf_tensor *embd, *out, *q;
        const char *name = NULL;
        struct m40_gguf *g = b->g;
        char key[128];

        m40_gguf_get_str(g, "general.name", "", &name);
        snprintf(b->name, sizeof(b->name), "%s", name ? name : "");
        m40_gguf_get_u32(g, "general.file_type", 0, &b->file_type);
        m40_gguf_get_u32(g, m40_gguf_arch_key(g, "block_count", key, sizeof(key)), 0, &b->n_layers);
        b->file_bytes = m40_gguf_file_size(g);
        b->tensor_bytes = b->file_bytes - m40_gguf_data_offset(g);
        embd = m40_gguf_tensor_find(g, "token_embd.weight");
        out = m40_gguf_tensor_find(g, "output.weight");
        q = m40_gguf_tensor_find(g, "blk.0.attn_q.weight");
        const struct m40_gguf_tensor *k = m40_gguf_tensor_find(g, "blk.0.attn_k.weight");
        if (!embd || !q || !k || b->n_layers == 0) {
                bench_set_err(err, errlen,
                              "%s: not a llama-style model (no token_embd, blk.0.attn_q/k "
                              "or block_count)",
                              o->path);
                return M40_EFORMAT;
        }
        b->tied = !out;
        if (!out)
                out = embd;
        b->dim = (uint32_t)embd->ne[0];
        b->n_vocab = (uint32_t)embd->ne[1];
        b->kv_dim = (uint32_t)k->ne[1];
        snprintf(b->wtype, sizeof(b->wtype), "%s", m40_ggml_type_name(q->type));
        for (uint64_t i = 0; i < m40_gguf_tensor_count(g); i++) {
                const struct m40_gguf_tensor *t = m40_gguf_tensor_at(g, i);

                if (strncmp(t->name, "blk.", 4) == 0) {
                        b->bytes_per_token += t->size;
                        if (t->n_dims == 2)
                                b->layer_params += t->ne[0] * t->ne[1];
                } else if (strcmp(t->name, "output_norm.weight") == 0) {
                        b->bytes_per_token += t->size;
                }
        }
        b->bytes_per_token += out->size + embd->size / embd->ne[1];
        b->matrix_params = b->layer_params + out->ne[0] * out->ne[1];
        return 0;
}

static int gpu_peak(int device, struct bench_model *b, char *err, size_t errlen)
{
        int major = 0, minor = 0;
        cudaError_t e;

        e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
        if (e == cudaSuccess)
                e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
        if (e == cudaSuccess)
                e = cudaDeviceGetAttribute(&b->sm_count, cudaDevAttrMultiProcessorCount, device);
        if (e == cudaSuccess)
                e = cudaDeviceGetAttribute(&b->clock_khz, cudaDevAttrClockRate, device);
        if (e != cudaSuccess) {
                bench_set_err(err, errlen, "device attributes: %s", cudaGetErrorString(e));
                return M40_ECUDA;
        }
        b->fp32_lanes = fp32_lanes(major, minor);
        b->peak_gflops = (double)b->sm_count * b->fp32_lanes * 2.0 * b->clock_khz * 1e3 / 1e9;
        return 0;
}

/* ---- engine and loader ---- */

/* The engine's load notes: the one about the decode mode kept for the report. */
static void engine_note(void *ctx, const char *msg)
{
        struct bench_model *b = ctx;

        fprintf(stderr, "m40-bench: engine: %s\n", msg);
        if (strstr(msg, "persistent mode"))
                snprintf(b->mode_note, sizeof(b->mode_note), "%s", msg);
}

static struct m40_engine_limits limits(const struct bench_model_opts *o,
                                       const struct bench_model *b)
{
        struct m40_engine_limits lim = {0};
        uint32_t max_b = 1, ctx, dec_pages, pre_pages;
        uint64_t page_bytes = 2ull * 2 * b->n_layers * PAGE_TOKENS * b->kv_dim;

        for (int i = 0; i < o->n_batches; i++)
                if (o->batches[i] > max_b)
                        max_b = o->batches[i];
        ctx = o->prompt + o->n_gen + 1;
        if (o->prefill + 2 > ctx)
                ctx = o->prefill + 2;
        ctx = (ctx + PAGE_TOKENS - 1) / PAGE_TOKENS * PAGE_TOKENS;
        dec_pages = max_b * ((o->prompt + o->n_gen + 1 + PAGE_TOKENS - 1) / PAGE_TOKENS);
        pre_pages = (o->prefill + 2 + PAGE_TOKENS - 1) / PAGE_TOKENS;
        lim.max_seqs = max_b;
        lim.max_ctx = ctx;
        lim.page_tokens = PAGE_TOKENS;
        lim.max_batch_tokens = o->prefill > max_b ? o->prefill : max_b;
        if (lim.max_batch_tokens < 64)
                lim.max_batch_tokens = 64;
        lim.prefill_chunk = lim.max_batch_tokens; /* untimed prompts go at full speed */
        lim.kv_bytes = page_bytes * ((dec_pages > pre_pages ? dec_pages : pre_pages) + max_b);
        lim.act = M40_ACT_F32;
        lim.mode = o->mode;
        lim.width = o->width;
        lim.load_note = engine_note;
        lim.load_ctx = (void *)b; /* the note is the report's, not the model's */
        return lim;
}

int bench_engine_new(const struct bench_model_opts *o, const struct bench_model *b,
                     struct m40_engine **ret, double *ret_s, char *err, size_t errlen)
{
        const struct m40_engine_limits lim = limits(o, b);
        double t0 = bench_now();
        int r = m40_cuda_engine_new(b->g, &lim, o->device, ret, err, errlen);

        *ret_s = bench_now() - t0;
        return r;
}

/* ---- decode and prefill ---- */

static void prompt_fill(int32_t *p, uint32_t n, uint32_t s, uint32_t n_vocab)
{
        for (uint32_t i = 0; i < n; i++)
                p[i] = (int32_t)(3 + (i * 7919u + s * 104729u + 13u) % (n_vocab - 3));
}

static int admit(struct m40_engine *e, const int32_t *prompt, uint32_t n, uint32_t n_gen,
                 uint32_t *ret_id)
{
        struct m40_seq_params p = {.prompt = prompt, .n_prompt = n};

        p.sampling = m40_sampling_default();
        p.stop = m40_stop_default();
        p.stop.max_tokens = n_gen;
        p.stop.ignore_eos = true;
        return m40_engine_admit(e, &p, ret_id);
}

/* Count this step's token events per sequence: how many of ids[0..n) got a token. */
static uint32_t drain(struct m40_engine *e, const uint32_t *ids, uint32_t n, uint32_t *got)
{
        struct m40_event ev[MAX_EVENTS];
        uint32_t produced = 0;
        size_t k;

        while ((k = m40_engine_events(e, ev, MAX_EVENTS)) > 0)
                for (size_t i = 0; i < k; i++) {
                        if (ev[i].token < 0)
                                continue;
                        for (uint32_t s = 0; s < n; s++)
                                if (ids[s] == ev[i].seq) {
                                        got[s]++;
                                        produced++;
                                        break;
                                }
                }
        return produced;
}

static int decode_run(struct m40_engine *e, const struct bench_model_opts *o,
                      const struct bench_model *b, uint32_t batch, struct bench_decode *d,
                      char *err, size_t errlen)
{
        uint32_t *ids = calloc(batch, sizeof(*ids)), *got = calloc(batch, sizeof(*got));
        int32_t *prompt = malloc(o->prompt * sizeof(*prompt));
        uint32_t first = 0;
        int r = ids && got && prompt ? 0 : -ENOMEM;

        memset(d, 0, sizeof(*d));
        d->batch = batch;
        for (uint32_t s = 0; s < batch && !r; s++) {
                prompt_fill(prompt, o->prompt, s, b->n_vocab);
                r = admit(e, prompt, o->prompt, o->n_gen, &ids[s]);
        }
        /* prefill: until every sequence has its first token */
        while (!r && first < batch) {
                r = m40_engine_step(e);
                if (r < 0)
                        break;
                drain(e, ids, batch, got);
                first = 0;
                for (uint32_t s = 0; s < batch; s++)
                        first += got[s] > 0;
                r = r == 0 && first < batch ? -EPROTO : 0;
        }
        /* decode: time the steps that start with every sequence still decoding (none has
         * all its tokens), and count the tokens they produce: every sequence's in each step,
         * or, with the decode width short of the batch (--width auto), the width's share */
        while (!r) {
                const double t0 = bench_now();
                uint32_t produced, running = 0;

                for (uint32_t s = 0; s < batch; s++)
                        running += got[s] < o->n_gen;
                r = m40_engine_step(e);
                if (r < 0)
                        break;
                const double dt = bench_now() - t0;
                produced = drain(e, ids, batch, got);
                if (running == batch && produced) {
                        d->steps++;
                        d->tokens += produced;
                        d->seconds += dt;
                }
                if (r == 0)
                        break;
                r = 0;
        }
        free(ids);
        free(got);
        free(prompt);
        if (r < 0) {
                bench_set_err(err, errlen, "decode, batch %u: %s%s%s", batch, m40_strerror(r),
                              r == M40_ECUDA ? ": " : "",
                              r == M40_ECUDA ? m40_cuda_last_error() : "");
                return r;
        }
        if (d->steps == 0 || d->seconds <= 0) {
                bench_set_err(err, errlen,
                              "decode, batch %u: no step decoded while every "
                              "sequence ran",
                              batch);
                return -EPROTO;
        }
        d->tok_s = (double)d->tokens / d->seconds;
        d->ms_per_step = d->seconds / d->steps * 1e3;
        d->gflops = 2.0 * (double)b->matrix_params * (double)d->tokens / d->seconds / 1e9;
        d->of_peak = b->peak_gflops > 0 ? d->gflops / b->peak_gflops : 0;
        if (batch == 1) {
                d->weight_gbs = (double)b->bytes_per_token * d->steps / d->seconds / 1e9;
                d->of_copy = b->copy_gbs > 0 ? d->weight_gbs / b->copy_gbs : 0;
        }
        return 0;
}

/* One prompt of o->prefill tokens in one step; its seconds. */
static int prefill_once(struct m40_engine *e, const struct bench_model_opts *o,
                        const struct bench_model *b, uint32_t seed, double *ret_s)
{
        int32_t *prompt = malloc(o->prefill * sizeof(*prompt));
        uint32_t id, got = 0;
        double t0;
        int r;

        if (!prompt)
                return -ENOMEM;
        prompt_fill(prompt, o->prefill, 1000 + seed, b->n_vocab);
        r = admit(e, prompt, o->prefill, 1, &id);
        free(prompt);
        if (r)
                return r;
        t0 = bench_now();
        r = m40_engine_step(e);
        *ret_s = bench_now() - t0;
        if (r < 0)
                return r;
        drain(e, &id, 1, &got);
        while (r > 0) { /* not expected: the prompt fits max_batch_tokens */
                r = m40_engine_step(e);
                drain(e, &id, 1, &got);
        }
        return r < 0 ? r : got == 1 ? 0 : -EPROTO;
}

static int prefill_run(struct m40_engine *e, const struct bench_model_opts *o,
                       struct bench_model *b, char *err, size_t errlen)
{
        struct bench_prefill *p = &b->pre;
        double t[64], s;
        const uint32_t reps = o->prefill_reps < 64 ? o->prefill_reps : 64;
        int r = prefill_once(e, o, b, 0, &s); /* warm-up */

        for (uint32_t i = 0; i < reps && !r; i++)
                r = prefill_once(e, o, b, i + 1, &t[i]);
        if (r) {
                bench_set_err(err, errlen, "prefill: %s%s%s", m40_strerror(r),
                              r == M40_ECUDA ? ": " : "",
                              r == M40_ECUDA ? m40_cuda_last_error() : "");
                return r;
        }
        qsort(t, reps, sizeof(t[0]), cmp_double);
        p->tokens = o->prefill;
        p->seconds = reps % 2 ? t[reps / 2] : (t[reps / 2 - 1] + t[reps / 2]) / 2;
        p->tok_s = o->prefill / p->seconds;
        p->gflops = (2.0 * (double)b->layer_params * o->prefill +
                     2.0 * (double)(b->matrix_params - b->layer_params)) /
                    p->seconds / 1e9;
        p->done = true;
        return 0;
}

/* ---- cuBLAS reference ---- */

static const char *const layer_mats[] = {
        "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
};
#define N_MATS (sizeof(layer_mats) / sizeof(layer_mats[0]))

/* SGEMM (FP32, CUBLAS_DEFAULT_MATH: no TF32) of each layer matrix of blk.0 (n_out x n_in)
 * times o->prefill columns, the seven in the model's order, once per layer; the rate of
 * the whole set. */
static int sgemm_run(const struct bench_model_opts *o, struct bench_model *b, char *err,
                     size_t errlen)
{
        struct bench_prefill *p = &b->pre;
        uint64_t n_in[N_MATS], n_out[N_MATS], max_in = 0, max_out = 0, flops = 0;
        float *w[N_MATS] = {NULL}, *x = NULL, *y = NULL;
        cublasHandle_t h = NULL;
        cudaStream_t s = NULL;
        cudaEvent_t e0 = NULL, e1 = NULL;
        const struct m40_gguf *g = b->g;
        const float one = 1.0f, zero = 0.0f;
        cudaError_t ce = cudaSuccess;
        cublasStatus_t cs = CUBLAS_STATUS_SUCCESS;
        const int T = (int)o->prefill;
        float ms = 0;
        int r = 0, reps = 1;

        for (size_t i = 0; i < N_MATS && !r; i++) {
                char nm[64];
                const struct m40_gguf_tensor *t;

                snprintf(nm, sizeof(nm), "blk.0.%s.weight", layer_mats[i]);
                t = m40_gguf_tensor_find(g, nm);
                if (!t) {
                        bench_set_err(err, errlen, "%s: no tensor %s", o->path, nm);
                        r = M40_EFORMAT;
                        break;
                }
                n_in[i] = t->ne[0];
                n_out[i] = t->ne[1];
                max_in = n_in[i] > max_in ? n_in[i] : max_in;
                max_out = n_out[i] > max_out ? n_out[i] : max_out;
                flops += 2 * n_in[i] * n_out[i] * (uint64_t)T;
        }
        if (r)
                return r;
        ce = cudaSetDevice(o->device);
        for (size_t i = 0; i < N_MATS && ce == cudaSuccess; i++) {
                ce = cudaMalloc((void **)&w[i], n_in[i] * n_out[i] * sizeof(float));
                if (ce == cudaSuccess) /* 0x3c3c3c3c: 0.0115, finite */
                        ce = cudaMemset(w[i], 0x3c, n_in[i] * n_out[i] * sizeof(float));
        }
        if (ce == cudaSuccess)
                ce = cudaMalloc((void **)&x, max_in * T * sizeof(float));
        if (ce == cudaSuccess)
                ce = cudaMemset(x, 0x3c, max_in * T * sizeof(float));
        if (ce == cudaSuccess)
                ce = cudaMalloc((void **)&y, max_out * T * sizeof(float));
        if (ce == cudaSuccess)
                ce = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        if (ce == cudaSuccess)
                ce = cudaEventCreate(&e0);
        if (ce == cudaSuccess)
                ce = cudaEventCreate(&e1);
        if (ce == cudaSuccess) {
                cs = cublasCreate(&h);
                if (cs == CUBLAS_STATUS_SUCCESS)
                        cs = cublasSetStream(h, s);
                if (cs == CUBLAS_STATUS_SUCCESS)
                        cs = cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
        }
        /* pass 0: warm-up; pass 1: probe (one pass); then reps passes for SGEMM_TARGET s */
        for (int pass = 0; pass < 3 && ce == cudaSuccess && cs == CUBLAS_STATUS_SUCCESS; pass++) {
                const int n = pass < 2 ? 1 : reps;

                ce = cudaEventRecord(e0, s);
                for (int k = 0; k < n * (int)b->n_layers && cs == CUBLAS_STATUS_SUCCESS; k++)
                        for (size_t i = 0; i < N_MATS && cs == CUBLAS_STATUS_SUCCESS; i++)
                                /* y (n_out x T) = W (n_out x n_in, rows of n_in) x (n_in x T) */
                                cs = cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)n_out[i], T,
                                                 (int)n_in[i], &one, w[i], (int)n_in[i], x,
                                                 (int)n_in[i], &zero, y, (int)n_out[i]);
                if (ce == cudaSuccess)
                        ce = cudaEventRecord(e1, s);
                if (ce == cudaSuccess)
                        ce = cudaEventSynchronize(e1);
                if (ce == cudaSuccess)
                        ce = cudaEventElapsedTime(&ms, e0, e1);
                if (pass == 1 && ms > 0) {
                        reps = (int)(SGEMM_TARGET * 1e3 / ms) + 1;
                        reps = reps > 20 ? 20 : reps;
                }
        }
        if (ce == cudaSuccess && cs == CUBLAS_STATUS_SUCCESS && ms > 0) {
                p->sgemm_s = ms / 1e3 / reps;
                p->sgemm_gflops = (double)flops * b->n_layers / p->sgemm_s / 1e9;
                p->sgemm_done = true;
                if (p->done)
                        p->ratio = p->gflops / p->sgemm_gflops;
        } else if (cs != CUBLAS_STATUS_SUCCESS) {
                bench_set_err(err, errlen, "cuBLAS: %s", cublasGetStatusString(cs));
                r = M40_ECUDA;
        } else {
                bench_set_err(err, errlen, "SGEMM reference: %s", cudaGetErrorString(ce));
                r = M40_ECUDA;
        }
        if (h)
                cublasDestroy(h);
        if (e0)
                cudaEventDestroy(e0);
        if (e1)
                cudaEventDestroy(e1);
        if (s)
                cudaStreamDestroy(s);
        for (size_t i = 0; i < N_MATS; i++)
                cudaFree(w[i]);
        cudaFree(x);
        cudaFree(y);
        return r;
}

/* ---- the run ---- */

static int run(const struct bench_model_opts *o, struct bench_model *b, char *err, size_t errlen)
{
        struct m40_engine *e = NULL;
        double s;
        int r;

        snprintf(b->path, sizeof(b->path), "%s", o->path);
        b->mode = o->mode == M40_ENGINE_MODE_STEPS        ? "steps"
                  : o->mode == M40_ENGINE_MODE_PERSISTENT ? "persistent"
                                                          : "default";
        b->copy_gbs = o->copy_gbs;
        r = m40_gguf_open(o->path, &b->g, err, errlen);
        r = r ? r : shape_figures(o, b, err, errlen);
        r = r ? r : gpu_peak(o->device, b, err, errlen);
        if (r)
                return r;
        if (o->load) {
                r = bench_load_run(o, b, err, errlen);
                if (r)
                        return r;
        }
        if (o->n_batches == 0 && o->prefill == 0)
                return 0;
        bench_note(o, "creating the engine for decode and prefill");
        r = bench_engine_new(o, b, &e, &s, err, errlen);
        if (r)
                return r;
        if (o->n_batches > 0) { /* warm-up: the first steps of a fresh engine */
                struct bench_decode d;
                struct bench_model_opts w = *o;

                w.n_gen = 4;
                r = decode_run(e, &w, b, 1, &d, err, errlen);
        }
        for (int i = 0; i < o->n_batches && !r; i++) {
                bench_note(o, "decode, batch %u: %u tokens each", o->batches[i], o->n_gen);
                r = decode_run(e, o, b, o->batches[i], &b->dec[i], err, errlen);
                if (!r)
                        b->n_dec = i + 1;
        }
        if (!r && o->prefill) {
                bench_note(o, "prefill: %u-token prompt, %u runs", o->prefill, o->prefill_reps);
                r = prefill_run(e, o, b, err, errlen);
        }
        m40_engine_free(e);
        if (!r && o->prefill && o->sgemm) {
                bench_note(o, "prefill: cuBLAS SGEMM reference");
                r = sgemm_run(o, b, err, errlen);
        }
        return r;
}

int bench_model_run(const struct bench_model_opts *o, struct bench_model *b, char *err,
                    size_t errlen)
{
        int r;

        memset(b, 0, sizeof(*b));
        if (errlen)
                err[0] = '\0';
        r = run(o, b, err, errlen);
        b->g = m40_gguf_free(b->g);
        if (r)
                snprintf(b->error, sizeof(b->error), "%s", err && err[0] ? err : m40_strerror(r));
        return r;
}
