/* async.h - what the engine dispatch (engine.c) asks of the generic asynchronous form
 * (async.c) while a step is in flight; the contract is engine.h's "Threads". Internal to
 * daemon/engine. */
#ifndef M40_ENGINE_ASYNC_H
#define M40_ENGINE_ASYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"

/* m40_engine_async_defer - queue m40_engine_cancel(e, id) (cancel true) or
 * m40_engine_hold(e, id, hold) for m40_engine_poll() to apply after the step in flight.
 * Calls on one id keep their effect: a second cancel, or a hold after a cancel, changes
 * nothing; a later hold or release replaces an earlier one. Returns 0, or -ENOMEM. */
int m40_engine_async_defer(struct m40_engine *e, uint32_t id, bool cancel, bool hold);

/* m40_engine_async_events - up to max events of chained steps that the caller has not
 * taken yet (oldest first), moved into out; 0 without an asynchronous form. */
size_t m40_engine_async_events(struct m40_engine *e, struct m40_event *out, size_t max);

/* m40_engine_async_stats - the engine's statistics as of the start of the step in flight. */
void m40_engine_async_stats(const struct m40_engine *e, struct m40_engine_stats *ret);

/* m40_engine_async_free - waits for a step in flight, stops and joins the engine's thread,
 * drops the queued calls and frees e->async (then NULL). Accepts an engine without one. */
void m40_engine_async_free(struct m40_engine *e);

#endif
