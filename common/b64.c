/* Standard base64 over libsodium's codec, with the bounds Sandbox needs. */
#include "b64.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "utf8.h"

size_t b64_encoded_len(size_t n) { return (n + 2) / 3 * 4; }

char *b64_encode(const void *p, size_t n)
{
    size_t cap = sodium_base64_encoded_len(n, sodium_base64_VARIANT_ORIGINAL);
    char *s = malloc(cap);
    if (!s)
        return NULL;
    sodium_bin2base64(s, cap, (const unsigned char *)(n ? p : ""), n, sodium_base64_VARIANT_ORIGINAL);
    return s;
}

int b64_decode(const char *s, size_t slen, size_t max, char **ret, size_t *ret_len)
{
    if (slen % 4 != 0)
        return SBX_EINVAL;
    size_t cap = slen / 4 * 3;
    if (cap > max + 2)
        return SBX_ETOOBIG;
    char *buf = malloc(cap + 1);
    if (!buf)
        return SBX_ENOMEM;
    size_t n = 0;
    const char *end = NULL;
    if (sodium_base642bin((unsigned char *)buf, cap, s, slen, NULL, &n, &end, sodium_base64_VARIANT_ORIGINAL) != 0 ||
        end != s + slen) {
        free(buf);
        return SBX_EINVAL;
    }
    if (n > max) {
        free(buf);
        return SBX_ETOOBIG;
    }
    buf[n] = '\0';
    *ret = buf;
    *ret_len = n;
    return 0;
}

int b64_json_add_bytes(json_object *o, const char *key, const char *p, size_t n)
{
    char *text = utf8_sanitize(n ? p : "", n);
    if (!text)
        return SBX_ENOMEM;
    json_object_object_add(o, key, json_object_new_string(text));
    free(text);
    if (b64_text_exact(p, n))
        return 0;
    char *enc = b64_encode(p, n), k[64];
    if (!enc)
        return SBX_ENOMEM;
    snprintf(k, sizeof k, "%s_b64", key);
    json_object_object_add(o, k, json_object_new_string(enc));
    free(enc);
    return 0;
}

bool b64_text_exact(const char *p, size_t n)
{
    return n == 0 || (memchr(p, '\0', n) == NULL && utf8_valid(p, n));
}
