/* status.c - `m40ctl status [--json]`: what m40d is serving and how busy it is, the KV
 * cache in pages, positions (tokens) and MiB, and the timings of its engine steps. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "m40/m40.h"
#include "m40ctl.h"

static void usage(FILE *f)
{
        fputs("Usage: m40ctl status [--json] [--socket PATH] [--timeout S]\n"
              "\n"
              "Asks m40d for its model, backend, clients, running and queued requests (and\n"
              "the running ones held because their clients do not read), KV cache use\n"
              "(pages, tokens and MiB), generation speed, how many of the running sequences\n"
              "the last decode step carried (fewer when m40d.ini's decode_width found that\n"
              "faster: they take turns), and how long engine steps take and what m40d\n"
              "spends between them (mean, median, 99th percentile, maximum):\n"
              "\n"
              "  steps      the engine running one step;\n"
              "  step gap   from a step's end to the start of the next, when m40d starts it\n"
              "             as soon as it has collected the step before (work was waiting);\n"
              "  wake-up    of the gap, from a step's end to m40d collecting it;\n"
              "  hand-over  from m40d starting a step to the engine taking it.\n"
              "\n"
              "Percentiles are histogram bucket bounds, at most 25% high.\n"
              "\n"
              "  --json         Print one JSON object.\n"
              "  --socket PATH  m40d's socket (default: see m40ctl --help).\n"
              "  --timeout S    Give up when m40d does not answer within S seconds\n"
              "                 (default 30; 0: wait forever).\n"
              "\n"
              "Exit status: 0 done; 2 bad command line; 3 m40d unreachable.\n",
              f);
}

/* json_timing - `,"NAME":{...}` of t. */
static void json_timing(const char *name, const struct m40_timing *t)
{
        printf(",\"%s\":{\"count\":%llu,\"sum_ns\":%llu,\"max_ns\":%llu,\"p50_ns\":%llu,"
               "\"p99_ns\":%llu}",
               name, (unsigned long long)t->count, (unsigned long long)t->sum_ns,
               (unsigned long long)t->max_ns, (unsigned long long)t->p50_ns,
               (unsigned long long)t->p99_ns);
}

/* text_timing - one line of t, in microseconds; what names its events. */
static void text_timing(const char *label, const struct m40_timing *t, const char *what)
{
        if (!t->count) {
                printf("%-12snone yet\n", label);
                return;
        }
        printf("%-12smean %.1f us, p50 %.1f us, p99 %.1f us, max %.1f us (%llu %s)\n", label,
               (double)t->sum_ns / (double)t->count / 1e3, t->p50_ns / 1e3, t->p99_ns / 1e3,
               t->max_ns / 1e3, (unsigned long long)t->count, what);
}

int m40ctl_status(int argc, char **argv)
{
        static const struct option opts[] = {{"json", no_argument, 0, 'j'},
                                             {"socket", required_argument, 0, 's'},
                                             {"timeout", required_argument, 0, 't'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
        struct m40_client *cl;
        struct m40_status st;
        const char *sock = NULL;
        unsigned long long tok_used, tok_total, bytes_used, bytes_total;
        bool json = false;
        int c, r, timeout_ms = M40_DEFAULT_TIMEOUT_MS;

        while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                if (c == 'j') {
                        json = true;
                } else if (c == 's') {
                        sock = optarg;
                } else if (c == 't') {
                        if (m40ctl_opt_timeout("status", optarg, &timeout_ms))
                                return M40CTL_EXIT_USAGE;
                } else if (c == 'h') {
                        usage(stdout);
                        return M40CTL_EXIT_OK;
                } else {
                        usage(stderr);
                        return M40CTL_EXIT_USAGE;
                }
        }
        if (optind != argc) {
                usage(stderr);
                return M40CTL_EXIT_USAGE;
        }
        r = m40ctl_connect("status", sock, timeout_ms, &cl);
        if (r)
                return M40CTL_EXIT_UNREACHABLE;
        r = m40_client_status(cl, &st);
        m40_client_disconnect(cl);
        if (r) {
                m40ctl_say_unreachable("status", sock, timeout_ms, r);
                return M40CTL_EXIT_UNREACHABLE;
        }
        tok_used = (unsigned long long)st.kv_pages_used * st.kv_page_tokens;
        tok_total = (unsigned long long)st.kv_pages_total * st.kv_page_tokens;
        bytes_used = (unsigned long long)st.kv_pages_used * st.kv_page_bytes;
        bytes_total = (unsigned long long)st.kv_pages_total * st.kv_page_bytes;
        if (json) {
                printf("{\"model\":");
                m40ctl_json_str(stdout, st.model, strlen(st.model));
                printf(",\"arch\":");
                m40ctl_json_str(stdout, st.arch, strlen(st.arch));
                printf(",\"backend\":");
                m40ctl_json_str(stdout, st.backend, strlen(st.backend));
                printf(",\"chat_template\":");
                m40ctl_json_str(stdout, st.chat_template, strlen(st.chat_template));
                printf(",\"clients\":%u,\"active\":%u,\"held\":%u,\"queued\":%u,\"max_sequences\":%"
                       "u,"
                       "\"kv_pages_used\":%u,\"kv_pages_total\":%u,\"kv_page_tokens\":%u,"
                       "\"kv_page_bytes\":%llu,\"kv_tokens_used\":%llu,\"kv_tokens_total\":%llu,"
                       "\"kv_bytes_used\":%llu,\"kv_bytes_total\":%llu,\"n_ctx\":%u,\"n_vocab\":%u,"
                       "\"requests\":%llu,\"prompt_tokens\":%llu,\"generated_tokens\":%llu,"
                       "\"tokens_per_s\":%.2f,\"draining\":%s,\"decode_width\":%u,"
                       "\"decode_running\":%u",
                       st.clients, st.active, st.held, st.queued, st.max_sequences,
                       st.kv_pages_used, st.kv_pages_total, st.kv_page_tokens,
                       (unsigned long long)st.kv_page_bytes, tok_used, tok_total, bytes_used,
                       bytes_total, st.n_ctx, st.n_vocab, (unsigned long long)st.requests,
                       (unsigned long long)st.prompt_tokens,
                       (unsigned long long)st.generated_tokens, st.tokens_per_s,
                       st.draining ? "true" : "false", st.decode_width, st.decode_running);
                json_timing("step", &st.step);
                json_timing("gap", &st.gap);
                json_timing("wake", &st.wake);
                json_timing("handover", &st.handover);
                printf("}\n");
                return M40CTL_EXIT_OK;
        }
        printf("model:      %s (%s, vocab %u, context %u)\n", st.model, st.arch, st.n_vocab,
               st.n_ctx);
        printf("backend:    %s, chat template %s%s\n", st.backend, st.chat_template,
               st.draining ? ", shutting down" : "");
        printf("requests:   %u running (of %u sequences; %u held), %u queued, %u clients, %llu "
               "served\n",
               st.active, st.max_sequences, st.held, st.queued, st.clients,
               (unsigned long long)st.requests);
        printf("KV cache:   %u of %u pages in use (%llu of %llu tokens, %.1f of %.1f MiB)\n",
               st.kv_pages_used, st.kv_pages_total, tok_used, tok_total, bytes_used / 1048576.0,
               bytes_total / 1048576.0);
        printf("speed:      %.1f tokens/s generating; %llu prompt and %llu generated tokens\n",
               st.tokens_per_s, (unsigned long long)st.prompt_tokens,
               (unsigned long long)st.generated_tokens);
        if (st.decode_running)
                printf("decoding:   %u of %u running sequences in the last decode step%s\n",
                       st.decode_width, st.decode_running,
                       st.decode_width < st.decode_running ? " (taking turns)" : "");
        text_timing("steps:", &st.step, "steps");
        text_timing("step gap:", &st.gap, "gaps");
        text_timing("wake-up:", &st.wake, "steps");
        text_timing("hand-over:", &st.handover, "steps");
        return M40CTL_EXIT_OK;
}
