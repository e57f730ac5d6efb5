/* tests/bench/json_out.c - JSON strings for the benchmark programs (see json_out.h). */
#include "json_out.h"

void bench_json_string(FILE *f, const char *s)
{
        fputc('"', f);
        for (; s && *s; s++) {
                unsigned char ch = (unsigned char)*s;

                if (ch == '"' || ch == '\\')
                        fprintf(f, "\\%c", ch);
                else if (ch < 0x20)
                        fprintf(f, "\\u%04x", ch);
                else
                        fputc(ch, f);
        }
        fputc('"', f);
}
