/* m40ctl.c - the m40-llm command-line tool: dispatches to a subcommand. */
#include <stdio.h>
#include <string.h>

#include "m40ctl.h"

static void usage(FILE *f)
{
        fputs("Usage: m40ctl COMMAND [ARGS...]\n"
              "\n"
              "The command-line tool of m40-llm.\n"
              "\n"
              "Commands:\n"
              "  show FILE.gguf [--json]   Describe a GGUF model file: architecture, shape,\n"
              "                            tokenizer, chat template family, weight types.\n"
              "  submit [PROMPT|-]         Generate a continuation of PROMPT with m40d and\n"
              "                            stream it to stdout.\n"
              "  run                       Chat with the model interactively.\n"
              "  status [--json]           Show m40d's model, requests, KV use and speed.\n"
              "  help                      Show this text.\n"
              "\n"
              "Run 'm40ctl COMMAND --help' for a command's options. submit, run and status\n"
              "talk to m40d at $M40_SOCKET or /run/m40d/m40d.sock (option --socket).\n"
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
        if (!strcmp(argv[1], "show"))
                return m40ctl_show(argc - 1, argv + 1);
        if (!strcmp(argv[1], "submit"))
                return m40ctl_submit(argc - 1, argv + 1);
        if (!strcmp(argv[1], "run"))
                return m40ctl_run(argc - 1, argv + 1);
        if (!strcmp(argv[1], "status"))
                return m40ctl_status(argc - 1, argv + 1);
        fprintf(stderr, "m40ctl: unknown command '%s' (try 'm40ctl help')\n", argv[1]);
        return M40CTL_EXIT_USAGE;
}
