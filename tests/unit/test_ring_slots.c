/* tests/unit/test_ring_slots.c - the host's side of the persistent kernel's slots
 * (cuda/runtime/ring_slots.h) against a CPU stand-in of the kernel's side of the contract,
 * over the rings of cuda/runtime/ring.h in malloc'ed memory.
 *
 * The stand-in (struct fake) is what ring_slots.h says the kernel does: commands in ring
 * order between steps; a slot it admits produces token (cmd.token + 7 k) % TOK_MOD at its
 * k-th step, the last one (k == cmd.pages) with M40_RING_EV_END; CANCEL ends the slot's
 * sequence (or nothing, if it has ended) and puts the ACK; DRAIN acknowledged, then the
 * stand-in stops once no slot runs.
 *
 * Owns the checks of: argument errors; admit, tokens, the end and the slot's reuse; cancel
 * (no token after it, the CANCELLED record, the ACK of a sequence that ended first); no
 * free slot (-EBUSY), a sequence admitted twice (-EEXIST), a full command ring (-EAGAIN
 * with nothing changed), commands after a stop (-EPIPE); events that break the contract
 * (-EIO); and two threads, the host side and the stand-in, running thousands of sequences
 * admitted and cancelled at random through small rings, every sequence's tokens checked in
 * order, each ending exactly once, no slot left in use. No GPU.
 *
 * Argument: the sequences of the threaded run (default 20000). Exit 0 pass, 1 fail. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/runtime/ring_slots.h"
#include "tests/check.h"

#define TOK_MOD 100003
#define STALL_S 20 /* a threaded run that makes no progress this long fails */

/* ---- the stand-in kernel ---- */

struct fake {
        struct m40_ring_dev v;
        uint32_t n_slots, step, last_seq;
        bool took_any, draining, done;
        struct {
                bool on;
                int32_t t0;
                uint32_t k, pages;
        } s[M40_RING_MAX_SLOTS];
};

static void fake_open(struct fake *f, struct m40_ring *r, uint32_t n_slots)
{
        memset(f, 0, sizeof(*f));
        f->v = m40_ring_device(r);
        m40_ring_dev_open(&f->v);
        f->n_slots = n_slots;
}

/* Puts ev, waiting while the event ring is full (the stand-in never drops one); a full
 * ring with nobody reading (single-threaded tests) is a test bug: false. */
static bool fake_put(struct fake *f, const struct m40_ring_ev *ev, bool wait)
{
        for (unsigned spins = 0;;) {
                const int r = m40_ring_dev_put_event(&f->v, ev);

                if (r == 0)
                        return true;
                if (r != -EAGAIN || !wait)
                        return false;
                if (++spins > 64) {
                        sched_yield();
                        spins = 0;
                }
        }
}

static int running(const struct fake *f)
{
        int n = 0;

        for (uint32_t i = 0; i < f->n_slots; i++)
                n += f->s[i].on;
        return n;
}

/* The commands waiting, then one step: an event for each running slot. false when the
 * stand-in saw something it should not (reported by CHECK). */
static bool fake_step(struct fake *f, bool wait)
{
        struct m40_ring_cmd c;

        while (!f->draining && m40_ring_dev_take_cmd(&f->v, &c) == 1) {
                f->last_seq = c.seq;
                f->took_any = true;
                if (c.op == M40_RING_ADMIT) {
                        CHECK(c.slot < f->n_slots && !f->s[c.slot].on, "admit into slot %u, in use",
                              c.slot);
                        if (c.slot >= f->n_slots || f->s[c.slot].on)
                                return false;
                        f->s[c.slot].on = true;
                        f->s[c.slot].t0 = c.token;
                        f->s[c.slot].k = 0;
                        f->s[c.slot].pages = c.pages;
                } else if (c.op == M40_RING_CANCEL) {
                        const struct m40_ring_ev ack = {.seq = c.seq,
                                                        .step = f->step,
                                                        .token = -1,
                                                        .slot = c.slot,
                                                        .flags = M40_RING_EV_ACK};

                        CHECK(c.slot < f->n_slots, "cancel of slot %u", c.slot);
                        if (c.slot >= f->n_slots)
                                return false;
                        f->s[c.slot].on = false;
                        if (!fake_put(f, &ack, wait))
                                return false;
                } else if (c.op == M40_RING_DRAIN || c.op == M40_RING_SHUTDOWN) {
                        const struct m40_ring_ev ack = {.seq = c.seq,
                                                        .step = f->step,
                                                        .token = -1,
                                                        .flags = M40_RING_EV_ACK};

                        if (!fake_put(f, &ack, wait))
                                return false;
                        f->draining = true;
                        if (c.op == M40_RING_SHUTDOWN)
                                memset(f->s, 0, sizeof(f->s));
                } else {
                        CHECK(0, "unexpected op %u", c.op);
                        return false;
                }
        }
        for (uint32_t i = 0; i < f->n_slots; i++) {
                struct m40_ring_ev ev = {.seq = f->last_seq, .step = f->step, .slot = (uint16_t)i};

                if (!f->s[i].on)
                        continue;
                f->s[i].k++;
                ev.token = (int32_t)(((int64_t)f->s[i].t0 + 7 * (int64_t)f->s[i].k) % TOK_MOD);
                if (f->s[i].k >= f->s[i].pages) {
                        ev.flags = M40_RING_EV_END;
                        f->s[i].on = false;
                }
                if (!fake_put(f, &ev, wait))
                        return false;
        }
        f->step++;
        f->done = f->draining && running(f) == 0;
        return true;
}

/* ---- helpers ---- */

struct rings {
        struct m40_ring r;
        void *mem;
};

static void rings_new(struct rings *x, uint32_t cmd_cap, uint32_t ev_cap)
{
        const size_t bytes = m40_ring_bytes(cmd_cap, ev_cap);

        x->mem = aligned_alloc(M40_RING_LINE, bytes);
        if (!x->mem || m40_ring_init(&x->r, x->mem, x->mem, bytes, cmd_cap, ev_cap, 0u - 5u)) {
                fprintf(stderr, "ring setup failed\n");
                exit(1);
        }
}

static int32_t tok(int32_t t0, uint32_t k)
{
        return (int32_t)(((int64_t)t0 + 7 * (int64_t)k) % TOK_MOD);
}

static struct m40_ring_cmd admit_cmd(int32_t t0, uint32_t pages)
{
        return (struct m40_ring_cmd){.token = t0, .pages = pages, .temperature = 0.0f};
}

/* ---- single-threaded checks ---- */

static void test_args(void)
{
        struct rings x;
        struct m40_ring_slots t;
        struct m40_ring_cmd c = admit_cmd(1, 1);
        struct m40_slot_tok out[4];
        uint32_t slot;

        rings_new(&x, 4, 4);
        CHECK(m40_ring_slots_init(NULL, &x.r, 4) == -EINVAL, "NULL table taken");
        CHECK(m40_ring_slots_init(&t, NULL, 4) == -EINVAL, "NULL ring taken");
        CHECK(m40_ring_slots_init(&t, &x.r, 0) == -EINVAL, "0 slots taken");
        CHECK(m40_ring_slots_init(&t, &x.r, M40_RING_MAX_SLOTS + 1) == -EINVAL,
              "too many slots taken");
        CHECK(m40_ring_slots_init(&t, &x.r, 4) == 0, "init failed");
        CHECK(m40_ring_slots_admit(NULL, 1, &c, &slot) == -EINVAL, "NULL table admitted");
        CHECK(m40_ring_slots_admit(&t, 1, NULL, &slot) == -EINVAL, "NULL command admitted");
        CHECK(m40_ring_slots_admit(&t, 1, &c, NULL) == -EINVAL, "NULL slot out admitted");
        CHECK(m40_ring_slots_cancel(NULL, 1) == -EINVAL, "NULL table cancelled");
        CHECK(m40_ring_slots_cancel(&t, 1) == -ENOENT, "cancel of nothing");
        CHECK(m40_ring_slots_poll(&t, NULL, 1) == -EINVAL, "NULL out polled");
        CHECK(m40_ring_slots_poll(&t, out, 4) == 0, "poll of an empty ring");
        CHECK(m40_ring_slots_find(&t, 1) == -ENOENT, "found a sequence in an empty table");
        CHECK(m40_ring_slots_stop(NULL, true) == -EINVAL, "NULL table stopped");
        CHECK(m40_ring_slots_stop(&t, true) == 0, "stop failed");
        CHECK(m40_ring_slots_stop(&t, false) == -EPIPE, "stopped twice");
        CHECK(m40_ring_slots_admit(&t, 1, &c, &slot) == -EPIPE, "admitted after the stop");
        CHECK(m40_ring_slots_cancel(&t, 1) == -EPIPE, "cancelled after the stop");
        free(x.mem);
}

/* Polls until n records came or the stand-in ran `steps` steps; the records in out. */
static int run_until(struct m40_ring_slots *t, struct fake *f, struct m40_slot_tok *out, int n,
                     int steps)
{
        int got = 0;

        for (int s = 0; s <= steps && got < n; s++) {
                int r;

                if (s && !fake_step(f, false))
                        return -1;
                r = m40_ring_slots_poll(t, out + got, (uint32_t)(n - got));
                if (r < 0)
                        return r;
                got += r;
        }
        return got;
}

static void test_flow(void)
{
        struct rings x;
        struct m40_ring_slots t;
        struct fake f;
        struct m40_ring_cmd c;
        struct m40_slot_tok out[64];
        uint32_t slot;
        int n;

        rings_new(&x, 8, 64);
        m40_ring_slots_init(&t, &x.r, 3);
        fake_open(&f, &x.r, 3);

        /* three sequences: ids 10, 11, 12 with 2, 3 and 1 tokens */
        for (int i = 0; i < 3; i++) {
                c = admit_cmd(100 * (i + 1), i == 0 ? 2 : i == 1 ? 3 : 1);
                CHECK(m40_ring_slots_admit(&t, 10 + (uint64_t)i, &c, &slot) == 0 &&
                              slot == (uint32_t)i,
                      "admit %d: slot %u", i, slot);
        }
        c = admit_cmd(1, 1);
        CHECK(m40_ring_slots_admit(&t, 13, &c, &slot) == -EBUSY, "a fourth slot given");
        CHECK(m40_ring_slots_admit(&t, 11, &c, &slot) == -EEXIST, "id 11 admitted twice");
        CHECK(t.in_use == 3, "in use %u", t.in_use);
        n = run_until(&t, &f, out, 6, 10);
        CHECK(n == 6, "%d records for 6 tokens", n);
        /* step 0: 10, 11, 12 (12 ends); step 1: 10 (ends), 11; step 2: 11 (ends) */
        static const struct {
                uint64_t id;
                uint32_t k;
                uint16_t end;
        } want[] = {{10, 1, 0},
                    {11, 1, 0},
                    {12, 1, M40_SLOT_ENDED},
                    {10, 2, M40_SLOT_ENDED},
                    {11, 2, 0},
                    {11, 3, M40_SLOT_ENDED}};
        for (int i = 0; i < n && i < 6; i++)
                CHECK(out[i].id == want[i].id &&
                              out[i].token == tok(100 * (int32_t)(want[i].id - 9), want[i].k) &&
                              out[i].end == want[i].end,
                      "record %d: id %llu token %d end %u", i, (unsigned long long)out[i].id,
                      out[i].token, out[i].end);
        CHECK(t.in_use == 0, "in use %u after every end", t.in_use);
        CHECK(m40_ring_slots_find(&t, 10) == -ENOENT, "ended sequence still found");
        /* the freed slots are given again, lowest first */
        c = admit_cmd(5, 4);
        CHECK(m40_ring_slots_admit(&t, 20, &c, &slot) == 0 && slot == 0, "reuse: slot %u", slot);
        free(x.mem);
}

static void test_cancel(void)
{
        struct rings x;
        struct m40_ring_slots t;
        struct fake f;
        struct m40_ring_cmd c = admit_cmd(7, 100);
        struct m40_slot_tok out[64];
        uint32_t slot;
        int n;

        rings_new(&x, 8, 64);
        m40_ring_slots_init(&t, &x.r, 2);
        fake_open(&f, &x.r, 2);
        CHECK(m40_ring_slots_admit(&t, 1, &c, &slot) == 0, "admit");
        n = run_until(&t, &f, out, 3, 10);
        CHECK(n == 3 && out[2].token == tok(7, 3) && out[2].end == 0, "3 tokens: %d", n);
        /* two more steps run before the kernel takes the cancel: their tokens are dropped */
        CHECK(fake_step(&f, false) && fake_step(&f, false), "steps");
        CHECK(m40_ring_slots_cancel(&t, 1) == 0, "cancel");
        CHECK(m40_ring_slots_cancel(&t, 1) == -ENOENT, "cancelled twice");
        CHECK(m40_ring_slots_find(&t, 1) == 0, "a leaving sequence keeps its slot");
        CHECK(m40_ring_slots_admit(&t, 2, &c, &slot) == 0 && slot == 1,
              "a leaving slot given again: %u", slot);
        n = run_until(&t, &f, out, 64, 3);
        CHECK(n >= 1 && out[0].id == 1 && out[0].end == M40_SLOT_CANCELLED && out[0].token == -1,
              "first record after the cancel: id %llu end %u token %d",
              (unsigned long long)out[0].id, out[0].end, out[0].token);
        for (int i = 1; i < n; i++)
                CHECK(out[i].id == 2, "a token of the cancelled sequence after its end");
        CHECK(m40_ring_slots_find(&t, 1) == -ENOENT && t.in_use == 1, "slot not freed");

        /* a sequence that ends before the kernel takes its cancel: the END is dropped, the
         * ACK ends it */
        c = admit_cmd(9, 1);
        CHECK(m40_ring_slots_admit(&t, 3, &c, &slot) == 0 && slot == 0, "admit 3");
        CHECK(fake_step(&f, false), "step");
        CHECK(m40_ring_slots_cancel(&t, 3) == 0, "cancel 3");
        n = run_until(&t, &f, out, 64, 2);
        int ends = 0;
        for (int i = 0; i < n; i++)
                if (out[i].id == 3) {
                        CHECK(out[i].end == M40_SLOT_CANCELLED, "id 3: record end %u", out[i].end);
                        ends++;
                }
        CHECK(ends == 1, "id 3 ended %d times", ends);
        free(x.mem);
}

static void test_full_ring(void)
{
        struct rings x;
        struct m40_ring_slots t;
        struct fake f;
        struct m40_ring_cmd c = admit_cmd(1, 5);
        struct m40_slot_tok out[16];
        uint32_t slot;

        rings_new(&x, 2, 16);
        m40_ring_slots_init(&t, &x.r, 4);
        fake_open(&f, &x.r, 4);
        CHECK(m40_ring_slots_admit(&t, 1, &c, &slot) == 0, "admit 1");
        CHECK(m40_ring_slots_admit(&t, 2, &c, &slot) == 0, "admit 2");
        CHECK(m40_ring_slots_admit(&t, 3, &c, &slot) == -EAGAIN, "a full ring took a third");
        CHECK(m40_ring_slots_find(&t, 3) == -ENOENT && t.in_use == 2, "a refused admit stayed");
        CHECK(m40_ring_slots_cancel(&t, 1) == -EAGAIN, "a full ring took a cancel");
        CHECK(t.slot[0].state == M40_SLOT_ACTIVE, "a refused cancel changed the slot");
        CHECK(fake_step(&f, false), "step");
        CHECK(m40_ring_slots_poll(&t, out, 16) == 2, "2 tokens");
        CHECK(m40_ring_slots_admit(&t, 3, &c, &slot) == 0 && slot == 2, "admit 3 after the step");
        free(x.mem);
}

/* Events that break the contract: each -EIO. */
static void test_corrupt(void)
{
        static const struct {
                const char *what;
                struct m40_ring_ev ev;
                bool admit, cancel;
        } bad[] = {
                {"token of a free slot", {.seq = 0, .token = 1, .slot = 0}, false, false},
                {"slot out of range", {.seq = 0, .token = 1, .slot = 3}, true, false},
                {"ack with no cancel",
                 {.seq = 0, .token = -1, .slot = 0, .flags = M40_RING_EV_ACK},
                 true,
                 false},
                {"token before the admit", {.seq = 0u - 6u, .token = 1, .slot = 0}, true, false},
                {"negative token", {.seq = 0u - 5u, .token = -3, .slot = 0}, true, false},
                {"unknown flag",
                 {.seq = 0u - 5u, .token = 1, .slot = 0, .flags = 0x40},
                 true,
                 false},
                {"ack of another command",
                 {.seq = 0u - 5u, .token = -1, .slot = 0, .flags = M40_RING_EV_ACK},
                 true,
                 true},
                {"token after the cancel was taken",
                 {.seq = 0u - 4u, .token = 1, .slot = 0},
                 true,
                 true},
        };

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                struct rings x;
                struct m40_ring_slots t;
                struct m40_ring_dev v;
                struct m40_ring_cmd c = admit_cmd(1, 5);
                struct m40_slot_tok out[4];
                uint32_t slot;

                rings_new(&x, 4, 4); /* indexes start at 2^32 - 5: the admit is -5 */
                m40_ring_slots_init(&t, &x.r, 2);
                v = m40_ring_device(&x.r);
                m40_ring_dev_open(&v);
                if (bad[i].admit)
                        CHECK(m40_ring_slots_admit(&t, 1, &c, &slot) == 0, "%s: admit",
                              bad[i].what);
                if (bad[i].cancel)
                        CHECK(m40_ring_slots_cancel(&t, 1) == 0, "%s: cancel", bad[i].what);
                CHECK(m40_ring_dev_put_event(&v, &bad[i].ev) == 0, "%s: put", bad[i].what);
                CHECK(m40_ring_slots_poll(&t, out, 4) == -EIO, "%s: not -EIO", bad[i].what);
                free(x.mem);
        }
}

/* ---- two threads ---- */

struct run {
        struct rings x;
        struct fake f;
        atomic_bool stop_dev;
        atomic_bool drained; /* the stand-in took the DRAIN and every slot ended */
        atomic_int dev_failed;
};

static void *device_main(void *arg)
{
        struct run *u = arg;

        while (!atomic_load(&u->stop_dev) && !u->f.done) {
                if (!fake_step(&u->f, true)) {
                        atomic_store(&u->dev_failed, 1);
                        break;
                }
                if (running(&u->f) == 0)
                        sched_yield(); /* idle: let the host thread run (2 cores, shared) */
        }
        atomic_store(&u->drained, u->f.done);
        return NULL;
}

struct seqinfo {
        int32_t t0;
        uint32_t pages, k;
        bool ended, cancelled;
};

static double now_s(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_threads(uint32_t n_seqs, uint32_t n_slots, uint32_t cmd_cap, uint32_t ev_cap)
{
        struct run *u = calloc(1, sizeof(*u));
        struct seqinfo *q = calloc(n_seqs, sizeof(*q));
        struct m40_ring_slots t;
        struct m40_slot_tok out[256];
        pthread_t th;
        uint64_t rng = 0x9e3779b97f4a7c15ull ^ n_slots;
        uint32_t next = 0, ended = 0, cancels = 0, tokens = 0;
        double last = now_s();

        if (!u || !q) {
                CHECK(0, "out of memory");
                free(u);
                free(q);
                return;
        }
        rings_new(&u->x, cmd_cap, ev_cap);
        m40_ring_slots_init(&t, &u->x.r, n_slots);
        fake_open(&u->f, &u->x.r, n_slots);
        if (pthread_create(&th, NULL, device_main, u)) {
                CHECK(0, "pthread_create");
                return;
        }
        while (ended < n_seqs && !atomic_load(&u->dev_failed)) {
                int n;

                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                const uint32_t roll = (uint32_t)(rng >> 33);

                if (next < n_seqs && roll % 4 != 0) { /* admit one */
                        struct m40_ring_cmd c;
                        uint32_t slot;
                        int r;

                        q[next].t0 = (int32_t)(roll % 9973);
                        q[next].pages = 1 + (roll >> 8) % 40;
                        c = admit_cmd(q[next].t0, q[next].pages);
                        r = m40_ring_slots_admit(&t, next, &c, &slot);
                        CHECK(r == 0 || r == -EBUSY || r == -EAGAIN, "admit %u: %d", next, r);
                        if (r == 0)
                                next++;
                } else if (t.in_use && roll % 8 == 0) { /* cancel a random one */
                        const uint32_t i = (roll >> 4) % n_slots;

                        if (t.slot[i].state == M40_SLOT_ACTIVE) {
                                const uint64_t id = t.slot[i].id;
                                const int r = m40_ring_slots_cancel(&t, id);

                                CHECK(r == 0 || r == -EAGAIN, "cancel %llu: %d",
                                      (unsigned long long)id, r);
                                if (r == 0) {
                                        q[id].cancelled = true;
                                        cancels++;
                                }
                        }
                }
                n = m40_ring_slots_poll(&t, out, 256);
                CHECK(n >= 0, "poll: %d", n);
                if (n < 0)
                        break;
                for (int i = 0; i < n; i++) {
                        struct seqinfo *s = out[i].id < n_seqs ? &q[out[i].id] : NULL;

                        CHECK(s && !s->ended, "record of id %llu", (unsigned long long)out[i].id);
                        if (!s || s->ended)
                                continue;
                        if (out[i].token >= 0) {
                                s->k++;
                                tokens++;
                                CHECK(out[i].token == tok(s->t0, s->k) && s->k <= s->pages,
                                      "id %llu token %u: %d", (unsigned long long)out[i].id, s->k,
                                      out[i].token);
                                CHECK(!s->cancelled, "id %llu: a token after its cancel",
                                      (unsigned long long)out[i].id);
                        }
                        if (out[i].end != M40_SLOT_GOES_ON) {
                                s->ended = true;
                                ended++;
                                CHECK(out[i].end ==
                                              (s->cancelled ? M40_SLOT_CANCELLED : M40_SLOT_ENDED),
                                      "id %llu: end %u, cancelled %d",
                                      (unsigned long long)out[i].id, out[i].end, s->cancelled);
                                if (out[i].end == M40_SLOT_ENDED)
                                        CHECK(s->k == s->pages, "id %llu ended after %u of %u",
                                              (unsigned long long)out[i].id, s->k, s->pages);
                        }
                }
                if (n > 0)
                        last = now_s();
                else if (now_s() - last > STALL_S) {
                        CHECK(0, "no progress for %d s (%u of %u ended)", STALL_S, ended, n_seqs);
                        break;
                } else
                        sched_yield();
        }
        CHECK(t.in_use == 0, "%u slots in use at the end", t.in_use);
        while (m40_ring_slots_stop(&t, true) == -EAGAIN)
                sched_yield();
        for (double t0 = now_s(); !atomic_load(&u->drained) && now_s() - t0 < STALL_S;)
                sched_yield();
        CHECK(atomic_load(&u->drained), "the stand-in did not drain");
        atomic_store(&u->stop_dev, true);
        pthread_join(th, NULL);
        CHECK(!atomic_load(&u->dev_failed), "the stand-in failed");
        CHECK(m40_ring_slots_poll(&t, out, 256) == 0, "records after the drain");
        printf("threads: %u sequences over %u slots (rings %u/%u): %u tokens, %u cancelled\n",
               n_seqs, n_slots, cmd_cap, ev_cap, tokens, cancels);
        free(u->x.mem);
        free(u);
        free(q);
}

int main(int argc, char **argv)
{
        const uint32_t n = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 20000;

        test_args();
        test_flow();
        test_cancel();
        test_full_ring();
        test_corrupt();
        test_threads(n, 64, 4, 64);
        test_threads(n / 4, 3, 2, 4);
        if (failures)
                fprintf(stderr, "%d check(s) failed\n", failures);
        else
                printf("all checks passed\n");
        return failures ? 1 : 0;
}
