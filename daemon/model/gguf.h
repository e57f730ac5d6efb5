/* gguf.h - a validating reader for GGUF v2/v3 model files.
 *
 * m40_gguf_open() reads the header, every metadata value and every tensor description,
 * and checks all of it against the file size before anything is returned: counts,
 * string lengths, dimension products (overflow), tensor types, offsets and sizes
 * inside the data section, alignment, overlaps, duplicate keys and tensor names. Tensor
 * data itself is not read (the loader does that). Every rejection carries a message
 * "FILE: offset N: what was wrong".
 *
 * Everything returned by the accessors is owned by the struct m40_gguf and lives until
 * m40_gguf_free(). The reader does not print. */
#ifndef M40_GGUF_H
#define M40_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define M40_GGUF_MAGIC             0x46554747u /* "GGUF" read as little-endian u32 */
#define M40_GGUF_DEFAULT_ALIGNMENT 32u
#define M40_GGUF_MAX_DIMS          4
#define M40_GGUF_MAX_NAME          63    /* tensor name bytes, as ggml's GGML_MAX_NAME - 1 */
#define M40_GGUF_MAX_KEY           65535 /* metadata key bytes */
#define M40_GGUF_MAX_DEPTH         8     /* nesting of arrays inside arrays */
#define M40_GGUF_ERRLEN            512   /* a buffer this big holds any message */

enum m40_gguf_vtype {
        M40_GGUF_U8 = 0,
        M40_GGUF_I8 = 1,
        M40_GGUF_U16 = 2,
        M40_GGUF_I16 = 3,
        M40_GGUF_U32 = 4,
        M40_GGUF_I32 = 5,
        M40_GGUF_F32 = 6,
        M40_GGUF_BOOL = 7,
        M40_GGUF_STRING = 8,
        M40_GGUF_ARRAY = 9,
        M40_GGUF_U64 = 10,
        M40_GGUF_I64 = 11,
        M40_GGUF_F64 = 12,
        M40_GGUF_VTYPE_LIMIT = 13,
};

struct m40_gguf_str {
        const char *ptr; /* NUL-terminated copy; may contain inner NULs, use len */
        uint64_t len;
};

/* One metadata value. Arrays hold n elements of elem_type in data, stored as a C array of
 * the natural type: uint8_t.. double for numbers, bool (one byte) for BOOL,
 * struct m40_gguf_str for STRING, struct m40_gguf_value for ARRAY (nested arrays). */
struct m40_gguf_value {
        uint32_t type; /* enum m40_gguf_vtype */
        union {
                uint64_t u; /* U8 U16 U32 U64 */
                int64_t i;  /* I8 I16 I32 I64 */
                double f;   /* F32 F64 */
                bool b;     /* BOOL */
                struct m40_gguf_str str;
                struct {
                        uint32_t elem_type;
                        uint64_t n;
                        const void *data;
                } arr;
        };
};

struct m40_gguf_kv {
        struct m40_gguf_str key;
        struct m40_gguf_value value;
        uint64_t offset; /* file offset of the key, for messages */
};

struct m40_gguf_tensor {
        const char *name;
        uint32_t n_dims;
        uint64_t ne[M40_GGUF_MAX_DIMS]; /* ne[0] is the row length (fastest); unused dims are 1 */
        uint32_t type;                  /* enum m40_ggml_type, always a supported one */
        uint64_t n_elements;
        uint64_t size;        /* bytes of data */
        uint64_t file_offset; /* absolute offset of the data in the file */
};

struct m40_gguf;

/* m40_gguf_open - read and validate the GGUF file at path.
 * On success returns 0 and stores a new reader in *ret (free with m40_gguf_free()); the
 * file stays open (m40_gguf_fd()) until then, so that whoever reads its tensor data later
 * (the engines' mapping, the CUDA loader) reads the file that was validated, without
 * opening the path again.
 * On failure returns -errno (file could not be opened or read), M40_EFORMAT (malformed)
 * or M40_EUNSUPPORTED (valid but unsupported: version, tensor type), writes a message
 * naming path, byte offset and the problem into err (if err is not NULL), and leaves
 * *ret untouched. */
int m40_gguf_open(const char *path, struct m40_gguf **ret, char *err, size_t errlen);

/* m40_gguf_open_mem - as m40_gguf_open(), over size bytes at data, which the caller keeps
 * alive only for the duration of the call; name is used in messages. Such a reader has no
 * file (m40_gguf_fd() is -1): engines cannot load from it. */
int m40_gguf_open_mem(const void *data, size_t size, const char *name, struct m40_gguf **ret,
                      char *err, size_t errlen);

/* m40_gguf_free - free g and everything it returned; accepts NULL; returns NULL. */
struct m40_gguf *m40_gguf_free(struct m40_gguf *g);

uint32_t m40_gguf_version(const struct m40_gguf *g);
uint64_t m40_gguf_file_size(const struct m40_gguf *g);
uint32_t m40_gguf_alignment(const struct m40_gguf *g);
uint64_t m40_gguf_data_offset(const struct m40_gguf *g); /* start of the aligned data section */
const char *m40_gguf_path(const struct m40_gguf *g);
/* m40_gguf_fd - the read-only descriptor (O_CLOEXEC) of the file m40_gguf_open() parsed,
 * owned by g (do not close it; read it with pread or mmap, which leave its offset alone);
 * -1 for m40_gguf_open_mem(). */
int m40_gguf_fd(const struct m40_gguf *g);

/* Metadata, in file order. */
uint64_t m40_gguf_kv_count(const struct m40_gguf *g);
const struct m40_gguf_kv *m40_gguf_kv_at(const struct m40_gguf *g, uint64_t i);
/* m40_gguf_find - the value of key, or NULL when absent. */
const struct m40_gguf_value *m40_gguf_find(const struct m40_gguf *g, const char *key);

/* Typed accessors. Each returns 0 and stores the value in *ret when key is present with
 * a compatible type, stores def and returns 0 when key is absent, and returns M40_ETYPE
 * (wrong type) or M40_ERANGE (integer does not fit) leaving *ret untouched otherwise.
 * Integer getters accept any integer type whose value fits; float getters accept F32/F64
 * and integers. m40_gguf_get_str's result is owned by g. */
int m40_gguf_get_u32(const struct m40_gguf *g, const char *key, uint32_t def, uint32_t *ret);
int m40_gguf_get_u64(const struct m40_gguf *g, const char *key, uint64_t def, uint64_t *ret);
int m40_gguf_get_i32(const struct m40_gguf *g, const char *key, int32_t def, int32_t *ret);
int m40_gguf_get_f32(const struct m40_gguf *g, const char *key, float def, float *ret);
int m40_gguf_get_bool(const struct m40_gguf *g, const char *key, bool def, bool *ret);
int m40_gguf_get_str(const struct m40_gguf *g, const char *key, const char *def, const char **ret);
/* m40_gguf_get_arr - the array at key: returns 0 and sets ret_type, ret_n and ret_data;
 * -ENOENT when absent, M40_ETYPE when not an array. */
int m40_gguf_get_arr(const struct m40_gguf *g, const char *key, uint32_t *ret_type, uint64_t *ret_n,
                     const void **ret_data);

/* m40_gguf_arch_key - writes "<general.architecture>.<suffix>" into buf (size n); returns
 * buf, or NULL when the architecture is unknown or the key does not fit. */
const char *m40_gguf_arch_key(const struct m40_gguf *g, const char *suffix, char *buf, size_t n);

/* Tensors, in file order. */
uint64_t m40_gguf_tensor_count(const struct m40_gguf *g);
const struct m40_gguf_tensor *m40_gguf_tensor_at(const struct m40_gguf *g, uint64_t i);
/* m40_gguf_tensor_find - the tensor called name, or NULL. */
const struct m40_gguf_tensor *m40_gguf_tensor_find(const struct m40_gguf *g, const char *name);

/* m40_gguf_vtype_name - "u32", "string", ...; "?" for ids past the enum. */
const char *m40_gguf_vtype_name(uint32_t t);

#endif
