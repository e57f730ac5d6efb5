/* request.c - one request's life outside the engine: parsing a submission's payload
 * records, applying the daemon's sampling defaults and limits, formatting chat, tokenizing,
 * and queueing the request's events until they are delivered. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "m40/error.h"
#include "engine/sampler.h"
#include "m40d/sched_impl.h"
#include "text/vocab.h"

struct m40_proto_ev *req_event(struct req *r, uint32_t type)
{
        struct m40_proto_ev *e;

        if (r->n_ev == r->cap_ev) {
                uint32_t live = r->n_ev - r->ev_head;

                if (r->ev_head) { /* reuse delivered room first */
                        memmove(r->ev, r->ev + r->ev_head, live * sizeof(*r->ev));
                        r->n_ev = live;
                        r->ev_head = 0;
                }
                if (r->n_ev == r->cap_ev) {
                        uint32_t cap = r->cap_ev ? 2 * r->cap_ev : 8;
                        struct m40_proto_ev *n = realloc(r->ev, cap * sizeof(*n));

                        if (!n)
                                return NULL;
                        r->ev = n;
                        r->cap_ev = cap;
                }
        }
        e = &r->ev[r->n_ev++];
        memset(e, 0, sizeof(*e));
        e->type = type;
        e->req = r->id;
        e->token = -1;
        return e;
}

int req_text(struct req *r, const char *text, size_t len, int32_t token, uint64_t t_ns)
{
        do {
                size_t n = len;
                struct m40_proto_ev *e;

                if (n > M40_PROTO_TEXT_MAX) {
                        n = M40_PROTO_TEXT_MAX;
                        while (n > 1 && ((unsigned char)text[n] & 0xc0) == 0x80)
                                n--; /* do not cut a UTF-8 sequence */
                }
                e = req_event(r, M40_PROTO_EV_TEXT);
                if (!e)
                        return -ENOMEM;
                memcpy(e->text, text, n);
                e->len = (uint32_t)n;
                e->token = n == len ? token : -1;
                e->t_ns = t_ns;
                text += n;
                len -= n;
        } while (len);
        return 0;
}

void req_error(struct req *r, int err, const char *why)
{
        struct m40_proto_ev *e = req_event(r, M40_PROTO_EV_ERROR);

        r->state = REQ_DONE;
        if (!e)
                return; /* out of memory: the client sees its request end with the socket */
        e->error = err;
        e->len = (uint32_t)strnlen(why, M40_PROTO_TEXT_MAX);
        memcpy(e->text, why, e->len);
        e->n_prompt = r->p.n_prompt;
}

void done_event(struct req *r, uint32_t finish, uint32_t n_gen)
{
        struct m40_proto_ev *e = req_event(r, M40_PROTO_EV_DONE);

        r->state = REQ_DONE;
        if (e) {
                e->finish = finish;
                e->n_prompt = r->p.n_prompt;
                e->n_generated = n_gen;
        }
}

struct req *req_free(struct req *r)
{
        if (!r)
                return NULL;
        m40_detok_free(r->detok);
        free(r->prompt);
        free(r->ev);
        free(r);
        return NULL;
}

/* The records of one submission, pointing into the private payload copy. */
struct items {
        const char *prompt;
        uint32_t prompt_len;
        bool has_prompt;
        uint32_t n_msgs;
        struct m40_chat_msg msgs[M40_PROTO_MAX_MESSAGES];
        char *arena; /* NUL-terminated copies of the messages (payload_len + 256 bytes) */
        size_t used;
};

static int parse_items(const struct m40_proto_sub *sub, const uint8_t *pl, struct items *it,
                       struct m40_stop *stop, char *why, size_t whylen)
{
        static const char *const roles[] = {"system", "user", "assistant"};
        uint32_t at = 0;

        while (at < sub->payload_len) {
                struct m40_proto_item h;
                uint32_t size;
                const char *text;

                if (sub->payload_len - at < sizeof(h))
                        goto malformed;
                memcpy(&h, pl + at, sizeof(h));
                if (h.len > sub->payload_len - at - sizeof(h))
                        goto malformed;
                size = m40_proto_item_size(h.len);
                text = (const char *)pl + at + sizeof(h);
                switch (h.kind) {
                case M40_PROTO_ITEM_PROMPT:
                        if (it->has_prompt || (sub->flags & M40_PROTO_SUB_CHAT))
                                goto malformed;
                        it->has_prompt = true;
                        it->prompt = text;
                        it->prompt_len = h.len;
                        break;
                case M40_PROTO_ITEM_SYSTEM:
                case M40_PROTO_ITEM_USER:
                case M40_PROTO_ITEM_ASSISTANT:
                        if (!(sub->flags & M40_PROTO_SUB_CHAT) ||
                            it->n_msgs == M40_PROTO_MAX_MESSAGES || memchr(text, 0, h.len))
                                goto malformed;
                        memcpy(it->arena + it->used, text, h.len);
                        it->arena[it->used + h.len] = 0;
                        it->msgs[it->n_msgs].role = roles[h.kind - M40_PROTO_ITEM_SYSTEM];
                        it->msgs[it->n_msgs++].content = it->arena + it->used;
                        it->used += h.len + 1;
                        break;
                case M40_PROTO_ITEM_STOP:
                        if (stop->n_strings == M40_MAX_STOP_STRINGS || !h.len ||
                            h.len > M40_MAX_STOP_LEN || memchr(text, 0, h.len))
                                goto malformed; /* a NUL would cut the string short */
                        memcpy(stop->strings[stop->n_strings], text, h.len);
                        stop->strings[stop->n_strings++][h.len] = 0;
                        break;
                default:
                        goto malformed;
                }
                if (size > sub->payload_len - at)
                        size = sub->payload_len - at;
                at += size;
        }
        if ((sub->flags & M40_PROTO_SUB_CHAT) ? !it->n_msgs : !it->has_prompt)
                goto malformed;
        return 0;
malformed:
        snprintf(why, whylen, "malformed request payload");
        return M40_EFORMAT;
}

static void sampling_from(const struct m40_sched *s, const struct m40_proto_sub *sub,
                          struct m40_sampling *sp)
{
        const struct m40d_config *c = &s->cfg;
        uint32_t set = sub->set;

        *sp = m40_sampling_default();
        sp->temperature = set & M40_PROTO_SET_TEMPERATURE ? sub->temperature : c->temperature;
        sp->top_k = set & M40_PROTO_SET_TOP_K ? sub->top_k : c->top_k;
        sp->top_p = set & M40_PROTO_SET_TOP_P ? sub->top_p : c->top_p;
        sp->min_p = set & M40_PROTO_SET_MIN_P ? sub->min_p : c->min_p;
        sp->repeat_penalty =
                set & M40_PROTO_SET_REPEAT_PENALTY ? sub->repeat_penalty : c->repeat_penalty;
        sp->seed = set & M40_PROTO_SET_SEED ? sub->seed : c->seed;
        if (set & M40_PROTO_SET_PRESENCE_PENALTY)
                sp->presence_penalty = sub->presence_penalty;
        if (set & M40_PROTO_SET_FREQUENCY_PENALTY)
                sp->frequency_penalty = sub->frequency_penalty;
        if (!(set & M40_PROTO_SET_SEED) && !c->seed &&
            getrandom(&sp->seed, sizeof(sp->seed), GRND_NONBLOCK) != sizeof(sp->seed))
                sp->seed = sub->t_submit_ns ^ s->requests;
}

/* longest_piece - the most bytes of text one token can stand for (the longest piece, and
 * at least 4: an unknown token stands for one UTF-8 character), found once. Every token
 * covers at most this much of a prompt, so a prompt of len bytes has at least
 * len / longest_piece tokens. */
static size_t longest_piece(struct m40_sched *s)
{
        if (s->max_piece)
                return s->max_piece;
        s->max_piece = 4;
        for (uint32_t id = 0; id < s->model.n_vocab; id++) {
                const char *p;
                size_t len;

                if (!m40_vocab_piece(s->v, (int32_t)id, true, &p, &len) && len > s->max_piece)
                        s->max_piece = len;
        }
        return s->max_piece;
}

/* The same ranges as m40d.ini [sampling] (m40_sampler_param_check); the defaults from the
 * config passed them already, so a failure names a field the client set. */
static int check_sampling(const struct m40_sampling *sp, char *why, size_t whylen)
{
        const char *name, *range;

        if (!m40_sampler_params_check(sp, &name, &range))
                return 0;
        snprintf(why, whylen, "%s: expected %s", name, range);
        return -EINVAL;
}

/* The prompt's token ids into s->toks; their count in *ret_n. */
static int tokenize(struct m40_sched *s, const struct m40_proto_sub *sub, const struct items *it,
                    struct m40_stop *stop, size_t *ret_n, char *why, size_t whylen)
{
        unsigned flags = M40_TOKENIZE_ADD_SPECIAL;
        const char *text = it->prompt;
        size_t len = it->prompt_len, n_out;
        int r;

        if (sub->flags & M40_PROTO_SUB_CHAT) {
                size_t n_stop;

                r = m40_chat_render(s->tmpl, it->msgs, it->n_msgs, true, s->chat, s->cap_chat,
                                    &len);
                if (r == -ENOBUFS) {
                        char *c = realloc(s->chat, len + 1);

                        if (!c)
                                return -ENOMEM;
                        s->chat = c;
                        s->cap_chat = len + 1;
                        r = m40_chat_render(s->tmpl, it->msgs, it->n_msgs, true, s->chat,
                                            s->cap_chat, &len);
                }
                if (r) {
                        snprintf(why, whylen, "cannot format the chat: %s", m40_strerror(r));
                        return r;
                }
                text = s->chat;
                flags |= M40_TOKENIZE_PARSE_SPECIAL;
                if (!stop->ignore_eos) { /* a turn's end is an end of generation too */
                        r = m40_chat_stop_tokens(s->v, s->tmpl->tmpl, stop->ids, M40_MAX_STOP_IDS,
                                                 &n_stop);
                        stop->n_ids = r ? M40_MAX_STOP_IDS : (uint32_t)n_stop;
                }
        }
        /* Too long to fit whatever its tokens: refused without the tokenizing, whose time
         * grows faster than the text (seconds for megabytes) and would stall the loop. */
        if ((uint64_t)len >= (uint64_t)longest_piece(s) * s->max_ctx)
                r = -ENOBUFS;
        else
                r = m40_vocab_tokenize_scratch(s->v, s->scratch, text, len, flags, s->toks,
                                               s->max_ctx, &n_out);
        if (r == -ENOBUFS || (!r && n_out >= s->max_ctx)) {
                snprintf(why, whylen, "the prompt does not fit the context of %u tokens",
                         s->max_ctx);
                return -E2BIG;
        }
        if (!r && !n_out) {
                snprintf(why, whylen, "the prompt is empty");
                return -EINVAL;
        }
        if (r) {
                snprintf(why, whylen, "cannot tokenize the prompt: %s", m40_strerror(r));
                return r;
        }
        *ret_n = n_out;
        return 0;
}

int req_from_sub(struct m40_sched *s, const struct m40_proto_sub *sub, const uint8_t *payload,
                 struct req **ret, char *why, size_t whylen)
{
        struct items *it;
        struct req *r;
        size_t n;
        int rc;

        *why = 0;
        r = calloc(1, sizeof(*r));
        it = calloc(1, sizeof(*it));
        if (it)
                it->arena = malloc((size_t)sub->payload_len + M40_PROTO_MAX_MESSAGES + 1);
        if (!r || !it || !it->arena) {
                rc = -ENOMEM;
                goto fail;
        }
        r->id = sub->req;
        r->flags = sub->flags;
        r->t_submit_ns = sub->t_submit_ns;
        r->p.stop = m40_stop_default();
        rc = parse_items(sub, payload, it, &r->p.stop, why, whylen);
        if (rc)
                goto fail;
        if (sub->flags & ~(uint32_t)M40_PROTO_SUB_ALL) {
                snprintf(why, whylen, "unknown request flags");
                rc = -EINVAL;
                goto fail;
        }
        r->p.stop.max_tokens = sub->max_tokens ? sub->max_tokens : s->cfg.default_max_tokens;
        if (r->p.stop.max_tokens > s->cfg.max_tokens) {
                snprintf(why, whylen, "max_tokens %u exceeds the daemon's limit of %u",
                         r->p.stop.max_tokens, s->cfg.max_tokens);
                rc = M40_ELIMIT;
                goto fail;
        }
        r->p.stop.ignore_eos = sub->flags & M40_PROTO_SUB_IGNORE_EOS;
        sampling_from(s, sub, &r->p.sampling);
        rc = check_sampling(&r->p.sampling, why, whylen);
        if (rc)
                goto fail;
        rc = tokenize(s, sub, it, &r->p.stop, &n, why, whylen);
        if (rc)
                goto fail;
        r->prompt = malloc(n * sizeof(int32_t));
        rc = r->prompt ? m40_detok_new(s->v, 0, &r->detok) : -ENOMEM;
        if (rc)
                goto fail;
        memcpy(r->prompt, s->toks, n * sizeof(int32_t));
        r->p.prompt = r->prompt;
        r->p.n_prompt = (uint32_t)n;
        free(it->arena);
        free(it);
        *ret = r;
        return 0;
fail:
        if (!*why)
                snprintf(why, whylen, "%s", m40_strerror(rc));
        if (it)
                free(it->arena);
        free(it);
        req_free(r);
        return rc;
}
