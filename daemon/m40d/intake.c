/* intake.c - the scheduler's intake (see sched.h): submissions read from the clients'
 * rings between engine steps, in fair order and within parsing's share of the loop, each
 * one turned into a queued request, a cancel, or a rejection that carries its ERROR event;
 * draining closes it. */
#include <stdio.h>
#include <stdlib.h>

#include "m40/error.h"
#include "m40d/sched_impl.h"

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

bool intake_held(const struct m40_sched *s, const struct m40_sched_client *c)
{
        return c->n_reqs >= s->cfg.max_requests_per_client && has_backlog(c);
}

bool parse_paused(const struct m40_sched *s, uint64_t t)
{
        return decoding(s) > 0 && t < s->parse_resume_ns;
}

void read_clients(struct m40_sched *s)
{
        const uint64_t budget = (uint64_t)s->cfg.parse_budget_ms * 1000000u;
        uint64_t t0 = now_ns(), t;

        if (parse_paused(s, t0))
                return;
        for (;;) {
                struct m40_sched_client *best = NULL;

                for (struct m40_sched_client *c = s->clients; c; c = c->next) {
                        if (c->broken || !m40_ipc_region_pending(&c->region) || intake_held(s, c))
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

int m40_sched_next_ms(const struct m40_sched *s)
{
        const uint64_t t = now_ns();

        if (!parse_paused(s, t))
                return -1;
        return (int)((s->parse_resume_ns - t + 999999u) / 1000000u);
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
