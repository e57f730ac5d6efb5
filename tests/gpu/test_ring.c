/* tests/gpu/test_ring.c - the persistent kernel's rings (cuda/runtime/ring.h) across PCIe: the
 * host's ends here against the device's ends (cuda/kernels/ring.cuh) in the echo probe of
 * cuda/kernels/ring_probe.h, both running at once.
 *
 * Owns the checks that: m40_ring_new() refuses bad capacities; for a few seconds a ring
 * pair (capacities 4 and 64, indexes from 0 and from near UINT32_MAX, so they wrap) carries
 * every command to the kernel byte for byte (the probe checks each against the fill rule)
 * and every event back in order (seq, step, token, slot, flags checked here), while the
 * host pushes and pops without waiting for the kernel; the probe ends on SHUTDOWN having
 * taken every command; a probe that gets no command, or whose events stay full, gives up
 * after its limit, and a full event ring is not overwritten. Prints the round trips a
 * second.
 *
 * Argument: seconds of each concurrent run (default 2; M40_TEST_QUICK: 0.3).
 * Exit 0 pass, 1 fail, 77 skip (no GPU, or a build without CUDA). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef M40_HAVE_CUDA

int main(void)
{
        printf("SKIP: this build has no CUDA (meson -Dcuda=enabled)\n");
        return 77;
}

#else

#include <time.h>

#include "cuda/kernels/ring_probe.h"
#include "cuda/runtime/launch.h"
#include "cuda/runtime/ring.h"
#include "gputest.h"

#define LIMIT (1LL << 32) /* clock cycles a probe's wait spins: about 2 s */

static double now_s(void)
{
        struct timespec t;

        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

struct probe_run {
        struct m40_ring *r;
        uint32_t start;
        uint32_t *status; /* device: 4 words */
        cudaStream_t stream;
};

/* Launch the probe; 0 or a failure counted. */
static int launch(struct probe_run *p, long long limit)
{
        struct m40_ring_dev v = m40_ring_device(p->r);
        int e;

        if (cudaMemsetAsync(p->status, 0xff, 4 * sizeof(uint32_t), p->stream) != cudaSuccess) {
                fail("status reset: %s", cudaGetErrorString(cudaGetLastError()));
                return -1;
        }
        e = m40_cuda_ring_probe(&v, p->status, limit, p->stream);
        CHECK(e == 0, "probe launch: %d %s", e, m40_cuda_last_error());
        return e;
}

/* Wait for the probe and fetch its status words. */
static int probe_wait(struct probe_run *p, uint32_t st[4])
{
        if (cudaStreamSynchronize(p->stream) != cudaSuccess ||
            cudaMemcpy(st, p->status, 4 * sizeof(uint32_t), cudaMemcpyDeviceToHost) !=
                    cudaSuccess) {
                fail("probe: %s", cudaGetErrorString(cudaGetLastError()));
                return -1;
        }
        return 0;
}

/* Whether event i is the probe's answer to command start + i (the last the SHUTDOWN). */
static int event_ok(const struct probe_run *p, const struct m40_ring_ev *ev, uint32_t i, int last)
{
        struct m40_ring_cmd c;
        const uint32_t seq = p->start + i;

        m40_ring_probe_fill(&c, seq);
        if (ev->seq == seq && ev->step == i && ev->token == c.token && ev->slot == c.slot &&
            ev->flags == (last ? M40_RING_EV_END : 0))
                return 1;
        fail("event %u: seq %u step %u token %d slot %u flags %#x; want seq %u token %d slot %u", i,
             ev->seq, ev->step, ev->token, ev->slot, ev->flags, seq, c.token, c.slot);
        return 0;
}

/* Pop what has come and check it; the count popped, or -1 to give up. */
static int pop_check(struct probe_run *p, uint32_t *popped, uint32_t shutdown_at)
{
        struct m40_ring_ev evs[32];
        int k = m40_ring_pop_events(p->r, evs, 32);

        if (k < 0) {
                fail("pop: %d", k);
                return -1;
        }
        for (int i = 0; i < k; i++, (*popped)++)
                if (!event_ok(p, &evs[i], *popped, *popped == shutdown_at) && failures > 20)
                        return -1;
        return k;
}

/* The concurrent run: push commands for secs seconds (then a SHUTDOWN) and pop the events,
 * never waiting for the kernel except when the commands are full. */
static void echo(struct probe_run *p, double secs, const char *name)
{
        uint32_t pushed = 0, popped = 0, shutdown_at = UINT32_MAX, st[4];
        const double t0 = now_s();
        double last = t0;

        if (launch(p, LIMIT))
                return;
        for (;;) {
                struct m40_ring_cmd c;
                int k, e = 0;

                while (shutdown_at == UINT32_MAX) { /* push while there is space */
                        const int end = now_s() - t0 > secs;

                        m40_ring_probe_fill(&c, p->start + pushed);
                        if (end)
                                c.op = M40_RING_SHUTDOWN;
                        if ((e = m40_ring_push_cmd(p->r, &c)))
                                break;
                        if (end)
                                shutdown_at = pushed;
                        pushed++;
                }
                if (e && e != -EAGAIN) {
                        fail("%s: push %u: %d", name, pushed, e);
                        break;
                }
                if ((k = pop_check(p, &popped, shutdown_at)) < 0)
                        break;
                if (shutdown_at != UINT32_MAX && popped > shutdown_at)
                        break;
                if (k) {
                        last = now_s();
                } else if (now_s() - last > 5) {
                        fail("%s: no event for 5 s (%u pushed, %u popped)", name, pushed, popped);
                        break;
                }
        }
        if (probe_wait(p, st))
                return;
        CHECK(st[M40_RING_PROBE_STATE] == M40_RING_PROBE_DONE, "%s: probe state %u", name,
              st[M40_RING_PROBE_STATE]);
        CHECK(st[M40_RING_PROBE_TAKEN] == pushed, "%s: probe took %u of %u", name,
              st[M40_RING_PROBE_TAKEN], pushed);
        CHECK(st[M40_RING_PROBE_BAD] == 0, "%s: %u commands arrived wrong, the first %u", name,
              st[M40_RING_PROBE_BAD], st[M40_RING_PROBE_FIRST]);
        CHECK(popped == pushed, "%s: %u events for %u commands", name, popped, pushed);
        printf("%s: %u commands and events in %.2f s: %.0f round trips/s\n", name, pushed,
               now_s() - t0, pushed / (now_s() - t0));
        p->start += pushed;
}

/* The limits: no command (the probe gives up), then events left full (it gives up without
 * overwriting the unread one). Ring of 4 commands and 1 event. */
static void limits(struct probe_run *p)
{
        struct m40_ring_cmd c;
        struct m40_ring_ev ev;
        uint32_t st[4];

        if (launch(p, 1000000) || probe_wait(p, st)) /* ~1 ms */
                return;
        CHECK(st[M40_RING_PROBE_STATE] == M40_RING_PROBE_NO_CMD && st[M40_RING_PROBE_TAKEN] == 0,
              "idle probe: state %u, took %u", st[0], st[1]);
        for (uint32_t i = 0; i < 2; i++) {
                m40_ring_probe_fill(&c, p->start + i);
                CHECK(m40_ring_push_cmd(p->r, &c) == 0, "limits: push %u", i);
        }
        if (launch(p, 1000000) || probe_wait(p, st))
                return;
        CHECK(st[M40_RING_PROBE_STATE] == M40_RING_PROBE_NO_SPACE && st[M40_RING_PROBE_TAKEN] == 2,
              "full events: state %u, took %u", st[0], st[1]);
        CHECK(m40_ring_pop_events(p->r, &ev, 1) == 1 && event_ok(p, &ev, 0, 0),
              "the unread event was not kept");
        CHECK(m40_ring_pop_events(p->r, &ev, 1) == 0, "an event past the full ring");
}

/* One configuration: new rings (or rings over the test's own pinned memory from start). */
static void run(uint32_t cmd_cap, uint32_t ev_cap, int own, uint32_t start, double secs)
{
        struct probe_run p = {.start = own ? start : 0};
        struct m40_ring own_r;
        void *mem = NULL, *dev = NULL;
        char err[256] = "", name[64];
        int e;

        snprintf(name, sizeof(name), "caps %u/%u from %u", cmd_cap, ev_cap, p.start);
        if (own) {
                size_t bytes = m40_ring_bytes(cmd_cap, ev_cap);

                e = cudaHostAlloc(&mem, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
                if (!e)
                        e = cudaHostGetDevicePointer(&dev, mem, 0);
                if (!e && m40_ring_init(&own_r, mem, dev, bytes, cmd_cap, ev_cap, start) == 0)
                        p.r = &own_r;
                else
                        fail("%s: pinned memory: %d", name, e);
        } else {
                e = m40_ring_new(cmd_cap, ev_cap, &p.r, err, sizeof(err));
                CHECK(e == 0, "%s: m40_ring_new: %d %s", name, e, err);
        }
        if (!p.r || cudaMalloc((void **)&p.status, 4 * sizeof(uint32_t)) != cudaSuccess ||
            cudaStreamCreateWithFlags(&p.stream, cudaStreamNonBlocking) != cudaSuccess) {
                fail("%s: setup", name);
        } else if (ev_cap == 1) {
                limits(&p);
        } else {
                echo(&p, secs, name);
                echo(&p, secs / 4, name); /* a second launch goes on from the first's indexes */
        }
        if (p.stream)
                cudaStreamDestroy(p.stream);
        cudaFree(p.status);
        if (own)
                cudaFreeHost(mem);
        else
                m40_ring_free(p.r);
}

int main(int argc, char **argv)
{
        int code;
        struct m40_cuda_device *d = gpu_open(&code);
        const double secs = argc > 1 ? atof(argv[1]) : quick_mode() ? 0.3 : 2.0;
        struct m40_ring *r = NULL;
        struct m40_ring_dev v = {0};
        uint32_t word;

        if (!d)
                return code;
        CHECK(m40_ring_new(3, 4, &r, NULL, 0) == -EINVAL && !r, "capacity 3 taken");
        CHECK(m40_ring_new(4, 0, &r, NULL, 0) == -EINVAL && !r, "capacity 0 taken");
        CHECK(m40_ring_new(4, 4, NULL, NULL, 0) == -EINVAL, "NULL ret taken");
        CHECK(m40_ring_free(NULL) == NULL, "free(NULL)");
        CHECK(m40_cuda_ring_probe(NULL, &word, 1, NULL) == -EINVAL, "NULL view taken");
        CHECK(m40_cuda_ring_probe(&v, NULL, 1, NULL) == -EINVAL, "NULL status taken");
        CHECK(m40_cuda_ring_probe(&v, &word, 0, NULL) == -EINVAL, "limit 0 taken");
        run(4, 4, 0, 0, secs);
        run(64, 64, 0, 0, secs);
        run(4, 64, 1, UINT32_MAX - 100000, secs);
        run(64, 4, 1, UINT32_MAX - 3, secs);
        run(4, 1, 1, UINT32_MAX, secs);
        m40_cuda_device_free(d);
        return finish();
}

#endif
