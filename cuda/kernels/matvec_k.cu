/* cuda/kernels/matvec_k.cu - the matrix kernels of matvec.cuh and mmq.cuh instantiated for the
 * 256-element super-block types Q4_K, Q5_K and Q6_K. Launch layout and tolerance: see
 * matvec.cuh. */
#include <errno.h>

#include "cuda/kernels/matvec_launch.cuh"

int m40_mv_launch_k(uint32_t type, const struct mv_args *a, int n, int sms, cudaStream_t stream)
{
        switch (type) {
                M40_MV_CASE(M40_GGML_Q4_K)
                M40_MV_CASE(M40_GGML_Q5_K)
                M40_MV_CASE(M40_GGML_Q6_K)
        default:
                return -ENOTSUP;
        }
}

int m40_mq_launch_k(uint32_t type, const struct mq_args *a, int sms, size_t part_bytes,
                    cudaStream_t stream)
{
        switch (type) {
                M40_MQ_CASE(M40_GGML_Q4_K)
                M40_MQ_CASE(M40_GGML_Q5_K)
                M40_MQ_CASE(M40_GGML_Q6_K)
        default:
                return -ENOTSUP;
        }
}
