/* main.c - m40d: command line, configuration, model loading, the main loop and the
 * service lifecycle (sd_notify READY/STATUS/WATCHDOG/STOPPING, SIGTERM drain); the
 * listening socket is listen.c's. With listen.c, the only place in the daemon that decides
 * what to log. */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#ifdef M40_HAVE_CUDA_ENGINE
#include "cuda/engine/cuda_engine.h"
#include "cuda/runtime/device.h"
#endif
#include "ipc/ipc.h"
#include "m40-version.h"
#include "m40/error.h"
#include "m40/paths.h"
#include "m40d/config.h"
#include "m40d/listen.h"
#include "m40d/log.h"
#include "m40d/sched.h"
#include "m40d/server.h"
#include "model/gguf.h"
#include "text/chat.h"
#include "text/vocab.h"

#define DEFAULT_CONFIG  M40_CONFIG_FILE /* SYSCONFDIR/m40d/m40d.ini of the build */
#define STATUS_EVERY_NS 2000000000ull

struct daemon {
        struct m40d_config cfg;
        struct m40_gguf *g;
        struct m40_vocab *v;
        struct m40_engine *e;
        struct m40_sched *s;
        struct m40d_server *srv;
        struct m40_chat_template tmpl;
        struct m40_proto_status model;
        gid_t gid;
        uint64_t watchdog_usec;
        /* the engine watchdog (watch_step()): when the step in flight that ran over
         * [engine] step_timeout_ms started; 0: the engine is not stuck */
        uint64_t stuck_start;
        struct m40_ipc_sockid sock_id;
        bool own_socket; /* we made cfg.socket (not systemd): remove it at exit */
};

static void usage(FILE *f)
{
        fputs("Usage: m40d [-c FILE] [-m MODEL] [--check-config]\n"
              "       m40d MODEL\n"
              "\n"
              "The m40-llm daemon: serves text generation from one GGUF model to local\n"
              "clients (m40ctl, programs linking libm40) over a Unix socket and shared memory.\n"
              "\n"
              "Options:\n"
              "  -c, --config FILE   Read settings from FILE. Without -c, m40d reads\n"
              "                      " DEFAULT_CONFIG ", unless a model is given (-m or\n"
              "                      MODEL): then it starts on the built-in defaults (those\n"
              "                      the shipped m40d.ini spells out) and reads no file.\n"
              "  -m, --model MODEL   Serve MODEL, over the configuration's [model] path.\n"
              "                      MODEL is a file (it has a '/' or ends in .gguf) or the\n"
              "                      NAME of one in the model store: STORE/NAME.gguf, where\n"
              "                      STORE is $M40_MODELS if set, else " M40_ROOT_STORE "\n"
              "                      for root, else $XDG_DATA_HOME/m40/models\n"
              "                      (~/.local/share/m40/models); m40ctl pull/list/rm\n"
              "                      manage it. A NAME has at most 200 bytes, no control\n"
              "                      characters, and does not start with '.'.\n"
              "      --check-config  Validate the configuration and the model file, then exit.\n"
              "  -h, --help          Show this text.\n"
              "      --version       Print m40d's version.\n"
              "\n"
              "Socket: [server] socket, or the one systemd passes (socket activation). When\n"
              "neither names one, root listens on " M40_DEFAULT_SOCKET " and any other\n"
              "user on $XDG_RUNTIME_DIR/m40d/m40d.sock (the directory made with mode 0700,\n"
              "the socket for that user only), where m40ctl and libm40 look "
              "when\n" M40_DEFAULT_SOCKET
              " does not exist. m40d refuses to start when another m40d\n"
              "listens on its socket (\"already running (pid N)\"). A [server] group that does\n"
              "not exist is reported and left out (the socket is then for root and m40d's\n"
              "user only); a user's m40d uses no group unless the configuration names one.\n"
              "\n"
              "Loading: on a terminal, stderr shows a line updated in place, e.g.\n"
              "  loading MODEL: 1.2/4.5 GB (27%) 1.1 GB/s\n"
              "and under systemd the same goes to STATUS= (systemctl status m40d).\n"
              "\n"
              "Signals: SIGTERM or SIGINT drain (running requests finish, up to [server]\n"
              "shutdown_timeout seconds) and stop; a second one stops at once.\n"
              "\n"
              "Examples:\n"
              "  m40d -m ~/models/SmolLM2-135M-Instruct.Q4_1.gguf\n"
              "  m40d -m SmolLM2-135M-Instruct.Q4_1     (from the model store)\n"
              "  m40d -c /etc/m40d/m40d.ini --check-config\n"
              "\n"
              "Exit status: 0 after a clean shutdown (SIGTERM) or a valid configuration;\n"
              "1 on a configuration, model or socket error (another m40d running included);\n"
              "2 bad command line.\n",
              f);
}

static uint64_t now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static size_t piece(void *ctx, int32_t token, const char **ret)
{
        size_t len = 0;

        if (m40_vocab_piece(ctx, token, false, ret, &len))
                *ret = "";
        return len;
}

static int check_config(struct daemon *d)
{
        const struct m40d_config *c = &d->cfg;
        char err[512];
        int r;

        if (c->group[0]) {
                struct group *gr = getgrnam(c->group);

                d->gid = gr ? gr->gr_gid : (gid_t)-1;
                if (!gr)
                        m40d_log(LOG_WARNING,
                                 "[server] group: no group named '%s' here: the socket is "
                                 "for root and m40d's user only",
                                 c->group);
        } else {
                d->gid = (gid_t)-1;
        }
#ifndef M40_HAVE_CUDA_ENGINE
        if (c->backend == M40D_BACKEND_CUDA) {
                m40d_log(LOG_ERR, "[engine] backend = cuda: this m40d was built without CUDA "
                                  "(meson -Dcuda=enabled; or use auto or cpu)");
                return M40_ENOTBUILT;
        }
#endif
        r = m40_gguf_open(c->model, &d->g, err, sizeof(err));
        if (r) {
                m40d_log(LOG_ERR, "[model] path: %s", err);
                return r;
        }
        return 0;
}

/* new_engine - creates d->e for the configured backend: cpu, cuda (GPU 0, or fail), or
 * auto (the CUDA engine when this m40d has it and a GPU is usable, else the CPU engine,
 * saying which and why). *ret_backend names the engine that runs. */
static int new_engine(struct daemon *d, const struct m40_engine_limits *lim,
                      const char **ret_backend)
{
        char err[512] = "";
        int r;

#ifdef M40_HAVE_CUDA_ENGINE
        if (d->cfg.backend != M40D_BACKEND_CPU) {
                int n = 0;

                r = m40_cuda_device_count(&n);
                if (r)
                        snprintf(err, sizeof(err), "cannot list CUDA GPUs");
                else if (n == 0)
                        r = M40_ENODEVICE;
                else
                        r = m40_cuda_engine_new(d->g, lim, 0, &d->e, err, sizeof(err));
                if (r == M40_ENODEVICE && !err[0])
                        snprintf(err, sizeof(err), "no CUDA GPU found");
                if (r == 0) {
                        *ret_backend = "cuda";
                        return 0;
                }
                if (d->cfg.backend == M40D_BACKEND_CUDA)
                        return m40d_log_errno(r, "%s: backend cuda: %s", d->cfg.model, err);
                m40d_log(LOG_NOTICE,
                         "backend auto: the CUDA engine cannot run (%s); using the "
                         "CPU engine",
                         err);
        }
#else
        if (d->cfg.backend == M40D_BACKEND_AUTO)
                m40d_log(LOG_NOTICE, "backend auto: this m40d was built without CUDA; using "
                                     "the CPU engine");
#endif
        r = m40_cpu_engine_new(d->g, lim, &d->e, err, sizeof(err));
        if (r)
                return m40d_log_errno(r, "%s: cannot load the model: %s", d->cfg.model, err);
        if (d->cfg.vram_limit_mb)
                m40d_log(LOG_INFO, "[engine] vram_limit_mb = %llu: applies to the CUDA engine only",
                         (unsigned long long)d->cfg.vram_limit_mb);
        *ret_backend = "cpu";
        return 0;
}

/* The engine's load (the CUDA engine's upload, the CPU engine's read of its mapping):
 * sd_notify STATUS= a few times a second (systemctl status shows it), a line updated in
 * place on stderr when it is a terminal, and one log line when it is done. */
struct load_watch {
        const char *model;
        double last;     /* seconds of the last STATUS */
        double last_tty; /* seconds of the last terminal line */
        bool tty;        /* stderr is a terminal */
};

/* tty_progress - "loading NAME: 1.2/4.5 GB (27%) 1.1 GB/s" over the previous one (\r,
 * erase to the end of the line), ending the line at the end of the load. */
static void tty_progress(const struct load_watch *w, uint64_t done, uint64_t total, double seconds)
{
        const char *base = strrchr(w->model, '/') ? strrchr(w->model, '/') + 1 : w->model;
        const bool gb = total >= 1000000000ull;
        const double u = gb ? 1e9 : 1e6;
        const char *unit = gb ? "GB" : "MB";

        fprintf(stderr, "\rloading %s: %.1f/%.1f %s (%.0f%%) %.1f %s/s\033[K%s", base,
                (double)done / u, (double)total / u, unit,
                total ? 100.0 * (double)done / (double)total : 100.0,
                seconds > 0.0 ? (double)done / seconds / u : 0.0, unit, done >= total ? "\n" : "");
}

static void on_load_progress(void *ctx, uint64_t done, uint64_t total, double seconds)
{
        struct load_watch *w = ctx;
        const double mbs = seconds > 0.0 ? (double)done / seconds / 1e6 : 0.0;

        if (w->tty && (done >= total || seconds - w->last_tty >= 0.1)) {
                w->last_tty = seconds;
                tty_progress(w, done, total, seconds);
        }
        if (done >= total) {
                m40d_log(LOG_INFO, "%s: %.1f MiB of weights loaded in %.2f s (%.0f MB/s)", w->model,
                         (double)total / 1048576.0, seconds, mbs);
                return;
        }
        if (seconds - w->last < 0.25)
                return;
        w->last = seconds;
        sd_notifyf(0, "STATUS=loading %s: %.0f of %.0f MiB (%.0f MB/s)", w->model,
                   (double)done / 1048576.0, (double)total / 1048576.0, mbs);
}

static void on_load_note(void *ctx, const char *msg)
{
        (void)ctx;
        m40d_log(LOG_NOTICE, "loader: %s", msg);
}

static int load_model(struct daemon *d)
{
        struct load_watch watch = {d->cfg.model, 0.0, 0.0, isatty(STDERR_FILENO) == 1};
        const char *backend = "cpu";
        struct m40_engine_limits lim = {0};
        struct m40_engine_model info;
        const char *tmpl_src = NULL, *base;
        const int32_t *eog;
        size_t n_eog;
        char err[512] = "";
        int r;

        r = m40_vocab_new(d->g, &d->v, err, sizeof(err));
        if (r)
                return m40d_log_errno(r, "%s: cannot load the tokenizer: %s", d->cfg.model, err);
        m40_gguf_get_str(d->g, "tokenizer.chat_template", NULL, &tmpl_src);
        r = m40_chat_template_init(&d->tmpl, tmpl_src);
        if (r == -ENOMEM)
                return m40d_log_errno(r, "%s: cannot read the chat template", d->cfg.model);
        if (r)
                m40d_log(LOG_WARNING, "%s: %s chat template; chat requests use chatml",
                         d->cfg.model, r == -ENOENT ? "no" : "unrecognised");
        eog = m40_vocab_eog(d->v, &n_eog);
        if (n_eog <= M40_MAX_EOG_IDS) {
                memcpy(lim.eog, eog, n_eog * sizeof(*eog));
                lim.n_eog = (uint32_t)n_eog;
        } else {
                m40d_log(LOG_WARNING,
                         "%s: %zu end-of-generation tokens; generation stops at "
                         "EOS/EOT only",
                         d->cfg.model, n_eog);
        }
        lim.max_seqs = d->cfg.max_sequences + d->cfg.held_sequences; /* m40d/sched.h */
        lim.max_ctx = d->cfg.max_context;
        lim.kv_bytes = d->cfg.kv_memory_mib << 20;
        lim.max_batch_tokens = d->cfg.max_batch_tokens;
        lim.prefill_chunk =
                d->cfg.prefill_chunk_tokens ? d->cfg.prefill_chunk_tokens : d->cfg.max_batch_tokens;
        lim.vram_limit_mb = d->cfg.vram_limit_mb;
        lim.n_threads = d->cfg.threads;
        lim.mode = d->cfg.mode;
        lim.width = d->cfg.width;
        lim.piece = piece;
        lim.piece_ctx = d->v;
        lim.load_progress = on_load_progress;
        lim.load_note = on_load_note;
        lim.load_ctx = &watch;
        r = new_engine(d, &lim, &backend);
        if (r)
                return r;
        if (d->cfg.chain_steps == M40D_CHAIN_AUTO)
                d->cfg.chain_steps = strcmp(backend, "cuda") ? M40D_CHAIN_OFF : M40D_CHAIN_ON;
        m40_engine_model(d->e, &info);
        base = strrchr(d->cfg.model, '/');
        base = base ? base + 1 : d->cfg.model;
        snprintf(d->model.model, sizeof(d->model.model), "%.127s", base);
        snprintf(d->model.arch, sizeof(d->model.arch), "%s", info.arch);
        snprintf(d->model.backend, sizeof(d->model.backend), "%s", backend);
        snprintf(d->model.chat_tmpl, sizeof(d->model.chat_tmpl), "%s",
                 m40_chat_tmpl_name(d->tmpl.tmpl));
        m40d_log(LOG_INFO,
                 "loaded %s: %s, %u layers, dim %u, vocab %u, %.1f MiB of weights, "
                 "chat template %s%s, backend %s, chained steps %s",
                 base, info.arch, info.n_layers, info.dim, info.n_vocab,
                 info.weight_bytes / 1048576.0, d->model.chat_tmpl,
                 d->tmpl.default_system ? " with the template's default system message" : "",
                 backend, d->cfg.chain_steps == M40D_CHAIN_ON ? "on" : "off");
        return 0;
}

/* log_kv - once at start: the KV cache the engine took, how its size was chosen, and what
 * every sequence at the full context would take. */
static void log_kv(const struct daemon *d)
{
        struct m40_proto_status st = {0};
        char why[64];

        m40_sched_status(d->s, &st);
        if (d->cfg.kv_memory_mib)
                snprintf(why, sizeof(why), "from kv_memory_mib = %llu",
                         (unsigned long long)d->cfg.kv_memory_mib);
        else if (!strcmp(d->model.backend, "cuda"))
                snprintf(why, sizeof(why), "sized from free device memory");
        else
                snprintf(why, sizeof(why), "the CPU engine's default, at most %u MiB",
                         M40_CPU_ENGINE_KV_DEFAULT_MIB);
        m40d_log(LOG_INFO,
                 "[engine] KV cache: %u pages = %llu tokens = %.1f MiB (%s); %u sequences at "
                 "the full context of %u take %llu tokens",
                 st.kv_pages_total, (unsigned long long)st.kv_pages_total * st.kv_page_tokens,
                 (double)st.kv_pages_total * (double)st.kv_page_bytes / 1048576.0, why, st.max_seqs,
                 st.n_ctx, (unsigned long long)st.max_seqs * st.n_ctx);
}

static void notify_status(struct daemon *d, const char *prefix)
{
        struct m40_proto_status st = d->model;
        char stuck[128] = "";

        m40_sched_status(d->s, &st);
        if (d->stuck_start)
                snprintf(stuck, sizeof(stuck),
                         "engine stuck: a step has run for %.0f s (step_timeout_ms = %u); ",
                         (double)(now_ns() - d->stuck_start) * 1e-9, d->cfg.step_timeout_ms);
        sd_notifyf(0, "%sSTATUS=%s: %s%u active, %u queued, %u clients, %.1f tokens/s", prefix,
                   st.model, stuck, st.active, st.queued, st.clients, st.tokens_per_s);
}

/* watch_step - the engine watchdog, once a round at time t: the engine is stuck while the
 * step in flight has run for [engine] step_timeout_ms or more (a hung GPU, a wedged
 * driver: the step runs on the engine's thread, so the loop goes on and would otherwise
 * ping systemd's watchdog forever). Becoming stuck is logged once and put in STATUS; the
 * caller then sends no WATCHDOG=1, so that systemd restarts m40d after WatchdogSec. A step
 * that finishes after all is logged and the pings resume. Returns whether the engine is
 * stuck. A device heartbeat (the persistent kernel) is one more input here. */
static bool watch_step(struct daemon *d, uint64_t t)
{
        const uint64_t limit = (uint64_t)d->cfg.step_timeout_ms * 1000000u;
        const uint64_t age = limit ? m40_sched_step_age_ns(d->s) : 0;

        if (age >= limit && limit && !d->stuck_start) {
                char next[128] = "no systemd watchdog to stop: m40d waits for the step";

                d->stuck_start = t - age;
                if (d->watchdog_usec)
                        snprintf(next, sizeof(next),
                                 "m40d stops pinging the systemd watchdog, which restarts it "
                                 "within %.0f s unless the step finishes",
                                 (double)d->watchdog_usec * 1e-6);
                m40d_log(LOG_CRIT,
                         "the engine step has run for %.1f s, over [engine] step_timeout_ms = "
                         "%u: the engine looks stuck; %s",
                         (double)age * 1e-9, d->cfg.step_timeout_ms, next);
                notify_status(d, "");
        } else if (age < limit && d->stuck_start) {
                /* the stuck step's age only grows: a younger one (or none) means it ended */
                m40d_log(LOG_WARNING,
                         "the stuck engine step finished after %.1f s: the engine works "
                         "again%s",
                         (double)(t - d->stuck_start) * 1e-9,
                         d->watchdog_usec ? "; the systemd watchdog pings resume" : "");
                d->stuck_start = 0;
                notify_status(d, "");
        }
        return d->stuck_start != 0;
}

/* heartbeat - once a round at time t: the engine watchdog, WATCHDOG=1 when one is due and
 * the engine is not stuck, STATUS every STATUS_EVERY_NS. Returns the ms after which the
 * loop must come round again for them (a ping, the step in flight reaching the timeout),
 * at most timeout. */
static int heartbeat(struct daemon *d, uint64_t t, uint64_t *last_ping, uint64_t *last_status,
                     int timeout)
{
        /* a quarter of WatchdogSec: a round that runs long still pings within half of it */
        const uint64_t ping_ns = d->watchdog_usec * 1000u / 4;
        const uint64_t limit = (uint64_t)d->cfg.step_timeout_ms * 1000000u;
        const bool stuck = watch_step(d, t);
        uint64_t age, wait_ns = (uint64_t)timeout * 1000000u;

        if (ping_ns && !stuck && t - *last_ping >= ping_ns) {
                sd_notify(0, "WATCHDOG=1");
                *last_ping = t;
        }
        if (t - *last_status >= STATUS_EVERY_NS) {
                notify_status(d, "");
                *last_status = t;
        }
        if (ping_ns && !stuck && *last_ping + ping_ns - t < wait_ns)
                wait_ns = *last_ping + ping_ns - t;
        age = limit && !stuck ? m40_sched_step_age_ns(d->s) : 0;
        if (age && (age >= limit || limit - age < wait_ns))
                wait_ns = age >= limit ? 0 : limit - age;
        return (int)((wait_ns + 999999u) / 1000000u);
}

/* Runs until a termination signal; then drains. Returns 0 or a negative error. */
static int serve(struct daemon *d)
{
        uint64_t last_status = 0, last_ping = 0, stop_deadline = 0;
        bool stopping = false;

        for (;;) {
                int busy = m40_sched_run(d->s), timeout = busy ? 0 : 1000, sig;
                uint64_t t = now_ns();

                /* the loop only gets here when the scheduler made its round: that is
                 * progress; it comes round at least once a second, also while a long engine
                 * step runs on the engine's thread, which heartbeat() watches */
                timeout = heartbeat(d, t, &last_ping, &last_status, timeout);
                if (stopping) {
                        if (m40_sched_quiet(d->s, true))
                                return 0;
                        if (t >= stop_deadline) {
                                if (!m40_sched_quiet(d->s, false)) {
                                        m40d_log(LOG_WARNING, "shutdown timeout: cancelling "
                                                              "the requests still running");
                                        m40_sched_cancel_all(d->s, M40_ESHUTDOWN);
                                        stop_deadline = t + 2000000000ull; /* deliver */
                                        continue;
                                }
                                m40d_log(LOG_WARNING, "some clients did not read their last "
                                                      "events");
                                return 0;
                        }
                        if (!busy && timeout > 10)
                                timeout = 10;
                }
                if (!busy) {
                        int next = m40_sched_next_ms(d->s);

                        if (next >= 0 && next < timeout)
                                timeout = next;
                }
                if (!busy && m40_sched_sleep(d->s, true))
                        timeout = 0;
                sig = m40d_server_wait(d->srv, timeout);
                m40_sched_sleep(d->s, false);
                if (sig && !stopping) {
                        stopping = true;
                        stop_deadline = now_ns() + d->cfg.shutdown_timeout_s * 1000000000ull;
                        m40d_log(LOG_INFO, "%s: draining (up to %u s)", strsignal(sig),
                                 d->cfg.shutdown_timeout_s);
                        sd_notify(0, "STOPPING=1\nSTATUS=draining");
                        m40d_server_close_listener(d->srv);
                        m40_sched_drain(d->s);
                } else if (sig) {
                        m40d_log(LOG_WARNING, "%s again: stopping now", strsignal(sig));
                        m40_sched_cancel_all(d->s, M40_ESHUTDOWN);
                        stop_deadline = now_ns();
                }
        }
}

/* set_model - the model of -m or the operand: a file, or a store name resolved to
 * STORE/NAME.gguf (m40/paths.h), valid by the rule m40ctl pull --name follows. Returns 0
 * or a negative code, logged. */
static int set_model(struct m40d_config *c, const char *arg)
{
        char path[sizeof(c->model)];
        const char *why = "";
        int r;

        if (!m40_store_is_name(arg)) {
                if (strlen(arg) >= sizeof(c->model))
                        return m40d_log_errno(-ENAMETOOLONG, "model path too long");
                snprintf(c->model, sizeof(c->model), "%s", arg);
                return 0;
        }
        r = m40_store_name_check(arg, &why);
        if (r) {
                m40d_log(LOG_ERR,
                         "model '%s': not a path (no '/', no .gguf) and %s (for a file here, write "
                         "./%s)",
                         arg, why, arg);
                return r;
        }
        r = m40_store_model(arg, path, sizeof(path));
        if (r == -ENOENT)
                return m40d_log_errno(r, "model %s: no model store (set $M40_MODELS or $HOME)",
                                      arg);
        if (r)
                return m40d_log_errno(r, "model %s: the store path is too long", arg);
        if (access(path, F_OK))
                return m40d_log_errno(-errno,
                                      "model %s: %s is not in the model store (m40ctl pull, or "
                                      "give a path: ./%s.gguf)",
                                      arg, path, arg);
        snprintf(c->model, sizeof(c->model), "%s", path);
        return 0;
}

int main(int argc, char **argv)
{
        enum { O_CHECK = 256, O_VERSION };
        static const struct option opts[] = {
                {"config", required_argument, 0, 'c'},     {"model", required_argument, 0, 'm'},
                {"check-config", no_argument, 0, O_CHECK}, {"help", no_argument, 0, 'h'},
                {"version", no_argument, 0, O_VERSION},    {0, 0, 0, 0},
        };
        static struct daemon d;
        const char *path = NULL, *model = NULL;
        bool check = false;
        sigset_t sigs;
        char err[4096];
        int c, r, lfd = -1;

        while ((c = getopt_long(argc, argv, "c:m:h", opts, NULL)) != -1) {
                switch (c) {
                case 'c':
                        path = optarg;
                        break;
                case 'm':
                        model = optarg;
                        break;
                case O_CHECK:
                        check = true;
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                case O_VERSION:
                        puts(M40_VERSION_TEXT("m40d"));
                        return 0;
                default:
                        usage(stderr);
                        return 2;
                }
        }
        if (!model && optind + 1 == argc)
                model = argv[optind++];
        if (optind != argc || (model && !*model)) {
                usage(stderr);
                return 2;
        }
        if (!path && !model)
                path = DEFAULT_CONFIG;
        /* before any thread exists (the engine's pool), so that every thread blocks them and
         * only the signalfd sees them */
        sigemptyset(&sigs);
        sigaddset(&sigs, SIGTERM);
        sigaddset(&sigs, SIGINT);
        sigaddset(&sigs, SIGHUP);
        sigprocmask(SIG_BLOCK, &sigs, NULL);
        signal(SIGPIPE, SIG_IGN);
        m40d_config_default(&d.cfg);
        r = path ? m40d_config_load(&d.cfg, path, err, sizeof(err)) : 0;
        if (r) {
                for (char *l = err, *nl; l; l = nl) { /* one log line per error */
                        nl = strchr(l, '\n');
                        if (nl)
                                *nl++ = 0;
                        m40d_log(LOG_ERR, "%s", l);
                }
                return 1;
        }
        m40d_log_set_level(d.cfg.log_level);
        r = model ? set_model(&d.cfg, model) : 0;
        r = r ? r : m40d_listen_pick(&d.cfg, check);
        if (r)
                return 1;
        r = check_config(&d);
        if (r || check) {
                if (!r)
                        m40d_log(LOG_INFO,
                                 "%s: configuration valid (model %s, backend %s, "
                                 "socket %s)",
                                 path ? path : "built-in defaults", d.cfg.model,
                                 m40d_backend_name(d.cfg.backend), d.cfg.socket);
                m40_gguf_free(d.g);
                return r ? 1 : 0;
        }
        sd_notifyf(0, "STATUS=loading %s", d.cfg.model);
        r = load_model(&d);
        if (!r)
                r = m40_sched_new(&d.cfg, d.e, d.v, &d.tmpl, &d.s);
        if (!r) {
                log_kv(&d);
                r = m40d_listen_fit_fds(&d.cfg);
        }
        if (!r)
                r = m40d_listen_open(&d.cfg, d.gid, &lfd, &d.sock_id, &d.own_socket);
        if (!r) {
                r = m40d_server_new(lfd, d.gid, d.cfg.max_clients, d.s, &d.model, &d.srv);
                if (r) {
                        m40d_log_errno(r, "cannot set up the event loop");
                        close(lfd);
                }
        }
        if (r)
                goto out;
        if (sd_watchdog_enabled(0, &d.watchdog_usec) <= 0)
                d.watchdog_usec = 0;
        notify_status(&d, "READY=1\n");
        m40d_log(LOG_INFO, "ready: %u sequences, up to %u clients", d.cfg.max_sequences,
                 d.cfg.max_clients);
        r = serve(&d);
        m40d_log(LOG_INFO, "stopped");
out:
        d.srv = m40d_server_free(d.srv);
        if (d.own_socket && m40_ipc_unlisten(d.cfg.socket, &d.sock_id) == -ESTALE)
                m40d_log(LOG_NOTICE, "%s is no longer our socket: leaving it", d.cfg.socket);
        d.s = m40_sched_free(d.s);
        m40_engine_free(d.e);
        m40_vocab_free(d.v);
        m40_chat_template_done(&d.tmpl);
        m40_gguf_free(d.g);
        return r ? 1 : 0;
}
