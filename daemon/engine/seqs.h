/* seqs.h - the per-sequence bookkeeping of the engine core (core.h), which every engine
 * shares.
 *
 * Owns the sequence slot (struct m40_seq) and what depends only on it and the limits:
 * validation of struct m40_seq_params, the choice and filling of a slot at admit, the stop
 * conditions (stop ids, stop strings, max_tokens, context), the engine's event queue and
 * the slot lookups. The engine core (core.h) drives it; KV reservation is the core's. */
#ifndef M40_ENGINE_SEQS_H
#define M40_ENGINE_SEQS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "kv.h"
#include "sampler.h"

#define M40_SEQ_TAIL_MAX (2 * M40_MAX_STOP_LEN + 256)

enum m40_seq_state { M40_SEQ_FREE = 0, M40_SEQ_ACTIVE, M40_SEQ_DONE };

struct m40_seq {
        uint32_t id;
        enum m40_seq_state state;
        uint64_t order; /* admission order: prompts prefill first come first */
        int32_t *toks;  /* prompt then generated, (cap) */
        uint32_t n_toks, cap, n_prompt, n_past, n_gen;
        struct m40_kv_table kv;
        uint32_t kv_reserve; /* positions reserved at admission (core.h); 0: growing */
        struct m40_sampling sampling;
        struct m40_stop stop;
        uint64_t rng;
        bool keep_logits, has_logits;
        bool held;                   /* m40_engine_hold(): the step planners skip it */
        float *logits;               /* (n_vocab) when keep_logits */
        char tail[M40_SEQ_TAIL_MAX]; /* recent detokenized text, for stop strings */
        size_t tail_len;
        int32_t row;        /* logits row in the current step, or -1 */
        uint32_t prev_past; /* n_past before the current step (CUDA engine's retry) */
};

/* The engine's event queue: ev[head, tail) are waiting to be read. */
struct m40_seq_events {
        struct m40_event *ev; /* (cap) */
        size_t head, tail, cap;
};

/* m40_seq_check_params - 0 when p is a valid request for a model of n_vocab tokens under
 * lim; -EINVAL for a malformed one (sampling fields outside m40_sampler_param_check's
 * ranges included), -E2BIG for a prompt past max_ctx, M40_EUNSUPPORTED for
 * stop strings without a detokenizer (lim->piece). Reads only. */
int m40_seq_check_params(const struct m40_seq_params *p, uint32_t n_vocab,
                         const struct m40_engine_limits *lim);

/* m40_seq_admit - check p, take a slot of seqs (max_seqs of them: a free one first, else a
 * finished one) and fill it from p with the id *next_id and order *next_order, which then
 * advance. On success writes the slot to *ret and returns 0; else returns
 * m40_seq_check_params's error, -EBUSY when every slot is active or -ENOMEM, and
 * changes no slot's state nor the counters. The slot owns its toks and logits buffers. */
int m40_seq_admit(struct m40_seq *seqs, const struct m40_engine_limits *lim, uint32_t n_vocab,
                  const struct m40_seq_params *p, uint32_t *next_id, uint64_t *next_order,
                  struct m40_seq **ret);

/* m40_seq_find - the slot of seqs (n of them) holding sequence id, active or (unless
 * active_only) finished; NULL when none. */
struct m40_seq *m40_seq_find(struct m40_seq *seqs, uint32_t n, uint32_t id, bool active_only);

/* m40_seq_runnable - whether s takes part in the next step: active and not held. The
 * engines' step planners select only such slots. */
static inline bool m40_seq_runnable(const struct m40_seq *s)
{
        return s->state == M40_SEQ_ACTIVE && !s->held;
}

/* m40_seq_hold - hold (true) or release (false) the active sequence id of seqs (n of
 * them): m40_engine_hold()'s contract. 0, or -ENOENT when no such active sequence. */
int m40_seq_hold(struct m40_seq *seqs, uint32_t n, uint32_t id, bool hold);

/* m40_seq_count_active - how many of seqs (n of them) are active. */
uint32_t m40_seq_count_active(const struct m40_seq *seqs, uint32_t n);

/* m40_seq_limits_eog - resolve lim's end-of-generation ids at engine creation: with n_eog
 * 0 they become the model file's eos_id and eot_id (those >= 0). Returns 0, or -EINVAL
 * when n_eog > M40_MAX_EOG_IDS or an id is outside [0, n_vocab) (lim then unchanged). */
int m40_seq_limits_eog(struct m40_engine_limits *lim, uint32_t n_vocab, int32_t eos_id,
                       int32_t eot_id);

/* m40_seq_append - append the sampled token tok to s (s->toks must have room, as admit
 * sized it) and return the finish reason it causes, M40_FINISH_NONE when none: an
 * end-of-generation id of lim (unless s->stop.ignore_eos) or a stop id, a stop string
 * (detokenized by lim->piece), max_tokens or the context (lim->max_ctx), checked in that
 * order. Does not finish s. */
uint32_t m40_seq_append(struct m40_seq *s, const struct m40_engine_limits *lim, int32_t tok);

/* m40_seq_finish - end s: return its pages to pages and drop any hold; the slot keeps its
 * logits until it is reused. */
void m40_seq_finish(struct m40_kv_pages *pages, struct m40_seq *s);

/* m40_seq_events_push - queue an event of s (its id and counts) with token and finish;
 * 0, or -ENOMEM with the queue unchanged. */
int m40_seq_events_push(struct m40_seq_events *q, const struct m40_seq *s, int32_t token,
                        uint32_t finish);

/* m40_seq_events_pop - move up to max queued events, oldest first, to out; returns how
 * many. */
size_t m40_seq_events_pop(struct m40_seq_events *q, struct m40_event *out, size_t max);

/* m40_seq_events_done - free q's storage; q may be zeroed or already done. */
void m40_seq_events_done(struct m40_seq_events *q);

/* m40_seq_cancel - cancel the active sequence id of seqs (n of them): finish it and queue
 * its M40_FINISH_CANCEL event on q; 0, -ENOENT when no such active sequence, or -ENOMEM
 * (then it is finished but its event is lost). */
int m40_seq_cancel(struct m40_seq *seqs, uint32_t n, struct m40_kv_pages *pages,
                   struct m40_seq_events *q, uint32_t id);

/* m40_seq_logits - copy the kept logits (n_vocab of them) of sequence id, active or
 * finished, to out (room for n); 0, -ENOENT, -EINVAL when n < n_vocab, -ENODATA when it
 * kept none yet. */
int m40_seq_logits(struct m40_seq *seqs, uint32_t n_seqs, uint32_t n_vocab, uint32_t id, float *out,
                   size_t n);

/* m40_seq_stats - fill *ret from the engine's counters st, its slots and its KV pages
 * (of n_layers layers of kv_dim keys): active sequences, pages and tokens per second. */
void m40_seq_stats(const struct m40_engine_stats *st, const struct m40_seq *seqs, uint32_t n,
                   struct m40_kv_pages *pages, uint32_t n_layers, uint32_t kv_dim,
                   struct m40_engine_stats *ret);

/* m40_seq_slots_free - free seqs (n slots, from calloc) and what they own, their KV tables
 * from pages when pages is not NULL; seqs may be NULL. */
void m40_seq_slots_free(struct m40_seq *seqs, uint32_t n, struct m40_kv_pages *pages);

#endif
