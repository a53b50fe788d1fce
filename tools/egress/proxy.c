/* sandbox-egress: every TCP connection of a filtered sandbox (egressd.h).
 * Its first bytes name a host (TLS SNI or HTTP Host); the rules decide;
 * the original address must be one the upstream gives for that name (else
 * "fronting": a name the rules allow carried to another address) and not
 * the host's neighbourhood; then the filter connects there itself and
 * relays, with bounded buffers. */
#include "egressd.h"

#include <errno.h>
#include <stdarg.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/crypto.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "egress_peek.h"
#include "netaddr.h"

/* <linux/netfilter_ipv4.h> and <linux/netfilter_ipv6/ip6_tables.h>, which
 * want the system's limits.h (common/limits.h is first on the path) */
#ifndef SO_ORIGINAL_DST
#define SO_ORIGINAL_DST 80
#endif
#ifndef IP6T_SO_ORIGINAL_DST
#define IP6T_SO_ORIGINAL_DST 80
#endif

typedef struct egd_conn {
    egd_t *d;
    struct egd_conn *next, *prev;
    egd_addr_t src;                    /* the sandbox's address */
    struct sockaddr_storage dst;       /* where it meant to go */
    socklen_t dstlen;
    egd_addr_t dst_addr;
    unsigned port;
    struct bufferevent *in, *out;      /* the sandbox's side, ours to the destination */
    char name[EGRESS_DOMAIN_MAX + 1];
    char rule[200];
    bool resolving, dead, relaying;
    bool intercept, heading;           /* a secret-bound host: TLS ends here; reading its request head */
    bool in_eof, out_eof, in_shut, out_shut; /* a side ended; its peer was shut down for writing */
    uint64_t bytes_out, bytes_in;
    /* until it relays: naming its host, then connecting, within this (a
     * timer of its own: libevent 2.1 keeps a bufferevent's read timeout
     * armed after it is cleared while reading is disabled) */
    struct event *deadline;
} egd_conn_t;

static egd_sandbox_t *conn_sandbox(egd_conn_t *c) { return egd_sandbox_find(c->d, &c->src); }

static void conn_unlink(egd_conn_t *c)
{
    egd_t *d = c->d;
    if (c->prev)
        c->prev->next = c->next;
    else
        d->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    d->nconns--;
    egd_sandbox_t *s = conn_sandbox(c);
    if (s && s->conns)
        s->conns--;
}

/* Ends c; a verdict record for a relayed connection with its bytes. */
static void conn_free(egd_conn_t *c)
{
    if (c->relaying) {
        egd_sandbox_t *s = conn_sandbox(c);
        char a[48];
        egd_addr_format(&c->dst_addr, a, sizeof a);
        if (s) {
            s->n.bytes_out += c->bytes_out;
            s->n.bytes_in += c->bytes_in;
        }
        egd_record(c->d, s, "tcp", c->name, a, c->port, true, c->rule, c->bytes_out, c->bytes_in);
    }
    if (c->deadline)
        event_free(c->deadline);
    if (c->in)
        bufferevent_free(c->in);
    if (c->out)
        bufferevent_free(c->out);
    conn_unlink(c);
    free(c);
}

/* Refuses c: the sandbox sees its connection reset. */
static void refuse(egd_conn_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void refuse(egd_conn_t *c, const char *fmt, ...)
{
    char why[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    egd_sandbox_t *s = conn_sandbox(c);
    if (s)
        s->n.tcp_refused++;
    char a[48];
    egd_addr_format(&c->dst_addr, a, sizeof a);
    egd_record(c->d, s, "tcp", c->name, a, c->port, false, why, 0, 0);
    if (c->in) { /* a reset, not a clean end: the client knows it was refused */
        evutil_socket_t fd = bufferevent_getfd(c->in);
        struct linger lg = { 1, 0 };
        if (fd >= 0)
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    c->relaying = false;
    if (c->resolving)
        c->dead = true; /* freed when its lookup answers */
    else
        conn_free(c);
}

/* ---- relay ----
 * Bytes go across as they come; a side whose peer has EGD_RELAY_HIGH
 * queued stops being read until that drained. A side's end is passed on
 * as a shutdown of the other once what it sent is written; the connection
 * ends when both ended and everything is written, or on an error. */

static struct bufferevent *peer_of(egd_conn_t *c, struct bufferevent *bev) { return bev == c->in ? c->out : c->in; }
static bool *eof_of(egd_conn_t *c, struct bufferevent *bev) { return bev == c->in ? &c->in_eof : &c->out_eof; }

static void relay_read(struct bufferevent *bev, void *arg)
{
    egd_conn_t *c = arg;
    struct bufferevent *peer = peer_of(c, bev);
    struct evbuffer *src = bufferevent_get_input(bev);
    size_t n = evbuffer_get_length(src);
    if (!peer || n == 0) {
        evbuffer_drain(src, n);
        return;
    }
    if (bev == c->in)
        c->bytes_out += n;
    else
        c->bytes_in += n;
    evbuffer_add_buffer(bufferevent_get_output(peer), src);
    if (evbuffer_get_length(bufferevent_get_output(peer)) >= EGD_RELAY_HIGH)
        bufferevent_disable(bev, EV_READ); /* the peer is slow */
}

/* bev's output is empty (its write callback), or something ended. */
static void relay_write(struct bufferevent *bev, void *arg)
{
    egd_conn_t *c = arg;
    struct bufferevent *peer = peer_of(c, bev);
    bool fed_eof = peer ? *eof_of(c, peer) : true;
    if (evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
        if (peer && !fed_eof)
            bufferevent_enable(peer, EV_READ);
        if (fed_eof) {
            bool *shut = bev == c->in ? &c->in_shut : &c->out_shut;
            if (!*shut) {
                *shut = true;
                SSL *ssl = bufferevent_openssl_get_ssl(bev);
                if (ssl)
                    SSL_shutdown(ssl); /* close_notify; the TCP end follows with the connection's */
                else
                    shutdown(bufferevent_getfd(bev), SHUT_WR);
            }
        }
    }
    if (c->in_eof && c->out_eof && c->in_shut && c->out_shut)
        conn_free(c);
}

static void relay_event(struct bufferevent *bev, short what, void *arg)
{
    egd_conn_t *c = arg;
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)))
        return;
    relay_read(bev, c); /* what came before the end */
    *eof_of(c, bev) = true;
    bufferevent_disable(bev, EV_READ);
    if (what & (BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)) {
        /* (a reset, say): nothing more goes to it either; the peer still
         * gets what this side sent before it broke */
        bool *shut = bev == c->in ? &c->in_shut : &c->out_shut;
        *shut = true;
        bufferevent_disable(bev, EV_WRITE);
        evbuffer_drain(bufferevent_get_output(bev), evbuffer_get_length(bufferevent_get_output(bev)));
        struct bufferevent *peer = peer_of(c, bev);
        if (peer) { /* what the peer sends has nowhere to go */
            *eof_of(c, peer) = true;
            bufferevent_disable(peer, EV_READ);
        }
    }
    struct bufferevent *peer = peer_of(c, bev);
    if (peer)
        relay_write(peer, c); /* frees c when everything ended */
    else
        conn_free(c);
}

/* Both sides are ready: bytes go across from now on. */
static void begin_relay(egd_conn_t *c)
{
    c->relaying = true;
    event_del(c->deadline);
    bufferevent_setcb(c->out, relay_read, relay_write, relay_event, c);
    bufferevent_setcb(c->in, relay_read, relay_write, relay_event, c);
    bufferevent_setwatermark(c->in, EV_READ, 0, 0);
    bufferevent_enable(c->out, EV_READ | EV_WRITE);
    bufferevent_enable(c->in, EV_READ | EV_WRITE);
    relay_read(c->in, c); /* the bytes that named the host (or followed the request head) */
}

/* ---- secrets at egress (tls.c) ----
 * The sandbox's TLS ends here with a certificate of its own CA; its first
 * request's head gets the secrets' headers (its Host must be the server
 * name) and goes out over the filter's own TLS to the host. */

static void head_event(struct bufferevent *bev, short what, void *arg)
{
    egd_conn_t *c = arg;
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)))
        return;
    if (bev == c->out)
        refuse(c, "%s closed before the request", c->name);
    else if ((what & BEV_EVENT_ERROR) && bufferevent_get_openssl_error(bev))
        refuse(c, "the sandbox's TLS with the filter for %s failed (does it trust its CA?)", c->name);
    else
        refuse(c, "the client closed before its request");
}

/* What bev has read so far, at most EGRESS_PEEK_MAX bytes, contiguous. */
static const unsigned char *peek_bytes(struct bufferevent *bev, size_t *ret_n)
{
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t n = evbuffer_get_length(in);
    *ret_n = n > EGRESS_PEEK_MAX ? EGRESS_PEEK_MAX : n;
    return evbuffer_pullup(in, (ev_ssize_t)*ret_n);
}

static void head_read(struct bufferevent *bev, void *arg)
{
    egd_conn_t *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t n;
    const unsigned char *p = peek_bytes(bev, &n);
    egd_sandbox_t *s = conn_sandbox(c);
    egress_header_t h[EGD_SECRETS_MAX];
    size_t nh = s && s->tls ? egd_tls_headers(s->tls, c->name, h, EGD_SECRETS_MAX) : 0;
    if (nh == 0) {
        refuse(c, "the secrets for %s are gone", c->name);
        return;
    }
    size_t cap = EGRESS_PEEK_MAX + 256, head = 0, olen = 0;
    for (size_t i = 0; i < nh; i++)
        cap += strlen(h[i].name) + strlen(h[i].value) + 4;
    char *out = malloc(cap), why[200];
    if (!out) {
        refuse(c, "out of memory");
        return;
    }
    egress_peek_t k = egress_http_inject(p, n, c->name, h, nh, out, cap, &head, &olen, why, sizeof why);
    if (k == EGRESS_PEEK_HTTP) {
        evbuffer_drain(in, head);
        bufferevent_write(c->out, out, olen);
        c->bytes_out += olen;
        size_t rl = strlen(c->rule);
        snprintf(c->rule + rl, sizeof c->rule - rl, " (+ %s)", h[0].name);
    }
    OPENSSL_cleanse(out, cap);
    free(out);
    if (k == EGRESS_PEEK_MORE)
        return;
    if (k == EGRESS_PEEK_BAD) {
        refuse(c, "%s", why);
        return;
    }
    c->heading = false;
    begin_relay(c);
}

static void start_intercept(egd_conn_t *c)
{
    egd_sandbox_t *s = conn_sandbox(c);
    SSL *srv = s && s->tls ? egd_tls_server(s->tls, c->name) : NULL;
    if (!srv) {
        refuse(c, "cannot make a certificate for %s", c->name);
        return;
    }
    struct bufferevent *under = c->in;
    bufferevent_setwatermark(under, EV_READ, 0, 0);
    bufferevent_enable(under, EV_READ | EV_WRITE);
    c->in = bufferevent_openssl_filter_new(c->d->base, under, srv, BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
    if (!c->in) {
        c->in = under;
        SSL_free(srv);
        refuse(c, "out of memory");
        return;
    }
    c->heading = true;
    struct timeval tv = { c->d->name_timeout_s, 0 };
    event_add(c->deadline, &tv);
    bufferevent_setcb(c->out, NULL, NULL, head_event, c);
    bufferevent_disable(c->out, EV_READ);
    bufferevent_setcb(c->in, head_read, NULL, head_event, c);
    bufferevent_enable(c->in, EV_READ | EV_WRITE);
    /* the ClientHello is read already: the handshake starts on it now */
    bufferevent_trigger(under, EV_READ, BEV_TRIG_IGNORE_WATERMARKS);
}

static void out_connected(struct bufferevent *bev, short what, void *arg)
{
    egd_conn_t *c = arg;
    if (!(what & BEV_EVENT_CONNECTED)) {
        char a[48];
        egd_addr_format(&c->dst_addr, a, sizeof a);
        SSL *ssl = c->intercept ? bufferevent_openssl_get_ssl(bev) : NULL;
        long vr = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
        if (vr != X509_V_OK)
            refuse(c, "the certificate of %s does not verify: %s", c->name, X509_verify_cert_error_string(vr));
        else
            refuse(c, "cannot connect to %s:%u: %s", a, c->port,
                   what & BEV_EVENT_TIMEOUT ? "timed out"
                   : ssl && bufferevent_get_openssl_error(bev) ? "the TLS handshake failed"
                   : evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        return;
    }
    egd_sandbox_t *s = conn_sandbox(c);
    if (s)
        s->n.tcp_allowed++;
    if (c->intercept)
        start_intercept(c);
    else
        begin_relay(c);
}

static void connect_out(egd_conn_t *c)
{
    if (c->intercept) { /* TLS of the filter's own to the host, verified */
        SSL *ssl = egd_tls_client(c->name);
        c->out = ssl ? bufferevent_openssl_socket_new(c->d->base, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
                                                      BEV_OPT_CLOSE_ON_FREE)
                     : NULL;
        if (ssl && !c->out)
            SSL_free(ssl);
    } else {
        c->out = bufferevent_socket_new(c->d->base, -1, BEV_OPT_CLOSE_ON_FREE);
    }
    if (!c->out) {
        refuse(c, "out of memory");
        return;
    }
    struct timeval tv = { EGD_CONNECT_TIMEOUT_S, 0 };
    event_add(c->deadline, &tv); /* now the connect's */
    bufferevent_setcb(c->out, NULL, NULL, out_connected, c);
    if (bufferevent_socket_connect(c->out, (struct sockaddr *)&c->dst, (int)c->dstlen) < 0) {
        bufferevent_free(c->out);
        c->out = NULL;
        refuse(c, "cannot connect");
    }
}

/* ---- the verdict ---- */

static void resolved(void *ud, const dnsmsg_addr_t *addrs, int n)
{
    egd_conn_t *c = ud;
    c->resolving = false;
    if (c->dead) {
        conn_free(c);
        return;
    }
    for (int i = 0; i < n; i++) {
        egd_addr_t a = { .family = addrs[i].family };
        memcpy(a.b, addrs[i].addr, 16);
        if (egd_addr_eq(&a, &c->dst_addr)) {
            connect_out(c);
            return;
        }
    }
    char a[48];
    egd_addr_format(&c->dst_addr, a, sizeof a);
    if (n == 0)
        refuse(c, "%s does not resolve (or the upstream did not answer)", c->name);
    else
        refuse(c, "%s is not an address of %s (%d address(es) known)", a, c->name, n);
}

static void peek_read(struct bufferevent *bev, void *arg)
{
    egd_conn_t *c = arg;
    size_t n;
    const unsigned char *p = peek_bytes(bev, &n);
    char why[160];
    egress_peek_t k = egress_peek(p, n, c->name, why, sizeof why);
    if (k == EGRESS_PEEK_MORE)
        return;
    bufferevent_disable(bev, EV_READ); /* nothing more until the verdict */
    if (k == EGRESS_PEEK_BAD) {
        refuse(c, "%s", why);
        return;
    }
    egd_sandbox_t *s = conn_sandbox(c);
    if (!s) {
        refuse(c, "the sandbox is gone");
        return;
    }
    if (!egd_decide(s, c->name, c->rule, sizeof c->rule)) {
        refuse(c, "%s", c->rule);
        return;
    }
    const char *blocked = egd_addr_blocked(c->d, s, &c->dst_addr);
    if (blocked) {
        char a[48];
        egd_addr_format(&c->dst_addr, a, sizeof a);
        refuse(c, "%s is %s", a, blocked);
        return;
    }
    if (k == EGRESS_PEEK_TLS && s->tls) {
        egress_header_t h[EGD_SECRETS_MAX];
        c->intercept = egd_tls_headers(s->tls, c->name, h, EGD_SECRETS_MAX) > 0;
    }
    if (egd_cache_has(c->d, c->name, &c->dst_addr)) {
        connect_out(c);
        return;
    }
    c->resolving = true;
    if (egd_resolve(c->d, c->name, resolved, c) < 0) {
        c->resolving = false;
        refuse(c, "cannot ask the upstream resolver about %s", c->name);
    }
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    egd_conn_t *c = arg;
    if (c->resolving)
        return; /* its lookup answers within EGD_DNS_TIMEOUT_MS */
    if (c->heading)
        refuse(c, "no HTTP request within %d s of the TLS handshake for %s", c->d->name_timeout_s, c->name);
    else if (c->out)
        refuse(c, "cannot connect: timed out after %d s", EGD_CONNECT_TIMEOUT_S);
    else
        refuse(c, "no TLS ClientHello or HTTP request within %d s", c->d->name_timeout_s);
}

static void peek_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev, (void)what; /* an end or an error: no name will come */
    egd_conn_t *c = arg;
    if (c->resolving) { /* the client left while its name was looked up */
        bufferevent_free(c->in);
        c->in = NULL;
        c->dead = true;
        return;
    }
    refuse(c, "the client closed before naming a host");
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    (void)l, (void)salen;
    egd_t *d = arg;
    egd_addr_t src;
    egd_sandbox_t *s = egd_addr_from_sa(sa, &src) ? egd_sandbox_find(d, &src) : NULL;
    if (!s || d->nconns >= EGD_CONNS_MAX || s->conns >= EGD_CONNS_PER_SBX) {
        if (s) {
            s->n.tcp_refused++;
            egd_record(d, s, "tcp", "", NULL, 0, false, "too many connections", 0, 0);
        }
        evutil_closesocket(fd);
        return;
    }
    egd_conn_t *c = calloc(1, sizeof *c);
    if (!c) {
        evutil_closesocket(fd);
        return;
    }
    c->d = d;
    c->src = src;
    c->next = d->conns;
    if (d->conns)
        d->conns->prev = c;
    d->conns = c;
    d->nconns++;
    s->conns++;
    /* where it was going before the redirect */
    c->dstlen = sizeof c->dst;
    int r = sa->sa_family == AF_INET6 ? getsockopt(fd, SOL_IPV6, IP6T_SO_ORIGINAL_DST, &c->dst, &c->dstlen)
                                      : getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &c->dst, &c->dstlen);
    c->in = bufferevent_socket_new(d->base, fd, BEV_OPT_CLOSE_ON_FREE);
    c->deadline = evtimer_new(d->base, on_deadline, c);
    if (!c->in || !c->deadline) {
        if (!c->in)
            evutil_closesocket(fd);
        refuse(c, "out of memory");
        return;
    }
    if (r != 0 || !egd_addr_from_sa((struct sockaddr *)&c->dst, &c->dst_addr)) {
        refuse(c, "not a redirected connection (no original destination)");
        return;
    }
    c->port = c->dst.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&c->dst)->sin6_port)
                                           : ntohs(((struct sockaddr_in *)&c->dst)->sin_port);
    /* an address the tenant's egress_allow lists is reached as an address,
     * as on the open network (no name needed) */
    for (size_t i = 0; i < s->ncidrs; i++) {
        if (s->cidrs[i].net.family != c->dst_addr.family || !egd_in_prefix(&c->dst_addr, s->cidrs[i].net.b,
                                                                           s->cidrs[i].prefix))
            continue;
        char net[48];
        egd_addr_format(&s->cidrs[i].net, net, sizeof net);
        snprintf(c->rule, sizeof c->rule, "allow egress_allow %s/%u", net, s->cidrs[i].prefix);
        connect_out(c);
        return;
    }
    struct timeval tv = { d->name_timeout_s, 0 };
    event_add(c->deadline, &tv);
    bufferevent_setwatermark(c->in, EV_READ, 0, EGRESS_PEEK_MAX);
    bufferevent_setcb(c->in, peek_read, NULL, peek_event, c);
    bufferevent_enable(c->in, EV_READ);
}

unsigned egd_proxy_recheck(egd_t *d, egd_sandbox_t *s, bool all)
{
    unsigned closed = 0;
    egd_conn_t *next;
    for (egd_conn_t *c = d->conns; c; c = next) {
        next = c->next;
        if (!egd_addr_eq(&c->src, &s->addr) || c->dead)
            continue;
        char rule[200] = "";
        if (!all && c->name[0] && egd_decide(s, c->name, rule, sizeof rule))
            continue;
        if (!all && !c->name[0]) {
            if (!c->out)
                continue; /* still naming its host: judged by the rules as they are then */
            bool listed = false; /* an address of egress_allow, reached without a name */
            for (size_t i = 0; i < s->ncidrs && !listed; i++)
                listed = s->cidrs[i].net.family == c->dst_addr.family &&
                         egd_in_prefix(&c->dst_addr, s->cidrs[i].net.b, s->cidrs[i].prefix);
            if (listed)
                continue;
            snprintf(rule, sizeof rule, "not in egress_allow");
        }
        /* the rules changed under it: it ends now */
        bool was = c->relaying;
        if (was) {
            s->n.bytes_out += c->bytes_out;
            s->n.bytes_in += c->bytes_in;
        }
        c->relaying = false;
        refuse(c, "%s (the rules changed)", all ? "the sandbox is gone" : rule);
        closed++;
    }
    return closed;
}

int egd_proxy_start(egd_t *d, const char *listen, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (netaddr_resolve_bind(listen, &ss, &len, err, errlen) != 0)
        return -1;
    d->tcp = evconnlistener_new_bind(d->base, on_accept, d, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE |
                                     LEV_OPT_CLOSE_ON_EXEC, 1024, (struct sockaddr *)&ss, (int)len);
    if (!d->tcp) {
        snprintf(err, errlen, "listen on %s: %s", listen, strerror(errno));
        return -1;
    }
    return 0;
}

void egd_proxy_stop(egd_t *d)
{
    while (d->conns) {
        d->conns->relaying = false;
        conn_free(d->conns);
    }
    if (d->tcp)
        evconnlistener_free(d->tcp);
}
