/* sampler.c - the sampling chain (see sampler.h and struct m40_sampling in engine.h). */
#include "sampler.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

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
