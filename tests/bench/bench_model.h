/* tests/bench/bench_model.h - m40-bench's model benchmark (m40-bench --model FILE).
 *
 * Owns measuring one GGUF model on the CUDA engine (cuda/engine/cuda_engine.h) through the
 * engine interface (daemon/engine/engine.h), and its report:
 *   load     the time to create the engine (m40_cuda_engine_new: it maps the file, then
 *            uploads the tensor data with the io_uring loader) and to run the loader alone
 *            (m40_cuda_load_gguf), beside the rate at which the same bytes can be read into
 *            host memory, with the page cache warm and cold (the file evicted with
 *            fsync + POSIX_FADV_DONTNEED, what stayed resident counted with mincore());
 *   decode   B concurrent greedy sequences (ignore_eos, N tokens each) for each batch B:
 *            aggregate tokens/s over the steps where every sequence decodes, the FP32
 *            FLOP rate (2 x matrix parameters x B per step) against the GPU's FP32 peak,
 *            and at batch 1 the weight bytes read per token / time against the measured
 *            copy bandwidth;
 *   prefill  one prompt of P tokens in one forward pass: tokens/s and FLOP/s, beside
 *            cuBLAS SGEMM (FP32, no TF32) on the same layer matrices x P columns.
 * Functions return 0 or a negative errno / project code with err filled; they print only
 * progress notes to stderr (when asked) and the report to the FILE given. */
#ifndef M40_BENCH_MODEL_H
#define M40_BENCH_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "bench_list.h"
#include "json_out.h" /* bench_json_string(), which the reports use */

#define BENCH_MODEL_MAX_BATCHES BENCH_LIST_MAX /* entries of --batches */
#define BENCH_MODEL_MAX_BATCH   256            /* the most sequences of one batch */
#define BENCH_MODEL_MAX_TOKENS  4096           /* generated tokens per sequence */
#define BENCH_MODEL_MAX_CTX     8192           /* the longest context the benchmark asks for */
#define BENCH_MODEL_MAX_PREFILL 8000           /* prompt of the prefill test (within MAX_CTX) */

struct bench_model_opts {
        const char *path;
        int device;
        uint32_t batches[BENCH_MODEL_MAX_BATCHES]; /* decode batches, in order */
        int n_batches;
        uint32_t n_gen;        /* tokens generated per decode sequence */
        uint32_t prompt;       /* prompt tokens of each decode sequence */
        uint32_t prefill;      /* prompt tokens of the prefill test; 0: no prefill test */
        uint32_t prefill_reps; /* timed prefill runs (the median is reported) */
        bool load, load_cold;  /* the load tests; cold needs load */
        bool sgemm;            /* the cuBLAS reference of the prefill test */
        uint32_t mode;         /* the engine's decode mode (engine.h); 0: its default */
        uint32_t width;        /* the engine's decode width (engine.h) */
        bool verbose;          /* progress notes to stderr */
        double copy_gbs;       /* measured copy bandwidth: what fractions are of */
};

/* One load test, warm or cold. Rates are 10^9 bytes of tensor data per second. */
struct bench_load {
        bool done;
        uint64_t resident_bytes;         /* of the file, in the page cache when the test started */
        double read_s, read_gbs;         /* reading the tensor data into host memory */
        bool read_direct;                /* the read used O_DIRECT */
        double loader_s, loader_gbs;     /* m40_cuda_load_gguf() alone */
        const char *loader_io;           /* "io_uring" or "pread" */
        bool loader_direct;              /* the loader used O_DIRECT */
        double buffered_s, buffered_gbs; /* warm only: the loader with O_DIRECT off */
        double engine_s, engine_gbs;     /* m40_cuda_engine_new(), everything included */
};

struct bench_decode {
        uint32_t batch;
        uint32_t steps;  /* timed steps (every sequence still decoding) */
        uint64_t tokens; /* produced in them: batch a step, or the decode width's */
        double seconds;  /* of those steps */
        double tok_s;    /* tokens / seconds */
        double ms_per_step;
        double gflops;     /* 2 x matrix params x tokens / seconds */
        double of_peak;    /* gflops / the FP32 peak */
        double weight_gbs; /* batch 1: weight bytes per token / time per token */
        double of_copy;    /* batch 1: weight_gbs / the copy bandwidth */
};

struct bench_prefill {
        bool done;
        uint32_t tokens;
        double seconds; /* median of the timed runs */
        double tok_s, gflops;
        bool sgemm_done;
        double sgemm_s, sgemm_gflops; /* cuBLAS on the same matrices x tokens columns */
        double ratio;                 /* gflops / sgemm_gflops */
};

struct bench_model {
        char path[512];
        /* the model file, opened and parsed once by bench_model_run() for every test (as
         * m40d does); NULL again when it returns */
        struct m40_gguf *g;
        char name[160]; /* general.name */
        char wtype[16]; /* ggml type of blk.0.attn_q.weight */
        /* the decode mode asked for ("default", "steps", "persistent") and, when the
         * engine ran another way, its note saying why ("" otherwise) */
        const char *mode;
        char mode_note[320];
        uint32_t file_type; /* general.file_type */
        uint32_t n_layers, dim, n_vocab, kv_dim;
        bool tied;
        uint64_t file_bytes, tensor_bytes; /* file; its tensor-data section */
        uint64_t bytes_per_token; /* every layer tensor + output norm and matrix + 1 embd row */
        uint64_t layer_params;    /* parameters of the layer matrices (all layers) */
        uint64_t matrix_params;   /* layer_params + the output matrix */
        double copy_gbs;
        double peak_gflops; /* SMs x FP32 lanes per SM x 2 x clock; 0 when unknown */
        int sm_count, fp32_lanes, clock_khz;
        struct bench_load warm, cold;
        double h2d_gbs; /* host-to-device copy from pinned memory (the load tests) */
        double sync_s;  /* fsync before the load tests (writing the file back) */
        double evict_s; /* fsync + fadvise before the cold tests */
        struct bench_decode dec[BENCH_MODEL_MAX_BATCHES];
        int n_dec;
        struct bench_prefill pre;
        char error[512]; /* why the run stopped; empty when it did not */
};

/* bench_model_run - everything o asks for, on the model at o->path; fills *ret (also on
 * failure, with what was measured before it). Returns 0, or -errno / a project code
 * (M40_ENODEVICE, M40_ECUDA, M40_EFORMAT ...) with err filled. */
int bench_model_run(const struct bench_model_opts *o, struct bench_model *ret, char *err,
                    size_t errlen);

/* Inside m40-bench: the load tests (bench_load.c) fill b->warm, b->cold, b->sync_s and
 * b->evict_s, after shape figures are in b; the engine m40-bench creates for a model (the
 * limits fit every test of o), with the seconds m40_cuda_engine_new() took; and helpers. */
int bench_load_run(const struct bench_model_opts *o, struct bench_model *b, char *err,
                   size_t errlen);
struct m40_engine;
int bench_engine_new(const struct bench_model_opts *o, const struct bench_model *b,
                     struct m40_engine **ret, double *ret_s, char *err, size_t errlen);
double bench_now(void); /* CLOCK_MONOTONIC seconds */
void bench_set_err(char *err, size_t errlen, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
/* bench_note - a progress line on stderr when o->verbose */
void bench_note(const struct bench_model_opts *o, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

/* bench_model_text / _json - the results as tables, or as a JSON member "model":{...}
 * (no surrounding braces). */
void bench_model_text(const struct bench_model *b, FILE *f);
void bench_model_json(const struct bench_model *b, FILE *f);

#endif
