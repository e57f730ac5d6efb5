/* ggml_type.c - block layouts of the GGML tensor types (see ggml_type.h). */
#include "ggml_type.h"

#include <stddef.h>
#include <strings.h>

#include "m40/error.h"

/* Sizes follow ggml's block structs: e.g. block_q4_K = f16 d, f16 dmin, 12 scale bytes,
 * 128 quant bytes = 144 bytes per 256 weights. */
static const struct m40_ggml_type_info types[M40_GGML_TYPE_LIMIT] = {
        [M40_GGML_F32] = {"F32", 1, 4, true},
        [M40_GGML_F16] = {"F16", 1, 2, true},
        [M40_GGML_BF16] = {"BF16", 1, 2, true},
        [M40_GGML_Q4_0] = {"Q4_0", 32, 18, true},
        [M40_GGML_Q4_1] = {"Q4_1", 32, 20, true},
        [M40_GGML_Q5_0] = {"Q5_0", 32, 22, true},
        [M40_GGML_Q5_1] = {"Q5_1", 32, 24, true},
        [M40_GGML_Q8_0] = {"Q8_0", 32, 34, true},
        [M40_GGML_Q4_K] = {"Q4_K", 256, 144, true},
        [M40_GGML_Q5_K] = {"Q5_K", 256, 176, true},
        [M40_GGML_Q6_K] = {"Q6_K", 256, 210, true},
        /* Types ggml defines that no m40-llm engine computes with yet: named for errors only. */
        [M40_GGML_Q8_1] = {"Q8_1", 0, 0, false},
        [M40_GGML_Q2_K] = {"Q2_K", 0, 0, false},
        [M40_GGML_Q3_K] = {"Q3_K", 0, 0, false},
        [M40_GGML_Q8_K] = {"Q8_K", 0, 0, false},
        [M40_GGML_IQ2_XXS] = {"IQ2_XXS", 0, 0, false},
        [M40_GGML_IQ2_XS] = {"IQ2_XS", 0, 0, false},
        [M40_GGML_IQ3_XXS] = {"IQ3_XXS", 0, 0, false},
        [M40_GGML_IQ1_S] = {"IQ1_S", 0, 0, false},
        [M40_GGML_IQ4_NL] = {"IQ4_NL", 0, 0, false},
        [M40_GGML_IQ3_S] = {"IQ3_S", 0, 0, false},
        [M40_GGML_IQ2_S] = {"IQ2_S", 0, 0, false},
        [M40_GGML_IQ4_XS] = {"IQ4_XS", 0, 0, false},
        [M40_GGML_I8] = {"I8", 0, 0, false},
        [M40_GGML_I16] = {"I16", 0, 0, false},
        [M40_GGML_I32] = {"I32", 0, 0, false},
        [M40_GGML_I64] = {"I64", 0, 0, false},
        [M40_GGML_F64] = {"F64", 0, 0, false},
        [M40_GGML_IQ1_M] = {"IQ1_M", 0, 0, false},
        [M40_GGML_TQ1_0] = {"TQ1_0", 0, 0, false},
        [M40_GGML_TQ2_0] = {"TQ2_0", 0, 0, false},
        [M40_GGML_MXFP4] = {"MXFP4", 0, 0, false},
};

const struct m40_ggml_type_info *m40_ggml_type_info(uint32_t t)
{
        if (t >= M40_GGML_TYPE_LIMIT || !types[t].name || !types[t].supported)
                return NULL;
        return &types[t];
}

const char *m40_ggml_type_name(uint32_t t)
{
        return t < M40_GGML_TYPE_LIMIT ? types[t].name : NULL;
}

int m40_ggml_type_from_name(const char *name)
{
        for (int t = 0; t < M40_GGML_TYPE_LIMIT; t++)
                if (types[t].name && strcasecmp(types[t].name, name) == 0)
                        return t;
        return -1;
}

int m40_ggml_row_size(uint32_t t, uint64_t ne0, uint64_t *ret)
{
        const struct m40_ggml_type_info *ti = m40_ggml_type_info(t);

        if (!ti)
                return M40_EUNSUPPORTED;
        if (ne0 % ti->block_size)
                return M40_EFORMAT;
        *ret = ne0 / ti->block_size * ti->type_size;
        return 0;
}
