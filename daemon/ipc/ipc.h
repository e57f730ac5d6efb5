/* ipc.h - the daemon's end of the client protocol (m40/proto.h): the listening socket,
 * peer-credential checks, control messages with descriptor passing, and one shared region
 * per client with its rings and doorbells.
 *
 * Everything a client writes into its region is hostile: m40_ipc_region_pop() copies an
 * entry and its payload out before checking them and never reads them twice; every ring
 * index the client publishes is checked against the ring size. A check that fails returns
 * M40_EPROTO, after which the caller disconnects that client. Nothing here logs. */
#ifndef M40_IPC_IPC_H
#define M40_IPC_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "m40/proto.h"

/* Limits of the region layout (the sizes come from m40d.ini). */
#define M40_IPC_MAX_REQUEST_BYTES (16u << 20)
#define M40_IPC_MAX_ENTRIES       4096u

struct m40_ipc_region {
        int memfd;    /* the sealed memfd the client maps */
        int bell_in;  /* eventfd the client rings (client -> daemon) */
        int bell_out; /* eventfd the daemon rings (daemon -> client) */
        struct m40_proto_region *r;
        size_t bytes;
        struct m40_proto_sub *sub;
        struct m40_proto_ev *ev;
        uint8_t *payload;
        struct m40_proto_welcome layout; /* what WELCOME tells the client */
        /* the daemon's private copies of the indexes it writes: never read back */
        uint32_t sub_head, payload_head, ev_tail;
};

/* m40_ipc_region_init - creates a region in *g for one client: sub_entries and
 * ev_entries (powers of two, <= M40_IPC_MAX_ENTRIES) and a payload area that holds two
 * requests of max_request_bytes (<= M40_IPC_MAX_REQUEST_BYTES). The memfd is sealed
 * against growing and shrinking, so a client cannot make the daemon's mapping fault.
 * Returns 0, -EINVAL for bad sizes, or -errno; on failure *g holds nothing to free. */
int m40_ipc_region_init(struct m40_ipc_region *g, uint32_t sub_entries, uint32_t ev_entries,
                        uint32_t max_request_bytes);

/* m40_ipc_region_done - unmaps and closes what init made; safe on a done g or after a failed init.
 */
void m40_ipc_region_done(struct m40_ipc_region *g);

/* m40_ipc_region_pop - takes the next submission: copies the entry into *ret and its
 * payload (validated against the area and max_request_bytes) into buf (of at least
 * max_request_bytes), and releases both to the client. Returns 1 with an entry, 0 when the
 * ring is empty, M40_EPROTO when the client published an impossible tail or an entry whose
 * payload lies outside the area or exceeds the limit (the entry is consumed; *ret holds it
 * so the caller can name the request). */
int m40_ipc_region_pop(struct m40_ipc_region *g, struct m40_proto_sub *ret, uint8_t *buf);

/* m40_ipc_region_pending - whether the client has published submissions not yet popped
 * (a cheap look; pop validates). */
bool m40_ipc_region_pending(const struct m40_ipc_region *g);

/* m40_ipc_region_space - free slots in the event ring, or M40_EPROTO when the client
 * published an impossible head. */
int m40_ipc_region_space(struct m40_ipc_region *g);

/* m40_ipc_region_push - appends *e to the event ring (check space first). */
void m40_ipc_region_push(struct m40_ipc_region *g, const struct m40_proto_ev *e);

/* m40_ipc_region_wake - rings the client's doorbell if it sleeps; call after pushing. */
void m40_ipc_region_wake(struct m40_ipc_region *g);

/* m40_ipc_region_sleep - raises (true) or lowers the daemon's sleeping flag; after
 * raising, a full fence orders it before the caller's last look at the rings. */
void m40_ipc_region_sleep(struct m40_ipc_region *g, bool sleeping);

/* The socket file m40_ipc_listen() made (to remove only that one at exit), or the pid of
 * the process that already listens at the path. */
struct m40_ipc_sockid {
        dev_t dev;
        ino_t ino;
        pid_t pid; /* with -EADDRINUSE: the listener's pid, 0 when unknown */
};

/* m40_ipc_listen - a listening Unix stream socket at path, mode 0660, group gid when gid
 * != (gid_t)-1. The file is bound, chmod'ed and chown'ed in a private directory beside path
 * and then renamed into place, so no path operation can be redirected by a symlink. A
 * socket file nobody listens on (stale) is replaced; a live one is not: -EADDRINUSE with
 * the listener's pid in ret_id->pid; anything else at path (a symlink, a regular file):
 * -ENOTSOCK. Returns 0 with the fd in *ret_fd and the file's identity in *ret_id, or
 * -errno (-ENAMETOOLONG for a long path). */
int m40_ipc_listen(const char *path, gid_t gid, int *ret_fd, struct m40_ipc_sockid *ret_id);

/* m40_ipc_unlisten - removes the socket file at path if it still is the one id names (a
 * successor's socket stays). Returns 0, -ESTALE when it is another file, or -errno. */
int m40_ipc_unlisten(const char *path, const struct m40_ipc_sockid *id);

/* m40_ipc_peer_check - reads the peer's credentials of connected socket fd and decides:
 * root, the daemon's own user, and members (primary or supplementary) of gid when gid !=
 * (gid_t)-1 may connect. Returns 0 and the credentials, -EACCES with the credentials too
 * (so that the refusal can name the peer), or -errno with nothing set. */
int m40_ipc_peer_check(int fd, gid_t gid, pid_t *ret_pid, uid_t *ret_uid);

/* m40_ipc_hello_decode - decodes the first len bytes a client sent: a struct m40_proto_msg
 * header and the struct m40_proto_hello body. Returns 0 with the client's protocol version
 * in *ret_version; M40_EVERSION, with *ret_version set too, for a version outside
 * M40_PROTO_VERSION_MIN..M40_PROTO_VERSION; M40_EPROTO for anything that is not a HELLO
 * (wrong length, type, body length or magic). Reads only buf. */
int m40_ipc_hello_decode(const void *buf, size_t len, uint32_t *ret_version);

/* m40_ipc_send - sends one control message with len bytes of body and, when nfds > 0,
 * descriptors fds in SCM_RIGHTS, without blocking. Returns 0, -EAGAIN when the socket
 * buffer is full (the caller drops the client), or -errno. */
int m40_ipc_send(int fd, uint32_t type, const void *body, uint32_t len, const int *fds, int nfds);

#endif
