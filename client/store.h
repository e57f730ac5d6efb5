/* store.h - m40ctl's side of the model store: the paths of a stored model and of its
 * download in progress, making the store, resolving a `show` argument, sizes for people.
 *
 * The store rule itself (its directory, which arguments are names, which names are valid)
 * is m40/paths.h's, shared with m40d: m40_store_dir(), m40_store_is_name(),
 * m40_store_name_check(), m40_store_model(). A model NAME is stored as DIR/NAME.gguf; a
 * download in progress is DIR/.NAME.gguf.part, with what is needed to resume it safely (the
 * URL and the server's validator) in DIR/.NAME.gguf.part.meta.
 *
 * Nothing here prints; functions return 0 or -errno. */
#ifndef M40CTL_STORE_H
#define M40CTL_STORE_H

#include <stddef.h>

#include "m40/paths.h"

enum m40_store_file {
        M40_STORE_MODEL, /* DIR/NAME.gguf */
        M40_STORE_PART,  /* DIR/.NAME.gguf.part */
        M40_STORE_META,  /* DIR/.NAME.gguf.part.meta */
};

/* m40_store_path - the path of name's file of the given kind in dir, into buf of n bytes.
 * Returns 0, -EINVAL for an invalid name, -ENAMETOOLONG when it does not fit. */
int m40_store_path(const char *dir, const char *name, enum m40_store_file kind, char *buf,
                   size_t n);

/* m40_store_mkdir - creates dir and its missing parents (mode 0755 less the umask). Returns 0
 * when dir exists as a directory afterwards, else -errno of the step that failed. */
int m40_store_mkdir(const char *dir);

/* m40_store_resolve - what `m40ctl show ARG` opens: ARG itself when it is a path (not
 * m40_store_is_name()), else the stored model ARG (DIR/ARG.gguf), as `m40d -m ARG`. Writes the path
 * into buf of n bytes and returns 0; -EINVAL (with *ret_why) for an invalid name, -ENOENT
 * when the store has no such model, -ENAMETOOLONG, or m40_store_dir()'s error. */
int m40_store_resolve(const char *arg, char *buf, size_t n, const char **ret_why);

/* m40_store_human_bytes - n as "1.5 GiB", "312.0 MiB", "12 KiB", "999 B" into buf; returns
 * buf. */
const char *m40_store_human_bytes(unsigned long long n, char *buf, size_t len);

#endif
