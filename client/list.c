/* list.c - `m40ctl list [--json]` and `m40ctl rm [--force] NAME...`: the models in the store
 * (store.h), described from their GGUF headers, and their removal. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "m40ctl.h"
#include "model/ggml_type.h"
#include "model/gguf.h"
#include "model/model_info.h"
#include "store.h"

#define LIST_MAX 100000 /* entries of a store directory looked at */

struct entry {
        char name[M40_STORE_NAME_MAX + 1];
        uint64_t bytes;
        time_t mtime;
        bool partial;
        char arch[64], type[16];
        uint64_t params;
        char err[M40_GGUF_ERRLEN]; /* why the file does not open as a model, or "" */
};

static void list_usage(FILE *f)
{
        fputs("Usage: m40ctl list [--json]\n"
              "\n"
              "Lists the models in the store: name, file size, architecture, parameter count,\n"
              "weight type (llama.cpp's file type, else the type holding most bytes) and the\n"
              "time the file was stored, read from each file's GGUF header. A file that does\n"
              "not open as a model is listed with the reason; downloads in progress or\n"
              "interrupted (m40ctl pull resumes them) are named on stderr.\n"
              "\n"
              "The store is $M40_MODELS, else /var/lib/m40d/models as root, else\n"
              "$XDG_DATA_HOME/m40/models (default ~/.local/share/m40/models).\n"
              "\n"
              "Options:\n"
              "  --json       Print one JSON object: {\"store\", \"models\": [...], \"partial\": "
              "[...]}.\n"
              "  -h, --help   Show this text.\n"
              "\n"
              "Exit status: 0 listed (an empty or absent store included); 1 the store cannot be\n"
              "read; 2 bad command line.\n",
              f);
}

/* llama.cpp's LLAMA_FTYPE names (general.file_type); NULL where there is none. */
static const char *ftype_name(uint32_t t)
{
        static const char *const names[] = {
                [0] = "F32",      [1] = "F16",     [2] = "Q4_0",    [3] = "Q4_1",
                [7] = "Q8_0",     [8] = "Q5_0",    [9] = "Q5_1",    [10] = "Q2_K",
                [11] = "Q3_K_S",  [12] = "Q3_K_M", [13] = "Q3_K_L", [14] = "Q4_K_S",
                [15] = "Q4_K_M",  [16] = "Q5_K_S", [17] = "Q5_K_M", [18] = "Q6_K",
                [19] = "IQ2_XXS", [20] = "IQ2_XS", [21] = "Q2_K_S", [22] = "IQ3_XS",
                [23] = "IQ3_XXS", [24] = "IQ1_S",  [25] = "IQ4_NL", [26] = "IQ3_S",
                [27] = "IQ3_M",   [28] = "IQ2_S",  [29] = "IQ2_M",  [30] = "IQ4_XS",
                [31] = "IQ1_M",   [32] = "BF16",   [36] = "TQ1_0",  [37] = "TQ2_0",
        };

        return t < sizeof(names) / sizeof(names[0]) ? names[t] : NULL;
}

static void describe(struct entry *e, const char *path)
{
        struct m40_gguf *g = NULL;
        struct m40_model_info info;
        const char *ft = NULL;
        uint32_t t = UINT32_MAX;
        size_t best = 0;
        int r;

        r = m40_gguf_open(path, &g, e->err, sizeof(e->err));
        if (!r)
                r = m40_model_info_init(&info, g, e->err, sizeof(e->err));
        if (r) {
                g = m40_gguf_free(g);
                return;
        }
        e->err[0] = '\0';
        snprintf(e->arch, sizeof(e->arch), "%s", info.arch);
        e->params = info.n_params;
        if (!m40_gguf_get_u32(g, "general.file_type", UINT32_MAX, &t))
                ft = ftype_name(t);
        for (size_t i = 1; i < info.n_types; i++)
                if (info.types[i].bytes > info.types[best].bytes)
                        best = i;
        snprintf(e->type, sizeof(e->type), "%s",
                 ft             ? ft
                 : info.n_types ? m40_ggml_type_name(info.types[best].type)
                                : "-");
        g = m40_gguf_free(g);
}

static bool take_suffix(char *s, const char *suffix)
{
        size_t a = strlen(s), b = strlen(suffix);

        if (a <= b || strcmp(s + a - b, suffix))
                return false;
        s[a - b] = '\0';
        return true;
}

/* One directory entry as a model or a partial download; false for anything else. */
static bool read_entry(int dfd, const char *dir, const char *file, struct entry *e)
{
        char name[256], path[4352];
        struct stat st;
        size_t len;

        memset(e, 0, sizeof(*e));
        snprintf(name, sizeof(name), "%s", file);
        if (name[0] == '.') {
                memmove(name, name + 1, strlen(name));
                e->partial = take_suffix(name, ".gguf.part");
                if (!e->partial)
                        return false;
        } else if (!take_suffix(name, ".gguf")) {
                return false;
        }
        len = strlen(name); /* at most M40_STORE_NAME_MAX when the check passes */
        if (m40_store_name_check(name, NULL) || len >= sizeof(e->name) ||
            fstatat(dfd, file, &st, 0) || !S_ISREG(st.st_mode))
                return false;
        memcpy(e->name, name, len + 1);
        e->bytes = (uint64_t)st.st_size;
        e->mtime = st.st_mtime;
        if (!e->partial) {
                snprintf(path, sizeof(path), "%s/%s", dir, file);
                describe(e, path);
        }
        return true;
}

static int by_name(const void *a, const void *b)
{
        return strcmp(((const struct entry *)a)->name, ((const struct entry *)b)->name);
}

/* The store's entries, sorted by name, into *ret (free()); -errno when unreadable. */
static int scan(const char *dir, struct entry **ret, size_t *ret_n)
{
        struct entry *v = NULL, *nv;
        size_t n = 0, cap = 0, seen = 0;
        struct dirent *d;
        DIR *dp = opendir(dir);

        if (!dp)
                return errno == ENOENT ? (*ret = NULL, *ret_n = 0, 0) : -errno;
        while ((d = readdir(dp)) && seen++ < LIST_MAX) {
                if (n == cap) {
                        cap = cap ? cap * 2 : 16;
                        nv = realloc(v, cap * sizeof(*v));
                        if (!nv) {
                                free(v);
                                closedir(dp);
                                return -ENOMEM;
                        }
                        v = nv;
                }
                if (read_entry(dirfd(dp), dir, d->d_name, &v[n]))
                        n++;
        }
        closedir(dp);
        if (n)
                qsort(v, n, sizeof(*v), by_name);
        *ret = v;
        *ret_n = n;
        return 0;
}

static void print_json(const char *dir, const struct entry *v, size_t n)
{
        char when[32];
        bool first = true;

        fputs("{\"store\": ", stdout);
        m40ctl_json_str(stdout, dir, strlen(dir));
        fputs(", \"models\": [", stdout);
        for (size_t i = 0; i < n; i++) {
                if (v[i].partial)
                        continue;
                strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", gmtime(&v[i].mtime));
                fputs(first ? "{\"name\": " : ", {\"name\": ", stdout);
                first = false;
                m40ctl_json_str(stdout, v[i].name, strlen(v[i].name));
                printf(", \"bytes\": %" PRIu64 ", \"modified\": \"%s\"", v[i].bytes, when);
                if (v[i].err[0]) {
                        fputs(", \"error\": ", stdout);
                        m40ctl_json_str(stdout, v[i].err, strlen(v[i].err));
                } else {
                        fputs(", \"architecture\": ", stdout);
                        m40ctl_json_str(stdout, v[i].arch, strlen(v[i].arch));
                        printf(", \"parameters\": %" PRIu64 ", \"type\": \"%s\"", v[i].params,
                               v[i].type);
                }
                fputc('}', stdout);
        }
        fputs("], \"partial\": [", stdout);
        first = true;
        for (size_t i = 0; i < n; i++) {
                if (!v[i].partial)
                        continue;
                fputs(first ? "{\"name\": " : ", {\"name\": ", stdout);
                first = false;
                m40ctl_json_str(stdout, v[i].name, strlen(v[i].name));
                printf(", \"bytes\": %" PRIu64 "}", v[i].bytes);
        }
        fputs("]}\n", stdout);
}

static void print_text(const struct entry *v, size_t n)
{
        char size[32], params[32], when[32];
        int w = 4;

        for (size_t i = 0; i < n; i++)
                if (!v[i].partial && (int)strlen(v[i].name) > w)
                        w = strlen(v[i].name) > 40 ? 40 : (int)strlen(v[i].name);
        printf("%-*s  %10s  %-10s  %8s  %-7s  %s\n", w, "NAME", "SIZE", "ARCH", "PARAMS", "TYPE",
               "MODIFIED");
        for (size_t i = 0; i < n; i++) {
                if (v[i].partial)
                        continue;
                strftime(when, sizeof(when), "%Y-%m-%d %H:%M", localtime(&v[i].mtime));
                m40_store_human_bytes(v[i].bytes, size, sizeof(size));
                if (v[i].err[0])
                        printf("%-*s  %10s  (not a usable model: %s)\n", w, v[i].name, size,
                               v[i].err);
                else
                        printf("%-*s  %10s  %-10s  %8s  %-7s  %s\n", w, v[i].name, size, v[i].arch,
                               m40ctl_human_count(v[i].params, params, sizeof(params)), v[i].type,
                               when);
        }
        for (size_t i = 0; i < n; i++)
                if (v[i].partial)
                        fprintf(stderr,
                                "partial download: %s (%s so far; m40ctl pull URL resumes it, "
                                "m40ctl rm %s removes it)\n",
                                v[i].name, m40_store_human_bytes(v[i].bytes, size, sizeof(size)),
                                v[i].name);
}

int m40ctl_list(int argc, char **argv)
{
        static const struct option opts[] = {
                {"json", no_argument, NULL, 'j'},
                {"help", no_argument, NULL, 'h'},
                {0},
        };
        char dir[4096];
        struct entry *v;
        size_t n;
        bool json = false;
        int c, r;

        optind = 1;
        while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                if (c == 'j') {
                        json = true;
                } else if (c == 'h') {
                        list_usage(stdout);
                        return M40CTL_EXIT_OK;
                } else {
                        list_usage(stderr);
                        return M40CTL_EXIT_USAGE;
                }
        }
        if (optind != argc) {
                fprintf(stderr, "m40ctl list: takes no arguments\n");
                return M40CTL_EXIT_USAGE;
        }
        r = m40_store_dir(dir, sizeof(dir));
        if (r) {
                fprintf(stderr, "m40ctl list: no store directory: %s (set $M40_MODELS)\n",
                        strerror(-r));
                return M40CTL_EXIT_FAIL;
        }
        r = scan(dir, &v, &n);
        if (r) {
                fprintf(stderr, "m40ctl list: cannot read the store %s: %s\n", dir, strerror(-r));
                return M40CTL_EXIT_FAIL;
        }
        if (json)
                print_json(dir, v, n);
        else
                print_text(v, n);
        free(v);
        if (fflush(stdout) != 0 || ferror(stdout)) {
                fprintf(stderr, "m40ctl list: write error\n");
                return M40CTL_EXIT_FAIL;
        }
        return M40CTL_EXIT_OK;
}

static void rm_usage(FILE *f)
{
        fputs("Usage: m40ctl rm [--force] NAME...\n"
              "\n"
              "Removes the models NAME from the store (DIR/NAME.gguf), and a partial download\n"
              "of NAME if there is one. Names are store names, never paths: a name with '/' is\n"
              "refused. A model m40d is serving keeps being served until m40d loads another;\n"
              "a pull of NAME in progress is not disturbed (stop it first).\n"
              "\n"
              "Options:\n"
              "  -f, --force  Say nothing about names that are not in the store.\n"
              "  -h, --help   Show this text.\n"
              "\n"
              "Exit status: 0 removed; 1 a model was not in the store (without --force) or\n"
              "could not be removed; 2 bad command line (nothing is removed).\n",
              f);
}

/* Removes name's model and partial download from dir. Returns 0, -ENOENT when there was
 * neither, -EBUSY while a pull holds the partial download, else -errno. */
static int rm_one(const char *dir, const char *name, bool *ret_partial)
{
        char path[4352], part[4352], meta[4352];
        int fd, r = -ENOENT;

        *ret_partial = false;
        if (m40_store_path(dir, name, M40_STORE_MODEL, path, sizeof(path)) ||
            m40_store_path(dir, name, M40_STORE_PART, part, sizeof(part)) ||
            m40_store_path(dir, name, M40_STORE_META, meta, sizeof(meta)))
                return -ENAMETOOLONG;
        fd = open(part, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
                if (flock(fd, LOCK_EX | LOCK_NB)) {
                        close(fd);
                        return -EBUSY;
                }
                /* unlinked while locked: a pull starting now creates a new .part */
                r = unlink(part) ? -errno : 0;
                unlink(meta);
                close(fd);
                if (r)
                        return r;
                *ret_partial = true;
        }
        if (unlink(path) == 0)
                return 0;
        return errno == ENOENT && *ret_partial ? 0 : -errno;
}

int m40ctl_rm(int argc, char **argv)
{
        static const struct option opts[] = {
                {"force", no_argument, NULL, 'f'},
                {"help", no_argument, NULL, 'h'},
                {0},
        };
        char dir[4096];
        const char *why;
        bool force = false, partial;
        int c, r, rc = M40CTL_EXIT_OK;

        optind = 1;
        while ((c = getopt_long(argc, argv, "fh", opts, NULL)) != -1) {
                if (c == 'f') {
                        force = true;
                } else if (c == 'h') {
                        rm_usage(stdout);
                        return M40CTL_EXIT_OK;
                } else {
                        rm_usage(stderr);
                        return M40CTL_EXIT_USAGE;
                }
        }
        if (optind == argc) {
                fprintf(stderr, "m40ctl rm: expected one or more model NAMEs\n");
                rm_usage(stderr);
                return M40CTL_EXIT_USAGE;
        }
        for (int i = optind; i < argc; i++)
                if (m40_store_name_check(argv[i], &why)) {
                        fprintf(stderr, "m40ctl rm: '%s' is not a model name: %s\n", argv[i], why);
                        return M40CTL_EXIT_USAGE;
                }
        r = m40_store_dir(dir, sizeof(dir));
        if (r) {
                fprintf(stderr, "m40ctl rm: no store directory: %s\n", strerror(-r));
                return M40CTL_EXIT_FAIL;
        }
        for (int i = optind; i < argc; i++) {
                r = rm_one(dir, argv[i], &partial);
                if (!r)
                        printf("removed %s%s\n", argv[i],
                               partial ? " (with its partial download)" : "");
                else if (r == -ENOENT && force)
                        continue;
                else if (r == -ENOENT)
                        fprintf(stderr, "m40ctl rm: no model '%s' in the store (%s)\n", argv[i],
                                dir);
                else if (r == -EBUSY)
                        fprintf(stderr, "m40ctl rm: a pull of '%s' is running; stop it first\n",
                                argv[i]);
                else
                        fprintf(stderr, "m40ctl rm: cannot remove '%s': %s\n", argv[i],
                                strerror(-r));
                if (r)
                        rc = M40CTL_EXIT_FAIL;
        }
        return rc;
}
