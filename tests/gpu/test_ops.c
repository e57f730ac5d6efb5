/* tests/gpu/test_ops.c - the per-token op kernels (cuda/kernels/ops.h) against the CPU engine.
 *
 * Owns the checks that every launcher of cuda/kernels/ops.h computes what its CPU reference
 * (the CPU engine in M40_ACT_F32 mode, the spec) computes, on fresh random inputs of
 * several shapes, ragged ones included, and writes every output element and nothing
 * else: outputs are poisoned first (all-ones bytes, a NaN), guard columns past each
 * row's width and a guard row past the last stay poisoned, and in-place ops leave their
 * guards as they were.
 *
 *   kernel       reference                            bound
 *   embed        m40_model_embed (every weight type)  exact (equal values; a zero's sign
 *                                                     may differ) for F32 F16 BF16 Q8_0
 *                                                     Q4_0 Q5_0 Q6_K; for the types
 *                                                     with an offset (Q4_1 Q5_1 Q4_K Q5_K),
 *                                                     whose q * d + m the device may fuse
 *                                                     into one FMA (one rounding where the
 *                                                     CPU has two): |y - ref| <= 2e-6 max
 *                                                     |ref| over y's 32-element group
 *   rmsnorm      m40_cpu_rmsnorm (w / no w, gather)   |y - ref| <= 1e-5 |ref|
 *   add, bias    x + y in float                       exact
 *   swiglu       m40_cpu_swiglu                       |y - ref| <= 1e-5 |ref| (expf ulps)
 *   rope_store   m40_cpu_rope (normal and NEOX, partial n_rot) + m40_cpu_f32_to_f16
 *                                                     exact: q, k, and the f16 K/V slots;
 *                                                     every other cache element untouched
 *   argmax       m40_sampler_argmax (ties: lowest)    exact
 * (attention: tests/gpu/test_attention.c, on the same KV cache helpers, testkv.h)
 *
 * Fresh random inputs on every run: the seed is printed; `test_ops SEED` or
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

#include "cuda/kernels/matvec.h"
#include "cuda/kernels/ops.h"
#include "engine/model.h"
#include "engine/ops.h"
#include "engine/quant.h"
#include "engine/sampler.h"
#include "gputest.h"
#include "model/ggml_type.h"
#include "quantize.h"
#include "testkv.h"

/* The worst error seen per kernel (in the kernel's measure) and outputs checked. */
enum { OP_EMBED, OP_RMSNORM, OP_ADD, OP_BIAS, OP_SWIGLU, OP_ROPE, OP_ARGMAX, OP_COUNT };
static const char *const op_name[OP_COUNT] = {"embed",  "rmsnorm",    "add",   "bias",
                                              "swiglu", "rope_store", "argmax"};
static const double op_bound[OP_COUNT] = {2e-6, 1e-5, 0, 0, 1e-5, 0, 0};
static double worst[OP_COUNT];
static uint64_t checked[OP_COUNT];

static int same_bits(float a, float b)
{
        return memcmp(&a, &b, sizeof(float)) == 0;
}

static void note(int op, double e)
{
        checked[op]++;
        if (e > worst[op])
                worst[op] = e;
}

/* ---- embed ---- */

static void embed_case(uint32_t type, uint32_t dim, uint32_t n_vocab, uint32_t n_tok)
{
        const struct m40_ggml_type_info *ti = m40_ggml_type_info(type);
        const size_t ld = dim + 3, ny = ld * (n_tok + 1);
        /* scale and offset: q * d + m may be one FMA on the device, two roundings here */
        const int fused = type == M40_GGML_Q4_1 || type == M40_GGML_Q5_1 || type == M40_GGML_Q4_K ||
                          type == M40_GGML_Q5_K;
        uint64_t rb = 0;
        uint8_t *table = NULL;
        float *row = malloc(sizeof(float) * dim), *y = host_poison(ny), *ref = NULL;
        int32_t *tok = malloc(sizeof(int32_t) * n_tok);
        void *dt = NULL, *dtok = NULL, *dsc = NULL, *dcnt = NULL, *dg = NULL, *dxg = NULL;
        float *dy = NULL, *xg = NULL;
        int bad = 0;

        if (!ti || m40_ggml_row_size(type, dim, &rb) < 0 || !row || !y || !tok) {
                fail("embed %s dim %u: set-up", m40_ggml_type_name(type), dim);
                goto out;
        }
        table = malloc(rb * n_vocab);
        ref = malloc(sizeof(float) * dim);
        if (!table || !ref) {
                fail("out of host memory");
                goto out;
        }
        for (uint32_t v = 0; v < n_vocab; v++) {
                for (uint32_t k = 0; k < dim; k++)
                        row[k] = rng_normal(&seed) * (0.25f + (float)((k * 7 + v) % 13) / 8.0f);
                if (m40_row_quantize(type, row, table + v * rb, dim) < 0) {
                        fail("embed: quantize %s", m40_ggml_type_name(type));
                        goto out;
                }
        }
        for (uint32_t t = 0; t < n_tok; t++)
                tok[t] = (int32_t)(t == 0 ? n_vocab - 1 : rnd(n_vocab));
        dt = dput(table, rb * n_vocab);
        dtok = dput(tok, sizeof(int32_t) * n_tok);
        dy = dput(NULL, sizeof(float) * ny);
        if (!dt || !dtok || !dy || dev_relayout(dt, type, dim, n_vocab, rb) < 0)
                goto out;
        if (launched(m40_cuda_embed(dt, type, rb, dim, dtok, n_tok, dy, ld, NULL), "embed") ||
            dget(y, dy, sizeof(float) * ny, "embed"))
                goto out;
        {
                const struct m40_model m = {
                        .dim = dim,
                        .tok_embd = {table, type, dim, n_vocab, rb},
                };

                for (uint32_t t = 0; t <= n_tok && bad < 3; t++) {
                        if (t < n_tok)
                                m40_model_embed(&m, tok[t], ref);
                        for (size_t i = 0; i < ld && bad < 3; i++) {
                                const float got = y[t * ld + i];
                                double e, gmax;

                                if (t == n_tok || i >= dim) {
                                        if (!is_poison(got)) {
                                                fail("embed %s dim %u: wrote outside y at row %u "
                                                     "column %zu",
                                                     m40_ggml_type_name(type), dim, t, i);
                                                bad++;
                                        }
                                        continue;
                                }
                                if (fused) { /* the scale of i's 32-element group */
                                        const size_t g0 = i & ~(size_t)31;

                                        gmax = 0.0;
                                        for (size_t k = g0; k < g0 + 32 && k < dim; k++)
                                                gmax = fmax(gmax, fabs(ref[k]));
                                        e = fabs((double)got - ref[i]) / (gmax > 0 ? gmax : 1e-30);
                                } else {
                                        e = got == ref[i] ? 0.0 : INFINITY; /* +0 == -0 */
                                }
                                if (!(e <= op_bound[OP_EMBED])) {
                                        fail("embed %s dim %u: y[%u][%zu] = %.9g, reference %.9g",
                                             m40_ggml_type_name(type), dim, t, i, got, ref[i]);
                                        bad++;
                                }
                                note(OP_EMBED, e);
                        }
                }
        }
        { /* m40_cuda_embed_rms: the same rows, row * g, each row's sum of squares as the
           * fused RMSNorm's partials (matvec.h): one per token, count 1 */
                float sc[8];
                unsigned cnt = 0;
                const uint32_t nt = n_tok < 8 ? n_tok : 8;
                struct m40_cuda_rms ro;

                for (uint32_t i = 0; i < dim; i++)
                        row[i] = (float)(0.5 + rng_unit(&seed));
                dsc = dput(NULL, M40_CUDA_RMS_PARTIAL_BYTES(1));
                dcnt = dput(NULL, sizeof(unsigned));
                dg = dput(row, sizeof(float) * dim);
                dxg = dput(NULL, sizeof(float) * ny);
                xg = malloc(sizeof(float) * ny);
                ro = (struct m40_cuda_rms){dg,
                                           dxg,
                                           ld,
                                           dsc,
                                           M40_CUDA_RMS_PARTIAL_BYTES(1),
                                           dcnt,
                                           1e-5f,
                                           {{NULL, 0}, {NULL, 0}}};
                if (!dsc || !dcnt || !dg || !dxg || !xg ||
                    launched(m40_cuda_embed_rms(dt, type, rb, dim, dtok, nt, dy, ld, &ro, NULL),
                             "embed_rms") ||
                    dget(sc, dsc, sizeof(float) * nt, "embed_rms") ||
                    dget(&cnt, dcnt, sizeof(cnt), "embed_rms") ||
                    dget(y, dy, sizeof(float) * ny, "embed_rms") ||
                    dget(xg, dxg, sizeof(float) * ny, "embed_rms"))
                        goto out;
                CHECK(cnt == 1, "embed_rms: partial count %u, not 1", cnt);
                for (uint32_t t = 0; t < nt; t++) {
                        double ss = 0.0, e;

                        for (uint32_t i = 0; i < dim; i++) {
                                ss += (double)y[t * ld + i] * y[t * ld + i];
                                if (xg[t * ld + i] != y[t * ld + i] * row[i] && bad++ < 3)
                                        fail("embed_rms %s dim %u: xg[%u][%u] is not y * g",
                                             m40_ggml_type_name(type), dim, t, i);
                        }
                        e = fabs(sc[t] - ss) / (ss > 0 ? ss : 1.0);
                        if (!(e <= 1e-6))
                                fail("embed_rms %s dim %u token %u: sum of squares %.9g, "
                                     "reference %.9g",
                                     m40_ggml_type_name(type), dim, t, sc[t], ss);
                        note(OP_RMSNORM, e);
                }
        }
out:
        cudaFree(dsc);
        cudaFree(dcnt);
        cudaFree(dg);
        cudaFree(dxg);
        free(xg);
        cudaFree(dt);
        cudaFree(dtok);
        cudaFree(dy);
        free(table);
        free(row);
        free(y);
        free(ref);
        free(tok);
}

static void test_embed(void)
{
        static const uint32_t types[] = {M40_GGML_F32,  M40_GGML_F16,  M40_GGML_BF16, M40_GGML_Q8_0,
                                         M40_GGML_Q4_0, M40_GGML_Q4_1, M40_GGML_Q5_0, M40_GGML_Q5_1,
                                         M40_GGML_Q4_K, M40_GGML_Q5_K, M40_GGML_Q6_K};

        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
                const uint32_t bs = m40_ggml_type_info(types[i])->block_size;

                if (quick >= 2 && types[i] != M40_GGML_F16 && types[i] != M40_GGML_Q4_K)
                        continue;
                if (bs == 1) {
                        embed_case(types[i], 1003, 37, quick ? 3 : 17);
                        embed_case(types[i], 7, 5, 2);
                        if (!quick)
                                embed_case(types[i], 4096, 11, 5);
                } else if (bs == 32) {
                        embed_case(types[i], 96, 37, quick ? 3 : 17);
                        embed_case(types[i], 32, 5, 2);
                        if (!quick)
                                embed_case(types[i], 2080, 11, 5);
                } else {
                        embed_case(types[i], 256, 37, quick ? 3 : 17);
                        if (!quick)
                                embed_case(types[i], 2304, 11, 5);
                }
        }
}

/* ---- rmsnorm, add, bias, swiglu ---- */

/* rmsnorm_case: mode 0 plain, 1 gather rows through idx, 2 in place (y == x). */
static void rmsnorm_case(uint32_t n, uint32_t n_rows, int with_w, int mode)
{
        const uint32_t n_x = mode == 1 ? n_rows + 3 : n_rows; /* rows of x */
        const size_t ldx = n + 1 + rnd(4), ldy = mode == 2 ? ldx : n + 3;
        const size_t nx = ldx * n_x, ny = ldy * (n_rows + 1), nxa = nx + ldx;
        const float eps = 1e-5f * (float)(1 + rnd(100));
        float *x = host_poison(nxa), *w = malloc(sizeof(float) * n);
        float *y = host_poison(ny), *ref = malloc(sizeof(float) * n);
        int32_t *idx = malloc(sizeof(int32_t) * n_rows);
        float *dx = NULL, *dw = NULL, *dy = NULL;
        int32_t *didx = NULL;
        int bad = 0;

        if (!x || !w || !y || !ref || !idx) {
                fail("out of host memory");
                goto out;
        }
        for (size_t i = 0; i < nx; i++)
                x[i] = (i % ldx) < n ? rng_normal(&seed) * 3.0f : -0.0f;
        for (uint32_t i = 0; i < n; i++)
                w[i] = 1.0f + 0.5f * rng_normal(&seed);
        for (uint32_t r = 0; r < n_rows; r++)
                idx[r] = (int32_t)rnd(n_x);
        if (mode == 2) /* the guards of an in-place y are x's: poison them there */
                for (size_t i = 0; i < nx; i++)
                        if (i % ldx >= n)
                                memset(&x[i], 0xff, 4);
        dx = dput(x, sizeof(float) * nxa); /* in place: y's guard row poisoned too */
        dw = dput(w, sizeof(float) * n);
        didx = dput(idx, sizeof(int32_t) * n_rows);
        dy = mode == 2 ? dx : dput(NULL, sizeof(float) * ny);
        if (!dx || !dw || !didx || !dy)
                goto out;
        if (launched(m40_cuda_rmsnorm(dx, ldx, mode == 1 ? didx : NULL, with_w ? dw : NULL, n, eps,
                                      n_rows, dy, ldy, NULL),
                     "rmsnorm") ||
            dget(y, dy, sizeof(float) * ny, "rmsnorm"))
                goto out;
        for (uint32_t r = 0; r <= n_rows && bad < 3; r++) {
                if (r < n_rows)
                        m40_cpu_rmsnorm(x + (size_t)(mode == 1 ? idx[r] : (int32_t)r) * ldx,
                                        with_w ? w : NULL, n, eps, ref);
                for (size_t i = 0; i < ldy && bad < 3; i++) {
                        const float got = y[r * ldy + i];
                        double e;

                        if (r == n_rows || i >= n) {
                                if (!is_poison(got)) {
                                        fail("rmsnorm n %u rows %u mode %d: wrote outside y at "
                                             "row %u column %zu",
                                             n, n_rows, mode, r, i);
                                        bad++;
                                }
                                continue;
                        }
                        e = fabs((double)got - ref[i]) / (fabs(ref[i]) + 1e-30);
                        if (!(e <= op_bound[OP_RMSNORM])) {
                                fail("rmsnorm n %u rows %u w %d mode %d: y[%u][%zu] = %.9g, "
                                     "reference %.9g",
                                     n, n_rows, with_w, mode, r, i, got, ref[i]);
                                bad++;
                        }
                        note(OP_RMSNORM, e);
                }
        }
out:
        cudaFree(dx);
        cudaFree(dw);
        cudaFree(didx);
        if (mode != 2)
                cudaFree(dy);
        free(x);
        free(w);
        free(y);
        free(ref);
        free(idx);
}

static void test_rmsnorm(void)
{
        static const uint32_t ns[] = {1, 7, 576, 1003, 4096, 8195};
        static const uint32_t rows[] = {1, 3, 17};

        for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++)
                for (size_t b = 0; b < sizeof(rows) / sizeof(rows[0]); b++) {
                        if (quick && (a + b) % 2)
                                continue;
                        if (quick >= 2 && a != 3)
                                continue;
                        rmsnorm_case(ns[a], rows[b], 1, 0);
                        rmsnorm_case(ns[a], rows[b], (int)(b & 1), 1);
                        rmsnorm_case(ns[a], rows[b], !(b & 1), 2);
                }
}

/* ew_case: x (n_tok, ld) op= y for OP_ADD, OP_BIAS, OP_SWIGLU; x's guards must stay. */
static void ew_case(int op, uint32_t n, uint32_t n_tok)
{
        const size_t ld = n + rnd(5), nx = ld * (n_tok + 1);
        float *x = malloc(sizeof(float) * nx), *y = malloc(sizeof(float) * nx);
        float *got = malloc(sizeof(float) * nx);
        float *dx = NULL, *dy = NULL;
        int r, bad = 0;

        if (!x || !y || !got) {
                fail("out of host memory");
                goto out;
        }
        for (size_t i = 0; i < nx; i++) {
                const int inside = i % ld < n && i / ld < n_tok;

                x[i] = rng_normal(&seed) * (op == OP_SWIGLU ? 4.0f : 1.0f);
                y[i] = rng_normal(&seed);
                if (!inside)
                        memset(&x[i], 0xff, 4);
        }
        dx = dput(x, sizeof(float) * nx);
        dy = dput(y, sizeof(float) * nx);
        if (!dx || !dy)
                goto out;
        r = op == OP_ADD    ? m40_cuda_add(dx, dy, ld, n, n_tok, NULL)
            : op == OP_BIAS ? m40_cuda_bias(dx, dy, ld, n, n_tok, NULL)
                            : m40_cuda_swiglu(dx, dy, ld, n, n_tok, NULL);
        if (launched(r, op_name[op]) || dget(got, dx, sizeof(float) * nx, op_name[op]))
                goto out;
        for (size_t i = 0; i < nx && bad < 3; i++) {
                const size_t t = i / ld, c = i % ld;
                float ref;
                double e;

                if (t >= n_tok || c >= n) {
                        if (!is_poison(got[i])) {
                                fail("%s n %u tok %u: wrote outside x at row %zu column %zu",
                                     op_name[op], n, n_tok, t, c);
                                bad++;
                        }
                        continue;
                }
                ref = x[i];
                if (op == OP_ADD)
                        ref += y[i];
                else if (op == OP_BIAS)
                        ref += y[c];
                else
                        m40_cpu_swiglu(&ref, &y[i], 1);
                e = op == OP_SWIGLU ? fabs((double)got[i] - ref) / (fabs(ref) + 1e-30)
                                    : (same_bits(got[i], ref) ? 0.0 : INFINITY);
                if (!(e <= op_bound[op])) {
                        fail("%s n %u tok %u: x[%zu][%zu] = %.9g, reference %.9g", op_name[op], n,
                             n_tok, t, c, got[i], ref);
                        bad++;
                }
                note(op, e);
        }
out:
        cudaFree(dx);
        cudaFree(dy);
        free(x);
        free(y);
        free(got);
}

static void test_elementwise(void)
{
        static const uint32_t ns[] = {1, 5, 576, 1003, 8192};
        static const uint32_t toks[] = {1, 3, 64, 129};

        for (int op = OP_ADD; op <= OP_SWIGLU; op++)
                for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++)
                        for (size_t b = 0; b < sizeof(toks) / sizeof(toks[0]); b++) {
                                if (quick && (a + b) % 2)
                                        continue;
                                if (quick >= 2 && (a != 3 || b > 1))
                                        continue;
                                ew_case(op, ns[a], toks[b]);
                        }
}

/* ---- rope_store ---- */

static void rope_case(uint32_t n_heads, uint32_t n_kv, uint32_t hd, uint32_t n_rot, int neox,
                      uint32_t page_tokens, uint32_t n_seq, int prefill)
{
        const uint32_t kv_dim = n_kv * hd, max_ctx = 700;
        const size_t ldq = (size_t)n_heads * hd + 1 + rnd(3), ldk = kv_dim + rnd(3);
        struct m40_rope rp = {.n_rot = n_rot, .freq_base = 10000.0f, .freq_scale = 1.0f};
        float *ff = malloc(sizeof(float) * (n_rot / 2 + 1));
        float *cs = malloc(sizeof(float) * max_ctx * n_rot), *dcs = NULL;
        uint32_t ctx[8], n_new[8];
        struct cache c = {0};
        struct step s = {0};
        float *q = NULL, *k = NULL, *v = NULL, *gq = NULL, *gk = NULL, *dq = NULL, *dk = NULL,
              *dv = NULL;
        uint16_t *gc = NULL;
        int bad = 0;

        if (!ff || !cs || n_seq > 8) {
                fail("out of host memory");
                goto out;
        }
        if (rnd(2)) { /* llama3-style frequency factors */
                for (uint32_t i = 0; i < n_rot / 2; i++)
                        ff[i] = 1.0f + (float)rnd(8);
                rp.freq_factors = ff;
        }
        rp.freq_scale = rnd(2) ? 1.0f : 0.25f;
        /* the table cuda_forward.c builds: m40_cpu_rope() of (1, 0) pairs, llama layout */
        for (uint32_t p = 0; p < max_ctx; p++) {
                struct m40_rope r0 = rp;
                float *row = cs + (size_t)p * n_rot;

                r0.neox = false;
                for (uint32_t i = 0; i < n_rot; i++)
                        row[i] = (i & 1) ? 0.0f : 1.0f;
                m40_cpu_rope(&r0, row, 1, n_rot, (int32_t)p);
        }
        rp.neox = neox;
        for (uint32_t i = 0; i < n_seq; i++) {
                ctx[i] = 1 + rnd(max_ctx);
                n_new[i] = prefill ? 1 + rnd(ctx[i] < 19 ? ctx[i] : 19) : 1;
        }
        if (cache_make(&c, 3, page_tokens, kv_dim, (max_ctx / page_tokens + 1) * n_seq, 1) ||
            step_make(&s, &c, n_seq, ctx, n_new))
                goto out;
        q = malloc(sizeof(float) * ldq * s.n_tok);
        k = malloc(sizeof(float) * ldk * s.n_tok);
        v = malloc(sizeof(float) * ldk * s.n_tok);
        gq = malloc(sizeof(float) * ldq * s.n_tok);
        gk = malloc(sizeof(float) * ldk * s.n_tok);
        gc = malloc(c.elems * 2);
        if (!q || !k || !v || !gq || !gk || !gc) {
                fail("out of host memory");
                goto out;
        }
        for (size_t i = 0; i < ldq * s.n_tok; i++)
                q[i] = i % ldq < (size_t)n_heads * hd ? rng_normal(&seed) : NAN;
        for (size_t i = 0; i < ldk * s.n_tok; i++) {
                k[i] = i % ldk < kv_dim ? rng_normal(&seed) : NAN;
                v[i] = i % ldk < kv_dim ? rng_normal(&seed) * 2.0f : NAN;
        }
        dcs = dput(cs, sizeof(float) * max_ctx * n_rot);
        dq = dput(q, sizeof(float) * ldq * s.n_tok);
        dk = dput(k, sizeof(float) * ldk * s.n_tok);
        dv = dput(v, sizeof(float) * ldk * s.n_tok);
        if (!dcs || !dq || !dk || !dv)
                goto out;
        {
                const struct m40_cuda_rope r = {dcs, n_rot, neox};
                const struct m40_cuda_kv kv = kv_of(&c, &s);

                if (launched(m40_cuda_rope_store(&r, &kv, dq, ldq, dk, dv, ldk, n_heads, n_kv, hd,
                                                 s.n_tok, NULL),
                             "rope_store") ||
                    dget(gq, dq, sizeof(float) * ldq * s.n_tok, "rope_store") ||
                    dget(gk, dk, sizeof(float) * ldk * s.n_tok, "rope_store") ||
                    dget(gc, c.d, c.elems * 2, "rope_store"))
                        goto out;
        }
        for (uint32_t t = 0; t < s.n_tok; t++) {
                float *qt = q + t * ldq, *kt = k + t * ldk;
                const size_t off = slot(&c, s.pages + s.tbl[t], s.pos[t]);

                m40_cpu_rope(&rp, qt, n_heads, hd, (int32_t)s.pos[t]);
                m40_cpu_rope(&rp, kt, n_kv, hd, (int32_t)s.pos[t]);
                for (uint32_t i = 0; i < kv_dim; i++) {
                        c.h[off + i] = m40_cpu_f32_to_f16(kt[i]);
                        c.h[c.v_off + off + i] = m40_cpu_f32_to_f16(v[t * ldk + i]);
                }
        }
        /* q and k in place: every element as the CPU's (guards: NaN in, NaN out) */
        for (size_t i = 0; i < ldq * s.n_tok && bad < 3; i++) {
                if (!same_bits(gq[i], q[i])) {
                        fail("rope_store hd %u n_rot %u neox %d: q[%zu][%zu] = %.9g, reference "
                             "%.9g",
                             hd, n_rot, neox, i / ldq, i % ldq, gq[i], q[i]);
                        bad++;
                }
                note(OP_ROPE, same_bits(gq[i], q[i]) ? 0.0 : INFINITY);
        }
        for (size_t i = 0; i < ldk * s.n_tok && bad < 3; i++) {
                if (!same_bits(gk[i], k[i])) {
                        fail("rope_store hd %u n_rot %u neox %d: k[%zu][%zu] = %.9g, reference "
                             "%.9g",
                             hd, n_rot, neox, i / ldk, i % ldk, gk[i], k[i]);
                        bad++;
                }
                note(OP_ROPE, same_bits(gk[i], k[i]) ? 0.0 : INFINITY);
        }
        /* the cache: the tokens' K/V slots as the CPU stores them, the rest still poison */
        for (size_t i = 0; i < c.elems && bad < 3; i++)
                if (gc[i] != c.h[i]) {
                        fail("rope_store hd %u n_rot %u neox %d pt %u: cache element %zu (page "
                             "%zu) = %#x, reference %#x",
                             hd, n_rot, neox, page_tokens, i, i / c.page_elems, gc[i], c.h[i]);
                        bad++;
                }
out:
        cudaFree(dcs);
        cudaFree(dq);
        cudaFree(dk);
        cudaFree(dv);
        cache_free(&c);
        step_free(&s);
        free(ff);
        free(cs);
        free(q);
        free(k);
        free(v);
        free(gq);
        free(gk);
        free(gc);
}

static void test_rope(void)
{
        /* n_heads, n_kv, hd, n_rot, page_tokens */
        static const uint32_t shapes[][5] = {
                {8, 8, 64, 64, 16}, {9, 3, 64, 64, 16}, {32, 8, 128, 128, 16},
                {6, 2, 80, 32, 7},  {4, 1, 96, 64, 32}, {3, 1, 46, 46, 5},
        };

        for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
                for (int neox = 0; neox < 2; neox++)
                        for (int prefill = 0; prefill < 2; prefill++) {
                                if (quick && (i + (size_t)neox + (size_t)prefill) % 2)
                                        continue;
                                if (quick >= 2 && i > 1)
                                        continue;
                                rope_case(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3],
                                          neox, shapes[i][4], prefill ? 2 : 5, prefill);
                        }
}

/* ---- argmax ---- */

static void argmax_case(uint32_t n, uint32_t n_rows)
{
        const size_t ld = n + rnd(4), nx = ld * n_rows;
        float *x = malloc(sizeof(float) * nx);
        int32_t *got = malloc(sizeof(int32_t) * (n_rows + 1)), *dret = NULL;
        float *dx = NULL;

        if (!x || !got) {
                fail("out of host memory");
                goto out;
        }
        for (uint32_t r = 0; r < n_rows; r++) {
                float *row = x + r * ld;
                const int kind = (int)(r % 4);
                float mx = -INFINITY;

                for (uint32_t i = 0; i < n; i++) {
                        row[i] = rng_normal(&seed) * 4.0f;
                        if (row[i] > mx)
                                mx = row[i];
                }
                for (size_t i = n; i < ld; i++)
                        row[i] = INFINITY; /* past the row: must not win */
                if (kind == 1)             /* ties: the maximum several times */
                        for (int k = 0; k < 4; k++)
                                row[rnd(n)] = mx;
                else if (kind == 2) /* ties with the first and the last element */
                        row[0] = row[n - 1] = mx + 1.0f;
                else if (kind == 3) /* a constant row: index 0 */
                        for (uint32_t i = 0; i < n; i++)
                                row[i] = -1.5f;
        }
        dx = dput(x, sizeof(float) * nx);
        dret = dput(NULL, sizeof(int32_t) * (n_rows + 1));
        if (!dx || !dret)
                goto out;
        if (launched(m40_cuda_argmax(dx, ld, n, n_rows, dret, NULL), "argmax") ||
            dget(got, dret, sizeof(int32_t) * (n_rows + 1), "argmax"))
                goto out;
        for (uint32_t r = 0; r < n_rows; r++) {
                const int32_t ref = m40_sampler_argmax(x + r * ld, n);

                if (got[r] != ref)
                        fail("argmax n %u row %u: %d, reference %d", n, r, got[r], ref);
                note(OP_ARGMAX, got[r] == ref ? 0.0 : INFINITY);
        }
        if (got[n_rows] != -1)
                fail("argmax n %u rows %u: wrote past ret", n, n_rows);
out:
        cudaFree(dx);
        cudaFree(dret);
        free(x);
        free(got);
}

static void test_argmax(void)
{
        static const uint32_t ns[] = {1, 7, 1000, 32003, 49155, 128256};

        for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
                if (quick >= 2 && i != 3)
                        continue;
                argmax_case(ns[i], quick ? 4 : 9);
        }
}

/* ---- prefetch_l2: a hint; its contract is its argument checks and that it changes no
 * byte, for ranges of any length and budgets that end anywhere ---- */

static void test_prefetch(void)
{
        const size_t n = 3 * 4096 + 77;
        uint8_t *h = malloc(n), *got = malloc(n), *d = NULL;

        if (!h || !got) {
                fail("out of host memory");
                goto out;
        }
        for (size_t i = 0; i < n; i++)
                h[i] = (uint8_t)rnd(256);
        d = dput(h, n);
        if (!d)
                goto out;
        {
                struct m40_cuda_range r[M40_CUDA_PREFETCH_MAX + 1];
                static const size_t budgets[] = {0, 1, 127, 128, 5000, (size_t)-1};

                for (uint32_t i = 0; i <= M40_CUDA_PREFETCH_MAX; i++) {
                        const size_t off = rnd(4096);

                        r[i] = (struct m40_cuda_range){d + off, i == 2 ? 100 : rnd(n - off + 1)};
                }
                CHECK(m40_cuda_prefetch_l2(NULL, 1, 4096, NULL) == -EINVAL,
                      "prefetch: NULL ranges");
                CHECK(m40_cuda_prefetch_l2(r, M40_CUDA_PREFETCH_MAX + 1, 4096, NULL) == -EINVAL,
                      "prefetch: too many ranges");
                r[0].p = NULL;
                CHECK(m40_cuda_prefetch_l2(r, 1, 4096, NULL) == -EINVAL, "prefetch: NULL range");
                r[0] = (struct m40_cuda_range){NULL, 0}; /* empty: allowed */
                CHECK(m40_cuda_prefetch_l2(NULL, 0, 4096, NULL) == 0, "prefetch: no ranges");
                for (size_t b = 0; b < sizeof(budgets) / sizeof(budgets[0]); b++)
                        for (uint32_t k = 1; k <= M40_CUDA_PREFETCH_MAX; k++)
                                if (launched(m40_cuda_prefetch_l2(r, k, budgets[b], NULL),
                                             "prefetch_l2"))
                                        goto out;
                r[1] = (struct m40_cuda_range){d, n}; /* the whole buffer, twice over */
                r[2] = (struct m40_cuda_range){d + 1, n - 1};
                if (launched(m40_cuda_prefetch_l2(r, 3, (size_t)-1, NULL), "prefetch_l2") ||
                    dget(got, d, n, "prefetch_l2"))
                        goto out;
                CHECK(memcmp(got, h, n) == 0, "prefetch: the buffer changed");
        }
out:
        cudaFree(d);
        free(h);
        free(got);
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
        printf("seed %" PRIu64 "%s (repeat: test_ops %" PRIu64 ")\n", seed,
               quick ? " (quick mode)" : "", seed);
        test_embed();
        test_rmsnorm();
        test_elementwise();
        test_rope();
        test_argmax();
        test_prefetch();

        printf("%-11s %-8s %10s %10s\n", "kernel", "bound", "worst", "outputs");
        for (int op = 0; op < OP_COUNT; op++)
                printf("%-11s %-8.0e %10.2e %10" PRIu64 "\n", op_name[op], op_bound[op], worst[op],
                       checked[op]);
        printf("(bound 0: bit for bit; embed: exact types 0, offset types |y - ref| / group max "
               "|ref|; rmsnorm, swiglu |y - ref| / |ref|)\n");
        m40_cuda_device_free(d);
        return finish();
}

#endif
