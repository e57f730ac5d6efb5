/* test_async.c - the asynchronous form of the engine interface (engine.h, "Threads") on
 * the CPU engine: steps pumped onto the engine's thread and collected through its
 * descriptor produce exactly the tokens of blocking steps (greedy and seeded draws,
 * prompts in chunks); while a step is in flight admit is -EAGAIN, step, logits and
 * kv_pages -EBUSY, events 0, stats tell the figures as of the step's start and a second pump starts
 * nothing; the descriptor is readable once the step has finished and no longer after
 * poll; cancel and hold made while a step is in flight are queued and applied by poll
 * (a cancelled sequence's tokens are a prefix of the reference and its cancel event
 * follows the step's; a held and released sequence still produces the reference's
 * tokens; hold then release within one step leaves it running; a cancel of an id that is
 * not active is passed over); freeing an engine with a step in flight waits for it;
 * m40_engine_step_times() places each collected step between its pump and its poll, and
 * has none before the first. Chained steps (m40_engine_chain): the engine's thread runs
 * step after step without pumps, their events come out while the engine stays in flight,
 * and the tokens are the reference's; a cancel made during the chain stops it after the
 * step in flight and gives the reference's prefix; turning the chain off stops it too.
 *
 * usage: test_async MODEL.gguf; exit 0 pass, 1 fail, 77 when the model does not exist. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "tests/check.h"
#include "tests/model_file.h"

#define N_SEQ     4
#define N_GEN     24
#define MAX_STEPS 400

struct run {
        int32_t toks[N_SEQ][N_GEN];
        uint32_t n[N_SEQ], finish[N_SEQ];
        uint32_t ids[N_SEQ];
        int last_event_seq; /* index of the sequence of the last event taken */
};

static struct m40_engine *engine(const char *path)
{
        struct m40_engine_limits lim = {
                .max_seqs = N_SEQ + 1,
                .max_ctx = 128,
                .page_tokens = 16,
                .max_batch_tokens = 8, /* the 30-token prompt takes several steps */
                .n_threads = 2,
        };
        struct m40_engine *e = NULL;
        char err[512];

        if (m40_cpu_engine_new(test_model_file(path, err, sizeof(err)), &lim, &e, err,
                               sizeof(err))) {
                fprintf(stderr, "%s\n", err);
                return NULL;
        }
        return e;
}

static int admit_all(struct m40_engine *e, struct run *run)
{
        static const uint32_t lens[N_SEQ] = {5, 3, 30, 1};
        struct m40_engine_model m;

        m40_engine_model(e, &m);
        memset(run, 0, sizeof(*run));
        for (int i = 0; i < N_SEQ; i++) {
                int32_t prompt[64];
                struct m40_seq_params p = {0};
                int r;

                for (uint32_t k = 0; k < lens[i]; k++)
                        prompt[k] = (int32_t)(1 + ((uint32_t)i * 131u + k * 17u) % (m.n_vocab - 1));
                p.prompt = prompt;
                p.n_prompt = lens[i];
                p.sampling = m40_sampling_default();
                if (i == 1) { /* a seeded draw */
                        p.sampling.temperature = 0.9f;
                        p.sampling.top_k = 20;
                        p.sampling.seed = 1234;
                }
                p.stop = m40_stop_default();
                p.stop.max_tokens = N_GEN;
                p.stop.ignore_eos = true;
                r = m40_engine_admit(e, &p, &run->ids[i]);
                if (r)
                        return r;
        }
        return 0;
}

/* fresh - a new engine with the N_SEQ sequences admitted, or NULL (counted). */
static struct m40_engine *fresh(const char *path, struct run *run)
{
        struct m40_engine *e = engine(path);

        if (e && admit_all(e, run))
                e = m40_engine_free(e);
        CHECK(e, "a new engine with %d sequences", N_SEQ);
        return e;
}

/* take - drains e's events into run; returns how many sequences finished. */
static uint32_t take(struct m40_engine *e, struct run *run)
{
        struct m40_event ev[16];
        uint32_t finished = 0;
        size_t k;

        while ((k = m40_engine_events(e, ev, 16)) > 0) {
                for (size_t j = 0; j < k; j++) {
                        int i = 0;

                        while (i < N_SEQ && run->ids[i] != ev[j].seq)
                                i++;
                        if (i == N_SEQ)
                                continue;
                        run->last_event_seq = i;
                        if (ev[j].token >= 0 && run->n[i] < N_GEN)
                                run->toks[i][run->n[i]++] = ev[j].token;
                        if (ev[j].finish != M40_FINISH_NONE) {
                                run->finish[i] = ev[j].finish;
                                finished++;
                        }
                }
        }
        return finished;
}

/* readable - whether fd becomes readable within ms. */
static bool readable(int fd, int ms)
{
        struct pollfd p = {.fd = fd, .events = POLLIN};

        return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

/* async_step - one pumped step, waited for on the descriptor and collected; returns what
 * the step returned, or -1000 when the protocol itself went wrong (counted). */
static int async_step(struct m40_engine *e)
{
        int fd = m40_engine_fd(e), k = -1000;
        struct timespec ts;
        uint64_t t_pump, t_poll, begin = 0, end = 0;

        CHECK(fd >= 0, "m40_engine_fd: %d", fd);
        clock_gettime(CLOCK_MONOTONIC, &ts);
        t_pump = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        CHECK(m40_engine_pump(e) == 1, "pump starts a step");
        CHECK(m40_engine_in_flight(e), "in flight after pump");
        CHECK(readable(fd, 30000), "the descriptor becomes readable");
        CHECK(m40_engine_poll(e, &k) == 1, "poll collects the finished step");
        clock_gettime(CLOCK_MONOTONIC, &ts);
        t_poll = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        /* the step ran on the engine's thread between the pump and the poll */
        CHECK(m40_engine_step_times(e, &begin, &end) == 0 && t_pump <= begin && begin <= end &&
                      end <= t_poll,
              "step times: pump %llu, begin %llu, end %llu, poll %llu", (unsigned long long)t_pump,
              (unsigned long long)begin, (unsigned long long)end, (unsigned long long)t_poll);
        CHECK(!m40_engine_in_flight(e), "not in flight after poll");
        CHECK(!readable(fd, 0), "the descriptor is lowered by poll");
        return k;
}

/* reference - blocking steps to the end. */
static int reference(const char *path, struct run *ref)
{
        struct m40_engine *e = fresh(path, ref);
        uint32_t done = 0;

        if (!e)
                return -1;
        for (int t = 0; t < MAX_STEPS && done < N_SEQ; t++) {
                CHECK(m40_engine_step(e) >= 0, "blocking step");
                done += take(e, ref);
        }
        m40_engine_free(e);
        return done == N_SEQ ? 0 : -1;
}

/* same_as_pumped - the whole run through pump/fd/poll gives the reference's tokens. */
static void same_as_pumped(const char *path, const struct run *ref)
{
        struct run run;
        struct m40_engine *e = fresh(path, &run);
        uint32_t done = 0;

        if (!e)
                return;
        for (int t = 0; t < MAX_STEPS && done < N_SEQ; t++) {
                int k = async_step(e);

                CHECK(k >= 0 && k <= N_SEQ, "step returned %d", k);
                done += take(e, &run);
        }
        CHECK(done == N_SEQ, "every sequence finished");
        for (int i = 0; i < N_SEQ; i++)
                CHECK(run.n[i] == N_GEN && !memcmp(run.toks[i], ref->toks[i], sizeof(run.toks[i])),
                      "sequence %d: the pumped tokens differ from the blocking steps'", i);
        m40_engine_free(e);
}

/* in_flight_calls - what the other calls do while a step is in flight. */
static void in_flight_calls(const char *path)
{
        struct m40_engine_stats before, during, after;
        struct m40_seq_params p = {0};
        struct m40_event ev[4];
        struct run run;
        int32_t prompt[1] = {1};
        float lg[4096];
        uint32_t id;
        uint64_t begin = 7, end = 7;
        int k = -1;
        struct m40_engine *e = fresh(path, &run);

        if (!e)
                return;
        CHECK(m40_engine_poll(e, &k) == 0 && k == -1, "poll with nothing in flight");
        CHECK(m40_engine_step_times(e, &begin, &end) == -ENODATA && begin == 7,
              "no step times before the first collected step");
        async_step(e);
        take(e, &run);
        m40_engine_stats(e, &before);
        CHECK(m40_engine_pump(e) == 1, "pump");
        CHECK(m40_engine_pump(e) == 0, "a second pump starts nothing");
        p.prompt = prompt;
        p.n_prompt = 1;
        p.sampling = m40_sampling_default();
        p.stop = m40_stop_default();
        CHECK(m40_engine_admit(e, &p, &id) == -EAGAIN, "admit in flight");
        CHECK(m40_engine_step(e) == -EBUSY, "step in flight");
        CHECK(m40_engine_logits(e, run.ids[0], lg, 4096) == -EBUSY, "logits in flight");
        CHECK(m40_engine_kv_pages(e, run.ids[0]) == -EBUSY, "kv_pages in flight");
        CHECK(m40_engine_events(e, ev, 4) == 0, "events in flight");
        m40_engine_stats(e, &during);
        CHECK(!memcmp(&before, &during, sizeof(before)), "stats in flight: as of the start");
        CHECK(readable(m40_engine_fd(e), 30000), "the step finishes");
        m40_engine_stats(e, &during); /* finished but not collected: still as of the start */
        CHECK(!memcmp(&before, &during, sizeof(before)), "stats before poll");
        CHECK(m40_engine_poll(e, &k) == 1 && k == N_SEQ, "poll: %d active", k);
        m40_engine_stats(e, &after);
        CHECK(after.steps == before.steps + 1, "stats after poll: %llu steps",
              (unsigned long long)after.steps);
        CHECK(m40_engine_kv_pages(e, run.ids[0]) > 0, "kv_pages after poll");
        CHECK(m40_engine_admit(e, &p, &id) == 0, "admit after poll");
        CHECK(m40_engine_cancel(e, id) == 0, "cancel after poll");
        take(e, &run);
        m40_engine_free(e);
}

/* queued - cancel and hold made while steps are in flight. Sequence 0 is cancelled after
 * step 6; sequence 2 (the chunked prompt) is held during steps 3..9 and released; sequence
 * 3 is held and released within step 4. */
static void queued(const char *path, const struct run *ref)
{
        struct run run;
        struct m40_engine *e = fresh(path, &run);
        uint32_t done = 0;

        if (!e)
                return;
        for (int t = 0; t < MAX_STEPS && done < N_SEQ; t++) {
                int fd = m40_engine_fd(e), k = -1;

                CHECK(m40_engine_pump(e) == 1, "pump");
                if (t == 2)
                        CHECK(m40_engine_hold(e, run.ids[2], true) == 0, "queued hold");
                if (t == 4) {
                        CHECK(m40_engine_hold(e, run.ids[3], true) == 0, "queued hold");
                        CHECK(m40_engine_hold(e, run.ids[3], false) == 0, "queued release");
                }
                if (t == 6) {
                        CHECK(m40_engine_cancel(e, run.ids[0]) == 0, "queued cancel");
                        CHECK(m40_engine_cancel(e, run.ids[0]) == 0, "second cancel");
                        CHECK(m40_engine_hold(e, run.ids[0], true) == 0, "hold after cancel");
                        CHECK(m40_engine_cancel(e, 999999) == 0, "cancel of no sequence");
                }
                if (t == 9)
                        CHECK(m40_engine_hold(e, run.ids[2], false) == 0, "queued release");
                CHECK(readable(fd, 30000) && m40_engine_poll(e, &k) == 1, "step %d", t);
                done += take(e, &run);
                if (t == 6)
                        CHECK(run.last_event_seq == 0 && run.finish[0] == M40_FINISH_CANCEL,
                              "the cancel event comes after the step's events");
                if (t == 9)
                        CHECK(run.n[2] == 0, "held from step 3: no token of sequence 2 yet");
        }
        CHECK(done == N_SEQ, "every sequence finished");
        CHECK(run.finish[0] == M40_FINISH_CANCEL && run.n[0] < N_GEN &&
                      !memcmp(run.toks[0], ref->toks[0], run.n[0] * sizeof(int32_t)),
              "sequence 0: cancelled with a prefix of the reference (%u tokens)", run.n[0]);
        for (int i = 1; i < N_SEQ; i++)
                CHECK(run.n[i] == N_GEN && !memcmp(run.toks[i], ref->toks[i], sizeof(run.toks[i])),
                      "sequence %d: the tokens differ from the reference", i);
        m40_engine_free(e);
}

/* chained - the whole run with chained steps: pump only when the engine is not in flight.
 * Sequence 0 is cancelled at the 5th collected step; the chain is turned off at the 12th
 * and on again at the 13th (when the engine has stopped). */
static void chained(const char *path, const struct run *ref)
{
        struct run run;
        struct m40_engine *e = fresh(path, &run);
        uint32_t done = 0;
        int pumps = 0, polls = 0, in_flight_polls = 0;

        if (!e)
                return;
        CHECK(m40_engine_chain(e, true) == 0, "chain on");
        for (int t = 0; t < MAX_STEPS && done < N_SEQ; t++) {
                int fd = m40_engine_fd(e), k = -1;

                if (!m40_engine_in_flight(e)) {
                        CHECK(m40_engine_pump(e) == 1, "pump");
                        pumps++;
                }
                CHECK(readable(fd, 30000) && m40_engine_poll(e, &k) == 1, "poll %d", t);
                polls++;
                in_flight_polls += m40_engine_in_flight(e);
                CHECK(k >= 0 && k <= N_SEQ, "step returned %d", k);
                if (polls == 5) {
                        CHECK(m40_engine_cancel(e, run.ids[0]) == 0, "cancel in the chain");
                }
                if (polls == 12)
                        CHECK(m40_engine_chain(e, false) == 0, "chain off");
                if (polls == 13)
                        CHECK(m40_engine_chain(e, true) == 0, "chain on again");
                done += take(e, &run);
        }
        /* the last step produced nothing to go on with: the chain has stopped */
        for (int i = 0; i < 100 && m40_engine_in_flight(e); i++) {
                int k = -1;

                if (readable(m40_engine_fd(e), 30000))
                        m40_engine_poll(e, &k);
                done += take(e, &run);
        }
        CHECK(!m40_engine_in_flight(e), "the chain stops when no sequence is left");
        CHECK(done == N_SEQ, "every sequence finished");
        CHECK(in_flight_polls > 0 && pumps < polls,
              "the engine's thread went on by itself: %d pumps for %d collected steps", pumps,
              polls);
        CHECK(run.finish[0] == M40_FINISH_CANCEL && run.n[0] < N_GEN &&
                      !memcmp(run.toks[0], ref->toks[0], run.n[0] * sizeof(int32_t)),
              "sequence 0: cancelled in the chain with a prefix of the reference (%u tokens)",
              run.n[0]);
        for (int i = 1; i < N_SEQ; i++)
                CHECK(run.n[i] == N_GEN && !memcmp(run.toks[i], ref->toks[i], sizeof(run.toks[i])),
                      "sequence %d: chained tokens differ from the reference", i);
        m40_engine_free(e);
}

/* free_in_flight - freeing an engine whose step is in flight (and one whose finished step
 * was never collected) waits for it and frees everything (ASan checks the rest). */
static void free_in_flight(const char *path)
{
        for (int collect_wait = 0; collect_wait < 2; collect_wait++) {
                struct run run;
                struct m40_engine *e = fresh(path, &run);

                if (!e)
                        return;
                CHECK(m40_engine_pump(e) == 1, "pump");
                if (collect_wait)
                        CHECK(readable(m40_engine_fd(e), 30000), "the step finishes");
                CHECK(m40_engine_cancel(e, run.ids[1]) == 0, "queued cancel");
                e = m40_engine_free(e);
        }
}

int main(int argc, char **argv)
{
        struct run ref;

        if (argc != 2)
                return 2;
        if (access(argv[1], R_OK))
                return 77;
        if (reference(argv[1], &ref)) {
                fprintf(stderr, "FAIL: the reference run\n");
                return 1;
        }
        same_as_pumped(argv[1], &ref);
        in_flight_calls(argv[1]);
        queued(argv[1], &ref);
        free_in_flight(argv[1]);
        chained(argv[1], &ref);
        if (failures)
                fprintf(stderr, "%d checks failed\n", failures);
        return failures ? 1 : 0;
}
