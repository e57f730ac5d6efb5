/* cuda/runtime/loader.c - the model loader (see loader.h): a pipeline of aligned chunk reads
 * into the pinned staging buffers (io_uring, or pread as the fallback) overlapped with
 * cudaMemcpyAsync uploads on a private stream, and the GGUF data-section placement.
 *
 * Pipeline, with N staging buffers and chunk i in buffer i % N: reads of chunks
 * 0..N-1 are queued at once; when chunk i is complete its upload is queued and, once
 * the upload of the chunk that last used the buffer has finished (its event), the read
 * of chunk i + N goes into it. So N - 1 reads are in flight while uploads run. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#ifdef M40_HAVE_LIBURING
#include <liburing.h>
#endif

#include "m40/error.h"
#include "cuda/runtime/alloc.h"
#include "cuda/runtime/loader.h"
#include "model/gguf.h"

#define IO_ALIGN 4096u /* O_DIRECT alignment of offsets, lengths and buffers */

struct slot {
        uint64_t foff; /* file offset of the chunk */
        uint64_t want; /* bytes asked for */
        uint64_t got;  /* bytes read so far */
        int done;      /* the chunk is complete */
};

struct load {
        struct m40_cuda_alloc *a;
        const char *path; /* the file's name, for messages */
        const struct m40_cuda_load_opts *o;
        char *err;
        size_t errlen;
        int fd; /* the caller's; never closed here */
        int fl; /* its file status flags on entry, restored at the end */
        int direct;
        int warm;             /* AUTO found the file in the page cache: pread, no O_DIRECT */
        uint64_t offset, end; /* wanted file range [offset, end) */
        uint64_t first;       /* file offset of chunk 0 (offset aligned down) */
        uint64_t read_end;    /* end aligned up: reads stop here or at EOF */
        uint64_t chunk;       /* staging buffer size */
        uint32_t nbuf, nchunks, queued;
        int ring_up; /* io_uring_queue_init succeeded */
        uint8_t *dst;
        cudaStream_t stream;
        cudaEvent_t ev[M40_CUDA_STAGING_MAX];
        struct slot slot[M40_CUDA_STAGING_MAX];
        struct timespec t0;
        struct m40_cuda_load_stats st;
};

static void set_err(char *err, size_t errlen, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
        va_list ap;

        if (!err || errlen == 0)
                return;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
}

static void note(const struct load *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void note(const struct load *l, const char *fmt, ...)
{
        char msg[512];
        va_list ap;

        if (!l->o || !l->o->note)
                return;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        l->o->note(l->o->user, msg);
}

static double elapsed(const struct load *l)
{
        struct timespec t;

        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double)(t.tv_sec - l->t0.tv_sec) + (double)(t.tv_nsec - l->t0.tv_nsec) * 1e-9;
}

static void progress(const struct load *l, uint64_t done, int finished)
{
        struct m40_cuda_load_progress p;

        if (!l->o || !l->o->progress)
                return;
        p.bytes_done = done;
        p.bytes_total = l->end - l->offset;
        p.seconds = elapsed(l);
        p.mb_per_s = p.seconds > 0 ? (double)done / p.seconds / 1e6 : 0.0;
        p.finished = finished != 0;
        l->o->progress(l->o->user, &p);
}

static int cuda_fail(const struct load *l, cudaError_t e, const char *what)
{
        set_err(l->err, l->errlen, "%s: %s: %s: %s", l->path, what, cudaGetErrorName(e),
                cudaGetErrorString(e));
        (void)cudaGetLastError();
        return e == cudaErrorMemoryAllocation ? -ENOMEM : M40_ECUDA;
}

/* Point slot b at chunk i. */
static void slot_set(struct load *l, uint32_t b, uint32_t i)
{
        struct slot *s = &l->slot[b];

        s->foff = l->first + (uint64_t)i * l->chunk;
        s->want = l->read_end - s->foff < l->chunk ? l->read_end - s->foff : l->chunk;
        s->got = 0;
        s->done = 0;
}

/* Account n more bytes read into slot s: 1 when the chunk is complete, 0 when more
 * must be read, or a negative error (EOF before the wanted range ended). */
static int slot_advance(struct load *l, struct slot *s, int64_t n)
{
        if (n < 0) {
                set_err(l->err, l->errlen, "%s: read at offset %llu failed: %s", l->path,
                        (unsigned long long)(s->foff + s->got), strerror((int)-n));
                return (int)n;
        }
        s->got += (uint64_t)n;
        l->st.bytes_read += (uint64_t)n;
        if (s->got == s->want || s->foff + s->got >= l->end) {
                s->done = 1;
                return 1;
        }
        if (n == 0) {
                set_err(l->err, l->errlen,
                        "%s: the file ends at offset %llu, before the tensor data do (%llu)",
                        l->path, (unsigned long long)(s->foff + s->got),
                        (unsigned long long)l->end);
                return M40_EFORMAT;
        }
        return 0;
}

/* Queue the upload of the complete chunk in buffer b, then report progress. */
static int upload(struct load *l, uint32_t b)
{
        const struct slot *s = &l->slot[b];
        uint64_t lo = s->foff > l->offset ? s->foff : l->offset;
        uint64_t hi = s->foff + s->got < l->end ? s->foff + s->got : l->end;
        const uint8_t *src = (const uint8_t *)m40_cuda_staging(l->a, b) + (lo - s->foff);
        cudaError_t e;

        e = cudaMemcpyAsync(l->dst + (lo - l->offset), src, hi - lo, cudaMemcpyHostToDevice,
                            l->stream);
        if (e == cudaSuccess)
                e = cudaEventRecord(l->ev[b], l->stream);
        if (e != cudaSuccess)
                return cuda_fail(l, e, "Failed to queue an upload");
        l->st.chunks++;
        progress(l, hi - l->offset, 0);
        return 0;
}

/* Before buffer b is read into again, its last upload must be over. */
static int buffer_free(struct load *l, uint32_t b)
{
        cudaError_t e = cudaEventSynchronize(l->ev[b]);

        return e == cudaSuccess ? 0 : cuda_fail(l, e, "Upload failed");
}

static int load_pread(struct load *l)
{
        for (uint32_t i = 0; i < l->nchunks; i++) {
                uint32_t b = i % l->nbuf;
                struct slot *s = &l->slot[b];
                uint8_t *buf = (uint8_t *)m40_cuda_staging(l->a, b);
                int r;

                if (i >= l->nbuf) {
                        r = buffer_free(l, b);
                        if (r < 0)
                                return r;
                }
                slot_set(l, b, i);
                do {
                        ssize_t n = pread(l->fd, buf + s->got, s->want - s->got,
                                          (off_t)(s->foff + s->got));

                        if (n < 0 && errno == EINTR)
                                continue;
                        r = slot_advance(l, s, n < 0 ? -(int64_t)errno : n);
                        if (r < 0)
                                return r;
                } while (!s->done);
                r = upload(l, b);
                if (r < 0)
                        return r;
        }
        l->st.io = M40_CUDA_LOAD_PREAD;
        return 0;
}

#ifdef M40_HAVE_LIBURING

static int uring_queue(struct load *l, struct io_uring *ring, uint32_t b, int fixed)
{
        struct slot *s = &l->slot[b];
        uint8_t *buf = (uint8_t *)m40_cuda_staging(l->a, b) + s->got;
        struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
        int r;

        if (!sqe)
                return -EBUSY; /* cannot happen: depth == buffers */
        if (fixed)
                io_uring_prep_read_fixed(sqe, l->fd, buf, (unsigned)(s->want - s->got),
                                         s->foff + s->got, (int)b);
        else
                io_uring_prep_read(sqe, l->fd, buf, (unsigned)(s->want - s->got), s->foff + s->got);
        io_uring_sqe_set_data64(sqe, b);
        r = io_uring_submit(ring);
        if (r < 0) {
                set_err(l->err, l->errlen, "%s: io_uring_submit: %s", l->path, strerror(-r));
                return r;
        }
        l->queued++;
        return 0;
}

/* Wait for completions until slot b's chunk is complete. */
static int uring_wait(struct load *l, struct io_uring *ring, uint32_t b, int fixed)
{
        while (!l->slot[b].done) {
                struct io_uring_cqe *cqe;
                uint32_t k;
                int res, r;

                r = io_uring_wait_cqe(ring, &cqe);
                if (r == -EINTR)
                        continue;
                if (r < 0) {
                        set_err(l->err, l->errlen, "%s: io_uring_wait_cqe: %s", l->path,
                                strerror(-r));
                        return r;
                }
                k = (uint32_t)io_uring_cqe_get_data64(cqe);
                res = cqe->res;
                io_uring_cqe_seen(ring, cqe);
                l->queued--;
                if (k >= l->nbuf)
                        return -EIO;
                r = slot_advance(l, &l->slot[k], res);
                if (r < 0)
                        return r;
                if (r == 0) {
                        r = uring_queue(l, ring, k, fixed);
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

/* Reap what is still in flight after a failure, so no read lands in a buffer later. */
static void uring_drain(struct load *l, struct io_uring *ring)
{
        while (l->queued > 0) {
                struct io_uring_cqe *cqe;

                if (io_uring_wait_cqe(ring, &cqe) < 0)
                        break;
                io_uring_cqe_seen(ring, cqe);
                l->queued--;
        }
}

/* The io_uring pipeline. When the ring cannot be set up, returns the error of
 * io_uring_queue_init without a message (ring_up stays 0), so AUTO can fall back. */
static int load_uring(struct load *l)
{
        struct iovec iov[M40_CUDA_STAGING_MAX];
        struct io_uring ring;
        int fixed, r;

        r = io_uring_queue_init(l->nbuf, &ring, 0);
        if (r < 0)
                return r;
        l->ring_up = 1;
        for (uint32_t b = 0; b < l->nbuf; b++) {
                iov[b].iov_base = m40_cuda_staging(l->a, b);
                iov[b].iov_len = (size_t)l->chunk;
        }
        r = io_uring_register_buffers(&ring, iov, l->nbuf);
        fixed = r == 0;
        if (!fixed)
                note(l, "%s: io_uring could not register the staging buffers (%s): plain reads",
                     l->path, strerror(-r));
        l->st.registered = fixed != 0;
        l->st.io = M40_CUDA_LOAD_URING;

        r = 0;
        for (uint32_t i = 0; i < l->nbuf && i < l->nchunks && r == 0; i++) {
                slot_set(l, i, i);
                r = uring_queue(l, &ring, i, fixed);
        }
        for (uint32_t i = 0; i < l->nchunks && r == 0; i++) {
                uint32_t b = i % l->nbuf;

                r = uring_wait(l, &ring, b, fixed);
                if (r == 0)
                        r = upload(l, b);
                if (r == 0 && i + l->nbuf < l->nchunks) {
                        r = buffer_free(l, b);
                        if (r == 0) {
                                slot_set(l, b, i + l->nbuf);
                                r = uring_queue(l, &ring, b, fixed);
                        }
                }
        }
        uring_drain(l, &ring);
        if (fixed)
                (void)io_uring_unregister_buffers(&ring);
        io_uring_queue_exit(&ring);
        return r;
}

#endif /* M40_HAVE_LIBURING */

/* Whether most pages of fd's bytes [off, end) are in the page cache already (mincore
 * over a mapping that reads nothing in); false when that cannot be told. */
static bool mostly_cached(int fd, uint64_t off, uint64_t end)
{
        const long pg = sysconf(_SC_PAGESIZE);
        uint64_t a, size;
        size_t len, pages, resident = 0;
        unsigned char *vec;
        struct stat st;
        void *map;

        if (pg <= 0)
                return false;
        size = fstat(fd, &st) == 0 && st.st_size > 0 ? (uint64_t)st.st_size : 0;
        end = end < size ? end : size;
        a = off & ~(uint64_t)(pg - 1);
        if (end <= a || end - a > SIZE_MAX / 2)
                return false;
        len = (size_t)(end - a);
        pages = (len + (size_t)pg - 1) / (size_t)pg;
        map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)a);
        if (map == MAP_FAILED)
                return false;
        vec = malloc(pages);
        if (vec && mincore(map, len, vec) == 0)
                for (size_t i = 0; i < pages; i++)
                        resident += vec[i] & 1;
        free(vec);
        munmap(map, len);
        return resident * 2 > pages;
}

/* set_direct - turns O_DIRECT on for the caller's descriptor when asked and possible
 * (fcntl F_SETFL: the file is not opened again); a first aligned read tells whether the
 * file system takes it. m40_cuda_load_range() puts the flags back as it found them. */
static int set_direct(struct load *l, int want_direct)
{
        l->direct = 0;
        l->fl = fcntl(l->fd, F_GETFL);
        if (l->fl < 0) {
                int e = errno;

                set_err(l->err, l->errlen, "%s: not an open file: %s", l->path, strerror(e));
                return -e;
        }
        if (!want_direct || (l->fl & O_DIRECT)) {
                l->direct = (l->fl & O_DIRECT) != 0;
                return 0;
        }
        if (fcntl(l->fd, F_SETFL, l->fl | O_DIRECT) == 0) {
                void *probe = m40_cuda_staging(l->a, 0);
                ssize_t n = pread(l->fd, probe, IO_ALIGN, (off_t)l->first);

                if (n >= 0) {
                        l->direct = 1;
                        return 0;
                }
                note(l, "%s: O_DIRECT reads fail here (%s): reading through the page cache",
                     l->path, strerror(errno));
                (void)fcntl(l->fd, F_SETFL, l->fl);
        } else if (errno == EINVAL) {
                note(l,
                     "%s: the file system does not take O_DIRECT: reading through the page "
                     "cache",
                     l->path);
        }
        return 0;
}

static int setup_cuda(struct load *l)
{
        cudaError_t e;

        e = cudaSetDevice(m40_cuda_alloc_ordinal(l->a));
        if (e == cudaSuccess)
                e = cudaStreamCreateWithFlags(&l->stream, cudaStreamNonBlocking);
        if (e != cudaSuccess)
                return cuda_fail(l, e, "Failed to create the upload stream");
        for (uint32_t b = 0; b < l->nbuf; b++) {
                e = cudaEventCreateWithFlags(&l->ev[b], cudaEventDisableTiming);
                if (e != cudaSuccess)
                        return cuda_fail(l, e, "Failed to create an upload event");
        }
        return 0;
}

static void teardown_cuda(struct load *l)
{
        if (l->stream)
                (void)cudaStreamSynchronize(l->stream);
        for (uint32_t b = 0; b < l->nbuf; b++)
                if (l->ev[b])
                        (void)cudaEventDestroy(l->ev[b]);
        if (l->stream)
                (void)cudaStreamDestroy(l->stream);
        (void)cudaGetLastError();
}

static int run_pipeline(struct load *l)
{
        enum m40_cuda_load_io io = l->o ? l->o->io : M40_CUDA_LOAD_AUTO;
        int r;

        if (io == M40_CUDA_LOAD_PREAD || l->warm)
                return load_pread(l);
#ifdef M40_HAVE_LIBURING
        r = load_uring(l);
        if (r >= 0)
                return r;
        /* Fall back only where nothing was read: no ring, or the kernel refuses the
         * read operation itself (too old for IORING_OP_READ). */
        if (l->ring_up && (l->st.bytes_read || (r != -EINVAL && r != -EOPNOTSUPP)))
                return r;
        if (l->ring_up && io == M40_CUDA_LOAD_URING)
                return r;
        if (io == M40_CUDA_LOAD_URING) {
                set_err(l->err, l->errlen, "%s: io_uring is unavailable: %s", l->path,
                        strerror(-r));
                return r;
        }
        note(l, "io_uring is unavailable (%s): reading with pread", strerror(-r));
#else
        if (io == M40_CUDA_LOAD_URING) {
                set_err(l->err, l->errlen, "%s: this build has no io_uring (liburing)", l->path);
                return -ENOSYS;
        }
        note(l, "this build has no io_uring (liburing): reading with pread");
#endif
        l->st.registered = false;
        return load_pread(l);
}

int m40_cuda_load_range(struct m40_cuda_alloc *a, int fd, const char *name, uint64_t offset,
                        uint64_t bytes, void *dst, const struct m40_cuda_load_opts *opts,
                        struct m40_cuda_load_stats *stats, char *err, size_t errlen)
{
        const char *path = name ? name : "(model file)";
        struct load *l;
        cudaError_t e;
        uint64_t n;
        int r;

        if (!a || fd < 0 || (!dst && bytes))
                return -EINVAL;
        if (bytes > UINT64_MAX / 4 || offset > UINT64_MAX / 4)
                return -EINVAL;
        if (m40_cuda_staging_count(a) < 2 || m40_cuda_staging_bytes(a) < IO_ALIGN ||
            m40_cuda_staging_bytes(a) % IO_ALIGN) {
                set_err(err, errlen, "%s: the allocator needs at least 2 staging buffers", path);
                return -EINVAL;
        }
        l = calloc(1, sizeof(*l));
        if (!l) {
                set_err(err, errlen, "out of host memory");
                return -ENOMEM;
        }
        l->a = a;
        l->path = path;
        l->o = opts;
        l->err = err;
        l->errlen = errlen;
        l->fd = fd;
        l->fl = -1;
        l->dst = (uint8_t *)dst;
        l->offset = offset;
        l->end = offset + bytes;
        l->first = offset & ~(uint64_t)(IO_ALIGN - 1);
        l->read_end = (l->end + IO_ALIGN - 1) & ~(uint64_t)(IO_ALIGN - 1);
        l->chunk = m40_cuda_staging_bytes(a);
        n = (l->read_end - l->first + l->chunk - 1) / l->chunk;
        if (n > UINT32_MAX) {
                free(l);
                return -EINVAL;
        }
        l->nchunks = (uint32_t)n;
        l->nbuf = m40_cuda_staging_count(a);
        if (l->nbuf > l->nchunks && l->nchunks > 0)
                l->nbuf = l->nchunks;
        clock_gettime(CLOCK_MONOTONIC, &l->t0);

        r = 0;
        /* AUTO with a file mostly in the page cache already (a warm restart): plain reads
         * of the cache, which go faster than the disk O_DIRECT would read from */
        if (bytes > 0 && (!opts || opts->io == M40_CUDA_LOAD_AUTO) &&
            mostly_cached(fd, l->first, l->read_end)) {
                note(l, "%s: in the page cache already: reading it with pread", path);
                l->warm = 1;
        }
        if (bytes > 0) {
                r = set_direct(l, !(opts && opts->no_direct) && !l->warm);
                if (r == 0)
                        r = setup_cuda(l);
                if (r == 0)
                        r = run_pipeline(l);
        }
        if (l->stream) {
                e = cudaStreamSynchronize(l->stream);
                if (r == 0 && e != cudaSuccess)
                        r = cuda_fail(l, e, "Upload failed");
        }
        teardown_cuda(l);
        if (l->direct)
                (void)fcntl(l->fd, F_SETFL, l->fl);
        if (r == 0) {
                l->st.bytes = bytes;
                l->st.seconds = elapsed(l);
                l->st.gb_per_s = l->st.seconds > 0 ? (double)bytes / l->st.seconds / 1e9 : 0.0;
                l->st.direct = l->direct != 0;
                if (bytes == 0)
                        l->st.io = opts && opts->io == M40_CUDA_LOAD_PREAD ? M40_CUDA_LOAD_PREAD
                                                                           : M40_CUDA_LOAD_URING;
                progress(l, bytes, 1);
                if (stats)
                        *stats = l->st;
        }
        free(l);
        return r;
}

int m40_cuda_load_plan(const struct m40_gguf *g, uint64_t *ret_bytes)
{
        uint64_t base, end, n;

        if (!g || !ret_bytes)
                return -EINVAL;
        base = m40_gguf_data_offset(g);
        end = base;
        n = m40_gguf_tensor_count(g);
        for (uint64_t i = 0; i < n; i++) {
                const struct m40_gguf_tensor *t = m40_gguf_tensor_at(g, i);

                if (t->file_offset + t->size > end)
                        end = t->file_offset + t->size;
        }
        /* Round to the device alignment: kernels may read the aligned 16-byte words
         * that hold a tensor's last bytes. */
        *ret_bytes =
                (end - base + M40_CUDA_ALLOC_ALIGN - 1) & ~(uint64_t)(M40_CUDA_ALLOC_ALIGN - 1);
        return 0;
}

int m40_cuda_load_gguf(struct m40_cuda_alloc *a, const struct m40_gguf *g,
                       const struct m40_cuda_load_opts *opts, struct m40_cuda_weights *ret,
                       struct m40_cuda_load_stats *stats, char *err, size_t errlen)
{
        struct m40_cuda_weights w;
        uint64_t need, data_end;
        void *base = NULL;
        int r;

        if (!a || !g || !ret)
                return -EINVAL;
        r = m40_cuda_load_plan(g, &need);
        if (r < 0)
                return r;
        w.file_offset = m40_gguf_data_offset(g);
        data_end = w.file_offset;
        for (uint64_t i = 0; i < m40_gguf_tensor_count(g); i++) {
                const struct m40_gguf_tensor *t = m40_gguf_tensor_at(g, i);

                if (t->file_offset + t->size > data_end)
                        data_end = t->file_offset + t->size;
        }
        w.bytes = data_end - w.file_offset;
        if (need > 0) {
                r = m40_cuda_alloc_weights(a, need, &base);
                if (r < 0) {
                        set_err(err, errlen,
                                "%s: the weights pool has no room for the %.1f MiB of tensor "
                                "data",
                                m40_gguf_path(g), (double)need / (1024.0 * 1024.0));
                        return r;
                }
        }
        w.base = base;
        r = m40_cuda_load_range(a, m40_gguf_fd(g), m40_gguf_path(g), w.file_offset, w.bytes, base,
                                opts, stats, err, errlen);
        if (r < 0)
                return r;
        *ret = w;
        return 0;
}

const char *m40_cuda_load_io_name(enum m40_cuda_load_io io)
{
        switch (io) {
        case M40_CUDA_LOAD_AUTO:
                return "auto";
        case M40_CUDA_LOAD_URING:
                return "io_uring";
        case M40_CUDA_LOAD_PREAD:
                return "pread";
        }
        return "?";
}
