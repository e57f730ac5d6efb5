/* cuda/engine/cuda_forward.h - the CUDA engine's model on the device and its forward pass.
 *
 * Owns the device side of one loaded model: the GPU, the allocator arena (weights as the
 * GGUF's data section byte for byte, the small float vectors, the KV page pool, the
 * activation scratch), the RoPE table, one stream, and the per-step transfer of token ids,
 * positions and block tables. The math is forward.c's in M40_ACT_F32 mode, one kernel
 * launch per op (cuda/kernels/ops.h, cuda/kernels/matvec.h; cuBLAS SGEMM on dequantized
 * weight tiles for steps of many tokens, cuda/kernels/gemm.h). Hyperparameters and the host
 * copies of the small vectors come from the model every engine shares
 * (daemon/engine/model.h), the step's tokens from the engine core's planner
 * (struct m40_fwd_tok, engine/types.h). */
#ifndef M40_CUDA_CUDA_FORWARD_H
#define M40_CUDA_CUDA_FORWARD_H

#include <stdint.h>

#include "engine/model.h"
#include "engine/types.h"

struct m40_cuda_fwd;
struct m40_cuda_alloc;
struct CUstream_st;

/* m40_cuda_fwd_new - put model m on GPU `device` with room for max_tokens tokens per
 * pass, max_rows logits rows, max_ctx positions, n_pages KV pages of page_tokens
 * positions (page_tokens * n_layers * kv_dim * 2 f16 each; n_pages 0: as many as the
 * free memory leaves room for, struct m40_cuda_alloc_config's kv_pages 0, at least
 * ceil(max_ctx / page_tokens) and at most max_rows times that; the pool's
 * m40_cuda_alloc_stats() say how many it got); vram_limit_mb as
 * struct m40_cuda_alloc_config (0: none); extra_scratch more bytes of scratch for the
 * caller to take from m40_cuda_fwd_alloc() (each block rounded up to
 * M40_CUDA_ALLOC_ALIGN); load: how the weights are read (progress and note callbacks;
 * NULL: the loader's defaults). Returns 0 and *ret; -errno, M40_ENODEVICE,
 * M40_EUNSUPPORTED, M40_ECUDA with a message in err. m must outlive the result. */
struct m40_cuda_load_opts;
int m40_cuda_fwd_new(const struct m40_model *m, int device, uint32_t max_tokens, uint32_t max_rows,
                     uint32_t max_ctx, uint32_t n_pages, uint32_t page_tokens,
                     uint64_t vram_limit_mb, uint64_t extra_scratch,
                     const struct m40_cuda_load_opts *load, struct m40_cuda_fwd **ret, char *err,
                     size_t errlen);

/* m40_cuda_fwd_persistent - run the one-token steps from now on in the persistent step
 * kernel (cuda/kernels/persist_step.h). 0; -ENOTSUP with the reason in err when the
 * model is not one it takes (f then goes on per step); M40_ECUDA, -ENOMEM. */
int m40_cuda_fwd_persistent(struct m40_cuda_fwd *f, char *err, size_t errlen);

/* m40_cuda_fwd_free - accepts NULL; returns NULL. */
struct m40_cuda_fwd *m40_cuda_fwd_free(struct m40_cuda_fwd *f);

/* m40_cuda_fwd_run - run n tokens (the contract of m40_fwd_run(), tables of at most
 * max_ctx positions) and, for the n_rows tokens with logit_row >= 0 (rows 0..n_rows-1),
 * either copy the logits to logits (n_rows, n_vocab) on the host when logits != NULL,
 * or put each row's argmax into argmax (n_rows), or, both NULL, leave them in
 * m40_cuda_fwd_logits() and return once the work is queued on m40_cuda_fwd_stream()
 * (the caller synchronizes it; errors of queued work show there). Else synchronous.
 * Returns 0, or M40_ECUDA (m40_cuda_last_error() says why; m40_cuda_gemm_last_error()
 * when cuBLAS failed), -EINVAL, -E2BIG. */
int m40_cuda_fwd_run(struct m40_cuda_fwd *f, const struct m40_fwd_tok *toks, uint32_t n,
                     uint32_t n_rows, float *logits, int32_t *argmax);

/* m40_cuda_fwd_alloc / _stream / _logits - f's allocator (for the extra_scratch bytes),
 * the stream every step runs on, and the device logits (max_rows, n_vocab) of the last
 * m40_cuda_fwd_run(). Borrowed: valid until m40_cuda_fwd_free(). */
struct m40_cuda_alloc *m40_cuda_fwd_alloc(struct m40_cuda_fwd *f);
struct CUstream_st *m40_cuda_fwd_stream(struct m40_cuda_fwd *f);
float *m40_cuda_fwd_logits(struct m40_cuda_fwd *f);

#endif
