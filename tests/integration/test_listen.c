/* test_listen.c - issue 20 items 5 and 7 at the level of m40_ipc_listen(): the socket
 * file's mode and group are set where no symlink can redirect them (a thread keeps
 * swapping a symlink to a 0600 file in at the socket's path while the socket is made,
 * again and again: that file must stay 0600), a live socket is never replaced (-EADDRINUSE
 * with the listener's pid), a stale one is, anything that is not a socket is left alone
 * (-ENOTSOCK), and m40_ipc_unlisten() removes only the file it made.
 *
 *   test_listen */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ipc/ipc.h"
#include "itest.h" /* CHECK */

#define RACE_ROUNDS 400

static char dir[64], sock[128], victim[128], link_tmp[128];
static atomic_int stop; /* main tells swapper() to end */

/* Swaps a symlink to the victim in at the socket path, over and over. */
static void *swapper(void *arg)
{
        (void)arg;
        while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
                unlink(link_tmp);
                if (!symlink(victim, link_tmp))
                        rename(link_tmp, sock);
        }
        return NULL;
}

static mode_t mode_of(const char *path)
{
        struct stat st;

        return stat(path, &st) ? (mode_t)-1 : st.st_mode & 07777;
}

/* A socket file at sock that nobody listens on. */
static int make_stale(void)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);

        snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", sock);
        if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)))
                return -1;
        close(fd);
        return 0;
}

int main(void)
{
        struct m40_ipc_sockid id, id2;
        pthread_t th;
        struct stat st;
        int fd, fd2, r, made = 0;

        snprintf(dir, sizeof(dir), "/tmp/m40-listen.XXXXXX");
        CHECK(mkdtemp(dir));
        snprintf(sock, sizeof(sock), "%s/m40d.sock", dir);
        snprintf(victim, sizeof(victim), "%s/secret", dir);
        snprintf(link_tmp, sizeof(link_tmp), "%s/link", dir);
        fd = open(victim, O_WRONLY | O_CREAT | O_EXCL, 0600);
        CHECK(fd >= 0);
        close(fd);
        CHECK(!chmod(victim, 0600));

        /* the race: whatever happens to the path, the victim keeps its mode */
        CHECK(!pthread_create(&th, NULL, swapper, NULL));
        for (int i = 0; i < RACE_ROUNDS && mode_of(victim) == 0600; i++) {
                memset(&id, 0, sizeof(id));
                r = m40_ipc_listen(sock, getegid(), &fd, &id);
                if (!r) {
                        made++;
                        close(fd);
                }
        }
        atomic_store_explicit(&stop, 1, memory_order_relaxed);
        pthread_join(th, NULL);
        printf("race: %d of %d sockets made; the 0600 file is now %04o\n", made, RACE_ROUNDS,
               (unsigned)mode_of(victim));
        CHECK(mode_of(victim) == 0600);
        unlink(sock);
        unlink(link_tmp);

        /* a fresh socket: mode 0660, our group, identity recorded */
        CHECK(!m40_ipc_listen(sock, getegid(), &fd, &id));
        CHECK(!lstat(sock, &st));
        CHECK(S_ISSOCK(st.st_mode) && (st.st_mode & 07777) == 0660);
        CHECK(st.st_gid == getegid() && st.st_ino == id.ino && st.st_dev == id.dev);

        /* a live socket is not replaced; its listener is named */
        memset(&id2, 0, sizeof(id2));
        r = m40_ipc_listen(sock, (gid_t)-1, &fd2, &id2);
        CHECK(r == -EADDRINUSE);
        CHECK(id2.pid == getpid());
        CHECK(!lstat(sock, &st) && st.st_ino == id.ino);

        /* our file is removed at exit; a successor's is not */
        close(fd);
        CHECK(!m40_ipc_unlisten(sock, &id));
        CHECK(lstat(sock, &st) && errno == ENOENT);
        CHECK(!make_stale());
        CHECK(m40_ipc_unlisten(sock, &id) == -ESTALE);
        CHECK(!lstat(sock, &st));

        /* a stale socket is replaced */
        CHECK(!m40_ipc_listen(sock, (gid_t)-1, &fd, &id));
        CHECK(!lstat(sock, &st) && st.st_ino == id.ino);
        close(fd);
        CHECK(!m40_ipc_unlisten(sock, &id));

        /* a regular file and a symlink are left alone */
        fd = open(sock, O_WRONLY | O_CREAT | O_EXCL, 0644);
        CHECK(fd >= 0);
        close(fd);
        CHECK(m40_ipc_listen(sock, (gid_t)-1, &fd, &id) == -ENOTSOCK);
        CHECK(!lstat(sock, &st) && S_ISREG(st.st_mode));
        unlink(sock);
        CHECK(!symlink(victim, sock));
        CHECK(m40_ipc_listen(sock, (gid_t)-1, &fd, &id) == -ENOTSOCK);
        CHECK(!lstat(sock, &st) && S_ISLNK(st.st_mode));
        CHECK(mode_of(victim) == 0600);
        unlink(sock);

        /* no leftovers of the private directories */
        unlink(victim);
        CHECK(!rmdir(dir));
        return 0;
}
