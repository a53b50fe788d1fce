/* The forwarder's file transfers: a files grant's request line (checked
 * against the grant's digest, parsed strictly), then an upload's frames
 * pulled into the runtime as it takes them, or a download's stat line and
 * frames (forward.h; the protocol: docs/worker.md "File transfers").
 *
 * Both directions of a tar transfer pass a tar gate (common/tarstream.h),
 * whatever the runtime: an upload's members are judged before a byte of
 * them reaches the runtime (sparse members refused: the runtime would
 * write their holes out in full); a download's before a byte of them
 * leaves the worker (only the asked path's own tree, no sparse member,
 * only files, directories, symlinks and hard links within the tree, no
 * more content than the sandbox's filesystem can hold), since a sandbox's
 * runtime may answer with an archive of the guest's own making. */
#include "forward.h"
#include "forward_internal.h"
#include "errors.h"
#include "jsonx.h"
#include "log.h"
#include "logframe.h"
#include "metrics.h"
#include "tarstream.h"
#include "timeutil.h"
#include "utf8.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

/* The answer line of a get: the stat JSON, a name and a link target at most. */
#define FILES_STAT_LINE_MAX   (2 * SBX_FILES_PATH_MAX + 1024)
/* An END frame's message is cut to this. */
#define FILES_END_MESSAGE_MAX 512
/* A member name quoted in an error message, at most (bytes). */
#define FILES_NAME_QUOTE_MAX  200

/* ---- pure parts -------------------------------------------------------- */

void forward_reqline_init(forward_reqline_t *l)
{
    l->len = 0;
    l->buf[0] = '\0';
}

int forward_reqline_push(forward_reqline_t *l, const char *data, size_t n, size_t *ret_used)
{
    return forward_line_push_buf(l->buf, sizeof l->buf, &l->len, data, n, ret_used);
}

static int files_bad(char *err, size_t errlen, const char *msg)
{
    snprintf(err, errlen, "%s", msg);
    return SBX_EINVAL;
}

/* An integer member (a JSON integer, not a float or a string). */
static bool files_int(json_object *v, int64_t *ret)
{
    if (!json_object_is_type(v, json_type_int))
        return false;
    errno = 0;
    *ret = json_object_get_int64(v);
    return errno == 0;
}

int forward_files_request_parse(const char *line, size_t len, forward_files_req_t *ret, char *err, size_t errlen)
{
    api_error_t je;
    json_object *o = NULL;
    int r = 0;
    memset(ret, 0, sizeof *ret);
    ret->size = -1;
    ret->mode = 0644;
    if (jsonx_parse(line, len, &o, &je) < 0 || !json_object_is_type(o, json_type_object)) {
        r = files_bad(err, errlen, "the request line must be one JSON object");
        goto cleanup;
    }
    const char *op = jsonx_get_str(o, "op"), *path = jsonx_get_str(o, "path"), *fmt = jsonx_get_str(o, "format");
    if (!op || (strcmp(op, "put") != 0 && strcmp(op, "get") != 0)) {
        r = files_bad(err, errlen, "the request's op must be \"put\" or \"get\"");
        goto cleanup;
    }
    ret->put = strcmp(op, "put") == 0;
    if (!fmt || (strcmp(fmt, "tar") != 0 && strcmp(fmt, "raw") != 0 && (ret->put || strcmp(fmt, "list") != 0))) {
        r = files_bad(err, errlen, ret->put ? "the request's format must be \"tar\" or \"raw\""
                                            : "the request's format must be \"tar\", \"raw\" or \"list\"");
        goto cleanup;
    }
    ret->format = strcmp(fmt, "tar") == 0 ? RUNTIME_FILES_TAR : strcmp(fmt, "raw") == 0 ? RUNTIME_FILES_RAW
                                                                                         : RUNTIME_FILES_LIST;
    size_t pl = path ? strlen(path) : 0;
    if (!path || pl == 0 || path[0] != '/' || pl > SBX_FILES_PATH_MAX ||
        pl != (size_t)json_object_get_string_len(json_object_object_get(o, "path"))) {
        r = files_bad(err, errlen, "the request's path must be absolute, without NUL, at most 4096 bytes");
        goto cleanup;
    }
    memcpy(ret->path, path, pl + 1);
    bool raw_put = ret->put && ret->format == RUNTIME_FILES_RAW;
    json_object_object_foreach(o, key, val) {
        int64_t v = 0;
        if (strcmp(key, "op") == 0 || strcmp(key, "path") == 0 || strcmp(key, "format") == 0)
            continue;
        if (strcmp(key, "size") == 0 && raw_put) {
            if (!files_int(val, &v) || v < 0) {
                r = files_bad(err, errlen, "the request's size must be a byte count");
                goto cleanup;
            }
            ret->size = v;
        } else if (strcmp(key, "mode") == 0 && raw_put) {
            if (!files_int(val, &v) || v < 0 || v > 07777) {
                r = files_bad(err, errlen, "the request's mode must be permission bits from 0 to 4095 (07777)");
                goto cleanup;
            }
            ret->mode = (unsigned)v;
        } else if (strcmp(key, "parents") == 0 && raw_put) {
            if (!json_object_is_type(val, json_type_boolean)) {
                r = files_bad(err, errlen, "the request's parents must be true or false");
                goto cleanup;
            }
            ret->parents = json_object_get_boolean(val);
        } else if (strcmp(key, "max_bytes") == 0 && ret->put) {
            if (!files_int(val, &v) || v < 1) {
                r = files_bad(err, errlen, "the request's max_bytes must be a positive byte count");
                goto cleanup;
            }
            ret->max_bytes = v;
        } else {
            char msg[160];
            snprintf(msg, sizeof msg, "the request has a key \"%.40s\" a %s %s request does not take", key, fmt, op);
            r = files_bad(err, errlen, msg);
            goto cleanup;
        }
    }
    if (raw_put && ret->size < 0)
        r = files_bad(err, errlen, "a raw upload's request must say its size");
    else if (ret->put && ret->max_bytes < 1)
        r = files_bad(err, errlen, "an upload's request must say its max_bytes");
cleanup:
    if (o)
        json_object_put(o);
    return r;
}

/* ---- metrics and the log ----------------------------------------------- */

/* sandbox_worker_file_transfers_total{op,outcome} and
 * sandbox_worker_file_bytes_total{op}. */
static pthread_once_t files_metrics_once = PTHREAD_ONCE_INIT;
static metric_family_t *files_m_transfers, *files_m_bytes;

static void files_metrics_init(void)
{
    files_m_transfers = metrics_family("sandbox_worker_file_transfers_total", METRIC_COUNTER,
                                       "File transfers the worker served, by op (put, get) and outcome: ok, "
                                       "aborted (the controller's side ended first), refused (a 4xx answer), "
                                       "error (the runtime failed, or the worker stopped).",
                                       NULL, 0);
    files_m_bytes = metrics_family("sandbox_worker_file_bytes_total", METRIC_COUNTER,
                                   "Bytes of file transfers the worker moved, by op (put: upload bytes taken, "
                                   "get: body bytes sent).", NULL, 0);
}

static void files_done(const forward_conn_t *c, const char *op, const char *path, const char *outcome,
                       uint64_t bytes, int64_t t0, const char *why)
{
    char labels[96];
    pthread_once(&files_metrics_once, files_metrics_init);
    metrics_add(files_m_transfers, metrics_labels(labels, sizeof labels, "op", op, "outcome", outcome, NULL), 1);
    metrics_add(files_m_bytes, metrics_labels(labels, sizeof labels, "op", op, NULL), (double)bytes);
    log_debug(FORWARD_COMPONENT, "file %s for sandbox %s from %s: %.200s, %llu bytes, %lld ms, %s: %s", op,
              c->sandbox_id, c->peer, path, (unsigned long long)bytes, (long long)(time_mono_ms() - t0), outcome,
              why);
}

const char *forward_refuse_runtime(forward_conn_t *c, const api_error_t *err)
{
    switch (err->code) {
    case API_INVALID_ARGUMENT:
    case API_INVALID_JSON:
        forward_refuse(c, 400, "invalid_argument", "%s", err->message);
        return "refused";
    case API_NOT_FOUND:
        forward_refuse(c, 404, "not_found", "%s", err->message);
        return "refused";
    case API_PAYLOAD_TOO_LARGE:
        forward_refuse(c, 413, "payload_too_large", "%s", err->message);
        return "refused";
    case API_CONFLICT:
        forward_refuse(c, 409, "conflict", "%s", err->message);
        return "refused";
    case API_CANCELLED:
        forward_refuse(c, 503, "busy", "the worker is shutting down");
        return "error";
    default:
        forward_refuse(c, 502, "upstream_unavailable", "%s", err->message);
        return "error";
    }
}

/* ---- the request line -------------------------------------------------- */

int forward_read_reqline(forward_conn_t *c, forward_reqline_t *l)
{
    int64_t deadline = time_deadline_ms(FORWARD_PREAMBLE_TIMEOUT_MS);
    size_t have = c->up_len;
    c->up_len = 0;
    for (;;) {
        if (have > 0) {
            size_t used = 0;
            int r = forward_reqline_push(l, c->up, have, &used);
            if (r == 1) {
                c->up_len = have - used;
                memmove(c->up, c->up + used, c->up_len);
                return 0;
            }
            if (r == SBX_ETOOBIG) {
                forward_refuse(c, 400, "invalid_argument", "the request line is longer than %d bytes",
                               SBX_FILES_REQUEST_MAX);
                return r;
            }
            if (r < 0) {
                forward_refuse(c, 400, "invalid_argument", "the request line must be JSON ending in CRLF");
                return r;
            }
            have = 0;
        }
        int left = time_left_ms(deadline);
        int w = forward_client_pending(c) ? POLLIN : left > 0 ? forward_wait(c->f, c->client, POLLIN, left) : 0;
        if (w < 0) {
            forward_refuse(c, 503, "busy", "the worker is shutting down");
            return SBX_EUNAVAIL;
        }
        if (w == 0) {
            forward_refuse(c, 400, "invalid_argument", "no request line within %d s",
                           FORWARD_PREAMBLE_TIMEOUT_MS / 1000);
            return SBX_ETIMEOUT;
        }
        ssize_t n = forward_client_recv(c, c->up, FORWARD_BUFFER_BYTES);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n <= 0)
            return SBX_EIO;       /* gone before its request: nothing to answer */
        have = (size_t)n;
    }
}

int forward_granted_line(forward_conn_t *c, forward_reqline_t *l)
{
    char digest[GRANT_FILES_DIGEST_HEX];
    forward_reqline_init(l);
    int r = forward_read_reqline(c, l);
    if (r < 0)
        return r;
    grant_files_digest(l->buf, l->len, digest);
    if (sodium_memcmp(digest, c->grant.files_digest, GRANT_FILES_DIGEST_HEX - 1) != 0) {
        forward_refuse(c, 403, "forbidden", "the request does not match its grant");
        return SBX_EPERM;
    }
    return 0;
}

/* ---- put --------------------------------------------------------------- */

/* A member name for a message: control bytes as '?', cut to
 * FILES_NAME_QUOTE_MAX bytes (then "..."). */
static void files_quote(const char *name, char *out, size_t outlen)
{
    size_t n = 0, i = 0;
    for (; name[i] && i < FILES_NAME_QUOTE_MAX && n + 4 < outlen; i++)
        out[n++] = (unsigned char)name[i] < 0x20 || name[i] == 0x7f ? '?' : name[i];
    if (name[i] && n + 4 < outlen) {
        while (n > 0 && ((unsigned char)out[n - 1] & 0xC0) == 0x80)
            n--;                  /* not inside a UTF-8 sequence */
        if (n > 0 && (unsigned char)out[n - 1] >= 0xC0)
            n--;
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
}

/* The upload's frames as the runtime pulls them. */
typedef struct files_up {
    forward_conn_t *c;
    size_t off;              /* pending bytes: c->up[off, c->up_len) */
    unsigned char hdr[LOGFRAME_HEADER_BYTES];
    size_t hdr_len;
    uint32_t payload_left;
    uint64_t bytes;          /* data bytes taken from the frames */
    bool ended;              /* the END frame came */
    bool aborted;            /* the controller's side ended (or stalled) before it */
    bool stopping;           /* the worker stops */
    int status;              /* the reader's own refusal: 400 ...; 0 none */
    char why[600];
    tarstream_gate_t *gate;  /* a tar upload: members judged before they are handed on */
    bool gate_done;          /* the gate saw the end and let the rest go */
} files_up_t;

/* Makes sure bytes are pending. false when the connection ended, failed,
 * stalled or the worker stops (u says which). */
static bool files_up_fill(files_up_t *u)
{
    forward_conn_t *c = u->c;
    if (u->off < c->up_len)
        return true;
    u->off = c->up_len = 0;
    for (;;) {
        int w = forward_client_pending(c) ? POLLIN : forward_wait(c->f, c->client, POLLIN, FORWARD_IDLE_TIMEOUT_MS);
        if (w < 0) {
            u->stopping = true;
            return false;
        }
        if (w == 0) {
            u->aborted = true;
            snprintf(u->why, sizeof u->why, "no upload bytes for %d s", FORWARD_IDLE_TIMEOUT_MS / 1000);
            return false;
        }
        ssize_t n = forward_client_recv(c, c->up, FORWARD_BUFFER_BYTES);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n <= 0) {
            u->aborted = true;
            snprintf(u->why, sizeof u->why, "the connection ended before the upload's END frame");
            return false;
        }
        c->up_len = (size_t)n;
        return true;
    }
}

static ptrdiff_t files_up_refuse(files_up_t *u, const char *why)
{
    u->status = 400;
    if (why != u->why)
        snprintf(u->why, sizeof u->why, "%s", why);
    return RUNTIME_FILES_REFUSED;
}

/* The frames' payload, as it comes. */
static ptrdiff_t files_up_frames(files_up_t *u, char *buf, size_t cap)
{
    forward_conn_t *c = u->c;
    if (u->ended)
        return 0;
    if (u->status || u->aborted || u->stopping)
        return u->status ? RUNTIME_FILES_REFUSED : RUNTIME_FILES_ABORTED;
    for (;;) {
        if (u->payload_left > 0) {
            if (!files_up_fill(u))
                return RUNTIME_FILES_ABORTED;
            size_t k = c->up_len - u->off;
            if (k > u->payload_left)
                k = u->payload_left;
            if (k > cap)
                k = cap;
            memcpy(buf, c->up + u->off, k);
            u->off += k;
            u->payload_left -= (uint32_t)k;
            u->bytes += k;
            return (ptrdiff_t)k;
        }
        while (u->hdr_len < LOGFRAME_HEADER_BYTES) {
            if (!files_up_fill(u))
                return RUNTIME_FILES_ABORTED;
            size_t k = LOGFRAME_HEADER_BYTES - u->hdr_len;
            if (k > c->up_len - u->off)
                k = c->up_len - u->off;
            memcpy(u->hdr + u->hdr_len, c->up + u->off, k);
            u->hdr_len += k;
            u->off += k;
        }
        u->hdr_len = 0;
        uint32_t len = (uint32_t)u->hdr[1] << 24 | (uint32_t)u->hdr[2] << 16 | (uint32_t)u->hdr[3] << 8 | u->hdr[4];
        if (u->hdr[0] == LOGFRAME_END) {
            if (len != 0)
                return files_up_refuse(u, "an upload's END frame carries nothing");
            u->ended = true;
            return 0;
        }
        if (u->hdr[0] != LOGFRAME_STDOUT)
            return files_up_refuse(u, "an upload is data frames (type 1) and one END frame (type 3)");
        if (len > LOGFRAME_PAYLOAD_MAX)
            return files_up_refuse(u, "an upload's frame is larger than 65536 bytes");
        u->payload_left = len;
    }
}

/* The gate's judge of an upload's members: sparse ones are refused (the
 * runtime would write their holes out in full, past what the quota counted
 * as the bytes streamed). */
static int files_up_judge(void *ud, const tarstream_entry_t *e)
{
    files_up_t *u = ud;
    if (!e->sparse)
        return 0;
    char q[FILES_NAME_QUOTE_MAX + 8];
    files_quote(e->name, q, sizeof q);
    snprintf(u->why, sizeof u->why, "member %s is a sparse file (%s, %lld bytes once unpacked): sparse members are "
             "refused, their holes would be written out in full; pack it without --sparse", q, e->sparse_kind,
             (long long)e->realsize);
    u->status = 400;
    return SBX_EINVAL;
}

/* runtime_files_read_fn: the frames' payload; a tar upload through the
 * gate, so a member reaches the runtime only once it was judged. */
static ptrdiff_t files_up_read(void *ud, char *buf, size_t cap)
{
    files_up_t *u = ud;
    if (!u->gate)
        return files_up_frames(u, buf, cap);
    for (;;) {
        size_t n = 0;
        const char *p = tarstream_gate_ready(u->gate, &n);
        if (n > 0) {
            size_t k = n < cap ? n : cap;
            memcpy(buf, p, k);
            tarstream_gate_consume(u->gate, k);
            return (ptrdiff_t)k;
        }
        if (u->gate_done)
            return files_up_frames(u, buf, cap) < 0 ? RUNTIME_FILES_ABORTED : 0;
        size_t room = tarstream_gate_room(u->gate);
        ptrdiff_t got = files_up_frames(u, buf, cap < room ? cap : room);
        if (got < 0)
            return got;
        int r = got > 0 ? tarstream_gate_push(u->gate, buf, (size_t)got) : tarstream_gate_finish(u->gate);
        if (r < 0) {
            if (u->status)
                return RUNTIME_FILES_REFUSED;   /* the judge said why */
            char why[300];
            snprintf(why, sizeof why, "the upload is not a tar stream the worker passes on: %s", u->gate->tar.error);
            return files_up_refuse(u, why);
        }
        u->gate_done = got == 0;
    }
}

static void files_put(forward_conn_t *c, const forward_files_req_t *q, const char *ref, int64_t t0)
{
    forward_t *f = c->f;
    files_up_t u = { .c = c };
    tarstream_gate_t gate;
    api_error_t err;
    int stop_fds[1] = { f->stop_pipe[0] };
    if (q->format == RUNTIME_FILES_TAR) {
        if (tarstream_gate_init(&gate, files_up_judge, &u) < 0) {
            forward_refuse(c, 503, "busy", "out of memory");
            files_done(c, "put", q->path, "error", 0, t0, "out of memory");
            return;
        }
        u.gate = &gate;
    }
    runtime_files_put_req_t req = {
        .ref = ref, .path = q->path, .format = q->format, .size = q->size, .mode = q->mode, .parents = q->parents,
        .max_bytes = q->max_bytes, .read = files_up_read, .ud = &u, .stop_fds = stop_fds, .nstop_fds = 1,
    };
    int64_t bytes = 0;
    int r = runtime_files_put(f->rt, &req, &bytes, &err);
    if (r == 0 && !u.ended) {
        /* The runtime had all it needed before the END frame: the rest
         * must still come, and be nothing but frames. */
        char sink[4096];
        ptrdiff_t k;
        while ((k = files_up_read(&u, sink, sizeof sink)) > 0 && (int64_t)u.bytes <= q->max_bytes)
            ;
        if ((int64_t)u.bytes > q->max_bytes) {
            r = api_error_set(&err, API_PAYLOAD_TOO_LARGE, "the upload is larger than the %lld bytes a transfer "
                              "may carry", (long long)q->max_bytes);
        } else if (k < 0) {
            r = SBX_EIO;
        }
    }
    const char *outcome = "ok";
    if (u.status) {
        forward_refuse(c, u.status, "invalid_argument", "%s", u.why);
        outcome = "refused";
    } else if (u.aborted) {
        outcome = "aborted";      /* nobody to answer */
    } else if (u.stopping || (r < 0 && forward_stopping(f))) {
        forward_refuse(c, 503, "busy", "the worker is shutting down");
        outcome = "error";
        snprintf(u.why, sizeof u.why, "the worker is shutting down");
    } else if (r < 0) {
        outcome = forward_refuse_runtime(c, &err);
        snprintf(u.why, sizeof u.why, "%s", err.message);
    } else {
        char msg[48], line[128];
        /* the upload's bytes: a tar's padding past its end blocks is not handed on, but it came */
        snprintf(msg, sizeof msg, "{\"bytes\":%lld}", u.gate ? (long long)u.bytes : (long long)bytes);
        size_t n = forward_reply_format(line, sizeof line, 200, "ok", msg);
        if (forward_send_all(c, line, n) == 0)
            forward_client_shutdown(c);
        snprintf(u.why, sizeof u.why, "unpacked");
    }
    files_done(c, "put", q->path, outcome, u.bytes, t0, u.why);
    if (u.gate)
        tarstream_gate_release(u.gate);
}

/* ---- get --------------------------------------------------------------- */

typedef struct files_down {
    forward_conn_t *c;
    bool answered;           /* the 200 line went out */
    bool gone;               /* the controller went away (or stalled) */
    uint64_t bytes;          /* body bytes sent */
    int64_t max_bytes;       /* the body's bound (files_max_bytes) */
    int64_t fs_bytes;        /* the sandbox's filesystem size: content bound (0 none) */
    runtime_files_format_t format;
    tarstream_gate_t *gate;  /* a tar download: members judged before they leave */
    const char *top;         /* the archive's top name: the path's last component ("" for /) */
    int64_t content;         /* content bytes the members declared so far */
    int status;              /* refused before the 200 line: 413 ...; 0 none */
    char cut[FILES_END_MESSAGE_MAX + 1];   /* why the body was cut ("" none) */
} files_down_t;

/* The body is cut with why (the END frame's message). */
static int files_down_cut(files_down_t *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int files_down_cut(files_down_t *d, const char *fmt, ...)
{
    if (!d->cut[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(d->cut, sizeof d->cut, fmt, ap);
        va_end(ap);
    }
    return SBX_EIO;
}

/* The smaller of the bounds that apply to n content bytes: a message part. */
static void files_down_bound(const files_down_t *d, int64_t n, char *out, size_t outlen)
{
    if (d->fs_bytes > 0 && n > d->fs_bytes)
        snprintf(out, outlen, "more than the sandbox's filesystem holds (%lld bytes)",
                 (long long)d->fs_bytes);
    else
        snprintf(out, outlen, "more than the %lld bytes a transfer may carry (files_max_bytes)",
                 (long long)d->max_bytes);
}

/* runtime_files_stat_fn: the 200 line with the stat; a regular file the
 * stat says is over a bound is refused 413 before it. */
static int files_down_stat(void *ud, const runtime_files_stat_t *st)
{
    files_down_t *d = ud;
    if (d->format != RUNTIME_FILES_LIST && strcmp(st->type, "file") == 0 &&
        (st->size > d->max_bytes || (d->fs_bytes > 0 && st->size > d->fs_bytes))) {
        char bound[160];
        files_down_bound(d, st->size, bound, sizeof bound);
        d->status = 413;
        snprintf(d->cut, sizeof d->cut, "the file is %lld bytes, %s", (long long)st->size, bound);
        return SBX_ETOOBIG;
    }
    json_object *o = json_object_new_object();
    char *name = utf8_sanitize(st->name, strlen(st->name));
    char *link = utf8_sanitize(st->link_target, strlen(st->link_target));
    char *line = malloc(FILES_STAT_LINE_MAX);
    int r = SBX_EIO;
    if (o && name && link && line) {
        jsonx_add_str(o, "name", name);
        jsonx_add_int(o, "size", st->size);
        jsonx_add_int(o, "mode", st->mode);
        jsonx_add_str(o, "mtime", st->mtime);
        jsonx_add_str(o, "link_target", link);
        jsonx_add_str(o, "type", st->type);
        const char *js = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
        size_t n = forward_reply_format(line, FILES_STAT_LINE_MAX, 200, "ok", js);
        r = forward_send_all(d->c, line, n);
    }
    if (r < 0)
        d->gone = true;
    d->answered = true;
    json_object_put(o);
    free(name);
    free(link);
    free(line);
    return r;
}

/* n body bytes as data frames, within max_bytes. */
static int files_down_send(files_down_t *d, const char *data, size_t n)
{
    if (d->bytes + n > (uint64_t)d->max_bytes)
        return files_down_cut(d, "the download is larger than the %lld bytes a transfer may carry (files_max_bytes)",
                              (long long)d->max_bytes);
    if (d->fs_bytes > 0 && d->format == RUNTIME_FILES_RAW && d->bytes + n > (uint64_t)d->fs_bytes)
        return files_down_cut(d, "the file is larger than the sandbox's filesystem holds (%lld bytes)",
                              (long long)d->fs_bytes);
    if (forward_send_frames(d->c, LOGFRAME_STDOUT, data, n) < 0) {
        d->gone = true;
        return SBX_EIO;
    }
    d->bytes += n;
    return 0;
}

/* Why name is not top or below it, for a message. */
static const char *files_name_problem(const char *name, const char *top)
{
    if (*top && name[0] == '/')
        return "has an absolute name";
    for (const char *p = name; *p;) {
        size_t n = strcspn(p, "/");
        if ((n == 2 && p[0] == '.' && p[1] == '.') || (n == 1 && p[0] == '.'))
            return "has a '.' or '..' component";
        if (n == 0 && p != name)
            return "has an empty component ('//')";
        p += n + (p[n] == '/');
    }
    return *top ? "is not the copied path's own name or below it" : "is not a relative name";
}

/* The gate's judge of a download's members: only the asked path's own
 * tree, nothing sparse, no device or FIFO, hard links within the tree, and
 * no more content than the sandbox's filesystem holds. */
static int files_down_judge(void *ud, const tarstream_entry_t *e)
{
    files_down_t *d = ud;
    const char *rest = NULL;
    size_t rl = 0;
    char q[FILES_NAME_QUOTE_MAX + 8], ql[FILES_NAME_QUOTE_MAX + 8];
    files_quote(e->name, q, sizeof q);
    if (tarstream_name_under(e->name, d->top, &rest, &rl) < 0)
        return files_down_cut(d, "the archive is refused: member %s %s", q, files_name_problem(e->name, d->top));
    if (e->sparse)
        return files_down_cut(d, "the archive is refused: member %s is a sparse file (%s, %lld bytes once unpacked)",
                              q, e->sparse_kind, (long long)e->realsize);
    switch (e->type) {
    case '0': case '\0': case '7': case '5': case '2':
        break;
    case '1':
        if (tarstream_name_under(e->link, d->top, &rest, &rl) < 0) {
            files_quote(e->link, ql, sizeof ql);
            return files_down_cut(d, "the archive is refused: hard link %s points at %s, outside the copy", q, ql);
        }
        break;
    default:
        return files_down_cut(d, "the archive is refused: member %s is a %s (tar type '%c'); a download carries "
                              "regular files, directories, symlinks and hard links only", q,
                              e->type == '3' ? "character device" : e->type == '4' ? "block device"
                              : e->type == '6' ? "FIFO" : "special entry",
                              (unsigned char)e->type >= 0x20 && e->type != 0x7f ? e->type : '?');
    }
    d->content += e->size;
    if (d->fs_bytes > 0 && d->content > d->fs_bytes)
        return files_down_cut(d, "the download is larger than the sandbox's filesystem holds (%lld bytes): member %s "
                              "brings its content to %lld bytes", (long long)d->fs_bytes, q,
                              (long long)d->content);
    return 0;
}

/* runtime_files_write_fn: data frames; a tar body through the gate. */
static int files_down_data(void *ud, const char *data, size_t n)
{
    files_down_t *d = ud;
    if (!d->gate)
        return files_down_send(d, data, n);
    while (n > 0) {
        size_t room = tarstream_gate_room(d->gate), k = n < room ? n : room;
        int r = tarstream_gate_push(d->gate, data, k);
        data += k;
        n -= k;
        size_t ready = 0;
        const char *p = tarstream_gate_ready(d->gate, &ready);
        if (ready > 0) {
            /* What was judged before a refusal still goes: it is whole members. */
            if (files_down_send(d, p, ready) < 0)
                return SBX_EIO;
            tarstream_gate_consume(d->gate, ready);
        }
        if (r < 0)
            return files_down_cut(d, "the archive is refused: %s", d->gate->tar.error);
    }
    return 0;
}

static void files_get(forward_conn_t *c, const forward_files_req_t *q, const char *ref, int64_t fs_bytes,
                      int64_t t0)
{
    forward_t *f = c->f;
    const char *slash = strrchr(q->path, '/');
    /* "DIR/.": DIR's contents, named relative to it (as "/" is) */
    bool contents = slash && strcmp(slash, "/.") == 0;
    files_down_t d = { .c = c, .max_bytes = f->files_max_bytes, .fs_bytes = fs_bytes, .format = q->format,
                       .top = contents ? "" : slash ? slash + 1 : q->path };
    tarstream_gate_t gate;
    api_error_t err;
    if (q->format == RUNTIME_FILES_TAR) {
        if (tarstream_gate_init(&gate, files_down_judge, &d) < 0) {
            forward_refuse(c, 503, "busy", "out of memory");
            files_done(c, "get", q->path, "error", 0, t0, "out of memory");
            return;
        }
        d.gate = &gate;
    }
    int stop_fds[2] = { c->client, f->stop_pipe[0] };
    runtime_files_get_req_t req = {
        .ref = ref, .path = q->path, .format = q->format, .on_stat = files_down_stat, .on_data = files_down_data,
        .ud = &d, .stop_fds = stop_fds, .nstop_fds = 2,
    };
    int r = runtime_files_get(f->rt, &req, &err);
    if (r == 0 && d.gate && d.answered && !d.gone && !d.cut[0] && !forward_stopping(f)) {
        /* The runtime's stream ended: it must end between members. */
        if (tarstream_gate_finish(d.gate) < 0)
            files_down_cut(&d, "the archive is refused: %s", d.gate->tar.error);
    }
    const char *outcome = "ok", *why = "sent";
    if (!d.answered) {
        if (d.status) {
            forward_refuse(c, d.status, "payload_too_large", "%s", d.cut);
            outcome = "refused";
            why = d.cut;
        } else if (r == 0) {
            /* Stopped before the stat: the controller went away or the worker stops. */
            outcome = forward_stopping(f) ? "error" : "aborted";
            why = forward_stopping(f) ? "the worker is shutting down" : "the controller went away";
            if (forward_stopping(f))
                forward_refuse(c, 503, "busy", "the worker is shutting down");
        } else {
            outcome = forward_refuse_runtime(c, &err);
            why = err.message;
        }
    } else if (d.gone) {
        outcome = "aborted";
        why = "the controller went away";
    } else {
        const char *msg = d.cut[0] ? d.cut : r < 0 ? err.message : forward_stopping(f) ? "the worker is shutting down"
                                                                                      : "";
        size_t wl = strlen(msg) > FILES_END_MESSAGE_MAX ? FILES_END_MESSAGE_MAX : strlen(msg);
        unsigned char hdr[LOGFRAME_HEADER_BYTES];
        logframe_header(hdr, LOGFRAME_END, (uint32_t)wl);
        if (forward_send_all(c, hdr, sizeof hdr) == 0 && wl > 0)
            forward_send_all(c, msg, wl);
        forward_client_shutdown(c);
        if (wl > 0) {
            outcome = d.cut[0] ? "refused" : "error";
            why = msg;
            if (d.cut[0])
                log_warn(FORWARD_COMPONENT, "download of %.200s from sandbox %s cut after %llu bytes: %s", q->path,
                         c->sandbox_id, (unsigned long long)d.bytes, d.cut);
        }
    }
    files_done(c, "get", q->path, outcome, d.bytes, t0, why);
    if (d.gate)
        tarstream_gate_release(d.gate);
}

/* ---- the connection ---------------------------------------------------- */

void forward_files(forward_conn_t *c)
{
    forward_t *f = c->f;
    int64_t t0 = time_mono_ms();
    const char *op = c->grant.purpose == GRANT_FILES_PUT ? "put" : "get";
    forward_reqline_t *l = malloc(sizeof *l);
    forward_files_req_t *q = malloc(sizeof *q);
    char why[200], ref[80], clean[SBX_FILES_PATH_MAX + 1];
    api_error_t err;
    if (!l || !q) {
        forward_refuse(c, 503, "busy", "out of memory");
        goto cleanup;
    }
    int lr = forward_granted_line(c, l);
    if (lr == SBX_EPERM)
        files_done(c, op, "-", "refused", 0, t0, "digest mismatch");
    if (lr < 0)
        goto cleanup;
    if (forward_files_request_parse(l->buf, l->len, q, why, sizeof why) < 0) {
        forward_refuse(c, 400, "invalid_argument", "%s", why);
        files_done(c, op, "-", "refused", 0, t0, why);
        goto cleanup;
    }
    if (q->put != (c->grant.purpose == GRANT_FILES_PUT)) {
        forward_refuse(c, 403, "forbidden", "the request does not match its grant");
        files_done(c, op, q->path, "refused", 0, t0, "op differs from the grant's purpose");
        goto cleanup;
    }
    if (!q->put && c->up_len > 0) {
        forward_refuse(c, 400, "invalid_argument", "a download takes nothing after its request line");
        files_done(c, op, q->path, "refused", 0, t0, "bytes after a get's request line");
        goto cleanup;
    }
    /* Every runtime gets the path cleaned (the Docker backend cleans it
     * again); a download's archive is then named by its last component. */
    if (tarstream_path_clean(q->path, clean) < 0) {
        forward_refuse(c, 400, "invalid_argument", "the path must be absolute, at most %d bytes, without control "
                       "characters", SBX_FILES_PATH_MAX);
        files_done(c, op, "-", "refused", 0, t0, "a path with control characters");
        goto cleanup;
    }
    /* A download of "DIR/." keeps that ending: a tar of DIR's contents
     * (entries "./…"), as docker cp has it. */
    size_t pl = strlen(q->path), cl = strlen(clean);
    bool contents = !q->put && pl >= 2 && strcmp(q->path + pl - 2, "/.") == 0 && strcmp(clean, "/") != 0 &&
                    cl + 2 <= SBX_FILES_PATH_MAX;
    memcpy(q->path, clean, cl + 1);
    if (contents)
        memcpy(q->path + cl, "/.", 3);
    int64_t fs_bytes = 0;
    if (runtime_files_target(f->rt, c->sandbox_id, f->worker_name, ref, &fs_bytes, &err) < 0) {
        const char *outcome = forward_refuse_runtime(c, &err);
        files_done(c, op, q->path, outcome, 0, t0, err.message);
        goto cleanup;
    }
    if (q->put)
        files_put(c, q, ref, t0);
    else
        files_get(c, q, ref, fs_bytes, t0);
cleanup:
    free(l);
    free(q);
}
