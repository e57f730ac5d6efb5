/* mini_vocab.h - two tiny vocabularies built in memory (an SPM one and a byte-level BPE
 * one), so unit tests and the fuzzer need no model file. Header-only test code. */
#ifndef M40_TESTS_TEXT_MINI_VOCAB_H
#define M40_TESTS_TEXT_MINI_VOCAB_H

#include "gguf_mini.h"
#include "model/gguf.h"
#include "text/utf8.h"
#include "text/vocab.h"

/* SPM: <unk> <s> </s>, the 256 byte tokens, then these pieces (scores rise with length). */
static const char *const mini_spm_pieces[] = {
        "\xE2\x96\x81",
        "a",
        "b",
        "c",
        "\342\226\201a",
        "ab",
        "\342\226\201ab",
        "\342\226\201b",
        "bc",
        "abc",
        "\342\226\201abc",
        "\xC3\xA9",
        "<|user|>",
};

/* BPE: the 256 GPT-2 byte tokens, "<|endoftext|>", then the merge results below. */
static const char *const mini_bpe_merges[] = {
        "t h",         "th e", "\xC4\xA0 the", "\xC4\xA0 a", "i n",
        "\xC4\xA0 in", "1 2",  "e r",          "a \xC3\xB0", /* 'a' + the lead byte of a 4-byte
                                                                character */
};
static const char *const mini_bpe_results[] = {
        "th", "the", "\xC4\xA0the", "\304\240a", "in", "\xC4\xA0in", "12", "er", "a\xC3\xB0",
};

static inline struct gguf_mini mini_spm_gguf(void)
{
        enum { NP = sizeof(mini_spm_pieces) / sizeof(mini_spm_pieces[0]), N = 3 + 256 + NP };
        static char bytes[256][7];
        const char *toks[N];
        float scores[N];
        int32_t types[N];
        struct gguf_mini g;

        toks[0] = "<unk>";
        toks[1] = "<s>";
        toks[2] = "</s>";
        types[0] = 2;
        types[1] = types[2] = 3;
        for (int b = 0; b < 256; b++) {
                snprintf(bytes[b], sizeof(bytes[b]), "<0x%02X>", b);
                toks[3 + b] = bytes[b];
                types[3 + b] = 6;
        }
        for (int i = 0; i < NP; i++) {
                toks[259 + i] = mini_spm_pieces[i];
                types[259 + i] = i == NP - 1 ? 4 : 1;
        }
        for (int i = 0; i < N; i++)
                scores[i] = i < 259 ? 0.0f : (float)strlen(toks[i]);
        gm_begin(&g);
        gm_kv_str(&g, "general.architecture", "llama");
        gm_kv_str(&g, "tokenizer.ggml.model", "llama");
        gm_kv_strs(&g, "tokenizer.ggml.tokens", toks, NULL, N);
        gm_kv_f32s(&g, "tokenizer.ggml.scores", scores, N);
        gm_kv_i32s(&g, "tokenizer.ggml.token_type", types, N);
        gm_kv_u32(&g, "tokenizer.ggml.bos_token_id", 1);
        gm_kv_u32(&g, "tokenizer.ggml.eos_token_id", 2);
        gm_kv_str(&g, "tokenizer.chat_template", "llama2");
        gm_end(&g);
        return g;
}

/* mini_bpe_gguf - pre is tokenizer.ggml.pre (NULL: absent); merges: include the merges. */
static inline struct gguf_mini mini_bpe_gguf(const char *pre, int merges)
{
        enum { NM = sizeof(mini_bpe_merges) / sizeof(mini_bpe_merges[0]), N = 256 + 1 + NM };
        static char enc[256][4];
        const char *toks[N];
        size_t lens[N];
        int32_t types[N];
        struct gguf_mini g;

        for (int b = 0; b < 256; b++) {
                uint32_t cpt = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE
                                       ? (uint32_t)b
                                       : 0;
                if (!cpt) { /* the n-th byte that is not its own code point maps to 256 + n */
                        uint32_t n = 0;
                        for (int c = 0; c < b; c++)
                                n += !((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) ||
                                       c >= 0xAE);
                        cpt = 256 + n;
                }
                lens[b] = m40_utf8_encode(cpt, enc[b]);
                toks[b] = enc[b];
                types[b] = 1;
        }
        toks[256] = "<|endoftext|>";
        lens[256] = strlen(toks[256]);
        types[256] = 3;
        for (int i = 0; i < NM; i++) {
                toks[257 + i] = mini_bpe_results[i];
                lens[257 + i] = strlen(toks[257 + i]);
                types[257 + i] = 1;
        }
        gm_begin(&g);
        gm_kv_str(&g, "general.architecture", "llama");
        gm_kv_str(&g, "tokenizer.ggml.model", "gpt2");
        if (pre)
                gm_kv_str(&g, "tokenizer.ggml.pre", pre);
        gm_kv_strs(&g, "tokenizer.ggml.tokens", toks, lens, N);
        gm_kv_i32s(&g, "tokenizer.ggml.token_type", types, N);
        if (merges)
                gm_kv_strs(&g, "tokenizer.ggml.merges", mini_bpe_merges, NULL, NM);
        gm_kv_u32(&g, "tokenizer.ggml.bos_token_id", 256);
        gm_kv_u32(&g, "tokenizer.ggml.eos_token_id", 256);
        gm_kv_bool(&g, "tokenizer.ggml.add_bos_token", 0);
        gm_end(&g);
        return g;
}

/* mini_vocab - a vocabulary from an image; returns 0 or the error of either step. */
static inline int mini_vocab(struct gguf_mini *img, struct m40_vocab **ret, char *err,
                             size_t errlen)
{
        struct m40_gguf *g = NULL;
        int e = m40_gguf_open_mem(img->p, img->n, "mini", &g, err, errlen);

        if (!e)
                e = m40_vocab_new(g, ret, err, errlen);
        m40_gguf_free(g);
        free(img->p);
        img->p = NULL;
        return e;
}

#endif
