/* sched.c - the scheduler (see sched.h): clients and their requests, fair admission
 * within the engine's KV reservation and per-client caps, engine steps, turning engine
 * events into text, delivery into rings, holding and resuming the sequences of clients
 * that do not read, and the hold timeout. Reading submissions is intake.c's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "m40/error.h"
#include "m40d/log.h"
#include "m40d/sched_impl.h"
#include "text/vocab.h"

int m40_sched_new(const struct m40d_config *cfg, struct m40_engine *e, const struct m40_vocab *v,
                  const struct m40_chat_template *tmpl, struct m40_sched **ret)
{
        struct m40_engine_stats st;
        struct m40_sched *s = calloc(1, sizeof(*s));

        if (!s)
                return -ENOMEM;
        s->cfg = *cfg;
        s->e = e;
        s->v = v;
        s->tmpl = tmpl;
        m40_engine_model(e, &s->model);
        m40_engine_stats(e, &st);
        s->pages_total = st.kv_pages_total;
        s->max_ctx = cfg->max_context;
        if (!s->max_ctx)
                s->max_ctx = s->model.n_ctx_train && s->model.n_ctx_train < 4096
                                     ? s->model.n_ctx_train
                                     : 4096;
        s->pages_per_client =
                (uint32_t)((uint64_t)s->pages_total * cfg->max_kv_percent_per_client / 100u);
        s->n_slots = cfg->max_sequences + cfg->held_sequences;
        s->active = calloc(s->n_slots, sizeof(*s->active));
        s->payload = malloc(cfg->max_prompt_bytes + 4096u);
        s->toks = malloc((size_t)s->max_ctx * sizeof(int32_t));
        if (!s->active || !s->payload || !s->toks || m40_tok_scratch_new(&s->scratch)) {
                m40_sched_free(s);
                return -ENOMEM;
        }
        *ret = s;
        return 0;
}

struct m40_sched *m40_sched_free(struct m40_sched *s)
{
        if (!s)
                return NULL;
        while (s->clients)
                m40_sched_client_free(s, s->clients);
        free(s->active);
        free(s->payload);
        free(s->toks);
        free(s->chat);
        m40_tok_scratch_free(s->scratch);
        free(s);
        return NULL;
}

int m40_sched_client_new(struct m40_sched *s, struct m40_sched_client **ret)
{
        struct m40_sched_client *c = calloc(1, sizeof(*c));
        int r;

        if (!c)
                return -ENOMEM;
        r = m40_ipc_region_init(&c->region, 64, 256, s->cfg.max_prompt_bytes + 4096u);
        if (r) {
                free(c);
                return r;
        }
        c->next = s->clients;
        if (s->clients)
                s->clients->prev = c;
        s->clients = c;
        s->n_clients++;
        *ret = c;
        return 0;
}

/* Counts r's hold (the engine's flag is set or cleared by the caller). */
static void count_hold(struct m40_sched *s, struct req *r, bool held)
{
        if (r->held == held)
                return;
        r->held = held;
        if (held) {
                s->n_held++;
                r->cl->n_held++;
        } else {
                s->n_held--;
                r->cl->n_held--;
        }
}

/* Takes an ACTIVE request out of the engine's bookkeeping (its slot and pages). */
static void unadmit(struct m40_sched *s, struct req *r)
{
        for (uint32_t i = 0; i < s->n_slots; i++) {
                if (s->active[i] == r) {
                        s->active[i] = NULL;
                        break;
                }
        }
        s->n_active--;
        r->cl->n_active--;
        count_hold(s, r, false); /* the engine's finish or cancel dropped the hold */
}

struct m40_sched_client *m40_sched_client_free(struct m40_sched *s, struct m40_sched_client *c)
{
        if (!c)
                return NULL;
        while (c->reqs) {
                struct req *r = c->reqs;

                c->reqs = r->next;
                if (r->state == REQ_ACTIVE) {
                        m40_engine_cancel(s->e, r->seq); /* frees its slot and KV pages */
                        unadmit(s, r);
                } else if (r->state == REQ_QUEUED) {
                        s->n_queued--;
                }
                req_free(r);
        }
        if (c->prev)
                c->prev->next = c->next;
        else
                s->clients = c->next;
        if (c->next)
                c->next->prev = c->prev;
        if (s->rr == c)
                s->rr = c->next;
        s->n_clients--;
        m40_ipc_region_done(&c->region);
        free(c);
        return NULL;
}

struct m40_ipc_region *m40_sched_client_region(struct m40_sched_client *c)
{
        return &c->region;
}

int m40_sched_client_broken(const struct m40_sched_client *c)
{
        return c->broken;
}

static void unlink_req(struct m40_sched_client *c, struct req *r, struct req *prev)
{
        if (prev)
                prev->next = r->next;
        else
                c->reqs = r->next;
        if (c->last == r)
                c->last = prev;
        c->n_reqs--;
}

/* client_pages - the KV pages c's sequences hold in the engine (the engine's figures: a
 * running sequence's reservation, a held one's filled pages). */
static uint32_t client_pages(const struct m40_sched *s, const struct m40_sched_client *c)
{
        uint32_t n = 0;

        for (const struct req *r = c->n_active ? c->reqs : NULL; r; r = r->next) {
                int k = r->state == REQ_ACTIVE ? m40_engine_kv_pages(s->e, r->seq) : 0;

                n += k > 0 ? (uint32_t)k : 0;
        }
        return n;
}

static struct req *first_queued(struct m40_sched_client *c)
{
        for (struct req *r = c->reqs; r; r = r->next)
                if (r->state == REQ_QUEUED)
                        return r;
        return NULL;
}

/* may_admit - whether c may get a new sequence now: it is not broken, it reads its events
 * (a client with a held sequence or events waiting for room in its ring would only get
 * one more held sequence) and it is within its caps (sequences, and KV pages unless it
 * has none in the engine). */
static bool may_admit(const struct m40_sched *s, struct m40_sched_client *c)
{
        const struct req *r = first_queued(c);

        if (!r || c->broken || c->n_held || c->n_active >= s->cfg.max_sequences_per_client)
                return false;
        if (c->n_active &&
            client_pages(s, c) + m40_engine_kv_need(s->e, &r->p) > s->pages_per_client)
                return false;
        return !has_backlog(c);
}

/* The client to admit from next: fewest sequences in the engine, ties in round-robin
 * order, among those that may_admit(). */
static struct m40_sched_client *pick_client(struct m40_sched *s)
{
        struct m40_sched_client *best = NULL, *c = s->rr ? s->rr : s->clients;

        for (uint32_t i = 0; i < s->n_clients; i++) {
                if (c->n_queued && (!best || c->n_active < best->n_active) && may_admit(s, c))
                        best = c;
                c = c->next ? c->next : s->clients;
        }
        return best;
}

/* hold - holds r's sequence (its client's ring is full): it leaves the decoding
 * sequences, and the engine keeps only the KV pages it has filled. */
static void hold(struct m40_sched *s, struct req *r)
{
        if (m40_engine_hold(s->e, r->seq, true))
                return;
        count_hold(s, r, true);
}

/* resume - releases held r (its client has read everything) when no step is in flight,
 * a decoding place is free and the engine can reserve the rest of its KV pages again (else
 * -ENOSPC: it stays held); returns whether it did. Between steps only: a release queued
 * during a step could not tell its -ENOSPC, and r would count as decoding while the
 * engine still held it (the next round after the step resumes it). */
static bool resume(struct m40_sched *s, struct req *r)
{
        if (s->stepping || decoding(s) >= s->cfg.max_sequences ||
            m40_engine_hold(s->e, r->seq, false))
                return false;
        count_hold(s, r, false);
        return true;
}

/* resume_ready - resumes the held requests whose clients have read everything, oldest
 * client first; returns false when one of them must go on waiting. */
static bool resume_ready(struct m40_sched *s)
{
        bool all = true;

        if (!s->n_held)
                return true;
        for (struct m40_sched_client *c = s->clients; c; c = c->next)
                for (struct req *r = c->n_held ? c->reqs : NULL; r; r = r->next)
                        if (r->state == REQ_ACTIVE && r->held && r->ev_head == r->n_ev)
                                all &= resume(s, r);
        return all;
}

/* expire - cancels the held requests whose clients have read none of their events for
 * hold_timeout: frees their slots and pages and queues ERROR M40_EUNREAD after their
 * pending events. */
static void expire(struct m40_sched *s, uint64_t t)
{
        const uint64_t limit = (uint64_t)s->cfg.hold_timeout_s * 1000000000u;
        char why[M40_PROTO_TEXT_MAX + 1];

        if (!limit || !s->n_held)
                return;
        for (struct m40_sched_client *c = s->clients; c; c = c->next) {
                for (struct req *r = c->n_held ? c->reqs : NULL; r; r = r->next) {
                        if (r->state != REQ_ACTIVE || !r->held || !r->t_unread_ns ||
                            t - r->t_unread_ns < limit)
                                continue;
                        m40_engine_cancel(s->e, r->seq); /* its event finds no request */
                        unadmit(s, r);
                        snprintf(why, sizeof(why),
                                 "cancelled: its events went unread for %u s (hold_timeout)",
                                 s->cfg.hold_timeout_s);
                        req_error(r, M40_EUNREAD, why);
                        m40d_log(LOG_WARNING,
                                 "request %llu: cancelled after %u generated tokens: its client "
                                 "read none of its events for %u s (hold_timeout)",
                                 (unsigned long long)r->id, r->n_gen, s->cfg.hold_timeout_s);
                }
        }
}

static void admit(struct m40_sched *s)
{
        if (!resume_ready(s))
                return; /* held requests that can go on come first */
        while (s->n_queued && decoding(s) < s->cfg.max_sequences && s->n_active < s->n_slots) {
                struct m40_sched_client *c = pick_client(s);
                struct req *r = c ? first_queued(c) : NULL;
                struct m40_proto_ev *e;
                uint32_t slot = 0;
                int k;

                if (!r)
                        return;
                if (m40_engine_kv_need(s->e, &r->p) > s->pages_total) {
                        c->n_queued--;
                        s->n_queued--;
                        req_error(r, M40_ELIMIT,
                                  "the request needs more KV memory than the "
                                  "daemon has");
                        continue;
                }
                r->p.kv_reserve = true; /* the engine reserves its pages, or says -ENOSPC */
                k = m40_engine_admit(s->e, &r->p, &r->seq);
                if (k == -EBUSY || k == -ENOSPC)
                        return; /* wait for a slot or pages; later clients wait too */
                c->n_queued--;
                s->n_queued--;
                s->rr = c->next;
                if (k) {
                        req_error(r, k, m40_strerror(k));
                        continue;
                }
                while (s->active[slot])
                        slot++;
                s->active[slot] = r;
                s->n_active++;
                c->n_active++;
                r->state = REQ_ACTIVE;
                e = req_event(r, M40_PROTO_EV_ADMITTED);
                if (e) {
                        e->t_ns = now_ns();
                        e->t_submit_ns = r->t_submit_ns;
                        e->n_prompt = r->p.n_prompt;
                }
        }
}

static struct req *find_active(struct m40_sched *s, uint32_t seq)
{
        for (uint32_t i = 0; i < s->n_slots; i++)
                if (s->active[i] && s->active[i]->seq == seq)
                        return s->active[i];
        return NULL;
}

static void on_event(struct m40_sched *s, const struct m40_event *ev, uint64_t t)
{
        struct req *r = find_active(s, ev->seq);
        const char *text;
        size_t len;

        if (!r)
                return; /* its client is gone, or it was cancelled by expire() */
        r->n_gen = ev->n_generated;
        if (ev->token >= 0 && !m40_detok_push(r->detok, ev->token, &text, &len) &&
            (len || (r->flags & M40_PROTO_SUB_TOKENS)))
                req_text(r, text, len, ev->token, t);
        if (ev->finish == M40_FINISH_NONE)
                return;
        if (!m40_detok_flush(r->detok, &text, &len) && len)
                req_text(r, text, len, -1, t);
        unadmit(s, r);
        done_event(r, ev->finish, ev->n_generated);
}

/* take_events - turns the engine's events into request events: those of the step just
 * collected, and of sequences cancelled since, held ones included. */
static void take_events(struct m40_sched *s)
{
        struct m40_event ev[64];
        uint64_t t = now_ns();
        size_t n;

        while ((n = m40_engine_events(s->e, ev, 64)) > 0)
                for (size_t i = 0; i < n; i++)
                        on_event(s, &ev[i], t);
}

/* collect - when the step in flight has finished: its events (and those of the calls
 * queued meanwhile) become request events, and s->stepping says whether a chained step
 * goes on; when no step is in flight, the events of cancels. */
static void collect(struct m40_sched *s)
{
        int k = 0;

        if (s->stepping) {
                struct m40_step_record rec[64];
                const uint64_t t = now_ns();
                size_t n;

                if (!m40_engine_poll(s->e, &k))
                        return;
                s->stepping = m40_engine_in_flight(s->e); /* a chained step goes on */
                /* every step finished since: a chained one began without a pump */
                while ((n = m40_engine_step_records(s->e, rec, 64)) > 0) {
                        for (size_t i = 0; i < n; i++) {
                                if (rec[i].chained)
                                        m40_steptimes_pumped(&s->times, rec[i].begin_ns);
                                m40_steptimes_collected(&s->times, rec[i].begin_ns, rec[i].end_ns,
                                                        t);
                                s->step_start_ns = rec[i].end_ns; /* the next one's, chained */
                        }
                }
        }
        take_events(s);
        if (k < 0) {
                /* the engine stays usable, but these sequences' state is unknown */
                m40_sched_cancel_all(s, k);
        }
}

/* chain_ok - whether the engine's thread may go on from step to step by itself
 * (m40_engine_chain): nothing waits for the engine between steps: no request to admit, no
 * held sequence (to release, or to cancel at its hold timeout), no client with
 * submissions to parse. Holds and cancels made during a chain end it by themselves. */
static bool chain_ok(const struct m40_sched *s)
{
        if (s->cfg.chain_steps != M40D_CHAIN_ON || s->n_queued || s->n_held)
                return false;
        for (const struct m40_sched_client *c = s->clients; c; c = c->next)
                if (!c->broken && m40_ipc_region_pending(&c->region))
                        return false;
        return true;
}

/* start - with the engine idle: admits what fits and starts a step on the engine's thread
 * when a sequence is not held (a step of held sequences alone would do nothing), chained
 * when chain_ok(). */
static void start(struct m40_sched *s)
{
        bool chain;
        int k;

        if (s->stepping)
                return;
        admit(s);
        if (decoding(s) == 0)
                return;
        chain = chain_ok(s);
        /* the engine's flag outlives a step: set when it is wanted, or may still be on */
        k = chain || s->chaining ? m40_engine_chain(s->e, chain) : 0;
        s->chaining = chain;
        k = k ? k : m40_engine_pump(s->e);
        if (k > 0) {
                s->stepping = true;
                s->step_start_ns = now_ns();
                m40_steptimes_pumped(&s->times, s->step_start_ns);
        } else if (k < 0) {
                m40d_log(LOG_ERR, "cannot start an engine step: %s", m40_strerror(k));
                m40_sched_cancel_all(s, k);
        }
}

/* Moves undelivered events into c's ring, oldest request first; frees finished requests.
 * Backpressure: a running request with events left over (the ring is full) has its
 * sequence held until they are all delivered, which bounds what waits here
 * (sched_impl.h), and then resumed when there is room (resume()). Holding as soon as one
 * event is left, rather than at some larger backlog, keeps that bound to one step's
 * events while the client still has a full ring of events to read, so a client that reads
 * steadily is never slowed by it. t: now, for the hold timeout's clock. */
static bool deliver(struct m40_sched *s, struct m40_sched_client *c, uint64_t t)
{
        int space = m40_ipc_region_space(&c->region);
        struct req *prev = NULL, *r = c->reqs;
        bool pushed = false;

        if (space < 0) {
                c->broken = space;
                return false;
        }
        while (r) {
                struct req *next = r->next;
                bool moved = false;

                while (space > 0 && r->ev_head < r->n_ev) {
                        m40_ipc_region_push(&c->region, &r->ev[r->ev_head++]);
                        space--;
                        moved = true;
                }
                pushed |= moved;
                if (r->ev_head == r->n_ev)
                        r->t_unread_ns = 0;
                else if (moved || !r->t_unread_ns)
                        r->t_unread_ns = t; /* the client still reads, or stopped now */
                if (r->state == REQ_ACTIVE && r->ev_head < r->n_ev && !r->held)
                        hold(s, r);
                else if (r->state == REQ_ACTIVE && r->ev_head == r->n_ev && r->held)
                        resume(s, r);
                if (r->state == REQ_DONE && r->ev_head == r->n_ev) {
                        unlink_req(c, r, prev);
                        req_free(r);
                } else {
                        prev = r;
                }
                r = next;
        }
        if (pushed)
                m40_ipc_region_wake(&c->region);
        return pushed;
}

static bool deliver_all(struct m40_sched *s)
{
        const uint64_t t = now_ns();
        bool pushed = false;

        for (struct m40_sched_client *c = s->clients; c; c = c->next)
                if (!c->broken)
                        pushed |= deliver(s, c, t);
        return pushed;
}

int m40_sched_run(struct m40_sched *s)
{
        bool work;

        /* A chain goes on only while nothing waits for the engine between steps. Checked
         * after every collect, a finished step's included: a client's doorbell that lands
         * on the same wake as a step's end must still stop the chain, else its submission
         * waits for the chain to end by itself. */
        collect(s);
        if (s->stepping && s->chaining && !chain_ok(s)) {
                m40_engine_chain(s->e, false);
                s->chaining = false;
        }
        expire(s, now_ns());
        /* before the next step: hold the sequences of clients whose rings are full */
        work = deliver_all(s);
        if (!s->stepping) {
                /* between steps: parsing and admission, then the next step */
                read_clients(s);
                start(s);
                work |= deliver_all(s);
        }
        if (!s->stepping)
                m40_steptimes_idle(&s->times); /* a later step is no gap: it waited for more */
        /* Queued requests that admit() left behind, and held requests waiting for room to
         * go on, wait for a slot or pages (freed by a step, whose end wakes the caller
         * through m40_sched_fd(), by a client leaving or by the hold timeout, which the
         * caller's idle timeout of at most 1 s checks) or for their client to read: each
         * of those wakes the daemon, so they are no reason to spin. Held sequences
         * neither, nor a step in flight, nor submissions that wait for its end. */
        return work || (!s->stepping && decoding(s) > 0);
}

uint64_t m40_sched_step_age_ns(const struct m40_sched *s)
{
        return s->stepping ? now_ns() - s->step_start_ns : 0;
}

int m40_sched_fd(struct m40_sched *s)
{
        return m40_engine_fd(s->e);
}

/* set_ev_waiting - raises or lowers c's ev_waiting word (m40/proto.h, backpressure). The
 * daemon's only write to that word; it never reads it back. */
static void set_ev_waiting(struct m40_sched_client *c, bool waiting)
{
        __atomic_store_n(&c->region.r->ev_waiting.value, waiting, __ATOMIC_RELEASE);
        c->ev_waiting = waiting;
}

bool m40_sched_sleep(struct m40_sched *s, bool sleeping)
{
        /* submissions wait for the step in flight, or for parsing to resume */
        const bool paused = s->stepping || parse_paused(s, now_ns());
        bool pending = false;

        for (struct m40_sched_client *c = s->clients; c; c = c->next) {
                if (sleeping && !c->broken && has_backlog(c))
                        set_ev_waiting(c, true); /* the next fence orders it before the look */
                else if (c->ev_waiting)
                        set_ev_waiting(c, false);
                m40_ipc_region_sleep(&c->region, sleeping);
                if (sleeping && !c->broken)
                        pending |= (!paused && m40_ipc_region_pending(&c->region) &&
                                    !intake_held(s, c)) ||
                                   (c->ev_waiting && m40_ipc_region_space(&c->region) != 0);
        }
        return pending;
}

void m40_sched_cancel_all(struct m40_sched *s, int err)
{
        char why[M40_PROTO_TEXT_MAX];

        snprintf(why, sizeof(why), "%s",
                 err == M40_ESHUTDOWN ? "the daemon is shutting down" : m40_strerror(err));
        for (uint32_t i = 0; i < s->n_slots; i++) {
                struct req *r = s->active[i];

                if (!r)
                        continue;
                m40_engine_cancel(s->e, r->seq);
                unadmit(s, r);
                req_error(r, err, why);
        }
        /* drop the engine's cancel events: their requests are no longer active */
        for (struct m40_event ev[64]; m40_engine_events(s->e, ev, 64) > 0;)
                ;
}

bool m40_sched_quiet(const struct m40_sched *s, bool with_events)
{
        if (s->n_active || s->n_queued)
                return false;
        if (with_events)
                for (const struct m40_sched_client *c = s->clients; c; c = c->next)
                        if (c->reqs && !c->broken)
                                return false;
        return true;
}

void m40_sched_status(const struct m40_sched *s, struct m40_proto_status *ret)
{
        struct m40_engine_stats st;

        m40_engine_stats(s->e, &st); /* while a step is in flight: as of its start */
        ret->clients = s->n_clients;
        ret->active = s->n_active; /* the scheduler's counts: current during a step too */
        ret->held = s->n_held;
        ret->queued = s->n_queued;
        ret->max_seqs = s->cfg.max_sequences;
        ret->kv_pages_used = st.kv_pages_used;
        ret->kv_pages_total = st.kv_pages_total;
        ret->kv_page_tokens = st.kv_page_tokens;
        ret->kv_page_bytes = st.kv_page_bytes;
        ret->n_ctx = s->max_ctx;
        ret->n_vocab = s->model.n_vocab;
        ret->prompt_tokens = st.prompt_tokens;
        ret->generated_tokens = st.generated_tokens;
        ret->requests = s->requests;
        ret->tokens_per_s = st.tokens_per_s;
        ret->draining = s->draining;
        ret->decode_width = st.decode_width;
        ret->decode_running = st.decode_running;
        m40_steptimes_status(&s->times, ret);
}
