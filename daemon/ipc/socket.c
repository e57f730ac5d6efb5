/* socket.c - the control socket: listening, peer credentials (SO_PEERCRED and
 * SO_PEERGROUPS) and control messages with SCM_RIGHTS descriptors. */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ipc/ipc.h"

int m40_ipc_listen(const char *path, gid_t gid, int *ret_fd)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int fd, r;

        if (strlen(path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        strcpy(sa.sun_path, path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        if (unlink(path) && errno != ENOENT)
                goto fail_errno;
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)))
                goto fail_errno;
        if (chmod(path, 0660))
                goto fail_errno;
        if (gid != (gid_t)-1 && chown(path, (uid_t)-1, gid))
                goto fail_errno;
        if (listen(fd, 128))
                goto fail_errno;
        *ret_fd = fd;
        return 0;
fail_errno:
        r = -errno;
        close(fd);
        return r;
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
        if (uc.uid != 0 && uc.uid != geteuid() &&
            (gid == (gid_t)-1 || (uc.gid != gid && !in_groups(fd, gid))))
                return -EACCES;
        *ret_pid = uc.pid;
        *ret_uid = uc.uid;
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
