/* The worker's health endpoint: a poll loop on one thread serving
 * /healthz, /readyz and /metrics, and a thread checking the runtime in the
 * background (see health.h). */
#include "health.h"
#include "httphead.h"
#include "errors.h"
#include "jsonx.h"
#include "log.h"
#include "metrics.h"
#include "netaddr.h"
#include "sbuf.h"
#include "timeutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HEALTH_COMPONENT       "worker"
#define HEALTH_ADDRESS_MAX     256
#define HEALTH_LISTEN_BACKLOG  64
/* After the answer, what the client still sends (a body we never read) is
 * read and dropped for this long, at most this much, before the close:
 * closing with unread bytes would reset the connection under the answer. */
#define HEALTH_LINGER_MS       1000
#define HEALTH_LINGER_BYTES    (64u * 1024u)
/* Connections accepted per pass of the loop, so a flood cannot starve the
 * ones already open. */
#define HEALTH_ACCEPT_BURST    16
/* accept() out of descriptors or memory: the pause before trying again. */
#define HEALTH_ACCEPT_BACKOFF_MS 100
/* The answer when every connection is busy writing (nothing to close). */
#define HEALTH_BUSY_BODY "{\"error\":{\"code\":\"unavailable\",\"message\":\"too many health check connections\"}}\n"

struct health {
    char listen[HEALTH_ADDRESS_MAX];     /* as configured, for messages */
    char address[HEALTH_ADDRESS_MAX];    /* health_address(); set by health_start */
    struct sockaddr_storage bind_addr;
    socklen_t bind_len;
    runtime_t *rt;
    int64_t controller_timeout_ms;
    health_controller_fn controller;
    void *controller_ud;

    int listen_fd;
    int stop_pipe[2];            /* health_stop writes a byte to [1] */
    pthread_t server, checker;
    bool server_started, checker_started;
    bool started, stopped;

    pthread_mutex_t mu;
    pthread_cond_t cond;         /* CLOCK_MONOTONIC; wakes the checker to stop */
    bool stop_checker;
    bool stopping;               /* /readyz answers 503 */
    health_runtime_status_t runtime;
};

typedef enum { HEALTH_CONN_READING = 0, HEALTH_CONN_WRITING, HEALTH_CONN_LINGER } health_conn_state_t;

/* One connection, owned by the server thread. */
typedef struct health_conn {
    int fd;                      /* non-blocking */
    health_conn_state_t state;
    int64_t accepted_ms;
    int64_t deadline_ms;         /* of the current state */
    char in[HEALTH_HEAD_MAX];
    size_t in_len;
    char *out;                   /* the answer, malloc'd */
    size_t out_len, out_off;
    size_t dropped;              /* bytes read and dropped while lingering */
} health_conn_t;

/* ---- pure parts -------------------------------------------------------- */

size_t health_head_end(const char *buf, size_t len) { return httphead_end(buf, len, true); }

int health_request_parse(const char *head, size_t len, health_request_t *ret, char *why, size_t whylen)
{
    static const httphead_opts_t opts = { .bare_lf = true, .keep_headers = false };
    health_request_t rq;
    httphead_t h;
    memset(&rq, 0, sizeof rq);
    char *copy = malloc(len + 1);
    if (!copy) {
        snprintf(why, whylen, "out of memory");
        return SBX_ENOMEM;
    }
    memcpy(copy, head, len);
    copy[len] = '\0';
    int r = httphead_parse(copy, len, &opts, &h, why, whylen);
    if (r == 0) {
        snprintf(rq.method, sizeof rq.method, "%s", h.method);
        size_t pl = strcspn(h.target, "?");
        if (pl < sizeof rq.path)
            memcpy(rq.path, h.target, pl);
        rq.head_only = strcmp(rq.method, "HEAD") == 0;
        *ret = rq;
    }
    free(copy);
    return r;
}

static json_object *health_check_json(bool ok, const char *error)
{
    json_object *o = json_object_new_object();
    if (!o)
        return NULL;
    jsonx_add_bool(o, "ok", ok);
    if (!ok)
        jsonx_add_str(o, "error", error);
    return o;
}

json_object *health_readiness(const health_runtime_status_t *rt, const health_controller_status_t *ctl,
                              int64_t controller_timeout_ms, bool stopping, int64_t now_ms, int *ret_status)
{
    char why[512];
    json_object *checks = json_object_new_object();
    json_object *root = json_object_new_object();
    if (!checks || !root) {
        json_object_put(checks);
        json_object_put(root);
        return NULL;
    }

    /* The runtime: the background check's last result, unless it is old. */
    bool rt_ok = rt->checked && rt->ok && now_ms - rt->checked_ms <= HEALTH_CHECK_STALE_MS;
    if (!rt->checked)
        snprintf(why, sizeof why, "the runtime has not been checked yet");
    else if (!rt->ok)
        snprintf(why, sizeof why, "%s", rt->error[0] ? rt->error : "the runtime does not answer");
    else
        snprintf(why, sizeof why, "the last runtime check finished %lld s ago (checks are every %d s)",
                 (long long)((now_ms - rt->checked_ms) / 1000), HEALTH_CHECK_INTERVAL_MS / 1000);
    json_object *r = health_check_json(rt_ok, why);
    if (r && rt->checked)
        jsonx_add_int(r, "checked_seconds_ago", (now_ms - rt->checked_ms) / 1000);
    jsonx_add(checks, "runtime", r);

    /* The controller: registered, and it answered recently. */
    int64_t ago = ctl->last_contact_ms > 0 ? (now_ms - ctl->last_contact_ms) / 1000 : -1;
    bool ctl_ok = ctl->registered && ctl->last_contact_ms > 0 && now_ms - ctl->last_contact_ms <= controller_timeout_ms;
    const char *sep = ctl->last_error[0] ? ": last error: " : "";
    if (!ctl->registered)
        snprintf(why, sizeof why, "not registered with the controller%s%.255s", sep, ctl->last_error);
    else if (ago < 0)
        snprintf(why, sizeof why, "no answer from the controller yet%s%.255s", sep, ctl->last_error);
    else
        snprintf(why, sizeof why, "no answer from the controller for %lld s (the limit is %lld s)%s%.255s",
                 (long long)ago, (long long)(controller_timeout_ms / 1000), sep, ctl->last_error);
    json_object *c = health_check_json(ctl_ok, why);
    if (c && ctl->worker_id[0])
        jsonx_add_str(c, "worker_id", ctl->worker_id);
    if (c && ago >= 0)
        jsonx_add_int(c, "last_contact_seconds_ago", ago);
    jsonx_add(checks, "controller", c);

    if (stopping)
        jsonx_add(checks, "shutdown", health_check_json(false, "the worker is shutting down"));

    bool ready = rt_ok && ctl_ok && !stopping;
    jsonx_add_str(root, "status", ready ? "ready" : "unready");
    jsonx_add(root, "checks", checks);
    *ret_status = ready ? 200 : 503;
    return root;
}

/* ---- addresses --------------------------------------------------------- */

/* ---- answers ----------------------------------------------------------- */

static const char *health_reason(int status)
{
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default:  return "Internal Server Error";
    }
}

/* Sets c's answer: status line, headers and (unless head_only) body. On
 * allocation failure the connection just closes (out stays NULL). */
static void health_answer(health_conn_t *c, int status, const char *content_type, const char *extra_headers,
                          const char *body, size_t body_len, bool head_only)
{
    sbuf_t b;
    sbuf_init(&b, HEALTH_METRICS_MAX_BYTES + 1024);
    if (sbuf_printf(&b, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n"
                        "%sConnection: close\r\n\r\n", status, health_reason(status), content_type, body_len,
                    extra_headers ? extra_headers : "") < 0 ||
        (!head_only && body_len && sbuf_append(&b, body, body_len) < 0)) {
        sbuf_release(&b);
        return;
    }
    free(c->out);
    c->out = sbuf_detach(&b, &c->out_len);
    c->out_off = 0;
    sbuf_release(&b);
}

static void health_answer_json(health_conn_t *c, int status, json_object *o, const char *extra_headers,
                               bool head_only)
{
    char *text = o ? jsonx_dump(o) : NULL;
    if (text) {
        size_t n = strlen(text);
        /* a trailing newline, as curl users expect */
        char *nl = realloc(text, n + 2);
        if (nl) {
            text = nl;
            text[n++] = '\n';
            text[n] = '\0';
        }
        health_answer(c, status, "application/json", extra_headers, text, n, head_only);
    }
    free(text);
    json_object_put(o);
}

static void health_answer_error(health_conn_t *c, api_code_t code, const char *message, const char *extra_headers,
                                bool head_only)
{
    const api_code_info_t *info = api_code_info(code);
    health_answer_json(c, info->http_status, jsonx_error_body(info->name, message), extra_headers, head_only);
}

static void health_answer_metrics(health_conn_t *c, bool head_only)
{
    sbuf_t b;
    sbuf_init(&b, HEALTH_METRICS_MAX_BYTES);
    if (metrics_render(&b) < 0) {
        sbuf_release(&b);
        health_answer_error(c, API_INTERNAL, "the metrics do not fit in the answer", NULL, head_only);
        return;
    }
    health_answer(c, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, b.data ? b.data : "", b.len,
                  head_only);
    sbuf_release(&b);
}

static void health_answer_ready(health_t *h, health_conn_t *c, bool head_only)
{
    health_runtime_status_t rt;
    health_controller_status_t ctl;
    memset(&ctl, 0, sizeof ctl);
    pthread_mutex_lock(&h->mu);
    rt = h->runtime;
    bool stopping = h->stopping;
    pthread_mutex_unlock(&h->mu);
    h->controller(h->controller_ud, &ctl);
    int status = 503;
    json_object *o = health_readiness(&rt, &ctl, h->controller_timeout_ms, stopping, time_mono_ms(), &status);
    health_answer_json(c, status, o, NULL, head_only);
}

/* Answers the complete head in c->in[0, n). */
static void health_route(health_t *h, health_conn_t *c, size_t n)
{
    health_request_t rq;
    char why[160];
    if (health_request_parse(c->in, n, &rq, why, sizeof why) < 0) {
        health_answer_error(c, API_INVALID_ARGUMENT, why, NULL, false);
        return;
    }
    static const char *const paths[] = { "/healthz", "/readyz", "/metrics" };
    int which = -1;
    for (int i = 0; i < 3; i++)
        if (strcmp(rq.path, paths[i]) == 0)
            which = i;
    if (which < 0) {
        health_answer_error(c, API_NOT_FOUND, "no such path: this endpoint serves /healthz, /readyz and /metrics",
                            NULL, rq.head_only);
        return;
    }
    if (strcmp(rq.method, "GET") != 0 && !rq.head_only) {
        health_answer_error(c, API_METHOD_NOT_ALLOWED, "only GET and HEAD are allowed here", "Allow: GET, HEAD\r\n",
                            false);
        return;
    }
    if (which == 0) {
        json_object *o = json_object_new_object();
        jsonx_add_str(o, "status", "ok");
        health_answer_json(c, 200, o, NULL, rq.head_only);
    } else if (which == 1) {
        health_answer_ready(h, c, rq.head_only);
    } else {
        health_answer_metrics(c, rq.head_only);
    }
}

/* ---- the server loop --------------------------------------------------- */

static void health_conn_close(health_conn_t **slot)
{
    health_conn_t *c = *slot;
    if (!c)
        return;
    close(c->fd);
    free(c->out);
    free(c);
    *slot = NULL;
}

/* Moves c to writing its answer (or closes it when there is none). */
static void health_conn_respond(health_conn_t **slot)
{
    health_conn_t *c = *slot;
    if (!c->out) {
        health_conn_close(slot);
        return;
    }
    c->state = HEALTH_CONN_WRITING;
    c->deadline_ms = time_deadline_ms(HEALTH_WRITE_TIMEOUT_MS);
}

/* Sends what the socket takes; when all is sent, half-closes and lingers. */
static void health_conn_write(health_conn_t **slot)
{
    health_conn_t *c = *slot;
    while (c->out_off < c->out_len) {
        ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (w > 0) {
            c->out_off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        health_conn_close(slot);
        return;
    }
    shutdown(c->fd, SHUT_WR);
    c->state = HEALTH_CONN_LINGER;
    c->deadline_ms = time_deadline_ms(HEALTH_LINGER_MS);
}

/* Reads what arrived; answers once the head is complete or too long. */
static void health_conn_read(health_t *h, health_conn_t **slot)
{
    health_conn_t *c = *slot;
    if (c->state == HEALTH_CONN_LINGER) {
        char sink[4096];
        ssize_t n = recv(c->fd, sink, sizeof sink, 0);
        if (n > 0)
            c->dropped += (size_t)n;
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR) || c->dropped >= HEALTH_LINGER_BYTES)
            health_conn_close(slot);
        return;
    }
    ssize_t n = recv(c->fd, c->in + c->in_len, sizeof c->in - c->in_len, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        health_conn_close(slot);     /* gone before its request was complete */
        return;
    }
    c->in_len += (size_t)n;
    size_t end = health_head_end(c->in, c->in_len);
    if (end) {
        health_route(h, c, end);
    } else if (c->in_len == sizeof c->in) {
        char msg[96];
        snprintf(msg, sizeof msg, "the request head is longer than %d bytes", HEALTH_HEAD_MAX);
        health_answer_error(c, API_HEADERS_TOO_LARGE, msg, NULL, false);
    } else {
        return;
    }
    health_conn_respond(slot);
    if (*slot)
        health_conn_write(slot);
}

/* Takes one connection, making room when all slots are taken by closing
 * the oldest one still sending its head; refuses it when none is. */
static void health_accept(health_conn_t **conns, int fd)
{
    int free_slot = -1, oldest = -1;
    for (int i = 0; i < HEALTH_MAX_CONNECTIONS; i++) {
        if (!conns[i]) {
            if (free_slot < 0)
                free_slot = i;
        } else if (conns[i]->state == HEALTH_CONN_READING &&
                   (oldest < 0 || conns[i]->accepted_ms < conns[oldest]->accepted_ms)) {
            oldest = i;
        }
    }
    if (free_slot < 0 && oldest >= 0) {
        log_debug(HEALTH_COMPONENT, "health connections full: closed the oldest one still sending its request");
        health_conn_close(&conns[oldest]);
        free_slot = oldest;
    }
    health_conn_t *c = free_slot >= 0 ? calloc(1, sizeof *c) : NULL;
    if (!c) {
        char busy[256];
        int len = snprintf(busy, sizeof busy, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                           "Content-Length: %zu\r\nConnection: close\r\n\r\n%s", sizeof HEALTH_BUSY_BODY - 1,
                           HEALTH_BUSY_BODY);
        ssize_t w = send(fd, busy, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)w;
        close(fd);
        return;
    }
    c->fd = fd;
    c->state = HEALTH_CONN_READING;
    c->accepted_ms = time_mono_ms();
    c->deadline_ms = c->accepted_ms + HEALTH_HEAD_TIMEOUT_MS;
    conns[free_slot] = c;
}

static void *health_server_main(void *arg)
{
    health_t *h = arg;
    health_conn_t *conns[HEALTH_MAX_CONNECTIONS] = { 0 };
    struct pollfd pf[2 + HEALTH_MAX_CONNECTIONS];
    int slot_of[2 + HEALTH_MAX_CONNECTIONS];
    int64_t accept_resume_ms = 0;    /* after an accept() failure: not before then */
    for (;;) {
        int n = 0;
        int64_t now = time_mono_ms(), next = -1;
        bool accepting = now >= accept_resume_ms;
        if (!accepting)
            next = accept_resume_ms;
        pf[n++] = (struct pollfd){ .fd = h->stop_pipe[0], .events = POLLIN };
        pf[n++] = (struct pollfd){ .fd = accepting ? h->listen_fd : -1, .events = POLLIN };
        for (int i = 0; i < HEALTH_MAX_CONNECTIONS; i++) {
            if (!conns[i])
                continue;
            pf[n] = (struct pollfd){ .fd = conns[i]->fd,
                                     .events = conns[i]->state == HEALTH_CONN_WRITING ? POLLOUT : POLLIN };
            slot_of[n++] = i;
            if (next < 0 || conns[i]->deadline_ms < next)
                next = conns[i]->deadline_ms;
        }
        int timeout = next < 0 ? -1 : next <= now ? 0 : (int)(next - now);
        int rc = poll(pf, (nfds_t)n, timeout);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc < 0) {
            log_error(HEALTH_COMPONENT, "the health check server failed: poll: %s", strerror(errno));
            break;
        }
        if (pf[0].revents)
            break;
        for (int k = 2; k < n; k++) {
            health_conn_t **slot = &conns[slot_of[k]];
            if (!*slot || !pf[k].revents)
                continue;
            if ((*slot)->state == HEALTH_CONN_WRITING)
                health_conn_write(slot);
            else
                health_conn_read(h, slot);
        }
        /* Deadlines: a head that did not come, an answer not taken, the
         * end of lingering. */
        now = time_mono_ms();
        for (int i = 0; i < HEALTH_MAX_CONNECTIONS; i++)
            if (conns[i] && conns[i]->deadline_ms <= now)
                health_conn_close(&conns[i]);
        if (pf[1].revents & (POLLERR | POLLNVAL)) {
            log_error(HEALTH_COMPONENT, "the health check listener failed; health checks are no longer answered");
            break;
        }
        for (int k = 0; k < HEALTH_ACCEPT_BURST && (pf[1].revents & POLLIN); k++) {
            int fd = accept4(h->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) {
                if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                    accept_resume_ms = time_deadline_ms(HEALTH_ACCEPT_BACKOFF_MS);
                break;
            }
            health_accept(conns, fd);
        }
    }
    for (int i = 0; i < HEALTH_MAX_CONNECTIONS; i++)
        health_conn_close(&conns[i]);
    return NULL;
}

/* ---- the runtime check ------------------------------------------------- */

static void *health_checker_main(void *arg)
{
    health_t *h = arg;
    for (;;) {
        api_error_t err;
        memset(&err, 0, sizeof err);
        int r = runtime_ping(h->rt, HEALTH_PING_TIMEOUT_MS, &err);
        pthread_mutex_lock(&h->mu);
        if (h->stop_checker) {
            pthread_mutex_unlock(&h->mu);
            break;
        }
        bool was_ok = h->runtime.ok, was_checked = h->runtime.checked;
        h->runtime.checked = true;
        h->runtime.ok = r == 0;
        h->runtime.checked_ms = time_mono_ms();
        snprintf(h->runtime.error, sizeof h->runtime.error, "%s", r == 0 ? "" : err.message);
        pthread_mutex_unlock(&h->mu);
        if (r < 0 && (was_ok || !was_checked))
            log_warn(HEALTH_COMPONENT, "runtime check failed: %s (the worker is not ready)", err.message);
        else if (r == 0 && was_checked && !was_ok)
            log_info(HEALTH_COMPONENT, "runtime check: %s answers again", runtime_name(h->rt));

        struct timespec ts = time_mono_timespec_after(HEALTH_CHECK_INTERVAL_MS);
        pthread_mutex_lock(&h->mu);
        while (!h->stop_checker)
            if (pthread_cond_timedwait(&h->cond, &h->mu, &ts) == ETIMEDOUT)
                break;
        bool stop = h->stop_checker;
        pthread_mutex_unlock(&h->mu);
        if (stop)
            break;
    }
    return NULL;
}

/* ---- lifecycle --------------------------------------------------------- */

int health_new(const health_options_t *opt, health_t **ret, char *err, size_t errlen)
{
    const char *listen = opt->listen ? opt->listen : "";
    struct sockaddr_storage addr;
    socklen_t addr_len = 0;
    char why[200];
    int rc = strlen(listen) >= HEALTH_ADDRESS_MAX ? SBX_EINVAL
                                                   : netaddr_resolve_bind(listen, &addr, &addr_len, why, sizeof why);
    if (rc == SBX_EINVAL) {
        snprintf(err, errlen, "worker_health_listen must be HOST:PORT or [V6]:PORT (got \"%.100s\")", listen);
        return SBX_EINVAL;
    }
    if (rc < 0) {
        snprintf(err, errlen, "worker_health_listen: %s", why);
        return SBX_EINVAL;
    }
    if (!opt->rt || !opt->controller || opt->controller_timeout_ms <= 0) {
        snprintf(err, errlen, "invalid health check options");
        return SBX_EINVAL;
    }
    health_t *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, errlen, "out of memory");
        return SBX_ENOMEM;
    }
    h->bind_addr = addr;
    h->bind_len = addr_len;
    snprintf(h->listen, sizeof h->listen, "%s", listen);
    h->rt = opt->rt;
    h->controller_timeout_ms = opt->controller_timeout_ms;
    h->controller = opt->controller;
    h->controller_ud = opt->controller_ud;
    h->listen_fd = -1;
    h->stop_pipe[0] = h->stop_pipe[1] = -1;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&h->mu, NULL);
    *ret = h;
    return 0;
}

int health_start(health_t *h, char *err, size_t errlen)
{
    if (h->started) {
        snprintf(err, errlen, "the health check server is already started");
        return SBX_EINVAL;
    }
    if (pipe2(h->stop_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
        snprintf(err, errlen, "cannot make a pipe: %s", strerror(errno));
        h->stop_pipe[0] = h->stop_pipe[1] = -1;
        return SBX_EIO;
    }
    int fd = netaddr_listen(&h->bind_addr, h->bind_len, HEALTH_LISTEN_BACKLOG, h->address, sizeof h->address);
    if (fd < 0) {
        snprintf(err, errlen, "cannot listen for health checks on %s (--worker-health-listen): %s", h->listen, strerror(errno));
        h->address[0] = '\0';
        return SBX_EIO;
    }
    h->listen_fd = fd;
    h->started = true;
    if (pthread_create(&h->checker, NULL, health_checker_main, h) != 0) {
        snprintf(err, errlen, "cannot start the health check threads");
        health_stop(h);
        return SBX_ENOMEM;
    }
    h->checker_started = true;
    if (pthread_create(&h->server, NULL, health_server_main, h) != 0) {
        snprintf(err, errlen, "cannot start the health check threads");
        health_stop(h);
        return SBX_ENOMEM;
    }
    h->server_started = true;
    log_info(HEALTH_COMPONENT, "health checks on %s (/healthz, /readyz, /metrics)", h->address);
    return 0;
}

const char *health_address(const health_t *h) { return h ? h->address : ""; }

void health_set_stopping(health_t *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    h->stopping = true;
    pthread_mutex_unlock(&h->mu);
}

void health_stop(health_t *h)
{
    if (!h || !h->started || h->stopped)
        return;
    h->stopped = true;
    char b = 1;
    ssize_t w = write(h->stop_pipe[1], &b, 1);
    (void)w;
    pthread_mutex_lock(&h->mu);
    h->stop_checker = true;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->mu);
    if (h->server_started)
        pthread_join(h->server, NULL);
    h->server_started = false;
    if (h->checker_started)
        pthread_join(h->checker, NULL);
    h->checker_started = false;
    if (h->listen_fd >= 0)
        close(h->listen_fd);
    h->listen_fd = -1;
}

void health_free(health_t *h)
{
    if (!h)
        return;
    health_stop(h);
    for (int i = 0; i < 2; i++)
        if (h->stop_pipe[i] >= 0)
            close(h->stop_pipe[i]);
    pthread_cond_destroy(&h->cond);
    pthread_mutex_destroy(&h->mu);
    free(h);
}
