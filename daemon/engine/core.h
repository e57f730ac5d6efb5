/* core.h - the engine core: everything of an engine but its forward pass and sampling.
 *
 * Every engine (the CPU reference, the per-op CUDA engine, later the persistent kernel)
 * is a core plus a backend (struct m40_core_backend). The core owns the engine interface
 * of engine.h for it: the resolution of the limits' common defaults, the model (struct
 * m40_model), the sequence slots and their bookkeeping (seqs.c), admission, the step
 * (the plan of plan.c, the produced tokens, stop conditions and events, the statistics),
 * cancel, hold, logits, and the KV cache's pages (kv.c). A backend owns its forward pass
 * over the planned batch and the sampling of the step's rows, and what they need (the
 * CPU engine's thread pool and KV storage; the CUDA engine's device model, KV pool and
 * sampler buffers).
 *
 * KV reservation. The core is the one owner of the KV pages: pages are taken only into
 * sequences' block tables (struct m40_kv_table), from one pool of kv_pages_total pages,
 * and kv_pages_used (m40_engine_stats()) counts the pages in tables. A sequence is
 * admitted in one of two ways (struct m40_seq_params.kv_reserve):
 * - reserved: admission takes the pages of every position the sequence may reach
 *   (m40_engine_kv_need()) into its block table at once, so the table is whole from
 *   admission (what a device-side ring of sequences needs) and the sequence never ends
 *   with M40_FINISH_KV; admission fails with -ENOSPC, changing nothing, when the pool's
 *   free pages do not cover it. Holding the sequence gives back the pages beyond the
 *   positions it has filled; releasing it takes them again, or fails with -ENOSPC and
 *   leaves it held.
 * - growing (the default): the planner extends the table page by page as positions are
 *   fed; a sequence whose next positions find no free page ends with M40_FINISH_KV.
 * m40d's scheduler admits reserved sequences only, and asks the engine (admit, hold,
 * m40_engine_kv_need(), m40_engine_kv_pages()) instead of counting pages itself.
 *
 * Construction is in two phases, because the KV pool's size may depend on the backend
 * (the CUDA engine sizes it from the device's free memory): m40_core_new() loads the
 * model and resolves the limits, the backend builds its part and says how many pages it
 * got, m40_core_start() builds the pool, the slots and the step buffers. */
#ifndef M40_ENGINE_CORE_H
#define M40_ENGINE_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "kv.h"
#include "plan.h"
#include "seqs.h"
#include "types.h"

struct m40_model;
struct m40_core;

/* What an engine keeps of its own. Its engine struct starts with struct m40_core. */
struct m40_core_backend {
        const char *name;     /* "CPU", "CUDA": for messages */
        uint32_t act_default; /* enum m40_act that lim.act 0 resolves to */
        bool act_f32_only;    /* M40_ACT_GGML is M40_EUNSUPPORTED */
        bool map_weights;     /* read the model's mapping in up front (m40_model_load())
                               * rather than upload it with a reader of its own */
        /* run - the forward pass over c->batch[0, ps->n_tokens) (ps->n_tokens >= 1) and the
         * sampling of its rows: for every active slot s with s->row >= 0, the token it
         * produces into c->tokens[s->row], s->rng advanced past the draw, and, when
         * s->keep_logits, logits row s->row of c->logits as the model produced them (before
         * any penalty). The slots' tokens and n_toks are those before the step. Returns 0,
         * or a negative error after which the core undoes the plan (the step did not
         * happen). */
        int (*run)(struct m40_core *c, const struct m40_plan_step *ps);
        /* admitted - optional: s has just been admitted into its slot. */
        void (*admitted)(struct m40_core *c, const struct m40_seq *s);
        /* done - free the backend's own state (not the struct); called once by the core's
         * destroy, after the slots and before the KV pool and the model; must cope with a
         * backend that was only partly built. */
        void (*done)(struct m40_core *c);
};

struct m40_core {
        struct m40_engine base; /* the engine interface; its ops are the core's */
        const struct m40_core_backend *be;
        const char *path; /* the model file's (m40_gguf_path), for messages */
        struct m40_model *m;
        struct m40_engine_limits lim;
        uint64_t page_bytes; /* one KV page: 2 (K, V) f16 of n_layers * page_tokens * kv_dim */
        struct m40_kv_pages *pages;
        struct m40_seq *seqs;      /* (lim.max_seqs) */
        struct m40_fwd_tok *batch; /* (lim.max_batch_tokens) the step's tokens */
        float *logits;             /* (lim.max_seqs, n_vocab) host: the step's kept rows */
        int32_t *tokens;           /* (lim.max_seqs) the step's produced token of each row */
        struct m40_seq_events evq;
        struct m40_plan plan;         /* over seqs, lim, pages, evq and batch */
        struct m40_width_stats width; /* the decode width's measurements (plan.h) */
        uint64_t tick;                /* steps planned (the width's clock) */
        uint32_t next_id;
        uint64_t next_order;
        struct m40_engine_stats st;
};

/* m40_core_new - phase 1: allocates the backend's engine struct of size bytes, zeroed,
 * whose first member is the core (the core frees it), empties err, copies lim (NULL: all
 * defaults), checks its activation mode against be (-EINVAL unknown, M40_EUNSUPPORTED
 * not be's), loads the model from the parsed file g (borrowed: it must outlive the
 * engine; the CPU engine reads the weights in with lim->load_progress), resolves the
 * common defaults (max_seqs 16, max_ctx min(train ctx, 4096), page_tokens 16,
 * max_batch_tokens 256, act be->act_default) and the end-of-generation ids, and sets
 * c->path and c->page_bytes. The backend resolves the rest of the limits (kv_bytes,
 * n_threads) after it. Returns 0 and the core in *ret; -EINVAL (g NULL), -ENOMEM, or
 * -errno, M40_EFORMAT or M40_EUNSUPPORTED with a message in err, nothing left
 * allocated. */
struct m40_gguf;
int m40_core_new(size_t size, const struct m40_core_backend *be, struct m40_gguf *g,
                 const struct m40_engine_limits *lim, struct m40_core **ret, char *err,
                 size_t errlen);

/* m40_core_kv_pages - the page count that c->lim.kv_bytes holds (0 when kv_bytes is 0:
 * the backend sizes the pool). Returns 0 and it in *ret, or -EINVAL with a message in err
 * when kv_bytes is set and holds no page or more than 2^32 - 1. */
int m40_core_kv_pages(const struct m40_core *c, const char *path, uint32_t *ret, char *err,
                      size_t errlen);

/* m40_core_start - phase 2: the KV pool of n_pages (>= 1) pages (lim.kv_bytes becomes
 * their size), the slots, the step's batch, logits rows and tokens, the planner. Returns
 * 0, -EINVAL or -ENOMEM. */
int m40_core_start(struct m40_core *c, uint32_t n_pages);

/* m40_core_fail - the failure exit of a backend's constructor after m40_core_new(): when
 * err holds no message yet, "<model path>: <m40_strerror(r)>" goes there; then c is freed
 * as m40_engine_free() does (the backend's done first; c may be partly built). Returns
 * r. */
int m40_core_fail(struct m40_core *c, int r, char *err, size_t errlen);

#endif
