/* tests/bench/serve_bench.h - m40-serve-bench, the serving benchmark: the real m40d under
 * many concurrent libm40 clients (issue 19).
 *
 * Owns the pieces the program (serve_bench.c: command line, order of work) is built from:
 *   serve_daemon.c  start m40d on a private configuration and socket in a temporary
 *                   directory, wait until it accepts clients, stop it (SIGTERM, wait);
 *   serve_load.c    a prompt text of about P tokens (calibrated with the daemon's own
 *                   count), the clients sweep (N clients on N connections, all submitting
 *                   at once) and the mixed load (streams, then a burst of newcomers), with
 *                   per-request measurements reduced to the figures below;
 *   serve_report.c  the engine-level figure (m40-bench's decode JSON at the same batch),
 *                   the table and the JSON.
 * Only libm40 (m40/m40.h) talks to the daemon; nothing here includes daemon headers.
 * Functions return 0 or a negative errno / project code with err filled where they take
 * one; none prints but the report functions and serve_daemon_log_tail(). */
#ifndef M40_SERVE_BENCH_H
#define M40_SERVE_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "bench_list.h"

#define SERVE_MAX_RUNS    BENCH_LIST_MAX /* entries of --clients (m40-bench --batches) */
#define SERVE_MAX_CLIENTS 256            /* clients of one run, streams, arrivals */
#define SERVE_MAX_PROMPT  8192           /* prompt tokens */
#define SERVE_MAX_TOKENS  16384          /* generated tokens per request */

/* The daemon, as serve_daemon_start() left it. */
struct serve_daemon {
        pid_t pid;      /* 0: not running */
        char dir[256];  /* the temporary directory (config, socket, default log) */
        char sock[108]; /* the socket path (sun_path size) */
        char ini[300];  /* the generated configuration */
        char log[4096]; /* m40d's standard error */
        bool own_log;   /* log lies in dir (removed with it) */
};

struct serve_daemon_opts {
        const char *m40d;        /* the m40d binary */
        const char *model;       /* GGUF file */
        const char *base_config; /* NULL, or an m40d.ini whose keys the generated one keeps */
        const char *engine;      /* "auto", "cpu" or "cuda" */
        const char *log;         /* NULL: m40d's log in the temporary directory */
        uint32_t max_sequences;  /* [engine] max_sequences */
        uint32_t max_clients;    /* [server] max_clients */
        uint32_t max_tokens;     /* [server] max_tokens: the largest request */
        uint32_t max_prompt_bytes;
        int threads;              /* [engine] threads; < 0: not set */
        unsigned start_timeout_s; /* until the socket accepts a client */
};

/* serve_daemon_start - writes a configuration into a new temporary directory (the keys of
 * o->base_config first, then the benchmark's: model path, socket, an empty group, backend,
 * max_sequences, max_clients, max_tokens, max_prompt_bytes, threads), starts o->m40d on it
 * (its standard error to the log; SIGTERM reaches it if this process dies) and waits until
 * the socket accepts a client. Returns 0; -ENOENT/-errno when a file cannot be read or
 * written, -ECHILD when m40d exited at start, -ETIMEDOUT when it did not come up in time
 * (m40d is stopped then); err says which. d stays valid for serve_daemon_done() on every
 * return. */
int serve_daemon_start(struct serve_daemon *d, const struct serve_daemon_opts *o, char *err,
                       size_t errlen);

/* serve_daemon_stop - SIGTERM, then waits up to timeout_s (SIGKILL after). Returns m40d's
 * exit status (128 + signal if killed), or -ECHILD when none runs. */
int serve_daemon_stop(struct serve_daemon *d, unsigned timeout_s);

/* serve_daemon_done - stops m40d if it runs, removes the temporary directory unless keep
 * (then its path stays in d->dir). */
void serve_daemon_done(struct serve_daemon *d, bool keep);

/* serve_daemon_log_tail - prints the last lines of m40d's log to f, each indented. */
void serve_daemon_log_tail(const struct serve_daemon *d, FILE *f, int lines);

/* p50 / p99 / max of a sample, nearest rank; n == 0: all zero. */
struct serve_pct {
        size_t n;
        double p50, p99, max;
};

/* What the clients of one run share. */
struct serve_load {
        const char *sock;
        int timeout_ms; /* the longest wait for a request's next event */
};

/* One run of the sweep: N clients at once. Times in ms. */
struct serve_run {
        uint32_t clients;
        uint32_t finished;   /* DONE events */
        uint32_t errors;     /* ERROR events, failed submits, lost connections */
        uint32_t short_runs; /* DONE before max_tokens (finish not "length") */
        uint64_t generated;  /* tokens, from the DONE events */
        uint64_t prompt;     /* prompt tokens, from the DONE events */
        double seconds;      /* first submit to last finish */
        double tok_s;        /* generated / seconds */
        struct serve_pct ttft, itl;
        double engine_tok_s; /* m40-bench at batch N; < 0: none */
        char error[256];     /* the first error's message, "" if none */
};

/* serve_prompt_make - a prompt text of about tokens tokens, as the daemon counts them
 * (up to 8 probes of one generated token each, keeping the closest). Returns 0 with a
 * malloc'ed text in *ret_text and the daemon's count in *ret_tokens; -ENOMEM, a libm40
 * error, or the ERROR event's code (err says which). */
int serve_prompt_make(const struct serve_load *l, uint32_t tokens, char **ret_text,
                      uint32_t *ret_tokens, char *err, size_t errlen);

/* serve_run_clients - n clients (n <= SERVE_MAX_CLIENTS), each on its own connection and
 * thread, submit prompt at once (greedy, ignore_eos, max_tokens) and read their events.
 * Returns 0 with *ret filled (request failures are counted there, not returned); -ENOMEM
 * or -errno when threads or memory cannot be had. */
int serve_run_clients(const struct serve_load *l, uint32_t n, const char *prompt,
                      uint32_t max_tokens, struct serve_run *ret);

/* The mixed load: streams decode; after all have a first token and warmup_ms more, a window
 * of window_ms is measured; then arrivals newcomers submit, one every interval_ms. */
struct serve_mixed_opts {
        uint32_t streams, stream_tokens;
        uint32_t arrivals, arrival_tokens;
        uint32_t interval_ms, warmup_ms, window_ms;
};

struct serve_window {
        double seconds;
        uint64_t tokens; /* stream tokens that arrived in the window */
        double tok_s;
        struct serve_pct itl; /* gaps ending in the window */
};

struct serve_mixed {
        struct serve_window before, during; /* during: first arrival to last first token */
        double ratio;                       /* during.tok_s / before.tok_s */
        struct serve_pct ttft;              /* of the newcomers */
        uint32_t newcomers_finished;
        uint32_t errors; /* of streams and newcomers */
        char error[256];
};

/* serve_run_mixed - the mixed load, streams with stream_prompt, newcomers with
 * arrival_prompt (both greedy, ignore_eos); the streams are cancelled once the burst
 * window closes. Returns 0 with *ret filled (failures counted there; a stream that ended
 * before the window closed is one, with its reason in ret->error); -ENOMEM or -errno. */
int serve_run_mixed(const struct serve_load *l, const struct serve_mixed_opts *o,
                    const char *stream_prompt, const char *arrival_prompt, struct serve_mixed *ret);

/* serve_idle - waits up to 30 s until the daemon runs and queues nothing. Returns 0,
 * -ETIMEDOUT, or a libm40 error. */
int serve_idle(const char *sock);

/* serve_engine_figure - runs m40-bench (path) on model at batches (prompt, tokens as the
 * served requests; no load or prefill test) and writes its decode tok/s per batch into
 * tok_s[i] (< 0 where it gave none). json is a file path m40-bench writes. Returns 0;
 * -ENOENT, -ECHILD when m40-bench failed, -EBADMSG for output without decode figures. */
int serve_engine_figure(const char *m40_bench, const char *model, const uint32_t *batches, int n,
                        uint32_t prompt, uint32_t tokens, const char *json, bool quiet,
                        double *tok_s, char *err, size_t errlen);

/* What the report shows besides the figures. */
struct serve_info {
        const char *model, *m40d, *engine, *engine_note;
        uint32_t prompt_asked, prompt_tokens, max_tokens, max_sequences, n_ctx;
        uint64_t kv_tokens, kv_bytes; /* the KV cache, as m40d reports it */
        bool mixed;
        const struct serve_mixed_opts *mo;
        uint32_t arrival_prompt_tokens, stream_prompt_tokens;
        const char *error; /* NULL: none */
};

/* serve_report_text / serve_report_json - the report as a table / as one JSON object
 * (runs[n], mixed may be NULL). */
void serve_report_text(FILE *f, const struct serve_info *in, const struct serve_run *runs, int n,
                       const struct serve_mixed *mixed);
void serve_report_json(FILE *f, const struct serve_info *in, const struct serve_run *runs, int n,
                       const struct serve_mixed *mixed);

#endif
