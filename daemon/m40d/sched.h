/* sched.h - m40d's scheduler: turns clients' submissions into engine sequences and engine
 * events into each client's event ring.
 *
 * Continuous batching: requests are admitted into the engine between steps whenever a
 * decoding place (max_sequences), an engine slot and enough KV pages (prompt + max_tokens,
 * reserved up front so a running sequence never runs out) are free; the rest wait in
 * per-client queues. The engine owns the KV pages and their reservation (engine.h
 * kv_reserve, daemon/engine/core.h): the scheduler admits every sequence with kv_reserve,
 * waits when the engine answers -ENOSPC, and asks it for the figures its policy needs
 * (m40_engine_kv_need(), m40_engine_kv_pages()); it keeps no page count of its own.
 * Admission is fair: the next request comes from the client with the
 * fewest sequences in the engine, ties broken round-robin, and a client gets no new
 * sequence while it has max_sequences_per_client of them or its sequences hold
 * max_kv_percent_per_client of the KV pages (its first sequence excepted), so a client
 * with many requests cannot starve the others.
 *
 * Backpressure: a client whose event ring is full has its running sequences held in the
 * engine (m40_engine_hold) until it reads, so the daemon keeps only a few undelivered
 * events per request (a bound independent of max_tokens, sched_impl.h) and the client gets
 * no new sequence meanwhile. A held sequence needs its KV pages, not a place in the step:
 * the engine has held_sequences slots beyond max_sequences (m40d's main sizes it so), a
 * held sequence leaves the max_sequences that decode (runnable requests do not wait behind
 * it) and the engine keeps only the KV pages it has filled. When its client has read
 * everything, it decodes on as soon as a decoding place is free and the engine can
 * reserve the rest of its KV pages again, before any new request is admitted; until then
 * it stays held. The engine
 * is never asked for more than hold and release, so holding only delays: the sequence
 * produces exactly the tokens it would have produced unheld. A sequence held for
 * hold_timeout seconds without its client reading any event is cancelled: its slot and
 * pages are freed, the daemon logs it once, and the client gets its pending events and
 * then ERROR M40_EUNREAD.
 *
 * Steps run on the engine's own thread (m40_engine_pump, engine.h "Threads"): while one is
 * in flight the daemon goes on accepting connections, answering STATUS and delivering
 * events, and the engine's descriptor (m40_sched_fd) wakes it when the step has finished;
 * parsing submissions, admission, holds and releases happen between steps (a client that
 * leaves, or the hold timeout, during a step queues its cancels).
 *
 * Limits from m40d.ini become ERROR events. Single-threaded otherwise: the daemon's main
 * loop calls everything. */
#ifndef M40D_SCHED_H
#define M40D_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"
#include "ipc/ipc.h"
#include "m40d/config.h"
#include "text/chat.h"

struct m40_vocab;
struct m40_sched;
struct m40_sched_client;

/* m40_sched_new - a scheduler over engine e (borrowed) with vocabulary v (borrowed) and
 * chat template tmpl (borrowed), limits from cfg (copied). Returns 0 and it in *ret, or
 * -ENOMEM. */
int m40_sched_new(const struct m40d_config *cfg, struct m40_engine *e, const struct m40_vocab *v,
                  const struct m40_chat_template *tmpl, struct m40_sched **ret);
/* m40_sched_free - frees s and every client still attached; accepts NULL; returns NULL. */
struct m40_sched *m40_sched_free(struct m40_sched *s);

/* m40_sched_client_new - attaches a client with a fresh shared region (sized from the
 * config). Returns 0 and the client in *ret, or -errno. */
int m40_sched_client_new(struct m40_sched *s, struct m40_sched_client **ret);
/* m40_sched_client_free - detaches c: cancels its running sequences (freeing their slots
 * and KV pages), drops its queued requests and undelivered events, unmaps its region.
 * Accepts NULL; returns NULL. */
struct m40_sched_client *m40_sched_client_free(struct m40_sched *s, struct m40_sched_client *c);
/* m40_sched_client_region - the client's region (for WELCOME and its doorbell). */
struct m40_ipc_region *m40_sched_client_region(struct m40_sched_client *c);
/* m40_sched_client_broken - 0, or the M40_EPROTO the client earned by breaking the
 * protocol (the caller then disconnects it). */
int m40_sched_client_broken(const struct m40_sched_client *c);

/* m40_sched_run - one round: collect the engine step that has finished (its events),
 * deliver events (holding and releasing sequences); when no step is in flight, read
 * clients' submissions, admit what fits and start the next step when sequences are active
 * and not all held. Never waits for a step. Returns 1 when the round did work (the caller should
 * not sleep), 0 when only the step in flight (m40_sched_fd), a client or m40_sched_next_ms() can
 * make progress; a failed engine step is reported by ERROR events to the affected requests, not
 * here. */
int m40_sched_run(struct m40_sched *s);

/* m40_sched_fd - the engine's descriptor (m40_engine_fd): readable when the step in
 * flight has finished; the caller waits for it with its other descriptors and then calls
 * m40_sched_run(), which collects the step. The first call starts the engine's thread.
 * Returns it (>= 0), or -errno. */
int m40_sched_fd(struct m40_sched *s);

/* m40_sched_step_age_ns - how long the engine step in flight has run (since it was
 * pumped), in ns; 0 when none is. A step that has finished counts until m40_sched_run()
 * collects it. m40d's watchdog (main.c serve()) compares it with [engine] step_timeout_ms. */
uint64_t m40_sched_step_age_ns(const struct m40_sched *s);

/* m40_sched_next_ms - the ms after which the caller must run a round although nothing
 * woke it (parsing paused beside running sequences resumes then), or -1: no such time. */
int m40_sched_next_ms(const struct m40_sched *s);

/* m40_sched_sleep - before the caller blocks: raises (true) or lowers every client's
 * daemon-sleeping flag, and the ev_waiting word of clients with undelivered events (so
 * that reading rings the doorbell). Raising returns true when a submission arrived or a
 * waiting client made room meanwhile (do not block). */
bool m40_sched_sleep(struct m40_sched *s, bool sleeping);

/* m40_sched_drain - stop taking work: queued and new requests get ERROR M40_ESHUTDOWN;
 * running ones continue. */
void m40_sched_drain(struct m40_sched *s);
/* m40_sched_cancel_all - end every running request with ERROR err. */
void m40_sched_cancel_all(struct m40_sched *s, int err);
/* m40_sched_quiet - nothing running or queued, and (when with_events) every event
 * delivered to its ring. */
bool m40_sched_quiet(const struct m40_sched *s, bool with_events);

/* m40_sched_status - the state for STATUS and sd_notify (model fields are the caller's). */
void m40_sched_status(const struct m40_sched *s, struct m40_proto_status *ret);

#endif
