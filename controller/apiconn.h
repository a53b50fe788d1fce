/* The API listener's connections under a flood (controller/apiconn.c).
 * libevent 2.1's evhttp reads heads and bodies itself, whoever sends them;
 * this module stands between the socket and evhttp on each connection:
 *  - caps: api_max_connections over the listener and
 *    api_max_connections_per_address per client (controller/conncap.c), the
 *    oldest idle connection evicted first;
 *  - a head reaches evhttp only once it is complete (it is held back until
 *    then), within api_head_timeout_seconds; a kept-alive connection idle
 *    for api_idle_timeout_seconds is closed;
 *  - a body over SBX_API_ANON_BODY_BYTES is read only after its bearer
 *    token checked out; every body reserves its length from one budget
 *    (api_body_budget_mib) before it is read; a body slower than
 *    api_body_min_bytes_per_second has its connection closed;
 *  - accept() failing (EMFILE, ENFILE) pauses accepting and logs at most
 *    once a second.
 * A request refused before evhttp saw it reaches evhttp as a head of our
 * own making (APICONN_REFUSED_PATH, the reason in APICONN_REFUSAL_HEADER),
 * so evhttp answers it like any other: the server (on_request) turns it
 * into the JSON error with apiconn_refusal. Every head evhttp parses has
 * been parsed here first, so a client cannot send that path itself. */
#ifndef SBX_APICONN_H
#define SBX_APICONN_H

#include "controller.h"
#include "errors.h"

#include <event2/bufferevent.h>
#include <event2/http.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#define APICONN_REFUSED_PATH   "/_sbx/refused"
#define APICONN_REFUSAL_HEADER "X-Sbx-Refusal"
/* On the head evhttp sees of a streamed request (below): the body's
 * length in bytes, or "chunked"; and, when the client waits for "100
 * Continue" before its body, the second one. A
 * client's own X-Sbx-* headers are refused, so these are always ours. */
#define APICONN_STREAM_HEADER  "X-Sbx-Stream"
#define APICONN_EXPECT_HEADER  "X-Sbx-Expect"
/* The Upgrade token of POST /v1/sandboxes/{id}/shell. */
#define APICONN_SHELL_UPGRADE  "sandbox-shell"

typedef struct apiconn apiconn_t;
typedef struct apiconn_thread apiconn_thread_t;
struct evconnlistener;

/* Reads the settings (the caps fitted to RLIMIT_NOFILE, logged) and sets
 * up the shared tables; once per process before the threads start. */
int apiconn_setup(controller_t *ctl, char *err, size_t errlen);
/* After every thread is freed. */
void apiconn_cleanup(void);

/* One HTTP thread's connections: base its loop, db its connection (for
 * the token check of a large body), bev_arg passed on to
 * http_errpage_bev, which makes each connection's bufferevent. */
apiconn_thread_t *apiconn_thread_new(controller_t *ctl, struct event_base *base, PGconn **db, void *bev_arg);
/* After evhttp_free (which closes the thread's connections). */
void apiconn_thread_free(apiconn_thread_t *at);
/* The listener evhttp accepts on: its accept errors back off. */
void apiconn_thread_listener(apiconn_thread_t *at, struct evconnlistener *l);

/* evhttp's bufferevent callback (evhttp_set_bevcb); arg is the thread's
 * apiconn_thread_t. */
struct bufferevent *apiconn_bev(struct event_base *base, void *arg);

/* A request reached the handlers: its connection is busy (not evictable)
 * until apiconn_request_end. *slot is set to the connection (NULL when
 * unknown) and cleared should the connection go first. */
void apiconn_request_begin(apiconn_thread_t *at, struct evhttp_request *ev, apiconn_t **slot);
/* The request was answered (or dropped): its body's budget is returned. */
void apiconn_request_end(apiconn_t *ac);

/* When ev is a request refused here (path APICONN_REFUSED_PATH): its error
 * code, Retry-After (0: none) and message; else false. */
bool apiconn_refusal(struct evhttp_request *ev, api_code_t *ret_code, int *ret_retry_after, char *msg,
                     size_t msglen);

/* ---- streamed bodies ----
 * PUT /v1/sandboxes/{id}/files is not read by evhttp: once its token
 * checked out and its Content-Length fits files_max_bytes (or it is
 * chunked), evhttp gets its head alone (Content-Length 0,
 * APICONN_STREAM_HEADER) and the body, decoded from its framing, waits for
 * the handler here, at most SBX_FILES_STREAM_HIGH_WATER of it before the
 * socket stops being read. At most SBX_FILES_STREAMS_MAX transfers (these
 * and downloads, which take a slot with apiconn_transfer_take) run at
 * once: past that the head is answered 503. */

/* POST /v1/sandboxes/{id}/shell with Upgrade: sandbox-shell (and no
 * body) is raw: once its token checked out and a transfer slot was taken,
 * evhttp gets its head alone (APICONN_STREAM_HEADER: raw) and every byte
 * after it goes to the handler, unframed and without end, until the
 * connection closes (the apiconn_stream_* calls below; status stays 0).
 * The connection never goes back to evhttp for another request. */

/* A transfer slot: false when SBX_FILES_STREAMS_MAX run already. */
bool apiconn_transfer_take(void);
void apiconn_transfer_release(void);

/* The handler takes the body of its request's connection ac (rq->conn):
 * cb(arg) runs on the loop whenever bytes came, the body ended or its
 * framing turned out malformed. evhttp's reading is set aside until
 * apiconn_stream_end. SBX_EINVAL when the request has no streamed body. */
int apiconn_stream_begin(apiconn_t *ac, void (*cb)(void *), void *arg);
/* True while ac's streamed body has not all been read (still coming, or
 * cut off): the answer to that request must close the connection (server.c
 * adds Connection: close to an answer of a request with
 * APICONN_STREAM_HEADER). */
bool apiconn_body_unread(const apiconn_t *ac);
/* Sends "100 Continue" when the client asked for it (once). */
void apiconn_stream_continue(apiconn_t *ac);
/* The body bytes not taken yet: the handler drains them, then calls
 * apiconn_stream_drained so reading resumes. */
struct evbuffer *apiconn_stream_input(apiconn_t *ac);
void apiconn_stream_drained(apiconn_t *ac);
/* 0 while more of the body is due, 1 once all of it came, SBX_EINVAL for
 * malformed chunked framing, SBX_ETOOBIG for a chunked body past
 * files_max_bytes. */
int apiconn_stream_status(const apiconn_t *ac);
/* The body bytes received so far. */
int64_t apiconn_stream_received(const apiconn_t *ac);
/* Gives the connection back to evhttp, before the handler answers: true
 * when the whole body had come; else the rest is not read and the answer
 * must close the connection (Connection: close). The transfer slot is
 * returned. */
bool apiconn_stream_end(apiconn_t *ac);

/* evhttp_connection_set_closecb for handlers: the connection's close
 * callback is this module's, which calls cb first (cb NULL: none). */
void apiconn_set_closecb(struct evhttp_connection *evcon, void (*cb)(struct evhttp_connection *, void *), void *arg);

#endif
