/* ggml_type.h - the GGML tensor types as GGUF files number them, and their block layout.
 *
 * A tensor of type t is stored as rows of ne[0] elements; each row is ne[0] / block_size
 * blocks of type_size bytes. Ids are GGUF's (ggml.h's enum ggml_type); ids that ggml has
 * retired are not listed. */
#ifndef M40_GGML_TYPE_H
#define M40_GGML_TYPE_H

#include <stdbool.h>
#include <stdint.h>

enum m40_ggml_type {
        M40_GGML_F32 = 0,
        M40_GGML_F16 = 1,
        M40_GGML_Q4_0 = 2,
        M40_GGML_Q4_1 = 3,
        M40_GGML_Q5_0 = 6,
        M40_GGML_Q5_1 = 7,
        M40_GGML_Q8_0 = 8,
        M40_GGML_Q8_1 = 9,
        M40_GGML_Q2_K = 10,
        M40_GGML_Q3_K = 11,
        M40_GGML_Q4_K = 12,
        M40_GGML_Q5_K = 13,
        M40_GGML_Q6_K = 14,
        M40_GGML_Q8_K = 15,
        M40_GGML_IQ2_XXS = 16,
        M40_GGML_IQ2_XS = 17,
        M40_GGML_IQ3_XXS = 18,
        M40_GGML_IQ1_S = 19,
        M40_GGML_IQ4_NL = 20,
        M40_GGML_IQ3_S = 21,
        M40_GGML_IQ2_S = 22,
        M40_GGML_IQ4_XS = 23,
        M40_GGML_I8 = 24,
        M40_GGML_I16 = 25,
        M40_GGML_I32 = 26,
        M40_GGML_I64 = 27,
        M40_GGML_F64 = 28,
        M40_GGML_IQ1_M = 29,
        M40_GGML_BF16 = 30,
        M40_GGML_TQ1_0 = 34,
        M40_GGML_TQ2_0 = 35,
        M40_GGML_MXFP4 = 39,
        M40_GGML_TYPE_LIMIT = 40, /* every id is below this */
};

struct m40_ggml_type_info {
        const char *name;    /* "Q4_K" */
        uint32_t block_size; /* elements per block */
        uint32_t type_size;  /* bytes per block */
        bool supported;      /* m40-llm reads tensors of this type (DESIGN.md section 6) */
};

/* m40_ggml_type_info - layout of GGML type id t, or NULL when t is not a type m40-llm
 * supports (see m40_ggml_type_name() for a name to put in the error). */
const struct m40_ggml_type_info *m40_ggml_type_info(uint32_t t);

/* m40_ggml_type_name - ggml's name for id t ("IQ2_XXS"), supported or not; NULL when
 * ggml never defined t. */
const char *m40_ggml_type_name(uint32_t t);

/* m40_ggml_type_from_name - the id whose name is name (case-insensitive), or -1. */
int m40_ggml_type_from_name(const char *name);

/* m40_ggml_row_size - bytes of one row of ne0 elements of supported type t, in *ret.
 * Returns 0, M40_EUNSUPPORTED for an unsupported type, M40_EFORMAT when ne0 is not a
 * multiple of the block size. */
int m40_ggml_row_size(uint32_t t, uint64_t ne0, uint64_t *ret);

#endif
