/* pretok.c - the table of BPE pre-tokenizers (llama.cpp's regex sets by tokenizer.ggml.pre)
 * and the PCRE2 splitter over them (see pretok.h). */
#include "text/pretok.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <errno.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "m40/error.h"
#include "text/utf8.h"

/* The regexes, verbatim from llama.cpp's llm_tokenizer_bpe (llama-vocab.cpp). */
#define CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define R_GPT2       "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define R_LLAMA3                                                                                   \
        CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"  \
                     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define R_QWEN2                                                                                    \
        CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"       \
                     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define R_QWEN35                                                                                   \
        CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+"   \
                     "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define R_SEED_CODER                                                                               \
        CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|"       \
                     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define R_BAILING                                                                                  \
        "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?"       \
        "[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"
#define R_DS3_WORDS                                                                                \
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"         \
        "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
/* tekken and gpt-4o: llama.cpp's adapted "((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+"
 * needs a backtracking frame per letter (PCRE2's JIT stack overflows on long words); a
 * letter other than a-z is the single class [^\\P{L}a-z], which matches the same. */
#define LETTER_NOT_LOWER "[^\\P{L}a-z]"
#define LETTER_NOT_UPPER "[^\\P{L}A-Z]"
#define R_TEKKEN                                                                                   \
        "[^\\r\\n\\p{L}\\p{N}]?" LETTER_NOT_LOWER "*" LETTER_NOT_UPPER                             \
        "+|[^\\r\\n\\p{L}\\p{N}]?" LETTER_NOT_LOWER "+" LETTER_NOT_UPPER                           \
        "*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define R_GPT4O                                                                                    \
        "[^\\r\\n\\p{L}\\p{N}]?" LETTER_NOT_LOWER "*" LETTER_NOT_UPPER "+" CONTRACTIONS            \
        "?|[^\\r\\n\\p{L}\\p{N}]?" LETTER_NOT_LOWER "+" LETTER_NOT_UPPER "*" CONTRACTIONS          \
        "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define R_BLOOM " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"
#define R_CJK   "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"
#define R_DS_LETTERS                                                                               \
        "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{"    \
        "1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}" \
        "\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{" \
        "48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}"  \
        "\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-"   \
        "\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}"    \
        "\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{" \
        "1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{"    \
        "1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{"    \
        "2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}" \
        "-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}"    \
        "\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{" \
        "2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{"    \
        "A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{"   \
        "FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}"  \
        "\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+"

enum { F_IGNORE = 1, F_NOCLEAN = 2, F_BOS = 4, F_NOBOS = 8 };

struct pre_def {
        const char *names[12]; /* NULL-terminated */
        const char *rx[7];     /* NULL-terminated unless all 7 are used */
        unsigned flags;
};

/* Names and flags as llama.cpp's llama_vocab::impl::load assigns them. */
static const struct pre_def pre_defs[] = {
        {{"default", ""}, {"[\\p{P}\\$\\+<=>\\^~\\|]+", R_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, 0},
        {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
          "jina-v5-nano"},
         {R_LLAMA3},
         F_IGNORE | F_BOS},
        {{"dbrx", "smaug-bpe"}, {R_LLAMA3}, 0},
        {{"deepseek-llm"},
         {"[\r\n]", R_DS_LETTERS,
          "\\s?[!-/"
          ":-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
          "\\s+$", R_CJK, "\\p{N}+"},
         F_NOCLEAN},
        {{"deepseek-coder"}, {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", R_CJK, "\\p{N}"}, F_NOCLEAN},
        {{"deepseek-v3"},
         {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
          R_DS3_WORDS},
         F_NOCLEAN},
        {{"falcon"}, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", R_GPT2, "[0-9][0-9][0-9]"}, 0},
        {{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
          "mellum", "modern-bert", "exaone4"},
         {R_GPT2},
         0},
        {{"mpt", "olmo", "jais"}, {R_GPT2}, 0},
        {{"trillion", "granite-docling"}, {R_GPT2}, F_NOCLEAN},
        {{"starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2"},
         {"\\p{N}", R_GPT2},
         0},
        {{"smollm", "command-r"}, {"\\p{N}", R_GPT2}, F_NOCLEAN},
        {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "solar-open"},
         {R_QWEN2},
         F_NOCLEAN},
        {{"stablelm2", "megrez"}, {R_QWEN2}, 0},
        {{"qwen35"}, {R_QWEN35}, F_NOCLEAN},
        {{"grok-2"}, {R_QWEN2}, F_NOCLEAN},
        {{"poro-chat"}, {R_BLOOM}, F_NOCLEAN},
        {{"bloom", "gpt3-finnish"}, {R_BLOOM}, 0},
        {{"viking"}, {R_BLOOM, "\\p{N}"}, F_NOCLEAN},
        {{"chatglm-bpe"}, {R_LLAMA3}, F_NOBOS},
        {{"glm4", "glm5"}, {R_LLAMA3}, F_NOBOS | F_IGNORE},
        {{"tekken"}, {R_TEKKEN}, F_NOCLEAN | F_IGNORE | F_BOS},
        {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, {R_GPT4O}, F_NOCLEAN},
        {{"seed-coder"}, {R_SEED_CODER}, F_NOCLEAN},
        {{"bailingmoe", "bailingmoe2", "llada-moe"}, {R_BAILING}, F_NOCLEAN},
};

/* The Unicode White_Space set (llama.cpp's unicode_set_whitespace) as class members. */
#define WS_MEMBERS                                                                                 \
        "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}"   \
        "\\x{3000}"

struct m40_pretok {
        pcre2_code *code[7];
        size_t n;
        bool jit;
        bool compat; /* PCRE2's Unicode is older than 15: substitute (see pretok.h) */
};

/* Code points assigned in Unicode 15.0 and 15.1 (all unassigned in Unicode 14), by general
 * category class, with a stand-in of that class and UTF-8 length known to Unicode 14. The
 * list is the difference between llama.cpp's unicode-data.cpp and PCRE2 10.42's properties,
 * code point by code point. */
static const struct compat_range {
        uint32_t first, last, stand_in;
} compat_ranges[] = {
        {0x0CF3, 0x0CF3, 0x0900},    {0x0ECE, 0x0ECE, 0x0900},    {0x2FFC, 0x2FFF, 0x2600},
        {0x31EF, 0x31EF, 0x2600},    {0x10EFD, 0x10EFF, 0x101FD}, {0x1123F, 0x11240, 0x10000},
        {0x11241, 0x11241, 0x101FD}, {0x11B00, 0x11B09, 0x10100}, {0x11F00, 0x11F01, 0x101FD},
        {0x11F02, 0x11F02, 0x10000}, {0x11F03, 0x11F03, 0x101FD}, {0x11F04, 0x11F10, 0x10000},
        {0x11F12, 0x11F33, 0x10000}, {0x11F34, 0x11F3A, 0x101FD}, {0x11F3E, 0x11F42, 0x101FD},
        {0x11F43, 0x11F4F, 0x10100}, {0x11F50, 0x11F59, 0x10107}, {0x1342F, 0x1342F, 0x10000},
        {0x13439, 0x1343F, 0xE0001}, {0x13440, 0x13440, 0x101FD}, {0x13441, 0x13446, 0x10000},
        {0x13447, 0x13455, 0x101FD}, {0x1B132, 0x1B132, 0x10000}, {0x1B155, 0x1B155, 0x10000},
        {0x1D2C0, 0x1D2D3, 0x10107}, {0x1DF25, 0x1DF2A, 0x10000}, {0x1E030, 0x1E06D, 0x10000},
        {0x1E08F, 0x1E08F, 0x101FD}, {0x1E4D0, 0x1E4EB, 0x10000}, {0x1E4EC, 0x1E4EF, 0x101FD},
        {0x1E4F0, 0x1E4F9, 0x10107}, {0x1F6DC, 0x1F6DC, 0x1F300}, {0x1F774, 0x1F776, 0x1F300},
        {0x1F77B, 0x1F77F, 0x1F300}, {0x1F7D9, 0x1F7D9, 0x1F300}, {0x1FA75, 0x1FA77, 0x1F300},
        {0x1FA87, 0x1FA88, 0x1F300}, {0x1FAAD, 0x1FAAF, 0x1F300}, {0x1FABB, 0x1FABD, 0x1F300},
        {0x1FABF, 0x1FABF, 0x1F300}, {0x1FACE, 0x1FACF, 0x1F300}, {0x1FADA, 0x1FADB, 0x1F300},
        {0x1FAE8, 0x1FAE8, 0x1F300}, {0x1FAF7, 0x1FAF8, 0x1F300}, {0x2B739, 0x2B739, 0x10000},
        {0x2EBF0, 0x2EE5D, 0x10000}, {0x31350, 0x323AF, 0x10000},
};

static bool pcre2_before_unicode15(void)
{
        char ver[32] = "";

        if (pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, ver) < 0)
                return true;
        return atoi(ver) < 15 || (atoi(ver) == 15 && strncmp(ver, "15.0", 4) == 0);
}

uint32_t m40_pretok_substitute(const struct m40_pretok *p, uint32_t cpt)
{
        size_t lo = 0, hi = sizeof(compat_ranges) / sizeof(compat_ranges[0]);

        if (!p->compat || cpt < compat_ranges[0].first)
                return 0;
        while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (cpt < compat_ranges[mid].first)
                        hi = mid;
                else if (cpt > compat_ranges[mid].last)
                        lo = mid + 1;
                else
                        return compat_ranges[mid].stand_in;
        }
        return 0;
}

bool m40_pretok_needs_copy(const struct m40_pretok *p, const char *text, size_t n)
{
        const uint8_t *s = (const uint8_t *)text;

        if (!p->compat)
                return false;
        for (size_t i = 0; i < n; i++) {
                size_t adv;
                /* lead bytes of U+0800-U+0FFF, U+2000-U+3FFF and U+10000-U+3FFFF */
                if (s[i] != 0xE0 && s[i] != 0xE2 && s[i] != 0xE3 && s[i] != 0xF0)
                        continue;
                if (m40_pretok_substitute(p, m40_utf8_decode_lenient(s + i, n - i, &adv)))
                        return true;
        }
        return false;
}

struct m40_pretok_work {
        pcre2_match_data *md;
        pcre2_match_context *mc; /* with a JIT stack of up to 1 MiB (the default is 32 KiB) */
        pcre2_jit_stack *js;
        struct m40_piece *a, *b;
        size_t cap_a, cap_b;
};

/* translate - llama.cpp's regex src as a PCRE2 pattern in dst: \s and \S become the
 * White_Space set, \d becomes 0-9. Returns 0, or -EINVAL (an escape we cannot translate,
 * or dst too small). */
static int translate(const char *src, char *dst, size_t cap)
{
        size_t o = 0;
        bool in_class = false;

        for (const char *s = src; *s; s++) {
                const char *add = NULL;
                char two[3] = {s[0], 0, 0};
                if (s[0] == '\\' && s[1]) {
                        s++;
                        two[1] = s[0];
                        if (*s == 's')
                                add = in_class ? WS_MEMBERS : "[" WS_MEMBERS "]";
                        else if (*s == 'S' && !in_class)
                                add = "[^" WS_MEMBERS "]";
                        else if (*s == 'd')
                                add = in_class ? "0-9" : "[0-9]";
                        else if (strchr("SDwWbB", *s))
                                return -EINVAL;
                } else if (s[0] == '[' && !in_class) {
                        in_class = true;
                } else if (s[0] == ']' && in_class) {
                        in_class = false;
                }
                if (!add)
                        add = two;
                size_t n = strlen(add);
                if (o + n + 1 > cap)
                        return -EINVAL;
                memcpy(dst + o, add, n);
                o += n;
        }
        dst[o] = 0;
        return 0;
}

static const struct pre_def *find_def(const char *pre)
{
        for (size_t i = 0; i < sizeof(pre_defs) / sizeof(pre_defs[0]); i++)
                for (size_t k = 0; pre_defs[i].names[k]; k++)
                        if (!strcmp(pre_defs[i].names[k], pre))
                                return &pre_defs[i];
        return NULL;
}

int m40_pretok_new(const char *pre, struct m40_pretok **ret, struct m40_pretok_flags *ret_flags,
                   char *err, size_t errlen)
{
        const struct pre_def *d = find_def(pre ? pre : "");
        struct m40_pretok *p;
        char pat[4096];

        if (!d) {
                snprintf(err, errlen, "tokenizer.ggml.pre '%s' is not supported", pre);
                return M40_EUNSUPPORTED;
        }
        p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        p->jit = true;
        p->compat = pcre2_before_unicode15();
        for (; p->n < 7 && d->rx[p->n]; p->n++) {
                int ec;
                PCRE2_SIZE eo;
                if (translate(d->rx[p->n], pat, sizeof(pat))) {
                        snprintf(err, errlen, "pre-tokenizer '%s': regex %zu untranslatable", pre,
                                 p->n);
                        m40_pretok_free(p);
                        return M40_EFORMAT;
                }
                p->code[p->n] = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                                              PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY |
                                                      PCRE2_NEVER_BACKSLASH_C,
                                              &ec, &eo, NULL);
                if (!p->code[p->n]) {
                        snprintf(err, errlen, "pre-tokenizer '%s': PCRE2 error %d at %zu", pre, ec,
                                 (size_t)eo);
                        m40_pretok_free(p);
                        return M40_EFORMAT;
                }
                if (pcre2_jit_compile(p->code[p->n], PCRE2_JIT_COMPLETE))
                        p->jit = false;
        }
        *ret_flags = (struct m40_pretok_flags){
                .ignore_merges = d->flags & F_IGNORE,
                .clean_spaces = !(d->flags & F_NOCLEAN),
                .add_bos = d->flags & F_BOS,
                .no_default_bos = d->flags & F_NOBOS,
        };
        *ret = p;
        return 0;
}

struct m40_pretok *m40_pretok_free(struct m40_pretok *p)
{
        if (!p)
                return NULL;
        for (size_t i = 0; i < p->n; i++)
                pcre2_code_free(p->code[i]);
        free(p);
        return NULL;
}

struct m40_pretok_work *m40_pretok_work_free(struct m40_pretok_work *w)
{
        if (!w)
                return NULL;
        pcre2_match_data_free(w->md);
        pcre2_match_context_free(w->mc);
        pcre2_jit_stack_free(w->js);
        free(w->a);
        free(w->b);
        free(w);
        return NULL;
}

static int push(struct m40_piece **v, size_t *n, size_t *cap, size_t off, size_t len)
{
        if (*n == *cap) {
                size_t c = *cap ? *cap * 2 : 256;
                struct m40_piece *p = realloc(*v, c * sizeof(*p));
                if (!p)
                        return -ENOMEM;
                *v = p;
                *cap = c;
        }
        (*v)[(*n)++] = (struct m40_piece){off, len};
        return 0;
}

/* split_one - the matches of code in text[off, off + len) and the gaps between them. */
static int split_one(const struct m40_pretok *p, const pcre2_code *code, struct m40_pretok_work *w,
                     const char *text, size_t off, size_t len, struct m40_piece **out, size_t *n,
                     size_t *cap)
{
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
        PCRE2_SPTR subj = (PCRE2_SPTR)text + off;
        size_t pos = 0, last = 0;
        int e = 0;

        while (pos <= len && !e) {
                int rc =
                        p->jit ? pcre2_jit_match(code, subj, len, pos, 0, w->md, NULL)
                               : pcre2_match(code, subj, len, pos, PCRE2_NO_UTF_CHECK, w->md, NULL);
                if (rc == PCRE2_ERROR_NOMATCH)
                        break;
                if (rc < 0)
                        return -EIO;
                size_t s = ov[0], end = ov[1];
                if (s > last)
                        e = push(out, n, cap, off + last, s - last);
                if (!e && end > s)
                        e = push(out, n, cap, off + s, end - s);
                last = end;
                pos = end;
                if (end == s) /* empty match: step over one character */
                        for (pos++; pos < len && (subj[pos] & 0xC0) == 0x80;)
                                pos++;
        }
        if (!e && last < len)
                e = push(out, n, cap, off + last, len - last);
        return e;
}

int m40_pretok_split(const struct m40_pretok *p, const char *text, size_t n,
                     struct m40_pretok_work **work, const struct m40_piece **ret_pieces,
                     size_t *ret_n)
{
        struct m40_pretok_work *w = *work;
        size_t na = 0, nb;
        int e;

        if (!w) {
                w = calloc(1, sizeof(*w));
                if (!w)
                        return -ENOMEM;
                w->md = pcre2_match_data_create(1, NULL);
                w->mc = pcre2_match_context_create(NULL);
                w->js = pcre2_jit_stack_create(32 << 10, 1 << 20, NULL);
                if (!w->md || !w->mc || !w->js) {
                        m40_pretok_work_free(w);
                        return -ENOMEM;
                }
                pcre2_jit_stack_assign(w->mc, NULL, w->js);
                *work = w;
        }
        e = push(&w->a, &na, &w->cap_a, 0, n);
        for (size_t r = 0; r < p->n && !e; r++) {
                nb = 0;
                for (size_t i = 0; i < na && !e; i++)
                        e = split_one(p, p->code[r], w, text, w->a[i].off, w->a[i].len, &w->b, &nb,
                                      &w->cap_b);
                struct m40_piece *t = w->a;
                size_t tc = w->cap_a;
                w->a = w->b;
                w->cap_a = w->cap_b;
                w->b = t;
                w->cap_b = tc;
                na = nb;
        }
        if (e)
                return e;
        *ret_pieces = w->a;
        *ret_n = na;
        return 0;
}
