/* cuda/runtime/alloc.cu - the device allocator (see alloc.h): planning against the free
 * memory and vram_limit_mb, the one arena and its three pools, the KV page free
 * stack, the pinned staging buffers, and the statistics. Host code only. */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "m40/error.h"
#include "cuda/runtime/alloc.h"
#include "cuda/runtime/device.h"

#define MIB (1024.0 * 1024.0)

struct bump {
        uint8_t *base;
        uint64_t capacity, used, peak;
};

struct m40_cuda_alloc {
        int ordinal;
        uint8_t *arena; /* the one cudaMalloc */
        uint64_t arena_bytes;
        struct bump weights, scratch;

        uint8_t *kv_base;
        uint64_t kv_page_bytes;
        uint32_t kv_pages, kv_used, kv_peak;
        uint32_t *kv_free;  /* stack of free page indices, kv_pages - kv_used of them */
        uint8_t *kv_in_use; /* one flag per page, to refuse a double put */

        void **staging; /* staging_count host buffers, each pinned */
        uint64_t staging_bytes;
        uint32_t staging_count;
        uint64_t available;
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

static int cuda_fail(cudaError_t e, char *err, size_t errlen, const char *what)
{
        set_err(err, errlen, "%s: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
        (void)cudaGetLastError();
        return e == cudaErrorMemoryAllocation ? -ENOMEM : M40_ECUDA;
}

/* *v rounded up to a multiple of a (a power of two); false on overflow. */
static bool round_up(uint64_t *v, uint64_t a)
{
        if (*v > UINT64_MAX - (a - 1))
                return false;
        *v = (*v + a - 1) & ~(a - 1);
        return true;
}

static bool add_ok(uint64_t *acc, uint64_t v)
{
        if (*acc > UINT64_MAX - v)
                return false;
        *acc += v;
        return true;
}

/* The message for a model that does not fit. */
static void no_fit(const struct m40_cuda_alloc_plan *p, const char *why, char *err, size_t errlen)
{
        char lim[64] = "", kv[96] = "";

        if (p->limit)
                snprintf(lim, sizeof(lim), ", vram_limit_mb %.0f", p->limit / MIB);
        if (p->kv_pages)
                snprintf(kv, sizeof(kv), ", KV cache %.1f MiB in %u pages of %.2f MiB",
                         p->kv_bytes / MIB, p->kv_pages, p->kv_page_bytes / MIB);
        set_err(err, errlen,
                "the model needs %.1f MiB of GPU memory (weights %.1f MiB%s, scratch %.1f MiB)%s "
                "but only %.1f MiB are available (GPU: %.1f MiB free of %.1f MiB, %.0f MiB kept "
                "for the CUDA runtime%s)",
                p->needed / MIB, p->weight_bytes / MIB, kv, p->scratch_bytes / MIB, why,
                p->available / MIB, p->free_mem / MIB, p->total_mem / MIB,
                M40_CUDA_ALLOC_HEADROOM / MIB, lim);
}

static int check_config(const struct m40_cuda_alloc_config *c, char *err, size_t errlen)
{
        if (c->staging_count > M40_CUDA_STAGING_MAX) {
                set_err(err, errlen, "staging_count %u is above the limit %u", c->staging_count,
                        M40_CUDA_STAGING_MAX);
                return -EINVAL;
        }
        if ((c->staging_count == 0) != (c->staging_bytes == 0)) {
                set_err(err, errlen, "staging_bytes and staging_count must both be 0 or both set");
                return -EINVAL;
        }
        if (c->kv_pages > M40_CUDA_KV_PAGES_MAX || c->kv_pages_min > M40_CUDA_KV_PAGES_MAX) {
                set_err(err, errlen, "KV page count above the limit %u", M40_CUDA_KV_PAGES_MAX);
                return -EINVAL;
        }
        if (!c->kv_pages && c->kv_pages_max && c->kv_pages_min > c->kv_pages_max) {
                set_err(err, errlen, "kv_pages_min %u is above kv_pages_max %u", c->kv_pages_min,
                        c->kv_pages_max);
                return -EINVAL;
        }
        if (c->kv_page_bytes == 0 && (c->kv_pages || c->kv_pages_min)) {
                set_err(err, errlen, "KV pages asked for with kv_page_bytes 0");
                return -EINVAL;
        }
        if (c->vram_limit_mb > (UINT64_MAX >> 20)) {
                set_err(err, errlen, "vram_limit_mb %llu is out of range",
                        (unsigned long long)c->vram_limit_mb);
                return -EINVAL;
        }
        return 0;
}

/* The pages a filling KV pool gets: every page p->fill leaves room for beside fixed
 * bytes, at most kv_pages_max (and M40_CUDA_KV_PAGES_MAX), at least kv_pages_min. */
static uint32_t fill_pages(const struct m40_cuda_alloc_plan *p,
                           const struct m40_cuda_alloc_config *cfg, uint64_t fixed)
{
        uint64_t room = p->fill > fixed ? (p->fill - fixed) / p->kv_page_bytes : 0;
        uint64_t max = cfg->kv_pages_max;

        if (max == 0 || max > M40_CUDA_KV_PAGES_MAX)
                max = M40_CUDA_KV_PAGES_MAX;
        if (room > max)
                room = max;
        if (room < cfg->kv_pages_min)
                room = cfg->kv_pages_min;
        return (uint32_t)room;
}

extern "C" int m40_cuda_alloc_plan_mem(uint64_t free_mem, uint64_t total_mem,
                                       const struct m40_cuda_alloc_config *cfg,
                                       struct m40_cuda_alloc_plan *plan, char *err, size_t errlen)
{
        const uint64_t both = M40_CUDA_ALLOC_HEADROOM + M40_CUDA_ALLOC_FILL_HEADROOM;
        struct m40_cuda_alloc_plan p;
        uint64_t fixed;
        int r;

        if (!cfg || !plan)
                return -EINVAL;
        r = check_config(cfg, err, errlen);
        if (r < 0)
                return r;

        memset(&p, 0, sizeof(p));
        p.weight_bytes = cfg->weight_bytes;
        p.scratch_bytes = cfg->scratch_bytes;
        p.kv_page_bytes = cfg->kv_page_bytes;
        if (!round_up(&p.weight_bytes, M40_CUDA_ALLOC_ALIGN) ||
            !round_up(&p.scratch_bytes, M40_CUDA_ALLOC_ALIGN) ||
            !round_up(&p.kv_page_bytes, M40_CUDA_ALLOC_ALIGN)) {
                set_err(err, errlen, "allocation sizes overflow");
                return -EOVERFLOW;
        }

        p.free_mem = free_mem;
        p.total_mem = total_mem;
        p.limit = cfg->vram_limit_mb << 20;
        p.available =
                p.free_mem > M40_CUDA_ALLOC_HEADROOM ? p.free_mem - M40_CUDA_ALLOC_HEADROOM : 0;
        if (p.limit && p.limit < p.available)
                p.available = p.limit;

        fixed = p.weight_bytes;
        if (!add_ok(&fixed, p.scratch_bytes)) {
                set_err(err, errlen, "allocation sizes overflow");
                return -EOVERFLOW;
        }
        if (cfg->kv_pages) {
                p.kv_pages = cfg->kv_pages;
        } else if (p.kv_page_bytes) {
                p.fill = p.free_mem > both ? p.free_mem - both : 0;
                if (p.limit && p.limit < p.fill)
                        p.fill = p.limit;
                p.kv_pages = fill_pages(&p, cfg, fixed);
        }
        if (p.kv_pages && p.kv_page_bytes > UINT64_MAX / p.kv_pages) {
                set_err(err, errlen, "allocation sizes overflow");
                return -EOVERFLOW;
        }
        p.kv_bytes = p.kv_page_bytes * p.kv_pages;
        p.needed = fixed;
        if (!add_ok(&p.needed, p.kv_bytes)) {
                set_err(err, errlen, "allocation sizes overflow");
                return -EOVERFLOW;
        }
        *plan = p;
        if (p.needed > p.available) {
                no_fit(&p, "", err, errlen);
                return -ENOMEM;
        }
        if (p.needed == 0) {
                set_err(err, errlen, "nothing to allocate: every pool is empty");
                return -EINVAL;
        }
        return 0;
}

extern "C" int m40_cuda_alloc_plan(struct m40_cuda_device *dev,
                                   const struct m40_cuda_alloc_config *cfg,
                                   struct m40_cuda_alloc_plan *plan, char *err, size_t errlen)
{
        const struct m40_cuda_device_info *info = m40_cuda_device_info(dev);
        size_t free_b = 0, total_b = 0;
        cudaError_t e;
        int r;

        if (!info || !cfg || !plan)
                return -EINVAL;
        r = check_config(cfg, err, errlen);
        if (r < 0)
                return r;
        e = cudaSetDevice(info->ordinal);
        if (e == cudaSuccess)
                e = cudaMemGetInfo(&free_b, &total_b);
        if (e != cudaSuccess)
                return cuda_fail(e, err, errlen, "Failed to read the GPU's free memory");
        return m40_cuda_alloc_plan_mem(free_b, total_b, cfg, plan, err, errlen);
}

static void bump_init(struct bump *b, uint8_t *base, uint64_t capacity)
{
        b->base = base;
        b->capacity = capacity;
        b->used = 0;
        b->peak = 0;
}

static int bump_take(struct bump *b, uint64_t bytes, void **ret)
{
        uint64_t n = bytes;

        if (!ret || bytes == 0)
                return -EINVAL;
        if (!round_up(&n, M40_CUDA_ALLOC_ALIGN) || n > b->capacity - b->used)
                return -ENOMEM;
        *ret = b->base + b->used;
        b->used += n;
        if (b->used > b->peak)
                b->peak = b->used;
        return 0;
}

static void staging_free(struct m40_cuda_alloc *a)
{
        for (uint32_t i = 0; a->staging && i < a->staging_count; i++) {
                if (!a->staging[i])
                        continue;
                (void)cudaHostUnregister(a->staging[i]);
                free(a->staging[i]);
        }
        (void)cudaGetLastError();
        free(a->staging);
        a->staging = NULL;
}

/* Pinned staging: page-aligned ordinary memory registered with CUDA (rather than
 * cudaHostAlloc), so io_uring can register it as fixed buffers as well. */
static int staging_new(struct m40_cuda_alloc *a, const struct m40_cuda_alloc_config *cfg, char *err,
                       size_t errlen)
{
        uint64_t bytes = cfg->staging_bytes;
        cudaError_t e;

        if (cfg->staging_count == 0)
                return 0;
        if (!round_up(&bytes, M40_CUDA_STAGING_ALIGN) || bytes > SIZE_MAX) {
                set_err(err, errlen, "staging_bytes overflows");
                return -EOVERFLOW;
        }
        a->staging = (void **)calloc(cfg->staging_count, sizeof(*a->staging));
        if (!a->staging) {
                set_err(err, errlen, "out of host memory");
                return -ENOMEM;
        }
        a->staging_count = cfg->staging_count;
        a->staging_bytes = bytes;
        for (uint32_t i = 0; i < cfg->staging_count; i++) {
                a->staging[i] = aligned_alloc(M40_CUDA_STAGING_ALIGN, (size_t)bytes);
                if (!a->staging[i]) {
                        set_err(err, errlen,
                                "out of host memory for %u staging buffers of %.1f MiB",
                                cfg->staging_count, bytes / MIB);
                        return -ENOMEM;
                }
                e = cudaHostRegister(a->staging[i], (size_t)bytes, cudaHostRegisterPortable);
                if (e != cudaSuccess) {
                        free(a->staging[i]);
                        a->staging[i] = NULL;
                        return cuda_fail(e, err, errlen, "Failed to pin a staging buffer");
                }
        }
        return 0;
}

extern "C" int m40_cuda_alloc_new(struct m40_cuda_device *dev,
                                  const struct m40_cuda_alloc_config *cfg,
                                  struct m40_cuda_alloc **ret, char *err, size_t errlen)
{
        struct m40_cuda_alloc_plan p;
        struct m40_cuda_alloc *a;
        void *arena = NULL;
        cudaError_t e;
        int r;

        if (!ret)
                return -EINVAL;
        r = m40_cuda_alloc_plan(dev, cfg, &p, err, errlen);
        if (r < 0)
                return r;

        a = (struct m40_cuda_alloc *)calloc(1, sizeof(*a));
        if (!a) {
                set_err(err, errlen, "out of host memory");
                return -ENOMEM;
        }
        a->ordinal = m40_cuda_device_info(dev)->ordinal;
        a->available = p.available;
        a->kv_pages = p.kv_pages;
        a->kv_page_bytes = p.kv_page_bytes;
        if (p.kv_pages) {
                a->kv_free = (uint32_t *)malloc(sizeof(uint32_t) * p.kv_pages);
                a->kv_in_use = (uint8_t *)calloc(p.kv_pages, 1);
                if (!a->kv_free || !a->kv_in_use) {
                        set_err(err, errlen, "out of host memory for %u KV page records",
                                p.kv_pages);
                        r = -ENOMEM;
                        goto fail_free;
                }
                /* Pop order 0, 1, 2, ...: the stack holds the highest index at the bottom. */
                for (uint32_t i = 0; i < p.kv_pages; i++)
                        a->kv_free[i] = p.kv_pages - 1 - i;
        }

        e = cudaMalloc(&arena, p.needed);
        if (e != cudaSuccess) {
                r = cuda_fail(e, err, errlen, "Failed to allocate the GPU arena");
                if (r == -ENOMEM)
                        no_fit(&p, " (cudaMalloc refused it)", err, errlen);
                goto fail_free;
        }
        a->arena = (uint8_t *)arena;
        a->arena_bytes = p.needed;
        bump_init(&a->weights, a->arena, p.weight_bytes);
        a->kv_base = a->arena + p.weight_bytes;
        bump_init(&a->scratch, a->kv_base + p.kv_bytes, p.scratch_bytes);

        r = staging_new(a, cfg, err, errlen);
        if (r < 0)
                goto fail_free;
        *ret = a;
        return 0;

fail_free:
        m40_cuda_alloc_free(a);
        return r;
}

extern "C" struct m40_cuda_alloc *m40_cuda_alloc_free(struct m40_cuda_alloc *a)
{
        if (!a)
                return NULL;
        staging_free(a);
        if (a->arena) {
                (void)cudaSetDevice(a->ordinal);
                (void)cudaFree(a->arena);
                (void)cudaGetLastError();
        }
        free(a->kv_free);
        free(a->kv_in_use);
        free(a);
        return NULL;
}

extern "C" int m40_cuda_alloc_weights(struct m40_cuda_alloc *a, uint64_t bytes, void **ret)
{
        if (!a)
                return -EINVAL;
        return bump_take(&a->weights, bytes, ret);
}

extern "C" int m40_cuda_scratch_alloc(struct m40_cuda_alloc *a, uint64_t bytes, void **ret)
{
        if (!a)
                return -EINVAL;
        return bump_take(&a->scratch, bytes, ret);
}

extern "C" int m40_cuda_scratch_array(struct m40_cuda_alloc *a, uint64_t n, size_t elem_size,
                                      void **ret)
{
        if (elem_size && n > UINT64_MAX / elem_size)
                return -EOVERFLOW;
        return m40_cuda_scratch_alloc(a, n * elem_size, ret);
}

extern "C" uint64_t m40_cuda_scratch_mark(const struct m40_cuda_alloc *a)
{
        return a ? a->scratch.used : 0;
}

extern "C" void m40_cuda_scratch_release(struct m40_cuda_alloc *a, uint64_t mark)
{
        if (a && mark <= a->scratch.used)
                a->scratch.used = mark;
}

extern "C" int m40_cuda_kv_page_get(struct m40_cuda_alloc *a, uint32_t *ret_page)
{
        uint32_t page;

        if (!a || !ret_page)
                return -EINVAL;
        if (a->kv_pages == 0)
                return -ENODEV;
        if (a->kv_used == a->kv_pages)
                return -ENOSPC;
        page = a->kv_free[a->kv_pages - 1 - a->kv_used];
        a->kv_in_use[page] = 1;
        a->kv_used++;
        if (a->kv_used > a->kv_peak)
                a->kv_peak = a->kv_used;
        *ret_page = page;
        return 0;
}

extern "C" int m40_cuda_kv_page_put(struct m40_cuda_alloc *a, uint32_t page)
{
        if (!a || page >= a->kv_pages || !a->kv_in_use[page])
                return -EINVAL;
        a->kv_in_use[page] = 0;
        a->kv_used--;
        a->kv_free[a->kv_pages - 1 - a->kv_used] = page;
        return 0;
}

extern "C" void *m40_cuda_kv_page_ptr(const struct m40_cuda_alloc *a, uint32_t page)
{
        if (!a || page >= a->kv_pages)
                return NULL;
        return a->kv_base + (uint64_t)page * a->kv_page_bytes;
}

extern "C" void *m40_cuda_kv_base(const struct m40_cuda_alloc *a)
{
        return a && a->kv_pages ? a->kv_base : NULL;
}

extern "C" void *m40_cuda_staging(const struct m40_cuda_alloc *a, uint32_t i)
{
        if (!a || i >= a->staging_count)
                return NULL;
        return a->staging[i];
}

extern "C" uint64_t m40_cuda_staging_bytes(const struct m40_cuda_alloc *a)
{
        return a ? a->staging_bytes : 0;
}

extern "C" uint32_t m40_cuda_staging_count(const struct m40_cuda_alloc *a)
{
        return a ? a->staging_count : 0;
}

extern "C" int m40_cuda_alloc_ordinal(const struct m40_cuda_alloc *a)
{
        return a ? a->ordinal : 0;
}

static struct m40_cuda_pool_stats pool_stats(const struct bump *b)
{
        struct m40_cuda_pool_stats s = {b->capacity, b->used, b->peak};

        return s;
}

extern "C" void m40_cuda_alloc_stats(const struct m40_cuda_alloc *a,
                                     struct m40_cuda_alloc_stats *ret)
{
        struct m40_cuda_alloc_stats s;

        if (!ret)
                return;
        memset(&s, 0, sizeof(s));
        if (a) {
                s.weights = pool_stats(&a->weights);
                s.scratch = pool_stats(&a->scratch);
                s.kv.capacity = a->kv_page_bytes * a->kv_pages;
                s.kv.used = a->kv_page_bytes * a->kv_used;
                s.kv.peak = a->kv_page_bytes * a->kv_peak;
                s.kv_pages = a->kv_pages;
                s.kv_pages_used = a->kv_used;
                s.kv_pages_peak = a->kv_peak;
                s.kv_page_bytes = a->kv_page_bytes;
                s.arena_bytes = a->arena_bytes;
                s.staging_bytes = a->staging_bytes * a->staging_count;
                s.staging_count = a->staging_count;
                s.available = a->available;
        }
        *ret = s;
}
