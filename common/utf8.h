/* UTF-8 validation and repair for text that goes on the wire. */
#ifndef SBX_UTF8_H
#define SBX_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* True when the n bytes are valid UTF-8 (no NUL handling: NUL is valid). */
bool utf8_valid(const char *s, size_t n);

/* A malloc'd NUL-terminated copy in which every invalid sequence, and every
 * NUL byte, is replaced by U+FFFD. NULL only on allocation failure. */
char *utf8_sanitize(const char *s, size_t n);

/* The last at most max bytes of the n bytes at s, repaired as
 * utf8_sanitize does, as a malloc'd NUL-terminated string of at most max
 * bytes that starts on a character boundary (a character cut by the start
 * of the window is left out, never half kept). NULL only on allocation
 * failure. */
char *utf8_tail(const char *s, size_t n, size_t max);

/* True when the NUL-terminated s holds an ASCII control character (below
 * 0x20, or DEL): not for headers, URLs, tokens or terminals. */
bool utf8_has_control(const char *s);

#endif
