/* HTTP threads: one event_base + evhttp + PostgreSQL connection each, all
 * accepting on the same listening socket; routing; parked long-polls. */
#include "server.h"
#include "server_int.h"
#include "api.h"
#include "apiconn.h"
#include "conncap.h"
#include "db.h"
#include "e2b.h"
#include "fdutil.h"
#include "http_errpage.h"
#include "jsonx.h"
#include "limits.h"
#include "ids.h"
#include "log.h"
#include "metrics.h"
#include "proxy.h"
#include "ratelimit.h"
#include "sbuf.h"
#include "token.h"
#include "utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct http_thread {
    controller_t *ctl;
    int idx;
    int fd;                     /* dup of the listening socket */
    struct event_base *base;
    struct evhttp *http;
    proxy_thread_t *proxy;      /* the route listener's connections */
    apiconn_thread_t *conns;    /* the API listener's connections */
    PGconn *db;
    struct event *wake_ev;
    struct event *stop_ev;
    struct event *recheck_ev;   /* timer: parked event reads look again (events held back) */
    req_t *parked;              /* doubly linked list */
    int nparked;                /* in it, but for PARK_REFUSAL */
    int nheld;                  /* PARK_REFUSAL in it */
    pthread_t tid;
    bool started;
    /* What the wake-ups since the last wake_cb said changed (server_wake),
     * under wake_mu: WAKE_* bits, and the operations that ended. */
    pthread_mutex_t wake_mu;
    unsigned wake_mask;
    int nwake_ops;
    char wake_ops[SBX_WAKE_OPS_MAX][SBX_ID_MAX];
};

/* The latest long-poll of each worker. A worker has one poller: when it
 * polls again (after a restart, or because its old connection died), the
 * older parked polls are superseded and must not claim work, which could go
 * to a connection nobody reads. A small open-addressing table; when it
 * fills up it is cleared (the leases still recover anything lost). */
#define POLL_GEN_SLOTS 4096
static struct {
    char worker[SBX_ID_MAX];
    uint64_t gen;
} poll_gens[POLL_GEN_SLOTS];
static uint64_t poll_gen_counter;
static int poll_gen_used;
static pthread_mutex_t poll_gen_mu = PTHREAD_MUTEX_INITIALIZER;

static size_t poll_gen_slot(const char *worker)
{
    uint64_t h = 1469598103934665603ull;
    for (const char *p = worker; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    size_t i = (size_t)(h % POLL_GEN_SLOTS);
    while (poll_gens[i].worker[0] && strcmp(poll_gens[i].worker, worker) != 0)
        i = (i + 1) % POLL_GEN_SLOTS;
    return i;
}

uint64_t server_poll_begin(const char *worker_id)
{
    pthread_mutex_lock(&poll_gen_mu);
    if (poll_gen_used >= POLL_GEN_SLOTS / 2) {
        memset(poll_gens, 0, sizeof poll_gens);
        poll_gen_used = 0;
    }
    size_t i = poll_gen_slot(worker_id);
    if (!poll_gens[i].worker[0]) {
        snprintf(poll_gens[i].worker, sizeof poll_gens[i].worker, "%s", worker_id);
        poll_gen_used++;
    }
    uint64_t g = ++poll_gen_counter;
    poll_gens[i].gen = g;
    pthread_mutex_unlock(&poll_gen_mu);
    return g;
}

bool server_poll_current(const char *worker_id, uint64_t gen)
{
    pthread_mutex_lock(&poll_gen_mu);
    size_t i = poll_gen_slot(worker_id);
    /* Unknown (table cleared): nothing newer is known, so it is current. */
    bool cur = !poll_gens[i].worker[0] || poll_gens[i].gen == gen;
    pthread_mutex_unlock(&poll_gen_mu);
    return cur;
}

/* A connection's read and write timeout: longer than any long-poll. */
#define HTTP_CONN_TIMEOUT_SECONDS (SBX_MAX_WAIT_SECONDS * 2)

static metric_family_t *m_requests, *m_duration, *m_rate_limited, *m_rechecked;
static pthread_once_t metrics_once = PTHREAD_ONCE_INIT;

static void server_metrics_init(void)
{
    metric_family_t *start = metrics_family("sandbox_process_start_time_seconds", METRIC_GAUGE,
                                            "Start time of the process since the Unix epoch, in seconds.", NULL, 0);
    metrics_set(start, NULL, (double)time(NULL));
    m_requests = metrics_family("sandbox_http_requests_total", METRIC_COUNTER,
                                "HTTP API requests answered, by route template, method and status.", NULL, 0);
    m_duration = metrics_family("sandbox_http_request_duration_seconds", METRIC_HISTOGRAM,
                                "Time from a request's arrival to its answer (long-polls include their wait), by "
                                "route template.",
                                metrics_latency_buckets, metrics_latency_nbuckets);
    m_rate_limited = metrics_family("sandbox_rate_limited_total", METRIC_COUNTER,
                                    "Requests answered 429 rate_limited, by kind: request (a client token's request "
                                    "rate) or operation (a tenant's operation rate).", NULL, 0);
    m_rechecked = metrics_family("sandbox_wake_rechecked_total", METRIC_COUNTER,
                                 "Parked long-polls re-checked after a wake-up, by kind: operation (a wait on an "
                                 "operation) or poll (a worker's poll). A wake-up re-checks only those what "
                                 "changed can have answered.", NULL, 0);
}

static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Keeps the client's X-Request-Id when it is short and plain, else makes one. */
static void request_id_assign(req_t *rq)
{
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(rq->ev), "X-Request-Id");
    size_t n = h ? strlen(h) : 0;
    bool ok = n > 0 && n <= SBX_REQUEST_ID_MAX;
    for (size_t i = 0; ok && i < n; i++) {
        char c = h[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
             c == ':' || c == '-';
    }
    if (ok) {
        memcpy(rq->request_id, h, n + 1);
    } else {
        char id[SBX_ID_MAX];
        ids_new("req", id);
        snprintf(rq->request_id, sizeof rq->request_id, "%s", id);
    }
}

/* The thread's log scope while it works for rq. */
static void request_scope_enter(const req_t *rq)
{
    log_scope_clear();
    log_ctx_t ctx = { .request_id = rq->request_id, .tenant = rq->auth.tenant_id[0] ? rq->auth.tenant_id : NULL };
    /* The sandbox or operation the path names, when it has an id's shape. */
    if (rq->nsegs >= 3 && strlen(rq->segs[2]) < SBX_ID_MAX) {
        if (strcmp(rq->segs[1], "sandboxes") == 0 && ids_valid("sbx", rq->segs[2]))
            ctx.sandbox = rq->segs[2];
        else if (strcmp(rq->segs[1], "operations") == 0 && ids_valid("op", rq->segs[2]))
            ctx.operation = rq->segs[2];
    }
    log_scope_set(&ctx);
}

static void req_free(req_t *rq)
{
    if (!rq)
        return;
    apiconn_request_end(rq->conn);
    if (rq->park_timer)
        event_free(rq->park_timer);
    if (rq->park_peek)
        event_free(rq->park_peek);
    evhttp_clear_headers(&rq->query);
    free(rq);
}

static void park_unlink(req_t *rq)
{
    http_thread_t *th = rq->th;
    if (rq->park_prev)
        rq->park_prev->park_next = rq->park_next;
    else if (th->parked == rq)
        th->parked = rq->park_next;
    if (rq->park_next)
        rq->park_next->park_prev = rq->park_prev;
    rq->park_prev = rq->park_next = NULL;
    if (rq->park_kind == PARK_REFUSAL)
        th->nheld--;
    else if (rq->park_kind)
        th->nparked--;
    rq->park_kind = 0;
    if (rq->park_timer) {
        event_free(rq->park_timer);
        rq->park_timer = NULL;
    }
    if (rq->park_peek) {
        event_free(rq->park_peek);
        rq->park_peek = NULL;
    }
}

static void reply_done(req_t *rq, int status);

/* Sends the answer, counts it, writes the access log line, frees rq. */
static void reply_send(req_t *rq, int status, const char *content_type, const char *data, size_t len, bool newline)
{
    if (rq->park_kind)
        park_unlink(rq);
    struct evbuffer *buf = evbuffer_new();
    if (buf) {
        evbuffer_add(buf, data, len);
        if (newline)
            evbuffer_add(buf, "\n", 1);
    }
    struct evkeyvalq *h = evhttp_request_get_output_headers(rq->ev);
    evhttp_add_header(h, "Content-Type", content_type);
    evhttp_add_header(h, "Cache-Control", "no-store");
    if (rq->request_id[0])
        evhttp_add_header(h, "X-Request-Id", rq->request_id);
    /* An upload answered before its body was read (refused, or cut off):
     * the rest of the body must not be read as a next request. */
    if (rq->conn && http_header(rq, APICONN_STREAM_HEADER) && apiconn_body_unread(rq->conn) &&
        !evhttp_find_header(h, "Connection"))
        evhttp_add_header(h, "Connection", "close");
    evhttp_send_reply(rq->ev, status, NULL, buf);
    if (buf)
        evbuffer_free(buf);
    reply_done(rq, status);
}

/* Counts the answer, writes the access log line and frees rq. */
static void reply_done(req_t *rq, int status)
{
    const char *tmpl = rq->route_tmpl ? rq->route_tmpl : "other";
    double secs = rq->t0_us ? (double)(mono_us() - rq->t0_us) / 1e6 : 0;
    char labels[160], st[8];
    snprintf(st, sizeof st, "%d", status);
    metrics_add(m_requests, metrics_labels(labels, sizeof labels, "route", tmpl, "method", method_name(rq->method),
                                           "status", st, NULL), 1);
    metrics_observe(m_duration, metrics_labels(labels, sizeof labels, "route", tmpl, NULL), secs);
    request_scope_enter(rq);
    char ms[32];
    snprintf(ms, sizeof ms, "%.1f", secs * 1000);
    /* Answers that shed load (429, and what the API listener refused
     * before the handlers) come in floods: at most one info line a second
     * counts those not written, the rest go to debug, so a flood cannot
     * fill the disk through the access log. */
    static atomic_llong shed_last;
    static atomic_long shed_skipped;
    long skipped = 0;
    bool shed = status == 429 || strcmp(rq->path, APICONN_REFUSED_PATH) == 0;
    bool info = !(route_is_routine(tmpl) && status < 500);
    if (shed && info)
        info = conncap_log_due(&shed_last, &shed_skipped, &skipped);
    char sk[24];
    snprintf(sk, sizeof sk, "%ld", skipped);
    const char *fields[] = { "method", method_name(rq->method), "path", rq->path, "route", tmpl,
                             "status", st, "duration_ms", ms, shed ? "shed_not_logged" : NULL, sk, NULL };
    log_write_fields(info ? LOG_INFO : LOG_DEBUG, "http", fields, "request");
    log_scope_clear();
    req_free(rq);
}

/* A test facility: with SANDBOXD_RECORD_RESPONSES=FILE in its environment
 * the controller appends every JSON answer of a route to FILE, one line
 * {"method","route","status","body"} each, so the test suite can check each
 * against the OpenAPI document (tests/openapi/check.mjs). One write(2) a
 * line on an O_APPEND file: several controllers may share it. Never set in
 * production: the file holds what the answers held, tokens shown once too. */
static int record_fd = -1;
static pthread_once_t record_once = PTHREAD_ONCE_INIT;

static void record_open(void)
{
    const char *path = getenv("SANDBOXD_RECORD_RESPONSES");
    if (path && *path) {
        record_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (record_fd < 0)
            log_warn("http", "cannot open SANDBOXD_RECORD_RESPONSES=%s: %s; answers are not recorded", path,
                     strerror(errno));
    }
}

static void record_answer(const req_t *rq, int status, const char *body)
{
    /* conn_gone: nobody receives it; another dialect's answers, and the
     * console's (its files, docs/console.md), are not this API's
     * (docs/openapi.json covers /v1) */
    if (record_fd < 0 || !rq->route_tmpl || rq->conn_gone || rq->dialect != DIALECT_SANDBOX ||
        strncmp(rq->route_tmpl, "/console/", 9) == 0)
        return;
    sbuf_t b;
    sbuf_init(&b, 0);
    int rc = sbuf_printf(&b, "{\"method\":\"%s\",\"route\":\"%s\",\"status\":%d,\"body\":%s}\n",
                         method_name(rq->method), rq->route_tmpl, status, body);
    if (rc == 0 && write(record_fd, b.data, b.len) < 0)
        log_debug("http", "recording an answer failed: %s", strerror(errno));
    sbuf_release(&b);
}

void http_reply_json(req_t *rq, int status, json_object *body)
{
    const char *s = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    record_answer(rq, status, s);
    reply_send(rq, status, "application/json", s, strlen(s), true);
    json_object_put(body);
}

void http_reply_text(req_t *rq, int status, const char *content_type, const char *data, size_t len)
{
    reply_send(rq, status, content_type, data, len, false);
}

void http_stream_start(req_t *rq, const char *content_type)
{
    http_stream_start_status(rq, 200, content_type);
}

void http_stream_start_status(req_t *rq, int status, const char *content_type)
{
    rq->stream_status = status;
    struct evkeyvalq *h = evhttp_request_get_output_headers(rq->ev);
    evhttp_add_header(h, "Content-Type", content_type);
    evhttp_add_header(h, "Cache-Control", "no-store");
    /* Proxies in front must not hold the stream back to buffer it. */
    evhttp_add_header(h, "X-Accel-Buffering", "no");
    if (rq->request_id[0])
        evhttp_add_header(h, "X-Request-Id", rq->request_id);
    evhttp_send_reply_start(rq->ev, status, NULL);
    /* While the body streams, libevent reads the connection only to see it
     * close: a quiet stream must not hit the read timeout, but a client
     * that stops reading still hits the write timeout. */
    struct evhttp_connection *evcon = evhttp_request_get_connection(rq->ev);
    struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
    struct timeval wt = { HTTP_CONN_TIMEOUT_SECONDS, 0 };
    if (bev)
        bufferevent_set_timeouts(bev, NULL, &wt);
}

void http_stream_end(req_t *rq, bool conn_freeing)
{
    /* Detached from a failed connection, the request is freed by
     * evhttp_send_reply_end; on a live one that call ends the body. A
     * connection being freed frees its request itself. */
    if (!conn_freeing) {
        struct evhttp_connection *evcon = evhttp_request_get_connection(rq->ev);
        struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
        struct timeval t = { HTTP_CONN_TIMEOUT_SECONDS, 0 };
        if (bev)
            bufferevent_set_timeouts(bev, &t, &t); /* a kept-alive connection waits for its next request */
        evhttp_send_reply_end(rq->ev);
    }
    rq->ev = NULL;
    reply_done(rq, rq->stream_status ? rq->stream_status : 200);
}

void http_reply_dropped(req_t *rq)
{
    rq->ev = NULL;
    reply_done(rq, 499);
}

void http_reply_upgraded(req_t *rq)
{
    /* A request evhttp detached (the client closed first) is freed by a
     * reply, which then sends nothing. */
    if (rq->ev && !evhttp_request_get_connection(rq->ev))
        evhttp_send_reply(rq->ev, 101, NULL, NULL);
    rq->ev = NULL;
    reply_done(rq, 101);
}

void http_reply_error(req_t *rq, api_code_t code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const api_code_info_t *info = api_code_info(code);
    if (rq->dialect == DIALECT_E2B) {
        e2b_reply_error(rq, code, msg);
        return;
    }
    if (rq->dialect == DIALECT_CONNECT) {
        e2b_reply_connect_error(rq, code, msg);
        return;
    }
    http_reply_json(rq, info->http_status, jsonx_error_body(info->name, msg));
}

void http_reply_api_error(req_t *rq, const api_error_t *err)
{
    http_reply_error(rq, err->code, "%s", err->message);
}

int http_read_json(req_t *rq, size_t limit, json_object **ret)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(rq->ev);
    size_t n = evbuffer_get_length(in);
    if (n > limit) {
        http_reply_error(rq, API_PAYLOAD_TOO_LARGE, "request body of %zu bytes is over the limit of %zu bytes", n,
                         limit);
        return SBX_EINVAL;
    }
    if (n == 0) {
        http_reply_error(rq, API_INVALID_JSON, "a JSON request body is required");
        return SBX_EINVAL;
    }
    const char *p = (const char *)evbuffer_pullup(in, (ev_ssize_t)n);
    api_error_t err;
    if (!p || jsonx_parse(p, n, ret, &err) < 0) {
        if (!p)
            api_error_set(&err, API_INTERNAL, "out of memory");
        http_reply_api_error(rq, &err);
        return SBX_EINVAL;
    }
    if (jsonx_refuse_nul(*ret, &err) < 0) {
        json_object_put(*ret);
        *ret = NULL;
        http_reply_api_error(rq, &err);
        return SBX_EINVAL;
    }
    return 0;
}

int http_db(req_t *rq)
{
    if (db_ensure(&rq->th->db, rq->ctl->conninfo) < 0)
        return SBX_EUNAVAIL;
    rq->db = rq->th->db;
    return 0;
}

const char *http_query(req_t *rq, const char *key) { return evhttp_find_header(&rq->query, key); }

const char *http_header(req_t *rq, const char *name)
{
    return evhttp_find_header(evhttp_request_get_input_headers(rq->ev), name);
}

int http_wait_param(req_t *rq, int *ret)
{
    const char *w = http_query(rq, "wait");
    *ret = 0;
    if (!w)
        return 0;
    char *end;
    errno = 0;
    long v = strtol(w, &end, 10);
    if (errno || end == w || *end || v < 0) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "wait must be a whole number of seconds (0 to %d)",
                         SBX_MAX_WAIT_SECONDS);
        return SBX_EINVAL;
    }
    *ret = v > SBX_MAX_WAIT_SECONDS ? SBX_MAX_WAIT_SECONDS : (int)v;
    return 0;
}

static void park_resume_scoped(req_t *rq, bool final);

static void park_resume(req_t *rq, bool final)
{
    request_scope_enter(rq);
    park_resume_scoped(rq, final);
    log_scope_clear();
}

static void park_resume_scoped(req_t *rq, bool final)
{
    if (rq->conn_gone) {
        /* Nobody reads the answer: do no work for it (a poll must not
         * claim assignments), just let libevent free the request. */
        http_reply_json(rq, 200, json_object_new_object());
        return;
    }
    if (rq->park_kind == PARK_OPERATION && rq->park_resume)
        rq->park_resume(rq, final);
    else if (rq->park_kind == PARK_OPERATION)
        api_operation_resume(rq);
    else if (rq->park_kind == PARK_POLL)
        api_poll_resume(rq, final);
    else if (rq->park_kind == PARK_EVENTS)
        api_events_resume(rq, final);
    else if (rq->park_kind == PARK_OUTPUT)
        api_output_resume(rq);
    else if (rq->park_kind == PARK_REFUSAL)
        http_reply_error(rq, API_RATE_LIMITED, "%s; retry after %d s", rq->refusal_what, rq->refusal_retry_after);
}

static void park_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    req_t *rq = arg;
    if (rq->park_kind != PARK_REFUSAL && db_ensure(&rq->th->db, rq->ctl->conninfo) < 0) {
        http_reply_error(rq, API_UNAVAILABLE, "database unavailable");
        return;
    }
    rq->db = rq->th->db;
    park_resume(rq, true);
}

/* libevent does not read a connection while its request is being handled,
 * so it would not notice a client that hangs up during a long-poll. We
 * watch the socket ourselves: readable with nothing to read means the
 * client is gone; answer at once and do no work for it (a poll must not
 * claim assignments nobody will receive). */
static void park_peek_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    req_t *rq = arg;
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))) {
        /* A pipelined request, or nothing after all: stop watching. */
        event_del(rq->park_peek);
        return;
    }
    rq->conn_gone = true;
    park_resume(rq, true);
}

/* Puts rq on its thread's parked list, answered by park_resume when woken
 * or after tv. Returns < 0 (rq untouched) without a timer. */
static int park_link(req_t *rq, park_kind_t kind, const struct timeval *tv)
{
    http_thread_t *th = rq->th;
    rq->park_timer = evtimer_new(th->base, park_timeout_cb, rq);
    if (!rq->park_timer)
        return SBX_ENOMEM;
    evtimer_add(rq->park_timer, tv);
    rq->park_kind = kind;
    rq->park_next = th->parked;
    if (th->parked)
        th->parked->park_prev = rq;
    th->parked = rq;
    if (kind == PARK_REFUSAL)
        th->nheld++;
    else
        th->nparked++;
    return 0;
}

void http_park(req_t *rq, park_kind_t kind, const char *id, int wait_seconds)
{
    http_thread_t *th = rq->th;
    struct timeval tv = { wait_seconds, 0 };
    char copy[SBX_ID_MAX];
    snprintf(copy, sizeof copy, "%s", id); /* id may be rq->park_id itself */
    id = copy;
    if (rq->park_kind)
        park_unlink(rq); /* parked again from its own resume */
    if (th->nparked >= SBX_MAX_PARKED_PER_THREAD || rq->ctl->stopping) {
        http_reply_error(rq, API_UNAVAILABLE, "too many waiting requests; retry shortly");
        return;
    }
    snprintf(rq->park_id, sizeof rq->park_id, "%s", id);
    if (park_link(rq, kind, &tv) < 0) {
        http_reply_error(rq, API_UNAVAILABLE, "out of memory");
        return;
    }
    struct evhttp_connection *evcon = evhttp_request_get_connection(rq->ev);
    struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd >= 0) {
        rq->park_peek = event_new(th->base, fd, EV_READ, park_peek_cb, rq);
        if (rq->park_peek)
            event_add(rq->park_peek, NULL);
    }
}

static void recheck_soon(http_thread_t *th)
{
    struct timeval tv = { 0, 20000 };
    if (th->recheck_ev && !evtimer_pending(th->recheck_ev, NULL))
        evtimer_add(th->recheck_ev, &tv);
}

void http_recheck_soon(req_t *rq) { recheck_soon(rq->th); }

/* Parked event reads: one horizon query, then only the requests whose
 * cursor it passed run their own query. */
static void wake_events(http_thread_t *th, req_t **list, int n)
{
    int k = 0;
    for (req_t *rq = th->parked; rq && k < n; rq = rq->park_next)
        if (rq->park_kind == PARK_EVENTS)
            list[k++] = rq;
    int64_t horizon = 0, newest = 0;
    if (k == 0 || store_events_horizon(th->db, &horizon, &newest) < 0)
        return;
    for (int i = 0; i < k; i++) {
        if (list[i]->park_cursor >= horizon)
            continue;
        list[i]->db = th->db;
        /* One horizon for all: each woken read then runs only its own query. */
        list[i]->wake_horizon = horizon;
        list[i]->wake_newest = newest;
        park_resume(list[i], false);
    }
    if (newest > horizon)
        recheck_soon(th);
}

static void recheck_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    http_thread_t *th = arg;
    if (!th->nparked || db_ensure(&th->db, th->ctl->conninfo) < 0)
        return;
    req_t **list = calloc((size_t)th->nparked, sizeof *list);
    if (list)
        wake_events(th, list, th->nparked);
    free(list);
}

/* Answers the parked output followers (PARK_OUTPUT) that have output past
 * their offset or whose exec ended; list, ids and flags have room for n. */
static void wake_outputs(http_thread_t *th, req_t **list, const char **ids, bool *flags, int n)
{
    int64_t *offsets = calloc((size_t)n, sizeof *offsets);
    if (!offsets)
        return;
    int k = 0;
    for (req_t *rq = th->parked; rq && k < n; rq = rq->park_next)
        if (rq->park_kind == PARK_OUTPUT) {
            list[k] = rq;
            ids[k] = rq->park_id;
            offsets[k] = rq->park_cursor;
            k++;
        }
    if (k > 0 && store_outputs_ready(th->db, ids, offsets, k, flags) == 0)
        for (int i = 0; i < k; i++) {
            if (!flags[i])
                continue;
            list[i]->db = th->db;
            park_resume(list[i], false);
        }
    free(offsets);
}

/* True when op_id is one of the ended operations a wake-up named. */
static bool wake_named(char (*ops)[SBX_ID_MAX], int n, const char *op_id)
{
    for (int i = 0; i < n; i++)
        if (strcmp(ops[i], op_id) == 0)
            return true;
    return false;
}

/* Re-checks the parked requests of this thread that what changed can have
 * answered (all of them after a wake-up that did not say), with one query
 * per kind. */
static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    http_thread_t *th = arg;
    static __thread char ops[SBX_WAKE_OPS_MAX][SBX_ID_MAX];
    pthread_mutex_lock(&th->wake_mu);
    unsigned mask = th->wake_mask;
    int nops = th->nwake_ops;
    memcpy(ops, th->wake_ops, (size_t)nops * sizeof ops[0]);
    th->wake_mask = 0;
    th->nwake_ops = 0;
    pthread_mutex_unlock(&th->wake_mu);
    if (!th->nparked)
        return;
    if (db_ensure(&th->db, th->ctl->conninfo) < 0)
        return; /* the timers still answer them */
    int n = th->nparked;
    req_t **list = calloc((size_t)n, sizeof *list);
    const char **ids = calloc((size_t)n, sizeof *ids);
    bool *flags = calloc((size_t)n, sizeof *flags);
    if (!list || !ids || !flags)
        goto cleanup;
    for (int kind = PARK_OPERATION; kind <= PARK_POLL; kind++) {
        if (kind == PARK_POLL && !(mask & (WAKE_LEASES | WAKE_LEASES_NAMED | WAKE_POLL_FREED)))
            continue;
        /* every wait of the kind, or only those the wake-up named (ended
         * operations, workers leased to; workers an operation ended on:
         * only their polls a tenant's executor cap held back) */
        bool all = (mask & (kind == PARK_OPERATION ? WAKE_OPERATIONS : WAKE_LEASES)) != 0;
        if (kind == PARK_OPERATION && !all && nops == 0)
            continue;
        int k = 0;
        for (req_t *rq = th->parked; rq && k < n; rq = rq->park_next)
            if ((int)rq->park_kind == kind &&
                (all || (wake_named(ops, nops, rq->park_id) &&
                         (kind != PARK_POLL || (mask & WAKE_LEASES_NAMED) || rq->poll_held)))) {
                list[k] = rq;
                ids[k] = rq->park_id;
                k++;
            }
        if (k == 0)
            continue;
        pthread_once(&metrics_once, server_metrics_init);
        metrics_add(m_rechecked, kind == PARK_OPERATION ? "kind=\"operation\"" : "kind=\"poll\"", k);
        int rc = 0;
        if (!all) {
            /* The wake-up named them (the events trigger lists the
             * operations that reached a final state and the workers
             * something was leased to): no need to ask the database; the
             * resumed handler reads each one, a poll by its claim. */
            for (int i = 0; i < k; i++)
                flags[i] = true;
        } else {
            rc = kind == PARK_OPERATION ? store_operations_terminal(th->db, ids, k, flags)
                                        : store_workers_with_leases(th->db, ids, k, flags);
        }
        if (rc < 0)
            continue;
        for (int i = 0; i < k; i++) {
            if (!flags[i])
                continue;
            list[i]->db = th->db;
            park_resume(list[i], false);
        }
    }
    /* A follower also answers when its exec ended. */
    if ((mask & (WAKE_OUTPUT | WAKE_OPERATIONS)) || nops > 0)
        wake_outputs(th, list, ids, flags, n);
    if (mask & WAKE_EVENTS)
        wake_events(th, list, n);
cleanup:
    free(list);
    free(ids);
    free(flags);
}

static void stop_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    http_thread_t *th = arg;
    /* Log streams end as if their sandbox had stopped. */
    api_logs_stop_thread();
    api_files_stop_thread();
    api_shell_stop_thread();
    /* Answer everything parked with its current state, then leave. */
    while (th->parked) {
        req_t *rq = th->parked;
        if (rq->park_kind != PARK_REFUSAL && db_ensure(&th->db, th->ctl->conninfo) < 0) {
            http_reply_error(rq, API_UNAVAILABLE, "the controller is stopping");
            continue;
        }
        rq->db = th->db;
        park_resume(rq, true);
        if (th->parked == rq) /* the handler left it parked: answer anyway */
            http_reply_error(rq, API_UNAVAILABLE, "the controller is stopping");
    }
    struct timeval tv = { 0, 200000 };
    event_base_loopexit(th->base, &tv);
}

/* Splits rq->path into segments. */
static void split_path(req_t *rq)
{
    snprintf(rq->path_copy, sizeof rq->path_copy, "%s", rq->path);
    rq->nsegs = 0;
    char *p = rq->path_copy;
    while (*p && rq->nsegs < 8) {
        while (*p == '/')
            *p++ = '\0';
        if (!*p)
            break;
        rq->segs[rq->nsegs++] = p;
        while (*p && *p != '/')
            p++;
    }
    if (*p)
        rq->nsegs = 9; /* too deep: no route matches */
}

static bool seg_is(const req_t *rq, int i, const char *s) { return i < rq->nsegs && strcmp(rq->segs[i], s) == 0; }

/* Takes one request from key's bucket of rl; over the rate answers 429
 * rate_limited with Retry-After and returns < 0. */
#define RATE_REQUEST_WHAT "too many requests with this token (rate_requests_per_second)"

static int rate_refuse(req_t *rq, struct ratelimit *rl, const char *key, const char *kind, const char *what,
                       int retry_after);

static int rate_take(req_t *rq, struct ratelimit *rl, const char *key, const char *kind, const char *what)
{
    int retry_after = 0;
    if (ratelimit_take(rl, key, mono_us(), &retry_after) == 0)
        return 0;
    return rate_refuse(rq, rl, key, kind, what, retry_after);
}

/* Answers 429 rate_limited with Retry-After; returns < 0. A client back
 * inside the Retry-After its key's last 429 gave gets this one only when
 * that ends (ratelimit_hold; at most SBX_RATE_HOLD_MAX_US): a client that
 * ignores Retry-After and asks again at once cannot make the controller
 * answer it faster than it was told to come, and one that waits as told
 * is never held. Past SBX_MAX_HELD_REFUSALS_PER_THREAD it is sent at once. */
static int rate_refuse(req_t *rq, struct ratelimit *rl, const char *key, const char *kind, const char *what,
                       int retry_after)
{
    char ra[16], labels[64];
    snprintf(ra, sizeof ra, "%d", retry_after);
    evhttp_add_header(evhttp_request_get_output_headers(rq->ev), "Retry-After", ra);
    metrics_add(m_rate_limited, metrics_labels(labels, sizeof labels, "kind", kind, NULL), 1);
    int64_t hold = ratelimit_hold(rl, key, mono_us(), retry_after);
    if (hold > 0 && rq->th->nheld < SBX_MAX_HELD_REFUSALS_PER_THREAD && !rq->ctl->stopping) {
        rq->refusal_what = what;
        rq->refusal_retry_after = retry_after;
        struct timeval tv = { (time_t)(hold / 1000000), (suseconds_t)(hold % 1000000) };
        if (park_link(rq, PARK_REFUSAL, &tv) == 0)
            return SBX_ETOOBIG;
    }
    http_reply_error(rq, API_RATE_LIMITED, "%s; retry after %d s", what, retry_after);
    return SBX_ETOOBIG;
}

/* A client token's request rate (worker tokens are never limited: their
 * polls and heartbeats must not be refused). */
static int rate_check_request(req_t *rq)
{
    if (rq->auth.role == ROLE_WORKER)
        return 0;
    return rate_take(rq, rq->ctl->rl_requests, rq->auth.token_id, "request", RATE_REQUEST_WHAT);
}

/* Before the token is looked up: when the bucket of the token id the
 * request names is empty, 429 at once, without the database (a flood of a
 * token's requests past its rate costs no lookups). Only authenticated
 * requests take from a bucket, so naming someone else's token id refuses
 * nothing its owner has not used up already. */
static int rate_precheck_request(req_t *rq, const char *token)
{
    char id[SBX_ID_MAX];
    int retry_after = 0;
    if (!token || token_parse_id(token, id) < 0 || !ratelimit_empty(rq->ctl->rl_requests, id, mono_us(), &retry_after))
        return 0;
    return rate_refuse(rq, rq->ctl->rl_requests, id, "request", RATE_REQUEST_WHAT, retry_after);
}

/* The tenant's operation rate, for rows that start an operation; an admin
 * token counts against its own tenant (or itself when it has none). */
static int rate_check_operation(req_t *rq, const api_route_t *r)
{
    if (!(r->flags & RF_OPERATION))
        return 0;
    char key[SBX_ID_MAX + 8];
    if (rq->auth.tenant_id[0])
        snprintf(key, sizeof key, "%s", rq->auth.tenant_id);
    else
        snprintf(key, sizeof key, "t:%s", rq->auth.token_id);
    return rate_take(rq, rq->ctl->rl_operations, key, "operation",
                     "this tenant starts operations too fast (rate_operations_per_second)");
}

int server_client_auth(req_t *rq, const char *token, const char *missing)
{
    if (rate_precheck_request(rq, token) < 0)
        return SBX_ETOOBIG;
    if (auth_token_request(rq, token, missing) < 0)
        return SBX_EAUTH;
    request_scope_enter(rq);
    return rate_check_request(rq);
}

int server_route_checks(req_t *rq, const api_route_t *path, const api_route_t *r, const char *what)
{
    if (!path) {
        http_reply_error(rq, API_NOT_FOUND, "no such %sendpoint: %s %.200s", what, method_name(rq->method), rq->path);
        return SBX_ENOTFOUND;
    }
    if (!r) {
        http_reply_error(rq, API_METHOD_NOT_ALLOWED, "method not allowed on %.200s", rq->path);
        return SBX_EINVAL;
    }
    if (!route_role_ok(r->role, rq->auth.role)) {
        http_reply_error(rq, API_FORBIDDEN, r->deny, role_name(rq->auth.role));
        return SBX_EPERM;
    }
    return rate_check_operation(rq, r);
}

void server_route_call(req_t *rq, const api_route_t *r, const char *params[2])
{
    if (r->h2)
        r->h2(rq, params[0], params[1]);
    else if (r->h1)
        r->h1(rq, params[0]);
    else
        r->h0(rq);
}

/* Dispatch from the table: a path under /v1 is authenticated first (an
 * unknown one too, so probing paths needs a token), and a client token's
 * request rate is taken (429); then 404 for a path no row fits, 405 for a
 * method none of its rows takes, 403 for a token of the wrong role, 429
 * when the row starts an operation over the tenant's rate, else the
 * handler. */
static void route(req_t *rq)
{
    if (seg_is(rq, 0, "e2b")) {
        e2b_route(rq);
        return;
    }
    if (seg_is(rq, 0, "console")) {
        console_route(rq);
        return;
    }
    const api_route_t *path = NULL;
    const char *params[2] = { NULL, NULL };
    const api_route_t *r = route_lookup(rq, &path, params);
    bool v1 = rq->nsegs >= 2 && seg_is(rq, 0, "v1");
    if (!path && !v1) {
        http_reply_error(rq, API_NOT_FOUND, "no such endpoint: %.200s", rq->path);
        return;
    }
    if (!(path && path->role == RR_NONE) && server_client_auth(rq, auth_bearer(http_header(rq, "Authorization")),
                                                               "missing bearer token (Authorization: Bearer TOKEN)") < 0)
        return;
    if (server_route_checks(rq, path, r, "") < 0)
        return;
    /* A sandbox named instead of its id: the id, from here on (logs too). */
    if (params[0] && strncmp(r->tmpl, "/v1/sandboxes/{id}", 18) == 0) {
        const char *given = params[0];
        if (!api_sandbox_ref(rq, &params[0]))
            return;
        if (params[0] != given) {
            rq->segs[2] = rq->sandbox_id;
            request_scope_enter(rq);
        }
    }
    server_route_call(rq, r, params);
}

/* The path, the decoded query and every header are text that may reach the
 * store, and PostgreSQL refuses invalid UTF-8 (a 503 with its own words, not
 * the client's mistake): refuses such a request as invalid_argument naming
 * where. Returns 0 when all is text. */
/* A parameter or header name fit to quote in a message, or a stand-in. */
static const char *request_name_shown(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < n; i++)
        if (name[i] <= 0x20 || name[i] >= 0x7f)
            return "(unprintable)";
    return n <= 64 ? name : "(long name)";
}

static int request_text_check(req_t *rq, api_error_t *err)
{
    if (!utf8_valid(rq->path, strlen(rq->path)))
        return api_error_set(err, API_INVALID_ARGUMENT, "invalid UTF-8 in the request path");
    const struct evkeyval *kv;
    TAILQ_FOREACH (kv, &rq->query, next) {
        if (!utf8_valid(kv->key, strlen(kv->key)))
            return api_error_set(err, API_INVALID_ARGUMENT, "invalid UTF-8 in a query parameter name");
        if (!utf8_valid(kv->value, strlen(kv->value)))
            return api_error_set(err, API_INVALID_ARGUMENT, "invalid UTF-8 in query parameter \"%s\"",
                                 request_name_shown(kv->key));
    }
    TAILQ_FOREACH (kv, evhttp_request_get_input_headers(rq->ev), next) {
        if (!utf8_valid(kv->key, strlen(kv->key)) || !utf8_valid(kv->value, strlen(kv->value)))
            return api_error_set(err, API_INVALID_ARGUMENT, "invalid UTF-8 in header %s",
                                 request_name_shown(kv->key));
    }
    return 0;
}

static void on_request(struct evhttp_request *ev, void *arg)
{
    http_thread_t *th = arg;
    req_t *rq = calloc(1, sizeof *rq);
    if (!rq) {
        evhttp_send_error(ev, 503, "out of memory");
        return;
    }
    rq->ev = ev;
    rq->th = th;
    rq->ctl = th->ctl;
    rq->method = evhttp_request_get_command(ev);
    rq->t0_us = mono_us();
    TAILQ_INIT(&rq->query);
    apiconn_request_begin(th->conns, ev, &rq->conn);
    request_id_assign(rq);
    api_code_t rcode;
    int retry_after = 0;
    char rmsg[256];
    if (apiconn_refusal(ev, &rcode, &retry_after, rmsg, sizeof rmsg)) {
        snprintf(rq->path, sizeof rq->path, "%s", APICONN_REFUSED_PATH);
        rq->route_tmpl = "other";
        if (retry_after > 0) {
            char ra[16];
            snprintf(ra, sizeof ra, "%d", retry_after);
            evhttp_add_header(evhttp_request_get_output_headers(ev), "Retry-After", ra);
        }
        http_reply_error(rq, rcode, "%s", rmsg);
        return;
    }
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(ev);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    const char *query = uri ? evhttp_uri_get_query(uri) : NULL;
    if (!path || strlen(path) >= sizeof rq->path) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "request path missing or too long");
        return;
    }
    snprintf(rq->path, sizeof rq->path, "%s", path);
    if (query && evhttp_parse_query_str(query, &rq->query) < 0) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "malformed query string");
        return;
    }
    api_error_t terr;
    if (request_text_check(rq, &terr) < 0) {
        http_reply_api_error(rq, &terr);
        return;
    }
    split_path(rq);
    rq->route_tmpl = route_template(rq);
    request_scope_enter(rq);
    bool probe = route_is_probe(rq->route_tmpl);
    if (!probe && db_ensure(&th->db, th->ctl->conninfo) < 0) {
        http_reply_error(rq, API_UNAVAILABLE, "database unavailable: %s", db_last_error());
        log_scope_clear();
        return;
    }
    rq->db = th->db;
    route(rq);
    log_scope_clear();
}

static void *thread_main(void *arg)
{
    http_thread_t *th = arg;
    event_base_dispatch(th->base);
    return NULL;
}

static void thread_free(http_thread_t *th)
{
    if (!th)
        return;
    while (th->parked) {
        req_t *rq = th->parked;
        park_unlink(rq);
        req_free(rq);
    }
    proxy_thread_free(th->proxy);
    if (th->wake_ev)
        event_free(th->wake_ev);
    if (th->stop_ev)
        event_free(th->stop_ev);
    if (th->recheck_ev)
        event_free(th->recheck_ev);
    if (th->http)
        evhttp_free(th->http);
    apiconn_thread_free(th->conns); /* after evhttp_free, which closes its connections */
    if (th->base)
        event_base_free(th->base);
    if (th->db)
        PQfinish(th->db);
    pthread_mutex_destroy(&th->wake_mu);
    free(th);
}

int server_start(controller_t *ctl, char *err, size_t errlen)
{
    pthread_once(&metrics_once, server_metrics_init);
    pthread_once(&record_once, record_open);
    /* This process's connections: one per HTTP thread, the reconcile loop,
     * the LISTEN connection, and the NATS publisher when configured. */
    metric_family_t *pool = metrics_family("sandbox_db_pool_size", METRIC_GAUGE,
                                           "PostgreSQL connections this controller keeps open.", NULL, 0);
    metrics_set(pool, NULL, ctl->nthreads + 2 + (*cfg_str(&ctl->cfg, CFG_NATS_URL) ? 1 : 0));
    if (ratelimit_new(cfg_int(&ctl->cfg, CFG_RATE_REQUESTS_PER_SECOND), cfg_int(&ctl->cfg, CFG_RATE_REQUESTS_BURST),
                      &ctl->rl_requests) < 0 ||
        ratelimit_new(cfg_int(&ctl->cfg, CFG_RATE_OPERATIONS_PER_SECOND),
                      cfg_int(&ctl->cfg, CFG_RATE_OPERATIONS_BURST), &ctl->rl_operations) < 0) {
        snprintf(err, errlen, "cannot set up the rate limits");
        return SBX_ENOMEM;
    }
    ctl->threads = calloc((size_t)ctl->nthreads, sizeof *ctl->threads);
    if (!ctl->threads) {
        snprintf(err, errlen, "out of memory");
        return SBX_ENOMEM;
    }
    for (int i = 0; i < ctl->nthreads; i++) {
        http_thread_t *th = calloc(1, sizeof *th);
        if (!th) {
            snprintf(err, errlen, "out of memory");
            return SBX_ENOMEM;
        }
        pthread_mutex_init(&th->wake_mu, NULL);
        ctl->threads[i] = th;
        th->ctl = ctl;
        th->idx = i;
        th->base = event_base_new();
        th->http = th->base ? evhttp_new(th->base) : NULL;
        if (!th->http) {
            snprintf(err, errlen, "cannot create an event loop");
            return SBX_ENOMEM;
        }
        char dberr[256];
        th->db = db_connect(ctl->conninfo, dberr, sizeof dberr);
        if (!th->db) {
            snprintf(err, errlen, "cannot connect to the database: %s", dberr);
            return SBX_EUNAVAIL;
        }
        evhttp_set_max_body_size(th->http, SBX_MAX_BODY_BYTES);
        evhttp_set_max_headers_size(th->http, 64 * 1024);
        evhttp_set_timeout(th->http, HTTP_CONN_TIMEOUT_SECONDS);
        evhttp_set_allowed_methods(th->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_DELETE | EVHTTP_REQ_PUT |
                                                 EVHTTP_REQ_HEAD | EVHTTP_REQ_PATCH | EVHTTP_REQ_OPTIONS);
        evhttp_set_gencb(th->http, on_request, th);
        /* Each connection through apiconn (caps, deadlines, the body
         * budget), its bufferevent made by http_errpage_bev: libevent's own
         * error answers in the JSON error shape too; TLS when api_tls_cert is
         * set. */
        if (!(th->conns = apiconn_thread_new(ctl, th->base, &th->db, ctl->api_tls))) {
            snprintf(err, errlen, "out of memory");
            return SBX_ENOMEM;
        }
        evhttp_set_bevcb(th->http, apiconn_bev, th->conns);
        /* close-on-exec: no child (a driver, QEMU) may hold the listener */
        th->fd = fd_dup_cloexec(ctl->listen_fd);
        struct evhttp_bound_socket *bound = th->fd >= 0 ? evhttp_accept_socket_with_handle(th->http, th->fd) : NULL;
        if (!bound) {
            snprintf(err, errlen, "cannot accept on the listening socket");
            return SBX_EIO;
        }
        apiconn_thread_listener(th->conns, evhttp_bound_socket_get_listener(bound));
        if (!(th->proxy = proxy_thread_new(ctl, th->base, &th->db, err, errlen)))
            return SBX_EIO;
        th->wake_ev = event_new(th->base, -1, 0, wake_cb, th);
        th->stop_ev = event_new(th->base, -1, 0, stop_cb, th);
        th->recheck_ev = evtimer_new(th->base, recheck_cb, th);
        if (!th->wake_ev || !th->stop_ev || !th->recheck_ev) {
            snprintf(err, errlen, "out of memory");
            return SBX_ENOMEM;
        }
    }
    for (int i = 0; i < ctl->nthreads; i++) {
        if (pthread_create(&ctl->threads[i]->tid, NULL, thread_main, ctl->threads[i]) != 0) {
            snprintf(err, errlen, "cannot start HTTP thread %d", i);
            return SBX_ENOMEM;
        }
        ctl->threads[i]->started = true;
    }
    return 0;
}

void server_wake(controller_t *ctl, unsigned mask, const char *const *ops, int nops)
{
    for (int i = 0; ctl->threads && i < ctl->nthreads; i++) {
        http_thread_t *th = ctl->threads[i];
        if (!th || !th->started)
            continue;
        pthread_mutex_lock(&th->wake_mu);
        th->wake_mask |= mask;
        for (int j = 0; j < nops && (th->wake_mask & (WAKE_OPERATIONS | WAKE_LEASES)) !=
                                        (WAKE_OPERATIONS | WAKE_LEASES); j++) {
            if (th->nwake_ops >= SBX_WAKE_OPS_MAX || strlen(ops[j]) >= SBX_ID_MAX)
                th->wake_mask |= WAKE_OPERATIONS | WAKE_LEASES; /* too many to name: all */
            else
                snprintf(th->wake_ops[th->nwake_ops++], SBX_ID_MAX, "%s", ops[j]);
        }
        pthread_mutex_unlock(&th->wake_mu);
        event_active(th->wake_ev, 0, 0);
    }
}

void server_wake_all(controller_t *ctl) { server_wake(ctl, WAKE_ALL, NULL, 0); }

/* Frees the rate limiters (after the threads that use them stopped). */
static void server_rate_free(controller_t *ctl)
{
    ratelimit_free(ctl->rl_requests);
    ratelimit_free(ctl->rl_operations);
    ctl->rl_requests = ctl->rl_operations = NULL;
}

void server_stop(controller_t *ctl)
{
    if (!ctl->threads) {
        server_rate_free(ctl);
        return;
    }
    for (int i = 0; i < ctl->nthreads; i++)
        if (ctl->threads[i] && ctl->threads[i]->started)
            event_active(ctl->threads[i]->stop_ev, 0, 0);
    for (int i = 0; i < ctl->nthreads; i++) {
        http_thread_t *th = ctl->threads[i];
        if (th && th->started)
            pthread_join(th->tid, NULL);
        thread_free(th);
    }
    free(ctl->threads);
    ctl->threads = NULL;
    server_rate_free(ctl);
    apiconn_cleanup();
}
