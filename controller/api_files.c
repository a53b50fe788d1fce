/* PUT and GET /v1/sandboxes/{id}/files: files into and out of a running
 * sandbox over the data path. The controller signs a files grant bound to
 * the transfer's request line (common/grant.h), connects to the worker's
 * forwarder (worker/forward.c) and streams: an upload's body comes from the
 * API listener (controller/apiconn.c keeps it from evhttp) and goes to the
 * worker as frames (common/logframe.h) ending in an END frame; a download's
 * frames come back and go to the client as a chunked answer. Neither is ever
 * held whole: each side stops reading while SBX_FILES_STREAM_HIGH_WATER
 * waits to be written on the other. The protocol is docs/worker.md's "File
 * transfers". Each transfer ends in one `files.uploaded` or
 * `files.downloaded` event with its path, format, bytes and outcome.
 *
 * Everything runs on the request's HTTP thread; nothing blocks. */
#include "api.h"
#include "apiconn.h"
#include "db.h"
#include "e2b.h"
#include "grant.h"
#include "ids.h"
#include "jsonx.h"
#include "limits.h"
#include "log.h"
#include "logframe.h"
#include "proxy.h"
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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#define FILES_COMPONENT      "files"
/* Connecting to the worker, and a download's first line. */
#define FILES_WORKER_SECONDS 15
#define FILES_GRANT_SECONDS  60
#define FILES_SWEEP_SECONDS  5
/* A download's reason to stop midway (the worker's END frame), kept at most. */
#define FILES_CUT_WHY_MAX    520

typedef enum { FF_TAR, FF_RAW, FF_LIST, FF_STAT } files_format_t;
static const char *const format_names[] = { "tar", "raw", "list", "stat" };

typedef enum {
    FX_CONNECT,   /* connecting to the worker */
    FX_UPLOAD,    /* put: the body goes to the worker */
    FX_REPLY,     /* put: END sent, waiting for the worker's line */
    FX_HEAD,      /* get: waiting for the worker's line */
    FX_BODY,      /* get: the 200 head sent, frames relayed */
} fx_state_t;

typedef struct files_xfer {
    req_t *rq;
    struct evhttp_connection *evcon;  /* the client's */
    apiconn_t *ac;                    /* put: the client's connection record (its body) */
    struct bufferevent *up;           /* the worker */
    struct event *peek;               /* get: watches for the client hanging up */
    struct event *sweep;              /* no progress for SBX_FILES_IDLE_SECONDS ends it */
    fx_state_t state;
    bool put;
    bool counted;                     /* get: holds a transfer slot */
    tenantcap_hold_t tcap;            /* its tenant's share taken (transfers, worker connections) */
    bool paused;                      /* get: not reading the worker, the client is behind */
    bool cutting;                     /* get: cut midway, the client's queued bytes going out first */
    struct event *cut_ev;             /* ... then this cuts the connection */
    struct evbuffer_cb_entry *cut_cbe; /* ... when the client's output buffer drains */
    char cut_why[FILES_CUT_WHY_MAX];
    files_format_t format;
    bool envd;                        /* an E2B envd call (api_envd_relay): any body up, the worker's answer down */
    bool envd_write;                  /* ... a file write (POST /files), recorded as files.uploaded */
    bool snapshot;                    /* a snapshot's export to the worker taking a copy (no files event) */
    char sandbox_id[SBX_ID_MAX];
    char path[SBX_FILES_PATH_MAX + 1];
    int64_t bytes;                    /* moved so far */
    int64_t max_bytes;                /* get: files_max_bytes, the body's bound */
    int64_t t0_ms;
    int64_t progress_ms;              /* the last byte moved */
    struct files_xfer *prev, *next;
} files_xfer_t;

static __thread files_xfer_t *thread_xfers;

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- pure parts -------------------------------------------------------- */

int api_files_path_check(const char *path, api_error_t *err)
{
    if (!path || !*path)
        return api_error_set(err, API_INVALID_ARGUMENT, "path is required: an absolute path in the sandbox");
    size_t n = strlen(path);
    if (path[0] != '/')
        return api_error_set(err, API_INVALID_ARGUMENT, "path must be absolute (start with /)");
    if (n > SBX_FILES_PATH_MAX)
        return api_error_set(err, API_INVALID_ARGUMENT, "path is longer than %d bytes", SBX_FILES_PATH_MAX);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)path[i] < 0x20 || path[i] == 0x7f)
            return api_error_set(err, API_INVALID_ARGUMENT, "path must not hold control characters");
    return 0;
}

/* ---- the transfer's life ------------------------------------------------ */

static void fx_unlink(files_xfer_t *fx)
{
    if (fx->prev)
        fx->prev->next = fx->next;
    else if (thread_xfers == fx)
        thread_xfers = fx->next;
    if (fx->next)
        fx->next->prev = fx->prev;
    fx->prev = fx->next = NULL;
}

/* The transfer's event: path, format, bytes, how it ended (and why, when
 * a download was cut midway: error). */
static void fx_record_why(files_xfer_t *fx, const char *outcome, const char *error)
{
    req_t *rq = fx->rq;
    /* A stat moves no file (sandbox cp asks one before each upload); of
     * envd's calls only a file write (POST /files) is one. */
    if (fx->format == FF_STAT || (fx->envd && !fx->envd_write) || fx->snapshot || http_db(rq) < 0)
        return;
    json_object *d = json_object_new_object();
    jsonx_add(d, "path", json_object_new_string(fx->path));
    jsonx_add(d, "format", json_object_new_string(fx->envd ? "e2b" : format_names[fx->format]));
    jsonx_add(d, "bytes", json_object_new_int64(fx->bytes));
    jsonx_add(d, "outcome", json_object_new_string(outcome));
    jsonx_add(d, "duration_ms", json_object_new_int64(mono_ms() - fx->t0_ms));
    if (error && *error) {
        char *clean = utf8_sanitize(error, strlen(error));
        if (clean)
            jsonx_add(d, "error", json_object_new_string(clean));
        free(clean);
    }
    if (store_sandbox_event(rq->db, fx->sandbox_id, fx->put ? "files.uploaded" : "files.downloaded", d) < 0)
        log_warn(FILES_COMPONENT, "sandbox %s: cannot record the file transfer's event", fx->sandbox_id);
}

static void fx_record(files_xfer_t *fx, const char *outcome)
{
    fx_record_why(fx, outcome, NULL);
}

/* Frees everything but the request; an upload's body goes back to evhttp
 * (the rest of it unread: the answer then closes the connection). */
static void fx_free(files_xfer_t *fx)
{
    fx_unlink(fx);
    if (fx->ac) {
        apiconn_stream_end(fx->ac); /* an unread rest closes the connection (server.c reply_send) */
        fx->ac = NULL;
    }
    if (fx->counted)
        apiconn_transfer_release();
    tenantcap_release(&fx->tcap);
    if (fx->up)
        bufferevent_free(fx->up);
    if (fx->cut_cbe && fx->evcon) {
        struct bufferevent *cbev = evhttp_connection_get_bufferevent(fx->evcon);
        if (cbev)
            evbuffer_remove_cb_entry(bufferevent_get_output(cbev), fx->cut_cbe);
    }
    if (fx->cut_ev)
        event_free(fx->cut_ev);
    if (fx->peek)
        event_free(fx->peek);
    if (fx->sweep)
        event_free(fx->sweep);
    if (fx->evcon)
        apiconn_set_closecb(fx->evcon, NULL, NULL);
    free(fx);
}

/* Before any answer was sent: an ordinary error answer. */
static void fx_fail(files_xfer_t *fx, api_code_t code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fx_fail(files_xfer_t *fx, api_code_t code, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    req_t *rq = fx->rq;
    log_info(FILES_COMPONENT, "%s of %s in sandbox %s failed after %lld bytes: %s", fx->put ? "upload" : "download",
             fx->path, fx->sandbox_id, (long long)fx->bytes, msg);
    fx_record(fx, api_code_info(code)->name);
    fx_free(fx);
    http_reply_error(rq, code, "%s", msg);
}

/* A download whose 200 head went out: ends the body (complete), or cuts the
 * connection off without the last chunk so the client sees it incomplete. */
static void fx_close(files_xfer_t *fx, bool complete, bool conn_freeing, const char *why)
{
    req_t *rq = fx->rq;
    log_debug(FILES_COMPONENT, "download of %s from sandbox %s ended after %lld bytes: %s", fx->path, fx->sandbox_id,
              (long long)fx->bytes, why);
    fx_record_why(fx, complete ? "ok" : "incomplete", complete ? NULL : why);
    struct evhttp_connection *evcon = fx->evcon;
    fx_free(fx);
    if (!complete && !conn_freeing && evcon) {
        struct bufferevent *bev = evhttp_connection_get_bufferevent(evcon);
        evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
        if (fd >= 0)
            shutdown(fd, SHUT_RDWR);
    }
    http_stream_end(rq, conn_freeing);
}

static void cut_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    files_xfer_t *fx = arg;
    fx_close(fx, false, false, fx->cut_why);
}

static void cut_drain_cb(struct evbuffer *b, const struct evbuffer_cb_info *info, void *arg)
{
    (void)info;
    files_xfer_t *fx = arg;
    if (evbuffer_get_length(b) == 0 && fx->cut_ev)
        event_active(fx->cut_ev, EV_TIMEOUT, 1);  /* not from inside the bufferevent's write */
}

static size_t client_pending(const files_xfer_t *fx);

/* A download that must stop midway: nothing more is read from the worker,
 * what is queued for the client (the 200 head, whole chunks) is written
 * first, and then fx_close cuts the connection before the last chunk, so
 * the client sees an answer that began and did not end. The sweep bounds
 * a client that takes nothing. */
static void fx_cut(files_xfer_t *fx, const char *why)
{
    struct bufferevent *cbev = fx->evcon ? evhttp_connection_get_bufferevent(fx->evcon) : NULL;
    struct event_base *base = fx->evcon ? evhttp_connection_get_base(fx->evcon) : NULL;
    if (!cbev || !base || client_pending(fx) == 0) {
        fx_close(fx, false, false, why);
        return;
    }
    snprintf(fx->cut_why, sizeof fx->cut_why, "%s", why);
    fx->cutting = true;
    bufferevent_disable(fx->up, EV_READ);
    fx->cut_ev = event_new(base, -1, 0, cut_cb, fx);
    fx->cut_cbe = fx->cut_ev ? evbuffer_add_cb(bufferevent_get_output(cbev), cut_drain_cb, fx) : NULL;
    if (!fx->cut_cbe)
        fx_close(fx, false, false, why);
}

/* The worker's refusal line as the client's error. */
static void fx_refused(files_xfer_t *fx, const proxy_worker_reply_t *rep)
{
    api_code_t code = API_UNAVAILABLE;
    switch (rep->status) {
    case 400: code = API_INVALID_ARGUMENT; break;
    case 403: code = API_UNAVAILABLE; break;
    case 404: code = API_NOT_FOUND; break;
    case 409: code = API_CONFLICT; break;
    case 413: code = API_PAYLOAD_TOO_LARGE; break;
    default: break;
    }
    if (code == API_UNAVAILABLE)
        log_warn(FILES_COMPONENT, "sandbox %s: the worker refused a file transfer: %d %s %s", fx->sandbox_id,
                 rep->status, rep->code, rep->msg);
    char *clean = utf8_sanitize(rep->msg, strlen(rep->msg));
    if (code == API_UNAVAILABLE)
        fx_fail(fx, code, "the worker running the sandbox refused: %s", clean ? clean : rep->code);
    else
        fx_fail(fx, code, "%s", clean ? clean : rep->code);
    free(clean);
}

/* ---- an upload ---------------------------------------------------------- */

static void put_done(files_xfer_t *fx)
{
    req_t *rq = fx->rq;
    json_object *o = json_object_new_object();
    jsonx_add(o, "sandbox_id", json_object_new_string(fx->sandbox_id));
    jsonx_add(o, "path", json_object_new_string(fx->path));
    jsonx_add(o, "format", json_object_new_string(format_names[fx->format]));
    jsonx_add(o, "bytes", json_object_new_int64(fx->bytes));
    log_info(FILES_COMPONENT, "uploaded %lld bytes to %s in sandbox %s (%s, %lld ms)", (long long)fx->bytes, fx->path,
             fx->sandbox_id, format_names[fx->format], (long long)(mono_ms() - fx->t0_ms));
    fx_record(fx, "ok");
    fx_free(fx);
    http_reply_json(rq, 200, o);
}

/* Moves what the client sent on to the worker as frames while the worker's
 * side has room; the END frame once the whole body came. */
static void put_pump(files_xfer_t *fx)
{
    if (fx->state != FX_UPLOAD)
        return;
    struct evbuffer *out = bufferevent_get_output(fx->up);
    if (!fx->ac) {
        /* An envd call without a body: its END frame alone. */
        unsigned char hdr[LOGFRAME_HEADER_BYTES];
        logframe_header(hdr, LOGFRAME_END, 0);
        evbuffer_add(out, hdr, sizeof hdr);
        fx->state = FX_REPLY;
        return;
    }
    struct evbuffer *in = apiconn_stream_input(fx->ac);
    while (in && evbuffer_get_length(in) > 0 && evbuffer_get_length(out) < SBX_FILES_STREAM_HIGH_WATER) {
        size_t n = evbuffer_get_length(in);
        if (n > LOGFRAME_PAYLOAD_MAX)
            n = LOGFRAME_PAYLOAD_MAX;
        unsigned char hdr[LOGFRAME_HEADER_BYTES];
        logframe_header(hdr, LOGFRAME_STDOUT, (uint32_t)n);
        evbuffer_add(out, hdr, sizeof hdr);
        evbuffer_remove_buffer(in, out, n);
        fx->bytes += (int64_t)n;
        fx->progress_ms = mono_ms();
    }
    apiconn_stream_drained(fx->ac);
    int st = apiconn_stream_status(fx->ac);
    if (st == SBX_EINVAL) {
        fx_fail(fx, API_INVALID_ARGUMENT, "malformed chunked request body");
        return;
    }
    if (st == SBX_ETOOBIG) {
        fx_fail(fx, API_PAYLOAD_TOO_LARGE, "the upload is over the limit of files_max_bytes");
        return;
    }
    if (st == 1 && in && evbuffer_get_length(in) == 0) {
        unsigned char hdr[LOGFRAME_HEADER_BYTES];
        logframe_header(hdr, LOGFRAME_END, 0);
        evbuffer_add(out, hdr, sizeof hdr);
        fx->state = FX_REPLY;
        /* The body is all here: evhttp may have the connection back. */
        apiconn_stream_end(fx->ac);
        fx->ac = NULL;
    }
}

static void put_body_cb(void *arg) { put_pump(arg); }

/* ---- a download --------------------------------------------------------- */

static void get_drained_cb(struct evhttp_connection *evcon, void *arg);
static void client_peek_cb(evutil_socket_t fd, short what, void *arg);

/* Watches the client's connection for its hanging up while the worker's
 * answer streams to it (once: a watch already set stays). */
static void fx_watch_client(files_xfer_t *fx)
{
    struct bufferevent *cbev = fx->evcon ? evhttp_connection_get_bufferevent(fx->evcon) : NULL;
    evutil_socket_t cfd = cbev ? bufferevent_getfd(cbev) : -1;
    if (!fx->peek && cfd >= 0 &&
        (fx->peek = event_new(evhttp_connection_get_base(fx->evcon), cfd, EV_READ, client_peek_cb, fx)))
        event_add(fx->peek, NULL);
}

static size_t client_pending(const files_xfer_t *fx)
{
    struct bufferevent *bev = fx->evcon ? evhttp_connection_get_bufferevent(fx->evcon) : NULL;
    return bev ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
}

/* Relays the whole frames in the worker's input until none is left, the
 * client is behind, or the body ends (then fx is gone: false). */
static bool get_pump(files_xfer_t *fx)
{
    if (fx->cutting)
        return false;
    struct evbuffer *in = bufferevent_get_input(fx->up);
    while (!fx->paused) {
        size_t n = evbuffer_get_length(in);
        if (n < LOGFRAME_HEADER_BYTES)
            return true;
        unsigned char *p = evbuffer_pullup(in, LOGFRAME_HEADER_BYTES);
        logframe_t fr;
        int r = p ? logframe_parse(p, LOGFRAME_HEADER_BYTES, &fr) : SBX_ENOMEM;
        uint32_t len = 0;
        if (r == 0) {
            len = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | (uint32_t)p[4];
            if (n < LOGFRAME_HEADER_BYTES + (size_t)len)
                return true;
            p = evbuffer_pullup(in, (ev_ssize_t)(LOGFRAME_HEADER_BYTES + len));
            r = p ? logframe_parse(p, LOGFRAME_HEADER_BYTES + len, &fr) : SBX_ENOMEM;
        }
        if (r < 0 || fr.type == LOGFRAME_STDERR) {
            log_warn(FILES_COMPONENT, "the worker sent a malformed files frame for sandbox %s", fx->sandbox_id);
            fx_close(fx, false, false, "malformed frame");
            return false;
        }
        if (fr.type == LOGFRAME_END) {
            char why[FILES_CUT_WHY_MAX];
            size_t wl = fr.len < sizeof why - 1 ? fr.len : sizeof why - 1;
            memcpy(why, fr.data, wl);
            why[wl] = '\0';
            if (wl) {
                log_warn(FILES_COMPONENT, "download of %s from sandbox %s failed midway: %s", fx->path,
                         fx->sandbox_id, why);
                fx_cut(fx, why);
            } else {
                fx_close(fx, true, false, "complete");
            }
            return false;
        }
        if (fx->bytes + (int64_t)fr.len > fx->max_bytes) {
            char why[160];
            snprintf(why, sizeof why, "the download is larger than the %lld bytes a transfer may carry "
                     "(files_max_bytes)", (long long)fx->max_bytes);
            log_warn(FILES_COMPONENT, "download of %s from sandbox %s cut: %s", fx->path, fx->sandbox_id, why);
            fx_cut(fx, why);
            return false;
        }
        struct evbuffer *b = evbuffer_new();
        if (!b) {
            fx_close(fx, false, false, "out of memory");
            return false;
        }
        evbuffer_add(b, fr.data, fr.len);
        evbuffer_drain(in, fr.size);
        evhttp_send_reply_chunk_with_cb(fx->rq->ev, b, get_drained_cb, fx);
        evbuffer_free(b);
        fx->bytes += (int64_t)fr.len;
        fx->progress_ms = mono_ms();
        if (client_pending(fx) >= SBX_FILES_STREAM_HIGH_WATER) {
            fx->paused = true;
            bufferevent_disable(fx->up, EV_READ);
        }
    }
    return true;
}

static void get_drained_cb(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    files_xfer_t *fx = arg;
    if (!fx->paused)
        return;
    fx->paused = false;
    if (get_pump(fx) && !fx->paused)
        bufferevent_enable(fx->up, EV_READ);
}

static const char *format_type(files_format_t f)
{
    return f == FF_TAR ? "application/x-tar" : f == FF_LIST ? "application/json" : "application/octet-stream";
}

/* The worker's 200 line: its message is the path's stat (JSON). */
static void get_begin(files_xfer_t *fx, const proxy_worker_reply_t *rep)
{
    json_object *stat = NULL;
    api_error_t perr;
    if (jsonx_parse(rep->msg, strlen(rep->msg), &stat, &perr) < 0 || !json_object_is_type(stat, json_type_object)) {
        json_object_put(stat);
        stat = NULL;
    }
    if (fx->format == FF_STAT) {
        req_t *rq = fx->rq;
        if (!stat) {
            fx_fail(fx, API_BAD_GATEWAY, "the worker sent no stat of the path");
            return;
        }
        fx_record(fx, "ok");
        fx_free(fx);
        json_object *o = json_object_new_object();
        jsonx_add(o, "stat", stat);
        http_reply_json(rq, 200, o);
        return;
    }
    struct evkeyvalq *h = evhttp_request_get_output_headers(fx->rq->ev);
    if (stat) {
        /* The stat as a header too (base64 JSON, as the Engine's own
         * X-Docker-Container-Path-Stat), for clients of the raw form. */
        const char *js = json_object_to_json_string_ext(stat, JSON_C_TO_STRING_PLAIN);
        size_t jl = strlen(js), bl = sodium_base64_ENCODED_LEN(jl, sodium_base64_VARIANT_ORIGINAL);
        char *b64 = bl < 8192 ? malloc(bl) : NULL;
        if (b64) {
            sodium_bin2base64(b64, bl, (const unsigned char *)js, jl, sodium_base64_VARIANT_ORIGINAL);
            evhttp_add_header(h, "X-Sandbox-Stat", b64);
            free(b64);
        }
        json_object_put(stat);
    }
    fx->state = FX_BODY;
    http_stream_start(fx->rq, format_type(fx->format));
    struct bufferevent *cbev = fx->evcon ? evhttp_connection_get_bufferevent(fx->evcon) : NULL;
    if (cbev)
        bufferevent_set_max_single_write(cbev, SBX_FILES_STREAM_HIGH_WATER);
    bufferevent_set_timeouts(fx->up, NULL, NULL); /* the sweep watches progress */
    bufferevent_setwatermark(fx->up, EV_READ, 0, LOGFRAME_HEADER_BYTES + LOGFRAME_PAYLOAD_MAX);
    get_pump(fx);
}

/* An envd call's 200 line: its message is the answer's head, {"status":S,
 * "headers":{"content-type":…}}; the body follows as frames. */
static const char *const envd_answer_headers[] = { "content-type", "connect-content-encoding",
                                                   "connect-accept-encoding", "content-encoding", NULL };

static void envd_begin(files_xfer_t *fx, const proxy_worker_reply_t *rep)
{
    json_object *head = NULL;
    api_error_t perr;
    int64_t status = 0;
    if (jsonx_parse(rep->msg, strlen(rep->msg), &head, &perr) < 0 || !jsonx_get_int(head, "status", &status) ||
        status < 200 || status > 599) {
        json_object_put(head);
        fx_fail(fx, API_BAD_GATEWAY, "the worker sent no answer head for the envd call");
        return;
    }
    struct evkeyvalq *h = evhttp_request_get_output_headers(fx->rq->ev);
    json_object *hs = jsonx_get_obj(head, "headers");
    const char *ct = jsonx_get_str(hs, "content-type");
    for (int i = 1; envd_answer_headers[i]; i++) {
        const char *v = jsonx_get_str(hs, envd_answer_headers[i]);
        if (v && strlen(v) < 256 && !strpbrk(v, "\r\n"))
            evhttp_add_header(h, envd_answer_headers[i], v);
    }
    fx->state = FX_BODY;
    http_stream_start_status(fx->rq, (int)status, ct && strlen(ct) < 256 && !strpbrk(ct, "\r\n") ? ct
                                                                                              : "application/json");
    json_object_put(head);
    struct bufferevent *cbev = fx->evcon ? evhttp_connection_get_bufferevent(fx->evcon) : NULL;
    if (cbev)
        bufferevent_set_max_single_write(cbev, SBX_FILES_STREAM_HIGH_WATER);
    bufferevent_set_timeouts(fx->up, NULL, NULL); /* the sweep watches progress */
    bufferevent_setwatermark(fx->up, EV_READ, 0, LOGFRAME_HEADER_BYTES + LOGFRAME_PAYLOAD_MAX);
    /* The call's body is all up: watch for the client hanging up (a
     * process's output stream it stopped reading). */
    fx_watch_client(fx);
    get_pump(fx);
}

/* ---- the worker's side -------------------------------------------------- */

static void up_read_cb(struct bufferevent *bev, void *arg)
{
    files_xfer_t *fx = arg;
    if (fx->state == FX_BODY) {
        get_pump(fx);
        return;
    }
    proxy_worker_reply_t rep;
    int r = proxy_worker_reply_read(bufferevent_get_input(bev), &rep);
    if (r < 0) {
        fx_fail(fx, API_BAD_GATEWAY, "the worker answered something else than a forward reply");
        return;
    }
    if (r == 0)
        return;
    if (rep.status != 200) {
        fx_refused(fx, &rep);
        return;
    }
    if (!fx->put) {
        get_begin(fx, &rep);
        return;
    }
    if (fx->state != FX_REPLY) {
        fx_fail(fx, API_BAD_GATEWAY, "the worker answered the upload before it was complete");
        return;
    }
    if (fx->envd) {
        envd_begin(fx, &rep);
        return;
    }
    put_done(fx);
}

static void up_write_cb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    put_pump(arg);
}

static void up_event_cb(struct bufferevent *bev, short what, void *arg)
{
    files_xfer_t *fx = arg;
    if (what & BEV_EVENT_CONNECTED) {
        proxy_worker_keepalive(fx->up);
        if (fx->put) {
            fx->state = FX_UPLOAD;
            if (fx->ac)
                apiconn_stream_continue(fx->ac);
            put_pump(fx);
        } else {
            fx->state = FX_HEAD;
        }
        return;
    }
    if (fx->state == FX_BODY) {
        bufferevent_disable(fx->up, EV_READ | EV_WRITE);
        if (get_pump(fx))
            fx_close(fx, false, false, "the worker connection ended early");
        return;
    }
    if (fx->state == FX_REPLY || fx->state == FX_HEAD) {
        /* A line that came with the end is read first. */
        proxy_worker_reply_t rep;
        if (proxy_worker_reply_read(bufferevent_get_input(bev), &rep) == 1) {
            up_read_cb(bev, fx);
            return;
        }
    }
    char why[200];
    tls_bev_failure(bev, why, sizeof why);
    if (why[0] && !(what & BEV_EVENT_TIMEOUT)) {
        log_warn(FILES_COMPONENT, "sandbox %s: TLS to the worker's forwarder failed: %s", fx->sandbox_id, why);
        fx_fail(fx, API_UNAVAILABLE, "the worker running the sandbox failed TLS verification");
        return;
    }
    fx_fail(fx, API_UNAVAILABLE, "%s",
            what & BEV_EVENT_TIMEOUT    ? "the worker running the sandbox did not answer in time"
            : fx->state == FX_CONNECT ? "cannot reach the worker running the sandbox"
                                      : "the worker connection ended early");
}

/* ---- the client going away, and progress ------------------------------- */

static void client_close_cb(struct evhttp_connection *evcon, void *arg)
{
    files_xfer_t *fx = arg;
    if (fx->cut_cbe) {
        struct bufferevent *cbev = evhttp_connection_get_bufferevent(evcon);
        if (cbev)
            evbuffer_remove_cb_entry(bufferevent_get_output(cbev), fx->cut_cbe);
        fx->cut_cbe = NULL;
    }
    fx->evcon = NULL; /* being freed: no close callback to clear */
    bool attached = evhttp_request_get_connection(fx->rq->ev) != NULL;
    if (fx->ac) {
        apiconn_stream_end(fx->ac); /* the record goes with the connection */
        fx->ac = NULL;
    }
    if (fx->state == FX_BODY) {
        fx_close(fx, false, attached, "the client connection closed");
        return;
    }
    req_t *rq = fx->rq;
    fx_record(fx, "client_gone");
    fx_free(fx);
    if (attached)
        http_reply_dropped(rq);
    else
        http_reply_error(rq, API_UNAVAILABLE, "the client went away"); /* frees the detached request */
}

static void client_peek_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    files_xfer_t *fx = arg;
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))) {
        event_del(fx->peek);
        return;
    }
    if (fx->state == FX_BODY)
        fx_close(fx, false, false, "the client went away");
    else
        fx_fail(fx, API_UNAVAILABLE, "the client went away");
}

static void sweep_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    files_xfer_t *fx = arg;
    if (mono_ms() - fx->progress_ms < (int64_t)SBX_FILES_IDLE_SECONDS * 1000)
        return;
    if (fx->state == FX_BODY)
        fx_close(fx, false, false, "no progress");
    else if (fx->state == FX_REPLY)
        fx_fail(fx, API_UNAVAILABLE, "the worker did not finish the upload within %d s", SBX_FILES_IDLE_SECONDS);
    else
        fx_fail(fx, API_REQUEST_TIMEOUT, "the transfer moved nothing for %d s", SBX_FILES_IDLE_SECONDS);
}

/* ---- the handlers ------------------------------------------------------- */

static int parse_format(const char *f, bool put, files_format_t *ret, api_error_t *err)
{
    if (!f || strcmp(f, "tar") == 0)
        *ret = FF_TAR;
    else if (strcmp(f, "raw") == 0)
        *ret = FF_RAW;
    else if (!put && strcmp(f, "list") == 0)
        *ret = FF_LIST;
    else if (!put && strcmp(f, "stat") == 0)
        *ret = FF_STAT;
    else
        return api_error_set(err, API_INVALID_ARGUMENT, "format must be %s", put ? "tar or raw" : "tar, raw, list or stat");
    return 0;
}

int api_data_source(req_t *rq, const char *id, const char *what, logs_source_t *src)
{
    memset(src, 0, sizeof *src);
    if (!ids_valid("sbx", id)) {
        http_reply_error(rq, API_NOT_FOUND, "no sandbox %.64s", id);
        return SBX_ENOTFOUND;
    }
    int rc = store_sandbox_logs_source(rq->db, auth_scope(rq), id, src);
    if (rc == SBX_ENOTFOUND) {
        http_reply_error(rq, API_NOT_FOUND, "no sandbox %.64s", id);
        return rc;
    }
    if (rc < 0) {
        http_reply_error(rq, API_UNAVAILABLE, "database unavailable");
        return rc;
    }
    if (strcmp(src->phase, "running") != 0) {
        http_reply_error(rq, API_CONFLICT, "sandbox %s is %s: %s only while it is running", id, src->phase, what);
    } else if (!src->worker_id[0] || strcmp(src->worker_state, "lost") == 0) {
        http_reply_error(rq, API_UNAVAILABLE, "the worker running sandbox %s is lost", id);
    } else if (src->unreachable[0]) {
        http_reply_error(rq, API_UNAVAILABLE, "sandbox %s: %s only while its worker answers, and %s; retry once it "
                         "is back", id, what, src->unreachable);
    } else if (!src->worker_address[0] || !src->worker_token_hash[0]) {
        http_reply_error(rq, API_UNAVAILABLE, "the worker running sandbox %s has no forwarder address", id);
    } else {
        return 0;
    }
    store_logs_source_release(src);
    return SBX_EINVAL;
}

int api_tenant_take(req_t *rq, const logs_source_t *src, unsigned kinds, tenantcap_hold_t *hold)
{
    tenantcap_limits_t lim;
    tcap_kind_t over = TCAP_TRANSFERS;
    tenantcap_limits(&rq->ctl->cfg, &src->caps, &lim);
    if (tenantcap_take(hold, src->tenant_id, kinds, &lim, &over) == 0)
        return 0;
    char msg[300];
    tenantcap_message(&lim, over, msg, sizeof msg);
    evhttp_add_header(evhttp_request_get_output_headers(rq->ev), "Retry-After", "5");
    http_reply_error(rq, API_QUOTA_EXCEEDED, "%s", msg);
    return SBX_ETOOBIG;
}

/* The grant of purpose for sandbox_id on src's worker, bound to line. */
static int sign_line_grant(const logs_source_t *src, const char *sandbox_id, grant_purpose_t purpose,
                           const char *line, char ret[GRANT_MAX])
{
    unsigned char key[GRANT_KEY_BYTES];
    grant_t g = { .purpose = purpose, .expires_unix = (int64_t)time(NULL) + FILES_GRANT_SECONDS };
    snprintf(g.worker_id, sizeof g.worker_id, "%s", src->worker_id);
    snprintf(g.sandbox_id, sizeof g.sandbox_id, "%s", sandbox_id);
    grant_files_digest(line, strlen(line), g.files_digest);
    int rc = grant_key_from_hash_hex(src->worker_token_hash, key);
    if (rc == 0)
        rc = grant_sign(key, &g, ret);
    sodium_memzero(key, sizeof key);
    return rc;
}

int api_worker_open(const api_worker_open_t *o, struct bufferevent **ret, api_error_t *err)
{
    char grant[GRANT_MAX];
    *ret = NULL;
    if (sign_line_grant(o->src, o->sandbox_id, o->purpose, o->line, grant) < 0)
        return api_error_set(err, API_INTERNAL, "cannot sign the worker grant");
    struct evbuffer *pre = evbuffer_new();
    if (pre)
        evbuffer_add_printf(pre, "SANDBOX-FORWARD/1 %s\r\n%s\r\n", grant, o->line);
    sodium_memzero(grant, sizeof grant);
    if (!pre)
        return api_error_set(err, API_INTERNAL, "out of memory");
    const char *why = NULL;
    struct bufferevent *up = proxy_worker_dial(o->rq->ctl, o->base, o->src->worker_address, pre, FILES_WORKER_SECONDS,
                                               o->readcb, o->writecb, o->eventcb, o->arg, &why);
    evbuffer_free(pre);
    if (!up)
        return api_error_set(err, API_UNAVAILABLE, "%s", why);
    if (!o->read_timeout)
        bufferevent_set_timeouts(up, NULL, NULL);
    bufferevent_setwatermark(up, EV_WRITE, SBX_FILES_STREAM_HIGH_WATER / 2, 0);
    *ret = up;
    return 0;
}

/* Connects to the worker and sends the preamble and the request line; the
 * transfer owns rq from here (a failure is answered). */
static void fx_start(files_xfer_t *fx, const logs_source_t *src, const char *line)
{
    struct event_base *base = fx->evcon ? evhttp_connection_get_base(fx->evcon) : NULL;
    api_error_t err;
    if (!base) {
        fx_fail(fx, API_INTERNAL, "the request has no connection");
        return;
    }
    fx->sweep = event_new(base, -1, EV_PERSIST, sweep_cb, fx);
    if (!fx->sweep) {
        fx_fail(fx, API_INTERNAL, "out of memory");
        return;
    }
    struct timeval st = { FILES_SWEEP_SECONDS, 0 };
    evtimer_add(fx->sweep, &st);
    /* An upload moves as fast as the Engine unpacks, and its reply comes
     * when that is done: the sweep bounds it (no progress for
     * SBX_FILES_IDLE_SECONDS), not the connection's timeouts. */
    api_worker_open_t o = { .rq = fx->rq, .base = base, .src = src, .sandbox_id = fx->sandbox_id,
                            .purpose = fx->snapshot ? GRANT_SNAPSHOT
                                       : fx->envd   ? GRANT_ENVD
                                       : fx->put    ? GRANT_FILES_PUT
                                                    : GRANT_FILES_GET,
                            .line = line,
                            .read_timeout = !fx->put, .readcb = up_read_cb, .writecb = fx->put ? up_write_cb : NULL,
                            .eventcb = up_event_cb, .arg = fx };
    if (api_worker_open(&o, &fx->up, &err) < 0) {
        fx_fail(fx, err.code, "%s", err.message);
        return;
    }
    /* libevent moves 16 KiB per read or write unless told. */
    bufferevent_set_max_single_read(fx->up, SBX_FILES_STREAM_HIGH_WATER);
    bufferevent_set_max_single_write(fx->up, SBX_FILES_STREAM_HIGH_WATER);
}

static files_xfer_t *fx_new(req_t *rq, const char *id, const char *path, files_format_t format, bool put)
{
    files_xfer_t *fx = calloc(1, sizeof *fx);
    if (!fx)
        return NULL;
    fx->rq = rq;
    fx->evcon = evhttp_request_get_connection(rq->ev);
    fx->put = put;
    fx->format = format;
    fx->state = FX_CONNECT;
    fx->t0_ms = fx->progress_ms = mono_ms();
    fx->max_bytes = cfg_int(&rq->ctl->cfg, CFG_FILES_MAX_BYTES);
    snprintf(fx->sandbox_id, sizeof fx->sandbox_id, "%s", id);
    snprintf(fx->path, sizeof fx->path, "%s", path);
    fx->next = thread_xfers;
    if (thread_xfers)
        thread_xfers->prev = fx;
    thread_xfers = fx;
    if (fx->evcon)
        apiconn_set_closecb(fx->evcon, client_close_cb, fx);
    return fx;
}

/* The upload's request line: {"op":"put","path","format","size","mode","parents","max_bytes"}. */
static char *put_line(const char *path, files_format_t format, int64_t size, int mode, bool parents,
                      int64_t max_bytes)
{
    json_object *o = json_object_new_object();
    jsonx_add(o, "op", json_object_new_string("put"));
    jsonx_add(o, "path", json_object_new_string(path));
    jsonx_add(o, "format", json_object_new_string(format_names[format]));
    if (format == FF_RAW) {
        jsonx_add(o, "size", json_object_new_int64(size));
        jsonx_add(o, "mode", json_object_new_int(mode));
        if (parents)
            jsonx_add(o, "parents", json_object_new_boolean(true));
    }
    jsonx_add(o, "max_bytes", json_object_new_int64(max_bytes));
    char *s = jsonx_dump(o);
    json_object_put(o);
    return s;
}

static int parse_mode(const char *m, int *ret, api_error_t *err)
{
    *ret = 0644;
    if (!m)
        return 0;
    size_t n = strlen(m);
    int v = 0;
    bool ok = n >= 1 && n <= 5;
    for (size_t i = 0; ok && i < n; i++) {
        ok = m[i] >= '0' && m[i] <= '7';
        v = v * 8 + (m[i] - '0');
    }
    if (!ok || v > 07777)
        return api_error_set(err, API_INVALID_ARGUMENT, "mode must be octal permission bits (0 to 7777), as 644");
    *ret = v;
    return 0;
}

void api_sandbox_files_put(req_t *rq, const char *id)
{
    api_error_t err;
    files_format_t format;
    int mode = 0644;
    const char *path = http_query(rq, "path");
    if (api_files_path_check(path, &err) < 0 || parse_format(http_query(rq, "format"), true, &format, &err) < 0 ||
        parse_mode(http_query(rq, "mode"), &mode, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    if (http_query(rq, "mode") && format != FF_RAW) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "mode goes with format=raw (a tar keeps its own modes)");
        return;
    }
    /* parents=true: the missing directories above a raw file are made
     * (as mkdir -p, by the worker: no tool in the image needed) */
    const char *pq = http_query(rq, "parents");
    bool parents = pq && (strcmp(pq, "true") == 0 || strcmp(pq, "1") == 0);
    if (pq && !parents && strcmp(pq, "false") != 0 && strcmp(pq, "0") != 0) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "parents must be true or false");
        return;
    }
    if (parents && format != FF_RAW) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "parents goes with format=raw (a tar carries its directories)");
        return;
    }
    const char *framing = http_header(rq, APICONN_STREAM_HEADER);
    if (!framing || !rq->conn) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "the upload is empty: send a tar archive as the body "
                                                   "(or the file's bytes with format=raw)");
        return;
    }
    bool chunked = strcmp(framing, "chunked") == 0;
    int64_t size = chunked ? -1 : strtoll(framing, NULL, 10);
    if (format == FF_RAW && chunked) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "format=raw needs a Content-Length (a chunked upload must be "
                                                   "a tar archive)");
        return;
    }
    logs_source_t src;
    tenantcap_hold_t tcap = { .kinds = 0 };
    if (api_data_source(rq, id, "files move", &src) < 0)
        return;
    if (api_tenant_take(rq, &src, TCAP_BIT(TCAP_TRANSFERS) | TCAP_BIT(TCAP_WORKER_CONNS), &tcap) < 0) {
        store_logs_source_release(&src);
        return;
    }
    char *line = put_line(path, format, size, mode, parents, cfg_int(&rq->ctl->cfg, CFG_FILES_MAX_BYTES));
    files_xfer_t *fx = line ? fx_new(rq, id, path, format, true) : NULL;
    if (fx)
        fx->tcap = tcap; /* the transfer's now: fx_free gives it back */
    if (!fx) {
        tenantcap_release(&tcap);
        store_logs_source_release(&src);
        free(line);
        http_reply_error(rq, API_INTERNAL, "out of memory");
        return;
    }
    if (apiconn_stream_begin(rq->conn, put_body_cb, fx) < 0) {
        store_logs_source_release(&src);
        free(line);
        fx_fail(fx, API_UNAVAILABLE, "the upload's connection cannot be read");
        return;
    }
    fx->ac = rq->conn;
    fx_start(fx, &src, line);
    store_logs_source_release(&src);
    free(line);
}

void api_sandbox_files_get(req_t *rq, const char *id)
{
    api_error_t err;
    files_format_t format;
    const char *path = http_query(rq, "path");
    if (api_files_path_check(path, &err) < 0 || parse_format(http_query(rq, "format"), false, &format, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    if (!apiconn_transfer_take()) {
        evhttp_add_header(evhttp_request_get_output_headers(rq->ev), "Retry-After", "1");
        http_reply_error(rq, API_UNAVAILABLE, "the controller runs too many file transfers; retry shortly");
        return;
    }
    logs_source_t src;
    tenantcap_hold_t tcap = { .kinds = 0 };
    if (api_data_source(rq, id, "files move", &src) < 0) {
        apiconn_transfer_release();
        return;
    }
    if (api_tenant_take(rq, &src, TCAP_BIT(TCAP_TRANSFERS) | TCAP_BIT(TCAP_WORKER_CONNS), &tcap) < 0) {
        apiconn_transfer_release();
        store_logs_source_release(&src);
        return;
    }
    /* stat reads the 200 line of a tar download and goes. */
    json_object *o = json_object_new_object();
    jsonx_add(o, "op", json_object_new_string("get"));
    jsonx_add(o, "path", json_object_new_string(path));
    jsonx_add(o, "format", json_object_new_string(format_names[format == FF_STAT ? FF_TAR : format]));
    char *line = jsonx_dump(o);
    json_object_put(o);
    files_xfer_t *fx = line ? fx_new(rq, id, path, format, false) : NULL;
    if (fx)
        fx->tcap = tcap;
    if (!fx) {
        tenantcap_release(&tcap);
        apiconn_transfer_release();
        store_logs_source_release(&src);
        free(line);
        http_reply_error(rq, API_INTERNAL, "out of memory");
        return;
    }
    fx->counted = true;
    fx_watch_client(fx);
    fx_start(fx, &src, line);
    store_logs_source_release(&src);
    free(line);
}

void api_worker_snapshot_export(req_t *rq, const char *id, const char *snp)
{
    api_error_t err;
    if (!api_worker_id_ok(rq, "snapshot export", id, false))
        return;
    if (!ids_valid("snp", snp)) {
        http_reply_error(rq, API_NOT_FOUND, "no snapshot %.64s", snp);
        return;
    }
    if (!apiconn_transfer_take()) {
        evhttp_add_header(evhttp_request_get_output_headers(rq->ev), "Retry-After", "1");
        http_reply_error(rq, API_UNAVAILABLE, "the controller runs too many transfers; retry shortly");
        return;
    }
    logs_source_t src;
    int64_t image_bytes = 0;
    if (store_snapshot_export_source(rq->db, id, snp, &src, &image_bytes, &err) < 0) {
        apiconn_transfer_release();
        http_reply_api_error(rq, &err);
        return;
    }
    json_object *o = json_object_new_object();
    jsonx_add_str(o, "op", "snapshot_export");
    jsonx_add_str(o, "snapshot", snp);
    char *line = jsonx_dump(o);
    json_object_put(o);
    files_xfer_t *fx = line ? fx_new(rq, snp, "snapshot", FF_TAR, false) : NULL;
    if (!fx) {
        apiconn_transfer_release();
        store_logs_source_release(&src);
        free(line);
        http_reply_error(rq, API_INTERNAL, "out of memory");
        return;
    }
    fx->snapshot = true;
    fx->counted = true;
    /* a docker-save tar (a driver's tar of a microvm's disk and RAM) is
     * about the snapshot's size: that with room for the tar's own headers,
     * never less than a file transfer's bound */
    int64_t bound = image_bytes + image_bytes / 4 + (int64_t)64 * 1024 * 1024;
    if (bound > fx->max_bytes)
        fx->max_bytes = bound;
    fx_watch_client(fx);
    fx_start(fx, &src, line);
    store_logs_source_release(&src);
    free(line);
}

/* ---- E2B envd calls ------------------------------------------------------ */

/* Request headers an envd call may need on the worker (docs/worker.md
 * "E2B envd"); the key and everything else stay here. Authorization goes
 * only as Basic: it names the E2B user, never a secret of ours. */
static const char *const envd_request_headers[] = { "content-type", "connect-protocol-version", "connect-timeout-ms",
                                                    "connect-accept-encoding", "connect-content-encoding", "accept",
                                                    "e2b-sandbox-port", "range", "content-encoding",
                                                    "keepalive-ping-interval", NULL };

/* The envd request line: {"op":"envd","method","path","query","headers","caller","tenant","body","max_bytes"}. */
static char *envd_line(req_t *rq, const char *path, const char *tenant_id, int64_t body)
{
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(rq->ev);
    const char *query = uri ? evhttp_uri_get_query(uri) : NULL;
    json_object *o = json_object_new_object(), *h = json_object_new_object();
    jsonx_add_str(o, "op", "envd");
    jsonx_add_str(o, "method", rq->method == EVHTTP_REQ_POST ? "POST" : rq->method == EVHTTP_REQ_PUT ? "PUT"
                               : rq->method == EVHTTP_REQ_DELETE ? "DELETE" : rq->method == EVHTTP_REQ_HEAD ? "HEAD"
                               : "GET");
    jsonx_add_str(o, "path", path);
    jsonx_add_str(o, "query", query ? query : "");
    for (int i = 0; envd_request_headers[i]; i++) {
        const char *v = http_header(rq, envd_request_headers[i]);
        if (v)
            jsonx_add_str(h, envd_request_headers[i], v);
    }
    const char *auth = http_header(rq, "Authorization");
    if (auth && strncasecmp(auth, "Basic ", 6) == 0)
        jsonx_add_str(h, "authorization", auth);
    jsonx_add(o, "headers", h);
    /* whose call it is: a process's record names the token that started it */
    jsonx_add_str(o, "caller", rq->auth.token_id);
    /* the sandbox's tenant: the worker bounds each tenant's processes */
    jsonx_add_str(o, "tenant", tenant_id);
    jsonx_add_int(o, "body", body);
    jsonx_add_int(o, "max_bytes", cfg_int(&rq->ctl->cfg, CFG_FILES_MAX_BYTES));
    char *s = jsonx_dump(o);
    json_object_put(o);
    return s && strlen(s) + 2 <= SBX_FILES_REQUEST_MAX ? s : (free(s), NULL);
}

/* An envd answer of E2B's edge: {"code":status,"message"} as plain JSON
 * whatever the call's dialect (the SDK reads a 502 as "the sandbox is
 * gone": isRunning() false, SandboxNotFoundError on a stream). */
static void envd_edge_error(req_t *rq, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void envd_edge_error(req_t *rq, int status, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    e2b_reply_status(rq, status, msg);
}

/* api_data_source for envd: a sandbox that is not running (or not the
 * caller's) is 502, one whose worker is away 503. */
static int envd_source(req_t *rq, const char *id, logs_source_t *src)
{
    memset(src, 0, sizeof *src);
    int rc = store_sandbox_logs_source(rq->db, auth_scope(rq), id, src);
    if (rc == SBX_ENOTFOUND) {
        envd_edge_error(rq, 502, "sandbox %.64s not found", id);
        return rc;
    }
    if (rc < 0) {
        envd_edge_error(rq, 503, "database unavailable");
        return rc;
    }
    if (strcmp(src->phase, "running") != 0)
        envd_edge_error(rq, 502, "sandbox %s not found: it is %s", id, src->phase);
    else if (!src->worker_id[0] || strcmp(src->worker_state, "lost") == 0)
        envd_edge_error(rq, 502, "sandbox %s not found: its worker is lost", id);
    else if (src->unreachable[0])
        envd_edge_error(rq, 503, "sandbox %s: %s; retry once it is back", id, src->unreachable);
    else if (!src->worker_address[0] || !src->worker_token_hash[0])
        envd_edge_error(rq, 503, "the worker running sandbox %s has no forwarder address", id);
    else
        return 0;
    store_logs_source_release(src);
    return SBX_EINVAL;
}

void api_envd_relay(req_t *rq, const char *sandbox_id, const char *path)
{
    const char *framing = http_header(rq, APICONN_STREAM_HEADER);
    int64_t body = !framing ? 0 : strcmp(framing, "chunked") == 0 ? -1 : strtoll(framing, NULL, 10);
    if (!apiconn_transfer_take()) {
        evhttp_add_header(evhttp_request_get_output_headers(rq->ev), "Retry-After", "1");
        http_reply_error(rq, API_UNAVAILABLE, "the controller runs too many file transfers and envd calls; retry "
                                              "shortly");
        return;
    }
    logs_source_t src;
    tenantcap_hold_t tcap = { .kinds = 0 };
    if (envd_source(rq, sandbox_id, &src) < 0) {
        apiconn_transfer_release();
        return;
    }
    if (api_tenant_take(rq, &src, TCAP_BIT(TCAP_TRANSFERS) | TCAP_BIT(TCAP_WORKER_CONNS), &tcap) < 0) {
        apiconn_transfer_release();
        store_logs_source_release(&src);
        return;
    }
    char *line = envd_line(rq, path, src.tenant_id, body);
    files_xfer_t *fx = line ? fx_new(rq, sandbox_id, path, FF_RAW, true) : NULL;
    if (fx) {
        fx->tcap = tcap;
        fx->counted = true;
        fx->envd = true;
        /* Only a file write is a transfer to record (fx_record). */
        fx->envd_write = rq->method == EVHTTP_REQ_POST && strcmp(path, "/files") == 0;
    }
    if (!fx) {
        bool too_long = !line;
        tenantcap_release(&tcap);
        apiconn_transfer_release();
        store_logs_source_release(&src);
        free(line);
        http_reply_error(rq, too_long ? API_INVALID_ARGUMENT : API_INTERNAL,
                         too_long ? "the envd call's path, query and headers are too long" : "out of memory");
        return;
    }
    if (framing && rq->conn) {
        if (apiconn_stream_begin(rq->conn, put_body_cb, fx) < 0) {
            store_logs_source_release(&src);
            free(line);
            fx_fail(fx, API_UNAVAILABLE, "the call's connection cannot be read");
            return;
        }
        fx->ac = rq->conn;
    }
    fx_start(fx, &src, line);
    store_logs_source_release(&src);
    free(line);
}

void api_files_stop_thread(void)
{
    while (thread_xfers) {
        files_xfer_t *fx = thread_xfers;
        if (fx->state == FX_BODY)
            fx_close(fx, false, false, "the controller is stopping");
        else
            fx_fail(fx, API_UNAVAILABLE, "the controller is stopping");
    }
}
