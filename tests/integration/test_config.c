/* test_config.c - m40d's configuration (daemon/m40d/config.c): the shipped m40d.ini spells
 * out exactly the built-in defaults; [engine] vram_limit_mb takes 0 (no cap) up to
 * 16777216 MiB and refuses anything else with an error naming the file, the line and the
 * key; [engine] prefill_chunk_tokens takes 0..65536 (default M40_PREFILL_CHUNK_DEFAULT)
 * likewise.
 *
 *   test_config M40D.INI (the shipped file). Exit 0 pass, 1 fail. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
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

static void test_prefill_chunk(void)
{
        static const uint32_t good[] = {0, 1, 32, 256, 65536};
        static const char *const bad[] = {"-1", "65537", "abc", "32k", ""};
        struct m40d_config c;
        char ini[256], err[1024], want[128];
        int r;

        m40d_config_default(&c);
        CHECK(c.prefill_chunk_tokens == M40_PREFILL_CHUNK_DEFAULT,
              "prefill_chunk_tokens default %u, want %u", c.prefill_chunk_tokens,
              M40_PREFILL_CHUNK_DEFAULT);
        for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
                snprintf(ini, sizeof(ini), "[engine]\nprefill_chunk_tokens = %u\n", good[i]);
                r = load(ini, &c, err, sizeof(err));
                CHECK(r == 0 && c.prefill_chunk_tokens == good[i],
                      "prefill_chunk_tokens = %u: %d (%s), got %u", good[i], r, err,
                      c.prefill_chunk_tokens);
        }
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                snprintf(ini, sizeof(ini), "[engine]\nprefill_chunk_tokens = %s\n", bad[i]);
                r = load(ini, &c, err, sizeof(err));
                snprintf(want, sizeof(want), "%s:2: [engine] prefill_chunk_tokens: ", path);
                CHECK(r == -EINVAL && !strncmp(err, want, strlen(want)) && strstr(err, "0..65536"),
                      "prefill_chunk_tokens = '%s': %d, message '%s'", bad[i], r, err);
        }
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
        unlink(path);
        if (!failures)
                printf("ok: shipped m40d.ini = defaults; vram_limit_mb and prefill_chunk_tokens "
                       "valid and invalid values\n");
        return failures ? 1 : 0;
}
