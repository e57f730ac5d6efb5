/* cuda/runtime/loader.h - the model loader: GGUF tensor data from disk into device memory.
 *
 * Owns reading a range of an open file (the descriptor m40_gguf_open() kept; the loader
 * never opens the model's path) in large aligned chunks into the allocator's pinned
 * staging buffers while cudaMemcpyAsync uploads the chunk read before, and placing a
 * GGUF file's whole tensor-data section in the weights pool. Reads go through io_uring
 * (liburing) with registered buffers and O_DIRECT where the kernel and file system
 * allow, except that AUTO reads a file that is mostly in the page cache already (a warm
 * restart) with pread through the cache, which is faster than the disk; where io_uring is
 * unavailable (not built in, or refused, e.g. by a seccomp filter) the loader falls back to
 * pread(2) and says so once through the note callback. Progress (bytes, MB/s) goes to a callback
 * after every chunk; m40d turns it into sd_notify STATUS=, m40ctl into a progress bar.
 *
 * The device copy of the data section is byte-identical to the file, so a tensor's
 * device address is the section's base plus its offset in the file
 * (m40_cuda_weights_tensor()), with GGUF's alignment (32 by default) kept.
 *
 * Errors: 0 or -errno (the I/O error of a read, -EINVAL for bad arguments, -ENOMEM),
 * M40_EFORMAT when the file is shorter than the GGUF header said, M40_ECUDA; err gets a
 * one-line message naming the file. Library code: never prints; notes and progress go
 * to the callbacks only, on the calling thread. */
#ifndef M40_CUDA_LOADER_H
#define M40_CUDA_LOADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct m40_cuda_alloc;
struct m40_gguf;
struct m40_gguf_tensor;

enum m40_cuda_load_io {
        M40_CUDA_LOAD_AUTO = 0,  /* io_uring, else pread with a note */
        M40_CUDA_LOAD_URING = 1, /* io_uring or fail (-ENOSYS when not built in) */
        M40_CUDA_LOAD_PREAD = 2, /* pread(2) only */
};

struct m40_cuda_load_progress {
        uint64_t bytes_done;  /* file bytes read and queued for upload so far */
        uint64_t bytes_total; /* file bytes to read in all */
        double seconds;       /* since the load started */
        double mb_per_s;      /* bytes_done / seconds, in 10^6 bytes per second */
        bool finished;        /* the last call: everything is on the device */
};

struct m40_cuda_load_opts {
        enum m40_cuda_load_io io;
        bool no_direct; /* do not try O_DIRECT (reads then go through the page cache) */
        /* after every chunk and once at the end (finished = true); may be NULL */
        void (*progress)(void *user, const struct m40_cuda_load_progress *p);
        /* a remark about how the load runs, e.g. a fallback; at most a few per load */
        void (*note)(void *user, const char *msg);
        void *user;
};

/* How a load went. */
struct m40_cuda_load_stats {
        uint64_t bytes;           /* bytes placed on the device */
        uint64_t bytes_read;      /* file bytes read (aligned chunks: a little more) */
        uint32_t chunks;          /* reads into staging */
        double seconds;           /* from open to the last byte on the device */
        double gb_per_s;          /* bytes / seconds / 1e9 */
        enum m40_cuda_load_io io; /* URING or PREAD: what actually read the file */
        bool direct;              /* O_DIRECT was in effect */
        bool registered;          /* io_uring used registered (fixed) buffers */
};

/* The tensor-data section of a GGUF file on the device. */
struct m40_cuda_weights {
        void *base;           /* device address of the first byte */
        uint64_t bytes;       /* section bytes on the device */
        uint64_t file_offset; /* file offset of base's byte */
};

/* m40_cuda_load_plan - bytes of the weights pool that g's tensor data need (the data
 * section from its start to the end of the last tensor, rounded to the allocator's
 * alignment). Returns 0 and *ret_bytes; -EINVAL for NULL arguments. */
int m40_cuda_load_plan(const struct m40_gguf *g, uint64_t *ret_bytes);

/* m40_cuda_load_range - copy `bytes` bytes of the open file fd (named name in messages;
 * may be NULL), from `offset` on, to device memory dst, through a's staging buffers (at
 * least 2), on a private stream; returns after the last byte is on the device. The file is
 * not opened again: reads are pread/io_uring at absolute offsets (fd's offset is left
 * alone), and O_DIRECT is switched on for fd with fcntl(F_SETFL) for the load and off
 * again before returning, so nothing else may read fd while it runs. fd stays the
 * caller's. opts may be NULL (AUTO, O_DIRECT tried, no callbacks). stats may be NULL.
 * -EINVAL for fd < 0. */
int m40_cuda_load_range(struct m40_cuda_alloc *a, int fd, const char *name, uint64_t offset,
                        uint64_t bytes, void *dst, const struct m40_cuda_load_opts *opts,
                        struct m40_cuda_load_stats *stats, char *err, size_t errlen);

/* m40_cuda_load_gguf - take m40_cuda_load_plan() bytes from a's weights pool and load
 * g's data section there (m40_cuda_load_range() on m40_gguf_fd(g), the file g parsed;
 * -EINVAL for a g from m40_gguf_open_mem()). On success
 * fills *ret; the memory stays the allocator's. On failure the pool space stays taken
 * (the allocator is then meant to be freed: loading is all or nothing). */
int m40_cuda_load_gguf(struct m40_cuda_alloc *a, const struct m40_gguf *g,
                       const struct m40_cuda_load_opts *opts, struct m40_cuda_weights *ret,
                       struct m40_cuda_load_stats *stats, char *err, size_t errlen);

/* m40_cuda_weights_tensor - device address of the tensor whose data start at
 * tensor_file_offset (its struct m40_gguf_tensor's file_offset) in the loaded file. */
static inline void *m40_cuda_weights_tensor(const struct m40_cuda_weights *w,
                                            uint64_t tensor_file_offset)
{
        return (uint8_t *)w->base + (tensor_file_offset - w->file_offset);
}

/* m40_cuda_load_io_name - "auto", "io_uring", "pread". */
const char *m40_cuda_load_io_name(enum m40_cuda_load_io io);

#ifdef __cplusplus
}
#endif

#endif
