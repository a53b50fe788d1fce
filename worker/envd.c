/* The forwarder's E2B envd calls: an envd
 * grant's request line (checked against the grant's digest, parsed
 * strictly), the body's frames, then the call's answer. The calls are rows
 * of one table: each row a method and path, how its body comes (a Connect
 * message, JSON or enveloped, or a stream the handler reads itself) and
 * its handler, in envd_process.c (process.Process), envd_fs.c
 * (filesystem.Filesystem, /files) or envd_watch.c (WatchDir).
 *
 * The protocol between controller and worker (docs/worker.md "E2B envd"):
 * 1. "SANDBOX-FORWARD/1 <grant>\r\n", the grant's purpose GRANT_ENVD;
 * 2. one request line bound to the grant's digest, at most
 *    SBX_FILES_REQUEST_MAX bytes with its CRLF, parsed strictly:
 *    {"op":"envd","method":M,"path":P,"query":Q,"headers":{...},"body":N,"max_bytes":B}
 *    (M GET, POST, PUT, DELETE or HEAD; P what followed /e2b/envd in the
 *    client's URL, without the query; Q the raw query, "" for none;
 *    headers at most ENVD_HEADERS_MAX lower-case names to strings; N the
 *    body's byte count, -1 unknown, 0 none; B the upload bound);
 * 3. the request body as LOGFRAME_STDOUT frames, then one empty
 *    LOGFRAME_END frame (always, also without a body);
 * 4. the answer: one line "SANDBOX-FORWARD/1 200 ok {"status":S,"headers":{...}}\r\n"
 *    (S the client's HTTP status), the body as LOGFRAME_STDOUT frames and
 *    one LOGFRAME_END frame, empty when the body is complete, else why it
 *    stopped. Refusals before that line (grant, sandbox, container) are
 *    the forwarder's usual error lines; envd's own errors (bad JSON, no
 *    such process or file, unimplemented methods) are a 200 line carrying
 *    the HTTP status and the error body the SDK expects. A server stream's
 *    line goes out when it starts, each envelope as its own frame at once;
 * 5. the controller closing its side ends the request; a process the
 *    request started lives on (only SendSignal, its own exit, the sandbox
 *    going, the worker stopping or its Start's connect-timeout-ms, which
 *    envd takes as the process's lifetime, end it). */
#include "envd.h"
#include "envd_internal.h"
#include "errors.h"
#include "jsonx.h"
#include "log.h"
#include "metrics.h"
#include "timeutil.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* An END frame's reason is cut to this. */
#define ENVD_END_MESSAGE_MAX 512
/* The body of a call that takes none (GET, HEAD), at most. */
#define ENVD_EMPTY_BODY_MAX  4096

/* ---- the body ---------------------------------------------------------- */

/* Makes sure bytes are pending; false when the connection ended, stalled
 * or the worker stops. */
static bool envd_body_fill(envd_call_t *k)
{
    forward_conn_t *c = k->c;
    if (k->off < c->up_len)
        return true;
    k->off = c->up_len = 0;
    for (;;) {
        int w = forward_client_pending(c) ? POLLIN : forward_wait(c->f, c->client, POLLIN, FORWARD_IDLE_TIMEOUT_MS);
        if (w <= 0) {
            snprintf(k->why, sizeof k->why, "%s", w < 0 ? "the worker is shutting down" : "no body bytes for 300 s");
            return false;
        }
        ssize_t n = forward_client_recv(c, c->up, FORWARD_BUFFER_BYTES);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n <= 0) {
            snprintf(k->why, sizeof k->why, "the connection ended before the body's END frame");
            k->gone = true;
            return false;
        }
        c->up_len = (size_t)n;
        return true;
    }
}

ptrdiff_t envd_body_read(envd_call_t *k, char *buf, size_t cap)
{
    forward_conn_t *c = k->c;
    if (k->body_ended)
        return 0;
    for (;;) {
        if (k->left > 0) {
            if (!envd_body_fill(k))
                return SBX_EIO;
            size_t n = c->up_len - k->off;
            n = n < k->left ? n : k->left;
            n = n < cap ? n : cap;
            memcpy(buf, c->up + k->off, n);
            k->off += n;
            k->left -= (uint32_t)n;
            return (ptrdiff_t)n;
        }
        while (k->hdr_len < LOGFRAME_HEADER_BYTES) {
            if (!envd_body_fill(k))
                return SBX_EIO;
            size_t n = LOGFRAME_HEADER_BYTES - k->hdr_len;
            n = n < c->up_len - k->off ? n : c->up_len - k->off;
            memcpy(k->hdr + k->hdr_len, c->up + k->off, n);
            k->hdr_len += n;
            k->off += n;
        }
        k->hdr_len = 0;
        uint32_t len = (uint32_t)k->hdr[1] << 24 | (uint32_t)k->hdr[2] << 16 | (uint32_t)k->hdr[3] << 8 | k->hdr[4];
        if (k->hdr[0] == LOGFRAME_END && len == 0) {
            k->body_ended = true;
            return 0;
        }
        if (k->hdr[0] != LOGFRAME_STDOUT || len > LOGFRAME_PAYLOAD_MAX) {
            snprintf(k->why, sizeof k->why, "a body is data frames (type 1) of at most 65536 bytes and one empty "
                     "END frame (type 3)");
            return SBX_EINVAL;
        }
        k->left = len;
    }
}

int envd_body_all(envd_call_t *k, size_t max, sbuf_t *ret)
{
    char buf[16384];
    sbuf_init(ret, max);
    for (;;) {
        ptrdiff_t n = envd_body_read(k, buf, sizeof buf);
        if (n < 0)
            return (int)n;
        if (n == 0)
            return 0;
        if (sbuf_append(ret, buf, (size_t)n) < 0)
            return SBX_ETOOBIG;
    }
}

/* ---- answering ---------------------------------------------------------- */

int envd_answer_head(envd_call_t *k, int status, const char *content_type)
{
    json_object *o = json_object_new_object(), *h = json_object_new_object();
    char line[512];
    int r = SBX_EIO;
    if (o && h) {
        jsonx_add_int(o, "status", status);
        if (content_type)
            jsonx_add_str(h, "content-type", content_type);
        jsonx_add(o, "headers", h);
        h = NULL;
        const char *js = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
        size_t n = forward_reply_format(line, sizeof line, 200, "ok", js);
        r = forward_send_all(k->c, line, n);
    }
    if (h)
        json_object_put(h);
    if (o)
        json_object_put(o);
    k->answered = true;
    if (r < 0)
        k->gone = true;
    return r;
}

int envd_answer_body(envd_call_t *k, const char *p, size_t n)
{
    if (k->gone)
        return SBX_EIO;
    if (n > 0 && forward_send_frames(k->c, LOGFRAME_STDOUT, p, n) < 0) {
        k->gone = true;
        return SBX_EIO;
    }
    return 0;
}

void envd_answer_end(envd_call_t *k, const char *why)
{
    if (k->gone)
        return;
    size_t wl = strlen(why);
    wl = wl > ENVD_END_MESSAGE_MAX ? ENVD_END_MESSAGE_MAX : wl;
    unsigned char hdr[LOGFRAME_HEADER_BYTES];
    logframe_header(hdr, LOGFRAME_END, (uint32_t)wl);
    if (forward_send_all(k->c, hdr, sizeof hdr) < 0 || (wl > 0 && forward_send_all(k->c, why, wl) < 0))
        k->gone = true;
    else
        forward_client_shutdown(k->c);
}

void envd_answer(envd_call_t *k, int status, const char *content_type, const char *body, size_t n)
{
    if (envd_answer_head(k, status, content_type) == 0 && envd_answer_body(k, body, n) == 0)
        envd_answer_end(k, "");
}

void envd_rpc_ok(envd_call_t *k, json_object *msg)
{
    if (!msg)
        msg = json_object_new_object();
    const char *js = msg ? json_object_to_json_string_ext(msg, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)
                         : NULL;
    if (js)
        envd_answer(k, 200, "application/json", js, strlen(js));
    else
        envd_rpc_error(k, "resource_exhausted", "the worker is out of memory");
    if (msg)
        json_object_put(msg);
}

void envd_rpc_error(envd_call_t *k, const char *code, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char *js = envd_connect_error_json(code, msg, false);
    envd_answer(k, envd_connect_http_status(code), "application/json", js ? js : "{}", js ? strlen(js) : 2);
    free(js);
}

void envd_http_error(envd_call_t *k, int status, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_object *o = json_object_new_object();
    char *js = NULL;
    if (o) {
        jsonx_add_int(o, "code", status);
        jsonx_add_str(o, "message", msg);
        js = jsonx_dump(o);
        json_object_put(o);
    }
    envd_answer(k, status, "application/json", js ? js : "{}", js ? strlen(js) : 2);
    free(js);
}

int envd_stream_begin(envd_call_t *k) { return envd_answer_head(k, 200, "application/connect+json"); }

int envd_stream_send(envd_call_t *k, const char *json, size_t n)
{
    if (k->gone)
        return SBX_EIO;
    unsigned char hdr[LOGFRAME_HEADER_BYTES + ENVD_ENVELOPE_HEADER];
    if (n > LOGFRAME_PAYLOAD_MAX - ENVD_ENVELOPE_HEADER)
        return SBX_ETOOBIG;
    /* One frame per envelope: the controller hands each on at once. */
    logframe_header(hdr, LOGFRAME_STDOUT, (uint32_t)(n + ENVD_ENVELOPE_HEADER));
    envd_envelope_header(hdr + LOGFRAME_HEADER_BYTES, 0, (uint32_t)n);
    if (forward_send_all(k->c, hdr, sizeof hdr) < 0 || forward_send_all(k->c, json, n) < 0) {
        k->gone = true;
        return SBX_EIO;
    }
    return 0;
}

void envd_stream_end(envd_call_t *k, const char *code, const char *message)
{
    char *js = envd_connect_error_json(code, message, true);
    const char *body = js ? js : "{}";
    size_t n = strlen(body);
    unsigned char env[ENVD_ENVELOPE_HEADER];
    envd_envelope_header(env, ENVD_FLAG_END_STREAM, (uint32_t)n);
    char *msg = malloc(sizeof env + n);
    if (msg) {
        memcpy(msg, env, sizeof env);
        memcpy(msg + sizeof env, body, n);
        if (envd_answer_body(k, msg, sizeof env + n) == 0)
            envd_answer_end(k, "");
    }
    free(msg);
    free(js);
}

const char *envd_code_of(const api_error_t *err)
{
    switch (err->code) {
    case API_INVALID_ARGUMENT:
    case API_INVALID_JSON:
        return "invalid_argument";
    case API_NOT_FOUND:
        return "not_found";
    case API_PAYLOAD_TOO_LARGE:
        return "resource_exhausted";
    case API_CONFLICT:
    case API_SANDBOX_EXITED:
        return "failed_precondition";
    case API_CANCELLED:
    case API_UNAVAILABLE:
        return "unavailable";
    default:
        return "internal";
    }
}

bool envd_msg_str(json_object *msg, const char *key, const char **ret)
{
    json_object *v = NULL;
    *ret = NULL;
    if (!json_object_object_get_ex(msg, key, &v) || !v)
        return true;              /* absent or null: proto3 JSON's default */
    if (!json_object_is_type(v, json_type_string))
        return false;
    const char *s = json_object_get_string(v);
    if (strlen(s) != (size_t)json_object_get_string_len(v))
        return false;
    *ret = s;
    return true;
}

/* ---- stat -------------------------------------------------------------- */

typedef struct envd_stat_io {
    runtime_files_stat_t *st;
    bool seen;
} envd_stat_io_t;

static int envd_stat_cb(void *ud, const runtime_files_stat_t *st)
{
    envd_stat_io_t *io = ud;
    *io->st = *st;
    io->seen = true;
    return SBX_EIO;               /* the stat is all that is wanted */
}

static int envd_stat_data(void *ud, const char *p, size_t n)
{
    (void)ud, (void)p, (void)n;
    return SBX_EIO;
}

int envd_stat(envd_call_t *k, const char *path, runtime_files_stat_t *ret, api_error_t *err)
{
    envd_stat_io_t io = { .st = ret };
    int stop_fds[1] = { k->c->f->stop_pipe[0] };
    runtime_files_get_req_t req = { .ref = k->ref, .path = path, .format = RUNTIME_FILES_LIST,
                                    .on_stat = envd_stat_cb, .on_data = envd_stat_data, .ud = &io,
                                    .stop_fds = stop_fds, .nstop_fds = 1 };
    int r = runtime_files_get(k->c->f->rt, &req, err);
    if (r < 0)
        return r;
    if (!io.seen)
        return api_error_set(err, API_CANCELLED, "the worker is shutting down");
    return 0;
}

/* ---- the table of calls -------------------------------------------------- */

typedef enum {
    ENVD_UNARY = 0,           /* a Connect unary call: POST, application/json */
    ENVD_STREAM,              /* a Connect server stream: POST, application/connect+json, one envelope */
    ENVD_HTTP,                /* plain HTTP: the handler reads the body itself */
} envd_kind_t;

typedef struct envd_route {
    const char *method;
    const char *path;
    envd_kind_t kind;
    void (*handler)(envd_call_t *k, json_object *msg);  /* NULL: unimplemented */
    size_t body_max;          /* a Connect call's message, at most */
} envd_route_t;

static void envd_health(envd_call_t *k, json_object *msg);

static const envd_route_t envd_routes[] = {
    { "GET", "/health", ENVD_HTTP, envd_health },
    { "GET", "/files", ENVD_HTTP, envd_files_get },
    { "POST", "/files", ENVD_HTTP, envd_files_post },
    /* json-c makes about 35 bytes of objects of each byte of a message
     * ("[0,0,...]"): each call takes no more than it needs. */
    { "POST", "/process.Process/Start", ENVD_STREAM, envd_process_start, ENVD_START_BODY_MAX },
    { "POST", "/process.Process/Connect", ENVD_STREAM, envd_process_connect, ENVD_CALL_BODY_MAX },
    { "POST", "/process.Process/List", ENVD_UNARY, envd_process_list, ENVD_CALL_BODY_MAX },
    { "POST", "/process.Process/SendInput", ENVD_UNARY, envd_process_send_input, ENVD_RPC_BODY_MAX },
    { "POST", "/process.Process/CloseStdin", ENVD_UNARY, envd_process_close_stdin, ENVD_CALL_BODY_MAX },
    { "POST", "/process.Process/SendSignal", ENVD_UNARY, envd_process_send_signal, ENVD_CALL_BODY_MAX },
    { "POST", "/process.Process/Update", ENVD_UNARY, envd_process_update, ENVD_CALL_BODY_MAX },
    /* a client stream: the SDK does not use it (SendInput instead) */
    { "POST", "/process.Process/StreamInput", ENVD_STREAM, NULL, ENVD_CALL_BODY_MAX },
    { "POST", "/filesystem.Filesystem/Stat", ENVD_UNARY, envd_fs_stat, ENVD_CALL_BODY_MAX },
    { "POST", "/filesystem.Filesystem/ListDir", ENVD_UNARY, envd_fs_list_dir, ENVD_CALL_BODY_MAX },
    { "POST", "/filesystem.Filesystem/MakeDir", ENVD_UNARY, envd_fs_make_dir, ENVD_CALL_BODY_MAX },
    { "POST", "/filesystem.Filesystem/Move", ENVD_UNARY, envd_fs_move, ENVD_CALL_BODY_MAX },
    { "POST", "/filesystem.Filesystem/Remove", ENVD_UNARY, envd_fs_remove, ENVD_CALL_BODY_MAX },
    { "POST", "/filesystem.Filesystem/WatchDir", ENVD_STREAM, envd_fs_watch_dir, ENVD_CALL_BODY_MAX },
    /* the unary watchers: the SDK does not use them (WatchDir instead) */
    { "POST", "/filesystem.Filesystem/CreateWatcher", ENVD_UNARY, NULL, ENVD_CALL_BODY_MAX },
    { "POST", "/filesystem.Filesystem/GetWatcherEvents", ENVD_UNARY, NULL, ENVD_CALL_BODY_MAX },
    { "POST", "/filesystem.Filesystem/RemoveWatcher", ENVD_UNARY, NULL, ENVD_CALL_BODY_MAX },
};

/* GET /health: envd's 204. */
static void envd_health(envd_call_t *k, json_object *msg)
{
    (void)msg;
    envd_answer(k, 204, NULL, NULL, 0);
}

/* Whether the content type names the media type mt (parameters ignored). */
static bool envd_ct_is(const char *ct, const char *mt)
{
    size_t n = strlen(mt);
    return ct && strncasecmp(ct, mt, n) == 0 && (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ');
}

/* A Connect call: its one message from the body, then the handler. */
static void envd_rpc(envd_call_t *k, const envd_route_t *row)
{
    const char *ct = envd_req_header(&k->q, "content-type");
    const char *enc = envd_req_header(&k->q, "connect-content-encoding");
    bool stream = row->kind == ENVD_STREAM;
    sbuf_t body;
    json_object *msg = NULL;
    api_error_t je;
    char why[200];
    int r = envd_body_all(k, row->body_max, &body);
    if (r < 0 && r != SBX_ETOOBIG) {
        if (r == SBX_EINVAL)
            forward_refuse(k->c, 400, "invalid_argument", "%s", k->why);
        else if (forward_stopping(k->c->f))
            forward_refuse(k->c, 503, "busy", "the worker is shutting down");
        goto cleanup;             /* else nobody is there to answer */
    }
    if (!row->handler) {
        /* Whatever its body and content type: the client learns it is not served. */
        if (stream && envd_stream_begin(k) == 0)
            envd_stream_end(k, "unimplemented", "this envd call is not served by Sandbox");
        else if (!stream)
            envd_rpc_error(k, "unimplemented", "this envd call is not served by Sandbox");
        if (r == SBX_ETOOBIG)
            forward_linger(k->c); /* the rest of the body, so the close does not reset the answer */
        goto cleanup;
    }
    if (r == SBX_ETOOBIG) {
        envd_rpc_error(k, "resource_exhausted", "the request's message is larger than the %zu bytes %s takes: send "
                       "less at once", row->body_max, row->path);
        forward_linger(k->c);
        goto cleanup;
    }
    if (!envd_ct_is(ct, stream ? "application/connect+json" : "application/json")) {
        char *js = envd_connect_error_json("unimplemented", stream ? "only application/connect+json is served"
                                                                   : "only application/json is served", false);
        envd_answer(k, 415, "application/json", js ? js : "{}", js ? strlen(js) : 2);
        free(js);
        goto cleanup;
    }
    if (enc && strcmp(enc, "identity") != 0) {
        envd_rpc_error(k, "unimplemented", "compressed requests are not served: send them with identity encoding");
        goto cleanup;
    }
    const char *m = body.data ? body.data : "";
    size_t ml = body.len;
    if (stream && envd_envelope_one(m, ml, &m, &ml, why, sizeof why) < 0) {
        if (envd_stream_begin(k) == 0)
            envd_stream_end(k, "invalid_argument", why);
        goto cleanup;
    }
    if (jsonx_parse(ml ? m : "{}", ml ? ml : 2, &msg, &je) < 0 || !json_object_is_type(msg, json_type_object)) {
        if (stream) {
            if (envd_stream_begin(k) == 0)
                envd_stream_end(k, "invalid_argument", "the request's message must be one JSON object");
        } else {
            envd_rpc_error(k, "invalid_argument", "the request's message must be one JSON object");
        }
        goto cleanup;
    }
    row->handler(k, msg);
cleanup:
    if (msg)
        json_object_put(msg);
    sbuf_release(&body);
}

/* sandbox_worker_envd_calls_total{call,outcome}. */
static pthread_once_t envd_metrics_once = PTHREAD_ONCE_INIT;
static metric_family_t *envd_m_calls;

static void envd_metrics_init(void)
{
    envd_m_calls = metrics_family("sandbox_worker_envd_calls_total", METRIC_COUNTER,
                                  "E2B envd calls the worker served, by call (its path) and outcome: answered "
                                  "(a status went to the client, errors of envd's own included), refused (an "
                                  "error line to the controller), aborted (the controller went away).",
                                  NULL, 0);
}

static void envd_done(const envd_call_t *k, const char *call, const char *outcome, int64_t t0)
{
    char labels[160];
    pthread_once(&envd_metrics_once, envd_metrics_init);
    metrics_add(envd_m_calls, metrics_labels(labels, sizeof labels, "call", call, "outcome", outcome, NULL), 1);
    log_debug(ENVD_COMPONENT, "envd %s %s for sandbox %s from %s: %lld ms, %s", k->q.method[0] ? k->q.method : "-",
              call, k->c->sandbox_id, k->c->peer, (long long)(time_mono_ms() - t0), outcome);
}

void forward_envd(forward_conn_t *c)
{
    forward_t *f = c->f;
    int64_t t0 = time_mono_ms();
    forward_reqline_t *l = malloc(sizeof *l);
    envd_call_t *k = calloc(1, sizeof *k);
    char why[200];
    api_error_t err;
    const char *call = "-";
    if (!l || !k) {
        forward_refuse(c, 503, "busy", "out of memory");
        goto cleanup;
    }
    k->c = c;
    int lr = forward_granted_line(c, l);
    if (lr < 0) {
        if (lr == SBX_EPERM)
            envd_done(k, call, "refused", t0);
        goto cleanup;
    }
    if (envd_request_parse(l->buf, l->len, &k->q, why, sizeof why) < 0) {
        forward_refuse(c, 400, "invalid_argument", "%s", why);
        envd_done(k, call, "refused", t0);
        goto cleanup;
    }
    const envd_route_t *row = NULL;
    bool path_known = false;
    for (size_t i = 0; i < sizeof envd_routes / sizeof *envd_routes; i++) {
        if (strcmp(envd_routes[i].path, k->q.path) != 0)
            continue;
        path_known = true;
        call = envd_routes[i].path;
        if (strcmp(envd_routes[i].method, k->q.method) == 0)
            row = &envd_routes[i];
    }
    if (runtime_files_target(f->rt, c->sandbox_id, f->worker_name, k->ref, &k->fs_bytes, &err) < 0) {
        forward_refuse_runtime(c, &err);
        envd_done(k, call, "refused", t0);
        goto cleanup;
    }
    const char *tmo = envd_req_header(&k->q, "connect-timeout-ms");
    if (tmo) {
        char *end = NULL;
        errno = 0;
        long long ms = strtoll(tmo, &end, 10);
        if (errno == 0 && end != tmo && !*end && ms > 0 && ms <= 10LL * 365 * 24 * 3600 * 1000)
            k->deadline_ms = time_mono_ms() + ms;
    }
    if (!row || (row->kind == ENVD_HTTP && strcmp(row->method, "POST") != 0)) {
        /* Calls without a body, and calls that are not served (whatever
         * their body): the END frame is read before the answer. */
        sbuf_t body;
        int r = envd_body_all(k, ENVD_EMPTY_BODY_MAX, &body);
        sbuf_release(&body);
        if (r == SBX_EINVAL) {
            forward_refuse(c, 400, "invalid_argument", "%s", k->why);
        } else if (r < 0 && r != SBX_ETOOBIG) {
            if (forward_stopping(f))
                forward_refuse(c, 503, "busy", "the worker is shutting down");
        } else if (!row && path_known) {
            envd_http_error(k, 405, "%s does not take %s", k->q.path, k->q.method);
        } else if (!row) {
            envd_http_error(k, 404, "envd has no %s", k->q.path);
        } else if (r == SBX_ETOOBIG) {
            envd_http_error(k, 400, "%s %s takes no body: send it without one", k->q.method, k->q.path);
        } else {
            row->handler(k, NULL);
        }
        if (r == SBX_ETOOBIG)
            forward_linger(c);    /* the rest of the body, so the close does not reset the answer */
    } else if (row->kind == ENVD_HTTP) {
        row->handler(k, NULL);
    } else {
        envd_rpc(k, row);
    }
    envd_done(k, call, k->gone || !k->answered ? "aborted" : "answered", t0);
cleanup:
    if (k)
        envd_req_release(&k->q);
    free(k);
    free(l);
}
