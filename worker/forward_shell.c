/* The forwarder's interactive shells: a shell grant's request line
 * (checked against the grant's digest, parsed strictly), then a command on
 * a terminal in the sandbox (runtime_shell_open) and its frames both ways
 * (common/shellframe.h) until it exits: DATA to the terminal's input and
 * from its output, RESIZE to the runtime, EOF as the terminal's end of
 * input, EXIT with the exit code last (the protocol: docs/worker.md
 * "Shells"). */
#include "forward.h"
#include "forward_internal.h"
#include "errors.h"
#include "jsonx.h"
#include "log.h"
#include "metrics.h"
#include "shellframe.h"
#include "spec.h"
#include "timeutil.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>


/* After the EXIT frame, stdin still coming is read and dropped (for at most
 * FORWARD_LINGER_MS) up to this much before the connection is closed. */
#define SHELL_LINGER_BYTES (64u * 1024u * 1024u)

/* A terminal is resized at most this often (later sizes wait, the latest wins). */
#define SHELL_RESIZE_MS 100

/* Once the client's input ended, a terminal's EOF character is typed again
 * after this long with no output while the command runs. The first one may
 * be read by a command the shell ran (`cat`, a REPL), or arrive while the
 * shell's line editor has the terminal in canonical mode and be lost in the
 * mode switch (gVisor's line discipline does this): each quiet interval
 * another, as a person would press Ctrl-D again, until the command exits. */
#define SHELL_EOF_REPEAT_MS 500

/* ---- the request line (pure) ------------------------------------------- */

static int shell_bad(char *err, size_t errlen, const char *msg)
{
    snprintf(err, errlen, "%s", msg);
    return SBX_EINVAL;
}

void forward_shell_req_release(forward_shell_req_t *q)
{
    if (q->argv)
        for (size_t i = 0; i < q->argc; i++)
            free(q->argv[i]);
    free(q->argv);
    q->argv = NULL;
    q->argc = 0;
    if (q->env)
        for (size_t i = 0; i < q->envc; i++)
            free(q->env[i]);
    free(q->env);
    q->env = NULL;
    q->envc = 0;
    free(q->cwd);
    q->cwd = NULL;
}

/* "env": an exec's env object (kv_list_from_json's rules) as "K=V" strings. */
static int shell_env(json_object *v, forward_shell_req_t *ret, char *err, size_t errlen)
{
    kv_list_t kv;
    api_error_t je;
    if (!json_object_is_type(v, json_type_object) || kv_list_from_json(v, "env", true, SBX_MAX_ENV, &kv, &je) < 0)
        return shell_bad(err, errlen, "the request's env must be an object of at most 128 string values");
    int r = 0;
    if (!(ret->env = calloc(kv.n + 1, sizeof *ret->env))) {
        r = shell_bad(err, errlen, "out of memory");
        goto cleanup;
    }
    for (size_t i = 0; i < kv.n; i++) {
        size_t n = strlen(kv.items[i].key) + strlen(kv.items[i].value) + 2;
        if (!(ret->env[i] = malloc(n))) {
            r = shell_bad(err, errlen, "out of memory");
            goto cleanup;
        }
        snprintf(ret->env[i], n, "%s=%s", kv.items[i].key, kv.items[i].value);
        ret->envc = i + 1;
    }
cleanup:
    kv_list_release(&kv);
    return r;
}

/* "cwd": an absolute path without control bytes. */
static int shell_cwd(json_object *v, forward_shell_req_t *ret, char *err, size_t errlen)
{
    const char *s = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
    size_t n = s ? (size_t)json_object_get_string_len(v) : 0;
    if (!s || strlen(s) != n || !spec_cwd_ok(s, n))
        return shell_bad(err, errlen, "the request's cwd must be an absolute path without control bytes");
    if (!(ret->cwd = strdup(s)))
        return shell_bad(err, errlen, "out of memory");
    return 0;
}

/* A terminal size member: an integer 1..SHELLFRAME_SIZE_MAX. */
static bool shell_size(json_object *v, unsigned *ret)
{
    if (!json_object_is_type(v, json_type_int))
        return false;
    errno = 0;
    int64_t n = json_object_get_int64(v);
    if (errno != 0 || n < 1 || n > SHELLFRAME_SIZE_MAX)
        return false;
    *ret = (unsigned)n;
    return true;
}

static int shell_argv(json_object *a, forward_shell_req_t *ret, char *err, size_t errlen)
{
    if (!json_object_is_type(a, json_type_array) || json_object_array_length(a) < 1 ||
        json_object_array_length(a) > SBX_MAX_ARGV)
        return shell_bad(err, errlen, "the request's argv must be an array of 1 to 256 strings");
    size_t n = json_object_array_length(a);
    ret->argv = calloc(n + 1, sizeof *ret->argv);
    if (!ret->argv)
        return shell_bad(err, errlen, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_object *s = json_object_array_get_idx(a, i);
        if (!json_object_is_type(s, json_type_string) || json_object_get_string_len(s) < 1 ||
            strlen(json_object_get_string(s)) != (size_t)json_object_get_string_len(s))
            return shell_bad(err, errlen, "each argv entry must be a non-empty string without NUL");
        ret->argv[i] = strdup(json_object_get_string(s));
        if (!ret->argv[i])
            return shell_bad(err, errlen, "out of memory");
        ret->argc = i + 1;
    }
    return 0;
}

int forward_shell_request_parse(const char *line, size_t len, forward_shell_req_t *ret, char *err, size_t errlen)
{
    api_error_t je;
    json_object *o = NULL;
    int r = 0;
    bool have_argv = false, have_cols = false, have_rows = false, have_tty = false;
    memset(ret, 0, sizeof *ret);
    ret->tty = true;
    if (jsonx_parse(line, len, &o, &je) < 0 || !json_object_is_type(o, json_type_object)) {
        r = shell_bad(err, errlen, "the request line must be one JSON object");
        goto cleanup;
    }
    const char *op = jsonx_get_str(o, "op");
    if (!op || strcmp(op, "shell") != 0) {
        r = shell_bad(err, errlen, "the request's op must be \"shell\"");
        goto cleanup;
    }
    json_object_object_foreach(o, key, val) {
        if (strcmp(key, "op") == 0)
            continue;
        if (strcmp(key, "argv") == 0 && !have_argv) {
            if ((r = shell_argv(val, ret, err, errlen)) < 0)
                goto cleanup;
            have_argv = true;
        } else if (strcmp(key, "cols") == 0 || strcmp(key, "rows") == 0) {
            bool cols = key[0] == 'c';
            if (!shell_size(val, cols ? &ret->cols : &ret->rows)) {
                r = shell_bad(err, errlen, "the request's cols and rows must be integers from 1 to 1000");
                goto cleanup;
            }
            *(cols ? &have_cols : &have_rows) = true;
        } else if (strcmp(key, "tty") == 0 && !have_tty) {
            if (!json_object_is_type(val, json_type_boolean)) {
                r = shell_bad(err, errlen, "the request's tty must be true or false");
                goto cleanup;
            }
            ret->tty = json_object_get_boolean(val);
            have_tty = true;
        } else if (strcmp(key, "env") == 0 && !ret->env) {
            if ((r = shell_env(val, ret, err, errlen)) < 0)
                goto cleanup;
        } else if (strcmp(key, "cwd") == 0 && !ret->cwd) {
            if ((r = shell_cwd(val, ret, err, errlen)) < 0)
                goto cleanup;
        } else {
            char msg[160];
            snprintf(msg, sizeof msg, "the request has a key \"%.40s\" a shell request does not take", key);
            r = shell_bad(err, errlen, msg);
            goto cleanup;
        }
    }
    if (!have_argv || !have_cols || !have_rows)
        r = shell_bad(err, errlen, "a shell request must say its argv, cols and rows");
cleanup:
    if (o)
        json_object_put(o);
    if (r < 0)
        forward_shell_req_release(ret);
    return r;
}

/* ---- metrics and the log ----------------------------------------------- */

/* sandbox_worker_shells_total{outcome}. */
static pthread_once_t shell_metrics_once = PTHREAD_ONCE_INIT;
static metric_family_t *shell_m_sessions;

static void shell_metrics_init(void)
{
    shell_m_sessions = metrics_family("sandbox_worker_shells_total", METRIC_COUNTER,
                                      "Interactive shells the worker served, by outcome: exited (the command "
                                      "ended, its exit code sent), aborted (the controller's side ended first, "
                                      "or was idle too long; the command was killed), refused (a 4xx answer or a "
                                      "malformed frame), error (the runtime failed, or the worker stopped).",
                                      NULL, 0);
}

static void shell_done(const forward_conn_t *c, const char *outcome, int64_t t0, const char *why)
{
    char labels[64];
    pthread_once(&shell_metrics_once, shell_metrics_init);
    metrics_add(shell_m_sessions, metrics_labels(labels, sizeof labels, "outcome", outcome, NULL), 1);
    log_debug(FORWARD_COMPONENT, "shell in sandbox %s from %s: %lld ms, %s: %s", c->sandbox_id, c->peer,
              (long long)(time_mono_ms() - t0), outcome, why);
}

/* ---- the relay ---------------------------------------------------------- */

typedef struct shell_relay {
    forward_conn_t *c;
    runtime_shell_t *sh;
    int eng;                  /* the terminal's stream */
    shellframe_dec_t dec;     /* frames from the controller */
    size_t up_off;            /* c->up[up_off, c->up_len): client bytes not yet decoded */
    char pend[SHELLFRAME_PAYLOAD_MAX]; /* keystrokes not yet written to the terminal */
    size_t pend_off, pend_len;
    bool input_ended;         /* the EOF frame came */
    int64_t eof_ms;           /* tty: when the EOF character was last queued */
    bool tty;                 /* false: the stream is framed (runtime.h) and EOF closes stdin */
    bool wr_shut;             /* !tty: the command's stdin was closed */
    runtime_shell_mux_t mux;  /* !tty: the output's framing being undone */
    unsigned want_cols, want_rows; /* the latest RESIZE not applied yet (0: none) */
    unsigned cols, rows;      /* the size last applied */
    int64_t resized_ms;       /* when */
    int64_t last_ms;          /* the last byte either way */
    char why[200];
} shell_relay_t;

/* Sends n bytes of output as frames of type. */
static int shell_send_frames(shell_relay_t *s, int type, const char *p, size_t n)
{
    while (n > 0) {
        size_t k = n > SHELLFRAME_PAYLOAD_MAX ? SHELLFRAME_PAYLOAD_MAX : n;
        unsigned char hdr[SHELLFRAME_HEADER_BYTES];
        shellframe_header(hdr, type, (uint32_t)k);
        if (forward_send_all(s->c, hdr, sizeof hdr) < 0 || forward_send_all(s->c, p, k) < 0)
            return SBX_EIO;
        p += k;
        n -= k;
    }
    return 0;
}

/* runtime_shell_mux_push's emit: stdout as DATA, stderr as STDERR frames. */
static int shell_send_stream(void *ud, int stream, const char *p, size_t n)
{
    return shell_send_frames(ud, stream == 1 ? SHELLFRAME_DATA : SHELLFRAME_STDERR, p, n);
}

/* Sends the n bytes read from the runtime's stream: on a terminal as DATA
 * frames; without one, its framing (runtime.h RUNTIME_SHELL_MUX_HEADER)
 * undone into DATA (stdout) and STDERR frames, other streams dropped. */
static int shell_send_output(shell_relay_t *s, const char *p, size_t n)
{
    if (s->tty)
        return shell_send_frames(s, SHELLFRAME_DATA, p, n);
    return runtime_shell_mux_push(&s->mux, p, n, shell_send_stream, s) < 0 ? SBX_EIO : 0;
}

/* Queues the terminal's EOF character (Ctrl-D) as the next keystroke. */
static void shell_type_eof(shell_relay_t *s)
{
    s->pend[0] = 0x04;
    s->pend_off = 0;
    s->pend_len = 1;
    s->eof_ms = time_mono_ms();
}

/* Decodes the frames pending from the controller while no keystrokes wait:
 * 0, or SBX_EINVAL for a malformed frame (s->why says). */
static int shell_take_frames(shell_relay_t *s)
{
    forward_conn_t *c = s->c;
    while (s->pend_len == 0 && s->up_off < c->up_len) {
        size_t used = 0;
        shellframe_t f;
        int r = shellframe_next(&s->dec, c->up + s->up_off, c->up_len - s->up_off, &used, &f);
        s->up_off += used;
        if (r < 0) {
            snprintf(s->why, sizeof s->why, "a malformed frame from the controller");
            return SBX_EINVAL;
        }
        if (r == 0)
            break;
        if (s->input_ended) {
            snprintf(s->why, sizeof s->why, "a frame after the EOF frame");
            return SBX_EINVAL;
        }
        if (f.type == SHELLFRAME_DATA) {
            memcpy(s->pend, f.data, f.len);
            s->pend_off = 0;
            s->pend_len = f.len;
        } else if (f.type == SHELLFRAME_RESIZE) {
            /* Applied by shell_resize, at most every SHELL_RESIZE_MS: a
             * flood of them is not a flood of Engine calls. */
            s->want_cols = f.cols;
            s->want_rows = f.rows;
        } else if (f.type == SHELLFRAME_EOF && !s->tty) {
            /* The command's stdin closes once what came before is written. */
            s->input_ended = true;
        } else if (f.type == SHELLFRAME_EOF) {
            /* The terminal's end of input: its EOF character (a shell
             * reading a line sees the end). */
            s->input_ended = true;
            shell_type_eof(s);
        }
    }
    if (s->up_off == c->up_len)
        s->up_off = c->up_len = 0;
    return 0;
}

/* Applies the latest RESIZE once SHELL_RESIZE_MS passed since the last
 * one (an unchanged size costs nothing). */
static void shell_resize(shell_relay_t *s)
{
    if (!s->want_cols || !s->tty)
        return;
    if (s->want_cols == s->cols && s->want_rows == s->rows) {
        s->want_cols = s->want_rows = 0;
        return;
    }
    int64_t now = time_mono_ms();
    if (now - s->resized_ms < SHELL_RESIZE_MS)
        return;
    api_error_t err;
    if (runtime_shell_resize(s->c->f->rt, s->sh, s->want_cols, s->want_rows, &err) < 0)
        log_debug(FORWARD_COMPONENT, "shell in sandbox %s: resize: %s", s->c->sandbox_id, err.message);
    s->cols = s->want_cols;
    s->rows = s->want_rows;
    s->want_cols = s->want_rows = 0;
    s->resized_ms = now;
}

/* Relays until the command exits (1), the controller's side ends or stalls
 * (0), or a malformed frame or the worker stopping ends it (< 0). */
static int shell_relay(shell_relay_t *s)
{
    forward_conn_t *c = s->c;
    forward_t *f = c->f;
    char buf[SHELLFRAME_PAYLOAD_MAX];
    for (;;) {
        if (shell_take_frames(s) < 0)
            return SBX_EINVAL;
        shell_resize(s);
        if (s->input_ended && !s->tty && !s->pend_len && !s->wr_shut) {
            shutdown(s->eng, SHUT_WR);
            s->wr_shut = true;
        }
        bool eof_repeats = s->tty && s->input_ended;
        if (eof_repeats && !s->pend_len) {
            int64_t now = time_mono_ms();
            if (now - s->last_ms >= SHELL_EOF_REPEAT_MS && now - s->eof_ms >= SHELL_EOF_REPEAT_MS)
                shell_type_eof(s);
        }
        if (time_mono_ms() - s->last_ms > (int64_t)SBX_SHELL_IDLE_SECONDS * 1000) {
            snprintf(s->why, sizeof s->why, "no bytes either way for %d s", SBX_SHELL_IDLE_SECONDS);
            return 0;
        }
        bool want_client = s->pend_len == 0 && c->up_len == 0;
        struct pollfd p[3] = {
            { .fd = s->eng, .events = (short)(POLLIN | (s->pend_len ? POLLOUT : 0)) },
            { .fd = want_client ? c->client : -1, .events = POLLIN },
            { .fd = f->stop_pipe[0], .events = POLLIN },
        };
        bool pending = want_client && forward_client_pending(c);
        int n = poll(p, 3, pending                  ? 0
                           : s->want_cols           ? SHELL_RESIZE_MS
                           : eof_repeats            ? SHELL_EOF_REPEAT_MS / 4
                                                    : 1000);
        if (n < 0 && errno != EINTR) {
            snprintf(s->why, sizeof s->why, "poll: %s", strerror(errno));
            return SBX_EIO;
        }
        if (n < 0)
            continue;
        if (p[2].revents) {
            snprintf(s->why, sizeof s->why, "the worker is shutting down");
            return SBX_EUNAVAIL;
        }
        if (s->pend_len && (p[0].revents & (POLLOUT | POLLERR | POLLHUP))) {
            ssize_t w = send(s->eng, s->pend + s->pend_off, s->pend_len - s->pend_off, MSG_NOSIGNAL);
            if (w > 0) {
                s->pend_off += (size_t)w;
                if (s->pend_off == s->pend_len)
                    s->pend_off = s->pend_len = 0;
            } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                s->pend_off = s->pend_len = 0; /* the terminal no longer reads: its output will end */
            }
        }
        if (p[0].revents & (POLLIN | POLLERR | POLLHUP)) {
            ssize_t got = recv(s->eng, buf, sizeof buf, 0);
            if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
                return 1;
            if (got > 0) {
                s->last_ms = time_mono_ms();
                if (shell_send_output(s, buf, (size_t)got) < 0) {
                    snprintf(s->why, sizeof s->why, "the controller went away");
                    return 0;
                }
            }
        }
        if (want_client && (pending || (p[1].revents & (POLLIN | POLLERR | POLLHUP)))) {
            ssize_t got = forward_client_recv(c, c->up, FORWARD_BUFFER_BYTES);
            if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                continue;
            if (got <= 0) {
                snprintf(s->why, sizeof s->why, "the controller's side ended before the command");
                return 0;
            }
            c->up_len = (size_t)got;
            s->up_off = 0;
            s->last_ms = time_mono_ms();
        }
    }
}

/* ---- the connection ---------------------------------------------------- */

void forward_shell(forward_conn_t *c)
{
    forward_t *f = c->f;
    int64_t t0 = time_mono_ms();
    forward_reqline_t *l = malloc(sizeof *l);
    shell_relay_t *s = calloc(1, sizeof *s);
    forward_shell_req_t q = { 0 };
    char why[200], ref[80];
    api_error_t err;
    if (!l || !s) {
        forward_refuse(c, 503, "busy", "out of memory");
        goto cleanup;
    }
    int lr = forward_granted_line(c, l);
    if (lr == SBX_EPERM)
        shell_done(c, "refused", t0, "digest mismatch");
    if (lr < 0)
        goto cleanup;
    if (forward_shell_request_parse(l->buf, l->len, &q, why, sizeof why) < 0) {
        forward_refuse(c, 400, "invalid_argument", "%s", why);
        shell_done(c, "refused", t0, why);
        goto cleanup;
    }
    if (runtime_files_target(f->rt, c->sandbox_id, f->worker_name, ref, NULL, &err) < 0) {
        shell_done(c, forward_refuse_runtime(c, &err), t0, err.message);
        goto cleanup;
    }
    runtime_shell_req_t req = { .ref = ref, .argv = (const char *const *)q.argv, .argc = q.argc, .cols = q.cols,
                                .rows = q.rows, .tty = q.tty, .env = (const char *const *)q.env, .envc = q.envc,
                                .cwd = q.cwd };
    runtime_shell_early_t early;
    if (runtime_shell_open(f->rt, &req, &s->sh, &s->eng, &early, &err) < 0) {
        if (err.code == API_SANDBOX_EXITED)
            err.code = API_CONFLICT;
        shell_done(c, forward_refuse_runtime(c, &err), t0, err.message);
        goto cleanup;
    }
    char line[64];
    size_t n = forward_reply_format(line, sizeof line, 200, "ok", NULL);
    s->c = c;
    s->last_ms = time_mono_ms();
    s->cols = q.cols;
    s->rows = q.rows;
    s->tty = q.tty;
    shellframe_dec_init(&s->dec, SHELLFRAME_TO_WORKER);
    snprintf(s->why, sizeof s->why, "exited");
    if (forward_send_all(c, line, n) < 0 || (early.len && shell_send_output(s, early.data, early.len) < 0)) {
        shell_done(c, "aborted", t0, "the controller went away");
        goto cleanup;
    }
    int r = shell_relay(s);
    if (r == 1) {
        int code = -1;
        if (runtime_shell_exit_code(f->rt, s->sh, &code, &err) < 0)
            log_warn(FORWARD_COMPONENT, "shell in sandbox %s: %s", c->sandbox_id, err.message);
        unsigned char ex[SHELLFRAME_HEADER_BYTES + 4];
        shellframe_exit(ex, code);
        if (forward_send_all(c, ex, sizeof ex) == 0)
            forward_linger_bytes(c, SHELL_LINGER_BYTES);
        snprintf(why, sizeof why, "exit code %d", code);
        shell_done(c, "exited", t0, why);
    } else {
        shell_done(c, r == 0 ? "aborted" : r == SBX_EINVAL ? "refused" : "error", t0, s->why);
    }
cleanup:
    if (s)
        runtime_shell_close(f->rt, s->sh);
    forward_shell_req_release(&q);
    free(l);
    free(s);
}
