/* tests/gpu/test_loader.c - the model loader (cuda/runtime/loader.h) on a real GPU.
 *
 * Owns the checks that a GGUF file written by m40-mkmodel (argv[1]) lands on the device
 * byte for byte, every tensor at m40_cuda_weights_tensor(), through io_uring and through
 * forced pread, with and without O_DIRECT, with staging chunks that do and do not divide
 * the data; that progress reports grow to the total and end with one finished call;
 * that AUTO falls back with exactly one note where io_uring is refused; and the error
 * paths (missing file, a weights pool too small, too few staging buffers, a file shorter
 * than its header says). Prints the load rates (small file, page cache warm: not a
 * benchmark).
 *
 * Exit 0 pass, 1 fail, 77 skip (no GPU, or a build without CUDA). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef M40_HAVE_CUDA

int main(void)
{
        printf("SKIP: this build has no CUDA (meson -Dcuda=enabled)\n");
        return 77;
}

#else

#include <cuda_runtime_api.h>

#include "cuda/runtime/alloc.h"
#include "cuda/runtime/loader.h"
#include "gputest.h"
#include "model/gguf.h"

struct watch {
        uint64_t calls, last, total, finished, notes, uring_notes;
        int backwards;
        char note[512];
};

static void on_progress(void *user, const struct m40_cuda_load_progress *p)
{
        struct watch *w = user;

        if (p->bytes_done < w->last)
                w->backwards = 1;
        w->last = p->bytes_done;
        w->total = p->bytes_total;
        w->calls++;
        w->finished += p->finished;
}

static void on_note(void *user, const char *msg)
{
        struct watch *w = user;

        w->notes++;
        w->uring_notes += strstr(msg, "io_uring") != NULL;
        snprintf(w->note, sizeof(w->note), "%s", msg);
}

static uint8_t *file_bytes(const char *path, uint64_t off, uint64_t n)
{
        uint8_t *b = malloc(n ? n : 1);
        int fd = open(path, O_RDONLY);
        uint64_t got = 0;

        if (!b || fd < 0)
                goto fail;
        while (got < n) {
                ssize_t r = pread(fd, b + got, n - got, (off_t)(off + got));

                if (r <= 0)
                        goto fail;
                got += (uint64_t)r;
        }
        close(fd);
        return b;
fail:
        if (fd >= 0)
                close(fd);
        free(b);
        return NULL;
}

static struct m40_cuda_alloc *make_alloc(struct m40_cuda_device *d, uint64_t weights,
                                         uint64_t chunk, uint32_t nbuf)
{
        struct m40_cuda_alloc_config c = {
                .weight_bytes = weights, .staging_bytes = chunk, .staging_count = nbuf};
        struct m40_cuda_alloc *a = NULL;
        char err[512] = "";
        int r = m40_cuda_alloc_new(d, &c, &a, err, sizeof(err));

        if (r < 0)
                fail("m40_cuda_alloc_new: %d: %s", r, err);
        return a;
}

/* Load g with io / direct / chunk and compare the device copy with the file.
 * Returns 1 when io_uring was refused (URING mode only), else 0. */
static int load_case(struct m40_cuda_device *d, const struct m40_gguf *g, const uint8_t *want,
                     enum m40_cuda_load_io io, int direct, uint64_t chunk, uint32_t nbuf)
{
        struct watch w = {0};
        struct m40_cuda_load_opts o = {.io = io,
                                       .no_direct = !direct,
                                       .progress = on_progress,
                                       .note = on_note,
                                       .user = &w};
        struct m40_cuda_load_stats st;
        struct m40_cuda_weights wt;
        struct m40_cuda_alloc *a;
        uint64_t need = 0;
        uint8_t *got = NULL;
        char err[512] = "";
        int r, refused = 0;

        CHECK(m40_cuda_load_plan(g, &need) == 0, "load_plan");
        if (direct) { /* out of the page cache, or the loader reads through it instead */
                int fd = open(m40_gguf_path(g), O_RDONLY);

                if (fd >= 0) {
                        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
                        close(fd);
                }
        }
        a = make_alloc(d, need, chunk, nbuf);
        if (!a)
                return 0;
        r = m40_cuda_load_gguf(a, g, &o, &wt, &st, err, sizeof(err));
        if (r < 0 && io == M40_CUDA_LOAD_URING &&
            (r == -ENOSYS || r == -EPERM || r == -EACCES || r == -EOPNOTSUPP)) {
                printf("  io_uring refused here: %s\n", err);
                refused = 1;
                goto out;
        }
        if (r < 0) {
                fail("load %s%s chunk %" PRIu64 ": %d (%s): %s", m40_cuda_load_io_name(io),
                     direct ? " O_DIRECT" : "", chunk, r, m40_strerror(r), err);
                goto out;
        }
        printf("  %-8s %-9s chunk %7" PRIu64 " x %u: %" PRIu64 " bytes in %u chunks, %.2f GB/s "
               "(%s%s%s)%s%s\n",
               m40_cuda_load_io_name(io), direct ? "O_DIRECT" : "buffered", chunk, nbuf, st.bytes,
               st.chunks, st.gb_per_s, m40_cuda_load_io_name(st.io), st.direct ? ", direct" : "",
               st.registered ? ", registered buffers" : "", w.notes ? "; note: " : "",
               w.notes ? w.note : "");
        CHECK(st.bytes == wt.bytes && wt.file_offset == m40_gguf_data_offset(g),
              "stats/weights disagree");
        CHECK(io == M40_CUDA_LOAD_AUTO || st.io == io, "asked for %s, read with %s",
              m40_cuda_load_io_name(io), m40_cuda_load_io_name(st.io));
        CHECK(!(io == M40_CUDA_LOAD_AUTO && st.io == M40_CUDA_LOAD_PREAD) || w.uring_notes == 1,
              "AUTO fell back to pread with %" PRIu64 " notes about io_uring", w.uring_notes);
        CHECK(!w.backwards && w.finished == 1 && w.last == wt.bytes && w.total == wt.bytes &&
                      w.calls >= st.chunks,
              "progress: %" PRIu64 " calls, last %" PRIu64 " of %" PRIu64 ", finished %" PRIu64
              ", backwards %d",
              w.calls, w.last, w.total, w.finished, w.backwards);
        got = malloc(wt.bytes);
        if (!got || cudaMemcpy(got, wt.base, wt.bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
                fail("read back: %s", cudaGetErrorString(cudaGetLastError()));
                goto out;
        }
        if (memcmp(got, want, wt.bytes) != 0) {
                uint64_t i = 0;

                while (got[i] == want[i])
                        i++;
                fail("%s chunk %" PRIu64 ": device byte %" PRIu64 " (file offset %" PRIu64
                     ") differs",
                     m40_cuda_load_io_name(io), chunk, i, i + wt.file_offset);
        }
        /* Every tensor where m40_cuda_weights_tensor() says. */
        for (uint64_t i = 0; i < m40_gguf_tensor_count(g); i++) {
                const struct m40_gguf_tensor *t = m40_gguf_tensor_at(g, i);
                uint8_t head[64];
                size_t n = t->size < sizeof(head) ? t->size : sizeof(head);

                if (cudaMemcpy(head, m40_cuda_weights_tensor(&wt, t->file_offset), n,
                               cudaMemcpyDeviceToHost) != cudaSuccess ||
                    memcmp(head, want + (t->file_offset - wt.file_offset), n) != 0) {
                        fail("tensor %s is not at its address", t->name);
                        break;
                }
        }
out:
        free(got);
        m40_cuda_alloc_free(a);
        return refused;
}

static void check_errors(struct m40_cuda_device *d, const struct m40_gguf *g, const char *dir)
{
        struct m40_cuda_weights wt;
        struct m40_cuda_alloc *a;
        uint64_t need = 0;
        char err[512] = "", path[4096];
        uint8_t *b = NULL;
        void *dst = NULL;
        int r, fd;

        m40_cuda_load_plan(g, &need);
        a = make_alloc(d, need, 65536, 2);
        if (!a)
                return;
        if (m40_cuda_alloc_weights(a, 8192, &dst) < 0) {
                fail("weights pool");
                goto out;
        }
        r = m40_cuda_load_range(a, -1, "closed", 0, 4096, dst, NULL, NULL, err, sizeof(err));
        CHECK(r == -EINVAL, "no descriptor: %d: %s", r, err);
        fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
                close(fd); /* a number that names no open file now */
                r = m40_cuda_load_range(a, fd, "stale", 0, 4096, dst, NULL, NULL, err, sizeof(err));
                CHECK(r == -EBADF && strstr(err, "stale"), "closed descriptor: %d: %s", r, err);
        }

        /* A file cut short: the header promises more tensor data than there is. */
        snprintf(path, sizeof(path), "%s/test_loader_short.gguf", dir);
        b = file_bytes(m40_gguf_path(g), 0, m40_gguf_data_offset(g) + 100);
        fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (!b || fd < 0 || write(fd, b, m40_gguf_data_offset(g) + 100) < 0) {
                fail("cannot write %s", path);
        } else {
                r = m40_cuda_load_range(a, fd, path, m40_gguf_data_offset(g), 5000, dst, NULL, NULL,
                                        err, sizeof(err));
                printf("short file: %d: %s\n", r, err);
                CHECK(r == M40_EFORMAT, "short file: %d, expected M40_EFORMAT", r);
        }
        if (fd >= 0)
                close(fd);
        unlink(path);

        /* The weights pool is now smaller than the model. */
        r = m40_cuda_load_gguf(a, g, NULL, &wt, NULL, err, sizeof(err));
        CHECK(r == -ENOMEM, "model into a full pool: %d: %s", r, err);
        a = m40_cuda_alloc_free(a);

        a = make_alloc(d, need, 65536, 1);
        if (a) {
                r = m40_cuda_load_gguf(a, g, NULL, &wt, NULL, err, sizeof(err));
                CHECK(r == -EINVAL, "one staging buffer accepted: %d", r);
        }
out:
        free(b);
        m40_cuda_alloc_free(a);
}

/* An unaligned range (offset and length not multiples of 4096). */
static void check_range(struct m40_cuda_device *d, const char *path, uint64_t size)
{
        const uint64_t off = 1234, n = size > 300000 ? 250001 : size / 2;
        struct m40_cuda_alloc *a = make_alloc(d, n, 3 * 4096, 4);
        uint8_t *want = file_bytes(path, off, n), *got = malloc(n);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        char err[512] = "";
        void *dst = NULL;
        int r;

        if (!a || !want || !got || fd < 0 || m40_cuda_alloc_weights(a, n, &dst) < 0) {
                fail("check_range setup");
                goto out;
        }
        for (int io = M40_CUDA_LOAD_AUTO; io <= M40_CUDA_LOAD_PREAD; io++) {
                struct m40_cuda_load_opts o = {.io = io};

                /* the loader's stream does not wait for the legacy stream's memset */
                CHECK(cudaMemset(dst, 0, n) == cudaSuccess &&
                              cudaDeviceSynchronize() == cudaSuccess,
                      "memset");
                r = m40_cuda_load_range(a, fd, path, off, n, dst, &o, NULL, err, sizeof(err));
                if (r < 0 && io == M40_CUDA_LOAD_URING)
                        continue; /* refused here: load_case reports it */
                CHECK(r == 0, "range %s: %d: %s", m40_cuda_load_io_name(io), r, err);
                CHECK(cudaMemcpy(got, dst, n, cudaMemcpyDeviceToHost) == cudaSuccess &&
                              memcmp(got, want, n) == 0,
                      "range [%" PRIu64 ", +%" PRIu64 ") via %s differs", off, n,
                      m40_cuda_load_io_name(io));
        }
out:
        if (fd >= 0)
                close(fd);
        free(want);
        free(got);
        m40_cuda_alloc_free(a);
}

int main(int argc, char **argv)
{
        struct m40_cuda_device *d;
        struct m40_gguf *g = NULL;
        uint8_t *want;
        char err[M40_GGUF_ERRLEN] = "";
        uint64_t data_bytes = 0;
        int code, r, refused = 0;

        if (argc < 2) {
                printf("usage: test_loader MODEL.gguf [TMPDIR]\n");
                return 1;
        }
        d = gpu_open(&code);
        if (!d)
                return code;
        r = m40_gguf_open(argv[1], &g, err, sizeof(err));
        if (r < 0) {
                printf("FAIL: %s\n", err);
                return 1;
        }
        for (uint64_t i = 0; i < m40_gguf_tensor_count(g); i++) {
                const struct m40_gguf_tensor *t = m40_gguf_tensor_at(g, i);

                if (t->file_offset + t->size - m40_gguf_data_offset(g) > data_bytes)
                        data_bytes = t->file_offset + t->size - m40_gguf_data_offset(g);
        }
        printf("%s: %" PRIu64 " tensors, %" PRIu64 " bytes of tensor data from offset %" PRIu64
               "\n",
               argv[1], m40_gguf_tensor_count(g), data_bytes, m40_gguf_data_offset(g));
        want = file_bytes(argv[1], m40_gguf_data_offset(g), data_bytes);
        if (!want) {
                printf("FAIL: cannot read %s\n", argv[1]);
                return 1;
        }

        refused |= load_case(d, g, want, M40_CUDA_LOAD_URING, 1, 1 << 20, 4);
        refused |= load_case(d, g, want, M40_CUDA_LOAD_URING, 0, 65536, 3);
        load_case(d, g, want, M40_CUDA_LOAD_PREAD, 1, 1 << 20, 4);
        load_case(d, g, want, M40_CUDA_LOAD_PREAD, 0, (1 << 20) + 4096, 2);
        load_case(d, g, want, M40_CUDA_LOAD_AUTO, 1, 3 * 4096, 8);
        if (!quick_mode())
                load_case(d, g, want, M40_CUDA_LOAD_AUTO, 0, 8 << 20, 4);
        if (refused)
                printf("note: io_uring is refused on this machine: the URING cases were "
                       "skipped, AUTO used pread\n");
        check_range(d, argv[1], m40_gguf_file_size(g));
        check_errors(d, g, argc > 2 ? argv[2] : "/tmp");

        free(want);
        m40_gguf_free(g);
        m40_cuda_device_free(d);
        return finish();
}

#endif
