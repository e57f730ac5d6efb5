/* config.h - m40d's settings: the defaults, m40d.ini (inih) and their validation. Every key
 * is documented in the shipped m40d.ini; this file owns their names, types and ranges. */
#ifndef M40D_CONFIG_H
#define M40D_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* [engine] chain_steps: auto (the default) is on with the CUDA engine and off with the CPU
 * engine, whose steps would leave other processes no gap on a machine whose cores it all
 * uses. */
enum m40d_chain { M40D_CHAIN_AUTO, M40D_CHAIN_ON, M40D_CHAIN_OFF };

enum m40d_backend {
        M40D_BACKEND_AUTO,
        M40D_BACKEND_CUDA,
        M40D_BACKEND_CPU,
};

struct m40d_config {
        /* [model] */
        char model[4096];
        /* [engine] */
        enum m40d_backend backend;
        uint32_t threads;          /* 0: online CPUs */
        uint32_t max_sequences;    /* engine slots */
        uint64_t kv_memory_mib;    /* 0: the engine's default (m40_engine_limits.kv_bytes) */
        uint32_t max_context;      /* 0: min(training context, 4096) */
        uint32_t max_batch_tokens; /* tokens per forward pass */
        uint64_t vram_limit_mb;    /* CUDA engine's device memory cap in MiB; 0: none */
        /* prompt tokens per step beside decode tokens (engine.h's step policy); 0 and values
         * at or above max_batch_tokens: max_batch_tokens */
        uint32_t prefill_chunk_tokens;
        /* an engine step running longer than this is logged as stuck and m40d stops the
         * systemd watchdog's pings until it finishes (main.c serve()); 0: never */
        uint32_t step_timeout_ms;
        /* how the CUDA engine runs decode steps: enum m40_engine_mode (engine/engine.h); 0
         * its default */
        uint32_t mode;
        /* the sequences a decode step carries, at most: M40_ENGINE_WIDTH_* (engine/engine.h) */
        uint32_t width;
        /* whether the engine's thread goes on from step to step by itself while nothing
         * waits for the engine between steps (m40_engine_chain; sched.c chain_ok); auto
         * becomes on or off when the engine is made (main.c load_model) */
        enum m40d_chain chain_steps;
        /* [server] */
        char socket[108];
        char group[64]; /* "" : only root and the daemon's user */
        /* whether the ini set socket / group (else m40d picks: m40/paths.h, listen.c) */
        bool socket_set, group_set;
        uint32_t max_clients;
        uint32_t max_requests_per_client;
        /* per-client caps and held sequences (m40d/sched.h) */
        uint32_t max_sequences_per_client;  /* a client's sequences in the engine at once */
        uint32_t max_kv_percent_per_client; /* % of the KV pages a client's sequences reserve */
        uint32_t held_sequences; /* engine slots beyond max_sequences, for held sequences */
        uint32_t hold_timeout_s; /* a sequence unread this long is cancelled; 0: never */
        uint32_t max_prompt_bytes;
        uint32_t max_tokens;
        uint32_t default_max_tokens;
        uint32_t shutdown_timeout_s;
        int log_level; /* syslog priority: messages above it are dropped */
        /* per main-loop round for turning submissions into requests (sched.c) */
        uint32_t parse_budget_ms;
        /* [sampling] */
        float temperature, top_p, min_p, repeat_penalty;
        int32_t top_k;
        uint64_t seed; /* 0: a different seed per request */
};

/* [engine] step_timeout_ms: the default, ten minutes, is what a long CPU prefill step can
 * take on a slow machine (m40d.ini says why); the most, a day. */
#define M40D_STEP_TIMEOUT_MS_DEFAULT 600000u
#define M40D_STEP_TIMEOUT_MS_MAX     86400000u

/* m40d_config_default - the built-in defaults (those the shipped m40d.ini spells out). */
void m40d_config_default(struct m40d_config *c);

/* The largest m40d.ini read. */
#define M40D_CONFIG_MAX_BYTES (1u << 20)

/* m40d_config_parse - parses len bytes of m40d.ini text (named name in messages) over the
 * values already in *c. Returns 0; -EINVAL when any line, section, key or value is bad:
 * err then holds one line per error ("name:line: [section] key: why", in line order; lines
 * a NUL ends), up to 16 of them and a count of the rest; -ENOMEM. *c may be partly updated
 * on failure (the good lines are applied). */
int m40d_config_parse(struct m40d_config *c, const char *text, size_t len, const char *name,
                      char *err, size_t errlen);

/* m40d_config_load - m40d_config_parse() of the file at path. Returns as it does, or
 * -errno when the file cannot be read (-EISDIR for a directory), or -EFBIG when it is
 * larger than M40D_CONFIG_MAX_BYTES, with a message naming path in err. */
int m40d_config_load(struct m40d_config *c, const char *path, char *err, size_t errlen);

/* m40d_backend_name - "auto", "cuda", "cpu". */
const char *m40d_backend_name(enum m40d_backend b);

#endif
