/* cuda/runtime/alloc.h - the device allocator: all the GPU memory m40d uses, taken once.
 *
 * Owns one device arena per model, carved at creation into three pools, and the
 * pinned host staging buffers that feed uploads:
 *   weights  a bump allocator filled once at load; nothing in it is freed alone
 *   kv       a pool of equal KV-cache pages, handed out and returned one at a time
 *   scratch  a bump allocator with mark/release, for activations and per-step data
 *   staging  pinned (page-locked, cudaHostRegister'ed) host buffers, 4096-aligned,
 *            usable for O_DIRECT reads, io_uring registered buffers and async copies
 * Creation does the only cudaMalloc (one) and the only pinning; after it nothing
 * here calls cudaMalloc/cudaFree or pins memory until m40_cuda_alloc_free(), so
 * serving never allocates device memory.
 *
 * The size of the arena is checked before anything is allocated against what the
 * GPU has free, minus a headroom the CUDA runtime keeps for itself, and against
 * vram_limit_mb: a 80 GB GPU told vram_limit_mb = 24576 behaves like a 24 GB
 * Tesla M40 (22528 or 11264 give the usable memory of a 24 GB or 12 GB M40 whose
 * context already took its share). A model that does not fit fails with a message
 * naming what it needs, pool by pool, and what is available. A KV pool sized to fill
 * what is left (kv_pages 0) leaves a second headroom free as well, for the device
 * memory the process takes after the arena (kernel code loaded at first launch,
 * cuBLAS's handle, streams, a larger local-memory reservation), and stops at
 * kv_pages_max.
 *
 * Errors: 0 or -errno (-EINVAL, -ENOMEM, -EOVERFLOW) or M40_ECUDA; functions with
 * `char *err, size_t errlen` write a one-line message there (err may be NULL). Nothing
 * prints. ret_* outputs are written only on success. All pointers handed out are
 * aligned to M40_CUDA_ALLOC_ALIGN and stay valid until m40_cuda_alloc_free().
 *
 * Threads: one thread at a time per allocator (the scheduler owns it). Plain C11,
 * no CUDA header needed. */
#ifndef M40_CUDA_ALLOC_H
#define M40_CUDA_ALLOC_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct m40_cuda_device;

#define M40_CUDA_ALLOC_ALIGN    256u                  /* alignment of every device block */
#define M40_CUDA_STAGING_ALIGN  4096u                 /* staging buffers: O_DIRECT-ready */
#define M40_CUDA_ALLOC_HEADROOM ((uint64_t)256 << 20) /* left free for the CUDA runtime */
#define M40_CUDA_KV_PAGES_MAX   (1u << 24)            /* most pages one pool holds */
#define M40_CUDA_STAGING_MAX    64u                   /* most staging buffers */
/* Also left free when the KV pool fills the rest (kv_pages 0): what the process
 * allocates on the device after the arena. Not taken out of vram_limit_mb when the
 * limit is below the free memory less both headrooms (the GPU has room beside it). */
#define M40_CUDA_ALLOC_FILL_HEADROOM ((uint64_t)256 << 20)

/* What to allocate. Sizes are bytes; each pool is rounded up to M40_CUDA_ALLOC_ALIGN. */
struct m40_cuda_alloc_config {
        uint64_t weight_bytes;  /* capacity of the weights pool */
        uint64_t scratch_bytes; /* capacity of the scratch pool */
        uint64_t kv_page_bytes; /* bytes of one KV page (rounded up); 0: no KV pool */
        uint32_t kv_pages;      /* pages; 0: as many as the limit leaves room for after
                                 * M40_CUDA_ALLOC_FILL_HEADROOM, at most kv_pages_max,
                                 * at least kv_pages_min */
        uint32_t kv_pages_min;  /* the fewest pages the model is usable with */
        uint32_t kv_pages_max;  /* with kv_pages 0, the most pages worth having (e.g.
                                 * every sequence at the full context); 0 or above
                                 * M40_CUDA_KV_PAGES_MAX: M40_CUDA_KV_PAGES_MAX. Below
                                 * kv_pages_min is an error */
        uint64_t staging_bytes; /* bytes of each pinned staging buffer (rounded up to
                                 * M40_CUDA_STAGING_ALIGN); 0: no staging */
        uint32_t staging_count; /* staging buffers, at most M40_CUDA_STAGING_MAX */
        uint64_t vram_limit_mb; /* most MiB of device memory to take; 0: no limit
                                 * besides the free memory less the headroom */
};

/* The sizes m40_cuda_alloc_plan() works out. */
struct m40_cuda_alloc_plan {
        uint64_t weight_bytes, scratch_bytes, kv_bytes; /* per pool, rounded */
        uint64_t kv_page_bytes;
        uint32_t kv_pages;
        uint64_t needed;    /* weights + scratch + kv */
        uint64_t available; /* min(free - headroom, vram limit) */
        /* What a filling KV pool sized itself from: min(free - both headrooms, vram
         * limit); 0 when not filling. */
        uint64_t fill;
        uint64_t free_mem, total_mem, limit; /* what the GPU reported; limit 0 = none */
};

/* Bytes used and the high-water mark of one pool. */
struct m40_cuda_pool_stats {
        uint64_t capacity, used, peak;
};

struct m40_cuda_alloc_stats {
        struct m40_cuda_pool_stats weights, scratch, kv; /* kv: pages in use x page size */
        uint32_t kv_pages, kv_pages_used, kv_pages_peak;
        uint64_t kv_page_bytes;
        uint64_t arena_bytes;   /* the one device allocation */
        uint64_t staging_bytes; /* all pinned staging memory */
        uint32_t staging_count;
        uint64_t available; /* what the plan had available at creation */
};

struct m40_cuda_alloc;

/* m40_cuda_alloc_plan - the sizes a config would allocate on device dev, and whether
 * they fit. Returns 0 (fits) or -ENOMEM (does not; err then says how much is needed,
 * pool by pool, and how much is available) and fills *plan in both cases; -EINVAL for
 * a NULL argument or a config out of range; -EOVERFLOW when the sizes overflow;
 * M40_ECUDA when the GPU's free memory cannot be read. Allocates nothing. */
int m40_cuda_alloc_plan(struct m40_cuda_device *dev, const struct m40_cuda_alloc_config *cfg,
                        struct m40_cuda_alloc_plan *plan, char *err, size_t errlen);

/* m40_cuda_alloc_plan_mem - m40_cuda_alloc_plan() for a GPU that reports free_mem bytes
 * free of total_mem: the same sizes, checks, returns and messages (but no M40_ECUDA),
 * with no GPU needed. */
int m40_cuda_alloc_plan_mem(uint64_t free_mem, uint64_t total_mem,
                            const struct m40_cuda_alloc_config *cfg,
                            struct m40_cuda_alloc_plan *plan, char *err, size_t errlen);

/* m40_cuda_alloc_new - plan, then take the arena (one cudaMalloc) and pin the staging
 * buffers on dev. Returns 0 and a new allocator in *ret (free it with
 * m40_cuda_alloc_free()); the errors of m40_cuda_alloc_plan(), or -ENOMEM / M40_ECUDA
 * when the allocation itself fails, with nothing left allocated. */
int m40_cuda_alloc_new(struct m40_cuda_device *dev, const struct m40_cuda_alloc_config *cfg,
                       struct m40_cuda_alloc **ret, char *err, size_t errlen);

/* m40_cuda_alloc_free - give back the arena and the staging buffers (the caller has
 * synchronized every stream that used them). Accepts NULL; returns NULL. */
struct m40_cuda_alloc *m40_cuda_alloc_free(struct m40_cuda_alloc *a);

/* m40_cuda_alloc_weights - bytes from the weights pool into *ret (device memory,
 * aligned, contents undefined). -ENOMEM when the pool has less left; -EINVAL for
 * bytes == 0 or NULL arguments. */
int m40_cuda_alloc_weights(struct m40_cuda_alloc *a, uint64_t bytes, void **ret);

/* m40_cuda_scratch_alloc - bytes from the scratch pool into *ret; same errors. */
int m40_cuda_scratch_alloc(struct m40_cuda_alloc *a, uint64_t bytes, void **ret);

/* m40_cuda_scratch_mark / _release - the scratch pool's fill level, and going back
 * to a level taken earlier (everything allocated since is released; the peak stays).
 * Releasing to a level above the current one is ignored. */
uint64_t m40_cuda_scratch_mark(const struct m40_cuda_alloc *a);
void m40_cuda_scratch_release(struct m40_cuda_alloc *a, uint64_t mark);

/* m40_cuda_scratch_array - n elements of elem_size bytes from scratch; -EOVERFLOW when
 * n * elem_size overflows, else as m40_cuda_scratch_alloc(). The typed helpers below
 * call it. */
int m40_cuda_scratch_array(struct m40_cuda_alloc *a, uint64_t n, size_t elem_size, void **ret);

static inline int m40_cuda_scratch_f32(struct m40_cuda_alloc *a, uint64_t n, float **ret)
{
        void *p = NULL;
        int r = m40_cuda_scratch_array(a, n, sizeof(float), &p);

        if (r == 0)
                *ret = (float *)p;
        return r;
}

static inline int m40_cuda_scratch_u32(struct m40_cuda_alloc *a, uint64_t n, uint32_t **ret)
{
        void *p = NULL;
        int r = m40_cuda_scratch_array(a, n, sizeof(uint32_t), &p);

        if (r == 0)
                *ret = (uint32_t *)p;
        return r;
}

static inline int m40_cuda_scratch_i32(struct m40_cuda_alloc *a, uint64_t n, int32_t **ret)
{
        void *p = NULL;
        int r = m40_cuda_scratch_array(a, n, sizeof(int32_t), &p);

        if (r == 0)
                *ret = (int32_t *)p;
        return r;
}

/* m40_cuda_kv_page_get - take a free KV page: its index into *ret_page. -ENOSPC when
 * every page is in use, -ENODEV when there is no KV pool. */
int m40_cuda_kv_page_get(struct m40_cuda_alloc *a, uint32_t *ret_page);

/* m40_cuda_kv_page_put - return page to the pool. -EINVAL when page is out of range
 * or not in use (a double put), leaving the pool unchanged. */
int m40_cuda_kv_page_put(struct m40_cuda_alloc *a, uint32_t page);

/* m40_cuda_kv_page_ptr - device address of page (base + page * page size), NULL when
 * out of range. m40_cuda_kv_base() is page 0's, for block tables on the device. */
void *m40_cuda_kv_page_ptr(const struct m40_cuda_alloc *a, uint32_t page);
void *m40_cuda_kv_base(const struct m40_cuda_alloc *a);

/* m40_cuda_staging - pinned host staging buffer i (NULL when i >= the count), its size
 * and count. The buffers belong to the allocator. */
void *m40_cuda_staging(const struct m40_cuda_alloc *a, uint32_t i);
uint64_t m40_cuda_staging_bytes(const struct m40_cuda_alloc *a);
uint32_t m40_cuda_staging_count(const struct m40_cuda_alloc *a);

/* m40_cuda_alloc_ordinal - the CUDA ordinal of the GPU the arena lives on. */
int m40_cuda_alloc_ordinal(const struct m40_cuda_alloc *a);

/* m40_cuda_alloc_stats - a snapshot of every pool's use. */
void m40_cuda_alloc_stats(const struct m40_cuda_alloc *a, struct m40_cuda_alloc_stats *ret);

#ifdef __cplusplus
}
#endif

#endif
