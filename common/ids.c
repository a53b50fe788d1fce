/* Random prefixed identifiers. */
#include "ids.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>

static const char b32[] = "abcdefghijklmnopqrstuvwxyz234567";

size_t ids_base32(const unsigned char *in, size_t n, char *out)
{
    size_t o = 0;
    unsigned buf = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        buf = (buf << 8) | in[i];
        bits += 8;
        while (bits >= 5) {
            out[o++] = b32[(buf >> (bits - 5)) & 31];
            bits -= 5;
        }
    }
    if (bits > 0)
        out[o++] = b32[(buf << (5 - bits)) & 31];
    out[o] = '\0';
    return o;
}

void ids_new(const char *prefix, char out[SBX_ID_MAX])
{
    unsigned char raw[16];
    char enc[32];
    randombytes_buf(raw, sizeof raw);
    ids_base32(raw, sizeof raw, enc); /* 26 chars */
    snprintf(out, SBX_ID_MAX, "%s_%s", prefix, enc);
}

bool ids_valid(const char *prefix, const char *s)
{
    if (!s)
        return false;
    size_t pl = strlen(prefix);
    if (strncmp(s, prefix, pl) != 0 || s[pl] != '_')
        return false;
    const char *r = s + pl + 1;
    if (strlen(r) != 26)
        return false;
    for (; *r; r++)
        if (!strchr(b32, *r))
            return false;
    return true;
}
