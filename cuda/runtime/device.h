/* cuda/runtime/device.h - the CUDA device module: open one GPU, describe it, measure it.
 *
 * Owns: choosing and checking a GPU (compute capability 5.2 or newer, and code in
 * this build for it), the struct that describes it, the device-to-device copy
 * kernel and its host launcher, and the copy-bandwidth measurement that every
 * benchmark divides by (DESIGN.md §3: decode is memory-bound, so this figure is
 * the roofline).
 *
 * This header is plain C11 and also compiles as CUDA C++; it includes no CUDA
 * header, so C code using it needs no CUDA include path. The one CUDA type that
 * crosses it, a stream, is spelled `struct CUstream_st *`, which is exactly what
 * the runtime's cudaStream_t is; NULL is the legacy default stream.
 *
 * Errors: every function returns 0 or a negative code: -errno for bad arguments
 * and allocation failures, or a project code from m40/error.h:
 *   M40_ENODEVICE    no GPU, no (or too old a) driver, or no GPU with that ordinal
 *   M40_EUNSUPPORTED the GPU is older than sm_52, or this build has no code for it
 *   M40_ECUDA        any other CUDA runtime error
 * Functions that take `char *err, size_t errlen` write a one-line English message
 * there on failure (including the CUDA error name and string when CUDA failed);
 * err may be NULL. Nothing here prints or exits. Output parameters named ret_*
 * are written only on success.
 *
 * Threads: the CUDA runtime's current device is per host thread. Calls on one
 * struct m40_cuda_device must come from one thread at a time; each call that
 * touches the GPU makes the device current first. */
#ifndef M40_CUDA_DEVICE_H
#define M40_CUDA_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st; /* the CUDA runtime's stream; cudaStream_t is a pointer to it */

/* What m40_cuda_device_open() learnt about the GPU. Sizes are bytes. Fields the
 * runtime would not report are 0. */
struct m40_cuda_device_info {
        int ordinal;            /* CUDA device ordinal */
        char name[256];         /* e.g. "Tesla M40 24GB", NUL-terminated */
        int cc_major, cc_minor; /* compute capability, e.g. 5.2 */
        int sm_count;           /* streaming multiprocessors */
        uint64_t total_mem;     /* device memory, total */
        uint64_t free_mem;      /* free when the device was opened */
        int mem_bus_width_bits; /* e.g. 384 on an M40 */
        int mem_clock_khz;      /* peak memory clock, e.g. 3004000 on an M40 */
        double peak_bw_gbs;     /* bus width / 8 * clock * 2 (DDR), in GB/s (1e9 B/s);
                                 * 0 when width or clock is unknown */
        size_t shared_mem_per_block;
        size_t shared_mem_per_sm;
        int regs_per_sm; /* 32-bit registers */
        int max_threads_per_sm;
        int l2_bytes;
        int driver_version;  /* e.g. 12090 for 12.9; 0 when no driver */
        int runtime_version; /* CUDA runtime the program runs with */
};

/* The result of a copy-bandwidth measurement. GB/s are 1e9 bytes per second and
 * count each copied byte twice, once read and once written:
 * 2 * bytes * iters / seconds. */
struct m40_cuda_copy_bandwidth {
        size_t bytes;      /* size of each of the two buffers actually used */
        int iters;         /* timed copies per method */
        double memcpy_gbs; /* cudaMemcpyAsync device-to-device */
        double kernel_gbs; /* m40_cuda_copy() (k_copy, 16-byte read-only loads) */
        double best_gbs;   /* the larger of the two */
};

/* An open GPU. Opaque; owned by the caller of m40_cuda_device_open(). */
struct m40_cuda_device;

/* Defaults and limits of m40_cuda_device_copy_bandwidth(). */
#define M40_CUDA_COPY_BYTES_DEFAULT ((size_t)1 << 30) /* 1 GiB: far above any L2 */
#define M40_CUDA_COPY_ITERS_DEFAULT 20
#define M40_CUDA_COPY_ITERS_MAX     100000

/* m40_cuda_device_count - how many CUDA GPUs the runtime sees.
 * Returns 0 and sets *ret_n (0 when the driver reports no device); M40_ENODEVICE
 * when there is no usable driver (not loaded, or older than the runtime);
 * M40_ECUDA on any other runtime error; -EINVAL when ret_n is NULL. */
int m40_cuda_device_count(int *ret_n);

/* m40_cuda_device_open - make GPU `ordinal` current, read its properties and
 * check that m40-llm can run on it.
 * On success returns 0 and stores a new device in *ret, which the caller frees
 * with m40_cuda_device_free(). Fails with M40_ENODEVICE (no GPU, no driver, or
 * no GPU with that ordinal), M40_EUNSUPPORTED (compute capability below 5.2, or
 * this build holds no code that runs on the GPU), M40_ECUDA, -ENOMEM, -EINVAL
 * (ret NULL); err then says which GPU and why. */
int m40_cuda_device_open(int ordinal, struct m40_cuda_device **ret, char *err, size_t errlen);

/* m40_cuda_device_free - free what m40_cuda_device_open() allocated. The GPU's
 * primary context is left alone (other code in the process may use it).
 * Accepts NULL; returns NULL. */
struct m40_cuda_device *m40_cuda_device_free(struct m40_cuda_device *d);

/* m40_cuda_device_info - the properties read at open time (free_mem is not
 * refreshed). Borrowed: valid until m40_cuda_device_free(d). */
const struct m40_cuda_device_info *m40_cuda_device_info(const struct m40_cuda_device *d);

/* m40_cuda_device_copy_measure - measure device-to-device copy bandwidth, both
 * with cudaMemcpyAsync and with m40_cuda_copy(), on a private stream.
 * bytes: size of each of the two buffers; 0 means M40_CUDA_COPY_BYTES_DEFAULT.
 * It is clamped to a quarter of the memory free now and rounded down to a
 * multiple of 256. iters: timed copies per method; 0 means
 * M40_CUDA_COPY_ITERS_DEFAULT; at most M40_CUDA_COPY_ITERS_MAX. Two untimed
 * copies per method warm up first. Both buffers are freed on every path.
 * Returns 0 and fills *ret; -EINVAL for a negative or too large iters or a NULL
 * argument, -ENOMEM when too little device memory is free, M40_ECUDA. */
int m40_cuda_device_copy_measure(struct m40_cuda_device *d, size_t bytes, int iters,
                                 struct m40_cuda_copy_bandwidth *ret, char *err, size_t errlen);

/* m40_cuda_device_copy_bandwidth - m40_cuda_device_copy_measure(), reduced to
 * the best figure in GB/s (read + write counted). Same arguments and errors. */
int m40_cuda_device_copy_bandwidth(struct m40_cuda_device *d, size_t bytes, int iters,
                                   double *ret_gbs, char *err, size_t errlen);

/* m40_cuda_copy - launch k_copy on `stream`: copy `bytes` bytes from device
 * memory src to device memory dst, any alignment and any size (16-byte vector
 * loads through the read-only cache where src and dst share their alignment
 * mod 16, 4- or 1-byte accesses otherwise). The ranges must not overlap.
 * Asynchronous: returns once launched; 0, or M40_ECUDA when the launch failed
 * (the error is the runtime's last error, read and cleared with
 * cudaGetLastError); -EINVAL for a NULL pointer or overlapping ranges. bytes == 0
 * launches nothing. Runs on the current device (the one stream belongs to), sm_52
 * and newer. */
int m40_cuda_copy(void *dst, const void *src, size_t bytes, struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif

#endif
