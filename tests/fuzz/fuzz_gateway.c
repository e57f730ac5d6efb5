/* fuzz_gateway.c - libFuzzer target over m40-gateway's request parsing (client/gateway:
 * parse.c, with render.c for what is answered from it), under ASan and UBSan. Input: one
 * selector byte, then the rest. The selector's low two bits pick the API whose body the rest
 * is (OpenAI chat, OpenAI completion, Ollama chat, Ollama generate); bit 2 instead takes the
 * rest as an Authorization header value and bit 3 as a model name. Properties:
 *   - a body parses to 0 or -EINVAL (jansson's allocations do not fail here); a refusal has
 *     a non-empty reason, and the error body built from it is valid JSON in the API's shape;
 *   - an accepted request is one m40d could take as libm40 checks it: a prompt or 1..1024
 *     messages of known roles with terminated content, at most 8 stop strings of 1..64
 *     bytes, sampling fields in their documented ranges, max_tokens <= 2^20; the records
 *     streamed and the whole answer rendered from it are valid JSON (NDJSON) or SSE;
 *   - the bearer check accepts exactly "Bearer " + the token (scheme in any case, spaces
 *     around the token), and the model match is the documented one. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "client/gateway/gateway.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char token[] = "0123456789abcdef0123";

static void check_json(const char *s, bool sse)
{
        json_t *j;

        if (!s)
                abort();
        if (sse) {
                /* "data: {...}\n\n" events, the last "data: [DONE]\n\n" at most */
                while (*s) {
                        const char *end = strstr(s, "\n\n");
                        char *one;

                        if (strncmp(s, "data: ", 6) || !end)
                                abort();
                        if (strncmp(s + 6, "[DONE]\n\n", 8)) {
                                one = strndup(s + 6, (size_t)(end - s - 6));
                                j = one ? json_loads(one, 0, NULL) : NULL;
                                if (one && !j)
                                        abort();
                                json_decref(j);
                                free(one);
                        }
                        s = end + 2;
                }
                return;
        }
        j = json_loads(s, JSON_DISABLE_EOF_CHECK, NULL);
        if (!j)
                abort();
        json_decref(j);
}

static void check_accepted(const struct m40gw_req *q)
{
        const struct m40_request *r = &q->rq;
        bool openai = q->api == M40GW_OPENAI_CHAT || q->api == M40GW_OPENAI_COMPLETION;
        struct m40gw_render rd;
        struct m40gw_usage u = {.n_prompt = 3, .n_generated = 2, .finish = M40_FINISHED_STOP};
        char *s;

        if (!q->model[0] || strlen(q->model) > M40GW_MAX_MODEL_LEN)
                abort();
        if (!q->load_only && !r->prompt == !r->n_messages)
                abort(); /* exactly one of a prompt and messages */
        if (r->n_messages > M40GW_MAX_MESSAGES)
                abort();
        for (size_t i = 0; i < r->n_messages; i++)
                if (!r->messages[i].content ||
                    (strcmp(r->messages[i].role, "system") && strcmp(r->messages[i].role, "user") &&
                     strcmp(r->messages[i].role, "assistant")))
                        abort();
        if (r->n_stop > M40GW_MAX_STOPS)
                abort();
        for (size_t i = 0; i < r->n_stop; i++)
                if (!r->stop[i][0] || strlen(r->stop[i]) > M40GW_MAX_STOP_LEN)
                        abort();
        if (r->max_tokens > (1u << 20) || !isfinite(r->temperature) || r->temperature < 0 ||
            r->temperature > 100 || r->top_p < 0 || r->top_p > 1 || r->min_p < 0 || r->min_p > 1 ||
            r->repeat_penalty < 0.01f || r->repeat_penalty > 100 || r->presence_penalty < -2 ||
            r->presence_penalty > 2 || r->frequency_penalty < -2 || r->frequency_penalty > 2 ||
            r->top_k < 0)
                abort();
        m40gw_render_init(&rd, q->api, q->model, q->include_usage);
        s = m40gw_render_piece(&rd, "piece \"\\\n", 9);
        check_json(s, openai);
        free(s);
        s = m40gw_render_end(&rd, &u);
        check_json(s, openai);
        free(s);
        s = m40gw_render_whole(&rd, "text", 4, &u);
        check_json(s, false);
        free(s);
}

static void fuzz_body(enum m40gw_api api, const char *body, size_t n)
{
        struct m40gw_req q;
        char why[256], param[32];
        int r = m40gw_req_parse(api, body, n, &q, why, sizeof(why), param, sizeof(param));

        if (r == 0) {
                check_accepted(&q);
        } else if (r == -EINVAL) {
                char *e;
                json_t *j;

                if (!why[0] || strnlen(why, sizeof(why)) == sizeof(why))
                        abort();
                e = m40gw_render_error(api, 400, why, param, false);
                j = e ? json_loads(e, 0, NULL) : NULL;
                if (!j)
                        abort();
                if (api == M40GW_OPENAI_CHAT || api == M40GW_OPENAI_COMPLETION
                            ? !json_is_string(
                                      json_object_get(json_object_get(j, "error"), "message"))
                            : !json_is_string(json_object_get(j, "error")))
                        abort();
                json_decref(j);
                free(e);
        } else {
                abort();
        }
        m40gw_req_done(&q);
}

static void fuzz_bearer(const char *hdr)
{
        const char *t = hdr + (strncasecmp(hdr, "Bearer ", 7) ? 0 : 7);
        bool want;
        size_t n;

        while (*t == ' ')
                t++;
        n = strlen(t);
        while (n && (t[n - 1] == ' ' || t[n - 1] == '\t'))
                n--;
        want = !strncasecmp(hdr, "Bearer ", 7) && n == strlen(token) && !strncmp(t, token, n);
        if (m40gw_bearer_ok(hdr, token) != want)
                abort();
}

static void fuzz_model(const char *name)
{
        static const char file[] = "Model-1.Q4_1.gguf";
        bool want = !strcmp(name, "Model-1.Q4_1") || !strcmp(name, file) ||
                    !strcmp(name, "Model-1.Q4_1:latest");
        char id[64];

        if (m40gw_model_match(name, file) != want)
                abort();
        m40gw_model_id(file, id, sizeof(id));
        if (strcmp(id, "Model-1.Q4_1"))
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        char *s;

        if (!size)
                return 0;
        if (!(data[0] & 12)) {
                fuzz_body((enum m40gw_api)(M40GW_OPENAI_CHAT + (data[0] & 3)),
                          (const char *)data + 1, size - 1);
                return 0;
        }
        s = strndup((const char *)data + 1, size - 1);
        if (!s)
                return 0;
        if (data[0] & 4)
                fuzz_bearer(s);
        else
                fuzz_model(s);
        free(s);
        return 0;
}
