/* test_gguf_malformed.c - the GGUF reader rejects a corpus of malformed files.
 *
 * Each case builds a file byte by byte, then opens it twice (from memory, and from a
 * temporary file through the pread window) and checks the specific error: the code, a
 * phrase of the message, and that the message names the file and a byte offset. Then
 * every prefix of a valid file is opened (truncation at every byte of every section),
 * and a few thousand random byte mutations, which must never crash (CI runs this under
 * ASan and UBSan). Exit 0 pass, 1 fail. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "m40/error.h"
#include "model/ggml_type.h"
#include "model/gguf.h"

struct buf {
        uint8_t *p;
        size_t n, cap;
};

static void put(struct buf *b, const void *src, size_t n)
{
        if (b->n + n > b->cap) {
                b->cap = (b->n + n) * 2 + 64;
                b->p = realloc(b->p, b->cap);
                if (!b->p) {
                        perror("realloc");
                        exit(1);
                }
        }
        memcpy(b->p + b->n, src, n);
        b->n += n;
}

static void u8(struct buf *b, uint8_t v)
{
        put(b, &v, 1);
}

static void u32(struct buf *b, uint32_t v)
{
        for (int i = 0; i < 4; i++)
                u8(b, (uint8_t)(v >> (8 * i)));
}

static void u64(struct buf *b, uint64_t v)
{
        for (int i = 0; i < 8; i++)
                u8(b, (uint8_t)(v >> (8 * i)));
}

static void str(struct buf *b, const char *s)
{
        u64(b, strlen(s));
        put(b, s, strlen(s));
}

static void head(struct buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
        u32(b, M40_GGUF_MAGIC);
        u32(b, version);
        u64(b, n_tensors);
        u64(b, n_kv);
}

static void kv_u32(struct buf *b, const char *key, uint32_t v)
{
        str(b, key);
        u32(b, M40_GGUF_U32);
        u32(b, v);
}

static void kv_str(struct buf *b, const char *key, const char *v)
{
        str(b, key);
        u32(b, M40_GGUF_STRING);
        str(b, v);
}

static void tensor(struct buf *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                   uint32_t type, uint64_t offset)
{
        str(b, name);
        u32(b, n_dims);
        for (uint32_t i = 0; i < n_dims; i++)
                u64(b, ne[i]);
        u32(b, type);
        u64(b, offset);
}

/* Pad to the alignment and append n bytes of tensor data. */
static void data(struct buf *b, uint32_t align, size_t n)
{
        while (b->n % align)
                u8(b, 0);
        for (size_t i = 0; i < n; i++)
                u8(b, (uint8_t)i);
}

static const uint64_t ne_4x2[] = {4, 2};
static const uint64_t ne_32x2[] = {32, 2};

/* The valid file every case starts from or resembles: every value type, nested arrays,
 * an F32 tensor (32 bytes) and a Q8_0 tensor (68 bytes, padded to 96). */
static void valid(struct buf *b, uint32_t version)
{
        head(b, version, 2, 16);
        kv_str(b, "general.architecture", "llama");
        kv_u32(b, "general.alignment", 32);
        kv_u32(b, "llama.block_count", 5);
        str(b, "k.u8"), u32(b, M40_GGUF_U8), u8(b, 200);
        str(b, "k.i8"), u32(b, M40_GGUF_I8), u8(b, 0xff);
        str(b, "k.u16"), u32(b, M40_GGUF_U16), u8(b, 0x34), u8(b, 0x12);
        str(b, "k.i16"), u32(b, M40_GGUF_I16), u8(b, 0xfe), u8(b, 0xff);
        str(b, "k.i32"), u32(b, M40_GGUF_I32), u32(b, (uint32_t)-7);
        str(b, "k.f32"), u32(b, M40_GGUF_F32), u32(b, 0x3fc00000); /* 1.5 */
        str(b, "k.bool"), u32(b, M40_GGUF_BOOL), u8(b, 1);
        str(b, "k.u64"), u32(b, M40_GGUF_U64), u64(b, 1ull << 40);
        str(b, "k.i64"), u32(b, M40_GGUF_I64), u64(b, (uint64_t)-3);
        str(b, "k.f64"), u32(b, M40_GGUF_F64), u64(b, 0x4004000000000000ull); /* 2.5 */
        str(b, "k.strs"), u32(b, M40_GGUF_ARRAY), u32(b, M40_GGUF_STRING), u64(b, 3);
        str(b, "a"), str(b, ""), str(b, "ccc");
        str(b, "k.f32s"), u32(b, M40_GGUF_ARRAY), u32(b, M40_GGUF_F32), u64(b, 2);
        u32(b, 0x3f800000), u32(b, 0xc0000000);
        /* [[1, 2], []] of i32 */
        str(b, "k.nested"), u32(b, M40_GGUF_ARRAY), u32(b, M40_GGUF_ARRAY), u64(b, 2);
        u32(b, M40_GGUF_I32), u64(b, 2), u32(b, 1), u32(b, 2);
        u32(b, M40_GGUF_I32), u64(b, 0);
        tensor(b, "a.weight", 2, ne_4x2, M40_GGML_F32, 0);
        tensor(b, "b.weight", 2, ne_32x2, M40_GGML_Q8_0, 32);
        data(b, 32, 32 + 68);
}

static int failures;

#define CHECK(cond, ...)                                                                           \
        do {                                                                                       \
                if (!(cond)) {                                                                     \
                        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                       \
                        fprintf(stderr, __VA_ARGS__);                                              \
                        fputc('\n', stderr);                                                       \
                        failures++;                                                                \
                }                                                                                  \
        } while (0)

static const char *tmpdir(void)
{
        const char *t = getenv("TMPDIR");

        return t && *t ? t : "/tmp";
}

/* Open b from memory and from a file; both must give code and a message containing want,
 * the file name and "offset ". */
static void expect(const char *name, struct buf *b, int code, const char *want)
{
        char path[512], err[M40_GGUF_ERRLEN];
        struct m40_gguf *g = NULL;
        FILE *f;
        int e;

        err[0] = 0;
        e = m40_gguf_open_mem(b->p, b->n, name, &g, err, sizeof(err));
        CHECK(e == code, "%s (mem): got %d (%s), want %d; message: %s", name, e, m40_strerror(e),
              code, err);
        CHECK(!g, "%s: reader returned despite the error", name);
        CHECK(strstr(err, want), "%s (mem): message '%s' lacks '%s'", name, err, want);
        CHECK(strncmp(err, name, strlen(name)) == 0 && strstr(err, ": offset "),
              "%s: message '%s' does not name the file and offset", name, err);
        g = m40_gguf_free(g);

        snprintf(path, sizeof(path), "%s/m40-malformed-%d-%s.gguf", tmpdir(), (int)getpid(), name);
        f = fopen(path, "wb");
        if (!f || (b->n && fwrite(b->p, 1, b->n, f) != b->n) || fclose(f)) {
                fprintf(stderr, "cannot write %s\n", path);
                exit(1);
        }
        err[0] = 0;
        e = m40_gguf_open(path, &g, err, sizeof(err));
        CHECK(e == code, "%s (file): got %d, want %d; message: %s", name, e, code, err);
        CHECK(strstr(err, want) && strstr(err, path),
              "%s (file): message '%s' lacks '%s' or the path", name, err, want);
        g = m40_gguf_free(g);
        unlink(path);
        free(b->p);
        *b = (struct buf){0};
}

static void check_valid(uint32_t version)
{
        struct buf b = {0};
        char err[M40_GGUF_ERRLEN] = "";
        struct m40_gguf *g = NULL;
        const struct m40_gguf_tensor *t;
        const struct m40_gguf_value *v;
        const struct m40_gguf_str *ss;
        const char *s;
        uint32_t u, et;
        uint64_t n;
        int32_t i32;
        const void *d;
        float f;
        bool bo;
        int e;

        valid(&b, version);
        e = m40_gguf_open_mem(b.p, b.n, "valid", &g, err, sizeof(err));
        CHECK(e == 0, "valid v%u file rejected: %s", version, err);
        if (e) {
                free(b.p);
                return;
        }
        CHECK(m40_gguf_version(g) == version, "version");
        CHECK(m40_gguf_kv_count(g) == 16 && m40_gguf_tensor_count(g) == 2, "counts");
        CHECK(m40_gguf_alignment(g) == 32 && m40_gguf_data_offset(g) % 32 == 0, "alignment");
        CHECK(m40_gguf_get_u32(g, "llama.block_count", 0, &u) == 0 && u == 5, "u32");
        CHECK(m40_gguf_get_u32(g, "missing", 77, &u) == 0 && u == 77, "default");
        CHECK(m40_gguf_get_u32(g, "k.u8", 0, &u) == 0 && u == 200, "u8 widened");
        CHECK(m40_gguf_get_i32(g, "k.i8", 0, &i32) == 0 && i32 == -1, "i8");
        CHECK(m40_gguf_get_i32(g, "k.i16", 0, &i32) == 0 && i32 == -2, "i16");
        CHECK(m40_gguf_get_u32(g, "k.u16", 0, &u) == 0 && u == 0x1234, "u16");
        CHECK(m40_gguf_get_u32(g, "k.i32", 0, &u) == M40_ERANGE, "negative into u32");
        CHECK(m40_gguf_get_u32(g, "k.u64", 0, &u) == M40_ERANGE, "2^40 into u32");
        CHECK(m40_gguf_get_u64(g, "k.u64", 0, &n) == 0 && n == 1ull << 40, "u64");
        CHECK(m40_gguf_get_i32(g, "k.i64", 0, &i32) == 0 && i32 == -3, "i64");
        CHECK(m40_gguf_get_f32(g, "k.f32", 0, &f) == 0 && f == 1.5f, "f32");
        CHECK(m40_gguf_get_f32(g, "k.f64", 0, &f) == 0 && f == 2.5f, "f64");
        CHECK(m40_gguf_get_bool(g, "k.bool", false, &bo) == 0 && bo, "bool");
        CHECK(m40_gguf_get_u32(g, "general.architecture", 0, &u) == M40_ETYPE, "type check");
        CHECK(m40_gguf_get_str(g, "k.u8", NULL, &s) == M40_ETYPE, "str type check");
        CHECK(m40_gguf_get_str(g, "general.architecture", NULL, &s) == 0 && !strcmp(s, "llama"),
              "string");
        CHECK(m40_gguf_get_arr(g, "k.strs", &et, &n, &d) == 0 && et == M40_GGUF_STRING && n == 3,
              "string array");
        ss = d;
        CHECK(ss && !strcmp(ss[0].ptr, "a") && ss[1].len == 0 && !strcmp(ss[2].ptr, "ccc"),
              "string array values");
        CHECK(m40_gguf_get_arr(g, "k.f32s", &et, &n, &d) == 0 && et == M40_GGUF_F32 &&
                      ((const float *)d)[1] == -2.0f,
              "f32 array");
        CHECK(m40_gguf_get_arr(g, "k.u8", &et, &n, &d) == M40_ETYPE, "arr type check");
        CHECK(m40_gguf_get_arr(g, "nope", &et, &n, &d) == -ENOENT, "arr absent");
        v = m40_gguf_find(g, "k.nested");
        CHECK(v && v->arr.n == 2, "nested");
        if (v && v->arr.n == 2) {
                const struct m40_gguf_value *in = v->arr.data;

                CHECK(in[0].arr.elem_type == M40_GGUF_I32 && in[0].arr.n == 2 &&
                              ((const int32_t *)in[0].arr.data)[1] == 2 && in[1].arr.n == 0,
                      "nested values");
        }
        t = m40_gguf_tensor_find(g, "b.weight");
        CHECK(t && t->type == M40_GGML_Q8_0 && t->size == 68 && t->n_elements == 64 &&
                      t->file_offset == m40_gguf_data_offset(g) + 32,
              "tensor b");
        CHECK(!m40_gguf_tensor_find(g, "c.weight"), "absent tensor");
        g = m40_gguf_free(g);

        /* Every strict prefix must be rejected as malformed, never crash. */
        for (size_t len = 0; len < b.n; len++) {
                e = m40_gguf_open_mem(b.p, len, "prefix", &g, err, sizeof(err));
                CHECK(e == M40_EFORMAT, "prefix of %zu/%zu bytes: got %d (%s)", len, b.n, e, err);
                g = m40_gguf_free(g);
        }
        free(b.p);
}

/* Random byte mutations of the valid file: any result but a crash is acceptable, and an
 * error always comes with a message. */
static void mutate(void)
{
        struct buf b = {0};
        uint64_t x = 0x9e3779b97f4a7c15ull;
        int ok = 0;

        valid(&b, 3);
        uint8_t *m = malloc(b.n);
        for (int it = 0; it < 20000; it++) {
                char err[M40_GGUF_ERRLEN] = "";
                struct m40_gguf *g = NULL;
                int e;

                memcpy(m, b.p, b.n);
                for (int k = 0; k < 1 + it % 4; k++) {
                        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                        m[(x >> 8) % b.n] = (uint8_t)(x >> 40);
                }
                e = m40_gguf_open_mem(m, b.n, "mutant", &g, err, sizeof(err));
                CHECK(e == 0 || err[0], "mutant %d: error %d without a message", it, e);
                ok += e == 0;
                g = m40_gguf_free(g);
        }
        printf("mutations: 20000 files, %d still valid, the rest rejected\n", ok);
        free(m);
        free(b.p);
}

int main(void)
{
        static const uint64_t ne_bad_block[] = {33, 2};
        static const uint64_t ne_zero[] = {4, 0};
        static const uint64_t ne_huge[] = {1ull << 32, 1ull << 32};
        static const uint64_t ne_neg[] = {4, 1ull << 63};
        static const uint64_t ne_5[] = {1, 1, 1, 1, 1};
        char longname[65];
        struct buf b = {0};
        char *bigkey;
        int n = 0;

        check_valid(3);
        check_valid(2);

#define CASE(name, code, want, ...)                                                                \
        do {                                                                                       \
                __VA_ARGS__;                                                                       \
                expect(name, &b, code, want);                                                      \
                n++;                                                                               \
        } while (0)

        CASE("empty", M40_EFORMAT, "truncated: magic", (void)0);
        CASE("short-magic", M40_EFORMAT, "truncated: magic", u8(&b, 'G'), u8(&b, 'G'));
        CASE("bad-magic", M40_EFORMAT, "not a GGUF file", u32(&b, 0x46554746), u32(&b, 3));
        CASE("no-version", M40_EFORMAT, "truncated: version", u32(&b, M40_GGUF_MAGIC));
        CASE("version-1", M40_EUNSUPPORTED, "version 1 is not supported", head(&b, 1, 0, 0));
        CASE("version-4", M40_EUNSUPPORTED, "version 4 is not supported", head(&b, 4, 0, 0));
        CASE("big-endian", M40_EUNSUPPORTED, "big-endian", head(&b, 3u << 24, 0, 0));
        CASE("no-tensor-count", M40_EFORMAT, "truncated: tensor count", u32(&b, M40_GGUF_MAGIC),
             u32(&b, 3), u32(&b, 0));
        CASE("no-kv-count", M40_EFORMAT, "truncated: metadata count", u32(&b, M40_GGUF_MAGIC),
             u32(&b, 3), u64(&b, 0));
        CASE("huge-kv-count", M40_EFORMAT, "metadata count 1152921504606846976 cannot fit",
             head(&b, 3, 0, 1ull << 60), kv_u32(&b, "a", 1));
        CASE("huge-tensor-count", M40_EFORMAT, "tensor count 4294967296 cannot fit",
             head(&b, 3, 1ull << 32, 0));
        CASE("key-past-eof", M40_EFORMAT, "metadata key has length 1000", head(&b, 3, 0, 1),
             u64(&b, 1000), put(&b, "abcdefghij", 10));
        CASE("key-huge-length", M40_EFORMAT, "metadata key has length 18446744073709551615",
             head(&b, 3, 0, 1), u64(&b, UINT64_MAX), put(&b, "abcdefghijklmnop", 16));
        bigkey = malloc(70001);
        memset(bigkey, 'k', 70000);
        bigkey[70000] = 0;
        CASE("key-too-long", M40_EFORMAT, "metadata key is 70000 bytes long (limit 65535)",
             head(&b, 3, 0, 1), kv_u32(&b, bigkey, 1));
        free(bigkey);
        CASE("key-empty", M40_EFORMAT, "is empty or contains a NUL byte", head(&b, 3, 0, 1),
             kv_u32(&b, "", 1));
        CASE("key-nul", M40_EFORMAT, "is empty or contains a NUL byte", head(&b, 3, 0, 1),
             u64(&b, 3), put(&b, "a\0b", 3), u32(&b, M40_GGUF_U32), u32(&b, 1));
        CASE("duplicate-key", M40_EFORMAT, "duplicate metadata key 'general.name'",
             head(&b, 3, 0, 2), kv_str(&b, "general.name", "x"), kv_str(&b, "general.name", "y"));
        CASE("bad-value-type", M40_EFORMAT, "has value type 99, not a GGUF value type",
             head(&b, 3, 0, 1), str(&b, "k"), u32(&b, 99), u64(&b, 0));
        CASE("value-truncated", M40_EFORMAT, "truncated: value needs 8 bytes", head(&b, 3, 0, 1),
             str(&b, "k"), u32(&b, M40_GGUF_U64), u32(&b, 0));
        CASE("string-value-past-eof", M40_EFORMAT, "string value has length 4096",
             head(&b, 3, 0, 1), str(&b, "k"), u32(&b, M40_GGUF_STRING), u64(&b, 4096), u64(&b, 0));
        CASE("bool-not-0-1", M40_EFORMAT, "bool value is 2", head(&b, 3, 0, 1), str(&b, "k"),
             u32(&b, M40_GGUF_BOOL), u8(&b, 2));
        CASE("array-bad-elem-type", M40_EFORMAT, "array element type 77 is not", head(&b, 3, 0, 1),
             str(&b, "k"), u32(&b, M40_GGUF_ARRAY), u32(&b, 77), u64(&b, 1), u32(&b, 0));
        CASE("array-huge-count", M40_EFORMAT,
             "array of 2305843009213693952 u32 elements cannot fit", head(&b, 3, 0, 1),
             str(&b, "k"), u32(&b, M40_GGUF_ARRAY), u32(&b, M40_GGUF_U32), u64(&b, 1ull << 61),
             u64(&b, 0));
        CASE("array-strings-huge-count", M40_EFORMAT, "array of 1099511627776 string elements",
             head(&b, 3, 0, 1), str(&b, "k"), u32(&b, M40_GGUF_ARRAY), u32(&b, M40_GGUF_STRING),
             u64(&b, 1ull << 40), str(&b, "x"));
        CASE("array-string-past-eof", M40_EFORMAT, "array string has length 99", head(&b, 3, 0, 1),
             str(&b, "k"), u32(&b, M40_GGUF_ARRAY), u32(&b, M40_GGUF_STRING), u64(&b, 2),
             str(&b, "x"), u64(&b, 99), u64(&b, 0));
        CASE("array-bool-not-0-1", M40_EFORMAT, "bool value is 7", head(&b, 3, 0, 1), str(&b, "k"),
             u32(&b, M40_GGUF_ARRAY), u32(&b, M40_GGUF_BOOL), u64(&b, 3), u8(&b, 1), u8(&b, 0),
             u8(&b, 7));
        CASE("array-too-deep", M40_EFORMAT, "arrays nested deeper than 8 levels", head(&b, 3, 0, 1),
             str(&b, "k"), u32(&b, M40_GGUF_ARRAY);
             for (int i = 0; i < 9; i++) u32(&b, M40_GGUF_ARRAY), u64(&b, 1);
             u32(&b, M40_GGUF_U8), u64(&b, 0));
        CASE("alignment-type", M40_EFORMAT, "general.alignment has type string, expected u32",
             head(&b, 3, 0, 1), kv_str(&b, "general.alignment", "32"));
        CASE("alignment-not-pow2", M40_EFORMAT, "general.alignment is 48, not a power of two",
             head(&b, 3, 0, 1), kv_u32(&b, "general.alignment", 48));
        CASE("alignment-zero", M40_EFORMAT, "general.alignment is 0, not a power of two",
             head(&b, 3, 0, 1), kv_u32(&b, "general.alignment", 0));
        CASE("tensor-infos-truncated", M40_EFORMAT, "truncated: tensor dimension",
             head(&b, 3, 1, 0), str(&b, "a.weight"), u32(&b, 2), u64(&b, 4),
             put(&b, "pad-pad-pad-pad-pad-pad-pad-pad", 32);
             b.n = 24 + 16 + 4 + 8 + 5);
        CASE("tensor-name-too-long", M40_EFORMAT, "tensor name is 64 bytes long (limit 63)",
             memset(longname, 'n', 64), longname[64] = 0, head(&b, 3, 1, 0),
             tensor(&b, longname, 2, ne_4x2, M40_GGML_F32, 0), data(&b, 32, 32));
        CASE("tensor-name-empty", M40_EFORMAT, "has an empty name", head(&b, 3, 1, 0),
             tensor(&b, "", 2, ne_4x2, M40_GGML_F32, 0), data(&b, 32, 32));
        CASE("tensor-duplicate", M40_EFORMAT, "duplicate tensor name 'a.weight'", head(&b, 3, 2, 0),
             tensor(&b, "a.weight", 2, ne_4x2, M40_GGML_F32, 0),
             tensor(&b, "a.weight", 2, ne_4x2, M40_GGML_F32, 32), data(&b, 32, 64));
        CASE("tensor-5-dims", M40_EFORMAT, "has 5 dimensions (1 to 4)", head(&b, 3, 1, 0),
             tensor(&b, "a.weight", 5, ne_5, M40_GGML_F32, 0), data(&b, 32, 32));
        CASE("tensor-0-dims", M40_EFORMAT, "has 0 dimensions", head(&b, 3, 1, 0),
             tensor(&b, "a.weight", 0, ne_5, M40_GGML_F32, 0), data(&b, 32, 32));
        CASE("tensor-dim-zero", M40_EFORMAT, "dimension 1 is 0", head(&b, 3, 1, 0),
             tensor(&b, "a.weight", 2, ne_zero, M40_GGML_F32, 0), data(&b, 32, 32));
        CASE("tensor-dim-negative", M40_EFORMAT, "dimension 1 is 9223372036854775808",
             head(&b, 3, 1, 0), tensor(&b, "a.weight", 2, ne_neg, M40_GGML_F32, 0),
             data(&b, 32, 32));
        CASE("tensor-dims-overflow", M40_EFORMAT, "element count overflows 63 bits",
             head(&b, 3, 1, 0), tensor(&b, "a.weight", 2, ne_huge, M40_GGML_F32, 0),
             data(&b, 32, 32));
        CASE("tensor-type-unsupported", M40_EUNSUPPORTED, "unsupported type 16 (IQ2_XXS)",
             head(&b, 3, 1, 0), tensor(&b, "a.weight", 2, ne_4x2, M40_GGML_IQ2_XXS, 0),
             data(&b, 32, 32));
        CASE("tensor-type-unknown", M40_EFORMAT, "unsupported type 200 (not a GGML type)",
             head(&b, 3, 1, 0), tensor(&b, "a.weight", 2, ne_4x2, 200, 0), data(&b, 32, 32));
        CASE("tensor-type-retired", M40_EFORMAT, "unsupported type 4 (not a GGML type)",
             head(&b, 3, 1, 0), tensor(&b, "a.weight", 2, ne_4x2, 4, 0), data(&b, 32, 32));
        CASE("tensor-ragged-block", M40_EFORMAT, "row length 33 is not a multiple of the Q8_0",
             head(&b, 3, 1, 0), tensor(&b, "a.weight", 2, ne_bad_block, M40_GGML_Q8_0, 0),
             data(&b, 32, 96));
        CASE("tensor-offset-misaligned", M40_EFORMAT,
             "offset 8 is not a multiple of the alignment 32", head(&b, 3, 1, 0),
             tensor(&b, "a.weight", 2, ne_4x2, M40_GGML_F32, 8), data(&b, 32, 64));
        CASE("tensor-offset-past-eof", M40_EFORMAT, "runs past the end of the data section",
             head(&b, 3, 1, 0), tensor(&b, "a.weight", 2, ne_4x2, M40_GGML_F32, 1ull << 40),
             data(&b, 32, 32));
        CASE("tensor-offset-wraps", M40_EFORMAT, "runs past the end of the data section",
             head(&b, 3, 1, 0), tensor(&b, "a.weight", 2, ne_4x2, M40_GGML_F32, UINT64_MAX - 31),
             data(&b, 32, 32));
        CASE("tensor-data-truncated", M40_EFORMAT, "'b.weight' data [32, +68) runs past",
             head(&b, 3, 2, 0), tensor(&b, "a.weight", 2, ne_4x2, M40_GGML_F32, 0),
             tensor(&b, "b.weight", 2, ne_32x2, M40_GGML_Q8_0, 32), data(&b, 32, 32 + 67));
        CASE("tensor-overlap", M40_EFORMAT, "tensors 'a.weight' and 'b.weight' overlap",
             head(&b, 3, 2, 0), tensor(&b, "a.weight", 2, ne_32x2, M40_GGML_Q8_0, 0),
             tensor(&b, "b.weight", 2, ne_4x2, M40_GGML_F32, 64), data(&b, 32, 128));
        CASE("data-section-past-eof", M40_EFORMAT, "the data section would start at 64",
             head(&b, 3, 1, 0), tensor(&b, "a", 1, ne_4x2, M40_GGML_F32, 0));

        {
                char err[M40_GGUF_ERRLEN] = "";
                struct m40_gguf *g = NULL;
                int e = m40_gguf_open("/nonexistent/m40.gguf", &g, err, sizeof(err));

                CHECK(e == -ENOENT && strstr(err, "cannot open"), "missing file: %d %s", e, err);
                e = m40_gguf_open(tmpdir(), &g, err, sizeof(err));
                CHECK(e == -EINVAL && strstr(err, "not a regular file"), "directory: %d %s", e,
                      err);
                n += 2;
        }
        mutate();
        printf("%d malformed files checked, %d failures\n", n, failures);
        return failures ? 1 : 0;
}
