/* The worker's route forwarder: accepts the controller's routed connections
 * (worker_route_listen), checks each one's signed grant (common/grant.h)
 * and relays its bytes to a TCP port inside the sandbox (runtime_dial).
 * The wire protocol: the controller sends one line
 * "SANDBOX-FORWARD/1 <grant>\r\n" and then raw bytes (not parsed here);
 * the worker answers "SANDBOX-FORWARD/1 200 ok\r\n" and relays both ways
 * until both have ended, or answers
 * "SANDBOX-FORWARD/1 <status> <code> <message>\r\n" and closes. Codes:
 * 400 bad_request, 403 forbidden, 404 not_found, 409 route_unsupported,
 * 502 upstream_unavailable, 503 busy.
 *
 * A logs grant (GRANT_LOGS) asks for the sandbox's main-process output
 * instead: after the 200 line the worker writes frames (common/logframe.h)
 * of Docker's logs and an END frame, reads nothing more from the
 * controller, and stops when the controller closes.
 *
 * A files grant (GRANT_FILES_PUT, GRANT_FILES_GET) is followed by one JSON
 * request line whose digest the grant carries, then an upload's frames
 * (put: answered by one line) or the answer line and the download's frames
 * (get): docs/worker.md "File transfers"; forward_files.c.
 *
 * A shell grant (GRANT_SHELL) runs a command on a terminal or with pipes
 * (forward_shell.c); an envd grant (GRANT_ENVD) serves one call of E2B's
 * envd, its head as a JSON line and its body and answer as frames
 * (docs/worker.md "E2B envd"; worker/envd.h). */
#ifndef SBX_FORWARD_H
#define SBX_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grant.h"
#include "runtime.h"

#define FORWARD_PROTOCOL            "SANDBOX-FORWARD/1"
/* The preamble line, CRLF included: a grant is at most GRANT_MAX bytes, so
 * a longer line is not one of ours. */
#define FORWARD_PREAMBLE_MAX        1024
/* A connection that has not sent its preamble by then is closed. */
#define FORWARD_PREAMBLE_TIMEOUT_MS 10000
/* Connecting to the sandbox's port. */
#define FORWARD_CONNECT_TIMEOUT_MS  5000
/* A relay with no traffic either way for this long is closed. */
#define FORWARD_IDLE_TIMEOUT_MS     (300 * 1000)
/* Bytes buffered per direction of a relay: what bounds a forward's memory
 * (a side is read only while the other side's buffer has room). */
#define FORWARD_BUFFER_BYTES        (64u * 1024u)
/* Stack of a forwarding thread: buffers are on the heap, and a Docker
 * inspect through libcurl fits well within it. */
#define FORWARD_THREAD_STACK_BYTES  (256u * 1024u)

typedef struct forward forward_t;

/* Writes the agent's current worker id ("" before registration) into ret.
 * Called from the forwarding threads: must be thread-safe. */
typedef void (*forward_worker_id_fn)(void *ud, char *ret, size_t retlen);

/* A process an E2B client ran through envd (worker/envd.h) that ended:
 * what the agent reports to be recorded as an exec operation. */
typedef struct forward_session {
    const char *sandbox_id;
    const char *const *argv;     /* argc strings: the command as it ran */
    size_t argc;
    bool tty;                    /* on a terminal (a PTY) */
    int exit_code;               /* -1: killed by a signal, or unknown */
    int64_t duration_ms;
    const char *caller;          /* the client's token id, or NULL */
} forward_session_t;
/* Called from the forwarding threads (must be thread-safe). */
typedef void (*forward_session_fn)(void *ud, const forward_session_t *s);

typedef struct forward_options {
    const char *listen;          /* "host:port" or "[v6]:port"; port 0: any free port */
    const char *advertise;       /* "host:port" the controller connects to; NULL or "": the bound address */
    int max_connections;         /* forwards at once; more are answered 503 busy */
    const char *token;           /* the worker's API token: the grant key comes from it */
    const char *worker_name;     /* RUNTIME_LABEL_WORKER a target container must carry */
    runtime_t *rt;               /* shared with the agent; must outlive the forwarder */
    forward_worker_id_fn worker_id;
    void *worker_id_ud;
    const char *tls_cert;        /* PEM certificate and key: the controller's connections are TLS; */
    const char *tls_key;         /* both NULL or "": plain TCP (worker_route_tls_cert / _key) */
    int64_t files_max_bytes;     /* a download carries at most this many bytes (files_max_bytes);
                                  * <= 0: SBX_FILES_MAX_BYTES_MAX */
    forward_session_fn session_done; /* an E2B client's process ended (NULL: not reported) */
    void *session_ud;
} forward_options_t;

/* Checks and copies the options (nothing is bound yet). A wildcard listen
 * address (0.0.0.0, ::) without advertise, a malformed address, a bad
 * maximum, or a TLS certificate or key that does not load is SBX_EINVAL with
 * a one-line reason in err. */
int forward_new(const forward_options_t *opt, forward_t **ret, char *err, size_t errlen);

/* Binds and listens, and starts the listener thread. Returns 0, or
 * SBX_EIO (cannot bind or listen) / SBX_ENOMEM with a reason in err. */
int forward_start(forward_t *f, char *err, size_t errlen);

/* The "host:port" to advertise (the advertise option, or the bound address
 * with the real port); "" before forward_start succeeded. */
const char *forward_address(const forward_t *f);

/* Closes the listener, ends every open forward (each thread notices within
 * a poll; one waiting on Docker within the inspect's own timeout) and waits
 * for them. Idempotent; safe before forward_start. */
void forward_stop(forward_t *f);

/* Stops and frees; NULL is fine. */
void forward_free(forward_t *f);

/* ---- pure parts, exposed for the unit tests ---- */

/* Collects the preamble line from the bytes as they arrive. */
typedef struct forward_line {
    char buf[FORWARD_PREAMBLE_MAX];   /* the line so far; on completion NUL-terminated without its CRLF */
    size_t len;
} forward_line_t;

void forward_line_init(forward_line_t *l);

/* Takes n bytes of data. Returns 1 when the line is complete: *ret_used is
 * how many of these bytes belong to it (the rest follow the line and must
 * be relayed); 0 when all n were taken and the line goes on; SBX_ETOOBIG
 * when the line would pass FORWARD_PREAMBLE_MAX bytes with its CRLF;
 * SBX_EINVAL for a line feed without a carriage return before it. */
int forward_line_push(forward_line_t *l, const char *data, size_t n, size_t *ret_used);

/* Parses a complete line (without CRLF): "SANDBOX-FORWARD/1 <grant>" with
 * one space and a grant of [A-Za-z0-9._-] shorter than GRANT_MAX. Copies
 * the grant text into ret_grant; SBX_EINVAL otherwise (the grant's own
 * fields are checked by grant_verify). */
int forward_preamble_parse(const char *line, char ret_grant[GRANT_MAX]);

/* Collects a files connection's request line (JSON, at most
 * SBX_FILES_REQUEST_MAX bytes with its CRLF) as forward_line_t does the
 * preamble. */
typedef struct forward_reqline {
    char buf[SBX_FILES_REQUEST_MAX];
    size_t len;
} forward_reqline_t;

void forward_reqline_init(forward_reqline_t *l);

/* As forward_line_push, with SBX_FILES_REQUEST_MAX for the limit. */
int forward_reqline_push(forward_reqline_t *l, const char *data, size_t n, size_t *ret_used);

/* A files request line, parsed. */
typedef struct forward_files_req {
    bool put;                    /* "op": "put" or "get" */
    char path[SBX_FILES_PATH_MAX + 1];
    runtime_files_format_t format;
    int64_t size;                /* put raw: the byte count; else -1 */
    unsigned mode;               /* put raw: permission bits (default 0644) */
    bool parents;                /* put raw: make the missing directories above the file */
    int64_t max_bytes;           /* put: the most bytes accepted; get: 0 */
} forward_files_req_t;

/* Parses a request line (without its CRLF) strictly: a JSON object with
 * only the keys of its op, of the right types, path absolute without NUL
 * and at most SBX_FILES_PATH_MAX bytes, format "tar" or "raw" (get:
 * "list" too), size for a raw put only (required), mode for a raw put only
 * (0..07777), max_bytes for a put only (required, > 0). SBX_EINVAL with a
 * one-sentence reason in err otherwise. */
int forward_files_request_parse(const char *line, size_t len, forward_files_req_t *ret, char *err, size_t errlen);

/* A shell request line, parsed. */
typedef struct forward_shell_req {
    char **argv;                 /* argc strings (NULL-terminated); forward_shell_req_release */
    size_t argc;
    unsigned cols, rows;
    bool tty;                    /* false: no terminal, stdout and stderr apart */
    char **env;                  /* envc "K=V" strings (NULL-terminated, or NULL) */
    size_t envc;
    char *cwd;                   /* NULL: the sandbox's own */
} forward_shell_req_t;

/* Parses a shell request line (without its CRLF) strictly: a JSON object
 * {"op":"shell","argv":[...],"cols":N,"rows":N} with optionally "tty"
 * (boolean; default true), "env" (an object of at most SBX_MAX_ENV string
 * values, keys shell identifiers, as an exec's) and "cwd" (an absolute path
 * of at most SBX_MAX_PATH_BYTES without control bytes), and nothing else;
 * argv 1 to SBX_MAX_ARGV non-empty strings without NUL, cols and rows
 * integers 1..SHELLFRAME_SIZE_MAX. SBX_EINVAL with a one-sentence reason in
 * err otherwise (*ret then holds nothing). */
int forward_shell_request_parse(const char *line, size_t len, forward_shell_req_t *ret, char *err, size_t errlen);

/* Frees what a parsed request holds; a zeroed one is fine. */
void forward_shell_req_release(forward_shell_req_t *q);

/* Formats "SANDBOX-FORWARD/1 <status> <code> <message>\r\n" (no message
 * part when message is NULL or "") into buf, the message on one line
 * (control characters become spaces) and cut to fit. Returns the length. */
size_t forward_reply_format(char *buf, size_t buflen, int status, const char *code, const char *message);

#endif
