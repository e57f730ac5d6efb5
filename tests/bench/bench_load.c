/* tests/bench/bench_load.c - the load tests of m40-bench --model (see bench_model.h):
 * the page cache (residency with mincore(), eviction with fsync + POSIX_FADV_DONTNEED),
 * the plain read rate, the host-to-device copy rate from pinned memory, the loader alone
 * and the engine's creation, warm and cold.
 *
 * Order: the file is written back (fsync) first, untimed, since an O_DIRECT read of dirty
 * pages waits for their writeback. Warm: if the file is not wholly resident it is read
 * once, untimed; then read, loader, engine. Cold: before each of the three the file is
 * evicted; the most that stayed resident after an eviction is reported. Every engine is
 * freed before an eviction (the engine maps the file). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "bench_model.h"
#include "cuda/runtime/alloc.h"
#include "cuda/runtime/device.h"
#include "cuda/runtime/loader.h"
#include "engine/engine.h"
#include "m40/error.h"
#include "model/gguf.h"

#define READ_CHUNK ((size_t)16 << 20)
#define H2D_BYTES  ((size_t)256 << 20) /* one pinned buffer, copied H2D_ITERS times */
#define H2D_ITERS  8

/* ---- page cache and plain reads ---- */

/* Bytes of path in the page cache (mincore over a mapping of the whole file). */
static int resident_bytes(const char *path, uint64_t *ret)
{
        const long pg = sysconf(_SC_PAGESIZE);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        unsigned char *vec = NULL;
        struct stat st;
        void *map;
        size_t pages;
        int r = 0;

        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0 || st.st_size == 0) {
                r = st.st_size == 0 ? 0 : -errno;
                close(fd);
                *ret = 0;
                return r;
        }
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (map == MAP_FAILED)
                return -errno;
        pages = ((size_t)st.st_size + (size_t)pg - 1) / (size_t)pg;
        vec = malloc(pages);
        if (!vec)
                r = -ENOMEM;
        else if (mincore(map, (size_t)st.st_size, vec) < 0)
                r = -errno;
        if (!r) {
                uint64_t n = 0;
                for (size_t i = 0; i < pages; i++)
                        n += vec[i] & 1;
                *ret = n * (uint64_t)pg > (uint64_t)st.st_size ? (uint64_t)st.st_size
                                                               : n * (uint64_t)pg;
        }
        free(vec);
        munmap(map, (size_t)st.st_size);
        return r;
}

/* Write back and drop path from the page cache. */
static int evict(const char *path)
{
        int fd = open(path, O_RDONLY | O_CLOEXEC), r = 0;

        if (fd < 0)
                return -errno;
        if (fsync(fd) < 0)
                r = -errno;
        else
                r = -posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); /* returns the error */
        close(fd);
        return r;
}

/* Read [off, off + len) of path into one host buffer in READ_CHUNK pieces; O_DIRECT when
 * direct and the file system takes it (then from off rounded down to 4096). */
static int read_rate(const char *path, uint64_t off, uint64_t len, bool direct, double *ret_s,
                     bool *ret_direct)
{
        int fd = -1;
        void *buf = NULL;
        uint64_t pos, end = off + len;
        double t0;
        int r = 0;

        *ret_direct = false;
        if (direct) {
                fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
                *ret_direct = fd >= 0;
        }
        if (fd < 0)
                fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (posix_memalign(&buf, 4096, READ_CHUNK)) {
                close(fd);
                return -ENOMEM;
        }
        pos = *ret_direct ? off & ~(uint64_t)4095 : off;
        t0 = bench_now();
        while (pos < end) {
                size_t want = end - pos < READ_CHUNK ? (size_t)(end - pos) : READ_CHUNK;
                ssize_t n;

                if (*ret_direct)
                        want = (want + 4095) & ~(size_t)4095;
                n = pread(fd, buf, want, (off_t)pos);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        r = -errno;
                        break;
                }
                if (n == 0) {
                        r = -EIO; /* shorter than its header said */
                        break;
                }
                pos += (uint64_t)n;
        }
        *ret_s = bench_now() - t0;
        free(buf);
        close(fd);
        return r;
}

/* The loader alone: an arena of the plan's size, the engine's staging (2 x 8 MiB), the
 * loader's defaults (O_DIRECT tried); with buffered also a second load into a fresh arena
 * with O_DIRECT off (through the page cache). */
static int loader_alone(const struct bench_model_opts *o, const struct bench_model *b,
                        struct bench_load *l, bool buffered, char *err, size_t errlen)
{
        struct m40_cuda_alloc_config cfg = {.staging_bytes = 8u << 20, .staging_count = 2};
        const struct m40_cuda_load_opts nodirect = {.no_direct = true};
        struct m40_cuda_device *dev = NULL;
        struct m40_cuda_alloc *a = NULL;
        struct m40_cuda_load_stats st = {0};
        struct m40_cuda_weights w;
        const struct m40_gguf *g = b->g;
        int r;

        r = m40_cuda_device_open(o->device, &dev, err, errlen);
        r = r ? r : m40_cuda_load_plan(g, &cfg.weight_bytes);
        r = r ? r : m40_cuda_alloc_new(dev, &cfg, &a, err, errlen);
        r = r ? r : m40_cuda_load_gguf(a, g, NULL, &w, &st, err, errlen);
        if (!r) {
                l->loader_s = st.seconds;
                l->loader_gbs = st.gb_per_s;
                l->loader_io = m40_cuda_load_io_name(st.io);
                l->loader_direct = st.direct;
        }
        if (!r && buffered) {
                a = m40_cuda_alloc_free(a);
                r = m40_cuda_alloc_new(dev, &cfg, &a, err, errlen);
                r = r ? r : m40_cuda_load_gguf(a, g, &nodirect, &w, &st, err, errlen);
                if (!r) {
                        l->buffered_s = st.seconds;
                        l->buffered_gbs = st.gb_per_s;
                }
        }
        m40_cuda_alloc_free(a);
        m40_cuda_device_free(dev);
        return r;
}

/* One load state: read, loader alone, engine; cold evicts before each. */
static int load_test(const struct bench_model_opts *o, struct bench_model *b, bool cold,
                     struct bench_load *l, char *err, size_t errlen)
{
        const uint64_t off = b->file_bytes - b->tensor_bytes;
        const double gb = (double)b->tensor_bytes / 1e9;
        struct m40_engine *e = NULL;
        uint64_t res = 0;
        int r;

        r = cold ? evict(o->path) : 0;
        r = r ? r : resident_bytes(o->path, &l->resident_bytes);
        if (!r && !cold && l->resident_bytes < b->file_bytes) {
                double s;
                bool d;

                bench_note(o, "warming the page cache (%.2f of %.2f GB resident)",
                           l->resident_bytes / 1e9, b->file_bytes / 1e9);
                r = read_rate(o->path, 0, b->file_bytes, false, &s, &d);
                r = r ? r : resident_bytes(o->path, &l->resident_bytes);
        }
        if (r) {
                bench_set_err(err, errlen, "%s: page cache: %s", o->path, strerror(-r));
                return r;
        }
        bench_note(o, "load, %s: reading %.2f GB", cold ? "cold" : "warm", gb);
        r = read_rate(o->path, off, b->tensor_bytes, cold, &l->read_s, &l->read_direct);
        if (r) {
                bench_set_err(err, errlen, "%s: read: %s", o->path, strerror(-r));
                return r;
        }
        l->read_gbs = gb / l->read_s;
        r = cold ? evict(o->path) : 0;
        if (r) {
                bench_set_err(err, errlen, "%s: evict: %s", o->path, strerror(-r));
                return r;
        }
        bench_note(o, "load, %s: the loader alone", cold ? "cold" : "warm");
        r = loader_alone(o, b, l, !cold, err, errlen);
        if (r)
                return r;
        r = cold ? evict(o->path) : 0;
        r = r ? r : resident_bytes(o->path, &res);
        if (r) {
                bench_set_err(err, errlen, "%s: evict: %s", o->path, strerror(-r));
                return r;
        }
        if (cold && res > l->resident_bytes)
                l->resident_bytes = res; /* the most that stayed of the three evictions */
        bench_note(o, "load, %s: m40_cuda_engine_new", cold ? "cold" : "warm");
        r = bench_engine_new(o, b, &e, &l->engine_s, err, errlen);
        m40_engine_free(e);
        if (r)
                return r;
        l->engine_gbs = gb / l->engine_s;
        l->done = true;
        return 0;
}

/* Host-to-device copy rate from pinned memory: the loader's other ceiling besides the
 * read rate. One untimed copy, then H2D_ITERS timed with events. */
static int h2d_rate(int device, double *ret_gbs, char *err, size_t errlen)
{
        void *h = NULL, *d = NULL;
        cudaStream_t s = NULL;
        cudaEvent_t e0 = NULL, e1 = NULL;
        float ms = 0;
        cudaError_t ce = cudaSetDevice(device);

        if (ce == cudaSuccess)
                ce = cudaMallocHost(&h, H2D_BYTES);
        if (ce == cudaSuccess)
                ce = cudaMalloc(&d, H2D_BYTES);
        if (ce == cudaSuccess)
                ce = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        if (ce == cudaSuccess)
                ce = cudaEventCreate(&e0);
        if (ce == cudaSuccess)
                ce = cudaEventCreate(&e1);
        if (ce == cudaSuccess) {
                memset(h, 0x11, H2D_BYTES);
                ce = cudaMemcpyAsync(d, h, H2D_BYTES, cudaMemcpyHostToDevice, s);
        }
        if (ce == cudaSuccess)
                ce = cudaEventRecord(e0, s);
        for (int i = 0; i < H2D_ITERS && ce == cudaSuccess; i++)
                ce = cudaMemcpyAsync(d, h, H2D_BYTES, cudaMemcpyHostToDevice, s);
        if (ce == cudaSuccess)
                ce = cudaEventRecord(e1, s);
        if (ce == cudaSuccess)
                ce = cudaEventSynchronize(e1);
        if (ce == cudaSuccess)
                ce = cudaEventElapsedTime(&ms, e0, e1);
        if (ce == cudaSuccess && ms > 0)
                *ret_gbs = (double)H2D_BYTES * H2D_ITERS / (ms / 1e3) / 1e9;
        else if (ce != cudaSuccess)
                bench_set_err(err, errlen, "host-to-device copy: %s", cudaGetErrorString(ce));
        if (e0)
                cudaEventDestroy(e0);
        if (e1)
                cudaEventDestroy(e1);
        if (s)
                cudaStreamDestroy(s);
        cudaFree(d);
        cudaFreeHost(h);
        return ce == cudaSuccess ? 0 : M40_ECUDA;
}

int bench_load_run(const struct bench_model_opts *o, struct bench_model *b, char *err,
                   size_t errlen)
{
        double t0;
        int fd, r;

        r = h2d_rate(o->device, &b->h2d_gbs, err, errlen);
        if (r)
                return r;
        t0 = bench_now();
        bench_note(o, "writing %s back to disk (fsync)", o->path);
        fd = open(o->path, O_RDONLY | O_CLOEXEC);
        r = fd < 0 || fsync(fd) < 0 ? -errno : 0;
        if (fd >= 0)
                close(fd);
        b->sync_s = bench_now() - t0;
        if (r) {
                bench_set_err(err, errlen, "%s: fsync: %s", o->path, strerror(-r));
                return r;
        }
        r = load_test(o, b, false, &b->warm, err, errlen);
        if (r || !o->load_cold)
                return r;
        bench_note(o, "evicting %s from the page cache", o->path);
        t0 = bench_now();
        r = evict(o->path);
        b->evict_s = bench_now() - t0;
        if (r) {
                bench_set_err(err, errlen, "%s: evict: %s", o->path, strerror(-r));
                return r;
        }
        return load_test(o, b, true, &b->cold, err, errlen);
}
