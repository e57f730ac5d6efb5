/* utf8.h - UTF-8 helpers for the tokenizers and the detokenizer (internal to daemon/text).
 *
 * Two decoders live here on purpose. The lenient one reproduces exactly how llama.cpp reads
 * text before BPE pre-tokenization (so token ids match it on any input, valid or not). The
 * strict one (Unicode 15 conformance, "maximal subpart" replacement) guards what leaves
 * the detokenizer: clients never receive invalid UTF-8. */
#ifndef M40_TEXT_UTF8_H
#define M40_TEXT_UTF8_H

#include <stddef.h>
#include <stdint.h>

#define M40_UTF8_REPLACEMENT     0xFFFDu
#define M40_UTF8_REPLACEMENT_STR "\xEF\xBF\xBD"

/* m40_utf8_seq_len - the sequence length a lead byte announces, the way llama.cpp's
 * unicode_len_utf8 computes it from the high nibble: 1 for ASCII and stray continuation
 * bytes, 2 for 0xC0-0xDF, 3 for 0xE0-0xEF, 4 for 0xF0-0xFF. */
static inline size_t m40_utf8_seq_len(uint8_t c)
{
        static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};

        return lookup[c >> 4];
}

/* m40_utf8_encode - writes cpt (< 0x110000, surrogates allowed) as UTF-8 into out; returns
 * the byte count (1-4). */
size_t m40_utf8_encode(uint32_t cpt, char out[4]);

/* m40_utf8_decode_lenient - decodes one code point at s[0..n) (n >= 1) with llama.cpp's
 * rules: overlong forms and surrogates are accepted as decoded; a byte that does not start a
 * complete sequence (bad lead, missing or bad continuation bytes) decodes as U+FFFD and
 * consumes one byte. Sequences that decode past U+10FFFF (llama.cpp throws on those) are
 * treated like a bad lead byte. Stores the byte count consumed in *adv; returns the code
 * point. */
uint32_t m40_utf8_decode_lenient(const uint8_t *s, size_t n, size_t *adv);

/* m40_utf8_valid_len - the length of the longest prefix of s[0..n) that is strictly valid
 * UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF). */
size_t m40_utf8_valid_len(const uint8_t *s, size_t n);

/* m40_utf8_check - classifies the bytes at s[0..n) (n >= 1) strictly:
 *   > 0: a complete valid sequence of that many bytes starts at s;
 *   0:   s holds a valid but incomplete prefix of a sequence (more bytes may complete it);
 *   < 0: invalid; the negated value is the length of the maximal subpart to replace with
 *        one U+FFFD (Unicode 15, section 3.9, "U+FFFD substitution of maximal subparts"). */
int m40_utf8_check(const uint8_t *s, size_t n);

#endif
