/* tests/bench/m40-bench.c - m40-llm's benchmark program.
 *
 * Owns the command line, the measurements and the report (text or JSON) of the
 * benchmarks. Today: the GPU's properties and its device-to-device copy
 * bandwidth, the roofline every later figure is divided by (DESIGN.md §3, §7), and
 * with --matvec the matrix kernels on the 8B shapes (bench_matvec.c), with --sync the
 * waits of a persistent kernel (bench_sync.c), and with --model FILE a model on the
 * CUDA engine: load, decode, prefill (bench_model.c). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_list.h"
#include "bench_matvec.h"
#include "bench_sync.h"
#include "bench_model.h"
#include "cuda/runtime/device.h"
#include "cuda/runtime/launch.h"
#include "engine/engine.h"
#include "m40-version.h"
#include "m40/error.h"

#define EXIT_USAGE 2

struct options {
        int device;
        size_t bytes; /* 0: the library's default */
        int iters;    /* 0: the library's default */
        int json;
        int matvec;
        int sync;
        const char *output;            /* also write the JSON here */
        struct bench_model_opts model; /* model.path NULL: no model benchmark */
};

static void help(void)
{
        printf("NAME\n"
               "       m40-bench - measure what a GPU can do for m40-llm\n"
               "\n"
               "SYNOPSIS\n"
               "       m40-bench [--device N] [--bytes SIZE] [--iters N] [--matvec] [--sync]\n"
               "                 [--json] [--output FILE]\n"
               "       m40-bench --model FILE [--batches LIST] [--tokens N] [--prompt N]\n"
               "                 [--prefill N] [--prefill-reps N] [--no-load] [--no-load-cold]\n"
               "                 [--no-decode] [--no-sgemm] [--mode steps|persistent]\n"
               "                 [--width all|auto|N] [--quiet]\n"
               "                 [copy options]\n"
               "       m40-bench --help | --version\n"
               "\n"
               "DESCRIPTION\n"
               "       Opens CUDA GPU N, prints what the CUDA runtime reports about it and\n"
               "       measures its device-to-device copy bandwidth: the figure every later\n"
               "       m40-llm benchmark is divided by, since batch-1 decoding is bound by\n"
               "       memory bandwidth (time per token >= weight bytes / bandwidth).\n"
               "\n"
               "       The copy is measured twice, with cudaMemcpyAsync and with m40-llm's own\n"
               "       copy kernel (16-byte loads through the read-only cache, as weight-\n"
               "       streaming kernels read), between two buffers of SIZE bytes, after\n"
               "       two warm-up copies each; the best of the two is reported. Bandwidth\n"
               "       counts every copied byte twice, read and written: 2 x SIZE x N / time,\n"
               "       in GB/s of 10^9 bytes. The peak is the memory bus width x the memory\n"
               "       clock x 2 as the runtime reports them (0 when it does not).\n"
               "\n"
               "       With --matvec it then times the matrix kernels (m40_cuda_matvec at\n"
               "       batch 1, 2, 4 and 8, m40_cuda_mmq with 32 MiB of split partials at 2,\n"
               "       4, 8, 16, 32 and 64: both where the engine could take either) on\n"
               "       the Llama-3-8B weight shapes (n_in x n_out: 4096x4096, 4096x1024,\n"
               "       4096x14336, 14336x4096, 4096x128256) in every weight type: at batch 1\n"
               "       the GB/s of weight bytes streamed and its fraction of the copy\n"
               "       bandwidth (the decode roofline), at the larger batches the GFLOP/s\n"
               "       (2 x n_in x n_out x batch per call). Weights rotate over copies that\n"
               "       cover 3 x the L2 cache, so they come from DRAM as in decoding.\n"
               "\n"
               "       With --model FILE it then measures the GGUF model FILE on the CUDA\n"
               "       engine (the engine interface, as m40d drives it), in this order:\n"
               "\n"
               "       load   With the page cache warm (the file is read once first if it is\n"
               "              not wholly resident) and then cold (before each test the file\n"
               "              is fsync'ed and dropped with posix_fadvise(POSIX_FADV_DONTNEED);\n"
               "              mincore() reports how much stayed resident), in GB/s of the\n"
               "              tensor-data section: reading it into host memory (read(2) of\n"
               "              16 MiB chunks; cold: O_DIRECT where the file system allows),\n"
               "              the io_uring loader alone (m40_cuda_load_gguf into an arena,\n"
               "              2 x 8 MiB pinned staging as the engine uses; warm, also once\n"
               "              more with O_DIRECT off, through the page cache), and creating the\n"
               "              engine (m40_cuda_engine_new: maps the file, uploads the tensor\n"
               "              data, takes KV and scratch memory); each beside the read rate.\n"
               "              Also the host-to-device copy rate from pinned memory (8 x 256\n"
               "              MiB), the loader's other ceiling.\n"
               "\n"
               "       decode For each batch B of --batches: B sequences of --prompt tokens,\n"
               "              greedy, ignore_eos, --tokens tokens each, admitted together;\n"
               "              after every sequence has its first token, the steps in which\n"
               "              every sequence decodes are timed (each step is synchronous).\n"
               "              Reported: aggregate tokens/s, ms per step, the FP32 FLOP rate\n"
               "              (2 x the parameters of the layer and output matrices x B per\n"
               "              step) and its fraction of the GPU's FP32 peak (SMs x FP32\n"
               "              lanes per SM for the compute capability x 2 x the clock the\n"
               "              runtime reports); at batch 1 also the weight bytes read per\n"
               "              token (every layer tensor, the output norm and matrix, one\n"
               "              embedding row) / time per token, and its fraction of the copy\n"
               "              bandwidth measured first: the decode roofline.\n"
               "\n"
               "       prefill One prompt of --prefill tokens in one step (the engine's\n"
               "              max_batch_tokens is set to fit it), one untimed run, then the\n"
               "              median of --prefill-reps runs: prompt tokens/s and GFLOP/s\n"
               "              (2 x layer-matrix parameters x tokens, plus the one logits\n"
               "              row), beside cuBLAS SGEMM (FP32, CUBLAS_DEFAULT_MATH: no TF32)\n"
               "              of each layer matrix (n_out x n_in, from blk.0) times as many\n"
               "              columns, the seven in the model's order once per layer, and\n"
               "              the ratio of the two rates.\n"
               "\n"
               "       Model files for benchmarks come from m40-mkmodel (--random-blocks\n"
               "       for the quantized types); tests/bench/run-model-bench.sh makes and\n"
               "       measures the issue's shapes one by one.\n"
               "\n"
               "OPTIONS\n"
               "       -d, --device N\n"
               "              CUDA device ordinal (default 0).\n"
               "       -b, --bytes SIZE\n"
               "              Size of each copy buffer (default 1G, well above any L2 cache).\n"
               "              Suffixes K, M, G (also KiB, MiB, GiB) are powers of 1024. Clamped\n"
               "              to a quarter of the free GPU memory, rounded down to 256 bytes.\n"
               "       -n, --iters N\n"
               "              Timed copies per method, 1..%d (default %d).\n"
               "       -m, --matvec\n"
               "              Also benchmark the matrix kernels (about 15 s on an H100).\n"
               "       --sync\n"
               "              Also measure the waits of a persistent kernel on exactly the\n"
               "              blocks the GPU holds at once (1, then 2 an SM): a launch, a grid\n"
               "              barrier of all blocks and a dataflow wait (one block's arrival\n"
               "              to another's leaving its wait), each over chains of 5000 whose\n"
               "              carried values are checked (a wrong value or a wait that runs\n"
               "              out fails the run). Run it on an otherwise idle GPU.\n"
               "       -j, --json\n"
               "              Print one JSON object instead of text (fields as in the text;\n"
               "              sizes in bytes, bandwidths in GB/s).\n"
               "       -o, --output FILE\n"
               "              Also write the JSON object to FILE (the text still goes to\n"
               "              standard output).\n"
               "       -M, --model FILE\n"
               "              Benchmark the GGUF model FILE (see DESCRIPTION). The cold load\n"
               "              tests drop FILE from the page cache: put it on a local disk.\n"
               "       --batches LIST\n"
               "              Decode batches, comma-separated, each 1..%d, at most %d\n"
               "              (default 1,8,32,64). The engine gets as many sequence slots\n"
               "              as the largest.\n"
               "       --tokens N\n"
               "              Tokens generated per decode sequence, 2..%d (default 128).\n"
               "       --prompt N\n"
               "              Prompt tokens per decode sequence, 1..4096 (default 16);\n"
               "              --prompt + --tokens must stay below %d (the longest\n"
               "              context the benchmark asks for).\n"
               "       --prefill N\n"
               "              Prompt tokens of the prefill test, 0..%d (default 512; 0: no\n"
               "              prefill test).\n"
               "       --prefill-reps N\n"
               "              Timed prefill runs, 1..64 (default 3).\n"
               "       --no-load\n"
               "              Skip the load tests (warm and cold).\n"
               "       --no-load-cold\n"
               "              Skip the cold load tests (they write the file back and read\n"
               "              it from disk three times: the slowest part for big files).\n"
               "       --no-decode\n"
               "              Skip the decode tests.\n"
               "       --no-sgemm\n"
               "              Skip the cuBLAS reference of the prefill test.\n"
               "       --mode steps|persistent\n"
               "              How the engine runs decode steps (m40d.ini's [engine] mode):\n"
               "              steps, a CUDA graph of a few kernels per layer, or persistent,\n"
               "              one-token steps in one launch of the persistent step kernel\n"
               "              where the model takes it (a note says when it does not).\n"
               "              Default: the engine's.\n"
               "       --width all|auto|N\n"
               "              How many of a batch's sequences a decode step carries (m40d.ini's\n"
               "              [engine] decode_width): all, every one, which measures the kernels\n"
               "              at exactly that batch; or auto, the engine's choice by its own\n"
               "              measurements (fewer when fewer give more tokens a second, the\n"
               "              sequences taking turns), as m40d runs it; or N, at most N a step,\n"
               "              taking turns. Default: all.\n"
               "       -q, --quiet\n"
               "              No progress notes on standard error.\n"
               "       -h, --help\n"
               "              Print this help and exit.\n"
               "       --version\n"
               "              Print m40-bench's version and exit.\n"
               "\n"
               "EXIT STATUS\n"
               "       0 measured; 1 no usable GPU, a CUDA error, or a model that cannot be\n"
               "       read or run (the reason is printed on standard error; what was\n"
               "       measured before it is still reported, the JSON with model.error\n"
               "       set); 2 bad command line.\n"
               "\n"
               "EXAMPLES\n"
               "       m40-bench\n"
               "       m40-bench --device 1 --bytes 512M --iters 50 --json > bench.json\n"
               "       m40-bench --matvec --output bench.json\n"
               "       m40-bench --model /tmp/8b-q4_0.gguf --json > model.json\n"
               "       m40-bench --model 1b.gguf --batches 1,8 --tokens 64 --no-load-cold\n",
               M40_CUDA_COPY_ITERS_MAX, M40_CUDA_COPY_ITERS_DEFAULT, BENCH_MODEL_MAX_BATCH,
               BENCH_MODEL_MAX_BATCHES, BENCH_MODEL_MAX_TOKENS, BENCH_MODEL_MAX_CTX,
               BENCH_MODEL_MAX_PREFILL);
}

/* "1073741824", "512M", "1GiB", "64k" -> bytes; -EINVAL or -ERANGE. */
static int parse_size(const char *s, size_t *ret)
{
        unsigned long long v, mul = 1;
        char *end;

        if (!s || *s < '0' || *s > '9')
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno == ERANGE)
                return -ERANGE;
        if (*end != '\0') {
                switch (*end) {
                case 'k':
                case 'K':
                        mul = 1ULL << 10;
                        break;
                case 'm':
                case 'M':
                        mul = 1ULL << 20;
                        break;
                case 'g':
                case 'G':
                        mul = 1ULL << 30;
                        break;
                default:
                        return -EINVAL;
                }
                end++;
                if (strcmp(end, "") != 0 && strcmp(end, "iB") != 0 && strcmp(end, "B") != 0)
                        return -EINVAL;
        }
        if (v > SIZE_MAX / mul)
                return -ERANGE;
        *ret = (size_t)(v * mul);
        return 0;
}

static int parse_int(const char *s, int min, int max, int *ret)
{
        long v;
        char *end;

        errno = 0;
        v = strtol(s, &end, 10);
        if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
                return -EINVAL;
        *ret = (int)v;
        return 0;
}

enum {
        O_BATCHES = 256,
        O_TOKENS,
        O_PROMPT,
        O_PREFILL,
        O_PREFILL_REPS,
        O_NO_LOAD,
        O_NO_COLD,
        O_NO_DECODE,
        O_NO_SGEMM,
        O_MODE,
        O_WIDTH,
        O_SYNC,
        O_VERSION
};

/* The model options; 0, or -EINVAL after printing why. */
static int parse_model_opt(int c, const char *arg, struct bench_model_opts *m)
{
        char why[64];
        int v = 0;

        switch (c) {
        case O_BATCHES:
                if (bench_list_parse(arg, 1, BENCH_MODEL_MAX_BATCH, BENCH_MODEL_MAX_BATCHES,
                                     m->batches, &m->n_batches, why, sizeof(why)) == 0)
                        return 0;
                fprintf(stderr, "m40-bench: --batches %s: %s (at most %d batches, each 1..%d)\n",
                        arg, why, BENCH_MODEL_MAX_BATCHES, BENCH_MODEL_MAX_BATCH);
                return -EINVAL;
        case O_TOKENS:
                if (parse_int(arg, 2, BENCH_MODEL_MAX_TOKENS, &v) == 0) {
                        m->n_gen = (uint32_t)v;
                        return 0;
                }
                fprintf(stderr, "m40-bench: --tokens: not a count in 2..%d: %s\n",
                        BENCH_MODEL_MAX_TOKENS, arg);
                return -EINVAL;
        case O_PROMPT:
                if (parse_int(arg, 1, 4096, &v) == 0) {
                        m->prompt = (uint32_t)v;
                        return 0;
                }
                fprintf(stderr, "m40-bench: --prompt: not a count in 1..4096: %s\n", arg);
                return -EINVAL;
        case O_PREFILL:
                if (parse_int(arg, 0, BENCH_MODEL_MAX_PREFILL, &v) == 0) {
                        m->prefill = (uint32_t)v;
                        return 0;
                }
                fprintf(stderr, "m40-bench: --prefill: not a count in 0..%d: %s\n",
                        BENCH_MODEL_MAX_PREFILL, arg);
                return -EINVAL;
        case O_PREFILL_REPS:
                if (parse_int(arg, 1, 64, &v) == 0) {
                        m->prefill_reps = (uint32_t)v;
                        return 0;
                }
                fprintf(stderr, "m40-bench: --prefill-reps: not a count in 1..64: %s\n", arg);
                return -EINVAL;
        case O_NO_LOAD:
                m->load = false;
                return 0;
        case O_NO_COLD:
                m->load_cold = false;
                return 0;
        case O_NO_DECODE:
                m->n_batches = 0;
                return 0;
        case O_NO_SGEMM:
                m->sgemm = false;
                return 0;
        case O_MODE:
                if (!strcmp(arg, "steps") || !strcmp(arg, "persistent")) {
                        m->mode =
                                arg[0] == 's' ? M40_ENGINE_MODE_STEPS : M40_ENGINE_MODE_PERSISTENT;
                        return 0;
                }
                fprintf(stderr, "m40-bench: --mode wants steps or persistent: %s\n", arg);
                return -EINVAL;
        case O_WIDTH:
                if (!strcmp(arg, "all") || !strcmp(arg, "auto")) {
                        m->width = arg[1] == 'l' ? M40_ENGINE_WIDTH_ALL : M40_ENGINE_WIDTH_AUTO;
                        return 0;
                }
                if (parse_int(arg, 1, BENCH_MODEL_MAX_BATCH, &v) == 0) {
                        m->width = (uint32_t)v;
                        return 0;
                }
                fprintf(stderr, "m40-bench: --width wants all, auto or a count in 1..%d: %s\n",
                        BENCH_MODEL_MAX_BATCH, arg);
                return -EINVAL;
        default:
                return -EINVAL;
        }
}

static int parse_args(int argc, char **argv, struct options *o)
{
        static const struct option longopts[] = {
                {"device", required_argument, NULL, 'd'},
                {"bytes", required_argument, NULL, 'b'},
                {"iters", required_argument, NULL, 'n'},
                {"json", no_argument, NULL, 'j'},
                {"matvec", no_argument, NULL, 'm'},
                {"sync", no_argument, NULL, O_SYNC},
                {"output", required_argument, NULL, 'o'},
                {"model", required_argument, NULL, 'M'},
                {"batches", required_argument, NULL, O_BATCHES},
                {"tokens", required_argument, NULL, O_TOKENS},
                {"prompt", required_argument, NULL, O_PROMPT},
                {"prefill", required_argument, NULL, O_PREFILL},
                {"prefill-reps", required_argument, NULL, O_PREFILL_REPS},
                {"no-load", no_argument, NULL, O_NO_LOAD},
                {"no-load-cold", no_argument, NULL, O_NO_COLD},
                {"no-decode", no_argument, NULL, O_NO_DECODE},
                {"no-sgemm", no_argument, NULL, O_NO_SGEMM},
                {"mode", required_argument, NULL, O_MODE},
                {"width", required_argument, NULL, O_WIDTH},
                {"quiet", no_argument, NULL, 'q'},
                {"help", no_argument, NULL, 'h'},
                {"version", no_argument, NULL, O_VERSION},
                {},
        };
        struct bench_model_opts *m = &o->model;
        int c;

        *m = (struct bench_model_opts){
                .batches = {1, 8, 32, 64},
                .n_batches = 4,
                .n_gen = 128,
                .prompt = 16,
                .prefill = 512,
                .prefill_reps = 3,
                .load = true,
                .width = M40_ENGINE_WIDTH_ALL,
                .load_cold = true,
                .sgemm = true,
                .verbose = true,
        };
        while ((c = getopt_long(argc, argv, "d:b:n:jmo:M:qh", longopts, NULL)) >= 0) {
                switch (c) {
                case 'M':
                        m->path = optarg;
                        break;
                case 'q':
                        m->verbose = false;
                        break;
                case O_BATCHES:
                case O_TOKENS:
                case O_PROMPT:
                case O_PREFILL:
                case O_PREFILL_REPS:
                case O_NO_LOAD:
                case O_NO_COLD:
                case O_NO_DECODE:
                case O_NO_SGEMM:
                case O_MODE:
                case O_WIDTH:
                        if (parse_model_opt(c, optarg, m) < 0)
                                return -EINVAL;
                        break;
                case 'd':
                        if (parse_int(optarg, 0, INT_MAX, &o->device) < 0) {
                                fprintf(stderr, "m40-bench: --device: not a device ordinal: %s\n",
                                        optarg);
                                return -EINVAL;
                        }
                        break;
                case 'b':
                        if (parse_size(optarg, &o->bytes) < 0 || o->bytes == 0) {
                                fprintf(stderr,
                                        "m40-bench: --bytes: not a size (e.g. 1G, 512M): %s\n",
                                        optarg);
                                return -EINVAL;
                        }
                        break;
                case 'n':
                        if (parse_int(optarg, 1, M40_CUDA_COPY_ITERS_MAX, &o->iters) < 0) {
                                fprintf(stderr, "m40-bench: --iters: not a count in 1..%d: %s\n",
                                        M40_CUDA_COPY_ITERS_MAX, optarg);
                                return -EINVAL;
                        }
                        break;
                case 'j':
                        o->json = 1;
                        break;
                case 'm':
                        o->matvec = 1;
                        break;
                case O_SYNC:
                        o->sync = 1;
                        break;
                case 'o':
                        o->output = optarg;
                        break;
                case 'h':
                        help();
                        return 1;
                case O_VERSION:
                        puts(M40_VERSION_TEXT("m40-bench"));
                        return 1;
                default:
                        return -EINVAL;
                }
        }
        if (optind < argc) {
                fprintf(stderr, "m40-bench: unexpected argument: %s\n", argv[optind]);
                return -EINVAL;
        }
        if (m->prompt + m->n_gen + 1 > BENCH_MODEL_MAX_CTX) {
                fprintf(stderr,
                        "m40-bench: --prompt %u + --tokens %u do not fit the CUDA "
                        "engine's %d positions\n",
                        m->prompt, m->n_gen, BENCH_MODEL_MAX_CTX);
                return -EINVAL;
        }
        m->device = o->device;
        return 0;
}

static void print_json(FILE *f, const struct m40_cuda_device_info *in,
                       const struct m40_cuda_copy_bandwidth *bw, const struct bench_mv *mv,
                       const struct bench_sync *sy, const struct bench_model *model)
{
        fprintf(f, "{\"tool\":\"m40-bench\",\"format\":1,");
        fprintf(f, "\"device\":{\"ordinal\":%d,\"name\":", in->ordinal);
        bench_json_string(f, in->name);
        fprintf(f, ",\"cc\":\"%d.%d\",\"sm_count\":%d,", in->cc_major, in->cc_minor, in->sm_count);
        fprintf(f, "\"total_mem\":%" PRIu64 ",\"free_mem\":%" PRIu64 ",", in->total_mem,
                in->free_mem);
        fprintf(f, "\"mem_bus_width_bits\":%d,\"mem_clock_khz\":%d,\"peak_bw_gbs\":%.1f,",
                in->mem_bus_width_bits, in->mem_clock_khz, in->peak_bw_gbs);
        fprintf(f, "\"l2_bytes\":%d,\"shared_mem_per_block\":%zu,\"shared_mem_per_sm\":%zu,",
                in->l2_bytes, in->shared_mem_per_block, in->shared_mem_per_sm);
        fprintf(f, "\"regs_per_sm\":%d,\"max_threads_per_sm\":%d,", in->regs_per_sm,
                in->max_threads_per_sm);
        fprintf(f, "\"driver_version\":%d,\"runtime_version\":%d},", in->driver_version,
                in->runtime_version);
        fprintf(f, "\"copy\":{\"bytes\":%zu,\"iters\":%d,", bw->bytes, bw->iters);
        fprintf(f, "\"memcpy_gbs\":%.1f,\"kernel_gbs\":%.1f,\"best_gbs\":%.1f,", bw->memcpy_gbs,
                bw->kernel_gbs, bw->best_gbs);
        if (in->peak_bw_gbs > 0)
                fprintf(f, "\"fraction_of_peak\":%.3f}", bw->best_gbs / in->peak_bw_gbs);
        else
                fprintf(f, "\"fraction_of_peak\":null}");
        if (mv) {
                fputc(',', f);
                bench_matvec_json(mv, f);
        }
        if (sy) {
                fputc(',', f);
                bench_sync_json(sy, f);
        }
        if (model) {
                fputc(',', f);
                bench_model_json(model, f);
        }
        fprintf(f, "}\n");
}

static void print_text(const struct m40_cuda_device_info *in,
                       const struct m40_cuda_copy_bandwidth *bw)
{
        printf("GPU %d: %s (compute capability %d.%d, %d SMs)\n", in->ordinal, in->name,
               in->cc_major, in->cc_minor, in->sm_count);
        printf("  memory         %.2f GiB total, %.2f GiB free\n", in->total_mem / 1073741824.0,
               in->free_mem / 1073741824.0);
        if (in->peak_bw_gbs > 0)
                printf("  memory bus     %d bits at %.0f MHz: peak %.1f GB/s\n",
                       in->mem_bus_width_bits, in->mem_clock_khz / 1e3, in->peak_bw_gbs);
        else
                printf("  memory bus     not reported by the runtime: no peak figure\n");
        printf("  L2 cache       %d KiB\n", in->l2_bytes / 1024);
        printf("  per SM         %zu KiB shared memory (%zu KiB per block), %d registers, %d "
               "threads\n",
               in->shared_mem_per_sm / 1024, in->shared_mem_per_block / 1024, in->regs_per_sm,
               in->max_threads_per_sm);
        printf("  CUDA           driver %d.%d, runtime %d.%d\n", in->driver_version / 1000,
               in->driver_version % 1000 / 10, in->runtime_version / 1000,
               in->runtime_version % 1000 / 10);
        printf("\ncopy, device to device (read + write counted), %zu MiB x %d:\n", bw->bytes >> 20,
               bw->iters);
        printf("  cudaMemcpyAsync  %8.1f GB/s\n", bw->memcpy_gbs);
        printf("  k_copy           %8.1f GB/s\n", bw->kernel_gbs);
        printf("  best             %8.1f GB/s", bw->best_gbs);
        if (in->peak_bw_gbs > 0)
                printf("   (%.0f%% of peak)", 100.0 * bw->best_gbs / in->peak_bw_gbs);
        printf("\n");
}

/* The JSON object also goes to path; 0 or 1 (failure, reported). */
static int write_output(const char *path, const struct m40_cuda_device_info *in,
                        const struct m40_cuda_copy_bandwidth *bw, const struct bench_mv *mv,
                        const struct bench_sync *sy, const struct bench_model *model)
{
        FILE *f = fopen(path, "w");

        if (!f) {
                fprintf(stderr, "m40-bench: cannot write %s: %s\n", path, strerror(errno));
                return 1;
        }
        print_json(f, in, bw, mv, sy, model);
        if (fclose(f) != 0) {
                fprintf(stderr, "m40-bench: cannot write %s: %s\n", path, strerror(errno));
                return 1;
        }
        return 0;
}

int main(int argc, char **argv)
{
        struct options o = {.device = 0};
        struct m40_cuda_copy_bandwidth bw;
        struct m40_cuda_device *d = NULL;
        static struct bench_mv mv;
        static struct bench_sync sy;
        static struct bench_model model;
        const struct bench_model *mp = NULL;
        char err[512] = "";
        int r, rc = 0, mv_failed = 0, sy_failed = 0;

        r = parse_args(argc, argv, &o);
        if (r > 0)
                return 0;
        if (r < 0) {
                fprintf(stderr, "Try 'm40-bench --help'.\n");
                return EXIT_USAGE;
        }
        if (o.model.path && access(o.model.path, R_OK) < 0) {
                fprintf(stderr, "m40-bench: %s: %s\n", o.model.path, strerror(errno));
                return 1;
        }

        r = m40_cuda_device_open(o.device, &d, err, sizeof(err));
        if (r < 0) {
                if (r == M40_ENODEVICE)
                        fprintf(stderr, "m40-bench: no usable GPU: %s\n", err);
                else
                        fprintf(stderr, "m40-bench: cannot use GPU %d: %s\n", o.device, err);
                return 1;
        }
        r = m40_cuda_device_copy_measure(d, o.bytes, o.iters, &bw, err, sizeof(err));
        if (r < 0) {
                fprintf(stderr, "m40-bench: copy measurement failed on GPU %d: %s (%s)\n", o.device,
                        err, m40_strerror(r));
                m40_cuda_device_free(d);
                return 1;
        }
        if (!o.json)
                print_text(m40_cuda_device_info(d), &bw);
        if (o.matvec) {
                fflush(stdout);
                r = bench_matvec_run(d, bw.best_gbs, &mv, err, sizeof(err));
                if (r < 0) {
                        fprintf(stderr, "m40-bench: matvec benchmark failed: %s\n", err);
                        rc = 1;
                        mv_failed = 1;
                } else if (!o.json) {
                        bench_matvec_text(&mv, stdout);
                }
        }
        if (o.sync) {
                fflush(stdout);
                r = bench_sync_run(&sy, err, sizeof(err));
                if (r < 0) {
                        fprintf(stderr, "m40-bench: sync probe failed: %s (%s)\n", err,
                                r == M40_ECUDA ? m40_cuda_last_error() : m40_strerror(r));
                        rc = 1;
                        sy_failed = 1;
                } else if (!o.json) {
                        bench_sync_text(&sy, stdout);
                }
        }
        if (o.model.path) {
                fflush(stdout);
                o.model.copy_gbs = bw.best_gbs;
                r = bench_model_run(&o.model, &model, err, sizeof(err));
                if (r < 0) {
                        fprintf(stderr, "m40-bench: model benchmark of %s failed: %s\n",
                                o.model.path, err[0] ? err : m40_strerror(r));
                        rc = 1;
                }
                if (!o.json)
                        bench_model_text(&model, stdout);
                mp = &model;
        }
        if (o.json)
                print_json(stdout, m40_cuda_device_info(d), &bw,
                           o.matvec && !mv_failed ? &mv : NULL, o.sync && !sy_failed ? &sy : NULL,
                           mp);
        if (o.output)
                rc |= write_output(o.output, m40_cuda_device_info(d), &bw,
                                   o.matvec && !mv_failed ? &mv : NULL,
                                   o.sync && !sy_failed ? &sy : NULL, mp);
        m40_cuda_device_free(d);
        return rc;
}
