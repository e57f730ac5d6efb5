/* cuda/runtime/ring_pinned.c - the persistent kernel's rings (ring.h) in mapped pinned host
 * memory: m40_ring_new() allocates it and lays the rings over it with m40_ring_init(),
 * m40_ring_free() gives it back.
 *
 * The memory is cudaHostAlloc(cudaHostAllocMapped | cudaHostAllocPortable): mapped so the
 * kernel reads and writes it over PCIe while it runs, portable so every context may use
 * it. Not write-combined: the host reads the events, and write-combined memory is slow to
 * read. The device's address comes from cudaHostGetDevicePointer() (with unified
 * addressing it equals the host's). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "cuda/runtime/launch.h"
#include "cuda/runtime/ring.h"
#include "m40/error.h"

int m40_ring_new(uint32_t cmd_cap, uint32_t ev_cap, struct m40_ring **ret, char *err, size_t errlen)
{
        const size_t bytes = m40_ring_bytes(cmd_cap, ev_cap);
        struct m40_ring *r;
        void *mem = NULL, *dev = NULL;
        int e;

        if (!ret || bytes == 0) {
                if (err && errlen)
                        snprintf(err, errlen,
                                 "ring: capacities %u and %u: each must be a "
                                 "power of two in 1..%u",
                                 cmd_cap, ev_cap, M40_RING_MAX_CAP);
                return -EINVAL;
        }
        r = malloc(sizeof(*r));
        if (!r)
                return -ENOMEM;
        e = m40_cuda_status(cudaHostAlloc(&mem, bytes, cudaHostAllocMapped | cudaHostAllocPortable),
                            "ring: cudaHostAlloc", err, errlen);
        if (e)
                goto fail_free;
        e = m40_cuda_status(cudaHostGetDevicePointer(&dev, mem, 0),
                            "ring: cudaHostGetDevicePointer", err, errlen);
        if (e)
                goto fail_host;
        e = m40_ring_init(r, mem, dev, bytes, cmd_cap, ev_cap, 0);
        if (e) { /* cudaHostAlloc's memory is page-aligned: not expected */
                if (err && errlen)
                        snprintf(err, errlen, "ring: pinned memory not %u-byte aligned",
                                 M40_RING_LINE);
                goto fail_host;
        }
        r->pinned = mem;
        *ret = r;
        return 0;

fail_host:
        cudaFreeHost(mem);
fail_free:
        free(r);
        return e;
}

struct m40_ring *m40_ring_free(struct m40_ring *r)
{
        if (r) {
                if (r->pinned)
                        cudaFreeHost(r->pinned);
                free(r);
        }
        return NULL;
}
