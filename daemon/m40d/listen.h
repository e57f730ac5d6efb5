/* listen.h - m40d's listening socket: which one it is (systemd's, root's in /run/m40d, a
 * user's in $XDG_RUNTIME_DIR), opening it, and the open-file limit that the connected
 * clients take. Program code: these log their errors and decisions once, here. */
#ifndef M40D_LISTEN_H
#define M40D_LISTEN_H

#include <stdbool.h>

#include "ipc/ipc.h"
#include "m40d/config.h"

/* m40d_listen_pick - with no socket from systemd: for root, /run/m40d made when the
 * default socket is used and it is missing; for any other user, no group unless the
 * configuration names one, and, unless it names a socket, c->socket set to
 * $XDG_RUNTIME_DIR/m40d/m40d.sock in a directory of mode 0700 that this user owns.
 * check (--check-config): nothing is made, and a missing $XDG_RUNTIME_DIR is no error
 * (a service's ExecStartPre= check runs as its user, without the socket systemd passes
 * to the daemon itself). Returns 0 or a negative code, logged. */
int m40d_listen_pick(struct m40d_config *c, bool check);

/* m40d_listen_open - the listening socket: the one systemd passes (it must be one
 * listening Unix stream socket; it is made non-blocking), else a new one at c->socket for
 * group gid ((gid_t)-1: none; m40_ipc_listen). Returns 0 with the descriptor in *ret_fd
 * and in *ret_own whether m40d made the socket file, whose identity is then in *ret_id
 * (the caller removes it at exit with m40_ipc_unlisten); or a negative code, logged
 * (another m40d listening there is -EADDRINUSE, named with its pid when known). */
int m40d_listen_open(const struct m40d_config *c, gid_t gid, int *ret_fd,
                     struct m40_ipc_sockid *ret_id, bool *ret_own);

/* m40d_listen_fit_fds - raises the soft RLIMIT_NOFILE to what c->max_clients connected
 * clients take (M40D_FDS_BASE + M40D_FDS_PER_CLIENT each, m40d/server.h), up to the hard
 * limit; when the hard limit is lower, lowers c->max_clients to what fits and says so.
 * Returns 0, or -EMFILE (logged) when not even one client fits. */
int m40d_listen_fit_fds(struct m40d_config *c);

#endif
