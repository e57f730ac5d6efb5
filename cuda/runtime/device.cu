/* cuda/runtime/device.cu - the CUDA device module (see device.h): opening and checking a
 * GPU, the copy kernel k_copy with its launcher m40_cuda_copy(), and the
 * device-to-device copy-bandwidth measurement.
 *
 * Written as C-style CUDA C++ that both nvcc and clang compile, for sm_52 and
 * newer: no feature of sm_60+ is used anywhere in this file. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "m40/error.h"
#include "cuda/runtime/device.h"

/* Our half of device.h's promise that struct CUstream_st * is cudaStream_t. */
static_assert(sizeof(cudaStream_t) == sizeof(struct CUstream_st *), "cudaStream_t changed");

#define M40_MIN_CC_MAJOR 5
#define M40_MIN_CC_MINOR 2

#define COPY_THREADS 256 /* threads per block of k_copy */
#define COPY_UNROLL  4   /* elements each thread has in flight per step */

/* The arch list the compiler built this file for (nvcc >= 11.5 defines it, as
 * e.g. 520,900), for the "no code for this GPU" message. */
#define STRINGIFY2(...) #__VA_ARGS__
#define STRINGIFY(...)  STRINGIFY2(__VA_ARGS__)
#ifdef __CUDA_ARCH_LIST__
#define BUILT_ARCHES STRINGIFY(__CUDA_ARCH_LIST__)
#else
#define BUILT_ARCHES "unknown"
#endif

struct m40_cuda_device {
        struct m40_cuda_device_info info;
};

/* k_copy - dst[i] = src[i] for every byte i in [0, head + n * sizeof(T) + tail).
 * Layout: `head` single bytes, then n elements of T starting at src + head and
 * dst + head, both aligned to sizeof(T) (the launcher guarantees it), then
 * `tail` single bytes; head, tail < sizeof(T) <= 16.
 * Launch: 1-D, any grid of >= 16 threads; the body is grid-stride, each thread
 * issuing COPY_UNROLL loads before its stores to keep memory busy. Loads go
 * through the read-only path (__ldg, sm_35+), which Maxwell needs to cache
 * global loads at all. Exact: a byte copy, no tolerance. */
template <typename T>
static __global__ void k_copy(uint8_t *__restrict__ dst, const uint8_t *__restrict__ src,
                              size_t head, size_t n, size_t tail)
{
        const size_t stride = (size_t)gridDim.x * blockDim.x;
        const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
        const T *__restrict__ s = (const T *)(src + head);
        T *__restrict__ d = (T *)(dst + head);
        size_t i = tid;

        for (; i + (COPY_UNROLL - 1) * stride < n; i += COPY_UNROLL * stride) {
                T v[COPY_UNROLL];
#pragma unroll
                for (int u = 0; u < COPY_UNROLL; u++)
                        v[u] = __ldg(s + i + u * stride);
#pragma unroll
                for (int u = 0; u < COPY_UNROLL; u++)
                        d[i + u * stride] = v[u];
        }
        for (; i < n; i += stride)
                d[i] = __ldg(s + i);

        if (tid < head)
                dst[tid] = __ldg(src + tid);
        if (tid < tail) {
                const size_t o = head + n * sizeof(T) + tid;
                dst[o] = __ldg(src + o);
        }
}

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

/* The project code for a CUDA error: those that mean "no usable GPU here" are
 * M40_ENODEVICE, an out-of-memory is -ENOMEM, the rest M40_ECUDA. */
static int cuda_code(cudaError_t e)
{
        switch (e) {
        case cudaErrorNoDevice:
        case cudaErrorInsufficientDriver:
        case cudaErrorDevicesUnavailable:
        case cudaErrorSystemNotReady:
        case cudaErrorSystemDriverMismatch:
        case cudaErrorCompatNotSupportedOnDevice:
        case cudaErrorInvalidDevice:
                return M40_ENODEVICE;
        case cudaErrorMemoryAllocation:
                return -ENOMEM;
        default:
                return M40_ECUDA;
        }
}

/* Record "<what>: <cudaErrorName>: <description>" in err, clear the runtime's
 * last error if it is not sticky, and return the project code for e. */
static int cuda_fail(cudaError_t e, char *err, size_t errlen, const char *what)
{
        set_err(err, errlen, "%s: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
        (void)cudaGetLastError();
        return cuda_code(e);
}

/* The message for a runtime that finds no driver, or one too old for it. */
static int no_driver(cudaError_t e, char *err, size_t errlen)
{
        int drv = 0, rt = 0;

        (void)cudaDriverGetVersion(&drv);
        (void)cudaRuntimeGetVersion(&rt);
        (void)cudaGetLastError();
        if (drv == 0)
                set_err(err, errlen,
                        "no NVIDIA driver is loaded "
                        "(this program's CUDA runtime %d.%d needs one): %s",
                        rt / 1000, rt % 1000 / 10, cudaGetErrorName(e));
        else
                set_err(err, errlen,
                        "the NVIDIA driver supports CUDA up to %d.%d, "
                        "older than this program's runtime %d.%d: %s",
                        drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10,
                        cudaGetErrorName(e));
        return M40_ENODEVICE;
}

/* An attribute of device dev, or 0 when the runtime does not report it. */
static int attr_or_zero(enum cudaDeviceAttr a, int dev)
{
        int v = 0;

        if (cudaDeviceGetAttribute(&v, a, dev) != cudaSuccess) {
                (void)cudaGetLastError();
                return 0;
        }
        return v;
}

/* Everything the runtime tells about GPU `ordinal` without a context on it,
 * and the compute-capability check, made before anything creates one. */
static int read_props(int ordinal, struct m40_cuda_device_info *info, char *err, size_t errlen)
{
        struct cudaDeviceProp p;
        cudaError_t e;

        memset(info, 0, sizeof(*info));
        info->ordinal = ordinal;

        e = cudaGetDeviceProperties(&p, ordinal);
        if (e != cudaSuccess)
                return cuda_fail(e, err, errlen, "Failed to read the properties of the GPU");
        memcpy(info->name, p.name, sizeof(info->name));
        info->name[sizeof(info->name) - 1] = '\0';

        /* Attributes rather than cudaDeviceProp fields: CUDA 13 removed some
         * fields (memoryClockRate among them), the attributes work on every
         * runtime from 5.x on. */
        info->cc_major = attr_or_zero(cudaDevAttrComputeCapabilityMajor, ordinal);
        info->cc_minor = attr_or_zero(cudaDevAttrComputeCapabilityMinor, ordinal);
        info->sm_count = attr_or_zero(cudaDevAttrMultiProcessorCount, ordinal);
        info->mem_bus_width_bits = attr_or_zero(cudaDevAttrGlobalMemoryBusWidth, ordinal);
        info->mem_clock_khz = attr_or_zero(cudaDevAttrMemoryClockRate, ordinal);
        info->shared_mem_per_block =
                (size_t)attr_or_zero(cudaDevAttrMaxSharedMemoryPerBlock, ordinal);
        info->shared_mem_per_sm =
                (size_t)attr_or_zero(cudaDevAttrMaxSharedMemoryPerMultiprocessor, ordinal);
        info->regs_per_sm = attr_or_zero(cudaDevAttrMaxRegistersPerMultiprocessor, ordinal);
        info->max_threads_per_sm = attr_or_zero(cudaDevAttrMaxThreadsPerMultiProcessor, ordinal);
        info->l2_bytes = attr_or_zero(cudaDevAttrL2CacheSize, ordinal);
        if (info->mem_bus_width_bits > 0 && info->mem_clock_khz > 0)
                info->peak_bw_gbs =
                        2.0 * info->mem_clock_khz * 1e3 * (info->mem_bus_width_bits / 8) / 1e9;

        if (cudaDriverGetVersion(&info->driver_version) != cudaSuccess)
                info->driver_version = 0;
        if (cudaRuntimeGetVersion(&info->runtime_version) != cudaSuccess)
                info->runtime_version = 0;
        (void)cudaGetLastError();

        if (info->cc_major * 10 + info->cc_minor < M40_MIN_CC_MAJOR * 10 + M40_MIN_CC_MINOR) {
                set_err(err, errlen,
                        "GPU %d (%s) has compute capability %d.%d; "
                        "m40-llm needs %d.%d (Maxwell GM20x) or newer",
                        ordinal, info->name, info->cc_major, info->cc_minor, M40_MIN_CC_MAJOR,
                        M40_MIN_CC_MINOR);
                return M40_EUNSUPPORTED;
        }
        return 0;
}

/* Make the GPU current (since CUDA 12 this creates its primary context) and
 * read its memory figures. */
static int select_device(struct m40_cuda_device_info *info, char *err, size_t errlen)
{
        size_t free_b = 0, total_b = 0;
        cudaError_t e;

        e = cudaSetDevice(info->ordinal);
        if (e != cudaSuccess)
                return cuda_fail(e, err, errlen, "Failed to select the GPU");
        e = cudaMemGetInfo(&free_b, &total_b);
        if (e != cudaSuccess)
                return cuda_fail(e, err, errlen, "Failed to read the GPU's free memory");
        info->free_mem = free_b;
        info->total_mem = total_b;
        return 0;
}

/* Does this build hold code (SASS for the GPU, or PTX it can JIT) for GPU? */
static int check_image(const struct m40_cuda_device_info *info, char *err, size_t errlen)
{
        struct cudaFuncAttributes fa;
        cudaError_t e;

        e = cudaFuncGetAttributes(&fa, k_copy<uint4>);
        if (e == cudaSuccess)
                return 0;
        if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction ||
            e == cudaErrorUnsupportedPtxVersion) {
                set_err(err, errlen,
                        "this build of m40-llm holds GPU code for %s (CUDA arch list) "
                        "but GPU %d (%s) is sm_%d%d: rebuild with -Dcuda-arch=%d%d (%s)",
                        BUILT_ARCHES, info->ordinal, info->name, info->cc_major, info->cc_minor,
                        info->cc_major, info->cc_minor, cudaGetErrorName(e));
                (void)cudaGetLastError();
                return M40_EUNSUPPORTED;
        }
        return cuda_fail(e, err, errlen, "Failed to load the GPU code");
}

extern "C" int m40_cuda_device_count(int *ret_n)
{
        cudaError_t e;
        int n = 0;

        if (!ret_n)
                return -EINVAL;
        e = cudaGetDeviceCount(&n);
        if (e == cudaErrorNoDevice) {
                (void)cudaGetLastError();
                *ret_n = 0;
                return 0;
        }
        if (e != cudaSuccess) {
                (void)cudaGetLastError();
                return cuda_code(e) == M40_ENODEVICE ? M40_ENODEVICE : M40_ECUDA;
        }
        *ret_n = n;
        return 0;
}

extern "C" int m40_cuda_device_open(int ordinal, struct m40_cuda_device **ret, char *err,
                                    size_t errlen)
{
        struct m40_cuda_device *d;
        cudaError_t e;
        int n = 0, r;

        if (!ret)
                return -EINVAL;

        e = cudaGetDeviceCount(&n);
        if (e == cudaErrorInsufficientDriver)
                return no_driver(e, err, errlen);
        if (e != cudaSuccess && e != cudaErrorNoDevice)
                return cuda_fail(e, err, errlen, "Failed to find a CUDA GPU");
        (void)cudaGetLastError();
        if (n <= 0) {
                set_err(err, errlen,
                        "no CUDA GPU found (the driver is loaded but reports no device)");
                return M40_ENODEVICE;
        }
        if (ordinal < 0 || ordinal >= n) {
                set_err(err, errlen,
                        "GPU %d does not exist: the CUDA runtime sees %d GPU%s (0..%d)", ordinal, n,
                        n == 1 ? "" : "s", n - 1);
                return M40_ENODEVICE;
        }

        d = (struct m40_cuda_device *)calloc(1, sizeof(*d));
        if (!d) {
                set_err(err, errlen, "out of host memory");
                return -ENOMEM;
        }

        r = read_props(ordinal, &d->info, err, errlen);
        if (r < 0)
                goto fail_free;
        r = select_device(&d->info, err, errlen);
        if (r < 0)
                goto fail_free;
        r = check_image(&d->info, err, errlen);
        if (r < 0)
                goto fail_free;

        *ret = d;
        return 0;

fail_free:
        free(d);
        return r;
}

extern "C" struct m40_cuda_device *m40_cuda_device_free(struct m40_cuda_device *d)
{
        free(d);
        return NULL;
}

extern "C" const struct m40_cuda_device_info *m40_cuda_device_info(const struct m40_cuda_device *d)
{
        return d ? &d->info : NULL;
}

/* Blocks for a grid-stride kernel of COPY_THREADS-thread blocks: enough to fill
 * every SM of the current device, fewer when there is less work. */
static unsigned copy_blocks(size_t elems)
{
        size_t want = (elems + (size_t)COPY_THREADS * COPY_UNROLL - 1) /
                      ((size_t)COPY_THREADS * COPY_UNROLL);
        int dev = 0, sms = 0, tpsm = 0;
        size_t full;

        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&tpsm, cudaDevAttrMaxThreadsPerMultiProcessor, dev) !=
                    cudaSuccess) {
                (void)cudaGetLastError();
                sms = 24; /* an M40's; only the grid size depends on it */
                tpsm = 2048;
        }
        full = (size_t)sms * (size_t)(tpsm / COPY_THREADS > 0 ? tpsm / COPY_THREADS : 1);
        if (want > full)
                want = full;
        return want > 0 ? (unsigned)want : 1u;
}

/* m40_cuda_copy() minus the argument checks, returning the launch's error. */
static cudaError_t launch_copy(void *dst, const void *src, size_t bytes, cudaStream_t stream)
{
        const uintptr_t da = (uintptr_t)dst, sa = (uintptr_t)src;
        uint8_t *d = (uint8_t *)dst;
        const uint8_t *s = (const uint8_t *)src;
        size_t esize, head, n, tail;

        /* The widest element both pointers can be aligned to at once. */
        if (((da ^ sa) & 15) == 0)
                esize = 16;
        else if (((da ^ sa) & 3) == 0)
                esize = 4;
        else
                esize = 1;
        head = (esize - (sa & (esize - 1))) & (esize - 1);
        if (head > bytes)
                head = bytes;
        n = (bytes - head) / esize;
        tail = bytes - head - n * esize;

        if (esize == 16)
                k_copy<uint4><<<copy_blocks(n), COPY_THREADS, 0, stream>>>(d, s, head, n, tail);
        else if (esize == 4)
                k_copy<uint32_t><<<copy_blocks(n), COPY_THREADS, 0, stream>>>(d, s, head, n, tail);
        else
                k_copy<uint8_t><<<copy_blocks(n), COPY_THREADS, 0, stream>>>(d, s, head, n, tail);
        return cudaGetLastError();
}

extern "C" int m40_cuda_copy(void *dst, const void *src, size_t bytes, struct CUstream_st *stream)
{
        const uintptr_t da = (uintptr_t)dst, sa = (uintptr_t)src;

        if (bytes == 0)
                return 0;
        if (!dst || !src)
                return -EINVAL;
        if (da < sa + bytes && sa < da + bytes)
                return -EINVAL; /* overlapping ranges */
        return launch_copy(dst, src, bytes, stream) == cudaSuccess ? 0 : M40_ECUDA;
}

/* Time `iters` copies of `bytes` from src to dst on stream, after two untimed
 * ones; by cudaMemcpyAsync when use_kernel is 0, else by m40_cuda_copy().
 * Returns 0 and the GB/s (read + write) in *ret_gbs. */
static int time_copies(void *dst, const void *src, size_t bytes, int iters, int use_kernel,
                       cudaStream_t stream, cudaEvent_t start, cudaEvent_t stop, double *ret_gbs,
                       char *err, size_t errlen)
{
        const char *what = use_kernel ? "k_copy" : "cudaMemcpyAsync";
        cudaError_t e = cudaSuccess;
        float ms = 0.0f;
        char ctx[96];

        for (int i = -2; i < iters; i++) {
                if (i == 0) {
                        e = cudaEventRecord(start, stream);
                        if (e != cudaSuccess)
                                break;
                }
                if (use_kernel)
                        e = launch_copy(dst, src, bytes, stream);
                else
                        e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
                if (e != cudaSuccess)
                        break;
        }
        if (e == cudaSuccess)
                e = cudaEventRecord(stop, stream);
        if (e == cudaSuccess)
                e = cudaEventSynchronize(stop);
        if (e == cudaSuccess)
                e = cudaEventElapsedTime(&ms, start, stop);
        if (e != cudaSuccess) {
                snprintf(ctx, sizeof(ctx), "Failed to time %s copies", what);
                return cuda_fail(e, err, errlen, ctx);
        }
        if (!(ms > 0.0f)) {
                set_err(err, errlen, "%s: the CUDA event timer measured %g ms for %d copies", what,
                        (double)ms, iters);
                return M40_ECUDA;
        }
        *ret_gbs = 2.0 * (double)bytes * (double)iters / ((double)ms * 1e-3) / 1e9;
        return 0;
}

extern "C" int m40_cuda_device_copy_measure(struct m40_cuda_device *d, size_t bytes, int iters,
                                            struct m40_cuda_copy_bandwidth *ret, char *err,
                                            size_t errlen)
{
        struct m40_cuda_copy_bandwidth bw;
        cudaStream_t stream = NULL;
        cudaEvent_t start = NULL, stop = NULL;
        void *a = NULL, *b = NULL;
        size_t free_b = 0, total_b = 0;
        cudaError_t e;
        int r;

        if (!d || !ret)
                return -EINVAL;
        if (iters < 0 || iters > M40_CUDA_COPY_ITERS_MAX) {
                set_err(err, errlen, "iteration count %d out of range 0..%d", iters,
                        M40_CUDA_COPY_ITERS_MAX);
                return -EINVAL;
        }
        if (iters == 0)
                iters = M40_CUDA_COPY_ITERS_DEFAULT;
        if (bytes == 0)
                bytes = M40_CUDA_COPY_BYTES_DEFAULT;

        e = cudaSetDevice(d->info.ordinal);
        if (e == cudaSuccess)
                e = cudaMemGetInfo(&free_b, &total_b);
        if (e != cudaSuccess)
                return cuda_fail(e, err, errlen, "Failed to read the GPU's free memory");
        if (bytes > free_b / 4)
                bytes = free_b / 4;
        bytes &= ~(size_t)255;
        if (bytes == 0) {
                set_err(err, errlen,
                        "too little free GPU memory to measure copies (%zu bytes free)", free_b);
                return -ENOMEM;
        }

        memset(&bw, 0, sizeof(bw));
        bw.bytes = bytes;
        bw.iters = iters;

        e = cudaMalloc(&a, bytes);
        if (e != cudaSuccess) {
                r = cuda_fail(e, err, errlen, "Failed to allocate the copy source");
                goto out;
        }
        e = cudaMalloc(&b, bytes);
        if (e != cudaSuccess) {
                r = cuda_fail(e, err, errlen, "Failed to allocate the copy destination");
                goto out_free_a;
        }
        e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
        if (e != cudaSuccess) {
                r = cuda_fail(e, err, errlen, "Failed to create a stream");
                goto out_free_b;
        }
        e = cudaEventCreate(&start);
        if (e != cudaSuccess) {
                r = cuda_fail(e, err, errlen, "Failed to create a timing event");
                goto out_stream;
        }
        e = cudaEventCreate(&stop);
        if (e != cudaSuccess) {
                r = cuda_fail(e, err, errlen, "Failed to create a timing event");
                goto out_start;
        }

        /* Defined contents, so the copy moves real data through every page. */
        e = cudaMemsetAsync(a, 0x5a, bytes, stream);
        if (e != cudaSuccess) {
                r = cuda_fail(e, err, errlen, "Failed to fill the copy source");
                goto out_stop;
        }

        r = time_copies(b, a, bytes, iters, 0, stream, start, stop, &bw.memcpy_gbs, err, errlen);
        if (r < 0)
                goto out_stop;
        r = time_copies(b, a, bytes, iters, 1, stream, start, stop, &bw.kernel_gbs, err, errlen);
        if (r < 0)
                goto out_stop;
        bw.best_gbs = bw.memcpy_gbs > bw.kernel_gbs ? bw.memcpy_gbs : bw.kernel_gbs;
        *ret = bw;
        r = 0;

out_stop:
        (void)cudaStreamSynchronize(stream); /* nothing may still use the buffers */
        cudaEventDestroy(stop);
out_start:
        cudaEventDestroy(start);
out_stream:
        cudaStreamDestroy(stream);
out_free_b:
        cudaFree(b);
out_free_a:
        cudaFree(a);
out:
        if (r < 0)
                (void)cudaGetLastError();
        return r;
}

extern "C" int m40_cuda_device_copy_bandwidth(struct m40_cuda_device *d, size_t bytes, int iters,
                                              double *ret_gbs, char *err, size_t errlen)
{
        struct m40_cuda_copy_bandwidth bw;
        int r;

        if (!ret_gbs)
                return -EINVAL;
        r = m40_cuda_device_copy_measure(d, bytes, iters, &bw, err, errlen);
        if (r < 0)
                return r;
        *ret_gbs = bw.best_gbs;
        return 0;
}
