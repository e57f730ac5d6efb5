/* engine.c - the engine interface's dispatch and defaults (see engine.h). While a step is
 * in flight the calls go to the asynchronous form (async.c) instead of the engine, as
 * engine.h's "Threads" says. */
#include "engine.h"

#include <errno.h>
#include <string.h>

#include "async.h"

struct m40_sampling m40_sampling_default(void)
{
        struct m40_sampling s = {
                .temperature = 0.0f,
                .top_k = 0,
                .top_p = 1.0f,
                .min_p = 0.0f,
                .repeat_penalty = 1.0f,
                .frequency_penalty = 0.0f,
                .presence_penalty = 0.0f,
                .penalty_last_n = 64,
                .seed = 0,
        };
        return s;
}

struct m40_stop m40_stop_default(void)
{
        struct m40_stop s;

        memset(&s, 0, sizeof(s));
        return s;
}

int m40_engine_admit(struct m40_engine *e, const struct m40_seq_params *p, uint32_t *ret_id)
{
        if (m40_engine_in_flight(e))
                return -EAGAIN;
        return e->ops->admit(e, p, ret_id);
}

int m40_engine_step(struct m40_engine *e)
{
        if (m40_engine_in_flight(e))
                return -EBUSY;
        return e->ops->step(e);
}

size_t m40_engine_events(struct m40_engine *e, struct m40_event *out, size_t max)
{
        /* chained steps' events first (async.c), then the engine's own, between steps */
        size_t n = m40_engine_async_events(e, out, max);

        if (n || m40_engine_in_flight(e))
                return n;
        return e->ops->events(e, out, max);
}

int m40_engine_cancel(struct m40_engine *e, uint32_t id)
{
        if (m40_engine_in_flight(e))
                return m40_engine_async_defer(e, id, true, false);
        return e->ops->cancel(e, id);
}

int m40_engine_hold(struct m40_engine *e, uint32_t id, bool hold)
{
        if (m40_engine_in_flight(e))
                return m40_engine_async_defer(e, id, false, hold);
        return e->ops->hold(e, id, hold);
}

uint32_t m40_engine_kv_need(struct m40_engine *e, const struct m40_seq_params *p)
{
        return e->ops->kv_need(e, p);
}

int m40_engine_kv_pages(struct m40_engine *e, uint32_t id)
{
        if (m40_engine_in_flight(e))
                return -EBUSY; /* the step in flight changes the block tables */
        return e->ops->kv_pages(e, id);
}

int m40_engine_logits(struct m40_engine *e, uint32_t id, float *out, size_t n)
{
        if (m40_engine_in_flight(e))
                return -EBUSY;
        return e->ops->logits(e, id, out, n);
}

void m40_engine_stats(struct m40_engine *e, struct m40_engine_stats *ret)
{
        if (m40_engine_in_flight(e))
                m40_engine_async_stats(e, ret);
        else
                e->ops->stats(e, ret);
}

void m40_engine_model(struct m40_engine *e, struct m40_engine_model *ret)
{
        e->ops->model(e, ret);
}

struct m40_engine *m40_engine_free(struct m40_engine *e)
{
        if (e) {
                m40_engine_async_free(e);
                e->ops->destroy(e);
        }
        return NULL;
}
