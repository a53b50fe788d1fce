/* The route proxy's internals, shared by proxy.c (connections, the request
 * head, the listener) and proxy_relay.c (the worker's answer, the relay).
 * Not for use outside controller/proxy*.c. */
#ifndef SBX_PROXY_INTERNAL_H
#define SBX_PROXY_INTERNAL_H

#include "proxy.h"
#include "conncap.h"
#include "errors.h"
#include "limits.h"
#include "tenantcap.h"

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
    bool port_host;            /* a sandbox's port by host, E2B's getHost (proxy_port_host): no route */
    char sandbox_id[SBX_ID_MAX]; /* ... that sandbox */
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
    tenantcap_hold_t tcap;     /* the route's tenant's share of worker connections */
    /* The caps (proxy_caps.c, on controller/conncap.c). */
    struct event *evict_ev;    /* another thread chose this one to evict */
    conncap_entry_t cap;       /* evictable: no request in progress (head pending, or our answer flushing) */
    TAILQ_ENTRY(pconn) link;   /* this thread's connections */
} pconn_t;

struct proxy_thread {
    controller_t *ctl;
    struct event_base *base;
    PGconn **db;
    struct evconnlistener *listener;
    struct event *sweep;
    struct event *resume;      /* accepting again after accept() failed */
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

/* ---- the caps (proxy_caps.c) ---- */

typedef enum {
    PROXY_ADMIT_OK,            /* served (perhaps an idle one was evicted for it) */
    PROXY_ADMIT_FULL,          /* route_max_connections, none evictable: 503 */
    PROXY_ADMIT_ADDRESS_FULL,  /* route_max_connections_per_address, none of its own evictable: 503 */
} proxy_admit_t;

/* Counts a new connection (pc->peer, pt and trusted_peer set) against the
 * caps; it stays counted until proxy_caps_remove, whatever the answer.
 * Over a cap the oldest evictable connection is chosen: *ret_victim when
 * it is on pc's thread (the caller frees it), else its thread is told. */
proxy_admit_t proxy_caps_admit(pconn_t *pc, pconn_t **ret_victim);
/* The request head is complete: pc is no longer evictable. False when it
 * was already chosen to make room (its eviction is on the way). */
bool proxy_caps_claim(pconn_t *pc);
/* pc is evictable again (our own answer is being flushed). */
void proxy_caps_release(pconn_t *pc);
/* pc no longer counts (proxy_conn_free, before freeing its events). */
void proxy_caps_remove(pconn_t *pc);
/* Lowers ctl->route_max_conns to what RLIMIT_NOFILE can hold (logged)
 * and sets up the table; < 0 when out of memory. */
int proxy_caps_init(controller_t *ctl);

struct evconnlistener;
/* The listener's error callback: accept() failed (EMFILE, ENFILE, ...):
 * stops accepting for SBX_ROUTE_ACCEPT_BACKOFF_MS, logs at most once a
 * second; proxy_accept_resume_cb (pt->resume) accepts again. */
void proxy_accept_error_cb(struct evconnlistener *l, void *arg);
void proxy_accept_resume_cb(evutil_socket_t fd, short what, void *arg);

#endif
