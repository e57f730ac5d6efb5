/* matmul.c - the CPU engine's weight-times-activation products (see matmul.h).
 *
 * W (n_out, n_in) of GGML type t, x (n_tok, n_in) float32 -> y (n_tok, n_out) float32.
 * Float mode: a row is dequantized M40_MATMUL_CHUNK elements at a time into a stack
 * buffer, then dotted with every token of a tile of up to TOK_TILE tokens; the per-row sum
 * is the sum over chunks of m40_cpu_dot(), so tiling never changes a result. ggml mode:
 * the x rows are converted once (actq.h), then each (row, token) is one block dot product.
 * Threads take contiguous row ranges (rounded to 16 rows so neighbours do not share cache
 * lines of y). */
#include "matmul.h"

#include "actq.h"
#include "dequant_inl.h"
#include "model/ggml_type.h"

#define TOK_TILE 16

M40_INLINE float dot_inl(const float *a, const float *b, size_t n)
{
        float acc[16] = {0};
        size_t i = 0;

        for (; i + 16 <= n; i += 16)
                for (int j = 0; j < 16; j++)
                        acc[j] += a[i + j] * b[i + j];
        for (int j = 0; i < n; i++, j++)
                acc[j] += a[i] * b[i];
        for (int w = 8; w >= 1; w /= 2)
                for (int j = 0; j < w; j++)
                        acc[j] += acc[j + w];
        return acc[0];
}

M40_CLONES float m40_cpu_dot(const float *a, const float *b, size_t n)
{
        return dot_inl(a, b, n);
}

/* dequant_chunk - elements [off, off + n) of row src (type t) into buf; n and off are
 * multiples of t's block size. Returns a pointer to the floats (src itself for F32). */
M40_INLINE const float *dequant_chunk(uint32_t t, const uint8_t *src, size_t off, size_t n,
                                      float *buf)
{
        switch (t) {
        case M40_GGML_F32:
                return (const float *)src + off;
        case M40_GGML_F16:
                dq_f16((const uint16_t *)src + off, buf, n);
                break;
        case M40_GGML_BF16:
                dq_bf16((const uint16_t *)src + off, buf, n);
                break;
        case M40_GGML_Q4_0:
                dq_q4_0((const struct m40_block_q4_0 *)src + off / M40_QK, buf, n / M40_QK);
                break;
        case M40_GGML_Q4_1:
                dq_q4_1((const struct m40_block_q4_1 *)src + off / M40_QK, buf, n / M40_QK);
                break;
        case M40_GGML_Q5_0:
                dq_q5_0((const struct m40_block_q5_0 *)src + off / M40_QK, buf, n / M40_QK);
                break;
        case M40_GGML_Q5_1:
                dq_q5_1((const struct m40_block_q5_1 *)src + off / M40_QK, buf, n / M40_QK);
                break;
        case M40_GGML_Q8_0:
                dq_q8_0((const struct m40_block_q8_0 *)src + off / M40_QK, buf, n / M40_QK);
                break;
        case M40_GGML_Q4_K:
                dq_q4_k((const struct m40_block_q4_k *)src + off / M40_QK_K, buf, n / M40_QK_K);
                break;
        case M40_GGML_Q5_K:
                dq_q5_k((const struct m40_block_q5_k *)src + off / M40_QK_K, buf, n / M40_QK_K);
                break;
        case M40_GGML_Q6_K:
                dq_q6_k((const struct m40_block_q6_k *)src + off / M40_QK_K, buf, n / M40_QK_K);
                break;
        default:
                break;
        }
        return buf;
}

M40_CLONES void m40_cpu_matmul_rows(const struct m40_weight *w, const float *x, size_t n_tok,
                                    float *y, size_t ldy, uint32_t r0, uint32_t r1)
{
        float buf[M40_MATMUL_CHUNK] __attribute__((aligned(64)));
        const size_t n = w->n_in;

        for (size_t t0 = 0; t0 < n_tok; t0 += TOK_TILE) {
                const size_t nt = n_tok - t0 < TOK_TILE ? n_tok - t0 : TOK_TILE;

                for (uint32_t o = r0; o < r1; o++) {
                        const uint8_t *row = (const uint8_t *)w->data + (size_t)o * w->row_bytes;
                        float acc[TOK_TILE] = {0};

                        for (size_t off = 0; off < n; off += M40_MATMUL_CHUNK) {
                                const size_t len =
                                        n - off < M40_MATMUL_CHUNK ? n - off : M40_MATMUL_CHUNK;
                                const float *v = dequant_chunk(w->type, row, off, len, buf);

                                for (size_t t = 0; t < nt; t++)
                                        acc[t] += dot_inl(v, x + (t0 + t) * n + off, len);
                        }
                        for (size_t t = 0; t < nt; t++)
                                y[(t0 + t) * ldy + o] = acc[t];
                }
        }
}

struct mm_job {
        const struct m40_weight *w;
        const float *x;
        size_t n_tok;
        float *y;
};

static void mm_thread(void *ctx, unsigned ith, unsigned nth)
{
        const struct mm_job *j = ctx;
        const uint32_t n = j->w->n_out;
        uint32_t per = (n + nth - 1) / nth;
        uint32_t r0, r1;

        per = (per + 15) & ~15u;
        r0 = per * ith;
        r1 = r0 + per;
        if (r0 >= n)
                return;
        if (r1 > n)
                r1 = n;
        m40_cpu_matmul_rows(j->w, j->x, j->n_tok, j->y, n, r0, r1);
}

void m40_cpu_matmul(struct m40_pool *pool, const struct m40_weight *w, const float *x, size_t n_tok,
                    float *y)
{
        struct mm_job j = {w, x, n_tok, y};

        m40_pool_run(pool, mm_thread, &j);
}

/* ---- ggml activation mode ---- */

#define CONVERT_SERIAL 16384 /* elements converted on the calling thread below this */

struct mmq_job {
        const struct m40_weight *w;
        const float *x;
        size_t n_tok, rb; /* rb: bytes of one row of a */
        uint8_t *xq;      /* the converted rows, (n_tok, rb) */
        const uint8_t *a; /* the rows the kernel reads: xq, or x itself for F32 */
        m40_act_dot_fn dot;
        float *y;
};

static void convert_thread(void *ctx, unsigned ith, unsigned nth)
{
        const struct mmq_job *j = ctx;

        for (size_t t = ith; t < j->n_tok; t += nth)
                m40_act_convert(j->w->type, j->x + t * j->w->n_in, j->xq + t * j->rb, j->w->n_in);
}

static void mmq_thread(void *ctx, unsigned ith, unsigned nth)
{
        const struct mmq_job *j = ctx;
        const uint32_t n = j->w->n_out;
        uint32_t per = (n + nth - 1) / nth;
        uint32_t r0, r1;

        per = (per + 15) & ~15u;
        r0 = per * ith;
        r1 = r0 + per;
        if (r0 >= n)
                return;
        if (r1 > n)
                r1 = n;
        for (size_t t0 = 0; t0 < j->n_tok; t0 += TOK_TILE) {
                const size_t nt = j->n_tok - t0 < TOK_TILE ? j->n_tok - t0 : TOK_TILE;

                for (uint32_t o = r0; o < r1; o++) {
                        const uint8_t *row =
                                (const uint8_t *)j->w->data + (size_t)o * j->w->row_bytes;

                        for (size_t t = t0; t < t0 + nt; t++)
                                j->y[t * n + o] = j->dot(row, j->a + t * j->rb, j->w->n_in);
                }
        }
}

void m40_cpu_matmul_ggml(struct m40_pool *pool, const struct m40_weight *w, const float *x,
                         size_t n_tok, float *y, void *scratch)
{
        struct mmq_job j = {
                .w = w,
                .x = x,
                .n_tok = n_tok,
                .rb = m40_act_row_bytes(w->type, w->n_in),
                .xq = scratch,
                .a = scratch,
                .dot = m40_act_dot(w->type),
                .y = y,
        };

        if (!j.rb) { /* F32: the float rows as they are */
                j.rb = (size_t)w->n_in * sizeof(float);
                j.a = (const uint8_t *)x;
        } else if (n_tok * w->n_in < CONVERT_SERIAL) {
                convert_thread(&j, 0, 1);
        } else {
                m40_pool_run(pool, convert_thread, &j);
        }
        m40_pool_run(pool, mmq_thread, &j);
}
