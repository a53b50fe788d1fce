/* API calls, their errors and waits on operations, for the CLI and sandbox-mcp
 * (client.h). */
#include "client.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "errors.h"
#include "jsonx.h"
#include "opstate.h"
#include "timeutil.h"

#define CLIENT_IDEM_HEADER_MAX 300   /* "Idempotency-Key: " and a key the server may refuse */
#define CLIENT_SLEEP_STEP_MS   100   /* how soon a sleep notices a cancel */

static bool is_cancelled(const client_t *cl)
{
    return cl && cl->cancelled && cl->cancelled(cl->cancel_ud);
}

static int set_cancelled(client_error_t *e)
{
    memset(e, 0, sizeof *e);
    e->kind = CLIENT_E_CANCELLED;
    snprintf(e->code, sizeof e->code, "cancelled");
    snprintf(e->message, sizeof e->message, "the client cancelled the call");
    return SBX_ECANCELLED;
}

void client_error_decode(const client_t *cl, const char *method, const char *path, int r,
                         const httpc_response_t *resp, client_error_t *ret)
{
    memset(ret, 0, sizeof *ret);
    long st = resp->status;
    ret->status = st;
    ret->retryable = r < 0 || st == 0 || st == 502 || st == 503 || st == 504;
    bool ok = st >= 200 && st < 300;
    if (st == 0)
        ret->kind = CLIENT_E_UNREACHABLE;
    else if (ok)
        ret->kind = CLIENT_E_BAD_RESPONSE;
    else
        ret->kind = jsonx_get_obj(resp->json, "error") ? CLIENT_E_API : CLIENT_E_HTTP;
    if (r < 0 || st == 0) {
        snprintf(ret->detail, sizeof ret->detail, "%s", resp->error);
        snprintf(ret->code, sizeof ret->code, "unavailable");
        snprintf(ret->message, sizeof ret->message, "cannot reach the controller at %s: %s",
                 cl && cl->url ? cl->url : "?", resp->error[0] ? resp->error : sbx_strerror(r));
    } else if (ok) {
        snprintf(ret->code, sizeof ret->code, "bad_response");
        snprintf(ret->message, sizeof ret->message, "%s %s answered %ld without a JSON object", method, path, st);
    } else {
        const char *code = NULL, *msg = NULL;
        httpc_api_error(resp, &code, &msg);
        snprintf(ret->code, sizeof ret->code, "%s", code ? code : "error");
        snprintf(ret->message, sizeof ret->message, "%s", msg ? msg : "");
        /* A rate limit passes (quota_exceeded, also a 429, does not). */
        if (st == 429 && code && strcmp(code, "rate_limited") == 0)
            ret->retryable = true;
    }
}

/* The timeout of one attempt: the request's, cut to what its retry
 * deadline leaves (at least a second). */
static long attempt_timeout(const client_req_t *req)
{
    long base = req->timeout_ms > 0 ? req->timeout_ms : CLIENT_REQUEST_TIMEOUT_MS;
    if (req->retry_until_ms <= 0)
        return base;
    int64_t left = req->retry_until_ms - time_mono_ms();
    return left > base ? base : (left < 1000 ? 1000 : (long)left);
}

int client_call(client_t *cl, const client_req_t *req, json_object **ret, client_error_t *ret_err)
{
    char hdr[CLIENT_IDEM_HEADER_MAX];
    const char *headers[2] = { NULL, NULL };
    if (req->idem_key) {
        snprintf(hdr, sizeof hdr, "Idempotency-Key: %s", req->idem_key);
        headers[0] = hdr;
    }
    bool may_retry = req->retry_until_ms > 0 && strcmp(req->method, "GET") == 0;
    *ret = NULL;
    for (;;) {
        if (is_cancelled(cl))
            return set_cancelled(ret_err);
        httpc_response_t resp;
        int r = httpc_request(cl->http, req->method, req->path, req->body, headers, attempt_timeout(req), &resp);
        if (is_cancelled(cl)) {
            httpc_response_release(&resp);
            return set_cancelled(ret_err);
        }
        if (r == 0 && resp.status >= 200 && resp.status < 300 && resp.json &&
            json_object_is_type(resp.json, json_type_object)) {
            *ret = json_object_get(resp.json);
            httpc_response_release(&resp);
            return 0;
        }
        client_error_decode(cl, req->method, req->path, r, &resp, ret_err);
        httpc_response_release(&resp);
        /* rate_limited: the server's Retry-After is a whole second at least. */
        int64_t pause = ret_err->status == 429 ? CLIENT_RATE_LIMITED_RETRY_MS : CLIENT_RETRY_MS;
        if (!may_retry || !ret_err->retryable || time_mono_ms() + pause >= req->retry_until_ms)
            return SBX_EIO;
        if (client_sleep_ms(cl, pause))
            return set_cancelled(ret_err);
    }
}

int client_path(char *buf, size_t n, const char *prefix, const char *id, const char *suffix)
{
    char *e = httpc_escape(id);
    if (!e)
        return SBX_ENOMEM;
    int w = snprintf(buf, n, "%s%s%s", prefix, e, suffix ? suffix : "");
    free(e);
    return w < 0 || (size_t)w >= n ? SBX_ETOOBIG : 0;
}

int client_labels_query(json_object *labels, const char *lead, char *buf, size_t n, size_t *len)
{
    size_t at = *len;
    int w = snprintf(buf + at, at < n ? n - at : 0, "%slabel=", lead);
    const char *comma = "";
    json_object_object_foreach(labels, k, v) {
        if (w < 0 || at + (size_t)w >= n)
            break;
        at += (size_t)w;
        char *ek = httpc_escape(k), *ev = httpc_escape(json_object_is_type(v, json_type_string)
                                                          ? json_object_get_string(v) : "");
        w = ek && ev ? snprintf(buf + at, n - at, "%s%s%%3D%s", comma, ek, ev) : -1;
        free(ek);
        free(ev);
        if (w < 0)
            return SBX_ENOMEM;
        comma = "%2C";
    }
    if (w < 0 || at + (size_t)w >= n) {
        if (*len < n)
            buf[*len] = '\0';
        return SBX_ETOOBIG;
    }
    *len = at + (size_t)w;
    return 0;
}

bool client_sleep_ms(client_t *cl, int64_t ms)
{
    int64_t end = time_mono_ms() + ms;
    bool watch = cl && cl->cancelled;
    for (;;) {
        if (is_cancelled(cl))
            return true;
        int64_t left = end - time_mono_ms();
        if (left <= 0)
            return false;
        int64_t step = watch && left > CLIENT_SLEEP_STEP_MS ? CLIENT_SLEEP_STEP_MS : left;
        struct timespec ts = { .tv_sec = (time_t)(step / 1000), .tv_nsec = (long)(step % 1000) * 1000000L };
        nanosleep(&ts, NULL); /* EINTR: the loop sleeps what is left */
    }
}

int64_t client_backoff_next(int64_t backoff_ms)
{
    return backoff_ms * 2 > CLIENT_BACKOFF_MAX_MS ? CLIENT_BACKOFF_MAX_MS : backoff_ms * 2;
}

void client_wait_result_release(client_wait_result_t *r)
{
    if (!r)
        return;
    json_object_put(r->last);
    r->last = NULL;
    r->op = NULL;
}

/* Takes a poll's answer into *ret. Returns 0, or SBX_EIO (*ret_err) when it
 * names no operation state. */
static int wait_take(const char *path, json_object *resp, client_wait_result_t *ret, client_error_t *ret_err)
{
    json_object *op = jsonx_get_obj(resp, "operation");
    const char *state = jsonx_get_str(op, "state");
    if (!state) {
        memset(ret_err, 0, sizeof *ret_err);
        ret_err->kind = CLIENT_E_MALFORMED;
        ret_err->status = 200;
        snprintf(ret_err->code, sizeof ret_err->code, "bad_response");
        snprintf(ret_err->message, sizeof ret_err->message, "%.400s answered without operation.state", path);
        json_object_put(resp);
        return SBX_EIO;
    }
    json_object_put(ret->last);
    ret->last = resp;
    ret->op = op;
    op_state_t st;
    ret->done = op_state_parse(state, &st) == 0 && op_state_terminal(st);
    ret->succeeded = ret->done && st == OP_SUCCEEDED;
    return 0;
}

int client_wait_op(client_t *cl, const char *op_id, const client_wait_t *w, client_wait_result_t *ret,
                   client_error_t *ret_err)
{
    memset(ret, 0, sizeof *ret);
    char base[CLIENT_PATH_MAX];
    if (client_path(base, sizeof base, "/v1/operations/", op_id, NULL) != 0)
        return SBX_ETOOBIG;
    int64_t start = time_mono_ms(), deadline = start + w->timeout_s * 1000;
    int64_t backoff = CLIENT_BACKOFF_START_MS;
    for (bool first = true;; first = false) {
        int64_t now = time_mono_ms(), rem = deadline - now;
        if (!first && rem <= 0 && (!ret->failing || now >= deadline + w->outage_grace_ms))
            return 0;
        int64_t pw = rem > 0 ? rem / 1000 : 0;
        if (pw > w->poll_wait_s)
            pw = w->poll_wait_s;
        char path[CLIENT_PATH_MAX + 32];
        snprintf(path, sizeof path, "%s?wait=%lld", base, (long long)pw);
        client_req_t req = { .method = "GET", .path = path, .timeout_ms = (long)(pw + CLIENT_POLL_SLACK_S) * 1000L };
        json_object *resp = NULL;
        int64_t t0 = time_mono_ms();
        int r = client_call(cl, &req, &resp, ret_err);
        if (r < 0 && (r == SBX_ECANCELLED || !ret_err->retryable))
            return r;
        if (r < 0) {
            /* No usable answer: retry with backoff until the deadline. */
            ret->last_error = *ret_err;
            if (!ret->failing && w->on_outage)
                w->on_outage(w->ud, ret_err);
            ret->failing = true;
            int64_t left = deadline + w->outage_grace_ms - time_mono_ms();
            if (client_sleep_ms(cl, backoff < left ? backoff : left))
                return set_cancelled(ret_err);
            backoff = client_backoff_next(backoff);
            continue;
        }
        if ((r = wait_take(path, resp, ret, ret_err)) < 0)
            return r;
        if (ret->failing && w->on_outage)
            w->on_outage(w->ud, NULL);
        ret->failing = false;
        backoff = CLIENT_BACKOFF_START_MS;
        if (ret->done)
            return 0;
        if (w->on_progress)
            w->on_progress(w->ud, ret->op, time_mono_ms() - start);
        int64_t took = time_mono_ms() - t0;
        if (took < CLIENT_POLL_MIN_MS) {
            int64_t s = CLIENT_POLL_MIN_MS - took, left = deadline - time_mono_ms();
            if (client_sleep_ms(cl, s < left ? s : left))
                return set_cancelled(ret_err);
        }
    }
}

int client_logs_line_decode(const char *line, size_t len, client_logs_line_t *ret)
{
    memset(ret, 0, sizeof *ret);
    json_object *o = NULL, *data = NULL;
    if (jsonx_parse(line, len, &o, NULL) < 0 || !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        return SBX_EINVAL;
    }
    ret->obj = o;
    const char *stream = jsonx_get_str(o, "stream");
    json_object *err = jsonx_get_obj(o, "error");
    jsonx_get_bool(o, "truncated", &ret->truncated);
    jsonx_get_int(o, "limit_bytes", &ret->limit_bytes);
    if (stream && json_object_object_get_ex(o, "data", &data) && json_object_is_type(data, json_type_string)) {
        ret->stream = stream;
        ret->data = json_object_get_string(data);
        ret->len = (size_t)json_object_get_string_len(data);
    } else if (err) {
        const char *code = jsonx_get_str(err, "code"), *msg = jsonx_get_str(err, "message");
        ret->is_error = true;
        ret->code = code ? code : "error";
        ret->message = msg ? msg : "the log stream failed";
    }
    return 0;
}

void client_logs_line_release(client_logs_line_t *l)
{
    if (!l)
        return;
    json_object_put(l->obj);
    l->obj = NULL;
}
