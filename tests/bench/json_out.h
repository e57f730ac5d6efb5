/* tests/bench/json_out.h - what the benchmark programs (m40-bench, m40-serve-bench)
 * share for writing JSON by hand: a string, quoted and escaped. */
#ifndef M40_TESTS_BENCH_JSON_OUT_H
#define M40_TESTS_BENCH_JSON_OUT_H

#include <stdio.h>

/* bench_json_string - s as a JSON string, quoted, '"' and '\\' escaped, control characters
 * as \u00XX (NULL: ""). */
void bench_json_string(FILE *f, const char *s);

#endif
