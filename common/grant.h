/* Route grants: what the controller hands a worker with each routed
 * connection, saying "forward this connection to port P of sandbox S that
 * you run, until T". A grant is signed with a key both sides can derive
 * from the worker's API token without sharing anything new: the controller
 * stores the token's BLAKE2b hash, and the worker, which holds the token,
 * computes the same hash. Keyed BLAKE2b-256 (libsodium crypto_generichash)
 * over the grant's text; compared in constant time.
 *
 * A grant has a purpose, inside the signed text, so one can never be used
 * for the other: a route grant relays into a port of the sandbox, a logs
 * grant streams its main process's output (and nothing else).
 *
 * Text form of a route grant:
 *   "v1.<worker_id>.<sandbox_id>.<port>.<expires_unix>.<mac hex>"
 * of a logs grant (tail: a line count or "all"; follow: 0 or 1):
 *   "v1.<worker_id>.<sandbox_id>.logs-<tail>-<follow>.<expires_unix>.<mac hex>"
 * and of a files grant (an upload, fput, or a download, fget; digest: the
 * grant_files_digest of the one request line the connection may carry):
 *   "v1.<worker_id>.<sandbox_id>.fput-<digest>.<expires_unix>.<mac hex>"
 * and of a shell grant (an interactive terminal; digest as a files grant's,
 * of its one request line):
 *   "v1.<worker_id>.<sandbox_id>.shell-<digest>.<expires_unix>.<mac hex>" */
#ifndef SBX_GRANT_H
#define SBX_GRANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "limits.h"

#define GRANT_KEY_BYTES 32
#define GRANT_MAX 256

typedef enum {
    GRANT_ROUTE = 0,         /* relay to `port` inside the sandbox */
    GRANT_LOGS,              /* stream the main process's output */
    GRANT_FILES_PUT,         /* unpack the one request line's upload into the sandbox */
    GRANT_FILES_GET,         /* read the one request line's path out of the sandbox */
    GRANT_SHELL,             /* run the one request line's command on a terminal in the sandbox */
    GRANT_ENVD,              /* serve the one request line's E2B envd call (worker/envd.h) */
    GRANT_SNAPSHOT,          /* send the snapshot (the grant's sandbox field) as a docker-save tar, for a copy */
} grant_purpose_t;

/* A files (or shell) grant's digest: 32 lowercase hex digits and a NUL. */
#define GRANT_FILES_DIGEST_HEX 33

/* logs_tail of a logs grant that asks for every line. */
#define GRANT_LOGS_TAIL_ALL (-1)

typedef struct grant {
    char worker_id[SBX_ID_MAX];
    char sandbox_id[SBX_ID_MAX];
    int port;                /* GRANT_ROUTE: 1..65535; 0 otherwise */
    int64_t expires_unix;
    grant_purpose_t purpose; /* zero-initialised: a route grant */
    int64_t logs_tail;       /* GRANT_LOGS: 0..SBX_LOGS_TAIL_MAX lines from the end, or GRANT_LOGS_TAIL_ALL */
    bool logs_follow;        /* GRANT_LOGS: keep streaming until the container stops */
    char files_digest[GRANT_FILES_DIGEST_HEX]; /* GRANT_FILES_*, GRANT_SHELL, GRANT_ENVD: grant_files_digest of the request line */
} grant_t;

/* The digest a files grant carries: unkeyed BLAKE2b with a 16-byte output
 * of the len bytes of the request line (without its CRLF), as 32 lowercase
 * hex digits. The worker compares it with the grant's files_digest (in
 * constant time: sodium_memcmp); a mismatch is the caller's to refuse. */
void grant_files_digest(const char *line, size_t len, char ret[GRANT_FILES_DIGEST_HEX]);

/* The key from the stored hash of the worker's token (64 hex digits);
 * SBX_EINVAL when it is not one. */
int grant_key_from_hash_hex(const char *hash_hex, unsigned char ret_key[GRANT_KEY_BYTES]);
/* The same key from the token itself (what the worker holds). */
void grant_key_from_token(const char *token, unsigned char ret_key[GRANT_KEY_BYTES]);

/* Writes the signed text of g (its purpose decides the form); SBX_EINVAL
 * for ids with '.', a bad port or tail, a files digest that is not 32
 * lowercase hex digits, or an unknown purpose. */
int grant_sign(const unsigned char key[GRANT_KEY_BYTES], const grant_t *g, char ret[GRANT_MAX]);

/* Checks the signature and that the grant has not expired at now_unix;
 * fills *ret, whose purpose the caller must act on (and only on it).
 * SBX_EINVAL: malformed; SBX_EAUTH: bad signature; SBX_ETIMEOUT: expired. */
int grant_verify(const unsigned char key[GRANT_KEY_BYTES], const char *text, int64_t now_unix, grant_t *ret);

/* grant_verify, then SBX_EPERM when the grant is for another purpose than
 * `purpose` (*ret is then zeroed). */
int grant_verify_purpose(const unsigned char key[GRANT_KEY_BYTES], const char *text, int64_t now_unix,
                         grant_purpose_t purpose, grant_t *ret);

#endif
