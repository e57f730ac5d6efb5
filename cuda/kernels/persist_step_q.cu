/* cuda/kernels/persist_step_q.cu - the persistent step kernel (persist_step.cuh) instantiated
 * for the 32-element block types Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1. */
#include "cuda/kernels/persist_step.cuh"

bool m40_ps_ops_q(uint32_t type, struct ps_ops *o)
{
        switch (type) {
                M40_PS_CASE(M40_GGML_Q8_0)
                M40_PS_CASE(M40_GGML_Q4_0)
                M40_PS_CASE(M40_GGML_Q4_1)
                M40_PS_CASE(M40_GGML_Q5_0)
                M40_PS_CASE(M40_GGML_Q5_1)
        default:
                return false;
        }
}
