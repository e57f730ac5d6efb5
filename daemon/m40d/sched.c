/* sched.c - the scheduler (see sched.h): clients and their requests, fair admission with
 * KV reservation, engine steps, turning engine events into text, delivery into rings. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "m40/error.h"
#include "m40d/sched_impl.h"
#include "text/vocab.h"

static uint64_t now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int m40_sched_new(const struct m40d_config *cfg, struct m40_engine *e, const struct m40_vocab *v,
                  enum m40_chat_tmpl tmpl, struct m40_sched **ret)
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
        s->page_tokens = st.kv_page_tokens ? st.kv_page_tokens : 16;
        s->max_ctx = cfg->max_context;
        if (!s->max_ctx)
                s->max_ctx = s->model.n_ctx_train && s->model.n_ctx_train < 4096
                                     ? s->model.n_ctx_train
                                     : 4096;
        s->active = calloc(cfg->max_sequences, sizeof(*s->active));
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
        for (uint32_t i = 0; i < s->cfg.max_sequences; i++) {
                if (s->active[i] == r) {
                        s->active[i] = NULL;
                        break;
                }
        }
        s->n_active--;
        r->cl->n_active--;
        s->pages_reserved -= r->pages;
        r->pages = 0;
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

static void append_req(struct m40_sched_client *c, struct req *r)
{
        r->cl = c;
        r->next = NULL;
        if (c->last)
                c->last->next = r;
        else
                c->reqs = r;
        c->last = r;
        c->n_reqs++;
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

static void done_event(struct req *r, uint32_t finish, uint32_t n_gen)
{
        struct m40_proto_ev *e = req_event(r, M40_PROTO_EV_DONE);

        r->state = REQ_DONE;
        if (e) {
                e->finish = finish;
                e->n_prompt = r->p.n_prompt;
                e->n_generated = n_gen;
        }
}

static void cancel_req(struct m40_sched *s, struct m40_sched_client *c, uint64_t id)
{
        for (struct req *r = c->reqs; r; r = r->next) {
                if (r->id != id)
                        continue;
                if (r->state == REQ_QUEUED) {
                        c->n_queued--;
                        s->n_queued--;
                        done_event(r, M40_PROTO_FINISH_CANCEL, 0);
                } else if (r->state == REQ_ACTIVE) {
                        m40_engine_cancel(s->e, r->seq); /* DONE follows from its event */
                }
                return;
        }
}

/* A rejected submission still gets a request record, to carry its ERROR event. */
static void reject(struct m40_sched_client *c, uint64_t id, int err, const char *why)
{
        struct req *r = calloc(1, sizeof(*r));

        if (!r)
                return;
        r->id = id;
        append_req(c, r);
        req_error(r, err, why);
}

/* read_one - takes c's next submission (there is one: the caller looked). */
static void read_one(struct m40_sched *s, struct m40_sched_client *c)
{
        struct m40_proto_sub sub;
        struct req *r;
        char why[M40_PROTO_TEXT_MAX + 1];
        int k = m40_ipc_region_pop(&c->region, &sub, s->payload);

        if (k <= 0) {
                c->broken = k;
                return;
        }
        if (sub.op == M40_PROTO_OP_CANCEL) {
                cancel_req(s, c, sub.req);
                return;
        }
        if (sub.op != M40_PROTO_OP_SUBMIT) {
                c->broken = M40_EPROTO;
                return;
        }
        if (c->n_reqs >= s->cfg.max_requests_per_client) {
                if (c->n_reqs >= 2 * s->cfg.max_requests_per_client) {
                        c->broken = M40_EPROTO; /* it ignores the errors it got */
                        return;
                }
                snprintf(why, sizeof(why), "too many requests (limit %u per client)",
                         s->cfg.max_requests_per_client);
                reject(c, sub.req, M40_ELIMIT, why);
                return;
        }
        if (s->draining) {
                reject(c, sub.req, M40_ESHUTDOWN, "the daemon is shutting down");
                return;
        }
        k = req_from_sub(s, &sub, s->payload, &r, why, sizeof(why));
        if (k) {
                reject(c, sub.req, k, why);
                return;
        }
        s->requests++;
        append_req(c, r);
        r->state = REQ_QUEUED;
        c->n_queued++;
        s->n_queued++;
}

/* read_clients - turns submissions into requests for up to parse_budget_ms (at least
 * one), one at a time from the client with submissions waiting that has been charged the
 * least parsing time (start-time fair queueing: a cheap request is not kept behind another
 * client's flood of long prompts). The rest wait for the next round, so that connections,
 * STATUS and the watchdog are served in between. While sequences can run, parsing takes at
 * most half of the time: a round that parsed for T is followed by T without parsing. */
static void read_clients(struct m40_sched *s)
{
        const uint64_t budget = (uint64_t)s->cfg.parse_budget_ms * 1000000u;
        uint64_t t0 = now_ns(), t;

        if (s->n_active > s->n_held && t0 < s->parse_resume_ns)
                return;
        for (;;) {
                struct m40_sched_client *best = NULL;

                for (struct m40_sched_client *c = s->clients; c; c = c->next) {
                        if (c->broken || !m40_ipc_region_pending(&c->region))
                                continue;
                        if (c->vtime < s->vclock)
                                c->vtime = s->vclock; /* no credit banked while idle */
                        if (!best || c->vtime < best->vtime)
                                best = c;
                }
                if (!best)
                        break;
                s->vclock = best->vtime;
                t = now_ns();
                read_one(s, best);
                /* + 1 us: clients of cheap submissions still take turns */
                best->vtime += now_ns() - t + 1000u;
                if (now_ns() - t0 >= budget)
                        break;
        }
        t = now_ns();
        s->parse_resume_ns = t + (t - t0);
}

static uint32_t pages_for(const struct m40_sched *s, const struct req *r)
{
        uint64_t pos = (uint64_t)r->p.n_prompt + r->p.stop.max_tokens;

        if (pos > s->max_ctx)
                pos = s->max_ctx;
        return (uint32_t)((pos + s->page_tokens - 1) / s->page_tokens);
}

static struct req *first_queued(struct m40_sched_client *c)
{
        for (struct req *r = c->reqs; r; r = r->next)
                if (r->state == REQ_QUEUED)
                        return r;
        return NULL;
}

/* The client to admit from next: fewest running sequences, ties in round-robin order. A
 * client with a held sequence is skipped: its event ring is full, and a sequence admitted
 * for it would only sit held in a slot that another client could use. */
static struct m40_sched_client *pick_client(struct m40_sched *s)
{
        struct m40_sched_client *best = NULL, *c = s->rr ? s->rr : s->clients;

        for (uint32_t i = 0; i < s->n_clients; i++) {
                if (c->n_queued && !c->broken && !c->n_held &&
                    (!best || c->n_active < best->n_active))
                        best = c;
                c = c->next ? c->next : s->clients;
        }
        return best;
}

static void admit(struct m40_sched *s)
{
        while (s->n_queued && s->n_active < s->cfg.max_sequences) {
                struct m40_sched_client *c = pick_client(s);
                struct req *r = c ? first_queued(c) : NULL;
                struct m40_proto_ev *e;
                uint32_t need, slot = 0;
                int k;

                if (!r)
                        return;
                need = pages_for(s, r);
                if (need > s->pages_total) {
                        c->n_queued--;
                        s->n_queued--;
                        req_error(r, M40_ELIMIT,
                                  "the request needs more KV memory than the "
                                  "daemon has");
                        continue;
                }
                if (s->pages_reserved + need > s->pages_total)
                        return; /* wait for pages; later clients wait too (no overtaking) */
                k = m40_engine_admit(s->e, &r->p, &r->seq);
                if (k == -EBUSY)
                        return;
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
                r->pages = need;
                s->pages_reserved += need;
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
        for (uint32_t i = 0; i < s->cfg.max_sequences; i++)
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
                return; /* its client is gone */
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

/* Runs one engine step when a sequence is not held (a step of held sequences alone would
 * do nothing), then turns the engine's events into request events: also those of
 * sequences cancelled since the last step, held ones included. */
static int step(struct m40_sched *s)
{
        struct m40_event ev[64];
        size_t n;
        uint64_t t;
        int k = s->n_active > s->n_held ? m40_engine_step(s->e) : 0;

        t = now_ns();
        while ((n = m40_engine_events(s->e, ev, 64)) > 0)
                for (size_t i = 0; i < n; i++)
                        on_event(s, &ev[i], t);
        if (k < 0) {
                /* the engine stays usable, but these sequences' state is unknown */
                m40_sched_cancel_all(s, k);
        }
        return k;
}

/* Moves undelivered events into c's ring, oldest request first; frees finished requests.
 * Backpressure: a running request with events left over (the ring is full) has its
 * sequence held until they are all delivered, which bounds what waits here
 * (sched_impl.h). Holding as soon as one event is left, rather than at some larger
 * backlog, keeps that bound to one step's events while the client still has a full ring
 * of events to read, so a client that reads steadily is never slowed by it. */
static bool deliver(struct m40_sched *s, struct m40_sched_client *c)
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

                while (space > 0 && r->ev_head < r->n_ev) {
                        m40_ipc_region_push(&c->region, &r->ev[r->ev_head++]);
                        space--;
                        pushed = true;
                }
                if (r->state == REQ_ACTIVE && r->held != (r->ev_head < r->n_ev) &&
                    !m40_engine_hold(s->e, r->seq, !r->held))
                        count_hold(s, r, !r->held);
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

int m40_sched_run(struct m40_sched *s)
{
        bool work = false;

        read_clients(s);
        admit(s);
        if (s->n_active) {
                work = s->n_active > s->n_held;
                step(s);
        }
        for (struct m40_sched_client *c = s->clients; c; c = c->next)
                if (!c->broken)
                        work |= deliver(s, c);
        /* Queued requests that admit() left behind wait for a slot or pages (freed by a
         * step, counted below, or by a client leaving) or for their client to read: each of
         * those wakes the daemon, so they are no reason to spin. Held sequences neither. */
        return work || s->n_active > s->n_held;
}

/* has_backlog - whether c has events that did not fit its ring. */
static bool has_backlog(const struct m40_sched_client *c)
{
        for (const struct req *r = c->reqs; r; r = r->next)
                if (r->ev_head < r->n_ev)
                        return true;
        return false;
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
        bool pending = false;

        for (struct m40_sched_client *c = s->clients; c; c = c->next) {
                if (sleeping && !c->broken && has_backlog(c))
                        set_ev_waiting(c, true); /* the next fence orders it before the look */
                else if (c->ev_waiting)
                        set_ev_waiting(c, false);
                m40_ipc_region_sleep(&c->region, sleeping);
                if (sleeping && !c->broken)
                        pending |= m40_ipc_region_pending(&c->region) ||
                                   (c->ev_waiting && m40_ipc_region_space(&c->region) != 0);
        }
        return pending;
}

void m40_sched_drain(struct m40_sched *s)
{
        s->draining = true;
        for (struct m40_sched_client *c = s->clients; c; c = c->next) {
                for (struct req *r = c->reqs; r; r = r->next) {
                        if (r->state != REQ_QUEUED)
                                continue;
                        c->n_queued--;
                        s->n_queued--;
                        req_error(r, M40_ESHUTDOWN, "the daemon is shutting down");
                }
        }
}

void m40_sched_cancel_all(struct m40_sched *s, int err)
{
        char why[M40_PROTO_TEXT_MAX];

        snprintf(why, sizeof(why), "%s",
                 err == M40_ESHUTDOWN ? "the daemon is shutting down" : m40_strerror(err));
        for (uint32_t i = 0; i < s->cfg.max_sequences; i++) {
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

        m40_engine_stats(s->e, &st);
        ret->clients = s->n_clients;
        ret->active = st.active_seqs;
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
}
