/* cuda/kernels/persist_step_k.cu - the persistent step kernel (persist_step.cuh) instantiated
 * for the K types Q4_K, Q5_K and Q6_K. */
#include "cuda/kernels/persist_step.cuh"

bool m40_ps_ops_k(uint32_t type, struct ps_ops *o)
{
        switch (type) {
                M40_PS_CASE(M40_GGML_Q4_K)
                M40_PS_CASE(M40_GGML_Q5_K)
                M40_PS_CASE(M40_GGML_Q6_K)
        default:
                return false;
        }
}
