/* fuzz_ipc_entry.c - libFuzzer target over what the daemon decodes from a client's shared
 * region, under ASan and UBSan: m40_ipc_region_pop (daemon/ipc/region.c: the published
 * tail, each submission entry and its payload's place, copied out before they are
 * checked) and req_from_sub (daemon/m40d/request.c: the payload records, flags, limits,
 * sampling ranges, chat formatting in the template the input picks, tokenizing) on a real
 * region (a sealed memfd) and a scheduler of tiny in-memory vocabularies.
 *
 * Input (binary; the seeds in corpus/ipc_entry are hex text, see run-fuzz.sh):
 *   byte 0      bit 0: the vocabulary (SPM, BPE), bits 1..7: x, the chat template x mod
 *               count, with a default system message (as SmolLM2's) when x / count is odd
 *   byte 1      entries published (mod 9); bit 7: byte 2..5 are the tail instead
 *   bytes 2..5  a raw sub_tail (little-endian) when byte 1 bit 7
 *   bytes 6..7  where the payload bytes go in the payload area (mod its size)
 *   then        the entries, 96 bytes each (struct m40_proto_sub), then the payload bytes.
 * Properties: pop returns 1, 0 or M40_EPROTO and consumes at most the ring's entries;
 * req_from_sub either returns 0 with a request the engine would admit (1..max_ctx-1
 * prompt ids in range, max_tokens within the limit, sampling in range, stop strings
 * terminated) or a negative code with a non-empty message that fits an ERROR event. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampler.h"
#include "engine/seqs.h"
#include "ipc/ipc.h"
#include "m40/error.h"
#include "m40d/sched_impl.h"
#include "mini_vocab.h"

#define SUB_ENTRIES 8u
#define MAX_REQ     4096u
#define MAX_CTX     256u

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct m40_ipc_region g;
static struct m40_sched sched;
static struct m40_chat_template tmpl; /* sched.tmpl points here */
static char default_system[] = "You are a terse assistant.";
static struct m40_vocab *vocabs[2];
static uint8_t *buf;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
        struct gguf_mini spm = mini_spm_gguf(), bpe = mini_bpe_gguf("smollm", 1);
        char err[256];

        if (m40_ipc_region_init(&g, SUB_ENTRIES, 8, MAX_REQ) ||
            mini_vocab(&spm, &vocabs[0], err, sizeof(err)) ||
            mini_vocab(&bpe, &vocabs[1], err, sizeof(err)) || m40_tok_scratch_new(&sched.scratch))
                abort();
        m40d_config_default(&sched.cfg);
        sched.max_ctx = MAX_CTX;
        sched.toks = malloc(MAX_CTX * sizeof(int32_t));
        buf = malloc(MAX_REQ);
        if (!sched.toks || !buf)
                abort();
        return 0;
}

static void check_req(const struct req *r)
{
        const struct m40_seq_params *p = &r->p;
        const char *name, *range;

        if (!p->n_prompt || p->n_prompt >= MAX_CTX || p->prompt != r->prompt ||
            p->stop.max_tokens > sched.cfg.max_tokens || !p->stop.max_tokens ||
            m40_sampler_params_check(&p->sampling, &name, &range) ||
            p->stop.n_strings > M40_MAX_STOP_STRINGS || p->stop.n_ids > M40_MAX_STOP_IDS)
                abort();
        for (uint32_t i = 0; i < p->n_prompt; i++)
                if (p->prompt[i] < 0 || (uint32_t)p->prompt[i] >= m40_vocab_n_tokens(sched.v))
                        abort();
        for (uint32_t i = 0; i < p->stop.n_strings; i++)
                if (!p->stop.strings[i][0] || !memchr(p->stop.strings[i], 0, M40_MAX_STOP_LEN + 1))
                        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const uint32_t payload_bytes = g.layout.payload_bytes;
        struct m40_proto_sub sub;
        uint32_t n, tail, at;
        size_t used = 8;

        if (size < 8 || size > 8 + SUB_ENTRIES * sizeof(sub) + 2 * MAX_REQ)
                return 0;
        sched.v = vocabs[data[0] & 1];
        tmpl.tmpl = (enum m40_chat_tmpl)((data[0] >> 1) % M40_CHAT_TMPL_COUNT);
        tmpl.default_system = (data[0] >> 1) / M40_CHAT_TMPL_COUNT % 2 ? default_system : NULL;
        sched.tmpl = &tmpl;
        n = (data[1] & 0x7f) % (SUB_ENTRIES + 1);
        tail = n;
        if (data[1] & 0x80)
                memcpy(&tail, data + 2, 4);
        at = (uint32_t)(data[6] | data[7] << 8) % payload_bytes;

        /* a fresh region as a client would find it, then the client's writes */
        g.sub_head = g.payload_head = g.ev_tail = 0;
        memset(g.r, 0, sizeof(*g.r));
        memset(g.sub, 0, SUB_ENTRIES * sizeof(sub));
        memset(g.payload, 0, payload_bytes);
        for (uint32_t i = 0; i < n && used < size; i++) {
                size_t k = size - used < sizeof(sub) ? size - used : sizeof(sub);

                memcpy(&g.sub[i], data + used, k);
                used += k;
        }
        if (used < size) {
                size_t k = size - used;

                if (k > payload_bytes - at)
                        k = payload_bytes - at;
                memcpy(g.payload + at, data + used, k);
        }
        g.r->sub_tail.value = tail;

        for (uint32_t popped = 0;; popped++) {
                char why[M40_PROTO_TEXT_MAX + 1];
                struct req *r = NULL;
                int k = m40_ipc_region_pop(&g, &sub, buf);

                if (k == 0 || k == M40_EPROTO)
                        break;
                if (k != 1 || popped == SUB_ENTRIES)
                        abort(); /* more entries than the ring holds */
                if (sub.op != M40_PROTO_OP_SUBMIT)
                        continue; /* sched.c: CANCEL looks up an id, anything else breaks */
                k = req_from_sub(&sched, &sub, buf, &r, why, sizeof(why));
                if (k == 0) {
                        check_req(r);
                        req_free(r);
                } else if (k > 0 || !why[0] || strlen(why) > M40_PROTO_TEXT_MAX) {
                        abort();
                }
        }
        return 0;
}
