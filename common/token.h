/* API tokens: "sbt_<id>_<secret>"; only the BLAKE2b hash of the whole token
 * is stored, and it is compared in constant time. */
#ifndef SBX_TOKEN_H
#define SBX_TOKEN_H

#include <stdbool.h>
#include <stddef.h>
#include "limits.h"

#define TOKEN_HASH_BYTES 32
#define TOKEN_HASH_HEX   (TOKEN_HASH_BYTES * 2 + 1)

/* Makes a new token: its id ("tok_…") and the full secret string to show
 * once. Requires sodium_init. */
void token_generate(char ret_id[SBX_ID_MAX], char ret_secret[SBX_TOKEN_MAX]);

/* Makes a route access token, "sbr_" + 43 base64url characters: not an
 * API token (no id, no role), only ever compared with one route's hash. */
void token_generate_route(char ret_secret[SBX_TOKEN_MAX]);

/* Extracts the token id from a presented token; SBX_EINVAL when malformed. */
int token_parse_id(const char *token, char ret_id[SBX_ID_MAX]);

/* Lowercase hex BLAKE2b-256 of the token. */
void token_hash_hex(const char *token, char ret_hex[TOKEN_HASH_HEX]);

/* True when token hashes to stored_hex; constant time in the hash bytes. */
bool token_verify(const char *token, const char *stored_hex);

#endif
