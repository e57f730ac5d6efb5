/* tests/model_file.h - the parsed model files of a test program: engines take a parsed
 * GGUF (struct m40_gguf, borrowed for the engine's life), and tests make and free engines
 * in any order, so test_model_file() parses each path once and keeps it until the program
 * exits. Include once per test program, after the system headers. */
#ifndef M40_TESTS_MODEL_FILE_H
#define M40_TESTS_MODEL_FILE_H

#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"

#define TEST_MODEL_FILES 16

static struct {
        char *path;
        struct m40_gguf *g;
} test_model_files[TEST_MODEL_FILES];

static void test_model_files_free(void)
{
        for (int i = 0; i < TEST_MODEL_FILES; i++) {
                m40_gguf_free(test_model_files[i].g);
                free(test_model_files[i].path);
        }
}

/* test_model_file - the GGUF at path, parsed on the first call for that path; NULL with a
 * message in err when it cannot be (an engine given NULL returns -EINVAL, and err keeps the
 * reason). */
static struct m40_gguf *test_model_file(const char *path, char *err, size_t errlen)
{
        static int registered;
        int i;

        for (i = 0; i < TEST_MODEL_FILES && test_model_files[i].path; i++)
                if (!strcmp(test_model_files[i].path, path))
                        return test_model_files[i].g;
        if (i == TEST_MODEL_FILES) {
                snprintf(err, errlen, "%s: more than %d model files in one test", path,
                         TEST_MODEL_FILES);
                return NULL;
        }
        if (!registered)
                registered = atexit(test_model_files_free) == 0;
        if (m40_gguf_open(path, &test_model_files[i].g, err, errlen))
                return NULL;
        test_model_files[i].path = strdup(path);
        if (!test_model_files[i].path) {
                test_model_files[i].g = m40_gguf_free(test_model_files[i].g);
                snprintf(err, errlen, "out of memory");
        }
        return test_model_files[i].g;
}

#endif
