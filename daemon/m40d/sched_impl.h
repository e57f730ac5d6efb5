/* sched_impl.h - the scheduler's internal types and helpers, shared by sched.c (clients,
 * admission, stepping, delivery), intake.c (reading submissions between steps) and
 * request.c (turning a copied submission into a request, a request's events). */
#ifndef M40D_SCHED_IMPL_H
#define M40D_SCHED_IMPL_H

#include <time.h>

#include "m40d/sched.h"
#include "m40d/steptime.h"
#include "text/detok.h"

enum req_state {
        REQ_QUEUED,
        REQ_ACTIVE,
        REQ_DONE, /* final event queued; freed once every event is delivered */
};

struct req {
        struct req *next; /* in its client's list, submission order */
        struct m40_sched_client *cl;
        uint64_t id;
        enum req_state state;
        uint32_t flags;          /* M40_PROTO_SUB_* */
        struct m40_seq_params p; /* p.prompt points at prompt */
        int32_t *prompt;
        uint32_t seq;   /* engine sequence id while ACTIVE */
        uint32_t n_gen; /* tokens generated so far (the engine's events) */
        uint64_t t_submit_ns;
        struct m40_detok *detok;
        /* Undelivered events, ev[ev_head..n_ev). While ACTIVE, the request's sequence is
         * held in the engine whenever any is left after a delivery (the client's ring is
         * full), so at most one engine step's events of it wait here (two with chained
         * steps, whose worker goes on only while m40d has taken the step before's events,
         * engine/async.c): an ADMITTED, the text
         * of one token (one TEXT event per M40_PROTO_TEXT_MAX bytes of its piece plus the
         * few UTF-8 bytes the detokenizer held back), the detokenizer's final flush and the
         * final DONE or ERROR. The bound depends on the longest token piece of the
         * vocabulary, never on max_tokens. */
        struct m40_proto_ev *ev;
        uint32_t n_ev, ev_head, cap_ev;
        bool held; /* its engine sequence is held (m40_engine_hold) */
        /* CLOCK_MONOTONIC ns of the last delivery of its events while some of them wait
         * (the client stopped reading); 0 when none waits. hold_timeout counts from it. */
        uint64_t t_unread_ns;
};

struct m40_sched_client {
        struct m40_sched_client *prev, *next;
        struct m40_ipc_region region;
        struct req *reqs, *last;
        uint32_t n_reqs, n_active, n_queued;
        uint32_t n_held; /* of n_active */
        bool ev_waiting; /* we raised the region's ev_waiting word */
        int broken;
        uint64_t vtime; /* ns of parsing charged to it (read_clients' fair order) */
};

struct m40_sched {
        struct m40d_config cfg;
        struct m40_engine *e;
        const struct m40_vocab *v;
        const struct m40_chat_template *tmpl;
        struct m40_engine_model model;
        struct m40_sched_client *clients, *rr; /* rr: where the next admission round starts */
        struct req **active;                   /* (n_slots) */
        uint32_t n_slots; /* the engine's slots: max_sequences + held_sequences */
        uint32_t n_active, n_queued, n_clients;
        uint32_t n_held;      /* active requests whose sequence is held */
        uint32_t pages_total; /* the engine's KV pages (reserved by it at admission) */
        uint32_t max_ctx;
        uint32_t pages_per_client; /* max_kv_percent_per_client of pages_total */
        uint64_t requests;
        uint8_t *payload; /* (max_request_bytes) copy of one submission's payload */
        int32_t *toks;    /* (max_ctx) tokenizer output */
        char *chat;       /* formatted chat text */
        size_t cap_chat;
        struct m40_tok_scratch *scratch;
        bool draining;
        bool stepping;          /* a step is in flight on the engine's thread (m40_engine_pump) */
        bool chaining;          /* it was pumped with m40_engine_chain on (sched.c chain_ok) */
        uint64_t step_start_ns; /* when start() pumped the step in flight */
        struct m40_steptimes times; /* of the steps, for STATUS */
        uint64_t vclock;            /* vtime of the client read last */
        uint64_t parse_resume_ns;   /* parse_paused(): no parsing before, while sequences run */
        size_t max_piece; /* request.c: most text bytes one token stands for; 0: not known yet */
};

/* now_ns - CLOCK_MONOTONIC in ns, the scheduler's clock. */
static inline uint64_t now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* has_backlog - whether c has events that wait for delivery (its ring was full, or they
 * came after the last delivery). */
static inline bool has_backlog(const struct m40_sched_client *c)
{
        for (const struct req *r = c->reqs; r; r = r->next)
                if (r->ev_head < r->n_ev)
                        return true;
        return false;
}

/* decoding - active sequences that are not held: those that take part in steps. */
static inline uint32_t decoding(const struct m40_sched *s)
{
        return s->n_active - s->n_held;
}

/* read_clients (intake.c) - turns submissions into requests for up to parse_budget_ms (at least
 * one), one at a time from the client with submissions waiting that has been charged the
 * least parsing time (start-time fair queueing: a cheap request is not kept behind another
 * client's flood of long prompts). The rest wait for the next round, so that connections,
 * STATUS and the watchdog are served in between. Runs between engine steps only (parsing
 * beside a step took the CPU from a CPU engine's step), and not while parse_paused(). */
void read_clients(struct m40_sched *s);
/* intake_held (intake.c) - whether c's submissions stay in its ring for now: it has
 * max_requests_per_client requests and events of them wait for delivery (an ERROR of
 * the limit among them, or its event ring is full). Backpressure instead of dropping:
 * a client submits ahead of the errors it has not been able to read yet (a busy machine
 * delays its reads, and one round reads a whole ring of submissions), so requests past
 * the limit are taken one at a time, each after the last one's error was delivered; a
 * full submission ring then tells the client to wait (libm40: -EAGAIN). */
bool intake_held(const struct m40_sched *s, const struct m40_sched_client *c);
/* parse_paused (intake.c) - while sequences run, parsing takes at most half of the main loop's
 * time: a round that parsed for T is followed by T without parsing (read_clients). */
bool parse_paused(const struct m40_sched *s, uint64_t t);

/* req_from_sub - builds a request from submission sub and its payload (both private
 * copies). Returns 0 and a QUEUED request in *ret, or a negative code with a message for
 * the client's ERROR event in why. */
int req_from_sub(struct m40_sched *s, const struct m40_proto_sub *sub, const uint8_t *payload,
                 struct req **ret, char *why, size_t whylen);
/* req_free - frees r's memory (not its engine sequence); returns NULL. */
struct req *req_free(struct req *r);
/* req_event - appends a zeroed event of type for r (request id filled in) and returns it
 * for the caller to complete, or NULL when out of memory. */
struct m40_proto_ev *req_event(struct req *r, uint32_t type);
/* req_text - appends len bytes of text as TEXT events, split at UTF-8 boundaries; token
 * goes on the last one. Returns 0 or -ENOMEM. */
int req_text(struct req *r, const char *text, size_t len, int32_t token, uint64_t t_ns);
/* req_error - appends the final ERROR event (err, message why) and marks r DONE. */
void req_error(struct req *r, int err, const char *why);
/* done_event - appends the final DONE event (finish reason, n_gen generated tokens) and
 * marks r DONE; without memory for it, the client sees its request end with the socket. */
void done_event(struct req *r, uint32_t finish, uint32_t n_gen);

#endif
