/* mkmodel_args.c - m40-mkmodel's command line: the --help text, the presets (model shapes),
 * the --type names and their llama.cpp file types, and the parsing and checking of the
 * options into struct spec (mkmodel.h). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "mkmodel.h"
#include "model/ggml_type.h"

static const struct preset presets[] = {
        {"tiny", 2, 256, 4, 2, 512, 512, 256, false, 10000.0},
        {"135m", 30, 576, 9, 3, 1536, 49152, 8192, true, 10000.0},
        {"1b", 16, 2048, 32, 8, 8192, 128256, 131072, true, 500000.0},
        {"8b", 32, 4096, 32, 8, 14336, 128256, 131072, false, 500000.0},
};

/* --type names and llama.cpp's LLAMA_FTYPE number for each (general.file_type). */
static const struct {
        const char *name;
        uint32_t type, ftype;
} types[] = {
        {"F32", M40_GGML_F32, 0},    {"F16", M40_GGML_F16, 1},    {"BF16", M40_GGML_BF16, 32},
        {"Q8_0", M40_GGML_Q8_0, 7},  {"Q4_0", M40_GGML_Q4_0, 2},  {"Q4_1", M40_GGML_Q4_1, 3},
        {"Q5_0", M40_GGML_Q5_0, 8},  {"Q5_1", M40_GGML_Q5_1, 9},  {"Q4_K", M40_GGML_Q4_K, 14},
        {"Q5_K", M40_GGML_Q5_K, 16}, {"Q6_K", M40_GGML_Q6_K, 18}, {"Q4_K_M", TYPE_Q4_K_M, 15},
};

/* clang-format off */
static const char help_text[] =
"NAME\n"
"    m40-mkmodel - write a synthetic Llama or Qwen2 GGUF model with random weights\n"
"\n"
"SYNOPSIS\n"
"    m40-mkmodel -o OUT.gguf [--preset tiny|135m|1b|8b] [--layers N] [--dim N]\n"
"        [--heads N] [--kv-heads N] [--ffn N] [--vocab N] [--ctx N] [--rope-base F]\n"
"        [--tied|--untied] [--arch llama|qwen2] [--type TYPE] [--seed S]\n"
"        [--threads N] [--random-blocks] [--quiet]\n"
"\n"
"DESCRIPTION\n"
"    Writes a GGUF v3 file that llama.cpp loads as a 'llama' (or 'qwen2') model of the\n"
"    given shape, with weights from a seeded generator quantized to TYPE. The same\n"
"    arguments give a byte-identical file whatever --threads is. The data go to\n"
"    OUT.gguf.tmp, renamed to\n"
"    OUT.gguf when complete; a failed or interrupted run leaves no file. Tensors are\n"
"    generated and written chunk by chunk: memory stays at tens of MB at any size.\n"
"\n"
"OPTIONS\n"
"    -o, --output PATH  the file to write (required).\n"
"    --preset NAME      the starting shape (default tiny). It is applied first, wherever\n"
"                       it stands; every other option overrides it.\n"
"                         name layers  dim heads kv   ffn  vocab    ctx rope output\n"
"                         tiny      2  256     4  2   512    512    256  1e4 untied\n"
"                         135m     30  576     9  3  1536  49152   8192  1e4 tied\n"
"                         1b       16 2048    32  8  8192 128256 131072  5e5 tied\n"
"                         8b       32 4096    32  8 14336 128256 131072  5e5 untied\n"
"    --layers N         transformer blocks, 1..1024.\n"
"    --dim N            embedding width d, 1..65536; heads must divide it and the head\n"
"                       size d/heads must be even.\n"
"    --heads N          attention heads.  --kv-heads N  key/value heads, dividing heads.\n"
"    --ffn N            feed-forward width, 1..1048576.\n"
"    --vocab N          vocabulary size, 260..4194304.\n"
"    --ctx N            llama.context_length, 1..16777216.\n"
"    --rope-base F      llama.rope.freq_base, > 0.\n"
"    --tied, --untied   token_embd doubles as the output projection, or output.weight\n"
"                       is written.\n"
"    --arch NAME        llama (default) or qwen2: qwen2 adds Q/K/V biases and its key\n"
"                       prefix; llama.cpp implies NEOX RoPE for it.\n"
"    --type TYPE        F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K Q4_K_M\n"
"                       (any case; default F16).\n"
"    --seed S           64-bit seed of the weights (default 1).\n"
"    --threads N        generator threads, 1..1024 (default: online CPUs). Each thread\n"
"                       generates and quantizes rows of the current 8 MiB chunk while\n"
"                       the main thread writes the previous one, so large files are\n"
"                       written at about the disk's speed, with memory of tens of MB.\n"
"    --random-blocks    quantized tensors are written as random blocks instead of\n"
"                       quantizing the generated floats (see TYPES); float tensors\n"
"                       (F32, F16, BF16 and the norms) are generated as usual. For\n"
"                       benchmarks, which only need the bytes of a real file of the\n"
"                       type: the K types quantize at a few MB/s per thread, so an 8B\n"
"                       Q4_K_M would otherwise take minutes. m40-bench's model runs\n"
"                       (tests/bench/run-model-bench.sh) use it. general.name then\n"
"                       ends in \" random-blocks\".\n"
"    --quiet            no progress, notes or summary on stderr; errors still print.\n"
"    -h, --help         this text.\n"
"\n"
"TENSORS\n"
"    Shapes are ggml's [ne0, ne1], ne0 the row length; kv = kv-heads * d / heads.\n"
"      token_embd.weight [d, vocab]\n"
"      blk.I.attn_norm.weight [d]      blk.I.attn_q.weight [d, d]\n"
"      blk.I.attn_k.weight [d, kv]     blk.I.attn_v.weight [d, kv]\n"
"      blk.I.attn_output.weight [d, d] blk.I.ffn_norm.weight [d]\n"
"      blk.I.ffn_gate.weight [d, ffn]  blk.I.ffn_up.weight [d, ffn]\n"
"      blk.I.ffn_down.weight [ffn, d]  (for I = 0 .. layers-1)\n"
"      output_norm.weight [d]          output.weight [d, vocab] (untied only)\n"
"      qwen2 only: blk.I.attn_q.bias [d], blk.I.attn_k.bias [kv], blk.I.attn_v.bias [kv]\n"
"    Norm weights are F32, 1 + N(0, 0.02^2); biases F32, N(0, 0.5^2); matrices\n"
"    N(0, 1/ne0); token_embd N(0, 0.02^2);\n"
"    each value a sum of four uniforms (so within 3.5 sigma). Row r of tensor t comes\n"
"    from xoshiro256** seeded with splitmix64 of (seed, t, r).\n"
"\n"
"TYPES\n"
"    Every type is quantized for real from the generated floats, byte-exact to ggml's\n"
"    quantize_row_*_ref() (what llama-quantize writes without an imatrix), K types\n"
"    included; F16 and BF16 round to nearest even. Vectors stay F32. A single TYPE is\n"
"    used for every matrix. Q4_K_M follows llama-quantize: attn_v and ffn_down of block\n"
"    I get Q6_K when I < n/8, I >= 7n/8 or (I - n/8) % 3 == 2, the output projection\n"
"    (token_embd when tied) Q6_K, or Q8_0 when d % 256 != 0; the rest Q4_K. Where a\n"
"    row is not a multiple of the block, types fall back as llama-quantize does\n"
"    (Q4_K->Q5_0, Q5_K->Q5_1, Q6_K->Q8_0, else F16), with one note per kind on stderr.\n"
"    With --random-blocks the quantized tensors (same types, sizes and layout as\n"
"    above) hold random quants, one stream per row from (seed, t, r), with finite f16\n"
"    scales chosen so that the dequantized values have mean about 0 and the tensor's\n"
"    standard deviation (K types: 6-bit sub-block scales 32..63, mins equal to the\n"
"    scales); the bytes read per token are exactly a real file's, the values are not\n"
"    what llama-quantize would give.\n"
"\n"
"METADATA\n"
"    general.architecture=llama (or qwen2: every llama.* key below is then qwen2.*),\n"
"    .name, .file_type (llama.cpp's LLAMA_FTYPE: Q4_K=14\n"
"    (Q4_K_S), Q5_K=16 (Q5_K_S), Q6_K=18, Q4_K_M=15), .alignment=32,\n"
"    .quantization_version=2 (quantized types); llama.context_length, .embedding_length,\n"
"    .block_count, .feed_forward_length, .rope.dimension_count=d/heads,\n"
"    .attention.head_count, .attention.head_count_kv,\n"
"    .attention.layer_norm_rms_epsilon=1e-5, .rope.freq_base, .vocab_size;\n"
"    tokenizer.ggml.model=llama, .tokens, .scores (f32), .token_type (i32),\n"
"    .bos_token_id=1, .eos_token_id=2, .unknown_token_id=0, .add_bos_token=true,\n"
"    .add_eos_token=false. Tokens: 0 <unk> (type 2), 1 <s> and 2 </s> (type 3),\n"
"    3..258 <0x00>..<0xFF> (type 6), then pieces (type 1) U+2581, a, U+2581 a, b, ...:\n"
"    a-z words in bijective base 26, with and without the U+2581 prefix in turn, scores\n"
"    -1, -2, ... (0 for specials and bytes).\n"
"\n"
"EXIT STATUS\n"
"    0 success; 1 failure creating or writing the file (an output path that cannot be\n"
"    created included); 2 usage error (unknown option, bad or inconsistent value).\n";
/* clang-format on */

static void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void usage_error(const char *fmt, ...)
{
        va_list ap;

        fputs("m40-mkmodel: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputs("\nTry 'm40-mkmodel --help'.\n", stderr);
        exit(EXIT_USAGE);
}

/* Strict decimal (or 0x hex) unsigned parse into [min, max]. */
static uint64_t parse_u64(const char *opt, const char *s, uint64_t min, uint64_t max)
{
        char *end;
        unsigned long long v;

        errno = 0;
        if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
                usage_error("%s: '%s' is not a number", opt, s ? s : "");
        v = strtoull(s, &end, 0);
        if (*end)
                usage_error("%s: '%s' is not a number", opt, s);
        if (errno == ERANGE || v < min || v > max)
                usage_error("%s: %s is out of range %llu..%llu", opt, s, (unsigned long long)min,
                            (unsigned long long)max);
        return v;
}

static void apply_preset(struct spec *s, const char *name)
{
        for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++) {
                if (strcasecmp(name, presets[i].name) == 0) {
                        s->sh = presets[i];
                        return;
                }
        }
        usage_error("--preset: unknown preset '%s' (tiny, 135m, 1b, 8b)", name);
}

const char *mkmodel_type_name(uint32_t t)
{
        return t == TYPE_Q4_K_M ? "Q4_K_M" : m40_ggml_type_name(t);
}

/* clang-format off */
enum { O_PRESET = 256, O_LAYERS, O_DIM, O_HEADS, O_KV, O_FFN, O_VOCAB, O_CTX, O_ROPE, O_TIED,
       O_UNTIED, O_TYPE, O_SEED, O_THREADS, O_QUIET, O_ARCH, O_RANDOM };

#define ARG required_argument
static const struct option long_opts[] = {
        {"output", ARG, NULL, 'o'},       {"preset", ARG, NULL, O_PRESET},
        {"layers", ARG, NULL, O_LAYERS},  {"dim", ARG, NULL, O_DIM},
        {"heads", ARG, NULL, O_HEADS},    {"kv-heads", ARG, NULL, O_KV},
        {"ffn", ARG, NULL, O_FFN},        {"vocab", ARG, NULL, O_VOCAB},
        {"ctx", ARG, NULL, O_CTX},        {"rope-base", ARG, NULL, O_ROPE},
        {"tied", no_argument, NULL, O_TIED}, {"untied", no_argument, NULL, O_UNTIED},
        {"type", ARG, NULL, O_TYPE},      {"seed", ARG, NULL, O_SEED},
        {"threads", ARG, NULL, O_THREADS}, {"quiet", no_argument, NULL, O_QUIET},
        {"arch", ARG, NULL, O_ARCH},      {"help", no_argument, NULL, 'h'},
        {"random-blocks", no_argument, NULL, O_RANDOM},
        {NULL, 0, NULL, 0},
};
#undef ARG
/* clang-format on */

/* Options that take a number: where it goes and its range. */
static const struct {
        int id;
        const char *name;
        size_t off;
        uint64_t min, max;
} numopts[] = {
        {O_LAYERS, "--layers", offsetof(struct spec, sh.layers), 1, MAX_LAYERS},
        {O_DIM, "--dim", offsetof(struct spec, sh.dim), 1, MAX_DIM},
        {O_HEADS, "--heads", offsetof(struct spec, sh.heads), 1, MAX_DIM},
        {O_KV, "--kv-heads", offsetof(struct spec, sh.kv_heads), 1, MAX_DIM},
        {O_FFN, "--ffn", offsetof(struct spec, sh.ffn), 1, MAX_FFN},
        {O_VOCAB, "--vocab", offsetof(struct spec, sh.vocab), MIN_VOCAB, MAX_VOCAB},
        {O_CTX, "--ctx", offsetof(struct spec, sh.ctx), 1, MAX_CTX},
        {O_SEED, "--seed", offsetof(struct spec, seed), 0, UINT64_MAX},
        {O_THREADS, "--threads", offsetof(struct spec, threads), 1, MAX_THREADS},
};

static void parse_type(struct spec *s, const char *name)
{
        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
                if (strcasecmp(name, types[i].name) == 0) {
                        s->type = types[i].type;
                        return;
                }
        }
        usage_error("--type: unknown type '%s' (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K "
                    "Q5_K Q6_K Q4_K_M)",
                    name);
}

void mkmodel_parse_args(int argc, char **argv, struct spec *s)
{
        const char *preset = "tiny";
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        char *end;
        int c;

        memset(s, 0, sizeof(*s));
        s->type = M40_GGML_F16;
        s->seed = 1;
        s->threads = ncpu < 1 ? 1 : (uint64_t)ncpu > MAX_THREADS ? MAX_THREADS : (uint64_t)ncpu;

        /* Pass 1: the preset, so every other option overrides it wherever it stands. */
        opterr = 0;
        while ((c = getopt_long(argc, argv, "o:h", long_opts, NULL)) != -1)
                if (c == O_PRESET)
                        preset = optarg;
        apply_preset(s, preset);

        optind = 0; /* glibc: 0 restarts the scan from scratch */
        opterr = 1;
        while ((c = getopt_long(argc, argv, "o:h", long_opts, NULL)) != -1) {
                switch (c) {
                case 'h':
                        fputs(help_text, stdout);
                        exit(0);
                case 'o':
                        if (!*optarg)
                                usage_error("-o: empty path");
                        s->out = optarg;
                        break;
                case O_PRESET:
                        break;
                case O_ROPE:
                        errno = 0;
                        s->sh.rope_base = strtod(optarg, &end);
                        if (!*optarg || *end || errno || !isfinite(s->sh.rope_base) ||
                            !(s->sh.rope_base > 0) || s->sh.rope_base > 1e12)
                                usage_error("--rope-base: '%s' is not a positive number", optarg);
                        break;
                case O_TIED:
                case O_UNTIED:
                        s->sh.tied = c == O_TIED;
                        break;
                case O_TYPE:
                        parse_type(s, optarg);
                        break;
                case O_QUIET:
                        s->quiet = true;
                        break;
                case O_RANDOM:
                        s->random_blocks = true;
                        break;
                case O_ARCH:
                        if (strcmp(optarg, "llama") && strcmp(optarg, "qwen2"))
                                usage_error("--arch: unknown architecture '%s' (llama, qwen2)",
                                            optarg);
                        s->qwen2 = strcmp(optarg, "qwen2") == 0;
                        break;
                default:
                        for (size_t i = 0; i < sizeof(numopts) / sizeof(numopts[0]); i++)
                                if (numopts[i].id == c)
                                        *(uint64_t *)((char *)s + numopts[i].off) =
                                                parse_u64(numopts[i].name, optarg, numopts[i].min,
                                                          numopts[i].max);
                        if (c == '?' || c == ':')
                                usage_error("bad usage");
                }
        }
        if (optind < argc)
                usage_error("unexpected argument '%s'", argv[optind]);
        if (!s->out)
                usage_error("no output file (-o PATH)");
        if (s->sh.dim % s->sh.heads)
                usage_error("--dim %llu is not a multiple of --heads %llu",
                            (unsigned long long)s->sh.dim, (unsigned long long)s->sh.heads);
        if ((s->sh.dim / s->sh.heads) % 2)
                usage_error("head size dim/heads = %llu is odd (RoPE rotates pairs)",
                            (unsigned long long)(s->sh.dim / s->sh.heads));
        if (s->sh.kv_heads > s->sh.heads || s->sh.heads % s->sh.kv_heads)
                usage_error("--kv-heads %llu does not divide --heads %llu",
                            (unsigned long long)s->sh.kv_heads, (unsigned long long)s->sh.heads);
}

uint32_t mkmodel_ftype(uint32_t t)
{
        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
                if (types[i].type == t)
                        return types[i].ftype;
        return 0;
}
