/* tests/bench/m40-bench.c - m40-llm's benchmark program.
 *
 * Owns the command line, the measurements and the report (text or JSON) of the
 * benchmarks. Today: the GPU's properties and its device-to-device copy
 * bandwidth, the roofline every later figure is divided by (DESIGN.md §3, §7).
 * Model benchmarks (decode, prefill, load) arrive with the CUDA engine. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/device.h"
#include "m40/error.h"

#define EXIT_USAGE 2

struct options {
        int device;
        size_t bytes; /* 0: the library's default */
        int iters;    /* 0: the library's default */
        int json;
};

static void help(void)
{
        printf("NAME\n"
               "       m40-bench - measure what a GPU can do for m40-llm\n"
               "\n"
               "SYNOPSIS\n"
               "       m40-bench [--device N] [--bytes SIZE] [--iters N] [--json]\n"
               "       m40-bench --help\n"
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
               "       Model benchmarks (decode and prefill tokens/s, model load time) are\n"
               "       added with the CUDA engine; this program will run them then.\n"
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
               "       -j, --json\n"
               "              Print one JSON object instead of text (fields as in the text;\n"
               "              sizes in bytes, bandwidths in GB/s).\n"
               "       -h, --help\n"
               "              Print this help and exit.\n"
               "\n"
               "EXIT STATUS\n"
               "       0 measured; 1 no usable GPU, or a CUDA error (the reason is printed\n"
               "       on standard error); 2 bad command line.\n"
               "\n"
               "EXAMPLES\n"
               "       m40-bench\n"
               "       m40-bench --device 1 --bytes 512M --iters 50 --json > bench.json\n",
               M40_CUDA_COPY_ITERS_MAX, M40_CUDA_COPY_ITERS_DEFAULT);
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

static int parse_args(int argc, char **argv, struct options *o)
{
        static const struct option longopts[] = {
                {"device", required_argument, NULL, 'd'}, {"bytes", required_argument, NULL, 'b'},
                {"iters", required_argument, NULL, 'n'},  {"json", no_argument, NULL, 'j'},
                {"help", no_argument, NULL, 'h'},         {},
        };
        int c;

        while ((c = getopt_long(argc, argv, "d:b:n:jh", longopts, NULL)) >= 0) {
                switch (c) {
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
                case 'h':
                        help();
                        return 1;
                default:
                        return -EINVAL;
                }
        }
        if (optind < argc) {
                fprintf(stderr, "m40-bench: unexpected argument: %s\n", argv[optind]);
                return -EINVAL;
        }
        return 0;
}

static void json_string(const char *s)
{
        putchar('"');
        for (; *s; s++) {
                unsigned char ch = (unsigned char)*s;

                if (ch == '"' || ch == '\\')
                        printf("\\%c", ch);
                else if (ch < 0x20)
                        printf("\\u%04x", ch);
                else
                        putchar(ch);
        }
        putchar('"');
}

static void print_json(const struct m40_cuda_device_info *in,
                       const struct m40_cuda_copy_bandwidth *bw)
{
        printf("{\"tool\":\"m40-bench\",\"format\":1,");
        printf("\"device\":{\"ordinal\":%d,\"name\":", in->ordinal);
        json_string(in->name);
        printf(",\"cc\":\"%d.%d\",\"sm_count\":%d,", in->cc_major, in->cc_minor, in->sm_count);
        printf("\"total_mem\":%" PRIu64 ",\"free_mem\":%" PRIu64 ",", in->total_mem, in->free_mem);
        printf("\"mem_bus_width_bits\":%d,\"mem_clock_khz\":%d,\"peak_bw_gbs\":%.1f,",
               in->mem_bus_width_bits, in->mem_clock_khz, in->peak_bw_gbs);
        printf("\"l2_bytes\":%d,\"shared_mem_per_block\":%zu,\"shared_mem_per_sm\":%zu,",
               in->l2_bytes, in->shared_mem_per_block, in->shared_mem_per_sm);
        printf("\"regs_per_sm\":%d,\"max_threads_per_sm\":%d,", in->regs_per_sm,
               in->max_threads_per_sm);
        printf("\"driver_version\":%d,\"runtime_version\":%d},", in->driver_version,
               in->runtime_version);
        printf("\"copy\":{\"bytes\":%zu,\"iters\":%d,", bw->bytes, bw->iters);
        printf("\"memcpy_gbs\":%.1f,\"kernel_gbs\":%.1f,\"best_gbs\":%.1f,", bw->memcpy_gbs,
               bw->kernel_gbs, bw->best_gbs);
        if (in->peak_bw_gbs > 0)
                printf("\"fraction_of_peak\":%.3f}}\n", bw->best_gbs / in->peak_bw_gbs);
        else
                printf("\"fraction_of_peak\":null}}\n");
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

int main(int argc, char **argv)
{
        struct options o = {.device = 0};
        struct m40_cuda_copy_bandwidth bw;
        struct m40_cuda_device *d = NULL;
        char err[512] = "";
        int r;

        r = parse_args(argc, argv, &o);
        if (r > 0)
                return 0;
        if (r < 0) {
                fprintf(stderr, "Try 'm40-bench --help'.\n");
                return EXIT_USAGE;
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
        if (o.json)
                print_json(m40_cuda_device_info(d), &bw);
        else
                print_text(m40_cuda_device_info(d), &bw);
        m40_cuda_device_free(d);
        return 0;
}
