/* tests/bench/serve_report.c - m40-serve-bench's report: the engine-level figure (m40-bench's
 * decode tok/s at the same batches, read from its JSON), the table and the JSON object (see
 * serve_bench.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "json_out.h"
#include "serve_bench.h"

/* m40-bench's decode figures: "decode":[{"batch":B,...,"tok_s":X,...},...]. 0 or -EBADMSG. */
static int parse_decode(const char *js, const uint32_t *batches, int n, double *tok_s)
{
        const char *p = strstr(js, "\"decode\":[");
        const char *end;
        int found = 0;

        if (!p)
                return -EBADMSG;
        end = strchr(p, ']'); /* the array's objects hold no arrays */
        if (!end)
                return -EBADMSG;
        while ((p = strstr(p, "\"batch\":")) && p < end) {
                unsigned long b = strtoul(p + 8, NULL, 10);
                const char *t = strstr(p, "\"tok_s\":");

                if (!t || t > end)
                        return -EBADMSG;
                for (int i = 0; i < n; i++) {
                        if (batches[i] == b) {
                                tok_s[i] = strtod(t + 8, NULL);
                                found++;
                        }
                }
                p = t;
        }
        return found ? 0 : -EBADMSG;
}

/* The file at path, NUL-terminated (at most 4 MiB); malloc'ed or NULL. */
static char *slurp(const char *path)
{
        FILE *f = fopen(path, "r");
        char *buf;
        size_t n;

        if (!f)
                return NULL;
        buf = malloc((4u << 20) + 1);
        if (buf) {
                n = fread(buf, 1, 4u << 20, f);
                buf[n] = 0;
        }
        fclose(f);
        return buf;
}

/* m40-bench's command line (NULL-terminated, at most 24 entries). */
static void bench_argv(char **argv, const char *m40_bench, const char *model, char *list,
                       char *prompt, char *tokens, const char *json, bool quiet)
{
        int argc = 0;

        argv[argc++] = (char *)m40_bench;
        argv[argc++] = "--model";
        argv[argc++] = (char *)model;
        argv[argc++] = "--batches";
        argv[argc++] = list;
        argv[argc++] = "--prompt";
        argv[argc++] = prompt;
        argv[argc++] = "--tokens";
        argv[argc++] = tokens;
        argv[argc++] = "--no-load";
        argv[argc++] = "--width"; /* m40d's default */
        argv[argc++] = "auto";
        argv[argc++] = "--prefill";
        argv[argc++] = "0";
        argv[argc++] = "--bytes";
        argv[argc++] = "256M";
        argv[argc++] = "--iters";
        argv[argc++] = "2";
        argv[argc++] = "--json";
        argv[argc++] = "--output";
        argv[argc++] = (char *)json;
        if (quiet)
                argv[argc++] = "--quiet";
        argv[argc] = NULL;
}

int serve_engine_figure(const char *m40_bench, const char *model, const uint32_t *batches, int n,
                        uint32_t prompt, uint32_t tokens, const char *json, bool quiet,
                        double *tok_s, char *err, size_t errlen)
{
        char list[SERVE_MAX_RUNS * 8] = "", sp[16], st[16];
        char *argv[24], *js;
        int status, r;
        pid_t pid;

        for (int i = 0; i < n; i++)
                tok_s[i] = -1;
        if (access(m40_bench, X_OK) < 0) {
                r = -errno;
                snprintf(err, errlen, "no m40-bench at %s (it is built only with CUDA)", m40_bench);
                return r;
        }
        if (tokens < 2 || tokens > 4096 || prompt > 4096 || prompt + tokens >= 8192) {
                snprintf(err, errlen,
                         "m40-bench measures 2..4096 tokens after a prompt of up to 4096");
                return -ERANGE;
        }
        for (int i = 0; i < n; i++)
                snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%u", i ? "," : "",
                         batches[i]);
        snprintf(sp, sizeof(sp), "%u", prompt);
        snprintf(st, sizeof(st), "%u", tokens);
        bench_argv(argv, m40_bench, model, list, sp, st, json, quiet);
        fflush(NULL);
        pid = fork();
        if (pid < 0) {
                r = -errno;
                snprintf(err, errlen, "cannot fork: %s", strerror(-r));
                return r;
        }
        if (pid == 0) {
                int null = open("/dev/null", O_WRONLY);

                if (null >= 0)
                        dup2(null, 1);
                execv(m40_bench, argv);
                _exit(127);
        }
        if (waitpid(pid, &status, 0) != pid) {
                r = -errno;
                snprintf(err, errlen, "waiting for %s: %s", m40_bench, strerror(-r));
        } else if (!WIFEXITED(status) || WEXITSTATUS(status)) {
                snprintf(err, errlen, "%s failed (exit status %d)", m40_bench,
                         WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
                r = -ECHILD;
        } else {
                r = 0;
        }
        js = slurp(json);
        if (js && parse_decode(js, batches, n, tok_s) == 0)
                r = 0; /* what was measured counts, even if a later part failed */
        else if (!r) {
                snprintf(err, errlen, "%s: no decode figures in m40-bench's JSON", json);
                r = -EBADMSG;
        }
        free(js);
        return r;
}

static void cell(FILE *f, double v, int width, int prec)
{
        if (v < 0)
                fprintf(f, " %*s", width, "n/a");
        else
                fprintf(f, " %*.*f", width, prec, v);
}

void serve_report_text(FILE *f, const struct serve_info *in, const struct serve_run *runs, int n,
                       const struct serve_mixed *mixed)
{
        fprintf(f, "m40-serve-bench: %s\n", in->model);
        fprintf(f, "  m40d %s\n", in->m40d);
        fprintf(f, "  engine %s, max_sequences %u, context %u, KV cache %llu tokens (%.1f MiB)\n",
                in->engine, in->max_sequences, in->n_ctx, (unsigned long long)in->kv_tokens,
                (double)in->kv_bytes / 1048576.0);
        if (in->engine_note)
                fprintf(f, "  engine figure: %s\n", in->engine_note);
        if (n) {
                fprintf(f,
                        "  each client: one request, prompt %u tokens (asked %u), %u tokens "
                        "generated, greedy, ignore_eos; all submitted at once\n\n",
                        in->prompt_tokens, in->prompt_asked, in->max_tokens);
                fprintf(f, "clients done errors     tok/s TTFT p50 TTFT p99  ITL p50  ITL p99"
                           "    engine served/\n");
                fprintf(f, "                       (total)     (ms)     (ms)     (ms)     (ms)"
                           "     tok/s   engine\n");
        }
        for (int i = 0; i < n; i++) {
                const struct serve_run *r = &runs[i];

                fprintf(f, "%7u %4u %6u %9.1f %8.2f %8.2f %8.2f %8.2f", r->clients, r->finished,
                        r->errors + r->short_runs, r->tok_s, r->ttft.p50, r->ttft.p99, r->itl.p50,
                        r->itl.p99);
                cell(f, r->engine_tok_s, 9, 1);
                cell(f, r->engine_tok_s > 0 ? r->tok_s / r->engine_tok_s : -1, 8, 3);
                fprintf(f, "\n");
                if (r->error[0])
                        fprintf(f, "        first error: %s\n", r->error);
        }
        if (mixed) {
                const struct serve_mixed_opts *o = in->mo;
                const struct serve_mixed *m = mixed;

                fprintf(f,
                        "\nmixed load: %u streams (prompt %u tokens, up to %u generated); after "
                        "%u ms of warm-up\n  and a %u ms window, %u newcomers (prompt %u tokens, "
                        "%u generated), one every %u ms\n",
                        o->streams, in->stream_prompt_tokens, o->stream_tokens, o->warmup_ms,
                        o->window_ms, o->arrivals, in->arrival_prompt_tokens, o->arrival_tokens,
                        o->interval_ms);
                fprintf(f,
                        "  streams before the burst %9.1f tok/s over %6.3f s  ITL p50 %7.2f "
                        "p99 %7.2f ms\n",
                        m->before.tok_s, m->before.seconds, m->before.itl.p50, m->before.itl.p99);
                fprintf(f,
                        "  streams during the burst %9.1f tok/s over %6.3f s  ITL p50 %7.2f "
                        "p99 %7.2f ms\n",
                        m->during.tok_s, m->during.seconds, m->during.itl.p50, m->during.itl.p99);
                fprintf(f, "  during / before          %9.3f\n", m->ratio);
                fprintf(f,
                        "  newcomers TTFT           p50 %.2f ms, p99 %.2f ms, max %.2f ms; %u of "
                        "%u finished, %u errors\n",
                        m->ttft.p50, m->ttft.p99, m->ttft.max, m->newcomers_finished, o->arrivals,
                        m->errors);
                if (m->error[0])
                        fprintf(f, "  first error: %s\n", m->error);
        }
        if (in->error)
                fprintf(f, "\nerror: %s\n", in->error);
}

static void json_pct(FILE *f, const char *key, const struct serve_pct *p)
{
        fprintf(f, "\"%s\":{\"n\":%zu,\"p50\":%.3f,\"p99\":%.3f,\"max\":%.3f}", key, p->n, p->p50,
                p->p99, p->max);
}

static void json_window(FILE *f, const char *key, const struct serve_window *w)
{
        fprintf(f, "\"%s\":{\"seconds\":%.4f,\"tokens\":%llu,\"tok_s\":%.2f,", key, w->seconds,
                (unsigned long long)w->tokens, w->tok_s);
        json_pct(f, "itl_ms", &w->itl);
        fputc('}', f);
}

static void json_mixed(FILE *f, const struct serve_info *in, const struct serve_mixed *m)
{
        const struct serve_mixed_opts *o = in->mo;

        fprintf(f,
                "{\"streams\":%u,\"stream_prompt_tokens\":%u,\"stream_tokens\":%u,"
                "\"arrivals\":%u,\"arrival_prompt_tokens\":%u,\"arrival_tokens\":%u,"
                "\"interval_ms\":%u,\"warmup_ms\":%u,\"window_ms\":%u,",
                o->streams, in->stream_prompt_tokens, o->stream_tokens, o->arrivals,
                in->arrival_prompt_tokens, o->arrival_tokens, o->interval_ms, o->warmup_ms,
                o->window_ms);
        json_window(f, "before", &m->before);
        fputc(',', f);
        json_window(f, "during", &m->during);
        fprintf(f, ",\"ratio\":%.4f,", m->ratio);
        json_pct(f, "newcomer_ttft_ms", &m->ttft);
        fprintf(f, ",\"newcomers_finished\":%u,\"errors\":%u,\"error\":", m->newcomers_finished,
                m->errors);
        if (m->error[0])
                bench_json_string(f, m->error);
        else
                fprintf(f, "null");
        fputc('}', f);
}

void serve_report_json(FILE *f, const struct serve_info *in, const struct serve_run *runs, int n,
                       const struct serve_mixed *mixed)
{
        fprintf(f, "{\"tool\":\"m40-serve-bench\",\"format\":1,\"model\":");
        bench_json_string(f, in->model);
        fprintf(f, ",\"m40d\":");
        bench_json_string(f, in->m40d);
        fprintf(f, ",\"engine\":");
        bench_json_string(f, in->engine);
        fprintf(f, ",\"engine_note\":");
        if (in->engine_note)
                bench_json_string(f, in->engine_note);
        else
                fprintf(f, "null");
        fprintf(f,
                ",\"max_sequences\":%u,\"n_ctx\":%u,\"kv_tokens\":%llu,\"kv_bytes\":%llu,"
                "\"prompt_asked\":%u,\"prompt_tokens\":%u,\"max_tokens\":%u,\"runs\":[",
                in->max_sequences, in->n_ctx, (unsigned long long)in->kv_tokens,
                (unsigned long long)in->kv_bytes, in->prompt_asked, in->prompt_tokens,
                in->max_tokens);
        for (int i = 0; i < n; i++) {
                const struct serve_run *r = &runs[i];

                fprintf(f,
                        "%s{\"clients\":%u,\"finished\":%u,\"errors\":%u,\"short\":%u,"
                        "\"generated_tokens\":%llu,\"prompt_tokens\":%llu,\"seconds\":%.4f,"
                        "\"tok_s\":%.2f,",
                        i ? "," : "", r->clients, r->finished, r->errors, r->short_runs,
                        (unsigned long long)r->generated, (unsigned long long)r->prompt, r->seconds,
                        r->tok_s);
                json_pct(f, "ttft_ms", &r->ttft);
                fputc(',', f);
                json_pct(f, "itl_ms", &r->itl);
                if (r->engine_tok_s >= 0)
                        fprintf(f, ",\"engine_tok_s\":%.2f,\"served_over_engine\":%.4f",
                                r->engine_tok_s,
                                r->engine_tok_s > 0 ? r->tok_s / r->engine_tok_s : 0.0);
                else
                        fprintf(f, ",\"engine_tok_s\":null,\"served_over_engine\":null");
                fprintf(f, ",\"error\":");
                if (r->error[0])
                        bench_json_string(f, r->error);
                else
                        fprintf(f, "null");
                fputc('}', f);
        }
        fprintf(f, "],\"mixed\":");
        if (mixed)
                json_mixed(f, in, mixed);
        else
                fprintf(f, "null");
        fprintf(f, ",\"error\":");
        if (in->error)
                bench_json_string(f, in->error);
        else
                fprintf(f, "null");
        fprintf(f, "}\n");
}
