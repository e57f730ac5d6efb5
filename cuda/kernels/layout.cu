/* cuda/kernels/layout.cu - m40_cuda_relayout(): weight rows from GGUF's block layout into the
 * device layout of quant.cuh (split rows), on the GPU, once per tensor after loading.
 *
 * Rows go, as many as fit, to a bounce buffer (one device-to-device copy), then k_split
 * writes each row back in place in its new order: one thread per 16-bit unit of the
 * split row, which gathers it from the bounce copy (split_src()). Both passes stream the
 * data once (engine load time includes them: RESULTS.md's load rows). */
#include <errno.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "m40/error.h"
#include "cuda/runtime/launch.h"
#include "cuda/kernels/matvec.h"
#include "cuda/kernels/layout.cuh"

#define SPLIT_THREADS 256

struct split_shape {
        int nb, bb, nf;
        int off[SPLIT_MAX_FIELDS], size[SPLIT_MAX_FIELDS];
};

/* Row blockIdx.y of src (rows row_bytes apart) into dst, split. */
static __global__ void __launch_bounds__(SPLIT_THREADS)
        k_split(const uint8_t *__restrict__ src, uint8_t *__restrict__ dst, size_t row_bytes,
                const struct split_shape sh)
{
        const int u = blockIdx.x * SPLIT_THREADS + threadIdx.x;
        const uint8_t *in = src + (size_t)blockIdx.y * row_bytes;
        uint16_t *out = (uint16_t *)(dst + (size_t)blockIdx.y * row_bytes);

        if (u < sh.nb * sh.bb / 2)
                out[u] = *(const uint16_t *)(in +
                                             split_src(u, sh.nb, sh.bb, sh.nf, sh.off, sh.size));
}

static bool shape(const struct m40_cuda_matrix *w, struct split_shape *sh)
{
        const struct m40_ggml_type_info *ti = m40_ggml_type_info(w->type);

        if (!ti || !ti->supported || w->n_in % ti->block_size)
                return false;
        sh->nf = split_fields(w->type, &sh->bb, sh->off, sh->size);
        sh->nb = (int)(w->n_in / ti->block_size);
        return true;
}

extern "C" size_t m40_cuda_relayout_bounce(const struct m40_cuda_matrix *w)
{
        struct split_shape sh;

        return w && shape(w, &sh) && sh.nf ? w->row_bytes : 0;
}

extern "C" int m40_cuda_relayout(const struct m40_cuda_matrix *w, void *bounce, size_t bounce_bytes,
                                 struct CUstream_st *stream)
{
        struct split_shape sh;
        size_t rows_per;

        if (!w || !w->data || !shape(w, &sh))
                return -EINVAL;
        if (!sh.nf || !w->n_out)
                return 0;
        if (!bounce || (size_t)sh.nb * sh.bb > w->row_bytes || w->row_bytes % 2 ||
            (uintptr_t)w->data % 2 || bounce_bytes < w->row_bytes || sh.nb > INT32_MAX / sh.bb)
                return -EINVAL;
        rows_per = bounce_bytes / w->row_bytes;
        if (rows_per > 65535) /* gridDim.y */
                rows_per = 65535;
        for (size_t r0 = 0; r0 < w->n_out; r0 += rows_per) {
                const size_t n = w->n_out - r0 < rows_per ? w->n_out - r0 : rows_per;
                uint8_t *rows = (uint8_t *)w->data + r0 * w->row_bytes;
                const dim3 grid((unsigned)((sh.nb * sh.bb / 2 + SPLIT_THREADS - 1) / SPLIT_THREADS),
                                (unsigned)n);

                if (cudaMemcpyAsync(bounce, rows, n * w->row_bytes, cudaMemcpyDeviceToDevice,
                                    stream) != cudaSuccess)
                        return m40_cuda_launch_status("relayout copy");
                k_split<<<grid, SPLIT_THREADS, 0, stream>>>((const uint8_t *)bounce, rows,
                                                            w->row_bytes, sh);
                if (m40_cuda_launch_status("k_split"))
                        return M40_ECUDA;
        }
        return 0;
}
