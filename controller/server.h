/* The HTTP side of the controller: event-loop threads sharing one listening
 * socket, each with its own evhttp and database connection; request
 * helpers; parked long-polls woken by controller_wake_waiters. */
#ifndef SBX_SERVER_H
#define SBX_SERVER_H

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <json-c/json.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#include "controller.h"
#include "errors.h"
#include "store.h"

/* PARK_REFUSAL: a 429 held back (server.c rate_refuse), not counted
 * among the parked requests a thread can take. */
typedef enum { PARK_OPERATION = 1, PARK_POLL, PARK_EVENTS, PARK_REFUSAL, PARK_OUTPUT } park_kind_t;

/* The dialect a request's errors are answered in: ours
 * ({"error":{"code","message"}}), E2B's control API and envd HTTP
 * ({"code":status,"message"}) or Connect's (controller/e2b.c). */
typedef enum { DIALECT_SANDBOX = 0, DIALECT_E2B, DIALECT_CONNECT } dialect_t;

/* One request being handled. Owned by the server; handlers reply exactly
 * once (http_reply_*) or park it. */
typedef struct req {
    struct evhttp_request *ev;
    http_thread_t *th;
    controller_t *ctl;
    PGconn *db;                 /* the thread's own connection */
    enum evhttp_cmd_type method;
    char path[512];
    char *segs[8];              /* path segments (into path_copy) */
    int nsegs;
    char path_copy[512];
    struct evkeyvalq query;
    auth_info_t auth;
    /* parking */
    park_kind_t park_kind;
    char park_id[SBX_ID_MAX];
    struct event *park_timer;
    struct event *park_peek;    /* watches for the client hanging up */
    uint64_t poll_gen;          /* PARK_POLL: this poll's generation */
    int poll_max;               /* PARK_POLL: assignments the worker has room for */
    int poll_tenant_cap;        /* PARK_POLL: executors one tenant may hold there (0: the policy's alone) */
    char poll_id[SBX_POLL_ID_MAX + 1]; /* PARK_POLL: the id the worker gave this poll ("": none) */
    bool poll_held;             /* PARK_POLL: its last claim took nothing while operations were leased to the
                                 * worker (tenants at their executor cap): an end there may free one */
    int64_t park_cursor;        /* PARK_EVENTS: looked through up to here; woken when the horizon passes it;
                                 * PARK_OUTPUT: the byte offset the follower reads from */
    int64_t wake_horizon, wake_newest; /* PARK_EVENTS: the horizon the wake just read (0: read it again) */
    const char *refusal_what;   /* PARK_REFUSAL: the 429's message (a static string) */
    int refusal_retry_after;    /* PARK_REFUSAL: its Retry-After */
    bool conn_gone;             /* the client closed the connection */
    char request_id[SBX_REQUEST_ID_MAX + 1]; /* the client's X-Request-Id, or ours */
    int64_t t0_us;              /* monotonic start, for the access log and latency */
    const char *route_tmpl;     /* static route template for metrics ("/v1/sandboxes/{id}") */
    struct req *park_prev, *park_next;
    struct apiconn *conn;       /* its connection's record (controller/apiconn.c); NULL when gone */
    char sandbox_id[SBX_ID_MAX]; /* the id a sandbox's name in the path stood for (api_sandbox_ref) */
    dialect_t dialect;          /* how its errors are answered */
    int stream_status;          /* a streamed answer's status (http_stream_start_status) */
    void (*park_resume)(struct req *rq, bool final); /* PARK_OPERATION: answers in place of GET /v1/operations/{id} */
} req_t;

/* Starts nthreads event-loop threads on listen_fd. */
int server_start(controller_t *ctl, char *err, size_t errlen);
/* Answers parked requests, stops and joins the threads. */
void server_stop(controller_t *ctl);
/* A worker polls: returns the poll's generation, which supersedes the
 * worker's older polls. Thread-safe. */
uint64_t server_poll_begin(const char *worker_id);
/* True when gen is still the worker's latest poll. Thread-safe. */
bool server_poll_current(const char *worker_id, uint64_t gen);

/* Wakes parked requests on every thread. Thread-safe. */
void server_wake_all(controller_t *ctl);
/* Wakes, on every thread, only the parked requests that what changed
 * (mask: WAKE_* of controller.h) can have answered; ops (may be NULL)
 * names operations that ended, whose waiters are re-checked even without
 * WAKE_OPERATIONS. Thread-safe. */
void server_wake(controller_t *ctl, unsigned mask, const char *const *ops, int nops);

/* Replies with a JSON body (takes the reference) and frees the request. */
void http_reply_json(req_t *rq, int status, json_object *body);
/* Makes sure the thread's database connection works (reconnecting) and
 * points rq->db at it. Returns 0 or SBX_EUNAVAIL. */
int http_db(req_t *rq);

/* Replies with a body of another type (copied) and frees the request. */
void http_reply_text(req_t *rq, int status, const char *content_type, const char *data, size_t len);
/* A streamed answer: http_stream_start sends the 200 head with
 * content_type (chunked for HTTP/1.1); the caller then sends the body with
 * evhttp_send_reply_chunk* on rq->ev and finishes with http_stream_end,
 * which writes the access log line and frees rq. conn_freeing: called from
 * the connection's close callback while libevent frees the connection
 * (the request still attached to it), so rq->ev must not be touched. */
void http_stream_start(req_t *rq, const char *content_type);
/* The same with another status (an E2B envd call's answer, relayed). */
void http_stream_start_status(req_t *rq, int status, const char *content_type);
void http_stream_end(req_t *rq, bool conn_freeing);
/* For a request whose connection libevent is freeing with the request
 * still attached (so it frees the request itself): no answer, only the
 * access log line (status 499, the client went away) and rq freed. */
void http_reply_dropped(req_t *rq);
/* As http_reply_dropped for a request answered 101 on its own connection
 * (an upgraded shell that ended): the access log line says 101. A request
 * evhttp already detached (the client closed first) is freed here. */
void http_reply_upgraded(req_t *rq);

/* Replies {"error":{"code","message"}} with the code's status. */
void http_reply_error(req_t *rq, api_code_t code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void http_reply_api_error(req_t *rq, const api_error_t *err);

/* Reads and parses the JSON body (at most limit bytes). On failure it has
 * already replied (400/413) and returns SBX_EINVAL. */
int http_read_json(req_t *rq, size_t limit, json_object **ret);

/* Query parameter or NULL. */
const char *http_query(req_t *rq, const char *key);
/* Request header or NULL. */
const char *http_header(req_t *rq, const char *name);

/* Parses ?wait= into 0..SBX_MAX_WAIT_SECONDS; replies 400 and returns
 * SBX_EINVAL when malformed. */
int http_wait_param(req_t *rq, int *ret);

/* Parks the request until woken (the thread re-checks its condition) or
 * wait_seconds pass. Replies 503 itself when too many are parked. A
 * resumed request may be parked again (id may be its own park_id). */
void http_park(req_t *rq, park_kind_t kind, const char *id, int wait_seconds);

/* Makes the request's thread re-check its parked requests in a few ms
 * even when nothing wakes it (PARK_EVENTS: events held back behind an
 * uncommitted one, whose transaction may end without a notification). */
void http_recheck_soon(req_t *rq);

#endif
