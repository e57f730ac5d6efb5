/* tests/bench/bench_report.c - the report of m40-bench --model (see bench_model.h): the
 * tables printed as text, and the JSON member "model"; and the JSON string writer that
 * m40-bench's own JSON uses too. */
#include <inttypes.h>

#include "bench_model.h"

static void load_row(FILE *f, const char *what, double gbs_w, double s_w, double gbs_c, double s_c,
                     bool warm, bool cold)
{
        fprintf(f, "  %-30s", what);
        if (warm)
                fprintf(f, " %7.2f GB/s %7.2f s", gbs_w, s_w);
        else
                fprintf(f, " %20s", "-");
        if (cold)
                fprintf(f, "   %7.2f GB/s %7.2f s", gbs_c, s_c);
        fprintf(f, "\n");
}

void bench_model_text(const struct bench_model *b, FILE *f)
{
        const struct bench_load *w = &b->warm, *c = &b->cold;

        fprintf(f, "\nmodel %s\n  %s\n", b->path, b->name);
        fprintf(f, "  %u layers, d %u, vocab %u, %s output; matrices %s (file type %u)\n",
                b->n_layers, b->dim, b->n_vocab, b->tied ? "tied" : "untied", b->wtype,
                b->file_type);
        fprintf(f,
                "  file %.3f GB, tensor data %.3f GB; read per token %.3f GB; matrix "
                "params %.3f G\n",
                b->file_bytes / 1e9, b->tensor_bytes / 1e9, b->bytes_per_token / 1e9,
                b->matrix_params / 1e9);
        fprintf(f, "  FP32 peak %.0f GFLOP/s (%d SMs x %d lanes x 2 x %.0f MHz); copy %.1f GB/s\n",
                b->peak_gflops, b->sm_count, b->fp32_lanes, b->clock_khz / 1e3, b->copy_gbs);
        if (w->done || c->done) {
                fprintf(f, "\nload (GB/s of tensor data)        page cache warm");
                fprintf(f, "%s\n", c->done ? "            cold" : "");
                load_row(f,
                         w->done && w->read_direct ? "read (16 MiB, O_DIRECT)"
                                                   : "read (16 MiB chunks)",
                         w->read_gbs, w->read_s, c->read_gbs, c->read_s, w->done, c->done);
                load_row(f, "loader (m40_cuda_load_gguf)", w->loader_gbs, w->loader_s,
                         c->loader_gbs, c->loader_s, w->done, c->done);
                if (w->done && w->buffered_gbs > 0)
                        load_row(f, "loader, O_DIRECT off", w->buffered_gbs, w->buffered_s, 0, 0,
                                 true, false);
                load_row(f, "engine (m40_cuda_engine_new)", w->engine_gbs, w->engine_s,
                         c->engine_gbs, c->engine_s, w->done, c->done);
                fprintf(f, "  %-30s", "loader / read");
                fprintf(f, " %7.0f%%%12s", 100.0 * w->loader_gbs / w->read_gbs, "");
                if (c->done)
                        fprintf(f, "   %7.0f%%", 100.0 * c->loader_gbs / c->read_gbs);
                fprintf(f, "\n  %-30s", "engine / read");
                fprintf(f, " %7.0f%%%12s", 100.0 * w->engine_gbs / w->read_gbs, "");
                if (c->done)
                        fprintf(f, "   %7.0f%%", 100.0 * c->engine_gbs / c->read_gbs);
                fprintf(f, "\n  loader: %s%s; resident at start: warm %.2f GB",
                        w->loader_io ? w->loader_io : "?", w->loader_direct ? ", O_DIRECT" : "",
                        w->resident_bytes / 1e9);
                if (c->done)
                        fprintf(f, ", cold %.3f GB (after fsync + fadvise); cold read %s",
                                c->resident_bytes / 1e9,
                                c->read_direct ? "O_DIRECT" : "buffered (no O_DIRECT here)");
                fprintf(f,
                        "\n  host-to-device copy from pinned memory %.2f GB/s; write-back "
                        "(fsync) of the file before the tests %.1f s\n",
                        b->h2d_gbs, b->sync_s);
        }
        if (b->n_dec) {
                fprintf(f,
                        "\ndecode (mode %s; greedy, every sequence decoding; FP32 FLOP = 2 x "
                        "%.3f G params x batch)\n",
                        b->mode, b->matrix_params / 1e9);
                if (b->mode_note[0])
                        fprintf(f, "  %s\n", b->mode_note);
                fprintf(f, "  batch     tok/s   ms/step  GFLOP/s  of FP32 peak   weights GB/s  "
                           "of copy\n");
                for (int i = 0; i < b->n_dec; i++) {
                        const struct bench_decode *d = &b->dec[i];

                        fprintf(f, "  %5u %9.1f %9.3f %8.0f %12.1f%%", d->batch, d->tok_s,
                                d->ms_per_step, d->gflops, 100.0 * d->of_peak);
                        if (d->batch == 1)
                                fprintf(f, " %14.0f %7.1f%%", d->weight_gbs, 100.0 * d->of_copy);
                        fprintf(f, "\n");
                }
        }
        if (b->pre.done) {
                const struct bench_prefill *p = &b->pre;

                fprintf(f, "\nprefill (one %u-token prompt, median)\n", p->tokens);
                fprintf(f, "  %.1f tok/s, %.3f s, %.0f GFLOP/s", p->tok_s, p->seconds, p->gflops);
                if (p->sgemm_done)
                        fprintf(f, "; cuBLAS SGEMM on the layer matrices %.0f GFLOP/s: %.0f%%",
                                p->sgemm_gflops, 100.0 * p->ratio);
                fprintf(f, "\n");
        }
}

static void json_load(FILE *f, const char *key, const struct bench_load *l)
{
        fprintf(f, ",\"%s\":", key);
        if (!l->done) {
                fprintf(f, "null");
                return;
        }
        fprintf(f,
                "{\"resident_bytes\":%" PRIu64 ",\"read_s\":%.4f,\"read_gbs\":%.3f,"
                "\"read_direct\":%s,\"loader_s\":%.4f,\"loader_gbs\":%.3f,\"loader_io\":",
                l->resident_bytes, l->read_s, l->read_gbs, l->read_direct ? "true" : "false",
                l->loader_s, l->loader_gbs);
        bench_json_string(f, l->loader_io ? l->loader_io : "");
        fprintf(f,
                ",\"loader_direct\":%s,\"buffered_s\":%.4f,\"buffered_gbs\":%.3f,"
                "\"engine_s\":%.4f,\"engine_gbs\":%.3f,"
                "\"loader_of_read\":%.3f,\"engine_of_read\":%.3f}",
                l->loader_direct ? "true" : "false", l->buffered_s, l->buffered_gbs, l->engine_s,
                l->engine_gbs, l->loader_gbs / l->read_gbs, l->engine_gbs / l->read_gbs);
}

void bench_model_json(const struct bench_model *b, FILE *f)
{
        fprintf(f, "\"model\":{\"path\":");
        bench_json_string(f, b->path);
        fprintf(f, ",\"name\":");
        bench_json_string(f, b->name);
        fprintf(f, ",\"matrix_type\":");
        bench_json_string(f, b->wtype);
        fprintf(f,
                ",\"file_type\":%u,\"n_layers\":%u,\"dim\":%u,\"n_vocab\":%u,\"kv_dim\":%u,"
                "\"tied\":%s,\"file_bytes\":%" PRIu64 ",\"tensor_bytes\":%" PRIu64
                ",\"bytes_per_token\":%" PRIu64 ",\"layer_params\":%" PRIu64
                ",\"matrix_params\":%" PRIu64 ",",
                b->file_type, b->n_layers, b->dim, b->n_vocab, b->kv_dim,
                b->tied ? "true" : "false", b->file_bytes, b->tensor_bytes, b->bytes_per_token,
                b->layer_params, b->matrix_params);
        fprintf(f,
                "\"copy_gbs\":%.1f,\"fp32_peak_gflops\":%.1f,\"sm_count\":%d,\"fp32_lanes\":%d,"
                "\"clock_khz\":%d,\"h2d_gbs\":%.2f,\"sync_s\":%.3f,\"evict_s\":%.3f",
                b->copy_gbs, b->peak_gflops, b->sm_count, b->fp32_lanes, b->clock_khz, b->h2d_gbs,
                b->sync_s, b->evict_s);
        json_load(f, "load_warm", &b->warm);
        json_load(f, "load_cold", &b->cold);
        fprintf(f, ",\"mode\":");
        bench_json_string(f, b->mode);
        fprintf(f, ",\"mode_note\":");
        bench_json_string(f, b->mode_note);
        fprintf(f, ",\"decode\":[");
        for (int i = 0; i < b->n_dec; i++) {
                const struct bench_decode *d = &b->dec[i];

                fprintf(f,
                        "%s{\"batch\":%u,\"steps\":%u,\"tokens\":%llu,\"seconds\":%.5f,"
                        "\"tok_s\":%.2f,\"ms_per_step\":%.4f,\"gflops\":%.1f,"
                        "\"of_fp32_peak\":%.4f",
                        i ? "," : "", d->batch, d->steps, (unsigned long long)d->tokens, d->seconds,
                        d->tok_s, d->ms_per_step, d->gflops, d->of_peak);
                if (d->batch == 1)
                        fprintf(f, ",\"weight_gbs\":%.1f,\"of_copy\":%.4f", d->weight_gbs,
                                d->of_copy);
                fprintf(f, "}");
        }
        fprintf(f, "],\"error\":");
        if (b->error[0])
                bench_json_string(f, b->error);
        else
                fprintf(f, "null");
        fprintf(f, ",\"prefill\":");
        if (!b->pre.done) {
                fprintf(f, "null}");
                return;
        }
        fprintf(f, "{\"tokens\":%u,\"seconds\":%.5f,\"tok_s\":%.2f,\"gflops\":%.1f", b->pre.tokens,
                b->pre.seconds, b->pre.tok_s, b->pre.gflops);
        if (b->pre.sgemm_done)
                fprintf(f, ",\"sgemm_s\":%.5f,\"sgemm_gflops\":%.1f,\"of_sgemm\":%.4f",
                        b->pre.sgemm_s, b->pre.sgemm_gflops, b->pre.ratio);
        fprintf(f, "}}");
}
