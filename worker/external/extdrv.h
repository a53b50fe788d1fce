/* The external runtime driver backend's insides (docs/runtime-drivers.md):
 * the JSON codec of protocol 1 and the stream frames (extdrv_codec.c, pure),
 * the table of calls in flight with their deadlines (extdrv_table.c), and
 * the supervisor that runs the driver process (extdrv_proc.c). */
#ifndef SBX_EXTDRV_H
#define SBX_EXTDRV_H

#include <json-c/json.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "errors.h"
#include "limits.h"
#include "runtime.h"
#include "shellframe.h"

#define EXTDRV_PROTOCOL 1
/* The prefix of the refs this backend hands out ("x:" + the driver's ref). */
#define EXTDRV_REF_PREFIX "x:"
/* Stream tokens: 32 hex characters. */
#define EXTDRV_TOKEN_LEN 32
/* The stderr frame type of exec streams (the others are shellframe's). */
#define EXTDRV_FRAME_STDERR 5

/* Per-method deadlines, in ms (the doc's table). */
#define EXTDRV_HELLO_MS     10000
#define EXTDRV_CREATE_MS    180000
#define EXTDRV_EXEC_GRACE_MS 30000
#define EXTDRV_REMOVE_MS    60000
#define EXTDRV_QUERY_MS     15000
#define EXTDRV_FILES_MS     30000
#define EXTDRV_SHORT_MS     5000

/* ---- the codec (pure) --------------------------------------------------- */

/* One decoded line from the driver. */
typedef struct extdrv_msg {
    int64_t id;               /* 0: a notification (no id) */
    bool is_error;
    json_object *result;      /* owned; the result object (NULL on error) */
    api_error_t err;          /* on error: the mapped code and message */
} extdrv_msg_t;

/* Serialises a request line (with its newline) into a malloc'd string;
 * params is borrowed (NULL: {}). *ret_len its length. NULL on ENOMEM. */
char *extdrv_request_line(int64_t id, const char *method, json_object *params, size_t *ret_len);

/* Decodes one line (without its newline) from driver `name`: 0 with *ret
 * filled (extdrv_msg_release), or SBX_EINVAL (a protocol error: not a JSON
 * object, a bad id, neither result nor error) with err saying which. Error
 * objects are mapped: data.code an API code -> that code, else
 * API_RUNTIME_ERROR with the message prefixed by the driver's name. */
int extdrv_msg_parse(const char *name, const char *line, size_t len, extdrv_msg_t *ret, api_error_t *err);
void extdrv_msg_release(extdrv_msg_t *m);

/* What a hello answered. */
typedef struct extdrv_hello {
    char name[64];
    char version[64];
    int64_t protocol;
    bool offers[3];           /* per isolation_t */
    unsigned net_modes[3];    /* 1u << net_mode_t */
    char probe[3][SBX_DRIVER_MESSAGE_MAX];
    bool cap_files, cap_shell, cap_dial, cap_images, cap_disks, cap_snapshots, cap_nic, cap_snapshot_copy;
} extdrv_hello_t;

/* Reads a hello result: 0, or SBX_EINVAL naming the field (err). A protocol
 * number other than EXTDRV_PROTOCOL is SBX_EINVAL "driver speaks protocol N". */
int extdrv_hello_parse(json_object *result, extdrv_hello_t *ret, api_error_t *err);

/* True when s is a driver ref: 1..SBX_DRIVER_REF_MAX of [A-Za-z0-9_.-]. */
bool extdrv_ref_valid(const char *s);

/* One sandbox object (inspect, an inventory entry) into *ret: 0, or
 * SBX_EINVAL for a malformed one (bad ref, missing sandbox_id). The labels
 * object is returned borrowed in *ret_labels (may be NULL). */
int extdrv_object_parse(json_object *o, runtime_object_t *ret, json_object **ret_labels, api_error_t *err);

/* The create params of req (class, spec, the owner labels). New object. */
json_object *extdrv_create_params(const runtime_create_req_t *req);

/* The exec params of spec. New object. */
json_object *extdrv_exec_params(const char *ref, const exec_spec_t *spec, size_t max_output, const char *token);

/* Reads an exec result into ret's exit fields. 0 or SBX_EINVAL. */
int extdrv_exec_result_parse(json_object *result, runtime_exec_result_t *ret, api_error_t *err);

/* The files_get stat of a result. 0 or SBX_EINVAL. */
int extdrv_stat_parse(json_object *result, runtime_files_stat_t *ret, api_error_t *err);

/* An incremental decoder of driver -> worker frames (data, exit, stderr). */
typedef struct extdrv_frames {
    unsigned char buf[SHELLFRAME_MAX];
    size_t len;
    bool ready;
} extdrv_frames_t;

typedef struct extdrv_frame {
    int type;                 /* SHELLFRAME_DATA, SHELLFRAME_EXIT, EXTDRV_FRAME_STDERR */
    const unsigned char *data;
    uint32_t len;
    int32_t exit_code;
} extdrv_frame_t;

void extdrv_frames_init(extdrv_frames_t *d);
/* As shellframe_next: 1 with *ret a frame, 0 when all n were taken, SBX_EINVAL
 * for an unknown type, an empty or oversized data/stderr frame, an exit not 4
 * bytes. */
int extdrv_frames_next(extdrv_frames_t *d, const void *data, size_t n, size_t *ret_used, extdrv_frame_t *ret);

/* ---- the table of calls in flight --------------------------------------- */

typedef struct extdrv_call {
    int64_t id;
    int64_t deadline_ms;      /* time_mono_ms */
    int64_t gen;              /* the driver (supervisor's count) it was sent to */
    bool done;
    int rc;                   /* 0, or the failure (err) */
    json_object *result;      /* owned once done */
    api_error_t err;
    struct extdrv_call *next;
} extdrv_call_t;

typedef struct extdrv_table {
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* signalled when a call is done */
    extdrv_call_t *head;
    int64_t next_id;
    size_t n;
} extdrv_table_t;

void extdrv_table_init(extdrv_table_t *t);
/* Fails every call still in it (see fail_all), then destroys the lock. */
void extdrv_table_release(extdrv_table_t *t);
/* Registers a new call (calloc'd, returned; its id set) due at deadline_ms. NULL on ENOMEM. */
extdrv_call_t *extdrv_table_add(extdrv_table_t *t, int64_t deadline_ms);
/* Hands msg's answer to the call with its id (moving msg->result):
 * 0, or SBX_ENOTFOUND when no such call is in flight (a protocol error). */
int extdrv_table_complete(extdrv_table_t *t, extdrv_msg_t *msg);
/* Fails every call in flight with code and msg. */
void extdrv_table_fail_all(extdrv_table_t *t, api_code_t code, const char *msg);
/* Waits until c is done, its deadline passes or *cancel becomes non-zero
 * (checked every 100 ms; NULL: never): 0 done (c->rc, c->err, c->result
 * hold the answer), SBX_ETIMEOUT, SBX_ECANCELLED. Does not remove c. */
int extdrv_table_wait(extdrv_table_t *t, extdrv_call_t *c, const atomic_int *cancel);
/* True when c is done (no wait). */
bool extdrv_table_done(extdrv_table_t *t, extdrv_call_t *c);
/* Unlinks c and frees it with its result. NULL is fine. */
void extdrv_table_remove(extdrv_table_t *t, extdrv_call_t *c);
/* Sets c's deadline. */
void extdrv_table_set_deadline(extdrv_table_t *t, extdrv_call_t *c, int64_t deadline_ms);
/* The earliest deadline among the calls not done (INT64_MAX: none). */
int64_t extdrv_table_next_deadline(extdrv_table_t *t);

/* ---- the supervisor ----------------------------------------------------- */

typedef struct extdrv extdrv_t;

/* Starts the supervisor of driver argv (argc strings, copied) with its run
 * directory rundir (made 0700 by the caller); returns at once (the driver
 * starts on the supervisor's thread). 0 or SBX_ENOMEM. */
int extdrv_start(const char *const *argv, size_t argc, const char *rundir, const char *worker_name,
                 extdrv_t **ret, api_error_t *err);

/* Waits up to timeout_ms for a driver that answered hello: 0 with *ret
 * its hello, else the reason (err: the driver's failure so far). */
int extdrv_wait_ready(extdrv_t *d, long timeout_ms, extdrv_hello_t *ret, api_error_t *err);

/* Sends a request (params owned, NULL: {}) due in timeout_ms, waiting for a
 * running driver within that time: the call in flight in *ret_call
 * (extdrv_finish), or an error (err) when no driver came or the write failed. */
int extdrv_send(extdrv_t *d, const char *method, json_object *params, long timeout_ms, extdrv_call_t **ret_call,
                api_error_t *err);

/* Waits for c's answer and removes it: 0 with *ret_result (owned; may be
 * NULL when the caller passes NULL) or the mapped error. A call past its
 * deadline kills the driver (restarted) and fails runtime_error. */
int extdrv_finish(extdrv_t *d, extdrv_call_t *c, json_object **ret_result, api_error_t *err);

/* extdrv_send then extdrv_finish. */
int extdrv_call(extdrv_t *d, const char *method, json_object *params, long timeout_ms, json_object **ret_result,
                api_error_t *err);

/* Moves c's deadline to timeout_ms from now (an upload that just ended). */
void extdrv_call_extend(extdrv_t *d, extdrv_call_t *c, long timeout_ms);

/* True once c is done (answered or failed). */
bool extdrv_call_done(extdrv_t *d, extdrv_call_t *c);

/* The driver's name from its hello ("driver" before one). */
const char *extdrv_name(extdrv_t *d);
/* The stream socket's path. */
const char *extdrv_streams_path(extdrv_t *d);
/* Restarts so far (for tests and the log). */
long extdrv_restarts(extdrv_t *d);

/* Aborts waits once *flag is non-zero. */
void extdrv_set_cancel(extdrv_t *d, const atomic_int *flag);

/* Sends shutdown, stops the driver (SIGTERM, then SIGKILL to its group),
 * joins the threads and frees d. NULL is fine. */
void extdrv_stop(extdrv_t *d);

#endif
