/* m40/m40.h - libm40, the client library of m40-llm: talk to a running m40d.
 *
 * A struct m40_client is one connection: a Unix socket plus a shared-memory region with a
 * submission ring and an event ring (m40/proto.h). Submit requests (a raw prompt or chat
 * messages, sampling and stop parameters), then read their events - admission, text
 * pieces, and one final DONE or ERROR per request - with m40_client_next(), blocking with a
 * timeout or driven by poll/epoll on m40_client_fd(). Every function is safe to call from
 * several threads on the same connection; events of all requests of a connection come out
 * of one queue, in the order the daemon produced them.
 *
 * Every function returns 0 (or a count) on success and a negative code on failure: -errno
 * or a project code from m40/error.h; m40_strerror() describes either. Output parameters
 * named ret_* are written only on success. The library never prints.
 *
 * Timeouts: every exchange on the control socket - connecting, the handshake, STATUS -
 * takes at most the connection's timeout (M40_DEFAULT_TIMEOUT_MS unless set with
 * m40_client_connect_timeout() or m40_client_set_timeout()) and fails with -ETIMEDOUT when
 * the daemon stays silent that long (stopped, hung, or still loading its model when
 * socket-activated). Events have no such limit: a request may wait in the daemon's queue
 * for long. A client that waits for events and wants to tell a stopped daemon from a busy
 * one calls m40_client_status() after a silence: a running daemon answers it within the
 * timeout (m40ctl does this). */
#ifndef M40_M40_H
#define M40_M40_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "m40/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define M40_DEFAULT_SOCKET     "/run/m40d/m40d.sock"
#define M40_TEXT_MAX           96    /* bytes of text in one event */
#define M40_DEFAULT_TIMEOUT_MS 30000 /* limit of one control exchange (see above) */

struct m40_client;

/* A chat message. role: "system", "user" or "assistant". */
struct m40_message {
        const char *role;
        const char *content; /* NUL-terminated UTF-8 */
};

/* struct m40_request.set: the sampling fields the caller chose; the rest take the daemon's
 * defaults (m40d.ini [sampling]). The daemon fails a request (ERROR -EINVAL, naming the
 * field) whose chosen value lies outside the range noted at the field; numbers must be
 * finite. */
enum {
        M40_SET_TEMPERATURE = 1u << 0,
        M40_SET_TOP_K = 1u << 1,
        M40_SET_TOP_P = 1u << 2,
        M40_SET_MIN_P = 1u << 3,
        M40_SET_REPEAT_PENALTY = 1u << 4,
        M40_SET_SEED = 1u << 5,
        M40_SET_PRESENCE_PENALTY = 1u << 6,
        M40_SET_FREQUENCY_PENALTY = 1u << 7,
};

/* struct m40_request.flags */
enum {
        M40_REQUEST_IGNORE_EOS = 1u << 0, /* do not stop at end-of-generation tokens */
        M40_REQUEST_TOKENS = 1u << 1,     /* report token ids in text events */
};

struct m40_request {
        const char *prompt;                 /* raw prompt text, or NULL to use messages */
        const struct m40_message *messages; /* chat, formatted with the model's template */
        size_t n_messages;
        uint32_t max_tokens;  /* 0: the daemon's default */
        uint32_t set;         /* M40_SET_* */
        float temperature;    /* <= 100; <= 0: greedy */
        int32_t top_k;        /* <= 0: off */
        float top_p;          /* >= 0; 0 and >= 1: off */
        float min_p;          /* <= 1; <= 0: off */
        float repeat_penalty; /* 0.01..100; 1: off */
        uint64_t seed;
        const char *const *stop; /* up to 8 stop strings of up to 64 bytes */
        size_t n_stop;
        uint32_t flags; /* M40_REQUEST_* */
        /* OpenAI's penalties: the logit of a token seen n times in the sampler's window of
         * recent tokens drops by n x frequency_penalty + presence_penalty. Chosen with
         * M40_SET_PRESENCE_PENALTY / M40_SET_FREQUENCY_PENALTY, else 0. */
        float presence_penalty;  /* -100..100; 0: off */
        float frequency_penalty; /* -100..100; 0: off */
};

enum m40_event_type {
        M40_EVENT_ADMITTED = 1, /* the request started decoding */
        M40_EVENT_TEXT = 2,     /* text (complete UTF-8) */
        M40_EVENT_DONE = 3,     /* the request finished; finish and usage are set */
        M40_EVENT_ERROR = 4,    /* the request failed; error and text (message) are set */
};

enum m40_finish_reason {
        M40_FINISHED_LENGTH = 1,  /* max_tokens reached */
        M40_FINISHED_EOS = 2,     /* the model ended its text */
        M40_FINISHED_STOP = 3,    /* a stop string matched */
        M40_FINISHED_CANCEL = 4,  /* m40_client_cancel() */
        M40_FINISHED_CONTEXT = 5, /* the context window is full */
        M40_FINISHED_KV = 6,      /* the daemon ran out of KV memory */
};

struct m40_reply {
        uint32_t type;               /* enum m40_event_type */
        uint64_t id;                 /* the request's id from m40_client_submit() */
        char text[M40_TEXT_MAX + 1]; /* NUL-terminated; len bytes (TEXT, ERROR) */
        size_t len;
        int32_t token;   /* TEXT with M40_REQUEST_TOKENS: the last token id, else -1 */
        uint32_t finish; /* DONE: enum m40_finish_reason */
        int error;       /* ERROR: negative code */
        uint32_t n_prompt, n_generated;
        uint64_t t_daemon_ns; /* CLOCK_MONOTONIC: TEXT produced / ADMITTED admitted */
        uint64_t t_submit_ns; /* ADMITTED: when the request was submitted */
};

/* A duration m40d measures once per engine step, over the steps since it started: count,
 * sum and maximum, the median and 99th percentile (each at most 25% above the true value:
 * the upper bound of a histogram bucket), in ns; all 0 while count is 0. */
struct m40_timing {
        uint64_t count;
        uint64_t sum_ns, max_ns, p50_ns, p99_ns;
};

struct m40_status {
        char model[128];
        char arch[16];
        char backend[16];
        char chat_template[24];
        uint32_t clients, active, queued, max_sequences;
        uint32_t kv_pages_used, kv_pages_total, n_ctx, n_vocab;
        uint64_t prompt_tokens, generated_tokens, requests;
        double tokens_per_s;
        bool draining;
        /* The KV cache: kv_pages_total pages of kv_page_tokens positions and kv_page_bytes
         * bytes each. */
        uint32_t kv_page_tokens;
        uint64_t kv_page_bytes;
        /* Of the active requests, those whose sequences wait for their clients to read their
         * events (held; they take no part in steps meanwhile). */
        uint32_t held;
        /* The engine's steps: step, the engine's thread running one; gap, from a step's end
         * to the start of the next when m40d started it as soon as it had collected the step
         * before (the daemon's own time between steps while work waits; wake, of it, from a
         * step's end to m40d collecting it); handover, from m40d starting a step to the
         * engine's thread taking it. */
        struct m40_timing step, gap, wake, handover;
        /* The last engine step that only decoded: the sequences it decoded, of those
         * running (m40d.ini's decode_width: fewer when the engine measured more tokens a
         * second that way). 0 and 0 before such a step, or from an older daemon. */
        uint32_t decode_width, decode_running;
};

/* m40_client_connect - connect to the daemon at socket path and do the handshake. path
 * NULL or "": $M40_SOCKET when set, else M40_DEFAULT_SOCKET (the service's), else, when
 * that does not exist, $XDG_RUNTIME_DIR/m40d/m40d.sock (where m40d run by a user listens;
 * the rule is m40/paths.h's m40_client_socket()). Returns 0 and a connection in *ret_client;
 * -ENOENT/-ECONNREFUSED when no daemon listens, -EACCES when the daemon refuses this
 * user, M40_EVERSION on a protocol mismatch, -EUSERS when the daemon has too many clients,
 * M40_EPROTO on a malformed answer, or -errno. */
int m40_client_connect(const char *path, struct m40_client **ret_client);

/* m40_client_connect_timeout - m40_client_connect() with the connection's timeout in
 * milliseconds (< 0: none), which bounds the connect and handshake and stays for later
 * control exchanges. Returns what m40_client_connect() does, -ETIMEDOUT when the daemon did
 * not answer in time, -EINVAL for a timeout of 0. */
int m40_client_connect_timeout(const char *path, int timeout_ms, struct m40_client **ret_client);

/* m40_client_set_timeout - sets c's timeout for later control exchanges (milliseconds; <
 * 0: none). Returns 0, or -EINVAL for 0. */
int m40_client_set_timeout(struct m40_client *c, int timeout_ms);

/* m40_client_max_request_bytes - the most bytes one request may carry (prompt, messages
 * and stop strings as encoded; the daemon's max_prompt_bytes); larger ones get -E2BIG. */
size_t m40_client_max_request_bytes(const struct m40_client *c);

/* m40_client_disconnect - close the connection (the daemon cancels its requests) and free
 * c. Accepts NULL; returns NULL. No other thread may use c during or after the call. */
struct m40_client *m40_client_disconnect(struct m40_client *c);

/* m40_request_init - fills *r with an empty request: no prompt, daemon defaults. */
void m40_request_init(struct m40_request *r);

/* m40_client_submit - queue request r. Returns 0 and its id in *ret_id; -EAGAIN when the
 * submission ring or payload area is full (read events, then retry); -E2BIG when the
 * prompt, messages and stop strings exceed the daemon's per-request size; -EINVAL for a
 * request without a prompt or with bad fields; -EPIPE when the daemon is gone. The
 * daemon may still reject the request later with an ERROR event (limits, shutdown). r and
 * the strings it points to are copied; the caller keeps them. */
int m40_client_submit(struct m40_client *c, const struct m40_request *r, uint64_t *ret_id);

/* m40_client_cancel - ask the daemon to stop request id; its DONE (finish CANCEL) or
 * ERROR event still follows. Returns 0, -EAGAIN when the ring is full, -EPIPE. */
int m40_client_cancel(struct m40_client *c, uint64_t id);

/* m40_client_next - the next event, waiting up to timeout_ms (< 0: forever, 0: no wait).
 * Returns 0 with the event in *ret; -EAGAIN (timeout 0) or -ETIMEDOUT when there is none
 * yet; -EINTR when a signal interrupted the wait; -EPIPE when the daemon closed the
 * connection (died or stopped) and no event is left; M40_EPROTO when the daemon wrote a
 * malformed event ring. */
int m40_client_next(struct m40_client *c, int timeout_ms, struct m40_reply *ret);

/* m40_client_fd - a descriptor that becomes readable when events may be waiting or the
 * daemon hung up; for poll/epoll. After it fires, call m40_client_next(c, 0, ...) until it
 * returns -EAGAIN, which re-arms it. Owned by c. */
int m40_client_fd(struct m40_client *c);

/* m40_client_status - ask the daemon for its state. Returns 0 and fills *ret_status;
 * -ETIMEDOUT when the daemon did not answer within c's timeout (a later call first skips
 * the late answer); -EPIPE/-errno, M40_EPROTO. */
int m40_client_status(struct m40_client *c, struct m40_status *ret_status);

/* m40_finish_name - "length", "eos", "stop", "cancel", "context", "kv", or "?". */
const char *m40_finish_name(uint32_t finish);

#ifdef __cplusplus
}
#endif

#endif
