/* Route grants: what the controller hands a worker with each routed
 * connection, saying "forward this connection to port P of sandbox S that
 * you run, until T". A grant is signed with a key both sides can derive
 * from the worker's API token without sharing anything new: the controller
 * stores the token's BLAKE2b hash, and the worker, which holds the token,
 * computes the same hash. Keyed BLAKE2b-256 (libsodium crypto_generichash)
 * over the grant's text; compared in constant time.
 *
 * Text form: "v1.<worker_id>.<sandbox_id>.<port>.<expires_unix>.<mac hex>". */
#ifndef SBX_GRANT_H
#define SBX_GRANT_H

#include <stdint.h>
#include "limits.h"

#define GRANT_KEY_BYTES 32
#define GRANT_MAX 256

typedef struct grant {
    char worker_id[SBX_ID_MAX];
    char sandbox_id[SBX_ID_MAX];
    int port;
    int64_t expires_unix;
} grant_t;

/* The key from the stored hash of the worker's token (64 hex digits);
 * SBX_EINVAL when it is not one. */
int grant_key_from_hash_hex(const char *hash_hex, unsigned char ret_key[GRANT_KEY_BYTES]);
/* The same key from the token itself (what the worker holds). */
void grant_key_from_token(const char *token, unsigned char ret_key[GRANT_KEY_BYTES]);

/* Writes the signed text of g; SBX_EINVAL for ids with '.' or a bad port. */
int grant_sign(const unsigned char key[GRANT_KEY_BYTES], const grant_t *g, char ret[GRANT_MAX]);

/* Checks the signature and that the grant has not expired at now_unix;
 * fills *ret. SBX_EINVAL: malformed; SBX_EAUTH: bad signature;
 * SBX_ETIMEOUT: expired. */
int grant_verify(const unsigned char key[GRANT_KEY_BYTES], const char *text, int64_t now_unix, grant_t *ret);

#endif
