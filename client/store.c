/* store.c - m40ctl's side of the model store (store.h): the paths of a model and its
 * download, making the store, resolving an argument; the rule is m40/paths.h's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store.h"

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
        int r;

        if (!m40_store_is_name(arg))
                return m40_paths_put(buf, n, arg, "", "");
        r = m40_store_name_check(arg, ret_why);
        if (r)
                return r;
        r = m40_store_model(arg, buf, n);
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
