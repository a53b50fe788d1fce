/* Streamed request bodies and upgraded shells on the API listener (see
 * apiconn.h): which heads are streamed or raw and what they must pass
 * before a byte after them is read (stream_judge, shell_judge), the head
 * evhttp sees of them, and the decoded body held for its handler
 * (apiconn_stream_*). The connection's record and the head's life are
 * apiconn.c's. */
#include "apiconn.h"
#include "apiconn_int.h"
#include "httphead.h"
#include "limits.h"
#include "proxy.h"

#include <event2/buffer.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

int64_t apiconn__files_max;

/* Whether the head's body is streamed to its handler rather than read by
 * evhttp: PUT /v1/sandboxes/{id}/files, and every E2B envd call (relayed to
 * the worker as it comes: a file write's body is any size). */
bool apiconn__stream_route(const httphead_t *h)
{
    static const char pre[] = "/v1/sandboxes/", post[] = "/files", envd[] = "/e2b/envd/";
    if (strncmp(h->target, envd, sizeof envd - 1) == 0)
        return true;
    if (strcmp(h->method, "PUT") != 0 || strncmp(h->target, pre, sizeof pre - 1) != 0)
        return false;
    const char *id = h->target + sizeof pre - 1;
    size_t n = strcspn(id, "/?");
    size_t rest = strcspn(id + n, "?");
    return n > 0 && rest == sizeof post - 1 && strncmp(id + n, post, sizeof post - 1) == 0;
}

/* What a streamed or raw head needs before a byte after it is read: its
 * token checked out (what: "an upload", "a shell"), and a transfer slot
 * (busy: what runs too many). 0 (the slot taken), SBX_EAUTH or
 * SBX_EUNAVAIL with why in *rf. */
static int stream_admit(apiconn_t *ac, const httphead_t *h, const char *what, const char *busy, refusal_t *rf)
{
    bool unavail = false;
    role_t role = ROLE_MEMBER;
    if (!apiconn__token_good(ac->at, h, &unavail, &role)) {
        *rf = (refusal_t){ unavail ? API_UNAVAILABLE : API_UNAUTHORIZED, unavail ? 1 : 0, "auth", "" };
        if (unavail)
            snprintf(rf->msg, sizeof rf->msg, "database unavailable: cannot check the token of %s", what);
        else
            snprintf(rf->msg, sizeof rf->msg, "%s needs a valid bearer token (Authorization: Bearer TOKEN)", what);
        return SBX_EAUTH;
    }
    if (!apiconn_transfer_take()) {
        *rf = (refusal_t){ API_UNAVAILABLE, 1, "budget", "" };
        snprintf(rf->msg, sizeof rf->msg, "the controller runs too many %s; retry shortly", busy);
        return SBX_EUNAVAIL;
    }
    return 0;
}

/* Whether the head asks for a shell (POST /v1/sandboxes/{id}/shell with
 * Upgrade: sandbox-shell): what follows it is raw, for its handler. */
bool apiconn__shell_route(const httphead_t *h)
{
    static const char pre[] = "/v1/sandboxes/", post[] = "/shell";
    const char *up = httphead_get(h, "Upgrade");
    if (strcmp(h->method, "POST") != 0 || !up || strcasecmp(up, APICONN_SHELL_UPGRADE) != 0 ||
        strncmp(h->target, pre, sizeof pre - 1) != 0)
        return false;
    const char *id = h->target + sizeof pre - 1;
    size_t n = strcspn(id, "/?");
    size_t rest = strcspn(id + n, "?");
    return n > 0 && rest == sizeof post - 1 && strncmp(id + n, post, sizeof post - 1) == 0;
}

/* A shell's head: no body of its own, its token checked before a byte
 * after it is read, a transfer slot free; then raw. */
int apiconn__shell_judge(apiconn_t *ac, const httphead_t *h, int64_t len, refusal_t *rf)
{
    if (ac->chunked || len > 0 || apiconn__header_count(h, "Upgrade") != 1) {
        *rf = (refusal_t){ API_INVALID_ARGUMENT, 0, "head", "" };
        snprintf(rf->msg, sizeof rf->msg, "a shell request has no body and one Upgrade header (its argv, cols and "
                                          "rows are query parameters)");
        ac->body_left = len;
        return SBX_EINVAL;
    }
    int rc = stream_admit(ac, h, "a shell", "file transfers and shells", rf);
    if (rc < 0)
        return rc;
    ac->stream_counted = true;
    ac->stream_next = true;
    ac->stream_raw = true;
    ac->stream_expect = false;
    ac->body_left = 0;
    return 0;
}

/* A streamed body's head: its token must check out before a byte is read,
 * its length fit files_max_bytes, and a transfer slot be free. */
int apiconn__stream_judge(apiconn_t *ac, const httphead_t *h, int64_t len, refusal_t *rf)
{
    if (len > apiconn__files_max) {
        *rf = (refusal_t){ API_PAYLOAD_TOO_LARGE, 0, "too_large", "" };
        snprintf(rf->msg, sizeof rf->msg, "upload of %lld bytes is over the limit of %lld bytes (files_max_bytes)",
                 (long long)len, (long long)apiconn__files_max);
        ac->body_left = len;
        return SBX_ETOOBIG;
    }
    int rc = stream_admit(ac, h, "an upload", "file transfers", rf);
    if (rc < 0) {
        ac->body_left = len;
        return rc;
    }
    const char *expect = httphead_get(h, "Expect");
    ac->stream_counted = true;
    ac->stream_next = true;
    ac->stream_expect = expect && strcasecmp(expect, "100-continue") == 0;
    ac->body_left = len;
    return 0;
}

/* What evhttp sees of a streamed request: its head without the body's
 * framing, with Content-Length 0 and APICONN_STREAM_HEADER saying the
 * body's length or "chunked" (and APICONN_EXPECT_HEADER when the client
 * waits for 100 Continue). */
void apiconn__stream_head(struct evbuffer *in, const httphead_t *h, bool raw, bool chunked, int64_t len, bool expect)
{
    evbuffer_add_printf(in, "%s %s HTTP/1.%d\r\n", h->method, h->target, h->minor);
    for (int i = 0; i < h->nh; i++) {
        if (strcasecmp(h->name[i], "Content-Length") == 0 || strcasecmp(h->name[i], "Transfer-Encoding") == 0 ||
            strcasecmp(h->name[i], "Expect") == 0)
            continue;
        evbuffer_add_printf(in, "%s: %s\r\n", h->name[i], h->value[i]);
    }
    if (raw)
        evbuffer_add_printf(in, "Content-Length: 0\r\n%s: raw\r\n", APICONN_STREAM_HEADER);
    else if (chunked)
        evbuffer_add_printf(in, "Content-Length: 0\r\n%s: chunked\r\n", APICONN_STREAM_HEADER);
    else
        evbuffer_add_printf(in, "Content-Length: 0\r\n%s: %lld\r\n", APICONN_STREAM_HEADER, (long long)len);
    evbuffer_add_printf(in, "%s\r\n", expect ? APICONN_EXPECT_HEADER ": 100-continue\r\n" : "");
}

/* ---- a streamed body ---- */

static atomic_int streams_open;

static void stream_notify(apiconn_t *ac)
{
    if (ac->stream_attached && ac->stream_ev)
        event_active(ac->stream_ev, EV_TIMEOUT, 1);
}

static void stream_finish(apiconn_t *ac, int status)
{
    ac->stream_status = status;
    /* Nothing more is read until evhttp has the connection back (the next
     * request of a pipelining client waits in the socket, not here). */
    ac->stream_paused = true;
    bufferevent_disable(ac->bev, EV_READ);
    /* Complete: what follows is the next request's head; else nothing
     * more of this connection is read for evhttp. */
    ac->state = status == 1 ? AC_HEAD : AC_CLOSING;
    ac->stream_cut = status != 1;
    ac->body_since_ms = apiconn__now_ms();
}

/* Moves the body bytes at the front of tmp into ac->sbuf, decoded from
 * their framing; stops reading the socket while sbuf is over its high
 * water. */
void apiconn__stream_pass(apiconn_t *ac, struct evbuffer *tmp)
{
    if (ac->stream_raw) {
        /* An upgraded shell: everything, until the connection closes. */
        size_t n = evbuffer_get_length(tmp);
        evbuffer_remove_buffer(tmp, ac->sbuf, n);
        ac->body_got += (int64_t)n;
    } else if (!ac->chunked) {
        size_t avail = evbuffer_get_length(tmp);
        size_t n = (int64_t)avail < ac->body_left ? avail : (size_t)ac->body_left;
        evbuffer_remove_buffer(tmp, ac->sbuf, n);
        ac->body_left -= (int64_t)n;
        ac->body_got += (int64_t)n;
        if (ac->body_left == 0)
            stream_finish(ac, 1);
    } else {
        while (evbuffer_get_length(tmp) > 0 && ac->state == AC_STREAM) {
            size_t avail = evbuffer_get_length(tmp), take = avail < 65536 ? avail : 65536, used = 0, out = 0;
            char *p = (char *)evbuffer_pullup(tmp, (ev_ssize_t)take);
            int rc = p ? proxy_chunked_decode(&ac->chunks, p, take, &used, &out) : SBX_ENOMEM;
            if (rc < 0) {
                evbuffer_drain(tmp, evbuffer_get_length(tmp));
                stream_finish(ac, SBX_EINVAL);
                break;
            }
            evbuffer_add(ac->sbuf, p, out);
            evbuffer_drain(tmp, used);
            ac->body_got += (int64_t)out;
            if (rc == 1)
                stream_finish(ac, 1);
        }
        if (ac->state == AC_STREAM && ac->body_got > apiconn__files_max)
            stream_finish(ac, SBX_ETOOBIG);
    }
    if (ac->stream_status == 0 && !ac->stream_paused && evbuffer_get_length(ac->sbuf) >= SBX_FILES_STREAM_HIGH_WATER) {
        ac->stream_paused = true;
        bufferevent_disable(ac->bev, EV_READ);
    }
    stream_notify(ac);
}

static void stream_ev_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    apiconn_t *ac = arg;
    if (ac->stream_cb)
        ac->stream_cb(ac->stream_arg);
}

/* While a handler streams a body, evhttp's read callback must not run (it
 * aborts the process when called while its request is being answered):
 * the bytes reach the handler through the input buffer's callback, and
 * this takes the bufferevent's read callback's place. */
static void stream_readcb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    (void)arg;
}

void apiconn__stream_release(apiconn_t *ac)
{
    if (ac->stream_ev) {
        event_free(ac->stream_ev);
        ac->stream_ev = NULL;
    }
    if (ac->sbuf) {
        evbuffer_free(ac->sbuf);
        ac->sbuf = NULL;
    }
    if (ac->stream_counted) {
        ac->stream_counted = false;
        apiconn_transfer_release();
    }
    ac->stream_cb = NULL;
    ac->stream_attached = false;
    ac->stream_raw = false;
}

bool apiconn_transfer_take(void)
{
    if (atomic_fetch_add(&streams_open, 1) >= SBX_FILES_STREAMS_MAX) {
        atomic_fetch_sub(&streams_open, 1);
        return false;
    }
    return true;
}

void apiconn_transfer_release(void) { atomic_fetch_sub(&streams_open, 1); }

int apiconn_stream_begin(apiconn_t *ac, void (*cb)(void *), void *arg)
{
    if (!ac || !ac->sbuf || ac->stream_attached || atomic_load(&ac->shut))
        return SBX_EINVAL;
    ac->stream_ev = event_new(ac->at->base, -1, 0, stream_ev_cb, ac);
    if (!ac->stream_ev)
        return SBX_ENOMEM;
    bufferevent_data_cb wcb = NULL;
    bufferevent_event_cb ecb = NULL;
    void *cbarg = NULL;
    bufferevent_getcb(ac->bev, &ac->saved_readcb, &wcb, &ecb, &cbarg);
    bufferevent_setcb(ac->bev, stream_readcb, wcb, ecb, cbarg);
    ac->stream_attached = true;
    ac->stream_cb = cb;
    ac->stream_arg = arg;
    /* libevent reads 16 KiB at a time unless told: a stream takes more. */
    bufferevent_set_max_single_read(ac->bev, SBX_FILES_STREAM_HIGH_WATER);
    if (ac->stream_status == 0 && !ac->stream_paused)
        bufferevent_enable(ac->bev, EV_READ);
    if (evbuffer_get_length(ac->sbuf) > 0 || ac->stream_status != 0)
        stream_notify(ac);
    return 0;
}

/* evhttp keeps a connection's writes off while it reads a request (it turns
 * them on for its answer), so a 100 Continue only added to the output would
 * wait there for the answer, and the client for its own expect timeout (1 s
 * in curl) before it sends the body. On a plain socket with nothing queued
 * before it, the line goes to the socket here; whatever does not fit (a
 * full socket buffer) and a TLS connection's line go with the answer: such
 * a client waits out its timeout, as before. (Turning writes on would call
 * evhttp's write callback, which would take the line's draining for the end
 * of an answer.) */
void apiconn_stream_continue(apiconn_t *ac)
{
    static const char line[] = "HTTP/1.1 100 Continue\r\n\r\n";
    if (!ac || !ac->stream_expect || !ac->stream_attached)
        return;
    ac->stream_expect = false;
    struct evbuffer *out = bufferevent_get_output(ac->bev);
    size_t n = sizeof line - 1, sent = 0;
    evutil_socket_t fd = bufferevent_getfd(ac->bev);
    if (evbuffer_get_length(out) == 0 && !bufferevent_openssl_get_ssl(ac->bev) && fd >= 0) {
        ssize_t w = send(fd, line, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        sent = w > 0 ? (size_t)w : 0;
    }
    if (sent < n)
        evbuffer_add(out, line + sent, n - sent);
}

struct evbuffer *apiconn_stream_input(apiconn_t *ac) { return ac ? ac->sbuf : NULL; }

bool apiconn_body_unread(const apiconn_t *ac)
{
    return ac && (ac->state == AC_STREAM || ac->stream_cut);
}

int apiconn_stream_status(const apiconn_t *ac) { return ac ? ac->stream_status : SBX_EIO; }

int64_t apiconn_stream_received(const apiconn_t *ac) { return ac ? ac->body_got : 0; }

void apiconn_stream_drained(apiconn_t *ac)
{
    if (!ac || !ac->stream_paused || !ac->sbuf || evbuffer_get_length(ac->sbuf) >= SBX_FILES_STREAM_HIGH_WATER / 2)
        return;
    ac->stream_paused = false;
    if (ac->stream_status == 0 && ac->stream_attached)
        bufferevent_enable(ac->bev, EV_READ);
}

bool apiconn_stream_end(apiconn_t *ac)
{
    if (!ac || !ac->stream_attached)
        return false;
    bool complete = ac->stream_status == 1;
    /* evhttp reads again only after it has sent the answer. */
    bufferevent_disable(ac->bev, EV_READ);
    bufferevent_data_cb rcb = NULL, wcb = NULL;
    bufferevent_event_cb ecb = NULL;
    void *cbarg = NULL;
    bufferevent_getcb(ac->bev, &rcb, &wcb, &ecb, &cbarg);
    bufferevent_setcb(ac->bev, ac->saved_readcb, wcb, ecb, cbarg);
    if (!complete) {
        ac->state = AC_CLOSING;
        ac->stream_cut = true;
        ac->body_since_ms = apiconn__now_ms();
    }
    apiconn__stream_release(ac);
    return complete;
}

