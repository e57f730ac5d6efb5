/* cuda/kernels/sync_probe.cu - the probe of sync_probe.h: chains of grid barriers and of
 * dataflow waits (persist.cuh) on the resident blocks, checked and timed.
 *
 * k_ps_probe (G blocks of PS_THREADS) first checks residency: every block arrives at a
 * counter and waits for all G (a block that never starts makes the others run out).
 * Then, by mode:
 *   barrier: for s = 1..S, thread 0 of block b writes v[s][b] = mix(v[s-1][(b + s) % G],
 *            b, s) and all blocks meet at a grid barrier;
 *   flow:    block b waits only for block n = (b + s) % G's counter to count its stage
 *            s - 1, then writes v[s][b] the same way and arrives at its own counter.
 * Each stage has its own row v[s] (no row is written twice in a launch), poisoned by the
 * host first, so a wait that does not order the data reads poison or a stale row and the
 * host's replay of the chain tells. The counters are never reset: the host keeps their
 * bases across launches (persist.cuh). Maxwell-clean: persist.cuh's primitives, __ldcg. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "cuda/kernels/persist.cuh"
#include "cuda/kernels/sync_probe.h"
#include "cuda/runtime/launch.h"
#include "m40/error.h"

#define PS_THREADS 128
#define PS_LIMIT   (1LL << 31) /* clock cycles a wait spins: about a second */
#define PS_REPS    20          /* residency-only launches averaged for launch_us */

enum { PS_RESIDENT, PS_BARRIER, PS_FLOW };

struct ps_args {
        unsigned *present, *barrier, *flow; /* flow: a counter a block */
        unsigned present_to, barrier_base, flow_base;
        unsigned *v; /* (S + 1) x G */
        int *fail;   /* 0, or 1 + the first stage a wait ran out at */
        int mode;
        unsigned stages;
};

__host__ __device__ static inline unsigned ps_mix(unsigned x, unsigned b, unsigned s)
{
        return x * 2654435761u + (b << 8) + s;
}

static __global__ void __launch_bounds__(PS_THREADS) k_ps_probe(const struct ps_args a)
{
        const unsigned g = gridDim.x, b = blockIdx.x;

        if (!ps_grid_sync(a.present, a.present_to, PS_LIMIT)) {
                if (threadIdx.x == 0)
                        atomicCAS(a.fail, 0, 1);
                return;
        }
        for (unsigned s = 1; a.mode != PS_RESIDENT && s <= a.stages; s++) {
                const unsigned n = (b + s) % g;

                if (a.mode == PS_FLOW && !ps_wait(&a.flow[n], a.flow_base + s - 1, PS_LIMIT)) {
                        if (threadIdx.x == 0)
                                atomicCAS(a.fail, 0, 1 + (int)s);
                        return;
                }
                if (threadIdx.x == 0)
                        a.v[(size_t)s * g + b] =
                                ps_mix(__ldcg(&a.v[(size_t)(s - 1) * g + n]), b, s);
                if (a.mode == PS_FLOW) {
                        ps_arrive(&a.flow[b]);
                } else if (!ps_grid_sync(a.barrier, a.barrier_base + s * g, PS_LIMIT)) {
                        if (threadIdx.x == 0)
                                atomicCAS(a.fail, 0, 1 + (int)s);
                        return;
                }
        }
}

/* What a probe run holds: its device buffers, the host's copy of the chain, the counters'
 * bases and the timing events. */
struct ps_run {
        struct ps_args a;
        unsigned *host, *want; /* row 0 and poison as uploaded; the replayed last row */
        size_t rows;
        cudaEvent_t e0, e1;
        char *err;
        size_t errlen;
};

static int ps_say(struct ps_run *r, int ret, const char *what)
{
        if (r->err && r->errlen)
                snprintf(r->err, r->errlen, "%s", what);
        return ret;
}

/* Launch one probe of `mode` and time it (ms); check what it carried. */
static int ps_launch(struct ps_run *r, int mode, unsigned g, float *ms)
{
        struct ps_args a = r->a;
        int fail = 0, e;

        a.mode = mode;
        r->a.present_to += g;
        a.present_to = r->a.present_to;
        if (mode != PS_RESIDENT && cudaMemcpy(a.v, r->host, r->rows * g * sizeof(unsigned),
                                              cudaMemcpyHostToDevice) != cudaSuccess)
                return m40_cuda_launch_status("sync probe: upload");
        if (cudaEventRecord(r->e0, 0) != cudaSuccess)
                return m40_cuda_launch_status("sync probe: event");
        k_ps_probe<<<g, PS_THREADS>>>(a);
        if ((e = m40_cuda_launch_status("k_ps_probe")))
                return e;
        if (cudaEventRecord(r->e1, 0) != cudaSuccess ||
            cudaEventSynchronize(r->e1) != cudaSuccess ||
            cudaEventElapsedTime(ms, r->e0, r->e1) != cudaSuccess ||
            cudaMemcpy(&fail, a.fail, sizeof(fail), cudaMemcpyDeviceToHost) != cudaSuccess)
                return m40_cuda_launch_status("sync probe: run");
        if (mode == PS_BARRIER)
                r->a.barrier_base += a.stages * g;
        else if (mode == PS_FLOW)
                r->a.flow_base += a.stages;
        if (fail == 1)
                return ps_say(r, -EIO, "not every block of the probe ran at once");
        if (fail)
                return ps_say(r, -EIO, "a wait of the probe ran out");
        if (mode == PS_RESIDENT)
                return 0;
        unsigned *last = r->host + r->rows * g; /* scratch past the uploaded rows */

        if (cudaMemcpy(last, a.v + (size_t)a.stages * g, g * sizeof(unsigned),
                       cudaMemcpyDeviceToHost) != cudaSuccess)
                return m40_cuda_launch_status("sync probe: download");
        for (unsigned b = 0; b < g; b++)
                if (last[b] != r->want[b])
                        return ps_say(r, -EIO,
                                      mode == PS_FLOW ? "a dataflow wait did not order the data"
                                                      : "a grid barrier did not order the data");
        return 0;
}

/* The host's replay of the chain: want = the last row the probe must leave. */
static int ps_replay(struct ps_run *r, unsigned g, unsigned stages)
{
        unsigned *cur = (unsigned *)malloc(g * sizeof(unsigned));

        if (!cur)
                return -ENOMEM;
        for (unsigned b = 0; b < g; b++)
                r->want[b] = r->host[b];
        for (unsigned s = 1; s <= stages; s++) {
                for (unsigned b = 0; b < g; b++)
                        cur[b] = ps_mix(r->want[(b + s) % g], b, s);
                for (unsigned b = 0; b < g; b++)
                        r->want[b] = cur[b];
        }
        free(cur);
        return 0;
}

static int ps_alloc(struct ps_run *r, unsigned g, unsigned stages)
{
        uint64_t x = 0x9e3779b97f4a7c15ULL;

        r->rows = (size_t)stages + 1;
        r->host = (unsigned *)malloc((r->rows + 1) * g * sizeof(unsigned));
        r->want = (unsigned *)malloc(g * sizeof(unsigned));
        if (!r->host || !r->want)
                return -ENOMEM;
        for (size_t i = 0; i < r->rows * g; i++) {
                x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
                r->host[i] = i < g ? (unsigned)(x * 0x2545f4914f6cdd1dULL >> 32) : 0xffffffffu;
        }
        if (cudaMalloc((void **)&r->a.present, (3 + (size_t)g) * sizeof(unsigned)) != cudaSuccess ||
            cudaMalloc((void **)&r->a.v, r->rows * g * sizeof(unsigned)) != cudaSuccess ||
            cudaMemset(r->a.present, 0, (3 + (size_t)g) * sizeof(unsigned)) != cudaSuccess ||
            cudaEventCreate(&r->e0) != cudaSuccess || cudaEventCreate(&r->e1) != cudaSuccess)
                return m40_cuda_launch_status("sync probe: buffers");
        r->a.barrier = r->a.present + 1;
        r->a.fail = (int *)(r->a.present + 2);
        r->a.flow = r->a.present + 3;
        r->a.stages = stages;
        return ps_replay(r, g, stages);
}

static void ps_free(struct ps_run *r)
{
        cudaFree(r->a.present);
        cudaFree(r->a.v);
        if (r->e0)
                cudaEventDestroy(r->e0);
        if (r->e1)
                cudaEventDestroy(r->e1);
        free(r->host);
        free(r->want);
}

/* Resident blocks of the probe an SM (occupancy API), at most per_sm; 0 on failure. */
static int ps_per_sm(int per_sm)
{
        int occ = 0;

        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k_ps_probe, PS_THREADS, 0) !=
            cudaSuccess)
                return 0;
        return occ < per_sm ? occ : per_sm;
}

extern "C" int m40_cuda_sync_probe(int per_sm, uint32_t stages, struct m40_cuda_sync_probe *out,
                                   char *err, size_t errlen)
{
        struct ps_run r = {};
        int dev, sms = 0, k, e;
        float ms = 0.0f, sum = 0.0f;

        if (!out || per_sm < 1 || per_sm > 32 || stages < 1 ||
            stages > M40_CUDA_SYNC_PROBE_MAX_STAGES)
                return -EINVAL;
        r.err = err;
        r.errlen = errlen;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
            !(k = ps_per_sm(per_sm))) {
                e = m40_cuda_launch_status("sync probe: device");
                return e ? e : ps_say(&r, -EIO, "the probe kernel fits on no multiprocessor");
        }
        const unsigned g = (unsigned)(sms * k);

        e = ps_alloc(&r, g, stages);
        for (int i = 0; !e && i <= PS_REPS; i++) { /* the first one warms up */
                e = ps_launch(&r, PS_RESIDENT, g, &ms);
                sum += i ? ms : 0.0f;
        }
        out->sms = sms;
        out->blocks = (int)g;
        out->threads = PS_THREADS;
        out->stages = stages;
        out->launch_us = 1e3 * sum / PS_REPS;
        if (!e)
                e = ps_launch(&r, PS_BARRIER, g, &ms);
        out->barrier_us = 1e3 * ms / stages - out->launch_us / stages;
        if (!e)
                e = ps_launch(&r, PS_FLOW, g, &ms);
        out->hop_us = 1e3 * ms / stages - out->launch_us / stages;
        ps_free(&r);
        return e;
}
