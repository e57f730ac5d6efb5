/* utf8.c - UTF-8 encoding, llama.cpp-compatible lenient decoding and strict validation
 * (see utf8.h). */
#include "text/utf8.h"

size_t m40_utf8_encode(uint32_t cpt, char out[4])
{
        if (cpt < 0x80) {
                out[0] = (char)cpt;
                return 1;
        }
        if (cpt < 0x800) {
                out[0] = (char)(0xC0 | (cpt >> 6));
                out[1] = (char)(0x80 | (cpt & 0x3F));
                return 2;
        }
        if (cpt < 0x10000) {
                out[0] = (char)(0xE0 | (cpt >> 12));
                out[1] = (char)(0x80 | ((cpt >> 6) & 0x3F));
                out[2] = (char)(0x80 | (cpt & 0x3F));
                return 3;
        }
        out[0] = (char)(0xF0 | (cpt >> 18));
        out[1] = (char)(0x80 | ((cpt >> 12) & 0x3F));
        out[2] = (char)(0x80 | ((cpt >> 6) & 0x3F));
        out[3] = (char)(0x80 | (cpt & 0x3F));
        return 4;
}

static int is_cont(uint8_t c)
{
        return (c & 0xC0) == 0x80;
}

uint32_t m40_utf8_decode_lenient(const uint8_t *s, size_t n, size_t *adv)
{
        uint8_t c = s[0];
        uint32_t cpt;

        *adv = 1;
        if (!(c & 0x80))
                return c;
        if (!(c & 0x40))
                return M40_UTF8_REPLACEMENT;
        if (!(c & 0x20)) {
                if (n < 2 || !is_cont(s[1]))
                        return M40_UTF8_REPLACEMENT;
                *adv = 2;
                return ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
        }
        if (!(c & 0x10)) {
                if (n < 3 || !is_cont(s[1]) || !is_cont(s[2]))
                        return M40_UTF8_REPLACEMENT;
                *adv = 3;
                return ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) |
                       (s[2] & 0x3F);
        }
        if (!(c & 0x08)) {
                if (n < 4 || !is_cont(s[1]) || !is_cont(s[2]) || !is_cont(s[3]))
                        return M40_UTF8_REPLACEMENT;
                cpt = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
                      ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
                if (cpt > 0x10FFFF)
                        return M40_UTF8_REPLACEMENT;
                *adv = 4;
                return cpt;
        }
        return M40_UTF8_REPLACEMENT;
}

/* The valid second-byte range for each lead byte (Unicode Table 3-7); 0 marks an invalid
 * lead. The remaining continuation bytes are always 0x80-0xBF. */
static void second_range(uint8_t c, uint8_t *lo, uint8_t *hi, int *len)
{
        *lo = 0x80;
        *hi = 0xBF;
        *len = 0;
        if (c >= 0xC2 && c <= 0xDF)
                *len = 2;
        else if (c >= 0xE0 && c <= 0xEF)
                *len = 3;
        else if (c >= 0xF0 && c <= 0xF4)
                *len = 4;
        if (c == 0xE0)
                *lo = 0xA0;
        else if (c == 0xED)
                *hi = 0x9F;
        else if (c == 0xF0)
                *lo = 0x90;
        else if (c == 0xF4)
                *hi = 0x8F;
}

int m40_utf8_check(const uint8_t *s, size_t n)
{
        uint8_t lo, hi;
        int len;

        if (s[0] < 0x80)
                return 1;
        second_range(s[0], &lo, &hi, &len);
        if (len == 0)
                return -1;
        for (int i = 1; i < len; i++) {
                if ((size_t)i >= n)
                        return 0;
                if (i == 1 ? (s[1] < lo || s[1] > hi) : !is_cont(s[i]))
                        return -i;
        }
        return len;
}

size_t m40_utf8_valid_len(const uint8_t *s, size_t n)
{
        size_t i = 0;

        while (i < n) {
                if (s[i] < 0x80) {
                        i++;
                        continue;
                }
                int r = m40_utf8_check(s + i, n - i);
                if (r <= 0)
                        break;
                i += (size_t)r;
        }
        return i;
}
