/* tests/gpu/test_sample.c - on-device sampling (cuda/kernels/sample.h) against the CPU engine's
 * sampler (m40_sampler_sample(), daemon/engine/sampler.c).
 *
 * Owns the checks that for random logits rows (vocabularies of 1 to 128257 entries, ragged
 * sizes included), random histories and random sampling parameters (every option alone,
 * then random combinations; edge cases: exact ties, -0/+0, all -inf but one, all -inf,
 * +inf entries, logits of +-1e30, temperature tiny/huge/infinite, top_k above the
 * vocabulary, top_p 0 and 1, min_p above 1, penalties with repeat_penalty <= 0), each
 * configuration drawn on many rows with different rng states in one launch:
 *   - the device's rng state after the token equals the CPU's, and
 *     m40_cuda_sample_rng_next()'s;
 *   - the penalized logits the kernel leaves in the row equal the CPU's penalize()
 *     bit for bit (transcribed below), and the token is appended to the history;
 *   - greedy, top-k-only cuts, min-p and non-finite cases pick the CPU's token exactly;
 *   - a draw picks the CPU's token, or (the tolerance of sample.h) a different one only
 *     when, for the CPU's sorted candidates, the draw u lies within M40_CUDA_SAMPLE_EPS of
 *     every cumulative-probability boundary between the two tokens, possibly after a
 *     top-p cut that itself lies within M40_CUDA_SAMPLE_EPS of top_p. Such near-boundary
 *     picks are counted and printed; more than 1% of the draws fails the test.
 * Every row's token is written (the output is poisoned first). Fresh random inputs on every
 * run (seed printed; M40_TEST_SEED repeats one). M40_TEST_QUICK=1: fewer, smaller cases
 * (compute-sanitizer memcheck); 2: fewer still (racecheck).
 *
 * Exit 0 pass, 1 fail, 77 skip (no GPU, or a build without CUDA). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef M40_HAVE_CUDA

int main(void)
{
        printf("SKIP: this build has no CUDA (meson -Dcuda=enabled)\n");
        return 77;
}

#else

#include <cuda_runtime_api.h>

#include "cuda/kernels/sample.h"
#include "engine/sampler.h"
#include "gputest.h"

#define EPS      M40_CUDA_SAMPLE_EPS
#define MIN_EPS  1e-12 /* min-p: both sides compare exp() in double */
#define MAX_ROWS 64

static uint64_t seed;
static uint64_t n_draws, n_exact, n_near, n_cases;

enum lkind {
        L_NORMAL,
        L_PEAKED,
        L_TIES,
        L_ONE_FINITE,
        L_ALL_NEGINF,
        L_POSINF,
        L_ZEROS,
        L_HUGE,
        L_SOME_NEGINF,
        L_COUNT
};
static const char *const lname[L_COUNT] = {"normal",  "peaked", "ties", "one-finite", "all-inf",
                                           "pos-inf", "zeros",  "huge", "some-inf"};

/* One configuration: the logits, the history and the parameters. */
struct cfg {
        uint32_t n;
        int kind;
        float *logits; /* (n) */
        int32_t *hist; /* (n_hist) */
        uint32_t n_hist;
        struct m40_sampling sp;
};

/* The CPU's view of one configuration, for judging a different pick. */
struct ref {
        float *pen;     /* (n) penalized logits */
        int32_t *order; /* (n) ids in the CPU's sorted order */
        uint32_t *rank; /* (n) rank of each id */
        double *p1;     /* (n) exp(l - l0), as the CPU's first probs */
        uint32_t n_k;   /* candidates after top-k */
        uint32_t n_alt; /* top-p cuts to consider */
        uint32_t *alt;  /* (n) */
        double *q;      /* (n) scratch */
};

static struct m40_sampler_scratch cpu;

static uint32_t urand(uint32_t n)
{
        return n ? (uint32_t)(rng_next(&seed) % n) : 0;
}

static void make_logits(struct cfg *c)
{
        const uint32_t n = c->n;
        const float sigma = (float[]){0.5f, 2.0f, 5.0f}[urand(3)];

        for (uint32_t i = 0; i < n; i++) {
                float v = rng_normal(&seed) * sigma;

                switch (c->kind) {
                case L_PEAKED:
                        v = rng_normal(&seed) * 2.0f + (urand(1000) == 0 ? 12.0f : 0.0f);
                        break;
                case L_TIES:
                        v = roundf(rng_normal(&seed) * 2.0f) / 2.0f;
                        break;
                case L_ONE_FINITE:
                case L_ALL_NEGINF:
                        v = -INFINITY;
                        break;
                case L_POSINF:
                        if (urand(500) == 0)
                                v = INFINITY;
                        break;
                case L_ZEROS:
                        v = urand(2) ? 0.0f : -0.0f;
                        break;
                case L_HUGE:
                        if (urand(50) == 0)
                                v = urand(2) ? 1e30f : -1e30f;
                        break;
                case L_SOME_NEGINF:
                        if (urand(10) == 0)
                                v = -INFINITY;
                        break;
                default:
                        break;
                }
                c->logits[i] = v;
        }
        if (c->kind == L_ONE_FINITE)
                c->logits[urand(n)] = rng_normal(&seed);
        if (c->kind == L_POSINF)
                c->logits[urand(n)] = INFINITY;
}

static void make_hist(struct cfg *c, uint32_t max_hist)
{
        static const uint32_t lens[] = {0, 1, 7, 50, 300, 3000};
        const uint32_t pool = 1 + urand(c->n < 64 ? c->n : 64);
        const uint32_t base = urand(c->n);

        c->n_hist = lens[urand(sizeof(lens) / sizeof(lens[0]))];
        if (c->n_hist > max_hist)
                c->n_hist = max_hist;
        /* a small pool of ids, so ids repeat (counts > 1) */
        for (uint32_t i = 0; i < c->n_hist; i++)
                c->hist[i] = (int32_t)(urand(3) ? (base + urand(pool)) % c->n : urand(c->n));
}

/* penalize - sampler.c's penalize(), transcribed (the kernel's result must match it bit
 * for bit). */
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
                float v, f;

                if (!n)
                        continue;
                v = l[id];
                if (p->repeat_penalty > 0.0f && p->repeat_penalty != 1.0f)
                        v = v <= 0.0f ? v * p->repeat_penalty : v / p->repeat_penalty;
                f = (float)n * p->frequency_penalty;
                f = f + p->presence_penalty;
                v = v - f;
                l[id] = v;
                counts[id] = 0;
        }
}

static const float *sort_logits;

static int by_logit(const void *a, const void *b)
{
        const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

        if (sort_logits[x] != sort_logits[y])
                return sort_logits[x] > sort_logits[y] ? -1 : 1;
        return x < y ? -1 : x > y;
}

/* ref_make - the CPU's sorted candidates, its top-k cut and the top-p cuts within EPS. */
static void ref_make(struct ref *rf, const struct cfg *c, uint32_t *counts)
{
        const uint32_t n = c->n;
        const struct m40_sampling *p = &c->sp;
        double sum = 0.0, cum = 0.0;

        memcpy(rf->pen, c->logits, n * sizeof(float));
        penalize(p, rf->pen, c->hist, c->n_hist, counts);
        for (uint32_t i = 0; i < n; i++)
                rf->order[i] = (int32_t)i;
        sort_logits = rf->pen;
        qsort(rf->order, n, sizeof(int32_t), by_logit);
        for (uint32_t i = 0; i < n; i++)
                rf->rank[rf->order[i]] = i;
        rf->n_k = p->top_k > 0 && (uint32_t)p->top_k < n ? (uint32_t)p->top_k : n;
        for (uint32_t i = 0; i < rf->n_k; i++) {
                rf->p1[i] = exp((double)rf->pen[rf->order[i]] - (double)rf->pen[rf->order[0]]);
                sum += rf->p1[i];
        }
        rf->n_alt = 0;
        if (p->top_p > 0.0f && p->top_p < 1.0f) {
                uint32_t cut = rf->n_k;

                for (uint32_t i = 0; i < rf->n_k; i++) {
                        cum += rf->p1[i] / sum;
                        if (cum >= p->top_p) {
                                cut = i + 1;
                                break;
                        }
                }
                rf->alt[rf->n_alt++] = cut;
                cum = 0.0;
                for (uint32_t i = 0; i < rf->n_k; i++) {
                        cum += rf->p1[i] / sum;
                        if (fabs(cum - p->top_p) <= EPS && i + 1 != cut)
                                rf->alt[rf->n_alt++] = i + 1;
                        if (cum > p->top_p + 2 * EPS)
                                break;
                }
        } else {
                rf->alt[rf->n_alt++] = rf->n_k;
        }
}

/* draw_index - the CPU's pick among the first n sorted candidates for draw u. */
static uint32_t draw_index(struct ref *rf, float temp, uint32_t n, double u, double *ret_sum)
{
        const double l0 = rf->pen[rf->order[0]];
        double sum = 0.0, r;

        for (uint32_t i = 0; i < n; i++) {
                rf->q[i] = exp(((double)rf->pen[rf->order[i]] - l0) / temp);
                sum += rf->q[i];
        }
        *ret_sum = sum;
        r = u * sum;
        for (uint32_t i = 0; i < n; i++) {
                r -= rf->q[i];
                if (r < 0.0)
                        return i;
        }
        return n - 1;
}

/* near_ok - whether the device's pick dev is the CPU's under some admissible cut (top-p
 * within EPS, min-p within MIN_EPS), or is within EPS of it in cumulative probability. */
static bool near_ok(struct ref *rf, const struct m40_sampling *p, double u, uint32_t dev)
{
        for (uint32_t a = 0; a < rf->n_alt; a++) {
                const uint32_t n = rf->alt[a];
                uint32_t keeps[3], n_keeps = 0, keep = n;

                if (p->min_p > 0.0f) {
                        keep = 1;
                        while (keep < n && rf->p1[keep] >= p->min_p * rf->p1[0])
                                keep++;
                        if (keep < n && fabs(rf->p1[keep] - p->min_p) <= MIN_EPS * p->min_p)
                                keeps[n_keeps++] = keep + 1;
                        if (keep > 1 && fabs(rf->p1[keep - 1] - p->min_p) <= MIN_EPS * p->min_p)
                                keeps[n_keeps++] = keep - 1;
                }
                keeps[n_keeps++] = keep;
                for (uint32_t k = 0; k < n_keeps; k++) {
                        double sum, cum = 0.0;
                        const uint32_t m = keeps[k];
                        const uint32_t cpu_i = draw_index(rf, p->temperature, m, u, &sum);
                        uint32_t lo, hi;
                        bool ok = true;

                        if (dev >= m)
                                continue;
                        if (dev == cpu_i)
                                return true;
                        lo = dev < cpu_i ? dev : cpu_i;
                        hi = dev < cpu_i ? cpu_i : dev;
                        for (uint32_t i = 0; i < hi && ok; i++) {
                                cum += rf->q[i] / sum;
                                if (i >= lo && fabs(u - cum) > EPS)
                                        ok = false;
                        }
                        if (ok)
                                return true;
                }
        }
        return false;
}

/* run_cfg - R draws of configuration c on the device against the CPU. */
static void run_cfg(struct cfg *c, uint32_t R, struct ref *rf, uint32_t *counts)
{
        const uint32_t n = c->n;
        const size_t hcap = c->n_hist + 1;
        struct m40_cuda_sample_row rows[MAX_ROWS];
        int32_t tok[MAX_ROWS], *hist_h = NULL, *d_hist = NULL, *d_tok = NULL;
        float *d_x = NULL, *pen_h = NULL;
        struct m40_cuda_sample_row *d_rows = NULL;
        void *d_work = NULL;
        uint64_t rng0[MAX_ROWS];
        const bool greedy = c->sp.temperature <= 0.0f;
        int r;

        n_cases++;
        ref_make(rf, c, counts);
        pen_h = malloc((size_t)n * sizeof(float));
        hist_h = malloc(hcap * R * sizeof(int32_t));
        if (!pen_h || !hist_h ||
            cudaMalloc((void **)&d_x, (size_t)n * R * sizeof(float)) != cudaSuccess ||
            cudaMalloc((void **)&d_hist, hcap * R * sizeof(int32_t)) != cudaSuccess ||
            cudaMalloc((void **)&d_tok, R * sizeof(int32_t)) != cudaSuccess ||
            cudaMalloc((void **)&d_rows, R * sizeof(*d_rows)) != cudaSuccess ||
            cudaMalloc(&d_work, m40_cuda_sample_work_bytes(n, R)) != cudaSuccess) {
                fail("n %u: cannot allocate", n);
                goto out;
        }
        for (uint32_t k = 0; k < R; k++) {
                if (cudaMemcpy(d_x + (size_t)k * n, c->logits, (size_t)n * sizeof(float),
                               cudaMemcpyHostToDevice) != cudaSuccess)
                        fail("upload");
                memcpy(hist_h + k * hcap, c->hist, c->n_hist * sizeof(int32_t));
                hist_h[k * hcap + c->n_hist] = -7;
                rng0[k] = m40_sampler_seed(rng_next(&seed));
                m40_cuda_sample_row_set(&rows[k], &c->sp, rng0[k], d_hist + k * hcap, c->n_hist,
                                        (uint32_t)hcap);
        }
        if (cudaMemcpy(d_hist, hist_h, hcap * R * sizeof(int32_t), cudaMemcpyHostToDevice) ||
            cudaMemcpy(d_rows, rows, R * sizeof(*d_rows), cudaMemcpyHostToDevice) ||
            cudaMemset(d_tok, 0xfe, R * sizeof(int32_t))) {
                fail("upload");
                goto out;
        }
        r = m40_cuda_sample_work_init(d_work, n, R, NULL);
        r = r ? r : m40_cuda_sample(d_x, n, n, d_rows, R, d_work, d_tok, NULL);
        if (r || cudaDeviceSynchronize() != cudaSuccess) {
                fail("n %u: m40_cuda_sample: %d (%s)", n, r, m40_cuda_last_error());
                goto out;
        }
        if (cudaMemcpy(tok, d_tok, R * sizeof(int32_t), cudaMemcpyDeviceToHost) ||
            cudaMemcpy(rows, d_rows, R * sizeof(*d_rows), cudaMemcpyDeviceToHost) ||
            cudaMemcpy(hist_h, d_hist, hcap * R * sizeof(int32_t), cudaMemcpyDeviceToHost)) {
                fail("download");
                goto out;
        }
        /* the penalized row, first and last */
        for (uint32_t k = 0; k < R; k += (R > 1 ? R - 1 : 1)) {
                if (cudaMemcpy(pen_h, d_x + (size_t)k * n, (size_t)n * sizeof(float),
                               cudaMemcpyDeviceToHost)) {
                        fail("download");
                        goto out;
                }
                for (uint32_t i = 0; i < n; i++)
                        if (memcmp(&pen_h[i], &rf->pen[i], sizeof(float))) {
                                fail("n %u %s row %u: penalized logit %u is %a, the CPU's %a "
                                     "(repeat %g freq %g presence %g last_n %d)",
                                     n, lname[c->kind], k, i, pen_h[i], rf->pen[i],
                                     c->sp.repeat_penalty, c->sp.frequency_penalty,
                                     c->sp.presence_penalty, c->sp.penalty_last_n);
                                break;
                        }
                if (R == 1)
                        break;
        }
        for (uint32_t k = 0; k < R; k++) {
                uint64_t rng = rng0[k], z;
                const int32_t want =
                        m40_sampler_sample(&c->sp, &rng, c->logits, c->hist, c->n_hist, &cpu);
                double u;

                n_draws++;
                CHECK(rows[k].rng == rng, "n %u row %u: rng state %016" PRIx64 ", CPU %016" PRIx64,
                      n, k, (uint64_t)rows[k].rng, rng);
                CHECK(m40_cuda_sample_rng_next(c->sp.temperature, rng0[k]) == rng,
                      "m40_cuda_sample_rng_next disagrees with the CPU");
                CHECK(hist_h[k * hcap + c->n_hist] == tok[k],
                      "n %u row %u: token %d not appended to the history (%d)", n, k, tok[k],
                      hist_h[k * hcap + c->n_hist]);
                if (tok[k] < 0 || (uint32_t)tok[k] >= n) {
                        fail("n %u row %u: token %d out of range (not written?)", n, k, tok[k]);
                        continue;
                }
                if (tok[k] == want) {
                        n_exact++;
                        continue;
                }
                /* the draw u of this row, as sampler.c */
                z = rng0[k] + 0x9e3779b97f4a7c15ull;
                z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
                z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
                z ^= z >> 31;
                u = (double)(z >> 11) * 0x1p-53;
                if (!greedy && isfinite(rf->pen[rf->order[0]]) &&
                    near_ok(rf, &c->sp, u, rf->rank[tok[k]])) {
                        n_near++;
                        printf("near boundary: n %u %s T %g k %d p %g min_p %g: u %.17g, "
                               "device %d (rank %u), CPU %d (rank %u)\n",
                               n, lname[c->kind], c->sp.temperature, c->sp.top_k, c->sp.top_p,
                               c->sp.min_p, u, tok[k], rf->rank[tok[k]], want, rf->rank[want]);
                        continue;
                }
                fail("n %u %s (T %g top_k %d top_p %g min_p %g rep %g freq %g pres %g last_n "
                     "%d, %u history) row %u: device token %d (rank %u), CPU %d (rank %u), u %.17g",
                     n, lname[c->kind], c->sp.temperature, c->sp.top_k, c->sp.top_p, c->sp.min_p,
                     c->sp.repeat_penalty, c->sp.frequency_penalty, c->sp.presence_penalty,
                     c->sp.penalty_last_n, c->n_hist, k, tok[k], rf->rank[tok[k]], want,
                     rf->rank[want], u);
        }
        /* the scratch (penalty counts and first-pass keys) is left zeroed for the next
         * launch */
        {
                const size_t wb = m40_cuda_sample_work_bytes(n, R);
                uint32_t *w = malloc(wb);

                if (w && cudaMemcpy(w, d_work, wb, cudaMemcpyDeviceToHost) == cudaSuccess) {
                        for (size_t i = 0; i < wb / sizeof(uint32_t); i++)
                                if (w[i]) {
                                        fail("n %u: work[%zu] = %u left nonzero", n, i, w[i]);
                                        break;
                                }
                }
                free(w);
        }
out:
        cudaFree(d_x);
        cudaFree(d_hist);
        cudaFree(d_tok);
        cudaFree(d_rows);
        cudaFree(d_work);
        free(pen_h);
        free(hist_h);
}

/* The parameter schedule: each option alone first, then random combinations. */
static void pick_params(struct cfg *c, uint32_t idx)
{
        static const float temps[] = {0.0f, 1e-30f, 0.1f, 0.7f, 1.0f, 1.5f, 1e30f, INFINITY};
        static const float top_ps[] = {0.0f, 1.0f, 1e-9f, 0.05f, 0.5f, 0.9f, 0.999f};
        static const float min_ps[] = {0.0f, 0.01f, 0.05f, 0.5f, 1.0f, 2.0f};
        static const float reps[] = {1.0f, 1.1f, 1.3f, 0.8f, 0.0f, -1.0f};
        const uint32_t n = c->n;
        const int32_t top_ks[] = {
                0, 1, 5, 40, (int32_t)(n - 1), (int32_t)n, (int32_t)n + 5, 2000, 3000, 70000};
        struct m40_sampling *p = &c->sp;

        *p = m40_sampling_default();
        p->temperature = 1.0f;
        switch (idx) {
        case 0: /* greedy */
                p->temperature = 0.0f;
                break;
        case 1: /* temperature alone */
                break;
        case 2:
                p->temperature = temps[1 + urand(7)];
                break;
        case 3:
                p->top_k = top_ks[urand(10)];
                break;
        case 4:
                p->top_p = top_ps[urand(7)];
                break;
        case 5:
                p->min_p = min_ps[urand(6)];
                break;
        case 6: /* penalties, greedy */
                p->temperature = 0.0f;
                /* fall through */
        case 7:
                p->repeat_penalty = reps[urand(6)];
                p->frequency_penalty = urand(2) ? 0.0f : (urand(2) ? 0.1f : -0.5f);
                p->presence_penalty = urand(2) ? 0.0f : 0.3f;
                if (p->repeat_penalty == 1.0f && p->frequency_penalty == 0.0f)
                        p->presence_penalty = 0.3f;
                p->penalty_last_n = (int32_t[]){64, -1, 5, 0, (int32_t)c->n_hist + 10}[urand(5)];
                break;
        default:
                p->temperature = temps[urand(8)];
                p->top_k = urand(2) ? 0 : top_ks[urand(10)];
                p->top_p = urand(2) ? 1.0f : top_ps[urand(7)];
                p->min_p = urand(2) ? 0.0f : min_ps[urand(6)];
                if (urand(2)) {
                        p->repeat_penalty = reps[urand(6)];
                        p->frequency_penalty = urand(2) ? 0.0f : 0.1f;
                        p->presence_penalty = urand(2) ? 0.0f : 0.3f;
                        p->penalty_last_n = (int32_t[]){64, -1, 5, 0}[urand(4)];
                }
                break;
        }
}

static void run_vocab(uint32_t n, uint32_t n_cfg, uint32_t R)
{
        struct cfg c = {.n = n};
        struct ref rf = {0};
        uint32_t *counts = calloc(n, sizeof(uint32_t));
        const uint32_t max_hist = 3000;
        uint64_t fails0 = (uint64_t)failures;

        c.logits = malloc((size_t)n * sizeof(float));
        c.hist = malloc(max_hist * sizeof(int32_t));
        rf.pen = malloc((size_t)n * sizeof(float));
        rf.order = malloc((size_t)n * sizeof(int32_t));
        rf.rank = malloc((size_t)n * sizeof(uint32_t));
        rf.p1 = malloc((size_t)n * sizeof(double));
        rf.alt = malloc(((size_t)n + 1) * sizeof(uint32_t));
        rf.q = malloc((size_t)n * sizeof(double));
        if (!counts || !c.logits || !c.hist || !rf.pen || !rf.order || !rf.rank || !rf.p1 ||
            !rf.alt || !rf.q || m40_sampler_scratch_init(&cpu, n)) {
                fail("n %u: out of memory", n);
                goto out;
        }
        for (uint32_t i = 0; i < n_cfg && (uint64_t)failures < fails0 + 5; i++) {
                /* the plain kinds most of the time, every edge kind now and then */
                c.kind = i < 8 ? (int)(i % 3) : (int)urand(L_COUNT);
                make_logits(&c);
                make_hist(&c, max_hist);
                pick_params(&c, i);
                run_cfg(&c, R, &rf, counts);
        }
        printf("n_vocab %6u: %u configurations x %u draws\n", n, n_cfg, R);
out:
        m40_sampler_scratch_done(&cpu);
        free(counts);
        free(c.logits);
        free(c.hist);
        free(rf.pen);
        free(rf.order);
        free(rf.rank);
        free(rf.p1);
        free(rf.alt);
        free(rf.q);
}

static void check_arguments(void)
{
        float *x = NULL;
        int32_t *t = NULL;
        struct m40_cuda_sample_row *rows = NULL;
        void *w = NULL;

        CHECK(m40_cuda_sample(NULL, 8, 8, NULL, 0, NULL, NULL, NULL) == 0, "n_rows 0 is a no-op");
        if (cudaMalloc((void **)&x, 64) || cudaMalloc((void **)&t, 64) ||
            cudaMalloc((void **)&rows, sizeof(*rows)) || cudaMalloc(&w, 64)) {
                fail("cannot allocate");
        } else {
                CHECK(m40_cuda_sample(x, 4, 8, rows, 1, w, t, NULL) == -EINVAL, "ld < n_vocab");
                CHECK(m40_cuda_sample(x, 8, 0, rows, 1, w, t, NULL) == -EINVAL, "n_vocab 0");
                CHECK(m40_cuda_sample(x, 8, 8, rows, 1, NULL, t, NULL) == -EINVAL, "no work");
                CHECK(m40_cuda_sample(x, 1u << 24, 1u << 24, rows, 1, w, t, NULL) == -EINVAL,
                      "n_vocab 2^24");
        }
        cudaFree(x);
        cudaFree(t);
        cudaFree(rows);
        cudaFree(w);
}

int main(void)
{
        static const uint32_t full[] = {1,    2,     3,     31,     1000,  2049,
                                        4099, 32000, 49152, 128256, 128257};
        static const uint32_t quick1[] = {1, 3, 1000, 4099, 32000, 128256};
        static const uint32_t quick2[] = {3, 1000, 4099};
        struct m40_cuda_device *d;
        int code, quick = quick_mode();
        const uint32_t *sizes = quick >= 2 ? quick2 : quick ? quick1 : full;
        const size_t n_sizes = quick >= 2 ? sizeof(quick2) / sizeof(quick2[0])
                               : quick    ? sizeof(quick1) / sizeof(quick1[0])
                                          : sizeof(full) / sizeof(full[0]);

        d = gpu_open(&code);
        if (!d)
                return code;
        seed = getenv("M40_TEST_SEED") ? strtoull(getenv("M40_TEST_SEED"), NULL, 0)
                                       : (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ULL + 1;
        printf("seed %" PRIu64 "%s; tolerance %g in cumulative probability\n", seed,
               quick ? " (quick mode)" : "", EPS);
        check_arguments();
        for (size_t i = 0; i < n_sizes; i++) {
                const uint32_t n = sizes[i];
                const uint32_t n_cfg = quick >= 2 ? 10 : quick ? 16 : n > 40000 ? 40 : 80;
                const uint32_t R = quick >= 2 ? 4 : quick ? 8 : n > 40000 ? 32 : MAX_ROWS;

                run_vocab(n, n_cfg, R);
        }
        printf("%" PRIu64 " configurations, %" PRIu64 " draws: %" PRIu64
               " the CPU's token, %" PRIu64 " a neighbour within the tolerance\n",
               n_cases, n_draws, n_exact, n_near);
        CHECK(n_near * 100 <= n_draws, "too many near-boundary picks (%" PRIu64 " of %" PRIu64 ")",
              n_near, n_draws);
        m40_cuda_device_free(d);
        return finish();
}

#endif
