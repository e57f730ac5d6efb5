/* cuda/kernels/layout.cuh - the device layout of weight rows (split rows, quant.cuh says why):
 * which bytes of a GGML block go where (split_fields(), split_src()), for the engine's
 * relayout kernel (cuda/kernels/layout.cu) and, on the host, split_row() for tests and tools.
 * __host__ __device__ throughout, like the decoders in quant.cuh that read the layout. */
#ifndef M40_CUDA_LAYOUT_CUH
#define M40_CUDA_LAYOUT_CUH

#include "cuda/kernels/quant.cuh"

#define SPLIT_MAX_FIELDS 3

/* The split layout of `type` (see the top of quant.cuh): returns the number of fields
 * (0 when the type keeps GGML's layout) and, for each in its split order, where it lies
 * in a GGML block (off, size bytes); *bb gets the block's bytes. All even: the
 * split moves whole 16-bit units. */
M40_HD int split_fields(uint32_t type, int *bb, int off[SPLIT_MAX_FIELDS],
                        int size[SPLIT_MAX_FIELDS])
{
        int n = 0;

#define F(o, sz) (off[n] = (o), size[n] = (sz), n++)
        switch (type) {
        case M40_GGML_Q8_0:
                *bb = 34, F(2, 32), F(0, 2);
                break;
        case M40_GGML_Q4_0:
                *bb = 18, F(2, 16), F(0, 2);
                break;
        case M40_GGML_Q4_1:
                *bb = 20, F(4, 16), F(0, 4);
                break;
        case M40_GGML_Q5_0:
                *bb = 22, F(6, 16), F(2, 4), F(0, 2);
                break;
        case M40_GGML_Q5_1:
                *bb = 24, F(8, 16), F(4, 4), F(0, 4);
                break;
        case M40_GGML_Q6_K:
                *bb = 210, F(0, 208), F(208, 2);
                break;
        default:
                break;
        }
#undef F
        return n;
}

/* Where 16-bit unit u (0 .. nb * bb / 2) of a split row comes from in the GGML row: its
 * byte offset there. Field f of block k lies at start_f + size_f * k, start_f the sum of
 * the earlier fields' sizes times nb. */
M40_HD int split_src(int u, int nb, int bb, int nf, const int off[SPLIT_MAX_FIELDS],
                     const int size[SPLIT_MAX_FIELDS])
{
        int o = 2 * u;

        for (int f = 0; f < nf; f++) {
                const int end = size[f] * nb;

                if (o < end || f == nf - 1)
                        return bb * (o / size[f]) + off[f] + o % size[f];
                o -= end;
        }
        return 0;
}

/* split_row - GGML row `in` (nb blocks of `type`) in the split layout, to `out` (not
 * overlapping in). A type that keeps GGML's layout is copied. For the host (tests,
 * tools); the engine does the same on the device (cuda/kernels/layout.cu). */
static inline __host__ void split_row(uint32_t type, const uint8_t *in, uint8_t *out, int nb)
{
        int bb, off[SPLIT_MAX_FIELDS], size[SPLIT_MAX_FIELDS];
        const int nf = split_fields(type, &bb, off, size);

        if (!nf) {
                const struct m40_ggml_type_info *ti = m40_ggml_type_info(type);

                memcpy(out, in, (size_t)nb * ti->type_size);
                return;
        }
        for (int u = 0; u < nb * bb / 2; u++)
                memcpy(out + 2 * u, in + split_src(u, nb, bb, nf, off, size), 2);
}

#endif
