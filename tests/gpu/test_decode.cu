/* tests/gpu/test_decode.cu - the GPU decoders of cuda/kernels/quant.cuh and the matrix-vector
 * inner loop of cuda/kernels/matvec.cuh, run on the CPU (they are __host__ __device__).
 *
 * Owns the checks, needing no GPU (suite 'unit', so CI without a GPU runs them), that
 * for every weight type deq8(), reading the device layout (rows made by split_row()),
 * equals the CPU engine's m40_cpu_dequant() of the GGML rows exactly, and
 * that matvec_lane(), summed over the 32 lanes of a warp and the warps of a row split
 * the way k_matvec splits it, equals the double-precision dot product of the
 * dequantized weights with random activations within 1e-5 of sum |w x|, for every
 * batch width NB and row count R the launcher uses, and ragged shapes (rows not a
 * multiple of R, float rows not a multiple of 8 or 4, unaligned float rows).
 * tests/gpu/test_matvec.c checks the same on the GPU through the kernels.
 *
 * Exit 0 pass, 1 fail. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/kernels/layout.cuh"
#include "cuda/kernels/matvec_launch.cuh"

extern "C" {
#include "engine/quant.h"
#include "model/ggml_type.h"
#include "quantize.h"
}

static int failures;
static uint64_t seed = 0x243f6a8885a308d3ULL;

static double unit(void)
{
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        return (double)(seed >> 11) * (1.0 / 9007199254740992.0);
}

static float normal(void)
{
        const double u = unit() + 1e-300, v = unit();

        return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* One matrix of type T: deq8 against m40_cpu_dequant, then matvec_lane over R-row
 * groups and S splits against the double-precision reference. */
template <int T, int NB, bool VEC> static void check(int n_in, int n_out, int nb, int splits)
{
        enum { R = mv_rows<T, NB>::R };
        const struct m40_ggml_type_info *ti = m40_ggml_type_info(T);
        uint64_t rb64 = 0;
        const int ldx = (n_in + 3) & ~3;
        double dmax = 0.0, emax = 0.0;

        if (m40_ggml_row_size(T, (uint64_t)n_in, &rb64) < 0) {
                printf("FAIL: row size of %s x %d\n", ti->name, n_in);
                failures++;
                return;
        }
        const size_t rb = (size_t)rb64;
        uint8_t *w = (uint8_t *)aligned_alloc(64, (rb * n_out + 16 + 63) & ~(size_t)63);
        float *deq = (float *)malloc(sizeof(float) * n_in * n_out);
        float *row = (float *)malloc(sizeof(float) * n_in);
        float *x = (float *)aligned_alloc(64, (sizeof(float) * ldx * nb + 63) & ~(size_t)63);

        uint8_t *ggml = (uint8_t *)malloc(rb);

        for (int o = 0; o < n_out; o++) { /* GGML rows, dequantized, then in device layout */
                for (int k = 0; k < n_in; k++)
                        row[k] = normal() * (float)(1 + (k + o) % 7);
                m40_row_quantize(T, row, ggml, (size_t)n_in);
                m40_cpu_dequant(T, ggml, deq + (size_t)o * n_in, n_in / ti->block_size);
                split_row(T, ggml, w + o * rb, n_in / (int)ti->block_size);
        }
        free(ggml);
        for (int i = 0; i < ldx * nb; i++)
                x[i] = normal();

        for (int o = 0; o < n_out; o++)
                for (int k0 = 0; k0 < n_in; k0 += 8) {
                        float w8[8];

                        qt<T>::deq8(w + o * rb, k0, n_in, w8);
                        for (int i = 0; i < 8 && k0 + i < n_in; i++) {
                                const double a = w8[i], b = deq[(size_t)o * n_in + k0 + i];

                                if (a != b && fabs(a - b) > dmax)
                                        dmax = fabs(a - b) / (fabs(b) > 0 ? fabs(b) : 1.0);
                        }
                }

        const int np = mv_q<T, NB>::pieces(n_in), steps = (np + 31) >> 5;
        for (int r0 = 0; r0 < n_out; r0 += R) {
                const int nrows = n_out - r0 < R ? n_out - r0 : R;
                double tot[R][NB] = {};

                for (int s = 0; s < splits; s++) {
                        const int p0 = 32 * (steps * s / splits);
                        const int p1 = 32 * (steps * (s + 1) / splits);

                        for (int lane = 0; lane < 32; lane++) {
                                float acc[R][NB] = {};

                                matvec_lane<T, NB, R, VEC, mv_unroll<T, NB>::U>(
                                        w + (size_t)r0 * rb, rb, nrows, n_in, p0, p1 < np ? p1 : np,
                                        lane, 32, x, ldx, nb, acc);
                                for (int r = 0; r < R; r++)
                                        for (int c = 0; c < NB; c++)
                                                tot[r][c] += acc[r][c];
                        }
                }
                for (int r = 0; r < nrows; r++)
                        for (int c = 0; c < nb; c++) {
                                double ref = 0.0, mag = 0.0;

                                for (int k = 0; k < n_in; k++) {
                                        const double p = (double)deq[(size_t)(r0 + r) * n_in + k] *
                                                         x[c * ldx + k];
                                        ref += p;
                                        mag += fabs(p);
                                }
                                if (fabs(tot[r][c] - ref) / mag > emax)
                                        emax = fabs(tot[r][c] - ref) / mag;
                        }
        }
        const bool bad = dmax > 0.0 || !(emax <= 1e-5);
        printf("%s %-5s NB %d R %d%s n_in %5d n_out %4d batch %d split %d: deq8 %s, matvec "
               "error %.2e of sum|wx|\n",
               bad ? "FAIL" : "ok  ", ti->name, NB, (int)R, VEC ? "" : " unaligned", n_in, n_out,
               nb, splits, dmax > 0.0 ? "differs" : "exact", emax);
        failures += bad;
        free(w);
        free(deq);
        free(row);
        free(x);
}

template <int T> static void check_type(int n_long, int n_short)
{
        check<T, 1, true>(n_long, 13, 1, 1);
        check<T, 1, true>(n_short, 301, 1, 4);
        check<T, 2, true>(n_short, 9, 2, 2);
        check<T, 4, true>(n_long, 6, 3, 8);
        check<T, 8, true>(n_short, 7, 7, 1);
}

int main(void)
{
        check_type<M40_GGML_F32>(4096, 1004);
        check<M40_GGML_F32, 1, false>(1003, 9, 1, 2);
        check<M40_GGML_F32, 2, false>(7, 9, 2, 1);
        check_type<M40_GGML_F16>(4096, 1000);
        check<M40_GGML_F16, 1, false>(1003, 9, 1, 2);
        check<M40_GGML_F16, 8, false>(33, 3, 8, 2);
        check_type<M40_GGML_BF16>(4096, 1000);
        check<M40_GGML_BF16, 4, false>(1001, 9, 4, 2);
        /* the split types also unaligned: rows of an odd number of blocks (2-aligned
         * starts: 16-bit loads), of an even one (4-aligned: 32-bit loads) */
        check_type<M40_GGML_Q8_0>(4096, 32);
        check<M40_GGML_Q8_0, 1, false>(96, 9, 1, 2);
        check<M40_GGML_Q8_0, 2, false>(576, 5, 2, 1);
        check_type<M40_GGML_Q4_0>(4096, 32);
        check<M40_GGML_Q4_0, 1, false>(96, 9, 1, 1);
        check<M40_GGML_Q4_0, 4, false>(576, 7, 3, 2);
        check_type<M40_GGML_Q4_1>(4096, 96);
        check<M40_GGML_Q4_1, 1, false>(96, 9, 1, 2);
        check_type<M40_GGML_Q5_0>(4096, 576);
        check<M40_GGML_Q5_0, 1, false>(96, 9, 1, 1);
        check<M40_GGML_Q5_0, 2, false>(576, 5, 2, 2);
        check_type<M40_GGML_Q5_1>(4096, 32);
        check<M40_GGML_Q5_1, 8, false>(96, 9, 5, 1);
        check_type<M40_GGML_Q4_K>(4096, 256);
        check_type<M40_GGML_Q5_K>(4096, 768);
        check_type<M40_GGML_Q6_K>(4096, 256);
        check<M40_GGML_Q6_K, 1, false>(768, 9, 1, 2);
        check<M40_GGML_Q6_K, 2, false>(256, 5, 2, 1);
        if (failures) {
                printf("%d check(s) failed\n", failures);
                return 1;
        }
        printf("all checks passed\n");
        return 0;
}
