/* plan.h - the engine core's step planner (core.h), the one every engine uses: which
 * tokens of which sequences the next forward pass carries. It is the one copy of the scheduling
 * policy that engine.h states (m40_engine_limits.prefill_chunk):
 *
 * 1. Decode first: every runnable sequence (m40_seq_runnable()) whose prompt is done gets
 *    its one next token, in slot order, while the step has room (max_batch_tokens).
 * 2. Then prompts, oldest admission first. While the step carries a decode token, a
 *    short prompt (m40_plan_whole_max(): at most M40_PREFILL_WHOLE tokens in all, or
 *    prefill_chunk if larger) goes whole, within the step's room, and the longer prompts
 *    share at most prefill_chunk tokens (0: M40_PREFILL_CHUNK_DEFAULT); while it carries
 *    none, all prompts share the whole step, max_batch_tokens.
 *    Each prompt in turn takes what its budget allows; a prompt longer than that is cut
 *    there and goes on from the cut in the next step.
 * 3. The decode width (m40_plan.width, m40_plan_width()): a step that carries no prompt
 *    tokens may carry fewer decode tokens than there are running sequences, when the
 *    engine has measured more tokens a second at that width; the running sequences then
 *    take turns in circular slot order (m40_plan.turn: each step's width decoding slots
 *    follow the last step's), so of n sequences each gets a token in every step or the
 *    next, width tokens in n steps.
 * So a running sequence gets a token in every step (when max_batch_tokens >= the number
 * of running sequences and the width is all of them), and a step costs at most the running
 * sequences' tokens plus prefill_chunk of long prompts plus whole short ones, max_batch_tokens in
 * all. Short prompts do not wait behind a long one's chunks, and a burst of them (many clients at
 * once) is admitted in a few steps instead of one chunk's worth a step. A sequence whose
 * planned positions find no free KV page is finished with M40_FINISH_KV (its event queued)
 * and the plan goes on without it. The planner changes only the slots' n_past, row and
 * prev_past and their KV tables; it never prints. */
#ifndef M40_ENGINE_PLAN_H
#define M40_ENGINE_PLAN_H

#include <stdint.h>

#include "engine.h"
#include "kv.h"
#include "seqs.h"
#include "types.h"

/* What a planner works on, all borrowed from the engine, which fills it once. */
struct m40_plan {
        struct m40_seq *seqs;                /* (lim->max_seqs) the engine's slots */
        const struct m40_engine_limits *lim; /* max_seqs, max_batch_tokens, prefill_chunk */
        struct m40_kv_pages *pages;          /* pages for the planned positions */
        struct m40_seq_events *evq;          /* where M40_FINISH_KV events go */
        struct m40_fwd_tok *batch;           /* (lim->max_batch_tokens) the step's tokens */
        /* Set by the engine before each step: the most decode tokens a step without prompt
         * tokens carries (0: every running sequence's), and the slot where its turn starts
         * (the last step's m40_plan_step.turn). */
        uint32_t width;
        uint32_t turn;
};

/* One planned step. */
struct m40_plan_step {
        uint32_t n_tokens; /* tokens in batch[0, n_tokens) */
        uint32_t n_rows;   /* logits rows 0..n_rows-1: sequences that produce a token */
        uint32_t n_decode; /* decode tokens (one per running sequence in the step) */
        uint32_t n_prompt; /* prompt positions among the tokens (the engine's stats) */
        uint32_t turn;     /* where the next step's turn starts (m40_plan.turn) */
};

/* m40_plan_prefill_chunk - the prompt tokens a step that decodes may carry under lim:
 * prefill_chunk (0: M40_PREFILL_CHUNK_DEFAULT), at most max_batch_tokens. */
uint32_t m40_plan_prefill_chunk(const struct m40_engine_limits *lim);

/* m40_plan_whole_max - the longest prompt (in all its tokens) that a step which decodes
 * takes whole: M40_PREFILL_WHOLE, or m40_plan_prefill_chunk() when that is larger. */
uint32_t m40_plan_whole_max(const struct m40_engine_limits *lim);

/* m40_plan_step - plan the next step of p's slots by the policy above: fills p->batch,
 * advances each planned sequence's n_past over its tokens, gives each sequence that will
 * produce a token its logits row (s->row >= 0; every other slot gets -1) and records each
 * slot's n_past before the step in prev_past (for m40_plan_undo()). Returns 0 and the
 * counts in *ret (n_tokens 0: nothing to run), or -ENOMEM (a KV table or the event queue
 * could not grow), after which no sequence has advanced (sequences already finished with
 * M40_FINISH_KV stay finished). */
int m40_plan_step(const struct m40_plan *p, struct m40_plan_step *ret);

/* m40_plan_ready - the sequences of p whose next step would decode (runnable, prompt
 * done). */
uint32_t m40_plan_ready(const struct m40_plan *p);

/* The decode width's measurements (m40_plan_width()): for each width k in 1..n, the
 * smoothed seconds of the engine's steps that decoded k sequences and carried nothing
 * else (t[k], 0: none yet), and the tick of the last one (at[k]). */
struct m40_width_stats {
        uint32_t n;
        double *t;    /* (n + 1) */
        uint64_t *at; /* (n + 1) */
};

/* How old (in ticks) a measurement may be before the width is tried again, how often a
 * width without a recent measurement is tried, and by how much a narrower width's tokens
 * a second must beat all n's to be taken (steps vary by a few percent). */
#define M40_WIDTH_REFRESH 1024
#define M40_WIDTH_EXPLORE 16
#define M40_WIDTH_MARGIN  1.03

/* m40_plan_width - the width of a decode-only step with n ready sequences at tick: n
 * while n's measurement is missing or older than M40_WIDTH_REFRESH; else, every
 * M40_WIDTH_EXPLORE ticks, the widest candidate without a recent measurement; else the
 * candidate with the most sequences a second (k / t[k]) when that beats n's by
 * M40_WIDTH_MARGIN, else n. The candidates are the multiples of 4 from n / 2 up to n - 1
 * (a GPU kernel's cost steps with its column tiles; narrower widths would halve the
 * batch). n when n <= 4 or n > w->n. */
uint32_t m40_plan_width(const struct m40_width_stats *w, uint32_t n, uint64_t tick);

/* m40_width_record - a decode-only step of width k took seconds: into w's t[k] (the mean
 * of the last few: t += (seconds - t) / 4) and at[k] = tick. */
void m40_width_record(struct m40_width_stats *w, uint32_t k, double seconds, uint64_t tick);

/* m40_plan_undo - give back the tokens of the last m40_plan_step() of p, when the engine
 * could not run it: every active slot's n_past returns to prev_past. The KV pages reserved
 * for them stay with their sequences. */
void m40_plan_undo(const struct m40_plan *p);

#endif
