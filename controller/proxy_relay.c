/* The route proxy's relay: the worker's one-line answer, then bytes both
 * ways with backpressure (see proxy.c for the states of a connection). */
#include "proxy_internal.h"
#include "log.h"
#include "tlsbev.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/util.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* ---- relaying ---- */

static void pipe_maybe_done(pconn_t *pc)
{
    /* A plain request is over when the upstream has answered and closed and
     * the answer is written; a tunnel when both sides have closed. */
    if (pc->up_eof && evbuffer_get_length(bufferevent_get_output(pc->down)) == 0 &&
        (!pc->tunnel || pc->down_eof))
        proxy_conn_free(pc, "done");
}

static void shut_up_write(pconn_t *pc)
{
    if (evbuffer_get_length(bufferevent_get_output(pc->up)) > 0) {
        pc->up_shut_pending = true;
        return;
    }
    pc->up_shut_pending = false;
    shutdown(bufferevent_getfd(pc->up), SHUT_WR);
}

/* Moves at most max bytes of what `from` has read to the output of `to`,
 * counting them in *count against limit (0: none; a tunnel has none), and
 * stops reading `from` (*paused) while `to` holds PROXY_HIGH_WATER bytes
 * unsent. False when the limit closed the connection. */
static bool relay(pconn_t *pc, struct bufferevent *from, struct bufferevent *to, int64_t *count, int64_t limit,
                  bool *paused, const char *over_limit, size_t max)
{
    struct evbuffer *in = bufferevent_get_input(from);
    size_t n = evbuffer_get_length(in);
    if (n > max)
        n = max;
    if (n == 0)
        return true;
    pc->last_activity = time(NULL);
    *count += (int64_t)n;
    if (!pc->tunnel && limit > 0 && *count > limit) {
        proxy_conn_free(pc, over_limit);
        return false;
    }
    struct evbuffer *out = bufferevent_get_output(to);
    evbuffer_remove_buffer(in, out, n);
    if (evbuffer_get_length(out) >= PROXY_HIGH_WATER) {
        bufferevent_disable(from, EV_READ);
        *paused = true;
    }
    return true;
}

/* How many of the client's buffered bytes still belong to the request's
 * body; marks the body done when they end it. False when the chunked
 * framing broke (the connection is then closed). */
static bool body_take(pconn_t *pc, size_t *ret_take)
{
    struct evbuffer *in = bufferevent_get_input(pc->down);
    size_t n = evbuffer_get_length(in);
    size_t take = n;
    if (pc->chunked) {
        const char *p = n ? (const char *)evbuffer_pullup(in, (ev_ssize_t)n) : NULL;
        int r = p ? proxy_chunked_scan(&pc->chunks, p, n, &take) : 0;
        if (r < 0) {
            proxy_conn_free(pc, "malformed chunked request body");
            return false;
        }
        pc->body_done = r == 1;
    } else {
        if ((int64_t)take > pc->body_left)
            take = (size_t)pc->body_left;
        pc->body_left -= (int64_t)take;
        pc->body_done = pc->body_left == 0;
    }
    *ret_take = take;
    return true;
}

/* Client -> upstream: the request's body, then nothing until the app has
 * answered an upgrade with 101 (then everything: a tunnel carries no HTTP
 * heads); without a tunnel, what follows the body is read and dropped. */
static bool relay_down(pconn_t *pc)
{
    int64_t limit = pc->pt->ctl->route_max_request;
    const char *over = "request body over route_max_request_bytes";
    if (!pc->body_done) {
        size_t take = 0;
        if (!body_take(pc, &take) ||
            !relay(pc, pc->down, pc->up, &pc->body_bytes, limit, &pc->down_paused, over, take))
            return false;
        if (!pc->body_done)
            return true;
    }
    if (pc->tunnel)
        return relay(pc, pc->down, pc->up, &pc->body_bytes, limit, &pc->down_paused, over, SIZE_MAX);
    struct evbuffer *in = bufferevent_get_input(pc->down);
    size_t n = evbuffer_get_length(in);
    if (n == 0)
        return true;
    if (pc->upgrade && !pc->answered) {
        bufferevent_disable(pc->down, EV_READ);
        pc->down_held = true;
        return true;
    }
    if (pc->dropped_bytes == 0) {
        log_info("proxy", "route %s: dropping what the client sent after its request (one request per "
                          "connection)", pc->name);
        /* The client means to reuse the connection: tell an app that ignores
         * our Connection: close that no request follows, so it closes after
         * its answer rather than keep the client waiting for an idle timeout. */
        if (pc->up && !pc->up_eof)
            shut_up_write(pc);
    }
    pc->dropped_bytes += (int64_t)n;
    evbuffer_drain(in, n);
    if (pc->dropped_bytes > PROXY_MAX_DROPPED) {
        proxy_conn_free(pc, "too much sent after the request");
        return false;
    }
    return true;
}

/* Upstream -> client. For an upgrade, the first bytes of the app's answer
 * decide whether the connection becomes a tunnel (101) or stays one request;
 * the client's held bytes then go up or are dropped. eof: the upstream has
 * closed (whatever it sent is all there is). */
static bool relay_up(pconn_t *pc, bool eof)
{
    struct evbuffer *in = bufferevent_get_input(pc->up);
    bool decided = false;
    if (pc->upgrade && !pc->answered) {
        size_t n = evbuffer_get_length(in);
        if (n < 12 && !eof)
            return true;
        const char *p = (const char *)evbuffer_pullup(in, n < 12 ? (ev_ssize_t)n : 12);
        pc->answered = decided = true;
        pc->tunnel = n >= 12 && p && memcmp(p, "HTTP/1.", 7) == 0 && memcmp(p + 8, " 101", 4) == 0;
    }
    pc->answered = pc->answered || evbuffer_get_length(in) > 0;
    if (!relay(pc, pc->up, pc->down, &pc->resp_bytes, pc->pt->ctl->route_max_response, &pc->up_paused,
               "response over route_max_response_bytes", SIZE_MAX))
        return false;
    if (decided && pc->down_held) {
        pc->down_held = false;
        if (!pc->down_eof && !pc->down_paused)
            bufferevent_enable(pc->down, EV_READ);
        return relay_down(pc);
    }
    return true;
}

static void down_read_cb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    relay_down(arg);
}

static void up_read_cb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    relay_up(arg, false);
}

/* The client's output drained: read the upstream again. */
static void down_write_cb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    pconn_t *pc = arg;
    if (pc->up_paused && pc->up && !pc->up_eof) {
        pc->up_paused = false;
        bufferevent_enable(pc->up, EV_READ);
    }
    pipe_maybe_done(pc);
}

/* The upstream's output drained: read the client again. */
static void up_write_cb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    pconn_t *pc = arg;
    if (pc->down_paused && !pc->down_eof) {
        pc->down_paused = false;
        bufferevent_enable(pc->down, EV_READ);
    }
    if (pc->up_shut_pending)
        shut_up_write(pc);
}

/* An idle timeout on one side counts only when the other side was quiet
 * too. */
static bool idle_really(pconn_t *pc, struct bufferevent *bev, bool paused)
{
    if (time(NULL) - pc->last_activity < pc->pt->ctl->route_idle_seconds) {
        if (!paused)
            bufferevent_enable(bev, EV_READ);
        return false;
    }
    return true;
}

static void down_event_cb(struct bufferevent *bev, short what, void *arg)
{
    pconn_t *pc = arg;
    if (what & BEV_EVENT_TIMEOUT) {
        if ((what & BEV_EVENT_READING) && pc->state == PC_PIPE && !idle_really(pc, bev, pc->down_paused))
            return;
        proxy_conn_free(pc, pc->state == PC_PIPE ? "idle timeout" : "client too slow");
        return;
    }
    if ((what & BEV_EVENT_EOF) && pc->state == PC_PIPE) {
        pc->down_eof = true;
        if (pc->up && !pc->up_eof)
            shut_up_write(pc);
        pipe_maybe_done(pc);
        return;
    }
    proxy_conn_free(pc, "client closed");
}

static void up_event_cb(struct bufferevent *bev, short what, void *arg)
{
    pconn_t *pc = arg;
    if (what & BEV_EVENT_TIMEOUT) {
        if ((what & BEV_EVENT_READING) && !idle_really(pc, bev, pc->up_paused))
            return;
        proxy_conn_free(pc, "idle timeout");
        return;
    }
    if (what & BEV_EVENT_EOF) {
        if (!relay_up(pc, true)) /* whatever came with the EOF */
            return;
        pc->up_eof = true;
        if (pc->tunnel && !pc->down_eof)
            tls_bev_shutdown_write(pc->down);
        pipe_maybe_done(pc);
        return;
    }
    proxy_conn_free(pc, "worker connection failed");
}

static void pipe_start(pconn_t *pc)
{
    controller_t *ctl = pc->pt->ctl;
    pc->state = PC_PIPE;
    pc->last_activity = time(NULL);
    struct timeval idle = { ctl->route_idle_seconds, 0 };
    bufferevent_set_timeouts(pc->down, &idle, &idle);
    bufferevent_set_timeouts(pc->up, &idle, &idle);
    bufferevent_setwatermark(pc->down, EV_READ, 0, PROXY_READ_CHUNK);
    bufferevent_setwatermark(pc->up, EV_READ, 0, PROXY_READ_CHUNK);
    bufferevent_setcb(pc->down, down_read_cb, down_write_cb, down_event_cb, pc);
    bufferevent_setcb(pc->up, up_read_cb, up_write_cb, up_event_cb, pc);
    bufferevent_enable(pc->down, EV_READ | EV_WRITE);
    bufferevent_enable(pc->up, EV_READ | EV_WRITE);
    /* Body bytes that came with the head, then whatever the worker sent
     * after its line. */
    if (relay_down(pc))
        relay_up(pc, false);
}

/* ---- waiting for the worker's answer ---- */

int proxy_worker_reply_read(struct evbuffer *in, proxy_worker_reply_t *ret)
{
    size_t len = 0;
    char *line = evbuffer_readln(in, &len, EVBUFFER_EOL_CRLF_STRICT);
    if (!line)
        return evbuffer_get_length(in) > PROXY_WORKER_LINE ? -1 : 0;
    int off = 0;
    memset(ret, 0, sizeof *ret);
    if (sscanf(line, "SANDBOX-FORWARD/1 %d %47s %n", &ret->status, ret->code, &off) < 2) {
        free(line);
        return -1;
    }
    snprintf(ret->msg, sizeof ret->msg, "%s", off > 0 && (size_t)off <= len ? line + off : ret->code);
    free(line);
    return 1;
}

void proxy_worker_read_cb(struct bufferevent *bev, void *arg)
{
    pconn_t *pc = arg;
    proxy_worker_reply_t rep;
    int r = proxy_worker_reply_read(bufferevent_get_input(bev), &rep);
    if (r < 0)
        proxy_conn_answer_error(pc, API_BAD_GATEWAY, NULL, "the worker answered something else than a forward reply");
    if (r <= 0)
        return;
    if (rep.status == 200) {
        pipe_start(pc);
        return;
    }
    log_warn("proxy", "route %s: the worker refused to forward: %d %s %s", pc->name, rep.status, rep.code, rep.msg);
    /* The sandbox stopped running between our check and the worker's: the
     * route is gone. Anything else is the gateway failing. */
    if (rep.status == 404)
        proxy_conn_answer_error(pc, API_NOT_FOUND, NULL, "no such route");
    else if (rep.status == 503)
        proxy_conn_answer_error(pc, API_UNAVAILABLE, NULL, rep.msg);
    else if (rep.status == 409)
        proxy_conn_answer_error(pc, API_CONFLICT, NULL, rep.msg);
    else
        proxy_conn_answer_error(pc, API_BAD_GATEWAY, NULL, rep.msg);
}

void proxy_worker_event_cb(struct bufferevent *bev, short what, void *arg)
{
    pconn_t *pc = arg;
    if (what & BEV_EVENT_CONNECTED)
        return;
    char why[200];
    tls_bev_failure(bev, why, sizeof why);
    if (why[0] && !(what & BEV_EVENT_TIMEOUT)) {
        log_warn("proxy", "route %s: TLS to the worker's forwarder failed: %s", pc->name, why);
        proxy_conn_answer_error(pc, API_BAD_GATEWAY, NULL, "the worker running this sandbox failed TLS verification");
        return;
    }
    if (what & BEV_EVENT_TIMEOUT)
        proxy_conn_answer_error(pc, API_BAD_GATEWAY, NULL, "the worker running this sandbox did not answer in time");
    else
        proxy_conn_answer_error(pc, API_BAD_GATEWAY, NULL, "cannot reach the worker running this sandbox");
}

void proxy_client_gone_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    (void)what;
    proxy_conn_free(arg, "client closed");
}

struct bufferevent *proxy_worker_dial(controller_t *ctl, struct event_base *base, const char *address,
                                      struct evbuffer *preamble, int timeout_s, bufferevent_data_cb rcb,
                                      bufferevent_data_cb wcb, bufferevent_event_cb ecb, void *arg, const char **ret_why)
{
    struct sockaddr_storage ss;
    int sl = (int)sizeof ss;
    *ret_why = NULL;
    if (evutil_parse_sockaddr_port(address, (struct sockaddr *)&ss, &sl) < 0) {
        *ret_why = "the worker's forwarder address is not an IP address and port";
        return NULL;
    }
    SSL_CTX *tls = ctl->worker_tls;
    struct bufferevent *up = tls ? tls_bev_connect(base, tls, (struct sockaddr *)&ss, sl)
                                 : bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!up) {
        *ret_why = tls ? "cannot reach the worker running the sandbox" : "out of memory";
        return NULL;
    }
    if (preamble)
        bufferevent_write_buffer(up, preamble);
    struct timeval t = { timeout_s, 0 };
    bufferevent_set_timeouts(up, &t, &t);
    bufferevent_setcb(up, rcb, wcb, ecb, arg);
    if (!tls && bufferevent_socket_connect(up, (struct sockaddr *)&ss, sl) < 0) {
        bufferevent_free(up);
        *ret_why = "cannot reach the worker running the sandbox";
        return NULL;
    }
    bufferevent_enable(up, EV_READ | EV_WRITE);
    return up;
}

void proxy_worker_keepalive(struct bufferevent *up)
{
    evutil_socket_t fd = bufferevent_getfd(up);
    int one = 1, idle = PROXY_KEEPIDLE_SECONDS, intvl = PROXY_KEEPINTVL_SECONDS, cnt = PROXY_KEEPCNT;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}
