/* socket.c - the control socket: listening (one daemon per socket path, the file set up
 * where nobody can swap it), peer credentials (SO_PEERCRED and SO_PEERGROUPS) and control
 * messages with SCM_RIGHTS descriptors. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ipc/ipc.h"

/* probe - whether something listens at path: 1 (its pid in *ret_pid when SO_PEERCRED
 * tells, else 0), 0 when path does not exist, -ENOTSOCK when it is not a socket file (a
 * symlink included: never replaced), -ECONNREFUSED for a socket file nobody listens on
 * (stale), or -errno. */
static int probe(const char *path, const struct sockaddr_un *sa, pid_t *ret_pid)
{
        struct stat st;
        struct ucred uc;
        socklen_t len = sizeof(uc);
        int fd, r;

        *ret_pid = 0;
        if (lstat(path, &st))
                return errno == ENOENT ? 0 : -errno;
        if (!S_ISSOCK(st.st_mode))
                return -ENOTSOCK;
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        /* a listener with a full backlog answers EAGAIN: it is alive all the same */
        if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0 || errno == EAGAIN) {
                if (!getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len))
                        *ret_pid = uc.pid;
                r = 1;
        } else {
                r = errno == ECONNREFUSED ? -ECONNREFUSED : -errno;
        }
        close(fd);
        return r;
}

/* bind_private - binds fd to "s" in a fresh directory beside path that only we can write,
 * and sets the file's mode and group there, where nobody can swap it for a symlink; the
 * directory's name goes into tmp (of PATH_MAX) and the file's identity into *id. */
static int bind_private(int fd, const char *path, gid_t gid, char *tmp, struct m40_ipc_sockid *id)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        const char *slash = strrchr(path, '/');
        struct stat st;
        int dfd, r = 0;

        if (slash)
                snprintf(tmp, PATH_MAX, "%.*s/.m40d.XXXXXX", (int)(slash - path), path);
        else
                snprintf(tmp, PATH_MAX, ".m40d.XXXXXX");
        if (!mkdtemp(tmp))
                return -errno;
        if ((size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/s", tmp) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        dfd = open(tmp, O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (dfd < 0)
                return -errno;
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
            fchmodat(dfd, "s", 0660, 0) || /* in our own directory: no symlink there */
            (gid != (gid_t)-1 && fchownat(dfd, "s", (uid_t)-1, gid, AT_SYMLINK_NOFOLLOW)) ||
            fstatat(dfd, "s", &st, AT_SYMLINK_NOFOLLOW))
                r = -errno;
        if (!r) {
                id->dev = st.st_dev;
                id->ino = st.st_ino;
        }
        close(dfd);
        return r;
}

int m40_ipc_listen(const char *path, gid_t gid, int *ret_fd, struct m40_ipc_sockid *ret_id)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct m40_ipc_sockid id = {0};
        char tmp[PATH_MAX], sock[PATH_MAX + 2];
        int fd, r;

        if (strlen(path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        strcpy(sa.sun_path, path);
        r = probe(path, &sa, &ret_id->pid);
        if (r == 1)
                return -EADDRINUSE;
        if (r < 0 && r != -ECONNREFUSED)
                return r;
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        tmp[0] = 0;
        r = bind_private(fd, path, gid, tmp, &id);
        if (!r && listen(fd, 128))
                r = -errno;
        snprintf(sock, sizeof(sock), "%s/s", tmp);
        /* Into place without replacing anything but a stale socket file: a second daemon
         * that got here meanwhile makes us find its socket again. */
        for (int i = 0; !r; i++) {
                if (!renameat2(AT_FDCWD, sock, AT_FDCWD, path, RENAME_NOREPLACE))
                        break;
                r = -errno;
                if (r != -EEXIST || i == 3)
                        break;
                r = probe(path, &sa, &ret_id->pid);
                if (r == 1)
                        r = -EADDRINUSE;
                else if (r == -ECONNREFUSED)
                        r = unlink(path) && errno != ENOENT ? -errno : 0;
                else if (r == 0)
                        r = 0; /* gone meanwhile: try again */
        }
        if (tmp[0]) {
                unlink(sock); /* still there only on failure */
                rmdir(tmp);
        }
        if (r) {
                close(fd);
                return r;
        }
        *ret_fd = fd;
        ret_id->dev = id.dev;
        ret_id->ino = id.ino;
        return 0;
}

int m40_ipc_unlisten(const char *path, const struct m40_ipc_sockid *id)
{
        struct stat st;

        if (lstat(path, &st))
                return -errno;
        if (!S_ISSOCK(st.st_mode) || st.st_dev != id->dev || st.st_ino != id->ino)
                return -ESTALE;
        return unlink(path) ? -errno : 0;
}

static bool in_groups(int fd, gid_t gid)
{
        gid_t groups[256];
        socklen_t len = sizeof(groups);

        if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len))
                return false; /* ERANGE for more than 256 groups: the primary one still counts */
        for (size_t i = 0; i < len / sizeof(gid_t); i++)
                if (groups[i] == gid)
                        return true;
        return false;
}

int m40_ipc_peer_check(int fd, gid_t gid, pid_t *ret_pid, uid_t *ret_uid)
{
        struct ucred uc;
        socklen_t len = sizeof(uc);

        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len))
                return -errno;
        *ret_pid = uc.pid; /* also for a refusal: the caller names whom it refused */
        *ret_uid = uc.uid;
        if (uc.uid != 0 && uc.uid != geteuid() &&
            (gid == (gid_t)-1 || (uc.gid != gid && !in_groups(fd, gid))))
                return -EACCES;
        return 0;
}

int m40_ipc_send(int fd, uint32_t type, const void *body, uint32_t len, const int *fds, int nfds)
{
        struct m40_proto_msg m = {.type = type, .len = len};
        struct iovec iov[2] = {{.iov_base = &m, .iov_len = sizeof(m)},
                               {.iov_base = (void *)body, .iov_len = len}};
        union {
                char b[CMSG_SPACE(3 * sizeof(int))];
                struct cmsghdr align;
        } ctl;
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
        ssize_t k;

        if (nfds < 0 || nfds > 3)
                return -EINVAL;
        if (nfds) {
                struct cmsghdr *cm;

                memset(&ctl, 0, sizeof(ctl));
                mh.msg_control = ctl.b;
                mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
                cm = CMSG_FIRSTHDR(&mh);
                cm->cmsg_level = SOL_SOCKET;
                cm->cmsg_type = SCM_RIGHTS;
                cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
                memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
        }
        do
                k = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        while (k < 0 && errno == EINTR);
        if (k < 0)
                return -errno;
        if ((size_t)k != sizeof(m) + len)
                return -EAGAIN; /* a partial control message: the caller drops the client */
        return 0;
}
