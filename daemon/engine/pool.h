/* pool.h - a fixed pthread pool that runs one parallel function at a time.
 *
 * m40_pool_run(p, fn, ctx) calls fn(ctx, ith, nth) once for each ith in [0, nth) (the
 * caller's thread is ith 0) and returns when all have returned. Workers spin briefly
 * between runs (a transformer step issues hundreds of short runs) and then sleep. One
 * thread drives a pool at a time. */
#ifndef M40_ENGINE_POOL_H
#define M40_ENGINE_POOL_H

typedef void (*m40_pool_fn)(void *ctx, unsigned ith, unsigned nth);

struct m40_pool;

/* m40_pool_new - start n_threads - 1 workers (n_threads >= 1; 0 means 1). Returns 0 and
 * the pool in *ret, or -errno (*ret untouched). */
int m40_pool_new(unsigned n_threads, struct m40_pool **ret);

/* m40_pool_free - stop and join the workers; accepts NULL; returns NULL. */
struct m40_pool *m40_pool_free(struct m40_pool *p);

/* m40_pool_size - nth, the number of threads a run uses. */
unsigned m40_pool_size(const struct m40_pool *p);

/* m40_pool_run - run fn on every thread of the pool and wait for all of them. */
void m40_pool_run(struct m40_pool *p, m40_pool_fn fn, void *ctx);

#endif
