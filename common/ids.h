/* Random, prefixed, URL-safe identifiers (libsodium randomness). */
#ifndef SBX_IDS_H
#define SBX_IDS_H

#include <stdbool.h>
#include <stddef.h>
#include "limits.h"

/* Writes "<prefix>_<26 lowercase base32 chars>" into out (SBX_ID_MAX bytes).
 * prefix is short ("sbx", "op", "wrk", "tok", "tnt"). Requires sodium_init. */
void ids_new(const char *prefix, char out[SBX_ID_MAX]);

/* True when s looks like an id with that prefix (format only). */
bool ids_valid(const char *prefix, const char *s);

/* Lowercase RFC 4648 base32 without padding of n bytes into out (which must
 * hold n*8/5+2 bytes); returns the length written. */
size_t ids_base32(const unsigned char *in, size_t n, char *out);

#endif
