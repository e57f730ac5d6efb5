/* fuzz_config.c - libFuzzer target over m40d's configuration parser (m40d_config_parse,
 * daemon/m40d/config.c: inih plus the key table and every value's check), under ASan and
 * UBSan. The input is the text of an m40d.ini. Properties: the parser returns 0 or -EINVAL;
 * a config it accepts is within every documented range (the sampling ones by
 * m40_sampler_params_check, default_max_tokens <= max_tokens, strings terminated, an
 * absolute socket path); a refusal is reported as at most 17 lines, each naming the file
 * and, but for the count and whole-file checks, a line of the input. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "m40d/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_ok(const struct m40d_config *c)
{
        struct m40_sampling sp = m40_sampling_default();
        const char *name, *range;

        sp.temperature = c->temperature;
        sp.top_k = c->top_k;
        sp.top_p = c->top_p;
        sp.min_p = c->min_p;
        sp.repeat_penalty = c->repeat_penalty;
        if (m40_sampler_params_check(&sp, &name, &range))
                abort(); /* an accepted default a request could not have */
        if (c->default_max_tokens > c->max_tokens || !c->max_sequences || !c->max_clients ||
            !c->max_batch_tokens || c->max_prompt_bytes < 256)
                abort();
        if (strnlen(c->model, sizeof(c->model)) == sizeof(c->model) || !c->model[0] ||
            strnlen(c->socket, sizeof(c->socket)) == sizeof(c->socket) || c->socket[0] != '/' ||
            strnlen(c->group, sizeof(c->group)) == sizeof(c->group))
                abort();
}

static void check_err(const char *err, size_t size)
{
        unsigned lines = 0;

        for (const char *l = err, *nl; l; l = nl ? nl + 1 : NULL, lines++) {
                unsigned long line;
                char *end;

                nl = strchr(l, '\n');
                if (strncmp(l, "fuzz.ini:", 9))
                        abort();
                if (l[9] == ' ')
                        continue; /* the file as a whole, or the count of the rest */
                line = strtoul(l + 9, &end, 10);
                if (!line || line > size + 1 || *end != ':')
                        abort();
        }
        if (!lines || lines > 17)
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        static struct m40d_config c;
        static char err[4096];
        int r;

        if (size > 1 << 16)
                return 0;
        m40d_config_default(&c);
        err[0] = 0;
        r = m40d_config_parse(&c, (const char *)data, size, "fuzz.ini", err, sizeof(err));
        if (r == 0)
                check_ok(&c);
        else if (r == -EINVAL)
                check_err(err, size);
        else
                abort();
        return 0;
}
