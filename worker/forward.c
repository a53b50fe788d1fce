/* The worker's route forwarder: the listener, one thread per routed
 * connection, the dial into the sandbox (through the runtime) and the
 * relay, and the logs stream (see forward.h); file transfers are in
 * forward_files.c. */
#include "forward.h"
#include "forward_internal.h"
#include "errors.h"
#include "log.h"
#include "logframe.h"
#include "metrics.h"
#include "netaddr.h"
#include "timeutil.h"
#include "tls.h"
#include "tls_openssl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

/* ---- pure parts -------------------------------------------------------- */

void forward_line_init(forward_line_t *l)
{
    l->len = 0;
    l->buf[0] = '\0';
}

int forward_line_push_buf(char *buf, size_t cap, size_t *len, const char *data, size_t n, size_t *ret_used)
{
    for (size_t i = 0; i < n; i++) {
        char ch = data[i];
        if (ch == '\n') {
            if (*len == 0 || buf[*len - 1] != '\r')
                return SBX_EINVAL;
            buf[--*len] = '\0';
            *ret_used = i + 1;
            return 1;
        }
        if (ch == '\0')
            return SBX_EINVAL;
        /* Room for the LF that would end it: cap bytes in all. */
        if (*len >= cap - 1)
            return SBX_ETOOBIG;
        buf[(*len)++] = ch;
    }
    *ret_used = n;
    return 0;
}

int forward_line_push(forward_line_t *l, const char *data, size_t n, size_t *ret_used)
{
    return forward_line_push_buf(l->buf, FORWARD_PREAMBLE_MAX, &l->len, data, n, ret_used);
}

int forward_preamble_parse(const char *line, char ret_grant[GRANT_MAX])
{
    static const char prefix[] = FORWARD_PROTOCOL " ";
    if (!line || strncmp(line, prefix, sizeof prefix - 1) != 0)
        return SBX_EINVAL;
    const char *g = line + sizeof prefix - 1;
    size_t n = strlen(g);
    if (n == 0 || n >= GRANT_MAX)
        return SBX_EINVAL;
    for (size_t i = 0; i < n; i++) {
        char ch = g[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
              ch == '_' || ch == '-'))
            return SBX_EINVAL;
    }
    memcpy(ret_grant, g, n + 1);
    return 0;
}

size_t forward_reply_format(char *buf, size_t buflen, int status, const char *code, const char *message)
{
    if (buflen < 3)
        return 0;
    int w = snprintf(buf, buflen, "%s %d %s", FORWARD_PROTOCOL, status, code ? code : "error");
    size_t len = w < 0 ? 0 : (size_t)w;
    if (len > buflen - 3)
        len = buflen - 3;                /* room for CRLF and NUL */
    if (message && *message && len + 1 < buflen - 3) {
        size_t room = buflen - 3 - len - 1, m = strlen(message);
        if (m > room) {
            m = room;
            while (m > 0 && ((unsigned char)message[m] & 0xC0) == 0x80)
                m--;                     /* not inside a UTF-8 sequence */
        }
        buf[len++] = ' ';
        for (size_t i = 0; i < m; i++) {
            unsigned char ch = (unsigned char)message[i];
            buf[len++] = ch < 0x20 || ch == 0x7f ? ' ' : (char)ch;
        }
    }
    buf[len++] = '\r';
    buf[len++] = '\n';
    buf[len] = '\0';
    return len;
}

/* ---- addresses --------------------------------------------------------- */

/* What the controller accepts as a route_address (controller/store/workers.c). */
static bool forward_advertise_ok(const char *a)
{
    char host[FORWARD_ADDRESS_MAX];
    long port = 0;
    if (strlen(a) > 255 || netaddr_split(a, host, sizeof host, &port) < 0 || port < 1 || !host[0])
        return false;
    for (const char *p = a; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr(".-:[]", *p)))
            return false;
    return true;
}

static bool forward_addr_is_wildcard(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
    if (sa->sa_family == AF_INET6)
        return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
    return false;
}

/* ---- waiting ----------------------------------------------------------- */

bool forward_stopping(const forward_t *f)
{
    struct pollfd p = { .fd = f->stop_pipe[0], .events = POLLIN };
    return poll(&p, 1, 0) > 0;
}

/* Waits up to timeout_ms for events on fd. Returns its revents (> 0), 0 on
 * timeout, -1 when the forwarder stops first. */
int forward_wait(const forward_t *f, int fd, short events, int64_t timeout_ms)
{
    int64_t deadline = time_deadline_ms(timeout_ms);
    for (;;) {
        struct pollfd p[2] = { { .fd = fd, .events = events }, { .fd = f->stop_pipe[0], .events = POLLIN } };
        int n = poll(p, 2, time_left_ms(deadline));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || p[1].revents)
            return -1;
        if (n == 0)
            return 0;
        return p[0].revents;
    }
}

/* ---- the controller's side: TCP or TLS --------------------------------- */

/* What a failed SSL_read / SSL_write means as recv() / send() would say it:
 * 0 at the end, -1 with EAGAIN when it must wait for the socket, -1 with
 * another errno on a failure. */
static ssize_t forward_tls_result(forward_conn_t *c, int r)
{
    int e = SSL_get_error(c->tls, r);
    if (e == SSL_ERROR_ZERO_RETURN)
        return 0;
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        errno = EAGAIN;
        return -1;
    }
    c->tls_failed = true;
    if (e != SSL_ERROR_SYSCALL || errno == 0)
        errno = EPROTO;
    ERR_clear_error();
    return -1;
}

/* recv() from the controller: the plaintext, through TLS when served. */
ssize_t forward_client_recv(forward_conn_t *c, void *buf, size_t n)
{
    if (!c->tls)
        return recv(c->client, buf, n, 0);
    int r = SSL_read(c->tls, buf, n > INT_MAX ? INT_MAX : (int)n);
    return r > 0 ? r : forward_tls_result(c, r);
}

/* send() to the controller (never SIGPIPE; sandboxd ignores it for TLS's
 * write()). */
ssize_t forward_client_send(forward_conn_t *c, const void *buf, size_t n)
{
    if (!c->tls)
        return send(c->client, buf, n, MSG_NOSIGNAL);
    int r = SSL_write(c->tls, buf, n > INT_MAX ? INT_MAX : (int)n);
    return r > 0 ? r : forward_tls_result(c, r);
}

/* Plaintext TLS holds already decrypted: poll() does not see it. */
bool forward_client_pending(const forward_conn_t *c) { return c->tls && SSL_pending(c->tls) > 0; }

/* shutdown(SHUT_WR) towards the controller, after a close_notify over TLS. */
void forward_client_shutdown(forward_conn_t *c)
{
    if (c->tls && !c->tls_failed && SSL_shutdown(c->tls) < 0)
        ERR_clear_error();
    shutdown(c->client, SHUT_WR);
}

/* The TLS handshake with the controller, within the preamble's time. A
 * failure (the controller refusing our certificate, a client that is not
 * TLS) is logged here: no error line can be sent without TLS. */
static int forward_tls_accept(forward_conn_t *c)
{
    char why[200];
    c->tls = SSL_new(c->f->tls);
    if (!c->tls || SSL_set_fd(c->tls, c->client) != 1) {
        log_warn(FORWARD_COMPONENT, "refused a route connection from %s: out of memory for TLS", c->peer);
        c->tls_failed = true;
        return SBX_ENOMEM;
    }
    SSL_set_mode(c->tls, SSL_MODE_ENABLE_PARTIAL_WRITE); /* the relay writes what it has */
    int64_t deadline = time_deadline_ms(FORWARD_PREAMBLE_TIMEOUT_MS);
    for (;;) {
        int r = SSL_accept(c->tls);
        if (r == 1)
            return 0;
        int e = SSL_get_error(c->tls, r);
        if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
            tls_failure_text(c->tls, why, sizeof why);
            log_warn(FORWARD_COMPONENT, "TLS handshake with %s failed: %s", c->peer, why);
            c->tls_failed = true;
            return SBX_EIO;
        }
        int left = time_left_ms(deadline);
        int w = left > 0 ? forward_wait(c->f, c->client, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, left) : 0;
        if (w <= 0) {
            if (w == 0)
                log_warn(FORWARD_COMPONENT, "TLS handshake with %s did not end within %d s", c->peer,
                         FORWARD_PREAMBLE_TIMEOUT_MS / 1000);
            c->tls_failed = true;
            return w < 0 ? SBX_EUNAVAIL : SBX_ETIMEOUT;
        }
    }
}

/* ---- refusing ---------------------------------------------------------- */

/* Reads and drops what the peer sends for a short while after our last
 * line, so the close does not reset the connection under that line. */
void forward_linger(forward_conn_t *c) { forward_linger_bytes(c, FORWARD_LINGER_BYTES); }

void forward_linger_bytes(forward_conn_t *c, size_t max_bytes)
{
    char sink[4096];
    size_t dropped = 0;
    int64_t deadline = time_deadline_ms(FORWARD_LINGER_MS);
    forward_client_shutdown(c);
    while (dropped < max_bytes) {
        int left = time_left_ms(deadline);
        if (left == 0 || (!forward_client_pending(c) && forward_wait(c->f, c->client, POLLIN, left) <= 0))
            break;
        ssize_t n = forward_client_recv(c, sink, sizeof sink);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n <= 0)
            break;
        dropped += (size_t)n;
    }
}

/* Sends the error line (the socket is fresh, so it fits in the send
 * buffer; a peer that is gone just does not get it). */
static void forward_send_line(int fd, int status, const char *code, const char *message)
{
    char line[FORWARD_PREAMBLE_MAX];
    size_t n = forward_reply_format(line, sizeof line, status, code, message);
    ssize_t w = send(fd, line, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
}

/* Answers the connection with an error line and logs why (warn; debug when
 * the worker is stopping). The connection is closed by the caller. */
void forward_refuse(forward_conn_t *c, int status, const char *code, const char *fmt, ...)
{
    char msg[512], what[SBX_ID_MAX + 48] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->sandbox_id[0] && c->grant.purpose == GRANT_LOGS)
        snprintf(what, sizeof what, " for the logs of sandbox %s", c->sandbox_id);
    else if (c->sandbox_id[0] && (c->grant.purpose == GRANT_FILES_PUT || c->grant.purpose == GRANT_FILES_GET))
        snprintf(what, sizeof what, " for files of sandbox %s", c->sandbox_id);
    else if (c->sandbox_id[0] && c->grant.purpose == GRANT_SHELL)
        snprintf(what, sizeof what, " for a shell in sandbox %s", c->sandbox_id);
    else if (c->sandbox_id[0] && c->grant.purpose == GRANT_ENVD)
        snprintf(what, sizeof what, " for envd of sandbox %s", c->sandbox_id);
    else if (c->sandbox_id[0])
        snprintf(what, sizeof what, " for sandbox %s port %d", c->sandbox_id, c->port);
    if (status == 503 && forward_stopping(c->f))
        log_debug(FORWARD_COMPONENT, "route connection from %s%s closed: %s", c->peer, what, msg);
    else
        log_warn(FORWARD_COMPONENT, "refused a route connection from %s%s: %d %s: %s", c->peer, what, status, code,
                 msg);
    char line[FORWARD_PREAMBLE_MAX];
    size_t n = forward_reply_format(line, sizeof line, status, code, msg);
    ssize_t w = forward_client_send(c, line, n); /* fits the fresh socket's buffer; a gone peer misses it */
    (void)w;
    forward_linger(c);
}

/* ---- the steps of a connection ----------------------------------------- */

/* Reads the preamble line into grant (refusing the connection when it does
 * not come or is not one); what followed it stays in c->up. */
static int forward_read_preamble(forward_conn_t *c, char grant[GRANT_MAX])
{
    forward_t *f = c->f;
    forward_line_t line;
    int64_t deadline = time_deadline_ms(FORWARD_PREAMBLE_TIMEOUT_MS);
    forward_line_init(&line);
    for (;;) {
        int left = time_left_ms(deadline);
        int w = forward_client_pending(c) ? POLLIN : left > 0 ? forward_wait(f, c->client, POLLIN, left) : 0;
        if (w < 0) {
            forward_refuse(c, 503, "busy", "the worker is shutting down");
            return SBX_EUNAVAIL;
        }
        if (w == 0) {
            forward_refuse(c, 400, "bad_request", "no preamble line within %d s", FORWARD_PREAMBLE_TIMEOUT_MS / 1000);
            return SBX_ETIMEOUT;
        }
        ssize_t n = forward_client_recv(c, c->up, FORWARD_BUFFER_BYTES);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n < 0) {
            log_debug(FORWARD_COMPONENT, "route connection from %s failed before its preamble: %s", c->peer,
                      strerror(errno));
            return SBX_EIO;
        }
        if (n == 0) {
            log_debug(FORWARD_COMPONENT, "route connection from %s ended before its preamble", c->peer);
            return SBX_EIO;
        }
        size_t used = 0;
        int r = forward_line_push(&line, c->up, (size_t)n, &used);
        if (r == 0)
            continue;
        if (r == SBX_ETOOBIG) {
            forward_refuse(c, 400, "bad_request", "the preamble line is longer than %d bytes", FORWARD_PREAMBLE_MAX);
            return r;
        }
        if (r < 0 || forward_preamble_parse(line.buf, grant) < 0) {
            forward_refuse(c, 400, "bad_request", "the preamble must be \"%s <grant>\" and end in CRLF",
                           FORWARD_PROTOCOL);
            return SBX_EINVAL;
        }
        /* The request's first bytes may have come with the line. */
        c->up_len = (size_t)n - used;
        memmove(c->up, c->up + used, c->up_len);
        return 0;
    }
}

/* Checks the grant: signed for this worker's token, not expired, naming
 * this worker. Fills c->sandbox_id and c->port. */
static int forward_check_grant(forward_conn_t *c, const char *text)
{
    forward_t *f = c->f;
    grant_t g;
    int r = grant_verify(f->key, text, (int64_t)time(NULL), &g);
    if (r == SBX_EINVAL) {
        forward_refuse(c, 403, "forbidden", "malformed grant");
        return r;
    }
    if (r == SBX_EAUTH) {
        forward_refuse(c, 403, "forbidden", "the grant is not signed for this worker");
        return r;
    }
    if (r == SBX_ETIMEOUT) {
        forward_refuse(c, 403, "forbidden", "the grant has expired");
        return r;
    }
    if (r < 0) {
        forward_refuse(c, 403, "forbidden", "the grant cannot be checked");
        return r;
    }
    snprintf(c->sandbox_id, sizeof c->sandbox_id, "%s", g.sandbox_id);
    c->port = g.port;
    c->grant = g;
    char wid[FORWARD_WORKER_ID_MAX] = "";
    f->worker_id(f->worker_id_ud, wid, sizeof wid);
    if (!wid[0]) {
        forward_refuse(c, 403, "forbidden", "this worker is not registered yet");
        return SBX_EPERM;
    }
    if (strcmp(wid, g.worker_id) != 0) {
        forward_refuse(c, 403, "forbidden", "the grant is for worker %s, this is worker %s", g.worker_id, wid);
        return SBX_EPERM;
    }
    return 0;
}


/* One direction of the relay: bytes read from `from` wait in buf until
 * `to` takes them. */
typedef struct forward_pipe {
    int from, to;            /* indexes into the poll set */
    char *buf;
    size_t off, len;         /* pending: buf[off, off + len) */
    bool eof;                /* `from` ended */
    bool closed;             /* and `to` was told (shutdown SHUT_WR) */
    uint64_t bytes;          /* relayed */
} forward_pipe_t;

/* Relays until both directions ended, an error, the idle timeout or the
 * forwarder stopping; writes how it ended into why, for the log. */
static void forward_relay(forward_conn_t *c, char *why, size_t whylen, uint64_t *ret_up, uint64_t *ret_down)
{
    forward_t *f = c->f;
    int fds[2] = { c->client, c->upstream };
    forward_pipe_t p[2] = {
        { .from = 0, .to = 1, .buf = c->up, .len = c->up_len },
        { .from = 1, .to = 0, .buf = c->down, .len = c->down_len },
    };
    int64_t last = time_mono_ms();
    while (!(p[0].closed && p[1].closed)) {
        struct pollfd pf[3] = { { .fd = fds[0] }, { .fd = fds[1] }, { .fd = f->stop_pipe[0], .events = POLLIN } };
        bool want_read[2], want_write[2];
        for (int i = 0; i < 2; i++) {
            want_read[i] = !p[i].eof && p[i].off + p[i].len < FORWARD_BUFFER_BYTES;
            want_write[i] = p[i].len > 0;
            if (want_read[i])
                pf[p[i].from].events |= POLLIN;
            if (want_write[i])
                pf[p[i].to].events |= POLLOUT;
        }
        /* A socket nobody waits on is left out: its hang-up would wake
         * every poll while the other side drains. */
        for (int k = 0; k < 2; k++)
            if (!pf[k].events)
                pf[k].fd = -1;
        int left = time_left_ms(last + FORWARD_IDLE_TIMEOUT_MS);
        if (left == 0) {
            snprintf(why, whylen, "closed after %d s without traffic", FORWARD_IDLE_TIMEOUT_MS / 1000);
            break;
        }
        bool pending = want_read[0] && forward_client_pending(c);
        int n = poll(pf, 3, pending ? 0 : left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(why, whylen, "poll: %s", strerror(errno));
            break;
        }
        if (pending)
            pf[0].revents |= POLLIN;
        if (pf[2].revents) {
            snprintf(why, whylen, "closed: the worker is stopping");
            break;
        }
        bool progress = false, failed = false;
        for (int i = 0; i < 2 && !failed; i++) {
            forward_pipe_t *q = &p[i];
            if (want_read[i] && (pf[q->from].revents & (POLLIN | POLLHUP | POLLERR))) {
                size_t room = FORWARD_BUFFER_BYTES - q->off - q->len;
                ssize_t r = q->from == 0 ? forward_client_recv(c, q->buf + q->off + q->len, room)
                                         : recv(fds[q->from], q->buf + q->off + q->len, room, 0);
                if (r > 0) {
                    q->len += (size_t)r;
                    progress = true;
                } else if (r == 0) {
                    q->eof = true;
                    progress = true;
                } else if (errno != EAGAIN && errno != EINTR) {
                    snprintf(why, whylen, "reading from the %s: %s", q->from == 0 ? "controller" : "sandbox",
                             strerror(errno));
                    failed = true;
                    break;
                }
            }
            if (q->len > 0 && (pf[q->to].revents & (POLLOUT | POLLHUP | POLLERR))) {
                ssize_t w = q->to == 0 ? forward_client_send(c, q->buf + q->off, q->len)
                                       : send(fds[q->to], q->buf + q->off, q->len, MSG_NOSIGNAL);
                if (w > 0) {
                    q->off += (size_t)w;
                    q->len -= (size_t)w;
                    q->bytes += (uint64_t)w;
                    if (q->len == 0)
                        q->off = 0;
                    progress = true;
                } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
                    snprintf(why, whylen, "writing to the %s: %s", q->to == 0 ? "controller" : "sandbox",
                             strerror(errno));
                    failed = true;
                    break;
                }
            }
            if (q->eof && q->len == 0 && !q->closed) {
                if (q->to == 0)
                    forward_client_shutdown(c);
                else
                    shutdown(fds[q->to], SHUT_WR);
                q->closed = true;
            }
        }
        if (failed)
            break;
        if (progress)
            last = time_mono_ms();
    }
    *ret_up = p[0].bytes;
    *ret_down = p[1].bytes;
}

/* ---- logs -------------------------------------------------------------- */

/* Sends all n bytes to the controller, waiting while its socket is full.
 * SBX_EIO when the controller is gone or the worker stops. */
int forward_send_all(forward_conn_t *c, const void *p, size_t n)
{
    const char *s = p;
    while (n > 0) {
        ssize_t w = forward_client_send(c, s, n);
        if (w > 0) {
            s += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            return SBX_EIO;
        /* A controller that reads nothing for this long is given up on. */
        int ev = forward_wait(c->f, c->client, POLLOUT, FORWARD_IDLE_TIMEOUT_MS);
        if (ev <= 0 || (ev & (POLLERR | POLLHUP | POLLNVAL)))
            return SBX_EIO;
    }
    return 0;
}

typedef struct forward_logs {
    forward_conn_t *c;
    uint64_t bytes;
    bool gone;               /* the controller went away (or stalled) */
} forward_logs_t;

int forward_send_frames(forward_conn_t *c, int type, const char *data, size_t n)
{
    while (n > 0) {
        size_t k = n > LOGFRAME_PAYLOAD_MAX ? LOGFRAME_PAYLOAD_MAX : n;
        unsigned char hdr[LOGFRAME_HEADER_BYTES];
        logframe_header(hdr, type, (uint32_t)k);
        if (forward_send_all(c, hdr, sizeof hdr) < 0 || forward_send_all(c, data, k) < 0)
            return SBX_EIO;
        data += k;
        n -= k;
    }
    return 0;
}

/* runtime_logs_fn: frames of at most LOGFRAME_PAYLOAD_MAX bytes. */
static int forward_logs_output(void *ud, int stream, const char *data, size_t n)
{
    forward_logs_t *l = ud;
    if (forward_send_frames(l->c, stream == 2 ? LOGFRAME_STDERR : LOGFRAME_STDOUT, data, n) < 0) {
        l->gone = true;
        return SBX_EIO;
    }
    l->bytes += n;
    return 0;
}

/* A logs grant: the sandbox's container must be this worker's; then its
 * output goes to the controller as frames (common/logframe.h) after the
 * 200 line, and an END frame says how it ended. Nothing is read from the
 * controller after the preamble: its socket turning readable means it has
 * closed (or misbehaves), and either ends the stream. */
static void forward_logs(forward_conn_t *c)
{
    forward_t *f = c->f;
    api_error_t err;
    char ref[80];
    int64_t t0 = time_mono_ms();
    if (runtime_logs_target(f->rt, c->sandbox_id, f->worker_name, ref, &err) < 0) {
        if (err.code == API_NOT_FOUND)
            forward_refuse(c, 404, "not_found", "%s", err.message);
        else if (err.code == API_CANCELLED)
            forward_refuse(c, 503, "busy", "the worker is shutting down");
        else
            forward_refuse(c, 502, "upstream_unavailable", "the worker cannot find the sandbox: %s", err.message);
        return;
    }
    char line[64];
    size_t ln = forward_reply_format(line, sizeof line, 200, "ok", NULL);
    forward_logs_t l = { .c = c };
    if (forward_send_all(c, line, ln) < 0)
        return;
    int stop_fds[2] = { c->client, f->stop_pipe[0] };
    runtime_logs_req_t req = {
        .tail = c->grant.logs_tail, .follow = c->grant.logs_follow, .stop_fds = stop_fds, .nstop_fds = 2,
        .on_output = forward_logs_output, .ud = &l,
    };
    int r = runtime_logs_stream(f->rt, ref, &req, &err);
    const char *why = r < 0 ? err.message : "";
    if (r == 0 && forward_stopping(f))
        why = "the worker is shutting down";
    if (!l.gone) {
        unsigned char hdr[LOGFRAME_HEADER_BYTES];
        size_t wl = strlen(why);
        if (wl > 512)
            wl = 512;
        logframe_header(hdr, LOGFRAME_END, (uint32_t)wl);
        if (forward_send_all(c, hdr, sizeof hdr) == 0 && wl > 0)
            forward_send_all(c, why, wl);
        forward_client_shutdown(c);
    }
    log_debug(FORWARD_COMPONENT, "streamed the logs of sandbox %s to %s: %llu bytes, %lld ms, %s", c->sandbox_id,
              c->peer, (unsigned long long)l.bytes, (long long)(time_mono_ms() - t0),
              l.gone ? "the controller went away" : *why ? why : "the stream ended");
}

/* sandbox_worker_route_connections: the forwards open right now. */
static pthread_once_t forward_metrics_once = PTHREAD_ONCE_INIT;
static metric_family_t *forward_m_active;

static void forward_metrics_init(void)
{
    forward_m_active = metrics_family("sandbox_worker_route_connections", METRIC_GAUGE,
                                      "Routed connections the worker forwards right now.", NULL, 0);
}

static void forward_conn_done(forward_t *f)
{
    pthread_mutex_lock(&f->mu);
    f->active--;
    metrics_set(forward_m_active, NULL, f->active);
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->mu);
}

static void *forward_conn_main(void *arg)
{
    forward_conn_t *c = arg;
    forward_t *f = c->f;
    char grant[GRANT_MAX];
    api_error_t err;
    int64_t t0 = time_mono_ms();
    c->up = malloc(FORWARD_BUFFER_BYTES);
    c->down = malloc(FORWARD_BUFFER_BYTES);
    if (!c->up || !c->down) {
        forward_refuse(c, 503, "busy", "out of memory");
        goto cleanup;
    }
    if ((f->tls && forward_tls_accept(c) < 0) || forward_read_preamble(c, grant) < 0 ||
        forward_check_grant(c, grant) < 0)
        goto cleanup;
    if (c->grant.purpose == GRANT_LOGS) {
        forward_logs(c);
        goto cleanup;
    }
    if (c->grant.purpose == GRANT_FILES_PUT || c->grant.purpose == GRANT_FILES_GET) {
        forward_files(c);
        goto cleanup;
    }
    if (c->grant.purpose == GRANT_SHELL) {
        forward_shell(c);
        goto cleanup;
    }
    if (c->grant.purpose == GRANT_ENVD) {
        forward_envd(c);
        goto cleanup;
    }
    if (c->grant.purpose == GRANT_SNAPSHOT) {
        forward_snapshot(c);
        goto cleanup;
    }
    if (c->grant.purpose != GRANT_ROUTE) {
        forward_refuse(c, 403, "forbidden", "the grant's purpose is not one this worker serves");
        goto cleanup;
    }
    runtime_dial_req_t dial = { .sandbox_id = c->sandbox_id, .worker_name = f->worker_name, .port = c->port,
                                .timeout_ms = FORWARD_CONNECT_TIMEOUT_MS, .stop_fd = f->stop_pipe[0] };
    if (runtime_dial(f->rt, &dial, &c->upstream, &err) < 0) {
        switch (err.code) {
        case API_NOT_FOUND:
            forward_refuse(c, 404, "not_found", "%s", err.message);
            break;
        case API_ISOLATION_UNAVAILABLE:
            forward_refuse(c, 409, "route_unsupported", "%s", err.message);
            break;
        case API_CANCELLED:
            forward_refuse(c, 503, "busy", "the worker is shutting down");
            break;
        case API_UNAVAILABLE:
            forward_refuse(c, 502, "upstream_unavailable", "%s", err.message);
            break;
        default:
            forward_refuse(c, 502, "upstream_unavailable", "the worker cannot find the sandbox: %s", err.message);
            break;
        }
        goto cleanup;
    }
    c->down_len = forward_reply_format(c->down, FORWARD_BUFFER_BYTES, 200, "ok", NULL);
    size_t head = c->down_len;
    uint64_t up = 0, down = 0;
    char ended[160] = "both directions ended";
    forward_relay(c, ended, sizeof ended, &up, &down);
    log_debug(FORWARD_COMPONENT, "forwarded a route connection from %s to sandbox %s port %d: %llu bytes in, "
              "%llu bytes out, %lld ms, %s", c->peer, c->sandbox_id, c->port, (unsigned long long)up,
              (unsigned long long)(down > head ? down - head : 0), (long long)(time_mono_ms() - t0), ended);
cleanup:
    sodium_memzero(grant, sizeof grant);
    if (c->upstream >= 0)
        close(c->upstream);
    if (c->tls)
        SSL_free(c->tls);
    close(c->client);
    free(c->up);
    free(c->down);
    free(c);
    forward_conn_done(f); /* last: f may be freed once active is 0 */
    return NULL;
}

/* ---- the listener ------------------------------------------------------ */

/* Refuses from the listener thread, which must not wait on anyone. */
static void forward_refuse_now(const forward_t *f, int fd, const char *peer, int status, const char *code,
                               const char *message)
{
    log_warn(FORWARD_COMPONENT, "refused a route connection from %s: %d %s: %s", peer, status, code, message);
    if (!f->tls) /* over TLS the line would need a handshake: the close says it */
        forward_send_line(fd, status, code, message);
    shutdown(fd, SHUT_WR);
    close(fd);
}

static void forward_accept(forward_t *f, int fd, const struct sockaddr *sa)
{
    char peer[INET6_ADDRSTRLEN + 8];
    netaddr_format(sa, peer, sizeof peer);
    pthread_mutex_lock(&f->mu);
    bool room = f->active < f->max_connections;
    if (room)
        f->active++;
    metrics_set(forward_m_active, NULL, f->active);
    pthread_mutex_unlock(&f->mu);
    if (!room) {
        char msg[96];
        snprintf(msg, sizeof msg, "the worker forwards %d connections already", f->max_connections);
        forward_refuse_now(f, fd, peer, 503, "busy", msg);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    forward_conn_t *c = calloc(1, sizeof *c);
    pthread_attr_t attr;
    bool attr_ok = pthread_attr_init(&attr) == 0;
    pthread_t t;
    if (c && attr_ok) {
        c->f = f;
        c->client = fd;
        c->upstream = -1;
        snprintf(c->peer, sizeof c->peer, "%s", peer);
        pthread_attr_setstacksize(&attr, FORWARD_THREAD_STACK_BYTES);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, forward_conn_main, c) == 0) {
            pthread_attr_destroy(&attr);
            return;
        }
    }
    if (attr_ok)
        pthread_attr_destroy(&attr);
    free(c);
    forward_conn_done(f);
    forward_refuse_now(f, fd, peer, 503, "busy", "the worker cannot start a thread for the connection");
}

static void *forward_listener_main(void *arg)
{
    forward_t *f = arg;
    int64_t last_log = 0;
    for (;;) {
        struct pollfd p[2] = { { .fd = f->listen_fd, .events = POLLIN }, { .fd = f->stop_pipe[0], .events = POLLIN } };
        int n = poll(p, 2, -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || p[1].revents)
            break;
        if (p[0].revents & (POLLERR | POLLNVAL)) {
            log_error(FORWARD_COMPONENT, "the route listener failed; no more route connections are accepted");
            break;
        }
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(f->listen_fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
                if (time_mono_ms() - last_log >= FORWARD_ACCEPT_LOG_MS) {
                    log_warn(FORWARD_COMPONENT, "failed to accept a route connection: %s (retrying)", strerror(e));
                    last_log = time_mono_ms();
                }
                struct pollfd s = { .fd = f->stop_pipe[0], .events = POLLIN };
                poll(&s, 1, FORWARD_ACCEPT_BACKOFF_MS);
            }
            continue;
        }
        forward_accept(f, fd, (struct sockaddr *)&ss);
    }
    return NULL;
}

/* ---- lifecycle --------------------------------------------------------- */

int forward_new(const forward_options_t *opt, forward_t **ret, char *err, size_t errlen)
{
    const char *listen = opt->listen ? opt->listen : "";
    const char *adv = opt->advertise ? opt->advertise : "";
    struct sockaddr_storage addr;
    socklen_t addr_len = 0;
    char why[200];
    int rc = strlen(listen) >= FORWARD_ADDRESS_MAX ? SBX_EINVAL
                                                    : netaddr_resolve_bind(listen, &addr, &addr_len, why, sizeof why);
    if (rc == SBX_EINVAL) {
        snprintf(err, errlen, "worker_route_listen must be HOST:PORT or [V6]:PORT (got \"%.100s\")", listen);
        return SBX_EINVAL;
    }
    if (rc < 0) {
        snprintf(err, errlen, "worker_route_listen: %s", why);
        return SBX_EINVAL;
    }
    if (*adv && !forward_advertise_ok(adv)) {
        snprintf(err, errlen, "worker_route_advertise must be HOST:PORT with a port from 1 to 65535 (got \"%.100s\")",
                 adv);
        return SBX_EINVAL;
    }
    if (opt->max_connections < 1 || !opt->token || !*opt->token || !opt->worker_name || !opt->rt ||
        !opt->worker_id) {
        snprintf(err, errlen, "invalid route forwarder options");
        return SBX_EINVAL;
    }
    bool wildcard = forward_addr_is_wildcard((const struct sockaddr *)&addr);
    if (wildcard && !*adv) {
        snprintf(err, errlen, "worker_route_listen %.100s listens on all addresses: set worker_route_advertise to "
                 "the HOST:PORT the controller reaches this worker's route listener at", listen);
        return SBX_EINVAL;
    }
    forward_t *f = calloc(1, sizeof *f);
    if (!f || !(f->worker_name = strdup(opt->worker_name))) {
        free(f);
        snprintf(err, errlen, "out of memory");
        return SBX_ENOMEM;
    }
    f->bind_addr = addr;
    f->bind_len = addr_len;
    snprintf(f->listen, sizeof f->listen, "%s", listen);
    snprintf(f->advertise, sizeof f->advertise, "%s", adv);
    f->max_connections = opt->max_connections;
    f->files_max_bytes = opt->files_max_bytes > 0 ? opt->files_max_bytes : SBX_FILES_MAX_BYTES_MAX;
    f->rt = opt->rt;
    f->worker_id = opt->worker_id;
    f->worker_id_ud = opt->worker_id_ud;
    f->session_done = opt->session_done;
    f->session_ud = opt->session_ud;
    grant_key_from_token(opt->token, f->key);
    int tr = tls_server_ctx_new("worker_route_tls", opt->tls_cert, opt->tls_key, &f->tls, err, errlen);
    if (tr < 0) {
        sodium_memzero(f->key, sizeof f->key);
        free(f->worker_name);
        free(f);
        return tr;
    }
    f->listen_fd = -1;
    f->stop_pipe[0] = f->stop_pipe[1] = -1;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cond, NULL);
    *ret = f;
    return 0;
}

int forward_start(forward_t *f, char *err, size_t errlen)
{
    if (f->started) {
        snprintf(err, errlen, "the route forwarder is already started");
        return SBX_EINVAL;
    }
    if (pipe2(f->stop_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
        snprintf(err, errlen, "cannot make a pipe: %s", strerror(errno));
        f->stop_pipe[0] = f->stop_pipe[1] = -1;
        return SBX_EIO;
    }
    char bound[FORWARD_ADDRESS_MAX];
    int fd = netaddr_listen(&f->bind_addr, f->bind_len, FORWARD_LISTEN_BACKLOG, bound, sizeof bound);
    if (fd < 0) {
        snprintf(err, errlen, "cannot listen for route connections on %s (--worker-route-listen): %s", f->listen, strerror(errno));
        return SBX_EIO;
    }
    snprintf(f->address, sizeof f->address, "%s", f->advertise[0] ? f->advertise : bound);
    f->listen_fd = fd;
    f->started = true;
    pthread_once(&forward_metrics_once, forward_metrics_init);
    metrics_set(forward_m_active, NULL, 0);
    if (pthread_create(&f->listener, NULL, forward_listener_main, f) != 0) {
        snprintf(err, errlen, "cannot start the route listener's thread");
        forward_stop(f);
        f->address[0] = '\0';
        return SBX_ENOMEM;
    }
    f->listener_started = true;
    log_info(FORWARD_COMPONENT, "route listener on %s (advertised as %s%s), at most %d connections", bound,
             f->address, f->tls ? ", TLS" : "", f->max_connections);
    return 0;
}

const char *forward_address(const forward_t *f) { return f ? f->address : ""; }

void forward_stop(forward_t *f)
{
    if (!f || !f->started || f->stopped)
        return;
    f->stopped = true;
    char b = 1;
    ssize_t w = write(f->stop_pipe[1], &b, 1);
    (void)w;
    if (f->listener_started)
        pthread_join(f->listener, NULL);
    f->listener_started = false;
    if (f->listen_fd >= 0)
        close(f->listen_fd);
    f->listen_fd = -1;
    pthread_mutex_lock(&f->mu);
    if (f->active > 0)
        log_info(FORWARD_COMPONENT, "stopping: closing %d route connections", f->active);
    while (f->active > 0)
        pthread_cond_wait(&f->cond, &f->mu);
    pthread_mutex_unlock(&f->mu);
    forward_envd_stop(f);
}

void forward_free(forward_t *f)
{
    if (!f)
        return;
    forward_stop(f);
    for (int i = 0; i < 2; i++)
        if (f->stop_pipe[i] >= 0)
            close(f->stop_pipe[i]);
    pthread_cond_destroy(&f->cond);
    pthread_mutex_destroy(&f->mu);
    sodium_memzero(f->key, sizeof f->key);
    tls_ctx_free(f->tls);
    free(f->worker_name);
    free(f);
}
