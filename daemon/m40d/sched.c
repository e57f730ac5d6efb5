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

#define SUBS_PER_ROUND 64 /* submissions read from one client per round */

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

static void read_client(struct m40_sched *s, struct m40_sched_client *c)
{
        for (int i = 0; i < SUBS_PER_ROUND && !c->broken; i++) {
                struct m40_proto_sub sub;
                struct req *r;
                char why[M40_PROTO_TEXT_MAX + 1];
                int k = m40_ipc_region_pop(&c->region, &sub, s->payload);

                if (k == 0)
                        return;
                if (k < 0) {
                        c->broken = k;
                        return;
                }
                if (sub.op == M40_PROTO_OP_CANCEL) {
                        cancel_req(s, c, sub.req);
                        continue;
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
                        continue;
                }
                if (s->draining) {
                        reject(c, sub.req, M40_ESHUTDOWN, "the daemon is shutting down");
                        continue;
                }
                k = req_from_sub(s, &sub, s->payload, &r, why, sizeof(why));
                if (k) {
                        reject(c, sub.req, k, why);
                        continue;
                }
                s->requests++;
                append_req(c, r);
                r->state = REQ_QUEUED;
                c->n_queued++;
                s->n_queued++;
        }
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

/* The client to admit from next: fewest running sequences, ties in round-robin order. */
static struct m40_sched_client *pick_client(struct m40_sched *s)
{
        struct m40_sched_client *best = NULL, *c = s->rr ? s->rr : s->clients;

        for (uint32_t i = 0; i < s->n_clients; i++) {
                if (c->n_queued && !c->broken && (!best || c->n_active < best->n_active))
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

static int step(struct m40_sched *s)
{
        struct m40_event ev[64];
        size_t n;
        uint64_t t;
        int k = m40_engine_step(s->e);

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

/* Moves undelivered events into c's ring, oldest request first; frees finished requests. */
static bool deliver(struct m40_sched_client *c)
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

        for (struct m40_sched_client *c = s->clients; c; c = c->next)
                if (!c->broken)
                        read_client(s, c);
        admit(s);
        if (s->n_active) {
                step(s);
                work = true;
        }
        for (struct m40_sched_client *c = s->clients; c; c = c->next)
                if (!c->broken)
                        work |= deliver(c);
        return work || s->n_active || (s->n_queued && s->n_active < s->cfg.max_sequences);
}

bool m40_sched_sleep(struct m40_sched *s, bool sleeping)
{
        bool pending = false;

        for (struct m40_sched_client *c = s->clients; c; c = c->next) {
                m40_ipc_region_sleep(&c->region, sleeping);
                if (sleeping && !c->broken)
                        pending |= m40_ipc_region_pending(&c->region);
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
        ret->n_ctx = s->max_ctx;
        ret->n_vocab = s->model.n_vocab;
        ret->prompt_tokens = st.prompt_tokens;
        ret->generated_tokens = st.generated_tokens;
        ret->requests = s->requests;
        ret->tokens_per_s = st.tokens_per_s;
        ret->draining = s->draining;
}
