/* tests/check.h - the failure counter and CHECK() of the plain-C unit tests (the GPU tests
 * have gputest.h, the integration tests itest.h).
 *
 * CHECK(cond, fmt, ...) counts a failure and prints "FAIL file:line: message" to stderr when
 * cond is false, and goes on; a test ends with `return failures ? 1 : 0;` (or its own summary
 * of `failures`). Include once per test program, after the system headers. */
#ifndef M40_TESTS_CHECK_H
#define M40_TESTS_CHECK_H

#include <stdio.h>

static int failures;

#define CHECK(c, ...)                                                                              \
        do {                                                                                       \
                if (!(c)) {                                                                        \
                        failures++;                                                                \
                        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                       \
                        fprintf(stderr, __VA_ARGS__);                                              \
                        fprintf(stderr, "\n");                                                     \
                }                                                                                  \
        } while (0)

#endif
