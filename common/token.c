/* Token generation, hashing and verification with libsodium. */
#include "token.h"
#include "errors.h"
#include "ids.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>

void token_generate(char ret_id[SBX_ID_MAX], char ret_secret[SBX_TOKEN_MAX])
{
    unsigned char raw[32];
    char enc[64];
    ids_new("tok", ret_id);
    randombytes_buf(raw, sizeof raw);
    sodium_bin2base64(enc, sizeof enc, raw, sizeof raw, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    sodium_memzero(raw, sizeof raw);
    /* "sbt_" + the id's random part + "_" + secret */
    snprintf(ret_secret, SBX_TOKEN_MAX, "sbt_%s_%s", ret_id + 4, enc);
    sodium_memzero(enc, sizeof enc);
}

void token_generate_route(char ret_secret[SBX_TOKEN_MAX])
{
    unsigned char raw[32];
    char enc[64];
    randombytes_buf(raw, sizeof raw);
    sodium_bin2base64(enc, sizeof enc, raw, sizeof raw, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    sodium_memzero(raw, sizeof raw);
    snprintf(ret_secret, SBX_TOKEN_MAX, "sbr_%s", enc);
    sodium_memzero(enc, sizeof enc);
}

int token_parse_id(const char *token, char ret_id[SBX_ID_MAX])
{
    if (!token || strncmp(token, "sbt_", 4) != 0)
        return SBX_EINVAL;
    const char *p = token + 4;
    const char *us = strchr(p, '_');
    if (!us || us - p != 26 || strlen(us + 1) != 43)
        return SBX_EINVAL;
    char id[SBX_ID_MAX];
    snprintf(id, sizeof id, "tok_%.26s", p);
    if (!ids_valid("tok", id))
        return SBX_EINVAL;
    memcpy(ret_id, id, strlen(id) + 1);
    return 0;
}

void token_hash_hex(const char *token, char ret_hex[TOKEN_HASH_HEX])
{
    unsigned char h[TOKEN_HASH_BYTES];
    crypto_generichash(h, sizeof h, (const unsigned char *)token, strlen(token), NULL, 0);
    sodium_bin2hex(ret_hex, TOKEN_HASH_HEX, h, sizeof h);
}

bool token_verify(const char *token, const char *stored_hex)
{
    unsigned char h[TOKEN_HASH_BYTES], stored[TOKEN_HASH_BYTES];
    size_t bin_len = 0;
    if (!token || !stored_hex)
        return false;
    if (sodium_hex2bin(stored, sizeof stored, stored_hex, strlen(stored_hex), NULL, &bin_len, NULL) != 0 ||
        bin_len != sizeof stored)
        return false;
    crypto_generichash(h, sizeof h, (const unsigned char *)token, strlen(token), NULL, 0);
    return sodium_memcmp(h, stored, sizeof h) == 0;
}
