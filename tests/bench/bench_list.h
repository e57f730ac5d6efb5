/* tests/bench/bench_list.h - what the benchmark programs (m40-bench, m40-serve-bench)
 * share for reading counts and comma-separated lists of counts from the command line
 * (m40-bench --batches, m40-serve-bench --clients, which m40-serve-bench hands on to
 * m40-bench --batches for its engine figure: hence one limit for both). */
#ifndef M40_TESTS_BENCH_LIST_H
#define M40_TESTS_BENCH_LIST_H

#include <stddef.h>
#include <stdint.h>

#define BENCH_LIST_MAX 16 /* entries of one list: runs of one benchmark */

/* bench_count_parse - s as a decimal count in min..max: digits only, nothing after them.
 * Returns 0 with it in *ret, or -EINVAL (*ret untouched). */
int bench_count_parse(const char *s, uint32_t min, uint32_t max, uint32_t *ret);

/* bench_list_parse - "1,8,32,64" into ret[0..n), in order, each in min..max, at most
 * max_n (<= BENCH_LIST_MAX) entries; empty entries ("1,,2") are skipped. Returns 0 with
 * the count in *ret_n (ret and *ret_n are written only on success), or -EINVAL with the
 * reason in why (the entry that is not a count in range, or too many entries) when the
 * list is empty, longer than 255 bytes, has more than max_n entries or a bad one. */
int bench_list_parse(const char *s, uint32_t min, uint32_t max, int max_n, uint32_t *ret,
                     int *ret_n, char *why, size_t whylen);

#endif
