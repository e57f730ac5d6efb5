/* store.h - the model store of m40ctl: where models live, what a model name may be, and the
 * paths of a stored model and of its download in progress.
 *
 * The store rule (m40d -m NAME follows the same one): the directory is $M40_MODELS when set,
 * else /var/lib/m40d/models when running as root, else $XDG_DATA_HOME/m40/models (default
 * ~/.local/share/m40/models). A model NAME has no '/' and is stored as DIR/NAME.gguf; a
 * download in progress is DIR/.NAME.gguf.part, with what is needed to resume it safely (the
 * URL and the server's validator) in DIR/.NAME.gguf.part.meta.
 *
 * Nothing here prints; functions return 0 or -errno. */
#ifndef M40CTL_STORE_H
#define M40CTL_STORE_H

#include <stddef.h>

/* Longest model name in bytes: ".NAME.gguf.part.meta" must fit NAME_MAX (255). */
#define M40_STORE_NAME_MAX 200

enum m40_store_file {
        M40_STORE_MODEL, /* DIR/NAME.gguf */
        M40_STORE_PART,  /* DIR/.NAME.gguf.part */
        M40_STORE_META,  /* DIR/.NAME.gguf.part.meta */
};

/* m40_store_dir - writes the store directory (the rule above) into buf of n bytes. Returns
 * 0; -ENOENT when the rule needs a home directory and none is known ($HOME unset and no
 * passwd entry); -ENAMETOOLONG when the path does not fit. */
int m40_store_dir(char *buf, size_t n);

/* m40_store_name_check - 0 when name is a valid model name: 1..M40_STORE_NAME_MAX bytes, no
 * '/', no control characters, not starting with '.' (the store's own files do), not ending
 * in ".gguf" (the store adds it). Else -EINVAL and *ret_why says what is wrong. */
int m40_store_name_check(const char *name, const char **ret_why);

/* m40_store_path - the path of name's file of the given kind in dir, into buf of n bytes.
 * Returns 0, -EINVAL for an invalid name, -ENAMETOOLONG when it does not fit. */
int m40_store_path(const char *dir, const char *name, enum m40_store_file kind, char *buf,
                   size_t n);

/* m40_store_mkdir - creates dir and its missing parents (mode 0755 less the umask). Returns 0
 * when dir exists as a directory afterwards, else -errno of the step that failed. */
int m40_store_mkdir(const char *dir);

/* m40_store_resolve - what `m40ctl show ARG` and friends open: ARG itself when it contains a
 * '/' or ends in ".gguf" (a path), else the stored model ARG (DIR/ARG.gguf). Writes the path
 * into buf of n bytes and returns 0; -EINVAL (with *ret_why) for an invalid name, -ENOENT
 * when the store has no such model, -ENAMETOOLONG, or m40_store_dir()'s error. */
int m40_store_resolve(const char *arg, char *buf, size_t n, const char **ret_why);

/* m40_store_human_bytes - n as "1.5 GiB", "312.0 MiB", "12 KiB", "999 B" into buf; returns
 * buf. */
const char *m40_store_human_bytes(unsigned long long n, char *buf, size_t len);

#endif
