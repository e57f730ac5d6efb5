/* cuda/kernels/matvec_q.cu - the matrix kernels of matvec.cuh and mmq.cuh instantiated for the
 * 32-element block types Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1. Launch layout and tolerance: see
 * matvec.cuh. */
#include <errno.h>

#include "cuda/kernels/matvec_launch.cuh"

int m40_mv_launch_q(uint32_t type, const struct mv_args *a, int n, int sms, cudaStream_t stream)
{
        switch (type) {
                M40_MV_CASE(M40_GGML_Q8_0)
                M40_MV_CASE(M40_GGML_Q4_0)
                M40_MV_CASE(M40_GGML_Q4_1)
                M40_MV_CASE(M40_GGML_Q5_0)
                M40_MV_CASE(M40_GGML_Q5_1)
        default:
                return -ENOTSUP;
        }
}

int m40_mq_launch_q(uint32_t type, const struct mq_args *a, int sms, size_t part_bytes,
                    cudaStream_t stream)
{
        switch (type) {
                M40_MQ_CASE(M40_GGML_Q8_0)
                M40_MQ_CASE(M40_GGML_Q4_0)
                M40_MQ_CASE(M40_GGML_Q4_1)
                M40_MQ_CASE(M40_GGML_Q5_0)
                M40_MQ_CASE(M40_GGML_Q5_1)
        default:
                return -ENOTSUP;
        }
}
