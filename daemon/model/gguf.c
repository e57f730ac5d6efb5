/* gguf.c - the validating GGUF v2/v3 reader (see gguf.h): the parse cursor, the file's
 * structure (header, metadata table, tensor descriptions and their checks) and the accessors.
 * Metadata values, strings and integers are decoded in gguf_value.c.
 *
 * The header region is read through a window buffer (pread from the file, or straight
 * from memory for m40_gguf_open_mem), with every read checked against the file size
 * first, so a length or count in the file can never make us read or allocate more than
 * the file could hold. Metadata and tensor descriptions are copied into memory owned by
 * the struct m40_gguf; nothing points into the file afterwards. */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ggml_type.h"
#include "gguf_impl.h"
#include "m40/error.h"

#define WINDOW_MIN (1u << 20)

struct m40_gguf {
        char *path;
        int fd; /* the file parsed (m40_gguf_open), kept open until m40_gguf_free; or -1 */
        uint32_t version;
        uint64_t file_size;
        uint32_t alignment;
        uint64_t data_offset;

        struct m40_gguf_kv *kvs; /* (n_kv) in file order */
        uint64_t n_kv;
        uint64_t *kv_index; /* open-addressing table of kv indices + 1; 0 = empty */
        uint64_t kv_index_cap;

        struct m40_gguf_tensor *tensors; /* (n_tensors) in file order */
        uint64_t n_tensors;
        uint64_t *tensor_index;
        uint64_t tensor_index_cap;

        /* Every allocation made for metadata values and names, freed together. */
        void **allocs;
        size_t n_allocs, cap_allocs;
};

int m40_gguf_fail(struct m40_gguf_reader *r, int code, uint64_t off, const char *fmt, ...)
{
        va_list ap;
        int n;

        if (!r->err || !r->errlen)
                return code;
        n = snprintf(r->err, r->errlen, "%s: offset %llu: ", r->name, (unsigned long long)off);
        if (n >= 0 && (size_t)n < r->errlen) {
                va_start(ap, fmt);
                vsnprintf(r->err + n, r->errlen - n, fmt, ap);
                va_end(ap);
        }
        return code;
}

static void *track(struct m40_gguf *g, void *p)
{
        if (!p)
                return NULL;
        if (g->n_allocs == g->cap_allocs) {
                size_t cap = g->cap_allocs ? g->cap_allocs * 2 : 64;
                void **a = realloc(g->allocs, cap * sizeof(*a));

                if (!a) {
                        free(p);
                        return NULL;
                }
                g->allocs = a;
                g->cap_allocs = cap;
        }
        g->allocs[g->n_allocs++] = p;
        return p;
}

void *m40_gguf_alloc(struct m40_gguf *g, uint64_t n, uint64_t size)
{
        if (size && n > SIZE_MAX / size)
                return NULL;
        return track(g, calloc(n ? n : 1, size ? size : 1));
}

int m40_gguf_take(struct m40_gguf_reader *r, uint64_t n, const uint8_t **ret, const char *what)
{
        if (n > m40_gguf_remaining(r))
                return m40_gguf_fail(r, M40_EFORMAT, r->pos,
                                     "truncated: %s needs %llu bytes, %llu left in the file", what,
                                     (unsigned long long)n,
                                     (unsigned long long)m40_gguf_remaining(r));
        if (r->mem) {
                *ret = r->mem + r->pos;
        } else {
                if (r->pos < r->win_off || r->pos + n > r->win_off + r->win_len) {
                        uint64_t want = n > WINDOW_MIN ? n : WINDOW_MIN;
                        size_t got = 0;

                        if (want > m40_gguf_remaining(r))
                                want = m40_gguf_remaining(r);
                        if (want > r->win_cap) {
                                uint8_t *w = realloc(r->win, want);

                                if (!w)
                                        return m40_gguf_fail(r, -ENOMEM, r->pos,
                                                             "out of memory reading %s", what);
                                r->win = w;
                                r->win_cap = want;
                        }
                        while (got < want) {
                                ssize_t k = pread(r->fd, r->win + got, want - got,
                                                  (off_t)(r->pos + got));

                                if (k < 0 && errno == EINTR)
                                        continue;
                                if (k < 0)
                                        return m40_gguf_fail(r, -errno, r->pos + got,
                                                             "read failed: %s", strerror(errno));
                                if (k == 0)
                                        return m40_gguf_fail(r, M40_EFORMAT, r->pos + got,
                                                             "file shrank while being read");
                                got += (size_t)k;
                        }
                        r->win_off = r->pos;
                        r->win_len = want;
                }
                *ret = r->win + (r->pos - r->win_off);
        }
        r->pos += n;
        return 0;
}

/* FNV-1a over a NUL-terminated string; the index tables are sized as powers of two. */
static uint64_t hash_str(const char *s)
{
        uint64_t h = 1469598103934665603ull;

        for (; *s; s++)
                h = (h ^ (uint8_t)*s) * 1099511628211ull;
        return h;
}

static uint64_t table_cap(uint64_t n)
{
        uint64_t cap = 16;

        while (cap < 2 * n)
                cap *= 2;
        return cap;
}

static const char *kv_name(const struct m40_gguf *g, uint64_t i)
{
        return g->kvs[i].key.ptr;
}

static const char *tensor_name(const struct m40_gguf *g, uint64_t i)
{
        return g->tensors[i].name;
}

/* index_insert - add entry i named by name(g, i) to table; returns the index of an
 * existing entry with the same name, or -1 when inserted. */
static int64_t index_insert(struct m40_gguf *g, uint64_t *table, uint64_t cap,
                            const char *(*name)(const struct m40_gguf *, uint64_t), uint64_t i)
{
        const char *s = name(g, i);

        for (uint64_t h = hash_str(s) & (cap - 1);; h = (h + 1) & (cap - 1)) {
                if (!table[h]) {
                        table[h] = i + 1;
                        return -1;
                }
                if (strcmp(name(g, table[h] - 1), s) == 0)
                        return (int64_t)(table[h] - 1);
        }
}

static int64_t index_find(const struct m40_gguf *g, const uint64_t *table, uint64_t cap,
                          const char *(*name)(const struct m40_gguf *, uint64_t), const char *s)
{
        if (!cap)
                return -1;
        for (uint64_t h = hash_str(s) & (cap - 1); table[h]; h = (h + 1) & (cap - 1))
                if (strcmp(name(g, table[h] - 1), s) == 0)
                        return (int64_t)(table[h] - 1);
        return -1;
}

static int read_kvs(struct m40_gguf_reader *r, uint64_t n_kv)
{
        struct m40_gguf *g = r->g;

        g->kvs = m40_gguf_alloc(g, n_kv, sizeof(*g->kvs));
        g->kv_index_cap = table_cap(n_kv);
        g->kv_index = m40_gguf_alloc(g, g->kv_index_cap, sizeof(uint64_t));
        if (!g->kvs || !g->kv_index)
                return m40_gguf_fail(r, -ENOMEM, r->pos, "out of memory for %llu metadata entries",
                                     (unsigned long long)n_kv);
        for (uint64_t i = 0; i < n_kv; i++) {
                struct m40_gguf_kv *kv = &g->kvs[i];
                uint64_t type_at;
                uint32_t type;
                int64_t dup;
                int e;

                kv->offset = r->pos;
                e = m40_gguf_read_str(r, &kv->key, M40_GGUF_MAX_KEY, "metadata key");
                if (e)
                        return e;
                if (kv->key.len == 0 || strlen(kv->key.ptr) != kv->key.len)
                        return m40_gguf_fail(r, M40_EFORMAT, kv->offset,
                                             "metadata key %llu is empty or contains a NUL byte",
                                             (unsigned long long)i);
                g->n_kv = i + 1;
                dup = index_insert(g, g->kv_index, g->kv_index_cap, kv_name, i);
                if (dup >= 0)
                        return m40_gguf_fail(r, M40_EFORMAT, kv->offset,
                                             "duplicate metadata key '%s' (first at offset %llu)",
                                             kv->key.ptr, (unsigned long long)g->kvs[dup].offset);
                type_at = r->pos;
                e = m40_gguf_read_u32(r, &type, "metadata value type");
                if (e)
                        return e;
                if (type >= M40_GGUF_VTYPE_LIMIT)
                        return m40_gguf_fail(
                                r, M40_EFORMAT, type_at,
                                "metadata '%s' has value type %u, not a GGUF value type",
                                kv->key.ptr, type);
                e = m40_gguf_read_value(r, type, &kv->value, 0);
                if (e)
                        return e;
        }
        return 0;
}

/* The alignment comes from general.alignment: a u32 power of two. */
static int check_alignment(struct m40_gguf_reader *r)
{
        struct m40_gguf *g = r->g;
        int64_t i = index_find(g, g->kv_index, g->kv_index_cap, kv_name, "general.alignment");
        const struct m40_gguf_value *v;

        g->alignment = M40_GGUF_DEFAULT_ALIGNMENT;
        if (i < 0)
                return 0;
        v = &g->kvs[i].value;
        if (v->type != M40_GGUF_U32)
                return m40_gguf_fail(r, M40_EFORMAT, g->kvs[i].offset,
                                     "general.alignment has type %s, expected u32",
                                     m40_gguf_vtype_name(v->type));
        if (v->u == 0 || (v->u & (v->u - 1)))
                return m40_gguf_fail(r, M40_EFORMAT, g->kvs[i].offset,
                                     "general.alignment is %llu, not a power of two",
                                     (unsigned long long)v->u);
        g->alignment = (uint32_t)v->u;
        return 0;
}

static int read_tensor_info(struct m40_gguf_reader *r, uint64_t i)
{
        struct m40_gguf *g = r->g;
        struct m40_gguf_tensor *t = &g->tensors[i];
        uint64_t at = r->pos, type_at, row;
        const struct m40_ggml_type_info *ti;
        struct m40_gguf_str name;
        const char *tn;
        int64_t dup;
        int e;

        e = m40_gguf_read_str(r, &name, M40_GGUF_MAX_NAME, "tensor name");
        if (e)
                return e;
        if (name.len == 0 || strlen(name.ptr) != name.len)
                return m40_gguf_fail(r, M40_EFORMAT, at,
                                     "tensor %llu has an empty name or a NUL byte in it",
                                     (unsigned long long)i);
        t->name = name.ptr;
        g->n_tensors = i + 1;
        dup = index_insert(g, g->tensor_index, g->tensor_index_cap, tensor_name, i);
        if (dup >= 0)
                return m40_gguf_fail(r, M40_EFORMAT, at,
                                     "duplicate tensor name '%s' (tensors %lld and %llu)", t->name,
                                     (long long)dup, (unsigned long long)i);
        e = m40_gguf_read_u32(r, &t->n_dims, "tensor dimension count");
        if (e)
                return e;
        if (t->n_dims < 1 || t->n_dims > M40_GGUF_MAX_DIMS)
                return m40_gguf_fail(r, M40_EFORMAT, r->pos - 4,
                                     "tensor '%s' has %u dimensions (1 to %d)", t->name, t->n_dims,
                                     M40_GGUF_MAX_DIMS);
        t->n_elements = 1;
        for (int d = 0; d < M40_GGUF_MAX_DIMS; d++) {
                t->ne[d] = 1;
                if ((uint32_t)d >= t->n_dims)
                        continue;
                e = m40_gguf_read_uint(r, 8, &t->ne[d], "tensor dimension");
                if (e)
                        return e;
                if (t->ne[d] == 0 || t->ne[d] > INT64_MAX)
                        return m40_gguf_fail(r, M40_EFORMAT, r->pos - 8,
                                             "tensor '%s' dimension %d is %llu", t->name, d,
                                             (unsigned long long)t->ne[d]);
                if (t->n_elements > (uint64_t)INT64_MAX / t->ne[d])
                        return m40_gguf_fail(r, M40_EFORMAT, r->pos - 8,
                                             "tensor '%s' element count overflows 63 bits",
                                             t->name);
                t->n_elements *= t->ne[d];
        }
        type_at = r->pos;
        e = m40_gguf_read_u32(r, &t->type, "tensor type");
        if (e)
                return e;
        ti = m40_ggml_type_info(t->type);
        tn = m40_ggml_type_name(t->type);
        if (!ti && tn)
                return m40_gguf_fail(r, M40_EUNSUPPORTED, type_at,
                                     "tensor '%s' has unsupported type %u (%s)", t->name, t->type,
                                     tn);
        if (!ti)
                return m40_gguf_fail(r, M40_EFORMAT, type_at,
                                     "tensor '%s' has unsupported type %u (not a GGML type)",
                                     t->name, t->type);
        if (m40_ggml_row_size(t->type, t->ne[0], &row))
                return m40_gguf_fail(
                        r, M40_EFORMAT, at,
                        "tensor '%s' row length %llu is not a multiple of the %s block (%u)",
                        t->name, (unsigned long long)t->ne[0], ti->name, ti->block_size);
        /* row * (n_elements / ne0) cannot overflow: row <= 4 * ne0 and n_elements < 2^63,
         * but stay explicit. */
        if (row > UINT64_MAX / (t->n_elements / t->ne[0]))
                return m40_gguf_fail(r, M40_EFORMAT, at, "tensor '%s' byte size overflows",
                                     t->name);
        t->size = row * (t->n_elements / t->ne[0]);
        e = m40_gguf_read_uint(r, 8, &t->file_offset, "tensor offset"); /* relative for now */
        if (e)
                return e;
        if (t->file_offset % g->alignment)
                return m40_gguf_fail(
                        r, M40_EFORMAT, r->pos - 8,
                        "tensor '%s' offset %llu is not a multiple of the alignment %u", t->name,
                        (unsigned long long)t->file_offset, g->alignment);
        return 0;
}

static int cmp_by_offset(const void *a, const void *b)
{
        const struct m40_gguf_tensor *x = *(const struct m40_gguf_tensor *const *)a;
        const struct m40_gguf_tensor *y = *(const struct m40_gguf_tensor *const *)b;

        return x->file_offset < y->file_offset ? -1 : x->file_offset > y->file_offset;
}

/* Every tensor must lie inside the data section, and no two may overlap. */
static int check_tensor_extents(struct m40_gguf_reader *r, uint64_t infos_at)
{
        struct m40_gguf *g = r->g;
        uint64_t data_size = g->file_size - g->data_offset;
        const struct m40_gguf_tensor **order;

        for (uint64_t i = 0; i < g->n_tensors; i++) {
                struct m40_gguf_tensor *t = &g->tensors[i];

                if (t->file_offset > data_size || t->size > data_size - t->file_offset)
                        return m40_gguf_fail(
                                r, M40_EFORMAT, infos_at,
                                "tensor '%s' data [%llu, +%llu) runs past the end of the "
                                "data section (%llu bytes at offset %llu)",
                                t->name, (unsigned long long)t->file_offset,
                                (unsigned long long)t->size, (unsigned long long)data_size,
                                (unsigned long long)g->data_offset);
                t->file_offset += g->data_offset;
        }
        if (g->n_tensors < 2)
                return 0;
        order = malloc(g->n_tensors * sizeof(*order));
        if (!order)
                return m40_gguf_fail(r, -ENOMEM, infos_at, "out of memory");
        for (uint64_t i = 0; i < g->n_tensors; i++)
                order[i] = &g->tensors[i];
        qsort(order, g->n_tensors, sizeof(*order), cmp_by_offset);
        for (uint64_t i = 1; i < g->n_tensors; i++) {
                const struct m40_gguf_tensor *a = order[i - 1], *b = order[i];

                if (a->file_offset + a->size > b->file_offset) {
                        int e = m40_gguf_fail(r, M40_EFORMAT, infos_at,
                                              "tensors '%s' and '%s' overlap in the data section",
                                              a->name, b->name);
                        free(order);
                        return e;
                }
        }
        free(order);
        return 0;
}

static int read_tensors(struct m40_gguf_reader *r, uint64_t n_tensors)
{
        struct m40_gguf *g = r->g;
        uint64_t infos_at = r->pos;
        int e;

        g->tensors = m40_gguf_alloc(g, n_tensors, sizeof(*g->tensors));
        g->tensor_index_cap = table_cap(n_tensors);
        g->tensor_index = m40_gguf_alloc(g, g->tensor_index_cap, sizeof(uint64_t));
        if (!g->tensors || !g->tensor_index)
                return m40_gguf_fail(r, -ENOMEM, r->pos, "out of memory for %llu tensors",
                                     (unsigned long long)n_tensors);
        for (uint64_t i = 0; i < n_tensors; i++) {
                e = read_tensor_info(r, i);
                if (e)
                        return e;
        }
        g->data_offset = r->pos + (g->alignment - r->pos % g->alignment) % g->alignment;
        if (n_tensors && g->data_offset > g->file_size)
                return m40_gguf_fail(
                        r, M40_EFORMAT, r->pos,
                        "truncated: the data section would start at %llu, past the end of "
                        "the file (%llu bytes)",
                        (unsigned long long)g->data_offset, (unsigned long long)g->file_size);
        if (g->data_offset > g->file_size)
                g->data_offset = g->file_size;
        return check_tensor_extents(r, infos_at);
}

static int parse(struct m40_gguf_reader *r)
{
        struct m40_gguf *g = r->g;
        uint64_t n_tensors, n_kv;
        uint32_t magic;
        int e;

        g->file_size = r->size;
        e = m40_gguf_read_u32(r, &magic, "magic");
        if (e)
                return e;
        if (magic != M40_GGUF_MAGIC)
                return m40_gguf_fail(r, M40_EFORMAT, 0,
                                     "not a GGUF file (magic 0x%08x, expected \"GGUF\")", magic);
        e = m40_gguf_read_u32(r, &g->version, "version");
        if (e)
                return e;
        if (g->version == 1)
                return m40_gguf_fail(r, M40_EUNSUPPORTED, 4,
                                     "GGUF version 1 is not supported (convert the file to v3)");
        if (g->version > 0xffff && (g->version >> 24) >= 1 && (g->version >> 24) <= 3 &&
            !(g->version & 0xffffff))
                return m40_gguf_fail(r, M40_EUNSUPPORTED, 4,
                                     "big-endian GGUF files are not supported");
        if (g->version != 2 && g->version != 3)
                return m40_gguf_fail(r, M40_EUNSUPPORTED, 4,
                                     "GGUF version %u is not supported (2 or 3)", g->version);
        e = m40_gguf_read_uint(r, 8, &n_tensors, "tensor count");
        if (e)
                return e;
        e = m40_gguf_read_uint(r, 8, &n_kv, "metadata count");
        if (e)
                return e;
        /* A key needs 8 + 1 + 4 + 1 bytes at least, a tensor 8 + 1 + 4 + 8 + 4 + 8. */
        if (n_kv > m40_gguf_remaining(r) / 14)
                return m40_gguf_fail(
                        r, M40_EFORMAT, 16, "metadata count %llu cannot fit in the %llu bytes left",
                        (unsigned long long)n_kv, (unsigned long long)m40_gguf_remaining(r));
        if (n_tensors > m40_gguf_remaining(r) / 33)
                return m40_gguf_fail(
                        r, M40_EFORMAT, 8, "tensor count %llu cannot fit in the %llu bytes left",
                        (unsigned long long)n_tensors, (unsigned long long)m40_gguf_remaining(r));
        e = read_kvs(r, n_kv);
        if (e)
                return e;
        e = check_alignment(r);
        if (e)
                return e;
        return read_tensors(r, n_tensors);
}

static int open_common(struct m40_gguf_reader *r, struct m40_gguf **ret)
{
        struct m40_gguf *g = calloc(1, sizeof(*g));
        int e;

        if (!g)
                return m40_gguf_fail(r, -ENOMEM, 0, "out of memory");
        g->fd = -1;
        g->path = strdup(r->name);
        if (!g->path) {
                free(g);
                return m40_gguf_fail(r, -ENOMEM, 0, "out of memory");
        }
        r->g = g;
        e = parse(r);
        free(r->win);
        if (e) {
                m40_gguf_free(g);
                return e;
        }
        g->fd = r->fd; /* from here on g owns it */
        *ret = g;
        return 0;
}

int m40_gguf_open(const char *path, struct m40_gguf **ret, char *err, size_t errlen)
{
        struct m40_gguf_reader r = {.name = path, .err = err, .errlen = errlen};
        struct stat st;
        int fd, e;

        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return m40_gguf_fail(&r, -errno, 0, "cannot open: %s", strerror(errno));
        if (fstat(fd, &st) < 0) {
                e = -errno;
                close(fd);
                return m40_gguf_fail(&r, e, 0, "cannot stat: %s", strerror(-e));
        }
        if (!S_ISREG(st.st_mode)) {
                close(fd);
                return m40_gguf_fail(&r, -EINVAL, 0, "not a regular file");
        }
        r.fd = fd;
        r.size = (uint64_t)st.st_size;
        e = open_common(&r, ret);
        if (e)
                close(fd);
        return e;
}

int m40_gguf_open_mem(const void *data, size_t size, const char *name, struct m40_gguf **ret,
                      char *err, size_t errlen)
{
        static const uint8_t empty[1];
        struct m40_gguf_reader r = {.name = name ? name : "(memory)",
                                    .err = err,
                                    .errlen = errlen,
                                    .fd = -1,
                                    .mem = data ? data : empty,
                                    .size = size};

        return open_common(&r, ret);
}

struct m40_gguf *m40_gguf_free(struct m40_gguf *g)
{
        if (!g)
                return NULL;
        for (size_t i = 0; i < g->n_allocs; i++)
                free(g->allocs[i]);
        free(g->allocs);
        free(g->path);
        if (g->fd >= 0)
                close(g->fd);
        free(g);
        return NULL;
}

uint32_t m40_gguf_version(const struct m40_gguf *g)
{
        return g->version;
}

uint64_t m40_gguf_file_size(const struct m40_gguf *g)
{
        return g->file_size;
}

uint32_t m40_gguf_alignment(const struct m40_gguf *g)
{
        return g->alignment;
}

uint64_t m40_gguf_data_offset(const struct m40_gguf *g)
{
        return g->data_offset;
}

const char *m40_gguf_path(const struct m40_gguf *g)
{
        return g->path;
}

int m40_gguf_fd(const struct m40_gguf *g)
{
        return g->fd;
}

uint64_t m40_gguf_kv_count(const struct m40_gguf *g)
{
        return g->n_kv;
}

const struct m40_gguf_kv *m40_gguf_kv_at(const struct m40_gguf *g, uint64_t i)
{
        return i < g->n_kv ? &g->kvs[i] : NULL;
}

const struct m40_gguf_value *m40_gguf_find(const struct m40_gguf *g, const char *key)
{
        int64_t i = index_find(g, g->kv_index, g->kv_index_cap, kv_name, key);

        return i < 0 ? NULL : &g->kvs[i].value;
}

uint64_t m40_gguf_tensor_count(const struct m40_gguf *g)
{
        return g->n_tensors;
}

const struct m40_gguf_tensor *m40_gguf_tensor_at(const struct m40_gguf *g, uint64_t i)
{
        return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const struct m40_gguf_tensor *m40_gguf_tensor_find(const struct m40_gguf *g, const char *name)
{
        int64_t i = index_find(g, g->tensor_index, g->tensor_index_cap, tensor_name, name);

        return i < 0 ? NULL : &g->tensors[i];
}
