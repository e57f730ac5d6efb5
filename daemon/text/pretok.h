/* pretok.h - BPE pre-tokenizers: the regex sets llama.cpp applies, by tokenizer.ggml.pre,
 * to split text into words before byte-level BPE (internal to daemon/text).
 *
 * The regexes are llama.cpp's own strings (one rewritten to an equivalent that needs no
 * backtracking frame per letter, see pretok.c), run with PCRE2 (UTF + UCP, JIT when
 * available).
 * Two translations keep the match sets identical to llama.cpp's: \s becomes the Unicode
 * White_Space set llama.cpp uses (PCRE2's \s lacks U+0085), and \d becomes [0-9] (ECMAScript's
 * \d, which llama.cpp's std::regex has). Each regex splits every piece the previous one left;
 * text between matches stays a piece of its own, as in llama.cpp's unicode_regex_split.
 *
 * llama.cpp classifies code points with Unicode 15.1 tables; Debian 12's PCRE2 (10.42) has
 * Unicode 14, to which the 5116 code points assigned in 15.0 and 15.1 are unassigned. When
 * PCRE2 is older than 15, m40_pretok_substitute() names, for each of those, a stand-in of
 * the same general category and UTF-8 length that PCRE2 does know; the caller hands the
 * regexes a copy of the text with the stand-ins (47 ranges, listed in pretok.c). Code points
 * assigned after Unicode 15.1 may still be classified differently from llama.cpp when PCRE2
 * is newer than that. */
#ifndef M40_TEXT_PRETOK_H
#define M40_TEXT_PRETOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct m40_pretok;
struct m40_pretok_work;

/* The vocabulary flags a pre-tokenizer implies (llama.cpp sets them by tokenizer.ggml.pre). */
struct m40_pretok_flags {
        bool ignore_merges;  /* a word that is a whole token is taken as is */
        bool clean_spaces;   /* detokenization removes spaces before punctuation */
        bool add_bos;        /* BOS is added unless tokenizer.ggml.add_bos_token says no */
        bool no_default_bos; /* llama.cpp's default BOS id does not apply */
};

struct m40_piece {
        size_t off, len;
};

/* m40_pretok_new - the pre-tokenizer named pre ("" or "default": llama.cpp's default set).
 * Returns 0, a new object in *ret and the implied flags in *ret_flags; M40_EUNSUPPORTED with
 * a message naming pre when we do not implement it; M40_EFORMAT when PCRE2 rejects a regex
 * (a bug), -ENOMEM. */
int m40_pretok_new(const char *pre, struct m40_pretok **ret, struct m40_pretok_flags *ret_flags,
                   char *err, size_t errlen);
struct m40_pretok *m40_pretok_free(struct m40_pretok *p);

/* m40_pretok_substitute - the stand-in the regexes should see for cpt, or 0 when cpt needs
 * none (always 0 when PCRE2 knows Unicode 15.1). */
uint32_t m40_pretok_substitute(const struct m40_pretok *p, uint32_t cpt);
/* m40_pretok_needs_copy - whether the valid UTF-8 text s[0..n) holds a code point that
 * m40_pretok_substitute() replaces. */
bool m40_pretok_needs_copy(const struct m40_pretok *p, const char *s, size_t n);

/* m40_pretok_split - splits the n bytes at text (valid UTF-8) into words: returns 0 with
 * *ret_pieces (offsets into text, owned by *work, valid until its next use) and *ret_n;
 * -ENOMEM, or -EIO when PCRE2 fails (resource limits). *work is scratch memory made on first
 * use and reused; free it with m40_pretok_work_free(). */
int m40_pretok_split(const struct m40_pretok *p, const char *text, size_t n,
                     struct m40_pretok_work **work, const struct m40_piece **ret_pieces,
                     size_t *ret_n);
struct m40_pretok_work *m40_pretok_work_free(struct m40_pretok_work *w);

#endif
