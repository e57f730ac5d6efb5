/* gguf_value.c - decoding GGUF's typed encodings at the parse cursor (see gguf_impl.h):
 * little-endian integers, strings, and metadata values of every type, with arrays (nested
 * up to M40_GGUF_MAX_DEPTH) checked against the bytes left in the file before anything is
 * allocated, and decoded into C arrays of their natural type (see struct m40_gguf_value).
 * Also the value type names (m40_gguf_vtype_name). */
#include <errno.h>
#include <string.h>

#include "gguf_impl.h"
#include "m40/error.h"

static uint64_t le(const uint8_t *p, int n)
{
        uint64_t v = 0;

        for (int i = n - 1; i >= 0; i--)
                v = v << 8 | p[i];
        return v;
}

int m40_gguf_read_uint(struct m40_gguf_reader *r, int n, uint64_t *ret, const char *what)
{
        const uint8_t *p = NULL;
        int e = m40_gguf_take(r, (uint64_t)n, &p, what);

        if (e)
                return e;
        *ret = le(p, n);
        return 0;
}

int m40_gguf_read_u32(struct m40_gguf_reader *r, uint32_t *ret, const char *what)
{
        uint64_t v;
        int e = m40_gguf_read_uint(r, 4, &v, what);

        if (!e)
                *ret = (uint32_t)v;
        return e;
}

int m40_gguf_read_str(struct m40_gguf_reader *r, struct m40_gguf_str *ret, uint64_t max,
                      const char *what)
{
        uint64_t at = r->pos, len;
        const uint8_t *p = NULL;
        char *s;
        int e;

        e = m40_gguf_read_uint(r, 8, &len, what);
        if (e)
                return e;
        if (len > m40_gguf_remaining(r))
                return m40_gguf_fail(r, M40_EFORMAT, at,
                                     "%s has length %llu but only %llu bytes are left in the file",
                                     what, (unsigned long long)len,
                                     (unsigned long long)m40_gguf_remaining(r));
        if (max && len > max)
                return m40_gguf_fail(r, M40_EFORMAT, at, "%s is %llu bytes long (limit %llu)", what,
                                     (unsigned long long)len, (unsigned long long)max);
        e = m40_gguf_take(r, len, &p, what);
        if (e)
                return e;
        s = m40_gguf_alloc(r->g, len + 1, 1);
        if (!s)
                return m40_gguf_fail(r, -ENOMEM, at, "out of memory for %s", what);
        memcpy(s, p, len);
        s[len] = 0;
        ret->ptr = s;
        ret->len = len;
        return 0;
}

static const char *const vtype_names[M40_GGUF_VTYPE_LIMIT] = {
        "u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
        "bool", "string", "array", "u64", "i64", "f64",
};

const char *m40_gguf_vtype_name(uint32_t t)
{
        return t < M40_GGUF_VTYPE_LIMIT ? vtype_names[t] : "?";
}

/* Bytes a value of scalar type t occupies in the file; 0 for string/array. */
static int scalar_size(uint32_t t)
{
        static const int sz[M40_GGUF_VTYPE_LIMIT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

        return sz[t];
}

/* Smallest number of file bytes one element of type t can take: bounds array counts. */
static uint64_t min_elem_size(uint32_t t)
{
        if (t == M40_GGUF_STRING)
                return 8;
        if (t == M40_GGUF_ARRAY)
                return 12;
        return (uint64_t)scalar_size(t);
}

/* Decode a scalar of type t from file bytes p into v. */
static int decode_scalar(struct m40_gguf_reader *r, uint64_t at, uint32_t t, const uint8_t *p,
                         struct m40_gguf_value *v)
{
        uint64_t u = le(p, scalar_size(t));
        union {
                uint32_t u;
                float f;
        } f32;
        union {
                uint64_t u;
                double f;
        } f64;

        v->type = t;
        switch (t) {
        case M40_GGUF_U8:
        case M40_GGUF_U16:
        case M40_GGUF_U32:
        case M40_GGUF_U64:
                v->u = u;
                break;
        case M40_GGUF_I8:
                v->i = (int8_t)u;
                break;
        case M40_GGUF_I16:
                v->i = (int16_t)u;
                break;
        case M40_GGUF_I32:
                v->i = (int32_t)u;
                break;
        case M40_GGUF_I64:
                v->i = (int64_t)u;
                break;
        case M40_GGUF_F32:
                f32.u = (uint32_t)u;
                v->f = f32.f;
                break;
        case M40_GGUF_F64:
                f64.u = u;
                v->f = f64.f;
                break;
        case M40_GGUF_BOOL:
                if (u > 1)
                        return m40_gguf_fail(r, M40_EFORMAT, at, "bool value is %llu, not 0 or 1",
                                             (unsigned long long)u);
                v->b = u != 0;
                break;
        }
        return 0;
}

/* Array of scalars: stored as a C array of the natural type. */
static int read_scalar_array(struct m40_gguf_reader *r, uint64_t at, uint32_t et, uint64_t n,
                             void *data)
{
        int es = scalar_size(et);
        const uint8_t *p = NULL;
        int e = m40_gguf_take(r, n * (uint64_t)es, &p, "array data");

        if (e)
                return e;
        for (uint64_t i = 0; i < n; i++) {
                struct m40_gguf_value v = {0}; /* GCC cannot see decode_scalar set it */
                const uint8_t *q = p + i * (uint64_t)es;

                e = decode_scalar(r, at + 12 + i * (uint64_t)es, et, q, &v);
                if (e)
                        return e;
                switch (et) {
                case M40_GGUF_U8:
                        ((uint8_t *)data)[i] = (uint8_t)v.u;
                        break;
                case M40_GGUF_I8:
                        ((int8_t *)data)[i] = (int8_t)v.i;
                        break;
                case M40_GGUF_U16:
                        ((uint16_t *)data)[i] = (uint16_t)v.u;
                        break;
                case M40_GGUF_I16:
                        ((int16_t *)data)[i] = (int16_t)v.i;
                        break;
                case M40_GGUF_U32:
                        ((uint32_t *)data)[i] = (uint32_t)v.u;
                        break;
                case M40_GGUF_I32:
                        ((int32_t *)data)[i] = (int32_t)v.i;
                        break;
                case M40_GGUF_F32:
                        ((float *)data)[i] = (float)v.f;
                        break;
                case M40_GGUF_BOOL:
                        ((bool *)data)[i] = v.b;
                        break;
                case M40_GGUF_U64:
                        ((uint64_t *)data)[i] = v.u;
                        break;
                case M40_GGUF_I64:
                        ((int64_t *)data)[i] = v.i;
                        break;
                case M40_GGUF_F64:
                        ((double *)data)[i] = v.f;
                        break;
                }
        }
        return 0;
}

static size_t native_size(uint32_t et)
{
        switch (et) {
        case M40_GGUF_STRING:
                return sizeof(struct m40_gguf_str);
        case M40_GGUF_ARRAY:
                return sizeof(struct m40_gguf_value);
        case M40_GGUF_BOOL:
                return sizeof(bool);
        case M40_GGUF_F32:
                return sizeof(float);
        default:
                return (size_t)scalar_size(et);
        }
}

static int read_array(struct m40_gguf_reader *r, struct m40_gguf_value *v, int depth)
{
        uint64_t at = r->pos, n;
        uint32_t et;
        void *data;
        int e;

        if (depth >= M40_GGUF_MAX_DEPTH)
                return m40_gguf_fail(r, M40_EFORMAT, at, "arrays nested deeper than %d levels",
                                     M40_GGUF_MAX_DEPTH);
        e = m40_gguf_read_u32(r, &et, "array element type");
        if (e)
                return e;
        if (et >= M40_GGUF_VTYPE_LIMIT)
                return m40_gguf_fail(r, M40_EFORMAT, at,
                                     "array element type %u is not a GGUF value type", et);
        e = m40_gguf_read_uint(r, 8, &n, "array length");
        if (e)
                return e;
        if (n > m40_gguf_remaining(r) / min_elem_size(et))
                return m40_gguf_fail(r, M40_EFORMAT, at + 4,
                                     "array of %llu %s elements cannot fit in the %llu bytes left",
                                     (unsigned long long)n, m40_gguf_vtype_name(et),
                                     (unsigned long long)m40_gguf_remaining(r));
        data = m40_gguf_alloc(r->g, n, native_size(et));
        if (!data)
                return m40_gguf_fail(r, -ENOMEM, at, "out of memory for an array of %llu elements",
                                     (unsigned long long)n);
        v->type = M40_GGUF_ARRAY;
        v->arr.elem_type = et;
        v->arr.n = n;
        v->arr.data = data;
        if (et != M40_GGUF_STRING && et != M40_GGUF_ARRAY)
                return read_scalar_array(r, at, et, n, data);
        for (uint64_t i = 0; i < n; i++) {
                if (et == M40_GGUF_STRING)
                        e = m40_gguf_read_str(r, (struct m40_gguf_str *)data + i, 0,
                                              "array string");
                else
                        e = m40_gguf_read_value(r, et, (struct m40_gguf_value *)data + i,
                                                depth + 1);
                if (e)
                        return e;
        }
        return 0;
}

int m40_gguf_read_value(struct m40_gguf_reader *r, uint32_t type, struct m40_gguf_value *v,
                        int depth)
{
        uint64_t at = r->pos;
        const uint8_t *p = NULL;
        int e;

        if (type == M40_GGUF_STRING) {
                v->type = type;
                return m40_gguf_read_str(r, &v->str, 0, "string value");
        }
        if (type == M40_GGUF_ARRAY)
                return read_array(r, v, depth);
        e = m40_gguf_take(r, (uint64_t)scalar_size(type), &p, "value");
        if (e)
                return e;
        return decode_scalar(r, at, type, p, v);
}
