/* tests/gpu/test_cuda_engine.c - whole models on the CUDA engine: acceptance 2 of issue 6
 * (greedy tokens and logits against the CPU engine's float32 specification, M40_ACT_F32)
 * and the device sampler (cuda/kernels/sample.h) end to end.
 *
 * Greedy, for each GGUF named on the command line: one sequence of 20 tokens, one of 100
 * (its prompt one step of one sequence: the query-tiled prompt attention) and a batch of four
 * sequences admitted together (prompts of 1, 5, 70 and 150 tokens: decode and prefill in
 * one step, a prompt split across steps by max_batch_tokens 128; steps of 128 and 101
 * tokens, which take the prefill GEMM of cuda/kernels/gemm.h (64 tokens or more); the batch keeps
 * its logits), 64 greedy tokens each, picked on the device. Checks: the same tokens as the
 * CPU engine, and last-position logits within LOGIT_TOL of the largest |logit| (FP32 sums
 * in another order, over 64 tokens). Where the tokens part, the test asks the CPU engine
 * for its logits at that step: the two picks must be within LOGIT_TOL there (a near-tie of
 * a random model), else it fails.
 *
 * Sampled, for the first two models found (quick mode: the first): N_SETS sequences admitted
 * together, each with its own parameters (every option of struct m40_sampling alone, then
 * combined, and greedy with penalties) and seed, keep_logits, 48 tokens each. After every
 * step each new token is replayed on the CPU sampler (m40_sampler_sample()) from the logits
 * the engine kept, the sequence's history (prompt and the device's tokens so far) and a host
 * rng state seeded as seqs.c seeds it: the tokens must be equal, or differ only as
 * cuda/kernels/sample.h's tolerance allows (tolerated() below; such picks are printed and, past 1%
 * of the draws, fail). The replay goes on with the device's token. The batch runs twice on
 * one engine (its slots reused): both runs must give the same tokens. A summary line per
 * model counts the draws (both runs), exact matches and tolerated boundary picks.
 *
 * KV cache size, for the first model: the default (kv_bytes 0) is every sequence at the
 * full context when the GPU has room (MAX_SEQS x 512 positions), an explicit kv_bytes
 * exactly its pages, and under vram_limit_mb with 1024 sequences (more than the limit
 * holds) the fill grows by 64 MiB of pages when the limit does.
 *
 * Exits 77 without a GPU. M40_TEST_QUICK=1 (compute-sanitizer memcheck): 16 greedy tokens;
 * 8 sampled tokens after short prompts, first model only; 2 (racecheck): as 1, but 4
 * sampled tokens of the first four parameter sets (the combined ones). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/engine/cuda_engine.h"
#include "cuda/runtime/launch.h"
#include "cuda/kernels/sample.h"
#include "engine/sampler.h"
#include "gputest.h"
#include "enginetest.h"

#define LOGIT_TOL 1e-3
#define MAX_SEQS  ENGINE_RUN_SEQS

/* tie_gap - where the CUDA engine picked another token than the CPU engine at step d of
 * sequence s, how far below the CPU's pick the CUDA pick is in the CPU's own logits
 * (relative to max|logit|): a near-tie within LOGIT_TOL is FP32 rounding, not a bug. */
static double tie_gap(struct m40_engine *cpu, uint32_t s, uint32_t len, uint32_t d, int32_t tc,
                      int32_t tg, uint32_t n_vocab)
{
        static struct engine_run r;
        double maxl = 1, gap = -1;

        if (engine_drive(cpu, 1, s, &len, (const uint32_t[]){d + 1}, true, n_vocab, &r) == 0 &&
            r.n_gen[0] == d + 1) {
                for (uint32_t i = 0; i < n_vocab; i++)
                        maxl = fmax(maxl, fabs(r.logits[0][i]));
                gap = (r.logits[0][tc] - r.logits[0][tg]) / maxl;
        }
        free(r.logits[0]);
        memset(&r, 0, sizeof(r));
        return gap;
}

static void compare(struct m40_engine *cpu, const char *name, const char *what, uint32_t n_seqs,
                    const uint32_t *lens, const struct engine_run *c, const struct engine_run *g,
                    bool keep, uint32_t n_vocab)
{
        for (uint32_t s = 0; s < n_seqs; s++) {
                uint32_t same = 0;
                double maxd = 0, maxl = 1;

                while (same < c->n_gen[s] && same < g->n_gen[s] &&
                       c->toks[s][same] == g->toks[s][same])
                        same++;
                if (same < c->n_gen[s] && same < g->n_gen[s]) {
                        const double gap = tie_gap(cpu, s, lens[s], same, c->toks[s][same],
                                                   g->toks[s][same], n_vocab);

                        printf("%s %s seq %u: tokens differ at %u: cpu %d, cuda %d, %.3g apart "
                               "in the cpu logits (of max|logit|)\n",
                               name, what, s, same, c->toks[s][same], g->toks[s][same], gap);
                        CHECK(gap >= 0 && gap <= LOGIT_TOL,
                              "%s %s seq %u: tokens differ at %u and it is no near-tie", name, what,
                              s, same);
                        continue;
                }
                CHECK(same == c->n_gen[s] && same == g->n_gen[s],
                      "%s %s seq %u: %u cpu tokens, %u cuda", name, what, s, c->n_gen[s],
                      g->n_gen[s]);
                if (keep) {
                        for (uint32_t i = 0; i < n_vocab; i++) {
                                maxd = fmax(maxd, fabs(c->logits[s][i] - g->logits[s][i]));
                                maxl = fmax(maxl, fabs(c->logits[s][i]));
                        }
                        CHECK(maxd / maxl <= LOGIT_TOL, "%s %s seq %u: logits differ by %.3g", name,
                              what, s, maxd / maxl);
                }
                printf("%-28s %-6s seq %u: greedy %u/%u tokens match", name, what, s, same,
                       c->n_gen[s]);
                if (keep)
                        printf(", last logits max|d| %.3g (%.3g of max|logit| %.3g)", maxd,
                               maxd / maxl, maxl);
                printf("\n");
        }
}

static const char *base_name(const char *path)
{
        return strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
}

static void one_model(const char *path, uint32_t n_gen)
{
        const struct m40_engine_limits lim = {
                .max_seqs = MAX_SEQS,
                .max_ctx = 512,
                .max_batch_tokens = 128,
                .prefill_chunk = 128, /* steps of 128 and 101 (3 decode + 98 prompt tokens) */
                .act = M40_ACT_F32,
        };
        const char *name = base_name(path);
        /* one sequence of 20 tokens (graph steps), one of 100 (a 100-token step of one
         * sequence: the query-tiled m40_cuda_attention_prompt()) */
        const uint32_t single[] = {20, 100}, batch[] = {1, 5, 70, 150};
        const uint32_t gen[MAX_SEQS] = {n_gen, n_gen, n_gen, n_gen};
        const char *single_what[] = {"single", "long"};
        struct m40_engine *cpu = NULL, *gpu = NULL;
        struct m40_engine_model mi;
        static struct engine_run rc, rg;
        int r;

        if (engines_open(path, &lim, &cpu, &gpu))
                return;
        m40_engine_model(gpu, &mi);
        for (int i = 0; i < 2; i++) {
                r = engine_drive(cpu, 1, 0, &single[i], gen, false, mi.n_vocab, &rc);
                r = r ? r : engine_drive(gpu, 1, 0, &single[i], gen, false, mi.n_vocab, &rg);
                if (r)
                        fail("%s %s: %d (%s) %s", name, single_what[i], r, m40_strerror(r),
                             m40_cuda_last_error());
                else
                        compare(cpu, name, single_what[i], 1, &single[i], &rc, &rg, false,
                                mi.n_vocab);
                engine_run_free(&rc);
                engine_run_free(&rg);
        }
        r = engine_drive(cpu, MAX_SEQS, 0, batch, gen, true, mi.n_vocab, &rc);
        r = r ? r : engine_drive(gpu, MAX_SEQS, 0, batch, gen, true, mi.n_vocab, &rg);
        if (r)
                fail("%s batch: %d (%s) %s", name, r, m40_strerror(r), m40_cuda_last_error());
        else
                compare(cpu, name, "batch", MAX_SEQS, batch, &rc, &rg, true, mi.n_vocab);
        engine_run_free(&rc);
        engine_run_free(&rg);
        m40_engine_free(gpu);
        m40_engine_free(cpu);
}

/* kv_pages - the KV pages of a CUDA engine on path with lim: 0 and *ret, or the error. */
static int kv_pages(const char *path, const struct m40_engine_limits *lim,
                    struct m40_engine_stats *ret)
{
        struct m40_engine *e = NULL;
        char err[512] = "";
        int r = m40_cuda_engine_new(test_model_file(path, err, sizeof(err)), lim, 0, &e, err,
                                    sizeof(err));

        if (r == 0)
                m40_engine_stats(e, ret);
        else if (r != -ENOMEM)
                fail("%s: cuda engine: %d %s", path, r, err);
        m40_engine_free(e);
        return r;
}

static void kv_sizes(const char *path)
{
        struct m40_engine_limits lim = {.max_seqs = MAX_SEQS, .max_ctx = 512, .act = M40_ACT_F32};
        const uint32_t per_seq = 512 / 16, cap = 1024 * per_seq;
        struct m40_engine_stats st, hi;
        uint64_t limit = 0, step;

        if (kv_pages(path, &lim, &st))
                return;
        CHECK(st.kv_pages_total == MAX_SEQS * per_seq && st.kv_page_tokens == 16,
              "%s: default KV cache of %u pages of %u positions, want %u (every sequence at "
              "the full context)",
              base_name(path), st.kv_pages_total, st.kv_page_tokens, MAX_SEQS * per_seq);
        lim.kv_bytes = 40 * st.kv_page_bytes + st.kv_page_bytes / 2;
        if (!kv_pages(path, &lim, &st))
                CHECK(st.kv_pages_total == 40, "%s: kv_bytes of 40.5 pages gave %u pages",
                      base_name(path), st.kv_pages_total);

        /* 1024 sequences under a limit: the smallest power of two of MiB that holds the
         * model, then 64 MiB more */
        lim.kv_bytes = 0;
        lim.max_seqs = 1024;
        for (uint64_t l = 256; l <= 16384 && !limit; l *= 2) {
                lim.vram_limit_mb = l;
                if (!kv_pages(path, &lim, &st))
                        limit = l;
        }
        if (!limit) {
                fail("%s: no vram_limit_mb up to 16384 holds the model", base_name(path));
                return;
        }
        lim.vram_limit_mb = limit + 64;
        if (kv_pages(path, &lim, &hi)) {
                fail("%s: vram_limit_mb %llu failed where %llu did not", base_name(path),
                     (unsigned long long)limit + 64, (unsigned long long)limit);
                return;
        }
        step = (64ull << 20) / st.kv_page_bytes;
        printf("%s: vram_limit_mb %llu: %u KV pages, %llu: %u (cap %u)\n", base_name(path),
               (unsigned long long)limit, st.kv_pages_total, (unsigned long long)limit + 64,
               hi.kv_pages_total, cap);
        CHECK(st.kv_pages_total >= per_seq && st.kv_pages_total <= cap,
              "%s: %u pages under vram_limit_mb %llu", base_name(path), st.kv_pages_total,
              (unsigned long long)limit);
        if (hi.kv_pages_total < cap)
                CHECK(hi.kv_pages_total - st.kv_pages_total == step ||
                              hi.kv_pages_total - st.kv_pages_total == step + 1,
                      "%s: 64 MiB more limit gave %u more pages, want %llu", base_name(path),
                      hi.kv_pages_total - st.kv_pages_total, (unsigned long long)step);
        else
                CHECK(hi.kv_pages_total == cap, "%s: %u pages above the cap %u", base_name(path),
                      hi.kv_pages_total, cap);
}

/* ---- sampled: the device sampler through the engine, replayed on the CPU sampler ---- */

#define EPS        M40_CUDA_SAMPLE_EPS
#define N_SETS     17
#define SAMPLE_CTX 256 /* max_ctx; at least the longest prompt + 48 tokens + 1 */

/* The parameter sets and their prompt lengths (some past penalty_last_n 64). The first
 * four combine options (quick mode 2 keeps only them); the others take one each. */
static const struct {
        struct m40_sampling sp; /* temperature, top_k, top_p, min_p, repeat, frequency,
                                 * presence, penalty_last_n; the seed is set per set */
        uint32_t n_prompt;
} sets[N_SETS] = {
        {{0.7f, 40, 0.9f, 0.05f, 1.3f, 0.2f, 0.2f, 64, 0}, 100},
        {{1.3f, 5, 0.5f, 0.2f, 1.3f, 0.0f, 0.0f, -1, 0}, 70},
        {{1.3f, 0, 0.9f, 0.0f, 1.0f, 0.5f, 0.5f, -1, 0}, 1},
        {{0.0f, 0, 1.0f, 0.0f, 1.3f, 0.3f, 0.0f, -1, 0}, 40}, /* greedy with penalties */
        {{0.7f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 64, 0}, 5},
        {{1.3f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 64, 0}, 17},
        {{1.0f, 1, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 64, 0}, 33},
        {{1.0f, 5, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 64, 0}, 64},
        {{1.0f, 40, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 64, 0}, 2},
        {{1.0f, 0, 0.5f, 0.0f, 1.0f, 0.0f, 0.0f, 64, 0}, 90},
        {{1.0f, 0, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, 64, 0}, 48},
        {{1.0f, 0, 1.0f, 0.05f, 1.0f, 0.0f, 0.0f, 64, 0}, 12},
        {{1.0f, 0, 1.0f, 0.2f, 1.0f, 0.0f, 0.0f, 64, 0}, 77},
        {{1.0f, 0, 1.0f, 0.0f, 1.3f, 0.0f, 0.0f, 64, 0}, 110},
        {{1.0f, 0, 1.0f, 0.0f, 1.3f, 0.0f, 0.0f, -1, 0}, 110},
        {{1.0f, 0, 1.0f, 0.0f, 1.0f, 0.4f, 0.0f, 64, 0}, 55},
        {{1.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.6f, 64, 0}, 26},
};

/* One sampled sequence as the replay sees it. */
struct sseq {
        uint32_t id;
        struct m40_sampling sp;
        uint64_t rng; /* the replay's rng state, seeded as seqs.c and advanced by the replay */
        uint32_t n_prompt, n_hist;
        int32_t hist[SAMPLE_CTX]; /* prompt, then the device's tokens */
};

/* The CPU's view of a draw, rebuilt (only where the tokens differ) to judge the pick. */
struct cpu_view {
        uint32_t n;                     /* n_vocab */
        struct m40_sampler_scratch cpu; /* for m40_sampler_sample() */
        float *lg;                      /* (n) the kept logits of the step */
        float *pen;                     /* (n) penalized logits */
        int32_t *order;                 /* (n) ids in the CPU's sorted order */
        uint32_t *rank;                 /* (n) rank of each id in order */
        uint32_t *counts;               /* (n) zero between calls */
        double *p1, *q;                 /* (n) weights at temperature 1, at the temperature */
        uint32_t n_draws, n_exact, n_near;
};

static int view_init(struct cpu_view *v, uint32_t n)
{
        memset(v, 0, sizeof(*v));
        v->n = n;
        v->lg = malloc(n * sizeof(float));
        v->pen = malloc(n * sizeof(float));
        v->order = malloc(n * sizeof(int32_t));
        v->rank = malloc(n * sizeof(uint32_t));
        v->counts = calloc(n, sizeof(uint32_t));
        v->p1 = malloc(n * sizeof(double));
        v->q = malloc(n * sizeof(double));
        if (m40_sampler_scratch_init(&v->cpu, n) || !v->lg || !v->pen || !v->order || !v->rank ||
            !v->counts || !v->p1 || !v->q)
                return -ENOMEM;
        return 0;
}

static void view_done(struct cpu_view *v)
{
        m40_sampler_scratch_done(&v->cpu);
        free(v->lg);
        free(v->pen);
        free(v->order);
        free(v->rank);
        free(v->counts);
        free(v->p1);
        free(v->q);
}

/* penalize - sampler.c's penalize(), transcribed, on a logits array. */
static void penalize(const struct m40_sampling *p, float *l, const int32_t *hist, size_t n_hist,
                     uint32_t *counts)
{
        size_t from = 0;

        if (p->penalty_last_n == 0 || (p->repeat_penalty == 1.0f && p->frequency_penalty == 0.0f &&
                                       p->presence_penalty == 0.0f))
                return;
        if (p->penalty_last_n > 0 && n_hist > (size_t)p->penalty_last_n)
                from = n_hist - (size_t)p->penalty_last_n;
        for (size_t i = from; i < n_hist; i++)
                counts[hist[i]]++;
        for (size_t i = from; i < n_hist; i++) {
                const int32_t id = hist[i];
                const uint32_t n = counts[id];
                float v;

                if (!n)
                        continue;
                v = l[id];
                if (p->repeat_penalty > 0.0f && p->repeat_penalty != 1.0f)
                        v = v <= 0.0f ? v * p->repeat_penalty : v / p->repeat_penalty;
                v -= (float)n * p->frequency_penalty + p->presence_penalty;
                l[id] = v;
                counts[id] = 0;
        }
}

static const float *sort_pen;

/* by_logit - sampler.c's candidate order on ids: logit descending, id ascending. */
static int by_logit(const void *a, const void *b)
{
        const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

        if (sort_pen[x] != sort_pen[y])
                return sort_pen[x] > sort_pen[y] ? -1 : 1;
        return x < y ? -1 : x > y;
}

/* draw_u - the draw in [0, 1) that m40_sampler_sample() takes from rng state x. */
static double draw_u(uint64_t x)
{
        uint64_t z = x + 0x9e3779b97f4a7c15ull;

        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        return (double)(z >> 11) * 0x1p-53;
}

/* draw_ok - for a top-p cut of the first n sorted candidates: min-p, the weights at the
 * temperature and the CPU's pick for u (its rank in *ret_cpu), as sampler.c; whether the
 * pick of rank dev is that one, or separated from it only by normalized cumulative
 * probabilities within EPS of u. */
static bool draw_ok(struct cpu_view *v, const struct m40_sampling *p, uint32_t n, double u,
                    uint32_t dev, uint32_t *ret_cpu)
{
        const double l0 = v->pen[v->order[0]];
        double sum = 0.0, r, cum = 0.0;
        uint32_t m = n, c;

        if (p->min_p > 0.0f) {
                m = 1;
                while (m < n && v->p1[m] >= p->min_p * v->p1[0])
                        m++;
        }
        for (uint32_t i = 0; i < m; i++) {
                v->q[i] = exp(((double)v->pen[v->order[i]] - l0) / p->temperature);
                sum += v->q[i];
        }
        r = u * sum;
        for (c = 0; c + 1 < m; c++) {
                r -= v->q[c];
                if (r < 0.0)
                        break;
        }
        *ret_cpu = c;
        if (dev >= m)
                return false;
        for (uint32_t i = 0; i < (dev > c ? dev : c); i++) {
                cum += v->q[i] / sum;
                if (i >= (dev < c ? dev : c) && fabs(u - cum) > EPS)
                        return false;
        }
        return true;
}

/* tolerated - whether the device's token dev, where the CPU replay drew cpu_tok from the
 * same logits, history and rng state (before the draw), is within cuda/kernels/sample.h's
 * tolerance. The rule, on the CPU's own numbers in sampler.c's order (penalties;
 * candidates sorted by logit descending, id ascending; top-k; top-p on the weights
 * exp(l - l0) normalized over the top-k; min-p; weights at the temperature; the draw u):
 * the device cuts top-p after the first candidate j whose cumulative probability it sees
 * >= top_p, which it may see at any j from the first whose CPU cumulative is >= top_p - EPS
 * to the first whose CPU cumulative is >= top_p + EPS (no top-p: the top-k set); dev is
 * tolerated when, under one of those cuts, it is the CPU's pick for u or every cumulative
 * boundary between the two lies within EPS of u. Greedy has no tolerance. */
static bool tolerated(struct cpu_view *v, const struct m40_sampling *p, uint64_t rng,
                      const int32_t *hist, size_t n_hist, int32_t dev, int32_t cpu_tok)
{
        const bool top_p = p->top_p > 0.0f && p->top_p < 1.0f;
        const double u = draw_u(rng);
        double sum = 0.0, cum = 0.0;
        uint32_t n_k = v->n, c = 0, j;
        bool ok = false, cut = false, same = false;

        if (p->temperature <= 0.0f)
                return false;
        memcpy(v->pen, v->lg, v->n * sizeof(float));
        penalize(p, v->pen, hist, n_hist, v->counts);
        for (uint32_t i = 0; i < v->n; i++)
                v->order[i] = (int32_t)i;
        sort_pen = v->pen;
        qsort(v->order, v->n, sizeof(int32_t), by_logit);
        for (uint32_t i = 0; i < v->n; i++)
                v->rank[v->order[i]] = i;
        if (p->top_k > 0 && (uint32_t)p->top_k < v->n)
                n_k = (uint32_t)p->top_k;
        for (uint32_t i = 0; i < n_k; i++) {
                v->p1[i] = exp((double)v->pen[v->order[i]] - (double)v->pen[v->order[0]]);
                sum += v->p1[i];
        }
        for (j = 0; top_p && j < n_k; j++) {
                cum += v->p1[j] / sum;
                if (cum >= p->top_p - EPS)
                        ok |= draw_ok(v, p, j + 1, u, v->rank[dev], &c);
                if (!cut && cum >= p->top_p) { /* the CPU's own cut */
                        same = v->order[c] == cpu_tok;
                        cut = true;
                }
                if (cum >= p->top_p + EPS)
                        break;
        }
        if (!top_p || j == n_k) {
                ok |= draw_ok(v, p, n_k, u, v->rank[dev], &c);
                same = cut ? same : v->order[c] == cpu_tok;
        }
        /* under the CPU's own cut, the transcription must pick the CPU's token */
        CHECK(same, "the test's transcription of sampler.c disagrees with m40_sampler_sample()");
        return ok;
}

/* replay - the CPU sampler on the device's token event ev (logits kept by the engine),
 * judged; the sequence's history then takes the device's token. Returns 0 or the
 * engine's error. */
static int replay(struct m40_engine *e, struct cpu_view *v, struct sseq *sq, uint32_t n_sets,
                  const struct m40_event *ev, const char *name)
{
        struct sseq *q = NULL;
        uint64_t rng0;
        int32_t want;
        int r;

        for (uint32_t s = 0; s < n_sets && !q; s++)
                if (sq[s].id == ev->seq)
                        q = &sq[s];
        if (!q || ev->token < 0 || (uint32_t)ev->token >= v->n || q->n_hist >= SAMPLE_CTX) {
                fail("%s: event of seq %u: token %d, finish %u", name, ev->seq, ev->token,
                     ev->finish);
                return 0;
        }
        r = m40_engine_logits(e, ev->seq, v->lg, v->n);
        if (r)
                return r;
        rng0 = q->rng;
        want = m40_sampler_sample(&q->sp, &q->rng, v->lg, q->hist, q->n_hist, &v->cpu);
        v->n_draws++;
        if (want == ev->token) {
                v->n_exact++;
        } else if (tolerated(v, &q->sp, rng0, q->hist, q->n_hist, ev->token, want)) {
                v->n_near++;
                printf("%s set %u token %u: near a boundary (draw %.17g): device %d, cpu %d\n",
                       name, (unsigned)(q - sq), q->n_hist - q->n_prompt, draw_u(rng0), ev->token,
                       want);
        } else {
                fail("%s set %u (T %g top_k %d top_p %g min_p %g repeat %g last_n %d freq %g "
                     "pres %g) token %u: device %d, cpu replay %d (draw %.17g)",
                     name, (unsigned)(q - sq), q->sp.temperature, q->sp.top_k, q->sp.top_p,
                     q->sp.min_p, q->sp.repeat_penalty, q->sp.penalty_last_n,
                     q->sp.frequency_penalty, q->sp.presence_penalty, q->n_hist - q->n_prompt,
                     ev->token, want, draw_u(rng0));
        }
        q->hist[q->n_hist++] = ev->token;
        return 0;
}

/* sample_drive - admit sets 0..n_sets-1 together (each its own seed, keep_logits, n_gen
 * tokens, prompts shortened in quick mode), step the engine until all have finished and
 * replay every token. Returns 0 or the engine's error. */
static int sample_drive(struct m40_engine *e, struct cpu_view *v, uint32_t n_sets, uint32_t n_gen,
                        const char *name, struct sseq *sq)
{
        struct m40_event ev[64];
        int r;

        for (uint32_t s = 0; s < n_sets; s++) {
                struct m40_seq_params p = {.prompt = sq[s].hist};

                sq[s].n_prompt = quick_mode() ? sets[s].n_prompt / 4 + 1 : sets[s].n_prompt;
                /* each id twice in a run of 22 (the penalties count repeats), the runs
                 * drifting (a window of 64 sees other ids than the whole history) */
                for (uint32_t i = 0; i < sq[s].n_prompt; i++)
                        sq[s].hist[i] = (int32_t)((s * 131u + i % 11u * 37u + i / 22u * 3u) % v->n);
                sq[s].n_hist = p.n_prompt = sq[s].n_prompt;
                sq[s].sp = p.sampling = sets[s].sp;
                sq[s].sp.seed = p.sampling.seed = 1000003ull * s;
                sq[s].rng = m40_sampler_seed(sq[s].sp.seed);
                p.stop = m40_stop_default();
                p.stop.max_tokens = n_gen;
                p.stop.ignore_eos = true;
                p.keep_logits = true;
                r = m40_engine_admit(e, &p, &sq[s].id);
                if (r)
                        return r;
        }
        for (;;) {
                size_t n;

                r = m40_engine_step(e);
                if (r < 0)
                        return r;
                /* each sequence has at most one token per step: its kept logits are this step's */
                while ((n = m40_engine_events(e, ev, 64)) > 0)
                        for (size_t i = 0; i < n; i++) {
                                const int rr = replay(e, v, sq, n_sets, &ev[i], name);

                                if (rr)
                                        return rr;
                        }
                if (r == 0)
                        break;
        }
        for (uint32_t s = 0; s < n_sets; s++)
                CHECK(sq[s].n_hist - sq[s].n_prompt == n_gen, "%s set %u: %u tokens, not %u", name,
                      s, sq[s].n_hist - sq[s].n_prompt, n_gen);
        return 0;
}

/* sampled - the sampled check of one model: the batch twice on one CUDA engine. */
static void sampled(const char *path, uint32_t n_sets, uint32_t n_gen)
{
        const struct m40_engine_limits lim = {
                .max_seqs = N_SETS,
                .max_ctx = SAMPLE_CTX,
                .max_batch_tokens = 128,
                .act = M40_ACT_F32,
                /* the same batches both times: the auto width follows measured step
                 * times, and a batch's width picks the kernels (their sums' order) */
                .width = M40_ENGINE_WIDTH_ALL,
        };
        const char *name = base_name(path);
        static struct sseq a[N_SETS], b[N_SETS];
        struct m40_engine *e = NULL;
        struct m40_engine_model mi;
        struct cpu_view v;
        uint32_t same = 0;
        char err[512] = "";
        int r;

        r = m40_cuda_engine_new(test_model_file(path, err, sizeof(err)), &lim, 0, &e, err,
                                sizeof(err));
        if (r) {
                fail("%s: cuda engine: %d %s", path, r, err);
                return;
        }
        m40_engine_model(e, &mi);
        r = view_init(&v, mi.n_vocab);
        r = r ? r : sample_drive(e, &v, n_sets, n_gen, name, a);
        r = r ? r : sample_drive(e, &v, n_sets, n_gen, name, b);
        if (r) {
                fail("%s sampled: %d (%s) %s", name, r, m40_strerror(r), m40_cuda_last_error());
        } else {
                for (uint32_t s = 0; s < n_sets; s++)
                        same += a[s].n_hist == b[s].n_hist &&
                                !memcmp(a[s].hist, b[s].hist, a[s].n_hist * sizeof(int32_t));
                CHECK(same == n_sets, "%s sampled: %u of %u sequences repeat their tokens", name,
                      same, n_sets);
                CHECK(v.n_near * 100 <= v.n_draws, "%s sampled: %u of %u draws near a boundary",
                      name, v.n_near, v.n_draws);
                printf("%-28s sampled %u seqs x %u tokens, twice: %u draws, %u exact, %u "
                       "tolerated boundary picks; %u/%u seqs repeat\n",
                       name, n_sets, n_gen, v.n_draws, v.n_exact, v.n_near, same, n_sets);
        }
        view_done(&v);
        m40_engine_free(e);
}

int main(int argc, char **argv)
{
        const int quick = quick_mode();
        int code, n_sampled = 0;
        struct m40_cuda_device *d = gpu_open(&code);

        if (!d)
                return code;
        m40_cuda_device_free(d);
        for (int i = 1; i < argc; i++) {
                FILE *f = fopen(argv[i], "rb");

                if (!f) {
                        printf("SKIP %s: not found\n", argv[i]);
                        continue;
                }
                fclose(f);
                if (!n_sampled && !quick)
                        kv_sizes(argv[i]);
                one_model(argv[i], quick ? 16 : 64);
                if (n_sampled++ < (quick ? 1 : 2))
                        sampled(argv[i], quick == 2 ? 4 : N_SETS, quick == 2 ? 4 : quick ? 8 : 48);
        }
        return finish();
}
