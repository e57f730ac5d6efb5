/* cuda/kernels/persist_step_f.cu - the persistent step kernel (persist_step.cuh) instantiated
 * for the float types F32, F16 and BF16. */
#include "cuda/kernels/persist_step.cuh"

bool m40_ps_ops_f(uint32_t type, struct ps_ops *o)
{
        switch (type) {
                M40_PS_CASE(M40_GGML_F32)
                M40_PS_CASE(M40_GGML_F16)
                M40_PS_CASE(M40_GGML_BF16)
        default:
                return false;
        }
}
