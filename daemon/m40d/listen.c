/* listen.c - m40d's listening socket: picking its path (systemd's socket, root's default
 * in /run/m40d, a user's private $XDG_RUNTIME_DIR/m40d), opening it, and fitting the
 * open-file limit to the clients it serves (listen.h). */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "m40/paths.h"
#include "m40d/listen.h"
#include "m40d/log.h"
#include "m40d/server.h"

int m40d_listen_pick(struct m40d_config *c, bool check)
{
        char dir[sizeof(c->socket)];
        struct stat st;
        int r;

        if (sd_listen_fds(0) > 0)
                return 0;
        if (geteuid() == 0) { /* the service's socket; its directory when systemd made none */
                if (!check && !c->socket_set && mkdir("/run/m40d", 0755) && errno != EEXIST)
                        return m40d_log_errno(-errno, "cannot make /run/m40d");
                return 0;
        }
        if (!c->group_set)
                c->group[0] = 0;
        if (c->socket_set)
                return 0;
        r = m40_user_socket_dir(dir, sizeof(dir));
        r = r ? r : m40_user_socket(c->socket, sizeof(c->socket));
        if (check && (r == -ENOENT || !r))
                return 0;
        if (r == -ENOENT)
                return m40d_log_errno(r, "not root and $XDG_RUNTIME_DIR is not set: name a "
                                         "socket ([server] socket in m40d.ini, -c FILE)");
        if (r)
                return m40d_log_errno(r, "$XDG_RUNTIME_DIR is too long for a socket path");
        if (mkdir(dir, 0700) && errno != EEXIST)
                return m40d_log_errno(-errno, "cannot make %s", dir);
        if (lstat(dir, &st))
                return m40d_log_errno(-errno, "%s", dir);
        if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid())
                return m40d_log_errno(-EPERM, "%s is not a directory of this user", dir);
        if ((st.st_mode & 077) && chmod(dir, 0700))
                return m40d_log_errno(-errno, "cannot make %s private (mode 0700)", dir);
        return 0;
}

int m40d_listen_open(const struct m40d_config *c, gid_t gid, int *ret_fd,
                     struct m40_ipc_sockid *ret_id, bool *ret_own)
{
        struct m40_ipc_sockid id = {0};
        int n = sd_listen_fds(1), r, fd;

        if (n > 1)
                return m40d_log_errno(-EINVAL, "socket activation passed %d sockets, want 1", n);
        if (n == 1) {
                if (sd_is_socket_unix(SD_LISTEN_FDS_START, SOCK_STREAM, 1, NULL, 0) <= 0)
                        return m40d_log_errno(-EINVAL, "the activated socket is not a "
                                                       "listening Unix stream socket");
                /* the loop accepts until EAGAIN: the passed socket must not block */
                r = fcntl(SD_LISTEN_FDS_START, F_GETFL);
                if (r < 0 || fcntl(SD_LISTEN_FDS_START, F_SETFL, r | O_NONBLOCK) < 0)
                        return m40d_log_errno(-errno, "cannot make the activated socket "
                                                      "non-blocking");
                m40d_log(LOG_INFO, "listening on the socket systemd passed");
                *ret_fd = SD_LISTEN_FDS_START;
                *ret_own = false;
                return 0;
        }
        r = m40_ipc_listen(c->socket, gid, &fd, &id);
        if (r == -EADDRINUSE && id.pid)
                return m40d_log_errno(r, "%s: m40d is already running (pid %d)", c->socket,
                                      (int)id.pid);
        if (r == -EADDRINUSE)
                return m40d_log_errno(r, "%s: m40d is already running", c->socket);
        if (r == -ENOTSOCK)
                return m40d_log_errno(r, "%s exists and is not a socket: not replacing it",
                                      c->socket);
        if (r)
                return m40d_log_errno(r, "cannot listen on %s", c->socket);
        m40d_log(LOG_INFO, "listening on %s", c->socket);
        *ret_fd = fd;
        *ret_id = id;
        *ret_own = true;
        return 0;
}

int m40d_listen_fit_fds(struct m40d_config *c)
{
        const rlim_t want = M40D_FDS_BASE + (rlim_t)M40D_FDS_PER_CLIENT * c->max_clients;
        struct rlimit rl;
        rlim_t fit;

        if (getrlimit(RLIMIT_NOFILE, &rl))
                return m40d_log_errno(-errno, "cannot read RLIMIT_NOFILE");
        if (rl.rlim_cur >= want)
                return 0;
        fit = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
        if (fit > rl.rlim_cur) {
                struct rlimit nl = {.rlim_cur = fit, .rlim_max = rl.rlim_max};

                if (setrlimit(RLIMIT_NOFILE, &nl))
                        m40d_log(LOG_WARNING,
                                 "cannot raise the open file limit from %llu to %llu: %s",
                                 (unsigned long long)rl.rlim_cur, (unsigned long long)fit,
                                 strerror(errno));
                else
                        rl.rlim_cur = fit;
        }
        if (rl.rlim_cur >= want)
                return 0;
        if (rl.rlim_cur < M40D_FDS_BASE + M40D_FDS_PER_CLIENT)
                return m40d_log_errno(-EMFILE,
                                      "the open file limit of %llu leaves no room for a client "
                                      "(raise LimitNOFILE= in m40d.service)",
                                      (unsigned long long)rl.rlim_cur);
        fit = (rl.rlim_cur - M40D_FDS_BASE) / M40D_FDS_PER_CLIENT;
        m40d_log(LOG_WARNING,
                 "[server] max_clients = %u needs %llu open files, the limit is %llu (hard %llu): "
                 "serving at most %llu clients (raise LimitNOFILE= in m40d.service)",
                 c->max_clients, (unsigned long long)want, (unsigned long long)rl.rlim_cur,
                 (unsigned long long)rl.rlim_max, (unsigned long long)fit);
        c->max_clients = (uint32_t)fit;
        return 0;
}
