/* show.c - `m40ctl show FILE.gguf|NAME [--json]`: describes a model file, read directly, given
 * by its path or by its name in the model store (store.h). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "m40ctl.h"
#include "store.h"
#include "model/ggml_type.h"
#include "model/gguf.h"
#include "model/model_info.h"
#include "text/chat_detect.h"

static void usage(FILE *f)
{
        fputs("Usage: m40ctl show [--json] FILE.gguf|NAME\n"
              "\n"
              "Reads and validates the GGUF file FILE.gguf, or the model NAME of the model\n"
              "store (m40ctl list), header, metadata and tensor table but not the weights, and\n"
              "describes the model: architecture, name, parameter count, context length,\n"
              "layers, attention heads and KV heads, embedding and FFN sizes, RoPE settings,\n"
              "vocabulary size and tokenizer, chat template family, and a table of weight\n"
              "types with their tensor counts, parameters and bytes.\n"
              "\n"
              "An argument with a '/' or ending in .gguf is a path; anything else is a store\n"
              "name (write ./FILE for a file FILE in this directory).\n"
              "\n"
              "Options:\n"
              "  --json       Print one JSON object instead of text.\n"
              "  -h, --help   Show this text.\n"
              "\n"
              "Exit status: 0 success; 1 the file is unreadable, malformed or unsupported (the\n"
              "message names the byte offset and the problem) or NAME is not in the store;\n"
              "2 bad command line.\n",
              f);
}

static void json_str(FILE *f, const char *s)
{
        if (!s) {
                fputs("null", f);
                return;
        }
        fputc('"', f);
        for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
                if (*p == '"' || *p == '\\')
                        fprintf(f, "\\%c", *p);
                else if (*p == '\n')
                        fputs("\\n", f);
                else if (*p == '\t')
                        fputs("\\t", f);
                else if (*p < 0x20 || *p == 0x7f)
                        fprintf(f, "\\u%04x", *p);
                else
                        fputc(*p, f);
        }
        fputc('"', f);
}

/* A float as JSON: JSON has no NaN or infinity. */
static void json_num(FILE *f, double v)
{
        if (isfinite(v))
                fprintf(f, "%.7g", v); /* every value shown is a float */
        else
                fputs("null", f);
}

static void print_json(FILE *f, const struct m40_gguf *g, const struct m40_model_info *m,
                       const char *family)
{
        fputs("{\"file\": ", f);
        json_str(f, m40_gguf_path(g));
        fprintf(f, ", \"file_bytes\": %" PRIu64 ", \"gguf_version\": %u, \"alignment\": %u",
                m40_gguf_file_size(g), m40_gguf_version(g), m40_gguf_alignment(g));
        fputs(", \"architecture\": ", f);
        json_str(f, m->arch);
        fputs(", \"name\": ", f);
        json_str(f, m->name);
        fprintf(f,
                ", \"parameters\": %" PRIu64 ", \"weight_bytes\": %" PRIu64
                ", \"context_length\": %u, \"layers\": %u, \"embedding\": %u, \"heads\": %u"
                ", \"kv_heads\": %u, \"head_dim\": %u, \"ffn\": %u, \"rope_dims\": %u",
                m->n_params, m->weight_bytes, m->context_length, m->n_layers, m->n_embd, m->n_heads,
                m->n_kv_heads, m->head_dim, m->n_ff, m->rope_dims);
        fputs(", \"rope_freq_base\": ", f);
        json_num(f, m->rope_freq_base);
        fputs(", \"rope_scaling\": ", f);
        json_str(f, m->rope_scaling);
        fputs(", \"rope_scaling_factor\": ", f);
        json_num(f, m->rope_scaling_factor);
        fputs(", \"rms_eps\": ", f);
        json_num(f, m->rms_eps);
        fprintf(f, ", \"vocab_size\": %" PRIu64 ", \"tokenizer\": ", m->vocab_size);
        json_str(f, m->tokenizer);
        fputs(", \"tokenizer_pre\": ", f);
        json_str(f, m->tokenizer_pre);
        fputs(", \"chat_template\": ", f);
        json_str(f, family);
        fprintf(f, ", \"tensors\": %" PRIu64 ", \"weights\": [", m40_gguf_tensor_count(g));
        for (size_t i = 0; i < m->n_types; i++)
                fprintf(f,
                        "%s{\"type\": \"%s\", \"tensors\": %" PRIu64 ", \"parameters\": %" PRIu64
                        ", \"bytes\": %" PRIu64 "}",
                        i ? ", " : "", m40_ggml_type_name(m->types[i].type), m->types[i].n_tensors,
                        m->types[i].n_elements, m->types[i].bytes);
        fputs("]}\n", f);
}

const char *m40ctl_human_count(uint64_t n, char *buf, size_t len)
{
        if (n >= 1000000000ull)
                snprintf(buf, len, "%.2fB", (double)n / 1e9);
        else if (n >= 1000000ull)
                snprintf(buf, len, "%.1fM", (double)n / 1e6);
        else if (n >= 1000ull)
                snprintf(buf, len, "%.1fK", (double)n / 1e3);
        else
                snprintf(buf, len, "%" PRIu64, n);
        return buf;
}

static void print_text(FILE *f, const struct m40_gguf *g, const struct m40_model_info *m,
                       const char *family)
{
        char b1[32], b2[32];

        fprintf(f, "file:            %s (%s bytes, GGUF v%u, alignment %u)\n", m40_gguf_path(g),
                m40ctl_human_count(m40_gguf_file_size(g), b1, sizeof(b1)), m40_gguf_version(g),
                m40_gguf_alignment(g));
        fprintf(f, "architecture:    %s\n", m->arch);
        fprintf(f, "name:            %s\n", m->name ? m->name : "-");
        fprintf(f, "parameters:      %s (%" PRIu64 ")\n",
                m40ctl_human_count(m->n_params, b1, sizeof(b1)), m->n_params);
        fprintf(f, "context length:  %u\n", m->context_length);
        fprintf(f, "layers:          %u\n", m->n_layers);
        fprintf(f, "embedding:       %u\n", m->n_embd);
        fprintf(f, "heads:           %u (KV heads %u, head dim %u)\n", m->n_heads, m->n_kv_heads,
                m->head_dim);
        fprintf(f, "FFN:             %u\n", m->n_ff);
        fprintf(f, "rope:            dims %u, freq base %g, scaling %s", m->rope_dims,
                m->rope_freq_base, m->rope_scaling ? m->rope_scaling : "none");
        if (m->rope_scaling_factor > 0)
                fprintf(f, " (factor %g)", m->rope_scaling_factor);
        fprintf(f, "\nrms eps:         %g\n", m->rms_eps);
        fprintf(f, "vocabulary:      %" PRIu64 " (tokenizer %s%s%s)\n", m->vocab_size,
                m->tokenizer ? m->tokenizer : "-", m->tokenizer_pre ? ", pre " : "",
                m->tokenizer_pre ? m->tokenizer_pre : "");
        fprintf(f, "chat template:   %s\n", family);
        fprintf(f, "weights:         %" PRIu64 " tensors, %s bytes\n", m40_gguf_tensor_count(g),
                m40ctl_human_count(m->weight_bytes, b2, sizeof(b2)));
        fprintf(f, "  %-6s %8s %14s %14s\n", "type", "tensors", "parameters", "bytes");
        for (size_t i = 0; i < m->n_types; i++)
                fprintf(f, "  %-6s %8" PRIu64 " %14" PRIu64 " %14" PRIu64 "\n",
                        m40_ggml_type_name(m->types[i].type), m->types[i].n_tensors,
                        m->types[i].n_elements, m->types[i].bytes);
}

int m40ctl_show(int argc, char **argv)
{
        static const struct option opts[] = {
                {"json", no_argument, NULL, 'j'},
                {"help", no_argument, NULL, 'h'},
                {0},
        };
        char err[M40_GGUF_ERRLEN];
        struct m40_model_info info;
        struct m40_gguf *g = NULL;
        bool json = false;
        const char *family;
        struct m40_chat_template tmpl;
        char family_text[96], path[4352];
        const char *why = "";
        int c, e;

        optind = 1;
        while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                switch (c) {
                case 'j':
                        json = true;
                        break;
                case 'h':
                        usage(stdout);
                        return M40CTL_EXIT_OK;
                default:
                        usage(stderr);
                        return M40CTL_EXIT_USAGE;
                }
        }
        if (optind != argc - 1) {
                fprintf(stderr, "m40ctl show: expected exactly one FILE.gguf\n");
                usage(stderr);
                return M40CTL_EXIT_USAGE;
        }
        e = m40_store_resolve(argv[optind], path, sizeof(path), &why);
        if (e == -EINVAL) {
                fprintf(stderr, "m40ctl show: '%s' is not a file path or a model name: %s\n",
                        argv[optind], why);
                return M40CTL_EXIT_USAGE;
        }
        if (e) {
                fprintf(stderr, "m40ctl show: no model '%s' in the store (%s)%s\n", argv[optind],
                        e == -ENOENT ? "m40ctl list shows what is there" : strerror(-e),
                        access(argv[optind], F_OK) ? "" : "; for the file here, write ./NAME");
                return M40CTL_EXIT_FAIL;
        }
        e = m40_gguf_open(path, &g, err, sizeof(err));
        if (e) {
                fprintf(stderr, "m40ctl show: %s\n", err);
                return M40CTL_EXIT_FAIL;
        }
        e = m40_model_info_init(&info, g, err, sizeof(err));
        if (e) {
                fprintf(stderr, "m40ctl show: %s\n", err);
                g = m40_gguf_free(g);
                return M40CTL_EXIT_FAIL;
        }
        family = m40_chat_family_name(m40_chat_detect(info.chat_template));
        /* what m40d applies beyond the built-in family (chat_detect.h) */
        snprintf(family_text, sizeof(family_text), "%s%s", family,
                 m40_chat_template_init(&tmpl, info.chat_template) == 0 && tmpl.default_system
                         ? " (built in, with the template's default system message)"
                         : "");
        m40_chat_template_done(&tmpl);
        if (json)
                print_json(stdout, g, &info, family);
        else
                print_text(stdout, g, &info, family_text);
        g = m40_gguf_free(g);
        if (fflush(stdout) != 0 || ferror(stdout)) {
                fprintf(stderr, "m40ctl show: write error\n");
                return M40CTL_EXIT_FAIL;
        }
        return M40CTL_EXIT_OK;
}
