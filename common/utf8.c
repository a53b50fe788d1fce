/* UTF-8 validation and repair (replacement character for invalid bytes). */
#include "utf8.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid sequence starting at s (at most n bytes), or 0. */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; }
    else return 0;
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    if (cp >= 0xD800 && cp <= 0xDFFF)
        return 0;
    return len;
}

bool utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t l = utf8_seq_len(p + i, n - i);
        if (!l)
            return false;
        i += l;
    }
    return true;
}

char *utf8_sanitize(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    /* Worst case every byte becomes 3 bytes of U+FFFD. */
    if (n > (SIZE_MAX - 1) / 3)
        return NULL;
    char *out = malloc(n * 3 + 1);
    if (!out)
        return NULL;
    size_t o = 0, i = 0;
    while (i < n) {
        size_t l = p[i] ? utf8_seq_len(p + i, n - i) : 0;
        if (l) {
            for (size_t k = 0; k < l; k++)
                out[o++] = (char)p[i + k];
            i += l;
        } else {
            out[o++] = (char)0xEF;
            out[o++] = (char)0xBF;
            out[o++] = (char)0xBD;
            i++;
        }
    }
    out[o] = '\0';
    return out;
}

bool utf8_has_control(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return true;
    return false;
}

char *utf8_tail(const char *s, size_t n, size_t max)
{
    size_t start = n > max ? n - max : 0;
    /* Continuation bytes at the window's start belong to a cut character. */
    while (start < n && start > 0 && ((unsigned char)s[start] & 0xC0) == 0x80)
        start++;
    char *fixed = utf8_sanitize(s + start, n - start);
    if (!fixed)
        return NULL;
    size_t len = strlen(fixed);
    if (len <= max)
        return fixed;
    /* Repair grew it (each bad byte is 3 bytes of U+FFFD): keep the end
     * again, now from valid UTF-8, so only boundaries need care. */
    size_t cut = len - max;
    while (cut < len && ((unsigned char)fixed[cut] & 0xC0) == 0x80)
        cut++;
    memmove(fixed, fixed + cut, len - cut + 1);
    return fixed;
}
