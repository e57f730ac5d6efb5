/* test_shutdown.c - acceptance 5 of issue 5: SIGTERM with requests in flight. Every
 * request must end with all its tokens (DONE) or an explicit "shutting down" ERROR; m40d
 * must exit 0; a notify socket standing in for systemd must receive READY=1, STATUS=...
 * and STOPPING=1.
 *
 *   test_shutdown M40D MODEL.gguf */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "itest.h"

#define N_REQ 6

static bool ready, status, stopping;

static void read_notify(int fd)
{
        char buf[4096];
        ssize_t k;

        while ((k = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT)) > 0) {
                buf[k] = 0;
                for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
                        ready |= !strcmp(line, "READY=1");
                        status |= !strncmp(line, "STATUS=", 7);
                        stopping |= !strcmp(line, "STOPPING=1");
                }
        }
}

int main(int argc, char **argv)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct itest_daemon d;
        struct m40_client *c;
        uint64_t id[N_REQ];
        uint32_t max[N_REQ] = {8, 2000, 16, 2000, 4, 2000};
        int fd, ended = 0, done = 0, errors = 0, texts = 0, rc;
        char path[64];

        if (argc < 3)
                return 2;
        snprintf(path, sizeof(path), "/tmp/m40-notify.%d", (int)getpid());
        strcpy(sa.sun_path, path);
        fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        unlink(path);
        CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
        if (itest_daemon_start(&d, argv[1], argv[2],
                               "shutdown_timeout = 1\n[engine]\nthreads = 2\n", path))
                return 1;
        read_notify(fd);
        CHECK(ready && status);
        CHECK(m40_client_connect(d.sock, &c) == 0);
        for (int i = 0; i < N_REQ; i++) {
                struct m40_request rq;

                m40_request_init(&rq);
                rq.prompt = itest_prompts[i];
                rq.max_tokens = max[i];
                rq.flags = M40_REQUEST_IGNORE_EOS;
                CHECK(m40_client_submit(c, &rq, &id[i]) == 0);
        }
        /* wait until text flows, then stop the daemon */
        while (texts < 20) {
                struct m40_reply ev;

                CHECK(m40_client_next(c, 10000, &ev) == 0);
                texts += ev.type == M40_EVENT_TEXT;
                CHECK(ev.type != M40_EVENT_ERROR);
                if (ev.type == M40_EVENT_DONE) {
                        CHECK(ev.n_generated == max[ev.id - id[0]]);
                        done++;
                        ended++;
                }
        }
        CHECK(kill(d.pid, SIGTERM) == 0);
        while (ended < N_REQ) {
                struct m40_reply ev;

                CHECK(m40_client_next(c, 10000, &ev) == 0);
                if (ev.type == M40_EVENT_DONE) {
                        CHECK(ev.n_generated == max[ev.id - id[0]]); /* all its tokens */
                        done++;
                        ended++;
                } else if (ev.type == M40_EVENT_ERROR) {
                        CHECK(ev.error == M40_ESHUTDOWN);
                        CHECK(strstr(ev.text, "shutting down") != NULL);
                        errors++;
                        ended++;
                }
        }
        m40_client_disconnect(c);
        rc = itest_daemon_stop(&d); /* already exiting: collects its status */
        CHECK(rc == 0);
        read_notify(fd);
        CHECK(stopping);
        close(fd);
        unlink(path);
        printf("ok: %d requests completed, %d ended with 'shutting down'; m40d exit 0; "
               "READY=1, STATUS=, STOPPING=1 received\n",
               done, errors);
        return 0;
}
