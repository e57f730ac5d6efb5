/* tests/unit/test_alloc_plan.c - the device allocator's plan (cuda/runtime/alloc.h) for GPUs of
 * given sizes, without a GPU (m40_cuda_alloc_plan_mem()): how a KV pool that fills the
 * rest is sized (the free memory less M40_CUDA_ALLOC_HEADROOM and
 * M40_CUDA_ALLOC_FILL_HEADROOM, or vram_limit_mb), capped at kv_pages_max and at
 * M40_CUDA_KV_PAGES_MAX, raised to kv_pages_min; an explicit page count untouched by
 * both; what does not fit; configs refused. The CUDA engine's default KV cache is this
 * fill with kv_pages_max = every sequence at the full context and kv_pages_min = one.
 * tests/gpu/test_alloc.c checks the same on a real GPU's figures.
 *
 * Exit 0 pass, 1 fail. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cuda/runtime/alloc.h"
#include "tests/check.h"

#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)

/* An 8B model on a 24 GB card: 4.5 GiB of weights, 300 MiB of scratch, KV pages of 16
 * positions x 32 layers x 1024 (K and V, f16): 2 MiB; one sequence of 4096 positions
 * is 256 pages. */
static struct m40_cuda_alloc_config model_8b(uint32_t max_seqs)
{
        return (struct m40_cuda_alloc_config){
                .weight_bytes = 4 * GiB + 512 * MiB,
                .scratch_bytes = 300 * MiB,
                .kv_page_bytes = 2 * MiB,
                .kv_pages = 0,
                .kv_pages_min = 256,
                .kv_pages_max = max_seqs * 256,
        };
}

static void test_fill(void)
{
        const uint64_t free_mem = 23 * GiB, total = 24 * GiB;
        const uint64_t both = M40_CUDA_ALLOC_HEADROOM + M40_CUDA_ALLOC_FILL_HEADROOM;
        struct m40_cuda_alloc_config c = model_8b(16);
        struct m40_cuda_alloc_plan p;
        uint64_t room;
        char err[512] = "";
        int r;

        CHECK(both == 512 * MiB, "the two headrooms: %" PRIu64 " MiB", both / MiB);

        /* 16 sequences x 4096: 8 GiB, below what is free: the cap decides */
        r = m40_cuda_alloc_plan_mem(free_mem, total, &c, &p, err, sizeof(err));
        CHECK(r == 0 && p.kv_pages == 16 * 256 && p.kv_bytes == 8 * GiB,
              "16 sequences: %d (%s), %u pages", r, err, p.kv_pages);
        CHECK(p.fill == free_mem - both && p.available == free_mem - M40_CUDA_ALLOC_HEADROOM,
              "fill %" PRIu64 ", available %" PRIu64, p.fill, p.available);
        CHECK(p.needed == c.weight_bytes + c.scratch_bytes + 8 * GiB, "needed %" PRIu64, p.needed);

        /* 64 sequences (32 GiB): the free memory decides */
        c = model_8b(64);
        r = m40_cuda_alloc_plan_mem(free_mem, total, &c, &p, err, sizeof(err));
        room = (free_mem - both - c.weight_bytes - c.scratch_bytes) / (2 * MiB);
        CHECK(r == 0 && p.kv_pages == room && room < 64 * 256,
              "64 sequences: %d (%s), %u pages, want %" PRIu64, r, err, p.kv_pages, room);
        CHECK(p.needed + M40_CUDA_ALLOC_FILL_HEADROOM <= p.available,
              "the fill ate into its headroom: needed %" PRIu64 ", available %" PRIu64, p.needed,
              p.available);

        /* no cap: the same (the cap is only an upper bound) */
        c.kv_pages_max = 0;
        r = m40_cuda_alloc_plan_mem(free_mem, total, &c, &p, err, sizeof(err));
        CHECK(r == 0 && p.kv_pages == room, "no cap: %u pages, want %" PRIu64, p.kv_pages, room);

        /* vram_limit_mb below the free memory: the limit, and no fill headroom from it */
        c = model_8b(64);
        c.vram_limit_mb = 11264;
        r = m40_cuda_alloc_plan_mem(free_mem, total, &c, &p, err, sizeof(err));
        room = (11264 * MiB - c.weight_bytes - c.scratch_bytes) / (2 * MiB);
        CHECK(r == 0 && p.fill == 11264 * MiB && p.kv_pages == room && p.needed <= 11264 * MiB,
              "vram_limit_mb 11264: %d (%s), fill %" PRIu64 ", %u pages, want %" PRIu64, r, err,
              p.fill, p.kv_pages, room);

        /* a limit above the free memory less the headrooms changes nothing */
        c.vram_limit_mb = 23 * 1024 - 300;
        r = m40_cuda_alloc_plan_mem(free_mem, total, &c, &p, err, sizeof(err));
        CHECK(r == 0 && p.fill == free_mem - both, "limit above the fill: fill %" PRIu64, p.fill);

        /* a huge GPU and tiny pages: M40_CUDA_KV_PAGES_MAX, whatever the cap says */
        c = model_8b(0);
        c.kv_page_bytes = 256;
        c.kv_pages_max = UINT32_MAX;
        r = m40_cuda_alloc_plan_mem((uint64_t)1 << 50, (uint64_t)1 << 50, &c, &p, err, sizeof(err));
        CHECK(r == 0 && p.kv_pages == M40_CUDA_KV_PAGES_MAX, "huge GPU: %d (%s), %u pages", r, err,
              p.kv_pages);
}

static void test_min_and_explicit(void)
{
        struct m40_cuda_alloc_config c = model_8b(16);
        struct m40_cuda_alloc_plan p;
        char err[512] = "";
        int r;

        /* room for 228 pages after both headrooms, but one sequence needs 256: the
         * minimum, which still fits beside the runtime's headroom */
        r = m40_cuda_alloc_plan_mem(c.weight_bytes + c.scratch_bytes + 200 * MiB + 512 * MiB +
                                            M40_CUDA_ALLOC_HEADROOM,
                                    24 * GiB, &c, &p, err, sizeof(err));
        CHECK(r == 0 && p.kv_pages == 256, "the minimum: %d (%s), %u pages", r, err, p.kv_pages);

        /* not even the minimum fits: -ENOMEM, saying what is needed */
        r = m40_cuda_alloc_plan_mem(c.weight_bytes + c.scratch_bytes + 100 * MiB +
                                            M40_CUDA_ALLOC_HEADROOM,
                                    24 * GiB, &c, &p, err, sizeof(err));
        CHECK(r == -ENOMEM && p.kv_pages == 256 && strstr(err, "needs") &&
                      strstr(err, "KV cache 512.0 MiB in 256 pages"),
              "the minimum does not fit: %d, %u pages, '%s'", r, p.kv_pages, err);

        /* an explicit count is taken as it is: no cap, no fill */
        c.kv_pages = 5000;
        c.kv_pages_min = 5000;
        r = m40_cuda_alloc_plan_mem(23 * GiB, 24 * GiB, &c, &p, err, sizeof(err));
        CHECK(r == 0 && p.kv_pages == 5000 && p.fill == 0, "explicit: %d (%s), %u pages", r, err,
              p.kv_pages);
}

static void test_refused(void)
{
        struct m40_cuda_alloc_config c = model_8b(16);
        struct m40_cuda_alloc_plan p;
        char err[512] = "";

        c.kv_pages_max = 255; /* below one sequence */
        CHECK(m40_cuda_alloc_plan_mem(23 * GiB, 24 * GiB, &c, &p, err, sizeof(err)) == -EINVAL &&
                      strstr(err, "kv_pages_min 256 is above kv_pages_max 255"),
              "max below min: '%s'", err);
        CHECK(m40_cuda_alloc_plan_mem(23 * GiB, 24 * GiB, NULL, &p, NULL, 0) == -EINVAL,
              "NULL config");
}

int main(void)
{
        test_fill();
        test_min_and_explicit();
        test_refused();
        if (!failures)
                printf("ok: KV fill, cap, minimum and limits planned as stated\n");
        return failures ? 1 : 0;
}
