/* tests/gpu/test_matvec_qkv.c - the fused q/k/v + RoPE + KV append
 * (m40_cuda_matmul_qkv_rope, cuda/kernels/matvec.h) against the two calls it stands for.
 *
 * Owns the checks that for every weight type (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K
 * Q5_K Q6_K), three head layouts (short rows that no warp splits; 135M's 9 q heads over 3
 * kv heads of 64; head_dim 50 with partial rotation, llama and NEOX pairs) and batches
 * 1..8, m40_cuda_matmul_qkv_rope writes q, k and v (guard columns and a guard row
 * included) and the whole paged KV cache bit for bit as m40_cuda_matmul_n_rms followed
 * by ops.h's m40_cuda_rope_store do, each column its own sequence at a random position
 * with a scrambled page table; and that it refuses bad arguments before anything runs.
 * The two calls are checked against the CPU elsewhere (test_matvec's rms-in column,
 * test_ops's rope_store). Fresh random inputs on every run (seed printed; M40_TEST_SEED
 * repeats one).
 *
 * Exit 0 pass, 1 fail, 77 skip (no GPU, or a build without CUDA). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
#include "gputest.h"
#include "model/ggml_type.h"
#include "testmat.h"

#define MAX_TYPES TEST_TYPES

#define RMS_EPS   1e-5f
#define RMS_PARTS 3 /* the partials the test hands the fused norm */

/* Outputs and cache elements compared, per type. */
static uint64_t qkv_checked[MAX_TYPES];

/* Download n bytes of d and of e and count the bytes where they differ (-1 after fail()
 * when a copy failed); *first gets the first differing 4-byte (or 2-byte) unit. */
static long diff_dev(const void *d, const void *e, size_t n, size_t unit, size_t *first)
{
        unsigned char *a = malloc(n ? n : 1), *b = malloc(n ? n : 1);
        long nd = -1;

        if (a && b && cudaMemcpy(a, d, n, cudaMemcpyDeviceToHost) == cudaSuccess &&
            cudaMemcpy(b, e, n, cudaMemcpyDeviceToHost) == cudaSuccess) {
                nd = 0;
                for (size_t i = 0; i < n; i += unit)
                        if (memcmp(a + i, b + i, unit)) {
                                if (!nd)
                                        *first = i / unit;
                                nd++;
                        }
        } else {
                fail("download: %s", cudaGetErrorString(cudaGetLastError()));
        }
        free(a);
        free(b);
        return nd;
}

/* One case: q (n_heads heads of hd rows), k and v (n_kv heads) of type ms[*].type,
 * batch columns, each column its own sequence at a random position with a scrambled
 * page table; run fused (cache A, outputs A) and as the two calls (B), both from the
 * same poisoned buffers, and require every byte of q, k, v (guard columns and a guard
 * row included) and of the whole cache to match. */
static void qkv_case(int ti, const struct mat *ms, uint32_t hd, uint32_t n_rot, int neox,
                     uint32_t batch)
{
        enum { PAGE_TOKENS = 16, MAX_CTX = 300, LAYERS = 2, PER = MAX_CTX / PAGE_TOKENS + 1 };
        const uint32_t n_in = ms[0].n_in, nq = ms[0].n_out, nk = ms[1].n_out;
        const size_t ldx = ((size_t)n_in + 4) & ~(size_t)3, ldq = nq + 1 + batch % 3, ldk = nk + 2;
        const size_t page_elems = 2 * (size_t)LAYERS * PAGE_TOKENS * nk;
        const uint32_t n_pages = PER * batch + 5, layer = (uint32_t)(rng_next(&seed) % LAYERS);
        const size_t cache_bytes = page_elems * n_pages * 2,
                     ny[3] = {ldq * (batch + 1), ldk * (batch + 1), ldk * (batch + 1)};
        float *hx = malloc(sizeof(float) * ldx * batch),
              *hcs = malloc(sizeof(float) * MAX_CTX * n_rot);
        float *hy = malloc(sizeof(float) * ldq * (batch + 1));
        uint16_t *hc = malloc(cache_bytes);
        uint32_t pos[M40_CUDA_MATVEC_MAX_BATCH], tbl[M40_CUDA_MATVEC_MAX_BATCH];
        uint32_t *pages = malloc(sizeof(uint32_t) * n_pages);
        float parts[RMS_PARTS][8];
        const unsigned np = RMS_PARTS;
        void *dx = NULL, *dcs = NULL, *dpos = NULL, *dtbl = NULL, *dpages = NULL, *dpart = NULL,
             *dcount = NULL, *cache[2] = {NULL, NULL};
        float *y[2][3] = {{NULL}};
        struct m40_cuda_matrix w[3];
        const char *what[4] = {"q", "k", "v", "KV cache"};
        int r;

        if (!hx || !hcs || !hy || !hc || !pages) {
                fail("out of host memory");
                goto out;
        }
        for (size_t i = 0; i < ldx * batch; i++)
                hx[i] = rng_normal(&seed);
        for (size_t i = 0; i < (size_t)MAX_CTX * n_rot; i++)
                hcs[i] = rng_normal(&seed);
        for (size_t i = 0; i < cache_bytes / 2; i++)
                hc[i] = (uint16_t)rng_next(&seed);
        for (uint32_t i = 0; i < n_pages; i++)
                pages[i] = i;
        for (uint32_t i = n_pages; i > 1; i--) { /* the pool in scrambled order */
                const uint32_t j = (uint32_t)(rng_next(&seed) % i), t = pages[i - 1];

                pages[i - 1] = pages[j];
                pages[j] = t;
        }
        for (uint32_t c = 0; c < batch; c++) {
                tbl[c] = c * PER;
                pos[c] = (uint32_t)(rng_next(&seed) % MAX_CTX);
        }
        for (int b = 0; b < RMS_PARTS; b++)
                for (int c = 0; c < 8; c++)
                        parts[b][c] = (float)(n_in * (0.2 + rng_unit(&seed)) / RMS_PARTS);
        memset(hy, 0xff, sizeof(float) * ldq * (batch + 1));
        if (!(dx = dput(hx, sizeof(float) * ldx * batch)) ||
            !(dcs = dput(hcs, sizeof(float) * MAX_CTX * n_rot)) ||
            !(dpos = dput(pos, sizeof(pos))) || !(dtbl = dput(tbl, sizeof(tbl))) ||
            !(dpages = dput(pages, sizeof(uint32_t) * n_pages)) ||
            !(dpart = dput(parts, sizeof(parts))) || !(dcount = dput(&np, sizeof(np))) ||
            !(cache[0] = dput(hc, cache_bytes)) || !(cache[1] = dput(hc, cache_bytes)))
                goto out;
        for (int a = 0; a < 2; a++)
                for (int i = 0; i < 3; i++)
                        if (!(y[a][i] = dput(hy, sizeof(float) * ny[i])))
                                goto out;
        for (int i = 0; i < 3; i++)
                w[i] = mat_view(&ms[i]);
        {
                const struct m40_cuda_rms rms = {
                        NULL,
                        NULL,
                        0,
                        dpart,
                        sizeof(parts),
                        dcount,
                        RMS_EPS,
                        {{w[0].data, (size_t)w[0].n_out * w[0].row_bytes}, {NULL, 0}}};
                const struct m40_cuda_rope rope = {dcs, n_rot, neox};
                struct m40_cuda_kv kv = {.page_elems = page_elems,
                                         .v_off = page_elems / 2,
                                         .layer = layer,
                                         .page_tokens = PAGE_TOKENS,
                                         .kv_dim = nk,
                                         .pos = dpos,
                                         .tbl = dtbl,
                                         .pages = dpages};
                const size_t ldy[3] = {ldq, ldk, ldk};

                kv.base = cache[0];
                r = m40_cuda_matmul_qkv_rope(w, dx, ldx, &rms, &rope, &kv, hd, y[0], ldy, batch,
                                             NULL);
                if (!r) {
                        kv.base = cache[1];
                        r = m40_cuda_matmul_n_rms(w, 3, dx, ldx, &rms, y[1], ldy, batch, NULL);
                }
                if (!r)
                        r = m40_cuda_rope_store(&rope, &kv, y[1][0], ldq, y[1][1], y[1][2], ldk,
                                                nq / hd, nk / hd, hd, batch, NULL);
                if (!r && cudaDeviceSynchronize() != cudaSuccess)
                        r = M40_ECUDA;
                if (r) {
                        fail("qkv-rope %s n_in %u q %u k %u hd %u batch %u: %d (%s) %s",
                             m40_ggml_type_name(ms[0].type), n_in, nq, nk, hd, batch, r,
                             m40_strerror(r), m40_cuda_last_error());
                        goto out;
                }
        }
        for (int i = 0; i < 4; i++) {
                const size_t n = i < 3 ? sizeof(float) * ny[i] : cache_bytes, unit = i < 3 ? 4 : 2;
                size_t first = 0;
                const long nd = diff_dev(i < 3 ? (void *)y[0][i] : cache[0],
                                         i < 3 ? (void *)y[1][i] : cache[1], n, unit, &first);

                if (nd > 0)
                        fail("qkv-rope %s n_in %u q %u k %u hd %u n_rot %u neox %d batch %u: %s "
                             "differs from matmul_n_rms + rope_store in %ld elements, first %zu",
                             m40_ggml_type_name(ms[0].type), n_in, nq, nk, hd, n_rot, neox, batch,
                             what[i], nd, first);
                if (nd >= 0)
                        qkv_checked[ti] += n / unit;
        }
out:
        for (int a = 0; a < 2; a++) {
                cudaFree(cache[a]);
                for (int i = 0; i < 3; i++)
                        cudaFree(y[a][i]);
        }
        cudaFree(dx);
        cudaFree(dcs);
        cudaFree(dpos);
        cudaFree(dtbl);
        cudaFree(dpages);
        cudaFree(dpart);
        cudaFree(dcount);
        free(hx);
        free(hcs);
        free(hy);
        free(hc);
        free(pages);
}

/* The fused q/k/v + RoPE + KV append against the two calls it stands for (each checked
 * against the CPU: test_matvec's rms-in column, rope_store in test_ops): short rows (no
 * warp splits a row: the epilogue's register path), 135M's head layout, and head_dim 50
 * with partial rotation (llama pairs fused; NEOX pairs take the two calls), batches 1..8
 * (every type's kernel takes 2 or more rows per warp at every batch: all fused). */
static void run_qkv_rope(int ti, int quick)
{
        static const uint32_t batches[] = {1, 2, 3, 5, 8};
        static const struct {
                uint32_t n_in, n_in_k, heads, kv, hd, n_rot;
        } shapes[] = {{256, 256, 4, 2, 32, 32}, {576, 512, 9, 3, 64, 64}, {512, 512, 6, 2, 50, 32}};
        const uint32_t bs = m40_ggml_type_info(test_types[ti])->block_size;

        for (size_t sh = 0; sh < sizeof(shapes) / sizeof(shapes[0]); sh++) {
                const uint32_t n_in = bs == 256 ? shapes[sh].n_in_k : shapes[sh].n_in;
                const uint32_t hd = shapes[sh].hd;
                struct mat ms[3];
                uint32_t made = 0;

                if (quick && sh == 1)
                        continue;
                for (; made < 3; made++)
                        if (mat_make(&ms[made], test_types[ti], n_in,
                                     (made ? shapes[sh].kv : shapes[sh].heads) * hd) < 0)
                                break;
                for (size_t i = 0; made == 3 && i < sizeof(batches) / sizeof(batches[0]); i++)
                        if (!quick || i % 2 == 0) {
                                qkv_case(ti, ms, hd, shapes[sh].n_rot, 0, batches[i]);
                                if (sh == 2)
                                        qkv_case(ti, ms, hd, shapes[sh].n_rot, 1, batches[i]);
                        }
                while (made > 0)
                        mat_free(&ms[--made]);
        }
}

/* Each of these is refused before anything runs. */
static void check_arguments(void)
{
        struct mat m;
        float *dx, *dy;
        struct m40_cuda_matrix w;

        if (args_make(&m, &dx, &dy) < 0)
                return;
        w = mat_view(&m);
        {
                const struct m40_cuda_matrix ws[3] = {w, w, w};
                float *ys[3] = {dy, dy + 16, dy + 32};
                const struct m40_cuda_rms rms = {NULL,    NULL,
                                                 0,       dy + 256,
                                                 256,     (unsigned *)(dy + 512),
                                                 RMS_EPS, {{NULL, 0}, {NULL, 0}}};
                struct m40_cuda_rope rope = {dy + 600, 4, 0};
                struct m40_cuda_kv kv = {.base = (uint16_t *)(dy + 700),
                                         .page_elems = 64,
                                         .v_off = 32,
                                         .page_tokens = 2,
                                         .kv_dim = 8,
                                         .pos = (uint32_t *)dx,
                                         .tbl = (uint32_t *)dx,
                                         .pages = (uint32_t *)dx};
                size_t l3[3] = {8, 8, 8};

                CHECK(m40_cuda_matmul_qkv_rope(ws, dx, 64, &rms, NULL, &kv, 4, ys, l3, 1, NULL) ==
                              -EINVAL,
                      "qkv_rope without rope accepted");
                CHECK(m40_cuda_matmul_qkv_rope(ws, dx, 64, &rms, &rope, &kv, 3, ys, l3, 1, NULL) ==
                              -EINVAL,
                      "qkv_rope of odd head_dim accepted");
                rope.n_rot = 6;
                CHECK(m40_cuda_matmul_qkv_rope(ws, dx, 64, &rms, &rope, &kv, 4, ys, l3, 1, NULL) ==
                              -EINVAL,
                      "qkv_rope of n_rot > head_dim accepted");
                rope.n_rot = 4;
                l3[2] = 9;
                CHECK(m40_cuda_matmul_qkv_rope(ws, dx, 64, &rms, &rope, &kv, 4, ys, l3, 1, NULL) ==
                              -EINVAL,
                      "qkv_rope with k and v apart by different strides accepted");
                l3[2] = 8;
                kv.kv_dim = 4;
                CHECK(m40_cuda_matmul_qkv_rope(ws, dx, 64, &rms, &rope, &kv, 4, ys, l3, 1, NULL) ==
                              -EINVAL,
                      "qkv_rope into KV rows shorter than k accepted");
                kv.kv_dim = 8;
                CHECK(m40_cuda_matmul_qkv_rope(ws, dx, 64, NULL, &rope, &kv, 4, ys, l3, 1, NULL) ==
                              -EINVAL,
                      "qkv_rope without the norm's partials accepted");
        }
        args_free(&m, dx, dy);
}

int main(void)
{
        int code, quick = quick_mode();
        struct m40_cuda_device *d = gpu_open_seeded(quick, &code);

        if (!d)
                return code;
        check_arguments();
        for (int ti = 0; ti < MAX_TYPES; ti++) {
                const uint32_t t = test_types[ti];

                /* racecheck: one type of each family; the shared-memory code is the same */
                if (quick >= 2 && t != M40_GGML_F16 && t != M40_GGML_Q4_0 && t != M40_GGML_Q6_K)
                        continue;
                run_qkv_rope(ti, quick);
        }

        printf("%-5s %9s\n", "type", "qkv-rope");
        for (int ti = 0; ti < MAX_TYPES; ti++)
                printf("%-5s %9" PRIu64 "\n", m40_ggml_type_name(test_types[ti]), qkv_checked[ti]);
        printf("(q, k, v and KV cache elements equal bit for bit to matmul_n_rms + rope_store)\n");
        m40_cuda_device_free(d);
        return finish();
}

#endif
