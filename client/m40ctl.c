/* m40ctl.c - the m40-llm command-line tool: dispatches to a subcommand; the helpers the
 * subcommands share (checked option values, connecting with a timeout). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "m40-version.h"
#include "m40/m40.h"
#include "m40/paths.h"
#include "m40ctl.h"

int m40ctl_opt_num(const char *cmd, const char *name, const char *arg, double lo, double hi,
                   bool integer, double *ret)
{
        char *end;
        double v;

        errno = 0;
        v = strtod(arg, &end);
        if (*arg && !*end && !errno && isfinite(v) && v >= lo && v <= hi &&
            (!integer || v == floor(v))) {
                *ret = v;
                return 0;
        }
        fprintf(stderr, "m40ctl %s: %s wants %s from %.15g to %.15g, not '%s'\n", cmd, name,
                integer ? "an integer" : "a number", lo, hi, arg);
        return -EINVAL;
}

int m40ctl_opt_u64(const char *cmd, const char *name, const char *arg, uint64_t *ret)
{
        const char *p = arg;
        char *end;
        unsigned long long v;

        while (*p == ' ' || *p == '\t')
                p++;
        errno = 0;
        v = strtoull(p, &end, 0);
        if (*p && *p != '-' && *p != '+' && !*end && !errno) {
                *ret = v;
                return 0;
        }
        fprintf(stderr, "m40ctl %s: %s wants an integer from 0 to %" PRIu64 ", not '%s'\n", cmd,
                name, UINT64_MAX, arg);
        return -EINVAL;
}

int m40ctl_opt_timeout(const char *cmd, const char *arg, int *ret_ms)
{
        double v;

        if (m40ctl_opt_num(cmd, "--timeout", arg, 0, 86400, false, &v))
                return -EINVAL;
        *ret_ms = v > 0 ? (int)ceil(v * 1000) : -1;
        return 0;
}

void m40ctl_say_unreachable(const char *cmd, const char *sock, int timeout_ms, int err)
{
        char def[108];

        if ((!sock || !*sock) && !m40_client_socket(def, sizeof(def)))
                sock = def;
        if (!sock || !*sock)
                sock = M40_DEFAULT_SOCKET;
        if (err == -ETIMEDOUT)
                fprintf(stderr,
                        "m40ctl %s: m40d did not answer within %g s (at %s; stopped, hung or "
                        "still loading its model? --timeout sets the limit)\n",
                        cmd, timeout_ms / 1000.0, sock);
        else
                fprintf(stderr, "m40ctl %s: cannot reach m40d at %s: %s\n", cmd, sock,
                        m40_strerror(err));
}

int m40ctl_connect(const char *cmd, const char *sock, int timeout_ms, struct m40_client **ret)
{
        int r = m40_client_connect_timeout(sock, timeout_ms, ret);

        if (r)
                m40ctl_say_unreachable(cmd, sock, timeout_ms, r);
        return r;
}

static void usage(FILE *f)
{
        fputs("Usage: m40ctl COMMAND [ARGS...]\n"
              "\n"
              "The command-line tool of m40-llm.\n"
              "\n"
              "Commands:\n"
              "  show FILE.gguf|NAME        Describe a GGUF model file or stored model:\n"
              "                            architecture, shape, tokenizer, chat template\n"
              "                            family, weight types.\n"
              "  pull URL [--name NAME]    Download a GGUF model over HTTPS into the model\n"
              "                            store: resumable, sha256-verified, GGUF-checked.\n"
              "  list [--json]             List the models in the store.\n"
              "  rm NAME...                Remove models from the store.\n"
              "  submit [PROMPT|-]         Generate a continuation of PROMPT with m40d and\n"
              "                            stream it to stdout.\n"
              "  run                       Chat with the model interactively.\n"
              "  status [--json]           Show m40d's model, requests, KV use and speed.\n"
              "  help                      Show this text.\n"
              "\n"
              "Options:\n"
              "  -h, --help                Show this text.\n"
              "      --version             Print m40ctl's version.\n"
              "\n"
              "Run 'm40ctl COMMAND --help' for a command's options. submit, run and status\n"
              "talk to m40d at --socket PATH, else $M40_SOCKET, else /run/m40d/m40d.sock,\n"
              "else (when that does not exist) $XDG_RUNTIME_DIR/m40d/m40d.sock, a user's m40d.\n"
              "The model store (pull, list, rm, show NAME) is the directory $M40_MODELS, else\n"
              "/var/lib/m40d/models as root, else $XDG_DATA_HOME/m40/models (default\n"
              "~/.local/share/m40/models); a model NAME is stored as NAME.gguf there.\n"
              "\n"
              "Exit status: 0 success, 1 failure, 2 bad command line, 3 daemon unreachable,\n"
              "4 request rejected by the daemon, 130 interrupted (Ctrl-C).\n",
              f);
}

int main(int argc, char **argv)
{
        if (argc < 2) {
                usage(stderr);
                return M40CTL_EXIT_USAGE;
        }
        if (!strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
                usage(stdout);
                return M40CTL_EXIT_OK;
        }
        if (!strcmp(argv[1], "--version")) {
                puts(M40_VERSION_TEXT("m40ctl"));
                return M40CTL_EXIT_OK;
        }
        if (!strcmp(argv[1], "show"))
                return m40ctl_show(argc - 1, argv + 1);
        if (!strcmp(argv[1], "submit"))
                return m40ctl_submit(argc - 1, argv + 1);
        if (!strcmp(argv[1], "run"))
                return m40ctl_run(argc - 1, argv + 1);
        if (!strcmp(argv[1], "status"))
                return m40ctl_status(argc - 1, argv + 1);
        if (!strcmp(argv[1], "pull"))
                return m40ctl_pull(argc - 1, argv + 1);
        if (!strcmp(argv[1], "list") || !strcmp(argv[1], "ls"))
                return m40ctl_list(argc - 1, argv + 1);
        if (!strcmp(argv[1], "rm"))
                return m40ctl_rm(argc - 1, argv + 1);
        fprintf(stderr, "m40ctl: unknown command '%s' (try 'm40ctl help')\n", argv[1]);
        return M40CTL_EXIT_USAGE;
}
