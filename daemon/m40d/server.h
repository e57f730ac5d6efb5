/* server.h - m40d's connections: the listening socket, each client's control socket
 * (handshake, STATUS, hang-up), the doorbells, the signal descriptor and the engine's
 * step-finished descriptor (m40_sched_fd), all waited on with one epoll descriptor. A
 * client's data plane belongs to the scheduler. */
#ifndef M40D_SERVER_H
#define M40D_SERVER_H

#include <sys/types.h>

#include "m40/proto.h"
#include "m40d/sched.h"

struct m40d_server;

/* Open files: each connected client takes M40D_FDS_PER_CLIENT (its socket, the region's
 * memfd and two doorbells); the daemon itself keeps under M40D_FDS_BASE (stdio, epoll,
 * signalfd, the listener, a reserve descriptor, the model file, the engine's eventfd, the
 * journal). */
#define M40D_FDS_PER_CLIENT 4u
#define M40D_FDS_BASE       64u

/* m40d_server_new - serves listening socket lfd (taken over) for scheduler s (borrowed);
 * group gid ((gid_t)-1: none) may connect besides root and our user; at most max_clients.
 * model holds the model fields of STATUS replies (copied). Waits for SIGTERM, SIGINT and
 * SIGHUP with a signalfd: the caller blocks them in every thread beforehand. Watches the
 * scheduler's engine descriptor (m40_sched_fd, which starts the engine's thread). Returns 0
 * and it in *ret, or -errno. */
int m40d_server_new(int lfd, gid_t gid, uint32_t max_clients, struct m40_sched *s,
                    const struct m40_proto_status *model, struct m40d_server **ret);
/* m40d_server_free - closes every connection (their requests are cancelled) and the
 * listening socket; accepts NULL; returns NULL. */
struct m40d_server *m40d_server_free(struct m40d_server *srv);

/* m40d_server_wait - waits up to timeout_ms (-1: forever) for activity and handles it:
 * new connections, control messages, hang-ups, protocol violations found by the
 * scheduler; an engine step that has finished only ends the wait (the caller's
 * m40_sched_run collects it). When accepting fails for want of descriptors (EMFILE,
 * ENFILE), the waiting connections are accepted on a reserve descriptor and refused with
 * -EMFILE one by one, so their clients get an answer; when even that fails, accepting
 * pauses for 100 ms rather than spinning. Either is logged once a minute. Returns 0, or
 * the number of a termination signal received (SIGTERM, SIGINT). */
int m40d_server_wait(struct m40d_server *srv, int timeout_ms);

/* m40d_server_close_listener - stop accepting connections (shutdown). */
void m40d_server_close_listener(struct m40d_server *srv);

#endif
