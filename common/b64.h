/* Standard base64 (RFC 4648, padded) for bytes that travel in JSON: exec
 * stdin and output that is not text. */
#ifndef SBX_B64_H
#define SBX_B64_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

/* The encoded length of n bytes, without the NUL. */
size_t b64_encoded_len(size_t n);

/* A malloc'd NUL-terminated base64 of the n bytes at p (p may be NULL when
 * n is 0). NULL only on allocation failure. */
char *b64_encode(const void *p, size_t n);

/* Decodes the slen characters at s into a malloc'd buffer (*ret, owned by
 * the caller, NUL-terminated for convenience; *ret_len bytes). The input
 * must be padded standard base64 without whitespace. SBX_EINVAL when it is
 * not, SBX_ETOOBIG when it decodes to more than max bytes, SBX_ENOMEM. */
int b64_decode(const char *s, size_t slen, size_t max, char **ret, size_t *ret_len);

/* Adds the n bytes at p to o as key, UTF-8 text (utf8_sanitize), and, when
 * that text is not exactly them (b64_text_exact), as key + "_b64" in
 * base64 too: how exec output goes into JSON. 0 or SBX_ENOMEM. */
int b64_json_add_bytes(json_object *o, const char *key, const char *p, size_t n);

/* True when the n bytes read the same as their text form (utf8_sanitize):
 * valid UTF-8 without NUL bytes. False means a JSON string cannot carry
 * them exactly and a base64 form is needed. */
bool b64_text_exact(const char *p, size_t n);

#endif
