/* tests/bench/bench_sync.c - m40-bench --sync (contract in bench_sync.h). */
#include "bench_sync.h"

#include <string.h>

#include "m40/error.h"

int bench_sync_run(struct bench_sync *ret, char *err, size_t errlen)
{
        memset(ret, 0, sizeof(*ret));
        for (int i = 0; i < BENCH_SYNC_RUNS; i++) {
                const int r =
                        m40_cuda_sync_probe(i + 1, BENCH_SYNC_STAGES, &ret->p[i], err, errlen);

                if (r < 0)
                        return r;
                ret->per_sm[i] = i + 1;
                ret->n = i + 1;
        }
        return 0;
}

void bench_sync_text(const struct bench_sync *b, FILE *f)
{
        fprintf(f,
                "\npersistent kernel waits (sync probe, %d stages a run; every value the "
                "chains carried checked):\n",
                BENCH_SYNC_STAGES);
        fprintf(f, "  %-9s %7s %8s %12s %14s %16s\n", "per SM", "blocks", "threads", "launch us",
                "grid barrier us", "dataflow wait us");
        for (int i = 0; i < b->n; i++)
                fprintf(f, "  %-9d %7d %8d %12.2f %14.3f %16.3f\n", b->per_sm[i], b->p[i].blocks,
                        b->p[i].threads, b->p[i].launch_us, b->p[i].barrier_us, b->p[i].hop_us);
}

void bench_sync_json(const struct bench_sync *b, FILE *f)
{
        fprintf(f, "\"sync\":[");
        for (int i = 0; i < b->n; i++)
                fprintf(f,
                        "%s{\"per_sm\":%d,\"blocks\":%d,\"threads\":%d,\"stages\":%u,"
                        "\"launch_us\":%.3f,\"barrier_us\":%.4f,\"hop_us\":%.4f}",
                        i ? "," : "", b->per_sm[i], b->p[i].blocks, b->p[i].threads, b->p[i].stages,
                        b->p[i].launch_us, b->p[i].barrier_us, b->p[i].hop_us);
        fputc(']', f);
}
