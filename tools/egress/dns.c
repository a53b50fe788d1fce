/* sandbox-egress: the resolver a filtered sandbox reaches (egressd.h).
 * Allowed names are asked of the upstream under an id of ours; every other
 * name is answered NXDOMAIN here, so a query never carries data past the
 * worker. The filter's own lookups (is this address the name's?) go the same
 * way. */
#include "egressd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "netaddr.h"

typedef struct egd_resolve {
    egd_resolve_cb cb;
    void *ud;
    dnsmsg_addr_t addrs[EGD_CACHE_ADDRS];
    int n, waiting;
} egd_resolve_t;

typedef struct egd_pending {
    uint16_t id, client_id;
    struct sockaddr_storage client;   /* a sandbox's question: who asked */
    socklen_t client_len;
    egd_addr_t sbx;                   /* its sandbox (looked up again: it may be gone) */
    egd_resolve_t *resolve;           /* the filter's own question */
    char name[EGRESS_DOMAIN_MAX + 1];
    uint16_t qtype;
    uint8_t question[EGRESS_DOMAIN_MAX + 2 + 4 + 8]; /* wire form, to match the answer's */
    size_t qlen;
    int64_t deadline;
} egd_pending_t;

static int pending_add(egd_t *d, egd_pending_t *p)
{
    if (d->npending >= EGD_PENDING_MAX)
        return -1;
    for (int tries = 0; tries < 64; tries++) {
        uint16_t id;
        if (getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id)
            return -1;
        if (!d->pending[id]) {
            p->id = id;
            d->pending[id] = p;
            d->npending++;
            return 0;
        }
    }
    return -1;
}

static void pending_free(egd_t *d, egd_pending_t *p)
{
    d->pending[p->id] = NULL;
    d->npending--;
    if (!p->resolve) {
        egd_sandbox_t *s = egd_sandbox_find(d, &p->sbx);
        if (s && s->pending)
            s->pending--;
    }
    free(p);
}

static void resolve_done_one(egd_t *d, egd_resolve_t *r)
{
    if (--r->waiting > 0)
        return;
    (void)d; /* each answer went into the cache as it came */
    r->cb(r->ud, r->addrs, r->n);
    free(r);
}

/* Sends p's question (with p's id) upstream. */
static int send_upstream(egd_t *d, egd_pending_t *p, const uint8_t *q, size_t n)
{
    uint8_t buf[DNSMSG_UDP_MAX];
    if (n > sizeof buf)
        return -1;
    memcpy(buf, q, n);
    buf[0] = (uint8_t)(p->id >> 8), buf[1] = (uint8_t)p->id;
    return send(d->up_fd, buf, n, 0) == (ssize_t)n ? 0 : -1;
}

static void reply_client(egd_t *d, const struct sockaddr_storage *to, socklen_t tolen, const uint8_t *p, size_t n)
{
    (void)sendto(d->dns_fd, p, n, 0, (const struct sockaddr *)to, tolen);
}

static void on_query(egd_t *d, const uint8_t *p, size_t n, const struct sockaddr_storage *from, socklen_t fromlen)
{
    egd_addr_t src;
    if (!egd_addr_from_sa((const struct sockaddr *)from, &src))
        return;
    egd_sandbox_t *s = egd_sandbox_find(d, &src);
    if (!s)
        return; /* not a sandbox of ours: no answer at all */
    dnsmsg_query_t q;
    char why[160];
    uint8_t out[DNSMSG_UDP_MAX];
    if (dnsmsg_query_parse(p, n, &q, why, sizeof why) < 0) {
        s->n.dns_refused++;
        egd_record(d, s, "dns", "", NULL, 0, false, why, 0, 0);
        return;
    }
    char rule[200] = "";
    bool ok = q.qclass == 1 && q.name[0] && egd_decide(s, q.name, rule, sizeof rule);
    if (!ok) {
        size_t rn = dnsmsg_reply(p, q.question_end, DNSMSG_RCODE_NXDOMAIN, out, sizeof out);
        if (rn)
            reply_client(d, from, fromlen, out, rn);
        s->n.dns_refused++;
        egd_record(d, s, "dns", q.name, NULL, q.qtype, false,
                   q.qclass != 1 ? "not class IN" : !q.name[0] ? "the root" : rule, 0, 0);
        return;
    }
    egd_pending_t *pd = calloc(1, sizeof *pd);
    if (!pd || s->pending >= EGD_PENDING_PER_SBX || q.question_end - 12 > sizeof pd->question ||
        pending_add(d, pd) < 0) {
        free(pd);
        size_t rn = dnsmsg_reply(p, q.question_end, DNSMSG_RCODE_SERVFAIL, out, sizeof out);
        if (rn)
            reply_client(d, from, fromlen, out, rn);
        return;
    }
    s->pending++;
    pd->client_id = q.id;
    pd->client = *from;
    pd->client_len = fromlen;
    pd->sbx = src;
    snprintf(pd->name, sizeof pd->name, "%s", q.name);
    pd->qtype = q.qtype;
    pd->qlen = q.question_end - 12;
    memcpy(pd->question, p + 12, pd->qlen);
    pd->deadline = time_mono_ms() + EGD_DNS_TIMEOUT_MS;
    if (send_upstream(d, pd, p, n) < 0) {
        size_t rn = dnsmsg_reply(p, q.question_end, DNSMSG_RCODE_SERVFAIL, out, sizeof out);
        if (rn)
            reply_client(d, from, fromlen, out, rn);
        pending_free(d, pd);
        return;
    }
    s->n.dns_allowed++;
    egd_record(d, s, "dns", q.name, NULL, q.qtype, true, rule, 0, 0);
}

static void on_dns(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    egd_t *d = arg;
    for (int i = 0; i < 64; i++) {
        uint8_t buf[DNSMSG_UDP_MAX + 1];
        struct sockaddr_storage from;
        socklen_t fl = sizeof from;
        ssize_t n = recvfrom(fd, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
        if (n < 0)
            return;
        if ((size_t)n <= DNSMSG_UDP_MAX)
            on_query(d, buf, (size_t)n, &from, fl);
    }
}

static void on_upstream(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    egd_t *d = arg;
    for (int i = 0; i < 64; i++) {
        uint8_t buf[4096];
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n < 0)
            return;
        if (n < 12)
            continue;
        egd_pending_t *p = d->pending[(uint16_t)(buf[0] << 8 | buf[1])];
        /* the answer to our question, not a stray datagram */
        if (!p || (size_t)n < 12 + p->qlen || !(buf[2] & 0x80) || buf[4] != 0 || buf[5] != 1 ||
            memcmp(buf + 12, p->question, p->qlen) != 0)
            continue;
        dnsmsg_addr_t a[EGD_CACHE_ADDRS];
        unsigned rcode = 0;
        int na = dnsmsg_answer_addrs(buf, (size_t)n, a, EGD_CACHE_ADDRS, &rcode);
        if (na > 0)
            egd_cache_add(d, p->name, a, na);
        if (p->resolve) {
            egd_resolve_t *r = p->resolve;
            for (int k = 0; k < na && r->n < EGD_CACHE_ADDRS; k++)
                r->addrs[r->n++] = a[k];
            pending_free(d, p);
            resolve_done_one(d, r);
            continue;
        }
        buf[0] = (uint8_t)(p->client_id >> 8), buf[1] = (uint8_t)p->client_id;
        /* never more than a sandbox's UDP answer may be: cut to the header and question, TC set */
        size_t len = (size_t)n;
        if (len > DNSMSG_UDP_MAX) {
            len = 12 + p->qlen;
            buf[2] |= 0x02;
            memset(buf + 6, 0, 6);
        }
        reply_client(d, &p->client, p->client_len, buf, len);
        pending_free(d, p);
    }
}

static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    egd_t *d = arg;
    int64_t now = time_mono_ms();
    for (unsigned id = 0; id < 65536 && d->npending; id++) {
        egd_pending_t *p = d->pending[id];
        if (!p || p->deadline > now)
            continue;
        if (p->resolve) {
            egd_resolve_t *r = p->resolve;
            pending_free(d, p);
            resolve_done_one(d, r);
            continue;
        }
        uint8_t out[12 + sizeof p->question];
        memset(out, 0, 12);
        out[0] = (uint8_t)(p->client_id >> 8), out[1] = (uint8_t)p->client_id;
        out[2] = 0x81, out[3] = 0x80 | DNSMSG_RCODE_SERVFAIL, out[5] = 1;
        memcpy(out + 12, p->question, p->qlen);
        reply_client(d, &p->client, p->client_len, out, 12 + p->qlen);
        pending_free(d, p);
    }
}

int egd_resolve(egd_t *d, const char *name, egd_resolve_cb cb, void *ud)
{
    egd_resolve_t *r = calloc(1, sizeof *r);
    if (!r)
        return -1;
    r->cb = cb;
    r->ud = ud;
    static const uint16_t types[2] = { DNSMSG_TYPE_A, DNSMSG_TYPE_AAAA };
    for (int i = 0; i < 2; i++) {
        uint8_t q[DNSMSG_UDP_MAX];
        size_t n = dnsmsg_query_build(0, name, types[i], q, sizeof q);
        egd_pending_t *p = n ? calloc(1, sizeof *p) : NULL;
        if (!p || n - 12 > sizeof p->question || pending_add(d, p) < 0) {
            free(p);
            continue;
        }
        p->resolve = r;
        snprintf(p->name, sizeof p->name, "%s", name);
        p->qtype = types[i];
        p->qlen = n - 12;
        memcpy(p->question, q + 12, p->qlen);
        p->deadline = time_mono_ms() + EGD_DNS_TIMEOUT_MS;
        if (send_upstream(d, p, q, n) < 0) {
            pending_free(d, p);
            continue;
        }
        r->waiting++;
    }
    if (r->waiting == 0) {
        free(r);
        return -1;
    }
    return 0;
}

static int udp_socket(const char *hostport, bool bind_it, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (netaddr_resolve_bind(hostport, &ss, &len, err, errlen) != 0) {
        if (!err[0])
            snprintf(err, errlen, "%s is not HOST:PORT", hostport);
        return -1;
    }
    int fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || (bind_it ? bind(fd, (struct sockaddr *)&ss, len) : connect(fd, (struct sockaddr *)&ss, len)) != 0) {
        snprintf(err, errlen, "%s %s: %s", bind_it ? "bind" : "connect", hostport, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

int egd_dns_start(egd_t *d, const char *listen, const char *upstream, char *err, size_t errlen)
{
    d->pending = calloc(65536, sizeof *d->pending);
    if (!d->pending)
        return -1;
    if ((d->dns_fd = udp_socket(listen, true, err, errlen)) < 0 ||
        (d->up_fd = udp_socket(upstream, false, err, errlen)) < 0)
        return -1;
    d->dns_ev = event_new(d->base, d->dns_fd, EV_READ | EV_PERSIST, on_dns, d);
    d->up_ev = event_new(d->base, d->up_fd, EV_READ | EV_PERSIST, on_upstream, d);
    d->sweep_ev = event_new(d->base, -1, EV_PERSIST, on_sweep, d);
    struct timeval tick = { 0, 250 * 1000 };
    if (!d->dns_ev || !d->up_ev || !d->sweep_ev || event_add(d->dns_ev, NULL) < 0 || event_add(d->up_ev, NULL) < 0 ||
        event_add(d->sweep_ev, &tick) < 0) {
        snprintf(err, errlen, "event setup failed");
        return -1;
    }
    return 0;
}

void egd_dns_stop(egd_t *d)
{
    for (unsigned id = 0; d->pending && id < 65536; id++) {
        egd_pending_t *p = d->pending[id];
        if (!p)
            continue;
        if (p->resolve && --p->resolve->waiting == 0)
            free(p->resolve); /* its connection goes with the proxy */
        d->pending[id] = NULL;
        free(p);
    }
    d->npending = 0;
    free(d->pending);
    d->pending = NULL;
    if (d->dns_ev)
        event_free(d->dns_ev);
    if (d->up_ev)
        event_free(d->up_ev);
    if (d->sweep_ev)
        event_free(d->sweep_ev);
    if (d->dns_fd >= 0)
        close(d->dns_fd);
    if (d->up_fd >= 0)
        close(d->up_fd);
}
