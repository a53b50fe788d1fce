/* The client library under both `sandbox` (tools/cli/) and `sandbox-mcp`:
 * one API call with retries and a {code, message} error, waiting on an
 * operation, and the request bodies. It never prints: callers word errors. */
#ifndef SBX_CLIENT_H
#define SBX_CLIENT_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "httpc.h"

#define CLIENT_REQUEST_TIMEOUT_MS 30000L  /* one plain API call */
#define CLIENT_RETRY_MS           500     /* client_call: pause between retries of a GET */
#define CLIENT_RATE_LIMITED_RETRY_MS 1000 /* ... after a 429 rate_limited (Retry-After's least) */
#define CLIENT_BACKOFF_START_MS   500     /* client_wait_op: first pause after a lost answer */
#define CLIENT_BACKOFF_MAX_MS     5000    /* ... doubling up to this */
#define CLIENT_POLL_MIN_MS        200     /* never poll an operation faster than this */
#define CLIENT_POLL_SLACK_S       15      /* a long-poll's request timeout beyond its ?wait= */
#define CLIENT_PATH_MAX           2048    /* an API path: two ids of 256 bytes percent-encoded fit */

/* A connection to the API: an HTTP client and, optionally, a way to stop. */
typedef struct client {
    httpc_t *http;                    /* not owned */
    const char *url;                  /* its base URL, for messages; not owned */
    bool (*cancelled)(void *ud);      /* NULL, or true when the caller wants to stop */
    void *cancel_ud;
} client_t;

/* What kind of failure a client_error_t is. */
typedef enum {
    CLIENT_E_NONE = 0,
    CLIENT_E_UNREACHABLE,   /* no answer: connection refused, reset, timed out */
    CLIENT_E_BAD_RESPONSE,  /* a 2xx answer without a JSON object */
    CLIENT_E_MALFORMED,     /* a 2xx JSON answer without what the call needs */
    CLIENT_E_HTTP,          /* an error status without the API's {"error":…} */
    CLIENT_E_API,           /* the API's {"error":{"code","message"}} */
    CLIENT_E_CANCELLED,     /* the client's cancel callback said stop */
} client_err_kind_t;

/* One failed call. code and message are ready to hand on ({code, message}):
 * the API's own, or "unavailable" (with the URL and the transport's words),
 * "bad_response", "http_error", "cancelled". */
typedef struct client_error {
    client_err_kind_t kind;
    long status;            /* HTTP status; 0 when no answer arrived */
    bool retryable;         /* no answer, 502/503/504 (a controller restarting), or 429 rate_limited */
    char code[64];
    char message[512];
    char detail[256];       /* the transport's own words when unreachable, else "" */
} client_error_t;

/* One request. */
typedef struct client_req {
    const char *method, *path;   /* "GET", "/v1/sandboxes?limit=5" */
    json_object *body;           /* NULL: none; borrowed */
    const char *idem_key;        /* NULL: no Idempotency-Key header */
    long timeout_ms;             /* per attempt; 0: CLIENT_REQUEST_TIMEOUT_MS */
    int64_t retry_until_ms;      /* 0: one attempt. Else (monotonic) a GET is retried every
                                  * CLIENT_RETRY_MS while retryable and this is not near, and
                                  * each attempt's timeout is cut to what is left (at least 1 s) */
} client_req_t;

/* Sends req. Returns 0 with *ret (a 2xx JSON object, new reference), or
 * SBX_EIO (the call failed) / SBX_ECANCELLED with *ret_err filled. */
int client_call(client_t *cl, const client_req_t *req, json_object **ret, client_error_t *ret_err);

/* Fills *ret with what a finished exchange (httpc's return code r and its
 * response) amounts to; method and path word the bad_response message. */
void client_error_decode(const client_t *cl, const char *method, const char *path, int r,
                         const httpc_response_t *resp, client_error_t *ret);

/* prefix, id percent-encoded and suffix (NULL: none) into buf. Returns 0,
 * SBX_ENOMEM, or SBX_ETOOBIG when it does not fit. */
int client_path(char *buf, size_t n, const char *prefix, const char *id, const char *suffix);

/* lead ("?" or "&") then "label=K%3DV%2CK2%3DV2" (each pair
 * percent-encoded) of labels, a JSON object of strings, appended at *len in
 * buf (n bytes): GET /v1/sandboxes' filter. Returns
 * 0, SBX_ENOMEM, or SBX_ETOOBIG when it does not fit (buf then holds what
 * came before). */
int client_labels_query(json_object *labels, const char *lead, char *buf, size_t n, size_t *len);

/* Sleeps ms milliseconds in short steps, returning early (true) when the
 * client's cancel callback says stop. */
bool client_sleep_ms(client_t *cl, int64_t ms);

/* The next pause of a doubling backoff from CLIENT_BACKOFF_START_MS. */
int64_t client_backoff_next(int64_t backoff_ms);

/* How to wait on an operation. */
typedef struct client_wait {
    int64_t timeout_s;      /* give up after this (one poll is always made) */
    int poll_wait_s;        /* ?wait= of each long-poll at most */
    int64_t outage_grace_ms; /* lost answers are retried this long past the deadline */
    /* After each answer whose operation is not terminal; waited_ms since the start. */
    void (*on_progress)(void *ud, json_object *op, int64_t waited_ms);
    /* e: the first lost answer of an outage (it is retried with backoff);
     * NULL: answers came back again. */
    void (*on_outage)(void *ud, const client_error_t *e);
    void *ud;
} client_wait_t;

/* What a wait saw. */
typedef struct client_wait_result {
    json_object *last;         /* the last {"operation":…} answer, owned, or NULL */
    json_object *op;           /* its "operation" (borrowed from last), or NULL */
    bool done;                 /* op is terminal */
    bool succeeded;            /* ... and succeeded */
    bool failing;              /* the last attempt got no usable answer (retryable) */
    client_error_t last_error; /* the last retryable failure (kind NONE: none) */
} client_wait_result_t;

/* Long-polls GET /v1/operations/{op_id} until it is terminal (op_state_terminal)
 * or w->timeout_s passes. Lost answers and 502/503/504 are retried with
 * backoff until then. Returns 0 (*ret says whether it is done), SBX_EIO with
 * *ret_err (the API refused: not found, …; a malformed answer),
 * SBX_ECANCELLED (*ret_err "cancelled") or SBX_ETOOBIG (op_id too long).
 * *ret is filled in every case; release it with client_wait_result_release. */
int client_wait_op(client_t *cl, const char *op_id, const client_wait_t *w, client_wait_result_t *ret,
                   client_error_t *ret_err);

void client_wait_result_release(client_wait_result_t *r);

/* ---------------------------------------------------------------- exec output (follow.c) */

/* How to follow an exec's output. */
typedef struct client_follow {
    int64_t timeout_s;      /* follow until done or this passes (one read is always made) */
    int poll_wait_s;        /* ?wait= of each long-poll at most */
    /* Each chunk's exact bytes, in order; stream "stdout" or "stderr". */
    void (*on_chunk)(void *ud, const char *stream, int64_t offset, const char *data, size_t len);
    /* bytes of output from offset on were dropped before they were read
     * (exec_output_keep_bytes, or a worker that could not send them). */
    void (*on_skip)(void *ud, int64_t offset, int64_t bytes);
    /* As client_wait_t's. */
    void (*on_outage)(void *ud, const client_error_t *e);
    void *ud;
} client_follow_t;

/* Reads GET /v1/operations/{op_id}/output from *offset (updated past what
 * was read) until the output is done (*ret_done: the operation ended and
 * everything kept was read) or f->timeout_s passes. Lost answers are
 * retried with backoff from the same offset. Returns 0, SBX_EIO with
 * *ret_err (refused: not found, …; malformed; or, retryable, no answer
 * until the time ran out), SBX_ECANCELLED or SBX_ETOOBIG (op_id too long). */
int client_follow_output(client_t *cl, const char *op_id, int64_t *offset, const client_follow_t *f, bool *ret_done,
                         client_error_t *ret_err);

/* A chunk's exact bytes (data_b64 when present, else data) into *ret
 * (malloc'd, NUL-terminated; *ret_len bytes). SBX_EINVAL when it has neither. */
int client_output_chunk_bytes(json_object *chunk, char **ret, size_t *ret_len);

/* ---------------------------------------------------------------- logs lines */

/* One NDJSON line of GET /v1/sandboxes/{id}/logs (docs/api.md). */
typedef struct client_logs_line {
    json_object *obj;        /* the parsed line, owned; client_logs_line_release */
    const char *stream;      /* a chunk of output: "stdout", "stderr" or "output"; else NULL */
    const char *data;        /* the chunk, len bytes (borrowed from obj) */
    size_t len;
    bool is_error;           /* no chunk but {"error":…}: code and message (never NULL) */
    const char *code, *message;
    bool truncated;          /* the line says the output was cut ... */
    int64_t limit_bytes;     /* ... at this many bytes (0: not said) */
} client_logs_line_t;

/* Reads one line. Returns 0 with *ret, or SBX_EINVAL when it is not a JSON
 * object (nothing to release). */
int client_logs_line_decode(const char *line, size_t len, client_logs_line_t *ret);
void client_logs_line_release(client_logs_line_t *l);

/* ---------------------------------------------------------------- request bodies */

/* An optional integer. */
typedef struct client_opt_int {
    int64_t v;
    bool set;
} client_opt_int_t;

/* An optional boolean: left out, or sent as false or true. */
typedef enum { CLIENT_FLAG_UNSET = 0, CLIENT_FLAG_FALSE, CLIENT_FLAG_TRUE } client_flag_t;

/* POST /v1/sandboxes. NULL strings and unset fields are left out (the
 * server's defaults); "trust" is always sent, with the flags that are set. */
typedef struct client_create_spec {
    const char *name;                       /* the sandbox's name, usable wherever its id is */
    const char *tenant, *image, *network, *isolation;
    const char *from;                       /* a ready snapshot (id or name) to start from; docs/snapshots.md */
    const char *template;                   /* a template's version, NAME or NAME:VERSION; docs/templates.md */
    client_opt_int_t cpu_millis, memory_mib, disk_mib, ttl_seconds;
    client_flag_t untrusted_repo, generated_code, hostile;
    client_flag_t read_only_root, hardened;
    client_flag_t auto_pause;               /* paused, not deleted, when its TTL passes */
    json_object *env, *labels, *selector;   /* objects of strings, borrowed; NULL: absent */
    json_object *volumes;                   /* [{"volume","path","read_only"}], borrowed; NULL: absent;
                                               docs/volumes.md */
    json_object *egress;                    /* {"allow","deny","default"}, borrowed; NULL: absent;
                                               docs/network.md */
    json_object *secrets;                   /* ["NAME", …], borrowed; NULL: absent; docs/network.md */
} client_create_spec_t;

/* POST /v1/sandboxes/{id}/exec: argv from argv_json (an array, borrowed)
 * when set, else from argv[0..argc). */
typedef struct client_exec_spec {
    json_object *argv_json;
    char *const *argv;
    int argc;
    json_object *env;                       /* borrowed; NULL: absent */
    const char *cwd;
    const char *user;                       /* "user": name[:group] to run as; NULL: the image's */
    client_opt_int_t timeout_seconds, max_output_bytes;
    const char *stdin_text;                 /* "stdin": UTF-8 text; NULL: absent */
    const char *stdin_b64;                  /* "stdin_b64": base64 bytes; NULL: absent */
} client_exec_spec_t;

/* POST /v1/sandboxes/{id}/routes. */
typedef struct client_share_spec {
    int64_t port;
    client_opt_int_t ttl_seconds;
    const char *auth;                       /* NULL: the server's default (token) */
} client_share_spec_t;

/* POST /v1/sandboxes/{id}/extend: the sandbox expires ttl_seconds from now. */
typedef struct client_extend_spec {
    int64_t ttl_seconds;
} client_extend_spec_t;

/* The request bodies. Return 0 with *ret (new object) or SBX_ENOMEM. */
int client_create_body(const client_create_spec_t *s, json_object **ret);
int client_exec_body(const client_exec_spec_t *s, json_object **ret);
int client_share_body(const client_share_spec_t *s, json_object **ret);
int client_extend_body(const client_extend_spec_t *s, json_object **ret);

/* The body of a fork's snapshot of parent (a sandbox as the API shows it):
 * {"memory": true} for a microvm without volumes unless no_memory (its forks
 * resume its processes), else {} (docs/cli.md, "fork"). 0 or SBX_ENOMEM. */
int client_fork_snapshot_body(json_object *parent, bool no_memory, json_object **ret);

/* The create and exec bodies from a JSON object of arguments named as the
 * fields (an MCP tool call's): each field args holds, unless null, is copied as given, so
 * the server judges its type and range; create's "trust" is always made, of
 * the flags args holds. Return 0 with *ret (new object) or SBX_ENOMEM. */
int client_create_body_args(json_object *args, json_object **ret);
int client_exec_body_args(json_object *args, json_object **ret);

#endif
