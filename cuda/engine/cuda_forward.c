/* cuda/engine/cuda_forward.c - the CUDA engine's forward pass (see cuda_forward.h): one
 * step's data packed and uploaded, its kernels, and the CUDA graphs of small steps. The
 * device model it runs on is set up and freed in cuda_forward_setup.c; struct
 * m40_cuda_fwd is in cuda_forward_impl.h. Mirrors forward.c (M40_ACT_F32) op for op:
 *   x = embed(tokens); per layer: xn = rmsnorm(x) * attn_norm; q,k,v = xn Wq,Wk,Wv (+ b);
 *   rope q,k and store k,v (f16); att = attention; x += att Wo; xn = rmsnorm(x) * ffn_norm;
 *   x += (silu(xn Wg) * (xn Wu)) Wd; then logits = rmsnorm(x[rows]) * output_norm Wout.
 * Steps of up to f->mv_max tokens (matvec.h, m40_cuda_matvec_steps_max()) run the RMSNorms
 * inside the matrix kernels (matvec.h: the residual update leaves x * g and partial sums
 * of squares, the next products add those up and scale their sums).
 * Larger steps run the batched kernels (matvec.h, m40_cuda_mmq()), and above
 * FWD_MMQ_MAX_TOKENS tokens cuBLAS SGEMM on dequantized weight tiles (cuda/kernels/gemm.h). The
 * weights are loaded as in the file, then re-laid out once on the device into the
 * layout those kernels read (cuda/engine/cuda_weights.h). */
#include "cuda/engine/cuda_forward.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include <cuda_runtime.h>

#include "cuda/engine/cuda_forward_impl.h"
#include "cuda/engine/cuda_weights.h"
#include "cuda/engine/l2_plan.h"
#include "cuda/kernels/gemm.h"
#include "cuda/kernels/matvec.h"
#include "cuda/kernels/ops.h"
#include "cuda/kernels/persist_step.h"
#include "engine/kv.h"

/* The fewest tokens of a one-sequence step whose attention takes the query-tile kernel
 * (ops.h, m40_cuda_attention_prompt()); below it, m40_cuda_attention(), whose splits of
 * long contexts serve a few tokens better. Not below FWD_GRAPH_MAX_TOKENS: a captured
 * graph must not depend on whether a step's tokens are of one sequence. */
#define FWD_PROMPT_ATTN_MIN 64
static_assert(FWD_PROMPT_ATTN_MIN >= FWD_GRAPH_MAX_TOKENS, "graphs take the general kernel");

/* mmq - y[i] (n, w[i].n_out) (+)= x (n, n_in) W[i]^T for the nw matrices of w (same
 * layout), n > f->mv_max: the batched kernel in one launch up to
 * FWD_MMQ_MAX_TOKENS tokens, else the GEMM, one matrix at a time (add: through f->tmp
 * and an add; nw is then 1). */
static int mmq(struct m40_cuda_fwd *f, const struct m40_cuda_matrix *w, uint32_t nw, const float *x,
               size_t ldx, float *const *y, const size_t *ldy, uint32_t n, bool add)
{
        int r = 0;

        if (n <= FWD_MMQ_MAX_TOKENS || !f->gemm)
                return m40_cuda_mmq(w, nw, x, ldx, y, ldy, n, add, f->part, f->part_bytes,
                                    f->stream);
        if (add) {
                r = m40_cuda_gemm(f->gemm, w, x, ldx, f->tmp, f->ld_dim, n, f->stream);
                return r ? r : m40_cuda_add(y[0], f->tmp, ldy[0], w->n_out, n, f->stream);
        }
        for (uint32_t i = 0; i < nw && !r; i++)
                r = m40_cuda_gemm(f->gemm, &w[i], x, ldx, y[i], ldy[i], n, f->stream);
        return r;
}

/* mm - y (n, w->n_out) = x (n, w->n_in) W^T: the matrix-vector kernel up to its batch
 * limit, else mmq(). */
static int mm(struct m40_cuda_fwd *f, const struct m40_cuda_matrix *w, const float *x, size_t ldx,
              float *y, size_t ldy, uint32_t n)
{
        if (n <= f->mv_max)
                return m40_cuda_matvec(w, x, ldx, y, ldy, n, f->stream);
        return mmq(f, w, 1, x, ldx, &y, &ldy, n, false);
}

/* same_layout - whether the nw matrices of w share type, n_in and row_bytes (what one
 * launch over several matrices needs). */
static bool same_layout(const struct m40_cuda_matrix *w, uint32_t nw)
{
        for (uint32_t i = 1; i < nw; i++)
                if (w[i].type != w[0].type || w[i].n_in != w[0].n_in ||
                    w[i].row_bytes != w[0].row_bytes)
                        return false;
        return true;
}

/* mm3 - y[i] (n, w[i].n_out) = x (n, n_in) W[i]^T for the nw (2 or 3) matrices of w that
 * multiply the same x (q, k, v; gate, up): one launch of the matrix-vector kernel for all
 * of them when the step is small (batch-1 decode reads q, k and v in one pass: k and v
 * alone are too small to fill the GPU) and they share type and row layout, else mm()
 * each. */
static int mm3(struct m40_cuda_fwd *f, const struct m40_cuda_matrix *w, uint32_t nw, const float *x,
               size_t ldx, float *const *y, const size_t *ldy, uint32_t n)
{
        int r = 0;

        if (n <= f->mv_max && same_layout(w, nw))
                return m40_cuda_matmul_n(w, nw, x, ldx, y, ldy, n, f->stream);
        if (n > f->mv_max && same_layout(w, nw))
                return mmq(f, w, nw, x, ldx, y, ldy, n, false);
        for (uint32_t i = 0; i < nw && !r; i++)
                r = mm(f, &w[i], x, ldx, y[i], ldy[i], n);
        return r;
}

/* fused - whether a step of n tokens runs the RMSNorms inside the matrix kernels. */
static bool fused(const struct m40_cuda_fwd *f, uint32_t n)
{
        return n <= f->mv_max;
}

/* mm3_norm - mm3() of rmsnorm(f->x) * norm_w: for small steps (fused(f, n)) the products
 * of f->xn = x * norm_w, which the embedding or the last residual update wrote, with the
 * scales it left (matvec.h); otherwise the norm kernel writes f->xn = rmsnorm(x) * norm_w
 * first. */
static int mm3_norm(struct m40_cuda_fwd *f, const struct m40_cuda_matrix *w, uint32_t nw,
                    const float *norm_w, float *const *y, const size_t *ldy, uint32_t n)
{
        int r = 0;

        if (!fused(f, n)) {
                r = m40_cuda_rmsnorm(f->x, f->ld_dim, NULL, norm_w, f->m->dim, f->m->rms_eps, n,
                                     f->xn, f->ld_dim, f->stream);
                return r ? r : mm3(f, w, nw, f->xn, f->ld_dim, y, ldy, n);
        }
        if (same_layout(w, nw))
                return m40_cuda_matmul_n_rms(w, nw, f->xn, f->ld_dim, &f->rms, y, ldy, n,
                                             f->stream);
        for (uint32_t i = 0; i < nw && !r; i++)
                r = m40_cuda_matmul_n_rms(&w[i], 1, f->xn, f->ld_dim, &f->rms, &y[i], &ldy[i], n,
                                          f->stream);
        return r;
}

/* mm_add - the residual stream f->x (n, dim) += x (n, w->n_in) W^T: in the matrix-vector
 * kernel's epilogue for small steps, with the next norm's scales and f->xn = x * next_g
 * (next_g NULL: no next norm in the layers), else mmq()'s adding form. */
static int mm_add(struct m40_cuda_fwd *f, const struct m40_cuda_matrix *w, const float *x,
                  size_t ldx, uint32_t n, const float *next_g)
{
        if (fused(f, n)) {
                struct m40_cuda_rms ro = f->rms;

                ro.g = next_g;
                return m40_cuda_matvec_add_rms(w, x, ldx, f->x, f->ld_dim, n, &ro, f->stream);
        }
        return mmq(f, w, 1, x, ldx, (float *const[]){f->x}, (const size_t[]){f->ld_dim}, n, true);
}

/* ffn_in - f->gate = silu(xn Wg) * (xn Wu) for xn = rmsnorm(f->x) * ffn_norm (f->up:
 * scratch): small steps in one launch that reads each gate row with its up row and
 * applies the norm's scales and the SwiGLU to the two sums (matvec.h), others through
 * mm3_norm() and the SwiGLU kernel. */
static int ffn_in(struct m40_cuda_fwd *f, const struct m40_cuda_layer_weights *l, uint32_t T)
{
        int r;

        if (fused(f, T) && same_layout((const struct m40_cuda_matrix[]){l->gate, l->up}, 2))
                return m40_cuda_matmul_swiglu_rms(&l->gate, &l->up, f->xn, f->ld_dim, &f->rms,
                                                  f->gate, f->up, f->ld_ff, T, f->stream);
        r = mm3_norm(f, (const struct m40_cuda_matrix[]){l->gate, l->up}, 2, l->ffn_norm,
                     (float *const[]){f->gate, f->up}, (const size_t[]){f->ld_ff, f->ld_ff}, T);
        return r ? r : m40_cuda_swiglu(f->gate, f->up, f->ld_ff, f->m->n_ff, T, f->stream);
}

/* prefetch_fork - on f->side, after the work queued on f->stream so far: ask the L2 for
 * the first f->pf_bytes of p's matrices; f->join marks the end. */
static int prefetch_fork(struct m40_cuda_fwd *f, struct m40_cuda_l2_plan *p)
{
        struct m40_cuda_range rs[M40_CUDA_L2_PLAN_MAX];
        const uint32_t n = m40_cuda_l2_plan_first(p, f->pf_bytes, rs);
        int r;

        static_assert(M40_CUDA_L2_PLAN_MAX <= M40_CUDA_PREFETCH_MAX, "one launch");
        if (cudaEventRecord(f->fork, f->stream) != cudaSuccess ||
            cudaStreamWaitEvent(f->side, f->fork, 0) != cudaSuccess)
                return m40_cuda_launch_status("fork");
        r = m40_cuda_prefetch_l2(rs, n, f->pf_bytes, f->side);
        if (!r && cudaEventRecord(f->join, f->side) != cudaSuccess)
                r = m40_cuda_launch_status("fork");
        return r;
}

/* l2_next - the L2 hint the next fused products carry (f->rms.next): the next f->pf_bytes
 * of p's matrix i, or half of that of each of i and j (j < 0: i alone; an index past the
 * plan: none). */
static void l2_next(struct m40_cuda_fwd *f, struct m40_cuda_l2_plan *p, int i, int j)
{
        const size_t budget = j >= 0 ? f->pf_bytes / 2 : f->pf_bytes;

        f->rms.next[0] = m40_cuda_l2_plan_take(p, i >= 0 ? (uint32_t)i : UINT32_MAX, budget);
        f->rms.next[1] = m40_cuda_l2_plan_take(p, j >= 0 ? (uint32_t)j : UINT32_MAX, budget);
}

/* layer - layer l (next: the one after it, or NULL for the last) for a step of T tokens. */
static int layer(struct m40_cuda_fwd *f, const struct m40_cuda_layer_weights *l,
                 const struct m40_cuda_layer_weights *next, const struct m40_cuda_kv *kv,
                 uint32_t T, uint32_t max_pos)
{
        const struct m40_model *m = f->m;
        const struct m40_cuda_rope rope = {f->mw.rope_cs, m->rope.n_rot, m->rope.neox};
        const float scale = 1.0f / sqrtf((float)m->head_dim);
        const struct m40_cuda_matrix qkv[3] = {l->wq, l->wk, l->wv};
        float *const y[3] = {f->q, f->k, f->v};
        const size_t ldy[3] = {f->ld_q, f->ld_kv, f->ld_kv};
        cudaStream_t s = f->stream;
        int r, attn;

        /* small steps without q/k/v biases: the products, RoPE and the KV append in one
         * launch; else the products (and biases), then the RoPE/KV kernel */
        if (fused(f, T) && !l->bq && same_layout(qkv, 3)) {
                r = m40_cuda_matmul_qkv_rope(qkv, f->xn, f->ld_dim, &f->rms, &rope, kv, m->head_dim,
                                             y, ldy, T, s);
        } else {
                r = mm3_norm(f, qkv, 3, l->attn_norm, y, ldy, T);
                if (!r && l->bq) {
                        r = m40_cuda_bias(f->q, l->bq, f->ld_q, m->q_dim, T, s);
                        r = r ? r : m40_cuda_bias(f->k, l->bk, f->ld_kv, m->kv_dim, T, s);
                        r = r ? r : m40_cuda_bias(f->v, l->bv, f->ld_kv, m->kv_dim, T, s);
                }
                r = r ? r
                      : m40_cuda_rope_store(&rope, kv, f->q, f->ld_q, f->k, f->v, f->ld_kv,
                                            m->n_heads, m->n_kv_heads, m->head_dim, T, s);
        }
        /* small steps: attention is a chain of load latencies that leaves DRAM idle, so a
         * branch of the graph beside it fetches the next matrices into the L2 */
        const bool side = !r && fused(f, T) && f->pf_bytes;
        /* what the layer reads after attention, in order (none without the branch) */
        const struct m40_cuda_matrix *const after[] = {&l->wo,
                                                       &l->gate,
                                                       &l->up,
                                                       &l->down,
                                                       next ? &next->wq : &f->mw.output,
                                                       next ? &next->wk : NULL,
                                                       next ? &next->wv : NULL};
        struct m40_cuda_l2_plan plan;

        m40_cuda_l2_plan_init(&plan, after, side ? sizeof(after) / sizeof(after[0]) : 0);
        if (side)
                r = prefetch_fork(f, &plan);
        /* steps of many tokens of one sequence (prompts): attention in query tiles, when
         * the shape is one it takes */
        attn = -ENOTSUP;
        if (!r && f->one_seq && T >= FWD_PROMPT_ATTN_MIN)
                attn = m40_cuda_attention_prompt(kv, f->q, f->ld_q, f->att, f->ld_q, m->n_heads,
                                                 m->n_kv_heads, m->head_dim, scale, T, s);
        if (!r && attn == -ENOTSUP)
                attn = m40_cuda_attention(kv, f->q, f->ld_q, f->att, f->ld_q, m->n_heads,
                                          m->n_kv_heads, m->head_dim, scale, T, max_pos, f->attn_ws,
                                          f->attn_ws_bytes, s);
        r = r ? r : attn;
        if (side && !r && cudaStreamWaitEvent(s, f->join, 0) != cudaSuccess)
                r = m40_cuda_launch_status("join");
        /* each product's last blocks ask the L2 for the next one's weights (matvec.h,
         * m40_cuda_rms.next) where the branch stopped: gate and up after wo, down after
         * them, the next layer's q (or the output matrix) after down */
        l2_next(f, &plan, 1, 2);
        r = r ? r : mm_add(f, &l->wo, f->att, f->ld_q, T, l->ffn_norm);
        l2_next(f, &plan, 3, -1);
        r = r ? r : ffn_in(f, l, T);
        l2_next(f, &plan, 4, -1);
        r = r ? r : mm_add(f, &l->down, f->gate, f->ld_ff, T, next ? next->attn_norm : NULL);
        l2_next(f, &plan, -1, -1);
        return r;
}

/* pack - the step's token ids, positions, block tables and logit rows into meta_h;
 * returns the largest position, or -E2BIG when the tables do not fit. */
static int64_t pack(struct m40_cuda_fwd *f, const struct m40_fwd_tok *toks, uint32_t n,
                    uint32_t n_rows)
{
        int32_t *tok = f->meta_h, *idx = tok + f->max_tokens;
        uint32_t *pos = (uint32_t *)(idx + 2 * f->max_rows), *tbl = pos + f->max_tokens;
        uint32_t *pages = tbl + f->max_tokens, used = 0, max_pos = 0;

        f->one_seq = true;
        for (uint32_t t = 0; t < n; t++) {
                const struct m40_kv_table *kt = toks[t].kv;

                tok[t] = toks[t].token;
                pos[t] = toks[t].pos;
                if (pos[t] >= f->max_ctx)
                        return -E2BIG;
                if (pos[t] > max_pos)
                        max_pos = pos[t];
                if (t && toks[t - 1].kv == kt) {
                        tbl[t] = tbl[t - 1];
                        continue;
                }
                f->one_seq = !t; /* a second table */
                if (kt->n_pages > f->max_tbl - used)
                        return -E2BIG;
                memcpy(pages + used, kt->pages, (size_t)kt->n_pages * sizeof(uint32_t));
                tbl[t] = used;
                used += kt->n_pages;
        }
        for (uint32_t t = 0; t < n; t++)
                if (toks[t].logit_row >= 0 && (uint32_t)toks[t].logit_row < n_rows)
                        idx[toks[t].logit_row] = (int32_t)t;
        return max_pos;
}

/* forward - the step's kernels on f->stream for n tokens (their data in meta_d), positions
 * at most max_pos: embedding, the layers, and for n_rows rows the final norm and the
 * logits into f->logits. */
static int forward(struct m40_cuda_fwd *f, uint32_t n, uint32_t n_rows, uint32_t max_pos)
{
        const struct m40_model *m = f->m;
        int32_t *d_tok = f->meta_d, *d_idx = d_tok + f->max_tokens;
        struct m40_cuda_kv kv = fwd_kv(f);
        int r;

        struct m40_cuda_rms ro = f->rms;

        m40_cuda_gemm_begin(f->gemm, f->stream); /* the prompt GEMMs' tiles overlap */
        ro.g = f->mw.layers[0].attn_norm;
        r = m40_cuda_embed_rms(f->mw.tok_embd.data, f->mw.tok_embd.type, f->mw.tok_embd.row_bytes,
                               m->dim, d_tok, n, f->x, f->ld_dim, fused(f, n) ? &ro : NULL,
                               f->stream);
        /* one-token steps: the layers in one launch of the persistent step kernel, when the
         * engine set it up and the step's positions are within its reach */
        const int ps =
                !r && n == 1 && f->ps ? m40_cuda_ps_run(f->ps, max_pos, f->stream) : -ENOTSUP;

        if (ps != -ENOTSUP)
                r = ps;
        for (uint32_t i = 0; i < m->n_layers && !r && ps == -ENOTSUP; i++) {
                kv.layer = i;
                r = layer(f, &f->mw.layers[i], i + 1 < m->n_layers ? &f->mw.layers[i + 1] : NULL,
                          &kv, n, max_pos);
        }
        if (!r && n_rows) {
                r = m40_cuda_rmsnorm(f->x, f->ld_dim, d_idx, f->mw.output_norm, m->dim, m->rms_eps,
                                     n_rows, f->xn, f->ld_dim, f->stream);
                r = r ? r : mm(f, &f->mw.output, f->xn, f->ld_dim, f->logits, m->n_vocab, n_rows);
        }
        m40_cuda_gemm_end(f->gemm);
        return r;
}

/* seen_before - whether shape (n, n_rows, bound) ran before without a graph; if not, it
 * is remembered (the oldest of FWD_SEEN forgotten). */
static bool seen_before(struct m40_cuda_fwd *f, uint32_t n, uint32_t n_rows, uint32_t bound)
{
        for (uint32_t i = 0; i < f->n_seen; i++)
                if (f->seen[i].n == n && f->seen[i].n_rows == n_rows && f->seen[i].bound == bound)
                        return true;
        f->seen[f->seen_at] = (struct fwd_graph){.n = n, .n_rows = n_rows, .bound = bound};
        f->seen_at = (f->seen_at + 1) % FWD_SEEN;
        if (f->n_seen < FWD_SEEN)
                f->n_seen++;
        return false;
}

/* run_graph - forward() as a CUDA graph: run directly the first time a shape (n, n_rows,
 * the attention bound max_pos rounded up to FWD_GRAPH_POS) comes, captured the second
 * time, replayed after that; every kernel reads the step's tokens, positions and block
 * tables from meta_d, so a replay computes the current step. When capturing fails,
 * graphs are turned off and the step runs directly. */
static int run_graph(struct m40_cuda_fwd *f, uint32_t n, uint32_t n_rows, uint32_t max_pos)
{
        uint32_t bound = (max_pos / FWD_GRAPH_POS + 1) * FWD_GRAPH_POS - 1;
        struct fwd_graph g = {0};
        cudaGraph_t graph = NULL;
        uint32_t i;
        int r;

        if (bound > f->max_ctx - 1)
                bound = f->max_ctx - 1;
        for (i = 0; i < f->n_graphs; i++)
                if (f->graphs[i].n == n && f->graphs[i].n_rows == n_rows &&
                    f->graphs[i].bound == bound)
                        break;
        if (i < f->n_graphs) {
                g = f->graphs[i];
        } else {
                if (!seen_before(f, n, n_rows, bound))
                        return forward(f, n, n_rows, max_pos);
                if (cudaStreamBeginCapture(f->stream, cudaStreamCaptureModeThreadLocal) !=
                    cudaSuccess) {
                        (void)cudaGetLastError();
                        f->no_graphs = true;
                        return forward(f, n, n_rows, max_pos);
                }
                r = forward(f, n, n_rows, bound);
                if (cudaStreamEndCapture(f->stream, &graph) != cudaSuccess || r ||
                    cudaGraphInstantiate(&g.exec, graph, 0) != cudaSuccess) {
                        (void)cudaGetLastError();
                        if (graph)
                                cudaGraphDestroy(graph);
                        f->no_graphs = true;
                        return forward(f, n, n_rows, max_pos);
                }
                cudaGraphDestroy(graph);
                g.n = n;
                g.n_rows = n_rows;
                g.bound = bound;
                if (f->n_graphs == FWD_GRAPHS) /* the least recently used goes */
                        cudaGraphExecDestroy(f->graphs[--f->n_graphs].exec);
                i = f->n_graphs++;
        }
        memmove(&f->graphs[1], &f->graphs[0], i * sizeof(f->graphs[0]));
        f->graphs[0] = g;
        if (cudaGraphLaunch(g.exec, f->stream) != cudaSuccess)
                return m40_cuda_launch_status("step graph");
        return 0;
}

int m40_cuda_fwd_run(struct m40_cuda_fwd *f, const struct m40_fwd_tok *toks, uint32_t n,
                     uint32_t n_rows, float *logits, int32_t *argmax)
{
        const struct m40_model *m = f->m;
        int32_t *d_arg = (int32_t *)f->meta_d + f->max_tokens + f->max_rows;
        int64_t max_pos;
        int r;

        if (n > f->max_tokens || n_rows > f->max_rows)
                return -EINVAL;
        if (!n)
                return 0;
        max_pos = pack(f, toks, n, n_rows);
        if (max_pos < 0)
                return (int)max_pos;
        if (cudaMemcpyAsync(f->meta_d, f->meta_h, f->meta_bytes, cudaMemcpyHostToDevice,
                            f->stream) != cudaSuccess)
                return m40_cuda_launch_status("step upload");
        if (n < FWD_GRAPH_MAX_TOKENS && !f->no_graphs)
                r = run_graph(f, n, n_rows, (uint32_t)max_pos);
        else
                r = forward(f, n, n_rows, (uint32_t)max_pos);
        if (!r && n_rows) {
                if (!r && logits) {
                        if (cudaMemcpyAsync(logits, f->logits,
                                            (size_t)n_rows * m->n_vocab * sizeof(float),
                                            cudaMemcpyDeviceToHost, f->stream) != cudaSuccess)
                                r = m40_cuda_launch_status("logits download");
                } else if (!r && argmax) {
                        r = m40_cuda_argmax(f->logits, m->n_vocab, m->n_vocab, n_rows, d_arg,
                                            f->stream);
                        if (!r && cudaMemcpyAsync(argmax, d_arg, n_rows * sizeof(int32_t),
                                                  cudaMemcpyDeviceToHost, f->stream) != cudaSuccess)
                                r = m40_cuda_launch_status("argmax download");
                }
        }
        if (!r && n_rows && !logits && !argmax)
                return 0; /* the logits stay on the device; the caller synchronizes */
        if (cudaStreamSynchronize(f->stream) != cudaSuccess && !r)
                r = m40_cuda_launch_status("step");
        return r;
}

struct m40_cuda_alloc *m40_cuda_fwd_alloc(struct m40_cuda_fwd *f)
{
        return f->a;
}

struct CUstream_st *m40_cuda_fwd_stream(struct m40_cuda_fwd *f)
{
        return f->stream;
}

float *m40_cuda_fwd_logits(struct m40_cuda_fwd *f)
{
        return f->logits;
}
