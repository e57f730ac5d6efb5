/* tests/unit/test_ring.c - the protocol of the persistent kernel's rings (cuda/runtime/ring.h)
 * on the CPU, over malloc'ed memory: the host's ends (push commands, pop events) against the
 * device's ends as ring.c runs them on the CPU (the same order as cuda/kernels/ring.cuh).
 *
 * Owns the checks of: argument errors; the empty and full edges of both rings (a full ring
 * refuses without overwriting, a consumer sees nothing before it is published); the 32-bit
 * indexes wrapping through UINT32_MAX; corrupt indexes (-EIO); and two threads, a host and a
 * device stand-in, moving millions of records at once through small rings (capacities 4 and
 * 64), every command checked byte for byte by the device thread (ring_probe.h's fill rule)
 * and every event in order by the host thread. No GPU.
 *
 * Argument: a record count for each threaded run (default 1 << 20). Exit 0 pass, 1 fail. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/kernels/ring_probe.h"
#include "cuda/runtime/ring.h"
#include "tests/check.h"

#define STALL_S 20 /* a threaded run that makes no progress this long fails */

static void *ring_mem(uint32_t cmd_cap, uint32_t ev_cap, size_t *bytes)
{
        *bytes = m40_ring_bytes(cmd_cap, ev_cap);
        return aligned_alloc(M40_RING_LINE, *bytes);
}

static double now_s(void)
{
        struct timespec t;

        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* Waiting for the other thread: spin a little, then give the core away (2 cores, shared). */
static void backoff(unsigned *spins)
{
        if (++*spins > 64) {
                sched_yield();
                *spins = 0;
        }
}

static void test_args(void)
{
        struct m40_ring r;
        struct m40_ring_cmd c;
        struct m40_ring_ev ev;
        size_t bytes;
        char *mem = ring_mem(4, 4, &bytes);

        CHECK(bytes == 4 * 128 + 4 * 64 + 128, "bytes(4, 4) = %zu", bytes);
        CHECK(m40_ring_bytes(0, 4) == 0 && m40_ring_bytes(4, 0) == 0, "capacity 0 taken");
        CHECK(m40_ring_bytes(3, 4) == 0 && m40_ring_bytes(4, 48) == 0, "non-power of two taken");
        CHECK(m40_ring_bytes(M40_RING_MAX_CAP * 2, 4) == 0, "capacity over the limit taken");
        CHECK(m40_ring_bytes(1, M40_RING_MAX_CAP) != 0, "capacities 1 and the limit refused");
        CHECK(m40_ring_init(NULL, mem, mem, bytes, 4, 4, 0) == -EINVAL, "NULL ring taken");
        CHECK(m40_ring_init(&r, NULL, mem, bytes, 4, 4, 0) == -EINVAL, "NULL memory taken");
        CHECK(m40_ring_init(&r, mem, NULL, bytes, 4, 4, 0) == -EINVAL, "NULL device memory");
        CHECK(m40_ring_init(&r, mem, mem, bytes - 1, 4, 4, 0) == -EINVAL, "short memory taken");
        CHECK(m40_ring_init(&r, mem + 64, mem + 64, bytes - 64, 2, 2, 0) == -EINVAL,
              "misaligned memory taken");
        CHECK(m40_ring_init(&r, mem, mem, bytes, 4, 5, 0) == -EINVAL, "capacity 5 taken");
        CHECK(m40_ring_init(&r, mem, mem, bytes, 4, 4, 7) == 0, "init failed");
        CHECK(*r.cmd.head == 7 && *r.cmd.tail == 7 && *r.ev.head == 7 && *r.ev.tail == 7,
              "indexes not at the start");
        CHECK(r.dev.cmd.rec == r.cmd.rec && r.dev.ev.head == r.ev.head, "device view differs");

        m40_ring_probe_fill(&c, 0);
        CHECK(m40_ring_push_cmd(NULL, &c) == -EINVAL, "NULL ring pushed");
        CHECK(m40_ring_push_cmd(&r, NULL) == -EINVAL, "NULL command pushed");
        c.op = 0;
        CHECK(m40_ring_push_cmd(&r, &c) == -EINVAL, "op 0 pushed");
        c.op = M40_RING_OP_MAX + 1;
        CHECK(m40_ring_push_cmd(&r, &c) == -EINVAL, "op past the last pushed");
        c.op = M40_RING_CANCEL;
        c.slot = M40_RING_MAX_SLOTS;
        CHECK(m40_ring_push_cmd(&r, &c) == -EINVAL, "slot %u pushed", c.slot);
        c.slot = 0;
        c.zero = 1;
        CHECK(m40_ring_push_cmd(&r, &c) == -EINVAL, "nonzero pad pushed");
        c.zero = 0;
        c.op = M40_RING_DRAIN;
        c.slot = 9999; /* DRAIN names no slot */
        CHECK(m40_ring_push_cmd(&r, &c) == 0, "DRAIN refused");
        CHECK(*r.cmd.head == 8, "head %u after one push", *r.cmd.head);
        CHECK(m40_ring_pop_events(&r, NULL, 1) == -EINVAL, "NULL events popped");
        CHECK(m40_ring_pop_events(NULL, &ev, 1) == -EINVAL, "NULL ring popped");
        CHECK(m40_ring_pop_events(&r, NULL, 0) == 0, "pop of 0 events failed");
        free(mem);
}

/* One device step on the CPU: take a command, check it is seq's; 1 taken, 0 none. */
static int take_check(struct m40_ring_dev *v, uint32_t seq, const char *when)
{
        struct m40_ring_cmd c, want;
        int r = m40_ring_dev_take_cmd(v, &c);

        if (r != 1) {
                CHECK(r == 0, "%s: take %d", when, r);
                return r;
        }
        m40_ring_probe_fill(&want, seq);
        CHECK(memcmp(&c, &want, sizeof(c)) == 0, "%s: command %u: seq %u op %u slot %u", when, seq,
              c.seq, c.op, c.slot);
        return 1;
}

static void push_seq(struct m40_ring *r, uint32_t seq, int want, const char *when)
{
        struct m40_ring_cmd c;
        int e;

        m40_ring_probe_fill(&c, seq);
        c.seq = 0xdeadbeef; /* the push stamps it */
        e = m40_ring_push_cmd(r, &c);
        CHECK(e == want, "%s: push %u: %d, want %d", when, seq, e, want);
}

/* Single thread, capacity 4 both ways, from start (near UINT32_MAX: the indexes wrap). */
static void test_edges(uint32_t start)
{
        struct m40_ring r;
        struct m40_ring_dev v;
        struct m40_ring_ev ev = {0}, got[8];
        size_t bytes;
        void *mem = ring_mem(4, 4, &bytes);
        uint32_t s = start, t = start;

        CHECK(m40_ring_init(&r, mem, mem, bytes, 4, 4, start) == 0, "init at %u", start);
        v = m40_ring_device(&r);
        m40_ring_dev_open(&v);
        CHECK(take_check(&v, s, "empty") == 0, "took from an empty ring");
        CHECK(m40_ring_pop_events(&r, got, 8) == 0, "popped from an empty ring");
        for (int i = 0; i < 4; i++)
                push_seq(&r, s++, 0, "fill");
        push_seq(&r, s, -EAGAIN, "full");
        CHECK(m40_ring_cmd_pending(&r) == 4, "pending %u, want 4", m40_ring_cmd_pending(&r));
        CHECK(take_check(&v, t++, "first") == 1, "first not taken");
        push_seq(&r, s++, 0, "after one taken");
        push_seq(&r, s, -EAGAIN, "full again");
        for (int i = 0; i < 4; i++)
                CHECK(take_check(&v, t++, "drain") == 1, "drain %d not taken", i);
        CHECK(take_check(&v, t, "drained") == 0, "took past the head");
        CHECK(m40_ring_cmd_pending(&r) == 0, "pending %u, want 0", m40_ring_cmd_pending(&r));

        for (uint32_t i = 0; i < 4; i++) {
                ev.seq = start + i;
                CHECK(m40_ring_dev_put_event(&v, &ev) == 0, "put %u", i);
        }
        ev.seq = start + 4;
        CHECK(m40_ring_dev_put_event(&v, &ev) == -EAGAIN, "put into a full ring");
        CHECK(m40_ring_pop_events(&r, got, 1) == 1 && got[0].seq == start, "pop one");
        CHECK(m40_ring_dev_put_event(&v, &ev) == 0, "put after one popped");
        CHECK(m40_ring_pop_events(&r, got, 8) == 4, "pop the rest");
        for (uint32_t i = 0; i < 4; i++)
                CHECK(got[i].seq == start + 1 + i, "event %u: seq %u", i, got[i].seq);
        CHECK(m40_ring_pop_events(&r, got, 8) == 0, "popped past the head");
        CHECK(*r.cmd.head == start + 5 && *r.ev.tail == start + 5, "indexes %u %u", *r.cmd.head,
              *r.ev.tail);
        free(mem);
}

/* Impossible indexes: each end reports -EIO instead of using them. */
static void test_corrupt(void)
{
        struct m40_ring r;
        struct m40_ring_dev v;
        struct m40_ring_cmd c;
        struct m40_ring_ev ev = {0};
        size_t bytes;
        void *mem = ring_mem(4, 4, &bytes);

        m40_ring_init(&r, mem, mem, bytes, 4, 4, UINT32_MAX - 1);
        v = m40_ring_device(&r);
        m40_ring_dev_open(&v);
        *r.cmd.head = UINT32_MAX - 1 + 5; /* 5 ahead of the tail in a ring of 4 */
        CHECK(m40_ring_dev_take_cmd(&v, &c) == -EIO, "took under an impossible head");
        *r.ev.head = UINT32_MAX - 2; /* behind the tail */
        CHECK(m40_ring_pop_events(&r, &ev, 1) == -EIO, "popped under a head behind the tail");

        m40_ring_init(&r, mem, mem, bytes, 4, 4, 100);
        v = m40_ring_device(&r);
        m40_ring_dev_open(&v);
        for (uint32_t i = 0; i < 4; i++) {
                push_seq(&r, 100 + i, 0, "corrupt fill");
                CHECK(m40_ring_dev_put_event(&v, &ev) == 0, "corrupt fill: put %u", i);
        }
        *r.cmd.tail = 105; /* ahead of the head */
        push_seq(&r, 104, -EIO, "tail ahead of the head");
        *r.ev.tail = 105;
        CHECK(m40_ring_dev_put_event(&v, &ev) == -EIO, "put under a tail ahead of the head");
        free(mem);
}

/* The threaded run: the host pushes n commands (the last a SHUTDOWN) and pops the events;
 * the device thread answers each command with one event, as ring_probe.cu does. */
struct run {
        struct m40_ring r;
        uint32_t start, n;
        uint32_t dev_bad, dev_taken; /* the device thread's findings */
        atomic_int stop;             /* set by the host when it is done */
};

static void *device_thread(void *arg)
{
        struct run *u = arg;
        struct m40_ring_dev v = m40_ring_device(&u->r);
        struct m40_ring_cmd c, want;
        struct m40_ring_ev ev;
        unsigned spins = 0;

        m40_ring_dev_open(&v);
        while (!atomic_load(&u->stop)) {
                int e = m40_ring_dev_take_cmd(&v, &c);

                if (e != 1) {
                        if (e < 0)
                                u->dev_bad++;
                        backoff(&spins);
                        continue;
                }
                m40_ring_probe_fill(&want, v.cmd.next - 1);
                if (c.op == M40_RING_SHUTDOWN)
                        want.op = M40_RING_SHUTDOWN;
                if (memcmp(&c, &want, sizeof(c)))
                        u->dev_bad++;
                ev = (struct m40_ring_ev){.seq = c.seq,
                                          .step = u->dev_taken++,
                                          .token = c.token,
                                          .slot = c.slot,
                                          .flags = c.op == M40_RING_SHUTDOWN ? M40_RING_EV_END : 0};
                while ((e = m40_ring_dev_put_event(&v, &ev)) == -EAGAIN && !atomic_load(&u->stop))
                        backoff(&spins);
                if (e || c.op == M40_RING_SHUTDOWN)
                        break;
        }
        return NULL;
}

/* The host's check of event i. */
static int check_event(const struct run *u, const struct m40_ring_ev *ev, uint32_t i)
{
        struct m40_ring_cmd c;
        const uint32_t seq = u->start + i;
        const uint16_t flags = i == u->n - 1 ? M40_RING_EV_END : 0;

        m40_ring_probe_fill(&c, seq);
        if (ev->seq == seq && ev->step == i && ev->token == c.token && ev->slot == c.slot &&
            ev->flags == flags)
                return 0;
        CHECK(0, "event %u: seq %u step %u token %d slot %u flags %u; want %u %u %d %u %u", i,
              ev->seq, ev->step, ev->token, ev->slot, ev->flags, seq, i, c.token, c.slot, flags);
        return -1;
}

/* Host side of the run: push while there is space, pop what has come; false on a stall. */
static void host_loop(struct run *u)
{
        struct m40_ring_ev evs[16];
        uint32_t pushed = 0, popped = 0;
        unsigned spins = 0;
        double last = now_s();

        while (popped < u->n) {
                int progress = 0, k;

                while (pushed < u->n) {
                        struct m40_ring_cmd c;

                        m40_ring_probe_fill(&c, u->start + pushed);
                        if (pushed == u->n - 1)
                                c.op = M40_RING_SHUTDOWN;
                        k = m40_ring_push_cmd(&u->r, &c);
                        if (k == -EAGAIN)
                                break;
                        if (k) {
                                CHECK(0, "push %u: %d", pushed, k);
                                return;
                        }
                        pushed++, progress = 1;
                }
                k = m40_ring_pop_events(&u->r, evs, 1 + popped % 16);
                CHECK(k >= 0, "pop: %d", k);
                for (int i = 0; i < k; i++)
                        if (check_event(u, &evs[i], popped++) && failures > 20)
                                return;
                if (k > 0 || progress) {
                        last = now_s();
                } else if (now_s() - last > STALL_S) {
                        CHECK(0, "stalled at %u pushed, %u popped", pushed, popped);
                        return;
                } else {
                        backoff(&spins);
                }
        }
}

static void test_threads(uint32_t cmd_cap, uint32_t ev_cap, uint32_t start, uint32_t n)
{
        struct run u = {.start = start, .n = n};
        size_t bytes;
        void *mem = ring_mem(cmd_cap, ev_cap, &bytes);
        pthread_t t;
        double t0 = now_s();

        CHECK(m40_ring_init(&u.r, mem, mem, bytes, cmd_cap, ev_cap, start) == 0, "init");
        if (pthread_create(&t, NULL, device_thread, &u)) {
                CHECK(0, "pthread_create");
                free(mem);
                return;
        }
        host_loop(&u);
        atomic_store(&u.stop, 1);
        pthread_join(t, NULL);
        CHECK(u.dev_bad == 0, "the device thread found %u bad commands", u.dev_bad);
        CHECK(u.dev_taken == n, "the device thread took %u of %u", u.dev_taken, n);
        CHECK(*u.r.cmd.tail == start + n && *u.r.ev.tail == start + n, "final tails %u %u",
              *u.r.cmd.tail, *u.r.ev.tail);
        printf("caps %u/%u from %u: %u records each way in %.2f s\n", cmd_cap, ev_cap, start, n,
               now_s() - t0);
        free(mem);
}

int main(int argc, char **argv)
{
        const uint32_t n = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 0) : 1u << 20;

        if (n < 1) {
                fprintf(stderr, "usage: test_ring [records >= 1]\n");
                return 1;
        }
        test_args();
        test_edges(0);
        test_edges(UINT32_MAX - 2); /* wraps mid-way */
        test_edges(UINT32_MAX);
        test_corrupt();
        test_threads(4, 4, 0, n);
        test_threads(64, 64, UINT32_MAX - n / 2, n);
        test_threads(4, 64, UINT32_MAX - 3, n);
        test_threads(64, 4, 0x7fffffffu - 5, n);
        test_threads(1, 1, UINT32_MAX, n / 16 + 1);
        if (failures) {
                printf("%d check(s) failed\n", failures);
                return 1;
        }
        printf("all checks passed\n");
        return 0;
}
