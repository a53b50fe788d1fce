/* Internal to the API listener's connection records (apiconn.c) and their
 * streamed bodies (apiconn_stream.c): the records themselves and what the
 * two files share. Not for other modules: apiconn.h is their interface. */
#ifndef SBX_APICONN_INT_H
#define SBX_APICONN_INT_H

#include "apiconn.h"
#include "conncap.h"
#include "httphead.h"
#include "proxy.h"
#include "token.h"

#include <event2/bufferevent.h>
#include <event2/http.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/socket.h>

typedef enum {
    AC_HEAD,     /* waiting for (or holding back) a request head */
    AC_BODY,     /* a body is passing to evhttp */
    AC_DISCARD,  /* a refused request's body: read and dropped */
    AC_CLOSING,  /* refused for good: everything more is dropped */
    AC_STREAM,   /* a streamed body: kept, decoded, for its handler (apiconn_stream_*) */
} ac_state_t;

struct apiconn {
    apiconn_thread_t *at;
    struct bufferevent *bev;
    struct evhttp_connection *evcon;
    struct evbuffer_cb_entry *in_entry;
    evutil_socket_t fd;
    bool ready;                /* set up: counted, our close callback set */
    bool broken;               /* could not be set up: never touched again */
    bool in_cb;                /* our own changes to the input buffer */
    bool busy;                 /* a head went to evhttp; its request is not answered yet */
    int pending;               /* heads handed to evhttp and not answered yet */
    bool fresh;                /* no request yet */
    atomic_bool shut;          /* we shut the socket down: evhttp closes it next */
    ac_state_t state;
    struct evbuffer *held;     /* the head so far (AC_HEAD) */
    int64_t head_since_ms;     /* the head's first byte (0: none yet) */
    int64_t idle_since_ms;     /* accepted, or the last request answered */
    int64_t last_byte_ms;      /* the peer's last byte (accepted: its start) */
    bool stalled;              /* waiting on the peer, silent for SBX_API_STALL_MS: evictable */
    int64_t body_since_ms;
    int64_t body_left;         /* Content-Length bytes still to come */
    bool chunked;
    proxy_chunked_t chunks;
    int64_t body_got;
    int64_t discard_left;
    int64_t discard_max;       /* a refused body this long at most is read and dropped (else closed) */
    int64_t reserved;          /* bytes of the body budget held */
    apiconn_t **slot;          /* the request's pointer to us */
    /* A streamed body (AC_STREAM; apiconn_stream_begin). */
    bool stream_next;          /* head_judge: the head being judged is a streamed one */
    bool stream_expect;        /* it asked for 100 Continue */
    bool stream_counted;       /* holds one of SBX_FILES_STREAMS_MAX */
    bool stream_raw;           /* an upgraded shell: no framing, no end; every byte to the handler */
    struct evbuffer *sbuf;     /* decoded body bytes the handler has not taken */
    int stream_status;         /* 0: more due; 1: complete; < 0: malformed framing */
    bool stream_paused;        /* reading off: sbuf over SBX_FILES_STREAM_HIGH_WATER */
    bool stream_cut;           /* the body ended unread (malformed, too long, or its handler gave up) */
    bool stream_attached;      /* a handler took it: evhttp's read callback set aside */
    bufferevent_data_cb saved_readcb;
    struct event *stream_ev;   /* tells the handler, outside the buffer's callbacks */
    void (*stream_cb)(void *);
    void *stream_arg;
    void (*user_cb)(struct evhttp_connection *, void *);
    void *user_arg;
    struct sockaddr_storage peer;
    conncap_entry_t cap;
    TAILQ_ENTRY(apiconn) link;
    apiconn_t *hnext;          /* the thread's table, by evcon */
};

struct apiconn_thread {
    controller_t *ctl;
    struct event_base *base;
    PGconn **db;
    void *bev_arg;
    struct event *sweep;
    struct event *resume;      /* accepting again after accept() failed */
    struct event *turn;        /* the loop's next turn: accepting again after SBX_API_ACCEPTS_PER_TURN */
    int accepted;              /* connections accepted in this turn of the loop */
    bool turn_paused;          /* the listener is off until the next turn */
    struct evconnlistener *listener;
    TAILQ_HEAD(, apiconn) conns;
    apiconn_t *table[SBX_API_CONN_BUCKETS];
};

/* Why a head is refused: the answer and the metric's label. */
typedef struct {
    api_code_t code;
    int retry_after;
    const char *reason;        /* the metric's label */
    char msg[200];
} refusal_t;

/* files_max_bytes, set by apiconn_setup. */
extern int64_t apiconn__files_max;

/* The monotonic clock in ms. */
int64_t apiconn__now_ms(void);
/* Whether the head's bearer token is one we know (live, its secret right);
 * false too when the database cannot say, with *ret_unavail. */
bool apiconn__token_good(apiconn_thread_t *at, const httphead_t *h, bool *ret_unavail, role_t *ret_role);
/* How many headers of that name the head has. */
int apiconn__header_count(const httphead_t *h, const char *name);

/* apiconn_stream.c: whether the head's body is streamed to its handler
 * (PUT /v1/sandboxes/{id}/files) / asks for a shell (POST .../shell with
 * Upgrade: sandbox-shell). */
bool apiconn__stream_route(const httphead_t *h);
bool apiconn__shell_route(const httphead_t *h);
/* Judges a streamed (files) or shell head of body length len: 0 with the
 * stream's state set in ac, or < 0 with why in *rf (ac->body_left set for
 * the body to discard). */
int apiconn__stream_judge(apiconn_t *ac, const httphead_t *h, int64_t len, refusal_t *rf);
int apiconn__shell_judge(apiconn_t *ac, const httphead_t *h, int64_t len, refusal_t *rf);
/* Appends to in what evhttp sees of a streamed or raw head. */
void apiconn__stream_head(struct evbuffer *in, const httphead_t *h, bool raw, bool chunked, int64_t len,
                          bool expect);
/* Moves the body bytes at the front of tmp into ac->sbuf, decoded. */
void apiconn__stream_pass(apiconn_t *ac, struct evbuffer *tmp);
/* Frees the stream's buffers and event, returns its transfer slot. */
void apiconn__stream_release(apiconn_t *ac);

#endif
