/* m40/proto.h - the wire format between m40d and its clients (DESIGN.md section 5),
 * version M40_PROTO_VERSION. Shared by the daemon's IPC layer and libm40; nothing else.
 *
 * Control channel: a Unix stream socket. Every message is a struct m40_proto_msg header
 * followed by len bytes of body. The client opens with HELLO; the daemon checks the peer's
 * credentials (SO_PEERCRED) and the version and answers WELCOME, carrying three file
 * descriptors in SCM_RIGHTS: the client's shared region (a sealed memfd of region_bytes),
 * the client-to-daemon doorbell and the daemon-to-client doorbell (eventfds). A refused
 * client gets WELCOME with a negative status and no descriptors. Later the client may send
 * STATUS_REQ at any time and gets STATUS back. Closing the socket ends the session: the
 * daemon cancels every request of that client.
 *
 * Versions: a layout change bumps M40_PROTO_VERSION. A daemon serves clients of every
 * version from M40_PROTO_VERSION_MIN to its own, each in that client's version (WELCOME
 * carries the client's version; a message that grew is sent as long as it was in that
 * version: fields are only ever added at the end); a client needs a daemon of at least its
 * own version and gets M40_EVERSION from an older one.
 *
 * Data plane, inside the region (offsets in struct m40_proto_welcome):
 *   - submission ring (client -> daemon): sub_entries struct m40_proto_sub, a power of two;
 *   - payload area: payload_bytes, a byte ring the submissions point into (prompt text,
 *     chat messages and stop strings as struct m40_proto_item records);
 *   - event ring (daemon -> client): ev_entries struct m40_proto_ev, a power of two.
 * Ring indexes are free-running uint32 counters (slot = counter & (entries - 1)); each is
 * written by one side only, with release stores, and read by the other with acquire loads.
 * A side about to sleep sets its *_sleeping word, issues a full fence and checks its ring
 * again; the other side rings that doorbell (writes 1 to the eventfd) only when it sees the
 * flag set after publishing, so a wakeup costs a syscall only when someone sleeps.
 *
 * Backpressure: the daemon never drops an event and buffers only a few per request (a
 * bound independent of max_tokens) when a client's event ring is full: it stops
 * generating for that client's requests until the client has read. Before it sleeps with
 * events that did not fit, the daemon sets ev_waiting, issues a full fence and looks at
 * ev_head again; a client that has advanced ev_head issues a full fence and, when it sees
 * ev_waiting set, rings the client-to-daemon doorbell, so the daemon wakes and resumes.
 *
 * All integers are in host byte order (the socket is local); all structs are fixed-size and
 * checked with static_assert. The daemon copies every entry and payload out of the region
 * before looking at it and validates the copy; it never trusts or re-reads shared memory. */
#ifndef M40_PROTO_H
#define M40_PROTO_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

/* Versions: 2 added the ev_waiting word (event-ring backpressure), 3 the KV page size to
 * STATUS, 4 the held sequences to STATUS, 5 the engine steps' timings to STATUS. */
#define M40_PROTO_MAGIC       0x5030344du /* "M40P" */
#define M40_PROTO_VERSION     5u
#define M40_PROTO_VERSION_MIN 2u /* the oldest client version a daemon serves */

/* Limits every implementation of this version honours. */
#define M40_PROTO_MAX_MSG      4096u /* body bytes of one control message */
#define M40_PROTO_TEXT_MAX     96u   /* text bytes carried by one event */
#define M40_PROTO_MAX_STOPS    8u    /* stop strings per request */
#define M40_PROTO_MAX_STOP_LEN 64u   /* bytes of one stop string */
#define M40_PROTO_MAX_MESSAGES 256u  /* chat messages per request */

/* Control messages (struct m40_proto_msg.type). */
enum m40_proto_msg_type {
        M40_PROTO_HELLO = 1,      /* client -> daemon, body struct m40_proto_hello */
        M40_PROTO_WELCOME = 2,    /* daemon -> client, body struct m40_proto_welcome + fds */
        M40_PROTO_STATUS_REQ = 3, /* client -> daemon, empty body */
        M40_PROTO_STATUS = 4,     /* daemon -> client, body struct m40_proto_status */
};

struct m40_proto_msg {
        uint32_t type; /* enum m40_proto_msg_type */
        uint32_t len;  /* body bytes that follow, <= M40_PROTO_MAX_MSG */
};

struct m40_proto_hello {
        uint32_t magic;   /* M40_PROTO_MAGIC */
        uint32_t version; /* M40_PROTO_VERSION */
        uint32_t flags;   /* none defined; 0 */
        uint32_t reserved;
};

struct m40_proto_welcome {
        int32_t status;   /* 0, or a negative code: -EACCES, M40_EVERSION, -EUSERS ... */
        uint32_t version; /* the daemon's protocol version */
        uint32_t client_id;
        uint32_t region_bytes;
        uint32_t sub_entries, sub_off; /* submission ring: entries, byte offset */
        uint32_t ev_entries, ev_off;   /* event ring */
        uint32_t payload_bytes, payload_off;
        uint32_t max_request_bytes; /* largest payload of one submission */
        uint32_t reserved;
};

/* A duration measured once per engine step, over every step since m40d started (version
 * 5 on). Percentiles are the upper bound of a histogram bucket (at most 25% above the
 * value; at most max_ns); all 0 while count is 0. */
struct m40_proto_timing {
        uint64_t count;
        uint64_t sum_ns, max_ns, p50_ns, p99_ns;
};

struct m40_proto_status {
        char model[128];    /* file name of the model */
        char arch[16];      /* "llama" */
        char backend[16];   /* "cpu" */
        char chat_tmpl[24]; /* "chatml" */
        uint32_t clients, active, queued, max_seqs;
        uint32_t kv_pages_used, kv_pages_total, n_ctx, n_vocab;
        uint64_t prompt_tokens, generated_tokens, requests;
        double tokens_per_s;     /* engine decode speed since start */
        uint32_t draining;       /* 1 while shutting down */
        uint32_t kv_page_tokens; /* positions per KV page (version 2: reserved) */
        /* Version 3 on; a version 2 body ends here, M40_PROTO_STATUS_V2_BYTES long. The KV
         * cache holds kv_pages_total * kv_page_tokens positions in kv_pages_total *
         * kv_page_bytes bytes. */
        uint64_t kv_page_bytes; /* memory of one KV page (all layers, K and V) */
        /* Version 4 on (0 for a version 3 client): of the active sequences, those held
         * because their clients do not read their events (backpressure). */
        uint32_t held;
        /* The last engine step that only decoded: the sequences it decoded, of those
         * running (m40d.ini's decode_width at work). 0 and 0 before such a step, and from a
         * daemon older than these fields (they were reserved, 0). */
        uint32_t decode_width;
        uint32_t decode_running;
        uint32_t reserved32;
        uint64_t reserved;
        /* Version 5 on; a version 3 or 4 body ends here, M40_PROTO_STATUS_V4_BYTES long.
         * All CLOCK_MONOTONIC differences on m40d's side, steps that ran on the engine's
         * thread (m40_engine_pump). */
        struct m40_proto_timing step;     /* the engine's thread running the step */
        struct m40_proto_timing gap;      /* a step's end to the next step's start (pump),
                                           * when m40d started it in the round that collected
                                           * the step before: what m40d spends between two
                                           * steps while work waits */
        struct m40_proto_timing wake;     /* a step's end to m40d collecting it (of gap) */
        struct m40_proto_timing handover; /* the start (pump) to the engine's thread taking it */
};

#define M40_PROTO_STATUS_V2_BYTES 256u
#define M40_PROTO_STATUS_V4_BYTES 288u

/* The region starts with this header; the daemon fills in everything before handing the
 * region over. Each control word sits in its own cache line. */
struct m40_proto_ctl {
        uint32_t value;
        uint32_t pad[15];
};

struct m40_proto_region {
        uint32_t magic, version;
        uint32_t reserved[14];
        struct m40_proto_ctl sub_tail;        /* written by the client */
        struct m40_proto_ctl sub_head;        /* written by the daemon */
        struct m40_proto_ctl payload_tail;    /* client: bytes of payload allocated, ever */
        struct m40_proto_ctl payload_head;    /* daemon: bytes of payload released, ever */
        struct m40_proto_ctl daemon_sleeping; /* written by the daemon */
        struct m40_proto_ctl ev_tail;         /* written by the daemon */
        struct m40_proto_ctl ev_head;         /* written by the client */
        struct m40_proto_ctl client_sleeping; /* written by the client */
        struct m40_proto_ctl ev_waiting;      /* written by the daemon (backpressure) */
};

/* Submission entries. */
enum m40_proto_op {
        M40_PROTO_OP_SUBMIT = 1,
        M40_PROTO_OP_CANCEL = 2,
};

/* struct m40_proto_sub.set: which sampling fields the client chose (others: the daemon's
 * defaults from m40d.ini). */
enum {
        M40_PROTO_SET_TEMPERATURE = 1u << 0,
        M40_PROTO_SET_TOP_K = 1u << 1,
        M40_PROTO_SET_TOP_P = 1u << 2,
        M40_PROTO_SET_MIN_P = 1u << 3,
        M40_PROTO_SET_REPEAT_PENALTY = 1u << 4,
        M40_PROTO_SET_SEED = 1u << 5,
        M40_PROTO_SET_PRESENCE_PENALTY = 1u << 6,
        M40_PROTO_SET_FREQUENCY_PENALTY = 1u << 7,
        M40_PROTO_SET_ALL = (1u << 8) - 1,
};

/* struct m40_proto_sub.flags */
enum {
        M40_PROTO_SUB_CHAT = 1u << 0,       /* payload holds chat messages, not a prompt */
        M40_PROTO_SUB_IGNORE_EOS = 1u << 1, /* generate past end-of-generation tokens */
        M40_PROTO_SUB_TOKENS = 1u << 2,     /* add token ids to text events */
        M40_PROTO_SUB_ALL = (1u << 3) - 1,
};

struct m40_proto_sub {
        uint32_t op;          /* enum m40_proto_op */
        uint32_t flags;       /* M40_PROTO_SUB_* */
        uint64_t req;         /* the client's id for the request: unique per connection */
        uint32_t payload_pos; /* payload counter value where the records start */
        uint32_t payload_len; /* bytes of records; <= max_request_bytes */
        uint32_t set;         /* M40_PROTO_SET_* */
        uint32_t max_tokens;  /* 0: the daemon's default */
        float temperature, top_p, min_p, repeat_penalty;
        int32_t top_k;
        uint32_t reserved0;
        uint64_t seed;
        uint64_t t_submit_ns; /* CLOCK_MONOTONIC when submitted (latency figures) */
        float presence_penalty, frequency_penalty;
        uint32_t reserved[4];
};

/* Payload records: a header, then len bytes, then padding to a multiple of 4. */
enum m40_proto_item_kind {
        M40_PROTO_ITEM_PROMPT = 1,    /* raw prompt text (exactly one, without CHAT) */
        M40_PROTO_ITEM_SYSTEM = 2,    /* chat message of the system */
        M40_PROTO_ITEM_USER = 3,      /* chat message of the user */
        M40_PROTO_ITEM_ASSISTANT = 4, /* chat message of the assistant */
        M40_PROTO_ITEM_STOP = 5,      /* a stop string, <= M40_PROTO_MAX_STOP_LEN bytes */
};

struct m40_proto_item {
        uint32_t kind; /* enum m40_proto_item_kind */
        uint32_t len;
};

/* Events. */
enum m40_proto_ev_type {
        M40_PROTO_EV_ADMITTED = 1, /* the request got a sequence; t_ns = admission time */
        M40_PROTO_EV_TEXT = 2,     /* len bytes of UTF-8 text (a request may get many) */
        M40_PROTO_EV_DONE = 3,     /* last event of a request: finish reason and usage */
        M40_PROTO_EV_ERROR = 4,    /* last event of a request: error code, message in text */
};

/* Finish reasons, the engine's numbering. */
enum m40_proto_finish {
        M40_PROTO_FINISH_LENGTH = 1,
        M40_PROTO_FINISH_EOS = 2,
        M40_PROTO_FINISH_STOP = 3,
        M40_PROTO_FINISH_CANCEL = 4,
        M40_PROTO_FINISH_CONTEXT = 5,
        M40_PROTO_FINISH_KV = 6,
};

struct m40_proto_ev {
        uint32_t type; /* enum m40_proto_ev_type */
        uint32_t len;  /* text bytes, <= M40_PROTO_TEXT_MAX */
        uint64_t req;
        int32_t error;   /* ERROR: negative code */
        uint32_t finish; /* DONE: enum m40_proto_finish */
        uint32_t n_prompt, n_generated;
        int32_t token; /* TEXT with M40_PROTO_SUB_TOKENS: the id that ended the text; -1 */
        uint32_t reserved;
        uint64_t t_ns;        /* CLOCK_MONOTONIC: TEXT when the engine produced the token,
                               * ADMITTED when admitted */
        uint64_t t_submit_ns; /* ADMITTED: the submission's t_submit_ns */
        char text[M40_PROTO_TEXT_MAX];
};

static_assert(sizeof(struct m40_proto_msg) == 8, "wire size");
static_assert(sizeof(struct m40_proto_hello) == 16, "wire size");
static_assert(sizeof(struct m40_proto_welcome) == 48, "wire size");
static_assert(sizeof(struct m40_proto_timing) == 40, "wire size");
static_assert(sizeof(struct m40_proto_status) == 448, "wire size");
static_assert(offsetof(struct m40_proto_status, kv_page_bytes) == M40_PROTO_STATUS_V2_BYTES,
              "version 2 prefix");
static_assert(offsetof(struct m40_proto_status, step) == M40_PROTO_STATUS_V4_BYTES,
              "version 4 prefix");
static_assert(sizeof(struct m40_proto_region) == 64 + 9 * 64, "wire size");
static_assert(sizeof(struct m40_proto_sub) == 96, "wire size");
static_assert(sizeof(struct m40_proto_item) == 8, "wire size");
static_assert(sizeof(struct m40_proto_ev) == 152, "wire size");

/* m40_proto_item_size - bytes a record of len bytes occupies (header, text, padding). */
static inline uint32_t m40_proto_item_size(uint32_t len)
{
        return (uint32_t)sizeof(struct m40_proto_item) + ((len + 3u) & ~3u);
}

#endif
