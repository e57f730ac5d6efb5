/* cuda/kernels/matvec_f.cu - the matrix kernels of matvec.cuh and mmq.cuh instantiated for the
 * float weight types F32, F16 and BF16 (rows of any length; whole-vector loads when rows are
 * 16-byte aligned). Launch layout and tolerance: see matvec.cuh. */
#include <errno.h>

#include "cuda/kernels/matvec_launch.cuh"

int m40_mv_launch_f(uint32_t type, const struct mv_args *a, int n, int sms, cudaStream_t stream)
{
        switch (type) {
                M40_MV_CASE(M40_GGML_F32)
                M40_MV_CASE(M40_GGML_F16)
                M40_MV_CASE(M40_GGML_BF16)
        default:
                return -ENOTSUP;
        }
}

int m40_mq_launch_f(uint32_t type, const struct mq_args *a, int sms, size_t part_bytes,
                    cudaStream_t stream)
{
        switch (type) {
                M40_MQ_CASE(M40_GGML_F32)
                M40_MQ_CASE(M40_GGML_F16)
                M40_MQ_CASE(M40_GGML_BF16)
        default:
                return -ENOTSUP;
        }
}
