/* test_concurrent.c - acceptance 2 of issue 5: 32 clients, each with 20 greedy requests in
 * flight at once on one connection, against a real m40d; every output must equal the same
 * prompt's single-client output, and afterwards the daemon must report no active sequence
 * and no used KV page.
 *
 *   test_concurrent M40D MODEL.gguf [CLIENTS REQUESTS] */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"

#define MAX_TOKENS 24
#define TEXT_CAP   4096

static const char *sock;
static char ref[8][TEXT_CAP];
static int32_t ref_toks[8][MAX_TOKENS];
static size_t ref_n[8];
static int n_requests = 20;

struct out {
        char text[TEXT_CAP];
        size_t len;
        int32_t toks[MAX_TOKENS + 1];
        size_t n_toks;
        int done;
};

static void *client(void *arg)
{
        const int who = (int)(intptr_t)arg;
        struct m40_client *c;
        struct out *o = calloc((size_t)n_requests, sizeof(*o));
        uint64_t first = 0;
        int left = n_requests, bad = 0;

        if (!o || m40_client_connect(sock, &c))
                return (void *)1;
        for (int i = 0; i < n_requests; i++) {
                struct m40_request rq;
                uint64_t id;
                int r;

                m40_request_init(&rq);
                rq.prompt = itest_prompts[(who + i) % 8];
                rq.max_tokens = MAX_TOKENS;
                rq.set = M40_SET_TEMPERATURE;
                rq.temperature = 0;
                rq.flags = M40_REQUEST_TOKENS;
                while ((r = m40_client_submit(c, &rq, &id)) == -EAGAIN) {
                        fprintf(stderr, "ring full\n");
                        return (void *)1;
                }
                if (r)
                        return (void *)1;
                if (!i)
                        first = id;
        }
        while (left) {
                struct m40_reply ev;
                struct out *x;

                if (m40_client_next(c, 60000, &ev) || ev.id < first ||
                    ev.id >= first + (uint64_t)n_requests)
                        return (void *)1;
                x = &o[ev.id - first];
                if (ev.type == M40_EVENT_TEXT) {
                        if (x->len + ev.len >= TEXT_CAP || x->n_toks > MAX_TOKENS)
                                return (void *)1;
                        memcpy(x->text + x->len, ev.text, ev.len);
                        x->len += ev.len;
                        if (ev.token >= 0)
                                x->toks[x->n_toks++] = ev.token;
                } else if (ev.type == M40_EVENT_DONE) {
                        x->done = 1;
                        left--;
                } else if (ev.type == M40_EVENT_ERROR) {
                        fprintf(stderr, "client %d request %llu: error %s\n", who,
                                (unsigned long long)ev.id, ev.text);
                        return (void *)1;
                }
        }
        for (int i = 0; i < n_requests; i++) {
                int p = (who + i) % 8;

                if (strcmp(o[i].text, ref[p]) || o[i].n_toks != ref_n[p] ||
                    memcmp(o[i].toks, ref_toks[p], ref_n[p] * sizeof(int32_t))) {
                        fprintf(stderr,
                                "client %d request %d (prompt %d) differs:\n  got  '%s'\n"
                                "  want '%s'\n",
                                who, i, p, o[i].text, ref[p]);
                        bad = 1;
                }
        }
        m40_client_disconnect(c);
        free(o);
        return (void *)(intptr_t)bad;
}

int main(int argc, char **argv)
{
        struct itest_daemon d;
        int n_clients = 32, fail = 0;
        pthread_t th[256];

        if (argc < 3)
                return 2;
        if (argc >= 5) {
                n_clients = atoi(argv[3]);
                n_requests = atoi(argv[4]);
        }
        if (n_clients < 1 || n_clients > 256 || n_requests < 1 || n_requests > 60)
                return 2;
        if (itest_daemon_start(&d, argv[1], argv[2], "[engine]\nthreads = 2\n", NULL))
                return 1;
        sock = d.sock;
        for (int p = 0; p < 8; p++) {
                int32_t toks[4096];

                CHECK(itest_generate(sock, itest_prompts[p], MAX_TOKENS, ref[p], TEXT_CAP, toks,
                                     &ref_n[p]) == 0);
                CHECK(ref_n[p] <= MAX_TOKENS && ref_n[p] > 0);
                memcpy(ref_toks[p], toks, ref_n[p] * sizeof(int32_t));
        }
        for (int i = 0; i < n_clients; i++)
                CHECK(pthread_create(&th[i], NULL, client, (void *)(intptr_t)i) == 0);
        for (int i = 0; i < n_clients; i++) {
                void *rv;

                pthread_join(th[i], &rv);
                fail |= rv != NULL;
        }
        CHECK(!fail);
        CHECK(itest_idle(sock) == 0);
        CHECK(itest_daemon_stop(&d) == 0);
        printf("ok: %d clients x %d requests identical to single-client runs; daemon idle\n",
               n_clients, n_requests);
        return 0;
}
