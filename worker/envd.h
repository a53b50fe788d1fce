/* E2B's in-sandbox daemon ("envd") served by the worker, so the E2B SDK
 * drives a sandbox without anything put into its image: the controller
 * authenticates the client and relays each envd HTTP request to the
 * worker's forwarder under an envd grant (GRANT_ENVD); the worker answers it
 * through the runtime interface (shells, file transfers, exec), for every
 * runtime. The pure parts (the request line, Connect envelopes and errors,
 * query strings, multipart bodies, the proto3-JSON pieces) are declared
 * here for the unit tests; the connection is worker/envd.c, which also
 * sets out the protocol between controller and worker (docs/worker.md
 * "E2B envd"). */
#ifndef SBX_ENVD_H
#define SBX_ENVD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "limits.h"

/* The request line's headers: at most this many, names at most
 * ENVD_HEADER_NAME_MAX bytes, values at most ENVD_HEADER_VALUE_MAX. */
#define ENVD_HEADERS_MAX        16
#define ENVD_HEADER_NAME_MAX    64
#define ENVD_HEADER_VALUE_MAX   1024
/* The request line's caller (a token id) and tenant (a tenant id), at most. */
#define ENVD_CALLER_MAX         64
#define ENVD_TENANT_MAX         64
/* The request's path (no query), at most. */
#define ENVD_PATH_MAX           256
/* A Connect call's request body (its one message), at most: SendInput's
 * (its data), Start's (a command and its environment) and every other
 * call's. */
#define ENVD_RPC_BODY_MAX       ((size_t)4 * 1024 * 1024)
#define ENVD_START_BODY_MAX     ((size_t)1024 * 1024)
#define ENVD_CALL_BODY_MAX      ((size_t)64 * 1024)
/* A Connect envelope's header: a flags byte, a big-endian 32-bit length. */
#define ENVD_ENVELOPE_HEADER    5
#define ENVD_FLAG_COMPRESSED    0x01
#define ENVD_FLAG_END_STREAM    0x02

/* A request line, parsed. */
typedef struct envd_req {
    char method[8];                      /* GET, POST, PUT, DELETE, HEAD */
    char path[ENVD_PATH_MAX + 1];
    char *query;                         /* the raw query ("" none); envd_req_release */
    size_t nheaders;
    char *names[ENVD_HEADERS_MAX];       /* lower-case */
    char *values[ENVD_HEADERS_MAX];
    int64_t body;                        /* bytes, -1 unknown, 0 none */
    int64_t max_bytes;                   /* the upload bound, > 0 */
    char caller[ENVD_CALLER_MAX + 1];    /* the client's token id, "" when not said: who started a
                                          * process, for its record (forward_session_t) */
    char tenant[ENVD_TENANT_MAX + 1];    /* the client's tenant, "" when not said: whose processes
                                          * count against a per-tenant bound */
} envd_req_t;

/* Parses a request line (without its CRLF) strictly: the keys of the
 * protocol above and no other, of their types; method one of the five;
 * path beginning with '/', at most ENVD_PATH_MAX bytes of printable ASCII
 * without '?'; query printable ASCII of at most SBX_FILES_REQUEST_MAX
 * bytes; headers an object of at most ENVD_HEADERS_MAX string values,
 * names lower-case token characters, values without control bytes; body
 * >= -1; max_bytes > 0; optionally "caller" and "tenant", each
 * 1..ENVD_CALLER_MAX (ENVD_TENANT_MAX) letters, digits and '_'. SBX_EINVAL with a one-sentence reason in err otherwise
 * (*ret then holds nothing). */
int envd_request_parse(const char *line, size_t len, envd_req_t *ret, char *err, size_t errlen);

/* Frees what a parsed request holds; a zeroed one is fine. */
void envd_req_release(envd_req_t *q);

/* The value of header name (lower-case), or NULL. */
const char *envd_req_header(const envd_req_t *q, const char *name);

/* The first value of query parameter name, percent- and '+'-decoded, into
 * out (cap bytes with the NUL): 1 found, 0 absent, SBX_EINVAL when it is
 * malformed (a bad escape, a NUL or control byte) or does not fit. */
int envd_query_param(const char *query, const char *name, char *out, size_t cap);

/* ---- Connect (JSON encoding) ------------------------------------------ */

/* Writes an envelope header: flags, then len big-endian. */
void envd_envelope_header(unsigned char out[ENVD_ENVELOPE_HEADER], unsigned flags, uint32_t len);

/* The one message of a streaming request's body (n bytes): exactly one
 * uncompressed envelope without the end-of-stream flag. 0 with *ret_msg
 * pointing into body; SBX_EINVAL with a reason in err. */
int envd_envelope_one(const char *body, size_t n, const char **ret_msg, size_t *ret_len, char *err,
                      size_t errlen);

/* The HTTP status of a Connect error code ("not_found" -> 404); 500 for
 * one it does not know. */
int envd_connect_http_status(const char *code);

/* A malloc'd {"code":C,"message":M} (a unary error's body), or with
 * end_stream {"error":{"code":C,"message":M}} (a stream's end message;
 * code NULL: "{}"). NULL only without memory. */
char *envd_connect_error_json(const char *code, const char *message, bool end_stream);

/* ---- proto3 JSON pieces ------------------------------------------------ */

/* An RFC 3339 time as a proto3-JSON Timestamp: UTC, "Z", fractions of
 * nanoseconds kept as 0, 3, 6 or 9 digits. The input may carry an offset
 * and 1..9 fraction digits (Docker's stat). SBX_EINVAL when it is not
 * RFC 3339; out at least 40 bytes. */
int envd_timestamp_normalize(const char *rfc3339, char *out, size_t outlen);

/* Go's FileMode.String() of a type ("file", "dir", "symlink", other) and
 * mode bits (07777): "-rw-r--r--", "drwxr-xr-x", "Lrwxrwxrwx", "dtrwxrwxrwx"
 * for a sticky directory (envd's EntryInfo.permissions). out at least 16
 * bytes. */
void envd_permissions(const char *type, unsigned mode, char *out, size_t outlen);

/* A path as envd takes it, cleaned (tarstream_path_clean) into out
 * (SBX_FILES_PATH_MAX + 1): relative paths are relative to "/" here (E2B:
 * to the user's home). SBX_EINVAL for "", control bytes or a path too long. */
int envd_path_resolve(const char *path, char *out);

/* ---- multipart/form-data, in pieces of any size ------------------------ */

/* A part's headers, at most (then the upload is refused). */
#define ENVD_MP_HEADERS_MAX     8192
/* A boundary is 1..70 characters (RFC 2046). */
#define ENVD_MP_BOUNDARY_MAX    70

/* Called at a part's start with its form name and filename (each "" when
 * absent); n > 0 bytes of its content, in order; at its end. < 0 stops the
 * parser (push returns it). */
typedef struct envd_mp_callbacks {
    int (*part_begin)(void *ud, const char *name, const char *filename);
    int (*part_data)(void *ud, const char *p, size_t n);
    int (*part_end)(void *ud);
} envd_mp_callbacks_t;

typedef enum {
    ENVD_MP_PREAMBLE = 0,    /* before the first delimiter */
    ENVD_MP_AFTER_DELIM,     /* a delimiter was seen: "--" (the last) or CRLF follows */
    ENVD_MP_HEADERS,         /* a part's header lines */
    ENVD_MP_BODY,            /* a part's content */
    ENVD_MP_DONE,            /* the closing delimiter was seen: the rest is ignored */
} envd_mp_state_t;

typedef struct envd_mp {
    envd_mp_state_t state;
    char delim[ENVD_MP_BOUNDARY_MAX + 5];   /* "\r\n--" boundary */
    size_t delim_len;
    size_t match;            /* bytes of delim matched so far (held back) */
    char after[2];           /* AFTER_DELIM: the two bytes after a delimiter */
    size_t after_len;
    char *head;              /* ENVD_MP_HEADERS_MAX + 1 bytes: the part's headers so far */
    size_t head_len;
    envd_mp_callbacks_t cb;
    void *ud;
    char error[160];         /* why a push failed (the parser's own refusal) */
} envd_mp_t;

/* The boundary of a "multipart/form-data; boundary=..." content type
 * (quoted or not) into out (ENVD_MP_BOUNDARY_MAX + 1): 0, or SBX_EINVAL
 * when the type is another or the boundary is missing or malformed. */
int envd_mp_boundary(const char *content_type, char *out, size_t outlen);

/* 0, SBX_EINVAL for a malformed boundary, SBX_ENOMEM. */
int envd_mp_init(envd_mp_t *m, const char *boundary, const envd_mp_callbacks_t *cb, void *ud);

/* Takes n more bytes. 0; SBX_EINVAL for a malformed body (m->error says
 * why); a callback's own value < 0. */
int envd_mp_push(envd_mp_t *m, const char *p, size_t n);

/* At the body's end: 0 when the closing delimiter was seen, else
 * SBX_EINVAL (m->error). */
int envd_mp_finish(envd_mp_t *m);

void envd_mp_release(envd_mp_t *m);

#endif
