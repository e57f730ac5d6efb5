/* cuda/kernels/sample.h - on-device sampling: the CPU engine's sampler (daemon/engine/sampler.h) on
 * the GPU, one block per logits row, so that only token ids cross PCIe.
 *
 * Owns the contract of k_sample (cuda/kernels/sample.cu) and the per-row job it reads. For each
 * row it applies, in m40_sampler_sample()'s order and with its float/double arithmetic:
 * repeat/frequency/presence penalties over the last penalty_last_n tokens of the
 * sequence's history (prompt included), then greedy argmax (temperature <= 0, lowest id
 * on ties), or top-k, top-p, min-p and temperature, then the draw from the sequence's
 * splitmix64 state (advanced exactly as the CPU sampler does). Candidates are ordered as
 * the CPU's qsort (logit descending, id ascending on ties, -0 == +0); nothing sorts the
 * whole vocabulary: thresholds are found by radix selection on the logits' bits, and
 * only the final few survivors (at most 2048) are sorted.
 *
 * Tolerance: the greedy path, top-k, min-p and the RNG state are exact. The probability
 * masses of top-p and of the draw are sums of expf() weights (float, compensated argument)
 * in exact 64-bit fixed point, where the CPU sums exp() in double in sorted order; the
 * normalized cumulative probability the device uses differs from the CPU's by at most
 * M40_CUDA_SAMPLE_EPS. So when the draw u (or top_p) lies within that distance of a
 * cumulative-probability boundary of the CPU's sorted candidates, the device may pick the
 * neighbouring token (or cut top-p one candidate earlier or later); otherwise it picks the
 * CPU's token. NaN logits are outside the contract of the draw (the CPU's qsort order is
 * undefined for them); greedy handles them as the CPU does.
 *
 * Plain C11 (includes no CUDA header); launchers are asynchronous on `stream`, allocate
 * nothing, and return 0, -EINVAL or M40_ECUDA (m40_cuda_last_error() says why). */
#ifndef M40_CUDA_SAMPLE_H
#define M40_CUDA_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "cuda/runtime/launch.h"
#include "engine/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;

#define M40_CUDA_SAMPLE_EPS 1e-6 /* see the tolerance above */

/* One row's job: struct m40_sampling's parameters, the rng state and the history. */
struct m40_cuda_sample_row {
        float temperature, top_p, min_p;
        float repeat_penalty, frequency_penalty, presence_penalty;
        int32_t top_k, penalty_last_n;
        uint64_t rng;      /* in: the state before the token; out: after it (as the CPU) */
        int32_t *hist;     /* device: the sequence's tokens, oldest first; NULL if n_hist 0 */
        uint32_t n_hist;   /* tokens in hist (only the penalty window is read) */
        uint32_t hist_cap; /* the token is also stored at hist[n_hist] when n_hist < hist_cap */
};

/* m40_cuda_sample_row_set - fill *r from p, the rng state and the history. */
static inline void m40_cuda_sample_row_set(struct m40_cuda_sample_row *r,
                                           const struct m40_sampling *p, uint64_t rng,
                                           int32_t *hist, uint32_t n_hist, uint32_t hist_cap)
{
        r->temperature = p->temperature;
        r->top_p = p->top_p;
        r->min_p = p->min_p;
        r->repeat_penalty = p->repeat_penalty;
        r->frequency_penalty = p->frequency_penalty;
        r->presence_penalty = p->presence_penalty;
        r->top_k = p->top_k;
        r->penalty_last_n = p->penalty_last_n;
        r->rng = rng;
        r->hist = hist;
        r->n_hist = n_hist;
        r->hist_cap = hist_cap;
}

/* m40_cuda_sample_uses_hist - whether p's penalties read the history (as sampler.c). */
static inline int m40_cuda_sample_uses_hist(const struct m40_sampling *p)
{
        return p->penalty_last_n != 0 &&
               (p->repeat_penalty != 1.0f || p->frequency_penalty != 0.0f ||
                p->presence_penalty != 0.0f);
}

/* m40_cuda_sample_rng_next - the rng state after one token sampled with temperature: one
 * splitmix64 step unless greedy, as m40_sampler_sample() (what k_sample writes back), so
 * the host can follow the state without reading it back. */
static inline uint64_t m40_cuda_sample_rng_next(float temperature, uint64_t rng)
{
        return temperature <= 0.0f ? rng : rng + 0x9e3779b97f4a7c15ull;
}

/* m40_cuda_sample_work_bytes - device scratch for m40_cuda_sample() on up to max_rows rows
 * of n_vocab logits (a token count per vocabulary entry per row, and the keys of the
 * first pass over a row: 1 KiB per row). */
size_t m40_cuda_sample_work_bytes(uint32_t n_vocab, uint32_t max_rows);

/* m40_cuda_sample_work_init - zero that scratch (once, before its first use; the kernel
 * leaves it zeroed). */
int m40_cuda_sample_work_init(void *work, uint32_t n_vocab, uint32_t max_rows,
                              struct CUstream_st *stream);

/* m40_cuda_sample - for r < n_rows: ret[r] = the token m40_sampler_sample() picks for
 * logits row r (n_vocab floats, ld apart) with rows[r]'s parameters, history and rng
 * state; rows[r].rng becomes the state after it, and the token is appended to rows[r].hist
 * when there is room. All pointers are device memory; rows[r].hist of different rows must
 * not overlap. The logits rows are overwritten (the history's entries get their penalized
 * values). work: m40_cuda_sample_work_bytes(n_vocab, n_rows) bytes, initialized.
 * n_vocab < 2^24. */
int m40_cuda_sample(float *logits, size_t ld, uint32_t n_vocab, struct m40_cuda_sample_row *rows,
                    uint32_t n_rows, void *work, int32_t *ret, struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif

#endif
