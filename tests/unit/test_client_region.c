/* test_client_region.c - issue 20 item 8: libm40 must not trust the region a daemon hands
 * over. A fake server (a Unix socket and a memfd, no m40d) answers HELLO with a WELCOME
 * whose layout is valid but whose region_bytes exceeds what its memfd holds, or whose memfd
 * is not sealed against shrinking (the server could truncate it later), or which is not a
 * memfd at all. m40_client_connect must refuse each with M40_EPROTO instead of mapping it,
 * so a later submit cannot die of SIGBUS; a well-formed region (sealed, large enough) is
 * still accepted. Each client runs in a child process so a SIGBUS shows as a failure
 * rather than killing the test. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "m40/m40.h"
#include "m40/proto.h"

#define ANNOUNCED (1u << 20) /* region_bytes in the WELCOME */

enum fake { FAKE_SHORT, FAKE_UNSEALED, FAKE_NOT_MEMFD, FAKE_GOOD };

static const char *const fake_names[] = {"short memfd", "unsealed memfd", "not a memfd",
                                         "well-formed"};

struct server {
        int lfd;
        enum fake kind;
        char dir[64];
};

/* region_fd - the descriptor the fake server passes as the region. */
static int region_fd(enum fake kind, const char *dir)
{
        int fd;

        if (kind == FAKE_NOT_MEMFD) {
                char path[128];

                snprintf(path, sizeof(path), "%s/file", dir);
                fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
                if (fd >= 0 && ftruncate(fd, ANNOUNCED)) {
                        close(fd);
                        return -1;
                }
                return fd;
        }
        fd = memfd_create("fake", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0 || ftruncate(fd, kind == FAKE_SHORT ? 4096 : ANNOUNCED))
                return -1;
        if (kind != FAKE_UNSEALED &&
            fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL))
                return -1;
        return fd;
}

/* serve - accepts one client, reads its HELLO, answers WELCOME with the fake region, then
 * waits for the client to hang up. */
static void *serve(void *arg)
{
        struct server *s = arg;
        struct {
                struct m40_proto_msg m;
                struct m40_proto_hello h;
        } hello;
        struct {
                struct m40_proto_msg m;
                struct m40_proto_welcome w;
        } out = {{M40_PROTO_WELCOME, sizeof(struct m40_proto_welcome)}, {0}};
        union {
                char b[CMSG_SPACE(3 * sizeof(int))];
                struct cmsghdr a;
        } ctl;
        struct iovec iov = {&out, sizeof(out)};
        struct msghdr mh = {.msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = ctl.b,
                            .msg_controllen = sizeof(ctl.b)};
        struct cmsghdr *cm;
        int fds[3], c = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
        char sink[64];

        if (c < 0 || recv(c, &hello, sizeof(hello), MSG_WAITALL) != sizeof(hello))
                return NULL;
        fds[0] = region_fd(s->kind, s->dir);
        fds[1] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        fds[2] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        out.w.version = M40_PROTO_VERSION;
        out.w.region_bytes = ANNOUNCED;
        out.w.sub_entries = 16;
        out.w.sub_off = sizeof(struct m40_proto_region);
        out.w.ev_entries = 16;
        out.w.ev_off = 8192;
        out.w.payload_off = 16384;
        out.w.payload_bytes = 65536;
        out.w.max_request_bytes = 32768;
        cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(fds));
        memcpy(CMSG_DATA(cm), fds, sizeof(fds));
        if (sendmsg(c, &mh, MSG_NOSIGNAL) != sizeof(out))
                perror("fake server: sendmsg");
        for (int i = 0; i < 3; i++)
                close(fds[i]);
        while (read(c, sink, sizeof(sink)) > 0) {
        }
        close(c);
        return NULL;
}

/* client - connects and, when that works, submits a prompt (which writes the payload area,
 * past a short memfd). Exits 0 when connect returned want, 1 otherwise. */
static void client(const char *sock, int want)
{
        struct m40_client *c;
        struct m40_request rq;
        uint64_t id;
        int r = m40_client_connect(sock, &c);

        if (r != want) {
                fprintf(stderr, "  connect: %d (%s), want %d (%s)\n", r, m40_strerror(r), want,
                        m40_strerror(want));
                if (r)
                        _exit(1);
        }
        if (!r) {
                m40_request_init(&rq);
                rq.prompt = "Once upon a time";
                r = m40_client_submit(c, &rq, &id);
                m40_client_disconnect(c);
                if (r) {
                        fprintf(stderr, "  submit: %s\n", m40_strerror(r));
                        _exit(1);
                }
        }
        _exit(r == want ? 0 : 1);
}

static int run_case(enum fake kind, int want)
{
        struct server s = {.kind = kind};
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        pthread_t th;
        pid_t pid;
        int status;

        snprintf(s.dir, sizeof(s.dir), "/tmp/m40-fake.XXXXXX");
        if (!mkdtemp(s.dir))
                return 1;
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/sock", s.dir);
        s.lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s.lfd < 0 || bind(s.lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(s.lfd, 4)) {
                perror("fake server");
                return 1;
        }
        pthread_create(&th, NULL, serve, &s);
        pid = fork();
        if (pid == 0)
                client(sa.sun_path, want);
        waitpid(pid, &status, 0);
        pthread_join(th, NULL);
        close(s.lfd);
        unlink(sa.sun_path);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/file", s.dir);
        unlink(sa.sun_path);
        rmdir(s.dir);
        if (WIFSIGNALED(status)) {
                fprintf(stderr, "%s: the client died of signal %d (%s)\n", fake_names[kind],
                        WTERMSIG(status), strsignal(WTERMSIG(status)));
                return 1;
        }
        if (WEXITSTATUS(status)) {
                fprintf(stderr, "%s: the client exited %d\n", fake_names[kind],
                        WEXITSTATUS(status));
                return 1;
        }
        printf("%s: %s\n", fake_names[kind], want ? "refused" : "accepted");
        return 0;
}

int main(void)
{
        int bad = 0;

        bad |= run_case(FAKE_SHORT, M40_EPROTO);
        bad |= run_case(FAKE_UNSEALED, M40_EPROTO);
        bad |= run_case(FAKE_NOT_MEMFD, M40_EPROTO);
        bad |= run_case(FAKE_GOOD, 0);
        return bad;
}
