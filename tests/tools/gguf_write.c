/* gguf_write.c - streaming GGUF v3 writer (see gguf_write.h).
 *
 * Layout written (all integers little-endian):
 *   "GGUF" u32 version=3, u64 n_tensors, u64 n_kv,
 *   n_kv x { string key, u32 vtype, value },
 *   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset },
 *   zeros up to the alignment, then each tensor's data followed by zeros up to the
 *   alignment; offsets are relative to the start of the data section.
 * A string is u64 length + bytes (no NUL); an array is u32 elem_type, u64 n, elements. */
#include "gguf_write.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/ggml_type.h"

#define OUT_BUF_SIZE (4u << 20) /* writes go out in pieces of this size */
#define MAX_SIZE     (UINT64_C(1) << 62)

struct tensor_desc {
        char *name;
        uint32_t n_dims;
        uint64_t ne[M40_GGUF_MAX_DIMS];
        uint32_t type;
        uint64_t offset; /* from the start of the data section */
        uint64_t size;   /* bytes, without padding */
};

struct buf {
        uint8_t *p;
        size_t len, cap;
};

enum state { ADDING, DATA, DONE, FAILED };

struct m40_gguf_writer {
        char *path, *tmp_path;
        int fd;
        uint32_t alignment;
        enum state state;

        struct buf kv; /* serialized metadata */
        uint64_t n_kv;
        char **keys;

        struct tensor_desc *tensors;
        uint64_t n_tensors;
        uint64_t data_size; /* data section, padding included */
        uint64_t file_size;

        uint64_t cur;      /* tensor whose data is being written */
        uint64_t cur_done; /* its bytes written so far */

        struct buf out; /* pending output, flushed at OUT_BUF_SIZE */
};

static uint64_t pad_to(uint64_t n, uint32_t align)
{
        return (n + align - 1) / align * align;
}

static int buf_put(struct buf *b, const void *p, size_t n)
{
        if (b->cap - b->len < n) {
                size_t cap = b->cap ? b->cap : 4096;
                while (cap - b->len < n) {
                        if (cap > SIZE_MAX / 2)
                                return -ENOMEM;
                        cap *= 2;
                }
                uint8_t *np = realloc(b->p, cap);
                if (!np)
                        return -ENOMEM;
                b->p = np;
                b->cap = cap;
        }
        memcpy(b->p + b->len, p, n);
        b->len += n;
        return 0;
}

static int put_u32(struct buf *b, uint32_t v)
{
        return buf_put(b, &v, sizeof(v));
}

static int put_u64(struct buf *b, uint64_t v)
{
        return buf_put(b, &v, sizeof(v));
}

static int put_str(struct buf *b, const char *s, uint64_t len)
{
        int r = put_u64(b, len);

        if (r < 0)
                return r;
        if (len > SIZE_MAX)
                return -EINVAL;
        return buf_put(b, s, (size_t)len);
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
        while (n > 0) {
                ssize_t k = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        return -EIO;
                p += k;
                n -= (size_t)k;
        }
        return 0;
}

static int flush_out(struct m40_gguf_writer *w)
{
        int r = write_all(w->fd, w->out.p, w->out.len);

        w->out.len = 0;
        return r;
}

/* Send n bytes to the file through the output buffer; big pieces bypass it. */
static int emit(struct m40_gguf_writer *w, const void *p, size_t n)
{
        int r;

        if (w->out.cap - w->out.len < n) {
                r = flush_out(w);
                if (r < 0)
                        return r;
                if (n >= w->out.cap)
                        return write_all(w->fd, p, n);
        }
        memcpy(w->out.p + w->out.len, p, n);
        w->out.len += n;
        return 0;
}

static int emit_zeros(struct m40_gguf_writer *w, uint64_t n)
{
        static const uint8_t zeros[256];
        int r = 0;

        while (n > 0 && r == 0) {
                size_t k = n > sizeof(zeros) ? sizeof(zeros) : (size_t)n;
                r = emit(w, zeros, k);
                n -= k;
        }
        return r;
}

int m40_gguf_writer_new(const char *path, uint32_t alignment, struct m40_gguf_writer **ret)
{
        struct m40_gguf_writer *w;
        int r;

        if (!path || !*path || !ret)
                return -EINVAL;
        if (alignment == 0)
                alignment = M40_GGUF_DEFAULT_ALIGNMENT;
        if (alignment & (alignment - 1))
                return -EINVAL;
        w = calloc(1, sizeof(*w));
        if (!w)
                return -ENOMEM;
        w->fd = -1;
        w->alignment = alignment;
        w->path = strdup(path);
        if (!w->path || asprintf(&w->tmp_path, "%s.tmp", path) < 0) {
                w->tmp_path = NULL;
                r = -ENOMEM;
                goto fail_free;
        }
        w->out.p = malloc(OUT_BUF_SIZE);
        if (!w->out.p) {
                r = -ENOMEM;
                goto fail_free;
        }
        w->out.cap = OUT_BUF_SIZE;
        w->fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (w->fd < 0) {
                r = -errno;
                goto fail_free;
        }
        *ret = w;
        return 0;

fail_free:
        w->state = DONE; /* nothing to unlink */
        m40_gguf_writer_free(w);
        return r;
}

struct m40_gguf_writer *m40_gguf_writer_free(struct m40_gguf_writer *w)
{
        if (!w)
                return NULL;
        if (w->fd >= 0)
                close(w->fd);
        if (w->state != DONE && w->tmp_path)
                unlink(w->tmp_path);
        for (uint64_t i = 0; i < w->n_kv; i++)
                free(w->keys[i]);
        free(w->keys);
        for (uint64_t i = 0; i < w->n_tensors; i++)
                free(w->tensors[i].name);
        free(w->tensors);
        free(w->kv.p);
        free(w->out.p);
        free(w->path);
        free(w->tmp_path);
        free(w);
        return NULL;
}

static size_t scalar_size(uint32_t t)
{
        switch (t) {
        case M40_GGUF_U8:
        case M40_GGUF_I8:
        case M40_GGUF_BOOL:
                return 1;
        case M40_GGUF_U16:
        case M40_GGUF_I16:
                return 2;
        case M40_GGUF_U32:
        case M40_GGUF_I32:
        case M40_GGUF_F32:
                return 4;
        case M40_GGUF_U64:
        case M40_GGUF_I64:
        case M40_GGUF_F64:
                return 8;
        default:
                return 0;
        }
}

static int put_scalar(struct buf *b, const struct m40_gguf_value *v)
{
        union {
                uint8_t u8;
                uint16_t u16;
                uint32_t u32;
                uint64_t u64;
                float f32;
                double f64;
        } x;

        switch (v->type) {
        case M40_GGUF_U8:
        case M40_GGUF_I8:
                x.u8 = v->type == M40_GGUF_U8 ? (uint8_t)v->u : (uint8_t)(int8_t)v->i;
                break;
        case M40_GGUF_BOOL:
                x.u8 = v->b ? 1 : 0;
                break;
        case M40_GGUF_U16:
        case M40_GGUF_I16:
                x.u16 = v->type == M40_GGUF_U16 ? (uint16_t)v->u : (uint16_t)(int16_t)v->i;
                break;
        case M40_GGUF_U32:
        case M40_GGUF_I32:
                x.u32 = v->type == M40_GGUF_U32 ? (uint32_t)v->u : (uint32_t)(int32_t)v->i;
                break;
        case M40_GGUF_F32:
                x.f32 = (float)v->f;
                break;
        case M40_GGUF_U64:
        case M40_GGUF_I64:
                x.u64 = v->type == M40_GGUF_U64 ? v->u : (uint64_t)v->i;
                break;
        case M40_GGUF_F64:
                x.f64 = v->f;
                break;
        default:
                return -EINVAL;
        }
        return buf_put(b, &x, scalar_size(v->type));
}

/* Serialize the body of a value of type t (without its type tag). */
static int put_value(struct buf *b, const struct m40_gguf_value *v, int depth)
{
        int r;

        if (v->type == M40_GGUF_STRING)
                return put_str(b, v->str.ptr, v->str.len);
        if (v->type != M40_GGUF_ARRAY)
                return put_scalar(b, v);

        uint32_t et = v->arr.elem_type;
        uint64_t n = v->arr.n;
        if (depth >= M40_GGUF_MAX_DEPTH || et >= M40_GGUF_VTYPE_LIMIT || (n && !v->arr.data))
                return -EINVAL;
        r = put_u32(b, et);
        if (r == 0)
                r = put_u64(b, n);
        if (r == 0 && scalar_size(et) && et != M40_GGUF_BOOL) {
                /* numbers: the C array has the file's layout already */
                if (n > SIZE_MAX / scalar_size(et))
                        return -EINVAL;
                return buf_put(b, v->arr.data, (size_t)n * scalar_size(et));
        }
        for (uint64_t i = 0; i < n && r == 0; i++) {
                if (et == M40_GGUF_STRING) {
                        const struct m40_gguf_str *s = (const struct m40_gguf_str *)v->arr.data + i;
                        r = put_str(b, s->ptr, s->len);
                } else if (et == M40_GGUF_ARRAY) {
                        const struct m40_gguf_value *e =
                                (const struct m40_gguf_value *)v->arr.data + i;
                        if (e->type != M40_GGUF_ARRAY)
                                return -EINVAL;
                        r = put_value(b, e, depth + 1);
                } else {
                        uint8_t x = ((const bool *)v->arr.data)[i] ? 1 : 0;
                        r = buf_put(b, &x, 1);
                }
        }
        return r;
}

int m40_gguf_writer_add_value(struct m40_gguf_writer *w, const char *key,
                              const struct m40_gguf_value *v)
{
        size_t keylen, old_len;
        char **keys;
        int r;

        if (!w || !key || !v || w->state != ADDING || v->type >= M40_GGUF_VTYPE_LIMIT)
                return -EINVAL;
        keylen = strlen(key);
        if (keylen == 0 || keylen > M40_GGUF_MAX_KEY)
                return -EINVAL;
        for (uint64_t i = 0; i < w->n_kv; i++)
                if (strcmp(w->keys[i], key) == 0)
                        return -EEXIST;

        keys = realloc(w->keys, (w->n_kv + 1) * sizeof(*keys));
        if (!keys)
                return -ENOMEM;
        w->keys = keys;
        keys[w->n_kv] = strdup(key);
        if (!keys[w->n_kv])
                return -ENOMEM;

        old_len = w->kv.len;
        r = put_str(&w->kv, key, keylen);
        if (r == 0)
                r = put_u32(&w->kv, v->type);
        if (r == 0)
                r = put_value(&w->kv, v, 0);
        if (r < 0) {
                w->kv.len = old_len; /* drop the partial entry */
                free(keys[w->n_kv]);
                return r;
        }
        w->n_kv++;
        return 0;
}

int m40_gguf_writer_add_u32(struct m40_gguf_writer *w, const char *key, uint32_t v)
{
        struct m40_gguf_value x = {.type = M40_GGUF_U32, .u = v};

        return m40_gguf_writer_add_value(w, key, &x);
}

int m40_gguf_writer_add_i32(struct m40_gguf_writer *w, const char *key, int32_t v)
{
        struct m40_gguf_value x = {.type = M40_GGUF_I32, .i = v};

        return m40_gguf_writer_add_value(w, key, &x);
}

int m40_gguf_writer_add_f32(struct m40_gguf_writer *w, const char *key, float v)
{
        struct m40_gguf_value x = {.type = M40_GGUF_F32, .f = v};

        return m40_gguf_writer_add_value(w, key, &x);
}

int m40_gguf_writer_add_bool(struct m40_gguf_writer *w, const char *key, bool v)
{
        struct m40_gguf_value x = {.type = M40_GGUF_BOOL, .b = v};

        return m40_gguf_writer_add_value(w, key, &x);
}

int m40_gguf_writer_add_str(struct m40_gguf_writer *w, const char *key, const char *v)
{
        struct m40_gguf_value x = {.type = M40_GGUF_STRING};

        if (!v)
                return -EINVAL;
        x.str.ptr = v;
        x.str.len = strlen(v);
        return m40_gguf_writer_add_value(w, key, &x);
}

int m40_gguf_writer_add_array(struct m40_gguf_writer *w, const char *key, uint32_t elem_type,
                              uint64_t n, const void *data)
{
        struct m40_gguf_value x = {.type = M40_GGUF_ARRAY};

        if (scalar_size(elem_type) == 0)
                return -EINVAL;
        x.arr.elem_type = elem_type;
        x.arr.n = n;
        x.arr.data = data;
        return m40_gguf_writer_add_value(w, key, &x);
}

int m40_gguf_writer_add_str_array(struct m40_gguf_writer *w, const char *key, uint64_t n,
                                  const char *const *strs)
{
        struct m40_gguf_value x = {.type = M40_GGUF_ARRAY};
        struct m40_gguf_str *s;
        int r;

        if (n > SIZE_MAX / sizeof(*s) || (n && !strs))
                return -EINVAL;
        s = malloc(n ? (size_t)n * sizeof(*s) : 1);
        if (!s)
                return -ENOMEM;
        for (uint64_t i = 0; i < n; i++) {
                s[i].ptr = strs[i];
                s[i].len = strs[i] ? strlen(strs[i]) : 0;
        }
        x.arr.elem_type = M40_GGUF_STRING;
        x.arr.n = n;
        x.arr.data = s;
        r = m40_gguf_writer_add_value(w, key, &x);
        free(s);
        return r;
}

int m40_gguf_writer_add_tensor(struct m40_gguf_writer *w, const char *name, uint32_t n_dims,
                               const uint64_t *ne, uint32_t type, uint64_t *ret_size)
{
        struct tensor_desc *t;
        uint64_t size, rows = 1;
        int r;

        if (!w || !name || !ne || w->state != ADDING || n_dims < 1 || n_dims > M40_GGUF_MAX_DIMS ||
            strlen(name) == 0 || strlen(name) > M40_GGUF_MAX_NAME)
                return -EINVAL;
        for (uint64_t i = 0; i < w->n_tensors; i++)
                if (strcmp(w->tensors[i].name, name) == 0)
                        return -EEXIST;
        for (uint32_t d = 0; d < n_dims; d++)
                if (ne[d] == 0 || ne[d] >= MAX_SIZE)
                        return -EINVAL;
        r = m40_ggml_row_size(type, ne[0], &size);
        if (r < 0)
                return -EINVAL;
        for (uint32_t d = 1; d < n_dims; d++) {
                if (rows > MAX_SIZE / ne[d])
                        return -EFBIG;
                rows *= ne[d];
        }
        if (size > MAX_SIZE / rows)
                return -EFBIG;
        size *= rows;
        if (w->data_size > MAX_SIZE - pad_to(size, w->alignment))
                return -EFBIG;

        t = realloc(w->tensors, (w->n_tensors + 1) * sizeof(*t));
        if (!t)
                return -ENOMEM;
        w->tensors = t;
        t += w->n_tensors;
        memset(t, 0, sizeof(*t));
        t->name = strdup(name);
        if (!t->name)
                return -ENOMEM;
        t->n_dims = n_dims;
        for (uint32_t d = 0; d < M40_GGUF_MAX_DIMS; d++)
                t->ne[d] = d < n_dims ? ne[d] : 1;
        t->type = type;
        t->size = size;
        t->offset = w->data_size;
        w->data_size += pad_to(size, w->alignment);
        w->n_tensors++;
        if (ret_size)
                *ret_size = size;
        return 0;
}

static int serialize_infos(const struct m40_gguf_writer *w, struct buf *b)
{
        int r = 0;

        for (uint64_t i = 0; i < w->n_tensors && r == 0; i++) {
                const struct tensor_desc *t = &w->tensors[i];
                r = put_str(b, t->name, strlen(t->name));
                if (r == 0)
                        r = put_u32(b, t->n_dims);
                for (uint32_t d = 0; d < t->n_dims && r == 0; d++)
                        r = put_u64(b, t->ne[d]);
                if (r == 0)
                        r = put_u32(b, t->type);
                if (r == 0)
                        r = put_u64(b, t->offset);
        }
        return r;
}

int m40_gguf_writer_begin_data(struct m40_gguf_writer *w)
{
        struct buf hdr = {0};
        uint64_t head;
        int r;

        if (!w || w->state != ADDING)
                return -EINVAL;
        r = put_u32(&hdr, M40_GGUF_MAGIC);
        if (r == 0)
                r = put_u32(&hdr, 3);
        if (r == 0)
                r = put_u64(&hdr, w->n_tensors);
        if (r == 0)
                r = put_u64(&hdr, w->n_kv);
        if (r == 0)
                r = buf_put(&hdr, w->kv.p, w->kv.len);
        if (r == 0)
                r = serialize_infos(w, &hdr);
        if (r < 0)
                goto out_free;

        w->state = FAILED; /* until everything below succeeded */
        head = pad_to(hdr.len, w->alignment);
        r = emit(w, hdr.p, hdr.len);
        if (r == 0)
                r = emit_zeros(w, head - hdr.len);
        if (r < 0)
                goto out_free;
        w->file_size = head + w->data_size;
        w->state = DATA;

out_free:
        free(hdr.p);
        return r;
}

int m40_gguf_writer_write(struct m40_gguf_writer *w, const void *buf, size_t n)
{
        const uint8_t *p = buf;
        int r;

        if (!w || w->state != DATA || (n && !buf))
                return -EINVAL;
        while (n > 0) {
                if (w->cur >= w->n_tensors)
                        return -EINVAL;
                struct tensor_desc *t = &w->tensors[w->cur];
                uint64_t left = t->size - w->cur_done;
                size_t k = n < left ? n : (size_t)left;

                r = emit(w, p, k);
                if (r == 0 && w->cur_done + k == t->size)
                        r = emit_zeros(w, pad_to(t->size, w->alignment) - t->size);
                if (r < 0) {
                        w->state = FAILED;
                        return r;
                }
                p += k;
                n -= k;
                w->cur_done += k;
                if (w->cur_done == t->size) {
                        w->cur++;
                        w->cur_done = 0;
                }
        }
        return 0;
}

int m40_gguf_writer_finish(struct m40_gguf_writer *w)
{
        int r;

        if (!w || w->state != DATA || w->cur != w->n_tensors)
                return -EINVAL;
        w->state = FAILED;
        r = flush_out(w);
        if (r < 0)
                return r;
        r = close(w->fd);
        w->fd = -1;
        if (r < 0)
                return -errno;
        if (rename(w->tmp_path, w->path) < 0)
                return -errno;
        w->state = DONE;
        return 0;
}

uint64_t m40_gguf_writer_file_size(const struct m40_gguf_writer *w)
{
        return w ? w->file_size : 0;
}
