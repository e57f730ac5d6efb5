/* dequant.c - m40_cpu_dequant(): GGML blocks to floats for every supported weight type
 * (see quant.h), dispatching to the decoders of dequant_inl.h in a vectorized clone. */
#include "quant.h"

#include "model/ggml_type.h"
#include "dequant_inl.h"

M40_CLONES void m40_cpu_dequant(uint32_t t, const void *src, float *dst, size_t nb)
{
        switch (t) {
        case M40_GGML_F32:
                memcpy(dst, src, nb * sizeof(float));
                break;
        case M40_GGML_F16:
                dq_f16(src, dst, nb);
                break;
        case M40_GGML_BF16:
                dq_bf16(src, dst, nb);
                break;
        case M40_GGML_Q4_0:
                dq_q4_0(src, dst, nb);
                break;
        case M40_GGML_Q4_1:
                dq_q4_1(src, dst, nb);
                break;
        case M40_GGML_Q5_0:
                dq_q5_0(src, dst, nb);
                break;
        case M40_GGML_Q5_1:
                dq_q5_1(src, dst, nb);
                break;
        case M40_GGML_Q8_0:
                dq_q8_0(src, dst, nb);
                break;
        case M40_GGML_Q4_K:
                dq_q4_k(src, dst, nb);
                break;
        case M40_GGML_Q5_K:
                dq_q5_k(src, dst, nb);
                break;
        case M40_GGML_Q6_K:
                dq_q6_k(src, dst, nb);
                break;
        default:
                break;
        }
}
