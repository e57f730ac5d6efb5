/* tests/bench/bench_list.c - counts and comma-separated lists of counts on the benchmarks'
 * command lines (bench_list.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_list.h"

int bench_count_parse(const char *s, uint32_t min, uint32_t max, uint32_t *ret)
{
        unsigned long v;
        char *end;

        if (*s < '0' || *s > '9')
                return -EINVAL;
        errno = 0;
        v = strtoul(s, &end, 10);
        if (errno != 0 || *end != '\0' || v < min || v > max)
                return -EINVAL;
        *ret = (uint32_t)v;
        return 0;
}

int bench_list_parse(const char *s, uint32_t min, uint32_t max, int max_n, uint32_t *ret,
                     int *ret_n, char *why, size_t whylen)
{
        uint32_t v[BENCH_LIST_MAX];
        char buf[256], *tok, *save = NULL;
        int n = 0;

        if (max_n > BENCH_LIST_MAX)
                max_n = BENCH_LIST_MAX;
        if (strlen(s) >= sizeof(buf)) {
                snprintf(why, whylen, "longer than %zu bytes", sizeof(buf) - 1);
                return -EINVAL;
        }
        strcpy(buf, s);
        for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                if (n == max_n) {
                        snprintf(why, whylen, "more than %d entries", max_n);
                        return -EINVAL;
                }
                if (bench_count_parse(tok, min, max, &v[n]) < 0) {
                        snprintf(why, whylen, "'%.32s' is not a count in %u..%u", tok, min, max);
                        return -EINVAL;
                }
                n++;
        }
        if (!n) {
                snprintf(why, whylen, "no entry");
                return -EINVAL;
        }
        memcpy(ret, v, (size_t)n * sizeof(*v));
        *ret_n = n;
        return 0;
}
