/* test_status.c - the KV cache as m40d reports it (issue 19), on the CPU engine: the one
 * log line at start (pages, tokens, MiB and how the size was chosen: the CPU engine's
 * default, or kv_memory_mib), STATUS through libm40 (page count, positions and bytes per
 * page), `m40ctl status` in text and JSON (pages, tokens and MiB), and protocol versions:
 * a version 2 client is still served (WELCOME in version 2, the 256-byte STATUS of
 * version 2), versions below M40_PROTO_VERSION_MIN or above ours are refused; the timings
 * of the engine steps (version 5): none before a request, then one step, wake-up and
 * hand-over per step and one gap between each two steps of a request, moving with the
 * next request, consistent (p50 <= p99 <= max <= sum), in m40ctl status's text and JSON,
 * and left out for a version 4 client; the decode width at work (decode_width = 2 with
 * three running: the last decode step carried 2 of 3), in STATUS and m40ctl status.
 *
 *   test_status M40D M40CTL MODEL.gguf  (stories260K: 5 layers, KV dim 32, context 2048,
 *   so a page of 16 positions is 10240 bytes) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "itest.h"
#include "m40/proto.h"

#define PAGE_BYTES 10240u /* 2 (K, V) x 2 bytes x 5 layers x 16 positions x 32 */

static const char *m40ctl;

/* ctl_has - whether `m40ctl status ARGS --socket SOCK` prints needle. */
static bool ctl_has(const char *sock, const char *args, const char *needle)
{
        char cmd[512], out[4096];
        FILE *p;
        size_t n;

        snprintf(cmd, sizeof(cmd), "%s status %s --socket %s", m40ctl, args, sock);
        p = popen(cmd, "r");
        if (!p)
                return false;
        n = fread(out, 1, sizeof(out) - 1, p);
        out[n] = 0;
        if (pclose(p) == 0 && strstr(out, needle))
                return true;
        fprintf(stderr, "'%s' not in the output of %s:\n%s\n", needle, cmd, out);
        return false;
}

/* raw_status - HELLO with version, then STATUS_REQ. Returns 0 with the WELCOME's version
 * and the STATUS body's length and contents, the WELCOME's negative status, or -1. */
static int raw_status(const char *sock, uint32_t version, uint32_t *ret_version, uint32_t *ret_len,
                      struct m40_proto_status *ret)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct {
                struct m40_proto_msg m;
                struct m40_proto_hello h;
        } hello = {{M40_PROTO_HELLO, sizeof(struct m40_proto_hello)},
                   {M40_PROTO_MAGIC, version, 0, 0}};
        struct {
                struct m40_proto_msg m;
                struct m40_proto_welcome w;
        } in;
        const struct m40_proto_msg req = {M40_PROTO_STATUS_REQ, 0};
        union {
                char b[CMSG_SPACE(3 * sizeof(int))];
                struct cmsghdr a;
        } ctl;
        struct iovec iov = {&in, sizeof(in)};
        struct msghdr mh = {.msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = ctl.b,
                            .msg_controllen = sizeof(ctl.b)};
        struct m40_proto_msg m;
        struct cmsghdr *cm;
        int fd, r = -1;

        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
            write(fd, &hello, sizeof(hello)) != sizeof(hello) ||
            recvmsg(fd, &mh, MSG_WAITALL) != sizeof(in))
                goto out;
        cm = CMSG_FIRSTHDR(&mh);
        if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
                int fds[3];

                memcpy(fds, CMSG_DATA(cm), sizeof(fds));
                for (int i = 0; i < 3; i++)
                        close(fds[i]);
        }
        *ret_version = in.w.version;
        if (in.w.status) {
                r = in.w.status;
                goto out;
        }
        memset(ret, 0, sizeof(*ret));
        if (write(fd, &req, sizeof(req)) != sizeof(req) ||
            recv(fd, &m, sizeof(m), MSG_WAITALL) != sizeof(m) || m.type != M40_PROTO_STATUS ||
            m.len > sizeof(*ret) || recv(fd, ret, m.len, MSG_WAITALL) != (ssize_t)m.len)
                goto out;
        *ret_len = m.len;
        r = 0;
out:
        if (fd >= 0)
                close(fd);
        return r;
}

/* The default KV cache: (16 sequences + 16 held_sequences) x 2048 positions = 4096 pages
 * (40 MiB, below the CPU engine's 512 MiB). */
static int test_default(const char *m40d, const char *model)
{
        struct itest_daemon d;
        struct m40_client *c;
        struct m40_status st;
        struct m40_proto_status raw;
        uint32_t version = 0, len = 0;

        if (itest_daemon_start(&d, m40d, model, "[engine]\nbackend = cpu\nthreads = 2\n", NULL))
                return 1;
        CHECK(itest_file_has(d.log, "[engine] KV cache: 4096 pages = 65536 tokens = 40.0 MiB (the "
                                    "CPU engine's default, at most 512 MiB); 16 sequences at the "
                                    "full context of 2048 take 32768 tokens"));
        CHECK(m40_client_connect(d.sock, &c) == 0);
        CHECK(m40_client_status(c, &st) == 0);
        m40_client_disconnect(c);
        CHECK(st.kv_pages_total == 4096 && st.kv_pages_used == 0);
        CHECK(st.kv_page_tokens == 16 && st.kv_page_bytes == PAGE_BYTES);
        CHECK(ctl_has(d.sock, "",
                      "KV cache:   0 of 4096 pages in use (0 of 65536 tokens, 0.0 of 40.0 MiB)"));
        CHECK(ctl_has(d.sock, "--json",
                      "\"kv_pages_used\":0,\"kv_pages_total\":4096,\"kv_page_tokens\":16,"
                      "\"kv_page_bytes\":10240,\"kv_tokens_used\":0,\"kv_tokens_total\":65536,"
                      "\"kv_bytes_used\":0,\"kv_bytes_total\":41943040,"));

        /* this version: the whole STATUS */
        CHECK(raw_status(d.sock, M40_PROTO_VERSION, &version, &len, &raw) == 0);
        CHECK(version == M40_PROTO_VERSION && len == sizeof(raw));
        CHECK(raw.kv_pages_total == 4096 && raw.kv_page_tokens == 16 &&
              raw.kv_page_bytes == PAGE_BYTES);
        /* version 2: served in version 2, STATUS without what version 3 added */
        CHECK(raw_status(d.sock, 2, &version, &len, &raw) == 0);
        CHECK(version == 2 && len == M40_PROTO_STATUS_V2_BYTES && M40_PROTO_VERSION_MIN <= 2);
        CHECK(raw.kv_pages_total == 4096 && raw.kv_page_bytes == 0 && raw.n_vocab == 512);
        /* out of range */
        CHECK(raw_status(d.sock, M40_PROTO_VERSION_MIN - 1, &version, &len, &raw) == M40_EVERSION);
        CHECK(raw_status(d.sock, M40_PROTO_VERSION + 1, &version, &len, &raw) == M40_EVERSION);
        CHECK(itest_idle(d.sock) == 0);
        CHECK(itest_daemon_stop(&d) == 0);
        return 0;
}

/* kv_memory_mib = 2: 204 pages of 10240 bytes, logged as chosen by it; a request runs in
 * them. */
static int test_explicit(const char *m40d, const char *model)
{
        struct itest_daemon d;
        struct m40_client *c;
        struct m40_request rq;
        struct m40_status st;
        uint64_t id;
        char text[4096];
        int32_t toks[64];
        size_t n_toks;

        if (itest_daemon_start(&d, m40d, model,
                               "[engine]\nbackend = cpu\nthreads = 2\nmax_sequences = 4\n"
                               "kv_memory_mib = 2\n",
                               NULL))
                return 1;
        CHECK(itest_file_has(d.log, "[engine] KV cache: 204 pages = 3264 tokens = 2.0 MiB (from "
                                    "kv_memory_mib = 2); 4 sequences at the full context of 2048 "
                                    "take 8192 tokens"));
        CHECK(ctl_has(d.sock, "",
                      "KV cache:   0 of 204 pages in use (0 of 3264 tokens, 0.0 of 2.0 MiB)"));
        CHECK(m40_client_connect(d.sock, &c) == 0);
        m40_request_init(&rq);
        rq.prompt = itest_prompts[0];
        rq.max_tokens = 40;
        CHECK(m40_client_submit(c, &rq, &id) == 0);
        CHECK(itest_collect(c, id, text, sizeof(text), toks, 64, &n_toks) == 0);
        CHECK(m40_client_status(c, &st) == 0);
        CHECK(st.kv_pages_total == 204 && st.kv_page_tokens == 16 &&
              st.kv_page_bytes == PAGE_BYTES);
        m40_client_disconnect(c);
        CHECK(itest_idle(d.sock) == 0);
        CHECK(itest_daemon_stop(&d) == 0);
        return 0;
}

/* timing_ok - t is consistent: p50 <= p99 <= max <= sum <= count * max, all 0 when
 * count is. */
static bool timing_ok(const char *name, const struct m40_timing *t)
{
        bool ok = t->count ? t->p50_ns <= t->p99_ns && t->p99_ns <= t->max_ns &&
                                     t->max_ns <= t->sum_ns && t->sum_ns / t->count <= t->max_ns
                           : !t->sum_ns && !t->max_ns && !t->p50_ns && !t->p99_ns;

        if (!ok)
                fprintf(stderr, "%s: count %llu sum %llu max %llu p50 %llu p99 %llu\n", name,
                        (unsigned long long)t->count, (unsigned long long)t->sum_ns,
                        (unsigned long long)t->max_ns, (unsigned long long)t->p50_ns,
                        (unsigned long long)t->p99_ns);
        return ok;
}

static bool timings_ok(const struct m40_status *st)
{
        return timing_ok("step", &st->step) && timing_ok("gap", &st->gap) &&
               timing_ok("wake", &st->wake) && timing_ok("handover", &st->handover);
}

/* run_one - one request of max_tokens on c to its end; *ret_n its tokens, then STATUS. */
static int run_one(struct m40_client *c, uint32_t max_tokens, size_t *ret_n, struct m40_status *st)
{
        struct m40_request rq;
        uint64_t id;
        char text[4096];
        int32_t toks[256];

        m40_request_init(&rq);
        rq.prompt = itest_prompts[1];
        rq.max_tokens = max_tokens;
        CHECK(m40_client_submit(c, &rq, &id) == 0);
        CHECK(itest_collect(c, id, text, sizeof(text), toks, 256, ret_n) == 0);
        CHECK(*ret_n > 2);
        CHECK(m40_client_status(c, st) == 0);
        return 0;
}

/* One client, one request at a time (its 256-event ring never fills): a request of n
 * tokens takes at least n steps, each step after its first is started as soon as the one
 * before is collected (a gap), and its last step is followed by none. */
static int test_timings(const char *m40d, const char *model)
{
        struct itest_daemon d;
        struct m40_client *c;
        struct m40_status st0, st1, st2;
        struct m40_proto_status raw;
        uint32_t version = 0, len = 0;
        size_t n1, n2;
        char want[160];

        if (itest_daemon_start(&d, m40d, model, "[engine]\nbackend = cpu\nthreads = 1\n", NULL))
                return 1;
        CHECK(m40_client_connect(d.sock, &c) == 0);
        CHECK(m40_client_status(c, &st0) == 0);
        CHECK(!st0.step.count && !st0.gap.count && !st0.wake.count && !st0.handover.count);
        CHECK(timings_ok(&st0));
        CHECK(ctl_has(d.sock, "", "steps:      none yet\nstep gap:   none yet\n"));

        CHECK(run_one(c, 48, &n1, &st1) == 0);
        CHECK(timings_ok(&st1));
        CHECK(st1.step.count >= n1 && st1.step.sum_ns > 0 && st1.step.p50_ns > 0);
        CHECK(st1.wake.count == st1.step.count && st1.handover.count == st1.step.count);
        CHECK(st1.gap.count == st1.step.count - 1 && st1.gap.sum_ns > 0);

        CHECK(run_one(c, 96, &n2, &st2) == 0);
        CHECK(timings_ok(&st2));
        CHECK(st2.step.count >= st1.step.count + n2 && st2.step.sum_ns > st1.step.sum_ns);
        CHECK(st2.wake.count == st2.step.count && st2.handover.count == st2.step.count);
        CHECK(st2.gap.count - st1.gap.count == st2.step.count - st1.step.count - 1);
        CHECK(st2.gap.sum_ns > st1.gap.sum_ns && st2.wake.sum_ns > st1.wake.sum_ns);
        m40_client_disconnect(c);

        /* m40ctl: the same figures (nothing runs now), in text and JSON */
        snprintf(want, sizeof(want), " us (%llu steps)\nstep gap:   mean ",
                 (unsigned long long)st2.step.count);
        CHECK(ctl_has(d.sock, "", want));
        snprintf(want, sizeof(want), "\"step\":{\"count\":%llu,\"sum_ns\":%llu,\"max_ns\":%llu,",
                 (unsigned long long)st2.step.count, (unsigned long long)st2.step.sum_ns,
                 (unsigned long long)st2.step.max_ns);
        CHECK(ctl_has(d.sock, "--json", want));
        snprintf(want, sizeof(want), "\"gap\":{\"count\":%llu,\"sum_ns\":%llu,",
                 (unsigned long long)st2.gap.count, (unsigned long long)st2.gap.sum_ns);
        CHECK(ctl_has(d.sock, "--json", want));

        /* version 5 gets them; version 4 gets STATUS as it was, without them */
        CHECK(raw_status(d.sock, 5, &version, &len, &raw) == 0);
        CHECK(len == sizeof(raw) && raw.step.count == st2.step.count &&
              raw.gap.sum_ns == st2.gap.sum_ns && raw.handover.count == st2.step.count);
        CHECK(raw_status(d.sock, 4, &version, &len, &raw) == 0);
        CHECK(version == 4 && len == M40_PROTO_STATUS_V4_BYTES && raw.step.count == 0);
        CHECK(itest_daemon_stop(&d) == 0);
        printf("ok: %llu steps, mean %.1f us; %llu gaps, mean %.1f us (wake-up %.1f us); "
               "hand-over %.1f us\n",
               (unsigned long long)st2.step.count, st2.step.sum_ns / 1e3 / st2.step.count,
               (unsigned long long)st2.gap.count, st2.gap.sum_ns / 1e3 / st2.gap.count,
               st2.wake.sum_ns / 1e3 / st2.wake.count,
               st2.handover.sum_ns / 1e3 / st2.handover.count);
        return 0;
}

/* With [engine] chain_steps the engine's thread starts each step after a request's first
 * by itself: STATUS still counts every step (a gap and a hand-over for each), the gaps are
 * the engine thread's own turnaround, and a chained step's hand-over is 0 (it began where
 * the step before ended its turnaround: no pump), so most of a request's steps show 0. */
static int test_timings_chained(const char *m40d, const char *model)
{
        struct itest_daemon d;
        struct m40_client *c;
        struct m40_status st;
        size_t n;

        if (itest_daemon_start(&d, m40d, model,
                               "[engine]\nbackend = cpu\nthreads = 1\nchain_steps = true\n", NULL))
                return 1;
        CHECK(m40_client_connect(d.sock, &c) == 0);
        CHECK(run_one(c, 96, &n, &st) == 0);
        CHECK(timings_ok(&st));
        CHECK(st.step.count >= n && st.wake.count == st.step.count &&
              st.handover.count == st.step.count);
        CHECK(st.gap.count == st.step.count - 1 && st.gap.sum_ns > 0);
        CHECK(st.handover.p50_ns == 0); /* chained: most steps began without a pump */
        m40_client_disconnect(c);
        CHECK(itest_daemon_stop(&d) == 0);
        printf("ok: chained, %llu steps, gap mean %.1f us, hand-over p50 %llu ns\n",
               (unsigned long long)st.step.count, st.gap.sum_ns / 1e3 / st.gap.count,
               (unsigned long long)st.handover.p50_ns);
        return 0;
}

/* drain - reads every event waiting for the three clients (so that their rings never
 * fill and hold their sequences while the test looks). */
static void drain(struct m40_client **c)
{
        struct m40_reply ev;

        for (int i = 0; i < 3; i++)
                while (m40_client_next(c[i], 0, &ev) == 0)
                        ;
}

/* decode_width = 2 with three long requests running (three clients that read their
 * events): STATUS and m40ctl status say the last decode step carried 2 of the 3 running
 * sequences; before any step, 0 of 0. */
static int test_width(const char *m40d, const char *model)
{
        struct itest_daemon d;
        struct m40_client *c[3], *mon;
        struct m40_request rq;
        struct m40_status st;
        uint64_t id;
        int tries = 0;

        if (itest_daemon_start(&d, m40d, model,
                               "[engine]\nbackend = cpu\nthreads = 1\nmax_sequences = 4\n"
                               "decode_width = 2\n",
                               NULL))
                return 1;
        CHECK(m40_client_connect(d.sock, &mon) == 0);
        CHECK(m40_client_status(mon, &st) == 0);
        CHECK(st.decode_width == 0 && st.decode_running == 0);
        CHECK(ctl_has(d.sock, "--json", "\"decode_width\":0,\"decode_running\":0"));
        m40_request_init(&rq);
        rq.prompt = itest_prompts[0];
        rq.max_tokens = 1800; /* stories260K's context is 2048 */
        rq.flags = M40_REQUEST_IGNORE_EOS;
        for (int i = 0; i < 3; i++) {
                CHECK(m40_client_connect(d.sock, &c[i]) == 0);
                CHECK(m40_client_submit(c[i], &rq, &id) == 0);
        }
        do { /* until the three decode */
                usleep(10000);
                drain(c);
                CHECK(m40_client_status(mon, &st) == 0);
        } while (++tries < 500 && (st.generated_tokens < 30 || st.decode_running != 3));
        fprintf(stderr, "decode width: %u of %u after %llu tokens\n", st.decode_width,
                st.decode_running, (unsigned long long)st.generated_tokens);
        CHECK(st.decode_width == 2 && st.decode_running == 3);
        drain(c);
        CHECK(ctl_has(d.sock, "",
                      "decoding:   2 of 3 running sequences in the last decode step (taking "
                      "turns)"));
        drain(c);
        CHECK(ctl_has(d.sock, "--json", "\"decode_width\":2,\"decode_running\":3"));
        for (int i = 0; i < 3; i++)
                m40_client_disconnect(c[i]); /* cancels its request */
        m40_client_disconnect(mon);
        CHECK(itest_idle(d.sock) == 0);
        CHECK(itest_daemon_stop(&d) == 0);
        return 0;
}

int main(int argc, char **argv)
{
        if (argc < 4)
                return 2;
        m40ctl = argv[2];
        if (test_default(argv[1], argv[3]) || test_explicit(argv[1], argv[3]) ||
            test_timings(argv[1], argv[3]) || test_timings_chained(argv[1], argv[3]) ||
            test_width(argv[1], argv[3]))
                return 1;
        printf("ok: KV cache logged, reported by STATUS and m40ctl status in pages, tokens "
               "and MiB; protocol version 2 still served; step timings and the decode width in "
               "STATUS\n");
        return 0;
}
