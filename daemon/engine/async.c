/* async.c - the generic asynchronous form of the engine interface (engine.h, "Threads"):
 * one worker thread per engine that runs the engine's blocking step each time it is
 * pumped, the eventfd it raises when the step has finished, the statistics as of the
 * step's start, the cancel and hold calls queued while the step is in flight, and when
 * the engine's thread began and finished each step (m40_engine_step_times). It serves
 * every engine whose step blocks (the CPU engine, the per-op CUDA engine).
 *
 * Hand-over: the caller's thread owns in_flight, the statistics, the queue and the times
 * of the step collected last; go, done, quit, result and the times of the step in flight
 * are shared under mu. The worker touches the engine only between taking go and setting
 * done, and the caller only while in_flight is false, so the mutex orders every engine
 * access of one thread before the other's.
 *
 * Chained steps (m40_engine_chain): when the caller allows it, the worker starts the next
 * step itself as soon as one has produced work, without waiting for a pump, so that the
 * engine does not idle for the caller's wake-up and the hand-over back (on the CPU engine
 * at one client ~50 us a step). Before it goes on it moves the finished step's events out
 * of the engine into a queue of its own (ev, under mu), which m40_engine_events() reads
 * while the chain runs; it raises the descriptor for every finished step. The chain
 * stops after the step in flight when the caller revokes it (m40_engine_chain(e, false)),
 * queues a call (m40_engine_async_defer: the call needs the engine between steps), or
 * frees the engine, and when a step produced nothing or failed, or when the caller has not
 * yet taken the events of the step before it (a caller that lags behind the engine, a
 * busy machine: the events waiting for it stay those of two steps); poll then finds the
 * worker stopped (running false), ends the flight and applies the queued calls. The
 * worker touches the engine only while running; the caller never while in_flight. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "async.h"

/* A call made while a step was in flight. */
struct deferred {
        uint32_t id;
        bool cancel; /* m40_engine_cancel; else m40_engine_hold(id, hold) */
        bool hold;
};

struct m40_engine_async {
        struct m40_engine *e;
        pthread_t thread;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        int efd; /* raised by the worker with done, lowered by poll */
        /* under mu */
        bool go;                       /* pump asked for a step; the worker takes it */
        bool done;                     /* the step has finished; result is its return */
        bool quit;                     /* m40_engine_async_free: the worker returns */
        int result;                    /* what the engine's step returned */
        uint64_t t_begin_ns, t_end_ns; /* CLOCK_MONOTONIC: the last finished step's start, end */
        bool chain;                    /* the caller lets the worker start the next step */
        bool chained_next;             /* the next step begins without a pump */
        bool running;                  /* the worker is in a step (or goes on to the next) */
        struct m40_event *ev;          /* (cap_ev) events of chained steps, from ev_head */
        size_t n_ev, ev_head, cap_ev;
        struct m40_step_record *rec; /* (cap_rec) finished steps not yet taken, from rec_head */
        size_t n_rec, rec_head, cap_rec;
        struct m40_engine_stats st; /* as of the start of the step in flight (a pump's or
                                     * a chained step's) */
        /* the caller's thread only */
        bool in_flight;     /* from pump until poll collects the step */
        struct deferred *q; /* (cap_q) calls queued while in flight, in call order */
        uint32_t n_q, cap_q;
        uint64_t last_begin_ns, last_end_ns; /* of the step poll collected last; 0: none */
};

static uint64_t now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* stash - with the engine's events of the step just finished moved into a->ev, 0; -ENOMEM
 * when ev cannot grow (what was moved stays there, the rest in the engine: nothing is
 * lost, and the chain stops). The worker's thread, while running. */
static int stash(struct m40_engine_async *a)
{
        for (;;) {
                size_t room, n;

                pthread_mutex_lock(&a->mu);
                if (a->cap_ev - a->n_ev < 64) {
                        size_t cap = a->cap_ev ? 2 * a->cap_ev : 256;
                        struct m40_event *ev = realloc(a->ev, cap * sizeof(*ev));

                        if (!ev) {
                                pthread_mutex_unlock(&a->mu);
                                return -ENOMEM;
                        }
                        a->ev = ev;
                        a->cap_ev = cap;
                }
                room = a->cap_ev - a->n_ev;
                /* the engine's queue is the worker's while it runs; ev's tail is not read */
                n = a->e->ops->events(a->e, a->ev + a->n_ev, room);
                a->n_ev += n;
                pthread_mutex_unlock(&a->mu);
                if (n < room)
                        return 0;
        }
}

/* Records kept for m40_engine_step_records() at most: a caller that never takes them
 * loses the later figures, not memory. */
#define MAX_RECORDS 4096

/* record - appends the step that ran from begin to end to rec (under mu); dropped when rec
 * is full or cannot grow (figures only). */
static void record(struct m40_engine_async *a, uint64_t begin, uint64_t end)
{
        if (a->n_rec == a->cap_rec) {
                size_t cap = a->cap_rec ? 2 * a->cap_rec : 64;
                struct m40_step_record *r;

                if (cap > MAX_RECORDS || !(r = realloc(a->rec, cap * sizeof(*r))))
                        return;
                a->rec = r;
                a->cap_rec = cap;
        }
        a->rec[a->n_rec++] = (struct m40_step_record){
                .begin_ns = begin, .end_ns = end, .chained = a->chained_next};
}

static void *worker(void *arg)
{
        struct m40_engine_async *a = arg;
        const uint64_t one = 1;
        struct m40_engine_stats st;
        bool more = false;

        pthread_mutex_lock(&a->mu);
        for (;;) {
                uint64_t t_begin, t_end;
                int r;

                if (!more) {
                        while (!a->go && !a->quit)
                                pthread_cond_wait(&a->cv, &a->mu);
                        if (a->quit)
                                break;
                        a->go = false;
                        a->chained_next = false;
                }
                a->running = true;
                t_begin = now_ns();
                pthread_mutex_unlock(&a->mu);
                r = a->e->ops->step(a->e);
                t_end = now_ns();
                pthread_mutex_lock(&a->mu);
                /* and only while the caller keeps up: it has taken every earlier step's
                 * events (so at most two steps' events wait for it, whatever its lag) */
                more = a->chain && r > 0 && !a->quit && a->ev_head == a->n_ev;
                pthread_mutex_unlock(&a->mu);
                if (more)
                        more = stash(a) == 0;
                if (more) /* the next step's start: the figures a chained step is as of */
                        a->e->ops->stats(a->e, &st);
                pthread_mutex_lock(&a->mu);
                if (more)
                        a->st = st;
                more = more && a->chain && !a->quit; /* revoked meanwhile: stop here */
                record(a, t_begin, t_end);
                a->chained_next = more;
                a->running = more;
                a->t_begin_ns = t_begin;
                a->t_end_ns = t_end;
                a->result = r;
                a->done = true;
                /* under mu, so that poll finds done and the raised descriptor together; an
                 * eventfd write fails only when the counter would overflow */
                if (write(a->efd, &one, sizeof(one)) < 0) {
                }
        }
        a->running = false;
        pthread_mutex_unlock(&a->mu);
        return NULL;
}

/* start - gives e its thread and descriptor, once. The thread blocks every signal, so
 * that the program's signals go to its own threads. Returns 0 or -errno. */
static int start(struct m40_engine *e)
{
        struct m40_engine_async *a;
        sigset_t all, old;
        int r;

        if (e->async)
                return 0;
        a = calloc(1, sizeof(*a));
        if (!a)
                return -ENOMEM;
        a->e = e;
        a->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (a->efd < 0) {
                r = -errno;
                free(a);
                return r;
        }
        pthread_mutex_init(&a->mu, NULL);
        pthread_cond_init(&a->cv, NULL);
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        r = -pthread_create(&a->thread, NULL, worker, a);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (r) {
                pthread_cond_destroy(&a->cv);
                pthread_mutex_destroy(&a->mu);
                close(a->efd);
                free(a);
                return r;
        }
        pthread_setname_np(a->thread, "m40-engine");
        e->async = a;
        return 0;
}

int m40_engine_pump(struct m40_engine *e)
{
        struct m40_engine_async *a;
        int r = start(e);

        if (r)
                return r;
        a = e->async;
        if (a->in_flight)
                return 0;
        a->in_flight = true;
        pthread_mutex_lock(&a->mu);
        e->ops->stats(e, &a->st);
        a->go = true;
        pthread_cond_signal(&a->cv);
        pthread_mutex_unlock(&a->mu);
        return 1;
}

int m40_engine_fd(struct m40_engine *e)
{
        int r = start(e);

        return r ? r : e->async->efd;
}

bool m40_engine_in_flight(const struct m40_engine *e)
{
        return e->async && e->async->in_flight;
}

/* apply - the calls queued while the step was in flight, in call order; an id that the
 * step finished gets -ENOENT, which the caller could not have been told: passed over. */
static void apply(struct m40_engine *e)
{
        struct m40_engine_async *a = e->async;

        for (uint32_t i = 0; i < a->n_q; i++) {
                const struct deferred *d = &a->q[i];

                if (d->cancel)
                        e->ops->cancel(e, d->id);
                else
                        e->ops->hold(e, d->id, d->hold);
        }
        a->n_q = 0;
}

int m40_engine_chain(struct m40_engine *e, bool on)
{
        struct m40_engine_async *a;
        int r = start(e);

        if (r)
                return r;
        a = e->async;
        pthread_mutex_lock(&a->mu);
        a->chain = on && !a->n_q; /* queued calls wait for the engine between steps */
        pthread_mutex_unlock(&a->mu);
        return 0;
}

/* take - moves up to max of the *n - *head items of `size` bytes at q + *head into out;
 * empties the queue (both 0) when all are taken. Under mu, the caller's thread. */
static size_t take(void *q, size_t *head, size_t *n, size_t size, void *out, size_t max)
{
        const size_t k = *n - *head < max ? *n - *head : max;

        if (k)
                memcpy(out, (char *)q + *head * size, k * size);
        *head += k;
        if (*head == *n)
                *head = *n = 0;
        return k;
}

size_t m40_engine_step_records(struct m40_engine *e, struct m40_step_record *out, size_t max)
{
        struct m40_engine_async *a = e->async;
        size_t n;

        if (!a)
                return 0;
        pthread_mutex_lock(&a->mu);
        n = take(a->rec, &a->rec_head, &a->n_rec, sizeof(*out), out, max);
        pthread_mutex_unlock(&a->mu);
        return n;
}

size_t m40_engine_async_events(struct m40_engine *e, struct m40_event *out, size_t max)
{
        struct m40_engine_async *a = e->async;
        size_t n;

        if (!a)
                return 0;
        pthread_mutex_lock(&a->mu);
        n = take(a->ev, &a->ev_head, &a->n_ev, sizeof(*out), out, max);
        pthread_mutex_unlock(&a->mu);
        return n;
}

int m40_engine_poll(struct m40_engine *e, int *ret_step)
{
        struct m40_engine_async *a = e->async;
        bool done, running = false;
        int result = 0;

        if (!a || !a->in_flight)
                return 0;
        pthread_mutex_lock(&a->mu);
        done = a->done;
        if (done) {
                uint64_t v;

                a->done = false;
                result = a->result;
                a->last_begin_ns = a->t_begin_ns;
                a->last_end_ns = a->t_end_ns;
                running = a->running;
                if (read(a->efd, &v, sizeof(v)) < 0) { /* raised with done: cannot fail */
                }
        }
        pthread_mutex_unlock(&a->mu);
        if (!done)
                return 0;
        if (!running) { /* else a chained step is in flight: the calls wait for its end */
                a->in_flight = false;
                apply(e);
        }
        *ret_step = result;
        return 1;
}

int m40_engine_step_times(const struct m40_engine *e, uint64_t *ret_begin_ns, uint64_t *ret_end_ns)
{
        const struct m40_engine_async *a = e->async;

        if (!a || !a->last_end_ns)
                return -ENODATA;
        *ret_begin_ns = a->last_begin_ns;
        *ret_end_ns = a->last_end_ns;
        return 0;
}

int m40_engine_async_defer(struct m40_engine *e, uint32_t id, bool cancel, bool hold)
{
        struct m40_engine_async *a = e->async;
        struct deferred *held = NULL;

        pthread_mutex_lock(&a->mu);
        a->chain = false; /* the call waits for the step in flight, and no other */
        pthread_mutex_unlock(&a->mu);

        for (uint32_t i = 0; i < a->n_q; i++) {
                struct deferred *d = &a->q[i];

                if (d->id == id && d->cancel)
                        return 0; /* ends it: nothing after it has an effect */
                if (d->id == id)
                        held = d;
        }
        if (held && !cancel) {
                held->hold = hold; /* holds commute with other ids' calls */
                return 0;
        }
        if (a->n_q == a->cap_q) {
                uint32_t cap = a->cap_q ? 2 * a->cap_q : 16;
                struct deferred *q = realloc(a->q, cap * sizeof(*q));

                if (!q)
                        return -ENOMEM;
                a->q = q;
                a->cap_q = cap;
        }
        a->q[a->n_q++] = (struct deferred){.id = id, .cancel = cancel, .hold = hold};
        return 0;
}

void m40_engine_async_stats(const struct m40_engine *e, struct m40_engine_stats *ret)
{
        struct m40_engine_async *a = e->async;

        pthread_mutex_lock(&a->mu);
        *ret = a->st;
        pthread_mutex_unlock(&a->mu);
}

void m40_engine_async_free(struct m40_engine *e)
{
        struct m40_engine_async *a = e->async;

        if (!a)
                return;
        pthread_mutex_lock(&a->mu);
        a->quit = true;
        pthread_cond_signal(&a->cv);
        pthread_mutex_unlock(&a->mu);
        pthread_join(a->thread, NULL);
        pthread_cond_destroy(&a->cv);
        pthread_mutex_destroy(&a->mu);
        close(a->efd);
        free(a->q);
        free(a->ev);
        free(a->rec);
        free(a);
        e->async = NULL;
}
