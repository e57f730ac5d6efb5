/* gguf_get.c - typed accessors over a parsed GGUF's metadata (see gguf.h). */
#include <errno.h>
#include <stdio.h>

#include "gguf.h"
#include "m40/error.h"

static bool is_unsigned(uint32_t t)
{
        return t == M40_GGUF_U8 || t == M40_GGUF_U16 || t == M40_GGUF_U32 || t == M40_GGUF_U64;
}

static bool is_signed(uint32_t t)
{
        return t == M40_GGUF_I8 || t == M40_GGUF_I16 || t == M40_GGUF_I32 || t == M40_GGUF_I64;
}

/* get_uint - the non-negative integer at key, at most max; *found says whether key exists. */
static int get_uint(const struct m40_gguf *g, const char *key, uint64_t max, bool *found,
                    uint64_t *ret)
{
        const struct m40_gguf_value *v = m40_gguf_find(g, key);

        *found = v != NULL;
        if (!v)
                return 0;
        if (is_unsigned(v->type)) {
                if (v->u > max)
                        return M40_ERANGE;
                *ret = v->u;
                return 0;
        }
        if (is_signed(v->type)) {
                if (v->i < 0 || (uint64_t)v->i > max)
                        return M40_ERANGE;
                *ret = (uint64_t)v->i;
                return 0;
        }
        return M40_ETYPE;
}

int m40_gguf_get_u32(const struct m40_gguf *g, const char *key, uint32_t def, uint32_t *ret)
{
        uint64_t v = 0;
        bool found;
        int e = get_uint(g, key, UINT32_MAX, &found, &v);

        if (!e)
                *ret = found ? (uint32_t)v : def;
        return e;
}

int m40_gguf_get_u64(const struct m40_gguf *g, const char *key, uint64_t def, uint64_t *ret)
{
        uint64_t v = 0;
        bool found;
        int e = get_uint(g, key, UINT64_MAX, &found, &v);

        if (!e)
                *ret = found ? v : def;
        return e;
}

int m40_gguf_get_i32(const struct m40_gguf *g, const char *key, int32_t def, int32_t *ret)
{
        const struct m40_gguf_value *v = m40_gguf_find(g, key);

        if (!v) {
                *ret = def;
                return 0;
        }
        if (is_unsigned(v->type)) {
                if (v->u > INT32_MAX)
                        return M40_ERANGE;
                *ret = (int32_t)v->u;
                return 0;
        }
        if (is_signed(v->type)) {
                if (v->i < INT32_MIN || v->i > INT32_MAX)
                        return M40_ERANGE;
                *ret = (int32_t)v->i;
                return 0;
        }
        return M40_ETYPE;
}

int m40_gguf_get_f32(const struct m40_gguf *g, const char *key, float def, float *ret)
{
        const struct m40_gguf_value *v = m40_gguf_find(g, key);

        if (!v)
                *ret = def;
        else if (v->type == M40_GGUF_F32 || v->type == M40_GGUF_F64)
                *ret = (float)v->f;
        else if (is_unsigned(v->type))
                *ret = (float)v->u;
        else if (is_signed(v->type))
                *ret = (float)v->i;
        else
                return M40_ETYPE;
        return 0;
}

int m40_gguf_get_bool(const struct m40_gguf *g, const char *key, bool def, bool *ret)
{
        const struct m40_gguf_value *v = m40_gguf_find(g, key);

        if (!v)
                *ret = def;
        else if (v->type == M40_GGUF_BOOL)
                *ret = v->b;
        else
                return M40_ETYPE;
        return 0;
}

int m40_gguf_get_str(const struct m40_gguf *g, const char *key, const char *def, const char **ret)
{
        const struct m40_gguf_value *v = m40_gguf_find(g, key);

        if (!v)
                *ret = def;
        else if (v->type == M40_GGUF_STRING)
                *ret = v->str.ptr;
        else
                return M40_ETYPE;
        return 0;
}

int m40_gguf_get_arr(const struct m40_gguf *g, const char *key, uint32_t *ret_type, uint64_t *ret_n,
                     const void **ret_data)
{
        const struct m40_gguf_value *v = m40_gguf_find(g, key);

        if (!v)
                return -ENOENT;
        if (v->type != M40_GGUF_ARRAY)
                return M40_ETYPE;
        *ret_type = v->arr.elem_type;
        *ret_n = v->arr.n;
        *ret_data = v->arr.data;
        return 0;
}

const char *m40_gguf_arch_key(const struct m40_gguf *g, const char *suffix, char *buf, size_t n)
{
        const char *arch = NULL;
        int k;

        if (m40_gguf_get_str(g, "general.architecture", NULL, &arch) || !arch)
                return NULL;
        k = snprintf(buf, n, "%s.%s", arch, suffix);
        return k < 0 || (size_t)k >= n ? NULL : buf;
}
