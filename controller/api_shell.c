/* POST /v1/sandboxes/{id}/shell: an interactive terminal in a running
 * sandbox. The client asks with Connection: Upgrade, Upgrade:
 * sandbox-shell and no body (argv, cols, rows, tty, env, cwd in the
 * query; tty=false is a command with its stdin streamed and its stdout and
 * stderr apart, `sandbox exec -i` with a large stdin); apiconn.c
 * hands every byte after that head to this module. The controller signs a
 * shell grant bound to the session's request line (common/grant.h),
 * connects to the worker's forwarder (worker/forward_shell.c) and, once the
 * worker answers 200, answers 101 Switching Protocols itself and relays
 * frames (common/shellframe.h) both ways, checking each frame's type and
 * size but not reading DATA, each side not read while
 * SBX_FILES_STREAM_HIGH_WATER waits to be written on the other. The
 * connection never goes back to evhttp: at the end (the worker's EXIT
 * frame, either side closing, shell_idle_timeout_seconds without a byte,
 * its token revoked: the last two with a line saying so) it is
 * closed, and the session recorded as an exec operation with its exit code
 * (store_shell_record). The protocol is docs/api.md's "Shell".
 *
 * Everything runs on the request's HTTP thread; nothing blocks. */
#include "api.h"
#include "apiconn.h"
#include "db.h"
#include "grant.h"
#include "ids.h"
#include "jsonx.h"
#include "limits.h"
#include "log.h"
#include "proxy.h"
#include "shellframe.h"
#include "store.h"
#include "tlsbev.h"
#include "utf8.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/util.h>
#include <stdarg.h>
#include <sys/queue.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define SHELL_COMPONENT      "shell"
#define SHELL_SWEEP_SECONDS  5
#define SHELL_DEFAULT_COLS   80
#define SHELL_DEFAULT_ROWS   24
#define SHELL_LINGER_MS      1000

typedef enum {
    SH_CONNECT,   /* connecting to the worker */
    SH_HEAD,      /* waiting for the worker's line */
    SH_RELAY,     /* 101 sent: frames both ways */
    SH_ENDING,    /* the worker is gone; the client's last bytes drain, then it is closed */
    SH_LINGER,    /* all sent, our side shut: the client's bytes still coming are dropped
                   * for SHELL_LINGER_MS (a close with unread bytes resets the
                   * connection, and the EXIT frame may not have left yet) */
} sh_state_t;

typedef struct shell_sess {
    req_t *rq;
    struct evhttp_connection *evcon;  /* the client's */
    struct bufferevent *cbev;         /* the client's bufferevent (evhttp's) */
    struct evbuffer_cb_entry *out_cb; /* on its output: drained */
    apiconn_t *ac;                    /* the client's connection record (its raw bytes) */
    struct bufferevent *up;           /* the worker */
    struct event *sweep;              /* idle bound */
    struct event *kick;               /* work outside the buffers' callbacks */
    sh_state_t state;
    bool up_paused;                   /* not reading the worker: the client is behind */
    shellframe_dec_t *cdec, *wdec;    /* client -> worker, worker -> client */
    char sandbox_id[SBX_ID_MAX];
    char **argv;
    size_t argc;
    bool tty;                         /* false: no terminal (the query's tty=false) */
    json_object *env;                 /* the query's env=K=V as an exec's env object, or NULL */
    char *cwd;                        /* the query's cwd, or NULL */
    int exit_code;                    /* -1 until the EXIT frame */
    bool recorded;
    int64_t t0_ms, progress_ms;
    int64_t idle_ms;                  /* shell_idle_timeout_seconds */
    char token_id[SBX_ID_MAX];        /* the session's token: revoked, the session ends */
    tenantcap_hold_t tcap;            /* its tenant's share taken (transfers, shells, worker connections) */
    struct shell_sess *prev, *next;
} shell_sess_t;

static __thread shell_sess_t *thread_shells;

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the session's life ------------------------------------------------- */

static void sh_unlink(shell_sess_t *sh)
{
    if (sh->prev)
        sh->prev->next = sh->next;
    else if (thread_shells == sh)
        thread_shells = sh->next;
    if (sh->next)
        sh->next->prev = sh->prev;
    sh->prev = sh->next = NULL;
}

/* The session as an exec operation, once, after the 101. */
static void sh_record(shell_sess_t *sh)
{
    if (sh->recorded)
        return;
    sh->recorded = true;
    req_t *rq = sh->rq;
    if (!rq || http_db(rq) < 0)
        return;
    api_error_t err;
    char op_id[SBX_ID_MAX];
    shell_record_t rec = { .sandbox_id = sh->sandbox_id, .argv = (const char *const *)sh->argv, .argc = sh->argc,
                           .tty = sh->tty, .exit_code = sh->exit_code, .duration_ms = mono_ms() - sh->t0_ms,
                           .created_by = rq->auth.token_id };
    if (store_shell_record(rq->db, &rq->ctl->lim, &rec, op_id, &err) < 0)
        log_warn(SHELL_COMPONENT, "sandbox %s: cannot record the shell session: %s", sh->sandbox_id, err.message);
    else
        log_info(SHELL_COMPONENT, "shell in sandbox %s ended: exit code %d, %lld ms, operation %s", sh->sandbox_id,
                 sh->exit_code, (long long)rec.duration_ms, op_id);
}

/* Frees everything but the request (and the client's connection). */
static void sh_free(shell_sess_t *sh)
{
    sh_unlink(sh);
    tenantcap_release(&sh->tcap);
    if (sh->ac) {
        apiconn_stream_end(sh->ac); /* the rest is never read: the connection closes */
        sh->ac = NULL;
    }
    if (sh->out_cb && sh->cbev)
        evbuffer_remove_cb_entry(bufferevent_get_output(sh->cbev), sh->out_cb);
    if (sh->up)
        bufferevent_free(sh->up);
    if (sh->sweep)
        event_free(sh->sweep);
    if (sh->kick)
        event_free(sh->kick);
    if (sh->evcon)
        apiconn_set_closecb(sh->evcon, NULL, NULL);
    for (size_t i = 0; sh->argv && i < sh->argc; i++)
        free(sh->argv[i]);
    free(sh->argv);
    if (sh->env)
        json_object_put(sh->env);
    free(sh->cwd);
    free(sh->cdec);
    free(sh->wdec);
    free(sh);
}

/* Before the 101: an ordinary error answer (the connection then closes). */
static void sh_fail(shell_sess_t *sh, api_code_t code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void sh_fail(shell_sess_t *sh, api_code_t code, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    req_t *rq = sh->rq;
    log_info(SHELL_COMPONENT, "shell in sandbox %s refused: %s", sh->sandbox_id, msg);
    sh_free(sh);
    http_reply_error(rq, code, "%s", msg);
}

/* After the 101: tells the client why the controller ends the session, as
 * the terminal's output (DATA) or, without one, the command's stderr; the
 * client's output holds whole frames only, so one more is in step. */
static void sh_notice(shell_sess_t *sh, const char *why)
{
    if (sh->state != SH_RELAY || !sh->cbev)
        return;
    char msg[256];
    int n = snprintf(msg, sizeof msg, "%ssandbox: the controller closed this session: %s%s", sh->tty ? "\r\n" : "",
                     why, sh->tty ? "\r\n" : "\n");
    if (n < 0)
        return;
    size_t len = (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1;
    unsigned char hdr[SHELLFRAME_HEADER_BYTES];
    shellframe_header(hdr, sh->tty ? SHELLFRAME_DATA : SHELLFRAME_STDERR, (uint32_t)len);
    struct evbuffer *out = bufferevent_get_output(sh->cbev);
    evbuffer_add(out, hdr, sizeof hdr);
    evbuffer_add(out, msg, len);
}

/* After the 101: the session is over; the client's connection is closed
 * (from the loop, outside any of its callbacks) once what it was sent has
 * drained, and the request dropped (client_close_cb). */
static void sh_end(shell_sess_t *sh, const char *why)
{
    log_debug(SHELL_COMPONENT, "shell in sandbox %s ends: %s", sh->sandbox_id, why);
    sh_record(sh);
    if (sh->up) {
        bufferevent_free(sh->up);
        sh->up = NULL;
    }
    sh->state = SH_ENDING;
    event_active(sh->kick, EV_TIMEOUT, 1);
}

/* The worker's refusal line as the client's error. */
static void sh_refused(shell_sess_t *sh, const proxy_worker_reply_t *rep)
{
    api_code_t code = API_UNAVAILABLE;
    switch (rep->status) {
    case 400: code = API_INVALID_ARGUMENT; break;
    case 404: code = API_NOT_FOUND; break;
    case 409: code = API_CONFLICT; break;
    default: break;
    }
    char *clean = utf8_sanitize(rep->msg, strlen(rep->msg));
    if (code == API_UNAVAILABLE)
        sh_fail(sh, code, "the worker running the sandbox refused: %s", clean ? clean : rep->code);
    else
        sh_fail(sh, code, "%s", clean ? clean : rep->code);
    free(clean);
}

/* ---- the relay ---------------------------------------------------------- */

/* Moves whole frames from in to out through dec while out has room: 1 for
 * an EXIT frame passed (worker -> client), 0, or SBX_EINVAL for a frame the
 * direction does not take. *ret_code gets an EXIT frame's code. */
static int sh_frames(shellframe_dec_t *dec, struct evbuffer *in, struct evbuffer *out, int64_t *progress,
                     int *ret_code)
{
    while (evbuffer_get_length(in) > 0 && evbuffer_get_length(out) < SBX_FILES_STREAM_HIGH_WATER) {
        size_t avail = evbuffer_get_length(in), take = avail < SHELLFRAME_MAX ? avail : SHELLFRAME_MAX;
        unsigned char *p = evbuffer_pullup(in, (ev_ssize_t)take);
        if (!p)
            return SBX_EINVAL;
        size_t used = 0;
        shellframe_t f;
        int r = shellframe_next(dec, p, take, &used, &f);
        evbuffer_drain(in, used);
        if (r < 0)
            return r;
        if (r == 0)
            continue;
        unsigned char hdr[SHELLFRAME_HEADER_BYTES];
        shellframe_header(hdr, f.type, f.len);
        evbuffer_add(out, hdr, sizeof hdr);
        evbuffer_add(out, f.data, f.len);
        *progress = mono_ms();
        if (f.type == SHELLFRAME_EXIT) {
            *ret_code = f.exit_code;
            return 1;
        }
    }
    return 0;
}

/* The client's frames on to the worker. */
static void sh_pump_client(shell_sess_t *sh)
{
    if (sh->state != SH_RELAY || !sh->ac)
        return;
    struct evbuffer *in = apiconn_stream_input(sh->ac);
    int code = 0;
    int r = in ? sh_frames(sh->cdec, in, bufferevent_get_output(sh->up), &sh->progress_ms, &code) : SBX_EINVAL;
    if (r < 0) {
        log_info(SHELL_COMPONENT, "sandbox %s: the client sent a malformed shell frame", sh->sandbox_id);
        sh_end(sh, "a malformed frame from the client");
        return;
    }
    apiconn_stream_drained(sh->ac);
}

/* The worker's frames on to the client. */
static void sh_pump_worker(shell_sess_t *sh)
{
    if (sh->state != SH_RELAY || !sh->up)
        return;
    struct evbuffer *out = bufferevent_get_output(sh->cbev);
    int code = -1;
    int r = sh_frames(sh->wdec, bufferevent_get_input(sh->up), out, &sh->progress_ms, &code);
    if (r < 0) {
        log_warn(SHELL_COMPONENT, "the worker sent a malformed shell frame for sandbox %s", sh->sandbox_id);
        sh_end(sh, "a malformed frame from the worker");
        return;
    }
    if (r == 1) {
        sh->exit_code = code;
        sh_end(sh, "the command exited");
        return;
    }
    if (evbuffer_get_length(out) >= SBX_FILES_STREAM_HIGH_WATER && !sh->up_paused) {
        sh->up_paused = true;
        bufferevent_disable(sh->up, EV_READ);
    }
}

/* Lingering: what the client sent is dropped, and more read. */
static void sh_drop_client(shell_sess_t *sh)
{
    struct evbuffer *in = sh->ac ? apiconn_stream_input(sh->ac) : NULL;
    if (!in)
        return;
    evbuffer_drain(in, evbuffer_get_length(in));
    apiconn_stream_drained(sh->ac);
}

/* The client's output changed: work to do once it drained. */
static void client_out_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    shell_sess_t *sh = arg;
    if (info->n_deleted == 0)
        return;
    size_t n = evbuffer_get_length(buf);
    if ((sh->up_paused && n < SBX_FILES_STREAM_HIGH_WATER / 2) || (sh->state == SH_ENDING && n == 0))
        event_active(sh->kick, EV_TIMEOUT, 1);
}

static void kick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    shell_sess_t *sh = arg;
    if (sh->state == SH_ENDING) {
        if (sh->cbev && evbuffer_get_length(bufferevent_get_output(sh->cbev)) > 0)
            return; /* client_out_cb kicks again once it drained */
        /* All sent: our side shut, the client's bytes dropped for a while,
         * then the connection freed (the kick again, as a timer). */
        sh->state = SH_LINGER;
        evutil_socket_t fd = sh->cbev ? bufferevent_getfd(sh->cbev) : -1;
        if (fd >= 0)
            shutdown(fd, SHUT_WR);
        sh_drop_client(sh);
        struct timeval lt = { SHELL_LINGER_MS / 1000, (SHELL_LINGER_MS % 1000) * 1000 };
        evtimer_add(sh->kick, &lt);
        return;
    }
    if (sh->state == SH_LINGER) {
        /* Frees the connection: client_close_cb drops the request and frees sh. */
        struct evhttp_connection *evcon = sh->evcon;
        if (evcon)
            evhttp_connection_free(evcon);
        return;
    }
    if (sh->up_paused && evbuffer_get_length(bufferevent_get_output(sh->cbev)) < SBX_FILES_STREAM_HIGH_WATER / 2) {
        sh->up_paused = false;
        bufferevent_enable(sh->up, EV_READ);
        sh_pump_worker(sh);
    }
}

static void client_in_cb(void *arg)
{
    shell_sess_t *sh = arg;
    if (sh->state == SH_LINGER)
        sh_drop_client(sh);
    else
        sh_pump_client(sh);
}

/* ---- the worker's side -------------------------------------------------- */

/* The worker's 200: the client's 101, then frames. */
static void sh_begin(shell_sess_t *sh)
{
    sh->state = SH_RELAY;
    bufferevent_set_timeouts(sh->up, NULL, NULL); /* the sweep bounds idleness */
    struct evbuffer *out = bufferevent_get_output(sh->cbev);
    evbuffer_add_printf(out, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n",
                        APICONN_SHELL_UPGRADE);
    sh->out_cb = evbuffer_add_cb(out, client_out_cb, sh);
    /* evhttp writes only while it answers: the raw bytes need it on. */
    bufferevent_enable(sh->cbev, EV_WRITE);
    sh->progress_ms = mono_ms();
    sh_pump_worker(sh);
    if (sh->state == SH_RELAY)
        sh_pump_client(sh);
}

static void up_read_cb(struct bufferevent *bev, void *arg)
{
    shell_sess_t *sh = arg;
    if (sh->state == SH_RELAY) {
        sh_pump_worker(sh);
        return;
    }
    proxy_worker_reply_t rep;
    int r = proxy_worker_reply_read(bufferevent_get_input(bev), &rep);
    if (r < 0) {
        sh_fail(sh, API_BAD_GATEWAY, "the worker answered something else than a forward reply");
        return;
    }
    if (r == 0)
        return;
    if (rep.status != 200) {
        sh_refused(sh, &rep);
        return;
    }
    sh_begin(sh);
}

static void up_write_cb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    sh_pump_client(arg);
}

static void up_event_cb(struct bufferevent *bev, short what, void *arg)
{
    shell_sess_t *sh = arg;
    if (what & BEV_EVENT_CONNECTED) {
        evutil_socket_t fd = bufferevent_getfd(sh->up);
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
        sh->state = SH_HEAD;
        return;
    }
    if (sh->state == SH_RELAY) {
        sh_pump_worker(sh); /* the last frames first */
        if (sh->state == SH_RELAY)
            sh_end(sh, "the worker connection ended without an exit code");
        return;
    }
    if (sh->state == SH_HEAD) {
        proxy_worker_reply_t rep;
        if (proxy_worker_reply_read(bufferevent_get_input(bev), &rep) == 1) {
            if (rep.status != 200)
                sh_refused(sh, &rep);
            else
                sh_fail(sh, API_UNAVAILABLE, "the worker connection ended early");
            return;
        }
    }
    char why[200];
    tls_bev_failure(bev, why, sizeof why);
    if (why[0] && !(what & BEV_EVENT_TIMEOUT)) {
        log_warn(SHELL_COMPONENT, "sandbox %s: TLS to the worker's forwarder failed: %s", sh->sandbox_id, why);
        sh_fail(sh, API_UNAVAILABLE, "the worker running the sandbox failed TLS verification");
        return;
    }
    sh_fail(sh, API_UNAVAILABLE, "%s",
            what & BEV_EVENT_TIMEOUT    ? "the worker running the sandbox did not answer in time"
            : sh->state == SH_CONNECT ? "cannot reach the worker running the sandbox"
                                      : "the worker connection ended early");
}

/* ---- the client going away, and idleness -------------------------------- */

static void client_close_cb(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    shell_sess_t *sh = arg;
    sh->evcon = NULL; /* being freed: no close callback to clear */
    req_t *rq = sh->rq;
    bool attached = evhttp_request_get_connection(rq->ev) != NULL;
    bool upgraded = sh->state == SH_RELAY || sh->state == SH_ENDING || sh->state == SH_LINGER;
    if (upgraded)
        sh_record(sh);
    if (sh->ac) {
        apiconn_stream_end(sh->ac); /* the record goes with the connection */
        sh->ac = NULL;
    }
    if (sh->out_cb && sh->cbev)
        evbuffer_remove_cb_entry(bufferevent_get_output(sh->cbev), sh->out_cb);
    sh->out_cb = NULL;
    sh->cbev = NULL;
    sh_free(sh);
    if (upgraded)
        http_reply_upgraded(rq); /* also when the client closed first (detached) */
    else if (attached)
        http_reply_dropped(rq);
    else
        http_reply_error(rq, API_UNAVAILABLE, "the client went away"); /* frees the detached request */
}

static void sweep_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    shell_sess_t *sh = arg;
    if (sh->state != SH_RELAY)
        return;
    if (mono_ms() - sh->progress_ms >= sh->idle_ms) {
        char why[96];
        snprintf(why, sizeof why, "no bytes either way for %lld s (shell_idle_timeout_seconds)",
                 (long long)(sh->idle_ms / 1000));
        sh_notice(sh, why);
        sh_end(sh, "no bytes either way for the idle bound");
        return;
    }
    /* A revoked (or expired) token's session ends within a sweep, on
     * whichever controller holds it (the revocation reaches every cache). */
    if (sh->token_id[0] && http_db(sh->rq) == 0 && auth_token_live(sh->rq->db, sh->token_id) == 0) {
        log_info(SHELL_COMPONENT, "shell in sandbox %s ends: token %s is revoked or expired", sh->sandbox_id,
                 sh->token_id);
        sh_notice(sh, "its token was revoked or expired");
        sh_end(sh, "its token was revoked or expired");
    }
}

/* ---- the handler -------------------------------------------------------- */

/* A size query parameter: absent (the default) or 1..SHELLFRAME_SIZE_MAX. */
static int parse_size(const char *v, const char *name, unsigned dflt, unsigned *ret, api_error_t *err)
{
    *ret = dflt;
    if (!v)
        return 0;
    unsigned n = 0;
    size_t len = strlen(v);
    bool ok = len >= 1 && len <= 4;
    for (size_t i = 0; ok && i < len; i++) {
        ok = v[i] >= '0' && v[i] <= '9';
        n = n * 10 + (unsigned)(v[i] - '0');
    }
    if (!ok || n < 1 || n > SHELLFRAME_SIZE_MAX)
        return api_error_set(err, API_INVALID_ARGUMENT, "%s must be a whole number from 1 to %d", name,
                             SHELLFRAME_SIZE_MAX);
    *ret = n;
    return 0;
}

/* The argv query parameters in order (none: /bin/sh) into sh. */
static int parse_argv(req_t *rq, shell_sess_t *sh, api_error_t *err)
{
    size_t n = 0;
    struct evkeyval *kv;
    TAILQ_FOREACH(kv, &rq->query, next)
        n += strcmp(kv->key, "argv") == 0;
    if (n > SBX_MAX_ARGV)
        return api_error_set(err, API_INVALID_ARGUMENT, "argv has more than %d entries", SBX_MAX_ARGV);
    sh->argv = calloc(n ? n + 1 : 2, sizeof *sh->argv);
    if (!sh->argv)
        return api_error_set(err, API_INTERNAL, "out of memory");
    if (n == 0) {
        sh->argv[0] = strdup("/bin/sh");
        sh->argc = sh->argv[0] ? 1 : 0;
        return sh->argc ? 0 : api_error_set(err, API_INTERNAL, "out of memory");
    }
    TAILQ_FOREACH(kv, &rq->query, next) {
        if (strcmp(kv->key, "argv") != 0)
            continue;
        if (!kv->value[0])
            return api_error_set(err, API_INVALID_ARGUMENT, "each argv entry must be a non-empty string");
        if (!utf8_valid(kv->value, strlen(kv->value)))
            return api_error_set(err, API_INVALID_ARGUMENT, "argv entries must be UTF-8");
        if (!(sh->argv[sh->argc] = strdup(kv->value)))
            return api_error_set(err, API_INTERNAL, "out of memory");
        sh->argc++;
    }
    return 0;
}

/* The query's tty (true|false; default true), env=K=V (repeated) and cwd
 * into sh, checked as an exec's (kv_list_from_json, an absolute cwd). */
static int parse_exec_opts(req_t *rq, shell_sess_t *sh, api_error_t *err)
{
    const char *tty = http_query(rq, "tty");
    sh->tty = true;
    if (tty && strcmp(tty, "false") == 0)
        sh->tty = false;
    else if (tty && strcmp(tty, "true") != 0)
        return api_error_set(err, API_INVALID_ARGUMENT, "tty must be true or false");
    struct evkeyval *kv;
    TAILQ_FOREACH(kv, &rq->query, next) {
        if (strcmp(kv->key, "env") != 0)
            continue;
        const char *eq = strchr(kv->value, '=');
        if (!eq || eq == kv->value || !utf8_valid(kv->value, strlen(kv->value)))
            return api_error_set(err, API_INVALID_ARGUMENT, "each env must be KEY=VALUE in UTF-8");
        if (!sh->env && !(sh->env = json_object_new_object()))
            return api_error_set(err, API_INTERNAL, "out of memory");
        char key[SBX_MAX_KEY_BYTES + 1];
        size_t kl = (size_t)(eq - kv->value);
        if (kl > SBX_MAX_KEY_BYTES)
            return api_error_set(err, API_INVALID_ARGUMENT, "an env key is longer than %d bytes", SBX_MAX_KEY_BYTES);
        memcpy(key, kv->value, kl);
        key[kl] = '\0';
        jsonx_add_str(sh->env, key, eq + 1);
    }
    kv_list_t checked;
    if (kv_list_from_json(sh->env, "env", true, SBX_MAX_ENV, &checked, err) < 0)
        return SBX_EINVAL;
    kv_list_release(&checked);
    const char *cwd = http_query(rq, "cwd");
    if (cwd) {
        if (!spec_cwd_ok(cwd, strlen(cwd)))
            return api_error_set(err, API_INVALID_ARGUMENT, "cwd must be an absolute path without control bytes");
        if (!(sh->cwd = strdup(cwd)))
            return api_error_set(err, API_INTERNAL, "out of memory");
    }
    return 0;
}

/* The request line: {"op":"shell","argv":[...],"cols":N,"rows":N} with
 * "tty":false, "env", "cwd" when the query set them. */
static char *shell_line(const shell_sess_t *sh, unsigned cols, unsigned rows)
{
    json_object *o = json_object_new_object(), *a = json_object_new_array();
    for (size_t i = 0; i < sh->argc; i++)
        json_object_array_add(a, json_object_new_string(sh->argv[i]));
    jsonx_add(o, "op", json_object_new_string("shell"));
    jsonx_add(o, "argv", a);
    jsonx_add(o, "cols", json_object_new_int((int)cols));
    jsonx_add(o, "rows", json_object_new_int((int)rows));
    if (!sh->tty)
        jsonx_add_bool(o, "tty", false);
    if (sh->env)
        jsonx_add(o, "env", json_object_get(sh->env));
    if (sh->cwd)
        jsonx_add_str(o, "cwd", sh->cwd);
    char *s = jsonx_dump(o);
    json_object_put(o);
    return s;
}

/* Connects to the worker with the preamble and the request line; the
 * session owns rq from here (a failure is answered). */
static void sh_start(shell_sess_t *sh, const logs_source_t *src, const char *line)
{
    struct event_base *base = evhttp_connection_get_base(sh->evcon);
    api_error_t err;
    sh->sweep = event_new(base, -1, EV_PERSIST, sweep_cb, sh);
    sh->kick = event_new(base, -1, 0, kick_cb, sh);
    if (!sh->sweep || !sh->kick) {
        sh_fail(sh, API_INTERNAL, "out of memory");
        return;
    }
    struct timeval st = { SHELL_SWEEP_SECONDS, 0 };
    evtimer_add(sh->sweep, &st);
    api_worker_open_t o = { .rq = sh->rq, .base = base, .src = src, .sandbox_id = sh->sandbox_id,
                            .purpose = GRANT_SHELL, .line = line, .read_timeout = true, .readcb = up_read_cb,
                            .writecb = up_write_cb, .eventcb = up_event_cb, .arg = sh };
    if (api_worker_open(&o, &sh->up, &err) < 0)
        sh_fail(sh, err.code, "%s", err.message);
}

void api_sandbox_shell(req_t *rq, const char *id)
{
    api_error_t err;
    unsigned cols = 0, rows = 0;
    const char *framing = http_header(rq, APICONN_STREAM_HEADER);
    struct evhttp_connection *evcon = evhttp_request_get_connection(rq->ev);
    if (!framing || strcmp(framing, "raw") != 0 || !rq->conn || !evcon) {
        http_reply_error(rq, API_INVALID_ARGUMENT, "a shell is an upgraded connection: send Connection: Upgrade "
                                                   "and Upgrade: %s, and no body", APICONN_SHELL_UPGRADE);
        return;
    }
    /* Until the stream is taken, an answer closes the connection (the
     * raw bytes after the head are never read as a request). */
    if (parse_size(http_query(rq, "cols"), "cols", SHELL_DEFAULT_COLS, &cols, &err) < 0 ||
        parse_size(http_query(rq, "rows"), "rows", SHELL_DEFAULT_ROWS, &rows, &err) < 0) {
        http_reply_api_error(rq, &err);
        return;
    }
    shell_sess_t *sh = calloc(1, sizeof *sh);
    if (!sh || !(sh->cdec = malloc(sizeof *sh->cdec)) || !(sh->wdec = malloc(sizeof *sh->wdec))) {
        if (sh)
            free(sh->cdec);
        free(sh);
        http_reply_error(rq, API_INTERNAL, "out of memory");
        return;
    }
    sh->rq = rq;
    sh->exit_code = -1;
    sh->state = SH_CONNECT;
    sh->idle_ms = cfg_int(&rq->ctl->cfg, CFG_SHELL_IDLE_TIMEOUT_SECONDS) * 1000;
    snprintf(sh->token_id, sizeof sh->token_id, "%s", rq->auth.token_id);
    sh->t0_ms = sh->progress_ms = mono_ms();
    snprintf(sh->sandbox_id, sizeof sh->sandbox_id, "%s", id);
    shellframe_dec_init(sh->cdec, SHELLFRAME_TO_WORKER);
    shellframe_dec_init(sh->wdec, SHELLFRAME_TO_CLIENT);
    logs_source_t src;
    char *line = NULL;
    if (parse_argv(rq, sh, &err) < 0 || parse_exec_opts(rq, sh, &err) < 0) {
        sh_free(sh);
        http_reply_api_error(rq, &err);
        return;
    }
    if (!(line = shell_line(sh, cols, rows)) || strlen(line) + 2 > SBX_FILES_REQUEST_MAX) {
        sh_free(sh);
        http_reply_error(rq, line ? API_INVALID_ARGUMENT : API_INTERNAL, "%s",
                         line ? "argv, env and cwd are too long for a shell (at most about 8 KiB as JSON)"
                              : "out of memory");
        free(line);
        return;
    }
    if (api_data_source(rq, id, "a shell runs", &src) < 0) {
        sh_free(sh); /* answered */
        free(line);
        return;
    }
    if (api_tenant_take(rq, &src, TCAP_BIT(TCAP_TRANSFERS) | TCAP_BIT(TCAP_SHELLS) | TCAP_BIT(TCAP_WORKER_CONNS),
                        &sh->tcap) < 0) {
        sh_free(sh); /* answered */
        store_logs_source_release(&src);
        free(line);
        return;
    }
    sh->next = thread_shells;
    if (thread_shells)
        thread_shells->prev = sh;
    thread_shells = sh;
    sh->evcon = evcon;
    sh->cbev = evhttp_connection_get_bufferevent(evcon);
    apiconn_set_closecb(evcon, client_close_cb, sh);
    if (apiconn_stream_begin(rq->conn, client_in_cb, sh) < 0) {
        sh_fail(sh, API_UNAVAILABLE, "the shell's connection cannot be read");
    } else {
        sh->ac = rq->conn;
        sh_start(sh, &src, line);
    }
    store_logs_source_release(&src);
    free(line);
}

void api_shell_stop_thread(void)
{
    while (thread_shells) {
        shell_sess_t *sh = thread_shells;
        if (sh->state == SH_RELAY || sh->state == SH_ENDING || sh->state == SH_LINGER) {
            sh_record(sh);
            struct evhttp_connection *evcon = sh->evcon;
            if (evcon)
                evhttp_connection_free(evcon); /* client_close_cb frees sh */
            else
                sh_free(sh);
        } else {
            sh_fail(sh, API_UNAVAILABLE, "the controller is stopping");
        }
    }
}
