/* The worker's health endpoint (worker_health_listen): a small HTTP/1.1
 * server on its own thread answering GET /healthz (the process is alive),
 * /readyz (the runtime answers and the controller hears from us) and
 * /metrics (the process's Prometheus registry), one request per
 * connection. The runtime is checked by a background thread every
 * HEALTH_CHECK_INTERVAL_MS, so no request ever waits on Docker. */
#ifndef SBX_HEALTH_H
#define SBX_HEALTH_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime.h"

/* A request head (request line and headers, blank line included) longer
 * than this is answered 431. */
#define HEALTH_HEAD_MAX           8192
/* A connection that has not sent its whole head by then is closed. */
#define HEALTH_HEAD_TIMEOUT_MS    5000
/* A client that does not take its answer within this is dropped. */
#define HEALTH_WRITE_TIMEOUT_MS   5000
/* Connections at once; when full, the oldest one still sending its head
 * is closed to make room (a slow client cannot lock probes out). */
#define HEALTH_MAX_CONNECTIONS    64
/* The background runtime check: how often, and its own deadline. */
#define HEALTH_CHECK_INTERVAL_MS  5000
#define HEALTH_PING_TIMEOUT_MS    2000
/* A check result older than this (the checker is stuck) counts as failed. */
#define HEALTH_CHECK_STALE_MS     (3 * HEALTH_CHECK_INTERVAL_MS)
/* The largest /metrics answer. */
#define HEALTH_METRICS_MAX_BYTES  (8u * 1024u * 1024u)

typedef struct health health_t;

/* What the agent knows of its controller, for /readyz. */
typedef struct health_controller_status {
    bool registered;          /* registered, and the controller has not forgotten us since */
    char worker_id[128];
    int64_t last_contact_ms;  /* time_mono_ms() of the last exchange the controller answered; 0: never */
    char last_error[256];     /* why the last failed exchange failed; "" when none */
} health_controller_status_t;

/* Fills ret; called from the health thread, so it must be thread-safe. */
typedef void (*health_controller_fn)(void *ud, health_controller_status_t *ret);

/* The last background check of the runtime. */
typedef struct health_runtime_status {
    bool checked;             /* false until the first check finished */
    bool ok;
    int64_t checked_ms;       /* time_mono_ms() when it finished */
    char error[512];          /* why it failed (an api_error_t message) */
} health_runtime_status_t;

typedef struct health_options {
    const char *listen;               /* "host:port" or "[v6]:port"; port 0: any free port */
    runtime_t *rt;                    /* shared with the agent; must outlive the health server */
    int64_t controller_timeout_ms;    /* no answer from the controller for longer: not ready */
    health_controller_fn controller;
    void *controller_ud;
} health_options_t;

/* Checks and copies the options (nothing is bound yet). A malformed or
 * unresolvable address is SBX_EINVAL with a one-line reason in err. */
int health_new(const health_options_t *opt, health_t **ret, char *err, size_t errlen);

/* Binds and listens, starts the server and checker threads and logs
 * "health checks on HOST:PORT" with the real port. Returns 0, or SBX_EIO
 * ("cannot listen for health checks on HOST:PORT: reason") / SBX_ENOMEM
 * with the reason in err. */
int health_start(health_t *h, char *err, size_t errlen);

/* The bound "host:port" ("" before health_start succeeded). */
const char *health_address(const health_t *h);

/* From now on /readyz answers 503 (the worker is shutting down); /healthz
 * still answers. NULL is fine. */
void health_set_stopping(health_t *h);

/* Closes the listener and every connection and joins the threads (within
 * one runtime check's deadline). Idempotent; safe before health_start and
 * with NULL. */
void health_stop(health_t *h);

/* Stops and frees; NULL is fine. */
void health_free(health_t *h);

/* ---- pure parts, exposed for the unit tests ---- */

/* Length of the head at the start of buf[0, len) up to and including the
 * blank line that ends it (CRLF or bare LF line ends), or 0 when it has
 * not ended yet. */
size_t health_head_end(const char *buf, size_t len);

typedef struct health_request {
    char method[16];
    char path[256];           /* the target without its query; "" when longer than this */
    bool head_only;           /* HEAD: the answer without its body */
} health_request_t;

/* Parses a complete head (health_head_end bytes): "METHOD SP TARGET SP
 * HTTP/1.x", then "Name: value" lines. SBX_EINVAL, with the reason in
 * why, for anything else (a target not starting with '/', control bytes,
 * folded or nameless header lines). */
int health_request_parse(const char *head, size_t len, health_request_t *ret, char *why, size_t whylen);

/* The /readyz answer for these inputs at time now_ms: a new object
 * {"status":"ready"|"unready","checks":{"runtime":{…},"controller":{…}}}
 * (and "shutdown" while stopping), each check with "ok" and, when not,
 * "error". *ret_status is 200 or 503. NULL on allocation failure. */
json_object *health_readiness(const health_runtime_status_t *rt, const health_controller_status_t *ctl,
                              int64_t controller_timeout_ms, bool stopping, int64_t now_ms, int *ret_status);

#endif
