/* cuda/kernels/ops.h - the per-token operations of a llama/qwen2 layer on the GPU (host launchers).
 *
 * Owns the contracts of the kernels between the matrix products (cuda/kernels/matvec.h): embedding
 * lookup, RMSNorm, bias and residual adds, SwiGLU, RoPE with the KV-cache append, attention
 * over the paged f16 KV cache (decode and causal prefill alike) and greedy argmax; and an
 * L2 prefetch hint, which computes nothing and has no reference. Each of the others
 * has its CPU reference in the CPU engine (daemon/engine/ops.h, forward.c, model.c,
 * sampler.h) and computes the same FP32 math; tolerances are stated in each kernel file.
 *
 * Activations are row-major (n_tok, ld) floats in device memory. The KV cache is the CPU
 * engine's layout (forward.h) with K and V side by side in one page: page i starts at
 * kv_base + i * page_elems f16 elements; K of (layer, slot) at
 * ((layer * page_tokens) + slot) * kv_dim, V at v_off + the same.
 *
 * Launchers are asynchronous on `stream`, allocate nothing, and return 0, -EINVAL for a
 * shape outside the contract, M40_EUNSUPPORTED for a weight type they do not handle, or
 * M40_ECUDA (m40_cuda_last_error() has the runtime's message). sm_52 or newer. Plain C11;
 * includes no CUDA header. */
#ifndef M40_CUDA_OPS_H
#define M40_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "cuda/runtime/launch.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;
struct m40_cuda_rms;

#define M40_CUDA_MAX_HEAD_DIM 512

/* m40_cuda_embed - y row t (dim floats, ld apart) = row tokens[t] of the table (n_vocab
 * rows of row_bytes in GGML type `type`), dequantized; the reference is m40_model_embed(). */
int m40_cuda_embed(const void *table, uint32_t type, size_t row_bytes, uint32_t dim,
                   const int32_t *tokens, uint32_t n_tok, float *y, size_t ld,
                   struct CUstream_st *stream);

/* m40_cuda_embed_rms - m40_cuda_embed(), and, when rms is set (n_tok at most
 * M40_CUDA_MATVEC_MAX_BATCH), what the fused RMSNorm's producer leaves (matvec.h):
 * rms->xg row t = y[t] * rms->g when g is set, and each token's sum of squares as
 * the partials a consumer adds up. */
int m40_cuda_embed_rms(const void *table, uint32_t type, size_t row_bytes, uint32_t dim,
                       const int32_t *tokens, uint32_t n_tok, float *y, size_t ld,
                       const struct m40_cuda_rms *rms, struct CUstream_st *stream);

/* m40_cuda_rmsnorm - y row r = rmsnorm(x row idx[r]) * w for r < n_rows (idx NULL: r),
 * eps as m40_cpu_rmsnorm(); w may be NULL. y may equal x only when idx is NULL. */
int m40_cuda_rmsnorm(const float *x, size_t ldx, const int32_t *idx, const float *w, uint32_t n,
                     float eps, uint32_t n_rows, float *y, size_t ldy, struct CUstream_st *stream);

/* m40_cuda_add - x[t][i] += y[t][i] for i < n, t < n_tok (both rows ld apart). */
int m40_cuda_add(float *x, const float *y, size_t ld, uint32_t n, uint32_t n_tok,
                 struct CUstream_st *stream);

/* m40_cuda_bias - x[t][i] += b[i] for i < n, t < n_tok. */
int m40_cuda_bias(float *x, const float *b, size_t ld, uint32_t n, uint32_t n_tok,
                  struct CUstream_st *stream);

/* m40_cuda_swiglu - gate[t][i] = silu(gate[t][i]) * up[t][i], as m40_cpu_swiglu(). */
int m40_cuda_swiglu(float *gate, const float *up, size_t ld, uint32_t n, uint32_t n_tok,
                    struct CUstream_st *stream);

/* The paged KV cache of one layer and the per-token placement of a step. */
struct m40_cuda_kv {
        uint16_t *base;    /* f16 pages */
        size_t page_elems; /* f16 elements between pages */
        size_t v_off;      /* elements from a page's K to its V */
        uint32_t layer, page_tokens, kv_dim;
        const uint32_t *pos;   /* (n_tok) position of each token */
        const uint32_t *tbl;   /* (n_tok) offset of each token's block table in pages */
        const uint32_t *pages; /* block tables, page ids in position order */
};

struct m40_cuda_rope {
        const float *cs; /* (max_pos, n_rot) cos, sin per pair, from m40_cpu_rope() */
        uint32_t n_rot;
        int neox;
};

/* m40_cuda_rope_store - rotate q (n_tok, ldq: n_heads heads of head_dim) and k (n_tok,
 * ldk: n_kv_heads heads) in place for each token's position, then store k and v (n_tok,
 * ldk) as f16 into each token's KV slot, as forward.c's rope_store() (F32 mode). */
int m40_cuda_rope_store(const struct m40_cuda_rope *r, const struct m40_cuda_kv *kv, float *q,
                        size_t ldq, float *k, const float *v, size_t ldk, uint32_t n_heads,
                        uint32_t n_kv_heads, uint32_t head_dim, uint32_t n_tok,
                        struct CUstream_st *stream);

/* m40_cuda_attention - for every token t and query head h: out[t][h*hd..] =
 * softmax(q . K^T * scale) V over positions 0..pos[t] of kv head h / (n_heads /
 * n_kv_heads), as m40_cpu_attention_head() with float weights (tolerance in attention.cu).
 * max_pos bounds every pos[t] and is at most M40_CUDA_ATTN_MAX_POS; n_tok <= 65535; out
 * does not overlap q. Long contexts are split over several blocks (flash-decoding); their
 * partial results go to the workspace ws (ws_bytes, 256-byte aligned), at least
 * m40_cuda_attention_workspace(n_tok, n_heads, max_pos, head_dim) bytes (ws may be NULL
 * when that is 0). The workspace begins with M40_CUDA_ATTN_WS_COUNTERS bytes of
 * counters that must be zero before the first call (cudaMemset) and that every call
 * leaves zero; the rest is written before it is read. Calls of any shape may share one
 * workspace, one call at a time (stream order). -EINVAL for a workspace too small for
 * this call. */
#define M40_CUDA_ATTN_MAX_POS     0x7fffffffu
#define M40_CUDA_ATTN_WS_COUNTERS 4096
int m40_cuda_attention(const struct m40_cuda_kv *kv, const float *q, size_t ldq, float *out,
                       size_t ldo, uint32_t n_heads, uint32_t n_kv_heads, uint32_t head_dim,
                       float scale, uint32_t n_tok, uint32_t max_pos, void *ws, size_t ws_bytes,
                       struct CUstream_st *stream);

/* m40_cuda_attention_prompt - m40_cuda_attention() for tokens of one sequence (a prompt
 * chunk: kv->tbl[t] is the same for every t; this reads tbl[0] only), in tiles of
 * queries that read each K/V row once per tile instead of once per token: for steps of
 * many tokens (cuda_forward.c: 64 and more). No workspace. -ENOTSUP, with nothing
 * launched, for shapes it does not take (head_dim not 32, 64, 96 or 128, more than 16
 * query heads per KV head, KV rows not 16-byte aligned): m40_cuda_attention() does the
 * same work; -EINVAL for arguments that one rejects too. */
int m40_cuda_attention_prompt(const struct m40_cuda_kv *kv, const float *q, size_t ldq, float *out,
                              size_t ldo, uint32_t n_heads, uint32_t n_kv_heads, uint32_t head_dim,
                              float scale, uint32_t n_tok, struct CUstream_st *stream);

/* m40_cuda_attention_workspace - the workspace bytes that m40_cuda_attention() needs for
 * any call with at most n_tok tokens, positions up to max_pos, n_heads query heads of
 * head_dim (any n_kv_heads): 0 when no such call splits (max_pos < 32). */
size_t m40_cuda_attention_workspace(uint32_t n_tok, uint32_t n_heads, uint32_t max_pos,
                                    uint32_t head_dim);

/* m40_cuda_argmax - ret[r] = index of the largest of x row r (n floats, ld apart), the
 * lowest index on ties (m40_sampler_argmax()), for r < n_rows. */
int m40_cuda_argmax(const float *x, size_t ld, uint32_t n, uint32_t n_rows, int32_t *ret,
                    struct CUstream_st *stream);

/* m40_cuda_prefetch_l2 - ask the L2 cache for the n (at most M40_CUDA_PREFETCH_MAX)
 * ranges of device memory, in order, until `budget` bytes: one 128-byte line at each
 * 128-byte step from a range's start that fits whole in the range (a partial step at
 * its end is not asked for), for kernels that read them later. A hint: no effect on any
 * result, nothing read into the program. Lines past what the L2 holds push out the
 * first ones, and prefetches delay other loads: callers keep the budget a small part of
 * m40_cuda_device_info()->l2_bytes (cuda_forward.c: peak bandwidth x 1 us). Returns 0
 * (nothing to fetch: nothing launched), -EINVAL for NULL ranges with n > 0, n too large
 * or a range with bytes but no p, M40_ECUDA. */
#define M40_CUDA_PREFETCH_MAX 8
struct m40_cuda_range {
        const void *p;
        size_t bytes;
};
int m40_cuda_prefetch_l2(const struct m40_cuda_range *ranges, uint32_t n, size_t budget,
                         struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif

#endif
