/* cuda/matvec_k.cu - the matrix kernels of matvec.cuh instantiated for the 256-element
 * super-block types Q4_K, Q5_K and Q6_K. Launch layout and tolerance: see
 * matvec.cuh. */
#include <errno.h>

#include "cuda/matvec_launch.cuh"

int m40_mv_launch_k(uint32_t type, const struct mv_args *a, int n, int tiled, int sms,
                    cudaStream_t stream)
{
        switch (type) {
                M40_MV_CASE(M40_GGML_Q4_K)
                M40_MV_CASE(M40_GGML_Q5_K)
                M40_MV_CASE(M40_GGML_Q6_K)
        default:
                return -ENOTSUP;
        }
}
