/* tests/gpu/test_attention.c - attention over the paged f16 KV cache (cuda/kernels/ops.h:
 * m40_cuda_attention(), and m40_cuda_attention_prompt() for the tokens of one sequence)
 * against the CPU engine.
 *
 *   kernel       reference                            bound
 *   attention    m40_cpu_attention_head               |out - ref| <= 1e-5 sum_p w_p |V_p|
 *   attn_prompt                                       (1 + S_p), S_p = scale sum_j |q_j
 *                                                     K_p[j]|: the sizes of the terms the
 *                                                     output and its weights' scores sum
 *
 * Decode and causal prefill (a chunk after earlier positions, a whole prompt from
 * position 0, two sequences in one step), GQA group 1..12, head_dim 47..512, paged KV
 * with scrambled block tables, positions across page boundaries, contexts past the old
 * 8192 cap, one split and many; both sides read the same f16 K and V, so f16 rounding is
 * not in the error. Outputs are poisoned first; guard columns past each row and a guard
 * row past the last must stay poisoned. m40_cuda_attention() runs twice on one
 * workspace (same bits, counters back to zero), decode steps a third time under the
 * launch bound of the engine's step graphs (max_pos rounded up to a multiple of 128,
 * less one: another plan, compared with the reference); every single-sequence step also runs
 * m40_cuda_attention_prompt(), which must take exactly the shapes it documents
 * (head_dim 32/64/96/128, at most 16 query heads per KV head) and say -ENOTSUP for the
 * rest. Then the launchers' argument checks.
 *
 * Fresh random inputs on every run: the seed is printed; `test_attention SEED` or
 * M40_TEST_SEED=SEED repeats a run. M40_TEST_QUICK=1 / 2 (compute-sanitizer) run fewer
 * and smaller cases. Exit 0 pass, 1 fail, 77 skip (no GPU, or a build without CUDA). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
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

#include "cuda/kernels/ops.h"
#include "engine/ops.h"
#include "engine/quant.h"
#include "gputest.h"
#include "testkv.h"

/* The worst error seen per kernel (in the kernel's measure) and outputs checked. */
enum { OP_ATTN, OP_ATTN_PROMPT, OP_COUNT };
static const char *const op_name[OP_COUNT] = {"attention", "attn_prompt"};
static const double op_bound[OP_COUNT] = {1e-5, 1e-5};
static double worst[OP_COUNT];
static uint64_t checked[OP_COUNT];

static void note(int op, double e)
{
        checked[op]++;
        if (e > worst[op])
                worst[op] = e;
}

/* attn_case - n_seq sequences of contexts ctx[s] (positions 0..ctx-1, all in the cache),
 * with n_new[s] tokens each (decode: 1 at a random position; prefill: the last n_new). */
static void attn_case(uint32_t n_heads, uint32_t n_kv, uint32_t hd, uint32_t page_tokens,
                      uint32_t n_seq, const uint32_t *ctx, const uint32_t *n_new, int decode,
                      float q_scale)
{
        const uint32_t kv_dim = n_kv * hd, group = n_heads / n_kv;
        const size_t ldq = (size_t)n_heads * hd + rnd(3), ldo = (size_t)n_heads * hd + 3;
        const float scale = 1.0f / sqrtf((float)hd);
        uint32_t n_pages = 0, max_ctx = 0, dctx[64];
        struct cache c = {0};
        struct step s = {0};
        float *q = NULL, *out = NULL, *out2 = NULL, *out3 = NULL, *out4 = NULL, *ref = NULL,
              *sc = NULL, *dq = NULL, *dout = NULL;
        const float *outs[3];
        const char *out_name[3] = {""};
        int out_op[3] = {OP_ATTN, OP_ATTN, OP_ATTN};
        char bound_name[48];
        int n_outs = 1;
        double *mag = NULL;
        unsigned *cnt = NULL;
        void *ws = NULL;
        size_t ws_bytes = 0, n_out;
        char what[160];
        int bad = 0;

        for (uint32_t i = 0; i < n_seq; i++) {
                n_pages += (ctx[i] + page_tokens - 1) / page_tokens;
                if (ctx[i] > max_ctx)
                        max_ctx = ctx[i];
                /* decode: the token at a random position of the context */
                dctx[i] = decode ? 1 + rnd(ctx[i]) : ctx[i];
                if (decode && i == 0)
                        dctx[i] = ctx[i];
        }
        snprintf(what, sizeof(what), "attention heads %u/%u hd %u pt %u seqs %u ctx %u%s", n_heads,
                 n_kv, hd, page_tokens, n_seq, max_ctx, decode ? " decode" : " prefill");
        if (cache_make(&c, 2, page_tokens, kv_dim, n_pages + 3, 0) ||
            step_make(&s, &c, n_seq, dctx, n_new))
                goto out;
        n_out = ldo * (s.n_tok + 1);
        q = malloc(sizeof(float) * ldq * s.n_tok);
        out = host_poison(n_out);
        out2 = host_poison(n_out);
        out3 = host_poison(n_out);
        out4 = host_poison(n_out);
        ref = malloc(sizeof(float) * hd);
        sc = malloc(sizeof(float) * max_ctx);
        mag = malloc(sizeof(double) * hd);
        if (!q || !out || !out2 || !out3 || !out4 || !ref || !sc || !mag) {
                fail("out of host memory");
                goto out;
        }
        for (size_t i = 0; i < ldq * s.n_tok; i++)
                q[i] = rng_normal(&seed) * q_scale;
        dq = dput(q, sizeof(float) * ldq * s.n_tok);
        dout = dput(NULL, sizeof(float) * n_out);
        if (!dq || !dout)
                goto out;
        /* the workspace: poisoned, but for its counters, which start at zero */
        ws_bytes = m40_cuda_attention_workspace(s.n_tok, n_heads, s.max_pos, hd);
        if (ws_bytes) {
                ws = dput(NULL, ws_bytes);
                cnt = malloc(M40_CUDA_ATTN_WS_COUNTERS);
                if (!ws || !cnt || cudaMemset(ws, 0, M40_CUDA_ATTN_WS_COUNTERS) != cudaSuccess)
                        goto out;
        }
        {
                const struct m40_cuda_kv kv = kv_of(&c, &s);

                if (launched(m40_cuda_attention(&kv, dq, ldq, dout, ldo, n_heads, n_kv, hd, scale,
                                                s.n_tok, s.max_pos, ws, ws_bytes, NULL),
                             what) ||
                    dget(out, dout, sizeof(float) * n_out, what))
                        goto out;
                /* again on the same workspace: the counters came back to zero, and the
                 * merge is deterministic */
                if (cudaMemset(dout, 0xff, sizeof(float) * n_out) != cudaSuccess ||
                    launched(m40_cuda_attention(&kv, dq, ldq, dout, ldo, n_heads, n_kv, hd, scale,
                                                s.n_tok, s.max_pos, ws, ws_bytes, NULL),
                             what) ||
                    dget(out2, dout, sizeof(float) * n_out, what))
                        goto out;
        }
        if (cnt) {
                if (dget(cnt, ws, M40_CUDA_ATTN_WS_COUNTERS, what))
                        goto out;
                for (size_t i = 0; i < M40_CUDA_ATTN_WS_COUNTERS / sizeof(unsigned); i++)
                        if (cnt[i]) {
                                fail("%s: workspace counter %zu left at %u", what, i, cnt[i]);
                                break;
                        }
        }
        if (memcmp(out, out2, sizeof(float) * n_out))
                fail("%s: a second identical call gave other results", what);
        outs[0] = out;
        /* one sequence's tokens: the query-tile kernel as well, on a poisoned out; it takes
         * head_dim 32/64/96/128 with at most 16 query heads per KV head, and says
         * -ENOTSUP for the rest */
        if (n_seq == 1) {
                const struct m40_cuda_kv kv = kv_of(&c, &s);
                const int takes = hd % 32 == 0 && hd <= 128 && group <= 16;
                int r;

                if (cudaMemset(dout, 0xff, sizeof(float) * n_out) != cudaSuccess)
                        goto out;
                r = m40_cuda_attention_prompt(&kv, dq, ldq, dout, ldo, n_heads, n_kv, hd, scale,
                                              s.n_tok, NULL);
                if (r == -ENOTSUP && !takes) {
                        /* not its shape: m40_cuda_attention() alone */
                } else if (r || !takes) {
                        fail("%s: attention_prompt returned %d (%s shape)", what, r,
                             takes ? "a supported" : "an unsupported");
                } else if (dget(out3, dout, sizeof(float) * n_out, what)) {
                        goto out;
                } else {
                        out_name[n_outs] = " (query tiles)";
                        out_op[n_outs] = OP_ATTN_PROMPT;
                        outs[n_outs++] = out3;
                }
        }
        /* decode under a launch bound past the positions, as the engine's step graphs
         * run it (max_pos rounded up to a multiple of 128, less one): another plan of
         * splits (and blocks of tiles) over the same positions */
        if (decode && (s.max_pos | 127) != s.max_pos) {
                const struct m40_cuda_kv kv = kv_of(&c, &s);
                const uint32_t bound = s.max_pos | 127;
                const size_t wsb = m40_cuda_attention_workspace(s.n_tok, n_heads, bound, hd);
                void *ws2 = NULL;
                int r = 0;

                if (wsb && (!(ws2 = dput(NULL, wsb)) ||
                            cudaMemset(ws2, 0, M40_CUDA_ATTN_WS_COUNTERS) != cudaSuccess))
                        r = -1;
                if (!r && (cudaMemset(dout, 0xff, sizeof(float) * n_out) != cudaSuccess ||
                           launched(m40_cuda_attention(&kv, dq, ldq, dout, ldo, n_heads, n_kv, hd,
                                                       scale, s.n_tok, bound, ws2, wsb, NULL),
                                    what) ||
                           dget(out4, dout, sizeof(float) * n_out, what)))
                        r = -1;
                cudaFree(ws2);
                if (r)
                        goto out;
                snprintf(bound_name, sizeof(bound_name), " (bound %u)", bound);
                out_name[n_outs] = bound_name;
                outs[n_outs++] = out4;
        }
        for (uint32_t t = 0; t <= s.n_tok && bad < 3; t++)
                for (uint32_t h = 0; h <= n_heads && bad < 3; h++) {
                        const uint32_t *table = t < s.n_tok ? s.pages + s.tbl[t] : NULL;

                        if (t == s.n_tok || h == n_heads) { /* guard row, guard columns */
                                const size_t n_guard = t == s.n_tok   ? (h ? 0 : ldo)
                                                       : h == n_heads ? ldo - (size_t)n_heads * hd
                                                                      : 0;

                                for (int k = 0; k < n_outs; k++) {
                                        const float *got =
                                                outs[k] + (size_t)t * ldo + (size_t)h * hd;

                                        for (size_t i = 0; i < n_guard; i++)
                                                if (!is_poison(got[i])) {
                                                        fail("%s%s: wrote outside out at row %u "
                                                             "column %zu",
                                                             what, out_name[k], t,
                                                             (size_t)h * hd + i);
                                                        bad++;
                                                        break;
                                                }
                                }
                                continue;
                        }
                        const struct m40_kv_view v = {
                                .k_base = c.h + (size_t)c.layer * page_tokens * kv_dim,
                                .v_base = c.h + c.v_off + (size_t)c.layer * page_tokens * kv_dim,
                                .page_stride = c.page_elems,
                                .kv_stride = kv_dim,
                                .page_tokens = page_tokens,
                                .table = table,
                        };

                        m40_cpu_attention_head(&v, q + (size_t)t * ldq + (size_t)h * hd, h / group,
                                               hd, s.pos[t], scale, sc, ref);
                        /* the error measure's scale: sum_p w_p |V_p[i]| (1 + S_p), S_p =
                         * scale * sum_j |q_j K_p[j]| (sc holds w) */
                        for (uint32_t i = 0; i < hd; i++)
                                mag[i] = 0.0;
                        for (uint32_t p = 0; p <= s.pos[t]; p++) {
                                const uint16_t *kp =
                                        c.h + slot(&c, table, p) + (size_t)(h / group) * hd;
                                const uint16_t *vp = kp + c.v_off;
                                const float *qt = q + (size_t)t * ldq + (size_t)h * hd;
                                double sp = 0.0;

                                for (uint32_t j = 0; j < hd; j++)
                                        sp += fabs((double)qt[j] * m40_cpu_f16_to_f32(kp[j]));
                                sp = 1.0 + sp * scale;
                                for (uint32_t i = 0; i < hd; i++)
                                        mag[i] += (double)sc[p] * sp *
                                                  fabs(m40_cpu_f16_to_f32(vp[i]));
                        }
                        for (int k = 0; k < n_outs; k++) {
                                const float *got = outs[k] + (size_t)t * ldo + (size_t)h * hd;

                                for (uint32_t i = 0; i < hd && bad < 3; i++) {
                                        const double e = fabs((double)got[i] - ref[i]) /
                                                         (mag[i] > 0.0 ? mag[i] : 1e-30);

                                        if (!(e <= op_bound[OP_ATTN])) {
                                                fail("%s%s: out[%u][%u * %u + %u] (pos %u) = "
                                                     "%.9g, reference %.9g (error %.3g of sum "
                                                     "w|v|(1+S) %.4g)",
                                                     what, out_name[k], t, h, hd, i, s.pos[t],
                                                     got[i], ref[i], e, mag[i]);
                                                bad++;
                                        }
                                        note(out_op[k], e);
                                }
                        }
                }
out:
        cudaFree(dq);
        cudaFree(dout);
        cudaFree(ws);
        cache_free(&c);
        step_free(&s);
        free(q);
        free(out);
        free(out2);
        free(out3);
        free(out4);
        free(ref);
        free(sc);
        free(mag);
        free(cnt);
}

/* One shape (heads, kv heads, head_dim, page_tokens) through decode and prefill steps of
 * short (one split) and long (many splits) contexts. */
static void attn_shape(uint32_t n_heads, uint32_t n_kv, uint32_t hd, uint32_t pt, int big)
{
        uint32_t ctx[16], n_new[16];
        const float qs = rnd(2) ? 1.0f : 3.0f; /* sharper softmax sometimes */

        /* decode: one sequence, ragged lengths of one tile, two, up to four and more (the
         * decode kernels of one head per block: one tile per block; blocks of two and of
         * four tiles, one block or several merged; attention.cu, attention_decode.cu);
         * then a batch of ragged sequences */
        n_new[0] = 1;
        for (uint32_t i = quick >= 2 ? 2 : 0; i < 4; i++) {
                static const uint32_t lo[4] = {1, 33, 65, 129}, span[4] = {32, 32, 64, 200};

                ctx[0] = quick >= 2 && i == 3 ? 300 : lo[i] + rnd(span[i]);
                attn_case(n_heads, n_kv, hd, pt, 1, ctx, n_new, 1, qs);
        }
        if (quick >= 2)
                return;
        ctx[0] = 1000 + rnd(3000);
        attn_case(n_heads, n_kv, hd, pt, 1, ctx, n_new, 1, qs);
        for (uint32_t i = 0; i < 5; i++) {
                ctx[i] = 1 + rnd(i == 0 ? 2500 : 700);
                n_new[i] = 1;
        }
        attn_case(n_heads, n_kv, hd, pt, 5, ctx, n_new, 1, qs);
        /* causal prefill: one chunk of a sequence, a whole prompt from position 0, then
         * two sequences in one step */
        ctx[0] = 37 + rnd(quick ? 300 : 1200);
        n_new[0] = 1 + rnd(quick ? 9 : 37);
        attn_case(n_heads, n_kv, hd, pt, 1, ctx, n_new, 0, qs);
        ctx[0] = n_new[0] = 1 + rnd(quick ? 70 : 200);
        attn_case(n_heads, n_kv, hd, pt, 1, ctx, n_new, 0, qs);
        ctx[0] = 200 + rnd(300);
        n_new[0] = 17;
        ctx[1] = 5;
        n_new[1] = 5;
        attn_case(n_heads, n_kv, hd, pt, 2, ctx, n_new, 0, qs);
        if (big && !quick) {
                /* past the old 8192 cap: decode of two sequences */
                ctx[0] = 8193 + rnd(2000);
                ctx[1] = 1 + rnd(9000);
                n_new[0] = n_new[1] = 1;
                attn_case(n_heads, n_kv, hd, pt, 2, ctx, n_new, 1, qs);
                /* many tokens: one split per (token, head) over several tiles */
                ctx[0] = 600 + rnd(200);
                n_new[0] = 300;
                attn_case(n_heads, n_kv, hd, pt, 1, ctx, n_new, 0, qs);
        }
}

static void test_attention(void)
{
        /* n_heads, n_kv, hd, page_tokens, big: GQA group 1, 2, 3, 4, 7, 8, 10, 12; head_dim
         * 32, 64, 128, 256, ragged 80 / 96 (V tiles through shared memory up to 128), 50
         * (even, not a multiple of 8: V from global memory) / 47 (odd: the scalar K path)
         * and the largest, 512. Racecheck (quick 2) takes 64 (two groups in the query tiles),
         * 128, 80 and 47. */
        static const uint32_t shapes[][5] = {
                {4, 4, 64, 16, 1},   {8, 4, 128, 16, 1},  {9, 3, 64, 16, 0},  {16, 4, 64, 32, 0},
                {28, 4, 128, 16, 0}, {32, 4, 128, 16, 1}, {20, 2, 80, 7, 0},  {12, 1, 96, 16, 0},
                {2, 1, 47, 5, 0},    {4, 2, 512, 16, 0},  {8, 2, 256, 16, 0}, {6, 3, 50, 16, 0},
                {8, 2, 32, 16, 0},
        };

        for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
                if (quick >= 2 && i != 1 && i != 2 && i != 6 && i != 8)
                        continue;
                attn_shape(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3],
                           (int)shapes[i][4]);
        }
}

static void check_attention_args(void)
{
        struct cache c = {0};
        struct step s = {0};
        const uint32_t ctx[1] = {3000}, n_new[1] = {1};
        float *dq = NULL, *dout = NULL;
        size_t need;

        if (cache_make(&c, 1, 16, 64, 200, 0) || step_make(&s, &c, 1, ctx, n_new))
                goto out;
        dq = dput(NULL, 4096);
        dout = dput(NULL, 4096);
        if (!dq || !dout)
                goto out;
        need = m40_cuda_attention_workspace(1, 4, s.max_pos, 64);
        CHECK(need > 0, "no workspace for a 3000-position context");
        CHECK(m40_cuda_attention_workspace(64, 4, 31, 64) == 0,
              "workspace for contexts of one split");
        {
                const struct m40_cuda_kv kv = kv_of(&c, &s);

                CHECK(m40_cuda_attention(&kv, dq, 256, dout, 256, 4, 4, 64, 0.125f, 1, s.max_pos,
                                         NULL, 0, NULL) == -EINVAL,
                      "a split call without workspace accepted");
                CHECK(m40_cuda_attention(&kv, dq, 256, dout, 256, 4, 3, 64, 0.125f, 1, s.max_pos,
                                         NULL, 0, NULL) == -EINVAL,
                      "n_heads not a multiple of n_kv_heads accepted");
                CHECK(m40_cuda_attention(&kv, dq, 256, dout, 256, 1, 1, 513, 0.125f, 1, s.max_pos,
                                         NULL, 0, NULL) == -EINVAL,
                      "head_dim 513 accepted");
                CHECK(m40_cuda_attention(&kv, dq, 255, dout, 256, 4, 4, 64, 0.125f, 1, 10, NULL, 0,
                                         NULL) == -EINVAL,
                      "ldq < n_heads * head_dim accepted");
                CHECK(m40_cuda_attention(&kv, dq, 256, dout, 256, 4, 4, 64, 0.125f, 1,
                                         M40_CUDA_ATTN_MAX_POS + 1u, NULL, 0, NULL) == -EINVAL,
                      "max_pos past M40_CUDA_ATTN_MAX_POS accepted");
                CHECK(m40_cuda_attention(&kv, dq, 256, dout, 256, 4, 4, 64, 0.125f, 0, s.max_pos,
                                         NULL, 0, NULL) == 0,
                      "n_tok 0 refused");
                CHECK(m40_cuda_attention_prompt(NULL, dq, 256, dout, 256, 4, 4, 64, 0.125f, 1,
                                                NULL) == -EINVAL,
                      "attention_prompt: no KV cache accepted");
                CHECK(m40_cuda_attention_prompt(&kv, dq, 256, dout, 256, 4, 3, 64, 0.125f, 1,
                                                NULL) == -EINVAL,
                      "attention_prompt: n_heads not a multiple of n_kv_heads accepted");
                CHECK(m40_cuda_attention_prompt(&kv, dq, 255, dout, 256, 4, 4, 64, 0.125f, 1,
                                                NULL) == -EINVAL,
                      "attention_prompt: ldq < n_heads * head_dim accepted");
                CHECK(m40_cuda_attention_prompt(&kv, dq, 256, dout, 256, 1, 1, 48, 0.125f, 1,
                                                NULL) == -ENOTSUP,
                      "attention_prompt: head_dim 48 not refused with -ENOTSUP");
                CHECK(m40_cuda_attention_prompt(&kv, dq, 1088, dout, 1088, 17, 1, 64, 0.125f, 1,
                                                NULL) == -ENOTSUP,
                      "attention_prompt: 17 query heads per KV head not refused with -ENOTSUP");
                CHECK(m40_cuda_attention_prompt(&kv, dq, 256, dout, 256, 4, 4, 64, 0.125f, 0,
                                                NULL) == 0,
                      "attention_prompt: n_tok 0 refused");
        }
        CHECK(cudaDeviceSynchronize() == cudaSuccess, "argument checks: device error");
out:
        cudaFree(dq);
        cudaFree(dout);
        cache_free(&c);
        step_free(&s);
}

int main(int argc, char **argv)
{
        struct m40_cuda_device *d;
        int code;

        quick = quick_mode();
        d = gpu_open(&code);
        if (!d)
                return code;
        if (argc > 1)
                seed = strtoull(argv[1], NULL, 0);
        else if (getenv("M40_TEST_SEED"))
                seed = strtoull(getenv("M40_TEST_SEED"), NULL, 0);
        else
                seed = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ULL + 1;
        if (!seed)
                seed = 1;
        printf("seed %" PRIu64 "%s (repeat: test_attention %" PRIu64 ")\n", seed,
               quick ? " (quick mode)" : "", seed);
        check_attention_args();
        test_attention();

        printf("%-11s %-8s %10s %10s\n", "kernel", "bound", "worst", "outputs");
        for (int op = 0; op < OP_COUNT; op++)
                printf("%-11s %-8.0e %10.2e %10" PRIu64 "\n", op_name[op], op_bound[op], worst[op],
                       checked[op]);
        printf("(|out - ref| / sum_p w_p |V_p| (1 + S_p))\n");
        m40_cuda_device_free(d);
        return finish();
}

#endif
