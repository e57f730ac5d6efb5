/* engine.h - the engine interface: what the scheduler asks of any engine, at the level of
 * sequences (DESIGN.md section 2).
 *
 * An engine owns one loaded model, a set of sequence slots and a paged KV cache. The
 * caller admits sequences (prompt token ids, sampling parameters, stop conditions), calls
 * m40_engine_step() repeatedly (each step advances every active sequence by one token;
 * a sequence whose prompt is pending is prefilled in the same step, in chunks when long,
 * by the step policy below; a sequence the caller holds, m40_engine_hold(), waits) and
 * drains events (token ids, finish reasons, usage counts). Every engine (the CPU
 * reference, the per-op CUDA engine, the persistent kernel) is the engine core
 * (daemon/engine/core.h, which implements struct m40_engine_ops and owns admission, the
 * step planner, stops, events and the KV pages) over its own forward pass and sampling;
 * callers use only the m40_engine_* functions. One thread drives an engine at a time
 * (the caller's thread); engines do not print.
 *
 * Two forms of stepping. The blocking form, m40_engine_step(), runs a step on the
 * caller's thread and returns when it is done. The asynchronous form lets the caller go
 * on (answer clients, accept connections) while a step runs: m40_engine_pump() starts a
 * step and returns at once, the descriptor of m40_engine_fd() becomes readable when it
 * has finished, and m40_engine_poll() collects it, after which its events are drained
 * with m40_engine_events() as in the blocking form. Both forms produce the same tokens.
 *
 * Threads (the asynchronous form). The step runs on the engine's own thread (async.c:
 * one worker thread that runs the engine's blocking step; an engine that produces events
 * on a thread of its own, such as the persistent kernel's host thread, fits the same
 * calls). A step is "in flight" from the m40_engine_pump() that started it until the
 * m40_engine_poll() that collects it. One thread touches an engine's sequences and model
 * at a time: the engine's thread while a step is in flight, the caller's otherwise.
 * While a step is in flight, the caller's calls never touch what the step touches:
 *   - m40_engine_cancel() and m40_engine_hold() are queued and return 0 (-ENOMEM when
 *     the queue cannot grow); m40_engine_poll() applies them after the step, before it
 *     returns, with the effect of applying them in call order (an id that the step
 *     finished is passed over);
 *   - m40_engine_admit() returns -EAGAIN (the step in flight could not take the
 *     sequence anyway: admit after poll, before the next pump);
 *   - m40_engine_events() returns 0 (the step's events come after poll), or with chained
 *     steps those of the steps that have finished (m40_engine_chain);
 *   - m40_engine_stats() tells the figures as of the step's start;
 *   - m40_engine_logits() and m40_engine_step() return -EBUSY;
 *   - m40_engine_kv_need() and m40_engine_model() (fixed at creation) answer as always;
 *   - m40_engine_kv_pages() returns -EBUSY (the step changes the block tables).
 * An engine whose step needs per-thread state (e.g. a current CUDA device other than the
 * default, device 0) sets it in its step. m40_engine_free() waits for a step in flight. */
#ifndef M40_ENGINE_ENGINE_H
#define M40_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define M40_MAX_STOP_IDS     16
#define M40_MAX_STOP_STRINGS 8
#define M40_MAX_STOP_LEN     64 /* bytes of one stop string */
#define M40_MAX_EOG_IDS      32 /* end-of-generation ids (m40_engine_limits.eog) */

/* Sampling. Defaults (m40_sampling_default()) are greedy with nothing else enabled. The
 * chain, in order: penalties -> top-k -> top-p -> min-p -> temperature -> draw. */
struct m40_sampling {
        float temperature;       /* <= 0: greedy (argmax, lowest id on ties) */
        int32_t top_k;           /* <= 0: off */
        float top_p;             /* >= 1: off */
        float min_p;             /* <= 0: off */
        float repeat_penalty;    /* 1: off; logit / p if > 0 else logit * p, for seen ids */
        float frequency_penalty; /* 0: off; minus count * f */
        float presence_penalty;  /* 0: off; minus p once seen */
        int32_t penalty_last_n;  /* window of recent tokens (prompt included); 0 off, -1 all */
        uint64_t seed;           /* same seed, same prompt, same params -> same tokens */
};

/* Stop conditions. The engine's end-of-generation ids (m40_engine_limits.eog) stop a
 * sequence unless ignore_eos; the stop ids here stop it always. */
struct m40_stop {
        uint32_t max_tokens; /* generated tokens; 0 means up to the context limit */
        bool ignore_eos;
        uint32_t n_ids;
        int32_t ids[M40_MAX_STOP_IDS];
        /* Stop strings are matched across token boundaries on detokenized text; they need
         * a detokenizer (m40_engine_limits.piece); without one, admit returns
         * M40_EUNSUPPORTED. */
        uint32_t n_strings;
        char strings[M40_MAX_STOP_STRINGS][M40_MAX_STOP_LEN + 1];
};

struct m40_seq_params {
        const int32_t *prompt; /* n_prompt >= 1 token ids < n_vocab; copied by admit */
        uint32_t n_prompt;
        struct m40_sampling sampling;
        struct m40_stop stop;
        bool keep_logits; /* keep the logits of the last step for m40_engine_logits() */
        /* Reserve at admission the KV pages of every position the sequence may reach
         * (m40_engine_kv_need()): its block table is whole from admission and it never
         * ends with M40_FINISH_KV; admit fails with -ENOSPC when they are not free. false:
         * the pages are taken as positions are fed (see m40_engine_admit()). */
        bool kv_reserve;
};

enum m40_finish {
        M40_FINISH_NONE = 0,    /* still running (token events) */
        M40_FINISH_LENGTH = 1,  /* max_tokens reached */
        M40_FINISH_EOS = 2,     /* an end-of-generation id or a stop id was produced */
        M40_FINISH_STOP = 3,    /* a stop string matched */
        M40_FINISH_CANCEL = 4,  /* m40_engine_cancel() */
        M40_FINISH_CONTEXT = 5, /* the context limit was reached */
        M40_FINISH_KV = 6,      /* no free KV page for the next position */
};

/* One event per produced token (token >= 0). The token that ends a sequence carries the
 * finish reason (EOS, stop id, stop string, length, context); a sequence that ends without
 * producing a token (cancel, no KV page) gets one event with token -1. */
struct m40_event {
        uint32_t seq;
        int32_t token;
        uint32_t finish;   /* enum m40_finish */
        uint32_t n_prompt; /* usage so far */
        uint32_t n_generated;
};

/* m40_piece_fn - the text of token id (for stop strings); returns its length in bytes
 * and points *ret at it (borrowed, valid until the next call). */
typedef size_t (*m40_piece_fn)(void *ctx, int32_t token, const char **ret);

/* Activation precision of the matrix products (m40_engine_limits.act). */
enum m40_act {
        M40_ACT_DEFAULT = 0, /* the engine's choice: M40_ACT_GGML for the CPU engine */
        /* Activations stay float32 everywhere: the executable specification the CUDA kernels
         * (FP32 math) implement and are compared against. */
        M40_ACT_F32 = 1,
        /* As ggml's x86 CPU backend (llama.cpp on a CPU): the vector operand of each matrix
         * product is converted to the weight type's partner first (Q8_0 for Q4_0/Q5_0/Q8_0,
         * Q8_1 for Q4_1/Q5_1, Q8_K for the K types, f16 for F16, bf16 for BF16; F32
         * unchanged) and multiplied by integer block dot products; attention rounds q and the
         * softmax weights to f16. Faster on CPUs, and matches llama.cpp's tokens. */
        M40_ACT_GGML = 2,
};

/* The step policy (every engine; the planner is daemon/engine/plan.c). One step is one
 * forward pass of at most max_batch_tokens tokens. It carries first the next token of
 * every running (decoding, not held) sequence, then prompt tokens, oldest admission
 * first: while the step carries a decode token, a prompt of at most M40_PREFILL_WHOLE
 * tokens in all (or prefill_chunk, if larger) goes whole (a burst of short prompts is
 * admitted in a few steps, not one chunk a step), and the longer prompts share at most
 * prefill_chunk tokens, so that
 * running sequences keep a token every step while long prompts arrive; while it carries
 * none (nothing decodes), up to max_batch_tokens. A prompt longer than what the step has
 * left is cut there and continues from the cut in the next step; how a prompt is
 * cut never changes its tokens (a token's results depend only on its own sequence). A
 * smaller prefill_chunk makes decode steps cheaper and delays new prompts' first tokens.
 * prefill_chunk 0 is M40_PREFILL_CHUNK_DEFAULT; values above max_batch_tokens act as
 * max_batch_tokens (prompts then take all the room a step has, as when nothing decodes).
 * The default is the measured knee of that trade-off: the largest chunk at which running
 * streams keep 60% of their tok/s while 512-token prompts arrive (m40-serve-bench
 * --mixed; the figures are in tests/bench/RESULTS.md). */
#define M40_PREFILL_CHUNK_DEFAULT 16u
/* Prompts of at most this many tokens in all are never cut beside decoding sequences (a
 * chat turn, a burst of clients at once): cutting them would save a step little and keep
 * their clients waiting behind each other's chunks. */
#define M40_PREFILL_WHOLE 64u

/* The CPU engine's default KV cache (m40_engine_limits.kv_bytes 0), in MiB: at most this,
 * fewer when max_seqs sequences at max_ctx need less, more when one needs more. */
#define M40_CPU_ENGINE_KV_DEFAULT_MIB 512u

/* How the CUDA engine runs a decode step (m40_engine_limits.mode):
 * STEPS        a CUDA graph of a few kernels per layer (the reference);
 * PERSISTENT   one-token steps in one launch of the persistent step kernel
 *              (cuda/kernels/persist_step.h), where the model takes it; other steps,
 *              and models it does not take, per step (the engine says so at start).
 * DEFAULT: the CUDA engine's build-time choice (persist_step.h, m40_cuda_ps_default()). */
enum m40_engine_mode {
        M40_ENGINE_MODE_DEFAULT = 0,
        M40_ENGINE_MODE_STEPS = 1,
        M40_ENGINE_MODE_PERSISTENT = 2,
};

/* How many of the running sequences a decode step carries (m40_engine_limits.width), in
 * steps without prompt tokens (plan.h, the decode width). AUTO (0, the default): all of
 * them, unless a step of fewer has measured more tokens a second on this engine: the
 * batched kernels cost whole column tiles, so 9 sequences can take longer a token than 8,
 * and more clients must never give less throughput than fewer. ALL: every running
 * sequence in every step (kernel measurements at an exact batch). Any other value n: at
 * most n a step (a fixed width). Fewer than all take turns in circular slot order. */
#define M40_ENGINE_WIDTH_AUTO 0u
#define M40_ENGINE_WIDTH_ALL  UINT32_MAX

/* The engine's limits. kv_bytes 0 is the engine's default KV cache, at most enough for
 * max_seqs sequences at max_ctx and at least for one: the CPU engine takes up to
 * M40_CPU_ENGINE_KV_DEFAULT_MIB, the CUDA engine what the GPU has free after the weights
 * and scratch (cuda/engine/cuda_engine.h); m40_engine_stats() tells what it got. */
struct m40_engine_limits {
        uint32_t max_seqs;         /* sequence slots; default 16 */
        uint32_t max_ctx;          /* positions per sequence; default min(train ctx, 4096) */
        uint64_t kv_bytes;         /* KV cache memory; 0: the engine's default (above) */
        uint32_t page_tokens;      /* positions per KV page; default 16 */
        uint32_t max_batch_tokens; /* tokens per forward pass (prefill chunk); default 256 */
        uint32_t prefill_chunk;    /* prompt tokens beside decode tokens (step policy above) */
        uint32_t n_threads;        /* CPU engine threads; default: online CPUs */
        m40_piece_fn piece;        /* optional detokenizer for stop strings */
        void *piece_ctx;
        uint32_t act; /* enum m40_act; 0: the engine's default */
        /* Most MiB of device memory the engine may take (weights, KV cache, scratch);
         * 0: no cap besides the GPU's free memory. A model that does not fit fails at
         * creation with a message saying how much it needs and how much is available.
         * The CPU engine ignores it. */
        uint64_t vram_limit_mb;
        /* Load progress: the CUDA engine's upload, the CPU engine's read of its mapping:
         * progress after every chunk and once at the end (done == total), notes about how
         * the load runs (e.g. a fallback to pread; the CUDA engine only). Called on the
         * creating thread; both may be NULL. */
        void (*load_progress)(void *ctx, uint64_t done, uint64_t total, double seconds);
        void (*load_note)(void *ctx, const char *msg);
        void *load_ctx;
        /* The ids that end a sequence unless its stop.ignore_eos: the vocabulary's
         * end-of-generation set (text/vocab.h m40_vocab_eog(), llama.cpp's
         * llama_vocab_is_eog), which the engine cannot derive without a tokenizer.
         * n_eog 0: the file's EOS and EOT ids. Every id must be < n_vocab (else -EINVAL
         * at creation). */
        uint32_t n_eog;
        int32_t eog[M40_MAX_EOG_IDS];
        /* How decode steps run (enum m40_engine_mode): 0 the engine's default. The CPU
         * engine has one way and ignores it. */
        uint32_t mode;
        /* Sequences a decode step carries, at most (M40_ENGINE_WIDTH_*): 0 auto. */
        uint32_t width;
};

struct m40_engine_model {
        const char *arch; /* "llama", "qwen2" */
        uint32_t n_vocab, n_ctx_train, n_layers, dim;
        int32_t bos_id, eos_id, eot_id; /* -1 when absent */
        uint64_t weight_bytes;
};

struct m40_engine_stats {
        uint32_t active_seqs;
        /* The KV cache: pages in the pool (fixed at creation: the size the engine chose),
         * in use (in sequences' block tables: filled, or reserved by kv_reserve), positions
         * per page; memory = pages * kv_page_bytes. */
        uint32_t kv_pages_total, kv_pages_used, kv_page_tokens;
        uint64_t kv_page_bytes; /* memory of one page (all layers, K and V) */
        uint64_t steps, prompt_tokens, generated_tokens; /* since creation */
        double prompt_seconds;                           /* time in steps that only prefilled */
        double decode_seconds;                           /* time in the other steps */
        double tokens_per_s; /* generated tokens / (time of steps that generated) */
        /* The last step that only decoded: the sequences it decoded, of those running (the
         * decode width at work, limits.width); 0 and 0 before such a step. */
        uint32_t decode_width, decode_running;
};

struct m40_engine;

struct m40_engine_ops {
        int (*admit)(struct m40_engine *e, const struct m40_seq_params *p, uint32_t *ret_id);
        int (*step)(struct m40_engine *e);
        size_t (*events)(struct m40_engine *e, struct m40_event *out, size_t max);
        int (*cancel)(struct m40_engine *e, uint32_t id);
        int (*hold)(struct m40_engine *e, uint32_t id, bool hold);
        uint32_t (*kv_need)(struct m40_engine *e, const struct m40_seq_params *p);
        int (*kv_pages)(struct m40_engine *e, uint32_t id);
        int (*logits)(struct m40_engine *e, uint32_t id, float *out, size_t n);
        void (*stats)(struct m40_engine *e, struct m40_engine_stats *ret);
        void (*model)(struct m40_engine *e, struct m40_engine_model *ret);
        void (*destroy)(struct m40_engine *e);
};

struct m40_engine_async; /* the asynchronous form's thread and queue (async.c) */

/* Every engine struct starts with this, zeroed (engines calloc their struct). */
struct m40_engine {
        const struct m40_engine_ops *ops;
        struct m40_engine_async *async; /* NULL until the first m40_engine_pump/_fd */
};

/* m40_sampling_default / m40_stop_default - greedy; max_tokens 0, no stop ids/strings. */
struct m40_sampling m40_sampling_default(void);
struct m40_stop m40_stop_default(void);

/* m40_engine_admit - queue a sequence. Its KV pages (the engine owns them all): with
 * p->kv_reserve, every page it may need is taken now (m40_engine_kv_need()); without, the
 * pages are taken as its positions are fed, and when none is free for them it ends with
 * M40_FINISH_KV. Returns 0 and its id in *ret_id (ids are never reused within an engine);
 * -EBUSY when every slot is taken, -ENOSPC when p->kv_reserve and the free KV pages do
 * not cover it now (it may later: compare m40_engine_kv_need() with kv_pages_total),
 * -EINVAL for an empty or out-of-vocabulary prompt or bad parameters, -E2BIG when the
 * prompt does not fit max_ctx, M40_EUNSUPPORTED for stop strings without a detokenizer,
 * -EAGAIN while a step is in flight, -ENOMEM; on failure no sequence is admitted and no
 * KV page is taken. */
int m40_engine_admit(struct m40_engine *e, const struct m40_seq_params *p, uint32_t *ret_id);

/* m40_engine_kv_need - the KV pages that admitting p with kv_reserve takes: those of its
 * prompt and max_tokens (0: up to the context), at most max_ctx positions. Reads only;
 * p need not be valid. */
uint32_t m40_engine_kv_need(struct m40_engine *e, const struct m40_seq_params *p);

/* m40_engine_kv_pages - the KV pages active sequence id holds now: its reservation
 * (m40_engine_kv_need()), or while it is held those of the positions it has filled; for
 * a sequence admitted without kv_reserve, those of the positions fed so far. -ENOENT when
 * id is not active, -EBUSY while a step is in flight. */
int m40_engine_kv_pages(struct m40_engine *e, uint32_t id);

/* m40_engine_step - advance every active sequence that is not held by one token
 * (a sequence whose prompt is pending gets the next chunk of it instead, by the step
 * policy above). Returns the number of sequences still active after the step, held ones
 * included (>= 0), or a negative error (-ENOMEM ...), after which the engine stays usable;
 * -EBUSY while a step is in flight (m40_engine_pump). */
int m40_engine_step(struct m40_engine *e);

/* m40_engine_pump - start a step (as m40_engine_step() would run it) on the engine's
 * thread and return at once. The first call starts that thread. Returns 1 when it started
 * a step, 0 when one is in flight already (pumped and not yet collected by
 * m40_engine_poll), or -errno when the thread cannot be started (-ENOMEM, -EAGAIN). */
int m40_engine_pump(struct m40_engine *e);

/* m40_engine_fd - a descriptor (an eventfd; the engine owns it) that is readable from the
 * moment the step in flight has finished until m40_engine_poll() collects it; watch it
 * with poll/epoll for reading and do not read it. The first call starts the engine's
 * thread (as m40_engine_pump). Returns the descriptor (>= 0), or -errno as pump. */
int m40_engine_fd(struct m40_engine *e);

/* m40_engine_poll - collect the step in flight without waiting. Returns 1 when it has
 * finished: *ret_step is what m40_engine_step() would have returned for it, the calls
 * queued meanwhile have been applied, and its events (and the queued cancels') wait for
 * m40_engine_events(); 0 when no step is in flight or it is still running (*ret_step
 * untouched). With chained steps (m40_engine_chain) it returns 1 for each finished step
 * (several finished since the last poll count as one: *ret_step is the last one's), and
 * the engine stays in flight while the engine's thread has gone on to the next step:
 * the step's events can be taken (m40_engine_events), the queued calls wait. */
int m40_engine_poll(struct m40_engine *e, int *ret_step);

/* m40_engine_chain - let the engine's thread start the next step itself as soon as a step
 * has produced work (on), or not (off, the default): a run of steps without a pump and a
 * poll between them, for a caller with nothing to change between steps (no admission,
 * no hold or release to make). The chain ends after the step in flight when the caller
 * turns it off, queues a cancel or a hold (they need the engine between steps, so they
 * turn it off themselves), or frees the engine, and when a step produces nothing or
 * fails; turning it on while calls are queued leaves it off. Meanwhile m40_engine_stats()
 * tells the figures as of the start of the chained step in flight. The first call starts
 * the engine's thread (as m40_engine_pump). Returns 0, or -errno as pump. */
int m40_engine_chain(struct m40_engine *e, bool on);

/* m40_engine_step_times - when the engine's thread ran the step that m40_engine_poll()
 * collected last: CLOCK_MONOTONIC ns at which it began the step (*ret_begin_ns; the time
 * from m40_engine_pump() to it is the hand-over) and at which the step had finished
 * (*ret_end_ns; the time from it to m40_engine_poll() is the caller's wake-up). Returns 0,
 * or -ENODATA before the first collected step (nothing written). */
int m40_engine_step_times(const struct m40_engine *e, uint64_t *ret_begin_ns, uint64_t *ret_end_ns);

/* m40_engine_step_records - the steps the engine's thread has finished since the last
 * call, oldest first, at most max moved into out: when it began and ended each
 * (CLOCK_MONOTONIC ns), and whether it began it by itself (chained: m40_engine_chain)
 * rather than for a pump. Up to 4096 wait to be taken (later ones are not kept). Any
 * thread of the caller's, while in flight too; 0 without an engine thread. */
struct m40_step_record {
        uint64_t begin_ns, end_ns;
        bool chained;
};
size_t m40_engine_step_records(struct m40_engine *e, struct m40_step_record *out, size_t max);

/* m40_engine_in_flight - whether a step is in flight (pumped and not yet collected). */
bool m40_engine_in_flight(const struct m40_engine *e);

/* m40_engine_events - move up to max queued events, oldest first, into out; returns how
 * many. The queue grows as needed; drain it after each step. */
size_t m40_engine_events(struct m40_engine *e, struct m40_event *out, size_t max);

/* m40_engine_cancel - finish sequence id with M40_FINISH_CANCEL (an event follows) and
 * free its slot and KV pages (reserved ones included). Returns 0, or -ENOENT when id is
 * not active; while a step is in flight it is queued (see "Threads" above) and returns 0. */
int m40_engine_cancel(struct m40_engine *e, uint32_t id);

/* m40_engine_hold - hold (true) or release (false) the active sequence id. A held
 * sequence takes no part in steps (no decode token, no prompt chunk) until released; it
 * keeps its slot, its KV pages and its place among the prompts (admission order), and
 * m40_engine_cancel() still ends it. Holding only delays: a held and released sequence
 * produces exactly the tokens it would have produced unheld. A step in which every active
 * sequence is held does nothing and is not counted in the stats. Holding a held sequence,
 * or releasing one that is not held, changes nothing. A sequence admitted with kv_reserve
 * keeps only the pages of the positions it has filled while held, and its release takes
 * the rest again: when they are not free, the release fails with -ENOSPC and it stays
 * held. Returns 0, -ENOSPC, or -ENOENT when id is not active; while a step is in flight
 * it is queued (see "Threads" above) and returns 0 (a queued release that finds no free
 * pages leaves the sequence held, and nobody is told: a caller that must know, as the
 * daemon's scheduler, releases between steps). (The daemon holds a sequence whose client
 * does not read its events.) */
int m40_engine_hold(struct m40_engine *e, uint32_t id, bool hold);

/* m40_engine_logits - copy the logits (n_vocab floats) that produced sequence id's last
 * token into out (n >= n_vocab). Needs keep_logits at admit; works after the sequence has
 * finished, until a later admit reuses its slot. Returns 0, -ENOENT, -ENODATA (no token
 * yet or not kept), -EINVAL (n too small), -EBUSY (a step is in flight). */
int m40_engine_logits(struct m40_engine *e, uint32_t id, float *out, size_t n);

/* m40_engine_stats - the counters of struct m40_engine_stats (while a step is in flight:
 * as of its start). m40_engine_model - the model's figures (fixed at creation). */
void m40_engine_stats(struct m40_engine *e, struct m40_engine_stats *ret);
void m40_engine_model(struct m40_engine *e, struct m40_engine_model *ret);

/* m40_engine_free - wait for a step in flight, stop the engine's thread, cancel
 * everything and free e; accepts NULL; returns NULL. */
struct m40_engine *m40_engine_free(struct m40_engine *e);

struct m40_gguf;

/* m40_cpu_engine_new - the CPU reference engine for the parsed GGUF g (m40_gguf_open();
 * borrowed: the caller frees it after the engine, which maps the file through g's open
 * descriptor and never opens the path again). lim may be NULL
 * (all defaults) and any field 0 means its default; the default activation mode is
 * M40_ACT_GGML (ask for M40_ACT_F32 to get the specification of the CUDA kernels).
 * Returns 0 and the engine in *ret; -errno, M40_EFORMAT or M40_EUNSUPPORTED with a
 * message in err otherwise (-EINVAL for an unknown act). */
int m40_cpu_engine_new(struct m40_gguf *g, const struct m40_engine_limits *lim,
                       struct m40_engine **ret, char *err, size_t errlen);

#endif
