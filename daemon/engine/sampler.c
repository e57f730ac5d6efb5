/* sampler.c - the sampling chain (see sampler.h and struct m40_sampling in engine.h). */
#include "sampler.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int m40_sampler_scratch_init(struct m40_sampler_scratch *s, uint32_t n_vocab)
{
        s->n_vocab = n_vocab;
        s->cand = malloc((size_t)n_vocab * sizeof(*s->cand));
        s->counts = calloc(n_vocab, sizeof(*s->counts));
        s->probs = malloc((size_t)n_vocab * sizeof(*s->probs));
        if (!s->cand || !s->counts || !s->probs) {
                m40_sampler_scratch_done(s);
                return -ENOMEM;
        }
        return 0;
}

void m40_sampler_scratch_done(struct m40_sampler_scratch *s)
{
        free(s->cand);
        free(s->counts);
        free(s->probs);
        s->cand = NULL;
        s->counts = NULL;
        s->probs = NULL;
}

/* The ranges of sampler.h's m40_sampler_param_check(), in the order of struct m40_sampling. */
static const struct range {
        const char *name;
        double lo, hi;
        bool integer;
        const char *words;
} ranges[] = {
        {"temperature", -HUGE_VAL, 100, false, "a number <= 100 (<= 0: greedy)"},
        {"top_k", INT32_MIN, INT32_MAX, true, "an integer (<= 0: off)"},
        {"top_p", 0, HUGE_VAL, false, "a number >= 0 (0 and >= 1: off)"},
        {"min_p", -HUGE_VAL, 1, false, "a number <= 1 (<= 0: off)"},
        {"repeat_penalty", 0.01, 100, false, "a number in 0.01..100 (1: off)"},
        {"frequency_penalty", -100, 100, false, "a number in -100..100 (0: off)"},
        {"presence_penalty", -100, 100, false, "a number in -100..100 (0: off)"},
        {"penalty_last_n", -1, INT32_MAX, true, "an integer >= -1 (0: off, -1: all)"},
};

int m40_sampler_param_check(const char *name, double x, const char **ret_range)
{
        for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
                const struct range *r = &ranges[i];

                if (strcmp(name, r->name))
                        continue;
                if (ret_range)
                        *ret_range = r->words;
                if (!isfinite(x) || x < r->lo || x > r->hi || (r->integer && x != floor(x)))
                        return -EINVAL;
                return 0;
        }
        return -ENOENT;
}

int m40_sampler_params_check(const struct m40_sampling *p, const char **ret_name,
                             const char **ret_range)
{
        const double v[] = {p->temperature,
                            p->top_k,
                            p->top_p,
                            p->min_p,
                            p->repeat_penalty,
                            p->frequency_penalty,
                            p->presence_penalty,
                            p->penalty_last_n};

        static_assert(sizeof(v) / sizeof(v[0]) == sizeof(ranges) / sizeof(ranges[0]),
                      "one range per field");
        for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
                if (m40_sampler_param_check(ranges[i].name, v[i], ret_range)) {
                        *ret_name = ranges[i].name;
                        return -EINVAL;
                }
        }
        return 0;
}

static uint64_t splitmix64(uint64_t *x)
{
        uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
}

uint64_t m40_sampler_seed(uint64_t seed)
{
        uint64_t x = seed;

        return splitmix64(&x);
}

int32_t m40_sampler_argmax(const float *x, size_t n)
{
        size_t best = 0;

        for (size_t i = 1; i < n; i++)
                if (x[i] > x[best])
                        best = i;
        return (int32_t)best;
}

static int cand_desc(const void *a, const void *b)
{
        const struct m40_cand *x = a, *y = b;

        if (x->logit != y->logit)
                return x->logit > y->logit ? -1 : 1;
        return x->id < y->id ? -1 : x->id > y->id;
}

static void penalize(const struct m40_sampling *p, struct m40_cand *c, const int32_t *hist,
                     size_t n_hist, uint32_t *counts)
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
                float l;

                if (!n)
                        continue; /* already applied */
                l = c[id].logit;
                if (p->repeat_penalty > 0.0f && p->repeat_penalty != 1.0f)
                        l = l <= 0.0f ? l * p->repeat_penalty : l / p->repeat_penalty;
                l -= (float)n * p->frequency_penalty + p->presence_penalty;
                c[id].logit = l;
                counts[id] = 0;
        }
}

int32_t m40_sampler_sample(const struct m40_sampling *p, uint64_t *rng, const float *logits,
                           const int32_t *hist, size_t n_hist, struct m40_sampler_scratch *s)
{
        struct m40_cand *c = s->cand;
        size_t n = s->n_vocab;
        double sum = 0.0, r;

        for (size_t i = 0; i < n; i++) {
                c[i].id = (int32_t)i;
                c[i].logit = logits[i];
        }
        penalize(p, c, hist, n_hist, s->counts);
        if (p->temperature <= 0.0f) {
                size_t best = 0;

                for (size_t i = 1; i < n; i++)
                        if (c[i].logit > c[best].logit)
                                best = i;
                return c[best].id;
        }
        if (p->top_k > 0 && (size_t)p->top_k < n) {
                /* keep the top_k best: sort only when it shrinks the set */
                qsort(c, n, sizeof(*c), cand_desc);
                n = (size_t)p->top_k;
        } else {
                qsort(c, n, sizeof(*c), cand_desc);
        }
        /* probabilities at temperature 1 for the filters */
        for (size_t i = 0; i < n; i++) {
                s->probs[i] = exp((double)c[i].logit - (double)c[0].logit);
                sum += s->probs[i];
        }
        if (p->top_p > 0.0f && p->top_p < 1.0f) {
                double cum = 0.0;

                for (size_t i = 0; i < n; i++) {
                        cum += s->probs[i] / sum;
                        if (cum >= p->top_p) {
                                n = i + 1;
                                break;
                        }
                }
        }
        if (p->min_p > 0.0f) {
                size_t keep = 1;

                while (keep < n && s->probs[keep] >= p->min_p * s->probs[0])
                        keep++;
                n = keep;
        }
        sum = 0.0;
        for (size_t i = 0; i < n; i++) {
                s->probs[i] = exp(((double)c[i].logit - (double)c[0].logit) / p->temperature);
                sum += s->probs[i];
        }
        r = (double)(splitmix64(rng) >> 11) * 0x1p-53 * sum;
        for (size_t i = 0; i < n; i++) {
                r -= s->probs[i];
                if (r < 0.0)
                        return c[i].id;
        }
        return c[n - 1].id;
}
