/* GET /v1/sandboxes/{id}/logs: a sandbox's main-process output as NDJSON.
 * While its container exists the bytes come over the data path: the
 * controller signs a logs grant (common/grant.h), connects to the worker's
 * forwarder (worker/forward.c) and turns its frames (common/logframe.h)
 * into one JSON line each, sent as a chunked reply. Once the container is
 * gone the answer is the output tail kept on the sandbox row.
 *
 * A stream goes through WORKER (connected, waiting for the worker's line;
 * nothing answered yet, so errors are ordinary JSON errors) and STREAM (the
 * 200 head sent; the body follows). It reads from the worker only while
 * the client's unsent output is below SBX_LOGS_CLIENT_HIGH_WATER, and ends
 * when the worker's END frame comes, the client goes away, the sandbox stops
 * running (checked every few seconds for a follow) or the controller stops.
 * Everything runs on the request's HTTP thread; nothing blocks. */
#include "api.h"
#include "apiconn.h"
#include "db.h"
#include "grant.h"
#include "ids.h"
#include "limits.h"
#include "log.h"
#include "logframe.h"
#include "proxy.h"
#include "sbuf.h"
#include "store.h"
#include "tlsbev.h"
#include "utf8.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/util.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define LOGS_COMPONENT        "logs"
/* Connecting to the worker and its answer line. */
#define LOGS_WORKER_SECONDS   15
/* A non-follow read whose worker sends nothing for this long has hung. */
#define LOGS_READ_SECONDS     60
#define LOGS_GRANT_SECONDS    60
/* A follow re-checks that its sandbox still runs on a live worker. */
#define LOGS_SWEEP_SECONDS    5
/* What a non-follow read forwards at most. */
#define LOGS_READ_MAX_BYTES   SBX_EXEC_OUTPUT_CEILING

typedef enum { LS_WORKER, LS_STREAM } ls_state_t;

typedef struct logs_stream {
    req_t *rq;
    struct evhttp_connection *evcon;  /* the client's */
    struct bufferevent *up;           /* the worker */
    struct event *peek;               /* watches for the client hanging up */
    struct event *sweep;              /* follow: is the sandbox still running? */
    ls_state_t state;
    int64_t tail;
    bool follow;
    bool paused;                      /* not reading the worker: the client is behind */
    bool up_ended;                    /* the worker's side ended (EOF, error, timeout) */
    short up_what;                    /* and how (BEV_EVENT_*) */
    char sandbox_id[SBX_ID_MAX];
    char *output_tail;                /* the answer should the worker have no container */
    uint64_t sent;                    /* output bytes forwarded */
    char carry[2][4];                 /* per stream: an unfinished UTF-8 sequence */
    size_t carry_len[2];
    char token_id[SBX_ID_MAX];        /* the request's token: revoked, a follow ends */
    tenantcap_hold_t tcap;            /* its tenant's share taken (log streams, worker connections) */
    struct logs_stream *prev, *next;
} logs_stream_t;

/* This HTTP thread's streams (each lives on the thread of its request). */
static __thread logs_stream_t *thread_streams;
static __thread int thread_nstreams;

/* ---- pure parts -------------------------------------------------------- */

int api_logs_parse(const char *tail, const char *follow, int64_t *ret_tail, bool *ret_follow, api_error_t *err)
{
    int64_t t = GRANT_LOGS_TAIL_ALL;
    bool f = false;
    if (tail && strcmp(tail, "all") != 0) {
        size_t n = strlen(tail);
        bool ok = n > 0 && n <= 7 && (n == 1 || tail[0] != '0');
        int64_t v = 0;
        for (size_t i = 0; ok && i < n; i++) {
            ok = tail[i] >= '0' && tail[i] <= '9';
            v = v * 10 + (tail[i] - '0');
        }
        if (!ok || v > SBX_LOGS_TAIL_MAX)
            return api_error_set(err, API_INVALID_ARGUMENT, "tail must be a number of lines from 0 to %d, or all",
                                 SBX_LOGS_TAIL_MAX);
        t = v;
    }
    if (follow) {
        if (strcmp(follow, "true") == 0 || strcmp(follow, "1") == 0)
            f = true;
        else if (strcmp(follow, "false") == 0 || strcmp(follow, "0") == 0)
            f = false;
        else
            return api_error_set(err, API_INVALID_ARGUMENT, "follow must be true or false");
    }
    *ret_tail = t;
    *ret_follow = f;
    return 0;
}

const char *api_logs_tail_lines(const char *text, int64_t tail)
{
    if (tail < 0)
        return text;
    size_t n = strlen(text);
    if (tail == 0)
        return text + n;
    /* A final newline ends the last line rather than starting another. */
    size_t end = n > 0 && text[n - 1] == '\n' ? n - 1 : n;
    int64_t seen = 0;
    for (size_t i = end; i > 0; i--)
        if (text[i - 1] == '\n' && ++seen == tail)
            return text + i;
    return text;
}

/* ---- answering without the worker -------------------------------------- */

/* The kept output tail as the whole answer (an empty stream when none). */
static void reply_tail(req_t *rq, const char *text, int64_t tail)
{
    sbuf_t b;
    sbuf_init(&b, 0);
    const char *t = text ? api_logs_tail_lines(text, tail) : "";
    if (*t && logframe_ndjson_chunk(&b, "output", t, strlen(t)) < 0) {
        sbuf_release(&b);
        http_reply_error(rq, API_INTERNAL, "out of memory");
        return;
    }
    http_reply_text(rq, 200, "application/x-ndjson", b.data ? b.data : "", b.len);
    sbuf_release(&b);
}

/* ---- the stream's life ------------------------------------------------- */

static void ls_unlink(logs_stream_t *ls)
{
    if (ls->prev)
        ls->prev->next = ls->next;
    else if (thread_streams == ls)
        thread_streams = ls->next;
    if (ls->next)
        ls->next->prev = ls->prev;
    ls->prev = ls->next = NULL;
    thread_nstreams--;
}

/* Frees everything but the request. */
static void ls_free(logs_stream_t *ls)
{
    ls_unlink(ls);
    tenantcap_release(&ls->tcap);
    if (ls->up)
        bufferevent_free(ls->up);
    if (ls->peek)
        event_free(ls->peek);
    if (ls->sweep)
        event_free(ls->sweep);
    if (ls->evcon)
        apiconn_set_closecb(ls->evcon, NULL, NULL);
    free(ls->output_tail);
    free(ls);
}

/* Before the head was sent: an ordinary error answer. */
static void ls_fail(logs_stream_t *ls, api_code_t code, const char *msg)
{
    req_t *rq = ls->rq;
    ls_free(ls);
    http_reply_error(rq, code, "%s", msg);
}

/* After the head was sent (or the connection is being freed): ends the
 * body and frees all. */
static void ls_close(logs_stream_t *ls, bool conn_freeing, const char *why)
{
    req_t *rq = ls->rq;
    log_debug(LOGS_COMPONENT, "log stream of sandbox %s ended after %llu bytes: %s", ls->sandbox_id,
              (unsigned long long)ls->sent, why);
    ls_free(ls);
    http_stream_end(rq, conn_freeing);
}

/* The worker has no container for the sandbox (any more): answer from the
 * kept tail instead. */
static void ls_answer_tail(logs_stream_t *ls)
{
    req_t *rq = ls->rq;
    char *text = ls->output_tail;
    int64_t tail = ls->tail;
    ls->output_tail = NULL;
    ls_free(ls);
    reply_tail(rq, text, tail);
    free(text);
}

/* ---- the body ---------------------------------------------------------- */

static void client_drained_cb(struct evhttp_connection *evcon, void *arg);

static size_t client_pending(const logs_stream_t *ls)
{
    struct bufferevent *bev = evhttp_connection_get_bufferevent(ls->evcon);
    return bev ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
}

/* Sends the n bytes of line (a whole NDJSON line) as a chunk. */
static int send_line(logs_stream_t *ls, const char *line, size_t n)
{
    struct evbuffer *b = evbuffer_new();
    if (!b || evbuffer_add(b, line, n) < 0) {
        if (b)
            evbuffer_free(b);
        return SBX_ENOMEM;
    }
    evhttp_send_reply_chunk_with_cb(ls->rq->ev, b, client_drained_cb, ls);
    evbuffer_free(b);
    return 0;
}

static int send_json(logs_stream_t *ls, json_object *o)
{
    const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    sbuf_t b;
    sbuf_init(&b, 0);
    int r = s && sbuf_append(&b, s, strlen(s)) == 0 && sbuf_append(&b, "\n", 1) == 0 ? send_line(ls, b.data, b.len)
                                                                                    : SBX_ENOMEM;
    sbuf_release(&b);
    json_object_put(o);
    return r;
}

/* {"error":{"code","message"}} as the last line of a stream that could
 * not go on. */
static void send_error_line(logs_stream_t *ls, api_code_t code, const char *msg)
{
    json_object *o = json_object_new_object(), *e = json_object_new_object();
    json_object_object_add(e, "code", json_object_new_string(api_code_info(code)->name));
    json_object_object_add(e, "message", json_object_new_string(msg));
    json_object_object_add(o, "error", e);
    send_json(ls, o);
}

/* One piece of output of stream idx (0 stdout, 1 stderr): held-back bytes
 * first, an unfinished UTF-8 sequence at the end held back in turn (all of
 * it when final). Returns 1 when the non-follow limit was reached (the
 * truncation line is sent), 0, or < 0 on allocation failure. */
static int send_output(logs_stream_t *ls, int idx, const unsigned char *data, size_t n, bool final)
{
    size_t total = ls->carry_len[idx] + n;
    if (total == 0)
        return 0;
    char *buf = malloc(total);
    if (!buf)
        return SBX_ENOMEM;
    memcpy(buf, ls->carry[idx], ls->carry_len[idx]);
    if (n)
        memcpy(buf + ls->carry_len[idx], data, n);
    size_t cut = final ? total : logframe_utf8_prefix(buf, total);
    bool truncated = false;
    if (!ls->follow && ls->sent + cut > LOGS_READ_MAX_BYTES) {
        cut = logframe_utf8_prefix(buf, (size_t)(LOGS_READ_MAX_BYTES - ls->sent));
        truncated = true;
    }
    ls->carry_len[idx] = truncated ? 0 : total - cut;
    memcpy(ls->carry[idx], buf + cut, ls->carry_len[idx]);
    int r = 0;
    if (cut > 0) {
        sbuf_t b;
        sbuf_init(&b, 0);
        r = logframe_ndjson_chunk(&b, idx == 0 ? "stdout" : "stderr", buf, cut);
        if (r == 0)
            r = send_line(ls, b.data, b.len);
        sbuf_release(&b);
        ls->sent += cut;
    }
    free(buf);
    if (r == 0 && truncated) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "truncated", json_object_new_boolean(true));
        json_object_object_add(o, "limit_bytes", json_object_new_int64(LOGS_READ_MAX_BYTES));
        send_json(ls, o);
        return 1;
    }
    return r;
}

/* Sends what was held back of both streams. */
static void flush_carries(logs_stream_t *ls)
{
    for (int i = 0; i < 2; i++)
        if (ls->carry_len[i] && send_output(ls, i, NULL, 0, true) != 0)
            return;
}

/* Turns the frames in the worker's input into lines until the input has no
 * whole frame, the client is behind, or the stream ends (then ls is gone:
 * returns false). */
static bool ls_pump(logs_stream_t *ls)
{
    struct evbuffer *in = bufferevent_get_input(ls->up);
    while (!ls->paused) {
        size_t n = evbuffer_get_length(in);
        if (n < LOGFRAME_HEADER_BYTES)
            return true;
        logframe_t fr;
        unsigned char *p = evbuffer_pullup(in, LOGFRAME_HEADER_BYTES);
        int r = p ? logframe_parse(p, LOGFRAME_HEADER_BYTES, &fr) : SBX_ENOMEM;
        if (r == 0) {
            uint32_t len = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | (uint32_t)p[4];
            if (n < LOGFRAME_HEADER_BYTES + (size_t)len)
                return true;
            p = evbuffer_pullup(in, (ev_ssize_t)(LOGFRAME_HEADER_BYTES + len));
            r = p ? logframe_parse(p, LOGFRAME_HEADER_BYTES + len, &fr) : SBX_ENOMEM;
        }
        if (r < 0) {
            log_warn(LOGS_COMPONENT, "the worker sent a malformed logs frame for sandbox %s", ls->sandbox_id);
            send_error_line(ls, API_BAD_GATEWAY, "the worker sent a malformed logs frame");
            ls_close(ls, false, "malformed frame");
            return false;
        }
        if (fr.type == LOGFRAME_END) {
            char why[520];
            size_t wl = fr.len < sizeof why - 1 ? fr.len : sizeof why - 1;
            memcpy(why, fr.data, wl);
            why[wl] = '\0';
            flush_carries(ls);
            if (wl) {
                char *clean = utf8_sanitize(why, wl);
                send_error_line(ls, API_RUNTIME_ERROR, clean ? clean : "the worker could not read the logs");
                free(clean);
            }
            ls_close(ls, false, wl ? why : "the worker's stream ended");
            return false;
        }
        r = send_output(ls, fr.type == LOGFRAME_STDERR ? 1 : 0, fr.data, fr.len, false);
        evbuffer_drain(in, fr.size);
        if (r != 0) {
            ls_close(ls, false, r > 0 ? "output limit reached" : "out of memory");
            return false;
        }
        if (client_pending(ls) >= SBX_LOGS_CLIENT_HIGH_WATER) {
            ls->paused = true;
            bufferevent_disable(ls->up, EV_READ);
        }
    }
    return true;
}

/* The worker's connection ended without an END frame: say so as the last
 * line. */
static void ls_worker_gone(logs_stream_t *ls)
{
    const char *why = ls->up_what & BEV_EVENT_TIMEOUT ? "the worker sent nothing in time"
                                                      : "the worker connection ended early";
    log_warn(LOGS_COMPONENT, "log stream of sandbox %s: %s", ls->sandbox_id, why);
    flush_carries(ls);
    send_error_line(ls, API_UNAVAILABLE, why);
    ls_close(ls, false, why);
}

/* The client's output drained: read the worker again. */
static void client_drained_cb(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    logs_stream_t *ls = arg;
    if (!ls->paused)
        return;
    ls->paused = false;
    if (!ls_pump(ls) || ls->paused)
        return;
    if (ls->up_ended)
        ls_worker_gone(ls);
    else
        bufferevent_enable(ls->up, EV_READ);
}

static void stream_read_cb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    ls_pump(arg);
}

static void stream_event_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    logs_stream_t *ls = arg;
    ls->up_ended = true;
    ls->up_what = what;
    bufferevent_disable(ls->up, EV_READ | EV_WRITE);
    /* Frames that came before the end go out first (the END frame among
     * them ends the stream); a client that is behind resumes it. */
    if (!ls_pump(ls) || ls->paused)
        return;
    ls_worker_gone(ls);
}

/* ---- waiting for the worker's line ------------------------------------- */

static void ls_begin_stream(logs_stream_t *ls)
{
    ls->state = LS_STREAM;
    http_stream_start(ls->rq, "application/x-ndjson");
    struct timeval rt = { LOGS_READ_SECONDS, 0 };
    bufferevent_set_timeouts(ls->up, ls->follow ? NULL : &rt, NULL);
    bufferevent_setwatermark(ls->up, EV_READ, 0, LOGFRAME_HEADER_BYTES + LOGFRAME_PAYLOAD_MAX);
    bufferevent_setcb(ls->up, stream_read_cb, NULL, stream_event_cb, ls);
    bufferevent_enable(ls->up, EV_READ);
    if (ls->sweep) {
        struct timeval st = { LOGS_SWEEP_SECONDS, 0 };
        evtimer_add(ls->sweep, &st);
    }
    ls_pump(ls); /* frames that came with the line */
}

static void worker_read_cb(struct bufferevent *bev, void *arg)
{
    logs_stream_t *ls = arg;
    proxy_worker_reply_t rep;
    int r = proxy_worker_reply_read(bufferevent_get_input(bev), &rep);
    if (r < 0)
        ls_fail(ls, API_UNAVAILABLE, "the worker answered something else than a forward reply");
    if (r <= 0)
        return;
    if (rep.status == 200) {
        ls_begin_stream(ls);
        return;
    }
    if (rep.status == 404) {
        ls_answer_tail(ls);
        return;
    }
    log_warn(LOGS_COMPONENT, "sandbox %s: the worker refused the logs stream: %d %s %s", ls->sandbox_id, rep.status,
             rep.code, rep.msg);
    char full[400];
    snprintf(full, sizeof full, "the worker running the sandbox refused: %s", rep.msg);
    ls_fail(ls, rep.status == 409 ? API_CONFLICT : API_UNAVAILABLE, full);
}

static void worker_event_cb(struct bufferevent *bev, short what, void *arg)
{
    logs_stream_t *ls = arg;
    if (what & BEV_EVENT_CONNECTED) {
        proxy_worker_keepalive(ls->up);
        return;
    }
    char why[200];
    tls_bev_failure(bev, why, sizeof why);
    if (why[0] && !(what & BEV_EVENT_TIMEOUT)) {
        log_warn(LOGS_COMPONENT, "sandbox %s: TLS to the worker's forwarder failed: %s", ls->sandbox_id, why);
        ls_fail(ls, API_UNAVAILABLE, "the worker running the sandbox failed TLS verification");
        return;
    }
    ls_fail(ls, API_UNAVAILABLE, what & BEV_EVENT_TIMEOUT ? "the worker running the sandbox did not answer in time"
                                                          : "cannot reach the worker running the sandbox");
}

/* ---- the client and the sandbox going away ----------------------------- */

/* libevent frees the client's connection (a failed write, or the thread
 * stopping). */
static void client_close_cb(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    logs_stream_t *ls = arg;
    ls->evcon = NULL; /* being freed: no close callback to clear */
    bool attached = evhttp_request_get_connection(ls->rq->ev) != NULL;
    ls_close(ls, attached, "the client connection closed");
}

/* libevent does not read a connection while its request is being answered;
 * a hang-up shows as readable with nothing to read. */
static void client_peek_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    logs_stream_t *ls = arg;
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))) {
        event_del(ls->peek); /* a pipelined request, or nothing after all */
        return;
    }
    if (ls->state == LS_WORKER)
        ls_fail(ls, API_UNAVAILABLE, "the client went away");
    else
        ls_close(ls, false, "the client went away");
}

/* Follow: the sandbox stopped running, or its worker was lost, without the
 * worker's stream ending (a paused or unreachable worker). */
static void sweep_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    logs_stream_t *ls = arg;
    logs_source_t src;
    if (http_db(ls->rq) < 0)
        return; /* try again next time */
    int rc = store_sandbox_logs_source(ls->rq->db, NULL, ls->sandbox_id, &src);
    bool alive = rc == 0 && (strcmp(src.phase, "running") == 0 || strcmp(src.phase, "deleting") == 0) &&
                 strcmp(src.worker_state, "lost") != 0;
    store_logs_source_release(&src);
    if (rc < 0 && rc != SBX_ENOTFOUND)
        return;
    if (!alive) {
        flush_carries(ls);
        ls_close(ls, false, "the sandbox is no longer running");
        return;
    }
    /* A revoked (or expired) token's follow ends within a sweep. */
    if (ls->token_id[0] && auth_token_live(ls->rq->db, ls->token_id) == 0) {
        flush_carries(ls);
        ls_close(ls, false, "the request's token was revoked or expired");
    }
}

/* ---- the handler ------------------------------------------------------- */

static int sign_logs_grant(const logs_source_t *src, const char *sandbox_id, int64_t tail, bool follow,
                           char ret[GRANT_MAX])
{
    unsigned char key[GRANT_KEY_BYTES];
    grant_t g = { .purpose = GRANT_LOGS, .logs_tail = tail, .logs_follow = follow,
                  .expires_unix = (int64_t)time(NULL) + LOGS_GRANT_SECONDS };
    snprintf(g.worker_id, sizeof g.worker_id, "%s", src->worker_id);
    snprintf(g.sandbox_id, sizeof g.sandbox_id, "%s", sandbox_id);
    int rc = grant_key_from_hash_hex(src->worker_token_hash, key);
    if (rc == 0)
        rc = grant_sign(key, &g, ret);
    sodium_memzero(key, sizeof key);
    return rc;
}

/* Opens the stream of sandbox id's logs: connects to the worker's
 * forwarder at src's address, sends the preamble with grant and answers rq
 * as the worker's answer comes (the stream owns rq from here; src's output
 * tail moves to it). A failure is answered at once. */
static void logs_stream_start(req_t *rq, const char *id, logs_source_t *src, int64_t tail, bool follow,
                              const char *grant, tenantcap_hold_t *tcap)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(rq->ev);
    struct bufferevent *cbev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
    struct event_base *base = evcon ? evhttp_connection_get_base(evcon) : NULL;
    logs_stream_t *ls = base ? calloc(1, sizeof *ls) : NULL;
    if (!ls) {
        tenantcap_release(tcap);
        http_reply_error(rq, API_INTERNAL, "out of memory");
        return;
    }
    ls->tcap = *tcap; /* the stream's now: ls_free gives it back */
    tcap->kinds = 0;
    snprintf(ls->token_id, sizeof ls->token_id, "%s", rq->auth.token_id);
    ls->rq = rq;
    ls->evcon = evcon;
    ls->tail = tail;
    ls->follow = follow;
    ls->output_tail = src->output_tail;
    src->output_tail = NULL;
    snprintf(ls->sandbox_id, sizeof ls->sandbox_id, "%s", id);
    ls->next = thread_streams;
    if (thread_streams)
        thread_streams->prev = ls;
    thread_streams = ls;
    thread_nstreams++;
    apiconn_set_closecb(evcon, client_close_cb, ls);
    evutil_socket_t cfd = cbev ? bufferevent_getfd(cbev) : -1;
    if (cfd >= 0 && (ls->peek = event_new(base, cfd, EV_READ, client_peek_cb, ls)))
        event_add(ls->peek, NULL);
    if (follow)
        ls->sweep = event_new(base, -1, EV_PERSIST, sweep_cb, ls);
    if (follow && !ls->sweep) {
        ls_fail(ls, API_INTERNAL, "out of memory");
        return;
    }
    struct evbuffer *pre = evbuffer_new();
    const char *why = "out of memory";
    if (pre)
        evbuffer_add_printf(pre, "SANDBOX-FORWARD/1 %s\r\n", grant);
    ls->up = pre ? proxy_worker_dial(rq->ctl, base, src->worker_address, pre, LOGS_WORKER_SECONDS, worker_read_cb,
                                     NULL, worker_event_cb, ls, &why)
                 : NULL;
    if (pre)
        evbuffer_free(pre);
    if (!ls->up)
        ls_fail(ls, API_UNAVAILABLE, why);
}

void api_sandbox_logs(req_t *rq, const char *id)
{
    int64_t tail;
    bool follow;
    api_error_t err;
    logs_source_t src;
    memset(&src, 0, sizeof src);
    if (api_logs_parse(http_query(rq, "tail"), http_query(rq, "follow"), &tail, &follow, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    if (!ids_valid("sbx", id)) {
        http_reply_error(rq, API_NOT_FOUND, "no sandbox %.64s", id);
        return;
    }
    int rc = store_sandbox_logs_source(rq->db, auth_scope(rq), id, &src);
    if (rc == SBX_ENOTFOUND) {
        http_reply_error(rq, API_NOT_FOUND, "no sandbox %.64s", id);
        return;
    }
    if (rc < 0) {
        http_reply_error(rq, API_UNAVAILABLE, "database unavailable");
        return;
    }
    const char *ph = src.phase;
    if (strcmp(ph, "pending") == 0 || strcmp(ph, "scheduled") == 0 || strcmp(ph, "provisioning") == 0) {
        http_reply_error(rq, API_CONFLICT, "sandbox %s has no container yet (phase %s): its logs start once it runs",
                         id, ph);
        goto cleanup;
    }
    if (strcmp(ph, "running") != 0 && strcmp(ph, "deleting") != 0) {
        reply_tail(rq, src.output_tail, tail); /* failed, lost, deleted: the container is gone */
        goto cleanup;
    }
    if (!src.worker_id[0] || strcmp(src.worker_state, "lost") == 0) {
        http_reply_error(rq, API_UNAVAILABLE, "the worker running sandbox %s is lost", id);
        goto cleanup;
    }
    if (src.unreachable[0]) {
        http_reply_error(rq, API_UNAVAILABLE, "cannot read the logs of sandbox %s now: %s; retry once it is back",
                         id, src.unreachable);
        goto cleanup;
    }
    if (!src.worker_address[0] || !src.worker_token_hash[0]) {
        http_reply_error(rq, API_UNAVAILABLE, "the worker running sandbox %s has no forwarder address", id);
        goto cleanup;
    }
    if (thread_nstreams >= SBX_LOGS_MAX_STREAMS_PER_THREAD || rq->ctl->stopping) {
        http_reply_error(rq, API_UNAVAILABLE, "too many log streams; retry shortly");
        goto cleanup;
    }
    tenantcap_hold_t tcap = { .kinds = 0 };
    if (api_tenant_take(rq, &src, TCAP_BIT(TCAP_LOG_STREAMS) | TCAP_BIT(TCAP_WORKER_CONNS), &tcap) < 0)
        goto cleanup;
    char grant[GRANT_MAX];
    if (sign_logs_grant(&src, id, tail, follow, grant) < 0) {
        tenantcap_release(&tcap);
        http_reply_error(rq, API_INTERNAL, "cannot sign the worker grant");
        goto cleanup;
    }
    logs_stream_start(rq, id, &src, tail, follow, grant, &tcap);
    sodium_memzero(grant, sizeof grant);
cleanup:
    store_logs_source_release(&src);
}

void api_logs_stop_thread(void)
{
    while (thread_streams) {
        logs_stream_t *ls = thread_streams;
        if (ls->state == LS_WORKER) {
            ls_fail(ls, API_UNAVAILABLE, "the controller is stopping");
        } else {
            flush_carries(ls);
            ls_close(ls, false, "the controller is stopping");
        }
    }
}
