/* The route proxy's internals, shared by proxy.c (connections, the request
 * head, the listener) and proxy_relay.c (the worker's answer, the relay).
 * Not for use outside controller/proxy*.c. */
#ifndef SBX_PROXY_INTERNAL_H
#define SBX_PROXY_INTERNAL_H

#include "proxy.h"
#include "errors.h"
#include "limits.h"

#include <arpa/inet.h>
#include <event2/bufferevent.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <time.h>

#define PROXY_MAX_HEAD       (16 * 1024)
#define PROXY_HEAD_SECONDS   15
#define PROXY_WORKER_SECONDS 15
#define PROXY_HIGH_WATER     (256 * 1024)
#define PROXY_READ_CHUNK     (64 * 1024)
#define PROXY_GRANT_SECONDS  60
#define PROXY_SWEEP_SECONDS  2
#define PROXY_WORKER_LINE    1024
#define PROXY_MAX_DROPPED    (1024 * 1024) /* bytes after the request we read and drop before closing */

typedef enum { PC_HEAD, PC_WORKER, PC_PIPE, PC_CLOSING } pc_state_t;

typedef struct pconn {
    proxy_thread_t *pt;
    struct bufferevent *down;  /* the client */
    struct bufferevent *up;    /* the worker */
    pc_state_t state;
    struct event *deadline;    /* route_max_duration_seconds */
    struct sockaddr_storage peer;
    char peer_text[INET6_ADDRSTRLEN];
    bool trusted_peer;
    char name[PROXY_NAME_LEN + 1];
    char route_id[SBX_ID_MAX]; /* for the log: the name is a public route's only secret */
    char method[16];
    char path[128];            /* for the log: the app's path, without the query */
    bool upgrade;              /* asked for; a tunnel only once the app answered 101 */
    bool tunnel;               /* the app answered 101: bytes both ways as they come */
    /* The request's body framing: one request per upstream connection, so
     * what the client sends after the body (a pipelined or kept-alive next
     * request, whose head we never cleaned) is dropped, never forwarded. */
    bool chunked;
    proxy_chunked_t chunks;
    int64_t body_left;         /* Content-Length bytes still to forward */
    bool body_done;            /* the whole body has gone up */
    bool answered;             /* the app's answer has begun (an upgrade is decided) */
    bool down_held;            /* client reading stopped until an upgrade is decided */
    int64_t dropped_bytes;     /* what the client sent after its request */
    bool down_eof, up_eof;     /* that side sent EOF */
    bool up_shut_pending;      /* shut the upstream's write side once drained */
    bool down_paused, up_paused; /* reading paused for backpressure */
    int64_t body_bytes;        /* client -> upstream after the head */
    int64_t resp_bytes;        /* upstream -> client */
    time_t last_activity;
    struct timespec started;
    int status;                /* what we answered ourselves, 0 when proxied */
    TAILQ_ENTRY(pconn) link;
} pconn_t;

struct proxy_thread {
    controller_t *ctl;
    struct event_base *base;
    PGconn **db;
    struct evconnlistener *listener;
    struct event *sweep;
    TAILQ_HEAD(, pconn) conns;
    int nconns;
};

/* Ends the connection: logs it (once it had a request), counts it in the
 * metrics and frees pc and both its sides. why is for the log. */
void proxy_conn_free(pconn_t *pc, const char *why);

/* Answers the client ourselves with code's status and an error body
 * {"error":{"code","message":msg}} (extra: more header lines, or NULL),
 * then closes once it is written. */
void proxy_conn_answer_error(pconn_t *pc, api_code_t code, const char *extra, const char *msg);

/* The worker connection's callbacks while its one-line answer is awaited
 * (proxy_relay.c): on 200 the relay starts, else the client gets the
 * matching error. */
void proxy_worker_read_cb(struct bufferevent *bev, void *arg);
void proxy_worker_event_cb(struct bufferevent *bev, short what, void *arg);
/* The client's event callback meanwhile: it closed. */
void proxy_client_gone_cb(struct bufferevent *bev, short what, void *arg);

#endif
