/* What the parts of the worker's envd share: one call on a forwarder
 * connection (worker/envd.c reads its request and body and answers it),
 * the process service (envd_process.c), the filesystem service and /files
 * (envd_fs.c) and its watcher (envd_watch.c). Not for use outside
 * worker/envd*.c. */
#ifndef SBX_ENVD_INTERNAL_H
#define SBX_ENVD_INTERNAL_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "envd.h"
#include "forward_internal.h"
#include "logframe.h"
#include "sbuf.h"
#include "tarstream.h"

#define ENVD_COMPONENT FORWARD_COMPONENT

/* One envd request on a forwarder connection, owned by its thread. */
typedef struct envd_call {
    forward_conn_t *c;
    envd_req_t q;
    char ref[80];             /* the sandbox's container (runtime_files_target) */
    int64_t fs_bytes;         /* its filesystem's size as the runtime knows it (0 unknown) */
    int64_t deadline_ms;      /* connect-timeout-ms as a monotonic deadline; 0 none */
    /* the request body's frames */
    size_t off;               /* pending bytes: c->up[off, c->up_len) */
    unsigned char hdr[LOGFRAME_HEADER_BYTES];
    size_t hdr_len;
    uint32_t left;            /* payload bytes left of the current frame */
    bool body_ended;          /* its END frame came */
    bool answered;            /* the 200 line went out */
    bool gone;                /* the controller went away */
    char why[300];            /* why the body could not be read */
} envd_call_t;

/* The next body bytes into buf: > 0; 0 once the END frame came;
 * SBX_EIO when the connection ended, stalled or the worker stops;
 * SBX_EINVAL for a malformed frame (k->why says). */
ptrdiff_t envd_body_read(envd_call_t *k, char *buf, size_t cap);

/* The whole body, at most max bytes, into ret (initialised here; the
 * caller releases it). 0; SBX_ETOOBIG past max; else as envd_body_read. */
int envd_body_all(envd_call_t *k, size_t max, sbuf_t *ret);

/* The answer line with the client's status and content type (NULL none),
 * then body frames, then the END frame (why: "" complete, else the
 * reason). Each SBX_EIO once the controller is gone (k->gone). */
int envd_answer_head(envd_call_t *k, int status, const char *content_type);
int envd_answer_body(envd_call_t *k, const char *p, size_t n);
void envd_answer_end(envd_call_t *k, const char *why);

/* A whole answer: head, body, END. */
void envd_answer(envd_call_t *k, int status, const char *content_type, const char *body, size_t n);

/* A unary Connect call's answer: the message as JSON (taken; NULL: {}),
 * or an error with its code's status and {"code","message"}. */
void envd_rpc_ok(envd_call_t *k, json_object *msg);
void envd_rpc_error(envd_call_t *k, const char *code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* /files' error: the status and envd's {"code":S,"message":M}. */
void envd_http_error(envd_call_t *k, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A server stream: the 200 line with application/connect+json, each
 * message as one envelope in a frame of its own, and the end-of-stream
 * envelope ({} or the error: code NULL for none) with the END frame. */
int envd_stream_begin(envd_call_t *k);
int envd_stream_send(envd_call_t *k, const char *json, size_t n);
void envd_stream_end(envd_call_t *k, const char *code, const char *message);

/* The Connect code of a runtime error (not_found, invalid_argument, ...). */
const char *envd_code_of(const api_error_t *err);

/* The stat of path in the sandbox (without following a final symlink):
 * 0, or < 0 with err (API_NOT_FOUND for a missing path). */
int envd_stat(envd_call_t *k, const char *path, runtime_files_stat_t *ret, api_error_t *err);

/* A walk reads the runtime's tar archive of the whole tree below a
 * directory, file contents included, whatever the depth asked for: a
 * sparse file of 8 EiB costs the sandbox nothing and the worker days. So a
 * walk reads at most this many archive bytes (and at most the sandbox's
 * filesystem size when the runtime knows it), */
#define ENVD_WALK_LIST_BYTES    (256LL * 1024 * 1024)   /* for ListDir */
#define ENVD_WALK_WATCH_BYTES   (64LL * 1024 * 1024)    /* for each of WatchDir's walks */
/* and sees at most this many entries, listed or not. */
#define ENVD_WALK_SEEN_MAX      (10 * SBX_FILES_LIST_MAX)

/* POST /files spools each file to the worker's disk first: all uploads on
 * the worker together hold at most this much there, and none may leave
 * less than ENVD_SPOOL_RESERVE free on the spool's filesystem. */
#define ENVD_SPOOL_TOTAL_MAX    (4LL * 1024 * 1024 * 1024)
#define ENVD_SPOOL_RESERVE      (1LL * 1024 * 1024 * 1024)

/* One entry below a walked directory: rel its path below it ("d/e.txt"),
 * e the archive's entry; < 0 stops the walk (SBX_ENOMEM out of memory,
 * SBX_ETOOBIG the callback's own bound: the caller says which). */
typedef int (*envd_walk_fn)(void *ud, const char *rel, const tarstream_entry_t *e);

/* Walks the entries below directory path down to depth levels (>= 1)
 * through the runtime's tar archive of it: at most SBX_FILES_LIST_MAX
 * entries listed, ENVD_WALK_SEEN_MAX seen and budget archive bytes (fewer
 * when k->fs_bytes is smaller), within k->deadline_ms, while the
 * controller stays (it sends nothing after the body, so its side readable
 * means it left: k->gone is set). 0; else < 0 with the Connect code in
 * *ret_code and a message (a path that is missing, not a directory, a
 * bound passed, a runtime error); SBX_ETOOBIG when fn refused. */
int envd_walk(envd_call_t *k, const char *path, int64_t depth, int64_t budget, envd_walk_fn fn, void *ud,
              const char **ret_code, char *msg, size_t msglen);

/* The string member key of a request's message: true with *ret (NULL when
 * absent); false when it is not a string or holds a NUL, which C would cut
 * it at (the caller answers invalid_argument naming key). */
bool envd_msg_str(json_object *msg, const char *key, const char **ret);

/* The EntryInfo of an archive entry rel below directory base (a new object; NULL without memory). */
json_object *envd_entry_of_tar(const char *base, const char *rel, const tarstream_entry_t *e);

/* ---- the process service (envd_process.c) ---- */

/* The process table of a forwarder: created at the first envd call,
 * ended by forward_envd_stop. */
typedef struct envd_table envd_table_t;

void envd_process_start(envd_call_t *k, json_object *msg);
void envd_process_connect(envd_call_t *k, json_object *msg);
void envd_process_list(envd_call_t *k, json_object *msg);
void envd_process_send_input(envd_call_t *k, json_object *msg);
void envd_process_close_stdin(envd_call_t *k, json_object *msg);
void envd_process_send_signal(envd_call_t *k, json_object *msg);
void envd_process_update(envd_call_t *k, json_object *msg);

/* ---- the filesystem service and /files (envd_fs.c) ---- */

void envd_fs_stat(envd_call_t *k, json_object *msg);
void envd_fs_list_dir(envd_call_t *k, json_object *msg);
void envd_fs_make_dir(envd_call_t *k, json_object *msg);
void envd_fs_move(envd_call_t *k, json_object *msg);
void envd_fs_remove(envd_call_t *k, json_object *msg);
void envd_files_get(envd_call_t *k, json_object *msg);
void envd_files_post(envd_call_t *k, json_object *msg);

/* ---- WatchDir, a polling watcher (envd_watch.c) ---- */

void envd_fs_watch_dir(envd_call_t *k, json_object *msg);

#endif
