/* The external backend's calls that move bytes over driver streams
 * (docs/runtime-drivers.md "Byte streams"): exec with stdin and live output,
 * files_put and files_get, and the raw uploads and downloads under them
 * (snapshot copies use them too). */
#include "external_internal.h"
#include "fdutil.h"
#include "jsonx.h"
#include "timeutil.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* How long a stream connection may take (a driver just restarting). */
#define EXT_CONNECT_MS 3000
/* After the driver answered an exec, what is left on its stream is read for at most this long. */
#define EXT_DRAIN_MS 2000
/* files_put: the whole call's deadline while the upload runs (the client's
 * connection bounds it), then EXTDRV_FILES_MS once the upload ended. */
#define EXT_UPLOAD_MS (24L * 3600L * 1000L)

void ext_stream_token(char ret[EXTDRV_TOKEN_LEN + 1])
{
    unsigned char raw[EXTDRV_TOKEN_LEN / 2];
    static const char hex[] = "0123456789abcdef";
    randombytes_buf(raw, sizeof raw);
    for (size_t i = 0; i < sizeof raw; i++) {
        ret[2 * i] = hex[raw[i] >> 4];
        ret[2 * i + 1] = hex[raw[i] & 15];
    }
    ret[EXTDRV_TOKEN_LEN] = '\0';
}

int ext_stream_connect(ext_runtime_t *rt, const char *token, int *ret_fd, api_error_t *err)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    const char *path = extdrv_streams_path(rt->drv);
    if (strlen(path) >= sizeof sa.sun_path)
        return api_error_set(err, API_RUNTIME_ERROR, "the driver's stream socket path is too long");
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int64_t deadline = time_deadline_ms(EXT_CONNECT_MS);
    for (;;) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return api_error_set(err, API_RUNTIME_ERROR, "cannot make a socket: %s", strerror(errno));
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
            char line[EXTDRV_TOKEN_LEN + 2];
            snprintf(line, sizeof line, "%s\n", token);
            if (send(fd, line, strlen(line), MSG_NOSIGNAL) == (ssize_t)strlen(line)) {
                *ret_fd = fd;
                return 0;
            }
        }
        int e = errno;
        close(fd);
        if (time_mono_ms() >= deadline || (e != ENOENT && e != ECONNREFUSED && e != EAGAIN))
            return api_error_set(err, API_RUNTIME_ERROR, "cannot connect to driver %s's streams at %s: %s",
                                 extdrv_name(rt->drv), path, strerror(e));
        usleep(50000);
    }
}

static void ext_nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

/* ---- exec ------------------------------------------------------------------ */

typedef struct ext_exec {
    const exec_spec_t *spec;
    size_t in_off;            /* stdin bytes framed so far */
    unsigned char frame[SHELLFRAME_MAX];
    size_t frame_len, frame_off; /* the frame being written */
    bool eof_sent;
    extdrv_frames_t dec;
    const runtime_output_sink_t *sink;
    runtime_exec_result_t *res;
} ext_exec_t;

/* Fills the next stdin frame when the last one is written. */
static void ext_exec_next_frame(ext_exec_t *x)
{
    if (x->frame_off < x->frame_len || x->eof_sent)
        return;
    size_t total = x->spec->has_stdin ? x->spec->stdin_len : 0;
    size_t n = total - x->in_off;
    if (n > SHELLFRAME_PAYLOAD_MAX)
        n = SHELLFRAME_PAYLOAD_MAX;
    if (n > 0) {
        shellframe_header(x->frame, SHELLFRAME_DATA, (uint32_t)n);
        memcpy(x->frame + SHELLFRAME_HEADER_BYTES, x->spec->stdin_data + x->in_off, n);
        x->in_off += n;
    } else {
        shellframe_header(x->frame, SHELLFRAME_EOF, 0);
        x->eof_sent = true;
    }
    x->frame_len = SHELLFRAME_HEADER_BYTES + n;
    x->frame_off = 0;
}

/* Takes bytes read from the stream: < 0 for a bad frame, 1 once the exit
 * frame (the last) came. */
static int ext_exec_take(ext_exec_t *x, const char *p, size_t n)
{
    while (n > 0) {
        size_t used = 0;
        extdrv_frame_t f;
        int r = extdrv_frames_next(&x->dec, p, n, &used, &f);
        if (r < 0)
            return r;
        p += used;
        n -= used;
        if (r == 0)
            break;
        if (f.type == SHELLFRAME_EXIT)
            return 1;
        int stream = f.type == SHELLFRAME_DATA ? 1 : 2;
        sbuf_append_bounded(stream == 1 ? &x->res->out : &x->res->err, f.data, f.len);
        if (x->sink && x->sink->write)
            x->sink->write(x->sink->ud, stream, (const char *)f.data, f.len);
    }
    return 0;
}

/* Moves stdin and output until the stream ends; *ret_cancel the cancel
 * request when a client cancelled. */
static int ext_exec_pump(ext_runtime_t *rt, int fd, ext_exec_t *x, extdrv_call_t *call, const char *token,
                         extdrv_call_t **ret_cancel, api_error_t *err)
{
    int64_t next_tick = time_mono_ms() + 100, drain_until = 0;
    char buf[65536];
    for (;;) {
        ext_exec_next_frame(x);
        bool want_out = x->frame_off < x->frame_len;
        struct pollfd p = { .fd = fd, .events = (short)(POLLIN | (want_out ? POLLOUT : 0)) };
        int pr = poll(&p, 1, 100);
        int64_t now = time_mono_ms();
        if (now >= next_tick) {
            next_tick = now + 100;
            if (x->sink && x->sink->tick)
                x->sink->tick(x->sink->ud);
        }
        if (rt->cancel && atomic_load(rt->cancel))
            return api_error_set(err, API_CANCELLED, "the worker is stopping");
        if (!*ret_cancel && x->sink && x->sink->cancelled && x->sink->cancelled(x->sink->ud)) {
            json_object *cp = json_object_new_object();
            jsonx_add_str(cp, "stream", token);
            api_error_t ignored;
            if (extdrv_send(rt->drv, "cancel", cp, EXTDRV_SHORT_MS, ret_cancel, &ignored) < 0)
                return api_error_set(err, API_CANCELLED, "the exec was cancelled");
            x->res->cancelled = true;
        }
        if (extdrv_call_done(rt->drv, call)) {
            if (call->rc < 0)
                return 0; /* refused (or the driver went): nothing more will come */
            if (!drain_until)
                drain_until = now + EXT_DRAIN_MS;
            else if (now >= drain_until)
                return 0; /* answered (or failed) and the stream stays open: the answer decides */
        }
        if (pr <= 0)
            continue;
        if (p.revents & POLLOUT) {
            ssize_t w = send(fd, x->frame + x->frame_off, x->frame_len - x->frame_off, MSG_NOSIGNAL);
            if (w > 0)
                x->frame_off += (size_t)w;
            else if (w < 0 && errno != EAGAIN && errno != EINTR)
                x->eof_sent = true, x->frame_off = x->frame_len; /* the driver closed its reading side */
        }
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t got = read(fd, buf, sizeof buf);
            if (got < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            if (got <= 0)
                return 0;
            int t = ext_exec_take(x, buf, (size_t)got);
            if (t < 0)
                return api_error_set(err, API_RUNTIME_ERROR, "driver %s sent a malformed exec frame",
                                     extdrv_name(rt->drv));
            if (t == 1)
                return 0;
        }
    }
}

int ext_rt_exec(runtime_t *base, const char *ref, const exec_spec_t *spec, size_t max_output,
                const runtime_output_sink_t *sink, runtime_exec_result_t *ret, api_error_t *err)
{
    ext_runtime_t *rt = (ext_runtime_t *)base;
    char token[EXTDRV_TOKEN_LEN + 1];
    extdrv_call_t *call = NULL, *cancel = NULL;
    json_object *res = NULL;
    int fd = -1, r = 0;
    memset(ret, 0, sizeof *ret);
    sbuf_init(&ret->out, max_output);
    sbuf_init(&ret->err, max_output);
    const char *dref = ext_driver_ref(ref);
    if (!dref)
        return api_error_set(err, API_NOT_FOUND, "no such sandbox object %.80s in the driver", ref ? ref : "");
    ext_stream_token(token);
    int64_t tmo = spec->timeout_seconds > 0 ? spec->timeout_seconds : SBX_EXEC_TIMEOUT_MAX;
    r = extdrv_send(rt->drv, "exec", extdrv_exec_params(dref, spec, max_output, token),
                    (long)(tmo * 1000 + EXTDRV_EXEC_GRACE_MS), &call, err);
    if (r < 0)
        return r;
    ext_exec_t x = { .spec = spec, .sink = sink, .res = ret };
    extdrv_frames_init(&x.dec);
    api_error_t perr;
    int pr = ext_stream_connect(rt, token, &fd, &perr);
    if (pr == 0) {
        ext_nonblock(fd);
        pr = ext_exec_pump(rt, fd, &x, call, token, &cancel, &perr);
        close(fd);
    }
    r = extdrv_finish(rt->drv, call, &res, err);
    if (r == 0 && pr < 0) {
        *err = perr;
        r = pr;
    }
    if (r == 0)
        r = extdrv_exec_result_parse(res, ret, err);
    if (res)
        json_object_put(res);
    if (cancel) {
        api_error_t ignored;
        extdrv_finish(rt->drv, cancel, NULL, &ignored);
    }
    if (r < 0)
        runtime_exec_result_release(ret);
    return r;
}

/* ---- files ------------------------------------------------------------------ */

/* True when one of the stop descriptors is readable or hung up. */
static bool ext_stopped(const int *fds, size_t n)
{
    for (size_t i = 0; i < n && i < 8; i++) {
        struct pollfd p = { .fd = fds[i], .events = POLLIN };
        if (poll(&p, 1, 0) > 0)
            return true;
    }
    return false;
}

/* Writes all n bytes of an upload to fd (blocking, in slices so stops and
 * an early answer of call are seen). */
static int ext_write_all(ext_runtime_t *rt, extdrv_call_t *call, int fd, const char *p, size_t n,
                         const ext_upload_t *up, api_error_t *err)
{
    while (n > 0) {
        if (ext_stopped(up->stop_fds, up->nstop_fds) || (rt->cancel && atomic_load(rt->cancel)))
            return api_error_set(err, API_CANCELLED, "the upload was stopped");
        if (extdrv_call_done(rt->drv, call))
            return SBX_EIO; /* the driver answered (refused) before taking it all: its answer stands */
        struct pollfd pf = { .fd = fd, .events = POLLOUT };
        if (poll(&pf, 1, 200) <= 0)
            continue;
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (w <= 0)
            return api_error_set(err, API_RUNTIME_ERROR, "driver %s closed the upload stream: %s",
                                 extdrv_name(rt->drv), strerror(errno));
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int ext_upload(ext_runtime_t *rt, const char *method, json_object *p, const ext_upload_t *up, int64_t *ret_total,
               json_object **ret_res, api_error_t *err)
{
    char token[EXTDRV_TOKEN_LEN + 1], *buf = NULL;
    extdrv_call_t *call = NULL;
    int fd = -1, r = 0, pr = 0;
    int64_t total = 0;
    api_error_t perr;
    *ret_res = NULL;
    ext_stream_token(token);
    jsonx_add_str(p, "stream", token);
    if ((r = extdrv_send(rt->drv, method, p, EXT_UPLOAD_MS, &call, err)) < 0)
        return r;
    if (!(buf = malloc(65536)))
        pr = api_error_set(&perr, API_INTERNAL, "out of memory");
    else
        pr = ext_stream_connect(rt, token, &fd, &perr);
    while (pr == 0) {
        ptrdiff_t n = up->read(up->ud, buf, 65536);
        if (n == 0) {
            shutdown(fd, SHUT_WR);
            break;
        }
        if (n < 0) {
            pr = n == RUNTIME_FILES_REFUSED ? SBX_EINVAL
                                            : api_error_set(&perr, API_CANCELLED, "the upload ended before its end");
            if (n == RUNTIME_FILES_REFUSED)
                api_error_set(&perr, API_INVALID_ARGUMENT, "the upload was refused");
            break;
        }
        total += n;
        if (total > up->max_bytes) {
            pr = api_error_set(&perr, API_PAYLOAD_TOO_LARGE, "the upload is over %lld bytes",
                               (long long)up->max_bytes);
            break;
        }
        pr = ext_write_all(rt, call, fd, buf, (size_t)n, up, &perr);
    }
    if (pr < 0 && fd >= 0) {
        fd_close_reset(fd); /* the driver sees an error, not an end */
        fd = -1;
    }
    /* the driver answers once the data is written: from here the usual deadline */
    extdrv_call_extend(rt->drv, call, EXTDRV_FILES_MS);
    r = extdrv_finish(rt->drv, call, ret_res, err);
    if (fd >= 0)
        close(fd);
    free(buf);
    if (pr < 0 && (pr != SBX_EIO || r == 0)) {
        if (pr == SBX_EIO)
            api_error_set(&perr, API_RUNTIME_ERROR, "driver %s answered the upload before its end",
                          extdrv_name(rt->drv));
        *err = perr;
        r = pr;
    }
    if (r < 0 && *ret_res) {
        json_object_put(*ret_res);
        *ret_res = NULL;
    }
    *ret_total = total;
    return r;
}

int ext_download(ext_runtime_t *rt, const char *method, json_object *p, const ext_download_t *dl, api_error_t *err)
{
    char token[EXTDRV_TOKEN_LEN + 1], buf[65536];
    extdrv_call_t *call = NULL;
    json_object *res = NULL;
    int fd = -1, r = 0;
    ext_stream_token(token);
    jsonx_add_str(p, "stream", token);
    if ((r = extdrv_send(rt->drv, method, p, EXTDRV_FILES_MS, &call, err)) < 0)
        return r;
    api_error_t cerr;
    int cr = ext_stream_connect(rt, token, &fd, &cerr);
    r = extdrv_finish(rt->drv, call, &res, err);
    if (r == 0 && cr < 0) {
        *err = cerr;
        r = cr;
    }
    int go = r == 0 && dl->on_answer ? dl->on_answer(dl->ud, res, err) : 0;
    if (go < 0)
        r = go;
    while (r == 0 && go == 0) {
        if (ext_stopped(dl->stop_fds, dl->nstop_fds))
            break;
        if (rt->cancel && atomic_load(rt->cancel)) {
            r = api_error_set(err, API_CANCELLED, "the worker is stopping");
            break;
        }
        struct pollfd pf = { .fd = fd, .events = POLLIN };
        if (poll(&pf, 1, 200) <= 0)
            continue;
        ssize_t got = read(fd, buf, sizeof buf);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            r = api_error_set(err, API_RUNTIME_ERROR, "driver %s broke the download stream: %s",
                              extdrv_name(rt->drv), strerror(errno));
        if (got <= 0 || dl->on_data(dl->ud, buf, (size_t)got) < 0)
            break;
    }
    if (fd >= 0)
        close(fd);
    if (res)
        json_object_put(res);
    return r;
}

/* The start of a file transfer's call: the driver can move files and has
 * the sandbox object; *ret_p holds its ref and path. 0, or < 0 with err. */
static int ext_files_params(ext_runtime_t *rt, const char *ref, const char *path, json_object **ret_p,
                            api_error_t *err)
{
    const char *dref = ext_driver_ref(ref);
    *ret_p = NULL;
    if (!rt->hello.cap_files)
        return api_error_set(err, API_UNAVAILABLE, "driver %s cannot move files", extdrv_name(rt->drv));
    if (!dref)
        return api_error_set(err, API_NOT_FOUND, "no such sandbox object in the driver");
    *ret_p = json_object_new_object();
    jsonx_add_str(*ret_p, "ref", dref);
    jsonx_add_str(*ret_p, "path", path);
    return 0;
}

int ext_rt_files_put(runtime_t *base, const runtime_files_put_req_t *req, int64_t *ret_bytes, api_error_t *err)
{
    ext_runtime_t *rt = (ext_runtime_t *)base;
    json_object *res = NULL, *p = NULL;
    int r;
    if ((r = ext_files_params(rt, req->ref, req->path, &p, err)) < 0)
        return r;
    jsonx_add_str(p, "format", req->format == RUNTIME_FILES_RAW ? "raw" : "tar");
    jsonx_add_int(p, "size", req->size);
    jsonx_add_int(p, "mode", req->mode);
    jsonx_add_int(p, "max_bytes", req->max_bytes);
    ext_upload_t up = { .read = req->read, .ud = req->ud, .max_bytes = req->max_bytes, .stop_fds = req->stop_fds,
                        .nstop_fds = req->nstop_fds };
    int64_t total = 0, bytes = 0;
    r = ext_upload(rt, "files_put", p, &up, &total, &res, err);
    if (r == 0) {
        jsonx_get_int(res, "bytes", &bytes);
        *ret_bytes = bytes > 0 ? bytes : total;
    }
    if (res)
        json_object_put(res);
    return r;
}

/* files_get's answer: the path's stat, handed to the caller before the body. */
static int ext_files_get_answer(void *ud, json_object *res, api_error_t *err)
{
    const runtime_files_get_req_t *req = ud;
    runtime_files_stat_t st;
    int r = extdrv_stat_parse(res, &st, err);
    if (r < 0)
        return r;
    return req->on_stat(req->ud, &st) < 0 ? 1 : 0;
}

static int ext_files_get_data(void *ud, const char *data, size_t n)
{
    const runtime_files_get_req_t *req = ud;
    return req->on_data(req->ud, data, n);
}

int ext_rt_files_get(runtime_t *base, const runtime_files_get_req_t *req, api_error_t *err)
{
    static const char *const formats[] = { "tar", "raw", "list" };
    ext_runtime_t *rt = (ext_runtime_t *)base;
    json_object *p = NULL;
    int r;
    if ((r = ext_files_params(rt, req->ref, req->path, &p, err)) < 0)
        return r;
    jsonx_add_str(p, "format", formats[req->format <= RUNTIME_FILES_LIST ? req->format : 0]);
    ext_download_t dl = { .on_answer = ext_files_get_answer, .on_data = ext_files_get_data, .ud = (void *)req,
                          .stop_fds = req->stop_fds, .nstop_fds = req->nstop_fds };
    return ext_download(rt, "files_get", p, &dl, err);
}

/* ---- dial ------------------------------------------------------------------- */

int ext_dial(ext_runtime_t *rt, const char *dref, const runtime_dial_req_t *req, int *ret_fd, api_error_t *err)
{
    char token[EXTDRV_TOKEN_LEN + 1];
    extdrv_call_t *call = NULL;
    int fd = -1;
    if (req->stop_fd >= 0 && ext_stopped(&req->stop_fd, 1))
        return api_error_set(err, API_CANCELLED, "the dial was stopped");
    ext_stream_token(token);
    json_object *p = json_object_new_object();
    jsonx_add_str(p, "ref", dref);
    jsonx_add_int(p, "port", req->port);
    jsonx_add_int(p, "timeout_ms", req->timeout_ms);
    jsonx_add_str(p, "stream", token);
    int r = extdrv_send(rt->drv, "dial", p, (long)(req->timeout_ms + EXTDRV_SHORT_MS), &call, err);
    if (r < 0)
        return r;
    api_error_t cerr;
    int cr = ext_stream_connect(rt, token, &fd, &cerr);
    r = extdrv_finish(rt->drv, call, NULL, err);
    if (r == 0 && cr < 0) {
        *err = cerr;
        r = cr;
    }
    if (r < 0) {
        if (fd >= 0)
            close(fd);
        if (err->code == API_NOT_FOUND)
            err->code = API_UNAVAILABLE; /* the sandbox is there (checked): nothing at that port */
        return r;
    }
    ext_nonblock(fd);
    *ret_fd = fd;
    return 0;
}

/* ---- shells ------------------------------------------------------------------ */

/* A shell: the framed driver stream, and a socket pair whose one end is the
 * caller's raw terminal stream; a pump thread translates between them. */
typedef struct ext_shell {
    int drv_fd;
    int mine, theirs;         /* theirs goes to the caller */
    pthread_t pump;
    bool joined;
    pthread_mutex_t wmu;      /* frames written to drv_fd */
    atomic_int stop;
    bool exited;
    int exit_code;
} ext_shell_t;

/* Writes n bytes to a nonblocking fd, waiting while it is full; false when
 * the other side is gone or the shell stops. */
static bool ext_shell_write(ext_shell_t *s, int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        if (atomic_load(&s->stop))
            return false;
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            struct pollfd pf = { .fd = fd, .events = POLLOUT };
            poll(&pf, 1, 200);
            continue;
        }
        if (w <= 0)
            return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}

static bool ext_shell_frame(ext_shell_t *s, int type, const void *data, size_t n)
{
    unsigned char h[SHELLFRAME_HEADER_BYTES];
    shellframe_header(h, type, (uint32_t)n);
    pthread_mutex_lock(&s->wmu);
    bool ok = ext_shell_write(s, s->drv_fd, h, sizeof h) && (n == 0 || ext_shell_write(s, s->drv_fd, data, n));
    pthread_mutex_unlock(&s->wmu);
    return ok;
}

static void *ext_shell_pump(void *arg)
{
    ext_shell_t *s = arg;
    extdrv_frames_t dec;
    char buf[SHELLFRAME_PAYLOAD_MAX];
    bool input_open = true;
    extdrv_frames_init(&dec);
    while (!atomic_load(&s->stop)) {
        struct pollfd p[2] = { { .fd = s->drv_fd, .events = POLLIN }, { .fd = s->mine, .events = POLLIN } };
        if (poll(p, input_open ? 2 : 1, 200) <= 0)
            continue;
        if (input_open && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            ssize_t got = recv(s->mine, buf, sizeof buf, MSG_DONTWAIT);
            if (got > 0 && !ext_shell_frame(s, SHELLFRAME_DATA, buf, (size_t)got))
                break;
            if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
                input_open = false;
                ext_shell_frame(s, SHELLFRAME_EOF, NULL, 0);
            }
        }
        if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t got = recv(s->drv_fd, buf, sizeof buf, MSG_DONTWAIT);
            if (got < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            if (got <= 0)
                break; /* the command ended (or the driver went) */
            const char *q = buf;
            size_t n = (size_t)got;
            while (n > 0) {
                size_t used = 0;
                extdrv_frame_t f;
                int r = extdrv_frames_next(&dec, q, n, &used, &f);
                if (r < 0)
                    goto done; /* a bad frame: end the shell */
                q += used;
                n -= used;
                if (r == 0)
                    break;
                if (f.type == SHELLFRAME_EXIT) {
                    s->exited = true;
                    s->exit_code = f.exit_code;
                } else if (!ext_shell_write(s, s->mine, f.data, f.len)) {
                    goto done;
                }
            }
        }
    }
done:
    shutdown(s->mine, SHUT_RDWR); /* the caller reads its end */
    return NULL;
}

static void ext_shell_free(ext_shell_t *s)
{
    if (!s)
        return;
    atomic_store(&s->stop, 1);
    if (s->drv_fd >= 0)
        shutdown(s->drv_fd, SHUT_RDWR); /* the driver kills the command when its stream closes */
    if (!s->joined)
        pthread_join(s->pump, NULL);
    if (s->drv_fd >= 0)
        close(s->drv_fd);
    close(s->mine);
    close(s->theirs);
    pthread_mutex_destroy(&s->wmu);
    free(s);
}

int ext_rt_shell_open(runtime_t *base, const runtime_shell_req_t *req, runtime_shell_t **ret, int *ret_fd,
                      runtime_shell_early_t *ret_early, api_error_t *err)
{
    ext_runtime_t *rt = (ext_runtime_t *)base;
    const char *dref = ext_driver_ref(req->ref);
    char token[EXTDRV_TOKEN_LEN + 1];
    extdrv_call_t *call = NULL;
    int fd = -1, pair[2];
    ret_early->data = NULL;
    ret_early->len = 0;
    if (!rt->hello.cap_shell)
        return api_error_set(err, API_UNAVAILABLE, "driver %s has no interactive shells", extdrv_name(rt->drv));
    /* Protocol 1's shell is a terminal: a command without one (a streamed
     * stdin, tty=false) is not offered rather than given a terminal. */
    if (!req->tty)
        return api_error_set(err, API_UNAVAILABLE,
                             "driver %s streams no stdin without a terminal: send at most 524288 bytes of stdin "
                             "inline, or copy the input in as a file", extdrv_name(rt->drv));
    if (!dref)
        return api_error_set(err, API_NOT_FOUND, "no such sandbox object in the driver");
    ext_stream_token(token);
    json_object *p = json_object_new_object(), *argv = json_object_new_array();
    for (size_t i = 0; i < req->argc; i++)
        json_object_array_add(argv, json_object_new_string(req->argv[i]));
    jsonx_add_str(p, "ref", dref);
    jsonx_add(p, "argv", argv);
    jsonx_add_int(p, "cols", req->cols);
    jsonx_add_int(p, "rows", req->rows);
    jsonx_add_str(p, "stream", token);
    int r = extdrv_send(rt->drv, "shell_open", p, EXTDRV_FILES_MS, &call, err);
    if (r < 0)
        return r;
    api_error_t cerr;
    int cr = ext_stream_connect(rt, token, &fd, &cerr);
    r = extdrv_finish(rt->drv, call, NULL, err);
    if (r == 0 && cr < 0) {
        *err = cerr;
        r = cr;
    }
    if (r == 0 && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) < 0)
        r = api_error_set(err, API_RUNTIME_ERROR, "cannot make a socket pair: %s", strerror(errno));
    if (r < 0) {
        if (fd >= 0)
            close(fd);
        return r;
    }
    ext_shell_t *s = calloc(1, sizeof *s);
    if (!s) {
        close(fd);
        close(pair[0]);
        close(pair[1]);
        return api_error_set(err, API_INTERNAL, "out of memory");
    }
    s->drv_fd = fd;
    s->theirs = pair[0];
    s->mine = pair[1];
    s->exit_code = -1;
    pthread_mutex_init(&s->wmu, NULL);
    ext_nonblock(s->drv_fd);
    ext_nonblock(s->mine);
    ext_nonblock(s->theirs);
    if (pthread_create(&s->pump, NULL, ext_shell_pump, s) != 0) {
        s->joined = true;
        ext_shell_free(s);
        return api_error_set(err, API_INTERNAL, "cannot start the shell's thread");
    }
    *ret = (runtime_shell_t *)s;
    *ret_fd = s->theirs;
    return 0;
}

int ext_rt_shell_resize(runtime_t *base, runtime_shell_t *sh, unsigned cols, unsigned rows, api_error_t *err)
{
    (void)base;
    ext_shell_t *s = (ext_shell_t *)sh;
    unsigned char f[SHELLFRAME_HEADER_BYTES + 4];
    shellframe_resize(f, cols, rows);
    pthread_mutex_lock(&s->wmu);
    bool ok = ext_shell_write(s, s->drv_fd, f, sizeof f);
    pthread_mutex_unlock(&s->wmu);
    return ok ? 0 : api_error_set(err, API_RUNTIME_ERROR, "the shell's stream to the driver is closed");
}

int ext_rt_shell_exit_code(runtime_t *base, runtime_shell_t *sh, int *ret_code, api_error_t *err)
{
    (void)base;
    ext_shell_t *s = (ext_shell_t *)sh;
    if (!s->joined) {
        pthread_join(s->pump, NULL); /* the stream ended: the pump is ending too */
        s->joined = true;
    }
    if (!s->exited)
        return api_error_set(err, API_RUNTIME_ERROR, "the driver did not say how the shell ended");
    *ret_code = s->exit_code;
    return 0;
}

void ext_rt_shell_close(runtime_t *base, runtime_shell_t *sh)
{
    (void)base;
    ext_shell_free((ext_shell_t *)sh);
}
