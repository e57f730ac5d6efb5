/* cuda/engine/cuda_engine.h - the per-op CUDA engine: the engine interface (engine.h) on one GPU.
 *
 * Owns nothing beyond its constructor: the engine it returns is used only through the
 * m40_engine_* functions of daemon/engine/engine.h and freed with m40_engine_free().
 * It is the engine core of the CPU engine (daemon/engine/core.h: slots, the step policy
 * of engine.h through the same planner, plan.c: decode first, prompts chunked by
 * prefill_chunk and max_batch_tokens; events, stop conditions, KV pages and their
 * reservation) over a forward pass and sampling on the device, and computes the
 * CPU engine's M40_ACT_F32 specification with one kernel launch per op, so greedy
 * continuations match the CPU engine run with M40_ACT_F32 and logits agree to FP32
 * rounding. Every logits row is sampled on the device by cuda/kernels/sample.h, the chain of
 * sampler.h with the same per-sequence rng: greedy, top-k, min-p and penalties are exact,
 * the top-p cut and the draw within the tolerance that sample.h states. Sequences with
 * keep_logits also copy their raw (pre-penalty) logits to the host each step, for
 * m40_engine_logits(). Link: m40cudaengine_dep together with m40engine_dep. */
#ifndef M40_CUDA_CUDA_ENGINE_H
#define M40_CUDA_CUDA_ENGINE_H

#include <stddef.h>

#include "engine/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* m40_cuda_engine_new - load the parsed GGUF g (m40_gguf_open(); borrowed: the caller
 * frees it after the engine) onto CUDA device `device` (ordinal; 0 is the first GPU) and
 * return an engine in *ret (free it with m40_engine_free()). The file is read through g's
 * open descriptor (m40_gguf_fd(): the small tensors through a mapping, the weights by the
 * loader, cuda/runtime/loader.h); its path is not opened again.
 *
 * lim may be NULL; every field 0 means the engine core's default (16 slots, max_ctx
 * min(train ctx, 4096), page_tokens 16, max_batch_tokens 256) but kv_bytes: 0 sizes the
 * KV cache from the device, every page the GPU's free memory (or vram_limit_mb) leaves
 * room for after the weights, the scratch and the allocator's headrooms (cuda/runtime/alloc.h:
 * M40_CUDA_ALLOC_HEADROOM + M40_CUDA_ALLOC_FILL_HEADROOM), at most enough for max_seqs
 * sequences at max_ctx and at least for one (m40_engine_stats() tells how many pages it
 * got); n_threads is ignored; act 0 (default) and M40_ACT_F32
 * both mean float32 activations; M40_ACT_GGML gives M40_EUNSUPPORTED. max_ctx - 1 must
 * be at most M40_CUDA_ATTN_MAX_POS and head_dim at most 512. All device memory (the
 * weights, KV pages, activations for max_batch_tokens tokens, max_seqs logits rows) is
 * taken here in one arena; steps allocate no device memory.
 *
 * Returns 0; on failure -errno (-EINVAL bad limits, -ENOMEM), M40_EFORMAT /
 * M40_EUNSUPPORTED (the file), M40_ENODEVICE (no such GPU), M40_ECUDA (the runtime's
 * message is in err), with a one-line message in err (may be NULL); nothing is left
 * allocated. Not thread-safe: one thread drives the engine (and the GPU's current device
 * is set on that thread). m40_engine_step() returns M40_ECUDA when a launch fails
 * (m40_cuda_last_error() has the message); the step is then undone (the same tokens run
 * again next step) unless the CUDA context itself is lost. */
int m40_cuda_engine_new(struct m40_gguf *g, const struct m40_engine_limits *lim, int device,
                        struct m40_engine **ret, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
