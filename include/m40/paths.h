/* m40/paths.h - where m40d and its clients find each other and the models, when nobody
 * says: the socket a client connects to, the private socket of a user's m40d, and the
 * model store. One definition for m40d, libm40 and m40ctl (header-only, like proto.h), so
 * that they cannot disagree.
 *
 * The socket (m40d listens there unless its configuration or systemd names one; a client
 * connects there unless told a path):
 *   1. $M40_SOCKET, when set and not empty (clients only);
 *   2. M40_DEFAULT_SOCKET (/run/m40d/m40d.sock): the service, and m40d run by root;
 *   3. $XDG_RUNTIME_DIR/m40d/m40d.sock: m40d run by any other user, in a directory of
 *      mode 0700. A client takes it when 2 does not exist and it does.
 *
 * The model store (m40d -m NAME, m40ctl pull/list/rm/show NAME): one directory of NAME.gguf
 * files, $M40_MODELS when set and not empty, else /var/lib/m40d/models for root, else
 * $XDG_DATA_HOME/m40/models ($XDG_DATA_HOME when absolute, else $HOME/.local/share, $HOME
 * falling back to the user's passwd entry). A model argument is a store NAME when it has no
 * '/' and does not end in ".gguf"; anything else is a path. A NAME is valid when
 * m40_store_name_check() says so; m40d and m40ctl refuse any other.
 *
 * Every function that writes a path writes a NUL-terminated one into buf (n bytes) and
 * returns 0, or -ENAMETOOLONG when it does not fit, -ENOENT when the environment it needs
 * is not set, -EINVAL for a bad argument. */
#ifndef M40_PATHS_H
#define M40_PATHS_H

#include <errno.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef M40_DEFAULT_SOCKET
#define M40_DEFAULT_SOCKET "/run/m40d/m40d.sock"
#endif
#define M40_USER_SOCKET_DIR  "m40d"      /* under $XDG_RUNTIME_DIR */
#define M40_USER_SOCKET_NAME "m40d.sock" /* in that directory */
#define M40_ROOT_STORE       "/var/lib/m40d/models"
#define M40_USER_STORE       "m40/models" /* under $XDG_DATA_HOME */
#define M40_STORE_EXT        ".gguf"
/* Longest model name in bytes: m40ctl pull's ".NAME.gguf.part.meta" must fit NAME_MAX (255). */
#define M40_STORE_NAME_MAX 200

/* m40_paths_put - "a" "b" "c" into buf; -ENAMETOOLONG when it does not fit. */
static inline int m40_paths_put(char *buf, size_t n, const char *a, const char *b, const char *c)
{
        int k = snprintf(buf, n, "%s%s%s", a, b, c);

        return k < 0 || (size_t)k >= n ? -ENAMETOOLONG : 0;
}

/* m40_user_socket_dir - $XDG_RUNTIME_DIR/m40d (a user's m40d makes it, mode 0700). */
static inline int m40_user_socket_dir(char *buf, size_t n)
{
        const char *rt = getenv("XDG_RUNTIME_DIR");

        if (!rt || rt[0] != '/')
                return -ENOENT;
        return m40_paths_put(buf, n, rt, "/", M40_USER_SOCKET_DIR);
}

/* m40_user_socket - $XDG_RUNTIME_DIR/m40d/m40d.sock: where m40d run by a user other than
 * root listens when its configuration names no socket. */
static inline int m40_user_socket(char *buf, size_t n)
{
        int r = m40_user_socket_dir(buf, n);
        size_t len;

        if (r)
                return r;
        len = strlen(buf);
        return m40_paths_put(buf + len, n - len, "/", M40_USER_SOCKET_NAME, "");
}

/* m40_client_socket - the socket a client connects to when given none (order above):
 * $M40_SOCKET; M40_DEFAULT_SOCKET when it exists; the user socket when it exists; else
 * M40_DEFAULT_SOCKET (connecting then fails with -ENOENT naming the service's socket). */
static inline int m40_client_socket(char *buf, size_t n)
{
        const char *env = getenv("M40_SOCKET");
        struct stat st;

        if (env && *env)
                return m40_paths_put(buf, n, env, "", "");
        if (lstat(M40_DEFAULT_SOCKET, &st) && !m40_user_socket(buf, n) && !lstat(buf, &st))
                return 0;
        return m40_paths_put(buf, n, M40_DEFAULT_SOCKET, "", "");
}

/* m40_store_dir - the model store directory (rule above); -ENOENT when the rule needs a
 * home directory and none is known. */
static inline int m40_store_dir(char *buf, size_t n)
{
        const char *env = getenv("M40_MODELS"), *home;
        const struct passwd *pw;

        if (env && *env)
                return m40_paths_put(buf, n, env, "", "");
        if (geteuid() == 0)
                return m40_paths_put(buf, n, M40_ROOT_STORE, "", "");
        /* the XDG base directory spec: a relative $XDG_DATA_HOME is invalid and ignored */
        env = getenv("XDG_DATA_HOME");
        if (env && env[0] == '/')
                return m40_paths_put(buf, n, env, "/", M40_USER_STORE);
        home = getenv("HOME");
        if (!home || home[0] != '/') {
                pw = getpwuid(geteuid());
                home = pw && pw->pw_dir && pw->pw_dir[0] == '/' ? pw->pw_dir : NULL;
        }
        if (!home)
                return -ENOENT;
        return m40_paths_put(buf, n, home, "/.local/share/", M40_USER_STORE);
}

/* m40_store_is_name - whether the model argument arg is a store name rather than a file
 * path: it has no '/' and does not end in ".gguf". Whether the name is valid is
 * m40_store_name_check()'s question. */
static inline bool m40_store_is_name(const char *arg)
{
        const size_t len = strlen(arg), ext = strlen(M40_STORE_EXT);

        if (strchr(arg, '/'))
                return false;
        return len < ext || strcmp(arg + len - ext, M40_STORE_EXT) != 0;
}

/* m40_store_name_check - 0 when name is a valid model name: 1..M40_STORE_NAME_MAX bytes, no
 * '/', no control characters, not starting with '.' (the store's own files do, and "." and
 * ".." are no names), not ending in ".gguf" (the store adds it). Else -EINVAL, and
 * *ret_why (when ret_why is not NULL) says what is wrong in a phrase for a message. */
static inline int m40_store_name_check(const char *name, const char **ret_why)
{
        const size_t len = strlen(name);
        const char *why = NULL;

        if (!len)
                why = "a model name cannot be empty";
        else if (len > M40_STORE_NAME_MAX)
                why = "a model name has at most 200 bytes";
        else if (strchr(name, '/'))
                why = "a model name has no '/' (a path to a file is not a store name)";
        else if (name[0] == '.')
                why = "a model name cannot start with '.'";
        else if (!m40_store_is_name(name))
                why = "a model name does not end in '" M40_STORE_EXT "' (the store adds it)";
        for (const unsigned char *p = (const unsigned char *)name; !why && *p; p++)
                if (*p < 0x20 || *p == 0x7f)
                        why = "a model name has no control characters";
        if (why && ret_why)
                *ret_why = why;
        return why ? -EINVAL : 0;
}

/* m40_store_model - the file of the model NAME: STORE/NAME.gguf; -EINVAL when NAME fails
 * m40_store_name_check(), else m40_store_dir()'s errors. Whether the file exists is not
 * checked. */
static inline int m40_store_model(const char *name, char *buf, size_t n)
{
        int r;
        size_t len;

        if (m40_store_name_check(name, NULL))
                return -EINVAL;
        r = m40_store_dir(buf, n);
        if (r)
                return r;
        len = strlen(buf);
        return m40_paths_put(buf + len, n - len, "/", name, M40_STORE_EXT);
}

#endif
