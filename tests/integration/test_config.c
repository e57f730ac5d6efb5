/* test_config.c - m40d's configuration (daemon/m40d/config.c): the shipped m40d.ini spells
 * out exactly the built-in defaults; [engine] vram_limit_mb takes 0 (no cap) up to
 * 16777216 MiB and refuses anything else with an error naming the file, the line and the
 * key; [engine] prefill_chunk_tokens takes 0..65536 (default M40_PREFILL_CHUNK_DEFAULT)
 * likewise, and step_timeout_ms 0..86400000 (default 600000); [sampling] takes exactly the ranges
 * of m40_sampler_param_check() (the ones requests get, m40.h's: top_k = -1 is "off"); every bad
 * line is reported on its own line with its own message (issue 20 item 10), over-long lines too; a
 * directory is no config.
 *
 *   test_config M40D.INI (the shipped file). Exit 0 pass, 1 fail. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "m40d/config.h"
#include "tests/check.h"

static char path[64];

/* load - writes text to a temporary ini and loads it over the defaults into *c. */
static int load(const char *text, struct m40d_config *c, char *err, size_t errlen)
{
        FILE *f = fopen(path, "w");

        if (!f || fputs(text, f) < 0 || fclose(f)) {
                perror(path);
                exit(1);
        }
        m40d_config_default(c);
        err[0] = 0;
        return m40d_config_load(c, path, err, errlen);
}

static void test_shipped(const char *shipped)
{
        struct m40d_config def, c;
        char err[1024] = "";
        int r;

        m40d_config_default(&def);
        m40d_config_default(&c);
        r = m40d_config_load(&c, shipped, err, sizeof(err));
        CHECK(r == 0, "the shipped %s does not load: %s", shipped, err);
        CHECK(c.vram_limit_mb == 0 && def.vram_limit_mb == 0, "vram_limit_mb default: %llu",
              (unsigned long long)c.vram_limit_mb);
        /* whether a key was set is not a value: the shipped file sets both */
        CHECK(c.socket_set && c.group_set && !def.socket_set && !def.group_set,
              "socket_set/group_set: shipped %d %d, defaults %d %d", c.socket_set, c.group_set,
              def.socket_set, def.group_set);
        c.socket_set = c.group_set = false;
        CHECK(!memcmp(&c, &def, sizeof(c)), "the shipped m40d.ini differs from the defaults");
}

static void test_vram_limit(void)
{
        static const struct {
                const char *v;
                uint64_t want;
        } good[] = {{"0", 0}, {"1", 1}, {"22528", 22528}, {"16777216", 16777216}};
        static const char *const bad[] = {
                "-1", "16777217", "abc", "12MB", "", "1e3", "99999999999999999999999"};
        struct m40d_config c;
        char ini[256], err[1024], want[128];
        int r;

        for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
                snprintf(ini, sizeof(ini), "[engine]\nvram_limit_mb = %s\n", good[i].v);
                r = load(ini, &c, err, sizeof(err));
                CHECK(r == 0 && c.vram_limit_mb == good[i].want,
                      "vram_limit_mb = %s: %d (%s), got %llu", good[i].v, r, err,
                      (unsigned long long)c.vram_limit_mb);
        }
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                snprintf(ini, sizeof(ini),
                         "[model]\npath = /m.gguf\n[engine]\nvram_limit_mb = %s\n", bad[i]);
                r = load(ini, &c, err, sizeof(err));
                snprintf(want, sizeof(want), "%s:4: [engine] vram_limit_mb: ", path);
                CHECK(r == -EINVAL && !strncmp(err, want, strlen(want)) &&
                              strstr(err, "0..16777216"),
                      "vram_limit_mb = '%s': %d, message '%s'", bad[i], r, err);
        }
        /* the key lives in [engine] only */
        r = load("[server]\nvram_limit_mb = 1\n", &c, err, sizeof(err));
        CHECK(r == -EINVAL && strstr(err, ":2: [server] vram_limit_mb: unknown key"),
              "vram_limit_mb in [server]: %d '%s'", r, err);
}

/* check_u32_key - [engine] key: its default is def, every value of good is
 * taken, every one of bad refused with the file, line and key and the range
 * (e.g. "0..65536") in the message. off: offsetof the field key sets. */
static void check_u32_key(const char *key, uint32_t def, size_t off, const uint32_t *good,
                          size_t n_good, const char *const *bad, size_t n_bad, const char *range)
{
        struct m40d_config c;
        char ini[256], err[1024], want[128];
        const uint32_t *v = (const uint32_t *)((const char *)&c + off);
        int r;

        m40d_config_default(&c);
        CHECK(*v == def, "%s default %u, want %u", key, *v, def);
        for (size_t i = 0; i < n_good; i++) {
                snprintf(ini, sizeof(ini), "[engine]\n%s = %u\n", key, good[i]);
                r = load(ini, &c, err, sizeof(err));
                CHECK(r == 0 && *v == good[i], "%s = %u: %d (%s), got %u", key, good[i], r, err,
                      *v);
        }
        for (size_t i = 0; i < n_bad; i++) {
                snprintf(ini, sizeof(ini), "[engine]\n%s = %s\n", key, bad[i]);
                r = load(ini, &c, err, sizeof(err));
                snprintf(want, sizeof(want), "%s:2: [engine] %s: ", path, key);
                CHECK(r == -EINVAL && !strncmp(err, want, strlen(want)) && strstr(err, range),
                      "%s = '%s': %d, message '%s'", key, bad[i], r, err);
        }
}

static void test_prefill_chunk(void)
{
        static const uint32_t good[] = {0, 1, 32, 256, 65536};
        static const char *const bad[] = {"-1", "65537", "abc", "32k", ""};

        check_u32_key("prefill_chunk_tokens", M40_PREFILL_CHUNK_DEFAULT,
                      offsetof(struct m40d_config, prefill_chunk_tokens), good,
                      sizeof(good) / sizeof(good[0]), bad, sizeof(bad) / sizeof(bad[0]),
                      "0..65536");
}

/* [engine] step_timeout_ms: 0 (off) up to a day; the default 10 minutes */
static void test_step_timeout(void)
{
        static const uint32_t good[] = {0, 1, 250, 600000, 86400000};
        static const char *const bad[] = {"-1", "86400001", "4294967296", "10s", "1.5", ""};

        check_u32_key("step_timeout_ms", 600000, offsetof(struct m40d_config, step_timeout_ms),
                      good, sizeof(good) / sizeof(good[0]), bad, sizeof(bad) / sizeof(bad[0]),
                      "0..86400000");
}

/* [engine] mode: default, steps or persistent (engine.h's enum m40_engine_mode) */
static void test_mode(void)
{
        static const struct {
                const char *v;
                uint32_t mode;
        } good[] = {{"default", M40_ENGINE_MODE_DEFAULT},
                    {"steps", M40_ENGINE_MODE_STEPS},
                    {"persistent", M40_ENGINE_MODE_PERSISTENT}};
        static const char *const bad[] = {"", "Persistent", "1", "step", "persistent steps"};
        struct m40d_config c;
        char ini[256], err[1024];
        int r;

        m40d_config_default(&c);
        CHECK(c.mode == M40_ENGINE_MODE_DEFAULT, "mode default %u", c.mode);
        for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
                snprintf(ini, sizeof(ini), "[engine]\nmode = %s\n", good[i].v);
                r = load(ini, &c, err, sizeof(err));
                CHECK(r == 0 && c.mode == good[i].mode, "mode = %s: %d (%s), got %u", good[i].v, r,
                      err, c.mode);
        }
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                snprintf(ini, sizeof(ini), "[engine]\nmode = %s\n", bad[i]);
                r = load(ini, &c, err, sizeof(err));
                CHECK(r == -EINVAL && strstr(err, "[engine] mode: ") &&
                              strstr(err, "expected default, steps or persistent"),
                      "mode = '%s': %d, message '%s'", bad[i], r, err);
        }
}

/* [engine] chain_steps: auto, true/yes/1 or false/no/0; default auto */
static void test_chain_steps(void)
{
        static const struct {
                const char *v;
                enum m40d_chain on;
        } good[] = {{"true", M40D_CHAIN_ON},   {"yes", M40D_CHAIN_ON}, {"1", M40D_CHAIN_ON},
                    {"false", M40D_CHAIN_OFF}, {"no", M40D_CHAIN_OFF}, {"0", M40D_CHAIN_OFF},
                    {"auto", M40D_CHAIN_AUTO}};
        static const char *const bad[] = {"", "True", "on", "2", "false true"};
        struct m40d_config c;
        char ini[256], err[1024];
        int r;

        m40d_config_default(&c);
        CHECK(c.chain_steps == M40D_CHAIN_AUTO, "chain_steps default auto");
        for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
                snprintf(ini, sizeof(ini), "[engine]\nchain_steps = %s\n", good[i].v);
                r = load(ini, &c, err, sizeof(err));
                CHECK(r == 0 && c.chain_steps == good[i].on, "chain_steps = %s: %d (%s)", good[i].v,
                      r, err);
        }
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                snprintf(ini, sizeof(ini), "[engine]\nchain_steps = %s\n", bad[i]);
                r = load(ini, &c, err, sizeof(err));
                CHECK(r == -EINVAL && strstr(err, "[engine] chain_steps: ") &&
                              strstr(err, "expected auto, true or false"),
                      "chain_steps = '%s': %d, message '%s'", bad[i], r, err);
        }
}

/* [engine] decode_width: auto, all or a count in 1..1024; default auto */
static void test_decode_width(void)
{
        static const char *const bad[] = {"", "Auto", "all auto", "none", "-1"};
        static const char *const bad_n[] = {"0", "1025", "8x", "4294967295"};
        struct m40d_config c;
        char ini[256], err[1024];
        int r;

        m40d_config_default(&c);
        CHECK(c.width == M40_ENGINE_WIDTH_AUTO, "decode_width default auto");
        r = load("[engine]\ndecode_width = all\n", &c, err, sizeof(err));
        CHECK(r == 0 && c.width == M40_ENGINE_WIDTH_ALL, "decode_width = all: %d (%s)", r, err);
        r = load("[engine]\ndecode_width = auto\n", &c, err, sizeof(err));
        CHECK(r == 0 && c.width == M40_ENGINE_WIDTH_AUTO, "decode_width = auto: %d (%s)", r, err);
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                snprintf(ini, sizeof(ini), "[engine]\ndecode_width = %s\n", bad[i]);
                r = load(ini, &c, err, sizeof(err));
                CHECK(r == -EINVAL && strstr(err, "[engine] decode_width: ") &&
                              strstr(err, "expected auto, all or a count in 1..1024"),
                      "decode_width = '%s': %d, message '%s'", bad[i], r, err);
        }
        for (size_t i = 0; i < sizeof(bad_n) / sizeof(bad_n[0]); i++) {
                snprintf(ini, sizeof(ini), "[engine]\ndecode_width = %s\n", bad_n[i]);
                r = load(ini, &c, err, sizeof(err));
                CHECK(r == -EINVAL && strstr(err, "[engine] decode_width: ") &&
                              strstr(err, "expected an integer in 1..1024"),
                      "decode_width = '%s': %d, message '%s'", bad_n[i], r, err);
        }
        r = load("[engine]\ndecode_width = 8\n", &c, err, sizeof(err));
        CHECK(r == 0 && c.width == 8, "decode_width = 8: %d (%s), %u", r, err, c.width);
        r = load("[engine]\ndecode_width = 1024\n", &c, err, sizeof(err));
        CHECK(r == 0 && c.width == 1024, "decode_width = 1024: %d (%s)", r, err);
}

static void test_sampling(void)
{
        static const struct {
                const char *key, *v;
        } cases[] = {
                {"top_k", "-1"},
                {"top_k", "-2147483648"},
                {"top_k", "2147483647"},
                {"top_k", "2147483648"},
                {"top_k", "1.5"},
                {"top_k", "0"},
                {"temperature", "-1"},
                {"temperature", "0"},
                {"temperature", "100"},
                {"temperature", "100.5"},
                {"temperature", "nan"},
                {"temperature", "inf"},
                {"top_p", "-1"},
                {"top_p", "0"},
                {"top_p", "1"},
                {"top_p", "2"},
                {"min_p", "1e30"},
                {"min_p", "-0.5"},
                {"min_p", "1"},
                {"min_p", "1.01"},
                {"repeat_penalty", "0"},
                {"repeat_penalty", "-inf"},
                {"repeat_penalty", "nan"},
                {"repeat_penalty", "0.01"},
                {"repeat_penalty", "100"},
                {"repeat_penalty", "1e-3"},
                {"top_p", "abc"},
        };
        struct m40d_config c;
        char ini[256], err[1024];
        int r;

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                const char *range = "";
                int want = m40_sampler_param_check(cases[i].key, strtod(cases[i].v, NULL), &range);

                if (!strcmp(cases[i].v, "abc") || !strcmp(cases[i].v, "1.5"))
                        want = -EINVAL; /* not a number / not an integer in the file */
                snprintf(ini, sizeof(ini), "[sampling]\n%s = %s\n", cases[i].key, cases[i].v);
                r = load(ini, &c, err, sizeof(err));
                CHECK(r == want, "%s = %s: %d (%s), want %d as for a request", cases[i].key,
                      cases[i].v, r, err, want);
                CHECK(r == 0 || (strstr(err, ":2: [sampling] ") && strstr(err, range)),
                      "%s = %s: message '%s' lacks the line or the range '%s'", cases[i].key,
                      cases[i].v, err, range);
        }
        r = load("[sampling]\ntop_k = -1\ntemperature = -0.5\nmin_p = -1\n", &c, err, sizeof(err));
        CHECK(r == 0 && c.top_k == -1 && c.temperature == -0.5f && c.min_p == -1.0f,
              "top_k -1, temperature -0.5, min_p -1 (all documented as off/greedy): %d '%s'", r,
              err);
}

/* Every error on its own line, with its own line number and message. */
static void test_errors(void)
{
        static const char ini[] = "[engine]\n"          /* 1 */
                                  "max_sequences = 0\n" /* 2: range */
                                  "threads = 4\n"       /* 3 */
                                  "this is not ini\n"   /* 4: syntax */
                                  "[sampling]\n"        /* 5 */
                                  "top_p = -1\n"        /* 6: range */
                                  "[bogus\n"            /* 7: syntax */
                                  "[server]\n"          /* 8 */
                                  "no_such_key = 1\n"   /* 9: unknown key */
                                  "max_clients = 8\n";  /* 10 */
        char want[6][160], err[2048], longline[400];
        struct m40d_config c;
        const char *at;
        int r;

        r = load(ini, &c, err, sizeof(err));
        snprintf(want[0], sizeof(want[0]),
                 "%s:2: [engine] max_sequences: expected an integer in 1..1024", path);
        snprintf(want[1], sizeof(want[1]), "%s:4: syntax error", path);
        snprintf(want[2], sizeof(want[2]), "%s:6: [sampling] top_p: expected a number >= 0", path);
        snprintf(want[3], sizeof(want[3]), "%s:7: syntax error", path);
        snprintf(want[4], sizeof(want[4]), "%s:9: [server] no_such_key: unknown key", path);
        CHECK(r == -EINVAL, "five bad lines: %d", r);
        at = err;
        for (int i = 0; i < 5; i++) {
                const char *hit = strstr(at, want[i]);

                CHECK(hit && (hit == err || hit[-1] == '\n'),
                      "error %d: '%s' not on its own line after the previous one in:\n%s", i,
                      want[i], err);
                if (hit)
                        at = hit + strlen(want[i]);
        }
        CHECK(!strchr(at, '\n'), "more than five errors in:\n%s", err);
        CHECK(c.threads == 4 && c.max_clients == 8, "the good lines were not applied: %u %u",
              c.threads, c.max_clients);

        /* a line inih would split: one error naming it, not a syntax error on a fragment */
        memset(longline, 'x', sizeof(longline));
        memcpy(longline, "[model]\npath = /", 16);
        snprintf(longline + 300, sizeof(longline) - 300, "\n[server]\nmax_clients = 0\n");
        r = load(longline, &c, err, sizeof(err));
        snprintf(want[5], sizeof(want[5]), "%s:2: line longer than", path);
        CHECK(r == -EINVAL && !strncmp(err, want[5], strlen(want[5])) &&
                      strstr(err, ":4: [server] max_clients") && !strstr(err, ":3:"),
              "a 300-byte line: %d '%s'", r, err);

        /* many errors: the first 16 with their lines, then a count */
        {
                char many[2048] = "[server]\n";

                for (int i = 0; i < 40; i++)
                        strcat(many, "max_clients = 0\n");
                r = load(many, &c, err, sizeof(err));
                snprintf(want[5], sizeof(want[5]), "%s:17: [server] max_clients", path);
                CHECK(r == -EINVAL && strstr(err, want[5]) && !strstr(err, ":18:") &&
                              strstr(err, ": 24 more errors"),
                      "40 bad lines: %d '%s'", r, err);
        }
}

static void test_not_a_file(void)
{
        struct m40d_config c;
        char err[512];
        int r;

        m40d_config_default(&c);
        r = m40d_config_load(&c, "/tmp", err, sizeof(err));
        CHECK(r == -EISDIR && strstr(err, "/tmp: cannot read: Is a directory"),
              "-c /tmp (a directory): %d '%s'", r, err);
        r = m40d_config_load(&c, "/nonexistent/m40d.ini", err, sizeof(err));
        CHECK(r == -ENOENT && strstr(err, "cannot read"), "a missing file: %d '%s'", r, err);
}

int main(int argc, char **argv)
{
        int fd;

        if (argc < 2)
                return 2;
        snprintf(path, sizeof(path), "/tmp/m40-config-test.XXXXXX");
        fd = mkstemp(path);
        if (fd < 0) {
                perror("mkstemp");
                return 1;
        }
        close(fd);
        test_shipped(argv[1]);
        test_vram_limit();
        test_prefill_chunk();
        test_step_timeout();
        test_mode();
        test_chain_steps();
        test_decode_width();
        test_sampling();
        test_errors();
        test_not_a_file();
        unlink(path);
        if (!failures)
                printf("ok: shipped m40d.ini = defaults; vram_limit_mb, prefill_chunk_tokens and "
                       "step_timeout_ms "
                       "valid and invalid values; [sampling] ranges as for requests; every error "
                       "on "
                       "its own "
                       "line; a directory refused\n");
        return failures ? 1 : 0;
}
