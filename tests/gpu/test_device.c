/* tests/gpu/test_device.c - the CUDA device module (cuda/runtime/device.h) on a real GPU.
 *
 * Owns the checks that: GPU 0 opens and its properties are sane; a missing GPU
 * ordinal fails with a clear message; m40_cuda_copy() copies exactly, for ragged
 * sizes and every mix of source/destination alignment, touching no byte outside
 * the destination; the copy-bandwidth measurement gives a positive, finite,
 * physically possible figure. Prints the figures.
 *
 * Exit 0 pass, 1 fail, 77 skip (no GPU or no driver here, or a build without
 * CUDA). Calls the CUDA runtime directly (not through the module) to set up and
 * read back buffers, so the module is checked against an independent path. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define EXIT_SKIP 77

#ifndef M40_HAVE_CUDA

int main(void)
{
        printf("SKIP: this build has no CUDA (meson -Dcuda=enabled)\n");
        return EXIT_SKIP;
}

#else

#include <cuda_runtime_api.h>

#include "cuda/runtime/device.h"
#include "m40/error.h"

#define GUARD     64 /* poisoned bytes checked on each side of a copy */
#define POISON    0xa5
#define MAX_COPY  ((size_t)64 << 20)
#define SRC_SLACK 32 /* room for source offsets */

static int failures;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void fail(const char *fmt, ...)
{
        va_list ap;

        fputs("FAIL: ", stdout);
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        fputc('\n', stdout);
        failures++;
}

#define CHECK(cond, ...)                                                                           \
        do {                                                                                       \
                if (!(cond))                                                                       \
                        fail(__VA_ARGS__);                                                         \
        } while (0)

static uint64_t rng_next(uint64_t *s)
{
        /* xorshift64* */
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        return *s * 0x2545f4914f6cdd1dULL;
}

static void check_info(const struct m40_cuda_device_info *in)
{
        printf("GPU %d: %s, compute capability %d.%d, %d SMs\n", in->ordinal, in->name,
               in->cc_major, in->cc_minor, in->sm_count);
        printf("  memory: %.2f GiB total, %.2f GiB free; bus %d bits, clock %d kHz, peak %.1f "
               "GB/s\n",
               in->total_mem / 1073741824.0, in->free_mem / 1073741824.0, in->mem_bus_width_bits,
               in->mem_clock_khz, in->peak_bw_gbs);
        printf("  per SM: %zu B shared (%zu per block), %d registers, %d threads; L2 %d B\n",
               in->shared_mem_per_sm, in->shared_mem_per_block, in->regs_per_sm,
               in->max_threads_per_sm, in->l2_bytes);
        printf("  driver %d, runtime %d\n", in->driver_version, in->runtime_version);

        CHECK(in->ordinal == 0, "ordinal %d, expected 0", in->ordinal);
        CHECK(in->name[0] != '\0' && memchr(in->name, '\0', sizeof(in->name)), "bad device name");
        CHECK(in->cc_major * 10 + in->cc_minor >= 52, "compute capability %d.%d < 5.2 accepted",
              in->cc_major, in->cc_minor);
        CHECK(in->sm_count > 0, "sm_count %d", in->sm_count);
        CHECK(in->total_mem > in->free_mem && in->free_mem > 0,
              "memory: total %" PRIu64 " free %" PRIu64, in->total_mem, in->free_mem);
        CHECK(in->shared_mem_per_block >= 48 * 1024, "shared memory per block %zu < 48 KiB",
              in->shared_mem_per_block);
        CHECK(in->shared_mem_per_sm >= in->shared_mem_per_block,
              "shared memory per SM %zu < per block %zu", in->shared_mem_per_sm,
              in->shared_mem_per_block);
        CHECK(in->regs_per_sm >= 65536, "registers per SM %d", in->regs_per_sm);
        CHECK(in->max_threads_per_sm >= 1024, "threads per SM %d", in->max_threads_per_sm);
        CHECK(in->l2_bytes > 0, "L2 %d bytes", in->l2_bytes);
        CHECK(in->runtime_version > 0, "runtime version %d", in->runtime_version);
        CHECK(in->driver_version > 0, "driver version %d", in->driver_version);
        CHECK(isfinite(in->peak_bw_gbs) && in->peak_bw_gbs >= 0.0, "peak bandwidth %g",
              in->peak_bw_gbs);
        if (in->peak_bw_gbs == 0.0)
                printf("  note: the runtime reports no memory clock or bus width; no peak "
                       "figure\n");
}

static void check_bad_ordinals(void)
{
        static const int bad[] = {999, -1};
        struct m40_cuda_device *sentinel = (struct m40_cuda_device *)&failures;

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                struct m40_cuda_device *d = sentinel;
                char err[512] = "";
                char want[16];
                int r;

                r = m40_cuda_device_open(bad[i], &d, err, sizeof(err));
                printf("open(%d): %d (%s): %s\n", bad[i], r, r < 0 ? m40_strerror(r) : "ok", err);
                CHECK(r == M40_ENODEVICE, "open(%d) returned %d, expected M40_ENODEVICE", bad[i],
                      r);
                CHECK(d == sentinel, "open(%d) wrote *ret on failure", bad[i]);
                snprintf(want, sizeof(want), "%d", bad[i]);
                CHECK(strstr(err, want) != NULL, "open(%d) message does not name the GPU: \"%s\"",
                      bad[i], err);
                if (r == 0 && d != sentinel)
                        m40_cuda_device_free(d);
        }
        CHECK(m40_cuda_device_free(NULL) == NULL, "free(NULL) != NULL");
        CHECK(m40_cuda_device_info(NULL) == NULL, "info(NULL) != NULL");
        CHECK(m40_cuda_device_open(0, NULL, NULL, 0) == -EINVAL, "open(0, NULL) != -EINVAL");
}

#define CU(call, what)                                                                             \
        do {                                                                                       \
                cudaError_t e_ = (call);                                                           \
                if (e_ != cudaSuccess) {                                                           \
                        fail("%s: %s: %s", what, cudaGetErrorName(e_), cudaGetErrorString(e_));    \
                        goto out;                                                                  \
                }                                                                                  \
        } while (0)

/* One copy of n bytes from src+soff to dst+GUARD+doff; checks the copied bytes
 * and GUARD poisoned bytes either side. host_src mirrors dev_src; host_dst is
 * scratch of at least MAX_COPY + 2 * GUARD + 16 bytes. */
static int copy_case(uint8_t *dev_dst, const uint8_t *dev_src, const uint8_t *host_src,
                     uint8_t *host_dst, size_t n, size_t soff, size_t doff, cudaStream_t stream)
{
        const size_t window = GUARD + doff + n + GUARD;
        int r, ok = 0;

        CU(cudaMemsetAsync(dev_dst, POISON, window, stream), "poison dst");
        r = m40_cuda_copy(dev_dst + GUARD + doff, dev_src + soff, n, stream);
        if (r < 0) {
                fail("m40_cuda_copy(n=%zu, soff=%zu, doff=%zu) = %d (%s): %s", n, soff, doff, r,
                     m40_strerror(r), cudaGetErrorString(cudaGetLastError()));
                goto out;
        }
        CU(cudaMemcpyAsync(host_dst, dev_dst, window, cudaMemcpyDeviceToHost, stream),
           "read back dst");
        CU(cudaStreamSynchronize(stream), "copy kernel");

        for (size_t i = 0; i < window; i++) {
                int inside = i >= GUARD + doff && i < GUARD + doff + n;
                uint8_t want = inside ? host_src[soff + (i - GUARD - doff)] : POISON;

                if (host_dst[i] != want) {
                        fail("copy n=%zu soff=%zu doff=%zu: byte %zd (relative to dst) is 0x%02x, "
                             "expected 0x%02x (%s)",
                             n, soff, doff, (ssize_t)i - (ssize_t)(GUARD + doff), host_dst[i], want,
                             inside ? "copied data" : "guard");
                        goto out;
                }
        }
        ok = 1;
out:
        return ok ? 0 : -1;
}

static void check_copy(void)
{
        static const size_t sizes[] = {
                0,
                1,
                2,
                3,
                4,
                5,
                7,
                15,
                16,
                17,
                31,
                32,
                33,
                63,
                64,
                255,
                256,
                257,
                1000,
                4095,
                4096,
                4097,
                65536 + 7,
                ((size_t)1 << 20) + 13,
                ((size_t)3 << 20) + 5,
                ((size_t)17 << 20) + 9,
                MAX_COPY - 3,
        };
        static const size_t offs[][2] = {
                /* soff, doff: same alignment mod 16, mod 4 only, and none */
                {0, 0}, {16, 0}, {3, 3}, {15, 31}, {4, 8}, {1, 5}, {0, 1}, {7, 2}, {13, 0},
        };
        const size_t src_bytes = MAX_COPY + SRC_SLACK, dst_bytes = MAX_COPY + 2 * GUARD + SRC_SLACK;
        uint8_t *host_src = NULL, *host_dst = NULL, *dev_src = NULL, *dev_dst = NULL;
        cudaStream_t stream = NULL;
        uint64_t seed = 0x9e3779b97f4a7c15ULL;
        unsigned cases = 0;

        host_src = malloc(src_bytes);
        host_dst = malloc(dst_bytes);
        if (!host_src || !host_dst) {
                fail("out of host memory");
                goto out;
        }
        for (size_t i = 0; i < src_bytes; i += 8) {
                uint64_t v = rng_next(&seed);
                memcpy(host_src + i, &v, src_bytes - i < 8 ? src_bytes - i : 8);
        }
        CU(cudaMalloc((void **)&dev_src, src_bytes), "cudaMalloc src");
        CU(cudaMalloc((void **)&dev_dst, dst_bytes), "cudaMalloc dst");
        CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
        CU(cudaMemcpy(dev_src, host_src, src_bytes, cudaMemcpyHostToDevice), "upload src");

        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
                for (size_t j = 0; j < sizeof(offs) / sizeof(offs[0]); j++) {
                        size_t n = sizes[i];

                        if (n > MAX_COPY - 16)
                                n = MAX_COPY - 16; /* leave room for the offsets */
                        /* The big ones on the legacy stream, to cover NULL. */
                        if (copy_case(dev_dst, dev_src, host_src, host_dst, n, offs[j][0],
                                      offs[j][1], n > ((size_t)16 << 20) ? NULL : stream) < 0)
                                goto out;
                        cases++;
                }
        printf("copy: %u cases exact (sizes 0..%zu bytes, 9 alignment mixes, guards intact)\n",
               cases, MAX_COPY - 16);

        CHECK(m40_cuda_copy(dev_dst, dev_dst + 8, 64, stream) == -EINVAL,
              "overlapping copy accepted");
        CHECK(m40_cuda_copy(dev_dst + 8, dev_dst, 64, stream) == -EINVAL,
              "overlapping copy accepted");
        CHECK(m40_cuda_copy(NULL, dev_src, 64, stream) == -EINVAL, "NULL dst accepted");
        CHECK(m40_cuda_copy(dev_dst, dev_src, 0, stream) == 0, "empty copy failed");
        CU(cudaStreamSynchronize(stream), "stream after argument checks");

out:
        if (stream)
                cudaStreamDestroy(stream);
        cudaFree(dev_dst);
        cudaFree(dev_src);
        free(host_dst);
        free(host_src);
}

static void check_bandwidth(struct m40_cuda_device *d)
{
        const struct m40_cuda_device_info *in = m40_cuda_device_info(d);
        struct m40_cuda_copy_bandwidth bw;
        char err[512] = "";
        double gbs = -1.0;
        size_t bytes = 0;
        int r;

        /* M40_TEST_COPY_BYTES shrinks the measurement, for slow runs such as
         * under compute-sanitizer; default: the library's default. */
        if (getenv("M40_TEST_COPY_BYTES"))
                bytes = strtoull(getenv("M40_TEST_COPY_BYTES"), NULL, 0);
        r = m40_cuda_device_copy_measure(d, bytes, 0, &bw, err, sizeof(err));
        if (r < 0) {
                fail("copy_measure: %d (%s): %s", r, m40_strerror(r), err);
                return;
        }
        printf("copy bandwidth (read+write, %zu MiB x %d): cudaMemcpyAsync %.1f GB/s, k_copy %.1f "
               "GB/s, best %.1f GB/s",
               bw.bytes >> 20, bw.iters, bw.memcpy_gbs, bw.kernel_gbs, bw.best_gbs);
        if (in->peak_bw_gbs > 0)
                printf(" (%.0f%% of the %.0f GB/s peak)", 100.0 * bw.best_gbs / in->peak_bw_gbs,
                       in->peak_bw_gbs);
        printf("\n");
        CHECK(bw.iters == M40_CUDA_COPY_ITERS_DEFAULT, "iters %d", bw.iters);
        CHECK(bw.bytes > 0 && bw.bytes <= (bytes ? bytes : M40_CUDA_COPY_BYTES_DEFAULT) &&
                      bw.bytes % 256 == 0,
              "bytes %zu", bw.bytes);
        CHECK(isfinite(bw.memcpy_gbs) && bw.memcpy_gbs > 0, "memcpy %g GB/s", bw.memcpy_gbs);
        CHECK(isfinite(bw.kernel_gbs) && bw.kernel_gbs > 0, "kernel %g GB/s", bw.kernel_gbs);
        CHECK(bw.best_gbs == fmax(bw.memcpy_gbs, bw.kernel_gbs), "best %g is not the larger",
              bw.best_gbs);
        /* Buffers far above L2 cannot beat DRAM by much: more means a timing bug. */
        if (in->peak_bw_gbs > 0 && bw.bytes >= 8 * (size_t)in->l2_bytes)
                CHECK(bw.best_gbs < 1.25 * in->peak_bw_gbs, "%.1f GB/s exceeds the %.1f GB/s peak",
                      bw.best_gbs, in->peak_bw_gbs);

        r = m40_cuda_device_copy_bandwidth(d, 1000, 3, &gbs, err, sizeof(err));
        CHECK(r == 0 && isfinite(gbs) && gbs > 0, "small copy_bandwidth: %d %g: %s", r, gbs, err);
        CHECK(m40_cuda_device_copy_bandwidth(d, 0, -1, &gbs, NULL, 0) == -EINVAL,
              "iters -1 accepted");
        CHECK(m40_cuda_device_copy_bandwidth(d, 0, M40_CUDA_COPY_ITERS_MAX + 1, &gbs, NULL, 0) ==
                      -EINVAL,
              "iters above the limit accepted");
        CHECK(m40_cuda_device_copy_measure(NULL, 0, 0, &bw, NULL, 0) == -EINVAL,
              "NULL device accepted");
}

int main(void)
{
        struct m40_cuda_device *d = NULL;
        char err[512] = "";
        int n = -1, r;

        r = m40_cuda_device_count(&n);
        if (r == M40_ENODEVICE || (r == 0 && n == 0)) {
                r = m40_cuda_device_open(0, &d, err, sizeof(err));
                printf("SKIP: no usable GPU here (%s)\n", r < 0 ? err : "none found");
                m40_cuda_device_free(d);
                return EXIT_SKIP;
        }
        if (r < 0) {
                printf("FAIL: m40_cuda_device_count: %d (%s)\n", r, m40_strerror(r));
                return 1;
        }
        printf("%d CUDA GPU%s\n", n, n == 1 ? "" : "s");

        r = m40_cuda_device_open(0, &d, err, sizeof(err));
        if (r == M40_ENODEVICE) {
                printf("SKIP: GPU 0 is not usable: %s\n", err);
                return EXIT_SKIP;
        }
        if (r < 0) {
                printf("FAIL: m40_cuda_device_open(0): %d (%s): %s\n", r, m40_strerror(r), err);
                return 1;
        }

        check_info(m40_cuda_device_info(d));
        check_bad_ordinals();
        check_copy();
        check_bandwidth(d);
        d = m40_cuda_device_free(d);

        if (failures) {
                printf("%d check(s) failed\n", failures);
                return 1;
        }
        printf("all checks passed\n");
        return 0;
}

#endif
