/* test_refusal.c - issue 20 item 6: a refused client learns why. A daemon that refuses a
 * client (too many clients, wrong user) answers WELCOME with a negative status and closes,
 * often before the client has sent its HELLO; libm40 must then still read that WELCOME
 * rather than report the failed send ("Broken pipe"). Checked against a fake server that
 * refuses at once with -EACCES without reading anything (the tightest race), and against
 * a real m40d with max_clients = 1 and one client connected (-EUSERS).
 *
 *   test_refusal M40D MODEL.gguf */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "itest.h"
#include "m40/proto.h"

#define TRIES 400

struct fake {
        int lfd;
        int n;
};

/* refuse_all - accepts n clients, answering each a refusal (-EACCES) and closing at once,
 * without reading its HELLO. */
static void *refuse_all(void *arg)
{
        struct fake *f = arg;
        struct {
                struct m40_proto_msg m;
                struct m40_proto_welcome w;
        } out = {{M40_PROTO_WELCOME, sizeof(struct m40_proto_welcome)},
                 {.status = -EACCES, .version = M40_PROTO_VERSION}};

        for (int i = 0; i < f->n; i++) {
                int c = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);

                if (c < 0)
                        break;
                if (send(c, &out, sizeof(out), MSG_NOSIGNAL) != sizeof(out))
                        perror("fake server: send");
                close(c);
        }
        return NULL;
}

/* tally - connects TRIES times to sock; returns how many results were not want. */
static int tally(const char *what, const char *sock, int want)
{
        int other = 0, n_epipe = 0, first = 0;

        for (int i = 0; i < TRIES; i++) {
                struct m40_client *c;
                int r = m40_client_connect(sock, &c);

                if (!r)
                        m40_client_disconnect(c);
                if (r == want)
                        continue;
                n_epipe += r == -EPIPE;
                if (!other++)
                        first = r;
        }
        printf("%s: %d of %d refusals reported as something else (%d as EPIPE)\n", what, other,
               TRIES, n_epipe);
        if (other)
                fprintf(stderr, "%s: first wrong result: %s, want %s\n", what, m40_strerror(first),
                        m40_strerror(want));
        return other;
}

static int fake_server(void)
{
        struct fake f = {.n = TRIES};
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        char dir[] = "/tmp/m40-fake.XXXXXX";
        pthread_t th;
        int bad;

        if (!mkdtemp(dir))
                return 1;
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/sock", dir);
        f.lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        CHECK(f.lfd >= 0 && !bind(f.lfd, (struct sockaddr *)&sa, sizeof(sa)) && !listen(f.lfd, 64));
        pthread_create(&th, NULL, refuse_all, &f);
        bad = tally("fake server, EACCES", sa.sun_path, -EACCES);
        shutdown(f.lfd, SHUT_RDWR);
        pthread_join(th, NULL);
        close(f.lfd);
        unlink(sa.sun_path);
        rmdir(dir);
        return bad != 0;
}

int main(int argc, char **argv)
{
        struct itest_daemon d;
        struct m40_client *holder;
        int bad;

        if (argc != 3)
                return 2;
        bad = fake_server();
        if (access(argv[2], R_OK))
                return bad ? 1 : ITEST_SKIP;
        if (itest_daemon_start(&d, argv[1], argv[2], "max_clients = 1", NULL))
                return 1;
        CHECK(m40_client_connect(d.sock, &holder) == 0);
        bad |= tally("m40d, max_clients = 1", d.sock, -EUSERS) != 0;
        m40_client_disconnect(holder);
        CHECK(itest_daemon_stop(&d) == 0);
        return bad;
}
