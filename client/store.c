/* store.c - the model store's rule: its directory, model names and the paths of a model and
 * its download (store.h). */
#include <errno.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store.h"

static int put(char *buf, size_t n, const char *a, const char *b)
{
        int len = snprintf(buf, n, "%s%s", a, b);

        return len < 0 || (size_t)len >= n ? -ENAMETOOLONG : 0;
}

int m40_store_dir(char *buf, size_t n)
{
        const char *env = getenv("M40_MODELS");
        const char *home;
        struct passwd *pw;

        if (env && *env)
                return put(buf, n, env, "");
        if (geteuid() == 0)
                return put(buf, n, "/var/lib/m40d/models", "");
        /* The XDG base directory spec: a relative $XDG_DATA_HOME is invalid and ignored. */
        env = getenv("XDG_DATA_HOME");
        if (env && env[0] == '/')
                return put(buf, n, env, "/m40/models");
        home = getenv("HOME");
        if (!home || !*home) {
                pw = getpwuid(geteuid());
                home = pw && pw->pw_dir && *pw->pw_dir ? pw->pw_dir : NULL;
        }
        if (!home)
                return -ENOENT;
        return put(buf, n, home, "/.local/share/m40/models");
}

static bool ends_with(const char *s, const char *suffix)
{
        size_t a = strlen(s), b = strlen(suffix);

        return a >= b && !strcmp(s + a - b, suffix);
}

int m40_store_name_check(const char *name, const char **ret_why)
{
        const char *why = NULL;
        size_t len = strlen(name);

        if (!len)
                why = "a model name cannot be empty";
        else if (len > M40_STORE_NAME_MAX)
                why = "a model name has at most 200 bytes";
        else if (strchr(name, '/'))
                why = "a model name has no '/' (a path to a file is not a store name)";
        else if (name[0] == '.')
                why = "a model name cannot start with '.'";
        else if (ends_with(name, ".gguf"))
                why = "a model name does not end in '.gguf' (the store adds it)";
        for (const unsigned char *p = (const unsigned char *)name; !why && *p; p++)
                if (*p < 0x20 || *p == 0x7f)
                        why = "a model name has no control characters";
        if (why && ret_why)
                *ret_why = why;
        return why ? -EINVAL : 0;
}

int m40_store_path(const char *dir, const char *name, enum m40_store_file kind, char *buf, size_t n)
{
        int len;

        if (m40_store_name_check(name, NULL))
                return -EINVAL;
        switch (kind) {
        case M40_STORE_MODEL:
                len = snprintf(buf, n, "%s/%s.gguf", dir, name);
                break;
        case M40_STORE_PART:
                len = snprintf(buf, n, "%s/.%s.gguf.part", dir, name);
                break;
        case M40_STORE_META:
                len = snprintf(buf, n, "%s/.%s.gguf.part.meta", dir, name);
                break;
        default:
                return -EINVAL;
        }
        return len < 0 || (size_t)len >= n ? -ENAMETOOLONG : 0;
}

int m40_store_mkdir(const char *dir)
{
        char path[4096];
        struct stat st;
        size_t len = strlen(dir);

        if (len >= sizeof(path))
                return -ENAMETOOLONG;
        memcpy(path, dir, len + 1);
        /* each parent, then dir itself; an existing one is fine */
        for (char *p = path + 1;; p++) {
                if (*p != '/' && *p)
                        continue;
                char saved = *p;

                *p = '\0';
                if (mkdir(path, 0755) && errno != EEXIST)
                        return -errno;
                *p = saved;
                if (!saved)
                        break;
        }
        if (stat(dir, &st))
                return -errno;
        return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

int m40_store_resolve(const char *arg, char *buf, size_t n, const char **ret_why)
{
        char dir[4096];
        int r;

        if (strchr(arg, '/') || ends_with(arg, ".gguf"))
                return put(buf, n, arg, "");
        r = m40_store_name_check(arg, ret_why);
        if (r)
                return r;
        r = m40_store_dir(dir, sizeof(dir));
        if (r)
                return r;
        r = m40_store_path(dir, arg, M40_STORE_MODEL, buf, n);
        if (r)
                return r;
        return access(buf, F_OK) ? -errno : 0;
}

const char *m40_store_human_bytes(unsigned long long n, char *buf, size_t len)
{
        static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB"};
        double v = (double)n;
        int u = -1;

        while (v >= 1024 && u < 3) {
                v /= 1024;
                u++;
        }
        if (u < 0)
                snprintf(buf, len, "%llu B", n);
        else
                snprintf(buf, len, "%.1f %s", v, unit[u]);
        return buf;
}
