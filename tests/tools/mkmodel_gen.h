/* mkmodel_gen.h - m40-mkmodel's --random-blocks generator: quantized rows written directly
 * as random blocks, for benchmark models whose values do not matter but whose bytes do.
 *
 * Owns the layout of every quantized GGUF block type it writes (ggml's block_q8_0,
 * block_q4_0, ..., block_q6_K) and the choice of their fields: quants are uniformly random
 * bits; scales are finite f16 numbers picked so that the dequantized values have mean about
 * 0 and the tensor's standard deviation (K types: per-sub-block 6-bit scales in 32..63 with
 * the min equal to the scale, so each sub-block is centred). A row is a pure function of
 * (seed, tensor index, row index), like the float generator's rows, so a file does not
 * depend on the thread count. Such a file has exactly the size, layout and types of a
 * really quantized one (the same bytes are read per token), only the values differ from
 * what quantizing the float generator's rows would give. */
#ifndef M40_TESTS_MKMODEL_GEN_H
#define M40_TESTS_MKMODEL_GEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* m40_mkmodel_random_supported - whether type t (enum m40_ggml_type) has a random-block
 * writer: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K. Float types have none (they are
 * generated as floats). */
bool m40_mkmodel_random_supported(uint32_t t);

/* m40_mkmodel_random_row - write row `row` of tensor number `ti` (ne0 elements, a multiple of
 * t's block size) of supported type t at out, as random blocks whose dequantized values
 * have standard deviation about std. Returns 0, or -EINVAL for an unsupported type or a
 * ragged row. */
int m40_mkmodel_random_row(uint32_t t, uint64_t seed, uint64_t ti, uint64_t row, float std,
                           void *out, uint64_t ne0);

#endif
