/* gguf_write.h - a streaming writer of GGUF v3 files, for tools and tests.
 *
 * Owns the on-disk layout of what it writes: header, metadata, tensor descriptions with
 * offsets it computes (each tensor starts on the alignment), and the data section, padded
 * with zeros between tensors and at the end, as ggml's gguf writer lays files out.
 * Metadata and tensor descriptions are kept in memory until m40_gguf_writer_begin_data();
 * tensor data is then streamed in the order the tensors were added, so a file of any size
 * is written with constant memory.
 *
 * The writer writes to "<path>.tmp" and renames it to path in m40_gguf_writer_finish();
 * freeing an unfinished writer removes the temporary file, so a failed run leaves nothing
 * behind. Call order:
 *   new -> add_* (metadata and tensors, any mix) -> begin_data -> write ... -> finish -> free.
 * All functions return 0 or a negative errno (-EINVAL for calls out of order or bad
 * arguments, -EEXIST for a repeated key or tensor name, -ENOSPC/-EIO... from the file);
 * after a failed write the writer only accepts m40_gguf_writer_free(). Nothing prints. */
#ifndef M40_TESTS_GGUF_WRITE_H
#define M40_TESTS_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"

struct m40_gguf_writer;

/* m40_gguf_writer_new - start a file that will become path. alignment: a power of two
 * (0 means GGUF's default, 32); when it is not 32 the caller must also add the
 * general.alignment key, as readers take the alignment from there. Creates (truncates)
 * "<path>.tmp" at once so an unwritable path fails here. */
int m40_gguf_writer_new(const char *path, uint32_t alignment, struct m40_gguf_writer **ret);

/* m40_gguf_writer_free - close w and, unless finished, remove its temporary file;
 * accepts NULL; returns NULL. */
struct m40_gguf_writer *m40_gguf_writer_free(struct m40_gguf_writer *w);

/* m40_gguf_writer_add_value - append metadata key = v, where v is described exactly as
 * the reader returns it (gguf.h): any scalar, a string, or an array, arrays of strings
 * and nested arrays included. The value is serialized at once; v is not kept. */
int m40_gguf_writer_add_value(struct m40_gguf_writer *w, const char *key,
                              const struct m40_gguf_value *v);

/* Shorthands for m40_gguf_writer_add_value(). */
int m40_gguf_writer_add_u32(struct m40_gguf_writer *w, const char *key, uint32_t v);
int m40_gguf_writer_add_i32(struct m40_gguf_writer *w, const char *key, int32_t v);
int m40_gguf_writer_add_f32(struct m40_gguf_writer *w, const char *key, float v);
int m40_gguf_writer_add_bool(struct m40_gguf_writer *w, const char *key, bool v);
int m40_gguf_writer_add_str(struct m40_gguf_writer *w, const char *key, const char *v);
/* m40_gguf_writer_add_array - n elements of scalar type elem_type (enum m40_gguf_vtype,
 * not STRING or ARRAY) stored at data as a C array of the natural type (bool: 1 byte). */
int m40_gguf_writer_add_array(struct m40_gguf_writer *w, const char *key, uint32_t elem_type,
                              uint64_t n, const void *data);
/* m40_gguf_writer_add_str_array - n NUL-terminated strings. */
int m40_gguf_writer_add_str_array(struct m40_gguf_writer *w, const char *key, uint64_t n,
                                  const char *const *strs);

/* m40_gguf_writer_add_tensor - describe the next tensor: n_dims (1..4) sizes ne[0..n_dims)
 * (ne[0] the row length), of ggml type (enum m40_ggml_type, a supported one). Its data
 * must be written after those of the tensors added before it. On success stores the
 * data size in bytes in *ret_size (if not NULL). */
int m40_gguf_writer_add_tensor(struct m40_gguf_writer *w, const char *name, uint32_t n_dims,
                               const uint64_t *ne, uint32_t type, uint64_t *ret_size);

/* m40_gguf_writer_begin_data - write header, metadata and tensor descriptions; after
 * this, no more add_* calls. */
int m40_gguf_writer_begin_data(struct m40_gguf_writer *w);

/* m40_gguf_writer_write - append n bytes of tensor data; a call may span tensors. The
 * padding between tensors is written by the writer. -EINVAL when n exceeds what is left. */
int m40_gguf_writer_write(struct m40_gguf_writer *w, const void *buf, size_t n);

/* m40_gguf_writer_finish - check that every tensor's data was written, flush, and rename
 * the temporary file to the final path. */
int m40_gguf_writer_finish(struct m40_gguf_writer *w);

/* m40_gguf_writer_file_size - size of the finished file in bytes (known from
 * m40_gguf_writer_begin_data() on; 0 before). */
uint64_t m40_gguf_writer_file_size(const struct m40_gguf_writer *w);

#endif
