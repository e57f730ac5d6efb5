/* example.c - the smallest libm40 program: send one prompt, print the reply as it streams.
 *
 *   cc example.c $(pkg-config --cflags --libs m40) -o m40-example
 *   ./m40-example "Once upon a time"
 */
#include <stdio.h>

#include "m40/m40.h"

int main(int argc, char **argv)
{
        struct m40_client *c;
        struct m40_request rq;
        struct m40_reply ev;
        uint64_t id;
        int r;

        if (argc != 2) {
                fprintf(stderr, "usage: %s PROMPT\n", argv[0]);
                return 2;
        }
        r = m40_client_connect(NULL, &c); /* $M40_SOCKET or /run/m40d/m40d.sock */
        if (r) {
                fprintf(stderr, "connect: %s\n", m40_strerror(r));
                return 1;
        }
        m40_request_init(&rq);
        rq.prompt = argv[1];
        rq.max_tokens = 64;
        r = m40_client_submit(c, &rq, &id);
        while (!r) {
                r = m40_client_next(c, -1, &ev);
                if (r || ev.id != id)
                        continue;
                if (ev.type == M40_EVENT_TEXT) {
                        fwrite(ev.text, 1, ev.len, stdout);
                        fflush(stdout);
                } else if (ev.type == M40_EVENT_DONE) {
                        printf("\n[%s, %u tokens]\n", m40_finish_name(ev.finish), ev.n_generated);
                        break;
                } else if (ev.type == M40_EVENT_ERROR) {
                        r = ev.error;
                }
        }
        if (r)
                fprintf(stderr, "error: %s\n", m40_strerror(r));
        m40_client_disconnect(c);
        return r ? 1 : 0;
}
