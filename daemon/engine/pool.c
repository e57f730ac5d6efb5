/* pool.c - the CPU engine's pthread pool (see pool.h). */
#include "pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#define SPIN_ROUNDS 20000 /* polls before a worker sleeps (~tens of microseconds) */

struct worker {
        struct m40_pool *pool;
        pthread_t tid;
        unsigned ith;
};

struct m40_pool {
        unsigned nth;
        struct worker *workers; /* nth - 1 */
        pthread_mutex_t lock;
        pthread_cond_t wake;
        atomic_uint gen;     /* bumped by each run; workers wait for a new value */
        atomic_uint pending; /* workers still inside the current run */
        atomic_bool stop;
        atomic_uint sleepers;
        m40_pool_fn fn;
        void *ctx;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
}

static void *worker_main(void *arg)
{
        struct worker *w = arg;
        struct m40_pool *p = w->pool;
        unsigned seen = 0;

        for (;;) {
                unsigned g;
                int spins = 0;

                while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
                       !atomic_load(&p->stop)) {
                        if (++spins < SPIN_ROUNDS) {
                                cpu_relax();
                                continue;
                        }
                        pthread_mutex_lock(&p->lock);
                        atomic_fetch_add(&p->sleepers, 1);
                        while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
                                pthread_cond_wait(&p->wake, &p->lock);
                        atomic_fetch_sub(&p->sleepers, 1);
                        pthread_mutex_unlock(&p->lock);
                        spins = 0;
                }
                if (atomic_load(&p->stop))
                        return NULL;
                seen = g;
                p->fn(p->ctx, w->ith, p->nth);
                atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
        }
}

int m40_pool_new(unsigned n_threads, struct m40_pool **ret)
{
        struct m40_pool *p = calloc(1, sizeof(*p));
        int e;

        if (!p)
                return -ENOMEM;
        p->nth = n_threads ? n_threads : 1;
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->wake, NULL);
        p->workers = calloc(p->nth, sizeof(*p->workers));
        if (!p->workers) {
                m40_pool_free(p);
                return -ENOMEM;
        }
        for (unsigned i = 1; i < p->nth; i++) {
                p->workers[i].pool = p;
                p->workers[i].ith = i;
                e = pthread_create(&p->workers[i].tid, NULL, worker_main, &p->workers[i]);
                if (e) {
                        p->nth = i; /* join only those started */
                        m40_pool_free(p);
                        return -e;
                }
        }
        *ret = p;
        return 0;
}

struct m40_pool *m40_pool_free(struct m40_pool *p)
{
        if (!p)
                return NULL;
        if (p->workers) {
                pthread_mutex_lock(&p->lock);
                atomic_store(&p->stop, true);
                pthread_cond_broadcast(&p->wake);
                pthread_mutex_unlock(&p->lock);
                for (unsigned i = 1; i < p->nth; i++)
                        pthread_join(p->workers[i].tid, NULL);
                free(p->workers);
        }
        pthread_cond_destroy(&p->wake);
        pthread_mutex_destroy(&p->lock);
        free(p);
        return NULL;
}

unsigned m40_pool_size(const struct m40_pool *p)
{
        return p->nth;
}

void m40_pool_run(struct m40_pool *p, m40_pool_fn fn, void *ctx)
{
        if (p->nth == 1) {
                fn(ctx, 0, 1);
                return;
        }
        p->fn = fn;
        p->ctx = ctx;
        atomic_store_explicit(&p->pending, p->nth - 1, memory_order_relaxed);
        atomic_fetch_add(&p->gen, 1); /* seq_cst: pairs with the sleepers check */
        if (atomic_load(&p->sleepers)) {
                pthread_mutex_lock(&p->lock);
                pthread_cond_broadcast(&p->wake);
                pthread_mutex_unlock(&p->lock);
        }
        fn(ctx, 0, p->nth);
        while (atomic_load_explicit(&p->pending, memory_order_acquire))
                cpu_relax();
}
