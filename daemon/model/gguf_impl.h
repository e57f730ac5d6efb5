/* gguf_impl.h - what the two halves of the GGUF reader share (internal to daemon/model;
 * users include model/gguf.h): the parse cursor with its error reporting and tracked
 * allocation (gguf.c), and the decoders of integers, strings and metadata values that read
 * through it (gguf_value.c). Every function that fails returns 0 or a negative code and
 * writes "NAME: offset N: what" into the cursor's message buffer (see m40_gguf_fail). */
#ifndef M40_GGUF_IMPL_H
#define M40_GGUF_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

/* The parse cursor. Exactly one of fd/mem is used. */
struct m40_gguf_reader {
        struct m40_gguf *g; /* what is being built; owns every tracked allocation */
        const char *name;
        int fd;
        const uint8_t *mem;
        uint64_t size; /* of the whole file */
        uint64_t pos;  /* absolute offset of the next byte to parse */

        uint8_t *win; /* window buffer (fd mode): bytes [win_off, win_off + win_len) */
        uint64_t win_off;
        size_t win_len, win_cap;

        char *err;
        size_t errlen;
};

/* Bytes of the file after the cursor. */
static inline uint64_t m40_gguf_remaining(const struct m40_gguf_reader *r)
{
        return r->pos <= r->size ? r->size - r->pos : 0;
}

/* gguf.c */

/* m40_gguf_fail - writes "NAME: offset off: " and the formatted message into r's message
 * buffer (when it has one) and returns code. */
int m40_gguf_fail(struct m40_gguf_reader *r, int code, uint64_t off, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

/* m40_gguf_alloc - zeroed memory for n elements of size bytes (at least one byte), freed
 * with g; NULL on overflow or when out of memory. */
void *m40_gguf_alloc(struct m40_gguf *g, uint64_t n, uint64_t size);

/* m40_gguf_take - makes n bytes at the cursor available, points *ret at them (valid until
 * the next take) and advances. The caller names what it reads, for the truncation message.
 * Returns 0, M40_EFORMAT (truncated, or the file shrank) or -errno. */
int m40_gguf_take(struct m40_gguf_reader *r, uint64_t n, const uint8_t **ret, const char *what);

/* gguf_value.c. Each returns 0 and stores what it decoded in *ret / *v, or fails as above;
 * strings and arrays are copied into memory tracked by r->g. */

/* m40_gguf_read_uint - an n-byte little-endian unsigned integer. */
int m40_gguf_read_uint(struct m40_gguf_reader *r, int n, uint64_t *ret, const char *what);
int m40_gguf_read_u32(struct m40_gguf_reader *r, uint32_t *ret, const char *what);

/* m40_gguf_read_str - a GGUF string (u64 length, bytes) as a NUL-terminated copy; max
 * bounds the length (0: only by the file). */
int m40_gguf_read_str(struct m40_gguf_reader *r, struct m40_gguf_str *ret, uint64_t max,
                      const char *what);

/* m40_gguf_read_value - a metadata value of type (below M40_GGUF_VTYPE_LIMIT); depth is
 * the nesting of the array it sits in (0 at top level, bounded by M40_GGUF_MAX_DEPTH). */
int m40_gguf_read_value(struct m40_gguf_reader *r, uint32_t type, struct m40_gguf_value *v,
                        int depth);

#endif
